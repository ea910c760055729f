//! The error body of every failure: Stockade's `{"error": {"code",
//! "message", "details"?}}` with a JSON content type on the native API and
//! the dashboard's routes, E2B's `{"code", "message"}` under `/e2b`, and
//! the status and code each kind of failure documents.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::*;

/// Asserts an error answer in Stockade's shape, with this status and
/// code, served as JSON.
#[track_caller]
fn assert_json_error(r: &Resp, status: StatusCode, code: &str) {
    r.assert_error(status, code);
    let ct = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(
        ct.starts_with("application/json"),
        "content type {ct:?}: {}",
        r.body
    );
}

#[tokio::test]
async fn a_validation_error_lists_each_bad_field_with_a_message() {
    let app = App::new().await;
    let r = app
        .try_create(
            &app.admin,
            json!({ "name": "", "cpuCores": -1, "labels": ["a b"] }),
        )
        .await;
    assert_json_error(&r, StatusCode::BAD_REQUEST, "validation_failed");
    let fields = r.body["error"]["details"]["fields"]
        .as_array()
        .expect("fields");
    assert!(!fields.is_empty());
    for f in fields {
        assert!(f["field"].as_str().is_some_and(|s| !s.is_empty()), "{f}");
        assert!(f["message"].as_str().is_some_and(|s| !s.is_empty()), "{f}");
    }
    assert!(r.message().starts_with("Invalid request: "), "{}", r.body);
    // Every named field is reported, not only the first.
    let named = r.error_fields();
    for field in ["name", "cpuCores", "labels[0]"] {
        assert!(
            named.iter().any(|f| f == field),
            "{field} missing: {named:?}"
        );
    }
}

#[tokio::test]
async fn errors_without_details_leave_them_out_or_null() {
    let app = App::new().await;
    let r = app.get("/api/v1/sandbox/abcdefghijkl", &app.admin).await;
    assert_json_error(&r, StatusCode::NOT_FOUND, "not_found");
    assert!(r.body["error"]["details"].is_null(), "{}", r.body);
}

#[tokio::test]
async fn unknown_routes_are_404_in_stockades_shape() {
    let app = App::new().await;
    for path in ["/api/v1/nothing-here", "/nothing-here", "/api/v2/sandbox"] {
        let r = app.get(path, &app.admin).await;
        r.assert_error(StatusCode::NOT_FOUND, "not_found");
        assert!(r.message().contains(path), "{path}: {}", r.body);
    }
}

