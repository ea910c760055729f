//! Every field a native create or update accepts, given a bad value, is a
//! 400 `validation_failed` naming that field (never a 500), and nothing is
//! created or changed; bad list queries name their parameter.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};

use crate::cases::BAD_LIST_QUERIES;
use crate::support::*;

/// Creates with `body` must be refused naming `field`, leaving no record
/// and no container.
async fn create_is_refused(body: Value, field: &str) {
    let app = App::new().await;
    let r = app.try_create(&app.admin, body.clone()).await;
    assert!(
        r.status.is_client_error(),
        "{body}: {} {}",
        r.status,
        r.body
    );
    r.assert_invalid(field);
    assert_eq!(
        app.total(&app.admin, "").await,
        0,
        "{body}: a record was left"
    );
    assert_eq!(
        app.total(&app.admin, "is_active=false").await,
        0,
        "{body}: a record was left"
    );
    assert!(
        app.rt.containers().is_empty(),
        "{body}: a container was left"
    );
}

bad_bodies! {
    create_is_refused;
    create_empty_name: json!({ "name": "" }) => "name";
    create_long_name: json!({ "name": "x".repeat(64) }) => "name";
    create_name_with_space: json!({ "name": "has space" }) => "name";
    create_name_not_a_string: json!({ "name": 5 }) => "name";
    create_negative_cpu: json!({ "cpuCores": -1 }) => "cpuCores";
    create_huge_cpu: json!({ "cpuCores": 100000 }) => "cpuCores";
    create_cpu_as_text: json!({ "cpuCores": "two" }) => "cpuCores";
    create_cpu_snake_case_bad: json!({ "cpu_cores": -2 }) => "cpuCores";
    create_zero_memory: json!({ "memoryGB": 0 }) => "memoryGB";
    create_huge_memory: json!({ "memoryGB": 1e9 }) => "memoryGB";
    create_zero_disk: json!({ "diskSizeGB": 0 }) => "diskSizeGB";
    create_gpu: json!({ "gpuCount": 1 }) => "gpuCount";
    create_negative_gpu: json!({ "gpuCount": -1 }) => "gpuCount";
    create_gpu_type_without_gpus: json!({ "gpu_type": "H100" }) => "gpu_type";
    create_negative_timeout: json!({ "timeoutMinutes": -5 }) => "timeoutMinutes";
    create_timeout_as_text: json!({ "timeoutMinutes": "soon" }) => "timeoutMinutes";
    create_bad_label: json!({ "labels": ["ok", "not ok"] }) => "labels[1]";
    create_labels_not_a_list: json!({ "labels": "dev" }) => "labels";
    create_six_tags: json!({ "tags": {"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6"} }) => "tags";
    create_five_ports: json!({ "ports": [1, 2, 3, 4, 5] }) => "ports";
    create_port_out_of_range: json!({ "ports": [70000] }) => "ports[0]";
    create_port_zero: json!({ "ports": [0] }) => "ports[0]";
    create_bad_image: json!({ "dockerImage": "not an image" }) => "dockerImage";
    create_bad_env_name: json!({ "environmentVars": {"1X": "y"} }) => "environmentVars.1X";
    create_env_not_strings: json!({ "environmentVars": {"X": 1} }) => "environmentVars.X";
    create_secret_shadowing_env: json!({ "environmentVars": {"X": "1"}, "secrets": {"X": "2"} }) => "secrets";
    create_empty_start_command: json!({ "startCommand": "" }) => "startCommand";
    create_argv_without_executable: json!({ "startCommand": {"executable": "", "args": []} }) => "startCommand.executable";
    create_unknown_runtime: json!({ "runtime": "cobol" }) => "runtime";
    create_network_access_as_text: json!({ "networkAccess": "yes" }) => "networkAccess";
    create_network_policy_not_an_object: json!({ "networkPolicy": 5 }) => "networkPolicy";
    create_network_policy_bad_rule: json!({ "networkPolicy": {"allow": ["not a host!"]} }) => "networkPolicy.allow[0]";
    create_allow_and_deny_lists: json!({ "network_allowlist": ["a.com"], "network_denylist": ["b.com"] }) => "network_allowlist";
    create_policy_and_lists: json!({ "networkPolicy": {"allow": ["a.com"]}, "network_allowlist": ["b.com"] }) => "networkPolicy";
    create_access_contradicting_lists: json!({ "networkAccess": true, "network_allowlist": [] }) => "networkAccess";
    create_persistent_as_text: json!({ "persistent": "true" }) => "persistent";
    create_bad_team_id: json!({ "teamId": "nope" }) => "teamId";
    create_unknown_team: json!({ "teamId": "abcdefghijklmnop" }) => "teamId";
    create_bad_source_type: json!({ "source": {"type": "ftp", "url": "ftp://x"} }) => "source.type";
    create_git_source_bad_url: json!({ "source": {"type": "git", "url": "not a url"} }) => "source.url";
    create_source_and_checkpoint: json!({ "source": {"type": "git", "url": "https://example.com/r.git"}, "checkpoint_id": "abc" }) => "checkpoint_id";
    create_bad_server_name: json!({ "server": "Not A Host!" }) => "server";
    create_bad_host_selector: json!({ "hostSelector": {"zone": 5} }) => "hostSelector.zone";
    create_privileged: json!({ "privileged": true }) => "privileged";
    create_account_id: json!({ "accountId": "abcdefghijklmnop" }) => "accountId";
    create_status: json!({ "status": "RUNNING" }) => "status";
    create_body_a_string: json!("sandbox") => "body";
}

