//! Exec over HTTP against real containers — exit codes, stdin, cwd,
//! env (the sandbox's and the request's), timeouts that kill, streamed
//! output in order, truncation, background processes; another
//! account's sandbox refused and bad fields rejected.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::*;
use crate::sse_client::SseStream;

const WAIT: Duration = Duration::from_secs(20);

async fn exec(app: &TestApp, token: &str, id: &str, body: Value) -> Resp {
    app.post(&format!("/api/v1/sandbox/{id}/exec"), token, body)
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_output_stdin_cwd_and_env_are_faithful() {
    let (app, sb) = spawn_with_sandbox(
        json!({ "environmentVars": { "FROM_SANDBOX": "sb", "OVERRIDDEN": "sb" } }),
    )
    .await;
    let t = &app.admin_token;
    let id = sb["id"].as_str().unwrap();

    let r = exec(
        &app,
        t,
        id,
        json!({ "shell": "echo out; echo err >&2; exit 3" }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["exitCode"], 3);
    assert_eq!(r.body["stdout"], "out\n");
    assert_eq!(r.body["stderr"], "err\n");
    assert_eq!(r.body["timedOut"], false);
    assert_eq!(r.body["truncated"], false);
    assert!(r.body["durationMs"].as_u64().is_some());

    let r = exec(&app, t, id, json!({ "cmd": ["false"] })).await;
    assert_eq!(r.body["exitCode"], 1);
    // argv is not a shell: no expansion.
    let r = exec(&app, t, id, json!({ "cmd": ["echo", "$HOME", "a b"] })).await;
    assert_eq!(r.body["stdout"], "$HOME a b\n");
    let r = exec(&app, t, id, json!({ "cmd": ["/no/such/program"] })).await;
    assert!(
        matches!(r.body["exitCode"].as_i64(), Some(126 | 127)),
        "{:?}",
        r.body
    );

    // stdin, binary-safe as UTF-8 text.
    let r = exec(
        &app,
        t,
        id,
        json!({ "cmd": ["cat"], "stdin": "line one\nzwei 🦀\n" }),
    )
    .await;
    assert_eq!(r.body["stdout"], "line one\nzwei 🦀\n");
    let r = exec(
        &app,
        t,
        id,
        json!({ "cmd": ["wc", "-c"], "stdin": "x".repeat(200_000) }),
    )
    .await;
    assert_eq!(r.body["stdout"].as_str().unwrap().trim(), "200000");

    // cwd: absolute, relative to /workspace, default /workspace, missing → 400.
    let r = exec(&app, t, id, json!({ "cmd": ["pwd"], "cwd": "/tmp" })).await;
    assert_eq!(r.body["stdout"], "/tmp\n");
    let r = exec(&app, t, id, json!({ "cmd": ["pwd"] })).await;
    assert_eq!(r.body["stdout"], "/workspace\n");
    exec(
        &app,
        t,
        id,
        json!({ "shell": "mkdir -p /workspace/sub/dir" }),
    )
    .await;
    let r = exec(&app, t, id, json!({ "cmd": ["pwd"], "cwd": "sub/dir" })).await;
    assert_eq!(r.body["stdout"], "/workspace/sub/dir\n");
    let r = exec(&app, t, id, json!({ "cmd": ["pwd"], "cwd": "/nope/never" })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.error_fields(), vec!["cwd"]);

    // env: the sandbox's are the defaults, the request's win.
    let r = exec(
        &app,
        t,
        id,
        json!({
            "shell": "echo \"$FROM_SANDBOX|$OVERRIDDEN|$ONLY_REQUEST\"",
            "env": { "OVERRIDDEN": "req", "ONLY_REQUEST": "x y=z" }
        }),
    )
    .await;
    assert_eq!(r.body["stdout"], "sb|req|x y=z\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_kills_the_process_and_says_so() {
    let (app, id) = spawn_with_sandbox_id(json!({})).await;
    let t = &app.admin_token;

    let t0 = Instant::now();
    let r = exec(
        &app,
        t,
        &id,
        json!({ "shell": "echo started; sleep 321 & sleep 322", "timeoutSeconds": 1 }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    assert_eq!(r.body["timedOut"], true);
    assert_eq!(r.body["exitCode"], Value::Null);
    assert_eq!(r.body["stdout"], "started\n");
    assert!(
        r.body["message"].as_str().unwrap().contains("timeout"),
        "{:?}",
        r.body
    );
    let procs = processes(&id);
    assert!(!procs.contains("sleep 32"), "{procs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn output_beyond_the_limit_is_cut_and_flagged() {
    let (app, id) = spawn_with_sandbox_id(json!({})).await;
    let t = &app.admin_token;
    let limit = app.state.config.service.max_exec_output_bytes;
    let r = exec(
        &app,
        t,
        &id,
        json!({ "shell": format!("head -c {} /dev/zero | tr '\\0' a; echo small >&2", limit + 500_000) }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["truncated"], true);
    assert_eq!(r.body["stdout"].as_str().unwrap().len(), limit);
    assert_eq!(r.body["stderr"], "small\n");
    assert_eq!(r.body["exitCode"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_exec_sends_output_in_order_then_the_exit() {
    let (app, id) = spawn_with_sandbox_id(json!({ "environmentVars": { "WHO": "sandbox" } })).await;
    let t = &app.admin_token;
    let url = format!("{}/api/v1/sandbox/{id}/exec", app.base);

    let mut s = SseStream::open(app.http.post(&url).bearer_auth(t).json(&json!({
        "shell": "echo one; sleep 0.3; echo \"two $WHO\" >&2; sleep 0.3; printf 'drei 🦀\\nno newline'; cat; exit 4",
        "stdin": "from stdin",
    })))
    .await;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(s.headers["content-type"], "text/event-stream");
    let events = s.rest(WAIT).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds.last(), Some(&"exit"), "{events:?}");
    let mut stdout = String::new();
    let mut order = Vec::new();
    for e in &events[..events.len() - 1] {
        let chunk: String = serde_json::from_str(&e.data).expect("chunks are JSON strings");
        if e.event == "stdout" {
            stdout.push_str(&chunk);
        }
        order.push((e.event.clone(), chunk));
    }
    assert_eq!(order[0], ("stdout".to_string(), "one\n".to_string()));
    assert_eq!(
        order[1],
        ("stderr".to_string(), "two sandbox\n".to_string())
    );
    assert_eq!(stdout, "one\ndrei 🦀\nno newlinefrom stdin");
    let exit: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(exit["exitCode"], 4);
    assert_eq!(exit["timedOut"], false);
    assert!(exit["durationMs"].as_u64().unwrap() >= 600, "{exit}");

    // A streamed timeout.
    let mut s = SseStream::open(app.http.post(&url).bearer_auth(t).json(&json!({
        "shell": "echo up; sleep 331", "timeoutSeconds": 1,
    })))
    .await;
    let events = s.rest(WAIT).await;
    let exit: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(events.last().unwrap().event, "exit");
    assert_eq!(exit["timedOut"], true);
    assert_eq!(exit["exitCode"], Value::Null);

    // Closing the stream kills the process.
    let mut s = SseStream::open(app.http.post(&url).bearer_auth(t).json(&json!({
        "shell": "echo up; sleep 332",
    })))
    .await;
    let first = s.next_within(WAIT).await.unwrap();
    assert_eq!(first.data, "\"up\\n\"");
    drop(s);
    let ended = eventually(Duration::from_secs(10), || async {
        !processes(&id).contains("sleep 332")
    })
    .await;
    assert!(ended.is_some(), "an abandoned exec is still running");
}

#[tokio::test(flavor = "multi_thread")]
async fn background_processes_can_be_listed_waited_for_and_killed() {
    let (app, id) = spawn_with_sandbox_id(json!({})).await;
    let t = &app.admin_token;
    let base = format!("/api/v1/sandbox/{id}/processes");

    let started = app
        .background(
            t,
            &id,
            json!({ "shell": "echo started; sleep 0.5; echo done >&2; exit 7" }),
        )
        .await;
    let short = started["processId"].as_str().unwrap().to_owned();
    assert_eq!(short.len(), 12);
    assert_eq!(started["status"], "running");
    assert_eq!(
        started["command"],
        json!([
            "/bin/sh",
            "-c",
            "echo started; sleep 0.5; echo done >&2; exit 7"
        ])
    );

    let long = app
        .background_id(t, &id, json!({ "cmd": ["sleep", "341"] }))
        .await;

    let r = app.get(&base, t).await;
    let listed: Vec<&str> = str_list(&r.body["processes"], "processId");
    assert_eq!(listed, vec![short.as_str(), long.as_str()]);

    let r = app
        .post(&format!("{base}/{short}/wait?timeout=15"), t, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "exited");
    assert_eq!(r.body["exitCode"], 7);
    assert_eq!(r.body["stdout"], "started\n");
    assert_eq!(r.body["stderr"], "done\n");
    assert!(r.body["finishedAt"].is_string());
    let r = app.get(&format!("{base}/{short}"), t).await;
    assert_eq!(r.body["status"], "exited");

    // A wait that runs out returns the process still running.
    let r = app
        .post(&format!("{base}/{long}/wait?timeout=1"), t, json!({}))
        .await;
    assert_eq!(r.body["status"], "running");
    assert!(processes(&id).contains("sleep 341"));

    let r = app.delete(&format!("{base}/{long}"), t).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "killed");
    assert!(!processes(&id).contains("sleep 341"));
    // Killing again is harmless; the POST form works too.
    let r = app.post(&format!("{base}/{long}/kill"), t, json!({})).await;
    assert_eq!(r.body["status"], "killed");

    // A background process with a timeout.
    let timed = app
        .background_id(t, &id, json!({ "shell": "sleep 342", "timeoutSeconds": 1 }))
        .await;
    let r = app
        .post(&format!("{base}/{timed}/wait?timeout=15"), t, json!({}))
        .await;
    assert_eq!(r.body["status"], "timedOut");
    assert!(!processes(&id).contains("sleep 342"));

    // Unknown and malformed process ids.
    let r = app.get(&format!("{base}/abcdefghijkl"), t).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = app.get(&format!("{base}/NOPE"), t).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["process_id"]);
    let r = app
        .post(&format!("{base}/{short}/wait?timeout=99999"), t, json!({}))
        .await;
    assert_eq!(r.error_fields(), vec!["timeout"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_exec_verb_is_forbidden_on_another_accounts_sandbox() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice", "bob"]).await;
    let id = app.create_id(&alice, json!({})).await;
    let pid = app
        .background_id(&alice, &id, json!({ "cmd": ["sleep", "351"] }))
        .await;

    for (method, path, body) in [
        (
            Method::POST,
            format!("/api/v1/sandbox/{id}/exec"),
            json!({ "cmd": ["true"] }),
        ),
        (
            Method::GET,
            format!("/api/v1/sandbox/{id}/processes"),
            json!(null),
        ),
        (
            Method::GET,
            format!("/api/v1/sandbox/{id}/processes/{pid}"),
            json!(null),
        ),
        (
            Method::POST,
            format!("/api/v1/sandbox/{id}/processes/{pid}/wait?timeout=0"),
            json!({}),
        ),
        (
            Method::POST,
            format!("/api/v1/sandbox/{id}/processes/{pid}/kill"),
            json!({}),
        ),
        (
            Method::DELETE,
            format!("/api/v1/sandbox/{id}/processes/{pid}"),
            json!(null),
        ),
        (
            Method::GET,
            format!("/api/v1/sandbox/{id}/logs"),
            json!(null),
        ),
    ] {
        let body = (!body.is_null()).then_some(body);
        let r = app.call(method.clone(), &path, Some(&bob), body).await;
        r.assert_status(StatusCode::FORBIDDEN, format!("{method} {path}"));
        assert_eq!(r.code(), "forbidden");
    }
    // Even a streamed exec.
    let s = SseStream::open(
        app.http
            .post(format!("{}/api/v1/sandbox/{id}/exec", app.base))
            .bearer_auth(&bob)
            .json(&json!({ "cmd": ["true"] })),
    )
    .await;
    assert_eq!(s.status, StatusCode::FORBIDDEN);

    // Alice's process still runs, untouched.
    let r = app
        .get(&format!("/api/v1/sandbox/{id}/processes/{pid}"), &alice)
        .await;
    assert_eq!(r.body["status"], "running");
    assert!(processes(&id).contains("sleep 351"));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_exec_requests_are_400s_naming_the_field_and_a_stopped_sandbox_409() {
    let (app, id) = spawn_with_sandbox_id(json!({})).await;
    let t = &app.admin_token;

    for (body, field) in [
        (json!({}), "cmd"),
        (json!({ "cmd": ["ls"], "shell": "ls" }), "cmd"),
        (json!({ "cmd": [] }), "cmd"),
        (json!({ "cmd": "ls -l" }), "cmd"),
        (json!({ "cmd": ["ls", 5] }), "cmd[1]"),
        (json!({ "shell": "" }), "shell"),
        (
            json!({ "shell": "ls", "timeoutSeconds": 0 }),
            "timeoutSeconds",
        ),
        (
            json!({ "shell": "ls", "timeoutSeconds": -1 }),
            "timeoutSeconds",
        ),
        (
            json!({ "shell": "ls", "timeoutSeconds": "soon" }),
            "timeoutSeconds",
        ),
        (
            json!({ "shell": "ls", "env": { "BAD-NAME": "x" } }),
            "env.BAD-NAME",
        ),
        (json!({ "shell": "ls", "env": { "A": 1 } }), "env.A"),
        (json!({ "shell": "ls", "cwd": "" }), "cwd"),
        (json!({ "shell": "ls", "cwd": "a\u{0}b" }), "cwd"),
        (json!({ "shell": "ls", "background": "yes" }), "background"),
        (json!({ "shell": "ls", "privileged": true }), "privileged"),
    ] {
        let r = exec(&app, t, &id, body.clone()).await;
        r.assert_status(StatusCode::BAD_REQUEST, &body);
        assert_eq!(r.error_fields(), vec![field], "{body}");
    }
    let r = app
        .bodiless(Method::POST, &format!("/api/v1/sandbox/{id}/exec"), t)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["body"]);
    // Too large.
    let r = exec(
        &app,
        t,
        &id,
        json!({ "cmd": ["cat"], "stdin": "x".repeat(17 * 1024 * 1024) }),
    )
    .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{:?}", r.code());

    let r = app.act(t, &id, "stop?timeout=1").await;
    assert_eq!(r.status, StatusCode::OK);
    let r = exec(&app, t, &id, json!({ "cmd": ["true"] })).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("sandbox is not running"));
    let r = exec(&app, t, &id, json!({ "cmd": ["true"], "background": true })).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
}
