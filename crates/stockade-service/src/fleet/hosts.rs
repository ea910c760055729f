//! Several Docker hosts: the runtime of each registered
//! host, the one every operation on a sandbox goes to (its record's
//! `server`), placement, and the hosts' health.
//!
//! The server's own runtime (`--docker-host`, named `--server-name`) is
//! always a host; others are registered in the database (`hosts` table) and
//! connected here through the [`RuntimeFactory`] the binary gives, the first
//! time one is needed. Every instance reads the same table, so any instance
//! reaches every sandbox.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use stockade_core::{Host, HostState, Sandbox, SandboxId};
use stockade_runtime::{DockerConfig, DockerRuntime, IsolationConfig, Runtime, TlsFiles};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// Connects a runtime to a registered host (the binary's Docker settings
/// with the host's `dockerHost`, TLS files and name).
pub trait RuntimeFactory: Send + Sync {
    fn connect(&self, host: &Host) -> Result<Arc<dyn Runtime>, String>;
}

/// Connects registered hosts with the server's own Docker settings (pids
/// limit, OCI runtime, disk quotas, log caps, packet filter) and each
/// host's address, TLS files and name. A host's networks, bridges and chain
/// are named after it ([`IsolationConfig::for_host`]), so engines sharing
/// a machine never clash; the server's own host is never made here (the
/// service keeps the runtime it was given, with its configured names).
#[derive(Debug, Clone)]
pub struct DockerHostFactory {
    template: DockerConfig,
}

impl DockerHostFactory {
    /// `template`: the server's own [`DockerConfig`].
    pub fn new(template: DockerConfig) -> Self {
        Self { template }
    }

    /// The configuration of `host`'s runtime.
    pub fn config_for(&self, host: &Host) -> DockerConfig {
        DockerConfig {
            host: Some(host.docker_host.clone()),
            tls: host.tls.as_ref().map(|t| TlsFiles {
                ca: t.ca.clone().into(),
                cert: t.cert.clone().into(),
                key: t.key.clone().into(),
            }),
            server_name: host.name.clone(),
            // A host off this machine: its agents' port is published on
            // its address, where this server reaches them — on that
            // address only, never on every interface of the host.
            publish_address: host.address.as_deref().map(bind_address),
            isolation: IsolationConfig {
                packet_filter: self.template.isolation.packet_filter,
                private: self.template.isolation.private.clone(),
                allow_unisolated: self.template.isolation.allow_unisolated,
                ..IsolationConfig::for_host(&host.name)
            },
            ..self.template.clone()
        }
    }
}

/// The IP address a host's agents' ports are published on: the address
/// itself, or what its name resolves to here (left as the name when it does
/// not resolve; the runtime then publishes on loopback only).
fn bind_address(address: &str) -> String {
    use std::net::ToSocketAddrs;
    if address.parse::<std::net::IpAddr>().is_ok() {
        return address.to_owned();
    }
    (address, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map_or_else(|| address.to_owned(), |a| a.ip().to_string())
}

impl RuntimeFactory for DockerHostFactory {
    fn connect(&self, host: &Host) -> Result<Arc<dyn Runtime>, String> {
        let runtime = DockerRuntime::new(self.config_for(host)).map_err(|e| e.to_string())?;
        Ok(Arc::new(runtime))
    }
}

/// Settings of the hosts' registry and health checks.
#[derive(Clone)]
pub struct HostsConfig {
    /// The server's own `--docker-host`, as its host record shows it.
    pub own_docker_host: String,
    /// Connects registered hosts; `None`: only the server's own host.
    pub factory: Option<Arc<dyn RuntimeFactory>>,
    /// How often the leader checks every host.
    pub check_interval: Duration,
    /// How long one check may take before it counts as failed.
    pub check_timeout: Duration,
    /// Free bytes of a host's data root under which it counts as unhealthy.
    pub min_free_disk_bytes: u64,
}

impl std::fmt::Debug for HostsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostsConfig")
            .field("own_docker_host", &self.own_docker_host)
            .field("factory", &self.factory.is_some())
            .field("check_interval", &self.check_interval)
            .field("check_timeout", &self.check_timeout)
            .field("min_free_disk_bytes", &self.min_free_disk_bytes)
            .finish()
    }
}

impl Default for HostsConfig {
    fn default() -> Self {
        Self {
            own_docker_host: "unix:///var/run/docker.sock".into(),
            factory: None,
            check_interval: Duration::from_secs(3),
            check_timeout: Duration::from_secs(5),
            min_free_disk_bytes: 512 << 20,
        }
    }
}

/// What connects a host: a changed one is connected anew.
fn fingerprint(host: &Host) -> String {
    format!("{}|{:?}|{:?}", host.docker_host, host.tls, host.address)
}

