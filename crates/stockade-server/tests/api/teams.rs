//! Teams: administrators manage them; a sandbox created with `teamId` is
//! seen and run by every member, outsiders get 403.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::*;

async fn account_id(app: &TestApp, token: &str) -> String {
    let me = app.get("/api/v1/me", token).await;
    me.body["account"]["id"].as_str().unwrap().to_owned()
}

fn member_names(team: &Value) -> Vec<&str> {
    str_list(&team["members"], "name")
}

fn team_names(list: &Value) -> Vec<&str> {
    str_list(&list["teams"], "name")
}

#[tokio::test(flavor = "multi_thread")]
async fn admins_manage_teams_and_members() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice", "bob"]).await;
    let admin = app.admin_token.clone();
    let alice_id = account_id(&app, &alice).await;
    let bob_id = account_id(&app, &bob).await;

    let r = app
        .post("/api/v1/teams", &admin, json!({ "name": "platform" }))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["name"], "platform");
    assert_eq!(r.body["members"], json!([]));
    let team = r.body["id"].as_str().unwrap().to_owned();
    app.post("/api/v1/teams", &admin, json!({ "name": "data" }))
        .await;

    // Names are validated and unique; only admins create teams.
    let r = app
        .post("/api/v1/teams", &admin, json!({ "name": "platform" }))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    for bad in [
        json!({ "name": "" }),
        json!({ "name": "a b" }),
        json!({ "name": 7 }),
    ] {
        let r = app.post("/api/v1/teams", &admin, bad.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(r.error_fields(), vec!["name"], "{bad}");
    }
    let r = app
        .post(
            "/api/v1/teams",
            &admin,
            json!({ "name": "x", "members": [] }),
        )
        .await;
    assert_eq!(r.error_fields(), vec!["members"]);
    let r = app
        .post("/api/v1/teams", &alice, json!({ "name": "mine" }))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // Members.
    let members = format!("/api/v1/teams/{team}/members");
    let r = app
        .post(&members, &admin, json!({ "accountId": alice_id }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(member_names(&r.body), ["alice"]);
    let r = app
        .post(&members, &admin, json!({ "accountId": bob_id }))
        .await;
    assert_eq!(member_names(&r.body), ["alice", "bob"]);
    // Twice is fine.
    let r = app
        .post(&members, &admin, json!({ "accountId": bob_id }))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(member_names(&r.body), ["alice", "bob"]);
    let r = app
        .post(&members, &alice, json!({ "accountId": alice_id }))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = app
        .post(&members, &admin, json!({ "accountId": "abcdefghijklmnop" }))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["error"]["message"], "Account not found");
    let r = app
        .post(&members, &admin, json!({ "accountId": "nope" }))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["accountId"]);
    let r = app.add_member("abcdefghijklmnop", &alice_id).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["error"]["message"], "Team not found");
    let r = app.add_member("..%2f", &alice_id).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["team_id"]);

    // Listing: admins see every team, others their own.
    let r = app.get("/api/v1/teams", &admin).await;
    assert_eq!(team_names(&r.body), ["platform", "data"]);
    let r = app.get("/api/v1/teams", &alice).await;
    assert_eq!(team_names(&r.body), ["platform"]);
    let carol = app.new_account("carol").await;
    let r = app.get("/api/v1/teams", &carol).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["teams"], json!([]));
    let r = app.get(&format!("/api/v1/teams/{team}"), &bob).await;
    assert_eq!(member_names(&r.body), ["alice", "bob"]);
    let r = app.get(&format!("/api/v1/teams/{team}"), &carol).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let me = app.get("/api/v1/me", &alice).await;
    assert_eq!(me.body["teamIds"], json!([team]));

    // Removing.
    let r = app.delete(&format!("{members}/{bob_id}"), &alice).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = app.delete(&format!("{members}/{bob_id}"), &admin).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(member_names(&r.body), ["alice"]);
    let r = app.delete(&format!("{members}/{bob_id}"), &admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = app.delete(&format!("{members}/bad"), &admin).await;
    assert_eq!(r.error_fields(), vec!["account_id"]);
    let r = app.get("/api/v1/teams", &bob).await;
    assert_eq!(r.body["teams"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn team_members_see_and_run_team_sandboxes_outsiders_get_403() {
    let (app, [alice, bob, carol]) = spawn_with_accounts(["alice", "bob", "carol"]).await;
    let admin = app.admin_token.clone();
    let team = app
        .post("/api/v1/teams", &admin, json!({ "name": "platform" }))
        .await;
    let team = team.body["id"].as_str().unwrap().to_owned();
    let members = format!("/api/v1/teams/{team}/members");
    for t in [&alice, &bob] {
        let id = account_id(&app, t).await;
        let r = app.add_member(&team, &id).await;
        assert_eq!(r.status, StatusCode::OK);
    }

    // Only members may share with the team.
    let r = app
        .try_create(&carol, json!({ "name": "x", "teamId": team }))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["teamId"]);

    let sb = app
        .create(&alice, json!({ "name": "shared", "teamId": team }))
        .await;
    assert_eq!(sb["teamId"], team.as_str());
    let id = sb["id"].as_str().unwrap();
    let own = app.create(&alice, json!({ "name": "own" })).await;
    let own_id = own["id"].as_str().unwrap();
    let path = format!("/api/v1/sandbox/{id}");

    // Bob sees it, in the list and by the team filter; not Alice's own one.
    let ids = |v: &Value| -> Vec<String> {
        v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let r = app.get("/api/v1/sandbox", &bob).await;
    assert_eq!(ids(&r.body), [id]);
    let r = app
        .get(&format!("/api/v1/sandbox?team_id={team}"), &bob)
        .await;
    assert_eq!(ids(&r.body), [id]);
    let r = app
        .get(&format!("/api/v1/sandbox?team_id={team}"), &alice)
        .await;
    assert_eq!(ids(&r.body), [id]);
    let r = app.get("/api/v1/sandbox", &alice).await;
    assert_eq!(ids(&r.body).len(), 2);
    let r = app.get(&path, &bob).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["name"], "shared");
    let r = app.get(&format!("/api/v1/sandbox/{own_id}"), &bob).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // Carol, outside the team, is refused every verb and lists nothing.
    let r = app.get("/api/v1/sandbox", &carol).await;
    assert_eq!(r.body["total"], 0);
    let r = app
        .get(&format!("/api/v1/sandbox?team_id={team}"), &carol)
        .await;
    assert_eq!(r.body["total"], 0);
    for (method, p) in [
        (Method::GET, path.clone()),
        (Method::POST, format!("{path}/start")),
        (Method::POST, format!("{path}/stop?timeout=1")),
        (Method::DELETE, path.clone()),
    ] {
        let r = app
            .call(method.clone(), &p, Some(&carol), Some(json!({})))
            .await;
        r.assert_status(StatusCode::FORBIDDEN, format!("{method} {p}"));
    }

    // Bob acts on it: stop, start; Alice, the owner, sees the result.
    let r = app
        .bodiless(Method::POST, &format!("{path}/stop?timeout=1"), &bob)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "STOPPED");
    assert_eq!(app.get(&path, &alice).await.body["status"], "STOPPED");
    let r = app
        .bodiless(Method::POST, &format!("{path}/start"), &bob)
        .await;
    assert_eq!(r.body["status"], "RUNNING");
    assert_eq!(app.get(&path, &alice).await.body["status"], "RUNNING");

    // Leaving the team takes the access away at once; coming back restores it.
    let bob_id = account_id(&app, &bob).await;
    app.delete(&format!("{members}/{bob_id}"), &admin).await;
    assert_eq!(app.get(&path, &bob).await.status, StatusCode::FORBIDDEN);
    assert_eq!(app.get("/api/v1/sandbox", &bob).await.body["total"], 0);
    app.post(&members, &admin, json!({ "accountId": bob_id }))
        .await;

    // Bob deletes it; the owner sees it terminated.
    let r = app.delete(&path, &bob).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "TERMINATED");
    assert!(!container_exists(id));
    let r = app.get(&path, &alice).await;
    assert_eq!(r.body["status"], "TERMINATED");
}
