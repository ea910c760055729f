//! The details of a running sandbox show live usage (CPU,
//! memory used and limit, network, pids), the volume size in bytes and for
//! people, and the logs URL; a stopped one shows no usage.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn details_show_usage_and_a_volume_size_that_grows() {
    let app = spawn_configured(|c| {
        c.service.usage.volume_size_ttl = Duration::from_secs(1);
    })
    .await;
    let t = &app.admin_token;
    let id = app
        .create_id(
            t,
            json!({ "name": "measured", "memoryGB": 0.5, "cpuCores": 1 }),
        )
        .await;
    let path = format!("/api/v1/sandbox/{id}");

    let started = Instant::now();
    let d = app.get(&path, t).await;
    let first = started.elapsed();
    assert_eq!(d.status, StatusCode::OK, "{:?}", d.body);
    let started = Instant::now();
    let again = app.get(&path, t).await;
    let second = started.elapsed();
    eprintln!("details: first {first:?}, then {second:?}: {:#}", d.body);

    let usage = &d.body["usage"];
    assert_eq!(usage["memoryLimitBytes"], 512 * 1024 * 1024, "{usage}");
    let memory = usage["memoryBytes"].as_u64().unwrap();
    assert!(memory > 0 && memory < 512 * 1024 * 1024, "{usage}");
    assert!(
        usage["memory"].as_str().unwrap().ends_with("/ 536.9 MB"),
        "{usage}"
    );
    assert!(usage["pids"].as_u64().unwrap() >= 1, "{usage}");
    let cpu = usage["cpuPercent"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&cpu), "{usage}");
    assert!(usage["networkRxBytes"].as_u64().is_some());
    assert!(usage["networkTxBytes"].as_u64().is_some());
    assert!(usage["sampledAt"].is_string());
    assert!(d.body["uptimeSeconds"].as_i64().unwrap() >= 0);
    // Disk use of both areas (limits only where enforced).
    let disk = &d.body["disk"];
    assert!(disk["rootFsBytes"].as_u64().is_some(), "{disk}");
    assert!(disk["workspaceBytes"].as_u64().is_some(), "{disk}");
    assert_eq!(d.body["logsUrl"], format!("/api/v1/sandbox/{id}/logs"));
    // A later look answers from the running sample, without waiting for Docker.
    assert!(again.body["usage"]["memoryBytes"].as_u64().is_some());
    assert!(second < Duration::from_millis(500), "{second:?}");
    // The list stays cheap: no usage there.
    let list = app.get("/api/v1/sandbox", t).await;
    assert!(list.body["sandboxes"][0].get("usage").is_none());

    // The volume: measured, human-readable, no warning under 10 GB.
    let size = |v: &Value| v["volume"]["sizeBytes"].as_u64();
    let before = size(&d.body).expect("volume size");
    assert!(d.body["volume"]["size"].as_str().unwrap().ends_with('B'));
    assert!(d.body["volume"].get("warning").is_none());
    sh_in(
        &id,
        "dd if=/dev/urandom of=/workspace/blob bs=1M count=5 2>/dev/null",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let grown = loop {
        let d = app.get(&path, t).await;
        match size(&d.body) {
            Some(now) if now >= before + 5 * 1024 * 1024 => break d,
            _ if Instant::now() > deadline => panic!("volume size did not grow: {:#}", d.body),
            _ => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    };
    assert!(
        grown.body["volume"]["size"]
            .as_str()
            .unwrap()
            .ends_with("MB"),
        "{:#}",
        grown.body
    );

    // Stopped: no usage, the volume is still measured.
    let r = app
        .bodiless(Method::POST, &format!("{path}/stop?timeout=1"), t)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let d = app.get(&path, t).await;
    assert!(d.body.get("usage").is_none(), "{:#}", d.body);
    assert!(size(&d.body).unwrap() >= before + 5 * 1024 * 1024);
    assert!(d.body.get("uptimeSeconds").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_sandbox_shows_cpu_use() {
    let (app, id) = spawn_with_sandbox_id(
        json!({ "name": "busy", "cpuCores": 0.5, "startCommand": "while :; do :; done" }),
    )
    .await;
    let t = &app.admin_token;
    let d = app.get(&format!("/api/v1/sandbox/{id}"), t).await;
    let cpu = d.body["usage"]["cpuPercent"].as_f64().expect("cpu figure");
    // Limited to half a core: well above idle, not above what the quota allows.
    assert!((10.0..=60.0).contains(&cpu), "{cpu}");
    app.delete(&format!("/api/v1/sandbox/{id}"), t).await;
}
