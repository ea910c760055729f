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
            hosts.push(crate::placement::own_host_record(self));
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

/// What one check of a host found.
struct Checked {
    healthy: bool,
    reason: Option<String>,
    cpus: Option<u32>,
    memory_bytes: Option<u64>,
    disk_free_bytes: Option<u64>,
}

/// Free bytes of `path` on this machine (a local engine's data root).
fn free_bytes(path: &str) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Checks one host: its engine answers within the timeout and, where its
/// data root is on this machine (a `unix://` engine), has free space.
async fn check_host(svc: &Service, host: &Host) -> Checked {
    let failed = |reason: String| Checked {
        healthy: false,
        reason: Some(reason),
        cpus: None,
        memory_bytes: None,
        disk_free_bytes: None,
    };
    let rt = match svc.hosts.runtime(host) {
        Ok(rt) => rt,
        Err(e) => return failed(e.to_string()),
    };
    let timeout = svc.hosts.config().check_timeout;
    let info = match tokio::time::timeout(timeout, rt.info()).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => return failed(format!("the Docker Engine does not answer: {e}")),
        Err(_) => {
            return failed(format!(
                "the Docker Engine did not answer within {} s",
                timeout.as_secs()
            ))
        }
    };
    let local = host.docker_host.starts_with("unix://") || host.docker_host.starts_with('/');
    let disk_free_bytes = match (&info.data_root, local) {
        (Some(root), true) => free_bytes(root),
        _ => None,
    };
    let min = svc.hosts.config().min_free_disk_bytes;
    let (healthy, reason) = match disk_free_bytes {
        Some(free) if free < min => (
            false,
            Some(format!(
                "its data root has {} free, under the minimum of {}",
                stockade_core::human_bytes(free),
                stockade_core::human_bytes(min)
            )),
        ),
        _ => (true, None),
    };
    Checked {
        healthy,
        reason,
        cpus: Some(info.cpus).filter(|c| *c > 0),
        memory_bytes: Some(info.memory_bytes).filter(|m| *m > 0),
        disk_free_bytes,
    }
}

/// How often an unchanged health is written again (its `checkedAt`).
const HEALTH_REWRITE_SECS: i64 = 300;

/// The reason an automatic cordon records.
fn auto_reason(why: &str) -> String {
    format!("cordoned automatically: {why}")
}

/// Checks every host once and acts on what changed: a host that
/// fails is cordoned automatically (no new placements; its sandboxes show
/// it); one that answers again is uncordoned — an administrator's cordon
/// stays — its isolation is checked, and its sandboxes whose records say
/// RUNNING but whose containers stopped while it was away are started
/// again. Returns the hosts as they are now.
pub async fn check_hosts_once(
    svc: &Service,
    prepared: &mut std::collections::HashSet<String>,
) -> Vec<Host> {
    let hosts = match crate::placement::all_hosts(svc).await {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(error = %e, "host checks: could not list the hosts");
            return Vec::new();
        }
    };
    let checks = futures_util::future::join_all(hosts.iter().map(|h| check_host(svc, h))).await;
    let now = chrono::Utc::now();
    let mut after = Vec::with_capacity(hosts.len());
    for (mut host, checked) in hosts.into_iter().zip(checks) {
        let was_failing = host.health.healthy == Some(false);
        let before = host.health.clone();
        host.health = stockade_core::HostHealth {
            healthy: Some(checked.healthy),
            reason: checked.reason.clone(),
            checked_at: Some(now),
            failing_since: match checked.healthy {
                true => None,
                false => host.health.failing_since.or(Some(now)),
            },
            cpus: checked.cpus.or(host.health.cpus),
            memory_bytes: checked.memory_bytes.or(host.health.memory_bytes),
            disk_free_bytes: checked.disk_free_bytes,
        };
        // Written when it changed, else once in a while: a write every few
        // seconds would also tell a database that refuses bigger writes
        // (a full disk) that it is healthy again.
        let changed_health = (
            before.healthy,
            &before.reason,
            before.cpus,
            before.memory_bytes,
        ) != (
            host.health.healthy,
            &host.health.reason,
            host.health.cpus,
            host.health.memory_bytes,
        );
        let stale = before
            .checked_at
            .is_none_or(|t| now - t > chrono::Duration::seconds(HEALTH_REWRITE_SECS));
        if changed_health || stale {
            if let Err(e) = svc.store.record_host_health(&host.name, &host.health).await {
                // The own host may have no row (a store without hosts support).
                tracing::debug!(host = %host.name, error = %e, "host checks: health not recorded");
            }
        }
        // Back (or first seen): isolated and its sandboxes running again
        // before it takes new ones.
        if checked.healthy && (was_failing || !prepared.contains(&host.name)) {
            if let Ok(rt) = svc.hosts.runtime(&host) {
                if host.name != svc.hosts.own_name() {
                    // The own host's isolation is the service's own check.
                    let report = rt.ensure_isolation().await;
                    if report.status() == stockade_runtime::IsolationStatus::Degraded {
                        tracing::error!(host = %host.name, report = %report.summary(), "sandboxes on this host are not fully isolated");
                    }
                }
                prepared.insert(host.name.clone());
                if was_failing {
                    recover_host(svc, &host.name, rt.as_ref()).await;
                }
            }
        }
        let mut changed = false;
        if !checked.healthy && host.state == HostState::Active {
            let why = checked.reason.clone().unwrap_or_default();
            tracing::warn!(host = %host.name, reason = %why, "host fails its checks: cordoned, no new sandboxes go there");
            host.state = HostState::Cordoned;
            host.auto_cordoned = true;
            host.state_reason = Some(auto_reason(&why));
            changed = true;
        } else if checked.healthy && host.auto_cordoned && host.state == HostState::Cordoned {
            tracing::info!(host = %host.name, "host answers again: uncordoned");
            host.state = HostState::Active;
            host.auto_cordoned = false;
            host.state_reason = None;
            changed = true;
        } else if !checked.healthy && host.auto_cordoned {
            // Still failing: keep the latest reason.
            let why = auto_reason(checked.reason.as_deref().unwrap_or_default());
            if host.state_reason.as_deref() != Some(why.as_str()) {
                host.state_reason = Some(why);
                changed = true;
            }
        }
        if changed {
            host.updated_at = now;
            if let Err(e) = svc.store.update_host(&host).await {
                tracing::warn!(host = %host.name, error = %e, "host checks: state not recorded");
            }
        }
        if checked.healthy && host.state == HostState::Draining {
            start_drain(svc, &host);
        }
        after.push(host);
    }
    svc.hosts.observe(&after);
    after
}

