//! The real tier of crash safety: the built binary on
//! real Docker and SQLite, killed with SIGKILL at random moments of creates,
//! deletes, stops, pauses and resumes (seeded, `STOCKADE_CRASH_TRIALS` times, 30 by
//! default), restarted each time. Within 45 s of the last restart: no
//! labelled container or volume without a record, no record in a
//! transitional state, every PAUSED record over a frozen container and no
//! RUNNING one over a frozen container, every acknowledged delete done, every idempotency
//! key answering at once, and the lifecycle events agreeing with the
//! records (none lost, none of a sandbox that never existed). Webhook
//! deliveries pending when the server is killed are made after its
//! restart. And SIGTERM with open event streams and a long command ends
//! the process within its grace period, with exit code 0.

use std::process::Command;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};

mod support;
use support::{
    docker_lines, lines_of, read_banner, server_cmd, spawn_piped, AccountCleanup, KillOnDrop,
};

const TOKEN: &str = "stk_crashtestcrashtestcrashtestcrashtest01";

/// A server process, killed and waited for when dropped.
struct Proc {
    child: KillOnDrop,
    url: String,
}

/// Starts `stockade server` on `dir` and waits for its banner.
fn start(dir: &std::path::Path, extra: &[&str]) -> Proc {
    let mut cmd = server_cmd(dir, TOKEN, &[], extra);
    cmd.env("STOCKADE_OPERATION_LEASE", "3")
        .env("STOCKADE_RATE_LIMIT", "off")
        // The trials keep dozens of default sandboxes (1 CPU, 2 GB) alive,
        // more than this host could reserve; admission control has
        // tests of its own.
        .env("STOCKADE_CPU_OVERCOMMIT", "off")
        .env("STOCKADE_MEMORY_OVERCOMMIT", "off");
    let (child, stdout) = spawn_piped(&mut cmd);
    // From here on the child is killed and waited for whatever happens.
    let mut proc = Proc {
        child: KillOnDrop(child),
        url: String::new(),
    };
    // Keeps reading the server's stdout for its whole life.
    let rx = lines_of(stdout);
    read_banner(&rx, |line| match line.split("listening on ").nth(1) {
        Some(rest) => {
            proc.url = rest.trim().to_owned();
            true
        }
        None => false,
    });
    proc
}

fn kill9(p: &mut Proc) {
    let _ = Command::new("kill")
        .args(["-9", &p.child.0.id().to_string()])
        .status();
    let _ = p.child.0.wait();
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
    key: Option<&str>,
) -> Result<(u16, Value), String> {
    let mut req = http.request(method, url).bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, body))
}

/// `call` without an idempotency key, which must get an answer.
async fn answer(
    http: &reqwest::Client,
    method: Method,
    url: String,
    body: Option<Value>,
) -> (u16, Value) {
    call(http, method, url, body, None).await.unwrap()
}

/// The admin account's id; its containers and volumes are removed when
/// the test ends.
async fn admin_account(http: &reqwest::Client, url: &str) -> AccountCleanup {
    let (_, me) = answer(http, Method::GET, format!("{url}/api/v1/me"), None).await;
    AccountCleanup(me["account"]["id"].as_str().expect("account id").to_owned())
}

/// Every record the admin account has, terminated ones included, by id.
async fn records(http: &reqwest::Client, url: &str) -> std::collections::HashMap<String, Value> {
    let mut all = std::collections::HashMap::new();
    for active in ["true", "false"] {
        let listed = format!("{url}/api/v1/sandbox?per_page=1000&is_active={active}");
        let (status, body) = answer(http, Method::GET, listed, None).await;
        assert_eq!(status, 200, "{body}");
        for sb in body["sandboxes"].as_array().unwrap() {
            all.insert(sb["id"].as_str().unwrap().to_owned(), sb.clone());
        }
    }
    all
}

