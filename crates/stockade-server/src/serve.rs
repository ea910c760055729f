//! The accept loop and what keeps connection floods out: the
//! open-files limit, a cap on connections and a share of it per client
//! address, timeouts for request heads and idle keep-alive connections, a
//! floor on how fast a request body must arrive, and a deadline for writes
//! the client does not take.
//!
//! Every accepted connection takes a slot; the slot is given back when its
//! socket closes (for an upgraded connection — a WebSocket terminal, a
//! proxied WebSocket — when the upgraded stream is dropped). At the cap, a
//! new connection is looked at (`MSG_PEEK`) before anything is spent on it:
//! once its whole request head is there it takes the slot of the connection
//! that has been *waiting* longest (one that has no request in progress: a
//! half-sent request head or an idle keep-alive), which is closed; one that
//! has sent nothing yet gets a short grace for its head (at most
//! [`MAX_PENDING`] at a time, the oldest of them closed for a newer one);
//! one that has sent only part of a head is closed at once. When every slot
//! holds a request in progress, new connections wait (in the kernel's
//! backlog, the first one accepted for at most the header timeout) until a
//! slot is free. So a flood of half-sent requests can hold at most the cap,
//! costs an `accept` and a `close` per connection beyond it, and anyone who
//! sends a whole request still gets a slot.
//!
//! One client address (an IPv4 address, an IPv6 /64) holds at most its
//! share of the slots ([`ConnectionLimits::max_connections_per_ip`]): a new
//! connection beyond it closes the address's own longest-waiting connection,
//! or is closed at once when all of the address's connections are busy. So
//! one address that keeps every one of its requests busy (a trickled body, a
//! response it never reads) cannot take the slots of everyone else. Trusted
//! reverse proxies are not counted per address.
//!
//! Timeouts apply only while a connection waits: a request head must arrive
//! within `header_timeout` of the first byte (or of the accept), and a
//! keep-alive connection may idle `idle_timeout` between requests. While a
//! request is in progress its handler may take as long as it needs, and a
//! response may stream for as long as it likes (an SSE log follow, an exec
//! stream), with two exceptions for a client that holds a slot without
//! moving: a request body must keep arriving at `body_min_rate` bytes per
//! second, of which it may fall behind by at most `body_timeout` (else the
//! request is answered 408 and the connection closed), and data the
//! client leaves unread for `write_stall_timeout` (its receive window stays
//! shut, or nothing is acknowledged) makes the kernel abort the connection
//! (`TCP_USER_TIMEOUT`) — upgraded ones too. On HTTP/2, where the client's
//! flow-control window can hold a response back while the socket flows, a
//! response body whose frame waits that long for the window closes the
//! connection. A stream that is quiet, or that the client reads however
//! slowly, is never cut.
//!
//! `accept` failing for lack of file descriptors never spins the loop: it
//! backs off (10 ms, doubling up to 1 s) and logs once per interval.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

pub use stockade_core::net::IpNet;

/// File descriptors kept out of the connection cap's reach at least: the
/// database, Docker's socket pool, the listener, temporary files.
const MIN_RESERVED_FDS: u64 = 256;
/// The derived cap never goes above this (each waiting connection costs
/// memory too).
const MAX_DERIVED_CONNECTIONS: u64 = 65_536;
/// How far past the cap connections that replace closing ones may go while
/// the closed ones' sockets are still being released.
const EVICTION_SLACK: usize = 64;
/// The same for one client address over its share.
const PER_IP_EVICTION_SLACK: usize = 8;
/// `accept` back-off after running out of file descriptors.
const BACKOFF_START: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one warning per this long about `accept` failing.
const ACCEPT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Connection limits of the HTTP listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once; `None` derives it from the open-files
    /// limit at start ([`default_max_connections`]).
    pub max_connections: Option<usize>,
    /// Most connections one client address (an IPv4 address, an IPv6 /64)
    /// may hold; `None`: an eighth of the cap, at least
    /// [`MIN_CONNECTIONS_PER_IP`] ([`default_max_connections_per_ip`]). At or
    /// above the cap it changes nothing.
    pub max_connections_per_ip: Option<usize>,
    /// Reverse proxies: their connections carry many clients and are not
    /// held to the per-address share.
    pub trusted_proxies: Vec<IpNet>,
    /// How long a request head may take, from the accept or from its first
    /// byte on a kept-alive connection.
    pub header_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// The slowest a request body may arrive, in bytes per second, once its
    /// allowance of [`Self::body_timeout`] is used up.
    pub body_min_rate: u64,
    /// How far a request body may fall behind [`Self::body_min_rate`]: a body
    /// that sends nothing at all is cut off after this long.
    pub body_timeout: Duration,
    /// How long what is sent may wait for the other side to take it: a
    /// client that stops reading its response (or its WebSocket) is
    /// disconnected, and a terminal whose program stops reading its input
    /// is ended.
    pub write_stall_timeout: Duration,
    /// Most long-lived streams one account may hold open at once: terminals,
    /// event streams (log follows, exec streams, watches) and WebSockets
    /// through the port proxy.
    pub max_streams_per_account: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: None,
            max_connections_per_ip: None,
            trusted_proxies: Vec::new(),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_min_rate: 500,
            body_timeout: Duration::from_secs(20),
            write_stall_timeout: Duration::from_secs(60),
            max_streams_per_account: 128,
        }
    }
}

impl ConnectionLimits {
    /// The cap in force: the configured one, else derived from the current
    /// open-files limit.
    pub fn effective_max_connections(&self) -> usize {
        self.max_connections
            .unwrap_or_else(|| default_max_connections(open_files_limit().soft))
            .max(1)
    }

    /// The per-address share in force (the cap itself when it is off).
    pub fn effective_max_connections_per_ip(&self) -> usize {
        let cap = self.effective_max_connections();
        self.max_connections_per_ip
            .unwrap_or_else(|| default_max_connections_per_ip(cap))
            .clamp(1, cap)
    }
}