/// Starts a drain pass over `host` unless one runs.
fn start_drain(svc: &Service, host: &Host) {
    let mut running = svc.hosts.draining.lock().unwrap_or_else(|p| p.into_inner());
    if !running.insert(host.name.clone()) {
        return;
    }
    let (svc, host) = (svc.clone(), host.clone());
    tokio::spawn(async move {
        crate::drain::drain_once(&svc, &host).await;
        svc.hosts
            .draining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&host.name);
    });
}

/// Starts again the sandboxes of `server` that were running when it went
/// away (their records still say RUNNING: reconciliation leaves an
/// unhealthy host alone) and whose containers stopped with its engine.
async fn recover_host(svc: &Service, server: &str, rt: &dyn Runtime) {
    let mut after: Option<SandboxId> = None;
    let mut restarted = 0usize;
    loop {
        let page = match svc
            .store
            .list_active_sandboxes_page(after.as_ref(), 500)
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(host = %server, error = %e, "host recovery: records not read");
                return;
            }
        };
        after = page.last().map(|sb| sb.id.clone());
        for sb in page
            .iter()
            .filter(|sb| sb.server == server && sb.status == stockade_core::SandboxStatus::Running)
        {
            match rt.inspect(&sb.id).await {
                Ok(Some(c)) if !c.running => {
                    svc.agents.forget(&sb.id);
                    match crate::lifecycle::start(svc, sb.clone()).await {
                        Ok(_) => restarted += 1,
                        Err(e) => {
                            tracing::warn!(sandbox.id = %sb.id, error = %e, "host recovery: not started again")
                        }
                    }
                }
                _ => {}
            }
        }
        if page.len() < 500 {
            break;
        }
    }
    tracing::info!(host = %server, restarted, "host is back: its sandboxes are running again");
}

/// The leader's host checks, every `check_interval` until `term` ends.
pub(crate) async fn check_periodically(svc: Service, term: tokio_util::sync::CancellationToken) {
    let mut prepared = std::collections::HashSet::new();
    let mut tick = tokio::time::interval(svc.hosts.config().check_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = term.cancelled() => return,
            _ = tick.tick() => {
                check_hosts_once(&svc, &mut prepared).await;
            }
        }
    }
}

/// What every instance that does not lead looks at: the hosts' states (the
/// warm pool serves only while the own host takes sandboxes; removed hosts'
/// runtimes are dropped).
pub(crate) async fn observe_periodically(
    svc: Service,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(svc.hosts.config().check_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {
                if svc.leader.is_leader() {
                    continue;
                }
                if let Ok(hosts) = crate::placement::all_hosts(&svc).await {
                    svc.hosts.observe(&hosts);
                }
            }
        }
    }
}