/// A connected host: what connected it ([`fingerprint`]) and its runtime.
type Connected = (String, Arc<dyn Runtime>);

/// The runtimes of the hosts this process has used.
pub struct Hosts {
    own_name: String,
    own: Arc<dyn Runtime>,
    config: HostsConfig,
    connected: RwLock<HashMap<String, Connected>>,
    /// The hosts at the last look.
    seen: RwLock<Vec<Host>>,
    /// Hosts whose drain pass runs now (one at a time per host).
    draining: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The host of each sandbox an operation reached lately (a sandbox
    /// changes host only when a drain moves it, which updates this).
    placed: RwLock<HashMap<SandboxId, String>>,
}

/// The most sandboxes [`Hosts`] remembers the host of.
const MAX_PLACED: usize = 65_536;

impl std::fmt::Debug for Hosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosts")
            .field("own_name", &self.own_name)
            .finish_non_exhaustive()
    }
}

impl Hosts {
    /// Marks a drain pass over `host` as running; `false` when one runs.
    pub(crate) fn begin_drain(&self, host: &str) -> bool {
        self.draining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(host.to_owned())
    }

    /// Marks the drain pass over `host` as ended.
    pub(crate) fn end_drain(&self, host: &str) {
        self.draining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(host);
    }

    pub fn new(own: Arc<dyn Runtime>, config: HostsConfig) -> Self {
        Self {
            own_name: own.server_name(),
            own,
            config,
            connected: RwLock::default(),
            seen: RwLock::default(),
            draining: std::sync::Mutex::default(),
            placed: RwLock::default(),
        }
    }

    pub fn config(&self) -> &HostsConfig {
        &self.config
    }

    /// The name of the server's own host.
    pub fn own_name(&self) -> &str {
        &self.own_name
    }

    /// The server's own runtime.
    pub fn own(&self) -> &Arc<dyn Runtime> {
        &self.own
    }

    /// The runtime of `host`, connected now if it was not (or changed).
    pub fn runtime(&self, host: &Host) -> ServiceResult<Arc<dyn Runtime>> {
        if host.name == self.own_name {
            return Ok(self.own.clone());
        }
        let print = fingerprint(host);
        if let Some((p, rt)) = self
            .connected
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&host.name)
        {
            if *p == print {
                return Ok(rt.clone());
            }
        }
        let factory = self.config.factory.as_ref().ok_or_else(|| {
            ServiceError::DockerUnavailable(format!(
                "host '{}' is registered, but this server connects only its own Docker host",
                host.name
            ))
        })?;
        let rt = factory.connect(host).map_err(|e| {
            ServiceError::DockerUnavailable(format!("host '{}' cannot be reached: {e}", host.name))
        })?;
        self.connected
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(host.name.clone(), (print, rt.clone()));
        Ok(rt)
    }

    /// The health of host `name` at this process's last look (newer than
    /// the database's when this process checks the hosts).
    pub fn seen_health(&self, name: &str) -> Option<stockade_core::HostHealth> {
        let seen = self.seen.read().unwrap_or_else(|p| p.into_inner());
        seen.iter()
            .find(|h| h.name == name)
            .map(|h| h.health.clone())
    }

    /// The state of host `server` at the last look, when it is not simply
    /// active and healthy.
    pub fn state_of(&self, server: &str) -> Option<stockade_api::SandboxHostState> {
        let seen = self.seen.read().unwrap_or_else(|p| p.into_inner());
        let host = seen.iter().find(|h| h.name == server)?;
        if host.state == HostState::Active && host.health.healthy != Some(false) {
            return None;
        }
        Some(stockade_api::SandboxHostState {
            state: host.state.as_str().to_owned(),
            healthy: host.health.healthy,
            reason: host
                .state_reason
                .clone()
                .or_else(|| host.health.reason.clone()),
        })
    }

    /// Records what the last look at the hosts found; runtimes of hosts
    /// that were removed are dropped.
    pub fn observe(&self, hosts: &[Host]) {
        *self.seen.write().unwrap_or_else(|p| p.into_inner()) = hosts.to_vec();
        self.connected
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|name, _| hosts.iter().any(|h| &h.name == name));
    }

    /// Remembers that sandbox `id` lives on `server`.
    pub fn remember(&self, id: &SandboxId, server: &str) {
        let mut placed = self.placed.write().unwrap_or_else(|p| p.into_inner());
        if placed.get(id).map(String::as_str) == Some(server) {
            return;
        }
        if placed.len() >= MAX_PLACED {
            placed.clear();
        }
        placed.insert(id.clone(), server.to_owned());
    }

    fn placed(&self, id: &SandboxId) -> Option<String> {
        self.placed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Forgets the runtime of a host that was removed.
    pub fn forget(&self, name: &str) {
        self.connected
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// The runtime of a host already connected by name (no database read).
    pub fn connected(&self, name: &str) -> Option<Arc<dyn Runtime>> {
        if name == self.own_name {
            return Some(self.own.clone());
        }
        self.connected
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|(_, rt)| rt.clone())
    }
}