/// The least the derived per-address share goes down to: a browser opens
/// six connections per origin, a small office behind one NAT several times
/// that.
pub const MIN_CONNECTIONS_PER_IP: usize = 64;

/// The default per-address share of a cap of `cap` connections: an eighth,
/// at least [`MIN_CONNECTIONS_PER_IP`], at most the cap.
pub fn default_max_connections_per_ip(cap: usize) -> usize {
    (cap / 8).max(MIN_CONNECTIONS_PER_IP).min(cap)
}

/// The process's open-files limit (`RLIMIT_NOFILE`); `u64::MAX` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFilesLimit {
    pub soft: u64,
    pub hard: u64,
}

/// The current open-files limit.
pub fn open_files_limit() -> OpenFilesLimit {
    let l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    OpenFilesLimit {
        soft: l.current.unwrap_or(u64::MAX),
        hard: l.maximum.unwrap_or(u64::MAX),
    }
}

/// What [`raise_open_files_limit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaisedLimit {
    /// The soft limit the process started with.
    pub before: u64,
    /// The limit now in force.
    pub now: OpenFilesLimit,
}

/// Raises the open-files soft limit to the hard limit, so that a server
/// started under a low default (1024 in many shells and units) can hold as
/// many connections as the system allows it.
pub fn raise_open_files_limit() -> io::Result<RaisedLimit> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let current = getrlimit(Resource::Nofile);
    let before = current.current.unwrap_or(u64::MAX);
    if current.current != current.maximum {
        let raised = rustix::process::Rlimit {
            current: current.maximum,
            maximum: current.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            // Some systems cap the soft limit below an unlimited hard one.
            let fallback = rustix::process::Rlimit {
                current: Some(nr_open().unwrap_or(1 << 20)),
                maximum: current.maximum,
            };
            if setrlimit(Resource::Nofile, fallback).is_err() {
                return Err(io::Error::from(e));
            }
        }
    }
    Ok(RaisedLimit {
        before,
        now: open_files_limit(),
    })
}

/// The kernel's ceiling for a process's open files (`fs.nr_open`).
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The default connection cap for an open-files limit of `nofile`: half of
/// what is left after a reserve (an eighth of the limit, at least 256), as
/// a connection may hold a second descriptor (a proxied upstream, a Docker
/// stream); at least 16, at most 65 536.
pub fn default_max_connections(nofile: u64) -> usize {
    let reserve = (nofile / 8).max(MIN_RESERVED_FDS);
    let derived = nofile.saturating_sub(reserve) / 2;
    usize::try_from(derived.clamp(16, MAX_DERIVED_CONNECTIONS)).unwrap_or(16)
}

/// A client address as the per-address share counts it: an IPv4 address
/// (also when it comes mapped into IPv6), or the /64 of an IPv6 address,
/// which one host can trivially rotate through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ClientKey(IpAddr);

impl ClientKey {
    fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self(IpAddr::V4(v4)),
                None => {
                    let bits = u128::from(v6) & !((1u128 << 64) - 1);
                    Self(IpAddr::V6(std::net::Ipv6Addr::from(bits)))
                }
            },
        }
    }
}

/// The state of one connection that its reader, its requests and its
/// watchdog share.
struct Conn {
    /// Its client address, when it is held to the per-address share.
    client: Option<ClientKey>,
    /// Requests whose response has not been sent (or dropped) yet.
    active: AtomicUsize,
    /// The connection became a tunnel (101): no timeouts, never evicted.
    upgraded: AtomicBool,
    /// Milliseconds since the registry's epoch when the current wait began.
    waiting_since: AtomicU64,
    /// Whether the wait is for a request head (bytes came, or the
    /// connection is new) rather than an idle keep-alive.
    head_started: AtomicBool,
    /// Its key in the registry's waiting list (0: not listed).
    wait_key: AtomicU64,
    /// HTTP/2 response bodies: when each last handed a frame to the
    /// connection that it has not asked for the next since (0: none).
    bodies: Mutex<Vec<Weak<AtomicU64>>>,
    /// Re-evaluate the timeouts.
    wake: Notify,
    /// Closed to make room for a new connection.
    evicted: CancellationToken,
}

/// What one client address holds.
#[derive(Default)]
struct Client {
    /// Its open connections.
    open: usize,
    /// The keys of its waiting connections in the registry's list.
    waiting: BTreeSet<u64>,
}

struct Waiting {
    next_key: u64,
    open: usize,
    /// Connections without a request in progress, oldest wait first.
    list: BTreeMap<u64, Weak<Conn>>,
    /// Per client address held to the share.
    clients: HashMap<ClientKey, Client>,
}

/// Why a new connection got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// Every slot holds a request in progress: it may wait for one.
    Busy,
    /// Its address holds its whole share, all of it busy: it is closed.
    AddressFull,
}

/// All connections of one listener.
struct Registry {
    epoch: Instant,
    cap: usize,
    /// The per-address share (the cap: no share).
    per_ip: usize,
    limits: ConnectionLimits,
    inner: Mutex<Waiting>,
    /// A slot was freed or a connection started waiting.
    room: Notify,
    evictions: AtomicU64,
    /// New connections closed because their address held its share.
    refused_per_ip: AtomicU64,
    /// When that was last logged.
    refused_logged: Mutex<Option<Instant>>,
}

