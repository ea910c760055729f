//! Test fixtures on loopback only: a fake upstream DNS server, HTTP and TLS
//! upstreams, the proxy and the forwarder wired to them, and clients that
//! tell the proxy where their connection was meant to go.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, CNAME, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use serde_json::Value;
use stockade_egress::{
    DnsConfig, DnsForwarder, EgressPolicy, EgressProxy, Policies, ProxyConfig, ResolvedNames,
    Resolver, Task,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::{self, pki_types};

/// A background task of a test, stopped when dropped.
pub struct Bg(JoinHandle<()>);

impl Bg {
    pub fn spawn(f: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(f))
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where the test names live (all loopback).
pub const ALLOWED_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
pub const OTHER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

/// The fake zone: name → addresses or a CNAME target.
enum Entry {
    A(Vec<Ipv4Addr>),
    Cname(&'static str),
}

/// Names answered differently than [`zone`] does.
pub type Overrides = Arc<HashMap<String, Vec<Ipv4Addr>>>;

fn zone(name: &str, overrides: &Overrides) -> Option<Entry> {
    if let Some(ips) = overrides.get(name) {
        return Some(Entry::A(ips.clone()));
    }
    Some(match name {
        "allowed.test" | "example.test" | "sub.example.test" | "secret.example.test" => {
            Entry::A(vec![ALLOWED_IP])
        }
        "other.test" => Entry::A(vec![OTHER_IP]),
        "www.allowed.test" => Entry::Cname("edge.cdn.test"),
        "edge.cdn.test" => Entry::A(vec![ALLOWED_IP]),
        "tunnel.evil.test" => Entry::A(vec![Ipv4Addr::new(127, 0, 0, 66)]),
        _ => return None,
    })
}

/// The fake upstream DNS server (UDP and TCP on one loopback port), with a
/// log of the questions it was asked.
pub struct FakeDns {
    pub addr: SocketAddr,
    asked: Arc<Mutex<Vec<(String, RecordType)>>>,
    _tasks: Vec<Bg>,
}

impl FakeDns {
    pub async fn start() -> Self {
        Self::with_overrides(Overrides::default()).await
    }

    /// The zone with some names answered by `overrides`.
    pub async fn with_overrides(overrides: Overrides) -> Self {
        let (udp, tcp) = DnsForwarder::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = udp.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&asked);
        let zone_udp = Arc::clone(&overrides);
        let udp_task = Bg::spawn(async move {
            let mut buf = vec![0; 4096];
            loop {
                let Ok((n, peer)) = udp.recv_from(&mut buf).await else {
                    continue;
                };
                if let Some(answer) = answer(&buf[..n], &log, &zone_udp) {
                    let _ = udp.send_to(&answer, peer).await;
                }
            }
        });
        let log = Arc::clone(&asked);
        let tcp_task = Bg::spawn(async move {
            loop {
                let Ok((mut conn, _)) = tcp.accept().await else {
                    continue;
                };
                let log = Arc::clone(&log);
                let overrides = Arc::clone(&overrides);
                tokio::spawn(async move {
                    while let Ok(len) = conn.read_u16().await {
                        let mut q = vec![0; usize::from(len)];
                        if conn.read_exact(&mut q).await.is_err() {
                            return;
                        }
                        let Some(a) = answer(&q, &log, &overrides) else {
                            return;
                        };
                        let mut framed = (a.len() as u16).to_be_bytes().to_vec();
                        framed.extend_from_slice(&a);
                        if conn.write_all(&framed).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            asked,
            _tasks: vec![udp_task, tcp_task],
        }
    }

    /// How often `name` was asked about (any type).
    pub fn asked(&self, name: &str) -> usize {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .count()
    }

    pub fn asked_total(&self) -> usize {
        self.asked.lock().unwrap().len()
    }
}

fn answer(
    query: &[u8],
    log: &Mutex<Vec<(String, RecordType)>>,
    overrides: &Overrides,
) -> Option<Vec<u8>> {
    let query = Message::from_vec(query).ok()?;
    let q = query.queries().first()?.clone();
    let asked = q
        .name()
        .to_ascii()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    log.lock().unwrap().push((asked.clone(), q.query_type()));
    let mut reply = Message::new();
    reply
        .set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true)
        .add_query(q.clone());
    let mut name = asked;
    let mut owner = q.name().clone();
    let mut found = false;
    for _ in 0..8 {
        match zone(&name, overrides) {
            None => break,
            Some(Entry::Cname(target)) => {
                found = true;
                let target_name = Name::from_str(&format!("{target}.")).unwrap();
                reply.add_answer(Record::from_rdata(
                    owner.clone(),
                    300,
                    RData::CNAME(CNAME(target_name.clone())),
                ));
                owner = target_name;
                name = target.to_owned();
            }
            Some(Entry::A(ips)) => {
                found = true;
                match q.query_type() {
                    RecordType::A => {
                        for ip in ips {
                            reply.add_answer(Record::from_rdata(
                                owner.clone(),
                                60,
                                RData::A(A(ip)),
                            ));
                        }
                    }
                    RecordType::TXT => {
                        reply.add_answer(Record::from_rdata(
                            owner.clone(),
                            60,
                            RData::TXT(TXT::new(vec![format!("txt of {name}")])),
                        ));
                    }
                    _ => {}
                }
                break;
            }
        }
    }
    if !found {
        reply.set_response_code(ResponseCode::NXDomain);
    }
    reply.to_vec().ok()
}

/// An HTTP/1.1 upstream on `ip`: answers every request with `200` and a
/// body naming itself and the request's `Host`, then closes.
pub async fn http_upstream(ip: Ipv4Addr) -> (SocketAddr, Bg) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = Bg::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 2048];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let host = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Host: "))
                    .unwrap_or("-")
                    .to_owned();
                let body = format!("upstream {ip} host={host}");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (addr, task)
}

/// The test certificate: the test names and the two upstream addresses.
pub struct TestCert {
    pub cert: pki_types::CertificateDer<'static>,
    key: Vec<u8>,
}

impl TestCert {
    pub fn new() -> Self {
        let names: Vec<String> = [
            "allowed.test",
            "other.test",
            "example.test",
            "sub.example.test",
            "secret.example.test",
            "127.0.0.2",
            "127.0.0.3",
        ]
        .map(String::from)
        .to_vec();
        let ck = rcgen::generate_simple_self_signed(names).unwrap();
        Self {
            cert: ck.cert.der().clone(),
            key: ck.key_pair.serialize_der(),
        }
    }

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let key =
            pki_types::PrivateKeyDer::Pkcs8(pki_types::PrivatePkcs8KeyDer::from(self.key.clone()));
        let config = rustls::ServerConfig::builder_with_provider(Self::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], key)
            .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    pub fn connector(&self) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Self::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }
}

/// A TLS upstream on `ip`: after the handshake it sends
/// `hello <ip> sni=<name>\n`, then echoes what it receives.
pub async fn tls_upstream(ip: Ipv4Addr, cert: &TestCert) -> (SocketAddr, Bg) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = cert.acceptor();
    let task = Bg::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(conn).await else {
                    return;
                };
                let sni = tls.get_ref().1.server_name().unwrap_or("-").to_owned();
                if tls
                    .write_all(format!("hello {ip} sni={sni}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                let mut buf = [0u8; 1024];
                loop {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if tls.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, task)
}

/// The proxy's settings for tests: upstreams listen on loopback, so host
/// destinations are allowed.
pub fn loopback_config() -> ProxyConfig {
    ProxyConfig {
        allow_host_destinations: true,
        ..ProxyConfig::default()
    }
}

/// Which destination each test connection (by its source address) meant.
pub type Destinations = Arc<Mutex<HashMap<SocketAddr, SocketAddr>>>;

/// The egress filter under test with its fake upstream DNS.
pub struct Harness {
    pub policies: Arc<Policies>,
    pub names: Arc<ResolvedNames>,
    pub dns: FakeDns,
    pub proxy_addr: SocketAddr,
    pub forwarder_addr: SocketAddr,
    destinations: Destinations,
    _tasks: Vec<Task>,
}

impl Harness {
    /// Proxy and forwarder on 127.0.0.1, upstreams on loopback (so host
    /// destinations are allowed unless `config` says otherwise).
    pub async fn start() -> Self {
        Self::with_config(loopback_config()).await
    }

    /// `start`, with `policy` (written as JSON) for the sandbox at `client`.
    pub async fn with_policy(client: Ipv4Addr, policy: Value) -> Self {
        let h = Self::start().await;
        h.set_policy(client, policy);
        h
    }

    pub async fn with_config(config: ProxyConfig) -> Self {
        let dns = FakeDns::start().await;
        let resolver = Arc::new(
            Resolver::new(vec![dns.addr])
                .unwrap()
                .with_timeout(Duration::from_secs(1)),
        );
        let policies = Arc::new(Policies::new());
        let names = Arc::new(ResolvedNames::new());
        let destinations: Destinations = Arc::default();
        let lookup = Arc::clone(&destinations);
        let original_dst = move |conn: &TcpStream| -> io::Result<SocketAddr> {
            let peer = conn.peer_addr()?;
            lookup
                .lock()
                .unwrap()
                .get(&peer)
                .copied()
                .ok_or_else(|| io::Error::other("no destination registered"))
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = listener.local_addr().unwrap();
        let proxy = EgressProxy::new(
            config,
            Arc::clone(&policies) as _,
            Arc::clone(&resolver),
            Arc::clone(&names),
        )
        .with_original_dst(original_dst);
        let forwarder = DnsForwarder::new(
            DnsConfig::default(),
            Arc::clone(&policies) as _,
            Arc::clone(&resolver),
            Arc::clone(&names),
        );
        let (udp, tcp) = DnsForwarder::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let forwarder_addr = udp.local_addr().unwrap();
        let tasks = vec![
            proxy.serve(listener),
            forwarder.serve_udp(udp),
            forwarder.serve_tcp(tcp),
        ];
        Self {
            policies,
            names,
            dns,
            proxy_addr,
            forwarder_addr,
            destinations,
            _tasks: tasks,
        }
    }

    /// Gives the sandbox at `client` the policy written as JSON.
    pub fn set_policy(&self, client: Ipv4Addr, policy: Value) {
        let policy = EgressPolicy::parse(&policy).unwrap();
        self.policies.set(IpAddr::V4(client), policy);
    }

    /// A connection from `client` to the proxy, as if `client` had dialled
    /// `to` and been redirected.
    pub async fn dial(&self, client: Ipv4Addr, to: SocketAddr) -> TcpStream {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind((client, 0).into()).unwrap();
        let local = socket.local_addr().unwrap();
        self.destinations.lock().unwrap().insert(local, to);
        socket.connect(self.proxy_addr).await.unwrap()
    }

    /// The status of a GET of `host` that `client` sends to `to` through the
    /// proxy; `None` when the proxy closed the connection without an answer.
    pub async fn get_status(&self, client: Ipv4Addr, to: SocketAddr, host: &str) -> Option<u16> {
        http_get(self.dial(client, to).await, host)
            .await
            .map(|(status, _)| status)
    }

    /// Asserts that the proxy refuses a GET of `host` that `client` sends
    /// to `to`, giving `reason` in its answer.
    pub async fn assert_refused_for(
        &self,
        client: Ipv4Addr,
        to: SocketAddr,
        host: &str,
        reason: &str,
    ) {
        let body = self.refused(client, to, host).await;
        assert!(body.contains(reason), "{body}");
    }

    /// Asserts that a GET of `host` that `client` sends to `to` goes
    /// through the proxy (the upstream answers 200).
    pub async fn assert_passes(&self, client: Ipv4Addr, to: SocketAddr, host: &str) {
        assert_eq!(self.get_status(client, to, host).await, Some(200), "{host}");
    }

    /// The body of a GET of `host` that `client` sends to `to` and the proxy
    /// must refuse (403).
    pub async fn refused(&self, client: Ipv4Addr, to: SocketAddr, host: &str) -> String {
        refused_get(self.dial(client, to).await, host).await
    }

    /// The A records `client` is told for `name`.
    pub async fn ask_a(&self, client: Ipv4Addr, name: &str) -> Vec<Ipv4Addr> {
        a_records(&self.ask(client, name, RecordType::A).await)
    }

    /// Asks for `name`'s A records from `client`, which must be refused.
    pub async fn assert_refused(&self, client: Ipv4Addr, name: &str) {
        let answer = self.ask(client, name, RecordType::A).await;
        assert_eq!(answer.response_code(), ResponseCode::Refused, "{name}");
    }

    pub async fn ask(&self, client: Ipv4Addr, name: &str, kind: RecordType) -> Message {
        let socket = UdpSocket::bind((client, 0)).await.unwrap();
        socket.connect(self.forwarder_addr).await.unwrap();
        socket.send(&question(name, kind, 0x1234)).await.unwrap();
        let mut buf = vec![0; 4096];
        let n = tokio::time::timeout(Duration::from_secs(3), socket.recv(&mut buf))
            .await
            .expect("the forwarder answers")
            .unwrap();
        let answer = Message::from_vec(&buf[..n]).unwrap();
        assert_eq!(answer.id(), 0x1234);
        answer
    }

    /// A DNS question from `client` to the forwarder over TCP.
    pub async fn ask_tcp(&self, client: Ipv4Addr, name: &str, kind: RecordType) -> Message {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind((client, 0).into()).unwrap();
        let mut conn = socket.connect(self.forwarder_addr).await.unwrap();
        let q = question(name, kind, 0x4321);
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        conn.write_all(&framed).await.unwrap();
        let len = conn.read_u16().await.unwrap();
        let mut buf = vec![0; usize::from(len)];
        conn.read_exact(&mut buf).await.unwrap();
        let answer = Message::from_vec(&buf).unwrap();
        assert_eq!(answer.id(), 0x4321);
        answer
    }
}

pub fn question(name: &str, kind: RecordType, id: u16) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(
            Name::from_str(&format!("{name}.")).unwrap(),
            kind,
        ));
    m.to_vec().unwrap()
}

/// The A addresses in an answer (through CNAMEs).
pub fn a_records(m: &Message) -> Vec<Ipv4Addr> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

/// An HTTP GET of `host` over `conn` that must be refused (403): the body,
/// which says why.
pub async fn refused_get(conn: TcpStream, host: &str) -> String {
    let (status, body) = http_get(conn, host).await.expect("an HTTP answer");
    assert_eq!(status, 403, "{body}");
    body
}

/// Sends a GET for `host` on `conn` and reads the whole answer: status and
/// body. `None` when the connection was closed without an answer.
pub async fn http_get(mut conn: TcpStream, host: &str) -> Option<(u16, String)> {
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut answer))
        .await
        .expect("the answer comes in time")
        .ok()?;
    let text = String::from_utf8(answer).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// A TLS handshake for `name` (an address: no SNI) on `conn`, then the
/// upstream's greeting line.
pub async fn tls_hello(
    cert: &TestCert,
    conn: TcpStream,
    name: &str,
) -> io::Result<(tokio_rustls::client::TlsStream<TcpStream>, String)> {
    let server_name = pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let mut tls = tokio::time::timeout(
        Duration::from_secs(5),
        cert.connector().connect(server_name, conn),
    )
    .await
    .expect("the handshake ends in time")?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while tls.read_exact(&mut byte).await.is_ok() && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    Ok((tls, String::from_utf8_lossy(&line).into_owned()))
}

/// Reads from `conn` until it closes; how long that took (`None`: still
/// open after `limit`).
pub async fn time_to_close(conn: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = std::time::Instant::now();
    let mut buf = [0u8; 256];
    tokio::time::timeout(limit, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
    .map(|()| start.elapsed())
}
