//! `stockade events`, `webhook` and `audit` as a user runs them against
//! `stockade server`: a create shows up in the feed (paged with its cursor,
//! and live under --follow until Ctrl-C), webhooks go through create, ls,
//! update and rm with bad input refused in words naming the flag, and the
//! audit log shows the create.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::{instance_of, lines_of, wait_for, CliServer};

const TOKEN: &str = "stk_eventsclitesteventsclitesteventscli01";

/// `stockade server` on a data directory of its own; whatever it made is
/// removed when dropped.
struct Server(CliServer);

impl std::ops::Deref for Server {
    type Target = CliServer;
    fn deref(&self) -> &CliServer {
        &self.0
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut CliServer {
        &mut self.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop(Some(TOKEN));
    }
}

/// A server that lets webhooks (and sources) reach loopback receivers.
fn start() -> Server {
    Server(CliServer::start(
        TOKEN,
        &["STOCKADE_ALLOW_INTERNAL_ADDRESSES"],
        &["--allow-internal-addresses", "127.0.0.1/32"],
    ))
}

impl Server {
    /// The JSON error of a failed `--json` command: one line on stderr.
    fn json_error(&self, args: &[&str]) -> Value {
        let err = self.fails(args);
        let v: Value =
            serde_json::from_str(err.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {err}"));
        v["error"].clone()
    }

    /// Creates a sandbox named `name` and remembers the server's instance
    /// for clean-up.
    fn create(&mut self, name: &str) -> String {
        let v = self.json(&["create", "--name", name, "--json"]);
        let id = v["id"].as_str().unwrap().to_owned();
        if self.instance.is_none() {
            self.instance = instance_of(&id);
        }
        id
    }
}

#[test]
fn events_are_listed_paged_and_followed_and_the_audit_log_shows_the_create() {
    let mut s = start();
    let id = s.create("ev-cli");

    // The create is in the feed: as JSON, and as a table for people.
    let page = s.json(&["events", "--type", "sandbox.lifecycle.created", "--json"]);
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{page}");
    assert_eq!(events[0]["sandboxId"], id.as_str());
    assert_eq!(events[0]["type"], "sandbox.lifecycle.created");
    let table = s.ok(&["events", "--sandbox", "ev-cli"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["TIME", "TYPE", "SANDBOX", "DETAILS"]);
    assert!(
        lines.any(|l| l.contains("sandbox.lifecycle.created") && l.contains(&id)),
        "{table}"
    );

    // One a page, reading on with the cursor; past the end, nothing.
    let first = s.json(&["events", "--limit", "1", "--json"]);
    assert_eq!(first["events"].as_array().unwrap().len(), 1);
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    let full = s.run(&["events", "--limit", "1"]);
    assert!(
        String::from_utf8_lossy(&full.stderr).contains("--since"),
        "a full page says how to read on"
    );
    let rest = s.json(&["events", "--since", &cursor, "--json"]);
    for e in rest["events"].as_array().unwrap() {
        assert_ne!(e["id"], first["events"][0]["id"], "{rest}");
    }
    let end = rest["nextCursor"].as_str().unwrap().to_owned();
    let none = s.ok(&["events", "--since", &end]);
    assert!(none.starts_with("No events"), "{none}");

    // Bad input is refused naming the flag.
    let err = s.fails(&["events", "--limit", "0"]);
    assert!(err.contains("--limit"), "{err}");
    let err = s.fails(&["events", "--type", "sandbox.lifecycle.exploded"]);
    assert!(
        err.contains("--type") && err.contains("unknown event type"),
        "{err}"
    );
    let e = s.json_error(&["events", "--since", "yesterday", "--json"]);
    assert_eq!(e["code"], "validation_failed");
    assert!(e["message"].as_str().unwrap().starts_with("--since"), "{e}");
    let out = s
        .command(&["events"])
        .env("STOCKADE_TOKEN", "stk_nobody")
        .output()
        .unwrap();
    assert!(!out.status.success());

    // Followed live: what happens after it started is printed, and Ctrl-C
    // ends it cleanly.
    let mut follow = s
        .command(&["events", "-f", "--sandbox", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let rx = lines_of(stdout);
    let header = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the follow prints its header once connected");
    assert!(header.starts_with("TIME"), "{header}");
    s.ok(&["pause", "ev-cli"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let line = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("sandbox.lifecycle.paused") => break line,
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = follow.kill();
                panic!("no paused event within 30 s; saw {seen:?}");
            }
        }
    };
    assert!(line.contains(&id), "{line}");
    assert!(
        seen.iter()
            .all(|l| !l.contains("sandbox.lifecycle.created")),
        "only what came after the start: {seen:?}"
    );
    let _ = Command::new("kill")
        .args(["-INT", &follow.id().to_string()])
        .status();
    let status = wait_for(&mut follow, Duration::from_secs(10));
    assert!(status.success(), "Ctrl-C ends the follow cleanly: {status}");
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(&mut follow.stderr.take().unwrap(), &mut err);
    assert!(err.contains("--since"), "says where to go on: {err}");

    // The audit log shows the create, by the admin's account.
    let audit = s.json(&["audit", "--json"]);
    let me = s.json(&["account", "whoami", "--json"]);
    let create = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "POST /api/v1/sandbox" && e["status"] == 201)
        .unwrap_or_else(|| panic!("no create in {audit}"))
        .clone();
    assert_eq!(create["accountId"], me["account"]["id"]);
    assert_eq!(create["frontEnd"], "cli", "the CLI names itself: {create}");
    let name = me["account"]["name"].as_str().unwrap();
    let table = s.ok(&["audit", "--account", name]);
    assert!(table.starts_with("TIME"), "{table}");
    assert!(table.contains("POST /api/v1/sandbox"), "{table}");
    let err = s.fails(&["audit", "--limit", "1000"]);
    assert!(err.contains("--limit"), "{err}");
}

#[test]
fn webhooks_go_through_create_ls_update_and_rm() {
    let s = start();
    // A loopback receiver that never answers: registering needs none, and
    // a call sent to it by mistake would hang rather than pass.
    let receiver = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", receiver.local_addr().unwrap());

    // Made with a secret of the server's, shown once.
    let made = s.json(&[
        "webhook",
        "create",
        &url,
        "--event",
        "sandbox.lifecycle.created",
        "--name",
        "cli-hook",
        "--json",
    ]);
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["name"], "cli-hook");
    assert_eq!(made["enabled"], true);
    assert!(made["signatureSecret"].as_str().unwrap().len() >= 8);
    let text = s.ok(&["webhook", "create", &url, "--disabled"]);
    assert!(text.starts_with("Created webhook"), "{text}");
    assert!(text.contains("Signing secret (shown once): "), "{text}");
    assert!(
        text.contains("--enable"),
        "a disabled one says how to start it"
    );
    // One with its own secret, read from stdin: none comes back.
    let mut child = s
        .command(&["webhook", "create", &url, "--secret", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"a-secret-from-stdin\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(own.get("signatureSecret").is_none(), "{own}");
    assert_eq!(
        own["events"].as_array().unwrap().len(),
        every_type(),
        "{own}"
    );

    // Listed without secrets; in a table for people.
    let list = s.json(&["webhook", "ls", "--json"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3);
    assert!(list.iter().all(|w| w.get("signatureSecret").is_none()));
    let table = s.ok(&["webhook", "ls"]);
    let row = table.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(row.contains("cli-hook") && row.contains("sandbox.lifecycle.created"));
    assert!(table.contains("every type"), "{table}");

    // The global --url still names the server, whatever the webhook's URL.
    let out = s
        .command(&["--url", &s.url, "webhook", "get", &id, "--json"])
        .env_remove("STOCKADE_URL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Changed: only what is given.
    let changed = s.json(&[
        "webhook",
        "update",
        &id,
        "--disable",
        "--name",
        "renamed",
        "--json",
    ]);
    assert_eq!(changed["enabled"], false);
    assert_eq!(changed["name"], "renamed");
    assert_eq!(changed["url"], url.as_str());
    assert_eq!(changed["events"], made["events"]);
    let shown = s.ok(&["webhook", "get", &id]);
    assert!(shown.contains("enabled:  no"), "{shown}");
    let back = s.json(&[
        "webhook",
        "update",
        &id,
        "--enable",
        "--all-events",
        "--json",
    ]);
    assert_eq!(back["enabled"], true);
    assert_eq!(back["events"].as_array().unwrap().len(), every_type());
    let err = s.fails(&["webhook", "update", &id]);
    assert!(err.contains("nothing to change"), "{err}");
    let err = s.fails(&["webhook", "update", &id, "--secret", "short"]);
    assert!(err.contains("--secret"), "{err}");
    let deliveries = s.json(&["webhook", "deliveries", &id, "--json"]);
    assert!(deliveries["deliveries"].is_array(), "{deliveries}");
    let err = s.fails(&["webhook", "deliveries", &id, "--status", "lost"]);
    assert!(err.contains("--status"), "{err}");

    // A bad URL is a clear error naming it, in words and in JSON.
    let err = s.fails(&["webhook", "create", "ftp://example.com/hook"]);
    assert!(err.contains("error: URL: ") && err.contains("ftp"), "{err}");
    assert!(!err.contains("HTTP 400"), "{err}");
    let e = s.json_error(&["webhook", "create", "not a url", "--json"]);
    assert_eq!(e["code"], "validation_failed");
    assert!(e["message"].as_str().unwrap().starts_with("URL: "), "{e}");
    let err = s.fails(&["webhook", "create", "http://10.9.8.7/hook"]);
    assert!(
        err.contains("URL: ") && err.contains("--allow-internal-addresses"),
        "{err}"
    );
    let err = s.fails(&["webhook", "update", &id, "--endpoint", "gopher://x/"]);
    assert!(err.contains("error: --endpoint: "), "{err}");
    let err = s.fails(&[
        "webhook",
        "create",
        &url,
        "--event",
        "sandbox.lifecycle.exploded",
    ]);
    assert!(err.contains("--event"), "{err}");

    // Removed, all at once; then not found, in words.
    let others: Vec<String> = list
        .iter()
        .map(|w| w["id"].as_str().unwrap().to_owned())
        .filter(|w| *w != id)
        .collect();
    let mut rm = vec!["webhook", "rm", id.as_str()];
    rm.extend(others.iter().map(String::as_str));
    let out = s.ok(&rm);
    assert!(out.contains(&format!("{id}: removed")), "{out}");
    let err = s.fails(&["webhook", "get", &id]);
    assert!(
        err.contains("not found") && err.contains("stockade webhook ls"),
        "{err}"
    );
    let e = s.json_error(&["webhook", "rm", &id, "--json"]);
    assert_eq!(e["code"], "not_found");
    let none = s.ok(&["webhook", "ls"]);
    assert!(none.starts_with("No webhooks"), "{none}");
    drop(receiver);
}

/// How many event types there are.
fn every_type() -> usize {
    stockade_core::events::EventKind::ALL.len()
}
