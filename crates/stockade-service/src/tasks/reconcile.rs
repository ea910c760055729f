//! Reconciliation: compares the records with what Docker
//! runs, at start and periodically, and corrects the records. Sandboxes
//! with an operation in progress are left to it (or to recovery). A
//! labelled container of this installation with no record at all was never
//! handed to anyone (a create records its sandbox before it makes the
//! container): it is removed once it has been seen that way for
//! `orphan_grace`. Volumes are never removed here: one without a record is
//! listed as orphaned and removed by a confirmed cleanup.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use chrono::Utc;
use stockade_core::{Sandbox, SandboxId, SandboxStatus};
use stockade_runtime::{ManagedContainer, RuntimeError};
use tracing::{debug, info, warn};

use crate::Service;

/// What one reconciliation pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    pub checked: usize,
    pub corrected: usize,
    pub abandoned_creates: usize,
    pub unknown_containers: usize,
    /// Containers without a record removed after the grace period.
    pub removed_containers: usize,
}

/// When each container without a record was first seen so (this process).
#[derive(Debug, Default)]
pub struct Strays(Mutex<HashMap<String, Instant>>);

impl Strays {
    /// Whether `container` has been seen without a record for `grace`;
    /// remembers it from now otherwise.
    fn overdue(&self, container: &str, grace: std::time::Duration) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.entry(container.to_owned())
            .or_insert_with(Instant::now)
            .elapsed()
            >= grace
    }

    /// Forgets every container of host `server` not in `present` (keys
    /// are `{server}/{container}`).
    fn keep_only(&self, server: &str, present: &HashSet<String>) {
        let prefix = format!("{server}/");
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|c, _| !c.starts_with(&prefix) || present.contains(c));
    }
}

/// Records read at a time: the pass's memory does not grow with them.
const PAGE: u32 = 500;

/// One pass over every host: its active records and labelled containers
/// ([`reconcile_host`]). Hosts whose last health check failed are left
/// alone (their engine does not answer; the records keep what they were
/// until it does). An error of the server's own host is returned; other
/// hosts' are logged.
pub async fn reconcile_once(svc: &Service) -> Result<ReconcileReport, RuntimeError> {
    let mut total = ReconcileReport::default();
    let unhealthy: HashSet<String> = match svc.store.list_hosts().await {
        Ok(hosts) => hosts
            .into_iter()
            .filter(|h| h.health.healthy == Some(false))
            .map(|h| h.name)
            .collect(),
        Err(_) => HashSet::new(),
    };
    for (server, rt) in svc.host_runtimes().await {
        if unhealthy.contains(&server) {
            debug!(host = %server, "reconcile: host unhealthy; skipped");
            continue;
        }
        match reconcile_host(svc, &server, rt.as_ref()).await {
            Ok(r) => {
                total.checked += r.checked;
                total.corrected += r.corrected;
                total.abandoned_creates += r.abandoned_creates;
                total.unknown_containers += r.unknown_containers;
                total.removed_containers += r.removed_containers;
            }
            Err(e) if server == svc.hosts.own_name() => return Err(e),
            Err(e) => warn!(host = %server, error = %e, "reconcile: host skipped"),
        }
    }
    // Egress entries of sandboxes gone or moved, and missing ones.
    svc.reconcile_egress().await;
    Ok(total)
}

