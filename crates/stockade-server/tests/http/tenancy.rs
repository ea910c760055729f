//! Another account reaches none of a tenant's sandboxes: every route that
//! names a sandbox — the native API, the E2B API, the prime-compatible
//! routes, the gateway and the port proxy — answers 403 or 404 in its
//! front-end's error shape, and the sandbox is left exactly as it was.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::*;

/// Alice's running sandbox (labels `mine`, port 8080 exposed) and Bob's
/// token, with a sandbox of his own.
struct Tenants {
    app: App,
    alice: String,
    bob: String,
    id: String,
    bobs: String,
}

async fn tenants() -> Tenants {
    let (app, [alice, bob]) = App::with_tenants(["alice", "bob"]).await;
    let id = app
        .create_id(
            &alice,
            json!({ "name": "private", "labels": ["mine"], "ports": [8080] }),
        )
        .await;
    let bobs = app.create_id(&bob, json!({ "name": "bobs" })).await;
    Tenants {
        app,
        alice,
        bob,
        id,
        bobs,
    }
}

impl Tenants {
    /// Alice's sandbox as she reads it, without what changes by itself.
    async fn alices_view(&self) -> Value {
        let mut sb = self
            .app
            .get(&format!("/api/v1/sandbox/{}", self.id), &self.alice)
            .await
            .body;
        let obj = sb.as_object_mut().expect("a sandbox");
        for live in ["usage", "uptimeSeconds", "volume", "disk"] {
            obj.remove(live);
        }
        sb
    }

    /// Asserts Alice's sandbox is still running, as it was, with no
    /// command run in it and no snapshot taken of it.
    async fn assert_untouched(&self, before: &Value) {
        let after = self.alices_view().await;
        assert_eq!(&after, before, "Alice's sandbox changed");
        assert_eq!(after["status"], "RUNNING");
        let execs: Vec<_> = self
            .app
            .rt
            .exec_calls()
            .into_iter()
            .filter(|(sb, _)| sb.as_str() == self.id)
            .collect();
        assert!(
            execs.is_empty(),
            "commands ran in Alice's sandbox: {execs:?}"
        );
        let snaps = self.app.get("/api/v1/snapshots", &self.alice).await;
        assert_eq!(snaps.body["snapshots"], json!([]), "{}", snaps.body);
    }
}

