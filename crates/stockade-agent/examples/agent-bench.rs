//! Measures the agent: exec round trip of `true` through the client on
//! loopback and into a busybox container (agent as PID 1), with the Docker
//! Engine's exec (create, start, inspect) in the same run as the baseline;
//! idle RSS, startup time and binary size.
//!
//! ```text
//! cargo run --release -p stockade-agent --example agent-bench -- \
//!     --agent "$(scripts/build-agent)" [--iterations 500] [--image stockade-test-base:latest]
//! ```
//!
//! Every loop is bounded; it talks only to loopback and to the container it
//! starts (labelled `io.stockade.test=agent`, removed at the end).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stockade_agent::client::{AgentClient, Endpoint, RunOptions};

const TOKEN: &str = "bench-token";

struct Args {
    agent: PathBuf,
    iterations: usize,
    image: String,
}

fn args() -> Args {
    let mut a = Args {
        agent: PathBuf::new(),
        iterations: 500,
        image: std::env::var("STOCKADE_TEST_IMAGE")
            .unwrap_or_else(|_| "stockade-test-base:latest".into()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--agent" => a.agent = PathBuf::from(value()),
            "--iterations" => a.iterations = value().parse().expect("--iterations is a number"),
            "--image" => a.image = value(),
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(
        a.agent.is_file(),
        "--agent must name the static agent binary"
    );
    assert!(
        (1..=100_000).contains(&a.iterations),
        "--iterations must be 1..100000"
    );
    a
}

/// The agent at `agent` started on a free loopback port, and that port.
fn spawn_agent(agent: &std::path::Path) -> (std::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(agent)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("STOCKADE_AGENT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    (child, port)
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.99))
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

async fn exec_true(client: &AgentClient, n: usize) -> Vec<Duration> {
    for _ in 0..20 {
        client.run("true", &RunOptions::default()).await.unwrap();
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let out = client.run("true", &RunOptions::default()).await.unwrap();
        times.push(t.elapsed());
        assert_eq!(out.exit_code, 0);
    }
    times
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// One request to the Docker Engine socket on a fresh connection.
async fn engine(method: &str, path: &str, body: Option<serde_json::Value>) -> (u16, Bytes) {
    let stream = tokio::net::UnixStream::connect("/var/run/docker.sock")
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://docker{path}"))
        .header("host", "docker");
    let body = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Full::new(Bytes::from(v.to_string()))
        }
        None => Full::new(Bytes::new()),
    };
    let res = send.send_request(req.body(body).unwrap()).await.unwrap();
    let status = res.status().as_u16();
    (
        status,
        res.into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default(),
    )
}

/// `docker exec` as Stockade's runtime does it: create, start attached, inspect.
async fn docker_exec_true(container: &str) -> Duration {
    let t = Instant::now();
    let (s, body) = engine(
        "POST",
        &format!("/v1.41/containers/{container}/exec"),
        Some(serde_json::json!({"Cmd": ["true"], "AttachStdout": true, "AttachStderr": true})),
    )
    .await;
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&body));
    let id = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["Id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, _) = engine(
        "POST",
        &format!("/v1.41/exec/{id}/start"),
        Some(serde_json::json!({"Detach": false, "Tty": false})),
    )
    .await;
    assert_eq!(s, 200);
    let (s, body) = engine("GET", &format!("/v1.41/exec/{id}/json"), None).await;
    assert_eq!(s, 200);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&body).unwrap()["ExitCode"],
        0
    );
    t.elapsed()
}

struct Cleanup(Vec<String>);
impl Drop for Cleanup {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = Command::new("docker").args(["rm", "-f", id]).output();
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = args();
    let size = std::fs::metadata(&a.agent).unwrap().len();
    println!(
        "binary: {} ({:.2} MiB)",
        a.agent.display(),
        size as f64 / (1 << 20) as f64
    );

    // Startup: spawn → the port accepts, 20 times.
    let mut startups = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let (mut child, port) = spawn_agent(&a.agent);
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "agent did not listen");
            std::thread::sleep(Duration::from_micros(100));
        }
        startups.push(t.elapsed());
        let _ = child.kill();
        let _ = child.wait();
    }
    let (p50, p99) = percentiles(startups);
    println!("startup (spawn → listening): p50 {p50:.2} ms, p99 {p99:.2} ms");

    // Loopback.
    let (mut child, port) = spawn_agent(&a.agent);
    let client = AgentClient::new(
        Endpoint::Tcp(format!("127.0.0.1:{port}")),
        Some(TOKEN.into()),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.health().await.is_err() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!(
        "idle RSS (loopback agent, fresh): {} KiB",
        rss_kib(child.id())
    );
    let (p50, p99) = percentiles(exec_true(&client, a.iterations).await);
    println!(
        "exec `true` via client, loopback: p50 {p50:.2} ms, p99 {p99:.2} ms ({} runs)",
        a.iterations
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("RSS after the runs: {} KiB", rss_kib(child.id()));
    let _ = child.kill();
    let _ = child.wait();

    // Into a container: the agent as PID 1.
    let dir = a.agent.parent().unwrap().to_string_lossy().into_owned();
    let name = a.agent.file_name().unwrap().to_string_lossy().into_owned();
    let id = docker(&[
        "run",
        "-d",
        "--label",
        "io.stockade.test=agent",
        "-v",
        &format!("{dir}:/.stockade-agent:ro"),
        "-e",
        &format!("STOCKADE_AGENT_TOKEN={TOKEN}"),
        "--entrypoint",
        &format!("/.stockade-agent/{name}"),
        &a.image,
        "--",
        "sleep",
        "3600",
    ]);
    let _cleanup = Cleanup(vec![id.clone()]);
    let ip = docker(&[
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        &id,
    ]);
    let host_pid: u32 = docker(&["inspect", "-f", "{{.State.Pid}}", &id])
        .parse()
        .unwrap();
    let client = AgentClient::new(Endpoint::Tcp(format!("{ip}:49983")), Some(TOKEN.into()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.health().await.is_err() {
        assert!(Instant::now() < deadline, "container agent never answered");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!(
        "idle RSS (agent as PID 1 in busybox): {} KiB",
        rss_kib(host_pid)
    );
    let (p50, p99) = percentiles(exec_true(&client, a.iterations).await);
    println!(
        "exec `true` via client, into the container: p50 {p50:.2} ms, p99 {p99:.2} ms ({} runs)",
        a.iterations
    );

    // Baseline in the same run: Docker's exec of `true` in the same container.
    let n = a.iterations.min(200);
    for _ in 0..5 {
        docker_exec_true(&id).await;
    }
    let mut times = Vec::new();
    for _ in 0..n {
        times.push(docker_exec_true(&id).await);
    }
    let (p50, p99) = percentiles(times);
    println!("docker exec `true` (Engine API create/start/inspect): p50 {p50:.2} ms, p99 {p99:.2} ms ({n} runs)");
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        docker(&["exec", &id, "true"]);
        times.push(t.elapsed());
    }
    let (p50, p99) = percentiles(times);
    println!("docker exec `true` (CLI): p50 {p50:.2} ms, p99 {p99:.2} ms (20 runs)");
}
