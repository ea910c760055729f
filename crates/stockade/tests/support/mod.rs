//! Helpers shared by the binary's test suites: the test image, the
//! `stockade server` command with a clean environment, killing a child
//! process however a test ends, listing and removing what Docker holds
//! for an account.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command};

/// The image test sandboxes run (`STOCKADE_TEST_IMAGE`, else the local base
/// image).
pub fn image() -> String {
    std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into())
}

/// `stockade server` on `data_dir` with `extra` arguments, listening on a
/// free port, with `admin_token`, SQLite in the data directory, warnings
/// only, and none of the `unset` variables from the caller's environment
/// (so the flags under test are the only source of those settings).
pub fn server_cmd(data_dir: &Path, admin_token: &str, unset: &[&str], extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stockade"));
    cmd.arg("server")
        .args(extra)
        .env("STOCKADE_LISTEN", "127.0.0.1:0")
        .env("STOCKADE_DATA_DIR", data_dir)
        .env("STOCKADE_DEFAULT_IMAGE", image())
        .env("STOCKADE_ADMIN_TOKEN", admin_token)
        .env_remove("STOCKADE_DATABASE_URL");
    for var in unset {
        cmd.env_remove(var);
    }
    cmd.env("STOCKADE_LOG", "warn");
    cmd
}

/// Kills the child process when dropped, so also when the test fails.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The non-empty lines `docker args…` prints.
pub fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker").args(args).output().expect("docker");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Removes every container and volume of the account (its id), whatever
/// happens.
pub struct AccountCleanup(pub String);

impl Drop for AccountCleanup {
    fn drop(&mut self) {
        let filter = format!("label=io.stockade.account-id={}", self.0);
        let ids = docker_lines(&["ps", "-aq", "--filter", &filter]);
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f", "-v"];
            args.extend(ids.iter().map(String::as_str));
            let _ = Command::new("docker").args(&args).output();
        }
        let vols = docker_lines(&["volume", "ls", "-q", "--filter", &filter]);
        if !vols.is_empty() {
            let mut args = vec!["volume", "rm", "-f"];
            args.extend(vols.iter().map(String::as_str));
            let _ = Command::new("docker").args(&args).output();
        }
    }
}

/// GET `url` with `token`: the answer's JSON body (the test fails if the
/// request does or the body is no JSON).
pub async fn get_json(http: &reqwest::Client, url: String, token: &str) -> serde_json::Value {
    http.get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// POST `body` (if any) to `url` with `token`: the answer's JSON body.
pub async fn post_json(
    http: &reqwest::Client,
    url: String,
    token: &str,
    body: Option<&serde_json::Value>,
) -> serde_json::Value {
    let mut req = http.post(url).bearer_auth(token);
    if let Some(body) = body {
        req = req.json(body);
    }
    req.send().await.unwrap().json().await.unwrap()
}

/// The lines a child prints on `stdout`, read on a thread of its own that
/// drains the pipe to its end (so the child never blocks on a full pipe,
/// also after the receiver is gone).
pub fn lines_of(stdout: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    rx
}
