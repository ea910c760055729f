//! The warm pool: sandboxes created and started ahead of any
//! request, so that a create whose settings fit is served in milliseconds.
//!
//! A *member* is a container `stockade-{id}` with its volume
//! `agent-sandbox-{id}`, made with a pre-generated sandbox id and a class's
//! image and resources, the default main process, an empty environment and
//! no account label (labels `io.stockade.pool-member={id}` and
//! `io.stockade.pool-class={key}`). It has no record, so no account can see
//! it. A create that fits a class *claims* a member: the record is inserted
//! under the member's id for the caller (the database is the owner from
//! then on: Docker cannot relabel a container). The insert is the claim:
//! the sandbox id is the primary key, so two claimers (also two server
//! instances) can never both win one member. Nothing is written into the
//! container: exec takes the environment from the record, and every start
//! writes it for the main process (`/.stockade/main.env`, as after a PATCH).
//!
//! Invariants:
//! - A pool-labelled container whose id has no record has never been given
//!   to an account: a member is only handed out once its record exists, and
//!   a claimed member is only ever removed whole, never returned to the pool
//!   (a rollback that cannot remove it keeps the record, soft-deleted, for
//!   reconciliation to finish).
//! - Every member has a volume of its own, made with it: no data passes
//!   between accounts.
//! - Reconciliation and the volume endpoints treat a pool-labelled container
//!   or volume without a record as the pool's, and one with a record like
//!   any other sandbox's (its owner comes from the record).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use stockade_core::netpolicy::EgressPolicy;
use stockade_core::spec::SpecInput;
use stockade_core::{
    Defaults, Resources, Sandbox, SandboxId, SandboxName, SandboxSpec, SandboxStatus,
};
use stockade_runtime::{PoolMemberSpec, Runtime};
use stockade_store::StoreError;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::ConfigError;
use crate::error::ServiceError;
use crate::interact::agent::Vouch;
use crate::Service;

/// How the warm pool is set up; no classes means no pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub classes: Vec<PoolClassConfig>,
    /// How often the pool checks its members and refills (it also refills
    /// right after every claim).
    pub check_interval: Duration,
    /// Remove the members when the server shuts down (otherwise the next
    /// start adopts them).
    pub drain_on_shutdown: bool,
    /// Members made at the same time while refilling.
    pub max_concurrent_fills: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            classes: Vec::new(),
            check_interval: Duration::from_secs(30),
            drain_on_shutdown: false,
            max_concurrent_fills: 2,
        }
    }
}

/// One class as configured: how many members, and the settings a create
/// must ask for to be served by them (`None`: the server's default).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolClassConfig {
    pub size: usize,
    pub image: Option<String>,
    pub cpu_cores: Option<f64>,
    pub memory_gb: Option<f64>,
    pub disk_size_gb: Option<u32>,
    pub network_access: bool,
}

impl PoolClassConfig {
    /// The default image and resources, `size` members.
    pub fn default_class(size: usize) -> Self {
        Self {
            size,
            image: None,
            cpu_cores: None,
            memory_gb: None,
            disk_size_gb: None,
            network_access: true,
        }
    }

    /// Parses `SIZE[,image=IMAGE][,cpu=CORES][,memory=GB][,disk=GB][,network=on|off]`,
    /// e.g. `4` or `2,image=python:3.13-bookworm,cpu=2,memory=4`.
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        let mut parts = s.split(',').map(str::trim);
        let size = parts.next().unwrap_or_default();
        let size: usize = size.parse().ok().filter(|n| *n <= 256).ok_or_else(|| {
            format!(
                "invalid warm pool '{s}': start with the number of members (0-256), \
                 e.g. `4` or `2,image=python:3.13-bookworm,cpu=2,memory=4,network=off`"
            )
        })?;
        let mut class = Self::default_class(size);
        for part in parts.filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("invalid warm pool setting '{part}': expected KEY=VALUE"))?;
            let number = |v: &str| {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| {
                        format!("invalid warm pool {key} '{v}': expected a positive number")
                    })
            };
            match key.trim() {
                "image" => class.image = Some(value.trim().to_owned()),
                "cpu" => class.cpu_cores = Some(number(value.trim())?),
                "memory" => class.memory_gb = Some(number(value.trim())?),
                "disk" => {
                    class.disk_size_gb = Some(
                        value
                            .trim()
                            .parse::<u32>()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| {
                                format!(
                                    "invalid warm pool disk '{value}': expected whole gigabytes"
                                )
                            })?,
                    )
                }
                "network" => {
                    class.network_access = match value.trim() {
                        "on" | "true" | "allow-all" => true,
                        "off" | "false" | "deny-all" => false,
                        other => {
                            return Err(format!(
                                "invalid warm pool network '{other}': use on or off"
                            )
                            .into())
                        }
                    }
                }
                other => {
                    return Err(format!(
                    "unknown warm pool setting '{other}': use image, cpu, memory, disk or network"
                )
                    .into())
                }
            }
        }
        Ok(class)
    }
}

