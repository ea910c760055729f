//! The DNS forwarder for sandboxes: answers a question only when the asking
//! sandbox's policy allows its name (any record type), forwards it to the
//! upstream servers, and records the addresses it handed out.
//!
//! A name outside the policy is `REFUSED` whatever its type (TXT too), so
//! DNS cannot carry data to or from an unlisted domain; `deny-all` answers
//! nothing, and neither does an address that is no sandbox's. CNAME chains
//! of an allowed name are answered as the upstream gives them, and the
//! addresses at their end are recorded under the name asked.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::time::timeout;

use crate::limits::{Admission, ConnectionLimits};
use crate::names::ResolvedNames;
use crate::policies::PolicySource;
use crate::resolver::{addresses_in, Resolver, Transport};
use crate::task::Task;

/// Bounds of the forwarder.
#[derive(Debug, Clone)]
pub struct DnsConfig {
    /// UDP queries being answered at once, overall; more are dropped (the
    /// client asks again).
    pub max_in_flight: usize,
    /// UDP queries being answered at once for one sandbox.
    pub max_in_flight_per_client: usize,
    /// Open TCP connections, overall.
    pub max_tcp_connections: usize,
    /// Open TCP connections per sandbox.
    pub max_tcp_per_client: usize,
    /// How long a TCP connection may wait for its next query.
    pub tcp_idle_timeout: Duration,
}

impl Default for DnsConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 1024,
            max_in_flight_per_client: 64,
            max_tcp_connections: 256,
            max_tcp_per_client: 16,
            tcp_idle_timeout: Duration::from_secs(10),
        }
    }
}

/// The forwarder; [`serve_udp`](Self::serve_udp) and
/// [`serve_tcp`](Self::serve_tcp) run it on sockets.
#[derive(Clone)]
pub struct DnsForwarder {
    inner: Arc<Forwarder>,
}

struct Forwarder {
    config: DnsConfig,
    policies: Arc<dyn PolicySource>,
    resolver: Arc<Resolver>,
    names: Arc<ResolvedNames>,
    udp_limits: Arc<ConnectionLimits>,
    tcp_limits: Arc<ConnectionLimits>,
}

/// The largest UDP query read; a longer one is cut and so malformed.
const MAX_UDP_QUERY: usize = 4096;

impl DnsForwarder {
    pub fn new(
        config: DnsConfig,
        policies: Arc<dyn PolicySource>,
        resolver: Arc<Resolver>,
        names: Arc<ResolvedNames>,
    ) -> Self {
        let udp_limits =
            ConnectionLimits::new(config.max_in_flight, config.max_in_flight_per_client);
        let tcp_limits =
            ConnectionLimits::new(config.max_tcp_connections, config.max_tcp_per_client);
        Self {
            inner: Arc::new(Forwarder {
                config,
                policies,
                resolver,
                names,
                udp_limits,
                tcp_limits,
            }),
        }
    }

    /// The answer for `client`'s DNS message `query`, or `None` when none
    /// is due (not a query, or too short to answer).
    pub async fn answer(
        &self,
        client: IpAddr,
        query: &[u8],
        transport: Transport,
    ) -> Option<Vec<u8>> {
        self.inner
            .answer(client.to_canonical(), query, transport)
            .await
    }

