//! The DNS answers the forwarder gave each sandbox (name → addresses, until
//! their TTL runs out): what the proxy checks a dialled address against
//! first, and what the packet filter can read.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shortest time an answer is kept, whatever its TTL: a client
/// connects right after its lookup, also when the TTL was 0.
pub const MIN_KEEP: Duration = Duration::from_secs(30);
/// The longest time an answer is kept, whatever its TTL.
pub const MAX_KEEP: Duration = Duration::from_secs(3600);
/// The default bound on (sandbox, name) entries.
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

/// One address a sandbox resolved, and how much longer it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedAddr {
    pub ip: IpAddr,
    pub expires_in: Duration,
}

/// One name a sandbox resolved, with the addresses it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedName {
    pub name: String,
    pub addresses: Vec<ResolvedAddr>,
}

/// Answers per sandbox address and name, bounded in number; expired ones
/// are dropped when the bound is reached or the sandbox is read.
#[derive(Debug)]
pub struct ResolvedNames {
    inner: Mutex<Inner>,
    max_entries: usize,
}

#[derive(Debug, Default)]
struct Inner {
    clients: HashMap<IpAddr, HashMap<String, HashMap<IpAddr, Instant>>>,
    entries: usize,
}

impl Default for ResolvedNames {
    fn default() -> Self {
        Self::with_max_entries(DEFAULT_MAX_ENTRIES)
    }
}

impl ResolvedNames {
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `max_entries` (sandbox, name) pairs are kept; past that, new
    /// answers are not recorded until old ones expire (the proxy then
    /// resolves names itself).
    pub fn with_max_entries(max_entries: usize) -> Self {
        Self {
            inner: Mutex::default(),
            max_entries,
        }
    }

    /// Records that `client` was told `name` has `answers` (address, TTL in
    /// seconds). `name` in any case, with or without a trailing dot.
    pub fn record(&self, client: IpAddr, name: &str, answers: &[(IpAddr, u32)]) {
        if answers.is_empty() {
            return;
        }
        let name = stockade_core::netpolicy::normalize_name(name);
        let client = client.to_canonical();
        let now = Instant::now();
        let mut inner = self.lock();
        let known = inner
            .clients
            .get(&client)
            .is_some_and(|names| names.contains_key(&name));
        if !known && inner.entries >= self.max_entries {
            inner.purge(now);
            if inner.entries >= self.max_entries {
                tracing::warn!(
                    max = self.max_entries,
                    "DNS answer log full: answers are not recorded until old ones expire"
                );
                return;
            }
        }
        if !known {
            inner.entries += 1;
        }
        let addrs = inner
            .clients
            .entry(client)
            .or_default()
            .entry(name)
            .or_default();
        for &(ip, ttl) in answers {
            let keep = Duration::from_secs(u64::from(ttl)).clamp(MIN_KEEP, MAX_KEEP);
            let until = now + keep;
            let slot = addrs.entry(ip.to_canonical()).or_insert(until);
            *slot = (*slot).max(until);
        }
    }

    /// Whether `client` was told (and may still use) that `name` has `ip`.
    pub fn contains(&self, client: IpAddr, name: &str, ip: IpAddr) -> bool {
        self.with_addrs(client, name, |addrs, now| {
            addrs
                .get(&ip.to_canonical())
                .is_some_and(|&until| until > now)
        })
        .unwrap_or(false)
    }

    /// The unexpired addresses `client` got for `name`.
    pub fn addresses(&self, client: IpAddr, name: &str) -> Vec<ResolvedAddr> {
        self.with_addrs(client, name, live).unwrap_or_default()
    }

    /// `read` applied to the addresses (with their expiry) `client` got for
    /// `name`, and the time now; `None` when it got none.
    fn with_addrs<R>(
        &self,
        client: IpAddr,
        name: &str,
        read: impl FnOnce(&HashMap<IpAddr, Instant>, Instant) -> R,
    ) -> Option<R> {
        let name = stockade_core::netpolicy::normalize_name(name);
        let now = Instant::now();
        self.lock()
            .clients
            .get(&client.to_canonical())
            .and_then(|names| names.get(&name))
            .map(|addrs| read(addrs, now))
    }

