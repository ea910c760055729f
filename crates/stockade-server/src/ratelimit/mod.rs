//! Rate limits: by default 1000 requests per 60 s per client IP and,
//! independently, per credential, on every route that reaches Stockade's
//! API or a sandbox: `/api/v1` (but `/health`), E2B's control plane under
//! `/e2b`, E2B's in-sandbox calls (the `E2b-Sandbox-Id` header,
//! `49983-{id}.DOMAIN` and `49999-{id}.DOMAIN`), the prime gateway (`/gateway/…`) and the port
//! proxy (`/proxy/{id}/{port}/…` and `{port}-{id}.DOMAIN`).
//!
//! The credential is the one the route authenticates with: an API token
//! (`Authorization: Bearer`, E2B's `X-API-Key`), the dashboard's session,
//! or a sandbox token (`X-Access-Token`, `X-Stockade-Token`,
//! `e2b-traffic-access-token`, the `stockade_token` parameter or cookie, a
//! gateway bearer). It is keyed by its SHA-256, never the plaintext.
//!
//! A request counts against both buckets; it is refused (429, `Retry-After`)
//! when either is exhausted, and then counts against neither. The refusal
//! has the shape of its front-end: Stockade's `{"error":{"code":
//! "rate_limited",…}}` for the API and the proxy, E2B's `{"code":429,
//! "message"}` under `/e2b` and for in-sandbox calls, the gateway's own
//! errors there. Each bucket is a fixed window that opens with its key's
//! first request. Stockade's own answers carry `RateLimit-Limit`,
//! `RateLimit-Remaining` and `RateLimit-Reset` (seconds) of the bucket
//! closest to its limit; answers of a sandbox's servers are left as they are.
//!
//! Requests without valid credentials are guarded too: per client,
//! failed authentications (any 401: a bad API token, sandbox token or
//! metrics token) and `/metrics` scrapes (which read the database) share a
//! third bucket of the per-IP size. Once it is used up, everything from that
//! client but `/api/v1/health` is refused until its window ends: the proxy
//! never checks another token for it. `/api/v1/health` itself is never
//! limited (load balancers poll it); it answers from a cache instead.
//!
//! The client is the TCP peer; `X-Forwarded-For` is believed only from
//! configured trusted proxies. IPv6 clients are counted per /64, which is what
//! one host can trivially rotate through. Some addresses stand for many
//! tenants at once: sandboxes' calls to this server leave through the
//! Docker host (its bridge, its NAT), so they all come from this host's own
//! addresses (loopback aside), or from addresses the operator names. From
//! those, a "client" is the address together with the credential presented:
//! one tenant's sandbox using up its window, or failing to authenticate,
//! holds back only its own credential, never another tenant's sandboxes or
//! the host itself, while the per-credential buckets still hold.
//!
//! Memory is bounded: at most `max_tracked` keys; expired windows are
//! dropped first, then the oldest.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::extract::bearer_token;
use stockade_service::metrics::Metrics;

pub mod settings;
pub use settings::{IpNet, Limit, LimitError, RateLimitConfig};

/// The front-ends of the server, which limits apply to a request and in
/// which shape it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// Stockade's own API under `/api/v1` (but `/health`).
    Api,
    /// E2B's control plane under `/e2b`.
    E2b,
    /// E2B's in-sandbox calls: the `E2b-Sandbox-Id` header, `49983-{id}.DOMAIN`
    /// or `49999-{id}.DOMAIN`.
    Envd,
    /// The prime gateway, `/gateway/…`.
    Gateway,
    /// The port proxy, `/proxy/{id}/{port}/…` or `{port}-{id}.DOMAIN`.
    Proxy,
    /// `GET /metrics`: its scrapes count in the unauthenticated bucket only.
    Metrics,
    /// `/api/v1/health`: never limited.
    Health,
    /// The dashboard's page and assets, unknown routes: only the
    /// unauthenticated bucket applies.
    Other,
}

impl Front {
    /// Whether the per-client and per-credential buckets apply.
    fn limited(self) -> bool {
        matches!(
            self,
            Self::Api | Self::E2b | Self::Envd | Self::Gateway | Self::Proxy
        )
    }

    /// Whether successful answers come from Stockade itself (and carry the
    /// `RateLimit-*` headers), not from a server in a sandbox.
    fn answers_itself(self) -> bool {
        matches!(self, Self::Api | Self::E2b | Self::Gateway)
    }
}

/// What the limiter makes of a request, once, ahead of everything.
#[derive(Debug, Clone)]
struct Classified {
    front: Front,
    /// Taken before the routes, by the host-form proxy or E2B's in-sandbox
    /// routing, so limited ahead of them.
    routed_early: bool,
    /// The SHA-256 of the credential the front-end authenticates it with.
    credential: Option<String>,
}