/// A route: method, path with `{id}`, body.
type Route = (Method, &'static str, Option<Value>);

/// The routes of each method: a body only where the method takes one.
fn get(path: &'static str) -> Route {
    (Method::GET, path, None)
}

fn delete(path: &'static str) -> Route {
    (Method::DELETE, path, None)
}

fn post(path: &'static str, body: Value) -> Route {
    (Method::POST, path, Some(body))
}

fn put(path: &'static str, body: Value) -> Route {
    (Method::PUT, path, Some(body))
}

fn patch(path: &'static str, body: Value) -> Route {
    (Method::PATCH, path, Some(body))
}

/// `{id}` in `template` replaced by the sandbox's id.
fn at(template: &str, id: &str) -> String {
    template.replace("{id}", id)
}

/// Every native route that names one sandbox, with a body it accepts. (The
/// terminal is a WebSocket: it needs a real connection's upgrade, so its
/// ownership check is left to the Docker suite.)
fn native_routes() -> Vec<Route> {
    vec![
        get("/api/v1/sandbox/{id}"),
        patch("/api/v1/sandbox/{id}", json!({ "name": "stolen" })),
        post("/api/v1/sandbox/{id}/start", json!({})),
        post("/api/v1/sandbox/{id}/stop?timeout=1", json!({})),
        post("/api/v1/sandbox/{id}/exec", json!({ "cmd": ["id"] })),
        get("/api/v1/sandbox/{id}/processes"),
        get("/api/v1/sandbox/{id}/processes/abcdefghijkl"),
        post(
            "/api/v1/sandbox/{id}/processes/abcdefghijkl/wait?timeout=1",
            json!({}),
        ),
        post(
            "/api/v1/sandbox/{id}/processes/abcdefghijkl/kill",
            json!({}),
        ),
        delete("/api/v1/sandbox/{id}/processes/abcdefghijkl"),
        get("/api/v1/sandbox/{id}/logs?tail=10"),
        get("/api/v1/sandbox/{id}/files?path=/workspace"),
        get("/api/v1/sandbox/{id}/files/stat?path=/workspace"),
        get("/api/v1/sandbox/{id}/files/archive?path=/workspace"),
        put(
            "/api/v1/sandbox/{id}/files?path=/workspace/x",
            json!("data"),
        ),
        delete("/api/v1/sandbox/{id}/files?path=/workspace/x"),
        post(
            "/api/v1/sandbox/{id}/files/mkdir?path=/workspace/d",
            json!({}),
        ),
        post(
            "/api/v1/sandbox/{id}/files/move",
            json!({ "from": "/workspace/a", "to": "/workspace/b" }),
        ),
        get("/api/v1/sandbox/{id}/files/watch?path=/workspace"),
        get("/api/v1/sandbox/{id}/ports"),
        post("/api/v1/sandbox/{id}/ports", json!({ "port": 9000 })),
        delete("/api/v1/sandbox/{id}/ports/8080"),
        post("/api/v1/sandbox/{id}/auth-token", json!({})),
        post("/api/v1/sandbox/{id}/snapshots", json!({})),
        get("/api/v1/sandbox/{id}/snapshots"),
        post("/api/v1/sandbox/{id}/fork", json!({})),
        delete("/api/v1/sandbox/{id}"),
    ]
}

/// The prime-compatible routes under `/api/v1` that name one sandbox.
fn prime_routes() -> Vec<Route> {
    vec![
        post("/api/v1/sandbox/{id}/auth", json!({})),
        get("/api/v1/sandbox/{id}/error-context"),
        post("/api/v1/sandbox/{id}/checkpoints", json!({})),
        get("/api/v1/sandbox/{id}/checkpoints"),
        delete("/api/v1/sandbox/{id}/checkpoints"),
    ]
}

/// Every E2B route that names one sandbox.
fn e2b_routes() -> Vec<Route> {
    vec![
        get("/e2b/sandboxes/{id}"),
        post("/e2b/sandboxes/{id}/timeout", json!({ "timeout": 60 })),
        post("/e2b/sandboxes/{id}/refreshes", json!({})),
        post("/e2b/sandboxes/{id}/connect", json!({ "timeout": 60 })),
        post("/e2b/v2/sandboxes/{id}/connect", json!({ "timeout": 60 })),
        post("/e2b/sandboxes/{id}/resume", json!({})),
        post("/e2b/sandboxes/{id}/pause", json!({})),
        post("/e2b/sandboxes/{id}/fork", json!({})),
        post("/e2b/sandboxes/{id}/snapshots", json!({})),
        get("/e2b/sandboxes/{id}/logs"),
        get("/e2b/v2/sandboxes/{id}/logs"),
        get("/e2b/sandboxes/{id}/metrics"),
        put("/e2b/sandboxes/{id}/network", json!({})),
        delete("/e2b/sandboxes/{id}"),
    ]
}

/// How a front-end takes Bob's API token.
#[derive(Clone, Copy)]
enum Auth {
    Bearer,
    ApiKey,
}

/// Sends every route, `{id}` standing for Alice's sandbox, with Bob's
/// token, asserts each is refused (403 or 404) and returns the answers.
async fn bob_calls(t: &Tenants, routes: Vec<Route>, auth: Auth) -> Vec<(String, Resp)> {
    let mut answers = Vec::new();
    for (method, path, body) in routes {
        let path = at(path, &t.id);
        let r = match auth {
            Auth::Bearer => {
                t.app
                    .send(request(method.clone(), &path, Some(&t.bob), body))
                    .await
            }
            Auth::ApiKey => t.app.e2b(method.clone(), &path, &t.bob, body).await,
        };
        assert!(
            matches!(r.status, StatusCode::FORBIDDEN | StatusCode::NOT_FOUND),
            "{method} {path}: {} {}",
            r.status,
            r.body
        );
        answers.push((format!("{method} {path}"), r));
    }
    answers
}

#[tokio::test]
async fn every_native_route_refuses_another_accounts_sandbox() {
    let t = tenants().await;
    let before = t.alices_view().await;
    for (_, r) in bob_calls(&t, native_routes(), Auth::Bearer).await {
        let code = if r.status == StatusCode::FORBIDDEN {
            "forbidden"
        } else {
            "not_found"
        };
        r.assert_error(r.status, code);
    }
    t.assert_untouched(&before).await;
    assert_eq!(t.app.names(&t.bob, "").await, ["bobs"], "Bob gained a fork");
}

#[tokio::test]
async fn every_native_route_answers_the_owner() {
    // The same requests with Alice's token pass the ownership check, so the
    // refusals above come from it and not from a bad request. (What lies
    // past the check may still fail: the fake runtime has no files.)
    let t = tenants().await;
    for (method, path, body) in native_routes() {
        if method == Method::DELETE && path == "/api/v1/sandbox/{id}" {
            continue;
        }
        let path = at(path, &t.id);
        let r = t
            .app
            .send(request(method.clone(), &path, Some(&t.alice), body))
            .await;
        assert!(
            !matches!(
                r.status,
                StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED | StatusCode::BAD_REQUEST
            ),
            "{method} {path}: {} {}",
            r.status,
            r.body
        );
        assert_ne!(r.message(), "Sandbox not found", "{method} {path}");
    }
}

#[tokio::test]
async fn every_prime_route_refuses_another_accounts_sandbox() {
    let t = tenants().await;
    let before = t.alices_view().await;
    bob_calls(&t, prime_routes(), Auth::Bearer).await;
    t.assert_untouched(&before).await;
}

#[tokio::test]
async fn every_e2b_route_refuses_another_accounts_sandbox_in_e2bs_shape() {
    let t = tenants().await;
    let before = t.alices_view().await;
    for (call, r) in bob_calls(&t, e2b_routes(), Auth::ApiKey).await {
        // E2B's error body: `{"code": <status>, "message"}`.
        assert_eq!(r.body["code"], r.status.as_u16(), "{call}: {}", r.body);
        assert!(r.body["message"].is_string(), "{call}: {}", r.body);
    }
    t.assert_untouched(&before).await;
}

#[tokio::test]
async fn e2b_lists_hold_only_the_callers_sandboxes() {
    let t = tenants().await;
    for path in ["/e2b/sandboxes", "/e2b/v2/sandboxes"] {
        let r = t.app.e2b(Method::GET, path, &t.bob, None).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        let ids: Vec<&str> = r
            .body
            .as_array()
            .unwrap_or_else(|| panic!("{path}: {}", r.body))
            .iter()
            .map(|s| s["sandboxID"].as_str().unwrap_or_default())
            .collect();
        assert!(!ids.iter().any(|i| i.starts_with(&t.id)), "{path}: {ids:?}");
        assert!(
            ids.iter().any(|i| i.starts_with(&t.bobs)),
            "{path}: {ids:?}"
        );
    }
}

#[tokio::test]
async fn bulk_deletes_reach_only_the_callers_sandboxes() {
    let t = tenants().await;
    let before = t.alices_view().await;
    // Bob's bulk deletes, native on `/sandbox/bulk` and prime-sandboxes'
    // on `/sandbox`.
    let bobs_delete = |path: &'static str, body: Value| {
        t.app
            .send(request(Method::DELETE, path, Some(&t.bob), Some(body)))
    };
    let r = bobs_delete("/api/v1/sandbox/bulk", json!({ "ids": [t.id] })).await;
    assert_eq!(r.body["results"][0]["deleted"], false, "{}", r.body);
    assert_eq!(
        r.body["results"][0]["error"]["code"], "forbidden",
        "{}",
        r.body
    );
    let r = bobs_delete("/api/v1/sandbox/bulk", json!({ "labels": ["mine"] })).await;
    assert_eq!(r.body["results"], json!([]), "{}", r.body);
    // prime-sandboxes' bulk delete: by id, by label, and for every account
    // or another one by name.
    let prime_delete = |body: Value| bobs_delete("/api/v1/sandbox", body);
    let r = prime_delete(json!({ "sandbox_ids": [t.id] })).await;
    assert_eq!(r.body["succeeded"], json!([]), "{}", r.body);
    assert_eq!(
        r.body["failed"][0]["sandbox_id"],
        t.id.as_str(),
        "{}",
        r.body
    );
    let r = prime_delete(json!({ "labels": ["mine"] })).await;
    assert_eq!(r.body["succeeded"], json!([]), "{}", r.body);
    let r = prime_delete(json!({ "labels": ["mine"], "all_users": true })).await;
    r.assert_error(StatusCode::FORBIDDEN, "forbidden");
    let alice_id = t.app.get("/api/v1/me", &t.alice).await.body["account"]["id"].clone();
    let r = prime_delete(json!({ "labels": ["mine"], "user_id": alice_id })).await;
    r.assert_error(StatusCode::FORBIDDEN, "forbidden");
    t.assert_untouched(&before).await;
}

