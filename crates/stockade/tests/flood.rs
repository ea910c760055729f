//! Connection-flood protection on the built binary: a flood of half-sent requests, far more than
//! the server's open-files limit, from several client processes. The server
//! (started under `ulimit -n 1024`) keeps its descriptors under the limit,
//! `/health` answers within a second all through the flood, and the API
//! works right after. And the open-files soft limit is raised to the hard
//! one at start, as the banner says.
//!
//! Its own test binary: the flood would starve tests running beside it.
//! The client processes are this binary again, running the ignored
//! `flood_client` with the target in its environment.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod support;
use support::{get_json, image, lines_of, read_banner, spawn_piped, AccountCleanup};

const TOKEN: &str = "stk_floodtestfloodtestfloodtestflood0001";
/// Half-sent requests in all, and at most per client process (each
/// process's open-files hard limit may allow fewer).
const FLOOD: usize = 20_000;
const PER_CLIENT: usize = 4_000;
/// How long each client holds its connections.
const HOLD: Duration = Duration::from_secs(14);

struct Server {
    child: Child,
    url: String,
    banner: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `stockade server` under `ulimit` (e.g. `-n 1024`) and waits for
/// its banner.
fn start(ulimit: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        &format!("ulimit {ulimit} && exec \"$0\" server"),
        env!("CARGO_BIN_EXE_stockade"),
    ])
    .env("STOCKADE_LISTEN", "127.0.0.1:0")
    .env("STOCKADE_DATA_DIR", dir.path())
    .env_remove("STOCKADE_DATABASE_URL")
    .env_remove("STOCKADE_MAX_CONNECTIONS")
    .env_remove("STOCKADE_HEADER_TIMEOUT")
    .env_remove("STOCKADE_IDLE_TIMEOUT")
    .env("STOCKADE_ADMIN_TOKEN", TOKEN)
    .env("STOCKADE_LOG", "warn")
    .env("STOCKADE_DEFAULT_IMAGE", image());
    let (child, stdout) = spawn_piped(&mut cmd);
    let mut server = Server {
        child,
        url: String::new(),
        banner: Vec::new(),
        _dir: dir,
    };
    let rx = lines_of(stdout);
    read_banner(&rx, |line| {
        if let Some(rest) = line.split("listening on ").nth(1) {
            server.url = rest.trim().to_owned();
        }
        let done = line.trim_start().starts_with("docker:");
        server.banner.push(line);
        done
    });
    server
}

fn banner_line<'a>(server: &'a Server, key: &str) -> &'a str {
    server
        .banner
        .iter()
        .find(|l| l.trim_start().starts_with(key))
        .unwrap_or_else(|| panic!("no '{key}' line in the banner: {:?}", server.banner))
}

/// The server's open file descriptors.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// What one flood client reported.
#[derive(Debug, Default)]
struct Report {
    connected: usize,
    failed: usize,
    closed_by_server: usize,
}

