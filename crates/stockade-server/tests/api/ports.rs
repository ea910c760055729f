//! Exposed ports behind the authenticated reverse proxy, by
//! path and by host, HTTP and WebSocket, against real servers inside real
//! sandboxes (`busybox httpd` with CGI scripts, and an `nc` WebSocket
//! handshake server).

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::header::{HeaderMap, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::*;

/// A sandbox main process: `busybox httpd` on 8080 serving /workspace/www.
const HTTPD: &str = "mkdir -p /workspace/www/cgi-bin && printf 'hello from the sandbox\\n' > /workspace/www/index.html && exec httpd -f -p 8080 -h /workspace/www";

/// CGI scripts: `env` shows what reached the sandbox, `echo` returns the body.
const CGI: &str = r#"cat > /workspace/www/cgi-bin/env <<'EOF'
#!/bin/sh
printf 'Content-Type: text/plain\r\nSet-Cookie: app=1; Path=/; Domain=sandboxes.test\r\n\r\n'
env | sort
EOF
cat > /workspace/www/cgi-bin/echo <<'EOF'
#!/bin/sh
printf 'Content-Type: application/octet-stream\r\n\r\n'
head -c "$CONTENT_LENGTH"
EOF
chmod +x /workspace/www/cgi-bin/env /workspace/www/cgi-bin/echo
mkdir -p /workspace/www/sub && echo sub > /workspace/www/sub/index.html"#;

/// Waits until something inside the sandbox answers HTTP on `port`.
fn wait_for_port(id: &str, port: u16) {
    sh_in(
        id,
        &format!(
            "for i in $(seq 1 100); do wget -q -O /dev/null http://127.0.0.1:{port}/ && exit 0; usleep 100000; done; exit 1"
        ),
    );
}

/// A client that shows redirects instead of following them, and that
/// resolves `{port}-{id}.sandboxes.test` names to the test server.
fn client(app: &TestApp, hosts: &[String]) -> reqwest::Client {
    let addr = app.server.as_ref().expect("running").addr;
    let mut b = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    for h in hosts {
        b = b.resolve(h, addr);
    }
    b.build().unwrap()
}

fn addr(app: &TestApp) -> SocketAddr {
    app.server.as_ref().expect("running").addr
}

struct Raw {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Raw {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }
}

async fn send(req: reqwest::RequestBuilder) -> Raw {
    let resp = req.send().await.expect("request");
    Raw {
        status: resp.status(),
        headers: resp.headers().clone(),
        body: resp.bytes().await.expect("body").to_vec(),
    }
}

/// A sandbox token for `id`, with an optional body.
async fn token_for(app: &TestApp, owner: &str, id: &str, body: Option<Value>) -> String {
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/sandbox/{id}/auth-token"),
            Some(owner),
            body,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["sandboxId"], id);
    r.body["token"].as_str().unwrap().to_owned()
}

