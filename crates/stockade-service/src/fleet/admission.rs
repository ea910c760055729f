//! Admission control per Docker host and account quotas:
//! whether a create, a start or a resize may go ahead.
//!
//! A Docker host holds the CPU and memory of its sandboxes that run or are
//! being created (RUNNING, PROVISIONING, PENDING records with `server` =
//! the runtime's name), of the warm-pool members this process keeps (ready
//! or being made: they run, with their class's resources), and of the
//! admissions granted whose record does not show them yet. Their sum may not
//! pass the host's size times `--cpu-overcommit` / `--memory-overcommit`.
//! An account's quota counts its sandboxes that are not terminated (stopped
//! ones too), their disks, and CPU and memory of those that run.
//!
//! Checks take turns in this process: a check and the grant it records
//! ([`Admitted`], counted until dropped) happen under one lock, and the
//! caller drops the grant only once the record shows what was admitted
//! (the create's PROVISIONING row, the start's or resize's final write).
//! So two concurrent creates never both pass the last free room or the last
//! sandbox of a quota. Several server instances on one PostgreSQL database
//! do not see each other's grants in flight: see ARCHITECTURE.md.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use stockade_core::quota::{holds_resources, show_cores, show_gb};
use stockade_core::{
    AccountId, Footprint, Quota, QuotaUsage, Resources, Sandbox, SandboxId, SandboxSpec,
};
use stockade_runtime::PoolMemberSpec;
use stockade_store::StoreError;

use crate::error::ConfigError;
use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// The default `--cpu-overcommit`. CPU is compressible: a host whose
/// sandboxes all want their cores at once runs each slower, nothing fails;
/// sandboxes of agents and interpreters are idle most of the time, and
/// `cpuCores` is a ceiling, not a reservation. With 8, memory (not
/// overcommitted by default) is what limits default sandboxes (1 CPU,
/// 2 GB) on any host with less than 16 GB per core — nearly all of them —
/// while 150 one-CPU sandboxes on 2 cores are still refused.
pub const DEFAULT_CPU_OVERCOMMIT: f64 = 8.0;

/// The default `--memory-overcommit`: memory is not compressible (an
/// overcommitted host kills processes), so the sum of `memoryGB` never
/// passes the host's memory.
pub const DEFAULT_MEMORY_OVERCOMMIT: f64 = 1.0;

/// How full a Docker host may be, and the quota of new accounts.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionConfig {
    /// Reserved CPUs may reach the host's CPUs times this; `None`: not checked.
    pub cpu_overcommit: Option<f64>,
    /// Reserved memory may reach the host's memory times this; `None`: not checked.
    pub memory_overcommit: Option<f64>,
    /// The quota every account created through the API starts with.
    pub default_quota: Quota,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            cpu_overcommit: Some(DEFAULT_CPU_OVERCOMMIT),
            memory_overcommit: Some(DEFAULT_MEMORY_OVERCOMMIT),
            default_quota: Quota::unlimited(),
        }
    }
}

/// Parses an overcommit ratio as `--flag` takes it: a number from 0.1 to
/// 1000, or `off` (not checked).
pub fn parse_overcommit(value: &str, flag: &str) -> Result<Option<f64>, ConfigError> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match value.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.1..=1000.0).contains(&v) => Ok(Some(v)),
        _ => Err(ConfigError(format!(
            "{flag}: '{value}' is not a ratio: give a number from 0.1 to 1000 (1 = no \
             overcommit), or off"
        ))),
    }
}

/// The size of a Docker host and how far it may be filled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostCapacity {
    /// CPUs of the host; 0 when the engine does not say (not checked).
    pub cpus: u32,
    /// Memory of the host in bytes; 0 when the engine does not say.
    pub memory_bytes: u64,
    pub cpu_overcommit: Option<f64>,
    pub memory_overcommit: Option<f64>,
}

impl HostCapacity {
    pub(crate) fn cpu_limit(&self) -> Option<u64> {
        let ratio = self.cpu_overcommit.filter(|_| self.cpus > 0)?;
        Some((f64::from(self.cpus) * 1000.0 * ratio).floor() as u64)
    }

    pub(crate) fn memory_limit(&self) -> Option<u64> {
        let ratio = self.memory_overcommit.filter(|_| self.memory_bytes > 0)?;
        Some((self.memory_bytes as f64 * ratio).floor() as u64)
    }

