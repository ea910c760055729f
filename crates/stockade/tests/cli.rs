//! The binary as a user runs it: `stockade server` on a fresh data directory
//! prints where it listens and the admin token once; `stockade account
//! create` and `stockade health` talk to it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    url: String,
    token: Option<String>,
    lines: Vec<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(data_dir: &std::path::Path, admin_token: Option<&str>) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stockade"));
    cmd.arg("server")
        .env("STOCKADE_LISTEN", "127.0.0.1:0")
        .env("STOCKADE_DATA_DIR", data_dir)
        .env_remove("STOCKADE_DATABASE_URL")
        .env_remove("STOCKADE_ADMIN_TOKEN")
        .env("STOCKADE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(t) = admin_token {
        cmd.env("STOCKADE_ADMIN_TOKEN", t);
    }
    let mut child = cmd.spawn().expect("spawn stockade server");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut server = Server {
        child,
        url: String::new(),
        token: None,
        lines: Vec::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                if let Some(rest) = line.split(" listening on ").nth(1) {
                    server.url = rest.trim().to_owned();
                }
                if let Some(t) = line.trim().strip_prefix("export STOCKADE_TOKEN=") {
                    server.token = Some(t.to_owned());
                }
                if line.trim().starts_with("stk_") {
                    server.token = Some(line.trim().to_owned());
                }
                let done = line.contains("Use it as")
                    || (admin_token.is_some() && line.contains("docker:"));
                server.lines.push(line);
                if done {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if !server.url.is_empty() && server.lines.iter().any(|l| l.contains("docker:")) {
                    // Give the token lines a moment to arrive.
                    std::thread::sleep(Duration::from_millis(300));
                    while let Ok(line) = rx.try_recv() {
                        if let Some(t) = line.trim().strip_prefix("export STOCKADE_TOKEN=") {
                            server.token = Some(t.to_owned());
                        }
                        server.lines.push(line);
                    }
                    break;
                }
            }
            Err(_) => break,
        }
    }
    assert!(
        !server.url.is_empty(),
        "server did not start: {:?}",
        server.lines
    );
    server
}

fn cli(server: &Server, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(args)
        .env("STOCKADE_URL", &server.url)
        .env("STOCKADE_TOKEN", token)
        .output()
        .expect("run stockade")
}

#[test]
fn first_start_prints_the_admin_token_once_and_the_cli_creates_accounts() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), None);
    let token = server
        .token
        .clone()
        .expect("admin token printed on first start");
    assert!(token.starts_with("stk_"));
    assert!(
        dir.path().join("stockade.db").exists(),
        "SQLite lives in the data directory"
    );
    assert!(server.lines.iter().any(|l| l.contains("dashboard:")));

    let out = cli(&server, &token, &["account", "create", "bob", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["account"]["name"], "bob");
    let bob = v["token"].as_str().unwrap().to_owned();
    assert!(bob.starts_with("stk_"));

    // Bob is not an admin: the CLI reports the API's message, not a debug dump.
    let out = cli(&server, &bob, &["account", "create", "eve"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("administrator"), "{err}");
    assert!(!err.contains("panicked"));

    let out = cli(&server, &token, &["account", "ls", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["accounts"].as_array().unwrap().len(), 2);

    let out = cli(&server, &token, &["health", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["database"]["backend"], "sqlite");
    drop(server);

    // A restart on the same data directory prints no new token, and the
    // first one still works.
    let again = start_server(dir.path(), Some("stk_operator_chosen_token_123"));
    assert!(
        again.lines.iter().all(|l| !l.contains("shown once")),
        "{:?}",
        again.lines
    );
    let out = cli(&again, &token, &["account", "ls", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(
        &again,
        "stk_operator_chosen_token_123",
        &["account", "ls", "--json"],
    );
    assert!(
        out.status.success(),
        "STOCKADE_ADMIN_TOKEN is registered for the admin"
    );
}

#[test]
fn bad_flags_and_unreachable_servers_give_helpful_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["health"])
        .env("STOCKADE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("could not reach the Stockade server"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["account", "ls"])
        .env_remove("STOCKADE_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("STOCKADE_TOKEN"));
}