/// A class with every setting resolved and checked like a create's.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolClass {
    /// Identifies the class on its members' labels.
    pub key: String,
    pub size: usize,
    pub image: String,
    pub cpu_cores: f64,
    pub memory_gb: f64,
    pub network_access: bool,
    /// diskSizeGB of its members: a claim cannot change a quota.
    pub disk_size_gb: u32,
    memory_bytes: i64,
}

impl PoolClass {
    fn resolve(c: &PoolClassConfig, defaults: &Defaults) -> Result<Self, String> {
        let input = SpecInput {
            docker_image: c.image.clone(),
            cpu_cores: c.cpu_cores,
            memory_gb: c.memory_gb,
            disk_size_gb: c.disk_size_gb.map(f64::from),
            network_access: Some(c.network_access),
            ..SpecInput::default()
        };
        let spec = SandboxSpec::from_input(input, &SandboxId::generate(), defaults)
            .map_err(|e| format!("invalid warm pool class: {e}"))?;
        let network_access = spec.network.allows_egress();
        Ok(Self {
            key: format!(
                "{} cpu={} memory={} disk={} network={}",
                spec.docker_image,
                spec.cpu_cores,
                spec.memory_gb,
                spec.disk_size_gb,
                if network_access { "on" } else { "off" }
            ),
            size: c.size,
            memory_bytes: spec.memory_bytes(),
            image: spec.docker_image,
            cpu_cores: spec.cpu_cores,
            memory_gb: spec.memory_gb,
            network_access,
            disk_size_gb: spec.disk_size_gb,
        })
    }

    /// Whether a member of this class is the container a create of `spec`
    /// would make: same image and resources, network and main process.
    /// Everything else (name, labels, tags, ports, timeout, environment,
    /// team) lives in the record or is applied at the claim.
    /// What one member holds on its host.
    fn resources(&self) -> Resources {
        Resources {
            cpu_millis: stockade_core::quota::cpu_millis(self.cpu_cores),
            memory_bytes: self.memory_bytes.max(0) as u64,
        }
    }

    pub fn fits(&self, spec: &SandboxSpec) -> bool {
        spec.start_command.is_none()
            && spec.docker_image == self.image
            && spec.cpu_cores == self.cpu_cores
            && spec.memory_gb == self.memory_gb
            && spec.network.allows_egress() == self.network_access
            && spec.disk_size_gb == self.disk_size_gb
            && spec.gpu_count == 0
            // A member's container mounts no shared volume.
            && spec.mounts.is_empty()
    }

    fn member(&self, svc: &Service) -> PoolMemberSpec {
        let sandbox_id = SandboxId::generate();
        PoolMemberSpec {
            // Its token is the future sandbox's: derived from its id.
            agent_token: Some(svc.agents.token(&sandbox_id)),
            sandbox_id,
            instance_id: svc.instance_id.clone(),
            class: self.key.clone(),
            image: self.image.clone(),
            cpu_cores: self.cpu_cores,
            memory_bytes: self.memory_bytes,
            network_access: self.network_access,
            disk_bytes: Some(u64::from(self.disk_size_gb) << 30),
        }
    }
}

#[derive(Default)]
struct ClassState {
    ready: VecDeque<SandboxId>,
    filling: usize,
    /// Consecutive failed fills, and when the next may be tried.
    failures: u32,
    retry_at: Option<Instant>,
}

/// Where members of a class wait: (host name, class key). Every host that
/// takes sandboxes keeps each class's members.
type Slot = (String, String);

/// The pool of one server process: its classes and their ready members on
/// every host.
pub struct Pool {
    classes: Vec<PoolClass>,
    config: PoolConfig,
    state: Mutex<HashMap<Slot, ClassState>>,
    wake: Notify,
    /// Fitting creates served by a member, and those that found none.
    hits: AtomicU64,
    misses: AtomicU64,
    takes: Mutex<Takes>,
}

