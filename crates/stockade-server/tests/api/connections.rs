//! SEC-17 on a real server: request heads and idle keep-alive connections
//! time out, while a log stream, a terminal and a proxied WebSocket that
//! are quiet for longer than both stay open; at the connection cap, half-sent requests make room
//! for whole ones, and when every slot is busy new connections wait; failed
//! authentications and metrics scrapes are limited per client.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::json;
use stockade_server::ratelimit::{Limit, RateLimitConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::helpers::*;
use crate::sse_client::SseStream;

const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const IDLE_TIMEOUT: Duration = Duration::from_secs(3);

/// An app with short header and idle timeouts and no SSE keep-alives to
/// speak of (a quiet stream sends nothing at all).
async fn quick_timeouts() -> TestApp {
    spawn_app_with(AppOptions {
        configure: Some(Box::new(|c| {
            c.connections.header_timeout = HEADER_TIMEOUT;
            c.connections.idle_timeout = IDLE_TIMEOUT;
            c.sse_keep_alive = Duration::from_secs(300);
        })),
        ..Default::default()
    })
    .await
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Reads the terminal until its output contains `needle` (10 s at most).
async fn read_until(ws: &mut Ws, out: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !out.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, ws.next()).await {
            Ok(Some(Ok(Message::Binary(b)))) => out.push_str(&String::from_utf8_lossy(&b)),
            Ok(Some(Ok(Message::Text(s)))) => out.push_str(&s),
            Ok(Some(Ok(_))) => {}
            other => panic!("waiting for {needle:?}: {other:?}; seen:\n{out}"),
        }
    }
}

fn addr(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

/// Reads (and keeps) what the server sends until it closes the connection;
/// how long that took from `since`. Panics if it is still open at `since + max`.
async fn closed_after(stream: &mut TcpStream, since: Instant, max: Duration) -> (Duration, String) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = (since + max).saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (since.elapsed(), String::from_utf8_lossy(&seen).into_owned())
            }
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the server kept the connection open for {max:?}; it sent: {}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_request_heads_and_idle_keep_alives_are_closed() {
    let app = quick_timeouts().await;
    let addr = addr(&app);
    let start = Instant::now();
    // Nothing sent at all: the head's clock runs from the accept.
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    // Half a request head.
    let mut half = TcpStream::connect(&addr).await.unwrap();
    half.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    // A whole request, answered; then the connection idles, kept alive.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // A head that keeps trickling in, a byte every 300 ms: bytes do not
    // restart the clock.
    let trickle = TcpStream::connect(&addr).await.unwrap();
    let (mut trickle_read, mut trickle_write) = trickle.into_split();
    let writer = tokio::spawn(async move {
        let _ = trickle_write
            .write_all(b"GET /api/v1/health HTTP/1.1\r\n")
            .await;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if trickle_write.write_all(b"x").await.is_err() {
                return;
            }
        }
    });
    let max = Duration::from_secs(10);
    let ((silent_after, _), (half_after, half_seen), (idle_after, idle_seen)) = tokio::join!(
        closed_after(&mut silent, start, max),
        closed_after(&mut half, start, max),
        closed_after(&mut idle, start, max),
    );
    let trickle_after = {
        let mut buf = [0u8; 1024];
        loop {
            let left = (start + max).saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, trickle_read.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break start.elapsed(),
                Ok(Ok(_)) => {}
                Err(_) => panic!("a trickling head kept its connection for {max:?}"),
            }
        }
    };
    writer.abort();
    let slack = Duration::from_millis(1500);
    for (what, after) in [
        ("silent", silent_after),
        ("half-sent", half_after),
        ("trickling", trickle_after),
    ] {
        assert!(
            after >= HEADER_TIMEOUT - Duration::from_millis(200) && after < HEADER_TIMEOUT + slack,
            "the {what} connection was closed after {after:?}, not after the {HEADER_TIMEOUT:?} header timeout"
        );
    }
    // A half-sent head gets no answer, only the close.
    assert!(half_seen.is_empty(), "{half_seen}");
    assert!(idle_seen.starts_with("HTTP/1.1 200"), "{idle_seen}");
    assert!(
        idle_after >= IDLE_TIMEOUT - Duration::from_millis(200) && idle_after < IDLE_TIMEOUT + slack,
        "the idle keep-alive connection was closed after {idle_after:?}, not after the {IDLE_TIMEOUT:?} idle timeout"
    );
    // The server answers as ever.
    let r = app
        .call(reqwest::Method::GET, "/api/v1/health", None, None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn quiet_log_streams_and_terminals_outlive_both_timeouts() {
    let app = quick_timeouts().await;
    let t = app.new_account("quiet").await;
    let sb = app
        .create(
            &t,
            json!({
                "name": "quiet",
                "startCommand": "sh -c 'echo first-line; sleep 8; echo late-line; sleep 1000'"
            }),
        )
        .await;
    let id = sb["id"].as_str().unwrap();

    // A log follow that stays quiet for 8 s (header 2 s, idle 3 s).
    let mut logs = SseStream::open(
        app.http
            .get(format!("{}/api/v1/sandbox/{id}/logs?follow=true", app.base))
            .bearer_auth(&t),
    )
    .await;
    assert_eq!(logs.status, StatusCode::OK);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.iter().any(|d: &String| d.contains("late-line")) {
        assert!(Instant::now() < deadline, "no late line; seen {seen:?}");
        let Some(event) = logs.next_within(Duration::from_secs(20)).await else {
            panic!("the log stream ended; seen {seen:?}");
        };
        seen.push(event.data);
    }
    assert!(seen.iter().any(|d| d.contains("first-line")), "{seen:?}");
    assert_eq!(logs.comments, 0, "keep-alives would hide a cut");

    // A terminal (an upgraded connection) quiet for longer than both.
    let url = format!(
        "{}/api/v1/sandbox/{id}/terminal",
        app.base.replace("http://", "ws://")
    );
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {t}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let mut out = String::new();
    ws.send(Message::Binary(b"echo before-$((2*3))\n".to_vec().into()))
        .await
        .unwrap();
    read_until(&mut ws, &mut out, "before-6").await;
    tokio::time::sleep(IDLE_TIMEOUT + HEADER_TIMEOUT + Duration::from_secs(2)).await;
    ws.send(Message::Binary(b"echo after-$((3*4))\n".to_vec().into()))
        .await
        .unwrap();
    read_until(&mut ws, &mut out, "after-12").await;
}

/// A WebSocket handshake server in shell: answers the upgrade with the
/// RFC 6455 accept key, then echoes every byte.
const WS_SERVER: &str = r#"cat > /workspace/ws.sh <<'EOF'
key=""
while IFS= read -r line; do
  line=$(printf %s "$line" | tr -d '\r')
  [ -z "$line" ] && break
  case "$line" in
    [Ss]ec-[Ww]eb[Ss]ocket-[Kk]ey:*) key=$(printf %s "${line#*:}" | tr -d ' ') ;;
  esac
