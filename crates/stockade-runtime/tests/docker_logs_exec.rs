//! Acceptance tests of `DockerRuntime` logs and streaming exec
//! against the real engine and the local image `stockade-test-base:latest`.
//! Each test removes its container and volume, also when it fails.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use stockade_core::SandboxId;
use stockade_runtime::prelude::*;
use stockade_runtime::{
    ContainerSpec, DockerConfig, DockerRuntime, ExecEvent, ExecProcess, ExecSpec, LogLine,
    LogStream, LogsOptions, RuntimeError,
};

mod support;
use support::{docker_cli, exec_of, sh_exec, shell_spec, Cleanup};

const IMAGE: &str = "stockade-test-base:latest";
const KEEP_ALIVE: &str = "trap 'exit 0' TERM INT; while true; do sleep 86400 & wait $!; done";

fn runtime() -> DockerRuntime {
    let out = docker_cli(&["image", "inspect", IMAGE]);
    assert!(
        out.status.success(),
        "test image {IMAGE} is missing or Docker is not usable: run scripts/build-test-image ({})",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    DockerRuntime::new(DockerConfig::default()).expect("runtime")
}

async fn sandbox(rt: &DockerRuntime, command: &str) -> (SandboxId, Cleanup) {
    let spec = ContainerSpec {
        env: BTreeMap::from([("SANDBOX_GREETING".to_string(), "hello".to_string())]),
        ..shell_spec(IMAGE, command)
    };
    let sandbox_id = spec.sandbox_id.clone();
    let cleanup = Cleanup(sandbox_id.clone());
    rt.create(&spec).await.expect("create");
    (sandbox_id, cleanup)
}

async fn all_lines(rt: &DockerRuntime, id: &SandboxId, options: LogsOptions) -> Vec<LogLine> {
    rt.logs(id, options)
        .await
        .expect("logs")
        .map(|l| l.expect("line"))
        .collect()
        .await
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

/// Everything a streamed exec produced: (stdout, stderr, exit event).
async fn drain(mut p: ExecProcess) -> (Vec<u8>, Vec<u8>, stockade_runtime::ExecExit) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Some(event) = p.next().await {
        match event {
            ExecEvent::Stdout(b) => out.extend_from_slice(&b),
            ExecEvent::Stderr(b) => err.extend_from_slice(&b),
            ExecEvent::Exit(exit) => {
                assert!(p.next().await.is_none(), "exit is the last event");
                return (out, err, exit);
            }
        }
    }
    panic!("the stream ended without an exit event");
}

async fn processes(rt: &DockerRuntime, id: &SandboxId) -> String {
    let script = "for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done";
    let out = sh_exec(rt, id, script, Some(Duration::from_secs(30))).await;
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Logs followed from the last `tail` lines on.
fn following(tail: usize) -> LogsOptions {
    LogsOptions {
        follow: true,
        tail: Some(tail),
        ..Default::default()
    }
}

#[tokio::test]
async fn logs_are_lines_with_streams_timestamps_tail_and_since() {
    let rt = runtime();
    // A 40 000-byte line (the engine cuts it into 16 KiB messages),
    // multi-byte characters, and a last line without a newline (the engine
    // passes it on when the process exits).
    let (id, _c) = sandbox(
        &rt,
        "echo out; echo err >&2; printf 'grüße 🦀\\n'; head -c 40000 /dev/zero | tr '\\0' x; echo; \
         printf 'no newline'",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while rt.inspect(&id).await.unwrap().is_some_and(|s| s.running) {
        assert!(Instant::now() < deadline, "the main process did not exit");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let lines = all_lines(&rt, &id, LogsOptions::default()).await;
    let seen: Vec<(LogStream, usize, &str)> = lines
        .iter()
        .map(|l| (l.stream, l.text.len(), l.text.get(..10).unwrap_or(&l.text)))
        .collect();
    assert_eq!(lines.len(), 5, "{seen:?}");
    // stdout and stderr are copied apart: their relative order may vary.
    assert!(lines
        .iter()
        .any(|l| l.stream == LogStream::Stdout && l.text == "out"));
    assert!(lines
        .iter()
        .any(|l| l.stream == LogStream::Stderr && l.text == "err"));
    assert!(lines.iter().any(|l| l.text == "grüße 🦀"));
    let long = lines.iter().find(|l| l.text.starts_with('x')).unwrap();
    assert_eq!(long.text, "x".repeat(40000), "a long line is joined again");
    let last_out = lines.iter().rev().find(|l| l.stream == LogStream::Stdout);
    assert_eq!(
        last_out.map(|l| l.text.as_str()),
        Some("no newline"),
        "the final partial line is flushed"
    );
    for l in &lines {
        let age = chrono::Utc::now() - l.timestamp;
        assert!(
            age.num_seconds() < 60 && age.num_milliseconds() >= 0,
            "{l:?}"
        );
    }

    let tail = all_lines(
        &rt,
        &id,
        LogsOptions {
            tail: Some(2),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(tail.len(), 2);
    assert!(tail.iter().any(|l| l.text == "no newline"), "{tail:?}");

    let future = all_lines(
        &rt,
        &id,
        LogsOptions {
            since: Some(chrono::Utc::now() + chrono::Duration::seconds(5)),
            ..Default::default()
        },
    )
    .await;
    assert!(future.is_empty(), "{future:?}");
}

#[tokio::test]
async fn following_logs_yields_new_lines_and_ends_when_the_container_stops() {
    let rt = runtime();
    let (id, _c) = sandbox(
        &rt,
        "trap 'echo bye; exit 0' TERM; i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done",
    )
    .await;
    let mut lines = rt.logs(&id, following(0)).await.expect("logs");
    let mut ticks = Vec::new();
    while ticks.len() < 3 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next())
            .await
            .expect("a line within 10 s")
            .expect("stream open")
            .expect("line");
        ticks.push(line.text);
    }
    let first: u32 = ticks[0].trim_start_matches("tick ").parse().unwrap();
    assert_eq!(
        ticks,
        (first..first + 3)
            .map(|i| format!("tick {i}"))
            .collect::<Vec<_>>(),
        "live lines in order, none lost"
    );
    rt.stop(&id, Duration::from_secs(5)).await.expect("stop");
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        let mut rest = Vec::new();
        while let Some(line) = lines.next().await {
            rest.push(line.expect("line").text);
        }
        rest
    })
    .await
    .expect("the stream ends when the container stops");
    assert_eq!(rest.last().map(String::as_str), Some("bye"), "{rest:?}");

    // A stopped container's logs are still there, and follow ends at once.
    let stopped = tokio::time::timeout(Duration::from_secs(10), all_lines(&rt, &id, following(1)))
        .await
        .expect("no hang on a stopped container");
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0].text, "bye");

    assert!(matches!(
        rt.logs(&SandboxId::generate(), LogsOptions::default())
            .await,
        Err(RuntimeError::NotFound(_))
    ));
}

