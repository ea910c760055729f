//! The hostile tenant: two accounts, the public API
//! only, and code run inside sandboxes. Each test is one attack that worked
//! once; each asserts that it fails now.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::*;

/// What the internal service the attacker aims at answers.
const SECRET: &str = "SECRET-INTERNAL-METRICS-0123456789";

/// A plain HTTP server on loopback that answers every request with
/// `SECRET` (or a redirect to `redirect_to`) and counts its connections.
fn internal_service(redirect_to: Option<String>) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let answer = match &redirect_to {
                Some(to) => format!(
                    "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                ),
                None => format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SECRET}",
                    SECRET.len()
                ),
            };
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    (port, hits)
}

/// Sends what `req` makes until the answer is 200 (the sandbox's server
/// may still be starting): that answer; a panic saying `what` otherwise.
async fn first_ok(req: impl Fn() -> reqwest::RequestBuilder, what: &str) -> reqwest::Response {
    for _ in 0..50 {
        let r = req().send().await.unwrap();
        if r.status() == StatusCode::OK {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}");
}

/// A server with the default address policy: no internal address allowed.
async fn strict_app() -> TestApp {
    spawn_configured(|c| {
        c.service.sources.addresses = Default::default();
    })
    .await
}

#[tokio::test]
async fn another_accounts_snapshot_cannot_be_booted_by_name() {
    let (app, [alice, mallory]) = spawn_with_accounts(["alice-snap", "mallory-snap"]).await;
    let id = app
        .create_id(
            &alice,
            json!({ "name": "secretive", "environmentVars": { "ALICE_KEY": "sk-alice-0123" } }),
        )
        .await;
    sh_in(&id, "echo alices-secret > /etc/secret.txt");
    let snap_id = app.snapshot_id(&alice, &id, "s").await;
    let image_ref = format!("stockade-snapshot:{snap_id}");
    let image_id = docker_lines(&["image", "inspect", "-f", "{{.Id}}", &image_ref])
        .pop()
        .expect("snapshot image id");
    // The committed image keeps no value of the sandbox's environment.
    let env = docker_lines(&["image", "inspect", "-f", "{{json .Config.Env}}", &image_ref]);
    assert!(!env.concat().contains("sk-alice"), "{env:?}");
    let hex = image_id.trim_start_matches("sha256:").to_owned();
    // By name, by image id, and by id prefixes of any length (Docker reads
    // `1e7` as the first image whose id starts so): all refused, through
    // the native body, its snake_case spelling and E2B's `templateID`.
    let mut names = vec![image_ref.clone(), image_id.clone(), hex[..16].to_owned()];
    names.extend([1, 3, 4, 11].map(|n| hex[..n].to_owned()));
    for image in &names {
        for body in [
            json!({ "name": "thief", "dockerImage": image }),
            json!({ "name": "thief", "docker_image": image }),
        ] {
            let r = app.try_create(&mallory, body).await;
            r.assert_status(StatusCode::BAD_REQUEST, image);
            assert_eq!(r.error_fields(), vec!["dockerImage"], "{image}");
        }
        let r = app
            .post("/e2b/sandboxes", &mallory, json!({ "templateID": image }))
            .await;
        assert!(
            r.status.is_client_error(),
            "{image}: {} {:?}",
            r.status,
            r.body
        );
    }
    // Under a tag someone else gave it, the engine still knows it as a
    // snapshot image: refused before any container exists.
    let alias = format!("innocent-{snap_id}:1");
    docker(&["tag", &image_ref, &alias]);
    let r = app
        .try_create(&mallory, json!({ "name": "thief", "dockerImage": alias }))
        .await;
    docker(&["rmi", &alias]);
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.body);
    assert!(
        r.body.to_string().contains("snapshot image"),
        "{:?}",
        r.body
    );
    // Nothing of Mallory's attempts was left behind.
    let list = app.get("/api/v1/sandbox", &mallory).await;
    assert_eq!(list.body["total"], 0, "{:?}", list.body);
    // Through the owned source: 403 for another account.
    let r = app
        .try_create(
            &mallory,
            json!({ "name": "thief", "source": snapshot_source(&snap_id) }),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    // Its owner still starts from it, through the source: its files and its
    // environment (from the record), and a variable of the request on top.
    let restore = json!({
        "name": "restored",
        "source": snapshot_source(&snap_id),
        "environmentVars": { "EXTRA": "x" },
    });
    let rid = app.create_id(&alice, restore).await;
    assert_eq!(sh_in(&rid, "cat /etc/secret.txt"), "alices-secret");
    assert_eq!(sh_in(&rid, "echo $ALICE_KEY-$EXTRA"), "sk-alice-0123-x");
    // Alice herself cannot name the image either: only the source reaches it.
    let r = app
        .try_create(
            &alice,
            json!({ "name": "by-name", "dockerImage": image_ref }),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
}

#[tokio::test]
async fn sources_and_images_on_internal_addresses_are_refused_without_echo() {
    let app = strict_app().await;
    let mallory = app.new_account("mallory-ssrf").await;
    let (port, hits) = internal_service(None);
    for (url, what) in [
        (
            format!("http://127.0.0.1:{port}/metrics"),
            "loopback literal",
        ),
        (format!("http://localhost:{port}/metrics"), "loopback name"),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/metrics"),
            "mapped IPv6",
        ),
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "metadata",
        ),
        ("http://10.0.0.1/x.tar".to_owned(), "private"),
    ] {
        let r = app
            .try_create(
                &mallory,
                json!({ "name": "ssrf", "source": { "type": "tarball", "url": url } }),
            )
            .await;
        r.assert_status(StatusCode::BAD_REQUEST, what);
        assert_eq!(r.error_fields(), vec!["source.url"], "{what}");
        assert!(!r.body.to_string().contains(SECRET), "{what}: echoed");
    }
    let git = app
        .try_create(&mallory,
            json!({ "name": "ssrf", "source": { "type": "git", "url": format!("http://127.0.0.1:{port}/repo.git") } }),
        )
        .await;
    assert_eq!(git.status, StatusCode::BAD_REQUEST, "{:?}", git.body);
    // Docker is never asked to pull from an internal registry either.
    let image = app
        .try_create(
            &mallory,
            json!({ "name": "ssrf", "dockerImage": format!("127.0.0.1:{port}/x:latest") }),
        )
        .await;
    assert_eq!(image.status, StatusCode::BAD_REQUEST, "{:?}", image.body);
    assert_eq!(image.error_fields(), vec!["dockerImage"]);
    let local = app
        .try_create(
            &mallory,
            json!({ "name": "ssrf", "dockerImage": format!("localhost:{port}/x") }),
        )
        .await;
    assert_eq!(local.status, StatusCode::BAD_REQUEST, "{:?}", local.body);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the internal service was reached"
    );
    assert!(app.containers().is_empty(), "a half-made container stayed");
}

