//! Capped container logs against the real engine: a main process
//! that writes 200 MB to stdout leaves log files under the configured cap,
//! and the log API keeps working across rotation: `tail` answers and a
//! follower sees the lines written after a rotation, also one that
//! happens while it follows. The container and volume are removed, also
//! when the test fails.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use stockade_core::SandboxId;
use stockade_runtime::prelude::*;
use stockade_runtime::{container_name, DockerConfig, DockerRuntime, ExecSpec, LogsOptions};

mod support;
use support::{docker_cli, shell_spec, Cleanup};

const IMAGE: &str = "stockade-test-base:latest";
const LOG_MAX_BYTES: u64 = 1 << 20;
const LOG_MAX_FILES: u32 = 2;

/// The main process: 200 MB of 1000-byte lines (`yes` of a long line, so
/// the engine's per-line work stays small), a marker, then on request
/// (`/tmp/say` or `/tmp/flood` appearing) a line or another flood with a
/// marker.
const MAIN: &str = r#"
line=$(printf '%0999d' 0)
yes "$line" | head -c 200000000
echo flood-done
while true; do
  if [ -f /tmp/say ]; then echo "said $(cat /tmp/say)"; rm /tmp/say; fi
  if [ -f /tmp/flood ]; then yes "$line" | head -c 1500000; echo "flood2-done $(cat /tmp/flood)"; rm /tmp/flood; fi
  sleep 0.1
done
"#;

/// The sizes of the container's log file and its rotated ones.
fn log_files(id: &SandboxId) -> Vec<(PathBuf, u64)> {
    let out = docker_cli(&["inspect", "-f", "{{.LogPath}}", &container_name(id)]);
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let dir = path.parent().expect("a log directory").to_owned();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_dir(&dir)
        .expect("the engine's log directory is on this host")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&name))
        .map(|e| (e.path(), e.metadata().map(|m| m.len()).unwrap_or(0)))
        .collect()
}

async fn say(rt: &DockerRuntime, id: &SandboxId, file: &str, text: &str) {
    let out = rt
        .exec(
            id,
            ExecSpec {
                argv: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    format!("echo {text} > /tmp/{file}.new && mv /tmp/{file}.new /tmp/{file}"),
                ],
                timeout: Some(Duration::from_secs(30)),
                ..Default::default()
            },
        )
        .await
        .expect("exec");
    assert_eq!(out.exit_code, Some(0));
}

async fn last_lines(rt: &DockerRuntime, id: &SandboxId, n: usize) -> Vec<String> {
    rt.logs(
        id,
        LogsOptions {
            tail: Some(n),
            ..Default::default()
        },
    )
    .await
    .expect("logs")
    .map(|l| l.expect("line").text)
    .collect()
    .await
}

/// Reads the follower until the line `want` (60 s at most).
async fn next(follow: &mut stockade_runtime::LogLines, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = tokio::time::timeout(left, follow.next())
            .await
            .unwrap_or_else(|_| panic!("no '{want}' within 60 s"))
            .unwrap_or_else(|| panic!("the follow stream ended before '{want}'"))
            .expect("line");
        if line.text == want {
            return;
        }
    }
}

#[tokio::test]
async fn logs_stay_under_the_cap_and_survive_rotation() {
    assert!(
        docker_cli(&["image", "inspect", IMAGE]).status.success(),
        "test image {IMAGE} is missing: run scripts/build-test-image"
    );
    let rt = DockerRuntime::new(DockerConfig {
        log_max_bytes: LOG_MAX_BYTES,
        log_max_files: LOG_MAX_FILES,
        ..Default::default()
    })
    .expect("runtime");
    let spec = shell_spec(IMAGE, MAIN);
    let id = spec.sandbox_id.clone();
    let _cleanup = Cleanup(id.clone());
    rt.create(&spec).await.expect("create");

    // The flood ends; meanwhile the files never pass the cap (one line of
    // JSON of slack for the file being written).
    let cap = LOG_MAX_BYTES * u64::from(LOG_MAX_FILES) + 4096;
    let started = Instant::now();
    let mut largest = 0;
    loop {
        let total: u64 = log_files(&id).iter().map(|(_, s)| s).sum();
        largest = largest.max(total);
        assert!(
            total <= cap,
            "logs take {total} bytes: {:?}",
            log_files(&id)
        );
        if last_lines(&rt, &id, 1).await == ["flood-done"] {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the 200 MB flood did not end in 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let files = log_files(&id);
    assert!(files.len() <= LOG_MAX_FILES as usize, "{files:?}");
    assert!(
        largest > LOG_MAX_BYTES / 2,
        "the logs never grew: {largest}"
    );

    // tail after rotations.
    let tail = last_lines(&rt, &id, 3).await;
    assert_eq!(tail.len(), 3, "{tail:?}");
    assert_eq!(tail[2], "flood-done");
    assert_eq!(tail[0].len(), 999);

    // A follower sees a line written after the rotations...
    let mut follow = rt
        .logs(
            &id,
            LogsOptions {
                tail: Some(0),
                follow: true,
                ..Default::default()
            },
        )
        .await
        .expect("follow");
    say(&rt, &id, "say", "one").await;
    next(&mut follow, "said one").await;
    // ...and across a rotation that happens while it follows (1.5 MB
    // through 1 MiB files: one rotation, never more files than the engine
    // keeps — a follower that falls further behind than that loses its
    // place in Docker 20.10's json-file reader on a loaded machine), then
    // a line after it.
    say(&rt, &id, "flood", "two").await;
    next(&mut follow, "flood2-done two").await;
    say(&rt, &id, "say", "three").await;
    next(&mut follow, "said three").await;
    let total: u64 = log_files(&id).iter().map(|(_, s)| s).sum();
    assert!(total <= cap, "logs take {total} bytes");
}
