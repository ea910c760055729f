//! Several `stockade server` processes (SCALE-2, SCALE-7):
//! - on one SQLite database only one runs: a second is refused at start
//!   with a message naming the database and the first server's process,
//!   and once the first is killed (SIGKILL: the lock goes with the process)
//!   a new one starts and leads at once;
//! - on one PostgreSQL database (`STOCKADE_TEST_DATABASE_URL`, a fresh
//!   database per run) two run, exactly one leads the background work
//!   (`/health` `leader`), the leader acts on a session timeout, and once
//!   the leader is killed the other takes over within the lease's term and
//!   acts on the next one.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TOKEN: &str = "stk_instances_test_admin_token";

fn image() -> String {
    std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into())
}

/// A server process: killed with SIGKILL when dropped; its log in `log`.
struct Server {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
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
            "warn,stockade_service::sessions=info,stockade_service::leader=info",
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
    let log = data_dir.join(format!("{name}.log"));
    let mut child = command(data_dir, database, &log).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
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
            let _ = child.kill();
            let _ = child.wait();
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

    fn psql(&self, sql: &str) {
        let out = Command::new("psql")
            .args([
                self.admin_url.as_str(),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
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
        let _ = Command::new("psql")
            .args([
                self.admin_url.as_str(),
                "-X",
                "-q",
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ])
            .output();
    }
}

/// Removes the Docker objects of an installation, however the test ends.
struct DockerCleanup(String);

impl Drop for DockerCleanup {
    fn drop(&mut self) {
        let filter = format!("label=io.stockade.instance-id={}", self.0);
        let out = Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()
            .unwrap();
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("docker").args(["rm", "-f", "-v", id]).output();
        }
        let out = Command::new("docker")
            .args(["volume", "ls", "-q", "--filter", &filter])
            .output()
            .unwrap();
        for v in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("docker")
                .args(["volume", "rm", "-f", v])
                .output();
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
    let created: Value = http
        .post(format!("{}/api/v1/sandbox", server.url))
        .bearer_auth(TOKEN)
        .json(&json!({"dockerImage": image(), "timeoutMinutes": 0.05}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sb: Value = http
            .get(format!("{}/api/v1/sandbox/{id}", server.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
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
    let _cleanup = DockerCleanup(installation);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let a = start(dirs[0].path(), Some(&db.url), "a");
    let b = start(dirs[1].path(), Some(&db.url), "b");
    let mut servers = [a, b];

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