/// Whom a per-client bucket counts: an address (IPv6 by its /64) and, for
/// an address that stands for many tenants' sandboxes, the credential
/// presented from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    ip: IpAddr,
    credential: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Ip(ClientKey),
    Token(String),
    /// Failed authentications and metrics scrapes of a client.
    Unauthenticated(ClientKey),
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    count: u32,
}

/// Where one bucket stands for one request.
#[derive(Debug, Clone, Copy)]
struct Standing {
    bucket: &'static str,
    limit: Limit,
    /// Requests made in the window, this one included if it is let through.
    used: u32,
    reset: Duration,
}

impl Standing {
    fn remaining(&self) -> u32 {
        self.limit.requests.saturating_sub(self.used)
    }
}

/// Which client addresses are this host's own (loopback aside): sandboxes'
/// calls that leave through the host's bridge or NAT come from them. An
/// address is the host's when a socket can be bound to it; where the kernel
/// lets any address be bound (`ip_nonlocal_bind`) that test says nothing,
/// and no address of that family counts.
struct OwnAddresses {
    v4: bool,
    v6: bool,
    seen: Mutex<HashMap<IpAddr, (bool, Instant)>>,
}

/// How long an answer of [`OwnAddresses`] is kept.
const OWN_ADDRESS_TTL: Duration = Duration::from_secs(60);
/// Most answers of [`OwnAddresses`] kept at once.
const OWN_ADDRESS_CACHE: usize = 1024;