impl Registry {
    fn new(limits: ConnectionLimits) -> Self {
        Self {
            epoch: Instant::now(),
            cap: limits.effective_max_connections(),
            per_ip: limits.effective_max_connections_per_ip(),
            limits,
            inner: Mutex::new(Waiting {
                next_key: 0,
                open: 0,
                list: BTreeMap::new(),
                clients: HashMap::new(),
            }),
            room: Notify::new(),
            evictions: AtomicU64::new(0),
            refused_per_ip: AtomicU64::new(0),
            refused_logged: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The key a connection from `ip` is counted under; `None` when it is
    /// not held to a share (no share, or a trusted proxy).
    fn client_key(&self, ip: IpAddr) -> Option<ClientKey> {
        if self.per_ip >= self.cap || self.limits.trusted_proxies.iter().any(|n| n.contains(ip)) {
            return None;
        }
        Some(ClientKey::of(ip))
    }

    /// Whether a new connection would get a slot now.
    fn has_room(&self) -> bool {
        let w = self.lock();
        w.open < self.cap || (w.open < self.cap + EVICTION_SLACK && !w.list.is_empty())
    }

    /// Whether a new connection from `ip` would be closed for its address:
    /// the address holds its whole share and none of it is waiting.
    fn address_full(&self, ip: IpAddr) -> bool {
        let Some(key) = self.client_key(ip) else {
            return false;
        };
        let w = self.lock();
        w.clients
            .get(&key)
            .is_some_and(|c| c.open >= self.per_ip && c.waiting.is_empty())
    }

    /// Counts (and now and then logs) a connection closed for its address.
    fn note_refused(&self, peer: SocketAddr) {
        self.refused_per_ip.fetch_add(1, Ordering::Relaxed);
        let mut last = self
            .refused_logged
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|at| at.elapsed() >= ACCEPT_LOG_INTERVAL) {
            *last = Some(Instant::now());
            drop(last);
            tracing::warn!(
                client = %peer.ip(),
                per_ip = self.per_ip,
                refused_so_far = self.refused_per_ip.load(Ordering::Relaxed),
                "a client address holds its share of the connection cap, all of it busy: its new connections are closed; raise --max-connections-per-ip or name its reverse proxy in --trusted-proxies if this is not an attack"
            );
        } else {
            tracing::trace!(client = %peer, "the client's address holds its share of connections; closed");
        }
    }

    /// Closes the waiting connection listed under `key`.
    fn evict(&self, w: &mut Waiting, key: u64) {
        let Some(weak) = w.list.remove(&key) else {
            return;
        };
        let Some(victim) = weak.upgrade() else {
            return;
        };
        if let Some(c) = victim.client.and_then(|k| w.clients.get_mut(&k)) {
            c.waiting.remove(&key);
        }
        victim.wait_key.store(0, Ordering::SeqCst);
        victim.evicted.cancel();
        self.evictions.fetch_add(1, Ordering::Relaxed);
    }

    /// Gives a new connection from `peer` a slot, closing the
    /// longest-waiting connection of its address if it holds its share, or
    /// else the longest-waiting one of all if the cap is reached.
    fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<(Arc<Conn>, Slot), Refused> {
        let client = self.client_key(peer.ip());
        let mut w = self.lock();
        let mut made_room = false;
        if let Some(key) = client {
            let (open, oldest) = w
                .clients
                .get(&key)
                .map_or((0, None), |c| (c.open, c.waiting.first().copied()));
            if open >= self.per_ip {
                // Its own closing connections count until their sockets
                // are gone: a few may be on their way out at once.
                let Some(oldest) = oldest.filter(|_| open < self.per_ip + PER_IP_EVICTION_SLACK)
                else {
                    return Err(Refused::AddressFull);
                };
                self.evict(&mut w, oldest);
                if let Some(c) = w.clients.get_mut(&key) {
                    c.waiting.remove(&oldest);
                }
                made_room = true;
            }
        }
        if w.open >= self.cap {
            if w.open >= self.cap + EVICTION_SLACK {
                return Err(Refused::Busy);
            }
            if !made_room {
                // Dead entries (sockets already gone) are skipped.
                loop {
                    let Some((&key, weak)) = w.list.first_key_value() else {
                        return Err(Refused::Busy);
                    };
                    if weak.strong_count() > 0 {
                        self.evict(&mut w, key);
                        break;
                    }
                    w.list.remove(&key);
                }
            }
        }
        w.open += 1;
        if let Some(key) = client {
            w.clients.entry(key).or_default().open += 1;
        }
        let conn = Arc::new(Conn {
            client,
            active: AtomicUsize::new(0),
            upgraded: AtomicBool::new(false),
            waiting_since: AtomicU64::new(self.now_ms()),
            // A new connection is waiting for its first request head.
            head_started: AtomicBool::new(true),
            wait_key: AtomicU64::new(0),
            bodies: Mutex::default(),
            wake: Notify::new(),
            evicted: CancellationToken::new(),
        });
        Self::list(&mut w, &conn);
        drop(w);
        let slot = Slot {
            registry: self.clone(),
            client,
        };
        Ok((conn, slot))
    }

    /// A slot while the cap is not reached.
    fn admit_below_cap(self: &Arc<Self>, peer: SocketAddr) -> Result<(Arc<Conn>, Slot), Refused> {
        if self.lock().open >= self.cap {
            return Err(Refused::Busy);
        }
        self.admit(peer)
    }

    fn list(w: &mut Waiting, conn: &Arc<Conn>) {
        w.next_key += 1;
        let key = w.next_key;
        conn.wait_key.store(key, Ordering::SeqCst);
        w.list.insert(key, Arc::downgrade(conn));
        if let Some(c) = conn.client.and_then(|k| w.clients.get_mut(&k)) {
            c.waiting.insert(key);
        }
    }

    fn unlist(w: &mut Waiting, conn: &Conn) {
        let key = conn.wait_key.swap(0, Ordering::SeqCst);
        if key != 0 {
            w.list.remove(&key);
            if let Some(c) = conn.client.and_then(|k| w.clients.get_mut(&k)) {
                c.waiting.remove(&key);
            }
        }
    }

    /// A request head arrived: the connection is busy.
    fn begin_request(&self, conn: &Conn) {
        if conn.active.fetch_add(1, Ordering::SeqCst) == 0 {
            Self::unlist(&mut self.lock(), conn);
        }
    }

    /// A response was sent (or dropped).
    fn end_request(&self, conn: &Arc<Conn>) {
        if conn.active.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        if conn.upgraded.load(Ordering::SeqCst) || conn.evicted.is_cancelled() {
            return;
        }
        conn.head_started.store(false, Ordering::SeqCst);
        conn.waiting_since.store(self.now_ms(), Ordering::SeqCst);
        {
            let mut w = self.lock();
            if conn.active.load(Ordering::SeqCst) == 0 && conn.wait_key.load(Ordering::SeqCst) == 0
            {
                Self::list(&mut w, conn);
            }
        }
        conn.wake.notify_one();
        self.room.notify_one();
    }

    fn upgraded(&self, conn: &Conn) {
        conn.upgraded.store(true, Ordering::SeqCst);
        Self::unlist(&mut self.lock(), conn);
        conn.wake.notify_one();
    }

    /// Bytes arrived; on a waiting keep-alive connection they start a head.
    fn on_bytes(&self, conn: &Conn) {
        if conn.active.load(Ordering::Relaxed) == 0
            && !conn.head_started.load(Ordering::Relaxed)
            && !conn.upgraded.load(Ordering::Relaxed)
        {
            conn.waiting_since.store(self.now_ms(), Ordering::SeqCst);
            conn.head_started.store(true, Ordering::SeqCst);
            conn.wake.notify_one();
        }
    }

    /// Watches an HTTP/2 response body of `conn`.
    fn watch_body(self: &Arc<Self>, conn: &Conn) -> (Arc<AtomicU64>, Arc<Registry>) {
        let handed = Arc::new(AtomicU64::new(0));
        let mut bodies = conn.bodies.lock().unwrap_or_else(|p| p.into_inner());
        bodies.retain(|b| b.strong_count() > 0);
        bodies.push(Arc::downgrade(&handed));
        drop(bodies);
        conn.wake.notify_one();
        (handed, self.clone())
    }

    /// Whether an HTTP/2 response of `conn` has waited for the client's
    /// flow-control window for longer than the write-stall timeout; `None`
    /// when none is watched.
    fn body_stalled(&self, conn: &Conn) -> Option<bool> {
        let bodies = conn.bodies.lock().unwrap_or_else(|p| p.into_inner());
        let mut watched = false;
        let mut oldest = u64::MAX;
        for handed in bodies.iter().filter_map(Weak::upgrade) {
            watched = true;
            match handed.load(Ordering::SeqCst) {
                0 => {}
                at => oldest = oldest.min(at),
            }
        }
        let stall = u64::try_from(self.limits.write_stall_timeout.as_millis()).unwrap_or(u64::MAX);
        watched.then(|| oldest != u64::MAX && self.now_ms().saturating_sub(oldest) >= stall)
    }

    /// When a waiting connection times out; `None` while it is busy.
    fn deadline(&self, conn: &Conn) -> Option<tokio::time::Instant> {
        if conn.active.load(Ordering::SeqCst) > 0 || conn.upgraded.load(Ordering::SeqCst) {
            return None;
        }
        let since = self.epoch + Duration::from_millis(conn.waiting_since.load(Ordering::SeqCst));
        let limit = if conn.head_started.load(Ordering::SeqCst) {
            self.limits.header_timeout
        } else {
            self.limits.idle_timeout
        };
        Some(tokio::time::Instant::from_std(since + limit))
    }
}

/// A connection's place under the cap, given back when dropped.
struct Slot {
    registry: Arc<Registry>,
    client: Option<ClientKey>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let mut w = self.registry.lock();
            w.open -= 1;
            if let Some(key) = self.client {
                if let Some(c) = w.clients.get_mut(&key) {
                    c.open = c.open.saturating_sub(1);
                    if c.open == 0 && c.waiting.is_empty() {
                        w.clients.remove(&key);
                    }
                }
            }
        }
        self.registry.room.notify_one();
    }
}

