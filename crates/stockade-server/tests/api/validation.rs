//! Every bad field is a 400 naming it, and nothing is created.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::cases::BAD_LIST_QUERIES;
use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn bad_create_bodies_name_the_field_and_create_nothing() {
    let app = spawn_app().await;
    let t = &app.admin_token;
    let cases = [
        (json!({ "name": "" }), "name"),
        (json!({ "name": "x".repeat(64) }), "name"),
        (json!({ "name": "has space" }), "name"),
        (json!({ "name": 5 }), "name"),
        (json!({ "cpuCores": -1 }), "cpuCores"),
        (json!({ "cpuCores": 100000 }), "cpuCores"),
        (json!({ "cpuCores": "two" }), "cpuCores"),
        (json!({ "memoryGB": 0 }), "memoryGB"),
        (json!({ "memoryGB": 1e9 }), "memoryGB"),
        (json!({ "diskSizeGB": 0 }), "diskSizeGB"),
        (json!({ "gpuCount": 1 }), "gpuCount"),
        (json!({ "gpuCount": -1 }), "gpuCount"),
        (json!({ "timeoutMinutes": -5 }), "timeoutMinutes"),
        (json!({ "labels": ["ok", "not ok"] }), "labels[1]"),
        (json!({ "labels": "dev" }), "labels"),
        (
            json!({ "tags": {"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6"} }),
            "tags",
        ),
        (json!({ "ports": [1, 2, 3, 4, 5] }), "ports"),
        (json!({ "ports": [70000] }), "ports[0]"),
        (json!({ "dockerImage": "not an image" }), "dockerImage"),
        (
            json!({ "environmentVars": {"1X": "y"} }),
            "environmentVars.1X",
        ),
        (json!({ "startCommand": "" }), "startCommand"),
        (json!({ "runtime": "cobol" }), "runtime"),
        (json!({ "teamId": "nope" }), "teamId"),
        (json!({ "privileged": true }), "privileged"),
        (json!({ "accountId": "abcdefghijklmnop" }), "accountId"),
        (json!({ "status": "RUNNING" }), "status"),
    ];
    for (body, field) in cases {
        let r = app.try_create(t, body.clone()).await;
        r.assert_status(StatusCode::BAD_REQUEST, &body);
        assert_eq!(r.code(), "validation_failed");
        assert!(
            r.error_fields().iter().any(|f| f == field),
            "{body}: expected field {field}, got {:?}",
            r.body
        );
    }
    // Not JSON at all.
    let resp = app
        .http
        .post(format!("{}/api/v1/sandbox", app.base))
        .bearer_auth(t)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let empty = app.bodiless(Method::POST, "/api/v1/sandbox", t).await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);

    assert!(
        app.containers().is_empty(),
        "no container for invalid input"
    );
    assert_eq!(
        app.get("/api/v1/sandbox?is_active=false", t).await.body["total"],
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_queries_name_the_parameter() {
    let app = spawn_app().await;
    let t = &app.admin_token;
    for &(q, field) in BAD_LIST_QUERIES {
        let r = app.get(&format!("/api/v1/sandbox?{q}"), t).await;
        r.assert_status(StatusCode::BAD_REQUEST, q);
        assert!(
            r.error_fields().iter().any(|f| f == field),
            "{q}: {:?}",
            r.body
        );
    }
    let r = app.get("/api/v1/sandbox?per_page=1000", t).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = app
        .post("/api/v1/sandbox/abcdefghijkl/stop?timeout=-1", t, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["timeout"]);
    let r = app
        .delete("/api/v1/sandbox/abcdefghijkl?preserveVolume=perhaps", t)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["preserveVolume"]);
}
