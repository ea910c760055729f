//! The binary as a user runs it: `stockade server` on a fresh data directory
//! prints where it listens and the admin token once; `stockade account
//! create` and `stockade health` talk to it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{code_image, docker_lines, image, instance_of, lines_of, shut_down, spawn_piped};

struct Server {
    child: Child,
    url: String,
    token: Option<String>,
    lines: Vec<String>,
    /// This server's instance id, once a test learned it from a container.
    instance: std::cell::RefCell<Option<String>>,
    /// The data directory, when the server owns it.
    dir: Option<tempfile::TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        // Remove whatever the test created, even when it failed half-way.
        let instance = self.instance.borrow().clone();
        let token = self.token.as_deref();
        shut_down(&mut self.child, &self.url, token, instance.as_deref(), true);
    }
}

impl Server {
    /// Learns the instance id from a sandbox's container, so that drop can
    /// remove whatever this server left in Docker.
    fn remember_instance(&self, sandbox_id: &str) {
        if let Some(id) = instance_of(sandbox_id) {
            *self.instance.borrow_mut() = Some(id);
        }
    }
}

fn start_server(data_dir: &std::path::Path, admin_token: Option<&str>) -> Server {
    let mut cmd = stockade(&["server"]);
    cmd.env("STOCKADE_LISTEN", "127.0.0.1:0")
        .env("STOCKADE_DATA_DIR", data_dir)
        .env_remove("STOCKADE_DATABASE_URL")
        .env_remove("STOCKADE_ADMIN_TOKEN")
        .env("STOCKADE_LOG", "warn")
        .env("STOCKADE_DEFAULT_IMAGE", image());
    if let Some(t) = admin_token {
        cmd.env("STOCKADE_ADMIN_TOKEN", t);
    }
    let admin_token = admin_token.map(str::to_owned);
    let (child, stdout) = spawn_piped(&mut cmd);
    let rx = lines_of(stdout);
    let mut server = Server {
        child,
        url: String::new(),
        token: None,
        lines: Vec::new(),
        instance: std::cell::RefCell::new(None),
        dir: None,
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

/// A server on a data directory of its own, with `admin_token` for its
/// administrator: the CLI as the administrator runs it there.
fn fresh_server(admin_token: &str) -> Client {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_server(dir.path(), Some(admin_token));
    server.dir = Some(dir);
    Client::new(server, admin_token)
}

/// The binary with `args`, in the caller's environment.
fn stockade(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stockade"));
    cmd.args(args);
    cmd
}

/// The words of a command line that has no quoted argument.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// The CLI pointed at one server with one token.
struct Client {
    server: std::rc::Rc<Server>,
    token: String,
}

impl Client {
    fn new(server: Server, token: &str) -> Client {
        Client {
            server: std::rc::Rc::new(server),
            token: token.to_owned(),
        }
    }

    /// The CLI against the same server with another token.
    fn with_token(&self, token: &str) -> Client {
        Client {
            server: self.server.clone(),
            token: token.to_owned(),
        }
    }

    /// The binary with `args`, the server and the token in its environment.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = stockade(args);
        cmd.env("STOCKADE_URL", &self.server.url)
            .env("STOCKADE_TOKEN", &self.token);
        cmd
    }

    /// What the command printed and how it exited, whatever that was.
    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run stockade")
    }

    /// The command's stdout; the test fails if the command does.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?}: {}", stderr_of(&out));
        stdout_of(&out)
    }

    /// The command's stderr; the test fails if the command succeeds.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "{args:?} succeeded: {}",
            stdout_of(&out)
        );
        stderr_of(&out)
    }

    /// The JSON a successful command printed.
    fn json(&self, args: &[&str]) -> serde_json::Value {
        json_of(&self.run(args))
    }

    /// The one JSON error a failed `--json` command printed.
    fn json_error(&self, args: &[&str]) -> serde_json::Value {
        json_error(&self.run(args))
    }

    /// Runs the command with `input` as its stdin (a pipe, not a terminal).
    fn run_with_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run stockade");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input)
            .expect("write stdin");
        child.wait_with_output().expect("wait for stockade")
    }

    /// Creates a sandbox with `args` and returns its JSON.
    fn create(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["create", "--json"];
        all.extend_from_slice(args);
        let v = self.json(&all);
        assert_eq!(v["status"], "RUNNING");
        self.server.remember_instance(v["id"].as_str().unwrap());
        v
    }

    /// Runs a shell script with the binary as `$STOCKADE` and the server in
    /// the environment (for real pipes and `2>&1`).
    fn sh(&self, shell: &str, script: &str) -> Output {
        Command::new(shell)
            .args(["-c", script])
            .env("STOCKADE", env!("CARGO_BIN_EXE_stockade"))
            .env("STOCKADE_URL", &self.server.url)
            .env("STOCKADE_TOKEN", &self.token)
            .output()
            .expect("run a shell")
    }
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "stockade failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// The one JSON error a `--json` command printed on stderr.
fn json_error(out: &Output) -> serde_json::Value {
    assert!(!out.status.success(), "it should have failed");
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout: {}",
        stdout_of(out)
    );
    let err = stderr_of(out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let v: serde_json::Value =
        serde_json::from_str(&err).unwrap_or_else(|e| panic!("not JSON ({e}): {err}"));
    let keys: Vec<&String> = v["error"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["code", "message"], "{v}");
    v["error"].clone()
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Stderr in CLI words: no API paths, SDK names or HTTP statuses.
fn assert_cli_words(text: &str) {
    for api in [
        "/api/v1",
        "POST ",
        "DELETE ",
        "Sandbox::",
        "HTTP 4",
        "HTTP 5",
    ] {
        assert!(!text.contains(api), "{api:?} in {text}");
    }
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
    let admin = Client::new(server, &token);

    let v = admin.json(&["account", "create", "bob", "--json"]);
    assert_eq!(v["account"]["name"], "bob");
    let bob = v["token"].as_str().unwrap().to_owned();
    assert!(bob.starts_with("stk_"));

    // Bob is not an admin: the CLI reports the API's message, not a debug dump.
    let err = admin.with_token(&bob).fails(&["account", "create", "eve"]);
    assert!(err.contains("administrator"), "{err}");
    assert!(!err.contains("panicked"));

    let v = admin.json(&["account", "ls", "--json"]);
    assert_eq!(v["accounts"].as_array().unwrap().len(), 2);
    let v = admin.json(&["health", "--json"]);
    assert_eq!(v["database"]["backend"], "sqlite");
    drop(admin);

    // A restart on the same data directory prints no new token, and the
    // first one still works; so does STOCKADE_ADMIN_TOKEN, registered for
    // the admin.
    let chosen = "stk_operator_chosen_token_123";
    let again = start_server(dir.path(), Some(chosen));
    assert!(
        again.lines.iter().all(|l| !l.contains("shown once")),
        "{:?}",
        again.lines
    );
    let again = Client::new(again, chosen);
    again.ok(&["account", "ls", "--json"]);
    again.with_token(&token).ok(&["account", "ls", "--json"]);
}

#[test]
fn account_quotas_from_the_terminal() {
    let admin = fresh_server("stk_cli_account_quota_token");
    assert!(
        admin
            .server
            .lines
            .iter()
            .any(|l| l.contains("admission:") && l.contains("quota of new accounts: none")),
        "{:?}",
        admin.server.lines
    );
    let made = admin.json(&["account", "create", "carol", "--json"]);
    let carol_id = made["account"]["id"].as_str().unwrap().to_owned();
    let carol = admin.with_token(made["token"].as_str().unwrap());

    // Without flags: the quota and the use, as a table.
    let table = admin.ok(&["account", "quota", "carol"]);
    assert!(
        table.contains(&format!("Quota of account carol ({carol_id})")),
        "{table}"
    );
    assert!(table.contains("unlimited"), "{table}");

    // Flags set limits, by name or id; each flag changes only its own.
    let q = admin.json(&words(
        "account quota carol --sandboxes 1 --cpu 2 --memory 4.5 --json",
    ));
    assert_eq!(
        q["quota"],
        serde_json::json!({ "sandboxes": 1, "cpuCores": 2.0, "memoryGB": 4.5, "diskGB": null,
                            "snapshots": null, "snapshotGB": null, "uploads": null, "uploadGB": null,
                            "volumes": null, "volumeGB": null })
    );
    let q = admin.json(&words(&format!(
        "account quota {carol_id} --disk 30 --cpu unlimited --snapshots 3 --snapshot-gb 2.5 \
         --uploads 4 --upload-gb 0.5 --volumes 6 --volume-gb 40 --json"
    )));
    assert_eq!(
        q["quota"],
        serde_json::json!({ "sandboxes": 1, "cpuCores": null, "memoryGB": 4.5, "diskGB": 30,
                            "snapshots": 3, "snapshotGB": 2.5, "uploads": 4, "uploadGB": 0.5,
                            "volumes": 6, "volumeGB": 40 })
    );
    assert_eq!(
        q["usage"]["snapshots"]
            .as_u64()
            .zip(q["usage"]["uploads"].as_u64()),
        Some((0, 0))
    );
    assert_eq!(
        (&q["usage"]["volumes"], &q["usage"]["volumeGB"]),
        (&serde_json::json!(0), &serde_json::json!(0))
    );
    // The storage limits in the table, with their use.
    let table = admin.ok(&["account", "quota", "carol"]);
    for row in [
        "snapshots",
        "snapshot storage",
        "uploads",
        "upload storage",
        "volumes",
        "volume size",
    ] {
        assert!(table.lines().any(|l| l.starts_with(row)), "{row}: {table}");
    }
    assert!(table.contains("2.5 GB"), "{table}");
    assert!(table.contains("40 GB"), "{table}");
    // One flag changes one limit; `unlimited` lifts it.
    let q = admin.json(&words("account quota carol --uploads unlimited --json"));
    assert_eq!(q["quota"]["uploads"], serde_json::Value::Null);
    assert_eq!(q["quota"]["snapshots"], 3);
    assert_eq!(q["quota"]["uploadGB"], 0.5);

    // Bad values name the flag (or the API's field); nothing changes.
    for (args, named) in [
        ("carol --cpu lots", "--cpu"),
        ("carol --memory=-1", "--memory: must be between 0"),
        ("carol --snapshots many", "--snapshots"),
        ("carol --upload-gb=-2", "--upload-gb: must be between 0"),
        ("carol --volume-gb 1.5", "--volume-gb"),
        ("carol --volumes=2000000", "--volumes"),
        ("nobody", "nobody"),
    ] {
        let err = admin.fails(&words(&format!("account quota {args}")));
        assert!(err.contains(named), "{args}: {err}");
    }

    // Carol sees her own quota but cannot change it.
    let mine = carol.json(&["account", "quota", "carol", "--json"]);
    assert_eq!(mine["quota"]["sandboxes"], 1);
    let err = carol.fails(&["account", "quota", "carol", "--sandboxes", "9"]);
    assert!(err.contains("administrator"), "{err}");

    // Her second sandbox is refused with the quota and the use.
    let small = ["--cpu", "0.25", "--memory", "0.25"];
    let one = carol.create(&[&["--name", "one"][..], &small].concat());
    let err = carol.fails(&[&["create", "--name", "two"][..], &small].concat());
    assert!(
        err.contains("account quota exceeded: 1 of 1 sandboxes"),
        "{err}"
    );
    let q = carol.json(&["account", "quota", "carol", "--json"]);
    assert_eq!(q["usage"]["sandboxes"], 1);
    assert_eq!(q["usage"]["cpuCores"], 0.25);

    // --clear lifts every limit: the second one fits.
    let q = admin.json(&["account", "quota", "carol", "--clear", "--json"]);
    assert_eq!(q["quota"]["sandboxes"], serde_json::Value::Null);
    assert_eq!(q["quota"]["diskGB"], serde_json::Value::Null);
    assert_eq!(q["quota"]["snapshotGB"], serde_json::Value::Null);
    let two = carol.create(&[&["--name", "two"][..], &small].concat());
    for sb in [one, two] {
        carol.ok(&["rm", sb["id"].as_str().unwrap()]);
    }
}

#[test]
fn api_tokens_and_disabled_accounts_from_the_terminal() {
    let admin = fresh_server("stk_cli_api_tokens_admin_01");
    let made = admin.json(&["account", "create", "dana", "--json"]);
    let dana_id = made["account"]["id"].as_str().unwrap().to_owned();
    let dana = admin.with_token(made["token"].as_str().unwrap());

    // The secret alone on stdout, and a line saying it is shown only now.
    let out = dana.run(&["token", "create", "ci", "--expires", "30d"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let secret = stdout_of(&out).trim().to_owned();
    assert!(
        secret.starts_with("stk_") && !secret.contains(char::is_whitespace),
        "{secret}"
    );
    let note = stderr_of(&out);
    assert!(note.contains("shown only now"), "{note}");
    assert!(note.contains("expires in 30d"), "{note}");

    // The new token works, through the environment and through --token.
    let ci = admin.with_token(&secret);
    let who = ci.json(&["account", "whoami", "--json"]);
    assert_eq!(who["account"]["id"], dana_id.as_str());
    let out = stockade(&["--token", &secret, "account", "whoami"])
        .env("STOCKADE_URL", &admin.server.url)
        .env_remove("STOCKADE_TOKEN")
        .output()
        .unwrap();
    assert!(stdout_of(&out).starts_with("dana ("), "{}", stderr_of(&out));

    // --json gives the API's answer, the secret in it.
    let made = dana.json(&["token", "create", "laptop", "--json"]);
    assert!(made["token"].as_str().unwrap().starts_with("stk_"));
    assert!(made["expiresAt"].is_null());
    let laptop_id = made["id"].as_str().unwrap().to_owned();

    // Listed without any secret, with readable times.
    let list = dana.json(&["token", "ls", "--json"]);
    let tokens = list["tokens"].as_array().unwrap();
    let ci_token = tokens
        .iter()
        .find(|t| t["name"] == "ci")
        .expect("ci listed");
    let ci_id = ci_token["id"].as_str().unwrap().to_owned();
    assert_eq!(ci_token["kind"], "api");
    assert!(!list.to_string().contains(&secret));
    let table = stdout_of(&dana.run(&["token", "ls"]));
    assert!(
        table.starts_with("ID") && table.contains("LAST USED"),
        "{table}"
    );
    assert!(!table.contains("stk_"), "{table}");
    let ci_line = table.lines().find(|l| l.starts_with(&ci_id)).unwrap();
    assert!(ci_line.contains(" api "), "{ci_line}");
    assert!(ci_line.contains("in 30d"), "{ci_line}");
    assert!(
        !ci_line.ends_with("never"),
        "the token was used a moment ago: {ci_line}"
    );
    let laptop_line = table.lines().find(|l| l.starts_with(&laptop_id)).unwrap();
    assert!(laptop_line.contains("never"), "{laptop_line}");
    // An administrator lists (and makes) another account's tokens by name;
    // another account's tokens need an administrator.
    let theirs = admin.json(&["token", "ls", "--account", "dana", "--json"]);
    assert_eq!(
        theirs["tokens"].as_array().unwrap().len(),
        tokens.len(),
        "{theirs}"
    );
    dana.fails(&["token", "ls", "--account", "admin"]);

    // Refused before any request: an expiry that is no duration, no name;
    // then the server's range, in the flag's words.
    for (args, named) in [
        (
            &["token", "create", "x", "--expires", "soon"][..],
            "--expires",
        ),
        (&["token", "create", " "], "NAME"),
        (&["token", "create", "x", "--expires", "10s"], "--expires:"),
    ] {
        let err = dana.fails(args);
        assert!(err.contains(named), "{args:?}: {err}");
    }

    // Revoked: refused with a message that says why it may be.
    let out = dana.ok(&["token", "rm", &ci_id]);
    assert!(out.contains("revoked"));
    let err = ci.fails(&["account", "whoami"]);
    assert!(err.contains("revoked"), "{err}");
    assert!(err.contains("STOCKADE_TOKEN"), "{err}");
    let err = dana.fails(&["token", "rm", &ci_id, "--json"]);
    assert!(err.contains("not_found"), "{err}");

    // The sandbox form of `stockade token` is still there.
    let err = stderr_of(&dana.run(&["token", "no-such-sandbox"]));
    assert!(err.contains("no-such-sandbox"), "{err}");

    // An administrator disables the account (only administrators do): its
    // calls fail saying so.
    dana.fails(&["account", "disable", "dana"]);
    let out = admin.ok(&["account", "disable", "dana"]);
    assert!(out.contains("Disabled account dana"));
    let err = dana.fails(&["ls"]);
    assert!(err.contains("disabled"), "{err}");
    assert!(err.contains("stockade account enable"), "{err}");
    let out = stdout_of(&admin.run(&["account", "ls"]));
    let line = out.lines().find(|l| l.contains(&dana_id)).unwrap();
    assert!(line.contains("disabled"), "{line}");
    let accounts = admin.json(&["account", "ls", "--json"]);
    let row = accounts["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == dana_id.as_str())
        .unwrap()
        .clone();
    assert!(row["disabledAt"].is_string(), "{row}");

    let enabled = admin.json(&["account", "enable", &dana_id, "--json"]);
    assert!(enabled.get("disabledAt").is_none(), "{enabled}");
    dana.ok(&["account", "whoami"]);
    dana.ok(&["token", "rm", &laptop_id]);
}

#[test]
fn bad_flags_and_unreachable_servers_give_helpful_errors() {
    let out = stockade(&["health"])
        .env("STOCKADE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("could not reach the Stockade server"), "{err}");
    let out = stockade(&["account", "ls"])
        .env_remove("STOCKADE_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("STOCKADE_TOKEN"));
}

#[test]
fn sandbox_verbs_from_the_terminal() {
    let cli = fresh_server("stk_cli_sandbox_verbs_token");

    let created = cli.json(&words(
        "create --json --name cli-demo --cpu 1 --memory 0.5 --env A=1 --label cli --tag k=v \
         --port 8080 --timeout 90s",
    ));
    assert_eq!(created["status"], "RUNNING");
    assert_eq!(created["memoryGB"], 0.5);
    assert_eq!(created["timeoutMinutes"], 1.5);
    assert_eq!(created["environmentVars"]["A"], "1");
    let id = created["id"].as_str().unwrap().to_owned();

    let listed = cli.json(&["ls", "--json", "--label", "cli"]);
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["sandboxes"][0]["id"], id.as_str());

    // A table for people.
    let table = stdout_of(&cli.run(&["ls"]));
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains("cli-demo") && table.contains("RUNNING"),
        "{table}"
    );

    let got = cli.json(&["get", "cli-demo", "--json"]);
    assert_eq!(got["id"], id.as_str());
    assert!(stdout_of(&cli.run(&["get", "cli-demo"])).contains("agent-sandbox-"));

    let stopped = cli.json(&["stop", "cli-demo", "-t", "1", "--json"]);
    assert_eq!(stopped[0]["status"], "STOPPED");
    let started = cli.json(&["start", &id, "--json"]);
    assert_eq!(started[0]["status"], "RUNNING");

    // Errors are sentences naming the problem, with a non-zero exit code.
    let err = cli.fails(&["create", "--name", "bad name"]);
    assert!(err.contains("name:"), "{err}");
    assert!(cli.fails(&["get", "no-such-sandbox"]).contains("not found"));
    assert!(stderr_of(&cli.run(&["create", "--tag", "novalue"])).contains("KEY=VALUE"));

    let removed = cli.json(&["rm", "cli-demo", "--json"]);
    assert_eq!(removed[0]["status"], "TERMINATED");
    let listed = cli.json(&["ls", "--json"]);
    assert_eq!(listed["total"], 0);
    assert!(stdout_of(&cli.run(&["ls"])).contains("No sandboxes yet"));
}

#[test]
fn completions_and_help_with_examples() {
    let out = stockade(&["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("stockade"));
    let out = stockade(&["--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Examples:") && help.contains("stockade create"),
        "{help}"
    );
}

#[test]
fn exec_passes_exit_codes_stdin_and_output_through() {
    let cli = fresh_server("stk_cli_exec_token_000001");
    cli.create(&["--name", "ex", "--env", "WHO=sandbox"]);

    let out = cli.run(&[
        "exec",
        "ex",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "out\n");
    assert_eq!(stderr_of(&out), "err\n");

    // stdin is forwarded when it is not a terminal.
    let out = cli.run_with_stdin(&["exec", "ex", "--", "wc", "-c"], b"twelve bytes");
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "12");
    let out = cli.run_with_stdin(&["exec", "ex", "--shell", "tr a-z A-Z"], b"shout\n");
    assert_eq!(stdout_of(&out), "SHOUT\n");
    let out = cli.run_with_stdin(&["exec", "-n", "ex", "--", "cat"], b"ignored");
    assert_eq!(stdout_of(&out), "", "-n keeps stdin to itself");
    let out = cli.run_with_stdin(&["exec", "ex", "--", "cat"], &[0xff, 0xfe]);
    assert!(!out.status.success());
    assert!(stderr_of(&out).contains("UTF-8"), "{}", stderr_of(&out));

    let out = cli.run(&[
        "exec",
        "ex",
        "--cwd",
        "/tmp",
        "-e",
        "EXTRA=x",
        "--shell",
        "echo $WHO $EXTRA; pwd",
    ]);
    assert_eq!(stdout_of(&out), "sandbox x\n/tmp\n");

    let started = Instant::now();
    let out = cli.run(&["exec", "ex", "--timeout", "1", "--", "sleep", "20"]);
    assert_eq!(
        out.status.code(),
        Some(124),
        "a timeout is 124, as with timeout(1)"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(stderr_of(&out).contains("timeout"), "{}", stderr_of(&out));

    let out = cli.run(&["exec", "ex", "--json", "--shell", "echo hi; exit 2"]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exitCode"], 2);
    assert_eq!(v["stdout"], "hi\n");

    // Output streams live: the first line is there long before the end.
    let two_lines = "echo first; sleep 3; echo second";
    prints_first_then_second_later(&cli, &["exec", "-n", "ex", "--shell", two_lines]);

    let err = cli.fails(&["exec", "ex"]);
    assert!(err.contains("give a command"), "{err}");
    let err = stderr_of(&cli.run(&["exec", "nope", "--", "true"]));
    assert!(err.contains("not found"), "{err}");
}

/// Every entry under `root`: relative path → (kind, bytes or link target, mode).
fn tree(root: &std::path::Path) -> std::collections::BTreeMap<String, (char, Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, ('l', target.display().to_string().into_bytes(), 0));
            } else if meta.is_dir() {
                out.insert(rel, ('d', Vec::new(), mode));
                stack.push(path);
            } else {
                out.insert(rel, ('f', std::fs::read(&path).unwrap(), mode));
            }
        }
    }
    out
}

#[test]
fn cp_round_trips_a_directory_byte_for_byte() {
    use std::os::unix::fs::PermissionsExt;
    let cli = fresh_server("stk_cli_cp_token_0000001");
    cli.create(&["--name", "cp"]);

    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("project");
    std::fs::create_dir_all(src.join("src/deep/er")).unwrap();
    std::fs::create_dir_all(src.join("empty")).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(src.join("big.bin"), &big).unwrap();
    std::fs::write(src.join("src/deep/er/notes.txt"), "ünïcödé\n").unwrap();
    std::fs::write(src.join("empty.txt"), "").unwrap();
    std::fs::write(src.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(src.join("src/deep"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("src/deep/er/notes.txt", src.join("link")).unwrap();
    let src_arg = src.display().to_string();
    let local = |name: &str| work.path().join(name).display().to_string();

    // Up: onto a missing path, the directory becomes that path.
    let started = Instant::now();
    cli.ok(&["cp", &src_arg, "cp:/workspace/copy"]);
    eprintln!("cp up of a 3 MB tree: {:?}", started.elapsed());
    let out = cli.run(&["exec", "cp", "--", "sh", "/workspace/copy/run.sh"]);
    assert_eq!(stdout_of(&out), "ran\n");
    let out = cli.run(&[
        "exec",
        "cp",
        "--shell",
        "md5sum copy/big.bin | cut -d' ' -f1; readlink copy/link",
    ]);
    let want_md5 = {
        let out = Command::new("md5sum")
            .arg(src.join("big.bin"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        stdout_of(&out),
        format!("{want_md5}\nsrc/deep/er/notes.txt\n")
    );

    // Down again, onto a missing local path: byte for byte, modes and links kept.
    let back = work.path().join("back");
    let started = Instant::now();
    cli.ok(&["cp", "cp:copy", &local("back")]);
    eprintln!("cp down of a 3 MB tree: {:?}", started.elapsed());
    assert_eq!(tree(&back), tree(&src));

    // Onto an existing directory, it lands inside under its own name.
    let into = work.path().join("into");
    std::fs::create_dir(&into).unwrap();
    let v = cli.json(&["cp", "--json", "cp:/workspace/copy", &local("into")]);
    assert_eq!(
        v["bytes"],
        3_000_000 + "ünïcödé\n".len() + "#!/bin/sh\necho ran\n".len()
    );
    assert_eq!(tree(&into.join("copy")), tree(&src));

    // `DIR/.` copies the contents; a single file goes to a path.
    cli.ok(&["cp", &format!("{src_arg}/."), "cp:flat"]);
    let out = cli.run(&["exec", "cp", "--", "ls", "flat"]);
    assert_eq!(
        stdout_of(&out),
        "big.bin\nempty\nempty.txt\nlink\nrun.sh\nsrc\n"
    );
    cli.ok(&["cp", &format!("{src_arg}/run.sh"), "cp:/tmp/renamed.sh"]);
    let file = work.path().join("file.sh");
    cli.ok(&["cp", "cp:/tmp/renamed.sh", &local("file.sh")]);
    assert_eq!(std::fs::read(&file).unwrap(), b"#!/bin/sh\necho ran\n");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o755
    );
    // `-`: a file's bytes on stdout, a directory's tar.
    let out = cli.run(&["cp", "cp:/tmp/renamed.sh", "-"]);
    assert_eq!(out.stdout, b"#!/bin/sh\necho ran\n");
    let out = cli.run(&["cp", "cp:copy/src", "-"]);
    assert!(
        out.stdout.len() >= 1024 && out.stdout[..4] == *b"src/",
        "a tar on stdout"
    );

    let err = cli.fails(&["cp", "cp:/no/such", &local("back")]);
    assert!(
        err.contains("not found") || err.contains("No such"),
        "{err}"
    );

    // The same tree as a create source.
    let v = cli.create(&["--name", "uploaded", "--upload", &src_arg]);
    let id = v["id"].as_str().unwrap();
    let out = cli.run(&["exec", id, "--shell", "md5sum big.bin | cut -d' ' -f1"]);
    assert_eq!(stdout_of(&out).trim(), want_md5);
}

#[test]
fn logs_tail_and_follow() {
    let cli = fresh_server("stk_cli_logs_token_00001");
    cli.create(&[
        "--name",
        "lg",
        "--start-command",
        "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; sleep 1000",
    ]);
    let mut all = serde_json::Value::Null;
    for _ in 0..50 {
        all = cli.json(&["logs", "lg", "--json"]);
        if all["lines"].as_array().unwrap().len() == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(all["lines"][0]["text"], "one");

    let out = cli.run(&["logs", "lg", "--tail", "2"]);
    assert_eq!(stdout_of(&out), "three\n", "stdout lines on stdout");
    assert_eq!(stderr_of(&out), "two\n", "stderr lines on stderr");
    let v = cli.json(&["logs", "lg", "--tail", "1", "--json"]);
    assert_eq!(v["lines"].as_array().unwrap().len(), 1);
    assert_eq!(v["lines"][0]["text"], "three");
    let out = stdout_of(&cli.run(&["logs", "lg", "-t", "-n", "1"]));
    assert!(
        out.ends_with("Z three\n") || out.contains("+00:00 three"),
        "{out}"
    );
    let err = stderr_of(&cli.run(&["logs", "lg", "--tail", "lots"]));
    assert!(err.contains("--tail"), "{err}");

    // -f prints what is there, then follows until the sandbox stops.
    let child = cli
        .command(&["logs", "-f", "--json", "lg"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    cli.ok(&["stop", "-t", "1", "lg"]);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let texts: Vec<String> = stdout_of(&out)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(texts, ["one", "two", "three"]);
}

#[test]
fn fork_snapshots_ports_tokens_update_and_volumes() {
    let cli = fresh_server("stk_cli_manage_token_001");
    let sb = cli.create(&words("--name orig --label keep --env A=1 --env B=2"));
    let id = sb["id"].as_str().unwrap().to_owned();
    cli.ok(&["exec", "orig", "--shell", "echo state > /workspace/s.txt"]);

    // fork
    let forked = cli.json(&["fork", "orig", "--name", "copy", "--json"]);
    assert_eq!(forked["status"], "RUNNING");
    assert_eq!(forked["name"], "copy");
    let out = cli.run(&["exec", "copy", "--", "cat", "/workspace/s.txt"]);
    assert_eq!(stdout_of(&out), "state\n");
    // The name is taken.
    cli.fails(&["fork", "orig", "--name", "copy"]);

    // snapshot create / ls / create --from-snapshot / rm
    let snap = cli.json(&["snapshot", "create", "orig", "--name", "s1", "--json"]);
    assert_eq!(snap["status"], "READY");
    let snap_id = snap["id"].as_str().unwrap().to_owned();
    let listed = cli.json(&["snapshot", "ls", "--json"]);
    assert_eq!(listed["snapshots"][0]["id"], snap_id.as_str());
    let listed = cli.json(&["snapshot", "ls", "copy", "--json"]);
    assert_eq!(
        listed["snapshots"].as_array().unwrap().len(),
        0,
        "per sandbox"
    );
    let table = stdout_of(&cli.run(&["snapshot", "ls"]));
    assert!(table.starts_with("ID") && table.contains("s1"), "{table}");
    let restored = cli.create(&["--name", "restored", "--from-snapshot", &snap_id]);
    let out = cli.run(&[
        "exec",
        restored["id"].as_str().unwrap(),
        "--",
        "cat",
        "s.txt",
    ]);
    assert_eq!(stdout_of(&out), "state\n");
    let removed = cli.json(&["snapshot", "rm", &snap_id, "--json"]);
    assert!(
        removed[0]["status"].as_str().unwrap().starts_with("DELET"),
        "{removed}"
    );
    cli.fails(&["snapshot", "rm", &snap_id]);
    let listed = cli.json(&["snapshot", "ls", "--json"]);
    assert_eq!(listed["snapshots"].as_array().unwrap().len(), 0);

    // ports and tokens
    let exposed = cli.json(&["ports", "orig", "expose", "8080", "--json"]);
    let openable = exposed["url"].as_str().unwrap();
    assert!(openable.contains("?stockade_token=stkp_"), "{openable}");
    assert!(exposed["expiresAt"].is_string(), "{exposed}");
    let url = openable.split('?').next().unwrap().to_owned();
    assert!(url.ends_with(&format!("/proxy/{id}/8080/")), "{url}");
    let listed = cli.json(&["ports", "orig", "--json"]);
    assert_eq!(listed["ports"][0]["port"], 8080);
    let table = stdout_of(&cli.run(&["ports", "orig"]));
    assert!(
        table.contains(&url),
        "the table shows the proxy URL: {table}"
    );
    let t = cli.json(&["token", "orig", "--ttl", "2m", "--json"]);
    let left = chrono::DateTime::parse_from_rfc3339(t["expiresAt"].as_str().unwrap())
        .unwrap()
        .with_timezone(&chrono::Utc)
        - chrono::Utc::now();
    assert!((100..=121).contains(&left.num_seconds()), "{left}");
    let plain = stdout_of(&cli.run(&["token", "orig"])).trim().to_owned();
    assert!(
        !plain.is_empty() && !plain.contains(' '),
        "just the token: {plain}"
    );
    let status = |token: Option<&str>| {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let mut req = reqwest::Client::new().get(&url);
            if let Some(t) = token {
                req = req.header("X-Stockade-Token", t);
            }
            req.send().await.unwrap().status().as_u16()
        })
    };
    assert_eq!(
        status(Some(&plain)),
        502,
        "the token opens the proxy (nothing listens yet)"
    );
    assert_eq!(status(None), 401);
    let left = cli.json(&["ports", "orig", "unexpose", "8080", "--json"]);
    assert_eq!(left["ports"].as_array().unwrap().len(), 0);
    assert!(stdout_of(&cli.run(&["ports", "orig"])).contains("No ports exposed"));

    // update: merges env, labels and tags; says what applies when
    let done = cli.json(&words(
        "update orig --timeout 1h --cpu 0.5 --memory 0.5 --label new --tag k=v --env A=9 \
         --rm-env B --json",
    ));
    assert_eq!(done["sandbox"]["timeoutMinutes"], 60.0);
    assert_eq!(
        done["sandbox"]["labels"],
        serde_json::json!(["keep", "new"])
    );
    assert_eq!(done["sandbox"]["tags"]["k"], "v");
    assert_eq!(
        done["sandbox"]["environmentVars"],
        serde_json::json!({"A": "9"})
    );
    let applied = |when: &str, field: &str| {
        done["applied"][when]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == field)
    };
    assert!(applied("now", "cpuCores"));
    assert!(applied("nextStart", "environmentVars"));
    // Commands see a changed variable at once.
    let out = cli.run(&["exec", "orig", "--shell", "echo $A"]);
    assert_eq!(stdout_of(&out), "9\n");
    let out = stdout_of(&cli.run(&["update", "orig", "--rm-label", "new"]));
    assert!(out.contains("now:") && out.contains("labels"), "{out}");
    let err = stderr_of(&cli.run(&["update", "orig"]));
    assert!(err.contains("nothing to update"), "{err}");

    // volumes: ls, rm refused for a live one, prune with --yes only
    cli.ok(&["rm", "--keep-volume", "copy"]);
    let vols = cli.json(&["volumes", "ls", "--json"]);
    let orphan = format!("agent-sandbox-{}", forked["id"].as_str().unwrap());
    let names: Vec<&str> = vols["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&orphan.as_str()) && names.contains(&format!("agent-sandbox-{id}").as_str()),
        "{names:?}"
    );
    let table = stdout_of(&cli.run(&["volumes"]));
    assert!(table.starts_with("NAME"), "{table}");
    let err = cli.fails(&["volumes", "rm", &format!("agent-sandbox-{id}")]);
    assert!(err.contains("in use"), "{err}");
    let err = cli.fails(&["volumes", "prune"]);
    assert!(err.contains("--yes"), "{err}");
    let orphans = cli.json(&["volumes", "ls", "--orphaned", "--json"]);
    assert_eq!(
        orphans["volumes"][0]["name"],
        orphan.as_str(),
        "nothing removed without --yes"
    );
    let pruned = cli.json(&["volumes", "prune", "--yes", "--json"]);
    assert_eq!(pruned["removed"][0]["name"], orphan.as_str());
    let orphans = cli.json(&["volumes", "ls", "--orphaned", "--json"]);
    assert_eq!(orphans["total"], 0);

    // rm --sync uploads /workspace before the sandbox goes.
    let removed = cli.json(&["rm", "--sync", "restored", "--json"]);
    assert_eq!(removed[0]["status"], "TERMINATED");
    let gone = cli.json(&["ls", "--terminated", "--name", "restored", "--json"]);
    assert!(
        gone["sandboxes"][0]["metadata"]["s3_sync"]["bytes"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{gone}"
    );
}

#[test]
fn every_command_has_help_with_examples() {
    for cmd in [
        "create",
        "ls",
        "get",
        "start",
        "stop",
        "pause",
        "resume",
        "rm",
        "exec",
        "shell",
        "logs",
        "cp",
        "files ls",
        "files cat",
        "files rm",
        "files mkdir",
        "files mv",
        "files watch",
        "fork",
        "snapshot create",
        "snapshot ls",
        "snapshot rm",
        "ports",
        "token",
        "volumes",
        "volumes prune",
        "update",
        "account create",
        "account quota",
        "host add",
        "host ls",
        "host get",
        "host cordon",
        "host uncordon",
        "host drain",
        "host rm",
        "health",
        "server",
        "completions",
        "run-code",
        "repl",
        "code contexts",
        "code create",
        "code restart",
        "code interrupt",
        "code rm",
    ] {
        let mut args = words(cmd);
        args.push("--help");
        let out = stockade(&args).output().unwrap();
        let help = stdout_of(&out);
        assert!(out.status.success(), "{cmd}: {}", stderr_of(&out));
        assert!(
            help.contains("Example"),
            "{cmd} --help has no examples:\n{help}"
        );
    }
}

#[test]
fn names_reach_sandboxes_and_snapshots_everywhere_terminated_ones_too() {
    let cli = fresh_server("stk_cli_names_token_0001");
    let first = cli.create(&["--name", "nb", "--timeout", "90s"]);
    let first_id = first["id"].as_str().unwrap().to_owned();
    cli.ok(&["exec", "nb", "--shell", "echo v1 > marker"]);

    // get NAME is get ID: the details carry usage either way.
    let by_name = cli.json(&["get", "nb", "--json"]);
    let by_id = cli.json(&["get", &first_id, "--json"]);
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&by_name), keys(&by_id));
    assert!(
        by_name["usage"]["memoryBytes"].as_u64().unwrap() > 0,
        "{by_name}"
    );
    let facts = |out: &Output| -> Vec<String> {
        stdout_of(out)
            .lines()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_owned())
            .collect()
    };
    let human = cli.run(&["get", "nb"]);
    assert_eq!(facts(&human), facts(&cli.run(&["get", &first_id])));
    let text = stdout_of(&human);
    assert!(text.contains("\nusage     CPU "), "{text}");
    assert!(
        text.contains("\ntimeout   1m30s, ends in ") && !text.contains(" min"),
        "durations as people write them: {text}"
    );

    // Snapshots by name: get, --from-snapshot.
    let snap = cli.json(&["snapshot", "create", "nb", "--name", "clean", "--json"]);
    let snap_id = snap["id"].as_str().unwrap().to_owned();
    let got = cli.json(&["snapshot", "get", "clean", "--json"]);
    assert_eq!(got["id"], snap_id.as_str());
    let restored = cli.create(&["--name", "restored", "--from-snapshot", "clean"]);
    assert_eq!(restored["name"], "restored");
    let out = cli.run(&["exec", "restored", "--", "cat", "marker"]);
    assert_eq!(stdout_of(&out), "v1\n");

    // A terminated sandbox stays reachable by name where `ls --terminated`
    // lists it.
    let out = cli.run(&["rm", "nb"]);
    assert_eq!(stdout_of(&out), "nb: TERMINATED\n", "{}", stderr_of(&out));
    let gone = cli.json(&["ls", "--terminated", "--json"]);
    assert_eq!(gone["sandboxes"][0]["name"], "nb");
    let got = cli.json(&["get", "nb", "--json"]);
    assert_eq!(got["id"], first_id.as_str());
    assert_eq!(got["status"], "TERMINATED");
    assert!(stdout_of(&cli.run(&["get", "nb"])).contains("status    TERMINATED"));
    let listed = cli.json(&["snapshot", "ls", "nb", "--json"]);
    assert_eq!(listed["snapshots"][0]["id"], snap_id.as_str());
    let out = cli.run(&["rm", "nb"]);
    assert_eq!(stdout_of(&out), "nb: already terminated\n");
    for args in [
        vec!["start", "nb"],
        vec!["exec", "nb", "--", "true"],
        vec!["logs", "nb"],
    ] {
        let err = cli.fails(&args);
        assert!(
            err.contains("sandbox `nb` is terminated")
                && err.contains("`stockade create --name nb`"),
            "{args:?}: {err}"
        );
        assert_eq!(err.matches("error:").count(), 1, "printed once: {err}");
        assert_cli_words(&err);
    }

    // A live sandbox of the name comes first; once it is gone too, the
    // latest terminated one.
    let second = cli.create(&["--name", "nb"]);
    let second_id = second["id"].as_str().unwrap().to_owned();
    assert_ne!(second_id, first_id);
    let got = cli.json(&["get", "nb", "--json"]);
    assert_eq!(got["id"], second_id.as_str());
    assert_eq!(got["status"], "RUNNING");
    cli.ok(&["rm", "--keep-volume", "nb"]);
    let got = cli.json(&["get", "nb", "--json"]);
    assert_eq!(got["id"], second_id.as_str());
    // The volume it left is removed by the sandbox's name.
    let out = cli.run(&["volumes", "rm", "nb"]);
    assert!(
        stdout_of(&out).starts_with(&format!("agent-sandbox-{second_id}: removed")),
        "{}{}",
        stdout_of(&out),
        stderr_of(&out)
    );

    // A snapshot name several snapshots share: get and --from-snapshot take
    // the newest, rm refuses to guess.
    let again = cli.json(&[
        "snapshot", "create", "restored", "--name", "clean", "--json",
    ]);
    let again_id = again["id"].as_str().unwrap().to_owned();
    let got = cli.json(&["snapshot", "get", "clean", "--json"]);
    assert_eq!(got["id"], again_id.as_str());
    let err = cli.fails(&["snapshot", "rm", "clean"]);
    assert!(
        err.starts_with("clean: error: 2 snapshots are named `clean`")
            && err.contains(&snap_id)
            && err.contains(&again_id),
        "{err}"
    );
    cli.ok(&["snapshot", "rm", &snap_id, "--json"]);
    let out = cli.run(&["snapshot", "rm", "clean"]);
    assert!(
        stdout_of(&out).starts_with("clean: DELET"),
        "now one is left: {}{}",
        stdout_of(&out),
        stderr_of(&out)
    );
    let err = stderr_of(&cli.run(&["snapshot", "get", "clean"]));
    assert!(err.contains("snapshot `clean` not found"));
}

#[test]
fn errors_are_cli_sentences_printed_once_and_json_with_a_code() {
    let cli = fresh_server("stk_cli_errors_token_001");
    cli.create(&["--name", "nb2"]);
    cli.ok(&["stop", "-t", "1", "nb2"]);

    let out = cli.run(&["exec", "nb2", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_of(&out),
        "error: sandbox `nb2` is stopped — run `stockade start nb2`\n"
    );
    let e = cli.json_error(&["exec", "nb2", "--json", "--", "true"]);
    assert_eq!(e["code"], "sandbox_not_running");
    assert_eq!(
        e["message"],
        "sandbox `nb2` is stopped — run `stockade start nb2`"
    );
    let e = cli.json_error(&["exec", "-d", "nb2", "--json", "--", "true"]);
    assert_eq!(e["code"], "sandbox_not_running");

    let e = cli.json_error(&["get", "nope", "--json"]);
    assert_eq!(e["code"], "not_found");
    assert!(e["message"].as_str().unwrap().contains("`stockade ls`"));

    // A validation error: the flag named, once.
    let err = cli.fails(&["create", "--name", "bad name"]);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: --name: "), "{err}");
    let e = cli.json_error(&["create", "--name", "bad name", "--json"]);
    assert_eq!(e["code"], "validation_failed");
    let e = cli.json_error(&["create", "--json", "--timeout", "soon"]);
    assert_eq!(e["code"], "invalid_argument");
    assert!(
        e["message"].as_str().unwrap().starts_with("--timeout"),
        "{e}"
    );

    // Bad flags, a server that does not answer, no token: JSON too.
    let out = cli.run(&["bogus", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_error(&out)["code"], "usage");
    let e = cli.json_error(&["--url", "http://127.0.0.1:9", "ls", "--json"]);
    assert_eq!(e["code"], "unreachable");
    let out = stockade(&["ls", "--json"])
        .env("STOCKADE_URL", &cli.server.url)
        .env_remove("STOCKADE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(json_error(&out)["code"], "unauthorized");

    // Many targets: each failure once, tagged with its target; the rest done.
    let out = cli.run(&["start", "nope", "nb2", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let started: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(started[0]["status"], "RUNNING");
    let err = stderr_of(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    let e: serde_json::Value = serde_json::from_str(&err).unwrap();
    assert_eq!(e["error"]["code"], "not_found");
    assert_eq!(e["error"]["target"], "nope");
    let out = cli.run(&["stop", "-t", "1", "nope", "nb2"]);
    assert_eq!(stdout_of(&out), "nb2: STOPPED\n");
    let err = stderr_of(&out);
    assert!(
        err.starts_with("nope: error: sandbox `nope` not found"),
        "{err}"
    );
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    assert_cli_words(&err);
}

/// The code interpreter from the terminal: cells from files and stdin
/// share their state, errors exit 1 with their traceback, plots are saved
/// as files, `--json` prints the execution, a repl fed through a pipe runs
/// its cells in one context, and contexts are listed, made, restarted and
/// removed.
#[test]
fn run_code_repl_and_contexts_in_the_code_interpreter() {
    let Some(code_image) = code_image() else {
        return;
    };
    let cli = fresh_server("stk_cli_code_token_000001");
    cli.create(&["--name", "nb", "--image", &code_image]);
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let cell = path("cell.py");
    std::fs::write(&cell, "x = 21\nprint('set')\n").unwrap();

    assert_eq!(cli.ok(&["run-code", "nb", &cell]), "set\n");
    // From stdin (no file, or `-`), in the same context: x is still there.
    let out = cli.run_with_stdin(&["run-code", "nb"], b"x * 2");
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "42\n");
    let out = cli.run_with_stdin(&["run-code", "nb", "-"], b"print('x is', x)\nx + 1");
    assert_eq!(stdout_of(&out), "x is 21\n22\n");

    // Output streams live: the first line is there long before the end.
    let slow = write(
        &dir,
        "slow.py",
        "import time\nprint('first', flush=True)\ntime.sleep(3)\nprint('second')",
    );
    prints_first_then_second_later(&cli, &["run-code", "nb", &slow]);

    // An error: exit code 1, the traceback on stderr without colours
    // (stderr is not a terminal here), the output before it on stdout.
    let out = cli.run_with_stdin(&["run-code", "nb"], b"print('before')\n1 / 0");
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "before\n");
    let err = stderr_of(&out);
    assert!(err.contains("ZeroDivisionError"), "{err}");
    assert!(err.contains("1 / 0"), "the traceback shows the line: {err}");
    assert!(!err.contains('\u{1b}'), "colours are stripped: {err:?}");

    // A plot is saved as a PNG in --out-dir, and its file named.
    let plots = path("plots");
    let plot = b"import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()";
    let out = cli.run_with_stdin(&["run-code", "nb", "--out-dir", &plots], plot);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&plots)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let png = &files[0];
    let name = png.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("result-") && name.ends_with("-1.png"),
        "{name}"
    );
    assert!(
        stdout_of(&out).contains(&png.display().to_string()),
        "{}",
        stdout_of(&out)
    );
    let bytes = std::fs::read(png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{:?}",
        &bytes[..8.min(bytes.len())]
    );

    // --json: the collected execution; a cell that raised still exits 1.
    let v = cli.json(&[
        "run-code",
        "nb",
        "--json",
        "-e",
        "MODE=cli",
        &write(&dir, "j.py", "import os\nprint(os.environ['MODE'])\nx * 3"),
    ]);
    assert_eq!(v["results"][0]["text"], "63", "{v}");
    assert_eq!(v["results"][0]["isMainResult"], true, "{v}");
    assert_eq!(v["logs"]["stdout"][0], "cli\n", "{v}");
    let out = cli.run(&["run-code", "nb", "--json", &write(&dir, "e.py", "[][1]")]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["name"], "IndexError", "{v}");

    // --timeout interrupts the cell; the context keeps its state.
    let started = Instant::now();
    let out = cli.run_with_stdin(
        &["run-code", "nb", "--timeout", "1"],
        b"import time\ntime.sleep(60)",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("TimeoutError"),
        "{}",
        stderr_of(&out)
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        cli.run_with_stdin(&["run-code", "nb"], b"x").stdout,
        b"21\n"
    );

    // A repl fed through a pipe: cells end at blank lines, share their
    // variables, and no prompts are printed; its context is removed after.
    let before = cli.json(&["code", "contexts", "nb", "--json"]);
    let session = b"y = 2\n\nprint(y * 21)\n\ndef f(a):\n    return a + y\n\nf(1)\n\n1 / 0\n\ny\n";
    let out = cli.run_with_stdin(&["repl", "nb"], session);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        stdout_of(&out),
        "42\n3\n2\n",
        "an error does not end the session"
    );
    assert!(
        stderr_of(&out).contains("ZeroDivisionError"),
        "{}",
        stderr_of(&out)
    );
    let after = cli.json(&["code", "contexts", "nb", "--json"]);
    assert_eq!(before, after, "the repl's own context is gone");
    let out = cli.run_with_stdin(&["repl", "nb"], b"x\n");
    assert_eq!(
        stdout_of(&out),
        "",
        "a repl has a context of its own, not run-code's: {}",
        stderr_of(&out)
    );
    assert!(stderr_of(&out).contains("NameError"), "{}", stderr_of(&out));

    // Contexts: listed, made with a directory, restarted, removed.
    let listed = cli.json(&["code", "contexts", "nb", "--json"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["language"] == "python"),
        "{listed}"
    );
    let table = cli.ok(&["code", "contexts", "nb"]);
    assert!(
        table.contains("LANGUAGE") && table.contains("python"),
        "{table}"
    );
    let made = cli.json(&["code", "create", "nb", "--cwd", "/tmp", "--json"]);
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["cwd"], "/tmp");
    let in_ctx = |code: &[u8]| cli.run_with_stdin(&["run-code", "nb", "--context", &id], code);
    assert_eq!(
        stdout_of(&in_ctx(b"import os\nz = 1\nos.getcwd()")),
        "/tmp\n"
    );
    assert!(cli
        .ok(&["code", "restart", "nb", &id])
        .contains("Restarted"));
    let out = in_ctx(b"z");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_of(&out).contains("NameError"), "{}", stderr_of(&out));
    assert_eq!(
        cli.ok(&["code", "rm", "nb", &id]),
        format!("{id}: removed\n")
    );
    assert!(!cli.ok(&["code", "contexts", "nb"]).contains(&id));
    let err = stderr_of(&in_ctx(b"1"));
    assert!(
        err.contains(&id) && err.contains("`stockade code contexts nb`"),
        "{err}"
    );
    assert_cli_words(&err);

    // Flags checked before any request, and a sandbox without kernels.
    let err = cli.fails(&[
        "run-code",
        "nb",
        "--language",
        "python",
        "--context",
        &id,
        &cell,
    ]);
    assert!(err.contains("--context"), "{err}");
    let err = cli.fails(&["run-code", "nb", "-e", "NOEQUALS", &cell]);
    assert!(err.contains("KEY=VALUE"), "{err}");
    cli.create(&["--name", "plain"]);
    let err = stderr_of(&cli.run_with_stdin(&["run-code", "plain"], b"1"));
    assert!(err.contains("code-interpreter"), "{err}");
    assert_cli_words(&err);
}

/// Writes `text` to the file `name` in `dir`: its path.
fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_closed_pipe_ends_the_cli_quietly() {
    let cli = fresh_server("stk_cli_pipes_token_0001");
    cli.create(&["--name", "pp", "--start-command", "seq 3000; sleep 1000"]);
    cli.ok(&["exec", "-d", "pp", "--", "sleep", "60"]);

    // The pipeline of the report, through a real pipe.
    let out = cli.sh(
        "bash",
        r#""$STOCKADE" get --json pp | head -1; exit "${PIPESTATUS[0]}""#,
    );
    assert_eq!(stdout_of(&out), "{\n");
    assert!(
        matches!(out.status.code(), Some(0 | 141)),
        "{:?}",
        out.status
    );
    assert_eq!(stderr_of(&out), "");

    // A reader that is gone before anything is written: every printing
    // command ends at its first write, without a panic or a message.
    for args in [
        vec!["get", "--json", "pp"],
        vec!["get", "pp"],
        vec!["ls"],
        vec!["ls", "--json"],
        vec!["ps", "pp"],
        vec!["ps", "pp", "--json"],
        vec!["snapshot", "ls"],
        vec!["logs", "pp"],
        vec!["logs", "-f", "--json", "pp"],
        vec!["exec", "pp", "--", "seq", "1000000"],
        vec!["exec", "pp", "--json", "--", "seq", "10"],
        vec!["completions", "bash"],
        vec!["__complete", "--", "stockade", "get", ""],
    ] {
        let started = Instant::now();
        let mut child = cli
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader closes at once
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(141),
            "{args:?}: {}",
            stderr_of(&out)
        );
        assert_eq!(stderr_of(&out), "", "{args:?}");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(20), "{args:?} took {took:?}");
    }
}

#[test]
fn exec_in_the_background_ps_kill_and_output_in_order() {
    let cli = fresh_server("stk_cli_bg_token_0000001");
    cli.create(&["--name", "bg"]);

    let sleeper = cli
        .ok(&["exec", "-d", "bg", "--", "sleep", "300"])
        .trim()
        .to_owned();
    assert!(
        sleeper.len() == 12 && sleeper.bytes().all(|b| b.is_ascii_alphanumeric()),
        "the process id alone: {sleeper:?}"
    );
    let v = cli.json(&[
        "exec",
        "-d",
        "bg",
        "--json",
        "--shell",
        "echo hi; echo oops >&2; exit 3",
    ]);
    let short = v["processId"].as_str().unwrap().to_owned();

    let list = cli.json(&["ps", "bg", "--json"]);
    let procs = list["processes"].as_array().unwrap();
    let sleeping = procs
        .iter()
        .find(|p| p["processId"] == sleeper.as_str())
        .unwrap();
    assert_eq!(sleeping["status"], "running");
    assert!(procs.iter().any(|p| p["processId"] == short.as_str()));
    let table = stdout_of(&cli.run(&["ps", "bg"]));
    let header = table.lines().next().unwrap();
    assert!(header.starts_with("PID "), "{table}");
    let row = table.lines().find(|l| l.starts_with(&sleeper)).unwrap();
    assert!(row.ends_with("sleep 300"), "{table}");
    for col in ["STATUS", "EXIT", "STARTED", "TIME", "COMMAND"] {
        let at = header.find(col).unwrap();
        assert!(
            row[..at].ends_with("  ") && !row[at..].starts_with(' '),
            "{col} aligned:\n{table}"
        );
    }

    let mut done = serde_json::Value::Null;
    for _ in 0..50 {
        done = cli.json(&["ps", "bg", &short, "--json"]);
        if done["status"] != "running" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(done["status"], "exited");
    assert_eq!(done["exitCode"], 3);
    assert_eq!(done["stdout"], "hi\n");
    let shown = stdout_of(&cli.run(&["ps", "bg", &short]));
    assert!(
        shown.contains("--- stdout\nhi\n--- stderr\noops\n"),
        "{shown}"
    );

    let out = cli.run(&["kill", "bg", &sleeper]);
    assert_eq!(
        stdout_of(&out),
        format!("{sleeper}: killed\n"),
        "{}",
        stderr_of(&out)
    );
    let killed = cli.json(&["ps", "bg", &sleeper, "--json"]);
    assert_eq!(killed["status"], "killed");
    let out = cli.run(&["kill", "bg", &sleeper, "nosuchproc12"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout_of(&out),
        format!("{sleeper}: had ended already (killed, exit code 137)\n")
    );
    let err = stderr_of(&out);
    assert!(
        err.starts_with(
            "nosuchproc12: error: no background process `nosuchproc12` in sandbox `bg`"
        ),
        "{err}"
    );

    // stdout and stderr through one pipe keep the order they were written in.
    let out = cli.sh(
        "sh",
        r#""$STOCKADE" exec -n bg --shell 'for i in 1 2 3 4 5; do echo out$i; sleep 0.1; echo err$i >&2; sleep 0.1; done' 2>&1"#,
    );
    assert!(out.status.success());
    assert_eq!(
        stdout_of(&out),
        "out1\nerr1\nout2\nerr2\nout3\nerr3\nout4\nerr4\nout5\nerr5\n"
    );
}

/// Answers every request on a free port with `body` (a health document).
fn fake_health(body: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn a_missing_image_hints_at_the_fixes_and_help_names_the_default_image() {
    let cli = fresh_server("stk_cli_image_token_0001");
    let image = format!(
        "stockade-test/missing-{}:nope",
        std::process::id() ^ Instant::now().elapsed().subsec_nanos()
    );
    let out = cli.run(&["create", "--name", "ghost", "--image", &image]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains(&image),
        "{err}"
    );
    assert!(lines[1].starts_with("hint: "), "{err}");
    for fix in [
        "--image",
        "STOCKADE_DEFAULT_IMAGE",
        &format!("`docker pull {image}`"),
    ] {
        assert!(lines[1].contains(fix), "{fix} in {err}");
    }
    let e = cli.json_error(&["create", "--json", "--image", &image]);
    assert_eq!(e["code"], "image_unavailable");
    let listed = cli.json(&["ls", "--json"]);
    assert_eq!(listed["total"], 0, "nothing left behind");

    let help_line = |url: &str| {
        let out = stockade(&["--url", url, "create", "--help"])
            .env_remove("STOCKADE_URL")
            .output()
            .unwrap();
        assert!(out.status.success());
        let help = stdout_of(&out);
        let at = help.find("--image <IMAGE>").expect("--image in the help");
        help[at..].lines().take(2).collect::<Vec<_>>().join(" ")
    };
    // A server that reports its default image: the help names it.
    let url = fake_health(r#"{"status":"healthy","defaults":{"image":"busybox:stockade-fake"}}"#);
    assert!(
        help_line(&url).contains("(default: the server's, busybox:stockade-fake)"),
        "{}",
        help_line(&url)
    );
    // This server does not report it yet; no server at all: no guess either.
    for url in [cli.server.url.as_str(), "http://127.0.0.1:9"] {
        let line = help_line(url);
        assert!(line.contains("(default: the server's default)"), "{line}");
        assert!(!line.contains("node:20"), "{line}");
    }
}

#[test]
fn completions_offer_sandbox_and_snapshot_names() {
    let cli = fresh_server("stk_cli_complete_token_1");
    cli.create(&["--name", "alpha"]);
    cli.create(&["--name", "beta"]);
    cli.ok(&["snapshot", "create", "alpha", "--name", "snap-one"]);
    // Counts in words, tables aligned.
    let table = stdout_of(&cli.run(&["ls", "--per-page", "1"]));
    assert!(
        table.ends_with("… 2 sandboxes in all; next page: --page 2\n"),
        "{table}"
    );

    let complete = |words: &[&str]| {
        let mut args = vec!["__complete", "--"];
        args.extend_from_slice(words);
        cli.ok(&args)
    };
    assert_eq!(complete(&["stockade", "get", ""]), "alpha\nbeta\n");
    assert_eq!(
        complete(&["stockade", "exec", "-e", "A=1", "al"]),
        "alpha\n"
    );
    assert_eq!(complete(&["stockade", "rm", "alpha", "b"]), "beta\n");
    assert_eq!(
        complete(&["stockade", "create", "--from-snapshot", ""]),
        "snap-one\n"
    );
    assert_eq!(
        complete(&["stockade", "cp", "./x", ""]),
        "alpha:\nbeta:\n:files\n"
    );
    assert_eq!(complete(&["stockade", "sna"]), "snapshot\n");
    assert_eq!(complete(&["stockade", "exec", "alpha", "--", ""]), "");
    let out = cli.run(&[
        "__complete",
        "--",
        "stockade",
        "--url",
        "http://127.0.0.1:9",
        "get",
        "",
    ]);
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty());

    // The scripts, as the shells run them: each prints what it completes.
    let scripts = tempfile::tempdir().unwrap();
    let script = |shell: &str| {
        let out = stockade(&["completions", shell]).output().unwrap();
        assert!(out.status.success());
        let path = scripts.path().join(shell);
        std::fs::write(&path, &out.stdout).unwrap();
        path.display().to_string()
    };
    let completes = |shell: &str, script: &str, want: &str| {
        let out = cli.sh(shell, script);
        assert_eq!(stdout_of(&out), want, "{shell}: {}", stderr_of(&out));
    };
    let bash = script("bash");
    completes(
        "bash",
        &format!(
            r#"source {bash}
t() {{ COMP_LINE="$1"; COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=("$STOCKADE"); COMP_CWORD=1; _stockade; echo "${{COMPREPLY[*]}}"; }}
t "stockade get "
t "stockade stop -t 5 b"
t "stockade create --from-snapshot=sn"
t "stockade ex""#
        ),
        "alpha beta\nbeta\nsnap-one\nexec\n",
    );
    let has = |shell: &str| {
        Command::new(shell)
            .args(["-c", "exit 0"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if has("zsh") {
        let zsh = script("zsh");
        completes(
            "zsh",
            &format!(
                r#"compdef() {{ :; }}; source {zsh}
compadd() {{ print -r -- "$*"; }}; _files() {{ print files; }}
words=("$STOCKADE" get ""); CURRENT=3; _stockade
words=("$STOCKADE" cp ./x ""); CURRENT=4; _stockade"#
            ),
            "-Q -- alpha beta\n-Q -S  -- alpha: beta:\nfiles\n",
        );
    }
    if has("fish") {
        let fish = script("fish");
        completes(
            "fish",
            &format!(
                r#"source {fish}; function stockade; "$STOCKADE" $argv; end; complete -C "stockade get "; complete -C "stockade snapshot rm s""#
            ),
            "alpha\nbeta\nsnap-one\n",
        );
    }
}

/// `stockade host …` against a real server: flags checked before any
/// request, an engine that cannot be reached refused with the field named,
/// tenants refused, the server's own host never removed; and, where the
/// server connects registered hosts, the local engine registered under a
/// second name, listed, cordoned, drained, uncordoned and removed.
#[test]
fn hosts_from_the_terminal() {
    let admin = fresh_server("stk_cli_hosts_token_0001");
    let engine = "unix:///var/run/docker.sock";

    // TLS flags go together; labels are KEY=VALUE: no request is made.
    let err = admin.json_error(&words(
        "host add h2 tcp://127.0.0.1:2376 --tls-ca /ca.pem --json",
    ));
    assert_eq!(err["code"], "invalid_argument", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("--tls-cert"),
        "{err}"
    );
    let err = admin.fails(&["host", "add", "h2", engine, "--label", "zone"]);
    assert!(err.contains("--label expects KEY=VALUE"), "{err}");

    // The server refuses what it cannot reach, naming the field.
    let err = admin.json_error(&words("host add h2 unix:///nonexistent/docker.sock --json"));
    let message = err["message"].as_str().unwrap();
    assert!(message.contains("dockerHost"), "{err}");
    let err = admin.fails(&["host", "add", "Bad_Name", engine]);
    assert!(err.contains("name"), "{err}");

    // The server's own host is never removed; unknown hosts are not found.
    let err = admin.fails(&["host", "rm", "local"]);
    assert!(err.contains("own Docker host"), "{err}");
    let err = admin.json_error(&["host", "get", "nowhere", "--json"]);
    assert_eq!(err["code"], "not_found");

    // Tenants are refused.
    let tenant = admin.json(&["account", "create", "tenant", "--json"]);
    let tenant = admin.with_token(tenant["token"].as_str().unwrap());
    for args in [
        vec!["host", "ls", "--json"],
        vec!["host", "add", "h2", engine, "--json"],
        vec!["host", "cordon", "local", "--json"],
    ] {
        let err = tenant.json_error(&args);
        assert_eq!(err["code"], "forbidden", "{args:?}: {err}");
    }

    let listed = admin.json(&["host", "ls", "--json"]);
    assert!(listed["hosts"].is_array(), "{listed}");

    // The local engine under a second name, where this server connects
    // registered hosts.
    let out = admin.run(&[
        "host",
        "add",
        "second",
        engine,
        "--label",
        "zone=eu-1",
        "--cpus",
        "2",
        "--json",
    ]);
    if !out.status.success() {
        let err = json_error(&out);
        let message = err["message"].as_str().unwrap();
        assert!(
            message.contains("connects only its own Docker host"),
            "{err}"
        );
        eprintln!("hosts_from_the_terminal: this server connects no registered host; the rest is left out");
        return;
    }
    let h = json_of(&out);
    assert_eq!(h["name"], "second");
    assert_eq!(h["labels"]["zone"], "eu-1");
    assert_eq!(h["capacity"]["cpus"], 2);
    assert_eq!(h["health"]["healthy"], true);
    let table = admin.ok(&["host", "ls"]);
    let line = table
        .lines()
        .find(|l| l.starts_with("second "))
        .unwrap_or_else(|| panic!("{table}"));
    for word in ["active", "healthy", "0/2", engine] {
        assert!(line.contains(word), "{word} in {line}");
    }
    assert!(table.lines().next().unwrap().starts_with("NAME"), "{table}");
    let h = admin.json(&[
        "host",
        "cordon",
        "second",
        "--reason",
        "kernel upgrade",
        "--json",
    ]);
    assert_eq!(
        (&h["state"], &h["stateReason"]),
        (
            &serde_json::json!("cordoned"),
            &serde_json::json!("kernel upgrade")
        )
    );
    let h = admin.json(&["host", "drain", "second", "--json"]);
    assert_eq!(h["state"], "draining");
    let out = stdout_of(&admin.run(&["host", "uncordon", "second"]));
    assert!(out.contains("takes new sandboxes again"), "{out}");
    let out = stdout_of(&admin.run(&["host", "get", "second"]));
    assert!(out.contains("state:       active"), "{out}");
    let out = admin.run(&["__complete", "--", "stockade", "host", "cordon", "sec"]);
    assert_eq!(stdout_of(&out), "second\n");
    admin.ok(&["host", "rm", "second"]);
    let listed = admin.json(&["host", "ls", "--json"]);
    assert!(
        !listed["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["name"] == "second"),
        "{listed}"
    );
}

/// Runs `args`, whose output is `first`, then about three seconds later
/// `second`: the first line must come as it was written, not at the end.
fn prints_first_then_second_later(cli: &Client, args: &[&str]) {
    let mut child = cli
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "first");
    let first_at = Instant::now();
    assert_eq!(lines.next().unwrap().unwrap(), "second");
    assert!(
        first_at.elapsed() > Duration::from_secs(2),
        "the first line came {:?} before the second, not as it was written",
        first_at.elapsed()
    );
    assert!(child.wait().unwrap().success());
}

/// Whether Docker has the container of sandbox `id` paused.
fn docker_paused(id: &str) -> bool {
    docker_lines(&[
        "inspect",
        "-f",
        "{{.State.Paused}}",
        &format!("stockade-{id}"),
    ]) == ["true"]
}

/// The value of the counter a test's background loop writes to /tmp/n.
fn counter(cli: &Client, sandbox: &str) -> u64 {
    let out = cli.ok(&["exec", sandbox, "--", "cat", "/tmp/n"]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a count: {out:?}"))
}

/// `get --json` of `sandbox` until `done` says yes of it, at most `within`.
fn get_until(
    cli: &Client,
    sandbox: &str,
    within: Duration,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let v = cli.json(&["get", sandbox, "--json"]);
        if done(&v) || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn pause_freezes_processes_in_place_and_resume_wakes_them() {
    let cli = fresh_server("stk_cli_pause_token_000001");
    let created = cli.create(&["--name", "frozen"]);
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["lifecycle"]["autoResume"], false);

    // A background loop that counts five times a second, its PID in /tmp/pid.
    cli.ok(&[
        "exec",
        "-d",
        "frozen",
        "--shell",
        "echo $$ > /tmp/pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.2; done",
    ]);
    // The loop's PID and its start time (field 22 of /proc/PID/stat): the
    // same pair later is the same process, not a new one with a reused PID.
    let identity = "p=$(cat /tmp/pid); cut -d' ' -f1,22 /proc/$p/stat";
    let mut before = String::new();
    for _ in 0..50 {
        let out = cli.run(&["exec", "frozen", "--shell", identity]);
        if out.status.success() {
            before = stdout_of(&out);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!before.trim().is_empty(), "the loop did not start");

    let t0 = Instant::now();
    let counted = counter(&cli, "frozen");
    let out = cli.run(&["pause", "frozen"]);
    let paused_at = Instant::now();
    let said = stdout_of(&out);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        said.trim(),
        format!(
            "Paused frozen ({id}): its processes are frozen; `stockade resume frozen` wakes it"
        )
    );
    assert!(docker_paused(&id), "the container is paused in Docker");

    let got = cli.json(&["get", "frozen", "--json"]);
    assert_eq!(got["status"], "PAUSED");
    assert!(got["pausedAt"].is_string(), "{got}");
    let shown = cli.ok(&["get", "frozen"]);
    assert!(shown.contains("status    PAUSED for "), "{shown}");
    assert!(
        shown.contains("lifecycle on timeout: stop; auto-resume: no; idle timeout: none"),
        "{shown}"
    );
    let table = cli.ok(&["ls"]);
    let row = table.lines().find(|l| l.contains("frozen")).unwrap();
    assert!(row.contains("PAUSED for "), "{table}");
    let listed = cli.json(&["ls", "--status", "paused", "--json"]);
    assert_eq!(listed["total"], 1, "{listed}");

    // Commands are refused while it is paused, from the CLI (exec) and
    // from the server (ps), each saying how to resume it.
    let err = cli.fails(&["exec", "frozen", "--", "true"]);
    assert!(
        err.contains("paused") && err.contains("`stockade resume frozen`"),
        "{err}"
    );
    assert_cli_words(&err);
    let e = cli.json_error(&["exec", "frozen", "--json", "--", "true"]);
    assert_eq!(e["code"], "sandbox_paused", "{e}");
    let err = cli.fails(&["ps", "frozen"]);
    assert!(
        err.contains("paused") && err.contains("`stockade resume frozen`"),
        "{err}"
    );
    assert_cli_words(&err);
    let err = cli.fails(&["pause", "frozen"]);
    assert!(err.contains("already paused"), "{err}");

    // Frozen long enough that a loop still running would count 20 more.
    std::thread::sleep(Duration::from_secs(4));
    let resume_from = Instant::now();
    let resumed = cli.json(&["resume", &id, "--json"]);
    assert_eq!(resumed[0]["status"], "RUNNING", "{resumed}");
    assert!(resumed[0].get("pausedAt").is_none(), "{resumed}");
    assert!(!docker_paused(&id));
    let after_resume = counter(&cli, "frozen");
    // The loop counts at most once per 0.2 s of the time it was not frozen.
    let thawed = t0.elapsed() - (resume_from - paused_at);
    let most = (thawed.as_secs_f64() / 0.2).ceil() as u64 + 1;
    assert!(
        after_resume >= counted && after_resume - counted <= most,
        "counted {counted} before the pause and {after_resume} after it, {most} at most in {thawed:?}"
    );

    // The same process goes on counting.
    let after = cli.ok(&["exec", "frozen", "--shell", identity]);
    assert_eq!(after, before, "the counting loop is the same process");
    std::thread::sleep(Duration::from_secs(1));
    assert!(counter(&cli, "frozen") > after_resume, "it keeps counting");
    assert_eq!(cli.json(&["get", "frozen", "--json"])["status"], "RUNNING");

    let out = cli.run(&["resume", "frozen"]);
    assert!(!out.status.success());
    assert!(
        stderr_of(&out).contains("not paused"),
        "{}",
        stderr_of(&out)
    );
    // By name, as people type it.
    let said = cli.ok(&["pause", "frozen"]);
    assert!(said.starts_with("Paused frozen ("), "{said}");
    let said = cli.ok(&["resume", "frozen"]);
    assert_eq!(
        said.trim(),
        format!("Resumed frozen ({id}): its processes go on where they were")
    );

    // A stopped sandbox cannot be paused: the error says how to start it.
    cli.ok(&["stop", "-t", "1", "frozen"]);
    let err = cli.fails(&["pause", "frozen"]);
    assert!(err.contains("`stockade start frozen`"), "{err}");
    let removed = cli.json(&["rm", "frozen", "--json"]);
    assert_eq!(removed[0]["status"], "TERMINATED");
}

#[test]
fn lifecycle_flags_pause_an_idle_sandbox_that_its_next_use_resumes() {
    let cli = fresh_server("stk_cli_lifecycle_token_01");

    // An unknown action or duration names its flag before any request; a
    // value the server refuses names it too.
    let err = cli.fails(&["create", "--name", "x", "--on-timeout", "hibernate"]);
    assert!(
        err.contains("--on-timeout") && err.contains("pause"),
        "{err}"
    );
    let err = cli.fails(&["create", "--name", "x", "--idle-timeout", "soon"]);
    assert!(err.contains("--idle-timeout"), "{err}");
    let err = cli.fails(&["create", "--name", "x", "--idle-timeout", "30d"]);
    assert!(err.starts_with("error: --idle-timeout: "), "{err}");
    assert_eq!(cli.json(&["ls", "--json"])["total"], 0, "none was made");

    let created = cli.create(&[
        "--name",
        "napper",
        "--on-timeout",
        "pause",
        "--auto-resume",
        "--idle-timeout",
        "3s",
    ]);
    assert_eq!(
        created["lifecycle"],
        serde_json::json!({ "onTimeout": "pause", "autoResume": true, "idleTimeoutMinutes": 0.05 })
    );
    let id = created["id"].as_str().unwrap().to_owned();
    let shown = cli.ok(&["get", "napper"]);
    assert!(
        shown.contains("lifecycle on timeout: pause; auto-resume: yes; idle timeout: 3s"),
        "{shown}"
    );

    // Nothing uses it: its session ends after 3 s, and it is paused.
    let t0 = Instant::now();
    let got = get_until(&cli, "napper", Duration::from_secs(15), |v| {
        v["status"] == "PAUSED"
    });
    assert_eq!(got["status"], "PAUSED", "after {:?}: {got}", t0.elapsed());
    assert!(
        got["statusReason"].as_str().unwrap_or("").contains("idle"),
        "{got}"
    );
    assert!(docker_paused(&id));
    assert!(cli.ok(&["ls"]).contains("PAUSED for "));

    // A command wakes it and runs.
    let out = cli.ok(&["exec", "napper", "--", "echo", "awake"]);
    assert_eq!(out, "awake\n");
    let got = cli.json(&["get", "napper", "--json"]);
    assert_eq!(got["status"], "RUNNING", "{got}");
    assert!(!docker_paused(&id));

    // Paused by hand, it says its next use wakes it.
    let said = cli.ok(&["pause", "napper"]);
    assert!(
        said.contains("`stockade resume napper` or its next use wakes it"),
        "{said}"
    );
    let removed = cli.json(&["rm", "napper", "--json"]);
    assert_eq!(removed[0]["status"], "TERMINATED");
}

/// The status and body of a GET of `url`, with no credential of its own
/// (whatever the URL carries).
fn fetch(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let resp = reqwest::Client::new().get(url).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    })
}

/// `fetch` again while nothing listens yet (502), for up to 20 seconds.
fn fetch_when_listening(url: &str) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = fetch(url);
        if got.0 != 502 || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn port_urls_open_as_printed() {
    let cli = fresh_server("stk_cli_port_urls_token_01");
    let serve = "mkdir -p /tmp/www && echo served-from-the-sandbox > /tmp/www/index.html \
                 && exec httpd -f -p 8080 -h /tmp/www";
    cli.create(&["--name", "web", "--port", "8080", "--start-command", serve]);

    // --json: each URL carries a token and opens with nothing else.
    let listed = cli.json(&["ports", "web", "--json"]);
    let url = listed["ports"][0]["url"].as_str().unwrap().to_owned();
    assert!(url.contains("?stockade_token=stkp_"), "{listed}");
    let (status, body) = fetch_when_listening(&url);
    assert_eq!(
        (status, body.as_str()),
        (200, "served-from-the-sandbox\n"),
        "{url}"
    );
    let until = chrono::DateTime::parse_from_rfc3339(listed["expiresAt"].as_str().unwrap())
        .unwrap()
        .with_timezone(&chrono::Utc);
    let left = (until - chrono::Utc::now()).num_seconds();
    assert!((3000..=3601).contains(&left), "the server's hour: {left}");
    // Without the token the same URL is refused: the token is what opens it.
    assert_eq!(fetch(url.split('?').next().unwrap()).0, 401);

    // For people: the table's URL opens as printed, and it says until when.
    let table = cli.ok(&["ports", "web", "--ttl", "2m"]);
    let printed = table
        .split_whitespace()
        .find(|w| w.starts_with("http") && w.contains("stockade_token="))
        .unwrap_or_else(|| panic!("no URL with a token: {table}"));
    assert_eq!(fetch(printed), (200, "served-from-the-sandbox\n".into()));
    assert!(table.contains("opens them until "), "{table}");
    assert!(table.contains("from now"), "{table}");

    // expose prints a URL that opens as well.
    let said = cli.ok(&["ports", "web", "expose", "8081"]);
    assert!(
        said.contains("stockade_token=") && said.contains("until "),
        "{said}"
    );
    let err = cli.fails(&["ports", "web", "expose", "0"]);
    assert!(err.contains("PORT 0: ports are 1 to 65535"), "{err}");
}

#[test]
fn a_start_command_that_exits_at_once_is_reported() {
    let cli = fresh_server("stk_cli_start_command_tok1");

    // A program that does not exist: exit 1, why, its output, where to look.
    let started = Instant::now();
    let out = cli.run(&[
        "create",
        "--name",
        "typo",
        "--start-command",
        "nosuchbinary",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let err = stderr_of(&out);
    assert!(
        err.contains("error: sandbox `typo`") && err.contains("its start command exited"),
        "{err}"
    );
    assert!(err.contains("nosuchbinary: not found"), "its output: {err}");
    assert!(err.contains("see `stockade logs typo`"), "{err}");
    assert_cli_words(&err);
    // The server records the exit as soon as the log stream sees the
    // container stop, so the reason carries the exit code.
    assert!(err.contains("(code 127)"), "{err}");
    let typo = cli.json(&["get", "typo", "--json"]);
    cli.server.remember_instance(typo["id"].as_str().unwrap());

    // A command that fails on its own, with --json: the sandbox on stdout,
    // the error as JSON on stderr, exit 1.
    let out = cli.run(&[
        "create",
        "--json",
        "--name",
        "boom",
        "--start-command",
        "sh -c 'echo boom >&2; exit 3'",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let sandbox: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sandbox["name"], "boom");
    let error: serde_json::Value = serde_json::from_str(&stderr_of(&out)).unwrap();
    assert_eq!(error["error"]["code"], "start_command_exited", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("\n    boom"), "{message}");
    assert!(message.contains("(code 3)"), "{message}");
    assert_eq!(sandbox["status"], "STOPPED", "{sandbox}");
    // It is what `stockade logs` shows too.
    assert_eq!(stderr_of(&cli.run(&["logs", "boom"])), "boom\n");

    // A start command that keeps running is left alone.
    let out = cli.ok(&["create", "--name", "fine", "--start-command", "sleep 600"]);
    assert!(out.starts_with("Created sandbox fine"), "{out}");
    let got = cli.json(&["get", "fine", "--json"]);
    assert_eq!(got["status"], "RUNNING");
}

#[test]
fn egress_lists_on_create_and_update() {
    let cli = fresh_server("stk_cli_egress_flags_tok01");
    let v = cli.create(&[
        "--name",
        "pip",
        "--allow",
        "pypi.org",
        "--allow",
        "*.pythonhosted.org",
        "--deny",
        "203.0.113.7:5432",
    ]);
    assert_eq!(
        v["networkPolicy"],
        serde_json::json!({"allow": ["pypi.org", "*.pythonhosted.org"], "deny": ["203.0.113.7:5432"]}),
        "{v}"
    );
    let details = cli.ok(&["get", "pip"]);
    assert!(details.contains("*.pythonhosted.org"), "{details}");

    // update replaces the policy whole, live.
    let done = cli.json(&["update", "pip", "--deny", "example.com", "--json"]);
    assert_eq!(
        done["sandbox"]["networkPolicy"],
        serde_json::json!({"deny": ["example.com"]})
    );
    assert!(
        done["applied"]["now"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "networkPolicy"),
        "{done}"
    );
    let said = cli.ok(&["update", "pip", "--allow-all"]);
    assert!(said.contains("networkPolicy"), "{said}");
    assert_eq!(
        cli.json(&["get", "pip", "--json"])["networkPolicy"],
        "allow-all"
    );
    cli.ok(&["update", "pip", "--no-network"]);
    assert_eq!(
        cli.json(&["get", "pip", "--json"])["networkPolicy"],
        "deny-all"
    );

    // A bad entry is named by its flag; --allow with --no-network is a usage error.
    let err = cli.fails(&["create", "--name", "bad", "--allow", "not a host!"]);
    assert!(err.contains("--allow: 'not a host!'"), "{err}");
    assert_cli_words(&err);
    let err = cli.fails(&["update", "pip", "--deny", ""]);
    assert!(err.contains("--deny takes an address"), "{err}");
    let out = cli.run(&["create", "--allow", "pypi.org", "--no-network"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
}

#[test]
fn files_verbs_and_a_file_to_stdout() {
    let cli = fresh_server("stk_cli_files_verbs_tok001");
    cli.create(&["--name", "fs"]);
    cli.ok(&[
        "exec",
        "fs",
        "--shell",
        "mkdir -p d/e && echo hi > d/e/f.txt && printf 'a\\000b' > bin && ln -s d/e/f.txt lnk",
    ]);

    // ls: a table for people, the listing as JSON, one entry for a file.
    let table = cli.ok(&["files", "ls", "fs"]);
    assert!(table.starts_with("TYPE"), "{table}");
    assert!(
        table.contains("d/") && table.contains("lnk -> d/e/f.txt"),
        "{table}"
    );
    let listed = cli.json(&["files", "ls", "fs", "--json"]);
    let names: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bin", "d", "lnk"], "{listed}");
    let one = cli.json(&["files", "ls", "fs", "d/e/f.txt", "--json"]);
    assert_eq!(one["entries"][0]["size"], 3, "{one}");
    let err = cli.fails(&["files", "ls", "fs", "nope"]);
    assert!(
        err.contains("`nope` does not exist in sandbox `fs`"),
        "{err}"
    );

    // cat: bytes as they are, several files one after the other.
    let out = cli.run(&["files", "cat", "fs", "bin", "lnk"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(out.stdout, b"a\0bhi\n");
    let err = cli.fails(&["files", "cat", "fs", "d"]);
    assert!(
        err.contains("is a directory") && err.contains("files ls fs d"),
        "{err}"
    );

    // cp SANDBOX:file - writes the file's bytes (a directory is still a tar).
    let out = cli.run(&["cp", "fs:bin", "-"]);
    assert_eq!(out.stdout, b"a\0b");
    let out = cli.run(&["cp", "fs:d", "-"]);
    assert!(
        out.stdout.len() >= 1024 && out.stdout.starts_with(b"d/"),
        "a tar"
    );

    // rm: a non-empty directory needs -r, and says so.
    let err = cli.fails(&["files", "rm", "fs", "d"]);
    assert!(
        err.contains("not empty") && err.contains("files rm -r fs d"),
        "{err}"
    );
    let done = cli.json(&["files", "rm", "-r", "fs", "d", "bin", "--json"]);
    assert_eq!(done.as_array().unwrap().len(), 2, "{done}");
    let out = cli.run(&["exec", "fs", "--", "ls"]);
    assert_eq!(stdout_of(&out), "lnk\n");
    let err = cli.fails(&["files", "rm", "fs", "bin"]);
    assert!(err.contains("`bin` does not exist"), "{err}");
}

#[test]
fn a_mistyped_subcommand_suggests_the_nearest() {
    let out = stockade(&["craete"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_of(&out);
    assert!(
        err.contains("a similar subcommand exists: 'create'"),
        "{err}"
    );
    let out = stockade(&["files", "lss"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("'ls'"), "{}", stderr_of(&out));
    // Under --json the suggestion is in the message.
    let err = json_error(&stockade(&["files", "lss", "--json"]).output().unwrap());
    assert_eq!(err["code"], "usage");
    assert!(err["message"].as_str().unwrap().contains("'ls'"), "{err}");
    // `token WORD` takes a sandbox too: a word near a subcommand says so.
    let cli = fresh_server("stk_cli_suggestions_tok001");
    let err = cli.fails(&["token", "lss"]);
    assert!(
        err.contains("sandbox `lss` not found") && err.contains("`stockade token ls`"),
        "{err}"
    );
}

#[test]
fn plain_words_for_connection_flags_numbers_ports_and_internal_sources() {
    // With the server and token in the environment, nothing makes --url or
    // --token look required: the help says where they come from, and usage
    // lines leave them out.
    let with_env = |args: &[&str]| {
        stockade(args)
            .env("STOCKADE_URL", "http://127.0.0.1:9")
            .env("STOCKADE_TOKEN", "stk_not_asked_for")
            .output()
            .unwrap()
    };
    let help = stdout_of(&with_env(&["get", "--help"]));
    assert!(
        help.contains("STOCKADE_URL and STOCKADE_TOKEN in the environment stand for them"),
        "{help}"
    );
    assert!(help.contains("[default: $STOCKADE_TOKEN]"), "{help}");
    assert!(
        !help.contains("stk_not_asked_for"),
        "the token is never shown"
    );
    for args in [
        &["get"][..],
        &["create", "--allow", "a.org", "--no-network"],
    ] {
        let out = with_env(args);
        assert_eq!(out.status.code(), Some(2));
        let err = stderr_of(&out);
        let usage = err.lines().find(|l| l.starts_with("Usage:")).unwrap();
        assert!(
            !usage.contains("--url") && !usage.contains("--token"),
            "{args:?}: {usage}"
        );
    }

    // Numbers and ports are refused in plain words before any request.
    for (args, said) in [
        (
            &["create", "--memory", "-1"][..],
            "--memory must be a positive number of GB, got -1",
        ),
        (
            &["create", "--cpu", "0"],
            "--cpu must be a positive number of CPU cores, got 0",
        ),
        (
            &["create", "--disk", "-5"],
            "--disk must be a positive whole number of GB, got -5",
        ),
        (&["create", "--port", "0"], "--port 0: ports are 1 to 65535"),
        (
            &["create", "--port", "70000"],
            "--port 70000: ports are 1 to 65535",
        ),
        (
            &["update", "demo", "--memory", "-1"],
            "--memory must be a positive number of GB, got -1",
        ),
        (
            &["ports", "demo", "expose", "0"],
            "PORT 0: ports are 1 to 65535",
        ),
    ] {
        let out = with_env(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr_of(&out), format!("error: {said}\n"), "{args:?}");
    }

    // A source on an internal host: the server's refusal, and the server
    // flag that would allow it.
    let cli = fresh_server("stk_cli_plain_words_tok001");
    let err = cli.fails(&["create", "--git", "http://127.0.0.1:9/repo.git"]);
    assert!(err.contains("internal address 127.0.0.1"), "{err}");
    assert!(
        err.contains("`stockade server --allow-internal-addresses 127.0.0.1/32`"),
        "{err}"
    );
}
