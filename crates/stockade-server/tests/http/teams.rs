//! Teams over HTTP: administrators make them and manage members, others see
//! their own; a sandbox shared with a team is seen and run by its members,
//! and by nobody else, from their next request on.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::*;

/// An app with a team `platform` of which Alice and Bob are members, and
/// Carol who is not.
struct Team {
    app: App,
    id: String,
    alice: String,
    bob: String,
    bob_id: String,
    carol: String,
}

async fn team() -> Team {
    let (app, (alice_id, alice)) = App::with_account("alice").await;
    let (bob_id, bob) = app.account("bob").await;
    let carol = app.tenant("carol").await;
    let r = app
        .post("/api/v1/teams", &app.admin, json!({ "name": "platform" }))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["members"], json!([]));
    let id = r.body["id"].as_str().unwrap().to_owned();
    let team = Team {
        app,
        id,
        alice,
        bob,
        bob_id,
        carol,
    };
    for account in [&alice_id, &team.bob_id] {
        let r = team.join(account).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    team
}

impl Team {
    /// Asserts the team Bob reads lists these members, by name.
    async fn assert_members_as_bob(&self, expected: &[&str]) {
        let r = self
            .app
            .get(&format!("/api/v1/teams/{}", self.id), &self.bob)
            .await;
        assert_eq!(names(&r.body, "members"), expected);
    }

    fn members_path(&self) -> String {
        format!("/api/v1/teams/{}/members", self.id)
    }

    async fn join(&self, account: &str) -> Resp {
        self.app
            .post(
                &self.members_path(),
                &self.app.admin,
                json!({ "accountId": account }),
            )
            .await
    }

    async fn leave(&self, account: &str) -> Resp {
        self.app
            .delete(
                &format!("{}/{account}", self.members_path()),
                &self.app.admin,
            )
            .await
    }

    /// A sandbox of Alice's shared with the team.
    async fn shared(&self) -> String {
        let sb = self
            .app
            .create(&self.alice, json!({ "name": "shared", "teamId": self.id }))
            .await;
        assert_eq!(sb["teamId"], self.id.as_str());
        id_of(&sb)
    }
}

