//! The proxy on loopback: names over HTTP and TLS, pinned addresses,
//! deny entries, wildcards, policy changes, timeouts and caps.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::rr::RecordType;
use serde_json::json;
use stockade_core::netpolicy::Cidr;
use stockade_egress::ProxyConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::support::*;

const SANDBOX: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 10);
const NEIGHBOUR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 11);

/// An HTTP and a TLS upstream on one address (the TLS one with the test
/// certificate).
struct Upstreams {
    cert: TestCert,
    web: SocketAddr,
    tls: SocketAddr,
    _tasks: [Bg; 2],
}

impl Upstreams {
    async fn on(ip: Ipv4Addr) -> Self {
        let cert = TestCert::new();
        let (web, w) = http_upstream(ip).await;
        let (tls, t) = tls_upstream(ip, &cert).await;
        Self {
            cert,
            web,
            tls,
            _tasks: [w, t],
        }
    }

    /// A TLS hello for `name` that `client` sends to the TLS upstream
    /// through the proxy, and the greeting.
    async fn hello(
        &self,
        h: &Harness,
        client: Ipv4Addr,
        name: &str,
    ) -> io::Result<(TlsStream<TcpStream>, String)> {
        tls_hello(&self.cert, h.dial(client, self.tls).await, name).await
    }

    /// The same hello sent straight to the upstream, not through the proxy.
    async fn direct_hello(&self, name: &str) -> io::Result<(TlsStream<TcpStream>, String)> {
        let direct = TcpStream::connect(self.tls).await.unwrap();
        tls_hello(&self.cert, direct, name).await
    }
}

#[tokio::test]
async fn allowed_name_over_http_reaches_upstream() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    let (web, _w) = http_upstream(ALLOWED_IP).await;
    let got = http_get(h.dial(SANDBOX, web).await, "allowed.test").await;
    assert_eq!(
        got,
        Some((200, "upstream 127.0.0.2 host=allowed.test".into()))
    );
    // The same with a port in Host, another case and a trailing dot.
    h.assert_passes(SANDBOX, web, "Allowed.TEST.:80").await;
}

#[tokio::test]
async fn allowed_name_over_tls_reaches_upstream() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    let up = Upstreams::on(ALLOWED_IP).await;
    let (mut stream, greeting) = up
        .hello(&h, SANDBOX, "allowed.test")
        .await
        .expect("the handshake goes through the proxy");
    assert_eq!(greeting, "hello 127.0.0.2 sni=allowed.test");
    // Data flows both ways after the hello.
    stream.write_all(b"ping\n").await.unwrap();
    let mut echo = [0u8; 5];
    stream.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"ping\n");
}

#[tokio::test]
async fn a_listed_name_to_another_address_is_refused() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    let up = Upstreams::on(OTHER_IP).await;
    h.assert_refused_for(
        SANDBOX,
        up.web,
        "allowed.test",
        "allowed.test does not resolve to 127.0.0.3",
    )
    .await;
    // Directly the TLS upstream takes the name (the certificate has it) …
    up.direct_hello("allowed.test")
        .await
        .expect("direct handshake");
    // … through the proxy the connection is closed.
    let refused = up.hello(&h, SANDBOX, "allowed.test").await;
    assert!(refused.is_err(), "the proxy lets the borrowed name through");
}

#[tokio::test]
async fn an_unlisted_name_is_refused() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    let up = Upstreams::on(OTHER_IP).await;
    let body = h.refused(SANDBOX, up.web, "other.test").await;
    assert_eq!(
        body,
        "stockade egress policy: other.test: denied: not in networkPolicy.allow\n"
    );
    assert!(up.hello(&h, SANDBOX, "other.test").await.is_err());
    // Refused before any DNS question about it.
    assert_eq!(h.dns.asked("other.test"), 0);
}

#[tokio::test]
async fn a_deny_entry_beats_the_allow_list() {
    let h = Harness::start().await;
    let (web, _w) = http_upstream(ALLOWED_IP).await;
    h.set_policy(
        SANDBOX,
        json!({"allow": ["*.example.test", "127.0.0.0/8"], "deny": ["secret.example.test"]}),
    );
    h.assert_refused_for(
        SANDBOX,
        web,
        "secret.example.test",
        "denied by networkPolicy.deny[0]",
    )
    .await;
    h.assert_passes(SANDBOX, web, "sub.example.test").await;
    // A denied address beats an allowed name.
    h.set_policy(
        SANDBOX,
        json!({"allow": ["allowed.test"], "deny": ["127.0.0.2"]}),
    );
    h.assert_refused_for(
        SANDBOX,
        web,
        "allowed.test",
        "127.0.0.2: denied by networkPolicy.deny[0]",
    )
    .await;
}

