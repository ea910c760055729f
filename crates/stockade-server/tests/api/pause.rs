//! Pause and resume on real Docker: a frozen sandbox keeps its processes
//! (same PIDs, same memory) and uses no CPU; calls into it are refused
//! with `sandbox_paused` unless its lifecycle auto-resumes; the end of a
//! session or an idle spell pauses it when its lifecycle says so; and what
//! a hostile tenant or a bad day sends gets a 4xx, never a half-made state.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// A background process that writes its PID once and a growing counter
/// every 100 ms (each count replaces the file whole, so a read never sees
/// it half-written).
const COUNTER: &str = "echo $$ > /tmp/pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/n.new; \
     mv /tmp/n.new /tmp/n; usleep 100000; done";

async fn exec(app: &TestApp, t: &str, id: &str, shell: &str) -> crate::helpers::Resp {
    app.sandbox_post(t, id, "exec", json!({ "shell": shell }))
        .await
}

async fn out(app: &TestApp, t: &str, id: &str, shell: &str) -> String {
    let body = exec(app, t, id, shell).await.expect(StatusCode::OK);
    assert_eq!(body["exitCode"], 0, "{body}");
    body["stdout"].as_str().unwrap().trim().to_owned()
}

/// A file's text through the files API.
async fn read(app: &TestApp, t: &str, id: &str, path: &str) -> (StatusCode, String) {
    let r = app
        .http
        .get(format!(
            "{}/api/v1/sandbox/{id}/files?path={path}",
            app.base
        ))
        .bearer_auth(t)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap().trim().to_owned())
}

fn paused_in_docker(id: &str) -> bool {
    inspect(id, "{{.State.Paused}}") == ["true"]
}

async fn status(app: &TestApp, t: &str, id: &str) -> Value {
    app.get_sandbox(t, id).await.expect(StatusCode::OK)
}

