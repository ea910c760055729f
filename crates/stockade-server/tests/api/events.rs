//! Lifecycle events, webhooks and the audit log against a real server and
//! real HTTP receivers on loopback: signatures verify, failed deliveries
//! are retried (500s, a receiver that is down, one that never answers)
//! with the same event id, deliveries of one sandbox arrive in order,
//! nothing reaches another account; the feed pages by cursor and streams;
//! bad registrations store nothing; the audit log records changes and
//! refusals on every front-end and never a secret.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::helpers::*;
use crate::sse_client::SseStream;

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Got {
    headers: HeaderMap,
    body: Bytes,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }
}

/// A webhook receiver on loopback: answers 500 to its first `fail_first`
/// requests (or never answers while `hang` is set), then 204.
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Got>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start(fail_first: usize) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::on(listener, fail_first, false)
    }

    fn on(listener: tokio::net::TcpListener, fail_first: usize, hang: bool) -> Receiver {
        let addr = listener.local_addr().unwrap();
        let got: Arc<Mutex<Vec<Got>>> = Arc::default();
        let failures = Arc::new(AtomicUsize::new(fail_first));
        let recorded = got.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let recorded = recorded.clone();
                let failures = failures.clone();
                async move {
                    recorded.lock().unwrap().push(Got { headers, body });
                    if hang {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    let failing = failures
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if failing {
                        StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        StatusCode::NO_CONTENT
                    }
                }
            }),
        );
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        Receiver { addr, got, task }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    /// The requests once `enough` says they suffice (within 30 s).
    async fn until(&self, what: &str, enough: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.got();
            if enough(&got) {
                return got;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: the receiver got {:?}",
                got.iter()
                    .map(|g| g.json()["type"].clone())
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// E2B's signature of a body: base64url without padding of SHA-256(secret ‖ body).
fn signature(secret: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(secret.as_bytes());
    h.update(body);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(h.finalize())
}

/// A call to E2B's API with `key` as `X-API-Key`: the status and the JSON
/// answer (`null` when there is none).
async fn e2b(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = app
        .http
        .request(method, format!("{}/e2b{path}", app.base))
        .header("x-api-key", key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A server whose webhooks retry quickly and give up on slow receivers soon.
async fn quick_app() -> TestApp {
    spawn_configured(|c| {
        c.service.events.retry_base = Duration::from_millis(200);
        c.service.events.retry_max = Duration::from_millis(800);
        c.service.events.delivery_timeout = Duration::from_secs(2);
    })
    .await
}

async fn register(app: &TestApp, token: &str, body: Value) -> Value {
    app.post("/api/v1/webhooks", token, body)
        .await
        .expect(StatusCode::CREATED)
}

fn types(got: &[Got], sandbox: &str) -> Vec<String> {
    got.iter()
        .map(Got::json)
        .filter(|e| e["sandboxId"] == sandbox)
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn deliveries_are_signed_retried_in_order_and_stay_in_their_account() {
    let app = quick_app().await;
    let owner = app.new_account("hooked").await;
    let other = app.new_account("bystander").await;
    // The owner's receiver fails twice before it answers.
    let mine = Receiver::start(2).await;
    let theirs = Receiver::start(0).await;
    let secret = "a-shared-secret-0123";
    let hook = register(
        &app,
        &owner,
        json!({"url": mine.url(), "signatureSecret": secret, "name": "mine"}),
    )
    .await;
    assert!(hook.get("signatureSecret").is_none(), "{hook}");
    let generated = register(&app, &other, json!({"url": theirs.url()})).await;
    assert!(generated["signatureSecret"].as_str().unwrap().len() >= 32);
    let listed = app
        .get("/api/v1/webhooks", &other)
        .await
        .expect(StatusCode::OK);
    assert!(
        listed[0].get("signatureSecret").is_none(),
        "read-backs never show it: {listed}"
    );

    let id = app.create_id(&owner, json!({})).await;
    app.act(&owner, &id, "stop").await.expect(StatusCode::OK);
    app.act(&owner, &id, "start").await.expect(StatusCode::OK);
    app.delete_sandbox(&owner, &id, "")
        .await
        .assert_status(StatusCode::OK, "delete");

    let want = [
        "sandbox.lifecycle.created",
        "sandbox.lifecycle.stopped",
        "sandbox.lifecycle.started",
        "sandbox.lifecycle.killed",
    ];
    let got = mine
        .until("four events after two failures", |g| {
            types(g, &id).len() >= 6
        })
        .await;
    // The first event three times (two 500s, then 204), then the rest once
    // each, in order: a later event waits for the earlier one.
    let seen = types(&got, &id);
    assert_eq!(seen[..3], [want[0], want[0], want[0]], "{seen:?}");
    assert_eq!(seen[3..], want[1..], "{seen:?}");
    let first: Vec<&Got> = got.iter().take(3).collect();
    let ids: Vec<String> = first
        .iter()
        .map(|g| g.json()["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        ids.iter().all(|i| *i == ids[0]),
        "a retry carries the same event id: {ids:?}"
    );
    let attempts: std::collections::HashSet<String> =
        first.iter().map(|g| g.header("e2b-delivery-id")).collect();
    assert_eq!(attempts.len(), 3, "one delivery id per attempt");
    for g in &got {
        assert_eq!(
            g.header("e2b-signature"),
            signature(secret, &g.body),
            "signature"
        );
        assert_eq!(g.header("e2b-signature-version"), "v1");
        assert_eq!(g.header("e2b-webhook-id"), hook["id"].as_str().unwrap());
        let e = g.json();
        for field in [
            "version",
            "id",
            "type",
            "eventData",
            "sandboxBuildId",
            "sandboxExecutionId",
            "sandboxId",
            "sandboxTeamId",
            "sandboxTemplateId",
            "timestamp",
        ] {
            assert!(e.get(field).is_some(), "E2B's payload has {field}: {e}");
        }
    }
    // Nothing of the owner's reached the other account's receiver.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        types(&theirs.got(), &id).is_empty(),
        "another account's events leaked"
    );

    // The attempts are visible, and a delivery can be sent again: the same
    // event, a new attempt.
    let hook_id = hook["id"].as_str().unwrap();
    let deliveries = app
        .get(&format!("/api/v1/webhooks/{hook_id}/deliveries"), &owner)
        .await
        .expect(StatusCode::OK);
    let created = deliveries["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["eventType"] == want[0])
        .expect("the created event's delivery")
        .clone();
    assert_eq!(created["status"], "delivered");
    assert_eq!(created["attempts"], 3);
    let codes: Vec<_> = created["attemptLog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["statusCode"].clone())
        .collect();
    assert_eq!(codes, [json!(204), json!(500), json!(500)]);
    app.get(&format!("/api/v1/webhooks/{hook_id}/deliveries"), &other)
        .await
        .assert_status(StatusCode::NOT_FOUND, "another account's deliveries");
    let again = app
        .post(
            &format!(
                "/api/v1/webhooks/{hook_id}/deliveries/{}/redeliver",
                created["id"].as_str().unwrap()
            ),
            &owner,
            json!({}),
        )
        .await
        .expect(StatusCode::ACCEPTED);
    assert_eq!(again["status"], "pending");
    let got = mine.until("the re-sent delivery", |g| g.len() >= 7).await;
    assert_eq!(got[6].json()["id"], json!(ids[0]));
    assert_ne!(
        got[6].header("e2b-delivery-id"),
        got[0].header("e2b-delivery-id")
    );
}

#[tokio::test]
async fn a_receiver_that_is_down_or_slow_is_retried_and_holds_nothing() {
    let app = quick_app().await;
    // A port with nothing listening yet.
    let parked = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = parked.local_addr().unwrap().port();
    drop(parked);
    let hook = register(
        &app,
        &app.admin_token,
        json!({"url": format!("http://127.0.0.1:{port}/hook"), "events": ["sandbox.lifecycle.created"]}),
    )
    .await;
    // And one that never answers.
    let hanging = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow = Receiver::on(hanging, 0, true);
    let slow_hook = register(
        &app,
        &app.admin_token,
        json!({"url": slow.url(), "events": ["sandbox.lifecycle.created"]}),
    )
    .await;
    let started = std::time::Instant::now();
    let id = app.create_id(&app.admin_token, json!({})).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "webhooks never hold the API"
    );

    // Failed attempts are recorded with why.
    let hook_id = hook["id"].as_str().unwrap();
    let failed = wait_for_delivery(&app, hook_id, |d| d["attempts"].as_u64() >= Some(2)).await;
    let error = failed["attemptLog"][0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.contains("connect"), "{failed}");
    let slow_id = slow_hook["id"].as_str().unwrap();
    let timed_out = wait_for_delivery(&app, slow_id, |d| d["attempts"].as_u64() >= Some(1)).await;
    assert!(
        timed_out["attemptLog"][0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("in time"),
        "{timed_out}"
    );
    assert!(timed_out["attemptLog"][0]["durationMs"].as_u64().unwrap() < 5_000);

    // The receiver comes up on that port: the event arrives.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let up = Receiver::on(listener, 0, false);
    let got = up
        .until("the event once the receiver is up", |g| !g.is_empty())
        .await;
    assert_eq!(got[0].json()["sandboxId"], id.as_str());
    wait_for_delivery(&app, hook_id, |d| d["status"] == "delivered").await;
    app.delete_sandbox(&app.admin_token, &id, "").await;
}

/// The first delivery of a webhook once `ready` says so (within 30 s).
async fn wait_for_delivery(app: &TestApp, hook: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let list = app
            .get(
                &format!("/api/v1/webhooks/{hook}/deliveries"),
                &app.admin_token,
            )
            .await
            .expect(StatusCode::OK);
        if let Some(d) = list["deliveries"]
            .as_array()
            .and_then(|d| d.last())
            .filter(|d| ready(d))
        {
            return d.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "deliveries: {list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_feed_pages_by_cursor_streams_and_refuses_bad_input() {
    let (app, [owner, other]) = spawn_with_accounts(["reader", "stranger"]).await;
    let mut stream = SseStream::open(
        app.http
            .get(format!(
                "{}/api/v1/events/stream?type=sandbox.lifecycle.stopped",
                app.base
            ))
            .bearer_auth(&owner),
    )
    .await;
    assert_eq!(stream.status, StatusCode::OK);
    let id = app.create_id(&owner, json!({})).await;
    let page = app
        .get("/api/v1/events", &owner)
        .await
        .expect(StatusCode::OK);
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{page}");
    assert_eq!(events[0]["type"], "sandbox.lifecycle.created");
    assert_eq!(events[0]["sandboxId"], id.as_str());
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    // Nothing newer yet: the same cursor back, no events.
    let empty = app
        .get(&format!("/api/v1/events?since={cursor}"), &owner)
        .await
        .expect(StatusCode::OK);
    assert_eq!(empty["events"], json!([]));
    assert_eq!(empty["nextCursor"], cursor.as_str());

    app.act(&owner, &id, "stop").await.expect(StatusCode::OK);
    let newer = app
        .get(&format!("/api/v1/events?since={cursor}&limit=1"), &owner)
        .await
        .expect(StatusCode::OK);
    assert_eq!(newer["events"][0]["type"], "sandbox.lifecycle.stopped");
    let live = stream
        .next_within(Duration::from_secs(10))
        .await
        .expect("a streamed event");
    assert_eq!(live.event, "sandbox.lifecycle.stopped");
    assert_eq!(live.id.as_deref(), newer["nextCursor"].as_str());
    // Filters; another account sees none of it.
    let by_sandbox = app
        .get(
            &format!("/api/v1/events?sandboxId={id}&type=sandbox.lifecycle.created"),
            &owner,
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(by_sandbox["events"].as_array().unwrap().len(), 1);
    let theirs = app
        .get("/api/v1/events", &other)
        .await
        .expect(StatusCode::OK);
    assert_eq!(theirs["events"], json!([]));
    app.get(&format!("/api/v1/events?sandboxId={id}"), &other)
        .await
        .assert_status(StatusCode::NOT_FOUND, "another's sandbox");
    // E2B's polling routes: newest first by default.
    let get = reqwest::Method::GET;
    let (status, polled) = e2b(
        &app,
        get.clone(),
        &format!("/events/sandboxes/{id}"),
        &owner,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(polled[0]["type"], "sandbox.lifecycle.stopped");
    assert_eq!(polled[1]["type"], "sandbox.lifecycle.created");
    let (_, asc) = e2b(
        &app,
        get,
        "/events/sandboxes?orderAsc=true&limit=1",
        &owner,
        None,
    )
    .await;
    assert_eq!(asc.as_array().unwrap().len(), 1);
    assert_eq!(asc[0]["type"], "sandbox.lifecycle.created");

    for (query, field) in [
        ("since=abc", "since"),
        ("since=-4", "since"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=x", "limit"),
        ("type=sandbox.lifecycle.exploded", "type"),
        ("colour=red", "colour"),
    ] {
        let r = app.get(&format!("/api/v1/events?{query}"), &owner).await;
        r.assert_error(StatusCode::BAD_REQUEST, "validation_failed");
        assert_eq!(r.error_fields(), [field], "{query}: {:?}", r.body);
    }
    let r = app.get("/api/v1/events", "stk_not_a_token").await;
    r.assert_status(StatusCode::UNAUTHORIZED, "no key");
    app.delete_sandbox(&owner, &id, "").await;
}

#[tokio::test]
async fn bad_registrations_store_nothing_and_webhooks_are_private() {
    let (app, [owner, other]) = spawn_with_accounts(["registrar", "prowler"]).await;
    let own = format!("{}/hook", app.base);
    for (body, field) in [
        (json!({}), "url"),
        (json!({"url": "ftp://example.com/hook"}), "url"),
        (json!({"url": "not a url"}), "url"),
        (json!({"url": "http://user:pw@example.com/"}), "url"),
        (json!({"url": own}), "url"),
        (
            json!({"url": "http://127.0.0.1:9/h", "events": ["sandbox.lifecycle.nope"]}),
            "events",
        ),
        (
            json!({"url": "http://127.0.0.1:9/h", "events": []}),
            "events",
        ),
        (
            json!({"url": "http://127.0.0.1:9/h", "signatureSecret": "short"}),
            "signatureSecret",
        ),
        (
            json!({"url": "http://127.0.0.1:9/h", "colour": "red"}),
            "colour",
        ),
    ] {
        let r = app.post("/api/v1/webhooks", &owner, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {:?}", r.body);
        assert_eq!(r.error_fields(), [field], "{body}: {:?}", r.body);
    }
    assert_eq!(
        app.get("/api/v1/webhooks", &owner)
            .await
            .expect(StatusCode::OK),
        json!([])
    );
    let r = app
        .http
        .post(format!("{}/api/v1/webhooks", app.base))
        .json(&json!({"url": "http://127.0.0.1:9/h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // E2B's shape: X-API-Key, 201, PATCH only what is given, DELETE 200.
    use reqwest::Method as M;
    let (status, made) = e2b(
        &app,
        M::POST,
        "/events/webhooks",
        &owner,
        Some(
            json!({"name": "My Sandbox Webhook", "url": "http://127.0.0.1:9/h", "enabled": true,
                    "events": ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"],
                    "signatureSecret": "secret-for-event-signature-verification"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let hook = made["id"].as_str().unwrap().to_owned();
    for key in [
        "id",
        "teamID",
        "name",
        "createdAt",
        "enabled",
        "url",
        "events",
    ] {
        assert!(made.get(key).is_some(), "{key}: {made}");
    }
    assert!(made.get("signatureSecret").is_none());
    let path = format!("/events/webhooks/{hook}");
    let (_, patched) = e2b(
        &app,
        M::PATCH,
        &path,
        &owner,
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(patched["enabled"], false);
    assert_eq!(patched["name"], "My Sandbox Webhook");
    assert_eq!(patched["events"], made["events"]);
    let (status, bad) = e2b(
        &app,
        M::PATCH,
        &path,
        &owner,
        Some(json!({"url": "gopher://x"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(bad["code"], 400, "E2B's error shape: {bad}");

    // Another account: not found everywhere, native and E2B.
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PATCH,
        reqwest::Method::DELETE,
    ] {
        let r = app
            .http
            .request(
                method.clone(),
                format!("{}/api/v1/webhooks/{hook}", app.base),
            )
            .bearer_auth(&other)
            .json(&json!({"enabled": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{method}");
        let body = Some(json!({"enabled": true}));
        let (status, _) = e2b(&app, method.clone(), &path, &other, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "E2B {method}");
    }
    let (_, listed) = e2b(&app, M::GET, "/events/webhooks", &owner, None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let (status, _) = e2b(&app, M::DELETE, &path, &owner, None).await;
    assert_eq!(status, StatusCode::OK);
    app.get(&format!("/api/v1/webhooks/{hook}"), &owner)
        .await
        .assert_status(StatusCode::NOT_FOUND, "deleted");

    // Without the administrator's allowance, loopback and the metadata
    // address are refused.
    let strict = spawn_configured(|c| c.service.sources.addresses = Default::default()).await;
    // Nor a sandbox's own address: a webhook is no way into another
    // tenant's sandbox.
    let victim = strict.create_id(&strict.admin_token, json!({})).await;
    let ip = inspect(
        &victim,
        "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
    )
    .join(" ")
    .split_whitespace()
    .next()
    .expect("the sandbox's address")
    .to_owned();
    let into_sandbox = format!("http://{ip}:8000/hook");
    for url in [
        "http://127.0.0.1:9/h",
        "http://169.254.169.254/latest",
        "http://[::1]:80/",
        into_sandbox.as_str(),
    ] {
        let r = strict
            .post("/api/v1/webhooks", &strict.admin_token, json!({"url": url}))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{url}: {:?}", r.body);
        assert!(
            r.message().contains("internal address"),
            "{url}: {}",
            r.message()
        );
    }
}

#[tokio::test]
async fn the_audit_log_records_changes_and_refusals_on_every_front_end_without_secrets() {
    let (app, [(owner_id, owner), (_, other)]) =
        spawn_with_account_ids(["audited", "intruder"]).await;
    let secret_env = "env-value-that-must-never-be-logged";
    let id = app
        .create_id(
            &owner,
            json!({"environmentVars": {"API_SECRET": secret_env}}),
        )
        .await;
    app.post(
        "/api/v1/webhooks",
        &owner,
        json!({"url": "http://127.0.0.1:9/h", "signatureSecret": "a-webhook-secret-value"}),
    )
    .await
    .expect(StatusCode::CREATED);
    // Refusals: another's sandbox, no credential, a bad one.
    app.act(&other, &id, "stop").await;
    app.get(&format!("/api/v1/sandbox/{id}"), &other).await;
    app.get("/api/v1/sandbox", "stk_forged_token_value").await;
    // E2B's front-end, the CLI's and prime-sandboxes' user agents, and the
    // dashboard's session cookie.
    let timeout = format!("/sandboxes/{id}/timeout");
    let body = Some(json!({"timeout": 600}));
    let (status, _) = e2b(&app, reqwest::Method::POST, &timeout, &owner, body).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for agent in ["stockade-cli/0.1.0", "prime-sandboxes/0.5.1 python/3.11.2"] {
        let r = app
            .http
            .post(format!("{}/api/v1/sandbox/{id}/stop", app.base))
            .bearer_auth(&owner)
            .header("user-agent", agent)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{agent}: {}", r.status());
    }
    let session = app
        .http
        .post(format!("{}/api/v1/session", app.base))
        .header("x-stockade-csrf", "1")
        .json(&json!({"token": owner}))
        .send()
        .await
        .unwrap();
    assert!(session.status().is_success(), "{}", session.status());
    let cookie = session
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_owned();
    let r = app
        .http
        .post(format!("{}/api/v1/sandbox/{id}/start", app.base))
        .header("cookie", &cookie)
        .header("x-stockade-csrf", "1")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());

    // Entries are written in the background: wait for the last one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let entries = loop {
        let page = app
            .get("/api/v1/audit", &app.admin_token)
            .await
            .expect(StatusCode::OK);
        let entries = page["entries"].as_array().unwrap().clone();
        if entries.iter().any(|e| e["frontEnd"] == "dashboard") {
            break entries;
        }
        assert!(tokio::time::Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let find = |action: &str, front: &str, status: u64| {
        entries
            .iter()
            .find(|e| e["action"] == action && e["frontEnd"] == front && e["status"] == status)
            .unwrap_or_else(|| panic!("no {action} {front} {status} in {entries:#?}"))
            .clone()
    };
    let create = find("POST /api/v1/sandbox", "api", 201);
    assert_eq!(create["accountId"], owner_id.as_str());
    assert_eq!(create["resourceId"], id.as_str());
    assert!(create["tokenId"].is_string() && create["clientIp"] == "127.0.0.1");
    let refused = find("POST /api/v1/sandbox/{id}/stop", "api", 403);
    assert_eq!(refused["resourceId"], id.as_str());
    assert_ne!(refused["accountId"], owner_id.as_str());
    find("GET /api/v1/sandbox/{id}", "api", 403);
    let anonymous = find("GET /api/v1/sandbox", "api", 401);
    assert!(anonymous.get("accountId").is_none());
    find("POST /e2b/sandboxes/{id}/timeout", "e2b", 204);
    let hook = find("POST /api/v1/webhooks", "api", 201);
    assert!(
        hook["resourceId"].is_string(),
        "a create names what it made: {hook}"
    );
    find("POST /api/v1/sandbox/{id}/stop", "cli", 200);
    find("POST /api/v1/sandbox/{id}/stop", "prime", 200);
    find("POST /api/v1/sandbox/{id}/start", "dashboard", 200);
    assert!(
        !entries
            .iter()
            .any(|e| e["action"] == "GET /api/v1/audit" && e["status"] == 200),
        "successful reads are not audited"
    );
    let text = serde_json::to_string(&entries).unwrap();
    for secret in [
        secret_env,
        "a-webhook-secret-value",
        owner.as_str(),
        other.as_str(),
        &app.admin_token,
        "stk_forged_token_value",
    ] {
        assert!(
            !text.contains(secret),
            "the audit log holds a secret: {secret}"
        );
    }

    // An account reads its own entries only; another's is forbidden.
    let own = app
        .get("/api/v1/audit?limit=100", &owner)
        .await
        .expect(StatusCode::OK);
    let own = own["entries"].as_array().unwrap();
    assert!(!own.is_empty());
    assert!(
        own.iter().all(|e| e["accountId"] == owner_id.as_str()),
        "{own:?}"
    );
    app.get(&format!("/api/v1/audit?accountId={owner_id}"), &other)
        .await
        .assert_status(StatusCode::FORBIDDEN, "another account's entries");
    let filtered = app
        .get(&format!("/api/v1/audit?resourceId={id}"), &app.admin_token)
        .await
        .expect(StatusCode::OK);
    assert!(filtered["entries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["resourceId"] == id.as_str()));
    let next = app
        .get(
            &format!(
                "/api/v1/audit?since={}",
                filtered["nextCursor"].as_str().unwrap()
            ),
            &app.admin_token,
        )
        .await
        .expect(StatusCode::OK);
    assert!(next["entries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["cursor"].as_str().unwrap().parse::<i64>().unwrap()
            > filtered["nextCursor"]
                .as_str()
                .unwrap()
                .parse::<i64>()
                .unwrap()));
    app.get("/api/v1/audit?since=x", &app.admin_token)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "validation_failed");
    // Newest first, then older ones before the cursor.
    let newest = app
        .get("/api/v1/audit?order=desc&limit=3", &app.admin_token)
        .await
        .expect(StatusCode::OK);
    let seqs = |page: &Value| -> Vec<i64> {
        page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["cursor"].as_str().unwrap().parse().unwrap())
            .collect()
    };
    let first = seqs(&newest);
    assert_eq!(first.len(), 3);
    assert!(first.windows(2).all(|w| w[0] > w[1]), "{first:?}");
    let before = newest["nextCursor"].as_str().unwrap();
    let older = app
        .get(
            &format!("/api/v1/audit?before={before}&limit=3"),
            &app.admin_token,
        )
        .await
        .expect(StatusCode::OK);
    let older = seqs(&older);
    assert!(
        !older.is_empty() && older[0] < first[2],
        "{older:?} after {first:?}"
    );
    for (query, field) in [("order=sideways", "order"), ("since=1&before=5", "before")] {
        let r = app
            .get(&format!("/api/v1/audit?{query}"), &app.admin_token)
            .await;
        assert_eq!(r.error_fields(), [field], "{query}: {:?}", r.body);
    }
    app.delete_sandbox(&owner, &id, "").await;
}
