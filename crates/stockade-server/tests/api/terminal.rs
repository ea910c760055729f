//! Terminals and the agent's file verbs over the API: a PTY
//! over a WebSocket (`cd` sticks, the size follows resizes, Ctrl-C reaches
//! the foreground program, the exit code comes back), refused for another
//! account and for a cookie from a foreign page; `mkdir`, `move`, and a
//! watch that reports creates, writes, renames and removes. Terminals whose
//! program never reads its input, closed with megabytes unread, leave no
//! socket open and no memory held; a message over the limit is refused.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::helpers::*;

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub async fn open(app: &TestApp, token: &str, id: &str, query: &str) -> Result<Ws, String> {
    let url = format!(
        "{}/api/v1/sandbox/{id}/terminal{query}",
        app.base.replace("http://", "ws://")
    );
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
        .map_err(|e| e.to_string())
}

/// Reads the terminal until its output contains `needle` (10 s at most).
pub async fn read_until(ws: &mut Ws, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, ws.next()).await {
            Ok(Some(Ok(Message::Binary(b)))) => seen.push_str(&String::from_utf8_lossy(&b)),
            Ok(Some(Ok(Message::Text(t)))) => seen.push_str(&t),
            Ok(Some(Ok(_))) => {}
            other => panic!("waiting for {needle:?}: {other:?}; seen so far:\n{seen}"),
        }
    }
}

