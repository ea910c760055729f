//! The static agent as PID 1 of a busybox container: reached over the
//! container's address, reaping orphans, and `docker stop` keeping its
//! meaning for the main process. Containers are labelled
//! `io.stockade.test=agent` and removed even when a check fails.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use stockade_agent::client::{AgentClient, Endpoint, RunOptions, RunOutput};

const TOKEN: &str = "docker-test-token";

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI runs");
    stdout_of(out, &format!("docker {args:?}"))
}

/// The standard output of a command `what` that must have succeeded,
/// trimmed.
fn stdout_of(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The static binary: `STOCKADE_AGENT_STATIC` or `scripts/build-agent`.
fn static_agent() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("STOCKADE_AGENT_STATIC") {
            return PathBuf::from(p);
        }
        let script = crate::manifest_dir().join("../../scripts/build-agent");
        let out = Command::new(script)
            .output()
            .expect("scripts/build-agent runs");
        PathBuf::from(stdout_of(out, "scripts/build-agent"))
    })
    .clone()
}

/// A container removed when dropped.
struct Container {
    id: String,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.id]).output();
    }
}

impl Container {
    /// Runs the agent as PID 1 with `main` as its main process.
    fn start(main: &[&str]) -> Container {
        let bin = static_agent();
        let dir = bin.parent().unwrap().to_string_lossy().into_owned();
        let image = std::env::var("STOCKADE_TEST_IMAGE")
            .unwrap_or_else(|_| "stockade-test-base:latest".into());
        let mount = format!("{dir}:/.stockade-agent:ro");
        let token = format!("STOCKADE_AGENT_TOKEN={TOKEN}");
        let mut args = vec![
            "run",
            "-d",
            "--label",
            "io.stockade.test=agent",
            "-v",
            &mount,
            "-e",
            &token,
            "--entrypoint",
            "/.stockade-agent/stockade-agent",
            &image,
            "--",
        ];
        args.extend_from_slice(main);
        Container { id: docker(&args) }
    }

    fn ip(&self) -> String {
        docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &self.id,
        ])
    }

    async fn client(&self) -> AgentClient {
        let c = AgentClient::new(
            Endpoint::Tcp(format!("{}:49983", self.ip())),
            Some(TOKEN.into()),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.health().await.is_err() {
            assert!(
                Instant::now() < deadline,
                "the agent in {} never answered",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        c
    }

    fn exit_code(&self) -> i64 {
        docker(&["inspect", "-f", "{{.State.ExitCode}}", &self.id])
            .parse()
            .unwrap()
    }
}

/// `/bin/sh -c script` through the agent, run to its end.
async fn sh(c: &AgentClient, script: &str) -> RunOutput {
    c.run(
        "/bin/sh",
        &RunOptions {
            args: vec!["-c".into(), script.into()],
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn the_static_agent_runs_as_pid_1_in_busybox() {
    // A main process that ignores SIGTERM: Docker must SIGKILL it after the grace.
    let stubborn = Container::start(&["/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done"]);
    let c = stubborn.client().await;
    let out = sh(&c, "echo $((6*7)); cat /proc/1/comm").await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "42\nstockade-agent\n");
    assert_eq!(out.exit_code, 0);

    // Orphans are reaped by PID 1: no zombie is left behind.
    sh(&c, "sleep 0.1 & exit 0").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let zombies = sh(&c, "grep -l '^State:.*Z' /proc/[0-9]*/status | wc -l").await;
    assert_eq!(String::from_utf8_lossy(&zombies.stdout).trim(), "0");

    // Files through the agent.
    c.upload_bytes("/tmp/x/hello.txt", "from the host")
        .await
        .unwrap();
    let back = c
        .download("/tmp/x/hello.txt")
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(back, b"from the host");

    let started = Instant::now();
    docker(&["stop", "-t", "2", &stubborn.id]);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "stopped after {took:?}, before the grace"
    );
    assert_eq!(stubborn.exit_code(), 137, "SIGKILLed after the grace");

    // A main process that handles SIGTERM gets to finish cleanly.
    let polite = Container::start(&[
        "/bin/sh",
        "-c",
        "trap 'echo bye; exit 0' TERM; while :; do sleep 0.1; done",
    ]);
    polite.client().await;
    let started = Instant::now();
    docker(&["stop", "-t", "20", &polite.id]);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(polite.exit_code(), 0);
    let logs = docker(&["logs", &polite.id]);
    assert!(logs.contains("bye"), "{logs}");
}