#[tokio::test]
async fn a_wildcard_matches_below_the_name_only() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["*.example.test"]})).await;
    let up = Upstreams::on(ALLOWED_IP).await;
    let got = http_get(h.dial(SANDBOX, up.web).await, "sub.example.test").await;
    assert_eq!(
        got,
        Some((200, "upstream 127.0.0.2 host=sub.example.test".into()))
    );
    let (_, greeting) = up.hello(&h, SANDBOX, "sub.example.test").await.unwrap();
    assert_eq!(greeting, "hello 127.0.0.2 sni=sub.example.test");
    assert_eq!(
        h.get_status(SANDBOX, up.web, "example.test").await,
        Some(403)
    );
    assert!(up.hello(&h, SANDBOX, "example.test").await.is_err());
}

#[tokio::test]
async fn a_raw_address_without_a_name_is_refused() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    let up = Upstreams::on(ALLOWED_IP).await;
    // TLS to an address sends no SNI: fine directly, refused by the proxy.
    up.direct_hello("127.0.0.2")
        .await
        .expect("direct handshake");
    assert!(up.hello(&h, SANDBOX, "127.0.0.2").await.is_err());
    h.assert_refused_for(SANDBOX, up.web, "127.0.0.2", "names no single host")
        .await;
    // Something that is neither TLS nor HTTP is closed without an answer.
    let mut conn = h.dial(SANDBOX, up.web).await;
    conn.write_all(b"SSH-2.0-client\r\n").await.unwrap();
    let mut rest = Vec::new();
    let _ = conn.read_to_end(&mut rest).await;
    assert!(rest.is_empty());
    // An address in the allow list needs no name.
    h.set_policy(SANDBOX, json!({"allow": ["127.0.0.2"]}));
    h.assert_passes(SANDBOX, up.web, "127.0.0.2").await;
    let (_, greeting) = up.hello(&h, SANDBOX, "127.0.0.2").await.unwrap();
    assert_eq!(greeting, "hello 127.0.0.2 sni=-");
}

#[tokio::test]
async fn deny_all_and_unknown_sandboxes_get_nothing() {
    let h = Harness::with_policy(SANDBOX, json!("deny-all")).await;
    let (web, _w) = http_upstream(ALLOWED_IP).await;
    let (status, body) = http_get(h.dial(SANDBOX, web).await, "allowed.test")
        .await
        .unwrap();
    assert_eq!(
        (status, body.as_str()),
        (403, "stockade egress policy: networkPolicy is deny-all\n")
    );
    // No policy at all: closed without a word.
    assert_eq!(h.get_status(NEIGHBOUR, web, "allowed.test").await, None);
    // allow-all: anything goes (here, to a loopback upstream).
    h.set_policy(NEIGHBOUR, json!("allow-all"));
    h.assert_passes(NEIGHBOUR, web, "whatever.test").await;
}

#[tokio::test]
async fn a_policy_change_applies_to_the_next_connection_and_cuts_open_ones() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    let up = Upstreams::on(ALLOWED_IP).await;
    let (mut open, _) = up.hello(&h, SANDBOX, "allowed.test").await.unwrap();
    h.assert_passes(SANDBOX, up.web, "allowed.test").await;

    // Another sandbox's change, and a change that still allows the open
    // connection, leave it alone (and ask no DNS question about it).
    let asked = h.dns.asked_total();
    h.set_policy(NEIGHBOUR, json!("deny-all"));
    h.set_policy(SANDBOX, json!({"allow": ["allowed.test", "other.test"]}));
    for _ in 0..2 {
        open.write_all(b"still\n").await.unwrap();
        let mut echo = [0u8; 6];
        open.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"still\n");
    }
    assert_eq!(h.dns.asked_total(), asked);

    h.set_policy(SANDBOX, json!({"allow": ["other.test"]}));
    let (status, _) = http_get(h.dial(SANDBOX, up.web).await, "allowed.test")
        .await
        .unwrap();
    assert_eq!(status, 403);
    // The open TLS connection is cut within a second.
    let mut buf = [0u8; 16];
    let cut = tokio::time::timeout(Duration::from_secs(1), open.read(&mut buf)).await;
    assert!(
        matches!(cut, Ok(Ok(0)) | Ok(Err(_))),
        "the open connection survived the change: {cut:?}"
    );

    h.set_policy(SANDBOX, json!({"allow": ["allowed.test"]}));
    h.assert_passes(SANDBOX, up.web, "allowed.test").await;
}

#[tokio::test]
async fn the_forwarders_answers_pin_the_name_without_asking_again() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["www.allowed.test"]})).await;
    let (web, _w) = http_upstream(ALLOWED_IP).await;
    let answer = h.ask(SANDBOX, "www.allowed.test", RecordType::A).await;
    assert_eq!(a_records(&answer), [ALLOWED_IP]);
    let asked = h.dns.asked_total();
    h.assert_passes(SANDBOX, web, "www.allowed.test").await;
    assert_eq!(h.dns.asked_total(), asked, "the proxy asked upstream again");
    // Another sandbox with the same policy but no lookup makes the proxy ask.
    h.set_policy(NEIGHBOUR, json!({"allow": ["www.allowed.test"]}));
    h.assert_passes(NEIGHBOUR, web, "www.allowed.test").await;
    assert!(h.dns.asked_total() > asked);
}

