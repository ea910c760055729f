//! `process.Process` through the client library: exit codes, output caps,
//! timeouts, signals, stdin, PTYs, re-attaching and listing.

use crate::helpers::Agent;
use bytes::Bytes;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use stockade_agent::client::{ProcessOutput, ProcessStream, RunOptions};
use stockade_agent::connect::Code;
use stockade_agent::proto::process::*;

fn sh(script: &str) -> RunOptions {
    RunOptions {
        args: vec!["-c".into(), script.into()],
        ..Default::default()
    }
}

fn start_req(cmd: &str, args: &[&str]) -> StartRequest {
    StartRequest {
        process: Some(ProcessConfig {
            cmd: cmd.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            envs: HashMap::new(),
            cwd: None,
        }),
        ..Default::default()
    }
}

/// Reads a stream to its end: (stdout+pty, stderr, end).
async fn drain(stream: &mut ProcessStream) -> (Vec<u8>, Vec<u8>, process_event::EndEvent) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        match tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("the process ends in time")
        {
            Some(Ok(ProcessOutput::Stdout(d))) | Some(Ok(ProcessOutput::Pty(d))) => {
                out.extend_from_slice(&d)
            }
            Some(Ok(ProcessOutput::Stderr(d))) => err.extend_from_slice(&d),
            Some(Ok(ProcessOutput::End(end))) => return (out, err, end),
            other => panic!("unexpected stream item {other:?}"),
        }
    }
}

/// Reads PTY output until it contains `needle`.
async fn read_until(stream: &mut ProcessStream, needle: &str) -> String {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok(ProcessOutput::Pty(d)))) => {
                seen.extend_from_slice(&d);
                let text = String::from_utf8_lossy(&seen).into_owned();
                if text.contains(needle) {
                    return text;
                }
            }
            other => panic!(
                "waiting for {needle:?}: got {other:?} after {:?}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
}