#[tokio::test]
async fn streamed_exec_reports_output_stdin_env_cwd_and_exit() {
    let rt = runtime();
    let (id, _c) = sandbox(&rt, KEEP_ALIVE).await;

    let p = rt
        .exec_start(
            &id,
            ExecSpec {
                argv: argv(&[
                    "/bin/sh",
                    "-c",
                    "echo one; sleep 0.3; echo two >&2; pwd; echo \"$FOO|$SANDBOX_GREETING\"; cat; exit 5",
                ]),
                env: BTreeMap::from([("FOO".to_string(), "bar".to_string())]),
                cwd: Some("/tmp".into()),
                stdin: Some(b"from stdin".to_vec()),
                timeout: Some(Duration::from_secs(30)),
                ..Default::default()
            },
        )
        .await
        .expect("exec_start");
    assert!(!p.exec_id().is_empty());
    let (out, err, exit) = drain(p).await;
    assert_eq!(
        String::from_utf8_lossy(&out),
        "one\n/tmp\nbar|hello\nfrom stdin"
    );
    assert_eq!(String::from_utf8_lossy(&err), "two\n");
    assert_eq!(exit.exit_code, Some(5));
    assert!(!exit.timed_out && exit.error.is_none());

    // A missing cwd: the engine's message on stderr, exit 126.
    let p = rt
        .exec_start(
            &id,
            ExecSpec {
                argv: argv(&["pwd"]),
                cwd: Some("/no/such/dir".into()),
                ..Default::default()
            },
        )
        .await
        .expect("exec_start");
    let (out, err, exit) = drain(p).await;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&err)
    );
    assert!(said.contains("chdir to cwd"), "{said}");
    assert_eq!(exit.exit_code, Some(126));
}

#[tokio::test]
async fn streamed_exec_timeout_kill_and_abandon_leave_nothing_running() {
    let rt = runtime();
    let (id, _c) = sandbox(&rt, KEEP_ALIVE).await;

    // Timeout: killed with its children, reported as timed out.
    let t0 = Instant::now();
    let p = rt
        .exec_start(
            &id,
            ExecSpec {
                argv: argv(&["/bin/sh", "-c", "echo started; sleep 311 & sleep 312"]),
                timeout: Some(Duration::from_secs(1)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (out, _, exit) = drain(p).await;
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    assert_eq!(String::from_utf8_lossy(&out), "started\n");
    assert!(exit.timed_out);
    assert_eq!(exit.exit_code, None);

    // Kill on request.
    let mut p = rt
        .exec_start(&id, exec_of(&["/bin/sh", "-c", "echo up; sleep 313"]))
        .await
        .unwrap();
    assert_eq!(p.next().await, Some(ExecEvent::Stdout("up\n".into())));
    rt.exec_kill(&id, p.exec_id()).await.unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), drain(p))
        .await
        .expect("a killed process exits")
        .2;
    assert_eq!(exit.exit_code, Some(137), "{exit:?}");

    // Dropping the stream kills the process.
    let mut p = rt
        .exec_start(&id, exec_of(&["/bin/sh", "-c", "echo up; sleep 314"]))
        .await
        .unwrap();
    assert_eq!(p.next().await, Some(ExecEvent::Stdout("up\n".into())));
    drop(p);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let procs = processes(&rt, &id).await;
        if !procs.contains("sleep 31") {
            break;
        }
        assert!(Instant::now() < deadline, "still running: {procs}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Not running: Conflict.
    rt.stop(&id, Duration::from_secs(5)).await.unwrap();
    assert!(matches!(
        rt.exec_start(&id, exec_of(&["true"])).await,
        Err(RuntimeError::Conflict(_))
    ));
}
