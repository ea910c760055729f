//! Several `stockade server` processes:
//! - on one SQLite database only one runs: a second is refused at start
//!   with a message naming the database and the first server's process,
//!   and once the first is killed (SIGKILL: the lock goes with the process)
//!   a new one starts and leads at once;
//! - on one PostgreSQL database (`STOCKADE_TEST_DATABASE_URL`, a fresh
//!   database per run) two run, exactly one leads the background work
//!   (`/health` `leader`), the leader acts on a session timeout, and once
//!   the leader is killed the other takes over within the lease's term and
//!   acts on the next one; both deliver webhooks, each event once, a
//!   sandbox's events in order whichever instance changed it;
//! - three Docker hosts (the main engine, `h2` on a unix socket, `h3` over
//!   TCP with TLS, all started by `scripts/test`) under two instances on
//!   PostgreSQL: six creates at once fill the three
//!   hosts exactly, a seventh is refused; exec, files, logs, a terminal and
//!   the proxy reach every host's sandboxes through either instance;
//!   `server` and `hostSelector` choose; a snapshot taken on one host
//!   starts on another; stopping h2's engine cordons it within seconds
//!   while creates go elsewhere, and starting it again recovers its
//!   sandboxes.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

mod support;
use support::{get_json, image, post_json, repo, KillOnDrop};

const TOKEN: &str = "stk_instances_test_admin_token";

/// A server process: killed with SIGKILL when dropped; its log in `log`.
struct Server {
    child: KillOnDrop,
    url: String,
    log: PathBuf,
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        self.child.0.kill().unwrap();
        self.child.0.wait().unwrap();
    }

    async fn health(&self) -> Value {
        reqwest::get(format!("{}/api/v1/health", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn leader(&self) -> Value {
        self.health().await["leader"].clone()
    }
}

fn command(data_dir: &Path, database: Option<&str>, log: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stockade"));
    cmd.arg("server")
        .env("STOCKADE_LISTEN", "127.0.0.1:0")
        .env("STOCKADE_DATA_DIR", data_dir)
        .env("STOCKADE_DEFAULT_IMAGE", image())
        .env("STOCKADE_ADMIN_TOKEN", TOKEN)
        .env("STOCKADE_LEADER_LEASE_SECONDS", "2")
        .env_remove("STOCKADE_WARM_POOL")
        .env(
            "STOCKADE_LOG",
            "warn,stockade_service::sandbox::sessions=info,stockade_service::tasks::leader=info",
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap());
    match database {
        Some(url) => cmd.env("STOCKADE_DATABASE_URL", url),
        None => cmd.env_remove("STOCKADE_DATABASE_URL"),
    };
    cmd
}

/// Starts a server and waits for its banner's address (30 s at most).
fn start(data_dir: &Path, database: Option<&str>, name: &str) -> Server {
    start_with(data_dir, database, name, &[])
}

/// [`start`] with more settings in the environment.
fn start_with(
    data_dir: &Path,
    database: Option<&str>,
    name: &str,
    envs: &[(&str, &str)],
) -> Server {
    let log = data_dir.join(format!("{name}.log"));
    let mut cmd = command(data_dir, database, &log);
    cmd.envs(envs.iter().copied());
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = tx.send(url.trim().to_owned());
            }
        }
    });
    let url = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(url) => url,
        Err(_) => {
            drop(child);
            panic!(
                "{name} did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
    };
    Server { child, url, log }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_one_sqlite_database_is_refused_until_the_first_dies() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = start(dir.path(), None, "first");
    let leader = first.leader().await;
    assert_eq!(leader["isLeader"], true, "{leader}");

    let log = dir.path().join("second.log");
    let mut second = command(dir.path(), None, &log).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            panic!(
                "the second server did not stop: {}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{status:?}: {said}");
    let db = dir.path().join("stockade.db");
    for part in [
        "already uses the SQLite database".to_owned(),
        db.display().to_string(),
        format!("(process {})", first.pid()),
        "PostgreSQL".to_owned(),
    ] {
        assert!(said.contains(&part), "missing {part:?} in: {said}");
    }
    // The first one is unharmed.
    assert_eq!(first.health().await["leader"]["isLeader"], true);

    // SIGKILL: nothing is cleaned up, yet the lock is gone with the process,
    // and the new server leads at once (the old lease was its own).
    first.kill();
    let third = start(dir.path(), None, "third");
    let leader = third.leader().await;
    assert_eq!(leader["isLeader"], true, "{leader}");
    assert_eq!(leader["holder"], leader["instance"], "{leader}");
}

