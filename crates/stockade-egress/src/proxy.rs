//! The transparent egress proxy: takes the connections the packet filter
//! redirected from sandboxes (TCP 80/443), reads the TLS server name or the
//! HTTP `Host`, decides with the sandbox's policy, and splices allowed
//! connections to the address the sandbox dialled.
//!
//! A connection for a name goes through only when the address the sandbox
//! dialled is one the egress filter's own DNS resolution returned for that
//! name (an answer the forwarder gave this sandbox, or the resolver's own),
//! so an allowed name cannot carry a connection to another host. An address
//! entry of the allow list lets a connection through by its address alone.
//! Nothing goes to the Docker host itself (its addresses, loopback), to a
//! blocked range (the sandbox network) or to the private and link-local
//! ranges outside the blocks an administrator opted in (the local network,
//! the cloud metadata service), whatever the policy says: an allowed name
//! whose DNS answer is such an address is not dialled.
//!
//! Refused connections are closed; a plain HTTP one first gets a short
//! `403` naming the reason. A spliced connection is checked again whenever
//! a policy changes and cut when its sandbox's new policy refuses it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use stockade_core::netpolicy::{Cidr, EgressPolicy, PrivateAccess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{timeout, timeout_at, Instant};

use crate::limits::{Admission, ConnectionLimits};
use crate::names::ResolvedNames;
use crate::origdst::{OriginalDst, SoOriginalDst};
use crate::policies::PolicySource;
use crate::resolver::Resolver;
use crate::sniff::{sniff, Sniffed};
use crate::task::Task;

/// Bounds and guards of the proxy.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// How long a client has to send its ClientHello or request head.
    pub hello_timeout: Duration,
    /// The most bytes read to find the server name; a hello that has not
    /// shown its name by then is refused.
    pub max_hello_bytes: usize,
    /// How long connecting to the destination may take.
    pub connect_timeout: Duration,
    /// Open connections at most, overall.
    pub max_connections: usize,
    /// Open connections at most, per sandbox address.
    pub max_connections_per_client: usize,
    /// Destinations never dialled, whatever a policy says: the sandbox
    /// network (its gateway and the other sandboxes) and anything else of
    /// the host's that is not a local address.
    pub blocked: Vec<Cidr>,
    /// The blocks of the private ranges that may be dialled (the
    /// administrator's opt-in); the rest of those ranges never is.
    pub private: PrivateAccess,
    /// Dial loopback and the host's own addresses too. Off (the default)
    /// they are refused: the proxy runs on the host, so dialling them would
    /// reach host services that the packet filter keeps from sandboxes.
    /// Only tests on loopback turn it on.
    pub allow_host_destinations: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            hello_timeout: Duration::from_secs(5),
            max_hello_bytes: 16 * 1024,
            connect_timeout: Duration::from_secs(10),
            max_connections: 4096,
            max_connections_per_client: 256,
            blocked: Vec::new(),
            private: PrivateAccess::none(),
            allow_host_destinations: false,
        }
    }
}

/// The proxy, configured; [`serve`](Self::serve) runs it on a listener.
pub struct EgressProxy {
    config: ProxyConfig,
    policies: Arc<dyn PolicySource>,
    resolver: Arc<Resolver>,
    names: Arc<ResolvedNames>,
    original_dst: Arc<dyn OriginalDst>,
}

/// What to do with a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Splice it to the dialled address.
    Connect,
    /// Allowed by name: connect when the dialled address is the name's.
    Check(String),
    /// Refuse it, for this reason.
    Refuse(String),
}

struct Proxy {
    config: ProxyConfig,
    policies: Arc<dyn PolicySource>,
    resolver: Arc<Resolver>,
    names: Arc<ResolvedNames>,
    original_dst: Arc<dyn OriginalDst>,
    limits: Arc<ConnectionLimits>,
}