    /// Every name `client` resolved, with its unexpired addresses, sorted
    /// by name.
    pub fn names_of(&self, client: IpAddr) -> Vec<ResolvedName> {
        let now = Instant::now();
        let mut names: Vec<ResolvedName> = self
            .lock()
            .clients
            .get(&client.to_canonical())
            .map(|names| {
                names
                    .iter()
                    .map(|(name, addrs)| ResolvedName {
                        name: name.clone(),
                        addresses: live(addrs, now),
                    })
                    .filter(|n| !n.addresses.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        names.sort_by(|a, b| a.name.cmp(&b.name));
        names
    }

    /// Forgets everything `client` resolved (its sandbox is gone, or its
    /// address was given to another).
    pub fn forget(&self, client: IpAddr) {
        let mut inner = self.lock();
        if let Some(names) = inner.clients.remove(&client.to_canonical()) {
            inner.entries -= names.len();
        }
    }

    /// How many (sandbox, name) pairs are kept, expired ones included.
    pub fn len(&self) -> usize {
        self.lock().entries
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Drops expired addresses, then names and clients left empty.
    fn purge(&mut self, now: Instant) {
        let mut entries = 0;
        self.clients.retain(|_, names| {
            names.retain(|_, addrs| {
                addrs.retain(|_, until| *until > now);
                !addrs.is_empty()
            });
            entries += names.len();
            !names.is_empty()
        });
        self.entries = entries;
    }
}

fn live(addrs: &HashMap<IpAddr, Instant>, now: Instant) -> Vec<ResolvedAddr> {
    let mut out: Vec<ResolvedAddr> = addrs
        .iter()
        .filter(|(_, until)| **until > now)
        .map(|(ip, until)| ResolvedAddr {
            ip: *ip,
            expires_in: *until - now,
        })
        .collect();
    out.sort_by_key(|a| a.ip);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn records_per_client_and_name() {
        let names = ResolvedNames::new();
        let a = ip("172.30.0.2");
        let b = ip("172.30.0.3");
        names.record(
            a,
            "Allowed.Test.",
            &[(ip("192.0.2.1"), 0), (ip("2001:db8::1"), 7200)],
        );
        assert!(names.contains(a, "allowed.test", ip("192.0.2.1")));
        assert!(names.contains(ip("::ffff:172.30.0.2"), "ALLOWED.TEST", ip("192.0.2.1")));
        assert!(!names.contains(b, "allowed.test", ip("192.0.2.1")));
        assert!(!names.contains(a, "allowed.test", ip("192.0.2.9")));
        let got = names.addresses(a, "allowed.test");
        assert_eq!(got.len(), 2);
        // TTL 0 is kept the minimum, 7200 s the maximum.
        assert!(got[0].expires_in > MIN_KEEP - Duration::from_secs(1));
        assert!(got[0].expires_in <= MIN_KEEP);
        assert!(got[1].expires_in <= MAX_KEEP && got[1].expires_in > MAX_KEEP / 2);
        let listed = names.names_of(a);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, "allowed.test");
        assert_eq!(names.len(), 1);
        names.record(a, "allowed.test", &[(ip("192.0.2.2"), 60)]);
        assert_eq!(names.len(), 1);
        assert_eq!(names.addresses(a, "allowed.test").len(), 3);
        names.forget(a);
        assert!(names.is_empty());
        assert!(!names.contains(a, "allowed.test", ip("192.0.2.1")));
    }

    #[test]
    fn bounded() {
        let names = ResolvedNames::with_max_entries(2);
        let a = ip("172.30.0.2");
        names.record(a, "one.test", &[(ip("192.0.2.1"), 60)]);
        names.record(a, "two.test", &[(ip("192.0.2.2"), 60)]);
        names.record(a, "three.test", &[(ip("192.0.2.3"), 60)]);
        assert_eq!(names.len(), 2);
        assert!(!names.contains(a, "three.test", ip("192.0.2.3")));
        // A known name still takes new addresses.
        names.record(a, "two.test", &[(ip("192.0.2.4"), 60)]);
        assert!(names.contains(a, "two.test", ip("192.0.2.4")));
        names.record(a, "none.test", &[]);
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn purge_drops_expired() {
        let names = ResolvedNames::with_max_entries(1);
        let a = ip("172.30.0.2");
        names.record(a, "one.test", &[(ip("192.0.2.1"), 60)]);
        let later = Instant::now() + MAX_KEEP + Duration::from_secs(1);
        names.lock().purge(later);
        assert!(names.is_empty());
        names.record(a, "two.test", &[(ip("192.0.2.2"), 60)]);
        assert!(names.contains(a, "two.test", ip("192.0.2.2")));
    }
}
