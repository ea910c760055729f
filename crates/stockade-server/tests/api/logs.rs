//! Logs as JSON and as Server-Sent Events — event types, tail, live
//! lines, resuming with `Last-Event-ID` without duplicates or gaps,
//! multi-byte text, the end of a stopped sandbox's stream; another
//! account's sandbox refused and bad fields rejected.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::sse_client::{SseEvent, SseStream};

const TICKER: &str =
    "echo out; echo err >&2; i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done";
const WAIT: Duration = Duration::from_secs(15);

fn logs_url(app: &TestApp, id: &str, query: &str) -> String {
    format!("{}/api/v1/sandbox/{id}/logs{query}", app.base)
}

async fn open(app: &TestApp, token: &str, id: &str, query: &str) -> SseStream {
    SseStream::open(app.http.get(logs_url(app, id, query)).bearer_auth(token)).await
}

/// The number of a `tick N` line.
fn tick(text: &str) -> Option<u64> {
    text.strip_prefix("tick ")?.parse().ok()
}

/// Reads events until `n` ticks were seen; returns every event read.
async fn read_ticks(s: &mut SseStream, n: usize) -> Vec<SseEvent> {
    let mut events = Vec::new();
    while events
        .iter()
        .filter(|e: &&SseEvent| tick(&e.data).is_some())
        .count()
        < n
    {
        let e = s.next_within(WAIT).await.expect("the stream is open");
        events.push(e);
    }
    events
}

fn ticks(events: &[SseEvent]) -> Vec<u64> {
    events.iter().filter_map(|e| tick(&e.data)).collect()
}