impl EgressProxy {
    /// A proxy finding original destinations with `SO_ORIGINAL_DST`.
    pub fn new(
        config: ProxyConfig,
        policies: Arc<dyn PolicySource>,
        resolver: Arc<Resolver>,
        names: Arc<ResolvedNames>,
    ) -> Self {
        Self {
            config,
            policies,
            resolver,
            names,
            original_dst: Arc::new(SoOriginalDst),
        }
    }

    /// Finds original destinations another way (e.g. a test that knows
    /// where each of its connections is meant to go).
    pub fn with_original_dst(mut self, original_dst: impl OriginalDst) -> Self {
        self.original_dst = Arc::new(original_dst);
        self
    }

    /// Accepts connections on `listener` until the returned task is
    /// dropped.
    pub fn serve(self, listener: TcpListener) -> Task {
        let limits = ConnectionLimits::new(
            self.config.max_connections,
            self.config.max_connections_per_client,
        );
        let proxy = Arc::new(Proxy {
            config: self.config,
            policies: self.policies,
            resolver: self.resolver,
            names: self.names,
            original_dst: self.original_dst,
            limits,
        });
        Task::spawn(proxy.accept_loop(listener))
    }
}

impl Proxy {
    async fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        let limits = Arc::clone(&self.limits);
        limits
            .accept_loop(listener, "egress proxy", move |conn, client, admission| {
                Arc::clone(&self).handle(conn, client, admission)
            })
            .await
    }

    async fn handle(self: Arc<Self>, mut conn: TcpStream, client: IpAddr, _admission: Admission) {
        let dst = match self.original_dst.original_dst(&conn) {
            Ok(dst) => SocketAddr::new(dst.ip().to_canonical(), dst.port()),
            Err(e) => {
                tracing::warn!(%client, error = %e, "egress proxy: no original destination, closing");
                return;
            }
        };
        let Some(policy) = self.policies.policy_for(client) else {
            tracing::debug!(%client, %dst, "egress proxy: not a sandbox address, closing");
            return;
        };
        let mut hello_bytes = Vec::new();
        let Some(hello) = self.read_hello(&mut conn, &mut hello_bytes).await else {
            tracing::debug!(%client, %dst, "egress proxy: nothing received in time, closing");
            return;
        };
        // Never-dialled destinations first: no DNS question on their behalf.
        let judged = match self.guard(&conn, dst) {
            Err(reason) => Verdict::Refuse(reason),
            Ok(()) => judge(&policy, dst, &hello),
        };
        let verdict = match &judged {
            Verdict::Check(name) => self.check_resolution(client, name, dst.ip()).await,
            verdict => verdict.clone(),
        };
        if let Verdict::Refuse(reason) = verdict {
            tracing::debug!(%client, %dst, name = hello.name(), %reason, "egress refused");
            refuse(conn, &hello, 403, &reason).await;
            return;
        }
        let upstream = match timeout(self.config.connect_timeout, TcpStream::connect(dst)).await {
            Ok(Ok(upstream)) => upstream,
            Ok(Err(e)) => {
                let reason = format!("cannot connect to {dst}: {e}");
                tracing::debug!(%client, %dst, %reason, "egress proxy: connect failed");
                refuse(conn, &hello, 502, &reason).await;
                return;
            }
            Err(_) => {
                let reason = format!("connecting to {dst} timed out");
                refuse(conn, &hello, 504, &reason).await;
                return;
            }
        };
        tracing::debug!(%client, %dst, name = hello.name(), "egress allowed");
        let admitted = Admitted {
            client,
            dst,
            hello,
            policy,
            judged,
        };
        self.splice(conn, upstream, &hello_bytes, admitted).await;
    }

    /// Reads until the hello shows its server name (or cannot), within the
    /// timeout and the byte cap. `None`: nothing came.
    async fn read_hello(&self, conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Sniffed> {
        let deadline = Instant::now() + self.config.hello_timeout;
        let mut chunk = [0u8; 4096];
        loop {
            let room = self.config.max_hello_bytes.saturating_sub(buf.len());
            if room == 0 {
                return Some(sniff(buf).finish(buf));
            }
            let want = room.min(chunk.len());
            match timeout_at(deadline, conn.read(&mut chunk[..want])).await {
                Ok(Ok(0)) | Err(_) => {
                    return (!buf.is_empty()).then(|| sniff(buf).finish(buf));
                }
                Ok(Err(_)) => return None,
                Ok(Ok(n)) => {
                    buf.extend_from_slice(&chunk[..n]);
                    match sniff(buf) {
                        Sniffed::NeedMore => continue,
                        done => return Some(done),
                    }
                }
            }
        }
    }

    /// [`Verdict::Check`]: the dialled address must be one the name
    /// resolves to, by the forwarder's answers to this sandbox or by the
    /// resolver's own (cached, then asked anew).
    async fn check_resolution(&self, client: IpAddr, name: &str, dialled: IpAddr) -> Verdict {
        if self.names.contains(client, name, dialled) {
            return Verdict::Connect;
        }
        if self
            .resolver
            .cached(name)
            .is_some_and(|addrs| addrs.contains(&dialled))
        {
            return Verdict::Connect;
        }
        match self.resolver.refresh(name).await {
            Ok(addrs) if addrs.contains(&dialled) => Verdict::Connect,
            Ok(_) => Verdict::Refuse(format!("{name} does not resolve to {dialled}")),
            Err(e) => Verdict::Refuse(format!("{name} could not be resolved: {e}")),
        }
    }

    /// Destinations never dialled: the proxy itself, blocked ranges, the
    /// private ranges not opted in and (unless allowed) the host's own
    /// addresses.
    fn guard(&self, conn: &TcpStream, dst: SocketAddr) -> Result<(), String> {
        let ip = dst.ip();
        let local = conn.local_addr().map_err(|e| e.to_string())?;
        if local.ip().to_canonical() == ip && local.port() == dst.port() {
            return Err(format!("{dst} is the egress proxy itself"));
        }
        if let Some(net) = self.config.blocked.iter().find(|net| net.contains(ip)) {
            return Err(format!("{ip} is in a blocked range ({net})"));
        }
        if let Some(range) = self.config.private.refused_range(ip) {
            return Err(format!(
                "{ip} is in a private or link-local range ({range}) that sandboxes do not reach"
            ));
        }
        if self.config.allow_host_destinations {
            return Ok(());
        }
        let special = ip.is_loopback()
            || ip.is_unspecified()
            || ip.is_multicast()
            || ip == IpAddr::from([255, 255, 255, 255]);
        // An address this host can bind is one of its own.
        if special || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok() {
            return Err(format!("{ip} is an address of the Docker host"));
        }
        Ok(())
    }

    /// Replays the hello to `upstream`, then copies both ways until either
    /// side closes, or until a policy change refuses the connection.
    async fn splice(
        &self,
        mut conn: TcpStream,
        mut upstream: TcpStream,
        hello_bytes: &[u8],
        mut admitted: Admitted,
    ) {
        let _ = conn.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        if upstream.write_all(hello_bytes).await.is_err() {
            return;
        }
        let mut changes = self.policies.changes();
        let copy = tokio::io::copy_bidirectional(&mut conn, &mut upstream);
        tokio::pin!(copy);
        loop {
            tokio::select! {
                _ = &mut copy => return,
                () = next_change(&mut changes) => {
                    if let Err(reason) = self.recheck(&mut admitted).await {
                        tracing::info!(client = %admitted.client, dst = %admitted.dst,
                            name = admitted.hello.name(), %reason, "egress cut: the policy changed");
                        return;
                    }
                }
            }
        }
    }

    /// After a policy change: whether the connection may go on under its
    /// sandbox's policy now. Only a changed policy is judged again, and a
    /// name whose dialled address was already checked is not asked about
    /// again (an unrelated change must not cut a connection because DNS
    /// answers rotated since).
    async fn recheck(&self, admitted: &mut Admitted) -> Result<(), String> {
        let Some(policy) = self.policies.policy_for(admitted.client) else {
            return Err("not a sandbox address any more".into());
        };
        if Arc::ptr_eq(&policy, &admitted.policy) {
            return Ok(());
        }
        let judged = judge(&policy, admitted.dst, &admitted.hello);
        match &judged {
            Verdict::Refuse(reason) => return Err(reason.clone()),
            Verdict::Check(name) if admitted.judged != judged => {
                let dialled = admitted.dst.ip();
                if let Verdict::Refuse(reason) =
                    self.check_resolution(admitted.client, name, dialled).await
                {
                    return Err(reason);
                }
            }
            _ => {}
        }
        admitted.policy = policy;
        admitted.judged = judged;
        Ok(())
    }
}

