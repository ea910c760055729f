//! Rate limits: 1000 requests per 60 s per client IP and per credential,
//! independently, on the API, E2B's control plane and in-sandbox calls, and
//! the port proxy; 429 with `Retry-After` in each front-end's shape past
//! either limit. Failed authentications lock a client address out, but an
//! address that many tenants' sandboxes call from is a client per
//! credential, so one tenant cannot lock out the others.

use std::net::IpAddr;
use std::process::{Child, Command};
use std::time::Duration;

use futures_util::{stream, StreamExt};
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::{json, Value};
use stockade_server::ratelimit::{IpNet, Limit, RateLimitConfig};

use crate::helpers::*;

fn limit(requests: u32) -> Option<Limit> {
    Some(Limit {
        requests,
        window: Duration::from_secs(60),
    })
}

/// `GET path` with an optional token and extra headers: status, headers, body.
async fn get(
    app: &TestApp,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Value) {
    let mut req = app.http.get(format!("{}{path}", app.base));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(req).await
}

fn header(h: &HeaderMap, name: &str) -> u64 {
    h.get(name)
        .unwrap_or_else(|| panic!("no {name} header in {h:?}"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number: {h:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_1001st_request_in_a_minute_is_refused() {
    let app = spawn_app().await;
    let token = app.admin_token.clone();
    let started = std::time::Instant::now();
    let results: Vec<(StatusCode, HeaderMap, Value)> = stream::iter(0..1000)
        .map(|_| get(&app, "/api/v1/me", Some(&token), &[]))
        .buffer_unordered(16)
        .collect()
        .await;
    eprintln!("1000 requests took {:?}", started.elapsed());
    assert!(results.iter().all(|(s, _, _)| *s == StatusCode::OK));
    let mut remaining: Vec<u64> = results
        .iter()
        .map(|(_, h, _)| {
            assert_eq!(header(h, "ratelimit-limit"), 1000);
            assert!(header(h, "ratelimit-reset") <= 60);
            header(h, "ratelimit-remaining")
        })
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..1000).collect::<Vec<u64>>());

    let (status, h, body) = get(&app, "/api/v1/me", Some(&token), &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["error"]["code"], "rate_limited");
    let retry = header(&h, "retry-after");
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(header(&h, "ratelimit-limit"), 1000);
    assert_eq!(header(&h, "ratelimit-remaining"), 0);
    assert!(header(&h, "ratelimit-reset") <= 60);
    assert_eq!(
        h.get("ratelimit-policy").unwrap().to_str().unwrap(),
        "1000;w=60"
    );

    // Health checks and metrics scrapes are not limited.
    let (status, h, _) = get(&app, "/api/v1/health", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(h.get("ratelimit-limit").is_none());
    let (status, _, _) = get(&app, "/metrics", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn ip_and_token_buckets_are_independent() {
    let app = spawn_configured(|c| {
        c.rate_limit = Some(RateLimitConfig {
            per_ip: limit(30),
            per_token: limit(20),
            ..RateLimitConfig::default()
        });
    })
    .await;
    let a = app.admin_token.clone();
    // 1 request of token A (and of this IP).
    let b = app.new_account("bob").await;

    // Token A: 19 more, the last one leaves A nothing (the IP has 10 left).
    // Token B from the same IP goes on until the IP's 30 are used up; A's
    // refused request did not count against the IP.
    for (token, numbers, limit, which) in [
        (&a, 2..=20, 20, "per-token"),
        (&b, 21..=30, 30, "per-client"),
    ] {
        for i in numbers {
            let (status, h, _) = get(&app, "/api/v1/me", Some(token), &[]).await;
            assert_eq!(status, StatusCode::OK, "request {i}");
            assert_eq!(header(&h, "ratelimit-limit"), limit);
            assert_eq!(header(&h, "ratelimit-remaining"), limit - i);
        }
        let (status, h, body) = get(&app, "/api/v1/me", Some(token), &[]).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(body["error"]["message"].as_str().unwrap().contains(which));
        assert_eq!(header(&h, "ratelimit-limit"), limit);
        if which == "per-token" {
            assert!(header(&h, "retry-after") >= 1);
        }
    }
    // The IP bucket holds before authentication, and X-Forwarded-For from
    // an untrusted peer changes nothing.
    let (status, _, _) = get(&app, "/api/v1/sandbox", None, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, _) = get(
        &app,
        "/api/v1/me",
        Some(&b),
        &[("x-forwarded-for", "203.0.113.9")],
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, _) = get(&app, "/api/v1/health", None, &[]).await;
    assert_eq!(status, StatusCode::OK);

    // The refusals are counted by bucket.
    let (_, _, metrics) = get(&app, "/metrics", None, &[]).await;
    let metrics = metrics.as_str().unwrap().to_owned();
    assert!(
        metrics.contains("stockade_rate_limited_total{bucket=\"token\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("stockade_rate_limited_total{bucket=\"ip\"} 3\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "stockade_http_requests_total{method=\"GET\",route=\"/api/v1/me\",status=\"429\"} 3\n"
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_a_trusted_proxy_the_forwarded_client_counts() {
    let app = spawn_configured(|c| {
        c.rate_limit = Some(RateLimitConfig {
            per_ip: limit(3),
            per_token: None,
            trusted_proxies: vec![IpNet::parse("127.0.0.0/8").unwrap()],
            ..RateLimitConfig::default()
        });
    })
    .await;
    let t = app.admin_token.clone();
    let first = [("x-forwarded-for", "203.0.113.1")];
    for _ in 0..3 {
        let (status, _, _) = get(&app, "/api/v1/me", Some(&t), &first).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, _, _) = get(&app, "/api/v1/me", Some(&t), &first).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // Another client behind the same proxy, and one that prepends a spoofed
    // address (the proxy appends the real one last).
    for (forwarded, status) in [
        ("203.0.113.2", StatusCode::OK),
        ("203.0.113.2, 203.0.113.1", StatusCode::TOO_MANY_REQUESTS),
    ] {
        let header = [("x-forwarded-for", forwarded)];
        let (got, _, _) = get(&app, "/api/v1/me", Some(&t), &header).await;
        assert_eq!(got, status, "{forwarded}");
    }
}

/// Per-IP and per-token limits per 60 s; `sandbox_clients` as configured.
fn limits(per_ip: u32, per_token: u32, sandbox_clients: &[&str]) -> Option<RateLimitConfig> {
    Some(RateLimitConfig {
        per_ip: limit(per_ip),
        per_token: limit(per_token),
        sandbox_clients: sandbox_clients
            .iter()
            .map(|n| IpNet::parse(n).unwrap())
            .collect(),
        ..RateLimitConfig::default()
    })
}

async fn app_with_limits(limits: Option<RateLimitConfig>) -> TestApp {
    spawn_configured(move |c| c.rate_limit = limits).await
}

/// A client whose connections come from `addr` (any of 127/8 is loopback).
fn client_from(addr: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(addr.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// Status, headers and body of a request.
async fn send(req: reqwest::RequestBuilder) -> (StatusCode, HeaderMap, Value) {
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `GET /e2b/sandboxes` with an E2B API key, from `http`.
async fn e2b_list(
    app: &TestApp,
    http: &reqwest::Client,
    key: &str,
) -> (StatusCode, HeaderMap, Value) {
    send(
        http.get(format!("{}/e2b/sandboxes", app.base))
            .header("X-API-Key", key),
    )
    .await
}

/// A 429 in E2B's shape: `{"code": 429, "message"}`, with `Retry-After`.
fn assert_e2b_429(status: StatusCode, h: &HeaderMap, body: &Value) {
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], 429, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("retry in"),
        "{body}"
    );
    assert!(body.get("error").is_none(), "{body}");
    let retry = header(h, "retry-after");
    assert!((1..=60).contains(&retry), "{retry}");
}

/// A 429 in Stockade's shape, with `Retry-After`.
fn assert_native_429(status: StatusCode, h: &HeaderMap, body: &Value) {
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let retry = header(h, "retry-after");
    assert!((1..=60).contains(&retry), "{retry}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_e2b_key_is_limited_like_an_api_token_and_others_go_on() {
    let app = app_with_limits(limits(1000, 5, &[])).await;
    let a = app.new_account("e2b-burst-a").await;
    let b = app.new_account("e2b-burst-b").await;
    let http = &app.http;
    for i in 1..=5 {
        let (status, h, body) = e2b_list(&app, http, &a).await;
        assert_eq!(status, StatusCode::OK, "request {i}: {body}");
        assert_eq!(header(&h, "ratelimit-limit"), 5);
        assert_eq!(header(&h, "ratelimit-remaining"), 5 - i);
    }
    let (status, h, body) = e2b_list(&app, http, &a).await;
    assert_e2b_429(status, &h, &body);
    assert!(
        body["message"].as_str().unwrap().contains("per-token"),
        "{body}"
    );
    assert_eq!(header(&h, "ratelimit-limit"), 5);
    assert_eq!(header(&h, "ratelimit-remaining"), 0);
    // One key, one budget: as a bearer, and on Stockade's own API too.
    let (status, h, body) = send(
        http.get(format!("{}/e2b/sandboxes", app.base))
            .bearer_auth(&a),
    )
    .await;
    assert_e2b_429(status, &h, &body);
    let (status, h, body) = get(&app, "/api/v1/me", Some(&a), &[]).await;
    assert_native_429(status, &h, &body);
    // Another key goes on.
    let (status, _, body) = e2b_list(&app, http, &b).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_prime_gateway_is_limited_per_bearer_in_its_own_shapes() {
    let app = app_with_limits(limits(1000, 2, &[])).await;
    let base = format!("{}/gateway/acc/abcdefabcdef", app.base);
    let file = || {
        send(
            app.http
                .get(format!("{base}/read-file?path=/etc/hostname"))
                .bearer_auth("stkg_forged"),
        )
    };
    for i in 0..2 {
        let (status, _, body) = file().await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "request {i}: {body}");
    }
    // The file routes: the gateway's `{"error", "message"}`.
    let (status, h, body) = file().await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"], "rate_limited", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("per-token"),
        "{body}"
    );
    assert!(header(&h, "retry-after") >= 1);
    // The command service: a Connect error.
    let (status, h, body) = send(
        app.http
            .post(format!("{base}/command_session.CommandSession/Start"))
            .bearer_auth("stkg_forged")
            .header("content-type", "application/json")
            .body("{}"),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "resource_exhausted", "{body}");
    assert!(header(&h, "retry-after") >= 1);
    // Another bearer is checked as ever.
    let (status, _, body) = send(
        app.http
            .get(format!("{base}/read-file?path=/etc/hostname"))
            .bearer_auth("stkg_other"),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
}

/// A sandbox token for `id` living `ttl` seconds (tokens of other
/// lifetimes are other credentials).
async fn port_token(app: &TestApp, owner: &str, id: &str, ttl: u64) -> String {
    let body = json!({ "ttlSeconds": ttl });
    let r = app.sandbox_post(owner, id, "auth-token", body).await;
    r.expect(StatusCode::OK)["token"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// E2B's connect: the sandbox's envd access token.
async fn envd_token(app: &TestApp, key: &str, id: &str) -> String {
    let (status, _, body) = send(
        app.http
            .post(format!("{}/e2b/sandboxes/{id}/connect", app.base))
            .header("X-API-Key", key)
            .json(&json!({ "timeout": 600 })),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    body["envdAccessToken"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_tokens_are_limited_on_the_proxy_and_in_sandbox_calls() {
    const N: u64 = 20;
    let app = app_with_limits(limits(1000, N as u32, &[])).await;
    let (alice, id) = app.owned_sandbox("rl-sandbox-tokens", json!({
                "name": "rl-proxy",
                "startCommand": "mkdir -p /w && echo from-the-sandbox > /w/index.html && exec httpd -f -p 8080 -h /w",
                "ports": [8080],
            })).await;
    sh_in(
        &id,
        "for i in $(seq 1 100); do wget -q -O /dev/null http://127.0.0.1:8080/ && exit 0; usleep 100000; done; exit 1",
    );
    let t1 = port_token(&app, &alice, &id, 600).await;
    let t2 = port_token(&app, &alice, &id, 900).await;
    let path_form = format!("{}/proxy/{id}/8080/", app.base);
    let host_form = format!("8080-{id}.{PROXY_DOMAIN}");
    let proxied = |token: &str, host: bool| {
        let req = if host {
            app.http
                .get(format!("{}/", app.base))
                .header("host", &host_form)
        } else {
            app.http.get(&path_form)
        };
        send(req.header("x-stockade-token", token))
    };

    // The port proxy: path form and host form share the token's budget;
    // the sandbox's answers are left as they are.
    for i in 0..N {
        let (status, h, body) = proxied(&t1, i % 2 == 1).await;
        assert_eq!(status, StatusCode::OK, "request {i}: {body}");
        assert_eq!(body, "from-the-sandbox\n");
        assert!(h.get("ratelimit-limit").is_none(), "{h:?}");
    }
    for host in [false, true] {
        let (status, h, body) = proxied(&t1, host).await;
        assert_native_429(status, &h, &body);
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("per-token"));
        assert_eq!(header(&h, "ratelimit-limit"), N);
    }
    for host in [false, true] {
        let (status, _, body) = proxied(&t2, host).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    // E2B's in-sandbox calls with the envd token: header form and host
    // form share it too, and are refused in E2B's shape.
    let envd = envd_token(&app, &alice, &id).await;
    let envd_call = |credential: (&'static str, String), host: bool| {
        let req = if host {
            app.http
                .get(format!("{}/files?path=/etc/hostname", app.base))
                .header("host", format!("49983-{id}.{PROXY_DOMAIN}"))
        } else {
            app.http
                .get(format!("{}/e2b/files?path=/etc/hostname", app.base))
                .header("E2b-Sandbox-Id", &id)
                .header("E2b-Sandbox-Port", "49983")
        };
        send(req.header(credential.0, credential.1))
    };
    for i in 0..N {
        let (status, _, body) = envd_call(("x-access-token", envd.clone()), i % 2 == 0).await;
        assert_eq!(status, StatusCode::OK, "request {i}: {body}");
    }
    for host in [false, true] {
        let (status, h, body) = envd_call(("x-access-token", envd.clone()), host).await;
        assert_e2b_429(status, &h, &body);
    }
    // The account's API key is another credential.
    let (status, _, body) = envd_call(("x-api-key", alice.clone()), false).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_authentications_lock_out_their_address_only() {
    let app = app_with_limits(limits(6, 1000, &[])).await;
    let other = app.new_account("rl-lockout").await;
    let attacker = client_from("127.0.0.2");
    for i in 0..6 {
        let (status, _, body) = e2b_list(&app, &attacker, &format!("stk_forged_{i}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "attempt {i}: {body}");
    }
    // That address gets 429 for everything now, valid keys too, each
    // front-end in its own shape; health still answers.
    let (status, h, body) = e2b_list(&app, &attacker, &other).await;
    assert_e2b_429(status, &h, &body);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("without valid credentials"),
        "{body}"
    );
    let (status, h, body) = send(
        attacker
            .get(format!("{}/api/v1/me", app.base))
            .bearer_auth(&other),
    )
    .await;
    assert_native_429(status, &h, &body);
    let (status, h, body) = send(
        attacker
            .get(format!("{}/proxy/abcdefabcdef/8080/", app.base))
            .header("x-stockade-token", "stkp_forged"),
    )
    .await;
    assert_native_429(status, &h, &body);
    let (status, _, _) = send(attacker.get(format!("{}/api/v1/health", app.base))).await;
    assert_eq!(status, StatusCode::OK);
    // Another address is not locked out.
    for key in [&other, &app.admin_token] {
        let (status, _, body) = e2b_list(&app, &client_from("127.0.0.1"), key).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn from_a_sandbox_address_a_tenant_locks_out_only_its_own_credential() {
    // 127.0.0.3 plays the address sandboxes' calls leave the host from.
    let app = app_with_limits(limits(5, 1000, &["127.0.0.3"])).await;
    let victim = app.new_account("rl-shared-victim").await;
    let busy = app.new_account("rl-shared-busy").await;
    let shared = client_from("127.0.0.3");
    // Twice the per-IP size of failures, rotating forged keys: each fails,
    // none is locked out (each is a credential of its own) …
    for i in 0..10 {
        let (status, _, body) = e2b_list(&app, &shared, &format!("stk_forged_{i}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "attempt {i}: {body}");
    }
    // … one forged key repeated is locked out after the per-IP size.
    for i in 0..5 {
        let (status, _, body) = e2b_list(&app, &shared, "stk_forged_again").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "attempt {i}: {body}");
    }
    let (status, h, body) = e2b_list(&app, &shared, "stk_forged_again").await;
    assert_e2b_429(status, &h, &body);
    // Another tenant's valid calls from the same address go on, and one
    // tenant using up its window there leaves the others theirs.
    for i in 0..5 {
        let (status, _, body) = e2b_list(&app, &shared, &busy).await;
        assert_eq!(status, StatusCode::OK, "request {i}: {body}");
    }
    let (status, h, body) = e2b_list(&app, &shared, &busy).await;
    assert_e2b_429(status, &h, &body);
    assert!(
        body["message"].as_str().unwrap().contains("per-client"),
        "{body}"
    );
    let (status, _, body) = e2b_list(&app, &shared, &victim).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // An address not listed is one client, whatever it presents.
    let alone = client_from("127.0.0.4");
    for i in 0..5 {
        let (status, _, _) = e2b_list(&app, &alone, &format!("stk_forged_{i}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, h, body) = e2b_list(&app, &alone, &victim).await;
    assert_e2b_429(status, &h, &body);
}

/// A front door for sandboxes' calls, in a network namespace on a bridge
/// of the test's own: it relays each connection to the server and names
/// the address it came from in `X-Forwarded-For`, as a load balancer in
/// front of Stockade does. The addresses it saw are in `peers.txt`.
const RELAY: &str = r#"
import asyncio, sys
listen_port, upstream_host, upstream_port, log = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]

async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    except Exception:
        pass
    finally:
        w.close()

async def handle(r, w):
    peer = w.get_extra_info("peername")[0]
    with open(log, "a") as f:
        f.write(peer + "\n")
    try:
        head = await r.readuntil(b"\r\n\r\n")
    except Exception:
        w.close()
        return
    line, rest = head.split(b"\r\n", 1)
    head = line + b"\r\nX-Forwarded-For: " + peer.encode() + b"\r\n" + rest
    ur, uw = await asyncio.open_connection(upstream_host, upstream_port)
    uw.write(head)
    await uw.drain()
    await asyncio.gather(pipe(r, uw), pipe(ur, w))

async def main():
    server = await asyncio.start_server(handle, "0.0.0.0", listen_port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"#;

/// The bridge `name` with the host at `10.251.{subnet}.1` and the relay's
/// namespace at `.2`; removed on drop.
struct FrontDoor {
    name: String,
    relay: Child,
    dir: tempfile::TempDir,
}

impl FrontDoor {
    fn available() -> bool {
        netns_available("the sandbox front-door test")
    }

    fn start(name: &str, subnet: u8, server_port: u16) -> Self {
        let host = format!("10.251.{subnet}.1");
        add_bridge(name, subnet);
        let ns = add_namespace(name, subnet, 2);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("relay.py"), RELAY).unwrap();
        let relay = spawn_ready(
            Command::new("ip")
                .args(["netns", "exec", &ns, "python3"])
                .arg(dir.path().join("relay.py"))
                .args(["8080", &host, &server_port.to_string()])
                .arg(dir.path().join("peers.txt")),
            "the relay",
        );
        Self {
            name: name.to_owned(),
            relay,
            dir,
        }
    }

    /// The addresses connections came to the relay from.
    fn peers(&self) -> Vec<String> {
        let mut peers: Vec<String> = std::fs::read_to_string(self.dir.path().join("peers.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        peers.sort();
        peers.dedup();
        peers
    }
}

impl Drop for FrontDoor {
    fn drop(&mut self) {
        let _ = self.relay.kill();
        let _ = self.relay.wait();
        let _ = ip(&["link", "del", &self.name]);
        let _ = ip(&["netns", "del", &format!("{}-2", self.name)]);
    }
}

/// The HTTP statuses of `wget` calls run in a sandbox, one per line of
/// `script`'s output (`wget -S` prints the status line), and the output.
fn statuses_in(id: &str, script: &str) -> (Vec<u16>, String) {
    let out = sh_in(id, script);
    let statuses = out
        .lines()
        .filter_map(|l| l.split("HTTP/1.1 ").nth(1))
        .filter_map(|s| s.get(..3)?.parse().ok())
        .collect();
    (statuses, out)
}

/// A `wget` through the front door at `door` with `headers`, printing the
/// status line of the answer.
fn wget(door: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let headers: String = headers
        .iter()
        .map(|(k, v)| format!(" --header '{k}: {v}'"))
        .collect();
    format!(
        "timeout 5 wget -S -q -O /dev/null{headers} 'http://{door}:8080{path}' 2>&1 | grep 'HTTP/1.1 ' | tail -n 1"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_failing_to_authenticate_locks_out_no_other_tenants_sandbox() {
    if !FrontDoor::available() {
        return;
    }
    const SUBNET: u8 = 71;
    let door_net = format!("10.251.{SUBNET}.0/24");
    let door = format!("10.251.{SUBNET}.2");
    let app = spawn_configured({
        let door = door.clone();
        move |c| {
            // Reachable from the front door, which is trusted to name
            // the client; sandboxes may reach the front door.
            c.listen = "0.0.0.0:0".parse().unwrap();
            c.rate_limit = Some(RateLimitConfig {
                per_ip: limit(5),
                per_token: limit(1000),
                trusted_proxies: vec![IpNet::parse(&door).unwrap()],
                ..RateLimitConfig::default()
            });
            c.service.egress.private =
                stockade_core::netpolicy::PrivateAccess::parse(&[door_net.as_str()]).unwrap();
        }
    })
    .await;
    let port = app.server.as_ref().unwrap().addr.port();
    let front = FrontDoor::start(
        &format!("stkrl{}", std::process::id() % 100_000),
        SUBNET,
        port,
    );
    let mallory = app.new_account("rl-mallory").await;
    let alice = app.new_account("rl-alice").await;
    let attacker = app.create(&mallory, json!({ "name": "attacker" })).await;
    let attacker = attacker["id"].as_str().unwrap();
    let victim = app.create(&alice, json!({ "name": "victim" })).await;
    let victim = victim["id"].as_str().unwrap();
    let victim_envd = envd_token(&app, &alice, victim).await;

    // Mallory's sandbox: forged API keys, and forged access tokens aimed at
    // Alice's sandbox, three times the per-IP size of failures.
    let mut script = String::new();
    for i in 0..10 {
        script += &wget(
            &door,
            "/e2b/sandboxes",
            &[("X-API-Key", &format!("stk_forged_{i}"))],
        );
        script += "\n";
        script += &wget(
            &door,
            "/e2b/files?path=/etc/hostname",
            &[("E2b-Sandbox-Id", victim), ("X-Access-Token", "forged")],
        );
        script += "\n";
    }
    let (seen, out) = statuses_in(attacker, &script);
    assert_eq!(seen.len(), 20, "{out}");
    assert!(seen[..10].iter().all(|s| *s == 401), "{seen:?}");
    // The one forged access token repeated is locked out after five.
    let envd_failures: Vec<u16> = seen.iter().skip(1).step_by(2).copied().collect();
    assert_eq!(&envd_failures[..5], &[401; 5], "{seen:?}");
    assert!(envd_failures[5..].iter().all(|s| *s == 429), "{seen:?}");
    let api_failures: Vec<u16> = seen.iter().step_by(2).copied().collect();
    assert_eq!(api_failures, vec![401; 10], "{seen:?}");

    // Alice's sandbox, through the same front door from the same host
    // address: its access token and her API key still work.
    let script = [
        wget(
            &door,
            "/e2b/files?path=/etc/hostname",
            &[("E2b-Sandbox-Id", victim), ("X-Access-Token", &victim_envd)],
        ),
        wget(&door, "/e2b/sandboxes", &[("X-API-Key", &alice)]),
    ]
    .join("\n");
    let (seen, out) = statuses_in(victim, &script);
    assert_eq!(seen, vec![200, 200], "{out}");
    // So does the host itself through the front door.
    let (status, _, body) = send(
        reqwest::Client::new()
            .get(format!("http://{door}:8080/api/v1/me"))
            .header("connection", "close")
            .bearer_auth(&app.admin_token),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Every call came to the front door from one address: the host's own,
    // where the sandboxes' traffic leaves it.
    assert_eq!(front.peers(), vec![format!("10.251.{SUBNET}.1")]);
}