/// The socket of a connection: notes incoming bytes and holds the slot, for
/// as long as the socket lives (also inside an upgraded stream).
struct MeteredStream {
    inner: TcpStream,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
    _slot: Slot,
}

impl Drop for MeteredStream {
    fn drop(&mut self) {
        Registry::unlist(&mut self.registry.lock(), &self.conn);
    }
}

impl AsyncRead for MeteredStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.registry.on_bytes(&self.conn);
        }
        polled
    }
}

impl AsyncWrite for MeteredStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Marks a request in progress until its response body is dropped.
struct InProgress {
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.registry.end_request(&self.conn);
    }
}

/// Whether an `accept` error is about that one connection (it went away
/// before it was accepted) rather than the process.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Rate-limited warnings about `accept` failing.
struct AcceptErrors {
    last_log: Option<Instant>,
    suppressed: u64,
}

impl AcceptErrors {
    fn note(&mut self, e: &io::Error, backoff: Duration) {
        let due = self
            .last_log
            .is_none_or(|at| at.elapsed() >= ACCEPT_LOG_INTERVAL);
        if due {
            tracing::warn!(
                error = %e,
                failures_since_last_warning = self.suppressed,
                backoff_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
                "cannot accept connections (out of file descriptors?); backing off; raise the open-files limit (ulimit -n) or lower --max-connections"
            );
            self.last_log = Some(Instant::now());
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
    }
}

/// What [`peek_head`] saw of a new connection's first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// A whole request head (or the HTTP/2 preface) is already there.
    Complete,
    /// Some bytes, not a whole head.
    Partial,
    /// Nothing yet.
    Empty,
    /// The connection is gone.
    Closed,
}

/// Looks at what a new connection has sent, without taking it from the
/// socket and without waiting. Finding nothing clears the socket's read
/// readiness, so that `readable()` then waits for bytes.
fn peek_head(stream: &TcpStream) -> Head {
    use rustix::net::{recv, RecvFlags};
    let mut buf = [0u8; PEEK_BYTES];
    let peeked = stream.try_io(tokio::io::Interest::READABLE, || {
        recv(stream, &mut buf[..], RecvFlags::PEEK | RecvFlags::DONTWAIT)
            .map(|(n, _)| n)
            .map_err(io::Error::from)
    });
    match peeked {
        Ok(0) => Head::Closed,
        Ok(n) if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") => Head::Complete,
        Ok(_) => Head::Partial,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Head::Empty,
        Err(_) => Head::Closed,
    }
}