/// One pass over the active records and the labelled containers of the
/// host `server`.
///
/// The containers are listed first, then the records page by page. A
/// record whose container is not in that (older) list is looked up once
/// more before it is marked lost: it may have been created since.
async fn reconcile_host(
    svc: &Service,
    server: &str,
    rt: &dyn stockade_runtime::Runtime,
) -> Result<ReconcileReport, RuntimeError> {
    let mut report = ReconcileReport::default();
    let containers = rt
        .list_managed()
        .await
        .inspect_err(|e| svc.metrics.docker_error("list", e))?;
    let by_id: HashMap<&SandboxId, &ManagedContainer> = containers
        .iter()
        .filter_map(|c| c.sandbox_id.as_ref().map(|id| (id, c)))
        .collect();
    // Operations in progress: their sandboxes are theirs to change.
    let busy: HashSet<String> = match svc.store.list_operations(10_000).await {
        Ok(ops) => ops.into_iter().map(|op| op.target).collect(),
        Err(e) => {
            warn!(error = %e, "reconcile: could not list operations in progress");
            return Ok(report);
        }
    };
    let mut active_ids: HashMap<SandboxId, String> = HashMap::new();
    let now = Utc::now();
    let mut pages = crate::access::ActivePages::new(svc, PAGE);
    while let Some(page) = pages.next().await {
        let Ok(page) = page.inspect_err(|e| warn!(error = %e, "reconcile: could not list records"))
        else {
            // Without every record, no container may be taken for an orphan.
            return Ok(report);
        };
        for sb in page {
            active_ids.insert(sb.id.clone(), sb.server.clone());
            if busy.contains(sb.id.as_str()) || sb.server != server {
                continue;
            }
            check_record(svc, rt, sb, &by_id, now, &mut report).await;
        }
    }
    let stray_key = |c: &ManagedContainer| format!("{server}/{}", c.container_id);
    svc.strays
        .keep_only(server, &containers.iter().map(stray_key).collect());
    for c in &containers {
        if c.instance_id.as_deref() != Some(svc.instance_id.as_str()) {
            continue;
        }
        let Some(id) = &c.sandbox_id else { continue };
        match active_ids.get(id) {
            Some(on) if on == server => continue,
            // Its record names another host: the copy a move left behind,
            // unless the move runs now.
            Some(on) => {
                if !busy.contains(id.as_str()) && !same_engine(svc, rt, on).await {
                    info!(sandbox.id = %id, host = %server, now_on = %on, "reconcile: removing the copy of a sandbox that moved to another host");
                    if let Err(e) = rt.remove(id, false).await {
                        warn!(sandbox.id = %id, error = %e, "reconcile: could not remove the copy");
                    }
                }
                continue;
            }
            None => {}
        }
        match svc.store.sandbox_owner(id).await {
            // Inserted after the records were read: a create, or a claim of
            // a warm-pool member, in flight. Nothing to correct.
            Ok(Some(owner)) if !owner.deleted => {}
            Ok(Some(_)) => {
                // The record is terminated but its container survived (e.g. a
                // crash mid-delete): finish the delete, keeping the volume.
                info!(sandbox.id = %id, "reconcile: removing the container of a terminated sandbox");
                if let Err(e) = rt.remove(id, true).await {
                    warn!(sandbox.id = %id, error = %e, "reconcile: could not remove the container");
                }
            }
            // A warm-pool member: the pool looks after it (pool.rs).
            Ok(None) if c.pool_class.is_some() => {}
            Ok(None) if busy.contains(id.as_str()) => {}
            Ok(None) => {
                report.unknown_containers += 1;
                if !svc.strays.overdue(&stray_key(c), svc.config.orphan_grace) {
                    info!(container.id = %c.container_id, sandbox.id = %id, "reconcile: a Stockade container has no record; removing it after the grace period");
                    continue;
                }
                warn!(container.id = %c.container_id, sandbox.id = %id, "reconcile: removing a Stockade container that has no record (its volume stays, listed as orphaned)");
                match rt.remove(id, true).await {
                    Ok(()) => report.removed_containers += 1,
                    Err(e) => {
                        warn!(sandbox.id = %id, error = %e, "reconcile: could not remove the container")
                    }
                }
            }
            Err(e) => warn!(error = %e, "reconcile: record lookup failed"),
        }
    }
    Ok(report)
}

/// Whether host `other` is the very engine of `rt` (registered twice):
/// then a container there is not a copy. Unknown counts as the same.
async fn same_engine(svc: &Service, rt: &dyn stockade_runtime::Runtime, other: &str) -> bool {
    let Ok(other) = svc.runtime_on(other).await else {
        return true;
    };
    match (rt.info().await, other.info().await) {
        (Ok(a), Ok(b)) => a.engine_id.is_none() || a.engine_id == b.engine_id,
        _ => true,
    }
}