fn can_bind(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

impl OwnAddresses {
    fn new() -> Self {
        // Two documentation addresses of different blocks: a host owning
        // both is one that binds anything.
        let binds_anything = |a: IpAddr, b: IpAddr| can_bind(a) && can_bind(b);
        Self {
            v4: !binds_anything(
                IpAddr::from([198, 51, 100, 254]),
                IpAddr::from([203, 0, 113, 254]),
            ),
            v6: !binds_anything(
                IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xfe]),
                IpAddr::from([0x3fff, 0, 0, 0, 0, 0, 0, 0xfe]),
            ),
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn contains(&self, ip: IpAddr, now: Instant) -> bool {
        let ip = stockade_core::net::canonical(ip);
        let testable = if ip.is_ipv4() { self.v4 } else { self.v6 };
        if !testable || ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() {
            return false;
        }
        let lock = || self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((own, at)) = lock().get(&ip) {
            if now.duration_since(*at) < OWN_ADDRESS_TTL {
                return *own;
            }
        }
        let own = can_bind(ip);
        let mut seen = lock();
        if seen.len() >= OWN_ADDRESS_CACHE {
            seen.clear();
        }
        seen.insert(ip, (own, now));
        own
    }
}

/// The buckets of one server.
pub struct RateLimiter {
    config: RateLimitConfig,
    /// The host-form proxy's domain, to tell its requests from others.
    proxy_domain: Option<String>,
    own: OwnAddresses,
    windows: Mutex<HashMap<Key, Window>>,
    metrics: Arc<Metrics>,
}

/// What [`RateLimiter::check`] decided.
#[derive(Debug)]
struct Decision {
    allowed: bool,
    /// The bucket to report in the headers.
    report: Option<Standing>,
    /// When refused: seconds until every exhausted bucket has room again.
    retry_after: Duration,
    /// When refused: the exhausted bucket.
    exhausted: &'static str,
}

fn secs_ceil(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The bucket key of a client address: IPv4 (and IPv4-mapped IPv6) as is,
/// IPv6 by its /64.
fn ip_key(ip: IpAddr) -> IpAddr {
    match stockade_core::net::canonical(ip) {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        v4 => v4,
    }
}

impl RateLimiter {
    /// The limiter of `config`; `None` lets everything through.
    pub fn new(config: Option<RateLimitConfig>, metrics: Arc<Metrics>) -> Self {
        let config = config.unwrap_or(RateLimitConfig {
            per_ip: None,
            per_token: None,
            trusted_proxies: Vec::new(),
            sandbox_clients: Vec::new(),
            max_tracked: 0,
        });
        Self {
            config,
            proxy_domain: None,
            own: OwnAddresses::new(),
            windows: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// With the host-form proxy's domain (see [`crate::ServerConfig::proxy_domain`]).
    pub fn with_proxy_domain(mut self, domain: Option<String>) -> Self {
        self.proxy_domain = domain;
        self
    }

    /// The client of a request: the peer, or — when the peer is a trusted
    /// proxy — the last address in `X-Forwarded-For` that is not one.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let trusted = |ip: IpAddr| self.config.trusted_proxies.iter().any(|n| n.contains(ip));
        if !trusted(peer) {
            return stockade_core::net::canonical(peer);
        }
        let mut client = stockade_core::net::canonical(peer);
        let hops = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect::<Vec<_>>();
        for hop in hops.iter().rev() {
            match hop.parse::<IpAddr>() {
                Ok(ip) => {
                    client = stockade_core::net::canonical(ip);
                    if !trusted(client) {
                        break;
                    }
                }
                // Garbage: believe nothing further left.
                Err(_) => break,
            }
        }
        client
    }

    /// Whether `ip` stands for many tenants' sandboxes: one of this host's
    /// own addresses, or a configured one.
    fn shared(&self, ip: IpAddr, now: Instant) -> bool {
        self.config.sandbox_clients.iter().any(|n| n.contains(ip)) || self.own.contains(ip, now)
    }

    /// The per-client key of a request from `ip` presenting `credential`.
    fn client_key(&self, ip: IpAddr, credential: Option<&str>, now: Instant) -> ClientKey {
        ClientKey {
            ip: ip_key(ip),
            credential: credential
                .filter(|_| self.shared(ip, now))
                .map(str::to_owned),
        }
    }

    /// Counts a request of `client` and `token_hash` if both buckets have room.
    fn check(
        &self,
        client: Option<ClientKey>,
        token_hash: Option<String>,
        now: Instant,
    ) -> Decision {
        let mut keys: Vec<(&'static str, Key, Limit)> = Vec::with_capacity(2);
        if let (Some(client), Some(limit)) = (client, self.config.per_ip) {
            keys.push(("ip", Key::Ip(client), limit));
        }
        if let (Some(hash), Some(limit)) = (token_hash, self.config.per_token) {
            keys.push(("token", Key::Token(hash), limit));
        }
        self.decide(keys, now, true)
    }

    /// The unauthenticated bucket of `client`: refused when used up; with
    /// `count`, the request counts if it is let through.
    fn check_unauthenticated(
        &self,
        client: &ClientKey,
        count: bool,
        now: Instant,
    ) -> Option<Decision> {
        let limit = self.config.per_ip?;
        Some(self.decide(
            vec![(UNAUTHENTICATED, Key::Unauthenticated(client.clone()), limit)],
            now,
            count,
        ))
    }

    /// Counts a failed authentication of `client`, whatever the bucket holds.
    fn count_failure(&self, client: ClientKey, now: Instant) {
        let Some(limit) = self.config.per_ip else {
            return;
        };
        let key = Key::Unauthenticated(client);
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let w = self.current_window(&mut windows, key, limit.window, limit.window, now);
        w.count = w.count.saturating_add(1);
    }

    /// The window `key` counts in: a new one when it has none (first
    /// forgetting windows older than `evict_after` when as many keys as
    /// may be are tracked) or when `window` has passed since it started.
    fn current_window<'a>(
        &self,
        windows: &'a mut HashMap<Key, Window>,
        key: Key,
        window: Duration,
        evict_after: Duration,
        now: Instant,
    ) -> &'a mut Window {
        if !windows.contains_key(&key) && windows.len() >= self.config.max_tracked.max(1) {
            evict(windows, evict_after, now, self.config.max_tracked);
        }
        let fresh = Window {
            start: now,
            count: 0,
        };
        let w = windows.entry(key).or_insert(fresh);
        if now.duration_since(w.start) >= window {
            *w = fresh;
        }
        w
    }

    /// Refuses when one of `keys` is used up; otherwise counts the request
    /// against all of them (with `count`).
    fn decide(&self, keys: Vec<(&'static str, Key, Limit)>, now: Instant, count: bool) -> Decision {
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut standings = Vec::with_capacity(keys.len());
        for (bucket, key, limit) in &keys {
            let (used, start) = match windows.get(key) {
                Some(w) if now.duration_since(w.start) < limit.window => (w.count, w.start),
                _ => (0, now),
            };
            standings.push(Standing {
                bucket,
                limit: *limit,
                used,
                reset: limit.window.saturating_sub(now.duration_since(start)),
            });
        }
        let exhausted: Vec<&Standing> = standings
            .iter()
            .filter(|s| s.used >= s.limit.requests)
            .collect();
        if let Some(first) = exhausted.first() {
            let retry_after = exhausted.iter().map(|s| s.reset).max().unwrap_or_default();
            let report = exhausted.iter().max_by_key(|s| s.reset).copied().copied();
            return Decision {
                allowed: false,
                report,
                retry_after,
                exhausted: first.bucket,
            };
        }
        if !count {
            return Decision {
                allowed: true,
                report: None,
                retry_after: Duration::ZERO,
                exhausted: "",
            };
        }
        let longest = keys
            .iter()
            .map(|(_, _, l)| l.window)
            .max()
            .unwrap_or_default();
        for ((_, key, limit), standing) in keys.into_iter().zip(standings.iter_mut()) {
            let w = self.current_window(&mut windows, key, limit.window, longest, now);
            w.count += 1;
            standing.used = w.count;
        }
        // Report the bucket closest to its limit.
        let report = standings
            .iter()
            .min_by_key(|s| (s.remaining(), std::cmp::Reverse(s.reset)))
            .copied();
        Decision {
            allowed: true,
            report,
            retry_after: Duration::ZERO,
            exhausted: "",
        }
    }

    /// Which front-end a request goes to and the credential it presents
    /// there, decided as the router does: the host form first, then the
    /// `E2b-Sandbox-Id` header, then the path.
    fn classify(&self, req: &Request) -> Classified {
        let headers = req.headers();
        let uri = req.uri();
        let label = self.proxy_domain.as_deref().and_then(|domain| {
            crate::proxy::request_host(headers, uri)
                .and_then(|host| crate::proxy::sandbox_label(&host, domain))
        });
        if let Some(label) = label {
            let port = label
                .split_once('-')
                .and_then(|(port, _)| crate::proxy::parse_port_segment(port).ok());
            return if port.is_some_and(crate::compat::envd::is_in_sandbox_port) {
                Classified::early(Front::Envd, envd_credential(headers))
            } else {
                Classified::early(Front::Proxy, proxy_credential(headers, uri))
            };
        }
        if headers.contains_key(crate::compat::envd::SANDBOX_ID_HEADER) {
            return Classified::early(Front::Envd, envd_credential(headers));
        }
        let path = uri.path();
        let (front, credential) = if path == "/api/v1/health" {
            (Front::Health, None)
        } else if path.starts_with("/api/v1/") {
            (Front::Api, api_credential(headers))
        } else if path == crate::compat::envd::E2B_PREFIX || path.starts_with("/e2b/") {
            (Front::E2b, e2b_credential(headers))
        } else if path.starts_with("/gateway/") {
            (Front::Gateway, bearer_token(headers).and_then(hashed))
        } else if path.starts_with("/proxy/") {
            (Front::Proxy, proxy_credential(headers, uri))
        } else if path == "/metrics" {
            (Front::Metrics, bearer_token(headers).and_then(hashed))
        } else {
            (Front::Other, None)
        };
        Classified {
            front,
            routed_early: false,
            credential,
        }
    }

    /// The classification the guard made, or a new one.
    fn classified(&self, req: &Request) -> Classified {
        req.extensions()
            .get::<Classified>()
            .cloned()
            .unwrap_or_else(|| self.classify(req))
    }

    fn off(&self) -> bool {
        self.config.per_ip.is_none() && self.config.per_token.is_none()
    }

    /// The client of a request, when it came over a connection.
    fn client_of(&self, req: &Request) -> Option<IpAddr> {
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| self.client_ip(peer.ip(), req.headers()))
    }

    /// Counts a limited request against its client's and its credential's
    /// buckets, and refuses it past either limit.
    async fn enforce(&self, class: Classified, req: Request, next: Next) -> Response {
        if self.off() || !class.front.limited() {
            return next.run(req).await;
        }
        let now = Instant::now();
        let ip = self.client_of(&req);
        let client = ip.map(|ip| self.client_key(ip, class.credential.as_deref(), now));
        let decision = self.check(client, class.credential.clone(), now);
        if !decision.allowed {
            self.metrics.rate_limited(decision.exhausted);
            let retry = secs_ceil(decision.retry_after).max(1);
            tracing::info!(client.ip = ?ip, front = ?class.front, bucket = decision.exhausted, retry_after_s = retry, "rate limited");
            let message = format!(
                "Too many requests: the {} limit of {} is used up; retry in {retry} s",
                if decision.exhausted == "ip" {
                    "per-client"
                } else {
                    "per-token"
                },
                decision
                    .report
                    .map(|s| s.limit.to_string())
                    .unwrap_or_default(),
            );
            return refusal(class.front, &req, message, retry, decision.report.as_ref());
        }
        let mut response = next.run(req).await;
        if class.front.answers_itself() {
            if let Some(s) = &decision.report {
                set_headers(response.headers_mut(), s);
            }
        }
        response
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.windows.lock().map(|w| w.len()).unwrap_or(0)
    }
}

impl Classified {
    /// A request the host-form proxy or E2B's in-sandbox routing takes.
    fn early(front: Front, credential: Option<String>) -> Self {
        Self {
            front,
            routed_early: true,
            credential,
        }
    }
}

/// Makes room for one more key: drops expired windows, then (if still full)
/// the oldest tenth, so that the next inserts are cheap again.
fn evict(windows: &mut HashMap<Key, Window>, window: Duration, now: Instant, max: usize) {
    windows.retain(|_, w| now.duration_since(w.start) < window);
    if windows.len() < max {
        return;
    }
    let mut starts: Vec<Instant> = windows.values().map(|w| w.start).collect();
    let drop = (max / 10).max(1).min(starts.len());
    let (_, cutoff, _) = starts.select_nth_unstable(drop - 1);
    let cutoff = *cutoff;
    let mut dropped = 0;
    windows.retain(|_, w| {
        if w.start <= cutoff && dropped < drop {
            dropped += 1;
            false
        } else {
            true
        }
    });
}

/// The bucket of failed authentications and metrics scrapes.
const UNAUTHENTICATED: &str = "unauthenticated";

/// The SHA-256 of a presented secret; `None` for an empty one.
fn hashed(secret: &str) -> Option<String> {
    let secret = secret.trim();
    (!secret.is_empty()).then(|| stockade_core::account::hash_token(secret))
}

/// Stockade's API: a bearer token, else the dashboard's session cookie.
fn api_credential(headers: &HeaderMap) -> Option<String> {
    bearer_token(headers)
        .or_else(|| {
            crate::extract::SESSION_COOKIES
                .iter()
                .flat_map(|name| crate::extract::cookie_values(headers, name))
                .find(|v| !v.is_empty())
        })
        .and_then(hashed)
}

/// E2B's control plane: `X-API-Key`, else a bearer token.
fn e2b_credential(headers: &HeaderMap) -> Option<String> {
    match crate::compat::e2b::api_key(headers) {
        Ok(Some(key)) => hashed(key),
        Ok(None) => bearer_token(headers).and_then(hashed),
        Err(_) => None,
    }
}

/// E2B's in-sandbox calls: an API key of the account, else the envd token.
fn envd_credential(headers: &HeaderMap) -> Option<String> {
    crate::compat::envd::presented_credential(headers)
        .as_deref()
        .and_then(hashed)
}

/// The port proxy: the sandbox token, from its header, parameter or cookie.
fn proxy_credential(headers: &HeaderMap, uri: &Uri) -> Option<String> {
    crate::proxy::presented_token(headers, uri.query())
        .as_deref()
        .and_then(hashed)
}

fn set_headers(headers: &mut HeaderMap, s: &Standing) {
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    };
    put("ratelimit-limit", s.limit.requests.to_string());
    put("ratelimit-remaining", s.remaining().to_string());
    put("ratelimit-reset", secs_ceil(s.reset).to_string());
    put(
        "ratelimit-policy",
        format!("{};w={}", s.limit.requests, s.limit.window.as_secs()),
    );
}

/// A 429 in the shape of `front`, with `Retry-After` and the bucket's
/// `RateLimit-*` headers.
fn refusal(
    front: Front,
    req: &Request,
    message: String,
    retry: u64,
    report: Option<&Standing>,
) -> Response {
    let mut response = match front {
        Front::E2b | Front::Envd => {
            crate::compat::e2b::e2b_error(StatusCode::TOO_MANY_REQUESTS, message)
        }
        Front::Gateway => {
            let content_type = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            crate::compat::prime::too_many_requests(req.uri().path(), content_type, message)
        }
        _ => ApiError::TooManyRequests {
            message,
            retry_after_secs: retry,
        }
        .into_response(),
    };
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry));
    if let Some(s) = report {
        set_headers(response.headers_mut(), s);
    }
    response
}

