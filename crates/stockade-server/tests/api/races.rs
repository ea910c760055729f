//! Concurrent operations over HTTP against real Docker: operations on one sandbox take
//! turns (no 502 when a PATCH races a stop or a delete, the record ends as
//! Docker shows it), and input Docker would refuse is a 400 naming the
//! field.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn racing_updates_stops_starts_and_a_delete_take_turns() {
    let (app, t, id) = spawn_with_owned_sandbox("racer", json!({ "name": "busy" })).await;
    // A storm of starts, stops and limit changes.
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (http, base, t, id) = (app.http.clone(), app.base.clone(), t.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            let req = match i % 4 {
                0 => http.post(format!("{base}/api/v1/sandbox/{id}/stop?timeout=0")),
                1 | 3 => http.post(format!("{base}/api/v1/sandbox/{id}/start")),
                _ => http
                    .patch(format!("{base}/api/v1/sandbox/{id}"))
                    .json(&json!({ "cpuCores": if i % 8 == 2 { 0.5 } else { 0.25 } })),
            };
            req.bearer_auth(&t).send().await.unwrap().status()
        }));
    }
    for task in tasks {
        let status = task.await.unwrap();
        assert!(
            status == StatusCode::OK || status == StatusCode::CONFLICT,
            "{status}"
        );
    }
    let record = app.get(&format!("/api/v1/sandbox/{id}"), &t).await.body;
    let running = inspect(&id, "{{.State.Running}}");
    let want = if record["status"] == "RUNNING" {
        "true"
    } else {
        "false"
    };
    assert_eq!(
        running,
        vec![want.to_owned()],
        "record {} vs Docker",
        record["status"]
    );
    let nano = inspect(&id, "{{.HostConfig.NanoCpus}}");
    let cores = record["cpuCores"].as_f64().unwrap();
    assert_eq!(
        nano,
        vec![format!("{}", (cores * 1e9) as i64)],
        "limits follow the record"
    );
    // A PATCH and a stop racing a delete: the delete wins its turn, the
    // others answer 200 (before it) or 409 (after it), never 502.
    let (one, stop_path) = (
        format!("/api/v1/sandbox/{id}"),
        format!("/api/v1/sandbox/{id}/stop?timeout=0"),
    );
    let (patch, stop, delete) = tokio::join!(
        app.call(
            Method::PATCH,
            &one,
            Some(&t),
            Some(json!({ "labels": ["late"] }))
        ),
        app.bodiless(Method::POST, &stop_path, &t),
        app.bodiless(Method::DELETE, &one, &t),
    );
    assert_eq!(delete.status, StatusCode::OK, "{:?}", delete.body);
    for r in [patch, stop] {
        assert!(
            r.status == StatusCode::OK || r.status == StatusCode::CONFLICT,
            "{:?} {:?}",
            r.status,
            r.body
        );
    }
    let after = app.get(&format!("/api/v1/sandbox/{id}"), &t).await.body;
    assert_eq!(after["status"], "TERMINATED");
    assert!(!container_exists(&id));
}

#[tokio::test(flavor = "multi_thread")]
async fn resources_beyond_the_host_are_a_400_naming_the_field() {
    let app = spawn_app().await;
    let t = app.new_account("greedy").await;
    let cpus: f64 = docker_lines(&["info", "-f", "{{.NCPU}}"])[0]
        .parse()
        .unwrap();
    let r = app
        .try_create(&t, json!({ "name": "big", "cpuCores": cpus * 32.0 }))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.error_fields(), ["cpuCores"]);
    let mem_gb = docker_lines(&["info", "-f", "{{.MemTotal}}"])[0]
        .parse::<f64>()
        .unwrap()
        / 1e9;
    let r = app
        .try_create(
            &t,
            json!({ "name": "big", "memoryGB": (mem_gb * 2.0).ceil().min(256.0) }),
        )
        .await;
    if mem_gb * 2.0 <= 256.0 {
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
        assert_eq!(r.error_fields(), ["memoryGB"]);
    }
    assert!(app.containers().is_empty());
    let id = app.create_id(&t, json!({ "name": "small" })).await;
    let r = app
        .call(
            Method::PATCH,
            &format!("/api/v1/sandbox/{id}"),
            Some(&t),
            Some(json!({ "cpuCores": cpus * 32.0 })),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.error_fields(), ["cpuCores"]);
}
