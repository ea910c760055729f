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
        // Remove whatever the test created, even when it failed half-way.
        if let Some(token) = &self.token {
            let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
                .args(["ls", "--json", "--per-page", "1000"])
                .env("STOCKADE_URL", &self.url)
                .env("STOCKADE_TOKEN", token)
                .output();
            if let Ok(out) = out {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
                    for sb in v["sandboxes"].as_array().cloned().unwrap_or_default() {
                        let _ = Command::new(env!("CARGO_BIN_EXE_stockade"))
                            .args(["rm", sb["id"].as_str().unwrap_or_default()])
                            .env("STOCKADE_URL", &self.url)
                            .env("STOCKADE_TOKEN", token)
                            .output();
                    }
                }
            }
        }
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
        .env(
            "STOCKADE_DEFAULT_IMAGE",
            std::env::var("STOCKADE_TEST_IMAGE")
                .unwrap_or_else(|_| "stockade-test-base:latest".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(t) = admin_token {
        cmd.env("STOCKADE_ADMIN_TOKEN", t);
    }
    let admin_token = admin_token.map(str::to_owned);
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

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "stockade failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn sandbox_verbs_from_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let token = "stk_cli_sandbox_verbs_token";
    let server = start_server(dir.path(), Some(token));

    let created = json_of(&cli(
        &server,
        token,
        &[
            "create",
            "--json",
            "--name",
            "cli-demo",
            "--cpu",
            "1",
            "--memory",
            "0.5",
            "--env",
            "A=1",
            "--label",
            "cli",
            "--tag",
            "k=v",
            "--port",
            "8080",
            "--timeout",
            "90s",
        ],
    ));
    assert_eq!(created["status"], "RUNNING");
    assert_eq!(created["memoryGB"], 0.5);
    assert_eq!(created["timeoutMinutes"], 1.5);
    assert_eq!(created["environmentVars"]["A"], "1");
    let id = created["id"].as_str().unwrap().to_owned();

    let listed = json_of(&cli(&server, token, &["ls", "--json", "--label", "cli"]));
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["sandboxes"][0]["id"], id.as_str());

    // A table for people.
    let out = cli(&server, token, &["ls"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains("cli-demo") && table.contains("RUNNING"),
        "{table}"
    );

    let got = json_of(&cli(&server, token, &["get", "cli-demo", "--json"]));
    assert_eq!(got["id"], id.as_str());
    let out = cli(&server, token, &["get", "cli-demo"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("agent-sandbox-"));

    let stopped = json_of(&cli(
        &server,
        token,
        &["stop", "cli-demo", "-t", "1", "--json"],
    ));
    assert_eq!(stopped[0]["status"], "STOPPED");
    let started = json_of(&cli(&server, token, &["start", &id, "--json"]));
    assert_eq!(started[0]["status"], "RUNNING");

    // Errors are sentences naming the problem, with a non-zero exit code.
    let out = cli(&server, token, &["create", "--name", "bad name"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("name:"), "{err}");
    let out = cli(&server, token, &["get", "no-such-sandbox"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
    let out = cli(&server, token, &["create", "--tag", "novalue"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("KEY=VALUE"));

    let removed = json_of(&cli(&server, token, &["rm", "cli-demo", "--json"]));
    assert_eq!(removed[0]["status"], "TERMINATED");
    let listed = json_of(&cli(&server, token, &["ls", "--json"]));
    assert_eq!(listed["total"], 0);
    let out = cli(&server, token, &["ls"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("No sandboxes yet"));
}

#[test]
fn completions_and_help_with_examples() {
    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("stockade"));
    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Examples:") && help.contains("stockade create"),
        "{help}"
    );
}