done
accept=$(printf %s "${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11" | sha1sum | cut -d' ' -f1 | xxd -r -p | base64)
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n' "$accept"
exec cat
EOF"#;

/// A masked client text frame sent and echoed back by [`WS_SERVER`].
async fn ws_echo(s: &mut TcpStream, payload: &[u8]) {
    assert!(payload.len() < 126);
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    s.write_all(&frame).await.unwrap();
    let mut back = vec![0u8; frame.len()];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut back))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(back, frame);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_proxied_websocket_outlives_both_timeouts() {
    let app = quick_timeouts().await;
    let t = app.new_account("quiet-ws").await;
    let sb = app
        .create(
            &t,
            json!({
                "name": "quiet-ws",
                "ports": [9000],
                "startCommand": "while [ ! -f /workspace/ws.sh ]; do usleep 50000; done; exec nc -ll -p 9000 -e /bin/sh /workspace/ws.sh"
            }),
        )
        .await;
    let id = sb["id"].as_str().unwrap().to_owned();
    sh_in(&id, WS_SERVER);
    sh_in(
        &id,
        "for i in $(seq 1 100); do netstat -ltn | grep -q ':9000 ' && exit 0; usleep 50000; done; exit 1",
    );
    let r = app
        .post(&format!("/api/v1/sandbox/{id}/auth-token"), &t, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let token = r.body["token"].as_str().unwrap().to_owned();

    let mut s = TcpStream::connect(addr(&app)).await.unwrap();
    let req = format!(
        "GET /proxy/{id}/9000/chat HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         X-Stockade-Token: {token}\r\n\r\n",
        addr(&app)
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut byte))
            .await
            .expect("response head in time")
            .unwrap();
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    ws_echo(&mut s, b"before the quiet").await;
    tokio::time::sleep(IDLE_TIMEOUT + HEADER_TIMEOUT + Duration::from_secs(2)).await;
    ws_echo(&mut s, b"after the quiet, still open").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn at_the_cap_half_sent_requests_make_room_and_busy_slots_are_kept() {
    const CAP: usize = 8;
    let app = spawn_app_with(AppOptions {
        configure: Some(Box::new(|c| {
            c.connections.max_connections = Some(CAP);
            // Long enough that no timeout frees a slot during the test.
            c.connections.header_timeout = Duration::from_secs(60);
            c.sse_keep_alive = Duration::from_secs(300);
        })),
        ..Default::default()
    })
    .await;
    let addr = addr(&app);
    // Eight times the cap in half-sent request heads.
    let mut held = Vec::new();
    for i in 0..CAP * 8 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(format!("GET /api/v1/sandbox HTTP/1.1\r\nHost: x\r\nX-N: {i}").as_bytes())
            .await
            .unwrap();
        held.push(s);
    }
    // Whole requests are answered at once, each on a connection of its own.
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    for _ in 0..10 {
        let started = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(1),
            fresh.get(format!("{}/api/v1/health", app.base)).send(),
        )
        .await
        .expect("/health took more than 1 s at the cap")
        .expect("/health failed at the cap");
        assert_eq!(r.status(), StatusCode::OK);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    // The half-sent ones were closed to make room: all but the newest few.
    let mut closed = 0;
    for s in &mut held {
        let mut buf = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert!(
        closed >= held.len() - CAP,
        "only {closed} of {} half-sent connections were closed at a cap of {CAP}",
        held.len()
    );
    drop(held);

    // Busy slots are never taken: with every slot streaming logs, a new
    // connection waits until one of them ends.
    let t = app.new_account("cap").await;
    let sb = app
        .create(
            &t,
            json!({"name": "cap", "startCommand": "sh -c 'echo up; sleep 1000'"}),
        )
        .await;
    let id = sb["id"].as_str().unwrap().to_owned();
    let mut streams = Vec::new();
    for _ in 0..CAP {
        let s = SseStream::open(
            fresh
                .get(format!("{}/api/v1/sandbox/{id}/logs?follow=true", app.base))
                .bearer_auth(&t),
        )
        .await;
        assert_eq!(s.status, StatusCode::OK);
        streams.push(s);
    }
    let waiting = tokio::spawn({
        let url = format!("{}/api/v1/health", app.base);
        let fresh = fresh.clone();
        async move {
            let started = Instant::now();
            let r = fresh.get(url).send().await.map(|r| r.status());
            (r, started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !waiting.is_finished(),
        "a connection got in with every slot busy"
    );
    for s in &mut streams {
        // Still streaming.
        let e = s.next_within(Duration::from_secs(10)).await.unwrap();
        assert!(e.data.contains("up"), "{e:?}");
    }
    streams.pop();
    let (status, waited) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting connection was never served")
        .unwrap();
    assert_eq!(status.unwrap(), StatusCode::OK);
    assert!(waited >= Duration::from_secs(2), "{waited:?}");
    drop(streams);

    // The API works as ever.
    let list = app.get("/api/v1/sandbox", &t).await;
    assert_eq!(list.status, StatusCode::OK, "{:?}", list.body);
    assert_eq!(list.body["total"], 1);
}

fn per_ip(requests: u32) -> Option<RateLimitConfig> {
    let limit = |n| Limit {
        requests: n,
        window: Duration::from_secs(60),
    };
    Some(RateLimitConfig {
        per_ip: Some(limit(requests)),
        per_token: Some(limit(10_000)),
        ..RateLimitConfig::default()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_token_checks_use_up_a_clients_unauthenticated_bucket() {
    let app = spawn_app_with(AppOptions {
        configure: Some(Box::new(|c| c.rate_limit = per_ip(10))),
        ..Default::default()
    })
    .await;
    let raw = reqwest::Client::new();
    let path_form = format!("{}/proxy/abcdefabcdef/8080/", app.base);
    let host = format!("8080-abcdefabcdef.{PROXY_DOMAIN}");
    // Ten failed sandbox-token checks, path form and host form.
    for i in 0..10 {
        let r = if i % 2 == 0 {
            raw.get(&path_form).send().await.unwrap()
        } else {
            raw.get(format!("{}/", app.base))
                .header("host", &host)
                .header("x-stockade-token", "forged")
                .send()
                .await
                .unwrap()
        };
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "check {i}");
    }
    // Now the client gets 429 everywhere (no token is checked any more),
    // even with a valid API token; only health answers.
    for req in [
        raw.get(&path_form),
        raw.get(format!("{}/", app.base)).header("host", &host),
        raw.get(format!("{}/metrics", app.base)),
        raw.get(format!("{}/api/v1/me", app.base))
            .bearer_auth(&app.admin_token),
    ] {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(r.headers().get("retry-after").is_some());
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    }
    let r = raw
        .get(format!("{}/api/v1/health", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let metrics = app.state.svc.metrics.render(None);
    assert!(
        metrics.contains("stockade_rate_limited_total{bucket=\"unauthenticated\"} 4\n"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_scrapes_use_up_the_bucket_too_and_health_never_does() {
    let app = spawn_app_with(AppOptions {
        configure: Some(Box::new(|c| c.rate_limit = per_ip(5))),
        ..Default::default()
    })
    .await;
    let raw = reqwest::Client::new();
    for i in 0..5 {
        let r = raw
            .get(format!("{}/metrics", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "scrape {i}");
    }
    let r = raw
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // Used up: the client gets 429 for everything else too.
    let me = app.get("/api/v1/me", &app.admin_token).await;
    assert_eq!(me.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", me.body);
    // Health is never limited, and a flood of it is answered from the cache.
    let started = Instant::now();
    let calls = (0..200).map(|_| raw.get(format!("{}/api/v1/health", app.base)).send());
    for r in futures_util::future::join_all(calls).await {
        assert_eq!(r.unwrap().status(), StatusCode::OK);
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
