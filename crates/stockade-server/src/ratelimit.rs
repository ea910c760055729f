//! Rate limits (API-12): by default 1000 requests per 60 s per client IP and,
//! independently, per API token, on every `/api/v1` route but `/health`.
//!
//! A request counts against both buckets; it is refused (429 `rate_limited`,
//! `Retry-After`) when either is exhausted, and then counts against neither.
//! Each bucket is a fixed window that opens with its key's first request.
//! Every answer carries `RateLimit-Limit`, `RateLimit-Remaining` and
//! `RateLimit-Reset` (seconds) of the bucket closest to its limit.
//!
//! Requests without credentials are guarded too (SEC-17): per client IP,
//! failed authentications (any 401: a bad API token, sandbox token or
//! metrics token) and `/metrics` scrapes (which read the database) share a
//! third bucket of the per-IP size. Once it is used up, everything from that
//! client but `/api/v1/health` is refused until its window ends: the proxy
//! never checks another token for it. `/api/v1/health` itself is never
//! limited (load balancers poll it); it answers from a cache instead.
//!
//! The client IP is the TCP peer; `X-Forwarded-For` is believed only from
//! configured trusted proxies. IPv6 clients are counted per /64, which is what
//! one host can trivially rotate through. Tokens are keyed by their SHA-256,
//! never the plaintext. Memory is bounded: at most `max_tracked` keys; expired
//! windows are dropped first, then the oldest.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use stockade_service::metrics::Metrics;

/// How many requests one key may make per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub requests: u32,
    pub window: Duration,
}

impl Limit {
    /// Parses `1000/60s`, `1000/1m`, `20/min`, `5000/1h`, `100/30` (seconds).
    pub fn parse(s: &str) -> Result<Self, String> {
        let err = || {
            format!("invalid rate limit '{s}': expected REQUESTS/WINDOW such as 1000/60s, 20/1m or 5000/1h")
        };
        let (n, w) = s.trim().split_once('/').ok_or_else(err)?;
        let requests: u32 = n.trim().parse().map_err(|_| err())?;
        let w = w.trim();
        let split = w.find(|c: char| !c.is_ascii_digit()).unwrap_or(w.len());
        let (amount, unit) = w.split_at(split);
        let amount: u64 = if amount.is_empty() {
            1
        } else {
            amount.parse().map_err(|_| err())?
        };
        let unit_secs = match unit {
            "" | "s" | "sec" | "second" | "seconds" => 1,
            "m" | "min" | "minute" | "minutes" => 60,
            "h" | "hour" | "hours" => 3600,
            _ => return Err(err()),
        };
        let secs = amount.checked_mul(unit_secs).ok_or_else(err)?;
        if requests == 0 || secs == 0 || secs > 24 * 3600 {
            return Err(format!(
                "invalid rate limit '{s}': needs at least 1 request and a window from 1 s to 24 h"
            ));
        }
        Ok(Self {
            requests,
            window: Duration::from_secs(secs),
        })
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}s", self.requests, self.window.as_secs())
    }
}

pub use stockade_core::net::IpNet;

/// Rate limiting of the `/api/v1` routes.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitConfig {
    /// Per client IP; `None` turns this bucket off.
    pub per_ip: Option<Limit>,
    /// Per API token; `None` turns this bucket off.
    pub per_token: Option<Limit>,
    /// Peers whose `X-Forwarded-For` names the client (reverse proxies).
    pub trusted_proxies: Vec<IpNet>,
    /// Most keys (IPs and tokens together) remembered at once.
    pub max_tracked: usize,
}

impl RateLimitConfig {
    /// The same limit for both buckets.
    pub fn uniform(limit: Limit) -> Self {
        Self {
            per_ip: Some(limit),
            per_token: Some(limit),
            trusted_proxies: Vec::new(),
            max_tracked: 100_000,
        }
    }
}

