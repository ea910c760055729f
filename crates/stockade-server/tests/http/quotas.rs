//! Account quotas over HTTP: who reads and sets them, bad values named,
//! usage as the account's sandboxes add up, and creates or updates past a
//! limit refused with 403 `quota_exceeded` leaving nothing behind.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::cases::no_limits;
use crate::support::*;

fn quota_path(account: &str) -> String {
    format!("/api/v1/accounts/{account}/quota")
}

/// A tenant (id, token) whose quota the admin set to `quota`.
async fn limited(app: &App, quota: Value) -> (String, String) {
    let (id, token) = app.account("tenant").await;
    let r = app.put(&quota_path(&id), &app.admin, quota).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    (id, token)
}

/// A create of `body` by `token` must be refused by the quota, with
/// nothing created.
async fn refused_by_quota(app: &App, token: &str, body: Value) -> String {
    let before = app.rt.containers().len();
    let total = app.total(token, "").await;
    let r = app.try_create(token, body.clone()).await;
    r.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    assert!(
        r.message().starts_with("account quota exceeded"),
        "{}",
        r.body
    );
    assert_eq!(
        app.rt.containers().len(),
        before,
        "{body}: a container was made"
    );
    assert_eq!(
        app.total(token, "").await,
        total,
        "{body}: a record was left"
    );
    r.message().to_owned()
}

#[tokio::test]
async fn a_new_account_has_no_limits_and_uses_nothing() {
    let (app, (id, token)) = App::with_account("alice").await;
    let r = app.get(&quota_path(&id), &token).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["accountId"], id.as_str());
    assert_eq!(r.body["quota"], no_limits());
    assert_eq!(r.body["usage"]["sandboxes"], 0);
    assert_eq!(r.body["usage"]["cpuCores"], 0.0);
}

#[tokio::test]
async fn only_an_admin_sets_a_quota_and_only_the_account_or_an_admin_reads_it() {
    let (app, (alice, alice_token)) = App::with_account("alice").await;
    let bob_token = app.tenant("bob").await;
    let path = quota_path(&alice);
    app.put(&path, &alice_token, json!({ "sandboxes": 9 }))
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    app.get(&path, &bob_token)
        .await
        .assert_error(StatusCode::FORBIDDEN, "forbidden");
    app.send(request(Method::GET, &path, None, None))
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(app.get(&path, &app.admin).await.status, StatusCode::OK);
    assert_eq!(
        app.get(&path, &alice_token).await.body["quota"]["sandboxes"],
        Value::Null
    );
}

#[tokio::test]
async fn a_set_quota_is_read_back_and_touches_no_other_account() {
    let (app, (bob, _)) = App::with_account("bob").await;
    let (alice, token) = limited(
        &app,
        json!({ "sandboxes": 3, "cpuCores": 1.5, "memoryGB": 4, "diskGB": 40 }),
    )
    .await;
    let r = app.get(&quota_path(&alice), &token).await;
    assert_eq!(
        r.body["quota"],
        json!({ "sandboxes": 3, "cpuCores": 1.5, "memoryGB": 4.0, "diskGB": 40,
                 "snapshots": null, "snapshotGB": null, "uploads": null, "uploadGB": null,
                 "volumes": null, "volumeGB": null })
    );
    let r = app.get(&quota_path(&bob), &app.admin).await;
    assert_eq!(r.body["quota"]["sandboxes"], Value::Null);
    // `{}` lifts every limit.
    let r = app.put(&quota_path(&alice), &app.admin, json!({})).await;
    assert_eq!(r.body["quota"]["sandboxes"], Value::Null, "{}", r.body);
}

/// A quota `body` must be refused naming `field`, the quota unchanged.
async fn quota_is_refused(body: Value, field: &str) {
    let app = App::new().await;
    let (id, _) = limited(&app, json!({ "sandboxes": 3 })).await;
    let r = app.put(&quota_path(&id), &app.admin, body.clone()).await;
    r.assert_invalid(field);
    let r = app.get(&quota_path(&id), &app.admin).await;
    assert_eq!(r.body["quota"]["sandboxes"], 3, "{body}: the quota changed");
}

bad_bodies! {
    quota_is_refused;
    quota_negative_sandboxes: json!({ "sandboxes": -1 }) => "sandboxes";
    quota_too_many_sandboxes: json!({ "sandboxes": 2_000_000 }) => "sandboxes";
    quota_fractional_sandboxes: json!({ "sandboxes": 1.5 }) => "sandboxes";
    quota_negative_cpu: json!({ "cpuCores": -0.5 }) => "cpuCores";
    quota_memory_as_text: json!({ "memoryGB": "lots" }) => "memoryGB";
    quota_huge_memory: json!({ "memoryGB": 1e12 }) => "memoryGB";
    quota_fractional_disk: json!({ "diskGB": 1.5 }) => "diskGB";
    quota_negative_snapshots: json!({ "snapshots": -1 }) => "snapshots";
    quota_negative_snapshot_gb: json!({ "snapshotGB": -0.5 }) => "snapshotGB";
    quota_fractional_uploads: json!({ "uploads": 2.5 }) => "uploads";
    quota_upload_gb_as_text: json!({ "uploadGB": "big" }) => "uploadGB";
    quota_negative_volumes: json!({ "volumes": -1 }) => "volumes";
    quota_fractional_volume_gb: json!({ "volumeGB": 2.5 }) => "volumeGB";
    quota_too_many_volume_gb: json!({ "volumeGB": 2_000_000 }) => "volumeGB";
    quota_unknown_field: json!({ "disks": 3 }) => "disks";
}