#[tokio::test]
async fn status_batches_answer_another_accounts_sandbox_with_forbidden() {
    let t = tenants().await;
    let r = t
        .app
        .post(
            "/api/v1/sandbox/status:batchGet",
            &t.bob,
            json!({ "sandbox_ids": [t.id, t.bobs] }),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        r.body["statuses"],
        json!([{ "sandbox_id": t.bobs, "status": "RUNNING", "error_type": null, "error_message": null }]),
        "{}",
        r.body
    );
    assert_eq!(
        r.body["errors"][0]["sandbox_id"],
        t.id.as_str(),
        "{}",
        r.body
    );
    assert_eq!(r.body["errors"][0]["code"], "FORBIDDEN", "{}", r.body);
    assert_eq!(r.body["errors"].as_array().unwrap().len(), 1);
}

/// Asserts a token was not let through: 401, 403 or 404.
#[track_caller]
fn assert_denied(r: &Resp, what: &str) {
    assert!(
        matches!(
            r.status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND
        ),
        "{what}: {} {}",
        r.status,
        r.body
    );
}

/// Bob's answer to `POST /api/v1/sandbox/{his sandbox}/{route}`.
async fn bobs_token(t: &Tenants, route: &str) -> Value {
    let path = format!("/api/v1/sandbox/{}/{route}", t.bobs);
    let r = t.app.post(&path, &t.bob, json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
    assert!(r.body["token"].is_string(), "{path}: {}", r.body);
    r.body
}

#[tokio::test]
async fn a_gateway_token_opens_only_its_own_sandbox() {
    let t = tenants().await;
    let auth = bobs_token(&t, "auth").await;
    let token = auth["token"].as_str().unwrap();
    let bob_ns = auth["user_ns"].as_str().unwrap_or_default().to_owned();
    let alice_ns = t.app.get("/api/v1/me", &t.alice).await.body["account"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for ns in [alice_ns.as_str(), bob_ns.as_str()] {
        let path = format!("/gateway/{ns}/{}/read-file?path=/workspace/x", t.id);
        assert_denied(&t.app.get(&path, token).await, &path);
    }
}

#[tokio::test]
async fn a_sandbox_token_opens_only_its_own_sandbox_through_the_proxy() {
    let t = tenants().await;
    let auth = bobs_token(&t, "auth-token").await;
    let proxied = format!("/proxy/{}/8080/", t.id);
    for token in [auth["token"].as_str().unwrap(), t.bob.as_str()] {
        let r = t.app.get_with(&proxied, "x-stockade-token", token).await;
        assert_denied(&r, &proxied);
    }
}

#[tokio::test]
async fn unknown_sandboxes_are_404_not_found() {
    let app = App::new().await;
    let r = app.get("/api/v1/sandbox/abcdefghijkl", &app.admin).await;
    r.assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(r.message(), "Sandbox not found");
}

#[tokio::test]
async fn names_are_per_account() {
    let t = tenants().await;
    // Bob may use Alice's name; Alice may not use it twice.
    t.app.create(&t.bob, json!({ "name": "private" })).await;
    let r = t
        .app
        .try_create(&t.alice, json!({ "name": "private" }))
        .await;
    r.assert_error(StatusCode::CONFLICT, "conflict");
}