fn report_of(output: &str) -> Report {
    let line = output
        .lines()
        .find(|l| l.starts_with("FLOOD "))
        .unwrap_or_else(|| panic!("a flood client reported nothing:\n{output}"));
    let mut r = Report::default();
    for pair in line.split_whitespace().skip(1) {
        let (k, v) = pair.split_once('=').unwrap();
        let v: usize = v.parse().unwrap();
        match k {
            "connected" => r.connected = v,
            "failed" => r.failed = v,
            "closed_by_server" => r.closed_by_server = v,
            _ => {}
        }
    }
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_half_sent_requests_leaves_the_server_answering() {
    let started = Instant::now();
    let server = start("-n 1024");
    let clients_line = banner_line(&server, "clients:").to_owned();
    assert!(
        clients_line.contains("open files: 1024)")
            && clients_line.contains("at most 384 connections"),
        "{clients_line}"
    );
    let pid = server.child.id();
    let addr: SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    // /health, each time on a new connection: every answer within 5 s,
    // nearly all within 1 s (the machine running the suite is busy with
    // other tests; an isolated slow answer is noise, a pattern is not).
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let health = |label: &'static str| {
        let fresh = fresh.clone();
        let url = format!("{}/api/v1/health", server.url);
        async move {
            let asked = Instant::now();
            let r = fresh.get(&url).send().await;
            let r = r.unwrap_or_else(|e| {
                panic!(
                    "/health ({label}) failed {:?} into the test ({} descriptors open): {e:?}",
                    asked.duration_since(started),
                    open_fds(pid)
                )
            });
            assert_eq!(r.status(), reqwest::StatusCode::OK);
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["status"], "healthy", "{body}");
            asked.elapsed()
        }
    };
    // Idle, for comparison.
    let mut idle = Vec::new();
    for _ in 0..10 {
        idle.push(health("idle").await);
    }
    idle.sort();

    // The flood: 20 000 half-sent requests from 5 processes (more where
    // a process may not open 4 000 sockets).
    let hard = stockade_server::serve::open_files_limit().hard;
    let per_client = PER_CLIENT.min(usize::try_from(hard.saturating_sub(64)).unwrap_or(PER_CLIENT));
    assert!(
        per_client >= 500,
        "an open-files hard limit of {hard} is too low for the flood"
    );
    let clients: Vec<Child> = (0..FLOOD.div_ceil(per_client))
        .map(|index| {
            Command::new(std::env::current_exe().unwrap())
                .args(["flood_client", "--exact", "--ignored", "--nocapture"])
                .env("STOCKADE_FLOOD_TARGET", addr.to_string())
                .env("STOCKADE_FLOOD_INDEX", index.to_string())
                .env("STOCKADE_FLOOD_CONNECTIONS", per_client.to_string())
                .env("STOCKADE_FLOOD_HOLD_SECS", HOLD.as_secs().to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn a flood client")
        })
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        clients
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().expect("flood client");
                String::from_utf8_lossy(&out.stdout).into_owned()
            })
            .collect::<Vec<_>>()
    });

    let flood_ends = Instant::now() + HOLD;
    let (mut during, mut polls_at_the_cap, mut most_fds) = (Vec::new(), 0, 0usize);
    while Instant::now() < flood_ends {
        let fds = open_fds(pid);
        most_fds = most_fds.max(fds);
        let took = health("during the flood").await;
        during.push(took);
        if fds >= 384 {
            polls_at_the_cap += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    during.sort();
    let within_a_second = during
        .iter()
        .filter(|d| **d < Duration::from_secs(1))
        .count();
    assert!(
        within_a_second * 10 >= during.len() * 9,
        "only {within_a_second} of {} /health answers within 1 s: {during:?}",
        during.len()
    );
    let reports: Vec<Report> = outputs
        .await
        .unwrap()
        .iter()
        .map(|o| report_of(o))
        .collect();
    let connected: usize = reports.iter().map(|r| r.connected).sum();
    let closed: usize = reports.iter().map(|r| r.closed_by_server).sum();
    eprintln!(
        "flood: {connected} connections ({} failed), {closed} closed by the server; \
         {} /health polls ({polls_at_the_cap} at the cap): median {:?}, slowest {:?} \
         (idle: median {:?}, slowest {:?}); at most {most_fds} descriptors open",
        reports.iter().map(|r| r.failed).sum::<usize>(),
        during.len(),
        during[during.len() / 2],
        during[during.len() - 1],
        idle[idle.len() / 2],
        idle[idle.len() - 1],
    );
    assert!(
        connected > 10 * 1024,
        "the flood reached only {connected} connections"
    );
    // The server held no more than its cap: the rest it closed.
    assert!(
        closed + 384 + 64 >= connected,
        "{closed} of {connected} closed"
    );
    assert!(most_fds < 1024, "{most_fds} descriptors open");
    assert!(
        most_fds >= 384,
        "the flood never filled the cap ({most_fds} descriptors)"
    );
    assert!(polls_at_the_cap >= 5, "{polls_at_the_cap} polls at the cap");

    // Right after, the API works.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let me = get_json(&http, format!("{}/api/v1/me", server.url), TOKEN).await;
    let _cleanup = AccountCleanup(me["account"]["id"].as_str().expect("my account").to_owned());
    let created = http
        .post(format!("{}/api/v1/sandbox", server.url))
        .bearer_auth(TOKEN)
        .json(&json!({ "name": "after-the-flood" }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), reqwest::StatusCode::CREATED);
    let created: Value = created.json().await.unwrap();
    let list = get_json(&http, format!("{}/api/v1/sandbox", server.url), TOKEN).await;
    assert_eq!(list["total"], 1, "{list}");
    let gone = http
        .delete(format!(
            "{}/api/v1/sandbox/{}",
            server.url,
            created["id"].as_str().unwrap()
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(gone.status().is_success(), "{}", gone.status());
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_open_files_limit_is_raised_to_the_hard_limit_at_start() {
    let hard = stockade_server::serve::open_files_limit().hard;
    if hard <= 1024 {
        eprintln!("skipped: the hard open-files limit is {hard}, nothing to raise to");
        return;
    }
    let server = start("-S -n 1024");
    let line = banner_line(&server, "clients:");
    let shown = if hard == u64::MAX {
        "unlimited".to_owned()
    } else {
        hard.to_string()
    };
    assert!(
        line.contains(&format!("open files: {shown}, raised from 1024")),
        "{line}"
    );
    let soft = std::fs::read_to_string(format!("/proc/{}/limits", server.child.id()))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .map(|l| l.split_whitespace().nth(3).unwrap_or_default().to_owned())
        .unwrap();
    assert_eq!(soft, shown);
}

/// One client process of the flood: connects `STOCKADE_FLOOD_CONNECTIONS`
/// times to `STOCKADE_FLOOD_TARGET`, sends half a request on each, holds
/// them for `STOCKADE_FLOOD_HOLD_SECS` and reports what the server closed.
/// The connections come from 200 loopback addresses of the process's own
/// (`127.0.{10 + STOCKADE_FLOOD_INDEX}.1-200`), so that the flood fills the
/// server's whole cap (one address holds only its share of it) while the
/// test's `/health` probes come from 127.0.0.1.
#[test]
#[ignore = "a client process of a_flood_of_half_sent_requests_leaves_the_server_answering"]
fn flood_client() {
    let Ok(target) = std::env::var("STOCKADE_FLOOD_TARGET") else {
        eprintln!("flood_client runs only as a client process of the flood test");
        return;
    };
    let target: SocketAddr = target.parse().unwrap();
    let count: usize = std::env::var("STOCKADE_FLOOD_CONNECTIONS")
        .unwrap()
        .parse()
        .unwrap();
    let hold = Duration::from_secs(
        std::env::var("STOCKADE_FLOOD_HOLD_SECS")
            .unwrap()
            .parse()
            .unwrap(),
    );
    let index: u8 = std::env::var("STOCKADE_FLOOD_INDEX")
        .ok()
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    // Thousands of sockets need more than the usual 1024 descriptors.
    let _ = stockade_server::serve::raise_open_files_limit();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connect_from = |i: usize| -> std::io::Result<TcpStream> {
        let host = u8::try_from(i % 200).unwrap_or(0) + 1;
        let source = SocketAddr::from(([127, 10 + index, 0, host], 0));
        rt.block_on(async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(source)?;
            let stream =
                tokio::time::timeout(Duration::from_secs(2), socket.connect(target)).await??;
            let stream = stream.into_std()?;
            stream.set_nonblocking(false)?;
            Ok(stream)
        })
    };
    let until = Instant::now() + hold;
    let (mut held, mut failed) = (Vec::with_capacity(count), 0usize);
    for i in 0..count {
        if Instant::now() >= until {
            break;
        }
        match connect_from(i) {
            Ok(mut s) => {
                let head = format!("GET /api/v1/sandbox HTTP/1.1\r\nHost: flood\r\nX-Flood-{i}: ");
                let _ = s.write_all(head.as_bytes());
                held.push(s);
            }
            Err(_) => failed += 1,
        }
    }
    std::thread::sleep(until.saturating_duration_since(Instant::now()));
    let closed = held
        .iter()
        .filter(|s| {
            let _ = s.set_nonblocking(true);
            let mut buf = [0u8; 64];
            let mut socket: &TcpStream = s;
            match socket.read(&mut buf) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            }
        })
        .count();
    println!(
        "FLOOD connected={} failed={failed} closed_by_server={closed}",
        held.len()
    );
}
