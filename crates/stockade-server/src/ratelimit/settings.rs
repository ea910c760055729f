//! The limits' settings: how many requests a key may make, and which
//! clients are trusted or exempt.

use std::time::Duration;

/// How many requests one key may make per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub requests: u32,
    pub window: Duration,
}

/// Why a rate limit setting could not be read; the message names the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Not of the form `REQUESTS/WINDOW`.
    #[error(
        "invalid rate limit '{0}': expected REQUESTS/WINDOW such as 1000/60s, 20/1m or 5000/1h"
    )]
    Malformed(String),
    /// No requests, or a window outside 1 s to 24 h.
    #[error("invalid rate limit '{0}': needs at least 1 request and a window from 1 s to 24 h")]
    OutOfRange(String),
}

impl Limit {
    /// Parses `1000/60s`, `1000/1m`, `20/min`, `5000/1h`, `100/30` (seconds).
    pub fn parse(s: &str) -> Result<Self, LimitError> {
        let err = || LimitError::Malformed(s.to_owned());
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
            return Err(LimitError::OutOfRange(s.to_owned()));
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

/// Rate limiting of the API and of the traffic into sandboxes.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitConfig {
    /// Per client IP; `None` turns this bucket off.
    pub per_ip: Option<Limit>,
    /// Per credential (API token, session, sandbox token); `None` turns
    /// this bucket off.
    pub per_token: Option<Limit>,
    /// Peers whose `X-Forwarded-For` names the client (reverse proxies).
    pub trusted_proxies: Vec<IpNet>,
    /// Client addresses that many tenants' sandboxes call this server from,
    /// besides this host's own addresses (which count without being
    /// listed): e.g. the NAT address of other Docker hosts. From them the
    /// per-client buckets are kept per credential presented.
    pub sandbox_clients: Vec<IpNet>,
    /// Most keys (clients and credentials together) remembered at once.
    pub max_tracked: usize,
}

impl RateLimitConfig {
    /// The same limit for both buckets.
    pub fn uniform(limit: Limit) -> Self {
        Self {
            per_ip: Some(limit),
            per_token: Some(limit),
            trusted_proxies: Vec::new(),
            sandbox_clients: Vec::new(),
            max_tracked: 100_000,
        }
    }
}

impl Default for RateLimitConfig {
    /// 1000 requests per 60 s.
    fn default() -> Self {
        Self::uniform(Limit {
            requests: 1000,
            window: Duration::from_secs(60),
        })
    }
}
