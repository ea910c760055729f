//! Egress policies: the host's egress filter (a transparent proxy
//! that checks TLS server names and HTTP `Host`s, and a DNS forwarder that
//! answers only allowed names) and each sandbox's entry in the packet
//! filter, kept in step with the sandbox's `networkPolicy`.
//!
//! - The filter starts with the service, on the sandbox network's gateway
//!   (free ports unless configured). Where it cannot (no packet filter, a
//!   remote engine), `allow-all` and `deny-all` still hold and a create or
//!   update with allow/deny lists is refused with the reason.
//! - A sandbox on the sandbox network gets its entry when it starts (create,
//!   start, claim from the warm pool) and whenever its policy changes; until
//!   then it reaches nothing outside (the packet filter fails closed). A
//!   stop or destroy removes it right after answering; until then no
//!   container starts on that host (its runtime waits), so a freed address
//!   never carries the old policy to a new sandbox. Sandboxes without
//!   network access (`deny-all`) sit on the internal network; a policy
//!   change moves a running sandbox between the two networks.
//! - Reconciliation writes missing entries again (after a host reboot or a
//!   flushed chain), and entries written under another opt-in of private
//!   ranges, and drops entries whose address the sandbox no longer has.
//! - Whatever the policy, the private and link-local ranges (the local
//!   network, the cloud metadata service) are out of reach but for the
//!   blocks the administrator opted in (`--egress-allow-private`): the
//!   packet filter rejects them, the proxy never dials them, and an allow
//!   list naming one that is not opted in is refused (400). Every
//!   sandbox's DNS goes to the forwarder, allow-all's too, since the host's
//!   own resolver often sits in those ranges.

use std::net::{IpAddr, SocketAddr};

use std::sync::{Arc, RwLock};

use stockade_core::netpolicy::{Cidr, EgressPolicy, PrivateAccess};
use stockade_core::{Sandbox, SandboxId, SandboxStatus};
use stockade_egress::iptables::RedirectPorts;
use stockade_egress::{EgressConfig, EgressFilter, PolicySource, ProxyConfig};
use stockade_runtime::PendingRemovals;
use tracing::{info, warn};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// How the egress filter is set up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EgressSettings {
    /// Where redirected TCP 80/443 arrives on the gateway; 0: a free port.
    pub proxy_port: u16,
    /// Where redirected DNS arrives on the gateway (UDP and TCP); 0: a free port.
    pub dns_port: u16,
    /// The DNS servers the filter asks; empty: the host's `/etc/resolv.conf`.
    pub upstream_dns: Vec<SocketAddr>,
    /// Subnets of Docker networks the proxy may still dial for an allowed
    /// name (every Docker network is refused by default: they hold the
    /// host's other containers).
    pub reachable_subnets: Vec<Cidr>,
    /// The blocks of the private and link-local ranges sandboxes may reach
    /// (the administrator's opt-in, default none): the proxy may dial them
    /// and allow lists may name them. The runtime's packet filter takes the
    /// same opt-in (`IsolationConfig::private`).
    pub private: PrivateAccess,
}

/// What `/health` shows of the filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressStatus {
    /// Not started yet.
    Starting,
    Running {
        proxy: SocketAddr,
        dns: SocketAddr,
    },
    /// Allow and deny lists cannot be enforced, and why.
    Unavailable(String),
}

enum State {
    Starting,
    Running {
        filter: Arc<EgressFilter>,
        ports: RedirectPorts,
    },
    Unavailable(String),
}

/// The egress filter of this process.
pub struct Egress {
    state: RwLock<State>,
    /// Held while entries are written or pruned together with the filter's
    /// registry: a prune that read an address before a new sandbox took it
    /// must not forget the new sandbox's policy afterwards.
    ops: tokio::sync::Mutex<()>,
    /// Removals waiting for `ops`, by host: whoever holds it next removes
    /// all of its host's in one change of the packet filter (a bulk delete
    /// of hundreds waits for one listing and one commit, not one each).
    removals: std::sync::Mutex<Vec<Removal>>,
}

/// A queued removal of a sandbox's entry.
struct Removal {
    host: String,
    id: SandboxId,
    /// Its place in the host's pending removals, which starts there wait for.
    ticket: Option<u64>,
}

/// Marks a batch of removals done when dropped, so that starts on the host
/// never wait for a removal task that failed or panicked.
struct Finish(Option<(Arc<PendingRemovals>, u64)>);

impl Drop for Finish {
    fn drop(&mut self) {
        if let Some((pending, ticket)) = &self.0 {
            pending.finish(*ticket);
        }
    }
}