#[tokio::test]
async fn quotas_of_unknown_and_malformed_accounts() {
    let app = App::new().await;
    let ghost = stockade_core::AccountId::generate();
    app.put(&quota_path(ghost.as_ref()), &app.admin, json!({}))
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    app.get(&quota_path("not-an-id"), &app.admin)
        .await
        .assert_invalid("account_id");
}

/// A tenant limited by `quota` makes each of `made`, then is refused
/// `past` by the quota: the app, the tenant's token and the refusal's
/// message.
async fn refused_past_the_limit(
    quota: Value,
    made: &[Value],
    past: Value,
) -> (App, String, String) {
    let app = App::new().await;
    let (_, t) = limited(&app, quota).await;
    for body in made {
        app.create(&t, body.clone()).await;
    }
    let message = refused_by_quota(&app, &t, past).await;
    (app, t, message)
}

#[tokio::test]
async fn the_sandbox_count_past_its_limit_is_refused() {
    let made = [json!({ "name": "a" }), json!({ "name": "b" })];
    let (_, _, message) =
        refused_past_the_limit(json!({ "sandboxes": 2 }), &made, json!({ "name": "c" })).await;
    assert_eq!(message, "account quota exceeded: 2 of 2 sandboxes");
}

#[tokio::test]
async fn cpu_past_its_limit_is_refused() {
    let made = [json!({ "cpuCores": 0.75 })];
    let (app, t, _) =
        refused_past_the_limit(json!({ "cpuCores": 1 }), &made, json!({ "cpuCores": 0.5 })).await;
    // What is left still fits.
    app.create(&t, json!({ "cpuCores": 0.25 })).await;
}

#[tokio::test]
async fn memory_past_its_limit_is_refused() {
    let made = [json!({ "memoryGB": 2 })];
    refused_past_the_limit(json!({ "memoryGB": 3 }), &made, json!({ "memoryGB": 2 })).await;
}

#[tokio::test]
async fn disk_past_its_limit_is_refused() {
    let made = [json!({ "diskSizeGB": 10 })];
    refused_past_the_limit(json!({ "diskGB": 15 }), &made, json!({ "diskSizeGB": 10 })).await;
}

#[tokio::test]
async fn a_quota_of_zero_sandboxes_refuses_the_first() {
    refused_past_the_limit(json!({ "sandboxes": 0 }), &[], json!({})).await;
}

#[tokio::test]
async fn usage_counts_the_accounts_sandboxes_and_a_delete_frees_room() {
    let app = App::new().await;
    let (id, t) = limited(&app, json!({ "sandboxes": 1 })).await;
    let sb = app
        .create_id(
            &t,
            json!({ "cpuCores": 0.5, "memoryGB": 1.5, "diskSizeGB": 5 }),
        )
        .await;
    let usage = app.get(&quota_path(&id), &t).await.body["usage"].clone();
    assert_eq!(usage["sandboxes"], 1, "{usage}");
    assert_eq!(usage["cpuCores"], 0.5, "{usage}");
    assert_eq!(usage["memoryGB"], 1.5, "{usage}");
    assert_eq!(usage["diskGB"], 5, "{usage}");
    refused_by_quota(&app, &t, json!({})).await;
    let r = app.delete(&format!("/api/v1/sandbox/{sb}"), &t).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        app.get(&quota_path(&id), &t).await.body["usage"]["sandboxes"],
        0
    );
    app.create(&t, json!({})).await;
}

#[tokio::test]
async fn an_update_past_the_cpu_limit_is_refused_and_changes_nothing() {
    let app = App::new().await;
    let (_, t) = limited(&app, json!({ "cpuCores": 1 })).await;
    let id = app.create_id(&t, json!({ "cpuCores": 0.5 })).await;
    let path = format!("/api/v1/sandbox/{id}");
    app.patch(&path, &t, json!({ "cpuCores": 2 }))
        .await
        .assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    assert_eq!(app.get(&path, &t).await.body["cpuCores"], 0.5);
    let r = app.patch(&path, &t, json!({ "cpuCores": 1 })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

#[tokio::test]
async fn another_accounts_quota_does_not_limit_this_one() {
    let app = App::new().await;
    let (_, limited_token) = limited(&app, json!({ "sandboxes": 0 })).await;
    let free = app.tenant("free").await;
    refused_by_quota(&app, &limited_token, json!({})).await;
    app.create(&free, json!({})).await;
    app.create(&free, json!({})).await;
}