    /// Whether a sandbox may go from holding `before` to holding `after`
    /// while everything else on `server` holds `others`. Only what grows is
    /// checked. The refusal names the server, what is reserved, the limit
    /// and what was asked for: `insufficient capacity on server local: 1.5
    /// of 2 CPUs reserved, 4 requested`.
    pub fn check(
        &self,
        server: &str,
        others: Resources,
        before: Resources,
        after: Resources,
    ) -> Result<(), CapacityRefused> {
        let overcommit = |ratio: Option<f64>, size: String, what: &str| match ratio {
            Some(r) if r != 1.0 => format!(" ({size} × {what} overcommit {r})"),
            _ => String::new(),
        };
        if let Some(limit) = self.cpu_limit() {
            let (was, will) = (before.cpu_millis, after.cpu_millis);
            if will > was && others.cpu_millis.saturating_add(will) > limit {
                return Err(CapacityRefused(format!(
                    "insufficient capacity on server {server}: {} of {} CPUs reserved{}, {} \
                     requested; stop or delete sandboxes there, or ask for fewer CPUs",
                    show_cores(others.cpu_millis.saturating_add(was)),
                    show_cores(limit),
                    overcommit(self.cpu_overcommit, format!("{} CPUs", self.cpus), "CPU"),
                    show_cores(will - was),
                )));
            }
        }
        if let Some(limit) = self.memory_limit() {
            let (was, will) = (before.memory_bytes, after.memory_bytes);
            if will > was && others.memory_bytes.saturating_add(will) > limit {
                return Err(CapacityRefused(format!(
                    "insufficient capacity on server {server}: {} of {} GB memory reserved{}, \
                     {} GB requested; stop or delete sandboxes there, or ask for less memory",
                    show_gb(others.memory_bytes.saturating_add(was)),
                    show_gb(limit),
                    overcommit(
                        self.memory_overcommit,
                        format!("{} GB", show_gb(self.memory_bytes)),
                        "memory"
                    ),
                    show_gb(will - was),
                )));
            }
        }
        Ok(())
    }
}

/// A refusal of [`Capacity::check`]: the server, what it holds, its limit
/// and what was asked for, as the caller shows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CapacityRefused(pub String);

/// A grant whose record does not show it yet (or, for a warm-pool member,
/// that the pool does not list as ready yet).
#[derive(Debug, Clone)]
struct Held {
    id: SandboxId,
    /// `None` for a warm-pool member: it belongs to no account.
    account: Option<AccountId>,
    server: String,
    /// What the sandbox counts for once its record shows it.
    after: Footprint,
    /// What its record shows now (a start's or resize's; nothing for a
    /// create or a warm-pool member).
    before: Footprint,
}

/// The admission state of one server process: the lock checks take turns
/// under, and the grants in flight.
#[derive(Debug, Default)]
pub struct Admission {
    turn: tokio::sync::Mutex<()>,
    held: Mutex<HashMap<u64, Held>>,
    /// Warm-pool members made, by id, whose grant ends when the pool lists
    /// them as ready ([`Admission::member_ready`]).
    members: Mutex<HashMap<SandboxId, u64>>,
    next: AtomicU64,
}

impl Admission {
    /// Holds `held` until the returned grant is dropped (or handed on);
    /// `host_checked` says whether its host's room was weighed.
    fn hold(self: &Arc<Self>, held: Held, host_checked: bool) -> Admitted {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.held().insert(key, held);
        Admitted {
            admission: self.clone(),
            key,
            host_checked,
            handed_on: false,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn members(&self) -> std::sync::MutexGuard<'_, HashMap<SandboxId, u64>> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Grants in flight right now.
    pub fn in_flight(&self) -> usize {
        self.held().len()
    }

    /// The warm pool lists member `id` as ready: from now on the pool's sum
    /// counts it, and its grant ends.
    pub fn member_ready(&self, id: &SandboxId) {
        let key = self.members().remove(id);
        if let Some(key) = key {
            self.held().remove(&key);
        }
    }
}

/// An admission granted: what it admitted counts against its host and its
/// account until this is dropped. Drop it once the record shows the sandbox
/// as admitted, or the operation failed.
#[must_use = "an admission counts only while it is held"]
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    key: u64,
    /// Whether the host's room was checked (not for a warm-pool claim).
    host_checked: bool,
    /// Handed on to [`Admission::member_ready`]: not ended by drop.
    handed_on: bool,
}

impl Admitted {
    pub fn host_checked(&self) -> bool {
        self.host_checked
    }