impl Default for Egress {
    fn default() -> Self {
        Self {
            state: RwLock::new(State::Starting),
            ops: tokio::sync::Mutex::new(()),
            removals: std::sync::Mutex::default(),
        }
    }
}

impl Egress {
    fn queue(&self) -> std::sync::MutexGuard<'_, Vec<Removal>> {
        self.removals.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, state: State) {
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = state;
    }

    pub fn status(&self) -> EgressStatus {
        match &*self.read() {
            State::Starting => EgressStatus::Starting,
            State::Running { filter, .. } => EgressStatus::Running {
                proxy: filter.proxy_addr(),
                dns: filter.dns_addr(),
            },
            State::Unavailable(why) => EgressStatus::Unavailable(why.clone()),
        }
    }

    fn running(&self) -> Option<(Arc<EgressFilter>, RedirectPorts)> {
        match &*self.read() {
            State::Running { filter, ports } => Some((filter.clone(), *ports)),
            _ => None,
        }
    }
}

/// Whether a policy needs the filter (it lists addresses or names).
pub(crate) fn needs_filter(policy: &EgressPolicy) -> bool {
    matches!(policy, EgressPolicy::Rules { .. })
}

impl Service {
    /// Starts the egress filter on the sandbox network's gateway and writes
    /// the entries of the running sandboxes again (after isolation is
    /// checked at start).
    pub async fn start_egress(&self) {
        let host = match self.runtime.egress_host().await {
            Ok(host) => host,
            Err(e) => {
                let why = e.to_string();
                warn!(reason = %why, "egress allow/deny lists cannot be enforced on this host");
                self.egress.set(State::Unavailable(why));
                return;
            }
        };
        let settings = &self.config.egress;
        let blocked = host
            .subnets
            .iter()
            .filter(|s| !settings.reachable_subnets.contains(s))
            .copied()
            .collect();
        let config = EgressConfig {
            proxy_addr: SocketAddr::new(host.gateway, settings.proxy_port),
            dns_addr: SocketAddr::new(host.gateway, settings.dns_port),
            upstream_dns: settings.upstream_dns.clone(),
            proxy: ProxyConfig {
                blocked,
                private: settings.private.clone(),
                ..ProxyConfig::default()
            },
            dns: Default::default(),
        };
        match EgressFilter::start(config).await {
            Ok(filter) => {
                let ports = RedirectPorts {
                    proxy: filter.proxy_addr().port(),
                    dns: filter.dns_addr().port(),
                };
                info!(proxy = %filter.proxy_addr(), dns = %filter.dns_addr(), "egress filter running");
                self.egress.set(State::Running {
                    filter: Arc::new(filter),
                    ports,
                });
            }
            Err(e) => {
                let why = e.to_string();
                warn!(reason = %why, "the egress filter could not start");
                self.egress.set(State::Unavailable(why));
                return;
            }
        }
        self.reconcile_egress().await;
    }

    /// Refuses allow-list entries inside a private range that the
    /// administrator did not opt in (400 naming the entry and saying what
    /// to set).
    pub fn check_private_entries(&self, policy: &EgressPolicy) -> ServiceResult<()> {
        Ok(self.config.egress.private.check_policy(policy)?)
    }

    /// Refuses a policy the host `server` cannot enforce (422 naming the
    /// field): allow and deny lists need the egress filter, which runs
    /// beside this server's own host only.
    pub fn check_policy_enforceable(
        &self,
        policy: &EgressPolicy,
        server: &str,
    ) -> ServiceResult<()> {
        if !needs_filter(policy) {
            return Ok(());
        }
        if server != self.hosts.own_name() {
            return Err(ServiceError::field(
                "networkPolicy",
                format!(
                    "networkPolicy: allow and deny lists are enforced only on the Docker host                      '{}'; this sandbox runs on '{server}': use \"allow-all\" or \"deny-all\"",
                    self.hosts.own_name()
                ),
            ));
        }
        match self.egress.status() {
            EgressStatus::Running { .. } => Ok(()),
            EgressStatus::Starting => Err(ServiceError::DockerUnavailable(
                "networkPolicy: the egress filter is starting; try again in a moment".into(),
            )),
            EgressStatus::Unavailable(why) => Err(ServiceError::field(
                "networkPolicy",
                format!(
                "networkPolicy: allow and deny lists cannot be enforced on this server ({why}); \
                 use \"allow-all\" or \"deny-all\""
                ),
            )),
        }
    }

