//! Where the proxy and the DNS forwarder find a sandbox's policy: the
//! [`PolicySource`] trait and [`Policies`], a registry keyed by sandbox
//! address that can change at any time.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

use stockade_core::netpolicy::EgressPolicy;
use tokio::sync::watch;

/// The policy of the sandbox at a source address.
pub trait PolicySource: Send + Sync + 'static {
    /// The policy of the sandbox at `ip`; `None` for an address that is no
    /// sandbox's, whose connections and queries are refused.
    fn policy_for(&self, ip: IpAddr) -> Option<Arc<EgressPolicy>>;

    /// A counter that moves on every policy change, so connections already
    /// spliced can be checked again. `None` (the default): policies are
    /// only read for new connections.
    fn changes(&self) -> Option<watch::Receiver<u64>> {
        None
    }
}

impl<T: PolicySource> PolicySource for Arc<T> {
    fn policy_for(&self, ip: IpAddr) -> Option<Arc<EgressPolicy>> {
        (**self).policy_for(ip)
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        (**self).changes()
    }
}

/// Sandbox address → policy, shared by the proxy, the forwarder and
/// whoever applies `PATCH`es. Addresses are compared in canonical form (an
/// IPv4-mapped IPv6 address is its IPv4 address).
#[derive(Debug)]
pub struct Policies {
    map: RwLock<HashMap<IpAddr, Arc<EgressPolicy>>>,
    generation: watch::Sender<u64>,
}

impl Default for Policies {
    fn default() -> Self {
        Self {
            map: RwLock::default(),
            generation: watch::Sender::new(0),
        }
    }
}

impl Policies {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the policy of the sandbox at `ip`, returning the one it
    /// replaces. Takes effect for the next connection or query; spliced
    /// connections the new policy refuses are cut.
    pub fn set(&self, ip: IpAddr, policy: EgressPolicy) -> Option<Arc<EgressPolicy>> {
        let previous = self.write().insert(ip.to_canonical(), Arc::new(policy));
        self.bump();
        previous
    }

    /// Forgets the sandbox at `ip` (destroyed, stopped or moved): its
    /// address gets no service any more.
    pub fn remove(&self, ip: IpAddr) -> Option<Arc<EgressPolicy>> {
        let previous = self.write().remove(&ip.to_canonical());
        self.bump();
        previous
    }

    /// Replaces every entry at once (e.g. from the database at start).
    pub fn replace_all(&self, entries: impl IntoIterator<Item = (IpAddr, EgressPolicy)>) {
        let map = entries
            .into_iter()
            .map(|(ip, p)| (ip.to_canonical(), Arc::new(p)))
            .collect();
        *self.write() = map;
        self.bump();
    }

    pub fn get(&self, ip: IpAddr) -> Option<Arc<EgressPolicy>> {
        self.read().get(&ip.to_canonical()).cloned()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    fn bump(&self) {
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<IpAddr, Arc<EgressPolicy>>> {
        // A panic while holding the lock cannot leave the map half-written
        // (each write is one insert, remove or assignment).
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<IpAddr, Arc<EgressPolicy>>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl PolicySource for Policies {
    fn policy_for(&self, ip: IpAddr) -> Option<Arc<EgressPolicy>> {
        self.get(ip)
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        Some(self.generation.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_remove_and_notify() {
        let p = Policies::new();
        let mut changes = p.changes().unwrap();
        let ip: IpAddr = "172.30.0.5".parse().unwrap();
        assert!(p.policy_for(ip).is_none());
        assert!(p.set(ip, EgressPolicy::DenyAll).is_none());
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        // The IPv4-mapped form is the same sandbox.
        let mapped: IpAddr = "::ffff:172.30.0.5".parse().unwrap();
        assert_eq!(*p.policy_for(mapped).unwrap(), EgressPolicy::DenyAll);
        let old = p.set(ip, EgressPolicy::AllowAll).unwrap();
        assert_eq!(*old, EgressPolicy::DenyAll);
        assert!(changes.has_changed().unwrap());
        assert_eq!(p.len(), 1);
        p.remove(ip);
        assert!(p.is_empty());
        p.replace_all([(ip, EgressPolicy::DenyAll)]);
        assert_eq!(*p.get(ip).unwrap(), EgressPolicy::DenyAll);
    }
}