    /// A warm-pool member was made: its grant lasts until the pool lists it
    /// as ready ([`Admission::member_ready`]), so that it counts all along.
    pub fn until_member_ready(mut self, id: &SandboxId) {
        self.admission.members().insert(id.clone(), self.key);
        self.handed_on = true;
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if !self.handed_on {
            self.admission.held().remove(&self.key);
        }
    }
}

/// What one admission asks for.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    pub id: &'a SandboxId,
    pub account: &'a AccountId,
    /// The Docker host it runs on.
    pub server: &'a str,
    /// What the sandbox's record counts for now (nothing for a create).
    pub before: Footprint,
    /// What it counts for once admitted.
    pub after: Footprint,
    /// Check the host's room (a warm-pool claim takes a member that holds
    /// its room already).
    pub host: bool,
}

/// A host's size: what an administrator set, else what its engine
/// reported at the last health check, else what it reports now (`None`
/// where nothing is known). A create asks no engine when the checks know.
pub(crate) async fn host_size(
    host: &stockade_core::Host,
    rt: &dyn stockade_runtime::Runtime,
) -> (Option<u32>, Option<u64>) {
    let known = (
        host.cpus.or(host.health.cpus),
        host.memory_bytes.or(host.health.memory_bytes),
    );
    if let (Some(c), Some(m)) = known {
        return (Some(c), Some(m));
    }
    let info = rt.info().await.ok();
    (
        known.0.or(info.as_ref().map(|i| i.cpus)),
        known.1.or(info.as_ref().map(|i| i.memory_bytes)),
    )
}

/// The host's size as the runtime reports it; `None` when Docker does not
/// answer (its own error comes with the operation).
/// The capacity of the host `server`: its registered capacity where an
/// administrator set one, else the size its engine reports.
/// `None`: not checked, or unknown (the engine does not answer).
pub(crate) async fn capacity(svc: &Service, server: &str) -> Option<HostCapacity> {
    let a = &svc.config.admission;
    if a.cpu_overcommit.is_none() && a.memory_overcommit.is_none() {
        return None;
    }
    let rt = svc.runtime_on(server).await.ok()?;
    let (cpus, memory_bytes) = match svc.store.get_host(server).await {
        Ok(host) => host_size(&host, rt.as_ref()).await,
        Err(_) => match rt.info().await {
            Ok(info) => (Some(info.cpus), Some(info.memory_bytes)),
            Err(_) => (None, None),
        },
    };
    let (cpus, memory_bytes) = (cpus?, memory_bytes?);
    Some(HostCapacity {
        cpus,
        memory_bytes,
        cpu_overcommit: a.cpu_overcommit,
        memory_overcommit: a.memory_overcommit,
    })
}

/// What this process holds on `server` that its records do not show yet:
/// admissions in flight (but `except`'s) and, on its own host, the warm
/// pool's members.
pub(crate) fn held_on(svc: &Service, server: &str, except: &SandboxId) -> Resources {
    // What a grant adds to what its record shows already (placement sums
    // every record).
    let mut held = Resources::default();
    for h in svc.admission.held().values() {
        if h.server == server && &h.id != except {
            let (after, before) = (h.after.running, h.before.running);
            held = held.plus(Resources {
                cpu_millis: after.cpu_millis.saturating_sub(before.cpu_millis),
                memory_bytes: after.memory_bytes.saturating_sub(before.memory_bytes),
            });
        }
    }
    held.plus(svc.pool.reserved_on(server))
}

fn grows(before: Resources, after: Resources) -> bool {
    after.cpu_millis > before.cpu_millis || after.memory_bytes > before.memory_bytes
}