    /// Writes the entry of `sb` for its current policy and address, and
    /// registers the address with the filter. A sandbox that is not on the
    /// sandbox network (not running, no network access) has none.
    pub async fn apply_egress(&self, sb: &Sandbox) -> ServiceResult<()> {
        let rt = self.runtime_for(sb).await?;
        let _ops = self.egress.ops.lock().await;
        let policy = &sb.spec.network;
        // The filter listens on this server's own host only: a sandbox
        // elsewhere gets the packet-filter part of its policy (placement
        // keeps policies that need the filter on the own host).
        let running = self
            .egress
            .running()
            .filter(|_| sb.server == self.hosts.own_name());
        let ports = running.as_ref().map(|(_, p)| *p);
        let old = egress_addresses(rt.as_ref(), &sb.id).await;
        let addr = rt
            .apply_egress(&sb.id, policy, ports)
            .await
            .map_err(|e| ServiceError::Docker(e.to_string()))?;
        if let Some((filter, _)) = running {
            for ip in old.into_iter().filter(|ip| Some(*ip) != addr) {
                filter.policies.remove(ip);
                filter.names.forget(ip);
            }
            if let Some(ip) = addr {
                filter.policies.set(ip, policy.clone());
            }
        }
        Ok(())
    }

    /// Registers `sb`'s policy with the filter at its address `ip` (as the
    /// claim's inspection found it) without writing its entry: a warm-pool
    /// member claimed for allow-all keeps the entry of its fill, and its DNS
    /// goes to the forwarder, which answers only sandboxes it knows.
    pub fn register_egress(&self, sb: &Sandbox, ip: Option<std::net::IpAddr>) {
        let Some((filter, _)) = self
            .egress
            .running()
            .filter(|_| sb.server == self.hosts.own_name())
        else {
            return;
        };
        if let Some(ip) = ip {
            filter.policies.set(ip, sb.spec.network.clone());
        }
    }

    /// Removes the entry of sandbox `sb` (stopped or destroyed) behind the
    /// caller's answer: the packet filter's commit takes tens of
    /// milliseconds, and the host's runtime holds every container start
    /// back until the removals queued before it are made, so the freed
    /// address lends its policy to nobody meanwhile. Failures are logged:
    /// reconciliation removes what is left.
    pub async fn remove_egress(&self, sb: &Sandbox) {
        let rt = match self.runtime_for(sb).await {
            Ok(rt) => rt,
            Err(e) => {
                warn!(sandbox.id = %sb.id, error = %e, "egress entry not removed; reconciliation retries");
                return;
            }
        };
        {
            // Queued in ticket order: a batch's last ticket covers those
            // before it.
            let mut waiting = self.egress.queue();
            waiting.push(Removal {
                host: sb.server.clone(),
                id: sb.id.clone(),
                ticket: rt.pending_removals().map(|p| p.queue()),
            });
        }
        let (svc, host) = (self.clone(), sb.server.clone());
        tokio::spawn(async move { svc.remove_queued_egress(&host, rt).await });
    }

    /// Removes every queued entry of `host` in one change of its packet
    /// filter; nothing when an earlier task took them along.
    async fn remove_queued_egress(&self, host: &str, rt: Arc<dyn stockade_runtime::Runtime>) {
        let _ops = self.egress.ops.lock().await;
        let batch: Vec<Removal> = {
            let mut waiting = self.egress.queue();
            let (batch, others) = waiting.drain(..).partition(|r| r.host == host);
            *waiting = others;
            batch
        };
        let last = batch.iter().filter_map(|r| r.ticket).max();
        let _finish = Finish(rt.pending_removals().zip(last));
        if batch.is_empty() {
            return;
        }
        let ids: Vec<SandboxId> = batch.into_iter().map(|r| r.id).collect();
        match rt.remove_egress(&ids).await {
            Ok(addrs) => {
                if let Some((filter, _)) = self.egress.running() {
                    for ip in addrs {
                        filter.policies.remove(ip);
                        filter.names.forget(ip);
                    }
                }
            }
            Err(e) => {
                for id in &ids {
                    warn!(sandbox.id = %id, error = %e, "egress entry not removed; reconciliation retries")
                }
            }
        }
    }