#[tokio::test]
async fn unknown_e2b_routes_are_404_in_e2bs_shape() {
    let app = App::new().await;
    let r = app
        .e2b(Method::GET, "/e2b/nothing-here", &app.admin, None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(r.body["code"], 404, "{}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("/nothing-here")),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn e2b_validation_errors_keep_e2bs_shape() {
    let app = App::new().await;
    let body = Some(json!({ "templateID": 5 }));
    let r = app
        .e2b(Method::POST, "/e2b/sandboxes", &app.admin, body)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(r.body["code"], 400, "{}", r.body);
    assert!(r.body["message"].is_string(), "{}", r.body);
    assert!(r.body.get("error").is_none(), "{}", r.body);
}

#[tokio::test]
async fn a_wrong_method_is_405_in_stockades_shape() {
    let app = App::new().await;
    let r = app.put("/api/v1/sandbox", &app.admin, json!({})).await;
    assert_json_error(&r, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    let allow = r
        .headers
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    for method in ["GET", "POST", "DELETE"] {
        assert!(allow.contains(method), "Allow: {allow:?}");
    }
}

#[tokio::test]
async fn a_wrong_e2b_method_is_405_in_e2bs_shape() {
    let app = App::new().await;
    let r = app
        .e2b(Method::PATCH, "/e2b/sandboxes", &app.admin, Some(json!({})))
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{}", r.body);
    assert_eq!(r.body["code"], 405, "{}", r.body);
    assert!(r.body["message"].is_string(), "{}", r.body);
    assert!(r.headers.contains_key("allow"), "{:?}", r.headers);
}

#[tokio::test]
async fn a_terminal_request_without_an_upgrade_is_in_stockades_shape() {
    let app = App::new().await;
    let id = app.create_id(&app.admin, json!({})).await;
    let path = format!("/api/v1/sandbox/{id}/terminal");
    let r = app.get(&path, &app.admin).await;
    assert_json_error(&r, StatusCode::BAD_REQUEST, "validation_failed");
    // Another account learns no more than from any request: the ownership
    // check answers first.
    let stranger = app.tenant("stranger").await;
    let r = app.get(&path, &stranger).await;
    r.assert_error(StatusCode::FORBIDDEN, "forbidden");
}

#[tokio::test]
async fn a_wrong_method_is_405() {
    let app = App::new().await;
    let r = app.put("/api/v1/sandbox", &app.admin, json!({})).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{}", r.body);
    assert_eq!(app.total(&app.admin, "").await, 0);
}

#[tokio::test]
async fn exec_in_a_stopped_sandbox_is_409_sandbox_not_running() {
    let app = App::new().await;
    let id = app.create_id(&app.admin, json!({})).await;
    app.post(&format!("/api/v1/sandbox/{id}/stop"), &app.admin, json!({}))
        .await;
    let r = app
        .post(
            &format!("/api/v1/sandbox/{id}/exec"),
            &app.admin,
            json!({ "cmd": ["true"] }),
        )
        .await;
    r.assert_error(StatusCode::CONFLICT, "sandbox_not_running");
}

#[tokio::test]
async fn starting_a_deleted_sandbox_is_409_sandbox_terminated() {
    let app = App::new().await;
    let id = app.create_id(&app.admin, json!({})).await;
    app.delete(&format!("/api/v1/sandbox/{id}"), &app.admin)
        .await;
    let r = app
        .post(
            &format!("/api/v1/sandbox/{id}/start"),
            &app.admin,
            json!({}),
        )
        .await;
    r.assert_error(StatusCode::CONFLICT, "sandbox_terminated");
}

#[tokio::test]
async fn an_unreachable_docker_is_503_docker_unavailable_and_runs_nothing() {
    let app = App::new().await;
    app.rt.set_unavailable(true);
    let r = app.try_create(&app.admin, json!({})).await;
    assert_json_error(&r, StatusCode::SERVICE_UNAVAILABLE, "docker_unavailable");
    app.rt.set_unavailable(false);
    // No container; the record Docker could not be asked to undo is left
    // to recovery, never shown running.
    assert!(app.rt.containers().is_empty());
    assert_eq!(app.total(&app.admin, "status=running").await, 0);
}

#[tokio::test]
async fn a_missing_image_is_422_image_unavailable() {
    let app = App::new().await;
    let image = "missing/image:1";
    app.rt.set_image_missing(image);
    let r = app
        .try_create(&app.admin, json!({ "dockerImage": image }))
        .await;
    r.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "image_unavailable");
    assert!(r.message().contains(image), "{}", r.body);
    assert_eq!(app.total(&app.admin, "").await, 0);
}

#[tokio::test]
async fn a_failing_engine_is_502_docker_error_and_the_create_is_undone() {
    let app = App::new().await;
    app.rt.fail_next_create("no space left on device");
    let r = app
        .try_create(&app.admin, json!({ "name": "undone" }))
        .await;
    r.assert_error(StatusCode::BAD_GATEWAY, "docker_error");
    assert!(
        r.message().contains("no space left on device"),
        "{}",
        r.body
    );
    assert_eq!(app.total(&app.admin, "").await, 0);
    assert!(app.rt.containers().is_empty());
    // The name is free again.
    app.create(&app.admin, json!({ "name": "undone" })).await;
}

#[tokio::test]
async fn a_full_host_is_409_insufficient_capacity() {
    let app = App::with(|c| {
        c.service.admission.cpu_overcommit = Some(1.0);
        c.service.admission.memory_overcommit = Some(1.0);
    })
    .await;
    app.rt
        .set_host_size(2, 4 * stockade_core::quota::BYTES_PER_GB);
    app.create(&app.admin, json!({ "cpuCores": 2, "memoryGB": 1 }))
        .await;
    let r = app
        .try_create(&app.admin, json!({ "cpuCores": 1, "memoryGB": 1 }))
        .await;
    r.assert_error(StatusCode::CONFLICT, "insufficient_capacity");
}

#[tokio::test]
async fn a_501_says_what_stockade_offers_instead() {
    let app = App::new().await;
    let r = app.get("/api/v1/sandbox/networks", &app.admin).await;
    assert_json_error(&r, StatusCode::NOT_IMPLEMENTED, "not_implemented");
}

#[tokio::test]
async fn a_401_and_a_403_are_in_stockades_shape() {
    let app = App::new().await;
    let r = app
        .send(request(Method::GET, "/api/v1/me", None, None))
        .await;
    assert_json_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    let t = app.tenant("t").await;
    let r = app.get("/api/v1/accounts", &t).await;
    assert_json_error(&r, StatusCode::FORBIDDEN, "forbidden");
}