/// Middleware, inside the metrics: the buckets of every limited route
/// that the router reaches (`/api/v1`, `/e2b`, `/gateway`, `/proxy`), so
/// that their 429s are counted by route.
pub async fn limit(State(limiter): State<Arc<RateLimiter>>, req: Request, next: Next) -> Response {
    let class = limiter.classified(&req);
    if class.routed_early {
        return next.run(req).await;
    }
    limiter.enforce(class, req, next).await
}

/// Middleware, ahead of the host-form proxy and E2B's in-sandbox routing:
/// the buckets of the requests those take before the routes.
pub async fn limit_routed_early(
    State(limiter): State<Arc<RateLimiter>>,
    req: Request,
    next: Next,
) -> Response {
    let class = limiter.classified(&req);
    if !class.routed_early {
        return next.run(req).await;
    }
    limiter.enforce(class, req, next).await
}

/// Middleware, outermost: classifies the request for the other limits, and
/// keeps the unauthenticated bucket. Counts `/metrics` scrapes before and
/// 401 answers after; a client whose bucket is used up gets 429 for
/// everything but `/api/v1/health`.
pub async fn guard(
    State(limiter): State<Arc<RateLimiter>>,
    mut req: Request,
    next: Next,
) -> Response {
    if let Some(ip) = limiter.client_of(&req) {
        req.extensions_mut().insert(crate::audit::ClientIp(ip));
    }
    if limiter.off() {
        return next.run(req).await;
    }
    let class = limiter.classify(&req);
    req.extensions_mut().insert(class.clone());
    if limiter.config.per_ip.is_none() || class.front == Front::Health {
        return next.run(req).await;
    }
    let Some(ip) = limiter.client_of(&req) else {
        return next.run(req).await;
    };
    let now = Instant::now();
    let client = limiter.client_key(ip, class.credential.as_deref(), now);
    let scrape = class.front == Front::Metrics;
    if let Some(decision) = limiter.check_unauthenticated(&client, scrape, now) {
        if !decision.allowed {
            limiter.metrics.rate_limited(UNAUTHENTICATED);
            let retry = secs_ceil(decision.retry_after).max(1);
            tracing::info!(client.ip = %ip, front = ?class.front, bucket = UNAUTHENTICATED, retry_after_s = retry, "rate limited");
            let message = format!(
                "Too many requests without valid credentials from this client (failed authentications and metrics scrapes, {} allowed); retry in {retry} s",
                decision
                    .report
                    .map(|s| s.limit.to_string())
                    .unwrap_or_default(),
            );
            return refusal(class.front, &req, message, retry, decision.report.as_ref());
        }
    }
    let response = next.run(req).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        limiter.count_failure(client, now);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter_with(ip: u32, token: u32, sandbox_clients: &[&str]) -> RateLimiter {
        let l = |n| Limit {
            requests: n,
            window: Duration::from_secs(60),
        };
        RateLimiter::new(
            Some(RateLimitConfig {
                per_ip: Some(l(ip)),
                per_token: Some(l(token)),
                trusted_proxies: vec![IpNet::parse("10.0.0.0/8").unwrap()],
                sandbox_clients: sandbox_clients
                    .iter()
                    .map(|n| IpNet::parse(n).unwrap())
                    .collect(),
                max_tracked: 100,
            }),
            Arc::new(Metrics::new()),
        )
        .with_proxy_domain(Some("sandboxes.test".into()))
    }

    fn limiter(ip: u32, token: u32) -> RateLimiter {
        limiter_with(ip, token, &[])
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    /// The per-client key of `addr` without a credential.
    fn at(rl: &RateLimiter, addr: &str) -> Option<ClientKey> {
        Some(rl.client_key(addr.parse().unwrap(), None, Instant::now()))
    }

    #[test]
    fn limits_parse() {
        for (text, requests, secs) in [
            ("1000/60s", 1000, 60),
            ("20/1m", 20, 60),
            ("20/min", 20, 60),
            ("5/2h", 5, 7200),
            (" 7 / 30 ", 7, 30),
        ] {
            let l = Limit::parse(text).unwrap();
            let expected = (requests, Duration::from_secs(secs));
            assert_eq!((l.requests, l.window), expected, "{text}");
        }
        for bad in [
            "", "1000", "0/60s", "10/0s", "x/60s", "10/60y", "10/-1s", "10/48h",
        ] {
            assert!(Limit::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Limit::parse("10/60y").unwrap_err().to_string(),
            "invalid rate limit '10/60y': expected REQUESTS/WINDOW such as 1000/60s, 20/1m or 5000/1h"
        );
        assert_eq!(
            Limit::parse("0/60s").unwrap_err().to_string(),
            "invalid rate limit '0/60s': needs at least 1 request and a window from 1 s to 24 h"
        );
    }

    #[test]
    fn both_buckets_count_and_either_refuses() {
        let rl = limiter(5, 3);
        let now = Instant::now();
        let a = || Some("a".to_owned());
        let here = || at(&rl, "1.2.3.4");
        for i in 0..3 {
            let d = rl.check(here(), a(), now);
            assert!(d.allowed, "{i}");
        }
        // Token a is used up; refused requests count nowhere.
        let d = rl.check(here(), a(), now);
        assert!(!d.allowed);
        assert_eq!(d.exhausted, "token");
        assert_eq!(d.retry_after, Duration::from_secs(60));
        // Token b from the same IP has two left of the IP's five.
        assert!(rl.check(here(), Some("b".into()), now).allowed);
        let d = rl.check(here(), Some("b".into()), now);
        assert!(d.allowed);
        assert_eq!(d.report.unwrap().remaining(), 0);
        assert_eq!(d.report.unwrap().bucket, "ip");
        let d = rl.check(here(), Some("b".into()), now);
        assert_eq!((d.allowed, d.exhausted), (false, "ip"));
        // Another IP with token a: still refused (the token bucket).
        assert!(!rl.check(at(&rl, "5.6.7.8"), a(), now).allowed);
        // A new window resets.
        let later = now + Duration::from_secs(61);
        assert!(rl.check(here(), a(), later).allowed);
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_v4_as_v4() {
        let rl = limiter(2, 100);
        let now = Instant::now();
        assert!(rl.check(at(&rl, "2001:db8::1"), None, now).allowed);
        assert!(rl.check(at(&rl, "2001:db8::ffff:2"), None, now).allowed);
        assert!(!rl.check(at(&rl, "2001:db8::3"), None, now).allowed);
        assert!(rl.check(at(&rl, "2001:db8:0:1::1"), None, now).allowed);
        assert!(rl.check(at(&rl, "::ffff:9.9.9.9"), None, now).allowed);
        assert!(rl.check(at(&rl, "9.9.9.9"), None, now).allowed);
        assert!(!rl.check(at(&rl, "9.9.9.9"), None, now).allowed);
    }

    #[test]
    fn forwarded_for_only_from_trusted_proxies() {
        let rl = limiter(1, 1);
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            "6.6.6.6, 1.1.1.1, 10.0.0.7".parse().unwrap(),
        );
        // From an untrusted peer the header is ignored.
        assert_eq!(
            rl.client_ip("8.8.8.8".parse().unwrap(), &h),
            ip("8.8.8.8").unwrap()
        );
        // From a trusted proxy: the last untrusted hop (not the spoofable first).
        assert_eq!(
            rl.client_ip("10.1.1.1".parse().unwrap(), &h),
            ip("1.1.1.1").unwrap()
        );
        h.insert("x-forwarded-for", "junk, 2.2.2.2".parse().unwrap());
        assert_eq!(
            rl.client_ip("10.1.1.1".parse().unwrap(), &h),
            ip("2.2.2.2").unwrap()
        );
        h.insert("x-forwarded-for", "junk".parse().unwrap());
        assert_eq!(
            rl.client_ip("10.1.1.1".parse().unwrap(), &h),
            ip("10.1.1.1").unwrap()
        );
        assert!(IpNet::parse("10.0.0.0/33").is_err());
        assert!(IpNet::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
        assert!(IpNet::parse("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn memory_is_bounded() {
        let rl = limiter(1000, 1000);
        let now = Instant::now();
        for i in 0..1000u32 {
            let addr = IpAddr::V4(std::net::Ipv4Addr::from(i + 1));
            rl.check(
                Some(rl.client_key(addr, None, now)),
                Some(format!("t{i}")),
                now,
            );
            assert!(rl.tracked() <= 100);
        }
        // Expired windows make room first.
        let later = now + Duration::from_secs(61);
        rl.check(at(&rl, "1.2.3.4"), None, later);
        assert_eq!(rl.tracked(), 1);
    }

    #[test]
    fn failed_authentications_and_scrapes_share_a_bucket() {
        let rl = limiter(3, 100);
        let now = Instant::now();
        let a = at(&rl, "1.2.3.4").unwrap();
        // Looking does not count.
        for _ in 0..10 {
            assert!(rl.check_unauthenticated(&a, false, now).unwrap().allowed);
        }
        // A scrape counts, two failures count: used up.
        assert!(rl.check_unauthenticated(&a, true, now).unwrap().allowed);
        rl.count_failure(a.clone(), now);
        rl.count_failure(a.clone(), now);
        let d = rl.check_unauthenticated(&a, false, now).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.exhausted, UNAUTHENTICATED);
        assert_eq!(d.retry_after, Duration::from_secs(60));
        // Apart from the API bucket of the same client, and from others.
        assert!(rl.check(Some(a.clone()), None, now).allowed);
        let other = at(&rl, "5.6.7.8").unwrap();
        assert!(rl.check_unauthenticated(&other, true, now).unwrap().allowed);
        // Whatever credential the client presents now.
        let with_key = rl.client_key(ip("1.2.3.4").unwrap(), Some("good"), now);
        assert!(
            !rl.check_unauthenticated(&with_key, false, now)
                .unwrap()
                .allowed
        );
        // A new window.
        let later = now + Duration::from_secs(61);
        assert!(rl.check_unauthenticated(&a, false, later).unwrap().allowed);
        // Off with the per-IP limit.
        let off = RateLimiter::new(None, Arc::new(Metrics::new()));
        assert!(off.check_unauthenticated(&a, true, now).is_none());
    }

    #[test]
    fn from_a_sandbox_address_the_client_is_the_credential_too() {
        let rl = limiter_with(3, 100, &["203.0.113.0/24"]);
        let now = Instant::now();
        let shared = ip("203.0.113.9").unwrap();
        let bad = rl.client_key(shared, Some("bad"), now);
        let good = rl.client_key(shared, Some("good"), now);
        let none = rl.client_key(shared, None, now);
        assert_eq!(bad.credential.as_deref(), Some("bad"));
        // Three failures with one bad token lock out that token only.
        for _ in 0..3 {
            rl.count_failure(bad.clone(), now);
        }
        assert!(!rl.check_unauthenticated(&bad, false, now).unwrap().allowed);
        assert!(rl.check_unauthenticated(&good, false, now).unwrap().allowed);
        assert!(rl.check_unauthenticated(&none, false, now).unwrap().allowed);
        // The per-client window too: one tenant using it up leaves the others theirs.
        for _ in 0..3 {
            assert!(rl.check(Some(bad.clone()), None, now).allowed);
        }
        assert!(!rl.check(Some(bad.clone()), None, now).allowed);
        assert!(rl.check(Some(good.clone()), None, now).allowed);
        // Any other address is one client, whatever it presents.
        let alone = rl.client_key(ip("198.51.100.7").unwrap(), Some("bad"), now);
        assert_eq!(alone.credential, None);
        assert_eq!(
            rl.client_key(ip("2001:db8::1").unwrap(), Some("x"), now)
                .credential,
            None
        );
    }

    #[test]
    fn the_hosts_own_addresses_stand_for_sandboxes_but_loopback_does_not() {
        let own = OwnAddresses::new();
        let now = Instant::now();
        assert!(!own.contains(ip("127.0.0.1").unwrap(), now));
        assert!(!own.contains(ip("127.0.0.2").unwrap(), now));
        assert!(!own.contains(ip("::1").unwrap(), now));
        assert!(!own.contains(ip("198.51.100.7").unwrap(), now));
        assert!(!own.contains(ip("0.0.0.0").unwrap(), now));
        // This host's address on its default route, when it has one.
        let local = std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
            .and_then(|s| s.local_addr());
        if let (Ok(local), true) = (local, own.v4) {
            assert!(own.contains(local.ip(), now), "{local}");
            assert!(own.contains(local.ip(), now), "cached: {local}");
        }
    }

    fn request(uri: &str, headers: &[(&str, &str)]) -> Request {
        let mut req = Request::builder().uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn requests_are_told_apart_as_the_router_does() {
        let rl = limiter(10, 10);
        type Headers = &'static [(&'static str, &'static str)];
        // Path, headers, then the front, whether it is routed before the
        // API, and the credential presented.
        #[rustfmt::skip]
        let cases: &[(&str, Headers, Front, bool, Option<&str>)] = &[
            ("/api/v1/health", &[], Front::Health, false, None),
            ("/api/v1/me", &[("authorization", "Bearer stk_a")], Front::Api, false, Some("stk_a")),
            ("/api/v1/me", &[("cookie", "x=1; stockade_session=stks_s")], Front::Api, false, Some("stks_s")),
            // E2B's key wins over a bearer, as E2B's routes read it.
            ("/e2b/sandboxes", &[("x-api-key", "stk_k"), ("authorization", "Bearer stk_b")], Front::E2b, false, Some("stk_k")),
            ("/e2b/sandboxes", &[("authorization", "bearer stk_b")], Front::E2b, false, Some("stk_b")),
            ("/e2bx", &[], Front::Other, false, None),
            ("/gateway/acc/sbx/upload", &[("authorization", "Bearer stkg_g")], Front::Gateway, false, Some("stkg_g")),
            // The proxy's sandbox token; a sandbox app's own bearer is not it.
            ("/proxy/abcdefabcdef/8080/x?a=1&stockade_token=stkp_q", &[("authorization", "Bearer app")], Front::Proxy, false, Some("stkp_q")),
            ("/proxy/abcdefabcdef/8080/", &[("cookie", "stockade_token=stkp_c")], Front::Proxy, false, Some("stkp_c")),
            ("/metrics", &[("authorization", "Bearer m")], Front::Metrics, false, Some("m")),
            ("/", &[], Front::Other, false, None),
            // Host form: a port, or the agent's port (E2B's envd).
            ("/api/v1/health", &[("host", "8080-abcdefabcdef.sandboxes.test"), ("e2b-traffic-access-token", "stkt_t")], Front::Proxy, true, Some("stkt_t")),
            ("/files", &[("host", "49983-abcdefabcdef.sandboxes.test:7433"), ("x-access-token", "stke_e")], Front::Envd, true, Some("stke_e")),
            // The code interpreter's port: the agent too, and its traffic token counts.
            ("/contexts", &[("host", "49999-abcdefabcdef.sandboxes.test"), ("e2b-traffic-access-token", "stkt_t")], Front::Envd, true, Some("stkt_t")),
            ("/e2b/contexts", &[("e2b-sandbox-id", "abcdefabcdef"), ("e2b-sandbox-port", "49999"), ("e2b-traffic-access-token", "stkt_t")], Front::Envd, true, Some("stkt_t")),
            // The header form, whatever the path; an API key of the account wins.
            ("/e2b/files", &[("e2b-sandbox-id", "abcdefabcdef"), ("x-access-token", "stke_e"), ("x-api-key", "stk_k")], Front::Envd, true, Some("stk_k")),
            ("/e2b/files", &[("e2b-sandbox-id", "abcdefabcdef"), ("x-access-token", "stke_e"), ("authorization", "Basic dXNlcjo=")], Front::Envd, true, Some("stke_e")),
            // Another host is not the proxy's.
            ("/api/v1/me", &[("host", "8080-abcdefabcdef.example.com")], Front::Api, false, None),
        ];
        for &(uri, headers, front, routed_early, credential) in cases {
            let c = rl.classify(&request(uri, headers));
            assert_eq!(
                (c.front, c.routed_early, c.credential),
                (
                    front,
                    routed_early,
                    credential.map(stockade_core::account::hash_token)
                ),
                "{uri} {headers:?}"
            );
        }
    }
}
