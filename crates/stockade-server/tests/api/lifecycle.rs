//! Create, limits, stop/start, destroy.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn create_with_only_a_name_runs_with_defaults() {
    let app = spawn_app().await;
    let sb = app
        .create(&app.admin_token, json!({ "name": "demo" }))
        .await;
    let id = sb["id"].as_str().unwrap();
    assert_eq!(id.len(), 12);
    assert_eq!(sb["name"], "demo");
    assert_eq!(sb["dockerImage"], test_image());
    assert_eq!(sb["cpuCores"], 1.0);
    assert_eq!(sb["memoryGB"], 2.0);
    assert_eq!(sb["diskSizeGB"], 10);
    assert_eq!(sb["gpuCount"], 0);
    assert_eq!(sb["networkAccess"], true);
    assert_eq!(sb["server"], "local");
    assert_eq!(sb["volume"]["name"], format!("agent-sandbox-{id}"));
    assert_eq!(sb["volume"]["mountPath"], "/workspace");
    assert_eq!(sb["logsUrl"], format!("/api/v1/sandbox/{id}/logs"));
    assert!(sb["startedAt"].is_string());
    // The metadata in snake_case, with the full config.
    assert_eq!(sb["metadata"]["sandbox_id"], id);
    assert_eq!(sb["metadata"]["status"], "RUNNING");
    assert_eq!(sb["metadata"]["config"]["docker_image"], test_image());

    // The kernel enforces the default 2 GB limit; the volume is mounted rw.
    let mem = sh_in(id, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max");
    assert_eq!(mem, (2u64 << 30).to_string());
    assert_eq!(
        sh_in(id, "echo hi > /workspace/f && cat /workspace/f"),
        "hi"
    );
    assert!(volume_exists(id));

    // Hardened by default.
    let inspect = String::from_utf8(
        docker(&[
            "inspect",
            "--format",
            "{{json .HostConfig}}",
            &format!("stockade-{id}"),
        ])
        .stdout,
    )
    .unwrap();
    let host: serde_json::Value = serde_json::from_str(&inspect).unwrap();
    assert_eq!(host["CapDrop"], json!(["ALL"]));
    assert_eq!(host["Privileged"], false);
    assert!(host["SecurityOpt"]
        .to_string()
        .contains("no-new-privileges"));
    assert_eq!(host["Memory"], host["MemorySwap"]);
    assert!(host["PidsLimit"].as_i64().unwrap() > 0);
    // The in-sandbox agent is PID 1 (it reaps and forwards signals), not
    // Docker's init.
    assert_eq!(host["Init"], false);
    let path = crate::helpers::inspect(id, "{{.Path}}");
    assert_eq!(path, vec!["/.stockade/agent/stockade-agent".to_owned()]);

    // GET shows the same sandbox.
    let got = app
        .get(&format!("/api/v1/sandbox/{id}"), &app.admin_token)
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body["status"], "RUNNING");
    assert!(got.body["uptimeSeconds"].as_i64().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_limits_are_enforced_by_the_kernel() {
    let app = spawn_app().await;
    let sb = app
        .create(
            &app.admin_token,
            json!({
                "name": "limits", "cpuCores": 1.5, "memoryGB": 0.5,
                "environmentVars": {"GREETING": "hello"}, "labels": ["dev", "test"],
                "timeoutMinutes": 60, "diskSizeGB": 20, "gpuCount": 0, "networkAccess": false,
                "startCommand": "echo started; trap 'exit 0' TERM; while true; do sleep 1; done"
            }),
        )
        .await;
    let id = sb["id"].as_str().unwrap();
    assert_eq!(sb["memoryGB"], 0.5);
    assert_eq!(sb["labels"], json!(["dev", "test"]));
    assert_eq!(sb["timeoutMinutes"], 60.0);
    let mem = sh_in(id, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max");
    assert_eq!(mem, (512u64 << 20).to_string());
    let cpu = sh_in(
        id,
        "if [ -f /sys/fs/cgroup/cpu.max ]; then cat /sys/fs/cgroup/cpu.max; else echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us); fi",
    );
    let parts: Vec<f64> = cpu.split_whitespace().map(|p| p.parse().unwrap()).collect();
    assert!((parts[0] / parts[1] - 1.5).abs() < 0.01, "cpu quota {cpu}");
    assert_eq!(sh_in(id, "echo $GREETING"), "hello");
    // networkAccess=false: on Stockade's internal network (no route out;
    // only the host reaches it, for the proxy and the agent).
    let mode = inspect(id, "{{.HostConfig.NetworkMode}}");
    assert_eq!(mode, vec!["stockade-offline".to_owned()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_and_start_keep_the_workspace() {
    let (app, id) = spawn_with_sandbox_id(json!({ "name": "persist" })).await;
    let t = &app.admin_token;
    sh_in(&id, "head -c 100000 /dev/urandom > /workspace/blob; mkdir -p /workspace/d; echo deep > /workspace/d/x");
    let before = sh_in(&id, "md5sum /workspace/blob");

    // Start of a running sandbox: no error, still RUNNING.
    let r = app.act(t, &id, "start").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "RUNNING");

    // The default keep-alive exits promptly on SIGTERM.
    let started = Instant::now();
    let r = app.act(t, &id, "stop").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "STOPPED");
    assert!(r.body["stoppedAt"].is_string());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stop took {:?}",
        started.elapsed()
    );

    // Stop again is fine.
    let r = app.act(t, &id, "stop").await;
    assert_eq!(r.body["status"], "STOPPED");

    let r = app.act(t, &id, "start").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "RUNNING");
    assert_eq!(sh_in(&id, "md5sum /workspace/blob"), before);
    assert_eq!(sh_in(&id, "cat /workspace/d/x"), "deep");
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_kills_a_process_that_ignores_sigterm_after_the_grace_period() {
    let (app, id) = spawn_with_sandbox_id(
        json!({ "name": "stubborn", "startCommand": "trap '' TERM; while true; do sleep 1; done" }),
    )
    .await;
    let t = &app.admin_token;
    let started = Instant::now();
    let r = app.act(t, &id, "stop?timeout=3").await;
    let took = started.elapsed();
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "STOPPED");
    assert!(
        took >= Duration::from_secs(3),
        "SIGKILL came before the grace period: {took:?}"
    );
    assert!(took < Duration::from_secs(20), "stop took {took:?}");
    let state = String::from_utf8(
        docker(&[
            "inspect",
            "--format",
            "{{.State.Running}} {{.State.ExitCode}}",
            &format!("stockade-{id}"),
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(state.trim(), "false 137", "killed by SIGKILL");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_handles_sigterm_gets_to_finish() {
    let (app, id) = spawn_with_sandbox_id(json!({ "name": "graceful", "startCommand": "trap 'sleep 1; echo bye > /workspace/bye; exit 0' TERM; while true; do sleep 1; done" })).await;
    let t = &app.admin_token;
    let r = app.act(t, &id, "stop?timeout=20").await;
    assert_eq!(r.body["status"], "STOPPED");
    let r = app.act(t, &id, "start").await;
    assert_eq!(r.body["status"], "RUNNING");
    assert_eq!(sh_in(&id, "cat /workspace/bye"), "bye");
}

#[tokio::test(flavor = "multi_thread")]
async fn destroy_with_and_without_the_volume() {
    let (app, keep) = spawn_with_sandbox(json!({ "name": "keep" })).await;
    let t = &app.admin_token;
    let drop_ = app.create(t, json!({ "name": "drop" })).await;
    let keep_id = keep["id"].as_str().unwrap();
    let drop_id = drop_["id"].as_str().unwrap();

    let r = app.delete_sandbox(t, keep_id, "preserveVolume=true").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "TERMINATED");
    assert!(!container_exists(keep_id));
    assert!(
        volume_exists(keep_id),
        "preserveVolume=true keeps the volume"
    );

    let r = app.delete_sandbox(t, drop_id, "preserveVolume=false").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(!container_exists(drop_id));
    assert!(
        !volume_exists(drop_id),
        "preserveVolume=false removes the volume"
    );

    // The record stays, soft-deleted, TERMINATED.
    let r = app.get(&format!("/api/v1/sandbox/{keep_id}"), t).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["status"], "TERMINATED");
    assert!(r.body["terminatedAt"].is_string());
    // Starting a terminated sandbox is a conflict, not a crash.
    let r = app.act(t, keep_id, "start").await;
    assert_eq!(r.status, StatusCode::CONFLICT);

    // The name is free again.
    app.create(t, json!({ "name": "keep" })).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_delete_by_ids_and_labels() {
    let (app, a) = spawn_with_sandbox(json!({ "name": "a", "labels": ["batch", "x"] })).await;
    let t = &app.admin_token;
    let b = app
        .create(t, json!({ "name": "b", "labels": ["batch"] }))
        .await;
    let c = app.create(t, json!({ "name": "c" })).await;
    let r = app
        .call(
            reqwest::Method::DELETE,
            "/api/v1/sandbox/bulk",
            Some(t),
            Some(json!({ "labels": ["batch"], "ids": [c["id"], "doesnotexist", "not-an-id!"] })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let results = r.body["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    let by_id = |id: &serde_json::Value| results.iter().find(|x| x["id"] == *id).unwrap().clone();
    assert_eq!(by_id(&a["id"])["deleted"], true);
    assert_eq!(by_id(&b["id"])["deleted"], true);
    assert_eq!(by_id(&c["id"])["deleted"], true);
    assert_eq!(by_id(&json!("doesnotexist"))["deleted"], false);
    assert_eq!(by_id(&json!("doesnotexist"))["error"]["code"], "not_found");
    assert_eq!(
        by_id(&json!("not-an-id!"))["error"]["code"],
        "validation_failed"
    );
    assert!(app.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_image_fails_clearly_and_leaves_nothing() {
    let app = spawn_app().await;
    let t = &app.admin_token;
    let image = format!(
        "stockade-test/missing-{}:nope",
        stockade_core::SandboxId::generate()
    );
    let started = Instant::now();
    let r = app
        .try_create(t, json!({ "name": "ghost", "dockerImage": image }))
        .await;
    assert!(r.status.is_client_error() || r.status.is_server_error());
    assert_eq!(r.code(), "image_unavailable", "{:?}", r.body);
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&image), "message names the image: {msg}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(app.containers().is_empty());
    assert!(app.volumes().is_empty());
    let list = app.get("/api/v1/sandbox?is_active=false", t).await;
    assert_eq!(list.body["total"], 0);
    let list = app.get("/api/v1/sandbox", t).await;
    assert_eq!(list.body["total"], 0);
    // The name is not taken by the failed create.
    app.create(t, json!({ "name": "ghost" })).await;
}