/// What must hold after recovery; `Err` says what does not (yet).
async fn check(
    http: &reqwest::Client,
    url: &str,
    account: &str,
    acked_deletes: &[String],
) -> Result<(), String> {
    let records = records(http, url).await;
    for (id, sb) in &records {
        let status = sb["status"].as_str().unwrap_or_default();
        if matches!(status, "PROVISIONING" | "PENDING") {
            return Err(format!("{id} is still {status}"));
        }
    }
    let filter = format!("label=io.stockade.account-id={account}");
    for line in docker_lines(&[
        "ps",
        "-a",
        "--filter",
        &filter,
        "--format",
        "{{.Label \"io.stockade.sandbox-id\"}}",
    ]) {
        let live = records
            .get(&line)
            .is_some_and(|sb| sb["status"] != "TERMINATED");
        if !live {
            return Err(format!("container of {line} has no live record"));
        }
    }
    // PAUSED exactly when Docker froze the container.
    for line in docker_lines(&[
        "ps",
        "--filter",
        &filter,
        "--format",
        "{{.Label \"io.stockade.sandbox-id\"}} {{.State}}",
    ]) {
        let (id, state) = line.split_once(' ').unwrap_or((&line, ""));
        let status = records
            .get(id)
            .and_then(|sb| sb["status"].as_str())
            .unwrap_or("");
        if (status == "PAUSED") != (state == "paused") {
            return Err(format!("{id} is {status} over a container that is {state}"));
        }
    }
    for volume in docker_lines(&["volume", "ls", "-q", "--filter", &filter]) {
        let id = volume.trim_start_matches("agent-sandbox-");
        if !records.contains_key(id) {
            return Err(format!("volume {volume} has no record"));
        }
    }
    for id in acked_deletes {
        match records.get(id) {
            Some(sb) if sb["status"] == "TERMINATED" => {}
            other => return Err(format!("acknowledged delete of {id} not done: {other:?}")),
        }
    }
    events_agree(http, url, &records).await
}

/// Every event of the account, oldest first, paged by cursor.
async fn all_events(http: &reqwest::Client, url: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut since = String::new();
    loop {
        let page = format!("{url}/api/v1/events?limit=100&since={since}");
        let (status, body) = answer(http, Method::GET, page, None).await;
        assert_eq!(status, 200, "{body}");
        let events = body["events"].as_array().cloned().unwrap_or_default();
        since = body["nextCursor"].as_str().unwrap_or_default().to_owned();
        if events.is_empty() {
            return out;
        }
        out.extend(events);
    }
}