/// Polls until the sandbox's status is `want`; its record then.
async fn wait_for(app: &TestApp, t: &str, id: &str, want: &str, within: Duration) -> Value {
    let t0 = Instant::now();
    loop {
        let sb = status(app, t, id).await;
        if sb["status"] == want {
            return sb;
        }
        assert!(
            t0.elapsed() < within,
            "{id} still {} after {:?}, wanted {want}: {sb}",
            sb["status"],
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_sandbox_keeps_its_processes_and_resumes_where_it_was() {
    let app = spawn_app().await;
    let (t, id) = app
        .owned_sandbox("pauser", json!({ "name": "frozen" }))
        .await;
    let stranger = app.new_account("stranger").await;
    app.background(&t, &id, json!({ "shell": COUNTER })).await;
    let pid = loop {
        let (code, pid) = read(&app, &t, &id, "/tmp/pid").await;
        if code == StatusCode::OK && !pid.is_empty() {
            break pid;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // Another account can neither pause nor resume it.
    let r = app.act(&stranger, &id, "pause").await;
    assert!(
        matches!(r.status, StatusCode::FORBIDDEN | StatusCode::NOT_FOUND),
        "{:?}",
        r.body
    );
    // Resuming a running sandbox is a conflict.
    app.act(&t, &id, "resume")
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");

    let paused = app.act(&t, &id, "pause").await.expect(StatusCode::OK);
    assert_eq!(paused["status"], "PAUSED", "{paused}");
    assert!(paused["pausedAt"].is_string(), "{paused}");
    assert!(paused.get("sessionExpiresAt").is_none(), "{paused}");
    assert!(paused_in_docker(&id));
    // Paused twice: a conflict, and still paused.
    app.act(&t, &id, "pause")
        .await
        .assert_error(StatusCode::CONFLICT, "conflict");
    assert!(paused_in_docker(&id));

    // Frozen: the counter does not move, and it uses no CPU.
    let (_, before) = read(&app, &t, &id, "/tmp/n").await;
    let cpu = |id: &str| -> u64 {
        let full = inspect(id, "{{.Id}}").remove(0);
        std::fs::read_to_string(format!(
            "/sys/fs/cgroup/cpuacct/docker/{full}/cpuacct.usage"
        ))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
    };
    let cpu_before = cpu(&id);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (code, after) = read(&app, &t, &id, "/tmp/n").await;
    assert_eq!(
        code,
        StatusCode::OK,
        "files are read as on a stopped sandbox"
    );
    assert_eq!(before, after, "the counter moved while paused");
    assert_eq!(cpu(&id), cpu_before, "a paused sandbox used CPU");

    // Calls into it are refused, saying how to wake it, and leave it paused.
    let r = exec(&app, &t, &id, "true").await;
    r.assert_error(StatusCode::CONFLICT, "sandbox_paused");
    assert!(r.message().contains("resume"), "{}", r.message());
    let r = app
        .get(&format!("/api/v1/sandbox/{id}/processes"), &t)
        .await;
    r.assert_error(StatusCode::CONFLICT, "sandbox_paused");
    assert_eq!(status(&app, &t, &id).await["status"], "PAUSED");
    // The list filter knows the state.
    let list = app
        .get("/api/v1/sandbox?status=PAUSED", &t)
        .await
        .expect(StatusCode::OK);
    assert_eq!(list["total"], 1, "{list}");

    let resumed = app.act(&t, &id, "resume").await.expect(StatusCode::OK);
    assert_eq!(resumed["status"], "RUNNING", "{resumed}");
    assert!(resumed.get("pausedAt").is_none(), "{resumed}");
    assert_eq!(
        resumed["startedAt"], paused["startedAt"],
        "the same run goes on"
    );
    assert!(!paused_in_docker(&id));
    // The same process, still counting from where it was.
    assert_eq!(
        out(&app, &t, &id, &format!("kill -0 {pid} && echo alive")).await,
        "alive"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later: u64 = read(&app, &t, &id, "/tmp/n").await.1.parse().unwrap();
    assert!(
        later > after.parse::<u64>().unwrap(),
        "the counter did not go on"
    );

    // Stop and delete take a paused sandbox; start resumes one.
    app.act(&t, &id, "pause").await.expect(StatusCode::OK);
    let started = app.act(&t, &id, "start").await.expect(StatusCode::OK);
    assert_eq!(started["status"], "RUNNING");
    // Start resumed it: the counter's process is the same one.
    let line = format!("kill -0 {pid} && echo same");
    assert_eq!(out(&app, &t, &id, &line).await, "same");
    app.act(&t, &id, "pause").await.expect(StatusCode::OK);
    let stopped = app
        .sandbox_post(&t, &id, "stop?timeout=1", json!({}))
        .await
        .expect(StatusCode::OK);
    assert_eq!(stopped["status"], "STOPPED", "{stopped}");
    assert_eq!(inspect(&id, "{{.State.Running}}"), ["false"]);
    // A stopped sandbox is not paused.
    app.act(&t, &id, "pause")
        .await
        .assert_error(StatusCode::CONFLICT, "sandbox_not_running");
    app.act(&t, &id, "start").await.expect(StatusCode::OK);
    app.act(&t, &id, "pause").await.expect(StatusCode::OK);
    app.delete_sandbox(&t, &id, "").await.expect(StatusCode::OK);
    assert!(!container_exists(&id));
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshots_and_forks_of_a_paused_sandbox_take_its_files() {
    let app = spawn_app().await;
    let (t, id) = app
        .owned_sandbox("snapper", json!({ "name": "snap-paused" }))
        .await;
    out(&app, &t, &id, "echo kept > /workspace/f").await;
    app.background(&t, &id, json!({ "shell": COUNTER })).await;
    app.act(&t, &id, "pause").await.expect(StatusCode::OK);
    let snap = app.snapshot_id(&t, &id, "while-paused").await;
    // It is still paused, and a sandbox made from the snapshot has the files
    // (not the processes: a snapshot keeps no memory).
    assert_eq!(status(&app, &t, &id).await["status"], "PAUSED");
    assert!(paused_in_docker(&id));
    let from = app
        .create_id(
            &t,
            json!({ "name": "from-snap", "source": snapshot_source(&snap) }),
        )
        .await;
    assert_eq!(out(&app, &t, &from, "cat /workspace/f").await, "kept");
    // Its files came along (the counter's too), its processes did not.
    let first = out(&app, &t, &from, "cat /tmp/n").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        out(&app, &t, &from, "cat /tmp/n").await,
        first,
        "a process came along"
    );
    app.delete_sandbox(&t, &from, "")
        .await
        .expect(StatusCode::OK);
    app.delete_sandbox(&t, &id, "").await.expect(StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycles_pause_at_the_timeout_or_when_idle_and_wake_on_use() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();

    // Bad lifecycles are refused, naming the field, and make nothing.
    for (body, field) in [
        (json!({ "onTimeout": "hibernate" }), "lifecycle.onTimeout"),
        (
            json!({ "idleTimeoutMinutes": -1 }),
            "lifecycle.idleTimeoutMinutes",
        ),
        (json!({ "autoResume": "yes" }), "lifecycle"),
        (json!({ "whenIdle": "pause" }), "lifecycle"),
    ] {
        let r = app
            .try_create(&t, json!({ "name": "bad-lifecycle", "lifecycle": body }))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {:?}", r.body);
        assert!(
            r.error_fields().iter().any(|f| f.starts_with(field)) || r.message().contains(field),
            "{body}: {:?}",
            r.body
        );
    }
    let list = app.get("/api/v1/sandbox", &t).await.expect(StatusCode::OK);
    assert_eq!(list["total"], 0, "{list}");

    // The timeout pauses (0.05 min = 3 s); no auto-resume: use is refused.
    let timed = app
        .create(
            &t,
            json!({ "name": "timed", "timeoutMinutes": 0.05, "lifecycle": { "onTimeout": "pause" } }),
        )
        .await;
    assert_eq!(timed["lifecycle"]["onTimeout"], "pause", "{timed}");
    assert_eq!(timed["lifecycle"]["autoResume"], false, "{timed}");
    let timed_id = timed["id"].as_str().unwrap().to_owned();
    app.background(&t, &timed_id, json!({ "shell": COUNTER }))
        .await;

    // Idle for 3 s pauses; auto-resume wakes it on the next command.
    let idle = app
        .create(
            &t,
            json!({ "name": "idler", "lifecycle": {
                "onTimeout": "pause", "autoResume": true, "idleTimeoutMinutes": 0.05 } }),
        )
        .await;
    let idle_id = idle["id"].as_str().unwrap().to_owned();
    assert!(idle["sessionExpiresAt"].is_string(), "{idle}");
    // Used every second for 5 s: never idle for 3 s, so it stays running.
    for _ in 0..5 {
        out(&app, &t, &idle_id, "true").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(status(&app, &t, &idle_id).await["status"], "RUNNING");
    let pid = out(&app, &t, &idle_id, "sleep 1000 >/dev/null 2>&1 & echo $!").await;

    let slack = Duration::from_secs(15);
    let p = wait_for(&app, &t, &timed_id, "PAUSED", slack).await;
    assert_eq!(p["statusReason"], "session timed out", "{p}");
    assert!(paused_in_docker(&timed_id));
    exec(&app, &t, &timed_id, "true")
        .await
        .assert_error(StatusCode::CONFLICT, "sandbox_paused");

    let p = wait_for(&app, &t, &idle_id, "PAUSED", slack).await;
    assert!(p["statusReason"].as_str().unwrap().contains("idle"), "{p}");
    let started = Instant::now();
    assert_eq!(
        out(&app, &t, &idle_id, &format!("kill -0 {pid} && echo same")).await,
        "same",
        "auto-resume kept the process"
    );
    eprintln!("auto-resume + exec: {:?}", started.elapsed());
    let woke = status(&app, &t, &idle_id).await;
    assert_eq!(woke["status"], "RUNNING", "{woke}");
    assert!(
        woke["sessionExpiresAt"].is_string(),
        "a new session: {woke}"
    );

    for id in [&timed_id, &idle_id] {
        app.delete_sandbox(&t, id, "").await.expect(StatusCode::OK);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_sandbox_stays_paused_across_a_restart_and_one_thawed_outside_is_seen() {
    let app = spawn_kept_app().await;
    let t = app.admin_token.clone();
    let id = app.create_id(&t, json!({ "name": "kept-paused" })).await;
    app.background(&t, &id, json!({ "shell": COUNTER })).await;
    app.act(&t, &id, "pause").await.expect(StatusCode::OK);

    let app = app.restart().await;
    let sb = status(&app, &t, &id).await;
    assert_eq!(sb["status"], "PAUSED", "{sb}");
    assert!(paused_in_docker(&id));

    // Thawed with Docker's own CLI: reconciliation (at every start, and
    // every half minute) records it as running.
    assert!(docker(&["unpause", &format!("stockade-{id}")])
        .status
        .success());
    let app = app.restart().await;
    wait_for(&app, &t, &id, "RUNNING", Duration::from_secs(20)).await;
    // Frozen outside: recorded as paused, with the reason.
    assert!(docker(&["pause", &format!("stockade-{id}")])
        .status
        .success());
    let app = app.restart().await;
    let p = wait_for(&app, &t, &id, "PAUSED", Duration::from_secs(20)).await;
    assert!(
        p["statusReason"].as_str().unwrap().contains("outside"),
        "{p}"
    );
    // Killed while paused (as a Docker restart does): STOPPED, files kept,
    // and the record says why.
    out_of_band_kill(&id);
    let app = app.restart().await;
    let s = wait_for(&app, &t, &id, "STOPPED", Duration::from_secs(20)).await;
    assert!(
        s["statusReason"]
            .as_str()
            .unwrap()
            .contains("while it was paused"),
        "{s}"
    );
    let (code, n) = read(&app, &t, &id, "/tmp/n").await;
    assert_eq!(code, StatusCode::OK);
    assert!(n.parse::<u64>().is_ok(), "{n}");
    app.delete_sandbox(&t, &id, "").await.expect(StatusCode::OK);
}

/// Stops a frozen container behind Stockade's back, as the engine does to
/// every container when it shuts down.
fn out_of_band_kill(id: &str) {
    let out = docker(&["kill", &format!("stockade-{id}")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_sandbox_still_holds_its_memory_in_the_quota() {
    let app = spawn_app().await;
    let (account, t) = app.new_account_with_id("holder").await;
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/api/v1/accounts/{account}/quota"),
            Some(&app.admin_token),
            Some(json!({ "memoryGB": 1 })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let id = app
        .create_id(&t, json!({ "name": "holds", "memoryGB": 1 }))
        .await;
    app.act(&t, &id, "pause").await.expect(StatusCode::OK);
    // Its memory stays allocated: a second one does not fit.
    let r = app
        .try_create(&t, json!({ "name": "second", "memoryGB": 1 }))
        .await;
    r.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    // Stopped, it holds nothing.
    app.sandbox_post(&t, &id, "stop?timeout=0", json!({}))
        .await
        .expect(StatusCode::OK);
    let second = app
        .try_create(&t, json!({ "name": "second", "memoryGB": 1 }))
        .await;
    assert_eq!(second.status, StatusCode::CREATED, "{:?}", second.body);
    let second = second.body["id"].as_str().unwrap().to_owned();
    for id in [&id, &second] {
        app.delete_sandbox(&t, id, "").await.expect(StatusCode::OK);
    }
}
