//! Accounts see only their own sandboxes; every verb on another
//! account's sandbox is 403; unknown ids are 404.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn another_accounts_sandbox_is_forbidden_for_every_verb() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice", "bob"]).await;
    let id = app
        .create_id(&alice, json!({ "name": "private", "labels": ["mine"] }))
        .await;

    // Bob sees nothing.
    let list = app.get("/api/v1/sandbox", &bob).await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.body["total"], 0);
    let list = app
        .get("/api/v1/sandbox?labels=mine&is_active=false", &bob)
        .await;
    assert_eq!(list.body["total"], 0);

    for (method, path) in [
        (Method::GET, format!("/api/v1/sandbox/{id}")),
        (Method::POST, format!("/api/v1/sandbox/{id}/start")),
        (Method::POST, format!("/api/v1/sandbox/{id}/stop?timeout=1")),
        (Method::DELETE, format!("/api/v1/sandbox/{id}")),
    ] {
        let r = app
            .call(method.clone(), &path, Some(&bob), Some(json!({})))
            .await;
        r.assert_status(StatusCode::FORBIDDEN, format!("{method} {path}"));
        assert_eq!(r.code(), "forbidden");
    }
    let r = app
        .call(
            Method::DELETE,
            "/api/v1/sandbox/bulk",
            Some(&bob),
            Some(json!({ "ids": [id] })),
        )
        .await;
    assert_eq!(r.body["results"][0]["deleted"], false);
    assert_eq!(r.body["results"][0]["error"]["code"], "forbidden");
    // Bulk delete by label only reaches Bob's own sandboxes.
    let r = app
        .call(
            Method::DELETE,
            "/api/v1/sandbox/bulk",
            Some(&bob),
            Some(json!({ "labels": ["mine"] })),
        )
        .await;
    assert_eq!(r.body["results"], json!([]));

    // Alice's sandbox is untouched.
    let r = app.get(&format!("/api/v1/sandbox/{id}"), &alice).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["status"], "RUNNING");
    assert!(container_exists(&id));

    // Names are per account: Bob may use the same name.
    app.create(&bob, json!({ "name": "private" })).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_and_malformed_ids() {
    let app = spawn_app().await;
    let t = &app.admin_token;
    let r = app.get("/api/v1/sandbox/abcdefghijkl", t).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["error"]["message"], "Sandbox not found");
    assert_eq!(r.code(), "not_found");
    // What could be a name is looked up as one.
    for unknown in ["short", "ABCDEFGHIJKL", "abcdefghijkl0"] {
        let r = app.get(&format!("/api/v1/sandbox/{unknown}"), t).await;
        r.assert_status(StatusCode::NOT_FOUND, unknown);
    }
    let long = "a".repeat(64);
    for bad in ["..%2f..%2fetc", "-dash", "a%20b", long.as_str()] {
        let r = app.get(&format!("/api/v1/sandbox/{bad}"), t).await;
        r.assert_status(StatusCode::BAD_REQUEST, bad);
        assert_eq!(r.error_fields(), vec!["sandbox_id"]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_are_reached_by_name_within_what_the_caller_sees() {
    let (app, [(alice_id, alice), (bob_id, bob)]) =
        spawn_with_account_ids(["alice-names", "bob-names"]).await;
    let mine = app.create_id(&alice, json!({ "name": "demo" })).await;
    let bobs = app.create_id(&bob, json!({ "name": "demo" })).await;
    // Every route that takes an id takes the name: details, exec, files.
    let r = app
        .get("/api/v1/sandbox/demo", &alice)
        .await
        .expect(StatusCode::OK);
    assert_eq!(r["id"], mine.as_str());
    let out = app
        .sandbox_post(&alice, "demo", "exec", json!({ "shell": "hostname" }))
        .await
        .expect(StatusCode::OK);
    assert_eq!(out["exitCode"], 0, "{out}");
    let r = app
        .get("/api/v1/sandbox/demo", &bob)
        .await
        .expect(StatusCode::OK);
    assert_eq!(r["id"], bobs.as_str(), "each account sees its own");
    // Another account's name is invisible: 404, not 403.
    app.create_id(&bob, json!({ "name": "bobs-only" })).await;
    let r = app.get("/api/v1/sandbox/bobs-only", &alice).await;
    r.assert_error(StatusCode::NOT_FOUND, "not_found");
    let r = app
        .sandbox_post(&alice, "bobs-only", "exec", json!({ "shell": "true" }))
        .await;
    r.assert_error(StatusCode::NOT_FOUND, "not_found");
    // A name two sandboxes share in a team the caller sees is ambiguous.
    let team = app.new_team("names-team").await;
    for account in [&alice_id, &bob_id] {
        let r = app.add_member(&team, account).await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }
    app.create_id(&alice, json!({ "name": "shared", "teamId": team }))
        .await;
    app.create_id(&bob, json!({ "name": "shared", "teamId": team }))
        .await;
    let r = app.get("/api/v1/sandbox/shared", &alice).await;
    r.assert_error(StatusCode::CONFLICT, "conflict");
    assert!(r.message().contains("use an id"), "{}", r.message());
    // A deleted sandbox's name is free: a new one answers to it.
    app.delete_sandbox(&alice, "demo", "")
        .await
        .expect(StatusCode::OK);
    app.get("/api/v1/sandbox/demo", &alice)
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test(flavor = "multi_thread")]
async fn authentication_and_admin_only_account_management() {
    let app = spawn_app().await;
    let r = app.call(Method::GET, "/api/v1/sandbox", None, None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = app.get("/api/v1/sandbox", "stk_not_a_real_token").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    let carol = app.new_account("carol").await;
    let me = app.get("/api/v1/me", &carol).await;
    assert_eq!(me.body["account"]["name"], "carol");
    assert_eq!(me.body["account"]["isAdmin"], false);

    // Only admins manage accounts; names are unique and not empty.
    for (token, name, status) in [
        (carol.as_str(), "mallory", StatusCode::FORBIDDEN),
        (app.admin_token.as_str(), "carol", StatusCode::CONFLICT),
        (app.admin_token.as_str(), "", StatusCode::BAD_REQUEST),
    ] {
        let r = app
            .post("/api/v1/accounts", token, json!({ "name": name }))
            .await;
        assert_eq!(r.status, status, "{name:?}");
        if status == StatusCode::BAD_REQUEST {
            assert_eq!(r.error_fields(), vec!["name"]);
        }
    }
    let r = app.get("/api/v1/accounts", &app.admin_token).await;
    let names = str_list(&r.body["accounts"], "name");
    assert!(names.contains(&"admin") && names.contains(&"carol"));
}
