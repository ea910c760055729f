//! `diskSizeGB` on an ordinary host, played as a hostile tenant through the
//! API: on the default engine (ext4 here, whose storage driver takes no
//! size) a sandbox with `diskSizeGB: 1` writes 1.5 GB into `/workspace`
//! and is stopped by the kernel near 1 GB (its own file system), then
//! writes 1.5 GB into its root filesystem and is stopped by the disk watch,
//! with the reason in its status and its files kept.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

async fn shell(app: &TestApp, token: &str, id: &str, script: &str) -> Value {
    let r = app
        .sandbox_post(
            token,
            id,
            "exec",
            json!({ "shell": script, "timeoutSeconds": 300 }),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_cannot_fill_an_ordinary_hosts_disk() {
    let app = spawn_configured(|c| {
        c.service.disk_check_interval = Duration::from_secs(1);
    })
    .await;
    let health = app.get("/api/v1/health", &app.admin_token).await;
    let disk = &health.body["disk"];
    if disk["rootFs"]["enforced"] == true {
        eprintln!("skipped: the default engine caps the root filesystem itself ({disk})");
        return;
    }
    assert_eq!(disk["workspace"]["enforced"], true, "{:?}", health.body);

    let t = &app.new_account("filler").await;
    let id = app.create_id(t, json!({ "diskSizeGB": 1 })).await;

    // /workspace: refused by the kernel near 1 GB.
    let said = shell(
        &app,
        t,
        &id,
        "dd if=/dev/zero of=/workspace/big bs=1048576 count=1536 2>&1; sync; wc -c < /workspace/big",
    )
    .await;
    let out = said["stdout"].as_str().unwrap();
    assert!(out.contains("No space left on device"), "{said}");
    let written: u64 = out.lines().last().unwrap().trim().parse().unwrap();
    assert!(
        (GIB - 64 * MIB..=GIB + 16 * MIB).contains(&written),
        "{written} bytes landed in /workspace"
    );
    let details = app.get(&format!("/api/v1/sandbox/{id}"), t).await;
    let disk = &details.body["disk"];
    assert_eq!(disk["workspaceLimitBytes"], GIB, "{disk}");
    assert!(
        disk.get("rootFsLimitBytes").is_none_or(Value::is_null),
        "{disk}"
    );
    shell(
        &app,
        t,
        &id,
        "rm /workspace/big; echo kept > /workspace/kept",
    )
    .await;

    // The root filesystem: the write lands, the watch stops the sandbox
    // (while it writes, or soon after: the exec may end with it).
    let r = app.sandbox_post(t, &id, "exec", json!({ "shell": "dd if=/dev/zero of=/var/tmp/big bs=1048576 count=1536; sync", "timeoutSeconds": 300 }))
        .await;
    assert!(
        matches!(r.status, StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE),
        "{:?}",
        r.body
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let stopped = loop {
        let r = app.get(&format!("/api/v1/sandbox/{id}"), t).await;
        if r.body["status"] == "STOPPED" {
            break r.body;
        }
        assert!(Instant::now() < deadline, "not stopped: {:?}", r.body);
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let reason = stopped["statusReason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("disk limit exceeded: the root filesystem holds 1."),
        "{stopped}"
    );

    // Started again, its files are there and it can clean up.
    let r = app.act(t, &id, "start").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let said = shell(&app, t, &id, "rm /var/tmp/big && cat /workspace/kept").await;
    assert_eq!(said["stdout"], "kept\n", "{said}");
    // A check that measures it again (one period after its start) finds
    // it within its limit.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r = app.get(&format!("/api/v1/sandbox/{id}"), t).await;
    assert_eq!(r.body["status"], "RUNNING", "{:?}", r.body);

    let r = app.delete(&format!("/api/v1/sandbox/{id}"), t).await;
    assert!(r.status.is_success(), "{:?}", r.body);
}
