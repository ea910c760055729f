//! `GET /api/v1/sandbox`: newest first, terminated sandboxes only when asked
//! for, each filter narrowing to what it names, paging with `has_next`, and
//! only the caller's sandboxes.

use serde_json::json;

use crate::support::*;

/// An app whose admin has `web` (labels dev, front), `api` (dev, back,
/// stopped) and `old` (dev, deleted), created in that order.
async fn three() -> App {
    let app = App::new().await;
    let t = app.admin.clone();
    app.create(&t, json!({ "name": "web", "labels": ["dev", "front"] }))
        .await;
    let api = app
        .create_id(&t, json!({ "name": "api", "labels": ["dev", "back"] }))
        .await;
    let old = app
        .create_id(&t, json!({ "name": "old", "labels": ["dev"] }))
        .await;
    let r = app
        .post(&format!("/api/v1/sandbox/{api}/stop"), &t, json!({}))
        .await;
    assert_eq!(r.body["status"], "STOPPED", "{}", r.body);
    let r = app.delete(&format!("/api/v1/sandbox/{old}"), &t).await;
    assert_eq!(r.body["status"], "TERMINATED", "{}", r.body);
    app
}

#[tokio::test]
async fn the_list_is_newest_first_without_terminated_sandboxes_by_default() {
    let app = three().await;
    assert_eq!(app.names(&app.admin, "").await, ["api", "web"]);
    let r = app.get("/api/v1/sandbox", &app.admin).await;
    assert_eq!(r.body["total"], 2);
    assert_eq!(r.body["page"], 1);
    assert_eq!(r.body["per_page"], 50);
    assert_eq!(r.body["has_next"], false);
}

#[tokio::test]
async fn status_filters_in_any_case_repeated_or_comma_separated() {
    let app = three().await;
    let t = &app.admin;
    assert_eq!(app.names(t, "status=RUNNING").await, ["web"]);
    assert_eq!(app.names(t, "status=stopped").await, ["api"]);
    assert_eq!(app.names(t, "status=running,stopped").await, ["api", "web"]);
    assert_eq!(
        app.names(t, "status=running&status=terminated").await,
        ["old", "web"]
    );
    assert!(app.names(t, "status=error").await.is_empty());
}

#[tokio::test]
async fn is_active_separates_terminated_sandboxes() {
    let app = three().await;
    assert_eq!(
        app.names(&app.admin, "is_active=true").await,
        ["api", "web"]
    );
    assert_eq!(app.names(&app.admin, "is_active=false").await, ["old"]);
}

#[tokio::test]
async fn labels_must_all_be_carried() {
    let app = three().await;
    let t = &app.admin;
    assert_eq!(app.names(t, "labels=dev").await, ["api", "web"]);
    assert_eq!(app.names(t, "labels=dev&is_active=false").await, ["old"]);
    assert_eq!(app.names(t, "labels=dev,front").await, ["web"]);
    assert_eq!(app.names(t, "labels=dev&labels=back").await, ["api"]);
    assert!(app.names(t, "labels=front,back").await.is_empty());
    assert!(app.names(t, "labels=nobody").await.is_empty());
}

#[tokio::test]
async fn name_is_an_exact_match() {
    let app = three().await;
    assert_eq!(app.names(&app.admin, "name=api").await, ["api"]);
    assert!(app.names(&app.admin, "name=ap").await.is_empty());
}

#[tokio::test]
async fn filters_combine() {
    let app = three().await;
    assert_eq!(
        app.names(&app.admin, "labels=dev&is_active=true&status=running")
            .await,
        ["web"]
    );
}

#[tokio::test]
async fn pages_split_the_list_and_say_whether_more_follow() {
    let app = three().await;
    let t = &app.admin;
    app.create(t, json!({ "name": "new" })).await;
    let r = app.get("/api/v1/sandbox?per_page=2", t).await;
    assert_eq!(r.body["total"], 3);
    assert_eq!(r.body["has_next"], true);
    assert_eq!(r.body["sandboxes"].as_array().unwrap().len(), 2);
    assert_eq!(app.names(t, "per_page=2&page=2").await, ["web"]);
    let r = app.get("/api/v1/sandbox?per_page=2&page=2", t).await;
    assert_eq!(r.body["has_next"], false);
    assert_eq!(r.body["page"], 2);
    assert!(app.names(t, "per_page=2&page=3").await.is_empty());
}

#[tokio::test]
async fn the_list_holds_only_the_callers_sandboxes() {
    let app = three().await;
    let bob = app.tenant("bob").await;
    assert!(app.names(&bob, "").await.is_empty());
    assert_eq!(app.total(&bob, "labels=dev").await, 0);
    app.create(&bob, json!({ "name": "bobs", "labels": ["dev"] }))
        .await;
    assert_eq!(app.names(&bob, "labels=dev").await, ["bobs"]);
    // An admin's list is its own too.
    assert_eq!(app.names(&app.admin, "").await, ["api", "web"]);
}