/// A create whose body is these bytes.
fn raw_create(app: &App, body: &'static str) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri("/api/v1/sandbox")
        .header("authorization", format!("Bearer {}", app.admin))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn create_bodies_that_are_not_json_objects_are_400() {
    let app = App::new().await;
    for body in ["{not json", "[1, 2]", "null", "{\"name\": \"a\""] {
        let r = app.send(raw_create(&app, body)).await;
        r.assert_error(StatusCode::BAD_REQUEST, "validation_failed");
    }
    let empty = app
        .send(request(
            Method::POST,
            "/api/v1/sandbox",
            Some(&app.admin),
            None,
        ))
        .await;
    empty.assert_invalid("body");
    assert_eq!(app.total(&app.admin, "").await, 0);
}

#[tokio::test]
async fn a_create_body_that_is_a_json_array_is_refused() {
    let app = App::new().await;
    for body in ["[]", "[\"from-an-array\"]"] {
        let r = app.send(raw_create(&app, body)).await;
        r.assert_invalid("body");
    }
    assert_eq!(app.total(&app.admin, "").await, 0);
}

/// Every front-end reads its JSON bodies the same way: an array is no
/// object there either.
#[tokio::test]
async fn array_bodies_are_refused_on_every_front_end() {
    let app = App::new().await;
    let id = app.create_id(&app.admin, json!({})).await;
    for path in [
        format!("/api/v1/sandbox/{id}/exec"),
        "/api/v1/teams".to_owned(),
        "/api/v1/sandbox/status:batchGet".to_owned(),
    ] {
        let req = Request::builder()
            .method(Method::POST)
            .uri(&path)
            .header("authorization", format!("Bearer {}", app.admin))
            .header("content-type", "application/json")
            .body(Body::from("[[\"id\"]]"))
            .unwrap();
        let r = app.send(req).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}: {}", r.body);
        r.assert_invalid("body");
    }
    assert!(
        app.rt.exec_calls().is_empty(),
        "an array body ran a command"
    );
    let r = app
        .e2b(
            Method::POST,
            "/e2b/sandboxes",
            &app.admin,
            Some(json!(["base"])),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(r.body["code"], 400, "{}", r.body);
    assert_eq!(app.total(&app.admin, "").await, 1);
}

#[tokio::test]
async fn a_create_body_that_is_not_json_names_the_body() {
    let app = App::new().await;
    app.send(raw_create(&app, "{not json"))
        .await
        .assert_invalid("body");
}

#[tokio::test]
async fn create_fields_prime_sends_that_stockade_cannot_honour_are_501() {
    let app = App::new().await;
    for body in [
        json!({ "region": "us-east" }),
        json!({ "arch": "sparc" }),
        json!({ "advanced_configs": {"x": 1} }),
    ] {
        let r = app.try_create(&app.admin, body.clone()).await;
        r.assert_error(StatusCode::NOT_IMPLEMENTED, "not_implemented");
    }
    // prime's volumes are shared volumes: an unknown one is not found.
    let r = app
        .try_create(
            &app.admin,
            json!({ "volumes": [{"name": "nowhere", "mount_path": "/data"}] }),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    assert_eq!(app.total(&app.admin, "").await, 0);
}

/// An update with `body` of a running sandbox must be refused naming
/// `field`, and the sandbox read back unchanged.
async fn update_is_refused(body: Value, field: &str) {
    let app = App::new().await;
    let id = app
        .create_id(&app.admin, json!({ "name": "before", "labels": ["keep"] }))
        .await;
    let path = format!("/api/v1/sandbox/{id}");
    let before = app.get(&path, &app.admin).await.body;
    let r = app.patch(&path, &app.admin, body.clone()).await;
    r.assert_invalid(field);
    let after = app.get(&path, &app.admin).await.body;
    for key in [
        "name",
        "labels",
        "tags",
        "cpuCores",
        "memoryGB",
        "timeoutMinutes",
        "environmentVars",
    ] {
        assert_eq!(before[key], after[key], "{body}: {key} changed");
    }
}

bad_bodies! {
    update_is_refused;
    update_nothing: json!({}) => "body";
    update_empty_name: json!({ "name": "" }) => "name";
    update_name_with_space: json!({ "name": "a b" }) => "name";
    update_negative_timeout: json!({ "timeoutMinutes": -1 }) => "timeoutMinutes";
    update_bad_label: json!({ "labels": ["fine", "no good"] }) => "labels[1]";
    update_six_tags: json!({ "tags": {"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6"} }) => "tags";
    update_bad_env_name: json!({ "environmentVars": {"A-B": "1"} }) => "environmentVars.A-B";
    update_zero_cpu: json!({ "cpuCores": 0 }) => "cpuCores";
    update_huge_memory: json!({ "memoryGB": 1e9 }) => "memoryGB";
    update_bad_network_policy: json!({ "networkPolicy": "open" }) => "networkPolicy";
    update_image: json!({ "dockerImage": "alpine" }) => "dockerImage";
    update_status: json!({ "status": "STOPPED" }) => "status";
}

#[tokio::test]
async fn bad_list_queries_name_the_parameter() {
    let app = App::new().await;
    for &(q, field) in BAD_LIST_QUERIES {
        let r = app.get(&format!("/api/v1/sandbox?{q}"), &app.admin).await;
        r.assert_invalid(field);
    }
    assert_eq!(app.total(&app.admin, "per_page=1000").await, 0);
}

#[tokio::test]
async fn bad_path_and_query_parameters_of_sandbox_verbs_are_named() {
    let app = App::new().await;
    let id = app.create_id(&app.admin, json!({})).await;
    let t = &app.admin;
    app.post(
        &format!("/api/v1/sandbox/{id}/stop?timeout=-1"),
        t,
        json!({}),
    )
    .await
    .assert_invalid("timeout");
    app.delete(&format!("/api/v1/sandbox/{id}?preserveVolume=perhaps"), t)
        .await
        .assert_invalid("preserveVolume");
    for bad in ["-dash", "..", "a%20b"] {
        app.get(&format!("/api/v1/sandbox/{bad}"), t)
            .await
            .assert_invalid("sandbox_id");
    }
    // Nothing happened to the sandbox.
    let r = app.get(&format!("/api/v1/sandbox/{id}"), t).await;
    assert_eq!(r.body["status"], "RUNNING");
}
