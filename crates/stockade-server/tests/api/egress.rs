//! `networkPolicy` enforced on the Docker host. "Outside" hosts are
//! network namespaces the test makes on a bridge of its own (not a Docker
//! network: Docker keeps its networks from reaching each other), serving
//! DNS, HTTP, HTTPS and plain TCP with `outside_hosts.py`; the egress
//! filter asks their DNS server. No packet leaves the machine.
//!
//! Needs root, `ip` and `python3` (as `scripts/test` runs it); skipped with
//! a message otherwise.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use stockade_core::netpolicy::PrivateAccess;

use crate::helpers::*;

const SCRIPT: &str = include_str!("outside_hosts.py");

/// The outside world of one test: a bridge, namespaces with servers.
struct Outside {
    name: String,
    subnet: u8,
    children: Vec<KillOnDrop>,
    dir: tempfile::TempDir,
}

impl Outside {
    /// The bridge name of a test, `prefix` and this process's id; `None`
    /// (and a message) when the machine cannot make one.
    fn bridge(prefix: &str) -> Option<String> {
        netns_available("the egress tests")
            .then(|| format!("{prefix}{}", std::process::id() % 100_000))
    }

    /// `10.251.{subnet}.0/24`: the host is .1, each host `(n, servers)`
    /// gets .n.
    fn start(name: &str, subnet: u8, hosts: &[(u8, Vec<String>)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("outside_hosts.py"), SCRIPT).unwrap();
        let mut outside = Self {
            name: name.to_owned(),
            subnet,
            children: Vec::new(),
            dir,
        };
        add_bridge(name, subnet);
        for (n, servers) in hosts {
            let ns = add_namespace(name, subnet, *n);
            let child = spawn_ready(
                Command::new("ip")
                    .args(["netns", "exec", &ns, "python3"])
                    .arg(outside.dir.path().join("outside_hosts.py"))
                    .args(servers),
                &format!("outside host {n}"),
            );
            outside.children.push(KillOnDrop(child));
        }
        outside
    }

    fn addr(&self, n: u8) -> String {
        format!("10.251.{}.{n}", self.subnet)
    }
}

/// A self-signed certificate and key for `name`, in `dir`.
fn cert(dir: &std::path::Path, name: &str) -> (String, String) {
    {
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        run_ok(
            Command::new("openssl")
                .args([
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                ])
                .arg("-subj")
                .arg(format!("/CN={name}"))
                .arg("-keyout")
                .arg(&key)
                .arg("-out")
                .arg(&cert),
            "openssl",
        );
        (cert.display().to_string(), key.display().to_string())
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        // The servers first, then the network they ran in.
        self.children.clear();
        let _ = ip(&["link", "del", &self.name]);
        for n in 1..=20u8 {
            let _ = ip(&["netns", "del", &format!("{}-{n}", self.name)]);
        }
    }
}