/// A running sandbox serving HTTPD (and the CGI scripts) on port 8080.
async fn httpd_sandbox(app: &TestApp, owner: &str, name: &str, ports: Value) -> String {
    let id = app
        .create_id(
            owner,
            json!({ "name": name, "startCommand": HTTPD, "ports": ports }),
        )
        .await;
    wait_for_port(&id, 8080);
    sh_in(&id, CGI);
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn reaching_a_sandbox_server_by_path_and_by_host() {
    let app = spawn_app().await;
    let alice = app.new_account("alice").await;
    let id = httpd_sandbox(&app, &alice, "web", json!([8080])).await;
    let token = token_for(&app, &alice, &id, None).await;
    let host = format!("8080-{id}.{PROXY_DOMAIN}");
    let http = client(&app, std::slice::from_ref(&host));

    // The URLs the API hands out are the ones that work.
    let r = app
        .get(&format!("/api/v1/sandbox/{id}/ports"), &alice)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let port = &r.body["ports"][0];
    assert_eq!(port["port"], 8080);
    assert_eq!(port["sandboxId"], id.as_str());
    let url = port["url"].as_str().unwrap().to_owned();
    assert_eq!(url, format!("{}/proxy/{id}/8080/", app.base));
    let host_url = port["hostUrl"].as_str().unwrap().to_owned();
    assert_eq!(host_url, format!("http://{host}:{}/", addr(&app).port()));

    // Path form, token in the header; with and without the trailing slash.
    for u in [url.clone(), url.trim_end_matches('/').to_owned()] {
        let r = send(http.get(&u).header("X-Stockade-Token", &token)).await;
        assert_eq!(r.status, StatusCode::OK, "{u}: {}", r.text());
        assert_eq!(r.text(), "hello from the sandbox\n");
    }

    // What reaches the sandbox: no token (header, query or cookie), its own
    // path and query, where the request came from.
    let r = send(
        http.get(format!("{url}cgi-bin/env?x=1&stockade_token={token}&y=%20"))
            .header(COOKIE, format!("theirs=1; stockade_token={token}")),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let env = r.text();
    assert!(
        !env.contains(&token),
        "the token reached the sandbox:\n{env}"
    );
    assert!(!env.contains("HTTP_X_STOCKADE_TOKEN"), "{env}");
    assert_contains(&env, "\nQUERY_STRING=x=1&y=%20\n");
    assert_contains(&env, "\nHTTP_COOKIE=theirs=1\n");
    assert_contains(&env, "\nREQUEST_URI=/cgi-bin/env?x=1&y=%20\n");
    assert_contains(
        &env,
        &format!("\nHTTP_X_FORWARDED_PREFIX=/proxy/{id}/8080\n"),
    );
    assert_contains(&env, &format!("\nHTTP_HOST={}\n", &app.base[7..]));

    // Token in the query: answered with a cookie for the sandbox's paths;
    // the sandbox's own cookie stays on its paths and its host.
    let cookies = r.set_cookies();
    let ours = cookies
        .iter()
        .find(|c| c.starts_with("stockade_token="))
        .unwrap_or_else(|| panic!("no token cookie in {cookies:?}"));
    assert!(
        ours.starts_with(&format!("stockade_token={token};")),
        "{ours}"
    );
    for attr in [
        &format!("Path=/proxy/{id}/") as &str,
        "HttpOnly",
        "SameSite=Lax",
        "Max-Age=",
    ] {
        assert!(ours.contains(attr), "{ours} lacks {attr}");
    }
    assert!(
        cookies.contains(&format!("app=1; Path=/proxy/{id}/8080/")),
        "{cookies:?}"
    );

    // A browser then sends only the cookie.
    let r = send(
        http.get(format!("{url}cgi-bin/env"))
            .header(COOKIE, format!("stockade_token={token}")),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(!r.text().contains(&token));
    assert!(!r.text().contains("HTTP_COOKIE"), "{}", r.text());
    assert!(r
        .set_cookies()
        .iter()
        .all(|c| !c.starts_with("stockade_token")));

    // A redirect inside the sandbox stays under the proxy path.
    let r = send(
        http.get(format!("{url}sub"))
            .header("X-Stockade-Token", &token),
    )
    .await;
    assert!(r.status.is_redirection(), "{}: {}", r.status, r.text());
    assert_eq!(r.headers[LOCATION], format!("/proxy/{id}/8080/sub/"));

    // Host form: every path belongs to the sandbox, /api/v1 included.
    let r = send(http.get(&host_url).header("X-Stockade-Token", &token)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.text(), "hello from the sandbox\n");
    let r = send(
        http.get(format!("{host_url}api/v1/sandbox"))
            .header("X-Stockade-Token", &token),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    assert!(
        !r.text().contains("\"error\""),
        "the API answered: {}",
        r.text()
    );
    let r = send(http.get(format!("{host_url}cgi-bin/env?stockade_token={token}"))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(!r.text().contains(&token));
    assert!(!r.text().contains("X_FORWARDED_PREFIX"), "{}", r.text());
    assert!(
        r.text()
            .contains(&format!("\nHTTP_HOST={host}:{}\n", addr(&app).port())),
        "{}",
        r.text()
    );
    let cookies = r.set_cookies();
    assert!(
        cookies
            .iter()
            .any(|c| c.starts_with("stockade_token=") && c.contains("Path=/;")),
        "{cookies:?}"
    );
    // Host-form cookies of the sandbox are host-only (no Domain).
    assert!(cookies.contains(&"app=1; Path=/".to_owned()), "{cookies:?}");
    let r = send(
        http.get(&host_url)
            .header(COOKIE, format!("stockade_token={token}")),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    // Without a token the host form is refused too; a bad name under the domain is 404.
    let r = send(http.get(&host_url)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let odd = format!("www.{PROXY_DOMAIN}");
    let r = send(
        client(&app, std::slice::from_ref(&odd))
            .get(format!("http://{odd}:{}/", addr(&app).port())),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());

    // The ordinary API is unaffected by the proxy middleware.
    let r = app.get(&format!("/api/v1/sandbox/{id}"), &alice).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["ports"], json!([8080]));
}

/// Pseudo-random bytes without a dependency.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn request_and_response_bodies_stream_through_byte_for_byte() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();
    let id = httpd_sandbox(&app, &t, "echo", json!([8080])).await;
    let token = token_for(&app, &t, &id, None).await;
    let http = client(&app, &[]);
    for len in [0usize, 1, 65_537, 3 * 1024 * 1024 + 7] {
        let body = noise(len, len as u64 + 1);
        let r = send(
            http.post(format!("{}/proxy/{id}/8080/cgi-bin/echo", app.base))
                .header("X-Stockade-Token", &token)
                .body(body.clone()),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{len}: {}", r.text());
        assert_eq!(r.body.len(), len);
        assert!(r.body == body, "{len} bytes came back different");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_for_one_sandbox_and_expire() {
    let app = spawn_app().await;
    let alice = app.new_account("alice").await;
    let id = httpd_sandbox(&app, &alice, "web", json!([8080])).await;
    let other_id = app.create_id(&alice, json!({ "name": "other" })).await;
    let token = token_for(&app, &alice, &id, None).await;
    let other_token = token_for(&app, &alice, &other_id, None).await;
    let http = client(&app, &[]);
    let url = format!("{}/proxy/{id}/8080/", app.base);

    let r = send(http.get(&url).header("X-Stockade-Token", &token)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    // No token, a made-up one, a tampered one: 401.
    let r = send(http.get(&url)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
    assert_eq!(r.code(), "unauthorized");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("auth-token"));
    let mut tampered = token.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for bad in ["nope", &tampered, &alice] {
        let r = send(http.get(&url).header("X-Stockade-Token", bad)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bad}: {}", r.text());
        let r = send(http.get(format!("{url}?stockade_token={bad}"))).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bad}: {}", r.text());
        assert!(r.set_cookies().is_empty());
    }

    // Another sandbox's token: 403, also as a cookie.
    let r = send(http.get(&url).header("X-Stockade-Token", &other_token)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
    assert_eq!(r.code(), "forbidden");
    let r = send(
        http.get(&url)
            .header(COOKIE, format!("stockade_token={other_token}")),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // A sandbox token opens nothing but the proxy.
    let r = app.get(&format!("/api/v1/sandbox/{id}"), &token).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    // Lifetimes: default one hour; ttlSeconds within 1..=86400.
    let r = app
        .bodiless(
            Method::POST,
            &format!("/api/v1/sandbox/{id}/auth-token"),
            &alice,
        )
        .await;
    let expires: chrono::DateTime<chrono::Utc> =
        r.body["expiresAt"].as_str().unwrap().parse().unwrap();
    let left = (expires - chrono::Utc::now()).num_seconds();
    assert!((3590..=3600).contains(&left), "{left}");
    for (body, field) in [
        (json!({ "ttlSeconds": 0 }), "ttlSeconds"),
        (json!({ "ttlSeconds": 86401 }), "ttlSeconds"),
        (json!({ "ttlSeconds": -5 }), "ttlSeconds"),
        (json!({ "ttlSeconds": "soon" }), "ttlSeconds"),
        (json!({ "sandboxId": "abcdefghijkl" }), "sandboxId"),
    ] {
        let r = app
            .post(&format!("/api/v1/sandbox/{id}/auth-token"), &alice, body)
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
        assert_eq!(r.error_fields(), vec![field]);
    }

    // An expired token: 401 that says so.
    let short = token_for(&app, &alice, &id, Some(json!({ "ttlSeconds": 1 }))).await;
    let r = send(http.get(&url).header("X-Stockade-Token", &short)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let r = send(http.get(&url).header("X-Stockade-Token", &short)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text());
    assert!(r.text().contains("expired"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread")]
async fn expose_and_unexpose_take_effect_at_once() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();
    // Nothing declared at create; the server listens anyway.
    let id = httpd_sandbox(&app, &t, "late", json!([])).await;
    let token = token_for(&app, &t, &id, None).await;
    let http = client(&app, &[]);
    let url = format!("{}/proxy/{id}/8080/", app.base);
    let proxied = || async { send(http.get(&url).header("X-Stockade-Token", &token)).await };
    let ports_path = format!("/api/v1/sandbox/{id}/ports");

    let r = proxied().await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    assert!(r.text().contains("not exposed"), "{}", r.text());

    let r = app.post(&ports_path, &t, json!({ "port": 8080 })).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["url"], url.as_str());
    let r = proxied().await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.text(), "hello from the sandbox\n");
    // Idempotent.
    let r = app.post(&ports_path, &t, json!({ "port": 8080 })).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = app.get(&ports_path, &t).await;
    assert_eq!(r.body["ports"].as_array().unwrap().len(), 1);

    // A port nothing listens on: 502 that says what to do.
    let r = app.post(&ports_path, &t, json!({ "port": 9999 })).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = send(
        http.get(format!("{}/proxy/{id}/9999/", app.base))
            .header("X-Stockade-Token", &token),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.text());
    assert_eq!(r.code(), "upstream_unavailable");
    assert!(r.text().contains("0.0.0.0:9999"), "{}", r.text());

    // Unexpose: 404 from the next request on.
    let r = app.delete(&format!("{ports_path}/8080"), &t).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["ports"][0]["port"], 9999);
    assert_eq!(r.body["ports"].as_array().unwrap().len(), 1);
    let r = proxied().await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    let r = app.delete(&format!("{ports_path}/8080"), &t).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    // Bad input names the field.
    for body in [
        json!({ "port": 0 }),
        json!({ "port": 65536 }),
        json!({ "port": "8080" }),
        json!({}),
    ] {
        let r = app.post(&ports_path, &t, body.clone()).await;
        r.assert_status(StatusCode::BAD_REQUEST, &body);
        assert_eq!(r.error_fields(), vec!["port"], "{body}");
    }
    let r = app
        .post(&ports_path, &t, json!({ "port": 1, "host": "x" }))
        .await;
    assert_eq!(r.error_fields(), vec!["host"]);
    for bad in ["0", "x", "65536", "-1"] {
        let r = app.delete(&format!("{ports_path}/{bad}"), &t).await;
        r.assert_status(StatusCode::BAD_REQUEST, bad);
        assert_eq!(r.error_fields(), vec!["port"]);
    }
    for bad in ["0", "abc", "70000"] {
        let r = send(
            http.get(format!("{}/proxy/{id}/{bad}/", app.base))
                .header("X-Stockade-Token", &token),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text());
    }
    let r = send(http.get(format!("{}/proxy/NOT-AN-ID/8080/", app.base))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // At most 32 exposed at once.
    for p in 10_000..10_031 {
        let r = app.post(&ports_path, &t, json!({ "port": p })).await;
        r.assert_status(StatusCode::CREATED, p);
    }
    let r = app.post(&ports_path, &t, json!({ "port": 20_000 })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.error_fields(), vec!["port"]);
    let r = app.get(&ports_path, &t).await;
    assert_eq!(r.body["ports"].as_array().unwrap().len(), 32);

    // Stopped: 503; started again: reachable; destroyed: 404.
    app.post(&ports_path, &t, json!({ "port": 8080 })).await;
    let r = app.delete(&format!("{ports_path}/10000"), &t).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = app.post(&ports_path, &t, json!({ "port": 8080 })).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = app.act(&t, &id, "stop?timeout=1").await;
    assert_eq!(r.status, StatusCode::OK);
    let r = proxied().await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    assert_eq!(r.code(), "sandbox_unavailable");
    let r = app.act(&t, &id, "start").await;
    assert_eq!(r.status, StatusCode::OK);
    wait_for_port(&id, 8080);
    let r = proxied().await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = app.delete(&format!("/api/v1/sandbox/{id}"), &t).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = proxied().await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    let r = app.post(&ports_path, &t, json!({ "port": 3000 })).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn all_ports_of_the_callers_running_sandboxes() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice", "bob"]).await;
    let a1 = app
        .create(&alice, json!({ "name": "a1", "ports": [3000, 3001] }))
        .await;
    let a2 = app
        .create(&alice, json!({ "name": "a2", "ports": [4000] }))
        .await;
    let a3 = app
        .create(&alice, json!({ "name": "a3", "ports": [5000] }))
        .await;
    app.create(&bob, json!({ "name": "b1", "ports": [6000] }))
        .await;
    let r = app.act(&alice, &id_of(&a3), "stop?timeout=1").await;
    assert_eq!(r.status, StatusCode::OK);

    let r = app.get("/api/v1/sandbox/ports", &alice).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let mut seen: Vec<(String, u64)> = r.body["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["sandboxId"].as_str().unwrap().to_owned(),
                p["port"].as_u64().unwrap(),
            )
        })
        .collect();
    seen.sort();
    let id = |v: &Value| v["id"].as_str().unwrap().to_owned();
    let mut want = vec![(id(&a1), 3000), (id(&a1), 3001), (id(&a2), 4000)];
    want.sort();
    assert_eq!(seen, want);
    let r = app.get("/api/v1/sandbox/ports?all=1", &alice).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["all"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_without_network_has_no_reachable_ports() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();
    let id = app.create_id(&t,
            json!({ "name": "offline", "networkAccess": false, "ports": [8080], "startCommand": HTTPD })).await;
    let token = token_for(&app, &t, &id, None).await;
    let r = send(
        client(&app, &[])
            .get(format!("{}/proxy/{id}/8080/", app.base))
            .header("X-Stockade-Token", &token),
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    assert!(r.text().contains("networkAccess"), "{}", r.text());
    let r = app
        .sandbox_post(&t, &id, "ports", json!({ "port": 9000 }))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
}

/// A WebSocket handshake server in shell: answers the upgrade with the
/// RFC 6455 accept key, then echoes every byte.
pub const WS_SERVER: &str = r#"cat > /workspace/ws.sh <<'EOF'
key=""
while IFS= read -r line; do
  line=$(printf %s "$line" | tr -d '\r')
  [ -z "$line" ] && break
  case "$line" in
    [Ss]ec-[Ww]eb[Ss]ocket-[Kk]ey:*) key=$(printf %s "${line#*:}" | tr -d ' ') ;;
  esac
done
accept=$(printf %s "${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11" | sha1sum | cut -d' ' -f1 | xxd -r -p | base64)
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n' "$accept"
exec cat
EOF"#;

/// A sandbox of `token`'s named `name` whose port 9000 runs [`WS_SERVER`],
/// once that port listens: its id.
pub async fn ws_echo_sandbox(app: &TestApp, token: &str, name: &str) -> String {
    let id = app
        .create_id(
            token,
            json!({
                "name": name,
                "ports": [9000],
                "startCommand": "while [ ! -f /workspace/ws.sh ]; do usleep 50000; done; exec nc -ll -p 9000 -e /bin/sh /workspace/ws.sh"
            }),
        )
        .await;
    sh_in(&id, WS_SERVER);
    sh_in(
        &id,
        // Up to 30 s by the clock: on a loaded machine a hundred polls take
        // longer than their sleeps.
        "end=$(( $(date +%s) + 30 )); while [ $(date +%s) -lt $end ]; do netstat -ltn | grep -q ':9000 ' && exit 0; usleep 50000; done; exit 1",
    );
    id
}

/// Sends a WebSocket upgrade over raw TCP and returns the stream and the
/// response head.
pub async fn ws_connect(
    app: &TestApp,
    path: &str,
    host: &str,
    token: Option<&str>,
) -> (tokio::net::TcpStream, String) {
    let mut s = tokio::net::TcpStream::connect(addr(app)).await.unwrap();
    let token = token
        .map(|t| format!("X-Stockade-Token: {t}\r\n"))
        .unwrap_or_default();
    // The key and accept value of RFC 6455 §1.3.
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{token}\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut byte))
            .await
            .expect("response head in time")
            .unwrap();
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    (s, String::from_utf8_lossy(&head).into_owned())
}

/// A masked client text frame (RFC 6455 §5.2).
fn ws_frame(payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut f = vec![0x81, 0x80 | payload.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// A masked client text frame sent and echoed back by [`WS_SERVER`].
pub async fn ws_echo(s: &mut tokio::net::TcpStream, payload: &[u8]) {
    let frame = ws_frame(payload, [0x12, 0x34, 0x56, 0x78]);
    s.write_all(&frame).await.unwrap();
    let mut back = vec![0u8; frame.len()];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut back))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(back, frame);
}

#[tokio::test(flavor = "multi_thread")]
async fn websocket_through_the_proxy() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();
    let id = ws_echo_sandbox(&app, &t, "ws").await;
    let token = token_for(&app, &t, &id, None).await;
    let base_host = &app.base[7..];

    // Path form.
    let (mut s, head) = ws_connect(
        &app,
        &format!("/proxy/{id}/9000/chat"),
        base_host,
        Some(&token),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    ws_echo(&mut s, b"hello through the proxy").await;
    ws_echo(&mut s, "second frame, still open: ünïcödé".as_bytes()).await;
    drop(s);

    // Host form.
    let host = format!("9000-{id}.{PROXY_DOMAIN}:{}", addr(&app).port());
    let (mut s, head) = ws_connect(&app, "/", &host, Some(&token)).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    ws_echo(&mut s, b"by host").await;
    drop(s);

    // No token: refused before anything reaches the sandbox.
    let (_s, head) = ws_connect(&app, &format!("/proxy/{id}/9000/"), base_host, None).await;
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
}

#[tokio::test(flavor = "multi_thread")]
async fn port_and_token_verbs_on_another_accounts_sandbox_are_forbidden() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice", "bob"]).await;
    let id = app
        .create_id(&alice, json!({ "name": "mine", "ports": [8080] }))
        .await;
    for (method, path, body) in [
        (Method::GET, format!("/api/v1/sandbox/{id}/ports"), None),
        (
            Method::POST,
            format!("/api/v1/sandbox/{id}/ports"),
            Some(json!({ "port": 9000 })),
        ),
        (
            Method::DELETE,
            format!("/api/v1/sandbox/{id}/ports/8080"),
            None,
        ),
        (
            Method::POST,
            format!("/api/v1/sandbox/{id}/auth-token"),
            None,
        ),
    ] {
        let r = app
            .call(method.clone(), &path, Some(&bob), body.clone())
            .await;
        r.assert_status(StatusCode::FORBIDDEN, format!("{method} {path}"));
        assert_eq!(r.code(), "forbidden");
        // Unknown and malformed ids.
        let unknown = path.replace(id.as_str(), "abcdefghijkl");
        let r = app
            .call(method.clone(), &unknown, Some(&bob), body.clone())
            .await;
        r.assert_status(StatusCode::NOT_FOUND, format!("{method} {unknown}"));
        let bad = path.replace(id.as_str(), "-BAD");
        let r = app
            .call(method.clone(), &bad, Some(&bob), body.clone())
            .await;
        r.assert_status(StatusCode::BAD_REQUEST, format!("{method} {bad}"));
        // No API token at all.
        let r = app.call(method.clone(), &path, None, body).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{method} {path}");
    }
    // Nothing changed, and Bob's list does not show Alice's ports.
    let r = app
        .get(&format!("/api/v1/sandbox/{id}/ports"), &alice)
        .await;
    assert_eq!(r.body["ports"].as_array().unwrap().len(), 1);
    let r = app.get("/api/v1/sandbox/ports", &bob).await;
    assert_eq!(r.body["ports"], json!([]));

    // The endpoints are in the OpenAPI document.
    let r = app.get("/api/v1/openapi.json", &bob).await;
    for p in [
        "/api/v1/sandbox/{id}/ports",
        "/api/v1/sandbox/{id}/ports/{port}",
        "/api/v1/sandbox/ports",
        "/api/v1/sandbox/{id}/auth-token",
        "/proxy/{id}/{port}/{path}",
    ] {
        assert!(r.body["paths"].get(p).is_some(), "{p} missing");
    }
}