/// Corrects one record against its container.
async fn check_record(
    svc: &Service,
    rt: &dyn stockade_runtime::Runtime,
    mut sb: Sandbox,
    containers: &HashMap<&SandboxId, &ManagedContainer>,
    now: chrono::DateTime<Utc>,
    report: &mut ReconcileReport,
) {
    report.checked += 1;
    let before = (sb.status, sb.status_reason.clone());
    match sb.status {
        SandboxStatus::Provisioning | SandboxStatus::Pending => {
            let age = now - sb.created_at;
            if age.to_std().unwrap_or_default() > svc.config.orphan_grace {
                warn!(sandbox.id = %sb.id, "reconcile: removing a create that never finished");
                if let Err(e) = rt.remove(&sb.id, false).await {
                    warn!(sandbox.id = %sb.id, error = %e, "reconcile: could not remove the abandoned container");
                    return;
                }
                if let Err(e) = svc.store.purge_sandbox(&sb.id).await {
                    warn!(sandbox.id = %sb.id, error = %e, "reconcile: could not remove the abandoned record");
                }
                report.abandoned_creates += 1;
            }
            return;
        }
        SandboxStatus::Terminated => return,
        _ => {}
    }
    // (running, frozen)
    let state = match containers.get(&sb.id) {
        Some(c) => Some((c.running, c.paused)),
        // Not listed and known to be lost: nothing to correct.
        None if sb.status == SandboxStatus::Error => return,
        // Not listed: gone, or made after the list (ask again).
        None => match rt.inspect(&sb.id).await {
            Ok(c) => c.map(|c| (c.running, c.paused)),
            Err(e) => {
                debug!(sandbox.id = %sb.id, error = %e, "reconcile: could not inspect; skipping");
                return;
            }
        },
    };
    let live = matches!(sb.status, SandboxStatus::Running | SandboxStatus::Paused);
    match state {
        None => {
            sb.status = SandboxStatus::Error;
            sb.status_reason = Some(format!("container not found on server '{}'", sb.server));
        }
        Some((_, true)) if sb.status != SandboxStatus::Paused => {
            sb.mark_paused(now, Some("paused outside Stockade".into()));
        }
        Some((true, false)) if sb.status == SandboxStatus::Paused => sb.mark_resumed(now),
        Some((true, false)) if sb.status != SandboxStatus::Running => sb.mark_running(now),
        Some((false, _)) if live => {
            let was_paused = sb.status == SandboxStatus::Paused;
            let detail = rt.inspect(&sb.id).await.ok().flatten();
            let at = detail.as_ref().and_then(|d| d.finished_at).unwrap_or(now);
            let reason = match detail {
                _ if was_paused => crate::sandbox::recovery::ENDED_WHILE_PAUSED.into(),
                Some(d) if d.oom_killed => "the main process was killed: out of memory".into(),
                Some(d) => format!(
                    "the main process exited (code {})",
                    d.exit_code.map_or("unknown".into(), |c| c.to_string())
                ),
                None => "the container stopped".into(),
            };
            sb.mark_stopped(at, Some(reason));
        }
        Some(_) => {}
    }
    if (sb.status, sb.status_reason.clone()) != before {
        info!(sandbox.id = %sb.id, from = %before.0, to = %sb.status, reason = ?sb.status_reason, "reconcile: corrected status");
        match svc.store.update_sandbox(&sb).await {
            Ok(_) => report.corrected += 1,
            Err(e) => warn!(sandbox.id = %sb.id, error = %e, "reconcile: status write failed"),
        }
    }
}

/// Checks one sandbox's record against its container now, because
/// something saw the container stop (a followed log stream ended): the
/// correction a reconciliation pass would make, at once, so that a start
/// command that exits right away shows as STOPPED with its exit code in
/// seconds rather than at the next pass. A sandbox with an operation in
/// progress is left to it; failures are left to the next pass.
pub async fn reconcile_sandbox(svc: &Service, id: &SandboxId) {
    let Ok(Some(owner)) = svc.store.sandbox_owner(id).await else {
        return;
    };
    if owner.deleted
        || matches!(
            svc.store.get_operation(id.as_str()).await,
            Ok(Some(_)) | Err(_)
        )
    {
        return;
    }
    let scope = stockade_core::Scope::account(owner.account_id);
    let Ok(sb) = svc.store.get_sandbox(&scope, id).await else {
        return;
    };
    let Ok(rt) = svc.runtime_for(&sb).await else {
        return;
    };
    let mut report = ReconcileReport::default();
    check_record(
        svc,
        rt.as_ref(),
        sb,
        &HashMap::new(),
        Utc::now(),
        &mut report,
    )
    .await;
}

