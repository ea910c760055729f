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
    for bad in ["short", "ABCDEFGHIJKL", "abcdefghijkl0", "..%2f..%2fetc"] {
        let r = app.get(&format!("/api/v1/sandbox/{bad}"), t).await;
        r.assert_status(StatusCode::BAD_REQUEST, bad);
        assert_eq!(r.error_fields(), vec!["sandbox_id"]);
    }
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