/// The claims of the latest burst: when its first and its latest member
/// were taken.
#[derive(Debug, Default, Clone, Copy)]
struct Takes {
    first: Option<Instant>,
    last: Option<Instant>,
}

/// Refills start once claims pause this long: a fill takes seconds and
/// cannot serve the burst under way, while its Docker work (create, disk,
/// network) would take the CPU that burst's claims and first commands run on.
const REFILL_QUIET: Duration = Duration::from_millis(250);

/// … or this long after a burst's first claim, so a steady stream of claims
/// still has its members replaced.
const REFILL_MAX_WAIT: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("classes", &self.classes)
            .field("ready", &self.ready())
            .finish()
    }
}

impl Pool {
    /// Resolves the configured classes against the sandbox defaults.
    pub fn new(config: &PoolConfig, defaults: &Defaults) -> Result<Self, ConfigError> {
        let mut classes: Vec<PoolClass> = Vec::new();
        for c in config.classes.iter().filter(|c| c.size > 0) {
            let class = PoolClass::resolve(c, defaults)?;
            match classes.iter_mut().find(|k| k.key == class.key) {
                Some(same) => same.size += class.size,
                None => classes.push(class),
            }
        }
        Ok(Self {
            state: Mutex::new(HashMap::new()),
            classes,
            config: config.clone(),
            wake: Notify::new(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            takes: Mutex::default(),
        })
    }

    /// Whether any class is configured.
    pub fn enabled(&self) -> bool {
        !self.classes.is_empty()
    }

    pub fn classes(&self) -> &[PoolClass] {
        &self.classes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Slot, ClassState>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ready members per class key, every host together.
    pub fn ready(&self) -> Vec<(String, usize)> {
        let st = self.lock();
        self.classes
            .iter()
            .map(|c| {
                let n = st
                    .iter()
                    .filter(|((_, k), _)| *k == c.key)
                    .map(|(_, s)| s.ready.len())
                    .sum();
                (c.key.clone(), n)
            })
            .collect()
    }

    /// Ready members on host `host`, every class together.
    pub fn ready_on(&self, host: &str) -> usize {
        self.lock()
            .iter()
            .filter(|((h, _), _)| h == host)
            .map(|(_, s)| s.ready.len())
            .sum()
    }

    /// Ready members of every class together.
    pub fn ready_total(&self) -> usize {
        self.lock().values().map(|s| s.ready.len()).sum()
    }

    /// Members being made right now.
    pub fn filling(&self) -> usize {
        self.lock().values().map(|s| s.filling).sum()
    }

    /// The ready members, every class together.
    pub fn members(&self) -> Vec<SandboxId> {
        self.lock()
            .values()
            .flat_map(|s| s.ready.iter().cloned())
            .collect()
    }

    /// Whether `id` is one of this process's ready members.
    pub fn holds(&self, id: &SandboxId) -> bool {
        self.lock().values().any(|s| s.ready.contains(id))
    }

    /// The class that serves a create of `spec`, if any.
    pub fn class_for(&self, spec: &SandboxSpec) -> Option<&PoolClass> {
        self.classes.iter().find(|c| c.fits(spec))
    }

    /// CPU and memory the ready members hold on host `host` (for admission control;
    /// members being made count through their admission grants).
    pub fn reserved_on(&self, host: &str) -> Resources {
        let st = self.lock();
        st.iter()
            .filter(|((h, _), _)| h == host)
            .filter_map(|((_, key), s)| {
                let c = self.classes.iter().find(|c| &c.key == key)?;
                Some(c.resources().times(s.ready.len() as u64))
            })
            .fold(Resources::default(), Resources::plus)
    }

    fn take(&self, slot: &Slot) -> Option<SandboxId> {
        let id = self.lock().get_mut(slot)?.ready.pop_front()?;
        let now = Instant::now();
        let mut takes = self.takes.lock().unwrap_or_else(|p| p.into_inner());
        if takes
            .last
            .is_none_or(|last| now.duration_since(last) > REFILL_QUIET)
        {
            takes.first = Some(now);
        }
        takes.last = Some(now);
        Some(id)
    }

    /// When refills may start after the latest burst of claims.
    fn refill_at(&self) -> Option<Instant> {
        let takes = *self.takes.lock().unwrap_or_else(|p| p.into_inner());
        Some((takes.last? + REFILL_QUIET).min(takes.first? + REFILL_MAX_WAIT))
    }

    fn put_back(&self, slot: &Slot, id: SandboxId) {
        if let Some(s) = self.lock().get_mut(slot) {
            s.ready.push_front(id);
        }
    }

    fn forget(&self, id: &SandboxId) {
        for s in self.lock().values_mut() {
            s.ready.retain(|r| r != id);
        }
    }

    /// Asks the refill task to look now.
    fn wake(&self) {
        self.wake.notify_one();
    }

    /// The pool's Prometheus metrics: ready members per class and
    /// fitting creates by whether a member was ready. Empty without a pool.
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write as _;
        if !self.enabled() {
            return String::new();
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP stockade_pool_ready Warm-pool sandboxes ready to be claimed, by class.\n\
             # TYPE stockade_pool_ready gauge"
        );
        for (key, ready) in self.ready() {
            let class = key.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(out, "stockade_pool_ready{{class=\"{class}\"}} {ready}");
        }
        let _ = writeln!(
            out,
            "# HELP stockade_pool_claims_total Creates that fit a warm-pool class: served by a \
             ready member (hit) or made cold because none was ready (miss).\n\
             # TYPE stockade_pool_claims_total counter\n\
             stockade_pool_claims_total{{result=\"hit\"}} {}\n\
             stockade_pool_claims_total{{result=\"miss\"}} {}",
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed)
        );
        out
    }
}