/// Runs [`reconcile_once`] every `config.reconcile_interval` until `shutdown`.
pub async fn run_periodically(svc: Service, shutdown: tokio_util::sync::CancellationToken) {
    let mut every = crate::every::Every::new(svc.config.reconcile_interval, shutdown);
    while every.next().await {
        svc.check_isolation().await;
        match reconcile_once(&svc).await {
            Ok(r)
                if r.corrected
                    + r.abandoned_creates
                    + r.unknown_containers
                    + r.removed_containers
                    > 0 =>
            {
                info!(?r, "reconcile pass")
            }
            Ok(_) => {}
            Err(e) => debug!(error = %e, "reconcile skipped: Docker unavailable"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use stockade_core::{Defaults, SandboxSpec};
    use stockade_runtime::prelude::*;
    use stockade_runtime::{FakeRuntime, PoolMemberSpec};
    use stockade_store::{SqliteStore, Store};

    use super::*;
    use crate::test_support::spec;
    use crate::{Service, ServiceConfig};

    #[tokio::test]
    async fn every_page_of_records_is_checked_and_pool_members_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::connect(&format!("sqlite://{}", dir.path().join("r.db").display()))
                .await
                .unwrap(),
        );
        let rt = FakeRuntime::new();
        let config = ServiceConfig {
            blob_store: stockade_blob::BlobConfig::Local {
                dir: dir.path().join("blobs"),
            },
            ..ServiceConfig::default()
        };
        let svc = Service::new(store.clone(), Arc::new(rt.clone()), config)
            .await
            .unwrap();
        let account = store.create_account("a", false).await.unwrap();
        // More records than one page; three lost their container, two stopped.
        let n = PAGE as usize * 2 + 1;
        let mut ids = Vec::new();
        for i in 0..n {
            let id = SandboxId::generate();
            let spec_ =
                SandboxSpec::from_input(Default::default(), &id, &Defaults::default()).unwrap();
            let mut sb = Sandbox::new(id, account.id.clone(), None, spec_, "local".into(), now());
            sb.status = SandboxStatus::Running;
            store.insert_sandbox(&sb).await.unwrap();
            if i >= 3 {
                rt.create(&spec(&sb, &svc.instance_id)).await.unwrap();
            }
            if (3..5).contains(&i) {
                rt.stop(&sb.id, std::time::Duration::ZERO).await.unwrap();
            }
            ids.push(sb.id);
        }
        // A warm-pool member (no record) and a stray container (no record).
        rt.create_pool_member(&PoolMemberSpec {
            sandbox_id: SandboxId::generate(),
            instance_id: svc.instance_id.clone(),
            class: "c".into(),
            image: "busybox".into(),
            cpu_cores: 1.0,
            memory_bytes: 1 << 30,
            network_access: true,
            agent_token: None,
            disk_bytes: None,
        })
        .await
        .unwrap();
        let stray = Sandbox::new(
            SandboxId::generate(),
            account.id.clone(),
            None,
            SandboxSpec::from_input(
                Default::default(),
                &SandboxId::generate(),
                &Defaults::default(),
            )
            .unwrap(),
            "local".into(),
            now(),
        );
        rt.create(&spec(&stray, &svc.instance_id)).await.unwrap();

        let report = reconcile_once(&svc).await.unwrap();
        assert_eq!(report.checked, n);
        assert_eq!(report.corrected, 5);
        assert_eq!(
            report.unknown_containers, 1,
            "the stray, not the pool member"
        );
        let scope = stockade_core::Scope::account(account.id.clone());
        for (i, id) in ids.iter().enumerate().take(6) {
            let sb = store.get_sandbox(&scope, id).await.unwrap();
            let want = match i {
                0..=2 => SandboxStatus::Error,
                3 | 4 => SandboxStatus::Stopped,
                _ => SandboxStatus::Running,
            };
            assert_eq!(sb.status, want, "record {i}");
        }
        // A second pass finds nothing more to correct.
        let again = reconcile_once(&svc).await.unwrap();
        assert_eq!(again.corrected, 0);
    }

    fn now() -> chrono::DateTime<Utc> {
        Utc::now()
    }
}