/// A fresh PostgreSQL database for one test, dropped at the end.
struct PgDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl PgDatabase {
    fn create(admin_url: &str) -> Self {
        let name = format!(
            "stockade_test_{}",
            stockade_core::SandboxId::generate().as_str()
        );
        let url = match admin_url.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => panic!("unexpected URL {admin_url}"),
        };
        let db = Self {
            admin_url: admin_url.to_owned(),
            name,
            url,
        };
        db.psql(&format!("CREATE DATABASE {}", db.name));
        db
    }

    /// `psql` running `sql` as the administrator, stopping at an error.
    fn psql_command(&self, sql: &str) -> Command {
        let mut cmd = Command::new("psql");
        let url = self.admin_url.as_str();
        cmd.args([url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql]);
        cmd
    }

    fn psql(&self, sql: &str) {
        let out = self
            .psql_command(sql)
            .output()
            .expect("psql is needed to create a test database");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = self.psql_command(&drop).output();
    }
}

/// Removes the Docker objects of an installation, however the test ends:
/// on the main engine and on every engine given by its `docker` arguments.
struct DockerCleanup(String, Vec<Vec<String>>);

impl DockerCleanup {
    fn main(installation: String) -> Self {
        Self(installation, vec![Vec::new()])
    }
}

impl Drop for DockerCleanup {
    fn drop(&mut self) {
        let filter = format!("label=io.stockade.instance-id={}", self.0);
        for engine in &self.1 {
            let docker = |args: &[&str]| {
                Command::new("docker")
                    .args(engine)
                    .args(args)
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default()
            };
            for id in docker(&["ps", "-aq", "--filter", &filter]).split_whitespace() {
                docker(&["rm", "-f", "-v", id]);
            }
            for v in docker(&["volume", "ls", "-q", "--filter", &filter]).split_whitespace() {
                docker(&["volume", "rm", "-f", v]);
            }
        }
    }
}