pub async fn send(ws: &mut Ws, text: &str) {
    ws.send(Message::Binary(text.as_bytes().to_vec().into()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_is_a_real_pty() {
    let (app, t, id) = spawn_with_owned_sandbox("term", json!({ "name": "tty" })).await;
    let mut ws = open(&app, &t, &id, "?cols=100&rows=30").await.unwrap();
    let mut seen = String::new();
    send(&mut ws, "cd /tmp && echo marker-$((6*7))\n").await;
    read_until(&mut ws, &mut seen, "marker-42").await;
    send(&mut ws, "pwd; stty size\n").await;
    read_until(&mut ws, &mut seen, "30 100").await;
    assert!(seen.contains("/tmp"), "cd did not stick:\n{seen}");
    ws.send(Message::Text(
        json!({ "type": "resize", "cols": 120, "rows": 40 })
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    send(&mut ws, "stty size\n").await;
    read_until(&mut ws, &mut seen, "40 120").await;
    // Ctrl-C stops the foreground program, not the shell.
    send(&mut ws, "sleep 100\n").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(&mut ws, "\x03").await;
    send(&mut ws, "echo still-$((1+1))\n").await;
    read_until(&mut ws, &mut seen, "still-2").await;
    send(&mut ws, "exit 3\n").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        match tokio::time::timeout(
            deadline.saturating_duration_since(Instant::now()),
            ws.next(),
        )
        .await
        {
            Ok(Some(Ok(Message::Text(t)))) => break serde_json::from_str::<Value>(&t).unwrap(),
            Ok(Some(Ok(_))) => {}
            other => panic!("no exit frame: {other:?}"),
        }
    };
    assert_eq!(exit, json!({ "type": "exit", "exitCode": 3 }));
    // Closing a terminal ends its process.
    let mut ws = open(&app, &t, &id, "?cmd=sleep%20777").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    ws.close(None).await.unwrap();
    let ended = eventually(Duration::from_secs(5), || async {
        !processes(&id).contains("sleep 777")
    })
    .await;
    assert!(
        ended.is_some(),
        "the terminal's process outlived it:\n{}",
        processes(&id)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn terminals_are_refused_to_strangers_and_foreign_pages() {
    let (app, [alice, mallory]) = spawn_with_accounts(["term-alice", "term-mallory"]).await;
    let id = app.create_id(&alice, json!({ "name": "private" })).await;
    let err = open(&app, &mallory, &id, "").await.unwrap_err();
    assert!(err.contains("403"), "{err}");
    let err = open(&app, &alice, &id, "?cols=0").await.unwrap_err();
    assert!(err.contains("400"), "{err}");
    // The session cookie from a page elsewhere (cross-site WebSocket).
    let url = format!(
        "{}/api/v1/sandbox/{id}/terminal",
        app.base.replace("http://", "ws://")
    );
    // A real dashboard session of Alice's.
    let session = crate::credentials::sign_in(&app, &alice).await;
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("cookie", session.parse().unwrap());
    req.headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    let err = tokio_tungstenite::connect_async(req)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("403"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mkdir_move_and_watch() {
    let (app, t, id) = spawn_with_owned_sandbox("fs", json!({ "name": "files" })).await;
    let mkdir = |path: &str| {
        let path = format!("/api/v1/sandbox/{id}/files/mkdir?path={path}");
        let (app, t) = (&app, &t);
        async move { app.call(reqwest::Method::POST, &path, Some(t), None).await }
    };
    let r = mkdir("a/b/c").await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["path"], "/workspace/a/b/c");
    assert_eq!(r.body["type"], "dir");
    // Again: it is there already, which is fine. Under a file, or where a
    // file is: a conflict, not a server error.
    sh_in(&id, "touch /workspace/plain");
    for (path, status) in [
        ("a/b/c", StatusCode::CREATED),
        ("plain/sub", StatusCode::CONFLICT),
        ("plain", StatusCode::CONFLICT),
    ] {
        let r = mkdir(path).await;
        assert_eq!(r.status, status, "{path}: {:?}", r.body);
    }
    // A watch of /workspace, recursive.
    let mut events = app
        .http
        .get(format!(
            "{}/api/v1/sandbox/{id}/files/watch?path=/workspace&recursive=true",
            app.base
        ))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let put = app
        .http
        .put(format!(
            "{}/api/v1/sandbox/{id}/files?path=a/notes.txt",
            app.base
        ))
        .bearer_auth(&t)
        .body("hello")
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());
    let r = app
        .sandbox_post(
            &t,
            &id,
            "files/move",
            json!({ "from": "a/notes.txt", "to": "a/b/renamed.txt" }),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["path"], "/workspace/a/b/renamed.txt");
    let del = app
        .delete(
            &format!("/api/v1/sandbox/{id}/files?path=a/b/renamed.txt"),
            &t,
        )
        .await;
    assert!(del.status.is_success(), "{:?}", del.body);
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(text.contains("event: create")
        && text.contains("event: rename")
        && text.contains("event: remove"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("watch events missing ({other:?}):\n{text}"),
        }
    }
    assert!(text.contains("notes.txt"), "{text}");
    // A move of something missing is a 404; bad input a 400 naming it.
    let r = app
        .sandbox_post(&t, &id, "files/move", json!({ "from": "nope", "to": "x" }))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let r = app
        .sandbox_post(
            &t,
            &id,
            "files/move",
            json!({ "from": "../../etc", "to": "x" }),
        )
        .await;
    assert_eq!(r.error_fields(), ["from"]);
}

/// The resident memory of this process (the server runs in it).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// The server's sockets (local port `port`) to the given client ports that
/// are still open: established, or closed by the client and not yet by
/// the server.
fn open_server_sockets(port: u16, clients: &[u16]) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port_of = |a: &str| {
                a.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            let (Some(local), Some(remote)) = (port_of(f[1]), port_of(f[2])) else {
                continue;
            };
            // 01 established, 08 close-wait.
            if local == port && clients.contains(&remote) && matches!(f[3], "01" | "08") {
                n += 1;
            }
        }
    }
    n
}

fn local_port(ws: &Ws) -> u16 {
    match ws.get_ref() {
        tokio_tungstenite::MaybeTlsStream::Plain(s) => s.local_addr().unwrap().port(),
        _ => unreachable!("plain ws:// in tests"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn closed_terminals_with_unread_input_leave_no_socket_and_no_memory() {
    const TERMINALS: usize = 20;
    const INPUT: usize = 4 << 20;
    const PIECE: usize = 256 << 10;
    const INPUT_TIMEOUT: Duration = Duration::from_secs(3);
    let app = spawn_configured(|c| {
        c.connections.write_stall_timeout = INPUT_TIMEOUT;
    })
    .await;
    let port = app.server.as_ref().unwrap().addr.port();
    let (t, id) = app
        .owned_sandbox("unread", json!({ "name": "unread" }))
        .await;
    let rss_before = rss_bytes();
    // A program in raw mode that never reads its input.
    let mut terminals = Vec::new();
    for _ in 0..TERMINALS {
        let mut ws = open(
            &app,
            &t,
            &id,
            "?cmd=stty%20raw%20-echo%3B%20echo%20ready%3B%20sleep%201000",
        )
        .await
        .unwrap();
        let mut seen = String::new();
        read_until(&mut ws, &mut seen, "ready").await;
        terminals.push(ws);
    }
    let clients: Vec<u16> = terminals.iter().map(local_port).collect();
    // Each gets 4 MiB of input (as far as the server takes it), then the
    // client goes away.
    let senders: Vec<_> = terminals
        .into_iter()
        .map(|mut ws| {
            tokio::spawn(async move {
                let piece = vec![b'x'; PIECE];
                let mut sent = 0;
                let _ = tokio::time::timeout(Duration::from_secs(5), async {
                    while sent < INPUT {
                        ws.send(Message::Binary(piece.clone().into())).await?;
                        sent += PIECE;
                    }
                    Ok::<_, tokio_tungstenite::tungstenite::Error>(())
                })
                .await;
                drop(ws);
                sent
            })
        })
        .collect();
    let mut taken = 0;
    for s in senders {
        taken += s.await.unwrap();
    }
    let closed_at = Instant::now();
    let deadline = closed_at + INPUT_TIMEOUT + Duration::from_secs(10);
    loop {
        let open = open_server_sockets(port, &clients);
        if open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} of {TERMINALS} closed terminals still hold their socket after {:?}",
            closed_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone_after = closed_at.elapsed();
    let grown = rss_bytes().saturating_sub(rss_before);
    eprintln!(
        "{TERMINALS} terminals, {} MiB of input written by their clients, \
         sockets gone {gone_after:?} after the clients left, memory grown {} MiB",
        taken >> 20,
        grown >> 20
    );
    assert!(
        grown < 48 << 20,
        "the server's memory grew by {} MiB for {TERMINALS} closed terminals",
        grown >> 20
    );
    // The terminals are over: as many new ones open as before.
    let mut ws = open(&app, &t, &id, "").await.unwrap();
    let mut seen = String::new();
    send(&mut ws, "echo alive-$((2+3))\n").await;
    read_until(&mut ws, &mut seen, "alive-5").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_over_the_limit_closes_the_terminal() {
    let (app, t, id) = spawn_with_owned_sandbox("big-msg", json!({ "name": "big-msg" })).await;
    // Half a megabyte in one message is fine (a large paste).
    let mut ws = open(
        &app,
        &t,
        &id,
        "?cmd=stty%20raw%20-echo%3B%20echo%20ready%3B%20head%20-c%20524288%20%7C%20wc%20-c",
    )
    .await
    .unwrap();
    let mut seen = String::new();
    read_until(&mut ws, &mut seen, "ready").await;
    ws.send(Message::Binary(vec![b'y'; 512 << 10].into()))
        .await
        .unwrap();
    read_until(&mut ws, &mut seen, "524288").await;

    // Two megabytes: the terminal is closed with 1009 (message too big).
    let mut ws = open(&app, &t, &id, "").await.unwrap();
    let _ = ws.send(Message::Binary(vec![b'z'; 2 << 20].into())).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, ws.next()).await {
            Ok(Some(Ok(Message::Close(frame)))) => {
                if let Some(frame) = frame {
                    assert_eq!(u16::from(frame.code), 1009, "{frame:?}");
                }
                break;
            }
            Ok(Some(Ok(_))) => {}
            // The server may reset the socket with the rest unread.
            Ok(Some(Err(_))) | Ok(None) => break,
            Err(_) => panic!("a 2 MiB message did not close the terminal"),
        }
    }
    // The server serves terminals as before.
    let mut ws = open(&app, &t, &id, "").await.unwrap();
    let mut seen = String::new();
    send(&mut ws, "echo fine-$((4*4))\n").await;
    read_until(&mut ws, &mut seen, "fine-16").await;
}