/// Has the kernel abort the connection when what it sends goes unread for
/// `timeout` (`TCP_USER_TIMEOUT`): data unacknowledged for that long, or a
/// zero window (the client stopped reading) that stays shut for that long
/// while there is data to send. The socket then fails, which ends the
/// connection (an upgraded one too) and frees its slot. A client that reads,
/// however slowly, opens its window again and is never cut, nor is a quiet
/// stream, which has nothing outstanding.
fn stall_timeout(stream: &TcpStream, timeout: Duration) {
    let ms = u32::try_from(timeout.as_millis())
        .unwrap_or(u32::MAX)
        .max(1);
    if let Err(e) = rustix::net::sockopt::set_tcp_user_timeout(stream, ms) {
        tracing::debug!(error = %e, "could not set the write-stall timeout (TCP_USER_TIMEOUT) of a connection");
    }
}

/// What every connection task needs.
#[derive(Clone)]
struct Acceptor {
    registry: Arc<Registry>,
    tracker: TaskTracker,
    router: Router,
    shutdown: CancellationToken,
    /// New connections at the cap waiting for their first bytes.
    pending: Arc<Mutex<Pending>>,
}

/// New connections at the cap waiting for their request head, oldest
/// first. When full, the oldest is closed to make room: under a flood a
/// connection waits here only as long as the flood takes to send
/// [`MAX_PENDING`] more, which a client sending its request right after
/// connecting needs far less than.
#[derive(Default)]
struct Pending {
    next_id: u64,
    queue: std::collections::VecDeque<(u64, CancellationToken)>,
    /// Closed to make room for newer ones.
    evicted: u64,
}

impl Pending {
    /// Takes a place, closing the oldest waiting connection if all are
    /// taken.
    fn enter(&mut self) -> (u64, CancellationToken) {
        if self.queue.len() >= MAX_PENDING {
            if let Some((_, oldest)) = self.queue.pop_front() {
                oldest.cancel();
                self.evicted += 1;
            }
        }
        self.next_id += 1;
        let token = CancellationToken::new();
        self.queue.push_back((self.next_id, token.clone()));
        (self.next_id, token)
    }

    fn leave(&mut self, id: u64) {
        if let Some(at) = self.queue.iter().position(|(i, _)| *i == id) {
            self.queue.remove(at);
        }
    }
}

impl Acceptor {
    /// Serves a connection that got a slot.
    fn serve(&self, stream: TcpStream, peer: SocketAddr, conn: Arc<Conn>, slot: Slot) {
        let _ = stream.set_nodelay(true);
        stall_timeout(&stream, self.registry.limits.write_stall_timeout);
        self.tracker.spawn(connection(
            MeteredStream {
                inner: stream,
                conn: conn.clone(),
                registry: self.registry.clone(),
                _slot: slot,
            },
            peer,
            conn,
            self.registry.clone(),
            self.router.clone(),
            self.shutdown.clone(),
        ));
    }

    /// Gives a connection with a whole request a slot: the longest-waiting
    /// connection's, or — when every slot is busy — the first one freed
    /// within the header timeout. `false` if none came free (it is closed).
    async fn admit_waiting(&self, stream: TcpStream, peer: SocketAddr) -> bool {
        let until = tokio::time::Instant::now() + self.registry.limits.header_timeout;
        loop {
            let room = self.registry.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.registry.admit(peer) {
                Ok((conn, slot)) => {
                    self.serve(stream, peer, conn, slot);
                    return true;
                }
                Err(Refused::AddressFull) => {
                    self.registry.note_refused(peer);
                    return false;
                }
                Err(Refused::Busy) => {}
            }
            tokio::select! {
                () = &mut room => {}
                () = tokio::time::sleep_until(until) => {
                    tracing::debug!(client = %peer, "no connection slot came free; closed");
                    return false;
                }
                () = self.shutdown.cancelled() => return false,
            }
        }
    }