/// The record of `sb` as served by the member `id`, RUNNING from `now`.
fn claimed_record(sb: &Sandbox, id: &SandboxId, container_id: String) -> Sandbox {
    let mut claimed = sb.clone();
    // A name that defaulted to the id follows the id.
    if claimed.spec.name.as_str() == sb.id.as_str() {
        claimed.spec.name = SandboxName::from_id(id);
    }
    // As the store keeps it (microseconds), so the agent client handed over
    // at the claim matches the session read back later.
    let now = chrono::SubsecRound::trunc_subsecs(Utc::now(), 6);
    claimed.id = id.clone();
    claimed.container_id = Some(container_id);
    claimed.status = SandboxStatus::Running;
    claimed.status_reason = None;
    claimed.started_at = Some(now);
    claimed.session_expires_at = claimed.session_deadline(now);
    claimed
}

/// What the warm pool made of a create.
#[derive(Debug)]
pub enum Claim {
    /// Served: the RUNNING sandbox, under the member's id (not the
    /// create's), on the member's host.
    Served(Sandbox),
    /// The create failed (its name is taken …).
    Failed(ServiceError),
    /// The member was claimed but cannot serve (its egress policy could not
    /// be written): the caller destroys it and fails the create.
    Unusable(Sandbox, ServiceError),
}