impl Default for RateLimitConfig {
    /// API-12: 1000 requests per 60 s.
    fn default() -> Self {
        Self::uniform(Limit {
            requests: 1000,
            window: Duration::from_secs(60),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Ip(IpAddr),
    Token(String),
    /// Failed authentications and metrics scrapes of a client.
    Unauthenticated(IpAddr),
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

/// The buckets of one server.
pub struct RateLimiter {
    config: RateLimitConfig,
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

/// IPv4-mapped IPv6 addresses as IPv4.
/// The bucket key of a client address: IPv4 as is, IPv6 by its /64.
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
            max_tracked: 0,
        });
        Self {
            config,
            windows: Mutex::new(HashMap::new()),
            metrics,
        }
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

    /// Counts a request of `ip` and `token_hash` if both buckets have room.
    fn check(&self, ip: Option<IpAddr>, token_hash: Option<String>, now: Instant) -> Decision {
        let mut keys: Vec<(&'static str, Key, Limit)> = Vec::with_capacity(2);
        if let (Some(ip), Some(limit)) = (ip, self.config.per_ip) {
            keys.push(("ip", Key::Ip(ip_key(ip)), limit));
        }
        if let (Some(hash), Some(limit)) = (token_hash, self.config.per_token) {
            keys.push(("token", Key::Token(hash), limit));
        }
        self.decide(keys, now, true)
    }

    /// The unauthenticated bucket of `ip`: refused when used up; with
    /// `count`, the request counts if it is let through.
    fn check_unauthenticated(&self, ip: IpAddr, count: bool, now: Instant) -> Option<Decision> {
        let limit = self.config.per_ip?;
        Some(self.decide(
            vec![(UNAUTHENTICATED, Key::Unauthenticated(ip_key(ip)), limit)],
            now,
            count,
        ))
    }

    /// Counts a failed authentication of `ip`, whatever the bucket holds.
    fn count_failure(&self, ip: IpAddr, now: Instant) {
        let Some(limit) = self.config.per_ip else {
            return;
        };
        let key = Key::Unauthenticated(ip_key(ip));
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !windows.contains_key(&key) && windows.len() >= self.config.max_tracked.max(1) {
            evict(&mut windows, limit.window, now, self.config.max_tracked);
        }
        let w = windows.entry(key).or_insert(Window {
            start: now,
            count: 0,
        });
        if now.duration_since(w.start) >= limit.window {
            *w = Window {
                start: now,
                count: 0,
            };
        }
        w.count = w.count.saturating_add(1);
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
            if !windows.contains_key(&key) && windows.len() >= self.config.max_tracked.max(1) {
                evict(&mut windows, longest, now, self.config.max_tracked);
            }
            let w = windows.entry(key).or_insert(Window {
                start: now,
                count: 0,
            });
            if now.duration_since(w.start) >= limit.window {
                *w = Window {
                    start: now,
                    count: 0,
                };
            }
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

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.windows.lock().map(|w| w.len()).unwrap_or(0)
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

/// Whether the rate limit applies to a request path.
fn limited_path(path: &str) -> bool {
    path.starts_with("/api/v1/") && path != "/api/v1/health"
}

fn bearer_hash(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?
        .trim();
    (!token.is_empty()).then(|| stockade_core::account::hash_token(token))
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

/// Middleware: counts `/api/v1` requests and refuses them with 429 past the limit.
pub async fn limit(State(limiter): State<Arc<RateLimiter>>, req: Request, next: Next) -> Response {
    let off = limiter.config.per_ip.is_none() && limiter.config.per_token.is_none();
    if off || !limited_path(req.uri().path()) {
        return next.run(req).await;
    }
    let ip = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| limiter.client_ip(peer.ip(), req.headers()));
    let token = bearer_hash(req.headers());
    let decision = limiter.check(ip, token, Instant::now());
    if !decision.allowed {
        limiter.metrics.rate_limited(decision.exhausted);
        let retry = secs_ceil(decision.retry_after).max(1);
        tracing::info!(client.ip = ?ip, bucket = decision.exhausted, retry_after_s = retry, "rate limited");
        let mut response = ApiError::TooManyRequests {
            message: format!(
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
            ),
            retry_after_secs: retry,
        }
        .into_response();
        if let Some(s) = &decision.report {
            set_headers(response.headers_mut(), s);
        }
        return response;
    }
    let mut response = next.run(req).await;
    if let Some(s) = &decision.report {
        set_headers(response.headers_mut(), s);
    }
    response
}

/// The answer to a client whose unauthenticated bucket is used up.
fn refused_unauthenticated(limiter: &RateLimiter, ip: IpAddr, decision: &Decision) -> Response {
    limiter.metrics.rate_limited(UNAUTHENTICATED);
    let retry = secs_ceil(decision.retry_after).max(1);
    tracing::info!(client.ip = %ip, bucket = UNAUTHENTICATED, retry_after_s = retry, "rate limited");
    let mut response = ApiError::TooManyRequests {
        message: format!(
            "Too many requests without valid credentials from this client (failed authentications and metrics scrapes, {} allowed); retry in {retry} s",
            decision
                .report
                .map(|s| s.limit.to_string())
                .unwrap_or_default(),
        ),
        retry_after_secs: retry,
    }
    .into_response();
    if let Some(s) = &decision.report {
        set_headers(response.headers_mut(), s);
    }
    response
}

/// Middleware, outermost (ahead of the host-form proxy): the unauthenticated
/// bucket of SEC-17. Counts `/metrics` scrapes before and 401 answers after;
/// a client whose bucket is used up gets 429 for everything but
/// `/api/v1/health`.
pub async fn guard(State(limiter): State<Arc<RateLimiter>>, req: Request, next: Next) -> Response {
    if limiter.config.per_ip.is_none() || req.uri().path() == "/api/v1/health" {
        return next.run(req).await;
    }
    let Some(ip) = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| limiter.client_ip(peer.ip(), req.headers()))
    else {
        return next.run(req).await;
    };
    let now = Instant::now();
    let scrape = req.uri().path() == "/metrics";
    if let Some(decision) = limiter.check_unauthenticated(ip, scrape, now) {
        if !decision.allowed {
            return refused_unauthenticated(&limiter, ip, &decision);
        }
    }
    let response = next.run(req).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        limiter.count_failure(ip, now);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(ip: u32, token: u32) -> RateLimiter {
        let l = |n| Limit {
            requests: n,
            window: Duration::from_secs(60),
        };
        RateLimiter::new(
            Some(RateLimitConfig {
                per_ip: Some(l(ip)),
                per_token: Some(l(token)),
                trusted_proxies: vec![IpNet::parse("10.0.0.0/8").unwrap()],
                max_tracked: 100,
            }),
            Arc::new(Metrics::new()),
        )
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn limits_parse() {
        let l = Limit::parse("1000/60s").unwrap();
        assert_eq!((l.requests, l.window), (1000, Duration::from_secs(60)));
        assert_eq!(
            Limit::parse("20/1m").unwrap().window,
            Duration::from_secs(60)
        );
        assert_eq!(
            Limit::parse("20/min").unwrap().window,
            Duration::from_secs(60)
        );
        assert_eq!(
            Limit::parse("5/2h").unwrap().window,
            Duration::from_secs(7200)
        );
        assert_eq!(
            Limit::parse(" 7 / 30 ").unwrap().window,
            Duration::from_secs(30)
        );
        for bad in [
            "", "1000", "0/60s", "10/0s", "x/60s", "10/60y", "10/-1s", "10/48h",
        ] {
            assert!(Limit::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn both_buckets_count_and_either_refuses() {
        let rl = limiter(5, 3);
        let now = Instant::now();
        let a = || Some("a".to_owned());
        for i in 0..3 {
            let d = rl.check(ip("1.2.3.4"), a(), now);
            assert!(d.allowed, "{i}");
        }
        // Token a is used up; refused requests count nowhere.
        let d = rl.check(ip("1.2.3.4"), a(), now);
        assert!(!d.allowed);
        assert_eq!(d.exhausted, "token");
        assert_eq!(d.retry_after, Duration::from_secs(60));
        // Token b from the same IP has two left of the IP's five.
        assert!(rl.check(ip("1.2.3.4"), Some("b".into()), now).allowed);
        let d = rl.check(ip("1.2.3.4"), Some("b".into()), now);
        assert!(d.allowed);
        assert_eq!(d.report.unwrap().remaining(), 0);
        assert_eq!(d.report.unwrap().bucket, "ip");
        let d = rl.check(ip("1.2.3.4"), Some("b".into()), now);
        assert_eq!((d.allowed, d.exhausted), (false, "ip"));
        // Another IP with token a: still refused (the token bucket).
        assert!(!rl.check(ip("5.6.7.8"), a(), now).allowed);
        // A new window resets.
        let later = now + Duration::from_secs(61);
        assert!(rl.check(ip("1.2.3.4"), a(), later).allowed);
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_v4_as_v4() {
        let rl = limiter(2, 100);
        let now = Instant::now();
        assert!(rl.check(ip("2001:db8::1"), None, now).allowed);
        assert!(rl.check(ip("2001:db8::ffff:2"), None, now).allowed);
        assert!(!rl.check(ip("2001:db8::3"), None, now).allowed);
        assert!(rl.check(ip("2001:db8:0:1::1"), None, now).allowed);
        assert!(rl.check(ip("::ffff:9.9.9.9"), None, now).allowed);
        assert!(rl.check(ip("9.9.9.9"), None, now).allowed);
        assert!(!rl.check(ip("9.9.9.9"), None, now).allowed);
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
            rl.check(Some(addr), Some(format!("t{i}")), now);
            assert!(rl.tracked() <= 100);
        }
        // Expired windows make room first.
        let later = now + Duration::from_secs(61);
        rl.check(ip("1.2.3.4"), None, later);
        assert_eq!(rl.tracked(), 1);
    }

    #[test]
    fn failed_authentications_and_scrapes_share_a_bucket() {
        let rl = limiter(3, 100);
        let now = Instant::now();
        let a = ip("1.2.3.4").unwrap();
        // Looking does not count.
        for _ in 0..10 {
            assert!(rl.check_unauthenticated(a, false, now).unwrap().allowed);
        }
        // A scrape counts, two failures count: used up.
        assert!(rl.check_unauthenticated(a, true, now).unwrap().allowed);
        rl.count_failure(a, now);
        rl.count_failure(a, now);
        let d = rl.check_unauthenticated(a, false, now).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.exhausted, UNAUTHENTICATED);
        assert_eq!(d.retry_after, Duration::from_secs(60));
        // Apart from the API bucket of the same client, and from others.
        assert!(rl.check(Some(a), None, now).allowed);
        assert!(
            rl.check_unauthenticated(ip("5.6.7.8").unwrap(), true, now)
                .unwrap()
                .allowed
        );
        // A new window.
        let later = now + Duration::from_secs(61);
        assert!(rl.check_unauthenticated(a, false, later).unwrap().allowed);
        // Off with the per-IP limit.
        let off = RateLimiter::new(None, Arc::new(Metrics::new()));
        assert!(off.check_unauthenticated(a, true, now).is_none());
    }

    #[test]
    fn only_api_routes_but_health_are_limited() {
        assert!(limited_path("/api/v1/sandbox"));
        assert!(limited_path("/api/v1/me"));
        assert!(!limited_path("/api/v1/health"));
        assert!(!limited_path("/metrics"));
        assert!(!limited_path("/"));
    }
}