/// Output of a shell line in the sandbox (through the API's exec).
async fn run(app: &TestApp, t: &str, id: &str, cmd: &str) -> (i64, String) {
    let r = app
        .sandbox_post(t, id, "exec", json!({ "shell": cmd, "timeoutSeconds": 30 }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let out = format!(
        "{}{}",
        r.body["stdout"].as_str().unwrap_or_default(),
        r.body["stderr"].as_str().unwrap_or_default()
    );
    (r.body["exitCode"].as_i64().unwrap_or(-1), out)
}

/// Whether `url` answers with `expect` from inside the sandbox.
async fn fetch(app: &TestApp, t: &str, id: &str, url: &str, extra: &str) -> String {
    let cmd = format!("timeout 5 wget -q -O- --no-check-certificate {extra} '{url}' 2>&1");
    run(app, t, id, &cmd).await.1
}

async fn tcp(app: &TestApp, t: &str, id: &str, addr: &str, port: u16) -> String {
    let cmd = format!("timeout 5 nc {addr} {port} 2>&1 </dev/null");
    run(app, t, id, &cmd).await.1
}

async fn resolves(app: &TestApp, t: &str, id: &str, name: &str) -> bool {
    let (code, out) = run(app, t, id, &format!("timeout 8 nslookup {name} 2>&1")).await;
    code == 0 && out.contains("10.251.")
}

async fn patch(app: &TestApp, t: &str, id: &str, policy: Value) -> Value {
    app.patch_sandbox(t, id, json!({ "networkPolicy": policy }))
        .await
        .expect(StatusCode::OK)
}

/// An E2B create that denies all egress but `allowed` and names `dns` as
/// its DNS server: the answer as it is.
async fn e2b_with_dns(app: &TestApp, t: &str, allowed: &str, dns: &str) -> Resp {
    let network = json!({
        "denyOut": ["0.0.0.0/0"], "allowOut": [allowed], "dnsServers": [dns]
    });
    let body = json!({ "templateID": "base", "network": network });
    app.post("/e2b/sandboxes", t, body).await
}

#[tokio::test(flavor = "multi_thread")]
async fn allow_lists_by_name_and_address_hold_and_change_live() {
    let Some(name) = Outside::bridge("stkte") else {
        return;
    };
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = cert(certs.path(), "allowed.test");
    let records = "allowed.test=10.251.61.2,other.test=10.251.61.3,api.wild.test=10.251.61.3";
    let outside = Outside::start(
        &name,
        61,
        &[
            (
                2,
                vec![
                    "--dns".into(),
                    records.into(),
                    "--http".into(),
                    "80:allowed-http".into(),
                    "--https".into(),
                    format!("443:allowed-https:{cert}:{key}"),
                ],
            ),
            (
                3,
                vec![
                    "--http".into(),
                    "80:other-http".into(),
                    "--tcp".into(),
                    "8080:other-tcp".into(),
                ],
            ),
            (4, vec!["--tcp".into(), "8080:cidr-tcp".into()]),
        ],
    );
    let dns = format!("{}:53", outside.addr(2));
    let app = spawn_configured(move |c| {
        c.service.egress.upstream_dns = vec![dns.parse().unwrap()];
        // The outside hosts sit in a private range: opted in.
        c.service.egress.private = PrivateAccess::parse(&["10.251.61.0/24"]).unwrap();
    })
    .await;
    let t = &app.admin_token;
    let health = app.get("/api/v1/health", t).await;
    assert_eq!(
        health.body["egress"]["status"], "running",
        "{:?}",
        health.body
    );

    // Bad entries: 400 naming the entry.
    let r = app
        .try_create(
            t,
            json!({ "networkPolicy": { "allow": ["allowed.test", "10.0.0.0/33"] } }),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert!(
        r.error_fields()
            .iter()
            .any(|f| f == "networkPolicy.allow[1]"),
        "{:?}",
        r.body
    );

    let created = Instant::now();
    let sb = app
        .create(
            t,
            json!({ "networkPolicy": { "allow": ["allowed.test", format!("{}:8080", outside.addr(4))] } }),
        )
        .await;
    let create_ms = created.elapsed().as_millis();
    let id = sb["id"].as_str().unwrap();
    assert_eq!(
        sb["networkPolicy"],
        json!({ "allow": ["allowed.test", format!("{}:8080", outside.addr(4))] })
    );
    assert_eq!(sb["networkAccess"], true);

    // The allowed name, by HTTP and by HTTPS (the TLS server name).
    assert!(resolves(&app, t, id, "allowed.test").await);
    assert_eq!(
        fetch(&app, t, id, "http://allowed.test/", "").await,
        "allowed-http"
    );
    assert_eq!(
        fetch(&app, t, id, "https://allowed.test/", "").await,
        "allowed-https"
    );
    // The allowed address and port.
    assert!(tcp(&app, t, id, &outside.addr(4), 8080)
        .await
        .contains("cidr-tcp"));
    // Everything else: another name (no DNS answer either), the other
    // host's address directly, the allowed name's Host sent to another
    // address, another port of an allowed address.
    assert!(!resolves(&app, t, id, "other.test").await);
    let other = fetch(&app, t, id, "http://other.test/", "").await;
    assert!(!other.contains("other-http"), "{other}");
    let direct = fetch(&app, t, id, &format!("http://{}/", outside.addr(3)), "").await;
    assert!(!direct.contains("other-http"), "{direct}");
    let borrowed = fetch(
        &app,
        t,
        id,
        &format!("http://{}/", outside.addr(3)),
        "--header 'Host: allowed.test'",
    )
    .await;
    assert!(!borrowed.contains("other-http"), "{borrowed}");
    assert!(!tcp(&app, t, id, &outside.addr(3), 8080)
        .await
        .contains("other-tcp"));

    // A PATCH takes effect on the running sandbox within a second.
    let patched = patch(
        &app,
        t,
        id,
        json!({ "allow": ["*.wild.test", "other.test"] }),
    )
    .await;
    assert!(
        patched["applied"]["now"]
            .as_array()
            .is_some_and(|a| a.iter().any(|f| f == "networkPolicy")),
        "{patched}"
    );
    let took = eventually(Duration::from_secs(5), || async {
        fetch(&app, t, id, "http://other.test/", "").await == "other-http"
    })
    .await
    .expect("the new policy holds");
    assert!(took < Duration::from_secs(1), "applied after {took:?}");
    assert_eq!(
        fetch(&app, t, id, "http://api.wild.test/", "").await,
        "other-http"
    );
    let old = fetch(&app, t, id, "http://allowed.test/", "").await;
    assert!(!old.contains("allowed-http"), "{old}");

    // Deny-all: nothing, not even DNS; allow-all again: everything.
    patch(&app, t, id, json!("deny-all")).await;
    let details = app.get(&format!("/api/v1/sandbox/{id}"), t).await;
    assert_eq!(details.body["networkAccess"], false);
    assert!(!resolves(&app, t, id, "allowed.test").await);
    assert!(!tcp(&app, t, id, &outside.addr(4), 8080)
        .await
        .contains("cidr-tcp"));
    patch(&app, t, id, json!("allow-all")).await;
    assert!(tcp(&app, t, id, &outside.addr(3), 8080)
        .await
        .contains("other-tcp"));
    // The agent follows the sandbox to its new address.
    let (code, _) = run(&app, t, id, "true").await;
    assert_eq!(code, 0);

    // A deny list: the rest stays open.
    let id2 = app
        .create_id(
            t,
            json!({ "networkPolicy": { "deny": ["other.test", outside.addr(4)] } }),
        )
        .await;
    assert_eq!(
        fetch(&app, t, &id2, "http://allowed.test/", "").await,
        "allowed-http"
    );
    assert!(!resolves(&app, t, &id2, "other.test").await);
    assert!(!tcp(&app, t, &id2, &outside.addr(4), 8080)
        .await
        .contains("cidr-tcp"));

    // Stopped and started: the policy holds at the new session's address.
    let r = app.act(t, &id2, "stop?timeout=1").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = app.act(t, &id2, "start").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let first = run(&app, t, &id2, "timeout 5 wget -O- http://allowed.test/ 2>&1; timeout 3 nslookup allowed.test 2>&1 | tail -2").await;
    if !first.1.contains("allowed-http") {
        eprintln!("diagnostics: first after start: {first:?}");
        eprintln!(
            "diagnostics: {:?}",
            Command::new("iptables")
                .args(["-S", "STOCKADE-EGRESS"])
                .output()
                .unwrap()
        );
        eprintln!(
            "diagnostics: {:?}",
            Command::new("iptables")
                .args(["-t", "nat", "-S", "STOCKADE-EGRESS"])
                .output()
                .unwrap()
        );
        eprintln!(
            "diagnostics: again: {:?}",
            run(
                &app,
                t,
                &id2,
                "timeout 5 wget -O- http://allowed.test/ 2>&1"
            )
            .await
        );
    }
    assert_eq!(
        fetch(&app, t, &id2, "http://allowed.test/", "").await,
        "allowed-http"
    );
    assert!(!tcp(&app, t, &id2, &outside.addr(4), 8080)
        .await
        .contains("cidr-tcp"));

    // Destroyed: its entries are gone.
    let r = app.delete(&format!("/api/v1/sandbox/{id2}"), t).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let listing = egress_entries_gone(&[id2.as_str()]).await;
    assert!(
        !listing.contains(id2.as_str()),
        "entries of a destroyed sandbox stay: {listing}"
    );
    eprintln!("create with an allow list: {create_ms} ms");

    // Figures (printed, not enforced): the cost of a policy against
    // allow-all, measured in the same run.
    let timed_create = |policy: Value| {
        let app = &app;
        async move {
            let started = Instant::now();
            let sb = app.create(t, json!({ "networkPolicy": policy })).await;
            (sb["id"].as_str().unwrap().to_owned(), started.elapsed())
        }
    };
    let (open, open_create) = timed_create(json!("allow-all")).await;
    let (listed, listed_create) = timed_create(json!({ "allow": ["allowed.test"] })).await;
    const FETCHES: u32 = 20;
    let per_fetch = |id: String, line: String| {
        let app = &app;
        async move {
            let r = app
                .post(
                    &format!("/api/v1/sandbox/{id}/exec"),
                    t,
                    json!({ "shell": format!("for i in $(seq {FETCHES}); do {line} || exit 1; done"), "timeoutSeconds": 60 }),
                )
                .await;
            assert_eq!(r.body["exitCode"], 0, "{:?}", r.body);
            r.body["durationMs"].as_f64().unwrap() / f64::from(FETCHES)
        }
    };
    let direct = per_fetch(
        open.clone(),
        format!(
            "wget -q -O /dev/null --header 'Host: allowed.test' http://{}/",
            outside.addr(2)
        ),
    )
    .await;
    let filtered = per_fetch(
        listed.clone(),
        "wget -q -O /dev/null http://allowed.test/".into(),
    )
    .await;
    eprintln!(
        "egress figures: create allow-all {} ms, with an allow list {} ms (ratio {:.2}); \
         HTTP fetch direct under allow-all {direct:.2} ms, by name under an allow list \
         (DNS by the filter, through its proxy) {filtered:.2} ms (ratio {:.2}), {FETCHES} each",
        open_create.as_millis(),
        listed_create.as_millis(),
        listed_create.as_secs_f64() / open_create.as_secs_f64(),
        filtered / direct,
    );
    for id in [open, listed] {
        app.delete(&format!("/api/v1/sandbox/{id}"), t).await;
    }
}

/// Whether the sandbox `id` gets an answer from `addr` port 8080.
async fn reaches(app: &TestApp, id: &str, addr: &str) -> bool {
    tcp(app, &app.admin_token, id, addr, 8080)
        .await
        .contains("private-tcp")
}

/// An app whose egress filter asks `dns` and whose sandboxes may reach the
/// private blocks `private` (`--egress-allow-private`); with `dir`, a
/// restart of the app that had it (same database, same instance).
async fn app_with_private(
    dns: &str,
    private: &[&str],
    dir: Option<Arc<tempfile::TempDir>>,
) -> TestApp {
    let dns: std::net::SocketAddr = dns.parse().unwrap();
    let private = PrivateAccess::parse(private).unwrap();
    let app = spawn_app_with(AppOptions {
        configure: Some(Box::new(move |c| {
            c.service.egress.upstream_dns = vec![dns];
            c.service.egress.private = private;
        })),
        dir,
        ..Default::default()
    })
    .await;
    let health = app.get("/api/v1/health", &app.admin_token).await;
    assert_eq!(
        health.body["egress"]["status"], "running",
        "{:?}",
        health.body
    );
    app
}

/// The local network and the cloud metadata service, as a hostile tenant
/// tries them: an outside host at 10.251.62.2 and at the link-local
/// 169.254.62.2 (both made here, on a bridge of the test's own), serving
/// DNS, HTTP and plain TCP. Without an opt-in no policy reaches them,
/// allow-all included, an allowed name answered with one is not dialled
/// by the proxy, and an allow list naming one is a 400; with
/// `--egress-allow-private` naming them they are reached, by sandboxes
/// made before the restart that opted them in too, and not any more after
/// one that takes the opt-in back. E2B's `dnsServers` open port 53 of the
/// server only.
#[tokio::test(flavor = "multi_thread")]
async fn private_ranges_are_out_of_reach_unless_opted_in() {
    let Some(name) = Outside::bridge("stktp") else {
        return;
    };
    let outside = Outside::start(
        &name,
        62,
        &[(
            2,
            vec![
                "--dns".into(),
                "internal.test=10.251.62.2,meta.test=169.254.62.2".into(),
                "--http".into(),
                "80:private-http".into(),
                "--tcp".into(),
                "8080:private-tcp".into(),
            ],
        )],
    );
    let private = outside.addr(2);
    let link_local = "169.254.62.2";
    // The link-local address on the same host, routed to the test's bridge
    // (the route goes with the bridge).
    ip_ok(&[
        "-n",
        &format!("{name}-2"),
        "addr",
        "add",
        &format!("{link_local}/32"),
        "dev",
        "eth0",
    ]);
    ip_ok(&["route", "add", &format!("{link_local}/32"), "dev", &name]);
    let dns = format!("{private}:53");
    let started = Instant::now();

    // No opt-in (the default).
    let (dir, instance, old) = {
        let mut app = app_with_private(&dns, &[], None).await;
        let t = &app.admin_token;
        let open = app.create(t, json!({})).await;
        let id = open["id"].as_str().unwrap();
        assert_eq!(open["networkPolicy"], "allow-all");
        for addr in [private.as_str(), link_local] {
            let got = tcp(&app, t, id, addr, 8080).await;
            assert!(
                !got.contains("private-tcp"),
                "allow-all reached {addr}: {got}"
            );
            let got = fetch(&app, t, id, &format!("http://{addr}/"), "").await;
            assert!(
                !got.contains("private-http"),
                "allow-all reached {addr}: {got}"
            );
        }
        // Its DNS still works, through the egress filter, although the
        // resolver itself is in a private range.
        assert!(resolves(&app, t, id, "internal.test").await);

        // An allowed name answered with a private address: not dialled.
        let named = app
            .create(
                t,
                json!({ "networkPolicy": { "allow": ["internal.test", "meta.test"] } }),
            )
            .await;
        let named = named["id"].as_str().unwrap();
        for host in ["internal.test", "meta.test"] {
            let got = fetch(&app, t, named, &format!("http://{host}/"), "").await;
            assert!(!got.contains("private-http"), "{host}: {got}");
            assert!(got.contains("403"), "{host}: {got}");
        }

        // An allow list naming a private block: 400 naming the entry and
        // what the administrator must set; at create and at PATCH.
        let r = app
            .try_create(t,
                json!({ "networkPolicy": { "allow": ["example.test", format!("{private}:8080")] } }),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
        assert_eq!(r.error_fields(), ["networkPolicy.allow[1]"], "{:?}", r.body);
        let message = r.body["error"]["details"]["fields"][0]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(message.contains("--egress-allow-private"), "{message}");
        let r = app
            .call(
                Method::PATCH,
                &format!("/api/v1/sandbox/{id}"),
                Some(t),
                Some(json!({ "networkPolicy": { "allow": ["169.254.169.254"] } })),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
        assert_eq!(r.error_fields(), ["networkPolicy.allow[0]"], "{:?}", r.body);
        // E2B's dnsServers name the same private server: refused too.
        let r = e2b_with_dns(&app, t, "internal.test", &private).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
        assert!(
            r.body.to_string().contains("--egress-allow-private"),
            "{:?}",
            r.body
        );
        // Its sandboxes stay for the next start.
        app.shutdown().await;
        app.cleanup_on_drop = false;
        (app.dir.clone(), app.instance_id(), id.to_owned())
    };

    // Opted in, after a restart: the same addresses answer (so it was the
    // filter that refused), for a new sandbox and, once the start has
    // written its entry again, for the one made before; allow lists may
    // name them.
    let app = app_with_private(&dns, &["10.251.62.0/24", link_local], Some(dir.clone())).await;
    assert_eq!(app.instance_id(), instance);
    let t = &app.admin_token;
    let open = app.create(t, json!({})).await;
    let id = open["id"].as_str().unwrap();
    for addr in [private.as_str(), link_local] {
        let got = tcp(&app, t, id, addr, 8080).await;
        assert!(got.contains("private-tcp"), "{addr} opted in: {got}");
    }
    for addr in [private.as_str(), link_local] {
        eventually(Duration::from_secs(20), || reaches(&app, &old, addr))
            .await
            .unwrap_or_else(|| panic!("the earlier sandbox never reached {addr} once opted in"));
    }
    let named = app
        .create(
            t,
            json!({ "networkPolicy": { "allow": ["internal.test"] } }),
        )
        .await;
    let named = named["id"].as_str().unwrap();
    assert_eq!(
        fetch(&app, t, named, "http://internal.test/", "").await,
        "private-http"
    );
    let listed = app
        .create(
            t,
            json!({ "networkPolicy": { "allow": [format!("{private}:8080")] } }),
        )
        .await;
    let listed = listed["id"].as_str().unwrap();
    assert!(tcp(&app, t, listed, &private, 8080)
        .await
        .contains("private-tcp"));
    // Opted in, but not in the list: the policy still decides.
    assert!(!tcp(&app, t, listed, link_local, 8080)
        .await
        .contains("private-tcp"));

    // E2B's dnsServers: port 53 of the server, not the whole address (DNS
    // over HTTPS or TLS would pass the name checks by).
    let r = e2b_with_dns(&app, t, "example.test", &private).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let e2b = r.body["sandboxID"].as_str().unwrap().to_owned();
    let details = app.get(&format!("/api/v1/sandbox/{e2b}"), t).await;
    assert_eq!(
        details.body["networkPolicy"],
        json!({ "allow": ["example.test", format!("{private}:53")] })
    );
    let got = tcp(&app, t, &e2b, &private, 8080).await;
    assert!(
        !got.contains("private-tcp"),
        "dnsServers opened 8080: {got}"
    );
    let got = fetch(&app, t, &e2b, &format!("http://{private}/"), "").await;
    assert!(!got.contains("private-http"), "dnsServers opened 80: {got}");

    // The opt-in taken back at the next start: the running sandboxes lose
    // it too.
    let mut app = app;
    app.shutdown().await;
    app.cleanup_on_drop = false;
    drop(app);
    let app = app_with_private(&dns, &[], Some(dir)).await;
    for id in [old.as_str(), open["id"].as_str().unwrap()] {
        for addr in [private.as_str(), link_local] {
            let app = &app;
            eventually(Duration::from_secs(20), || async move {
                !reaches(app, id, addr).await
            })
            .await
            .unwrap_or_else(|| panic!("{id} still reaches {addr} after the opt-in went"));
        }
    }
    eprintln!("private ranges test: {:?}", started.elapsed());
    drop(app);
    drop(outside);
}

/// The bad day between a stop's answer and its entry's removal: the server
/// dies with the container down and the entry still written (here Docker
/// stops the container behind the server's back, so nothing removes it).
/// Reconciliation, which runs at every start before requests are served
/// and then in passes, removes the entry.
#[tokio::test(flavor = "multi_thread")]
async fn an_entry_whose_removal_never_ran_is_pruned() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();
    let id = app.create_id(&t, json!({})).await;
    let entry = format!("stockade:{id}");
    assert!(egress_listing().contains(&entry), "{}", egress_listing());
    let sid = stockade_core::SandboxId::parse(&id).unwrap();
    let out = docker(&["stop", "-t", "1", &stockade_runtime::container_name(&sid)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stockade_service::reconcile::reconcile_once(&app.state.svc)
        .await
        .expect("reconcile");
    let left = egress_entries_gone(&[id.as_str()]).await;
    assert!(
        !left.contains(&entry),
        "the stopped sandbox's entry stays: {left}"
    );
}