impl Service {
    /// The runtime of the host named `server`.
    pub async fn runtime_on(&self, server: &str) -> ServiceResult<Arc<dyn Runtime>> {
        if let Some(rt) = self.hosts.connected(server) {
            return Ok(rt);
        }
        let host = match self.store.get_host(server).await {
            Ok(h) => h,
            Err(stockade_store::StoreError::NotFound) => {
                return Err(ServiceError::DockerUnavailable(format!(
                    "host '{server}' is not registered with this deployment"
                )))
            }
            Err(e) => return Err(e.into()),
        };
        self.hosts.runtime(&host)
    }

    /// Waits (at shutdown) for what stops and destroys left to be taken
    /// down behind their answers on every host: egress entries and the
    /// volumes' own file systems.
    pub async fn finish_removals(&self) {
        for (host, rt) in self.host_runtimes().await {
            if let Some(pending) = rt.pending_removals() {
                if let Err(why) = pending.wait().await {
                    tracing::warn!(host = %host, %why, "egress entries left for reconciliation");
                }
            }
            rt.finish_disk_removals().await;
        }
    }

    /// The runtime of the host `sb` lives on: every operation on a sandbox
    /// goes through this.
    pub async fn runtime_for(&self, sb: &Sandbox) -> ServiceResult<Arc<dyn Runtime>> {
        self.hosts.remember(&sb.id, &sb.server);
        self.runtime_on(&sb.server).await
    }

    /// The hosts that took new sandboxes at the last look, the own one
    /// first, with their runtimes (the warm pool keeps members on each).
    pub fn schedulable_hosts(&self) -> Vec<(Host, Arc<dyn Runtime>)> {
        let seen = self
            .hosts
            .seen
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // Before the first look (or without a row) the own host counts as open.
        let own_seen = seen.iter().any(|h| h.name == self.hosts.own_name());
        let mut hosts: Vec<Host> = seen.into_iter().filter(Host::schedulable).collect();
        if !own_seen {
            hosts.push(crate::fleet::placement::own_host_record(self));
        }
        hosts.sort_by_key(|h| h.name != self.hosts.own_name());
        hosts
            .into_iter()
            .filter_map(|h| {
                let rt = self.hosts.runtime(&h).ok()?;
                Some((h, rt))
            })
            .collect()
    }

    /// Fills the live figures of the details of `sb` from its host.
    pub async fn fill_usage(&self, sb: &Sandbox, resp: &mut stockade_api::SandboxResponse) {
        match self.runtime_for(sb).await {
            Ok(rt) => self.usage.fill_on(rt, sb, resp).await,
            Err(e) => {
                tracing::debug!(sandbox.id = %sb.id, error = %e, "no live figures: host unreachable")
            }
        }
        resp.host = self.hosts.state_of(&sb.server);
    }

    /// The runtime of the host sandbox `id` lives on, for callers that
    /// hold only its id (the caller was authorised on the record already).
    pub async fn runtime_of(&self, id: &SandboxId) -> ServiceResult<Arc<dyn Runtime>> {
        if let Some(server) = self.hosts.placed(id) {
            return self.runtime_on(&server).await;
        }
        let owner = self
            .store
            .sandbox_owner(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("Sandbox {id} not found")))?;
        let sb = self
            .store
            .get_sandbox(&stockade_core::Scope::account(owner.account_id), id)
            .await?;
        self.runtime_for(&sb).await
    }
}

impl Service {
    /// Every host with its runtime, the server's own first; hosts that
    /// cannot be connected are left out (logged). Without a readable
    /// database, the server's own host alone.
    pub async fn host_runtimes(&self) -> Vec<(String, Arc<dyn Runtime>)> {
        let mut all = vec![(self.hosts.own_name().to_owned(), self.hosts.own().clone())];
        let hosts = match self.store.list_hosts().await {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "could not list the Docker hosts; using this server's own");
                return all;
            }
        };
        for host in hosts {
            if host.name == self.hosts.own_name() {
                continue;
            }
            match self.hosts.runtime(&host) {
                Ok(rt) => all.push((host.name, rt)),
                Err(e) => tracing::warn!(host = %host.name, error = %e, "host left out"),
            }
        }
        all
    }
}