    /// A new connection at the cap that has sent nothing yet: it has
    /// [`FIRST_BYTES_GRACE`] for a whole request head (unless newer ones
    /// push it out of [`Pending`]), then gets a slot as in
    /// [`Self::admit_waiting`] or is closed.
    async fn admit_when_sent(
        self,
        stream: TcpStream,
        peer: SocketAddr,
        (id, evicted): (u64, CancellationToken),
    ) {
        let deadline = tokio::time::Instant::now() + FIRST_BYTES_GRACE;
        let head = loop {
            let head = peek_head(&stream);
            if !matches!(head, Head::Empty | Head::Partial)
                || tokio::time::Instant::now() >= deadline
            {
                break head;
            }
            let wait = async {
                if head == Head::Empty {
                    let _ = stream.readable().await;
                } else {
                    // Readable already: look again a little later.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            tokio::select! {
                () = wait => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = evicted.cancelled() => break Head::Closed,
                () = self.shutdown.cancelled() => break Head::Closed,
            }
        };
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .leave(id);
        if head == Head::Complete {
            self.admit_waiting(stream, peer).await;
        }
    }
}

/// The listener's backlog: connections the kernel completes before they
/// are accepted (capped by `net.core.somaxconn`). A long one absorbs bursts.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds the listening socket with a long backlog.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How much of a new connection's first bytes is looked at, at the cap.
const PEEK_BYTES: usize = 16 * 1024;
/// How long a new connection at the cap may take to send its request head.
const FIRST_BYTES_GRACE: Duration = Duration::from_millis(250);
/// Most new connections at the cap waiting for their first bytes at once;
/// more close the longest-waiting of them.
const MAX_PENDING: usize = 64;

/// Serves `router` on `listener` under `limits` until `shutdown`; then
/// stops accepting, lets each connection finish its request in progress
/// (idle ones close at once) and returns when all have closed.
///
/// Below the cap every connection is served. At the cap a new connection
/// is looked at before anything is spent on it: one whose request head has
/// arrived whole takes the slot of the longest-waiting connection; one that
/// has sent nothing yet gets a short grace for it (a few at a time, the
/// longest-waiting of them closed to make room for a newer one); any
/// other is closed at once, so that a flood costs an `accept` and a `close`
/// per connection and the listener's backlog keeps moving.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let registry = Arc::new(Registry::new(limits));
    let acceptor = Acceptor {
        registry: registry.clone(),
        tracker: TaskTracker::new(),
        router,
        shutdown: shutdown.clone(),
        pending: Arc::new(Mutex::new(Pending::default())),
    };
    let mut backoff = BACKOFF_START;
    let mut errors = AcceptErrors {
        last_log: None,
        suppressed: 0,
    };
    let mut refused: u64 = 0;
    'accept: loop {
        // Wait (in the kernel's backlog) while every slot holds a request.
        loop {
            let room = registry.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if registry.has_room() {
                break;
            }
            tokio::select! {
                () = &mut room => {}
                () = shutdown.cancelled() => break 'accept,
            }
        }
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                backoff = BACKOFF_START;
                a
            }
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                errors.note(&e, backoff);
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = shutdown.cancelled() => break,
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        // An address that holds its share, all of it busy, gets nothing
        // more: not a slot, not a look at what it sent.
        if registry.address_full(peer.ip()) {
            registry.note_refused(peer);
            drop(stream);
            continue;
        }
        match registry.admit_below_cap(peer) {
            Ok((conn, slot)) => {
                acceptor.serve(stream, peer, conn, slot);
                continue;
            }
            Err(Refused::AddressFull) => {
                registry.note_refused(peer);
                drop(stream);
                continue;
            }
            Err(Refused::Busy) => {}
        }
        match peek_head(&stream) {
            // Every slot may have become busy since the check: this one
            // waits for a slot (no more are accepted meanwhile).
            Head::Complete => {
                if !acceptor.admit_waiting(stream, peer).await && shutdown.is_cancelled() {
                    break;
                }
            }
            Head::Empty => {
                let place = acceptor
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .enter();
                acceptor
                    .tracker
                    .spawn(acceptor.clone().admit_when_sent(stream, peer, place));
            }
            _ => {
                refused += 1;
                drop(stream);
            }
        }
    }
    drop(listener);
    let evicted = registry.evictions.load(Ordering::Relaxed);
    refused += acceptor
        .pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .evicted;
    if evicted > 0 || refused > 0 {
        tracing::info!(
            evicted,
            refused,
            "at the connection cap: waiting connections closed to make room, new ones without a whole request refused"
        );
    }
    let refused_per_ip = registry.refused_per_ip.load(Ordering::Relaxed);
    if refused_per_ip > 0 {
        tracing::info!(
            refused_per_ip,
            per_ip = registry.per_ip,
            "new connections closed because their address held its share of the connection cap"
        );
    }
    acceptor.tracker.close();
    acceptor.tracker.wait().await;
    Ok(())
}