#[tokio::test]
async fn a_silent_client_is_closed_after_the_timeout() {
    let timeout = Duration::from_millis(300);
    let h = Harness::with_config(ProxyConfig {
        hello_timeout: timeout,
        ..loopback_config()
    })
    .await;
    let (web, _w) = http_upstream(ALLOWED_IP).await;
    h.set_policy(SANDBOX, json!({"allow": ["allowed.test"]}));
    let mut silent = h.dial(SANDBOX, web).await;
    let closed = time_to_close(&mut silent, Duration::from_secs(3))
        .await
        .expect("closed");
    // Closed by the configured timeout (the default is 5 s), not earlier.
    assert!(closed >= timeout - Duration::from_millis(20), "{closed:?}");
    // One that starts a request and never finishes it is closed too.
    let mut slow = h.dial(SANDBOX, web).await;
    slow.write_all(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let started = std::time::Instant::now();
    slow.read_to_end(&mut answer).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 403"));
}

#[tokio::test]
async fn a_hello_past_the_byte_cap_is_refused() {
    let h = Harness::with_config(ProxyConfig {
        max_hello_bytes: 1024,
        ..loopback_config()
    })
    .await;
    let (web, _w) = http_upstream(ALLOWED_IP).await;
    h.set_policy(SANDBOX, json!({"allow": ["allowed.test"]}));
    let mut conn = h.dial(SANDBOX, web).await;
    let filler = "a".repeat(2000);
    let request = format!("GET / HTTP/1.1\r\nX-Filler: {filler}\r\nHost: allowed.test\r\n\r\n");
    let _ = conn.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 403"),
        "{answer:?}"
    );
}

#[tokio::test]
async fn connection_caps_hold_per_sandbox_and_overall() {
    let h = Harness::with_config(ProxyConfig {
        max_connections_per_client: 2,
        max_connections: 3,
        hello_timeout: Duration::from_secs(10),
        ..loopback_config()
    })
    .await;
    let (web, _w) = http_upstream(ALLOWED_IP).await;
    let third = Ipv4Addr::new(127, 0, 0, 12);
    for ip in [SANDBOX, NEIGHBOUR, third] {
        h.set_policy(ip, json!({"allow": ["allowed.test"]}));
    }
    // Two idle connections fill the sandbox's share.
    let _a = h.dial(SANDBOX, web).await;
    let _b = h.dial(SANDBOX, web).await;
    let mut over = h.dial(SANDBOX, web).await;
    let closed = time_to_close(&mut over, Duration::from_secs(2)).await;
    assert!(
        closed.is_some(),
        "a third connection of one sandbox was kept"
    );
    // Another sandbox still gets in, up to the overall cap.
    // (The proxy accepts in order, so this one is counted before the next.)
    let _c = h.dial(NEIGHBOUR, web).await;
    let mut full = h.dial(third, web).await;
    assert!(time_to_close(&mut full, Duration::from_secs(2))
        .await
        .is_some());
    // Places come back when connections end (as soon as the proxy sees
    // them closed).
    drop(_a);
    drop(_c);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        let got = http_get(h.dial(third, web).await, "allowed.test").await;
        if got.map(|g| g.0) == Some(200) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no place came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_host_and_blocked_ranges_are_never_dialled() {
    let h = Harness::with_config(ProxyConfig {
        blocked: vec![Cidr::parse("127.0.0.3/32").unwrap()],
        ..ProxyConfig::default()
    })
    .await;
    let (web, _w) = http_upstream(ALLOWED_IP).await;
    let (other_web, _o) = http_upstream(OTHER_IP).await;
    h.set_policy(SANDBOX, json!("allow-all"));
    // Loopback is the host itself: refused, even under allow-all.
    h.assert_refused_for(
        SANDBOX,
        web,
        "allowed.test",
        "127.0.0.2 is an address of the Docker host",
    )
    .await;
    h.assert_refused_for(
        SANDBOX,
        other_web,
        "other.test",
        "blocked range (127.0.0.3)",
    )
    .await;
}

#[tokio::test]
async fn a_connection_to_the_proxy_itself_is_refused() {
    let h = Harness::with_policy(SANDBOX, json!("allow-all")).await;
    let conn = h.dial(SANDBOX, h.proxy_addr).await;
    let body = refused_get(conn, "allowed.test").await;
    assert!(body.contains("is the egress proxy itself"), "{body}");
}

#[tokio::test]
async fn an_unreachable_destination_is_a_502() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    // A port nobody listens on at the name's address.
    let closed = std::net::TcpListener::bind((ALLOWED_IP, 0)).unwrap();
    let dead: SocketAddr = closed.local_addr().unwrap();
    drop(closed);
    let (status, body) = http_get(h.dial(SANDBOX, dead).await, "allowed.test")
        .await
        .unwrap();
    assert_eq!(status, 502);
    assert!(body.contains("cannot connect"), "{body}");
}
