//! Connection limits on a real server: request heads and idle keep-alive connections
//! time out, while a log stream, a terminal and a proxied WebSocket that
//! are quiet for longer than both stay open; at the connection cap, half-sent requests make room
//! for whole ones, and when every slot is busy new connections wait; failed
//! authentications and metrics scrapes are limited per client. One address
//! flooding slow request bodies holds only its share of the cap while
//! `/health` from another address answers as fast as when idle; a body
//! slower than the floor is cut off with 408; a client that never reads
//! its response gives its slot back after the write-stall timeout, one that
//! reads slowly is never cut; an account holds at most its streams.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use stockade_server::ratelimit::{Limit, RateLimitConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::*;
use crate::ports::{ws_connect, ws_echo, ws_echo_sandbox};
use crate::sse_client::SseStream;
use crate::terminal::{open, read_until, send};

const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const IDLE_TIMEOUT: Duration = Duration::from_secs(3);

/// An app with short header and idle timeouts and no SSE keep-alives to
/// speak of (a quiet stream sends nothing at all).
async fn quick_timeouts() -> TestApp {
    spawn_configured(|c| {
        c.connections.header_timeout = HEADER_TIMEOUT;
        c.connections.idle_timeout = IDLE_TIMEOUT;
        c.sse_keep_alive = Duration::from_secs(300);
    })
    .await
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
    let (t, id) = app
        .owned_sandbox(
            "quiet",
            json!({
                "name": "quiet",
                "startCommand": "sh -c 'echo first-line; sleep 8; echo late-line; sleep 1000'"
            }),
        )
        .await;

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
    let mut ws = open(&app, &t, &id, "").await.unwrap();
    let mut out = String::new();
    send(&mut ws, "echo before-$((2*3))\n").await;
    read_until(&mut ws, &mut out, "before-6").await;
    tokio::time::sleep(IDLE_TIMEOUT + HEADER_TIMEOUT + Duration::from_secs(2)).await;
    send(&mut ws, "echo after-$((3*4))\n").await;
    read_until(&mut ws, &mut out, "after-12").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_proxied_websocket_outlives_both_timeouts() {
    let app = quick_timeouts().await;
    let t = app.new_account("quiet-ws").await;
    let id = ws_echo_sandbox(&app, &t, "quiet-ws").await;
    let token = app.port_token(&t, &id).await;

    let path = format!("/proxy/{id}/9000/chat");
    // The shell server in the sandbox may take a moment on a loaded
    // machine to answer its first handshake: a 502 is asked again.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut s, head) = loop {
        let (mut s, head) = ws_connect(&app, &path, &addr(&app), Some(&token)).await;
        if !head.starts_with("HTTP/1.1 502") || Instant::now() > deadline {
            break (s, head);
        }
        let mut body = [0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(1), s.read(&mut body))
            .await
            .map_or(0, |r| r.unwrap_or(0));
        eprintln!(
            "handshake answered 502: {}",
            String::from_utf8_lossy(&body[..n])
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    ws_echo(&mut s, b"before the quiet").await;
    tokio::time::sleep(IDLE_TIMEOUT + HEADER_TIMEOUT + Duration::from_secs(2)).await;
    ws_echo(&mut s, b"after the quiet, still open").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn at_the_cap_half_sent_requests_make_room_and_busy_slots_are_kept() {
    const CAP: usize = 8;
    let app = spawn_configured(|c| {
        c.connections.max_connections = Some(CAP);
        // Long enough that no timeout frees a slot during the test.
        c.connections.header_timeout = Duration::from_secs(60);
        c.sse_keep_alive = Duration::from_secs(300);
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
    let (t, id) = app
        .owned_sandbox(
            "cap",
            json!({"name": "cap", "startCommand": "sh -c 'echo up; sleep 1000'"}),
        )
        .await;
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
    let app = spawn_configured(|c| c.rate_limit = per_ip(10)).await;
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
    let metrics = app.state.svc.metrics().render(None);
    assert!(
        metrics.contains("stockade_rate_limited_total{bucket=\"unauthenticated\"} 4\n"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_scrapes_use_up_the_bucket_too_and_health_never_does() {
    let app = spawn_configured(|c| c.rate_limit = per_ip(5)).await;
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

/// Sends `GET /api/v1/health` on a new connection from `from` (any address
/// of 127/8) and reads the answer to its end; how long that took.
async fn health_from(from: &str, addr: &str) -> Duration {
    let started = Instant::now();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut s = socket.connect(addr.parse().unwrap()).await.unwrap();
    s.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    started.elapsed()
}

/// `n` probes of `/health` from `from`, one after another, each within
/// `max`; their times, sorted.
async fn health_probes(from: &str, addr: &str, n: usize, max: Duration) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..n {
        let took = tokio::time::timeout(max, health_from(from, addr))
            .await
            .unwrap_or_else(|_| panic!("/health from {from} took more than {max:?}"));
        times.push(took);
    }
    times.sort();
    times
}

/// Whether the server closed `s` (without reading what it sent), looking
/// for at most `wait`.
async fn is_closed(s: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(wait, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_bodies_from_one_address_leave_health_to_the_others() {
    // The confirmed attack: as many slow-body connections as the cap, all
    // from one address. That address gets its share (an eighth of the cap,
    // at least 64); everyone else keeps the rest.
    const CAP: usize = 256;
    const FLOOD: usize = 256;
    let share = stockade_server::serve::default_max_connections_per_ip(CAP);
    let app = spawn_configured(|c| {
        c.connections.max_connections = Some(CAP);
    })
    .await;
    let addr = addr(&app);
    // Warm up, then the idle latency of /health from another address.
    health_probes("127.0.0.2", &addr, 5, Duration::from_secs(5)).await;
    let idle = health_probes("127.0.0.2", &addr, 21, Duration::from_secs(5)).await;
    let idle_median = idle[idle.len() / 2];

    // The flood: every connection sends a whole request head for a sign-in
    // with a 100 kB body, then trickles the body a byte every 200 ms.
    let head = "POST /api/v1/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                X-Stockade-CSRF: 1\r\nContent-Length: 100000\r\n\r\n{\"token\":\"";
    let mut flood = Vec::new();
    for _ in 0..FLOOD {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        flood.push(s);
    }
    // The server takes them all from its backlog.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut open = Vec::new();
    let mut closed = 0;
    for mut s in flood {
        if is_closed(&mut s, Duration::from_millis(20)).await {
            closed += 1;
        } else {
            open.push(s);
        }
    }
    // Those that hold a slot keep trickling.
    let trickles: Vec<_> = open
        .into_iter()
        .map(|mut s| {
            let mut stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.changed() => return,
                        () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                    if s.write_all(b"a").await.is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    let held = trickles.len();
    assert!(
        held <= share && closed >= FLOOD - share,
        "one address kept {held} connections ({closed} closed); its share is {share}"
    );

    let busy = health_probes("127.0.0.2", &addr, 21, Duration::from_secs(2)).await;
    let busy_median = busy[busy.len() / 2];
    let _ = stop_tx.send(true);
    for t in trickles {
        let _ = t.await;
    }
    let bound = (idle_median * 2).max(idle_median + Duration::from_millis(50));
    eprintln!(
        "/health from another address: idle median {idle_median:?} (max {:?}), during a flood of \
         {FLOOD} slow bodies from one address ({held} held, {closed} closed) median {busy_median:?} \
         (max {:?}); bound {bound:?}",
        idle.last().unwrap(),
        busy.last().unwrap()
    );
    assert!(
        busy_median <= bound,
        "/health took {busy_median:?} (median) during the flood, against {idle_median:?} idle: {busy:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_slower_than_the_floor_is_cut_off_with_408() {
    let app = spawn_configured(|c| {
        c.connections.body_timeout = Duration::from_secs(2);
        c.connections.body_min_rate = 1000;
    })
    .await;
    let addr = addr(&app);
    let head = |len: usize| {
        format!(
            "POST /api/v1/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             X-Stockade-CSRF: 1\r\nContent-Length: {len}\r\n\r\n"
        )
    };
    // 20 bytes/s against a floor of 1000: the allowance of 2 s runs out.
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(head(10_000).as_bytes()).await.unwrap();
    let started = Instant::now();
    let (mut read, mut write) = slow.into_split();
    let trickle = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if write.write_all(b"          ").await.is_err() {
                return;
            }
        }
    });
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut answer))
        .await
        .expect("the slow body was not cut off")
        .ok();
    let took = started.elapsed();
    trickle.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"request_timeout\""), "{answer}");
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(6),
        "cut off after {took:?}, with an allowance of 2 s"
    );

    // A body that keeps up with the floor is read to its end, however long
    // it takes: 2 kB every 500 ms for 3 s.
    let body = format!("{{\"token\":\"nope\"}}{}", " ".repeat(11_984));
    let mut fine = TcpStream::connect(&addr).await.unwrap();
    fine.write_all(head(body.len()).as_bytes()).await.unwrap();
    for piece in body.as_bytes().chunks(2000) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        fine.write_all(piece).await.unwrap();
    }
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), fine.read(&mut answer))
        .await
        .expect("no answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}

/// An app with one connection slot (whoever holds it keeps everyone else
/// out) and a write-stall timeout of `stall`.
async fn one_slot(stall: Duration) -> TestApp {
    spawn_configured(move |c| {
        c.connections.max_connections = Some(1);
        c.connections.write_stall_timeout = stall;
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_reads_gives_its_slot_back_after_the_write_stall_timeout() {
    const STALL: Duration = Duration::from_secs(2);
    const SIZE: usize = 32 << 20;
    let app = one_slot(STALL).await;
    let (t, id) = app.owned_sandbox("stall", json!({ "name": "stall" })).await;
    sh_in(
        &id,
        &format!("head -c {SIZE} /dev/urandom > /workspace/big"),
    );
    let addr = addr(&app);
    let request = format!(
        "GET /api/v1/sandbox/{id}/files?path=big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\
         Connection: close\r\n\r\n"
    );
    let small_window = || {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket
    };

    // A client that reads slowly, but reads, for longer than the timeout:
    // its download is not cut.
    let mut slow = small_window().connect(addr.parse().unwrap()).await.unwrap();
    slow.write_all(request.as_bytes()).await.unwrap();
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 << 10];
    let slow_until = Instant::now() + STALL * 2;
    while Instant::now() < slow_until {
        let n = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buf))
            .await
            .expect("the download stopped")
            .unwrap();
        assert!(n > 0, "the slow reader was cut off after {got} bytes");
        got += n;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut rest))
        .await
        .expect("the download stopped")
        .unwrap();
    got += rest.len();
    assert!(got > SIZE, "only {got} bytes of {SIZE} arrived");
    drop(slow);

    // A client that never reads: it holds the only slot until the timeout.
    let mut stalled = small_window().connect(addr.parse().unwrap()).await.unwrap();
    stalled.write_all(request.as_bytes()).await.unwrap();
    // Let the server fill the socket's buffers and stall.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let waited = tokio::time::timeout(
        STALL + Duration::from_secs(5),
        health_from("127.0.0.1", &addr),
    )
    .await
    .expect("the slot of the client that never reads was never given back");
    let freed_after = started.elapsed();
    assert!(
        freed_after < STALL + Duration::from_secs(3),
        "/health got the slot after {freed_after:?} ({waited:?})"
    );
    // The stalled connection was closed (what the kernel buffered drains first).
    assert!(
        is_closed(&mut stalled, Duration::from_secs(5)).await,
        "the connection of the client that never reads is still open"
    );
    eprintln!("a client that never read held its slot for {freed_after:?} (+ 300 ms) with a write-stall timeout of {STALL:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http2_client_that_keeps_its_window_shut_gives_its_slot_back() {
    // HTTP/2 flow control holds a response back without the socket ever
    // stalling: a stream window of 0 lets no byte of the body out.
    const STALL: Duration = Duration::from_secs(2);
    let app = one_slot(STALL).await;
    let addr = addr(&app);
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(0)
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    let driver = tokio::spawn(conn);
    let request = axum::http::Request::get(format!("http://{addr}/api/v1/openapi.json"))
        .body(http_body_util::Empty::<axum::body::Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("response headers in time")
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // Its body never gets out; the connection holds the only slot until
    // the write-stall timeout.
    let started = Instant::now();
    tokio::time::timeout(
        STALL + Duration::from_secs(5),
        health_from("127.0.0.1", &addr),
    )
    .await
    .expect("the slot of the HTTP/2 client with a shut window was never given back");
    let freed_after = started.elapsed();
    assert!(
        freed_after >= STALL - Duration::from_millis(500),
        "/health got in after {freed_after:?}: was the slot held at all?"
    );
    drop(response);
    driver.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_account_holds_at_most_its_streams() {
    let app = spawn_configured(|c| {
        c.connections.max_streams_per_account = 2;
        // Frequent keep-alives: a closed stream is noticed soon.
        c.sse_keep_alive = Duration::from_millis(200);
    })
    .await;
    let t = app.new_account("streams").await;
    let other = app.new_account("streams-other").await;
    let id = app.create_id(&t,
            json!({"name": "streams", "ports": [9000], "startCommand": "sh -c 'echo up; sleep 1000'"})).await;
    let follow = |token: &str, id: &str| {
        app.http
            .get(format!("{}/api/v1/sandbox/{id}/logs?follow=true", app.base))
            .bearer_auth(token)
    };
    let mut streams = Vec::new();
    for _ in 0..2 {
        let s = SseStream::open(follow(&t, &id)).await;
        assert_eq!(s.status, StatusCode::OK);
        streams.push(s);
    }
    // A third log follow, a terminal and a proxied WebSocket: 429, naming the limit.
    let r = follow(&t, &id).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("max-streams-per-account") && message.contains('2'),
        "{message}"
    );
    let err = crate::terminal::open(&app, &t, &id, "").await.unwrap_err();
    assert!(err.contains("429"), "{err}");
    let token = app.port_token(&t, &id).await;
    let mut s = TcpStream::connect(addr(&app)).await.unwrap();
    s.write_all(
        format!(
            "GET /proxy/{id}/9000/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             X-Stockade-Token: {token}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut head))
        .await
        .expect("an answer to the upgrade")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 429");
    // Other requests of the account, and other accounts' streams, go on.
    let r = app.get(&format!("/api/v1/sandbox/{id}"), &t).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let theirs = app.create(&other, json!({"name": "theirs"})).await;
    let theirs = SseStream::open(follow(&other, theirs["id"].as_str().unwrap())).await;
    assert_eq!(theirs.status, StatusCode::OK);
    // A closed stream gives its place back.
    streams.pop();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = follow(&t, &id).send().await.unwrap();
        if r.status() == StatusCode::OK {
            break;
        }
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            Instant::now() < deadline,
            "the closed stream's place never came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