fn assert_consecutive(ticks: &[u64]) {
    for w in ticks.windows(2) {
        assert_eq!(w[1], w[0] + 1, "a gap or duplicate in {ticks:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stream_types_stdout_and_stderr_lines_and_gives_them_ids() {
    let (app, sb) = spawn_with_sandbox(json!({ "startCommand": TICKER })).await;
    let t = &app.admin_token;
    let id = sb["id"].as_str().unwrap();
    assert_eq!(sb["logsUrl"], format!("/api/v1/sandbox/{id}/logs"));

    let mut s = open(&app, t, id, "").await;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(s.headers["content-type"], "text/event-stream");
    let events = read_ticks(&mut s, 3).await;
    let out = events.iter().find(|e| e.data == "out").expect("out");
    let err = events.iter().find(|e| e.data == "err").expect("err");
    assert_eq!(out.event, "stdout");
    assert_eq!(err.event, "stderr");
    for e in &events {
        assert!(
            e.event == "stdout" || e.event == "stderr",
            "{e:?} is a line event"
        );
        let id = e.id.as_deref().expect("every line has an id");
        let (ns, seq) = id.split_once('-').expect("<ns>-<seq>");
        assert!(
            ns.parse::<i64>().is_ok() && seq.parse::<u32>().is_ok(),
            "{id}"
        );
        if tick(&e.data).is_some() {
            assert_eq!(e.event, "stdout");
        }
    }
    let mut ids: Vec<&str> = events.iter().filter_map(|e| e.id.as_deref()).collect();
    ids.dedup();
    assert_eq!(ids.len(), events.len(), "ids are unique");
    assert_consecutive(&ticks(&events));

    // follow=true alone (no Accept header) streams too.
    let resp = app
        .http
        .get(logs_url(&app, id, "?follow=true&tail=1"))
        .bearer_auth(t)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
}

#[tokio::test(flavor = "multi_thread")]
async fn tail_then_follow_then_resume_without_duplicates_or_gaps() {
    let (app, id) = spawn_with_sandbox_id(json!({ "startCommand": TICKER })).await;
    let t = &app.admin_token;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // JSON: the last `tail` lines, oldest first, with ids.
    let r = app
        .get(&format!("/api/v1/sandbox/{id}/logs?tail=3"), t)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let lines = r.body["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 3);
    assert_eq!(r.body["sandboxId"], id);
    assert_eq!(r.body["lastEventId"], lines[2]["id"]);
    assert_eq!(r.body["truncated"], false);
    assert_eq!(r.body["hasMore"], false);
    let json_ticks: Vec<u64> = lines
        .iter()
        .filter_map(|l| tick(l["text"].as_str().unwrap()))
        .collect();
    assert_eq!(json_ticks.len(), 3);
    assert_consecutive(&json_ticks);
    assert_eq!(lines[0]["stream"], "stdout");
    assert!(lines[0]["timestamp"].as_str().unwrap().ends_with('Z'));

    // JSON after a line: what came since, and the same ids again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = lines[0]["id"].as_str().unwrap();
    let r = app
        .get(
            &format!("/api/v1/sandbox/{id}/logs?lastEventId={after}&tail=2"),
            t,
        )
        .await;
    let next = r.body["lines"].as_array().unwrap();
    assert_eq!(next.len(), 2);
    assert_eq!(next[0]["id"], lines[1]["id"]);
    assert_eq!(next[1]["id"], lines[2]["id"]);
    assert_eq!(r.body["hasMore"], true);

    // SSE: the tail first, then live lines.
    let mut s = open(&app, t, &id, "?tail=2").await;
    let first = read_ticks(&mut s, 6).await;
    let first_ticks = ticks(&first);
    assert_consecutive(&first_ticks);
    assert!(first_ticks[0] >= json_ticks[2], "{first_ticks:?}");
    let last_id = first.last().unwrap().id.clone().unwrap();
    let last_tick = *first_ticks.last().unwrap();
    drop(s);

    // Ticks go on while nobody listens; resume with Last-Event-ID.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut s = SseStream::open(
        app.http
            .get(logs_url(&app, &id, "?tail=50"))
            .bearer_auth(t)
            .header("Last-Event-ID", &last_id),
    )
    .await;
    let resumed = read_ticks(&mut s, 8).await;
    let resumed_ticks = ticks(&resumed);
    assert_eq!(
        resumed_ticks[0],
        last_tick + 1,
        "resumes right after the last event: {resumed_ticks:?}"
    );
    assert_consecutive(&resumed_ticks);
    assert!(
        resumed.iter().all(|e| e.data != "out" && e.data != "err"),
        "nothing older"
    );
    drop(s);

    // The same with the query parameter.
    let mid = resumed[3].id.clone().unwrap();
    let mut s = open(&app, t, &id, &format!("?lastEventId={mid}")).await;
    let again = read_ticks(&mut s, 3).await;
    assert_eq!(ticks(&again)[0], resumed_ticks[3] + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn multibyte_and_long_lines_arrive_whole() {
    let (app, id) = spawn_with_sandbox_id(json!({ "startCommand":
                "printf 'grüße 🦀 ünïcødé\\n'; printf '日本語テキスト\\n' >&2; \
                 head -c 40000 /dev/zero | tr '\\0' y; echo; echo; echo after; sleep 86400" }))
    .await;
    let t = &app.admin_token;
    let mut lines: Vec<Value> = Vec::new();
    for _ in 0..50 {
        let r = app.get(&format!("/api/v1/sandbox/{id}/logs"), t).await;
        lines = r.body["lines"].as_array().unwrap().clone();
        if lines.iter().any(|l| l["text"] == "after") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let texts: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["stream"].as_str().unwrap(), l["text"].as_str().unwrap()))
        .collect();
    assert!(texts.contains(&("stdout", "grüße 🦀 ünïcødé")), "{texts:?}");
    assert!(texts.contains(&("stderr", "日本語テキスト")));
    let long = texts.iter().find(|(_, t)| t.starts_with('y')).unwrap();
    assert_eq!(long.1, "y".repeat(40000), "a 40 kB line is one line");
    assert!(texts.contains(&("stdout", "")), "an empty line is a line");

    // The same through SSE, the empty line included.
    let mut s = open(&app, t, &id, "?follow=false&tail=all_invalid").await;
    assert_eq!(s.status, StatusCode::BAD_REQUEST);
    drop(s);
    s = open(&app, t, &id, "?follow=false&tail=10").await;
    let events = s.rest(WAIT).await;
    let end = events.last().unwrap();
    assert_eq!(end.event, "end");
    let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
    assert!(data.contains(&"grüße 🦀 ünïcødé"), "{data:?}");
    assert!(data.contains(&""));
    assert!(data.contains(&"after"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_sandboxs_stream_ends_and_its_logs_stay_readable() {
    let (app, id) = spawn_with_sandbox_id(
        json!({ "startCommand": format!("trap 'echo bye; exit 0' TERM; {TICKER}") }),
    )
    .await;
    let t = &app.admin_token;
    let mut s = open(&app, t, &id, "?tail=0").await;
    read_ticks(&mut s, 2).await;

    let r = app.act(t, &id, "stop?timeout=5").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let rest = s.rest(WAIT).await;
    let end = rest.last().expect("an end event");
    assert_eq!(end.event, "end");
    let reason: Value = serde_json::from_str(&end.data).unwrap();
    assert_eq!(reason["reason"], "sandbox stopped");
    assert!(rest.iter().any(|e| e.data == "bye"), "{rest:?}");

    // Stopped: the logs are still there, and a stream ends at once.
    let r = app
        .get(&format!("/api/v1/sandbox/{id}/logs?tail=1"), t)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["lines"][0]["text"], "bye");
    let mut s = open(&app, t, &id, "?tail=1").await;
    let events = s.rest(WAIT).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].data, "bye");
    assert_eq!(events[1].event, "end");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_stream_gets_keep_alive_comments() {
    let (app, id) = spawn_with_sandbox_id(json!({})).await;
    let t = &app.admin_token;
    // A second server on the same database, with a short keep-alive.
    let server = app
        .second_server(|c| c.sse_keep_alive = Duration::from_millis(200))
        .await;
    let url = format!("http://{}/api/v1/sandbox/{id}/logs?tail=0", server.addr);
    let mut s = SseStream::open(app.http.get(url).bearer_auth(t)).await;
    assert_eq!(s.status, StatusCode::OK);
    let events = s.until_comments(3, WAIT).await;
    assert!(events.is_empty(), "{events:?}");
    server.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openapi_document_describes_logs_and_exec() {
    let app = spawn_app().await;
    let r = app.get("/api/v1/openapi.json", &app.admin_token).await;
    let paths = &r.body["paths"];
    for path in [
        "/api/v1/sandbox/{id}/logs",
        "/api/v1/sandbox/{id}/exec",
        "/api/v1/sandbox/{id}/processes",
        "/api/v1/sandbox/{id}/processes/{pid}",
        "/api/v1/sandbox/{id}/processes/{pid}/wait",
    ] {
        assert!(paths.get(path).is_some(), "{path} is documented");
    }
    let logs = &paths["/api/v1/sandbox/{id}/logs"]["get"]["responses"]["200"]["content"];
    assert!(logs.get("text/event-stream").is_some(), "{logs}");
    assert!(logs.get("application/json").is_some(), "{logs}");
    for schema in [
        "ExecRequest",
        "ExecResponse",
        "ProcessResponse",
        "LogsResponse",
    ] {
        assert!(
            r.body["components"]["schemas"].get(schema).is_some(),
            "{schema}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_are_private_and_bad_parameters_are_named() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice", "bob"]).await;
    let id = app
        .create_id(&alice, json!({ "startCommand": TICKER }))
        .await;

    let r = app.get(&format!("/api/v1/sandbox/{id}/logs"), &bob).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let s = open(&app, &bob, &id, "?follow=true").await;
    assert_eq!(s.status, StatusCode::FORBIDDEN);
    let r = app.get("/api/v1/sandbox/abcdefghijkl/logs", &alice).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    for (query, field) in [
        ("?tail=10001", "tail"),
        ("?tail=-5", "tail"),
        ("?tail=abc", "tail"),
        ("?follow=perhaps", "follow"),
        ("?lastEventId=..%2f..%2fetc", "lastEventId"),
        ("?since=yesterday", "since"),
    ] {
        let r = app
            .get(&format!("/api/v1/sandbox/{id}/logs{query}"), &alice)
            .await;
        r.assert_status(StatusCode::BAD_REQUEST, query);
        assert_eq!(r.error_fields(), vec![field], "{query}");
    }
    let resp = app
        .http
        .get(logs_url(&app, &id, ""))
        .bearer_auth(&alice)
        .header("Last-Event-ID", "not-an-id")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    // A terminated sandbox has no logs left.
    app.delete(&format!("/api/v1/sandbox/{id}"), &alice).await;
    let r = app.get(&format!("/api/v1/sandbox/{id}/logs"), &alice).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
}