/// The outbox agrees with the records: no event of a sandbox that never
/// existed for its owner, none lost. Each record's latest state event is
/// the one its status implies, and every sandbox that settled was created.
async fn events_agree(
    http: &reqwest::Client,
    url: &str,
    records: &std::collections::HashMap<String, Value>,
) -> Result<(), String> {
    let mut last: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut created = std::collections::HashSet::new();
    for e in all_events(http, url).await {
        let id = e["sandboxId"].as_str().unwrap_or_default().to_owned();
        let kind = e["type"].as_str().unwrap_or_default();
        let Some(state) = kind.strip_prefix("sandbox.lifecycle.") else {
            continue;
        };
        if !records.contains_key(&id) {
            return Err(format!("event {kind} of {id}, which has no record"));
        }
        if state == "created" {
            created.insert(id.clone());
        }
        if matches!(
            state,
            "created" | "started" | "stopped" | "paused" | "resumed" | "killed" | "errored"
        ) {
            last.insert(id, state.to_owned());
        }
    }
    for (id, sb) in records {
        let status = sb["status"].as_str().unwrap_or_default();
        let expected: &[&str] = match status {
            "RUNNING" => &["created", "started", "resumed"],
            "PAUSED" => &["paused"],
            "STOPPED" => &["stopped"],
            "ERROR" => &["errored"],
            // A create rolled back never existed for its owner: no events.
            "TERMINATED" if !created.contains(id) => &[],
            "TERMINATED" => &["killed"],
            _ => continue,
        };
        let seen = last.get(id).map(String::as_str);
        let agrees = match seen {
            Some(state) => expected.contains(&state),
            None => expected.is_empty(),
        };
        if !agrees {
            return Err(format!("{id} is {status} but its last event is {seen:?}"));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_moments_the_server_recovers_everything_within_45_s() {
    let trials: usize = std::env::var("STOCKADE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let seed: u64 = std::env::var("STOCKADE_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20261126);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let http = client();
    let mut server = start(dir.path(), &[]);
    let cleanup = admin_account(&http, &server.url).await;
    let account = &cleanup.0;
    let mut acked_deletes: Vec<String> = Vec::new();
    let mut keys: Vec<(String, Value)> = Vec::new();
    for trial in 0..trials {
        // A sandbox to stop or delete, made without interruption.
        let made = json!({ "name": format!("t{trial}") });
        let created = format!("{}/api/v1/sandbox", server.url);
        let (status, target) = answer(&http, Method::POST, created, Some(made)).await;
        assert_eq!(status, 201, "trial {trial}: {target}");
        let target = target["id"].as_str().unwrap().to_owned();
        let kind = rng.gen_range(0..6);
        if kind == 5 {
            // A paused sandbox to resume, paused without interruption.
            let pause = format!("{}/api/v1/sandbox/{target}/pause", server.url);
            let (status, paused) = answer(&http, Method::POST, pause, None).await;
            assert_eq!(status, 200, "trial {trial}: {paused}");
        }
        let url = server.url.clone();
        let key = format!("key-{seed}-{trial}");
        let body = json!({ "name": format!("c{trial}") });
        // A create, a create with an idempotency key, a delete, a stop, a
        // pause or a resume.
        let (method, path, sent, sent_key) = match kind {
            0 => (Method::POST, "sandbox".to_owned(), Some(body.clone()), None),
            1 => (
                Method::POST,
                "sandbox".to_owned(),
                Some(body.clone()),
                Some(key.clone()),
            ),
            2 => (Method::DELETE, format!("sandbox/{target}"), None, None),
            4 => (Method::POST, format!("sandbox/{target}/pause"), None, None),
            5 => (Method::POST, format!("sandbox/{target}/resume"), None, None),
            _ => (
                Method::POST,
                format!("sandbox/{target}/stop?timeout=1"),
                None,
                None,
            ),
        };
        let request = {
            let http = http.clone();
            let url = format!("{url}/api/v1/{path}");
            tokio::spawn(async move { call(&http, method, url, sent, sent_key.as_deref()).await })
        };
        if kind == 1 {
            keys.push((key, body));
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..400))).await;
        kill9(&mut server);
        if let Ok(Ok((status, _))) = request.await {
            if kind == 2 && status == 200 {
                acked_deletes.push(target);
            }
        }
        server = start(dir.path(), &[]);
    }
    // Recovery: every check holds within 45 s of the last restart.
    let restarted = Instant::now();
    loop {
        match check(&http, &server.url, account, &acked_deletes).await {
            Ok(()) => break,
            Err(why) if restarted.elapsed() < Duration::from_secs(45) => {
                let _ = why;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(why) => panic!("not recovered 45 s after the restart: {why}"),
        }
    }
    eprintln!(
        "{trials} trials (seed {seed}) recovered in {:.1} s",
        restarted.elapsed().as_secs_f64()
    );
    // Every idempotency key answers at once: the sandbox, or a fresh create.
    for (key, body) in &keys {
        let asked = Instant::now();
        let (status, answer) = call(
            &http,
            Method::POST,
            format!("{}/api/v1/sandbox", server.url),
            Some(body.clone()),
            Some(key),
        )
        .await
        .unwrap();
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "key {key} took {:?}",
            asked.elapsed()
        );
        assert!(
            status == 201 || status == 409,
            "key {key}: {status} {answer}"
        );
    }
    // Everything goes, through the API.
    let ids: Vec<String> = records(&http, &server.url)
        .await
        .into_iter()
        .filter(|(_, sb)| sb["status"] != "TERMINATED")
        .map(|(id, _)| id)
        .collect();
    let bulk = format!("{}/api/v1/sandbox/bulk", server.url);
    let (status, body) = answer(&http, Method::DELETE, bulk, Some(json!({ "ids": ids }))).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_streams_and_exits_within_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let http = client();
    let mut server = start(dir.path(), &["--shutdown-grace", "3"]);
    let _cleanup = admin_account(&http, &server.url).await;
    let created = format!("{}/api/v1/sandbox", server.url);
    let (status, sb) = answer(
        &http,
        Method::POST,
        created,
        Some(json!({ "name": "term" })),
    )
    .await;
    assert_eq!(status, 201, "{sb}");
    let id = sb["id"].as_str().unwrap().to_owned();
    // A log stream that follows, and a command that runs for minutes.
    let logs = http
        .get(format!(
            "{}/api/v1/sandbox/{id}/logs?follow=true",
            server.url
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(logs.status(), 200);
    let exec = {
        let http = http.clone();
        let url = format!("{}/api/v1/sandbox/{id}/exec", server.url);
        tokio::spawn(async move {
            http.post(url)
                .bearer_auth(TOKEN)
                .json(&json!({ "cmd": ["sleep", "300"] }))
                .send()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    Command::new("kill")
        .args(["-TERM", &server.child.0.id().to_string()])
        .status()
        .unwrap();
    // The follower gets an `end` event and the stream closes.
    let text = tokio::time::timeout(Duration::from_secs(10), logs.text())
        .await
        .expect("the log stream stayed open after SIGTERM")
        .unwrap_or_default();
    assert!(text.contains("event: end"), "no end event: {text}");
    let code = loop {
        if let Some(status) = server.child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(code.success(), "exit status {code}");
    assert!(
        asked.elapsed() < Duration::from_secs(3 + 3),
        "took {:?} for a 3 s grace",
        asked.elapsed()
    );
    let _ = exec.await;
    // Restarted, it removes what it left.
    let server = start(dir.path(), &[]);
    let removed = format!("{}/api/v1/sandbox/{id}", server.url);
    let (status, _) = answer(&http, Method::DELETE, removed, None).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_pending_when_the_server_is_killed_are_made_after_its_restart() {
    use base64::Engine;
    use sha2::Digest;
    let dir = tempfile::tempdir().unwrap();
    let http = client();
    let flags = [
        "--allow-internal-addresses",
        "127.0.0.1/32",
        "--webhook-retry-seconds",
        "1",
    ];
    let mut server = start(dir.path(), &flags);
    let _cleanup = admin_account(&http, &server.url).await;
    // A receiver that is down: its port is free now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let secret = "crash-test-signature-secret";
    let (status, hook) = answer(
        &http,
        Method::POST,
        format!("{}/api/v1/webhooks", server.url),
        Some(json!({"url": format!("http://127.0.0.1:{port}/hook"), "signatureSecret": secret})),
    )
    .await;
    assert_eq!(status, 201, "{hook}");
    let (status, sb) = answer(
        &http,
        Method::POST,
        format!("{}/api/v1/sandbox", server.url),
        Some(json!({"name": "delivered-later"})),
    )
    .await;
    assert_eq!(status, 201, "{sb}");
    let id = sb["id"].as_str().unwrap().to_owned();
    let stop = format!("{}/api/v1/sandbox/{id}/stop?timeout=1", server.url);
    let (status, _) = answer(&http, Method::POST, stop, None).await;
    assert_eq!(status, 200);
    kill9(&mut server);

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let got = support::receive_webhooks(listener);
    server = start(dir.path(), &flags);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let types: Vec<String> = got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, body)| serde_json::from_slice::<Value>(body).unwrap())
            .filter(|e| e["sandboxId"] == id.as_str())
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect();
        if types.len() >= 2 {
            assert_eq!(
                types[..2],
                ["sandbox.lifecycle.created", "sandbox.lifecycle.stopped"],
                "in order, after the restart"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "delivered after the restart: {types:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (signature, body) in got.lock().unwrap().iter() {
        let mut hash = sha2::Sha256::new();
        hash.update(secret.as_bytes());
        hash.update(body);
        let expected = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.finalize());
        assert_eq!(signature, &expected);
    }
    let delete = format!("{}/api/v1/sandbox/{id}", server.url);
    answer(&http, Method::DELETE, delete, None).await;
}

/// The account's shared volumes as the API lists them: name → id.
async fn shared_volumes(
    http: &reqwest::Client,
    url: &str,
) -> std::collections::HashMap<String, String> {
    let (status, body) = answer(
        http,
        Method::GET,
        format!("{url}/api/v1/shared-volumes"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_owned(),
                v["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_volume_creates_and_deletes_nothing_is_lost_or_left() {
    let trials: usize = std::env::var("STOCKADE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map(|t| t.clamp(1, 12))
        .unwrap_or(12);
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261128);
    let dir = tempfile::tempdir().unwrap();
    let http = client();
    let mut server = start(dir.path(), &[]);
    let cleanup = admin_account(&http, &server.url).await;
    let account = cleanup.0.clone();
    // Acknowledged creates (with the file written into each) and deletes.
    let mut kept: Vec<String> = Vec::new();
    let mut deleted: Vec<String> = Vec::new();
    for trial in 0..trials {
        // A volume with a file, made without interruption: deleted below,
        // or kept while another is created.
        let name = format!("keep{trial}");
        let (status, v) = answer(
            &http,
            Method::POST,
            format!("{}/api/v1/shared-volumes", server.url),
            Some(json!({ "name": name })),
        )
        .await;
        assert_eq!(status, 201, "trial {trial}: {v}");
        let put = http
            .put(format!(
                "{}/api/v1/shared-volumes/{name}/files/content?path=/f.txt",
                server.url
            ))
            .bearer_auth(TOKEN)
            .body(name.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 201, "trial {trial}");
        let delete = rng.gen_bool(0.5);
        let (method, path, body) = if delete {
            (Method::DELETE, format!("shared-volumes/{name}"), None)
        } else {
            (
                Method::POST,
                "shared-volumes".to_owned(),
                Some(json!({ "name": format!("new{trial}") })),
            )
        };
        let request = {
            let http = http.clone();
            let url = format!("{}/api/v1/{path}", server.url);
            tokio::spawn(async move { call(&http, method, url, body, None).await })
        };
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..150))).await;
        kill9(&mut server);
        let acked = matches!(request.await, Ok(Ok((200..=299, _))));
        if delete {
            if acked {
                deleted.push(name);
            } else {
                kept.push(name);
            }
        } else {
            kept.push(name);
            if acked {
                kept.push(format!("new{trial}"));
            }
        }
        server = start(dir.path(), &[]);
    }
    // After the restart: every acknowledged volume is there (with its file),
    // every acknowledged delete is gone, and the Docker volumes of the
    // account's shared volumes are exactly those the API lists.
    let listed = shared_volumes(&http, &server.url).await;
    for name in &deleted {
        assert!(!listed.contains_key(name), "deleted volume {name} is back");
    }
    for name in &kept {
        if let Some(id) = listed.get(name) {
            if name.starts_with("keep") {
                let read = http
                    .get(format!(
                        "{}/api/v1/shared-volumes/{id}/files/content?path=/f.txt",
                        server.url
                    ))
                    .bearer_auth(TOKEN)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(read.text().await.unwrap(), *name);
            }
        } else {
            // Only a delete the client never saw answered may have gone.
            assert!(
                name.starts_with("keep"),
                "acknowledged volume {name} is missing: {listed:?}"
            );
        }
    }
    let filter = format!("label=io.stockade.account-id={account}");
    let mut docker: Vec<String> = docker_lines(&["volume", "ls", "-q", "--filter", &filter])
        .into_iter()
        .filter(|v| v.starts_with("stockade-shared-"))
        .collect();
    let mut want: Vec<String> = listed
        .values()
        .map(|id| format!("stockade-shared-{id}"))
        .collect();
    docker.sort();
    want.sort();
    assert_eq!(docker, want, "Docker volumes against the records");
    for name in listed.keys() {
        let (status, body) = answer(
            &http,
            Method::DELETE,
            format!("{}/api/v1/shared-volumes/{name}", server.url),
            None,
        )
        .await;
        assert_eq!(status, 204, "{body}");
    }
}