/// A spliced connection and what let it through.
struct Admitted {
    client: IpAddr,
    dst: SocketAddr,
    hello: Sniffed,
    /// The policy it was last judged under.
    policy: Arc<EgressPolicy>,
    /// That judgement (before the DNS check).
    judged: Verdict,
}

/// Waits for the next policy change; forever when there is no change feed.
async fn next_change(changes: &mut Option<watch::Receiver<u64>>) {
    let alive = match changes.as_mut() {
        Some(rx) => rx.changed().await.is_ok(),
        None => false,
    };
    if !alive {
        *changes = None;
        std::future::pending::<()>().await;
    }
}

/// The decision on a connection to `dst` whose hello is `hello`, before any
/// DNS check.
///
/// Deny entries come first: a denied address or name is refused. An
/// address in the allow list is enough by itself. Otherwise the hello must
/// name a host the policy allows on this port (allow-list entry, or any
/// name not denied when there is no allow list), and then the dialled
/// address must be that name's ([`Verdict::Check`]).
pub(crate) fn judge(policy: &EgressPolicy, dst: SocketAddr, hello: &Sniffed) -> Verdict {
    match policy {
        EgressPolicy::AllowAll => return Verdict::Connect,
        EgressPolicy::DenyAll => return Verdict::Refuse("networkPolicy is deny-all".into()),
        EgressPolicy::Rules { .. } => {}
    }
    let by_ip = policy.decide_ip(dst.ip(), dst.port());
    if !by_ip.allowed && by_ip.by_entry() {
        return Verdict::Refuse(format!("{}: {by_ip}", dst.ip()));
    }
    let Some(name) = hello.name() else {
        if by_ip.allowed && by_ip.by_entry() {
            return Verdict::Connect;
        }
        let what = match hello {
            Sniffed::Tls(_) => "the TLS ClientHello names no server (SNI)",
            Sniffed::Http(_) => "the HTTP request names no single host",
            _ => "neither TLS nor HTTP, so there is no name to check",
        };
        return Verdict::Refuse(format!(
            "{}: not in networkPolicy.allow, and {what}",
            dst.ip()
        ));
    };
    let by_name = policy.decide_domain(name, dst.port());
    if !by_name.allowed && by_name.by_entry() {
        return Verdict::Refuse(format!("{name}: {by_name}"));
    }
    if by_ip.allowed && by_ip.by_entry() {
        return Verdict::Connect;
    }
    if by_name.allowed {
        return Verdict::Check(name.to_owned());
    }
    Verdict::Refuse(format!("{name}: {by_name}"))
}