/// Checks `ask` against the account's quota (403 `quota_exceeded`) and the
/// host's room (409 `insufficient_capacity`), and records the grant.
pub async fn admit(svc: &Service, ask: Ask<'_>) -> ServiceResult<Admitted> {
    // Asked of Docker before the turn, so checks do not queue behind it.
    let cap = if ask.host && grows(ask.before.running, ask.after.running) {
        capacity(svc, ask.server).await
    } else {
        None
    };
    // Read before the turn too: a quota changed meanwhile is as if it had
    // changed just after the check.
    let quota = svc
        .store
        .get_quota(ask.account)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => {
                ServiceError::NotFound(format!("Account {} not found", ask.account))
            }
            other => other.into(),
        })?;
    let count_quota = !quota.is_unlimited() && ask.after != ask.before;
    let held_as = Held {
        id: ask.id.clone(),
        account: Some(ask.account.clone()),
        server: ask.server.to_owned(),
        after: ask.after,
        before: ask.before,
    };
    let admission = svc.admission.clone();
    if !count_quota && cap.is_none() {
        // Nothing to weigh: the grant only counts for the checks after it,
        // and a burst of creates does not queue on the turn.
        return Ok(admission.hold(held_as, ask.host));
    }
    let _turn = admission.turn.lock().await;
    // The grants in flight, but an earlier one for this very sandbox.
    let held: Vec<Held> = admission
        .held()
        .values()
        .filter(|h| &h.id != ask.id)
        .cloned()
        .collect();
    let mut except: Vec<SandboxId> = held.iter().map(|h| h.id.clone()).collect();
    except.push(ask.id.clone());
    except.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
    except.dedup();

    if count_quota {
        let mut usage = svc.store.account_usage(ask.account, &except).await?;
        for h in held
            .iter()
            .filter(|h| h.account.as_ref() == Some(ask.account))
        {
            usage = add(usage, h.after);
        }
        quota
            .check(&usage, &ask.before, &ask.after)
            .map_err(|e| ServiceError::QuotaExceeded(e.0))?;
    }

    if let Some(cap) = cap {
        let mut reserved = svc.store.server_reserved(ask.server, &except).await?;
        for h in held.iter().filter(|h| h.server == ask.server) {
            reserved = reserved.plus(h.after.running);
        }
        reserved = reserved.plus(svc.pool.reserved_on(ask.server));
        cap.check(ask.server, reserved, ask.before.running, ask.after.running)
            .map_err(|e| ServiceError::InsufficientCapacity(e.0))?;
    }

    Ok(admission.hold(held_as, ask.host))
}

fn add(a: QuotaUsage, b: Footprint) -> QuotaUsage {
    QuotaUsage {
        sandboxes: a.sandboxes.saturating_add(b.sandboxes),
        running: a.running.plus(b.running),
        disk_gb: a.disk_gb.saturating_add(b.disk_gb),
    }
}

/// A create of `sb` (validated, not saved yet), against its account's
/// quota. Its host's room is weighed by placement
/// (placement) as its record is inserted, or held by
/// [`hold_claim`] when a warm-pool member serves it; until then it holds
/// room on no host.
pub async fn admit_create(svc: &Service, sb: &Sandbox) -> ServiceResult<Admitted> {
    admit(
        svc,
        Ask {
            id: &sb.id,
            account: &sb.account_id,
            server: "",
            before: Footprint::default(),
            after: Footprint::running(&sb.spec),
            host: false,
        },
    )
    .await
}

/// A start of `sb` (its record as stored; its container does not run).
pub async fn admit_start(svc: &Service, sb: &Sandbox) -> ServiceResult<Admitted> {
    admit(
        svc,
        Ask {
            id: &sb.id,
            account: &sb.account_id,
            server: &sb.server,
            before: Footprint::of_record(sb),
            after: Footprint::running(&sb.spec),
            host: true,
        },
    )
    .await
}

/// New CPU and memory (`target`) for `current`: checked only if it runs (a
/// stopped sandbox is checked when it starts).
pub async fn admit_resize(
    svc: &Service,
    current: &Sandbox,
    target: &SandboxSpec,
) -> ServiceResult<Admitted> {
    let before = Footprint::of_record(current);
    let after = if holds_resources(current.status) && !current.is_terminated() {
        Footprint::running(target)
    } else {
        before
    };
    admit(
        svc,
        Ask {
            id: &current.id,
            account: &current.account_id,
            server: &current.server,
            before,
            after,
            host: true,
        },
    )
    .await
}

/// Holds `resources` on `host` for the warm-pool member `id` being claimed,
/// until the claimed record shows them (dropped): the refill that the take
/// starts must not count the room as free.
pub fn hold_claim(svc: &Service, id: &SandboxId, host: &str, resources: Resources) -> Admitted {
    svc.admission.hold(
        Held {
            id: id.clone(),
            account: None,
            server: host.to_owned(),
            after: Footprint {
                sandboxes: 0,
                running: resources,
                disk_gb: 0,
            },
            before: Footprint::default(),
        },
        true,
    )
}