#[tokio::test]
async fn run_reports_exit_codes_output_and_errors() {
    let agent = Agent::start().await;
    let c = agent.client();

    let ok = c.run("true", &RunOptions::default()).await.unwrap();
    assert_eq!(
        (ok.exit_code, ok.exited, ok.status.as_str()),
        (0, true, "exit status 0")
    );

    let out = c
        .run(
            "/bin/sh",
            &sh("echo out; echo err >&2; pwd; echo \"$HOME|$GREETING\"; exit 7"),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 7);
    assert_eq!(out.status, "exit status 7");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "out");
    // The default working directory is the agent's --workdir.
    assert_eq!(
        std::fs::canonicalize(lines[1]).unwrap(),
        std::fs::canonicalize(agent.dir.path()).unwrap()
    );
    assert_eq!(out.stderr, b"err\n");

    let mut opts = sh("echo \"$GREETING\"; pwd");
    opts.envs.insert("GREETING".into(), "hello there".into());
    opts.cwd = Some("/".into());
    let out = c.run("sh", &opts).await.unwrap();
    assert_eq!(out.stdout, b"hello there\n/\n");

    // The token never reaches a started process.
    let out = c.run("env", &RunOptions::default()).await.unwrap();
    let env = String::from_utf8(out.stdout).unwrap();
    assert!(!env.contains("STOCKADE_AGENT_TOKEN"), "{env}");
    assert!(env.contains("PATH="));

    let missing = c
        .run("/no/such/program", &RunOptions::default())
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Some(Code::InvalidArgument));
    let bad_cwd = c
        .run(
            "true",
            &RunOptions {
                cwd: Some("/no/such/dir".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(bad_cwd.code(), Some(Code::InvalidArgument));

    // Output beyond the cap is dropped, and says so.
    let mut big = sh("head -c 300000 /dev/zero");
    big.output_cap = 1000;
    let out = c.run("sh", &big).await.unwrap();
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.truncated);
    assert_eq!(out.exit_code, 0);

    // The timeout kills.
    let started = Instant::now();
    let slow = c
        .run(
            "sleep",
            &RunOptions {
                args: vec!["30".into()],
                timeout: Some(Duration::from_millis(300)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(slow.timed_out, "{slow:?}");
    assert_eq!(slow.status, "signal: killed");
    assert_eq!(slow.exit_code, -1);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn signals_list_tags_and_reattaching() {
    let agent = Agent::start().await;
    let c = agent.client();

    let mut req = start_req("sleep", &["60"]);
    req.tag = Some("sleeper".into());
    let mut first = c.start(&req, None).await.unwrap();
    let listed = c.list().await.unwrap();
    let me = listed.iter().find(|p| p.pid == first.pid).expect("listed");
    assert_eq!(me.tag.as_deref(), Some("sleeper"));
    assert_eq!(me.config.as_ref().unwrap().cmd, "sleep");

    let mut second = c.connect(ProcessSelector::tag("sleeper")).await.unwrap();
    assert_eq!(second.pid, first.pid);
    c.send_signal(ProcessSelector::pid(first.pid), Signal::Sigterm)
        .await
        .unwrap();
    for stream in [&mut first, &mut second] {
        let (_, _, end) = drain(stream).await;
        assert_eq!(end.status, "signal: terminated");
        assert!(!end.exited);
    }
    assert!(c.list().await.unwrap().iter().all(|p| p.pid != first.pid));
    let gone = c
        .connect(ProcessSelector::pid(first.pid))
        .await
        .err()
        .unwrap();
    assert_eq!(gone.code(), Some(Code::NotFound));
    let gone = c
        .send_signal(ProcessSelector::tag("sleeper"), Signal::Sigkill)
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Some(Code::NotFound));

    // SIGKILL
    let mut s = c.start(&start_req("sleep", &["60"]), None).await.unwrap();
    c.kill(s.pid).await.unwrap();
    let (_, _, end) = drain(&mut s).await;
    assert_eq!(end.status, "signal: killed");
}

#[tokio::test]
async fn a_process_outlives_its_client_and_can_be_reattached() {
    let agent = Agent::start().await;
    let c = agent.client();
    let marker = agent.path("late.txt");
    let script = format!("sleep 0.5; echo late; echo done > {marker}");
    let stream = c
        .start(&start_req("sh", &["-c", &script]), None)
        .await
        .unwrap();
    let pid = stream.pid;
    drop(stream); // the client goes away
    let mut again = c.connect(ProcessSelector::pid(pid)).await.unwrap();
    let (out, _, end) = drain(&mut again).await;
    assert_eq!(out, b"late\n");
    assert_eq!(end.exit_code, 0);
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "done\n");
}

#[tokio::test]
async fn stdin_by_message_and_by_stream_then_eof() {
    let agent = Agent::start().await;
    let c = agent.client();
    let mut req = start_req("cat", &[]);
    req.stdin = Some(true);
    let mut s = c.start(&req, None).await.unwrap();
    let sel = ProcessSelector::pid(s.pid);
    c.send_input(
        sel.clone(),
        process_input::Input::Stdin(Bytes::from_static(b"hello ")),
    )
    .await
    .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let streaming = {
        let c = c.clone();
        let sel = sel.clone();
        tokio::spawn(async move { c.stream_input(sel, rx).await })
    };
    for part in ["wor", "ld"] {
        tx.send(process_input::Input::Stdin(Bytes::from(part)))
            .await
            .unwrap();
    }
    drop(tx);
    streaming.await.unwrap().unwrap();
    c.close_stdin(sel.clone()).await.unwrap();
    let (out, _, end) = drain(&mut s).await;
    assert_eq!(out, b"hello world");
    assert_eq!(end.exit_code, 0);

    // Without stdin, input is refused and the process reads EOF at once.
    let mut req = start_req("cat", &[]);
    req.stdin = Some(false);
    let mut s = c.start(&req, None).await.unwrap();
    let (out, _, end) = drain(&mut s).await;
    assert!(out.is_empty());
    assert_eq!(end.exit_code, 0);
    let mut req = start_req("sleep", &["30"]);
    req.stdin = Some(false);
    let s = c.start(&req, None).await.unwrap();
    let refused = c
        .send_input(
            ProcessSelector::pid(s.pid),
            process_input::Input::Stdin(Bytes::from_static(b"x")),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(Code::FailedPrecondition));
    c.kill(s.pid).await.unwrap();
}

#[tokio::test]
async fn pty_echoes_and_resizes() {
    let agent = Agent::start().await;
    let c = agent.client();
    let mut req = start_req("/bin/sh", &[]);
    req.pty = Some(Pty {
        size: Some(PtySize { cols: 80, rows: 24 }),
    });
    req.process
        .as_mut()
        .unwrap()
        .envs
        .insert("PS1".into(), "$ ".into());
    let mut s = c.start(&req, None).await.unwrap();
    let sel = ProcessSelector::pid(s.pid);
    let pty = |t: &str| process_input::Input::Pty(Bytes::from(t.to_owned()));

    c.send_input(sel.clone(), pty("echo typed-$((6*7))\n"))
        .await
        .unwrap();
    read_until(&mut s, "typed-42").await;
    c.send_input(sel.clone(), pty("stty size\n")).await.unwrap();
    read_until(&mut s, "24 80").await;
    c.resize(sel.clone(), 132, 50).await.unwrap();
    c.send_input(sel.clone(), pty("stty size\n")).await.unwrap();
    read_until(&mut s, "50 132").await;
    // Stdin-only calls are refused for a PTY.
    let refused = c.close_stdin(sel.clone()).await.unwrap_err();
    assert_eq!(refused.code(), Some(Code::FailedPrecondition));
    c.send_input(sel.clone(), pty("exit 3\n")).await.unwrap();
    let (_, _, end) = drain(&mut s).await;
    assert_eq!(end.exit_code, 3);
}

/// Forwards connections on a loopback port of its own to `to`, counting
/// them.
async fn counting_proxy(to: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let to = to.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn commands_run_one_after_another_share_one_connection() {
    use stockade_agent::client::{AgentClient, Endpoint};
    let agent = Agent::start().await;
    let (proxy, accepted) = counting_proxy(agent.addr.clone()).await;
    let c = AgentClient::new(Endpoint::Tcp(proxy), Some(crate::helpers::TOKEN.into()));
    for round in 0..5 {
        let out = c.run("/bin/sh", &sh("echo $0")).await.unwrap();
        assert_eq!(
            (round, out.exit_code, out.stdout),
            (round, 0, b"/bin/sh\n".to_vec())
        );
        // The rest of the stream is read in the background.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "each command opened a connection of its own"
    );
}

/// Something on the agent's port that ends a process and then keeps
/// sending: the client's background read of the rest gives up and closes
/// the connection instead of buffering or holding it.
#[tokio::test]
async fn a_peer_that_keeps_sending_after_the_end_is_cut_off() {
    use stockade_agent::client::{AgentClient, Endpoint};
    use stockade_agent::connect::{envelope, Codec};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let peer = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client went away before its request");
            request.extend_from_slice(&buf[..n]);
        }
        let event = |e: process_event::Event| {
            envelope(
                0,
                &Codec::Proto.encode(&StartResponse {
                    event: Some(ProcessEvent { event: Some(e) }),
                }),
            )
        };
        let chunk = |data: &[u8]| {
            let mut c = format!("{:x}\r\n", data.len()).into_bytes();
            c.extend_from_slice(data);
            c.extend_from_slice(b"\r\n");
            c
        };
        let mut head = b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+proto\r\n\
                         transfer-encoding: chunked\r\n\r\n"
            .to_vec();
        head.extend(chunk(&event(process_event::Event::Start(
            process_event::StartEvent { pid: 7 },
        ))));
        head.extend(chunk(&event(process_event::Event::End(
            process_event::EndEvent {
                exit_code: 0,
                exited: true,
                status: "exit status 0".into(),
                ..Default::default()
            },
        ))));
        s.write_all(&head).await.unwrap();
        // Then data, never the end, until the client hangs up.
        let filler = chunk(&vec![0u8; 16 * 1024]);
        let started = Instant::now();
        let mut sent = 0usize;
        while started.elapsed() < Duration::from_secs(10) {
            if s.write_all(&filler).await.is_err() {
                return (started.elapsed(), sent);
            }
            sent += filler.len();
        }
        panic!("the client still reads after 10 s ({sent} bytes)");
    });
    let c = AgentClient::new(Endpoint::Tcp(addr), Some(crate::helpers::TOKEN.into()));
    let out = c.run("true", &RunOptions::default()).await.unwrap();
    assert_eq!((out.exit_code, out.status.as_str()), (0, "exit status 0"));
    let (after, sent) = peer.await.unwrap();
    assert!(
        after < Duration::from_secs(3),
        "the connection stayed open {after:?} ({sent} bytes)"
    );
}