/// Closes a refused connection; a plain HTTP client first gets a short
/// answer with `status` (403, 502 or 504) and the reason.
async fn refuse(mut conn: TcpStream, hello: &Sniffed, status: u16, reason: &str) {
    if !matches!(hello, Sniffed::Http(_)) {
        return;
    }
    let text = match status {
        403 => "Forbidden",
        502 => "Bad Gateway",
        _ => "Gateway Timeout",
    };
    let reason: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    let body = format!("stockade egress policy: {reason}\n");
    let answer = format!(
        "HTTP/1.1 {status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = timeout(Duration::from_secs(2), async {
        conn.write_all(answer.as_bytes()).await?;
        conn.shutdown().await?;
        // Read what the client still sends (a request body) so closing
        // does not reset the connection before it read the answer.
        let mut sink = [0u8; 4096];
        let mut left: usize = 64 * 1024;
        while left > 0 {
            let n = conn.read(&mut sink).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(v: serde_json::Value) -> EgressPolicy {
        EgressPolicy::parse(&v).unwrap()
    }

    fn tls(name: &str) -> Sniffed {
        Sniffed::Tls(Some(name.into()))
    }

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn modes() {
        assert_eq!(
            judge(
                &EgressPolicy::AllowAll,
                at("192.0.2.1:443"),
                &Sniffed::Other
            ),
            Verdict::Connect
        );
        assert!(matches!(
            judge(&EgressPolicy::DenyAll, at("192.0.2.1:443"), &tls("a.test")),
            Verdict::Refuse(r) if r.contains("deny-all")
        ));
    }

    #[test]
    fn names_need_a_dns_check() {
        let p = policy(json!({"allow": ["allowed.test", "*.example.test"]}));
        assert_eq!(
            judge(&p, at("192.0.2.1:443"), &tls("allowed.test")),
            Verdict::Check("allowed.test".into())
        );
        assert_eq!(
            judge(
                &p,
                at("192.0.2.1:80"),
                &Sniffed::Http(Some("sub.example.test".into()))
            ),
            Verdict::Check("sub.example.test".into())
        );
        let Verdict::Refuse(r) = judge(&p, at("192.0.2.1:443"), &tls("example.test")) else {
            panic!()
        };
        assert_eq!(r, "example.test: denied: not in networkPolicy.allow");
        let Verdict::Refuse(r) = judge(&p, at("192.0.2.1:443"), &Sniffed::Tls(None)) else {
            panic!()
        };
        assert!(r.contains("names no server (SNI)"), "{r}");
        let Verdict::Refuse(r) = judge(&p, at("192.0.2.1:80"), &Sniffed::Other) else {
            panic!()
        };
        assert!(r.contains("neither TLS nor HTTP"), "{r}");
    }

    #[test]
    fn deny_entries_come_first() {
        let p = policy(json!({
            "allow": ["*.example.test", "192.0.2.0/24"],
            "deny": ["secret.example.test", "192.0.2.66"]
        }));
        let Verdict::Refuse(r) = judge(&p, at("192.0.2.66:443"), &tls("www.example.test")) else {
            panic!()
        };
        assert_eq!(r, "192.0.2.66: denied by networkPolicy.deny[1]");
        // An allowed address does not let a denied name through.
        let Verdict::Refuse(r) = judge(&p, at("192.0.2.5:443"), &tls("secret.example.test")) else {
            panic!()
        };
        assert_eq!(r, "secret.example.test: denied by networkPolicy.deny[0]");
        // An allowed address is enough, with or without a name.
        assert_eq!(
            judge(&p, at("192.0.2.5:443"), &tls("unlisted.test")),
            Verdict::Connect
        );
        assert_eq!(
            judge(&p, at("192.0.2.5:443"), &Sniffed::Tls(None)),
            Verdict::Connect
        );
    }

    #[test]
    fn deny_list_only_still_needs_a_name() {
        let p = policy(json!({"deny": ["evil.test"]}));
        assert_eq!(
            judge(&p, at("198.51.100.1:443"), &tls("good.test")),
            Verdict::Check("good.test".into())
        );
        assert!(matches!(
            judge(&p, at("198.51.100.1:443"), &tls("evil.test")),
            Verdict::Refuse(_)
        ));
        assert!(matches!(
            judge(&p, at("198.51.100.1:443"), &Sniffed::Tls(None)),
            Verdict::Refuse(_)
        ));
    }
}