/// Both servers' views of the lease once they agree: (leader, follower)
/// as indexes into `servers`.
async fn agreed_leader(servers: &[&Server], within: Duration) -> (usize, usize) {
    let deadline = Instant::now() + within;
    loop {
        let mut views = Vec::new();
        for s in servers {
            views.push(s.leader().await);
        }
        let leaders: Vec<usize> = (0..views.len())
            .filter(|&i| views[i]["isLeader"] == true)
            .collect();
        let agreed = leaders.len() == 1
            && views
                .iter()
                .all(|v| v["holder"] == views[leaders[0]]["instance"]);
        if agreed {
            let leader = leaders[0];
            return (leader, 1 - leader);
        }
        assert!(
            Instant::now() < deadline,
            "no single leader both servers agree on: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a (persistent) sandbox whose session ends after 3 s and waits
/// (bounded) until the session's end stopped it; returns its id.
async fn create_and_outlive(server: &Server) -> String {
    let http = reqwest::Client::new();
    let created = post_json(
        &http,
        format!("{}/api/v1/sandbox", server.url),
        TOKEN,
        Some(&json!({"dockerImage": image(), "timeoutMinutes": 0.05})),
    )
    .await;
    let id = created["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sb = get_json(&http, format!("{}/api/v1/sandbox/{id}", server.url), TOKEN).await;
        if sb["status"] == "STOPPED" && sb["statusReason"] == "session timed out" {
            return id;
        }
        assert!(
            Instant::now() < deadline,
            "the session of {id} did not end: {sb}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn acted_on(server: &Server, id: &str) -> bool {
    server
        .log()
        .lines()
        .any(|l| l.contains("session timed out") && l.contains(id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_postgres_share_the_background_work_and_take_over() {
    let Ok(admin_url) = std::env::var("STOCKADE_TEST_DATABASE_URL") else {
        eprintln!("two_servers_on_postgres… skipped: set STOCKADE_TEST_DATABASE_URL");
        return;
    };
    let db = PgDatabase::create(&admin_url);
    let installation = {
        let store = stockade_store::connect(&db.url).await.unwrap();
        store.instance_id().await.unwrap().to_string()
    };
    let _cleanup = DockerCleanup::main(installation);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    // Webhooks reach a receiver on loopback.
    let loopback = [("STOCKADE_ALLOW_INTERNAL_ADDRESSES", "127.0.0.1/32")];
    let a = start_with(dirs[0].path(), Some(&db.url), "a", &loopback);
    let b = start_with(dirs[1].path(), Some(&db.url), "b", &loopback);
    let mut servers = [a, b];
    events_are_delivered_once_in_order(&servers).await;

    let (leader, follower) =
        agreed_leader(&[&servers[0], &servers[1]], Duration::from_secs(10)).await;
    // It stays so while the leader lives (several renewals).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        agreed_leader(&[&servers[0], &servers[1]], Duration::from_secs(1)).await,
        (leader, follower)
    );
    let view = servers[leader].leader().await;
    let expires: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(view["expiresAt"].clone()).unwrap();
    let ahead = expires - chrono::Utc::now();
    assert!(
        ahead > chrono::Duration::zero() && ahead <= chrono::Duration::seconds(2),
        "{view}"
    );

    // A session timeout, asked of the follower, is acted on by the leader.
    let id = create_and_outlive(&servers[follower]).await;
    assert!(acted_on(&servers[leader], &id), "{}", servers[leader].log());
    assert!(
        !acted_on(&servers[follower], &id),
        "{}",
        servers[follower].log()
    );

    // Kill the leader: the other takes over within the term (2 s) and a
    // third of it, give or take a poll.
    servers[leader].kill();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(6);
    loop {
        let view = servers[follower].leader().await;
        if view["isLeader"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "no takeover: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(4), "took over after {took:?}");
    eprintln!("takeover {took:?} after the leader was killed");

    let id = create_and_outlive(&servers[follower]).await;
    assert!(
        acted_on(&servers[follower], &id),
        "{}",
        servers[follower].log()
    );
}

/// Sandboxes created, stopped and deleted through both instances: their
/// events form one order per sandbox in the feed of either instance, and a
/// webhook (delivered by both instances, each delivery claimed by one) gets
/// each event once, in that order.
async fn events_are_delivered_once_in_order(servers: &[Server; 2]) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = support::receive_webhooks(listener);
    let (status, hook) = call(
        &servers[0],
        Method::POST,
        "/webhooks",
        Some(json!({"url": format!("http://127.0.0.1:{port}/hook"),
                    "events": ["sandbox.lifecycle.created", "sandbox.lifecycle.stopped",
                               "sandbox.lifecycle.killed"]})),
    )
    .await;
    assert_eq!(status, 201, "{hook}");
    let mut ids = Vec::new();
    for i in 0..4 {
        let (status, sb) = create_on(&servers[i % 2], json!({})).await;
        assert_eq!(status, 201, "{sb}");
        let id = sb["id"].as_str().unwrap().to_owned();
        let other = &servers[(i + 1) % 2];
        let (status, _) = call(
            other,
            Method::POST,
            &format!("/sandbox/{id}/stop?timeout=1"),
            None,
        )
        .await;
        assert_eq!(status, 200);
        let (status, _) = call(
            &servers[i % 2],
            Method::DELETE,
            &format!("/sandbox/{id}"),
            None,
        )
        .await;
        assert_eq!(status, 200);
        ids.push(id);
    }
    let want = [
        "sandbox.lifecycle.created",
        "sandbox.lifecycle.stopped",
        "sandbox.lifecycle.killed",
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let delivered: Vec<Value> = loop {
        let bodies: Vec<Value> = got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, body)| serde_json::from_slice(body).unwrap())
            .collect();
        if bodies.len() >= ids.len() * want.len() {
            break bodies;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} delivered",
            bodies.len(),
            ids.len() * 3
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Nothing more arrives: each event once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = got.lock().unwrap().len();
    assert_eq!(all, ids.len() * want.len(), "an event was delivered twice");
    let mut unique: Vec<&str> = delivered
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), all);
    for id in &ids {
        let types: Vec<&str> = delivered
            .iter()
            .filter(|e| e["sandboxId"] == id.as_str())
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, want, "{id}");
        for server in servers {
            let (status, feed) = call(
                server,
                Method::GET,
                &format!("/events?sandboxId={id}"),
                None,
            )
            .await;
            assert_eq!(status, 200, "{feed}");
            let types: Vec<&str> = feed["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["type"].as_str().unwrap())
                .collect();
            assert_eq!(types, want, "{id} in the feed");
        }
    }
    let (status, _) = call(
        &servers[1],
        Method::DELETE,
        &format!("/webhooks/{}", hook["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(status, 204);
}

/// The engines of the several-hosts test, from `scripts/test`: a second one
/// on a unix socket, a third one on TCP with TLS client certificates.
struct Engines {
    h2: String,
    h3: String,
    h3_tls: PathBuf,
    /// What restarts h2 with its settings (after the test stopped it).
    h2_settings: String,
}

impl Engines {
    fn from_env() -> Option<Self> {
        Some(Self {
            h2: std::env::var("STOCKADE_TEST_HOST2").ok()?,
            h3: std::env::var("STOCKADE_TEST_HOST3").ok()?,
            h3_tls: std::env::var("STOCKADE_TEST_HOST3_TLS").ok()?.into(),
            h2_settings: std::env::var("STOCKADE_TEST_HOST2_SETTINGS").unwrap_or_default(),
        })
    }

    /// `docker` arguments that reach each engine (the main one first).
    fn docker_args(&self) -> Vec<Vec<String>> {
        let tls = |f: &str| self.h3_tls.join(f).display().to_string();
        vec![
            Vec::new(),
            vec!["-H".into(), self.h2.clone()],
            vec![
                "-H".into(),
                self.h3.clone(),
                "--tlsverify".into(),
                format!("--tlscacert={}", tls("ca.pem")),
                format!("--tlscert={}", tls("cert.pem")),
                format!("--tlskey={}", tls("key.pem")),
            ],
        ]
    }

    /// Stops h2's dockerd (SIGTERM to the pid of its pidfile) and waits for
    /// it to be gone.
    fn stop_h2(&self) {
        let socket = self.h2.trim_start_matches("unix://");
        let pidfile = Path::new(socket).with_file_name("docker.pid");
        let pid = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()));
        let pid = pid.trim();
        assert!(Command::new("kill").arg(pid).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(60);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(Instant::now() < deadline, "dockerd {pid} did not stop");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Starts h2 again with the settings `scripts/test` gave it.
    fn start_h2(&self) {
        let root = repo();
        let out = Command::new("bash")
            .arg("-c")
            .arg(r#"source "$1/scripts/lib/engine.sh" && ensure_test_engine h2 $2"#)
            .arg("start-h2")
            .arg(&root)
            .arg(&self.h2_settings)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "h2 did not start again: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// One JSON request to a server as the administrator.
async fn call(server: &Server, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let http = reqwest::Client::new();
    let mut req = http
        .request(method, format!("{}/api/v1{path}", server.url))
        .bearer_auth(TOKEN);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Creates a sandbox (1 CPU, a quarter GB) and returns its record.
async fn create_on(server: &Server, extra: Value) -> (u16, Value) {
    let mut body = json!({
        "dockerImage": image(),
        "cpuCores": 1,
        "memoryGB": 0.25,
        "startCommand": "mkdir -p /workspace/www && echo \"page of $(hostname)\" > /workspace/www/index.html && exec httpd -f -p 8080 -h /workspace/www",
    });
    // `null` in `extra` leaves a field out.
    for (k, v) in extra.as_object().unwrap() {
        match v {
            Value::Null => {
                body.as_object_mut().unwrap().remove(k);
            }
            v => body[k] = v.clone(),
        }
    }
    call(server, Method::POST, "/sandbox", Some(body)).await
}

/// Runs `line` in sandbox `id` through `server` and returns its stdout.
async fn shell(server: &Server, id: &str, line: &str) -> String {
    let (status, out) = call(
        server,
        Method::POST,
        &format!("/sandbox/{id}/exec"),
        Some(json!({"shell": line})),
    )
    .await;
    assert_eq!(status, 200, "exec in {id} via {}: {out}", server.url);
    assert_eq!(out["exitCode"], 0, "{out}");
    out["stdout"].as_str().unwrap_or_default().to_owned()
}

/// Types into a terminal of sandbox `id` opened through `server` and
/// waits (bounded) for the shell's answer.
async fn terminal_answers(server: &Server, id: &str) {
    let client = stockade_sdk::Client::new(server.url.clone(), TOKEN).unwrap();
    let sb = stockade_sdk::Sandbox::get(&client, id).await.unwrap();
    let mut term = sb
        .terminal(stockade_sdk::TerminalOptions::new())
        .await
        .unwrap_or_else(|e| panic!("terminal of {id} via {}: {e}", server.url));
    term.write(b"echo term-$((6*7))\n").await.unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.contains("term-42") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, term.read()).await {
            Ok(Some(Ok(bytes))) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            other => panic!(
                "terminal of {id} via {}: {other:?}, saw {seen:?}",
                server.url
            ),
        }
    }
}

/// Waits (bounded) until host `name` as `server` lists it satisfies `ok`.
async fn host_until(
    server: &Server,
    name: &str,
    within: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (_, host) = call(server, Method::GET, &format!("/hosts/{name}"), None).await;
        if ok(&host) {
            return host;
        }
        assert!(
            Instant::now() < deadline,
            "host {name} never got there: {host}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_spread_over_three_hosts_and_a_failing_host_is_cordoned_and_recovered() {
    let (Ok(admin_url), Some(engines)) = (
        std::env::var("STOCKADE_TEST_DATABASE_URL"),
        Engines::from_env(),
    ) else {
        if std::env::var_os("STOCKADE_TEST_HOSTS_REQUIRED").is_some() {
            panic!(
                "the engines of scripts/test are missing: {} {}",
                std::env::var("STOCKADE_TEST_HOST2_ERROR").unwrap_or_default(),
                std::env::var("STOCKADE_TEST_HOST3_ERROR").unwrap_or_default()
            );
        }
        eprintln!(
            "several hosts… skipped: scripts/test sets STOCKADE_TEST_DATABASE_URL and \
             STOCKADE_TEST_HOST2/3"
        );
        return;
    };
    let db = PgDatabase::create(&admin_url);
    let installation = {
        let store = stockade_store::connect(&db.url).await.unwrap();
        store.instance_id().await.unwrap().to_string()
    };
    let _cleanup = DockerCleanup(installation, engines.docker_args());
    // Both instances keep snapshots in one object store (a directory here).
    let shared = tempfile::tempdir().unwrap();
    let blobs = shared.path().join("blobs");
    let blobs = blobs.to_str().unwrap();
    let envs = [
        ("STOCKADE_CPU_OVERCOMMIT", "1"),
        ("STOCKADE_HOST_CHECK_INTERVAL", "1"),
        ("STOCKADE_BLOB_DIR", blobs),
    ];
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let a = start_with(dirs[0].path(), Some(&db.url), "a", &envs);
    let b = start_with(dirs[1].path(), Some(&db.url), "b", &envs);
    let both = [&a, &b];

    // Three hosts of 2 CPUs each: the own one and two registered.
    let tls = |f: &str| engines.h3_tls.join(f).display().to_string();
    let (status, h2) = call(&a, Method::POST, "/hosts", Some(json!({
        "name": "h2", "dockerHost": engines.h2, "labels": {"zone": "b"}, "capacity": {"cpus": 2},
    }))).await;
    assert_eq!(status, 201, "{h2}");
    let (status, h3) = call(&b, Method::POST, "/hosts", Some(json!({
        "name": "h3", "dockerHost": engines.h3, "labels": {"zone": "c"}, "capacity": {"cpus": 2},
        "tls": {"ca": tls("ca.pem"), "cert": tls("cert.pem"), "key": tls("key.pem")},
    }))).await;
    assert_eq!(status, 201, "{h3}");
    let (status, own) = call(
        &a,
        Method::PATCH,
        "/hosts/local",
        Some(json!({"capacity": {"cpus": 2}})),
    )
    .await;
    assert_eq!(status, 200, "{own}");

    // Six creates at once through both instances fill every host exactly:
    // placement is one transaction, whichever instance places.
    let creates = (0..6).map(|i| create_on(both[i % 2], json!({})));
    let made = futures_util::future::join_all(creates).await;
    let mut per_host = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (status, sb) in &made {
        assert_eq!(*status, 201, "{sb}");
        per_host
            .entry(sb["server"].as_str().unwrap().to_owned())
            .or_default()
            .push(sb["id"].as_str().unwrap().to_owned());
    }
    let counts: Vec<(String, usize)> = per_host
        .iter()
        .map(|(h, ids)| (h.clone(), ids.len()))
        .collect();
    assert_eq!(
        counts,
        vec![("h2".into(), 2), ("h3".into(), 2), ("local".into(), 2)],
        "{made:?}"
    );
    let (status, full) = create_on(&b, json!({})).await;
    assert_eq!(status, 409, "{full}");
    assert!(full.to_string().contains("insufficient"), "{full}");

    // Every sandbox is reached on its host through either instance: exec,
    // files, logs and the proxy.
    let http = reqwest::Client::new();
    for ids in per_host.values() {
        for id in ids {
            for server in both {
                let host = shell(server, id, "hostname").await;
                assert!(!host.trim().is_empty());
                let (status, _) = call(
                    server,
                    Method::PUT,
                    &format!(
                        "/sandbox/{id}/files?path=/workspace/from-{}.txt",
                        server.pid()
                    ),
                    Some(json!("x")),
                )
                .await;
                assert!(status == 200 || status == 201, "write in {id}: {status}");
            }
            terminal_answers(&b, id).await;
            let listing = shell(&a, id, "ls /workspace").await;
            assert_eq!(listing.matches("from-").count(), 2, "{listing}");
            let (status, logs) =
                call(&b, Method::GET, &format!("/sandbox/{id}/logs?tail=5"), None).await;
            assert_eq!(status, 200, "{logs}");
            let (status, port) = call(
                &b,
                Method::POST,
                &format!("/sandbox/{id}/ports"),
                Some(json!({"port": 8080})),
            )
            .await;
            assert!(status == 200 || status == 201, "{port}");
            let (_, token) = call(
                &a,
                Method::POST,
                &format!("/sandbox/{id}/auth-token"),
                Some(json!({})),
            )
            .await;
            let token = token["token"].as_str().unwrap().to_owned();
            let url = port["url"].as_str().unwrap().replace(&b.url, &a.url);
            let page = http
                .get(&url)
                .header("X-Stockade-Token", &token)
                .send()
                .await
                .unwrap();
            assert_eq!(page.status(), 200, "{url}");
            assert!(page.text().await.unwrap().starts_with("page of"));
        }
    }

    // Asked for by name and by label.
    let gone = per_host["h3"][0].clone();
    let (status, _) = call(&a, Method::DELETE, &format!("/sandbox/{gone}"), None).await;
    assert!(status == 200 || status == 204, "{status}");
    let (status, local_full) = create_on(&a, json!({"server": "local"})).await;
    assert_eq!(status, 409, "{local_full}");
    let (status, on_c) = create_on(&a, json!({"hostSelector": {"zone": "c"}})).await;
    assert_eq!(status, 201, "{on_c}");
    assert_eq!(on_c["server"], "h3");
    let (status, unknown) = create_on(&a, json!({"server": "nowhere"})).await;
    assert_eq!(status, 400, "{unknown}");
    assert!(unknown.to_string().contains("server"), "{unknown}");

    // A snapshot taken on one host starts on another (its image travels
    // through the object store).
    let source = per_host["local"][0].clone();
    shell(
        &a,
        &source,
        "echo kept > /workspace/snap.txt && echo rootfs > /etc/snap-mark",
    )
    .await;
    let (status, snap) = call(
        &a,
        Method::POST,
        &format!("/sandbox/{source}/snapshots"),
        Some(json!({"name": "travel"})),
    )
    .await;
    assert_eq!(status, 201, "{snap}");
    let snap_id = snap["id"].as_str().unwrap().to_owned();
    let (status, freed) = call(
        &a,
        Method::DELETE,
        &format!("/sandbox/{}", per_host["h2"][0]),
        None,
    )
    .await;
    assert!(status == 200 || status == 204, "{freed}");
    let (status, restored) = create_on(
        &b,
        json!({"server": "h2", "dockerImage": null, "source": {"type": "snapshot", "snapshotId": snap_id}}),
    )
    .await;
    assert_eq!(status, 201, "{restored}");
    assert_eq!(restored["server"], "h2");
    let rid = restored["id"].as_str().unwrap().to_owned();
    assert_eq!(
        shell(&b, &rid, "cat /workspace/snap.txt /etc/snap-mark").await,
        "kept\nrootfs\n"
    );

    // A paused sandbox on h2, with files and a process.
    let paused_id = per_host["h2"][1].clone();
    shell(
        &a,
        &paused_id,
        "echo kept > /workspace/paused.txt; sleep 1000 >/dev/null 2>&1 &",
    )
    .await;
    let (status, p) = call(
        &a,
        Method::POST,
        &format!("/sandbox/{paused_id}/pause"),
        None,
    )
    .await;
    assert_eq!((status, p["status"].as_str()), (200, Some("PAUSED")), "{p}");

    // h2 goes away: it is cordoned within seconds, its sandboxes say so,
    // creates keep succeeding elsewhere.
    let on_h2: Vec<String> = vec![rid.clone()];
    let stopped = Instant::now();
    engines.stop_h2();
    let host = host_until(&b, "h2", Duration::from_secs(20), |h| {
        h["state"] == "cordoned" && h["autoCordoned"] == true && h["health"]["healthy"] == false
    })
    .await;
    eprintln!(
        "h2 cordoned {:?} after its engine stopped: {host}",
        stopped.elapsed()
    );
    let (_, detail) = call(&a, Method::GET, &format!("/sandbox/{}", on_h2[0]), None).await;
    assert_eq!(detail["host"]["state"], "cordoned", "{detail}");
    let (status, _) = call(
        &a,
        Method::DELETE,
        &format!("/sandbox/{}", on_c["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert!(status == 200 || status == 204);
    let (status, elsewhere) = create_on(&a, json!({})).await;
    assert_eq!(status, 201, "{elsewhere}");
    assert_ne!(elsewhere["server"], "h2", "{elsewhere}");

    // It comes back: uncordoned, and what ran there runs again.
    engines.start_h2();
    host_until(&a, "h2", Duration::from_secs(30), |h| {
        h["state"] == "active" && h["health"]["healthy"] == true
    })
    .await;
    for id in &on_h2 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, sb) = call(&b, Method::GET, &format!("/sandbox/{id}"), None).await;
            if sb["status"] == "RUNNING" && sb.get("host").is_none_or(Value::is_null) {
                break;
            }
            assert!(Instant::now() < deadline, "{id} did not recover: {sb}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let out = shell(&b, id, "cat /workspace/www/index.html").await;
        assert!(out.starts_with("page of"), "{out}");
    }

    // The paused one lost its processes with the engine: STOPPED, saying
    // why, never RUNNING or PAUSED over a dead container; its files are
    // there when it starts again.
    let deadline = Instant::now() + Duration::from_secs(45);
    let stopped = loop {
        let (_, sb) = call(&b, Method::GET, &format!("/sandbox/{paused_id}"), None).await;
        assert_ne!(sb["status"], "RUNNING", "{sb}");
        if sb["status"] == "STOPPED" {
            break sb;
        }
        assert!(
            Instant::now() < deadline,
            "{paused_id} still {}: {sb}",
            sb["status"]
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let reason = stopped["statusReason"].as_str().unwrap_or_default();
    assert!(reason.contains("while it was paused"), "{stopped}");
    let (status, resumed) = call(
        &a,
        Method::POST,
        &format!("/sandbox/{paused_id}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{resumed}");
    let (status, _) = call(
        &a,
        Method::POST,
        &format!("/sandbox/{paused_id}/start"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        shell(&b, &paused_id, "cat /workspace/paused.txt").await,
        "kept\n"
    );

    // A host is removed only once it holds nothing.
    let (status, refused) = call(&a, Method::DELETE, "/hosts/h2", None).await;
    assert_eq!(status, 409, "{refused}");
    let (_, all) = call(&a, Method::GET, "/sandbox?per_page=100", None).await;
    for sb in all["sandboxes"].as_array().unwrap_or(&Vec::new()) {
        let id = sb["id"].as_str().unwrap();
        call(&a, Method::DELETE, &format!("/sandbox/{id}"), None).await;
    }
    call(&a, Method::DELETE, &format!("/snapshots/{snap_id}"), None).await;
    for name in ["h2", "h3"] {
        let (status, body) = call(&b, Method::DELETE, &format!("/hosts/{name}"), None).await;
        assert_eq!(status, 204, "{name}: {body}");
    }
}
