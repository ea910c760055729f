//! `stockade server --warm-pool/--warm-pool-drain`: bad values
//! stop the start before anything is created, naming the flag; a good one
//! is shown at start, fills the pool (seen in `/metrics`) and, with drain,
//! a stop removes the pool's sandboxes.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{image, lines_of};

fn server_cmd(data_dir: &std::path::Path, extra: &[&str]) -> Command {
    support::server_cmd(
        data_dir,
        "stk_warm_pool_flags_admin_token",
        &["STOCKADE_WARM_POOL", "STOCKADE_WARM_POOL_DRAIN"],
        extra,
    )
}

/// Kills the server and removes what its instance made, however the test ends.
struct Server {
    child: Child,
    instance: Option<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(instance) = &self.instance {
            let filter = format!("label=io.stockade.instance-id={instance}");
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
}

fn members(instance: &str) -> usize {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=io.stockade.instance-id={instance}"),
            "--filter",
            "label=io.stockade.pool-member",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .count()
}

#[test]
fn bad_warm_pool_flags_stop_the_start_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for (spec, says) in [
        ("lots", "number of members"),
        ("2,cpu=0", "positive number"),
        ("2,gpu=1", "unknown warm pool setting"),
        ("1,image=not an image", "dockerImage"),
        ("1,memory=100000", "memoryGB"),
    ] {
        let out = server_cmd(&data, &["--warm-pool", spec])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{spec} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--warm-pool") && err.contains(says),
            "{spec}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(!data.exists(), "{spec}: the data directory was created");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warm_pool_is_shown_filled_and_drained_on_stop() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = server_cmd(dir.path(), &["--warm-pool", "1", "--warm-pool-drain"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut server = Server {
        child,
        instance: None,
    };
    let rx = lines_of(stdout);
    let mut url = None;
    let mut pool_line = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while url.is_none() || pool_line.is_none() {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the server starts and prints its settings");
        if let Some(u) = line.split(" listening on ").nth(1) {
            url = Some(u.trim().to_owned());
        }
        if line.contains("warm pool:") {
            pool_line = Some(line);
        }
    }
    let url = url.unwrap();
    assert_eq!(
        pool_line.unwrap().trim(),
        format!(
            "warm pool: 1 × {} cpu=1 memory=2 disk=10 network=on",
            image()
        )
    );
    let store = stockade_store::SqliteStore::connect(&format!(
        "sqlite://{}",
        dir.path().join("stockade.db").display()
    ))
    .await
    .unwrap();
    let instance = stockade_store::SettingsStore::instance_id(&store)
        .await
        .unwrap()
        .to_string();
    server.instance = Some(instance.clone());

    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics.contains("network=on\"} 1\n") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not fill: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(members(&instance), 1);

    // SIGTERM: a graceful stop that drains the pool.
    let pid = server.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "{status:?}");
    assert_eq!(members(&instance), 0, "the pool was not drained");
}
