//! `Idempotency-Key` on create: a retry with the same key and body returns
//! the first sandbox (marked `idempotent-replayed`), the same key with
//! another body is 422 `idempotency_key_reused`, keys belong to their
//! account, a failed first create leaves the key free, and bad keys are
//! 400s naming the header.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::*;

async fn create_with_key(app: &App, token: &str, key: &str, body: Value) -> Resp {
    let req = request(Method::POST, "/api/v1/sandbox", Some(token), Some(body));
    app.send(with_header(req, "idempotency-key", key)).await
}

/// [`create_with_key`] that must make (or replay) a sandbox: a 201.
async fn created_with_key(app: &App, token: &str, key: &str, body: Value) -> Resp {
    let r = create_with_key(app, token, key, body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r
}

fn replayed(r: &Resp) -> bool {
    r.headers
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

#[tokio::test]
async fn the_same_key_and_body_return_the_first_sandbox() {
    let app = App::new().await;
    let body = json!({ "name": "once", "labels": ["x"] });
    let first = created_with_key(&app, &app.admin, "key-1", body.clone()).await;
    assert!(!replayed(&first));
    let again = created_with_key(&app, &app.admin, "key-1", body).await;
    assert!(replayed(&again), "{:?}", again.headers);
    assert_eq!(again.id(), first.id());
    assert_eq!(app.total(&app.admin, "").await, 1);
    assert_eq!(app.rt.containers().len(), 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_a_conflict() {
    let app = App::new().await;
    created_with_key(&app, &app.admin, "key-1", json!({ "name": "a" })).await;
    let other = create_with_key(&app, &app.admin, "key-1", json!({ "name": "b" })).await;
    other.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");
    let other = create_with_key(
        &app,
        &app.admin,
        "key-1",
        json!({ "name": "a", "cpuCores": 2 }),
    )
    .await;
    other.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");
    assert_eq!(app.names(&app.admin, "").await, ["a"]);
}

#[tokio::test]
async fn different_keys_make_different_sandboxes() {
    let app = App::new().await;
    let a = created_with_key(&app, &app.admin, "key-a", json!({})).await;
    let b = created_with_key(&app, &app.admin, "key-b", json!({})).await;
    assert_ne!(a.id(), b.id());
    assert_eq!(app.total(&app.admin, "").await, 2);
}

#[tokio::test]
async fn keys_belong_to_their_account() {
    let app = App::new().await;
    let bob = app.tenant("bob").await;
    let body = json!({ "name": "same" });
    let mine = create_with_key(&app, &app.admin, "shared-key", body.clone()).await;
    let bobs = created_with_key(&app, &bob, "shared-key", body).await;
    assert!(!replayed(&bobs));
    assert_ne!(bobs.id(), mine.id());
    assert_eq!(
        bobs.body["accountId"],
        app.get("/api/v1/me", &bob).await.body["account"]["id"]
    );
}

#[tokio::test]
async fn the_key_may_come_in_the_body_as_prime_sends_it() {
    let app = App::new().await;
    let first = created_with_key(&app, &app.admin, "k", json!({ "name": "n" })).await;
    let again = app
        .try_create(&app.admin, json!({ "name": "n", "idempotency_key": "k" }))
        .await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    assert_eq!(again.id(), first.id());
    assert_eq!(app.total(&app.admin, "").await, 1);
}

#[tokio::test]
async fn a_header_and_a_body_key_that_differ_are_refused() {
    let app = App::new().await;
    let r = create_with_key(&app, &app.admin, "one", json!({ "idempotency_key": "two" })).await;
    r.assert_invalid("idempotency_key");
    assert_eq!(app.total(&app.admin, "").await, 0);
}

#[tokio::test]
async fn bad_keys_name_the_header() {
    let app = App::new().await;
    let long = "k".repeat(256);
    for key in ["", "has space", long.as_str()] {
        let r = create_with_key(&app, &app.admin, key, json!({})).await;
        r.assert_invalid("Idempotency-Key");
    }
    app.try_create(&app.admin, json!({ "idempotency_key": "" }))
        .await
        .assert_invalid("Idempotency-Key");
    assert_eq!(app.total(&app.admin, "").await, 0);
}

#[tokio::test]
async fn a_failed_first_create_leaves_the_key_free() {
    let app = App::new().await;
    app.rt.fail_next_create("the engine said no");
    let failed = create_with_key(&app, &app.admin, "retry-me", json!({ "name": "r" })).await;
    assert!(!failed.status.is_success(), "{}", failed.body);
    assert!(failed.body["error"]["code"].is_string(), "{}", failed.body);
    let retry = created_with_key(&app, &app.admin, "retry-me", json!({ "name": "r" })).await;
    assert!(!replayed(&retry));
    assert_eq!(retry.body["status"], "RUNNING");
}

#[tokio::test]
async fn without_a_key_a_repeated_create_makes_a_second_sandbox() {
    let app = App::new().await;
    app.create(&app.admin, json!({ "labels": ["twice"] })).await;
    app.create(&app.admin, json!({ "labels": ["twice"] })).await;
    assert_eq!(app.total(&app.admin, "labels=twice").await, 2);
}