    /// Answers queries arriving on `socket` until the task is dropped.
    pub fn serve_udp(&self, socket: UdpSocket) -> Task {
        let inner = Arc::clone(&self.inner);
        Task::spawn(async move {
            let socket = Arc::new(socket);
            let mut buf = vec![0u8; MAX_UDP_QUERY];
            loop {
                let (n, peer) = match socket.recv_from(&mut buf).await {
                    Ok(got) => got,
                    Err(e) => {
                        tracing::warn!(error = %e, "DNS forwarder: receive failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let client = peer.ip().to_canonical();
                let Some(admission) = inner.udp_limits.admit(client) else {
                    tracing::debug!(%client, "DNS forwarder: too many queries in flight, dropped");
                    continue;
                };
                let query = buf[..n].to_vec();
                let (inner, socket) = (Arc::clone(&inner), Arc::clone(&socket));
                tokio::spawn(async move {
                    let _admission = admission;
                    if let Some(answer) = inner.answer(client, &query, Transport::Udp).await {
                        let _ = socket.send_to(&answer, peer).await;
                    }
                });
            }
        })
    }

    /// Answers queries on connections to `listener` until the task is
    /// dropped.
    pub fn serve_tcp(&self, listener: TcpListener) -> Task {
        let inner = Arc::clone(&self.inner);
        let limits = Arc::clone(&inner.tcp_limits);
        Task::spawn(limits.accept_loop(
            listener,
            "DNS forwarder (TCP)",
            move |conn, client, admission| Arc::clone(&inner).serve_conn(conn, client, admission),
        ))
    }
}

impl Forwarder {
    async fn serve_conn(
        self: Arc<Self>,
        mut conn: TcpStream,
        client: IpAddr,
        _admission: Admission,
    ) {
        let idle = self.config.tcp_idle_timeout;
        loop {
            let query = timeout(idle, async {
                let len = conn.read_u16().await?;
                let mut query = vec![0u8; usize::from(len)];
                conn.read_exact(&mut query).await?;
                Ok::<_, std::io::Error>(query)
            })
            .await;
            let Ok(Ok(query)) = query else {
                return;
            };
            let Some(answer) = self.answer(client, &query, Transport::Tcp).await else {
                return;
            };
            let mut framed = Vec::with_capacity(answer.len() + 2);
            framed.extend_from_slice(&(answer.len() as u16).to_be_bytes());
            framed.extend_from_slice(&answer);
            if conn.write_all(&framed).await.is_err() {
                return;
            }
        }
    }

    async fn answer(&self, client: IpAddr, query: &[u8], transport: Transport) -> Option<Vec<u8>> {
        if query.len() < 12 {
            return None;
        }
        let Ok(message) = Message::from_vec(query) else {
            let id = u16::from_be_bytes([query[0], query[1]]);
            return encode(&Message::error_msg(
                id,
                OpCode::Query,
                ResponseCode::FormErr,
            ));
        };
        if message.message_type() != MessageType::Query {
            return None;
        }
        let fail = |code| {
            let mut reply = Message::error_msg(message.id(), message.op_code(), code);
            reply
                .add_queries(message.queries().iter().cloned())
                .set_recursion_desired(message.recursion_desired())
                .set_recursion_available(true);
            encode(&reply)
        };
        if message.op_code() != OpCode::Query {
            return fail(ResponseCode::NotImp);
        }
        let [question] = message.queries() else {
            return fail(ResponseCode::FormErr);
        };
        let name = stockade_core::netpolicy::normalize_name(&question.name().to_ascii());
        let Some(policy) = self.policies.policy_for(client) else {
            tracing::debug!(%client, %name, "DNS refused: not a sandbox address");
            return fail(ResponseCode::Refused);
        };
        if !policy.may_resolve(&name) {
            tracing::debug!(%client, %name, kind = %question.query_type(), "DNS refused by policy");
            return fail(ResponseCode::Refused);
        }
        let answer = match self.resolver.exchange(query, transport).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::debug!(%client, %name, error = %e, "DNS forwarding failed");
                return fail(ResponseCode::ServFail);
            }
        };
        if let Ok(parsed) = Message::from_vec(&answer) {
            let addrs = addresses_in(&parsed, question.name());
            self.names.record(client, &name, &addrs);
        }
        Some(answer)
    }
}

fn encode(reply: &Message) -> Option<Vec<u8>> {
    reply.to_vec().ok()
}

/// How often a free port for both UDP and TCP is looked for.
const BIND_ATTEMPTS: usize = 64;

impl DnsForwarder {
    /// A UDP socket and a TCP listener on the same address, for
    /// [`serve_udp`](Self::serve_udp) and [`serve_tcp`](Self::serve_tcp).
    /// With port 0, a port free for both is picked.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
        let mut last = None;
        for _ in 0..BIND_ATTEMPTS {
            let udp = UdpSocket::bind(addr).await?;
            match TcpListener::bind(udp.local_addr()?).await {
                Ok(tcp) => return Ok((udp, tcp)),
                // The port picked for UDP is taken for TCP: pick another.
                Err(e) if addr.port() == 0 && e.kind() == std::io::ErrorKind::AddrInUse => {
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free port")))
    }
}
