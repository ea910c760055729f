//! Session timeouts. A timeout of a few seconds stops a persistent
//! sandbox and terminates a non-persistent one within a few seconds of the
//! deadline; starting again opens a new session; a stop closes the session;
//! a deadline that passed while the server was down is acted on at start.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// The session checker ticks every second; allow for a busy machine.
const SLACK: Duration = Duration::from_secs(5);

fn time(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}")))
        .unwrap()
        .with_timezone(&Utc)
}

fn container_running(id: &str) -> bool {
    let out = docker(&[
        "inspect",
        "-f",
        "{{.State.Running}}",
        &format!("stockade-{id}"),
    ]);
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

/// Polls the sandbox until its status is `status`; returns it and when.
async fn wait_for(app: &TestApp, token: &str, id: &str, status: &str, within: Duration) -> Value {
    let t0 = Instant::now();
    loop {
        let r = app.get(&format!("/api/v1/sandbox/{id}"), token).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        if r.body["status"] == status {
            return r.body;
        }
        assert!(
            t0.elapsed() < within,
            "{id} still {} after {:?}, wanted {status}: {:?}",
            r.body["status"],
            t0.elapsed(),
            r.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ended_session_stops_a_persistent_sandbox_and_start_opens_a_new_one() {
    // 0.05 minutes = 3 s.
    let (app, sb) = spawn_with_sandbox(json!({ "name": "short", "timeoutMinutes": 0.05 })).await;
    let t = &app.admin_token;
    let id = sb["id"].as_str().unwrap();
    assert_eq!(sb["persistent"], true);
    let started = time(&sb["startedAt"]);
    let deadline = time(&sb["sessionExpiresAt"]);
    assert_eq!((deadline - started).num_milliseconds(), 3000);
    sh_in(id, "echo kept > /workspace/f");

    let stopped = wait_for(&app, t, id, "STOPPED", Duration::from_secs(3) + SLACK).await;
    let late = Utc::now() - deadline;
    eprintln!(
        "stopped, as polling saw it, {} ms after the deadline",
        late.num_milliseconds()
    );
    assert!(
        late.num_seconds() < SLACK.as_secs() as i64,
        "acted {late} after the deadline"
    );
    assert_eq!(stopped["statusReason"], "session timed out");
    assert!(stopped.get("sessionExpiresAt").is_none());
    assert!(!container_running(id), "the container still runs");
    assert!(volume_exists(id));

    // Starting again opens a new session with the current timeout.
    let r = app.act(t, id, "start").await;
    assert_eq!(r.body["status"], "RUNNING");
    assert!(r.body.get("statusReason").is_none());
    let deadline2 = time(&r.body["sessionExpiresAt"]);
    assert_eq!(
        (deadline2 - time(&r.body["startedAt"])).num_milliseconds(),
        3000
    );
    assert!(deadline2 > deadline);
    assert_eq!(sh_in(id, "cat /workspace/f"), "kept");
    let again = wait_for(&app, t, id, "STOPPED", Duration::from_secs(3) + SLACK).await;
    assert_eq!(again["statusReason"], "session timed out");

    // A stop closes the session; nothing acts on the sandbox afterwards.
    let r = app.act(t, id, "start").await;
    assert!(r.body["sessionExpiresAt"].is_string());
    let r = app.act(t, id, "stop?timeout=5").await;
    assert_eq!(r.body["status"], "STOPPED");
    assert!(r.body.get("sessionExpiresAt").is_none());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let r = app.get(&format!("/api/v1/sandbox/{id}"), t).await;
    assert_eq!(r.body["status"], "STOPPED");
    assert!(r.body.get("statusReason").is_none(), "{:?}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ended_session_terminates_a_non_persistent_sandbox() {
    let (app, sb) = spawn_with_sandbox(
        json!({ "name": "ephemeral", "timeoutMinutes": 0.05, "persistent": false }),
    )
    .await;
    let t = &app.admin_token;
    let id = sb["id"].as_str().unwrap();
    let deadline = time(&sb["sessionExpiresAt"]);
    // Without a timeout nothing happens.
    let forever = app
        .create(t, json!({ "name": "forever", "persistent": false }))
        .await;
    assert!(forever.get("sessionExpiresAt").is_none());

    let done = wait_for(&app, t, id, "TERMINATED", Duration::from_secs(3) + SLACK).await;
    let late = Utc::now() - deadline;
    eprintln!(
        "terminated, as polling saw it, {} ms after the deadline",
        late.num_milliseconds()
    );
    assert!(late.num_seconds() < SLACK.as_secs() as i64);
    assert_eq!(done["statusReason"], "session timed out");
    assert!(done["terminatedAt"].is_string());
    assert!(!container_exists(id), "the container is left");
    assert!(!volume_exists(id), "the volume is left");
    let r = app.get("/api/v1/sandbox", t).await;
    assert_eq!(r.body["total"], 1, "only 'forever' is active: {:?}", r.body);
    assert_eq!(
        app.get(
            &format!("/api/v1/sandbox/{}", forever["id"].as_str().unwrap()),
            t
        )
        .await
        .body["status"],
        "RUNNING"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deadline_that_passed_while_the_server_was_down_is_acted_on_at_start() {
    let mut first = spawn_kept_app().await;
    let instance = first.instance_id();
    let t = first.admin_token.clone();
    // 0.1 minutes = 6 s.
    let kept = first
        .create(&t, json!({ "name": "kept", "timeoutMinutes": 0.1 }))
        .await;
    let dropped = first
        .create(
            &t,
            json!({ "name": "dropped", "timeoutMinutes": 0.1, "persistent": false }),
        )
        .await;
    first.shutdown().await;
    let dir = first.dir.clone();
    drop(first);
    let kept_id = kept["id"].as_str().unwrap();
    let dropped_id = dropped["id"].as_str().unwrap();

    // Past both deadlines with no server: nothing acted.
    let deadline = time(&kept["sessionExpiresAt"]).max(time(&dropped["sessionExpiresAt"]));
    let wait = (deadline - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(2);
    tokio::time::sleep(wait).await;
    assert!(container_running(kept_id) && container_running(dropped_id));

    let second = spawn_app_with(AppOptions {
        dir: Some(dir),
        ..Default::default()
    })
    .await;
    assert_eq!(second.instance_id(), instance);
    let t0 = Instant::now();
    let k = wait_for(&second, &t, kept_id, "STOPPED", SLACK).await;
    assert_eq!(k["statusReason"], "session timed out");
    let d = wait_for(&second, &t, dropped_id, "TERMINATED", SLACK).await;
    assert_eq!(d["statusReason"], "session timed out");
    eprintln!("acted on {:?} after the restart", t0.elapsed());
    assert!(!container_running(kept_id));
    assert!(volume_exists(kept_id));
    assert!(!container_exists(dropped_id) && !volume_exists(dropped_id));
    drop(second);
    cleanup_instance(&instance);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_stop_does_not_delay_other_timeouts() {
    // Ignores SIGTERM: its timeout stop waits out the 30 s grace period.
    let (app, stubborn) = spawn_with_sandbox(json!({
        "name": "stubborn",
        "timeoutMinutes": 0.05,
        "startCommand": "trap '' TERM; while true; do sleep 1; done"
    }))
    .await;
    let t = &app.admin_token;
    let prompt = app
        .create(t, json!({ "name": "prompt", "timeoutMinutes": 0.1 }))
        .await;
    let deadline = time(&prompt["sessionExpiresAt"]);
    let wait = (deadline - Utc::now()).to_std().unwrap_or_default() + SLACK;
    let p = wait_for(&app, t, prompt["id"].as_str().unwrap(), "STOPPED", wait).await;
    assert_eq!(p["statusReason"], "session timed out");
    // The stubborn one is still being stopped (its grace has not run out).
    let s = app
        .get(
            &format!("/api/v1/sandbox/{}", stubborn["id"].as_str().unwrap()),
            t,
        )
        .await;
    assert_eq!(s.body["status"], "RUNNING", "{:?}", s.body);
}