fn names(body: &Value, list: &str) -> Vec<String> {
    body[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} in {body}"))
        .iter()
        .map(|m| m["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn members_are_added_once_and_listed_by_name() {
    let t = team().await;
    let r = t.join(&t.bob_id).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(names(&r.body, "members"), ["alice", "bob"]);
    t.assert_members_as_bob(&["alice", "bob"]).await;
}

#[tokio::test]
async fn only_admins_create_teams_and_manage_members() {
    let t = team().await;
    t.app
        .post("/api/v1/teams", &t.alice, json!({ "name": "mine" }))
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    t.app
        .post(
            &t.members_path(),
            &t.alice,
            json!({ "accountId": t.bob_id }),
        )
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    t.app
        .delete(&format!("{}/{}", t.members_path(), t.bob_id), &t.alice)
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    t.assert_members_as_bob(&["alice", "bob"]).await;
}

#[tokio::test]
async fn team_names_are_validated_and_unique() {
    let t = team().await;
    t.app
        .post("/api/v1/teams", &t.app.admin, json!({ "name": "platform" }))
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
    for bad in [
        json!({ "name": "" }),
        json!({ "name": "a b" }),
        json!({ "name": 7 }),
    ] {
        t.app
            .post("/api/v1/teams", &t.app.admin, bad)
            .await
            .assert_invalid("name");
    }
    t.app
        .post(
            "/api/v1/teams",
            &t.app.admin,
            json!({ "name": "x", "members": [] }),
        )
        .await
        .assert_invalid("members");
}

#[tokio::test]
async fn unknown_and_malformed_teams_and_accounts() {
    let t = team().await;
    let r = t.join("abcdefghijklmnop").await;
    r.assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(r.message(), "Account not found");
    t.join("nope").await.assert_invalid("accountId");
    let r = t
        .app
        .post(
            "/api/v1/teams/abcdefghijklmnop/members",
            &t.app.admin,
            json!({ "accountId": t.bob_id }),
        )
        .await;
    r.assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(r.message(), "Team not found");
    t.leave("bad").await.assert_invalid("account_id");
}

#[tokio::test]
async fn admins_list_every_team_others_their_own() {
    let t = team().await;
    t.app
        .post("/api/v1/teams", &t.app.admin, json!({ "name": "data" }))
        .await;
    let r = t.app.get("/api/v1/teams", &t.app.admin).await;
    assert_eq!(names(&r.body, "teams"), ["platform", "data"]);
    let r = t.app.get("/api/v1/teams", &t.alice).await;
    assert_eq!(names(&r.body, "teams"), ["platform"]);
    let r = t.app.get("/api/v1/teams", &t.carol).await;
    assert_eq!(r.body["teams"], json!([]));
    t.app
        .get(&format!("/api/v1/teams/{}", t.id), &t.carol)
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    let me = t.app.get("/api/v1/me", &t.alice).await;
    assert_eq!(me.body["teamIds"], json!([t.id]));
}

#[tokio::test]
async fn only_members_may_share_a_sandbox_with_the_team() {
    let t = team().await;
    let r = t
        .app
        .try_create(&t.carol, json!({ "name": "x", "teamId": t.id }))
        .await;
    r.assert_invalid("teamId");
    assert_eq!(t.app.total(&t.carol, "").await, 0);
}

#[tokio::test]
async fn members_see_a_team_sandbox_in_lists_and_by_the_team_filter() {
    let t = team().await;
    let shared = t.shared().await;
    t.app.create(&t.alice, json!({ "name": "own" })).await;
    assert_eq!(t.app.names(&t.bob, "").await, ["shared"]);
    assert_eq!(
        t.app.names(&t.bob, &format!("team_id={}", t.id)).await,
        ["shared"]
    );
    assert_eq!(
        t.app.names(&t.alice, &format!("team_id={}", t.id)).await,
        ["shared"]
    );
    assert_eq!(t.app.total(&t.alice, "").await, 2);
    let r = t
        .app
        .get(&format!("/api/v1/sandbox/{shared}"), &t.bob)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(t.app.total(&t.carol, &format!("team_id={}", t.id)).await, 0);
}

#[tokio::test]
async fn a_members_own_sandbox_stays_private() {
    let t = team().await;
    let own = t.app.create_id(&t.alice, json!({ "name": "own" })).await;
    t.app
        .get(&format!("/api/v1/sandbox/{own}"), &t.bob)
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
}

#[tokio::test]
async fn members_stop_start_and_delete_a_team_sandbox_outsiders_cannot() {
    let t = team().await;
    let shared = t.shared().await;
    let path = format!("/api/v1/sandbox/{shared}");
    for (method, p) in [
        (Method::GET, path.clone()),
        (Method::POST, format!("{path}/stop?timeout=1")),
        (Method::PATCH, path.clone()),
        (Method::DELETE, path.clone()),
    ] {
        t.app
            .send(request(
                method,
                &p,
                Some(&t.carol),
                Some(json!({ "name": "taken" })),
            ))
            .await
            .assert_error(StatusCode::FORBIDDEN, "forbidden");
    }
    let r = t
        .app
        .post(&format!("{path}/stop?timeout=1"), &t.bob, json!({}))
        .await;
    assert_eq!(r.body["status"], "STOPPED", "{}", r.body);
    assert_eq!(t.app.get(&path, &t.alice).await.body["status"], "STOPPED");
    let r = t
        .app
        .post(&format!("{path}/start"), &t.bob, json!({}))
        .await;
    assert_eq!(r.body["status"], "RUNNING", "{}", r.body);
    let r = t.app.delete(&path, &t.bob).await;
    assert_eq!(r.body["status"], "TERMINATED", "{}", r.body);
    assert_eq!(
        t.app.get(&path, &t.alice).await.body["status"],
        "TERMINATED"
    );
}

#[tokio::test]
async fn leaving_the_team_takes_access_away_at_once_and_rejoining_restores_it() {
    let t = team().await;
    let shared = t.shared().await;
    let path = format!("/api/v1/sandbox/{shared}");
    let r = t.leave(&t.bob_id).await;
    assert_eq!(names(&r.body, "members"), ["alice"]);
    t.app
        .get(&path, &t.bob)
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(t.app.total(&t.bob, "").await, 0);
    assert_eq!(
        t.app.get("/api/v1/teams", &t.bob).await.body["teams"],
        json!([])
    );
    t.leave(&t.bob_id)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    t.join(&t.bob_id).await;
    assert_eq!(t.app.get(&path, &t.bob).await.status, StatusCode::OK);
}