#[tokio::test]
async fn a_redirect_cannot_lead_a_fetch_to_an_internal_address() {
    // Only 127.0.0.1 is allowed; it redirects to 127.0.0.2, which is not.
    let (target_port, target_hits) = internal_service(None);
    let (port, hits) = internal_service(Some(format!("http://127.0.0.2:{target_port}/metrics")));
    let app = spawn_configured(|c| {
        c.service.sources.addresses = stockade_core::net::AddressPolicy {
            allow: vec![stockade_core::net::IpNet::parse("127.0.0.1").unwrap()],
        };
    })
    .await;
    let mallory = app.new_account("mallory-redirect").await;
    let r = app
        .try_create(&mallory,
            json!({ "name": "hop", "source": { "type": "tarball", "url": format!("http://127.0.0.1:{port}/a.tar") } }),
        )
        .await;
    assert!(r.status.is_client_error(), "{:?}", r.body);
    assert!(!r.body.to_string().contains(SECRET));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the allowed hop was asked once"
    );
    assert_eq!(
        target_hits.load(Ordering::SeqCst),
        0,
        "the redirect reached the internal address"
    );
    // An allowed address whose answer is not an archive: the error does not
    // quote what came back.
    let r = app
        .try_create(&mallory,
            json!({ "name": "junk", "source": { "type": "tarball", "url": format!("http://127.0.0.1:{target_port}/m") } }),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.body);
    assert!(!r.body.to_string().contains(SECRET), "{:?}", r.body);
}