/// Whether the host has room for the warm-pool member `member`; if so,
/// the grant that counts it while it is made. Members being made count only
/// once checked, so concurrent fills on a nearly full host do not refuse
/// each other. No member is made on a full host (the pool tries again
/// later). `Ok(None)`: the host's size is unknown or not checked.
pub async fn check_pool_fill(
    svc: &Service,
    member: &PoolMemberSpec,
    host: &str,
) -> ServiceResult<Option<Admitted>> {
    let server = host.to_owned();
    let Some(cap) = capacity(svc, &server).await else {
        return Ok(None);
    };
    let admission = svc.admission.clone();
    let _turn = admission.turn.lock().await;
    let held: Vec<Held> = admission.held().values().cloned().collect();
    let except: Vec<SandboxId> = held.iter().map(|h| h.id.clone()).collect();
    let mut reserved = svc
        .store
        .server_reserved(&server, &except)
        .await
        .map_err(|e| ServiceError::Internal(format!("could not sum what the host holds: {e}")))?;
    for h in held.iter().filter(|h| h.server == server) {
        reserved = reserved.plus(h.after.running);
    }
    reserved = reserved.plus(svc.pool.reserved_on(&server));
    let own = Resources {
        cpu_millis: stockade_core::quota::cpu_millis(member.cpu_cores),
        memory_bytes: member.memory_bytes.max(0) as u64,
    };
    cap.check(&server, reserved, Resources::default(), own)
        .map_err(|e| ServiceError::InsufficientCapacity(e.0))?;
    Ok(Some(admission.hold(
        Held {
            id: member.sandbox_id.clone(),
            account: None,
            server,
            after: Footprint {
                sandboxes: 0,
                running: own,
                disk_gb: 0,
            },
            before: Footprint::default(),
        },
        true,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1 << 30;

    fn res(cpu: u64, gb: u64) -> Resources {
        Resources {
            cpu_millis: cpu,
            memory_bytes: gb * GB,
        }
    }

    #[test]
    fn overcommit_ratios_parse_or_say_what_is_wrong() {
        assert_eq!(parse_overcommit("8", "--cpu-overcommit"), Ok(Some(8.0)));
        assert_eq!(parse_overcommit(" 1.5 ", "--x"), Ok(Some(1.5)));
        assert_eq!(parse_overcommit("OFF", "--x"), Ok(None));
        for bad in ["0", "-1", "inf", "NaN", "lots", "", "5000"] {
            let err = parse_overcommit(bad, "--memory-overcommit").unwrap_err();
            assert!(err.0.starts_with("--memory-overcommit:"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_host_check_names_server_use_limit_and_request() {
        let cap = HostCapacity {
            cpus: 2,
            memory_bytes: 24 * GB,
            cpu_overcommit: Some(1.0),
            memory_overcommit: Some(1.0),
        };
        let none = Resources::default();
        // Whether `cap` takes `asked` on server local with `reserved` there,
        // `had` of it the sandbox's own; the refusal when it does not.
        let fits = |cap: HostCapacity, reserved, had, asked| {
            cap.check("local", reserved, had, asked).is_ok()
        };
        let refusal = |cap: HostCapacity, reserved, had, asked| {
            cap.check("local", reserved, had, asked).unwrap_err().0
        };
        assert!(fits(cap, res(1000, 20), none, res(1000, 4)));
        assert_eq!(
            refusal(cap, res(1500, 0), none, res(4000, 1)),
            "insufficient capacity on server local: 1.5 of 2 CPUs reserved, 4 requested; stop \
             or delete sandboxes there, or ask for fewer CPUs"
        );
        let err = refusal(cap, res(0, 22), none, res(100, 4));
        assert!(
            err.starts_with("insufficient capacity on server local: 22 of 24 GB memory reserved, 4 GB requested"),
            "{err}"
        );
        // A resize counts what the sandbox had; shrinking always passes.
        assert!(fits(cap, res(1000, 0), res(500, 2), res(1000, 2)));
        assert!(!fits(cap, res(1500, 0), res(500, 2), res(1000, 2)));
        assert!(fits(cap, res(9000, 99), res(4000, 8), res(1000, 2)));
        // Overcommit widens the limit and the message says how.
        let wide = HostCapacity {
            cpu_overcommit: Some(8.0),
            ..cap
        };
        assert!(fits(wide, res(15_000, 0), none, res(1000, 0)));
        let err = refusal(wide, res(15_500, 0), none, res(1000, 0));
        assert!(
            err.contains("15.5 of 16 CPUs reserved (2 CPUs × CPU overcommit 8), 1 requested"),
            "{err}"
        );
        // Unknown sizes and unchecked resources pass.
        let unknown = HostCapacity {
            cpus: 0,
            memory_bytes: 0,
            ..cap
        };
        assert!(fits(unknown, res(u64::MAX / 2, 999), none, res(1000, 1)));
        let off = HostCapacity {
            cpu_overcommit: None,
            memory_overcommit: None,
            ..cap
        };
        assert!(fits(off, res(99_000, 999), none, res(1000, 1)));
    }
}