/// Serves the create of `sb` from the warm pool: `None` when it does not
/// fit a class or no member is ready on a host it may go to (the caller
/// creates it cold).
#[tracing::instrument(name = "pool_claim", skip_all, fields(account.id = %sb.account_id))]
pub async fn claim(svc: &Service, sb: &Sandbox) -> Option<Claim> {
    let pool = &svc.pool;
    let class = pool.class_for(&sb.spec)?;
    // The hosts it may go to, the own one first; allow and deny
    // lists only where the egress filter runs.
    let own_only = crate::net::egress::needs_filter(&sb.spec.network);
    let hosts: Vec<(String, Arc<dyn Runtime>)> = svc
        .schedulable_hosts()
        .into_iter()
        .filter(|(h, _)| sb.spec.placement.allows(&h.name, &h.labels))
        .filter(|(h, _)| !own_only || h.name == svc.hosts.own_name())
        .map(|(h, rt)| (h.name, rt))
        .collect();
    for _ in 0..3 {
        let Some((slot, rt, id)) = hosts.iter().find_map(|(host, rt)| {
            let slot = (host.clone(), class.key.clone());
            pool.take(&slot).map(|id| (slot, rt.clone(), id))
        }) else {
            debug!(class = %class.key, "warm pool empty: creating cold");
            pool.misses.fetch_add(1, Ordering::Relaxed);
            pool.wake();
            return None;
        };
        // The member's room stays held until the record shows the
        // sandbox, so the refill the take starts cannot overfill the host.
        let _held = crate::fleet::admission::hold_claim(svc, &id, &slot.0, class.resources());
        pool.wake();
        // Proof that the member runs, and so that its address is still its
        // own: an agent answering there is not enough (another sandbox may
        // have taken the address of a member that died), so the member's
        // agent proves it holds the member's token; failing an answer
        // either way, Docker's word. The address is the egress filter's.
        let (address, container_id) = match svc.agents.vouch(&id).await {
            Vouch::Member { ip, container_id } => (Some(ip), container_id),
            Vouch::Impostor => {
                warn!(sandbox.id = %id, "something else answers at a warm pool member's address: discarding the member");
                discard(svc, &slot.0, id);
                continue;
            }
            Vouch::Unknown => match rt.inspect(&id).await {
                Ok(Some(c)) if c.running => (c.address, c.container_id),
                other => {
                    warn!(sandbox.id = %id, state = ?other.as_ref().map(|c| c.as_ref().map(|c| c.running)), "warm pool member is not running: discarding it");
                    discard(svc, &slot.0, id);
                    continue;
                }
            },
        };
        let mut claimed = claimed_record(sb, &id, container_id);
        claimed.server = slot.0.clone();
        match svc.store.insert_sandbox(&claimed).await {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) => {
                if let Ok(Some(_)) = svc.store.sandbox_owner(&id).await {
                    // Another server instance claimed this member first.
                    debug!(sandbox.id = %id, "warm pool member claimed elsewhere");
                    continue;
                }
                pool.put_back(&slot, id);
                return Some(Claim::Failed(ServiceError::Conflict(format!(
                    "A sandbox named '{}' already exists in this account",
                    claimed.spec.name
                ))));
            }
            Err(e) => {
                pool.put_back(&slot, id);
                return Some(Claim::Failed(e.into()));
            }
        }
        svc.hosts.remember(&id, &slot.0);
        // From here on the member is the caller's: it never goes back. Its
        // environment needs no write: exec takes it from the record, and
        // every start writes it for the main process (as after a PATCH).
        // Its egress entry is allow-all's (written at the fill): another
        // policy is written now.
        if claimed.spec.network != EgressPolicy::AllowAll {
            if let Err(e) = svc.apply_egress(&claimed).await {
                warn!(sandbox.id = %id, error = %e, "egress policy of a claimed member not written; destroying it");
                return Some(Claim::Unusable(claimed, e));
            }
        } else {
            svc.register_egress(&claimed, address);
        }
        svc.agents.adopt(&id, claimed.started_at);
        pool.hits.fetch_add(1, Ordering::Relaxed);
        info!(sandbox.id = %id, account.id = %claimed.account_id, class = %class.key, host = %slot.0, "sandbox created from the warm pool");
        return Some(Claim::Served(claimed));
    }
    None
}