/// Serves one connection: HTTP/1.1 (with upgrades) or HTTP/2, the peer's
/// address as `ConnectInfo`, and the waiting timeouts.
async fn connection(
    io: MeteredStream,
    peer: SocketAddr,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
    router: Router,
    shutdown: CancellationToken,
) {
    let service = {
        let conn = conn.clone();
        let registry = registry.clone();
        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            registry.begin_request(&conn);
            let guard = InProgress {
                conn: conn.clone(),
                registry: registry.clone(),
            };
            let version = req.version();
            let cut = Arc::new(AtomicBool::new(false));
            let read = Arc::new(AtomicBool::new(false));
            let mut req = req.map(|body| {
                Body::new(PacedBody::new(
                    body,
                    &registry.limits,
                    cut.clone(),
                    read.clone(),
                ))
            });
            req.extensions_mut().insert(ConnectInfo(peer));
            let router = router.clone();
            async move {
                let mut response = router.oneshot(req).await.unwrap_or_else(|e| match e {});
                if cut.load(Ordering::SeqCst) {
                    response = too_slow(&guard.registry.limits, version);
                }
                if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    guard.registry.upgraded(&guard.conn);
                } else if version < axum::http::Version::HTTP_2
                    && (response.status().is_client_error() || response.status().is_server_error())
                    && !read.load(Ordering::SeqCst)
                {
                    // Refused before its body was read: the rest of the body
                    // is not read, so the connection may close after this
                    // answer; the client is told so rather than finding out
                    // on its next request.
                    response.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                }
                // HTTP/2 flow control can hold a response back without the
                // socket ever stalling: its body is watched instead.
                let handed = (version == axum::http::Version::HTTP_2
                    && response.status() != StatusCode::SWITCHING_PROTOCOLS)
                    .then(|| guard.registry.watch_body(&guard.conn));
                // The request is in progress until its body is sent or dropped.
                Ok::<_, Infallible>(response.map(|inner| {
                    Body::new(Outgoing {
                        inner,
                        handed,
                        _in_progress: guard,
                    })
                }))
            }
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // HTTP/2 WebSockets need the CONNECT protocol.
    builder.http2().enable_connect_protocol();
    let served = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(served);
    let mut closing = false;
    let mut body_check = tokio::time::interval(
        (registry.limits.write_stall_timeout / 4).max(Duration::from_millis(100)),
    );
    body_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let wake = conn.wake.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        let deadline = registry.deadline(&conn);
        tokio::select! {
            result = served.as_mut() => {
                if let Err(e) = result {
                    tracing::trace!(client = %peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut wake => {}
            () = conn.evicted.cancelled() => {
                tracing::debug!(client = %peer, "connection closed to make room for a new one");
                return;
            }
            () = sleep_until(deadline) => {
                if registry.deadline(&conn).is_some_and(|d| d <= tokio::time::Instant::now()) {
                    tracing::debug!(
                        client = %peer,
                        head = conn.head_started.load(Ordering::SeqCst),
                        "connection timed out waiting for a request"
                    );
                    return;
                }
            }
            _ = body_check.tick(), if registry.body_stalled(&conn).is_some() => {
                if registry.body_stalled(&conn) == Some(true) {
                    tracing::debug!(
                        client = %peer,
                        "an HTTP/2 response waited for the client's flow-control window past the write-stall timeout; connection closed"
                    );
                    return;
                }
            }
            () = shutdown.cancelled(), if !closing => {
                closing = true;
                served.as_mut().graceful_shutdown();
            }
        }
    }
}

/// A response body on its way out: it marks its request in progress until
/// it is sent or dropped, and on HTTP/2 notes when it handed a frame that
/// the connection has not yet asked to follow (it asks once the client's
/// flow-control window lets the frame out).
struct Outgoing {
    inner: Body,
    handed: Option<(Arc<AtomicU64>, Arc<Registry>)>,
    _in_progress: InProgress,
}

impl hyper::body::Body for Outgoing {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Some((handed, registry)) = &this.handed {
            let at = match &polled {
                Poll::Ready(Some(Ok(frame))) if frame.is_data() => registry.now_ms().max(1),
                _ => 0,
            };
            handed.store(at, Ordering::SeqCst);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that must keep arriving: it starts with an allowance of
/// `body_timeout`, which waiting for the client uses up and every byte that
/// arrives adds `1 / body_min_rate` s back to (never above `body_timeout`).
/// Only time spent waiting for the client counts, not time the handler
/// takes between reads. When the allowance is gone the body fails and
/// `cut` is set, so that the request is answered 408.
struct PacedBody {
    inner: hyper::body::Incoming,
    min_rate: u64,
    timeout: Duration,
    /// What is left of the allowance.
    left: Duration,
    /// Since when the last read has been waiting for the client.
    waiting_since: Option<tokio::time::Instant>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    cut: Arc<AtomicBool>,
    /// Set once the body has been read to its end.
    read: Arc<AtomicBool>,
}

impl PacedBody {
    fn new(
        inner: hyper::body::Incoming,
        limits: &ConnectionLimits,
        cut: Arc<AtomicBool>,
        read: Arc<AtomicBool>,
    ) -> Self {
        if hyper::body::Body::is_end_stream(&inner) {
            read.store(true, Ordering::SeqCst);
        }
        Self {
            inner,
            min_rate: limits.body_min_rate.max(1),
            timeout: limits.body_timeout,
            left: limits.body_timeout,
            waiting_since: None,
            sleep: None,
            cut,
            read,
        }
    }

    fn too_slow(&self) -> Box<dyn std::error::Error + Send + Sync> {
        self.cut.store(true, Ordering::SeqCst);
        format!(
            "the request body arrived slower than {} bytes/s for {} s",
            self.min_rate,
            self.timeout.as_secs_f64()
        )
        .into()
    }
}

impl hyper::body::Body for PacedBody {
    type Data = axum::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.cut.load(Ordering::SeqCst) {
            return Poll::Ready(Some(Err(this.too_slow())));
        }
        if let Some(since) = this.waiting_since.take() {
            this.left = this.left.saturating_sub(since.elapsed());
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let earned = Duration::from_secs_f64(data.len() as f64 / this.min_rate as f64);
                    this.left = (this.left + earned).min(this.timeout);
                }
                if hyper::body::Body::is_end_stream(&this.inner) {
                    this.read.store(true, Ordering::SeqCst);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                this.read.store(true, Ordering::SeqCst);
                Poll::Ready(None)
            }
            Poll::Pending => {
                if this.left.is_zero() {
                    return Poll::Ready(Some(Err(this.too_slow())));
                }
                let now = tokio::time::Instant::now();
                this.waiting_since = Some(now);
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(now + this.left)));
                sleep.as_mut().reset(now + this.left);
                if sleep.as_mut().poll(cx).is_ready() {
                    this.waiting_since = None;
                    return Poll::Ready(Some(Err(this.too_slow())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The answer to a request whose body came too slowly; on HTTP/1 the
/// connection closes after it (the rest of the body is never read).
fn too_slow(limits: &ConnectionLimits, version: axum::http::Version) -> axum::response::Response {
    let body = serde_json::json!({
        "error": {
            "code": "request_timeout",
            "message": format!(
                "The request body arrived too slowly: the server needs at least {} bytes/s \
                 (after an allowance of {} s); send it faster or in a smaller request",
                limits.body_min_rate,
                limits.body_timeout.as_secs_f64()
            ),
        }
    });
    let mut response = axum::response::Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
    let h = response.headers_mut();
    h.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    if version < axum::http::Version::HTTP_2 {
        h.insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_caps_leave_room_for_other_descriptors() {
        assert_eq!(default_max_connections(1024), 384);
        assert_eq!(default_max_connections(20_000), 8_750);
        assert_eq!(default_max_connections(1 << 20), 65_536);
        assert_eq!(default_max_connections(u64::MAX), 65_536);
        assert_eq!(default_max_connections(256), 16);
        assert_eq!(default_max_connections(0), 16);
    }

    fn registry(cap: usize) -> Arc<Registry> {
        Arc::new(Registry::new(ConnectionLimits {
            max_connections: Some(cap),
            ..ConnectionLimits::default()
        }))
    }

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 40_000)
    }

    #[test]
    fn at_the_cap_the_longest_waiting_connection_makes_room() {
        let r = registry(2);
        let (a, slot_a) = r.admit(peer("10.0.0.1")).unwrap();
        let (b, _slot_b) = r.admit(peer("10.0.0.1")).unwrap();
        // b sends a request: a has waited longest.
        r.begin_request(&b);
        let (c, _slot_c) = r.admit(peer("10.0.0.1")).unwrap();
        assert!(a.evicted.is_cancelled());
        assert!(!b.evicted.is_cancelled() && !c.evicted.is_cancelled());
        // a's socket closes: its slot comes back.
        drop(slot_a);
        assert_eq!(r.lock().open, 2);
        // c is busy too: nothing to evict, no room.
        r.begin_request(&c);
        assert!(!r.has_room());
        assert_eq!(r.admit(peer("10.0.0.1")).err(), Some(Refused::Busy));
        // b's response is sent: b waits (idle) and can make room again.
        r.end_request(&b);
        assert!(r.has_room());
        let (_d, _slot_d) = r.admit(peer("10.0.0.1")).unwrap();
        assert!(b.evicted.is_cancelled());
        assert_eq!(r.evictions.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_full_pending_set_closes_its_oldest_for_a_new_connection() {
        let mut p = Pending::default();
        let places: Vec<_> = (0..MAX_PENDING).map(|_| p.enter()).collect();
        assert!(places.iter().all(|(_, t)| !t.is_cancelled()));
        let (newest, token) = p.enter();
        assert!(places[0].1.is_cancelled(), "the oldest made room");
        assert!(places[1..].iter().all(|(_, t)| !t.is_cancelled()));
        assert!(!token.is_cancelled());
        assert_eq!((p.queue.len(), p.evicted), (MAX_PENDING, 1));
        // One that got its head leaves; the next newcomer evicts no one.
        p.leave(places[5].0);
        p.leave(newest);
        let _ = p.enter();
        assert_eq!((p.queue.len(), p.evicted), (MAX_PENDING - 1, 1));
        assert!(!places[1].1.is_cancelled());
    }

    #[test]
    fn busy_and_upgraded_connections_have_no_deadline() {
        let r = registry(10);
        let (a, _slot) = r.admit(peer("10.0.0.1")).unwrap();
        // New: the header clock runs.
        let d = r.deadline(&a).unwrap();
        assert!(d > tokio::time::Instant::now() + Duration::from_secs(9));
        assert!(d <= tokio::time::Instant::now() + Duration::from_secs(10));
        r.begin_request(&a);
        assert!(r.deadline(&a).is_none());
        r.end_request(&a);
        // Idle keep-alive: the idle clock.
        let d = r.deadline(&a).unwrap();
        assert!(d > tokio::time::Instant::now() + Duration::from_secs(59));
        // Bytes of the next head: the header clock again.
        r.on_bytes(&a);
        let d = r.deadline(&a).unwrap();
        assert!(d <= tokio::time::Instant::now() + Duration::from_secs(10));
        r.begin_request(&a);
        r.upgraded(&a);
        r.end_request(&a);
        assert!(r.deadline(&a).is_none());
        assert!(
            r.lock().list.is_empty(),
            "an upgraded connection is never evicted"
        );
    }

    #[test]
    fn per_address_shares_default_to_an_eighth_with_a_floor() {
        assert_eq!(default_max_connections_per_ip(8750), 1093);
        assert_eq!(default_max_connections_per_ip(256), 64);
        assert_eq!(default_max_connections_per_ip(8), 8);
        let limits = ConnectionLimits {
            max_connections: Some(100),
            max_connections_per_ip: Some(500),
            ..ConnectionLimits::default()
        };
        assert_eq!(limits.effective_max_connections_per_ip(), 100);
    }

    #[test]
    fn one_address_holds_at_most_its_share() {
        let r = Arc::new(Registry::new(ConnectionLimits {
            max_connections: Some(20),
            max_connections_per_ip: Some(3),
            trusted_proxies: vec![IpNet::parse("10.9.0.0/16").unwrap()],
            ..ConnectionLimits::default()
        }));
        let flood = peer("192.0.2.7");
        let mut held: Vec<_> = (0..3).map(|_| r.admit(flood).unwrap()).collect();
        for (c, _) in &held {
            r.begin_request(c);
        }
        // All three busy: the next one is closed, and the accept loop
        // knows before it looks at what it sent.
        assert!(r.address_full(flood.ip()));
        assert_eq!(r.admit(flood).err(), Some(Refused::AddressFull));
        // Other addresses still get slots.
        let (other, _other_slot) = r.admit(peer("198.51.100.1")).unwrap();
        assert!(!other.evicted.is_cancelled());
        // One of the address's own goes idle: a new one of it takes its
        // place, nobody else's.
        r.end_request(&held[0].0);
        assert!(!r.address_full(flood.ip()));
        let (_newer, _newer_slot) = r.admit(flood).unwrap();
        assert!(held[0].0.evicted.is_cancelled());
        assert!(!other.evicted.is_cancelled());
        // The evicted socket closes: its slot comes back to the address.
        let (first, first_slot) = held.remove(0);
        drop(first_slot);
        drop(first);
        assert_eq!(r.lock().clients[&ClientKey::of(flood.ip())].open, 3);
        // An IPv6 /64 is one address; a trusted proxy has no share.
        let v6 = |s: &str| peer(s);
        let _a = r.admit(v6("2001:db8::1")).unwrap();
        let _b = r.admit(v6("2001:db8::2")).unwrap();
        let _c = r.admit(v6("2001:db8::3:4")).unwrap();
        for (c, _) in [&_a, &_b, &_c] {
            r.begin_request(c);
        }
        assert_eq!(
            r.admit(v6("2001:db8::ffff")).err(),
            Some(Refused::AddressFull)
        );
        let proxied: Vec<_> = (0..4).map(|_| r.admit(peer("10.9.1.1")).unwrap()).collect();
        assert_eq!(proxied.len(), 4);
        assert_eq!(
            ClientKey::of("::ffff:192.0.2.7".parse().unwrap()),
            ClientKey::of(flood.ip())
        );
    }
}