    /// Moves a sandbox to the network its policy asks for and writes its
    /// entry: after a `PATCH` of `networkPolicy`, live.
    pub async fn change_egress(&self, sb: &Sandbox) -> ServiceResult<()> {
        let moved = self
            .runtime_for(sb)
            .await?
            .set_network_access(&sb.id, sb.spec.network.allows_egress())
            .await;
        match moved {
            Ok(true) => {
                // A new address: the agent is reached there from now on.
                self.agents.forget(&sb.id);
            }
            Ok(false) => {}
            Err(stockade_runtime::RuntimeError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        // A paused sandbox keeps its network: its entry stays for its resume.
        if matches!(sb.status, SandboxStatus::Running | SandboxStatus::Paused) {
            self.apply_egress(sb).await?;
        } else {
            self.remove_egress(sb).await;
        }
        Ok(())
    }

    /// Drops entries of sandboxes that stopped, went or moved; writes the
    /// entries running sandboxes (and warm-pool members) lack; registers
    /// every entry's policy with the filter (after a restart the registry
    /// is empty while the entries survived). On every host.
    pub async fn reconcile_egress(&self) {
        for (server, rt) in self.host_runtimes().await {
            self.reconcile_egress_on(&server, rt.as_ref()).await;
        }
    }

    async fn reconcile_egress_on(&self, server: &str, rt: &dyn stockade_runtime::Runtime) {
        let own = server == self.hosts.own_name();
        let ops = self.egress.ops.lock().await;
        match rt.prune_egress().await {
            Ok(stale) => {
                if let Some((filter, _)) = self.egress.running().filter(|_| own) {
                    for e in &stale {
                        filter.policies.remove(e.addr);
                        filter.names.forget(e.addr);
                    }
                }
            }
            Err(e) => {
                warn!(error = %e, "egress reconciliation skipped: entries could not be checked");
                return;
            }
        }
        drop(ops);
        let entries = match rt.egress_entries().await {
            Ok(e) => e,
            Err(e) => {
                warn!(error = %e, host = %server, "egress entries could not be read");
                return;
            }
        };
        // Entries written under another opt-in of private ranges (an
        // earlier start, an older version) are written again.
        let stale = rt.stale_private_entries().await.unwrap_or_else(|e| {
            warn!(error = %e, host = %server, "egress entries' private ranges could not be checked");
            Vec::new()
        });
        let filter = self.egress.running().filter(|_| own).map(|(f, _)| f);
        let mut pages = crate::access::ActivePages::new(self, 200);
        while let Some(page) = pages.next().await {
            let page = match page {
                Ok(p) => p,
                Err(e) => {
                    warn!(error = %e, "egress reconciliation: sandboxes could not be read");
                    return;
                }
            };
            for sb in &page {
                if sb.server != server
                    || sb.status != SandboxStatus::Running
                    || !sb.spec.network.allows_egress()
                {
                    continue;
                }
                match entries.iter().find(|e| e.sandbox_id == sb.id) {
                    Some(_) if stale.contains(&sb.id) => {
                        info!(sandbox.id = %sb.id, "egress entry of another opt-in of private ranges: writing it again");
                        if let Err(e) = self.apply_egress(sb).await {
                            warn!(sandbox.id = %sb.id, error = %e, "egress entry not written");
                        }
                    }
                    Some(entry) => {
                        if let Some(f) = &filter {
                            let known = f.policies.policy_for(entry.addr);
                            if known.as_deref() != Some(&sb.spec.network) {
                                f.policies.set(entry.addr, sb.spec.network.clone());
                            }
                        }
                    }
                    None => {
                        info!(sandbox.id = %sb.id, "egress entry missing: writing it again");
                        if let Err(e) = self.apply_egress(sb).await {
                            warn!(sandbox.id = %sb.id, error = %e, "egress entry not written");
                        }
                    }
                }
            }
        }
        // Warm-pool members with network access hold allow-all's entry.
        let Ok(containers) = rt.list_managed().await else {
            return;
        };
        let ports = self.egress_ports().filter(|_| own);
        for c in containers {
            let (Some(id), Some(_)) = (&c.sandbox_id, &c.pool_class) else {
                continue;
            };
            if !c.running
                || c.instance_id.as_deref() != Some(self.instance_id.as_str())
                || (entries.iter().any(|e| &e.sandbox_id == id) && !stale.contains(id))
            {
                continue;
            }
            let _ops = self.egress.ops.lock().await;
            if let Err(e) = rt.apply_egress(id, &EgressPolicy::AllowAll, ports).await {
                warn!(sandbox.id = %id, error = %e, "egress entry of a warm-pool member not written");
            }
        }
    }

    /// Where the filter listens, when it runs.
    pub fn egress_ports(&self) -> Option<RedirectPorts> {
        self.egress.running().map(|(_, p)| p)
    }
}

async fn egress_addresses(rt: &dyn stockade_runtime::Runtime, id: &SandboxId) -> Vec<IpAddr> {
    rt.egress_entries()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|e| &e.sandbox_id == id)
        .map(|e| e.addr)
        .collect()
}