/// Removes a member on `host` that can no longer be claimed, in the
/// background.
fn discard(svc: &Service, host: &str, id: SandboxId) {
    svc.pool.forget(&id);
    svc.agents.forget(&id);
    let (svc, host) = (svc.clone(), host.to_owned());
    tokio::spawn(async move {
        let removed = match svc.runtime_on(&host).await {
            Ok(rt) => rt.remove(&id, false).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = removed {
            warn!(sandbox.id = %id, host = %host, error = %e, "could not remove a warm pool member");
        }
    });
}

/// Keeps the pool filled until `shutdown`: adopts the members a previous
/// run left (removing what no class wants), then refills after every claim
/// and every `check_interval`, and checks that the ready members still run
/// and are still unclaimed. On shutdown waits for fills in flight, and
/// removes the members when `drain_on_shutdown` is set.
pub async fn run(svc: Service, shutdown: CancellationToken) {
    let pool = svc.pool.clone();
    // Without classes this only removes the members an earlier run left.
    adopt(&svc).await;
    if !pool.enabled() {
        return;
    }
    let mut fills: JoinSet<(Slot, Result<SandboxId, String>)> = JoinSet::new();
    let mut tick = tokio::time::interval(pool.config.check_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate: adopt just looked
    loop {
        start_fills(&svc, &mut fills);
        let now = Instant::now();
        let next_retry = pool
            .lock()
            .values()
            .filter_map(|s| s.retry_at)
            .chain(pool.refill_at().filter(|at| *at > now))
            .min()
            .map(tokio::time::Instant::from_std);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = pool.wake.notified() => {}
            _ = tick.tick() => check(&svc).await,
            Some(done) = fills.join_next(), if !fills.is_empty() => filled(&svc, done),
            _ = async {
                match next_retry {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
    while let Some(done) = fills.join_next().await {
        filled(&svc, done);
    }
    if pool.config.drain_on_shutdown {
        let members: Vec<(String, SandboxId)> = pool
            .lock()
            .iter_mut()
            .flat_map(|((host, _), s)| {
                std::mem::take(&mut s.ready)
                    .into_iter()
                    .map(|id| (host.clone(), id))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (host, id) in &members {
            let removed = match svc.runtime_on(host).await {
                Ok(rt) => rt.remove(id, false).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = removed {
                warn!(sandbox.id = %id, host = %host, error = %e, "could not remove a warm pool member at shutdown");
            }
        }
        info!(removed = members.len(), "warm pool drained");
    }
}

/// Starts fills for every class below its size on every host that takes
/// sandboxes, within the concurrency limit and any backoff after failures.
fn start_fills(svc: &Service, fills: &mut JoinSet<(Slot, Result<SandboxId, String>)>) {
    let pool = &svc.pool;
    let now = Instant::now();
    if pool.refill_at().is_some_and(|at| at > now) {
        return;
    }
    for (host, rt) in svc.schedulable_hosts() {
        let own = host.name == svc.hosts.own_name();
        for class in &pool.classes {
            let slot: Slot = (host.name.clone(), class.key.clone());
            loop {
                if fills.len() >= pool.config.max_concurrent_fills.max(1) {
                    return;
                }
                {
                    let mut st = pool.lock();
                    let s = st.entry(slot.clone()).or_default();
                    if s.ready.len() + s.filling >= class.size
                        || s.retry_at.is_some_and(|t| t > now)
                    {
                        break;
                    }
                    s.filling += 1;
                }
                let member = class.member(svc);
                let (svc, rt, slot) = (svc.clone(), rt.clone(), slot.clone());
                fills.spawn(async move {
                    // Members hold room like sandboxes; none on a
                    // full host.
                    let admitted = match crate::fleet::admission::check_pool_fill(
                        &svc, &member, &slot.0,
                    )
                    .await
                    {
                        Ok(admitted) => admitted,
                        Err(why) => return (slot, Err(why.to_string())),
                    };
                    let made = async {
                        let container_id = rt.create_pool_member(&member).await?;
                        // Its agent, connected now rather than at the first
                        // command; in the background, so the member is
                        // ready at once (a claim before the agent answers
                        // finds it as usual). On the own host, whose
                        // members' addresses the server reaches.
                        if own {
                            if let Ok(Some(ip)) = rt.container_address(&member.sandbox_id).await {
                                let (svc, id) = (svc.clone(), member.sandbox_id.clone());
                                tokio::spawn(async move {
                                    svc.agents.prime(&id, ip, container_id).await
                                });
                            }
                        }
                        // A member with network access gets the egress
                        // entry of the default policy now, so that claiming
                        // it for an allow-all sandbox writes nothing.
                        if member.network_access {
                            let ports = svc.egress_ports().filter(|_| own);
                            if let Err(e) = rt
                                .apply_egress(&member.sandbox_id, &EgressPolicy::AllowAll, ports)
                                .await
                            {
                                let _ = rt.remove(&member.sandbox_id, false).await;
                                return Err(e);
                            }
                        }
                        Ok(())
                    }
                    .await
                    .map(|()| member.sandbox_id)
                    .map_err(|e: stockade_runtime::RuntimeError| e.to_string());
                    if let (Some(admitted), Ok(id)) = (admitted, &made) {
                        admitted.until_member_ready(id);
                    }
                    (slot, made)
                });
            }
        }
    }
}

/// Records the end of a fill.
fn filled(svc: &Service, done: Result<(Slot, Result<SandboxId, String>), tokio::task::JoinError>) {
    let Ok((slot, made)) = done else {
        warn!("a warm pool fill task failed");
        return;
    };
    let mut st = svc.pool.lock();
    let Some(s) = st.get_mut(&slot) else {
        if let Ok(id) = &made {
            svc.admission.member_ready(id);
        }
        return;
    };
    s.filling = s.filling.saturating_sub(1);
    match made {
        Ok(id) => {
            debug!(sandbox.id = %id, class = %slot.1, host = %slot.0, "warm pool member ready");
            svc.admission.member_ready(&id);
            s.ready.push_back(id);
            s.failures = 0;
            s.retry_at = None;
        }
        Err(e) => {
            s.failures += 1;
            let wait = Duration::from_secs((1u64 << s.failures.min(6)).min(60));
            s.retry_at = Some(Instant::now() + wait);
            warn!(class = %slot.1, host = %slot.0, error = %e, retry_in_s = wait.as_secs(), "could not make a warm pool member");
        }
    }
}

/// Drops ready members that stopped, vanished or were claimed by another
/// server instance, and those of hosts that no longer take sandboxes
/// (cordoned, draining, failing, removed).
async fn check(svc: &Service) {
    let open: Vec<String> = svc
        .schedulable_hosts()
        .into_iter()
        .map(|(h, _)| h.name)
        .collect();
    let slots: Vec<(String, Vec<SandboxId>)> = {
        let st = svc.pool.lock();
        let mut by_host: HashMap<String, Vec<SandboxId>> = HashMap::new();
        for ((host, _), s) in st.iter() {
            by_host
                .entry(host.clone())
                .or_default()
                .extend(s.ready.iter().cloned());
        }
        by_host.into_iter().collect()
    };
    for (host, members) in slots {
        if !open.contains(&host) {
            for id in members {
                info!(sandbox.id = %id, host = %host, "warm pool member of a host that takes no sandboxes now: removing it");
                discard(svc, &host, id);
            }
            continue;
        }
        let containers = match svc.runtime_on(&host).await {
            Ok(rt) => match rt.list_managed().await {
                Ok(c) => c,
                Err(e) => {
                    debug!(host = %host, error = %e, "warm pool check skipped: Docker unavailable");
                    continue;
                }
            },
            Err(_) => continue,
        };
        for id in members {
            let running = containers
                .iter()
                .any(|c| c.sandbox_id.as_ref() == Some(&id) && c.running && c.pool_class.is_some());
            match svc.store.sandbox_owner(&id).await {
                Ok(Some(_)) => {
                    debug!(sandbox.id = %id, "warm pool member was claimed elsewhere");
                    svc.pool.forget(&id);
                }
                Ok(None) if !running => {
                    warn!(sandbox.id = %id, "warm pool member stopped or vanished: replacing it");
                    discard(svc, &host, id);
                }
                _ => {}
            }
        }
    }
}

/// At start: takes over the running members of this installation that no
/// record claims, on every host, up to each class's size, and removes every
/// other member (stopped ones, those of classes no longer configured, the
/// surplus).
async fn adopt(svc: &Service) {
    let (mut adopted, mut removed) = (0usize, 0usize);
    for (host, rt) in svc.host_runtimes().await {
        let containers = match rt.list_managed().await {
            Ok(c) => c,
            Err(e) => {
                warn!(host = %host, error = %e, "warm pool: could not list containers to adopt there");
                continue;
            }
        };
        for c in containers {
            let (Some(class_key), Some(id)) = (c.pool_class.as_ref(), c.sandbox_id.as_ref()) else {
                continue;
            };
            if c.instance_id.as_deref() != Some(svc.instance_id.as_str()) {
                continue;
            }
            match svc.store.sandbox_owner(id).await {
                Ok(None) => {}
                // Claimed: a sandbox like any other now.
                Ok(Some(_)) => continue,
                Err(e) => {
                    warn!(sandbox.id = %id, error = %e, "warm pool: record lookup failed; leaving the container alone");
                    continue;
                }
            }
            let size = svc
                .pool
                .classes
                .iter()
                .find(|k| &k.key == class_key)
                .map_or(0, |k| k.size);
            let taken = c.running && {
                let mut st = svc.pool.lock();
                let s = st.entry((host.clone(), class_key.clone())).or_default();
                if s.ready.len() < size {
                    s.ready.push_back(id.clone());
                    true
                } else {
                    false
                }
            };
            if taken {
                adopted += 1;
                continue;
            }
            match rt.remove(id, false).await {
                Ok(()) => removed += 1,
                Err(e) => {
                    warn!(sandbox.id = %id, error = %e, "warm pool: could not remove a member")
                }
            }
        }
    }
    if adopted + removed > 0 {
        info!(adopted, removed, "warm pool: members of an earlier run");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_parse_and_name_what_is_wrong() {
        assert_eq!(
            PoolClassConfig::parse("4").unwrap(),
            PoolClassConfig::default_class(4)
        );
        let c = PoolClassConfig::parse("2, image=python:3.13-bookworm ,cpu=2,memory=4,network=off")
            .unwrap();
        assert_eq!(c.size, 2);
        assert_eq!(c.image.as_deref(), Some("python:3.13-bookworm"));
        assert_eq!((c.cpu_cores, c.memory_gb), (Some(2.0), Some(4.0)));
        assert!(!c.network_access);
        for (bad, says) in [
            ("", "number of members"),
            ("x", "number of members"),
            ("1000", "number of members"),
            ("2,cpu", "KEY=VALUE"),
            ("2,cpu=0", "positive number"),
            ("2,gpu=1", "unknown warm pool setting 'gpu'"),
            ("2,network=maybe", "use on or off"),
        ] {
            let err = PoolClassConfig::parse(bad).unwrap_err();
            assert!(err.0.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn classes_resolve_against_the_defaults_and_fit_default_creates() {
        let defaults = Defaults {
            image: "busybox:latest".into(),
            ..Defaults::default()
        };
        let pool = Pool::new(
            &PoolConfig {
                classes: vec![
                    PoolClassConfig::default_class(2),
                    PoolClassConfig::default_class(1),
                    PoolClassConfig::parse("1,cpu=2,memory=4,network=off").unwrap(),
                    PoolClassConfig::parse("1,disk=20").unwrap(),
                ],
                ..PoolConfig::default()
            },
            &defaults,
        )
        .unwrap();
        assert_eq!(pool.classes().len(), 3, "equal classes are merged");
        assert_eq!(pool.classes()[0].size, 3);
        assert_eq!(
            pool.classes()[0].key,
            "busybox:latest cpu=1 memory=2 disk=10 network=on"
        );
        let spec = |input: SpecInput| {
            SandboxSpec::from_input(input, &SandboxId::generate(), &defaults).unwrap()
        };
        let default = spec(SpecInput {
            name: Some("named".into()),
            labels: Some(vec!["a".into()]),
            environment_vars: Some([("K".to_owned(), "v".to_owned())].into()),
            ..SpecInput::default()
        });
        assert_eq!(pool.class_for(&default).map(|c| c.size), Some(3));
        let small = spec(SpecInput {
            cpu_cores: Some(2.0),
            memory_gb: Some(4.0),
            network_access: Some(false),
            ..SpecInput::default()
        });
        assert_eq!(pool.class_for(&small).map(|c| c.size), Some(1));
        let big_disk = spec(SpecInput {
            disk_size_gb: Some(20.0),
            ..SpecInput::default()
        });
        assert_eq!(
            pool.class_for(&big_disk).map(|c| c.disk_size_gb),
            Some(20),
            "a member's disk quota is its class's"
        );
        for misfit in [
            SpecInput {
                start_command: Some("sleep 1".into()),
                ..SpecInput::default()
            },
            SpecInput {
                docker_image: Some("alpine:3".into()),
                ..SpecInput::default()
            },
            SpecInput {
                cpu_cores: Some(2.0),
                ..SpecInput::default()
            },
            SpecInput {
                network_access: Some(false),
                ..SpecInput::default()
            },
            SpecInput {
                disk_size_gb: Some(30.0),
                ..SpecInput::default()
            },
        ] {
            assert!(pool.class_for(&spec(misfit)).is_none());
        }
        assert!(!Pool::new(&PoolConfig::default(), &defaults)
            .unwrap()
            .enabled());
        let bad = PoolConfig {
            classes: vec![PoolClassConfig {
                image: Some("not an image".into()),
                ..PoolClassConfig::default_class(1)
            }],
            ..PoolConfig::default()
        };
        assert!(Pool::new(&bad, &defaults)
            .unwrap_err()
            .0
            .contains("dockerImage"));
    }

    #[test]
    fn a_claimed_record_takes_the_members_id_and_a_defaulted_name() {
        let defaults = Defaults::default();
        let first = SandboxId::generate();
        let spec = SandboxSpec::from_input(SpecInput::default(), &first, &defaults).unwrap();
        let sb = Sandbox::new(
            first.clone(),
            stockade_core::AccountId::generate(),
            None,
            spec,
            "local".into(),
            Utc::now(),
        );
        let member = SandboxId::generate();
        let claimed = claimed_record(&sb, &member, "c1".into());
        assert_eq!(claimed.id, member);
        assert_eq!(claimed.spec.name.as_str(), member.as_str());
        assert_eq!(claimed.status, SandboxStatus::Running);
        assert_eq!(claimed.container_id.as_deref(), Some("c1"));
        let mut named = sb.clone();
        named.spec.name = SandboxName::parse("mine").unwrap();
        assert_eq!(
            claimed_record(&named, &member, "c".into())
                .spec
                .name
                .as_str(),
            "mine"
        );
    }
}