#[tokio::test]
async fn the_proxy_keeps_stockades_credentials_and_origin_from_sandbox_code() {
    let app = spawn_app().await;
    let alice = app.new_account("alice-proxy").await;
    // Port 8081 records the raw request it receives, once.
    let id = app.create_id(&alice,
            json!({
                "name": "recorder",
                "ports": [8080, 8081],
                "startCommand": "(sleep 60 | nc -l -p 8081 > /workspace/request.txt &) ; mkdir -p /workspace/www && echo '<h1>page</h1>' > /workspace/www/index.html && exec httpd -f -p 8080 -h /workspace/www",
            })).await;
    let token = app.port_token(&alice, &id).await;
    // The path form: an opaque origin for whatever the sandbox serves.
    let page = first_ok(
        || {
            app.http
                .get(format!("{}/proxy/{id}/8080/", app.base))
                .header("X-Stockade-Token", &token)
        },
        "the sandbox's server answered",
    )
    .await;
    let csp = page
        .headers()
        .get("content-security-policy")
        .expect("a CSP on path-form answers")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.starts_with("sandbox"), "{csp}");
    assert!(!csp.contains("allow-same-origin"), "{csp}");
    // A request that carries an operator's token of its own form (no
    // `stk_` prefix) as a bearer, the admin's API token as an API key and
    // the dashboard's session cookie: the sandbox sees none of them.
    let operator = "operator-chosen-secret-0123456789";
    let admin = app.state.svc.store().list_accounts().await.unwrap()[0].clone();
    app.state
        .svc
        .store()
        .add_token(&admin.id, &stockade_core::account::hash_token(operator))
        .await
        .unwrap();
    let _ = app
        .http
        .get(format!("{}/proxy/{id}/8081/probe", app.base))
        .header("X-Stockade-Token", &token)
        .header("Authorization", format!("Bearer {operator}"))
        .header("X-API-Key", &app.admin_token)
        .header(
            "Cookie",
            format!("app=kept; stockade_session={}", app.admin_token),
        )
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    let mut seen = String::new();
    for _ in 0..30 {
        seen = sh_in(&id, "cat /workspace/request.txt 2>/dev/null || true");
        if seen.contains("GET /probe") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen.contains("GET /probe"),
        "nothing reached port 8081: {seen}"
    );
    assert!(seen.contains("app=kept"), "{seen}");
    assert!(
        !seen.contains(&app.admin_token),
        "a Stockade token reached the sandbox:\n{seen}"
    );
    assert!(
        !seen.contains(operator),
        "an operator's token reached the sandbox:\n{seen}"
    );
    assert!(
        !seen.to_ascii_lowercase().contains("authorization"),
        "{seen}"
    );
    assert!(!seen.to_ascii_lowercase().contains("x-api-key"), "{seen}");
    assert!(
        !seen.contains(&token),
        "the sandbox token reached the sandbox:\n{seen}"
    );
    // The dashboard's session is never a credential for the proxy.
    let r = app
        .http
        .get(format!("{}/proxy/{id}/8080/", app.base))
        .header("Cookie", format!("stockade_session={alice}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_dashboard_session_is_an_httponly_cookie_guarded_against_csrf() {
    let app = spawn_app().await;
    let alice = app.new_account("alice-session").await;
    let url = |p: &str| format!("{}{p}", app.base);
    // The CSRF header on a request, or not.
    let csrf = |req: reqwest::RequestBuilder, on: bool| match on {
        true => req.header("X-Stockade-CSRF", "1"),
        false => req,
    };
    let sign_in = |with_csrf: bool, token: &str| {
        let req = app.http.post(url("/api/v1/session"));
        csrf(req.json(&json!({ "token": token })), with_csrf).send()
    };
    let me = |cookie: String| {
        app.http
            .get(url("/api/v1/me"))
            .header("Cookie", cookie)
            .send()
    };
    // Signing in needs the CSRF header (no login CSRF from a form).
    let r = sign_in(false, &alice).await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = sign_in(true, "stk_wrong").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = sign_in(true, &alice).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/api/"] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    let session = cookie.split(';').next().unwrap().to_owned();
    // Reads work with the cookie alone.
    let r = me(session.clone()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Changes need the CSRF header: a cross-site form cannot send one.
    let body = json!({ "name": "via-cookie" });
    for (with_csrf, status) in [(false, StatusCode::FORBIDDEN), (true, StatusCode::CREATED)] {
        let req = app
            .http
            .post(url("/api/v1/sandbox"))
            .header("Cookie", &session);
        let r = csrf(req.json(&body), with_csrf).send().await.unwrap();
        assert_eq!(r.status(), status, "CSRF header: {with_csrf}");
    }
    // Two session cookies (one planted by someone else): refused.
    let r = me(format!("{session}; stockade_session=stk_planted"))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // Signing out clears it.
    let r = app
        .http
        .delete(url("/api/v1/session"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    let _ = Method::GET;
}

#[tokio::test]
async fn a_sandbox_reaches_no_other_sandbox_and_no_host_service() {
    let (app, [alice, mallory]) = spawn_with_accounts(["alice-net", "mallory-net"]).await;
    let (_, victim_ip) = victim(&app, &alice).await;
    let same_account = app.create(&alice, json!({ "name": "neighbour" })).await;
    let attacker = app.create(&mallory, json!({ "name": "attacker" })).await;
    let aid = attacker["id"].as_str().unwrap();
    let gateway = sh_in(aid, "ip route 2>/dev/null | awk '/default/ {print $3}'");
    // A service of the host on every address (like Stockade on 0.0.0.0).
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    let host_port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    // The victim answers the host (the proxy's path) …
    let mut answer = String::new();
    for _ in 0..50 {
        if let Ok(mut conn) = std::net::TcpStream::connect_timeout(
            &format!("{victim_ip}:8080").parse().unwrap(),
            Duration::from_secs(2),
        ) {
            conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = conn.write_all(b"GET / HTTP/1.0\r\n\r\n");
            let _ = conn.read_to_string(&mut answer);
            if answer.contains("private") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        answer.contains("private"),
        "the host cannot reach a sandbox any more: {answer}"
    );
    // … but no other sandbox, of another account or the same one.
    for (who, id) in [
        ("another account", aid),
        ("the same account", same_account["id"].as_str().unwrap()),
    ] {
        let out = sh_in(
            id,
            &format!(
                "wget -q -T 3 -O - http://{victim_ip}:8080/ 2>&1 && echo REACHED || echo refused"
            ),
        );
        assert!(out.ends_with("refused"), "{who} reached the victim: {out}");
    }
    let mut targets = vec![format!("{gateway}:{host_port}")];
    if let Some(host_ip) = docker_lines(&[
        "network",
        "inspect",
        "bridge",
        "-f",
        "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
    ])
    .pop()
    {
        targets.push(format!("{host_ip}:{host_port}"));
    }
    for target in targets.iter().filter(|t| !t.starts_with(':')) {
        let out = sh_in(
            aid,
            &format!(
                "nc -w 2 {} {} </dev/null && echo REACHED || echo refused",
                target.rsplit_once(':').unwrap().0,
                host_port
            ),
        );
        assert!(
            out.ends_with("refused"),
            "the sandbox reached the host at {target}: {out}"
        );
    }
    assert!(
        listener.accept().is_err(),
        "a host service got a connection from a sandbox"
    );
}

#[tokio::test]
async fn io_uring_is_not_available_inside_a_sandbox() {
    let (app, t, id) = spawn_with_owned_sandbox("uring", json!({ "name": "uring" })).await;
    // A tiny static program that calls io_uring_setup and prints errno.
    let probe = crate::helpers::io_uring_probe();
    let r = app
        .http
        .put(format!(
            "{}/api/v1/sandbox/{id}/files?path=/workspace/probe",
            app.base
        ))
        .bearer_auth(&t)
        .body(probe)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let out = sh_in(&id, "chmod +x /workspace/probe && /workspace/probe");
    assert!(
        out.starts_with("io_uring_setup failed"),
        "io_uring_setup worked inside a sandbox: {out}"
    );
}

/// The proxy's cookie is `SameSite=Lax`, and on the host form every sandbox
/// port is a subdomain of one site: a page of another sandbox could make a
/// visitor's browser call this one with the visitor's cookie. Sub-requests
/// the browser marks as from another origin, and WebSockets from a foreign
/// `Origin`, are refused when only the cookie authenticates them.
#[tokio::test]
async fn the_port_cookie_is_not_sent_for_another_sites_pages() {
    let (app, alice, id) = spawn_with_owned_sandbox(
        "alice-cookie-site",
        json!({
            "name": "cookie-site",
            "ports": [8080],
            "startCommand": "exec httpd -f -p 8080 -h /etc",
        }),
    )
    .await;
    let token = app.port_token(&alice, &id).await;
    let url = format!("{}/proxy/{id}/8080/hostname", app.base);
    // The link with the token sets the cookie.
    let r = first_ok(
        || app.http.get(format!("{url}?stockade_token={token}")),
        "the port answered and set its cookie",
    )
    .await;
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    let cookie = set.split(';').next().unwrap().to_owned();
    let with = |site: &str, mode: &str| {
        app.http
            .get(&url)
            .header("Cookie", &cookie)
            .header("Sec-Fetch-Site", site.to_owned())
            .header("Sec-Fetch-Mode", mode.to_owned())
            .send()
    };
    // The port's own pages and the visitor's navigations: fine.
    for (site, mode) in [
        ("same-origin", "cors"),
        ("none", "navigate"),
        ("cross-site", "navigate"),
    ] {
        let r = with(site, mode).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{site} {mode}");
    }
    // Another sandbox's page fetching this port with the visitor's cookie.
    for (site, mode) in [("same-site", "cors"), ("cross-site", "no-cors")] {
        let r = with(site, mode).await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{site} {mode}");
    }
    // A WebSocket from another origin with the cookie alone.
    let r = app
        .http
        .get(&url)
        .header("Cookie", &cookie)
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("Origin", "http://8080-zzzzzzzzzzzz.sandboxes.test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // With the token itself (not a browser's ambient cookie): fine.
    let r = app
        .http
        .get(&url)
        .header("X-Stockade-Token", &token)
        .header("Sec-Fetch-Site", "same-site")
        .header("Sec-Fetch-Mode", "cors")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
