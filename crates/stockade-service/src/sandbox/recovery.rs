//! Recovery of operations whose holder died: every
//! few seconds, any live instance claims the operations whose lease ended
//! and finishes or rolls each back, so that nothing an interrupted operation
//! made is left behind and no record stays in a transitional state.
//!
//! - create: rolled back — container and volume removed, record purged (its
//!   name is free again), idempotency key forgotten (a retry creates anew).
//!   The client never saw it succeed: success is answered only after the
//!   record and the end of the operation were written together.
//! - delete: carried on — container removed, the volume too unless it was
//!   to be preserved, record TERMINATED. A delete with `sync=true` whose
//!   upload had not been recorded is abandoned instead (nothing is deleted
//!   without the sync the caller asked for).
//! - start, stop, pause, resume: the record converges to what Docker
//!   shows (running, frozen, stopped or gone).
//! - update: the container's limits converge to the record's.
//! - snapshot: the half-made snapshot is handed to the collector.
//! - build: the template build fails ("the server stopped during the
//!   build"), its build sandbox is removed and no image of it is kept.

use chrono::Utc;
use stockade_core::{Operation, OperationKind, SandboxId, Scope, SnapshotId, SnapshotStatus};
use stockade_store::{SandboxWrite, StoreError};
use tracing::{debug, info, warn};

use crate::error::ServiceResult;
use crate::Service;

/// Operations one pass claims at most.
const BATCH: u32 = 50;

/// What a recovery pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    pub recovered: usize,
    pub failed: usize,
}

/// Claims the operations whose lease ended and recovers each. `everything`
/// takes all operations whatever their lease (a single-instance database
/// at start: their holder was this installation's previous process).
pub async fn recover_expired(svc: &Service, everything: bool) -> RecoveryReport {
    let mut report = RecoveryReport::default();
    let now = Utc::now();
    // Everything: as if every lease had ended; the claimed leases are then
    // brought back to a normal length, so that a failed recovery is retried.
    let cutoff = if everything {
        now + chrono::Duration::days(3650)
    } else {
        now
    };
    let lease_until = svc.ops.lease_until(cutoff);
    let claimed = match svc
        .store
        .claim_expired_operations(svc.ops.holder(), cutoff, lease_until, BATCH)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "recovery: could not read interrupted operations");
            return report;
        }
    };
    if everything && !claimed.is_empty() {
        if let Err(e) = svc
            .store
            .renew_operations(svc.ops.holder(), svc.ops.lease_until(now))
            .await
        {
            warn!(error = %e, "recovery: could not shorten the leases of claimed operations");
        }
    }
    for op in claimed {
        if recover_held(svc, op).await {
            report.recovered += 1;
        } else {
            report.failed += 1;
        }
    }
    report
}

/// Claims one operation whose lease ended (seen by a waiting operation or
/// an idempotent retry) and recovers it. Returns once it is recovered, or
/// somebody else holds it.
pub async fn claim_and_recover(svc: &Service, op: &Operation) {
    let now = Utc::now();
    match svc
        .store
        .claim_operation(&op.id, svc.ops.holder(), now, svc.ops.lease_until(now))
        .await
    {
        Ok(Some(claimed)) => {
            recover_held(svc, claimed).await;
        }
        Ok(None) => {}
        Err(e) => {
            warn!(operation = %op.id, error = %e, "recovery: could not claim an interrupted operation")
        }
    }
}

/// Recovers an operation this process holds; `true` when it is done (the
/// operation row is gone). On failure it stays held until its lease ends,
/// and a later pass tries again.
pub async fn recover_held(svc: &Service, op: Operation) -> bool {
    let result = match op.kind {
        OperationKind::Create => roll_back_create(svc, &op).await,
        OperationKind::Delete => carry_on_delete(svc, &op).await,
        OperationKind::Start
        | OperationKind::Stop
        | OperationKind::Pause
        | OperationKind::Resume => converge_status(svc, &op).await,
        OperationKind::Update => converge_limits(svc, &op).await,
        OperationKind::Snapshot | OperationKind::Sync => abandon_snapshot(svc, &op).await,
        OperationKind::Move => crate::sandbox::drain::finish_move(svc, &op).await,
        OperationKind::Build => fail_build(svc, &op).await,
    };
    match result {
        Ok(()) => {
            info!(operation = %op.id, kind = %op.kind, target = %op.target, "recovered an interrupted operation");
            true
        }
        Err(e) => {
            warn!(operation = %op.id, kind = %op.kind, target = %op.target, error = %e, "could not recover an interrupted operation yet; will retry");
            false
        }
    }
}

fn sandbox_id(op: &Operation) -> ServiceResult<SandboxId> {
    Ok(SandboxId::parse_field(&op.target, "target")?)
}

/// The record an operation is about, as it is now; `None` when it is gone.
async fn record_of(svc: &Service, op: &Operation) -> ServiceResult<Option<stockade_core::Sandbox>> {
    let scope = Scope::account(op.account_id.clone());
    match svc.store.get_sandbox(&scope, &sandbox_id(op)?).await {
        Ok(sb) => Ok(Some(sb)),
        Err(StoreError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Ends the operation with `write`; an operation that is gone already is fine.
async fn end(svc: &Service, op: &Operation, write: SandboxWrite<'_>) -> ServiceResult<()> {
    match svc
        .store
        .finish_operation(&op.id, svc.ops.holder(), write)
        .await
    {
        Ok(_) | Err(StoreError::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn fail_build(svc: &Service, op: &Operation) -> ServiceResult<()> {
    use stockade_core::template::{BuildId, BuildStatus};
    let Ok(id) = BuildId::parse(&op.target) else {
        return end(svc, op, SandboxWrite::None).await;
    };
    let mut build = match svc.store.get_build(&id).await {
        Ok(b) => b,
        Err(StoreError::NotFound) => return end(svc, op, SandboxWrite::None).await,
        Err(e) => return Err(e.into()),
    };
    if let Some(sandbox) = &build.sandbox_id {
        let scope = Scope::account(op.account_id.clone());
        match svc.store.get_sandbox(&scope, sandbox).await {
            Ok(sb) if !sb.is_terminated() => {
                crate::sandbox::lifecycle::destroy(svc, sb, false).await?;
            }
            Ok(_) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if !build.status.is_final() {
        // Its image may have been committed before the end was written.
        for (_, rt) in svc.host_runtimes().await {
            if let Err(e) = rt.remove_image(&build.image_name()).await {
                debug!(build.id = %id, error = %e, "recovery: a failed build's image stays");
            }
        }
        build.status = BuildStatus::Error;
        build.reason =
            Some("the server stopped during the build; nothing of it was kept: build again".into());
        build.image_ref = None;
        build.sandbox_id = None;
        build.finished_at = Some(Utc::now());
        svc.store.update_build(&build).await?;
    }
    end(svc, op, SandboxWrite::None).await
}

async fn roll_back_create(svc: &Service, op: &Operation) -> ServiceResult<()> {
    let id = sandbox_id(op)?;
    let scope = Scope::account(op.account_id.clone());
    // No record: the container was never made (it is made after the
    // record, on the host the record names).
    match svc.store.get_sandbox(&scope, &id).await {
        Ok(sb) => svc.runtime_for(&sb).await?.remove(&id, false).await?,
        Err(StoreError::NotFound) => {}
        Err(e) => return Err(e.into()),
    }
    if let Some(key) = op.params.get("idempotency_key").and_then(|k| k.as_str()) {
        svc.store
            .delete_idempotency_key(&op.account_id, key)
            .await?;
    }
    end(svc, op, SandboxWrite::Purge { id: &id }).await
}

async fn carry_on_delete(svc: &Service, op: &Operation) -> ServiceResult<()> {
    let Some(sb) = record_of(svc, op).await? else {
        return end(svc, op, SandboxWrite::None).await;
    };
    let id = sb.id.clone();
    if sb.is_terminated() {
        return end(svc, op, SandboxWrite::None).await;
    }
    let wanted_sync = op.params.get("sync").and_then(|v| v.as_bool()) == Some(true);
    if wanted_sync && !synced_since(&sb, op.created_at) {
        debug!(sandbox.id = %id, "recovery: the delete's sync never completed; the sandbox stays");
        return converge_status(svc, op).await;
    }
    let preserve = op.params.get("preserve_volume").and_then(|v| v.as_bool()) == Some(true);
    svc.runtime_for(&sb).await?.remove(&id, preserve).await?;
    end(
        svc,
        op,
        SandboxWrite::SoftDelete {
            id: &id,
            at: Utc::now(),
        },
    )
    .await
}

/// Whether `sb` has a workspace sync recorded at or after `since`.
fn synced_since(sb: &stockade_core::Sandbox, since: chrono::DateTime<Utc>) -> bool {
    sb.s3_sync
        .as_ref()
        .and_then(|s| s.get("started_at"))
        .and_then(|t| t.as_str())
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|t| t.with_timezone(&Utc) >= since)
}

async fn converge_status(svc: &Service, op: &Operation) -> ServiceResult<()> {
    let Some(mut sb) = record_of(svc, op).await? else {
        return end(svc, op, SandboxWrite::None).await;
    };
    let id = sb.id.clone();
    if sb.is_terminated() {
        return end(svc, op, SandboxWrite::None).await;
    }
    let now = Utc::now();
    let inspected = svc.runtime_for(&sb).await?.inspect(&id).await?;
    converge_record(&mut sb, inspected.as_ref(), now);
    for _ in 0..8 {
        match svc
            .store
            .finish_operation(&op.id, svc.ops.holder(), SandboxWrite::Update(&sb))
            .await
        {
            Ok(_) | Err(StoreError::NotFound) => return Ok(()),
            Err(StoreError::Conflict(_)) => {
                let Some(mut fresh) = record_of(svc, op).await? else {
                    return end(svc, op, SandboxWrite::None).await;
                };
                fresh.take_status_of(&sb);
                sb = fresh;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(crate::ServiceError::Conflict(
        "the record kept changing during recovery".into(),
    ))
}

/// Brings `sb`'s status to what its container shows (`None`: it is gone),
/// as of `now`. A record that agrees is left as it is.
pub(crate) fn converge_record(
    sb: &mut stockade_core::Sandbox,
    container: Option<&stockade_runtime::ContainerState>,
    now: chrono::DateTime<Utc>,
) {
    use stockade_core::SandboxStatus::{Paused, Running, Stopped};
    if let Some(c) = container {
        // A container made again (a start of a sandbox whose container was
        // gone) has a new id.
        if sb.container_id.as_deref() != Some(c.container_id.as_str()) && !c.container_id.is_empty()
        {
            sb.container_id = Some(c.container_id.clone());
        }
    }
    match container {
        None => sb.mark_error(format!("container not found on server '{}'", sb.server)),
        Some(c) if c.paused => {
            if sb.status != Paused {
                sb.mark_paused(now, None);
            }
        }
        Some(c) if c.running => match sb.status {
            Running => {}
            // Thawed: the same run goes on.
            Paused => sb.mark_resumed(now),
            _ => sb.mark_running(c.started_at.unwrap_or(now)),
        },
        Some(c) => match sb.status {
            Stopped => {}
            Paused => sb.mark_stopped(
                c.finished_at.unwrap_or(now),
                Some(ENDED_WHILE_PAUSED.into()),
            ),
            _ => sb.mark_stopped(c.finished_at.unwrap_or(now), None),
        },
    }
}

/// The status reason of a paused sandbox whose container stopped.
pub const ENDED_WHILE_PAUSED: &str = "its processes ended while it was paused (the container \
     stopped: its Docker host restarted, or it was stopped outside Stockade); its files are kept";

async fn converge_limits(svc: &Service, op: &Operation) -> ServiceResult<()> {
    let Some(sb) = record_of(svc, op).await? else {
        return end(svc, op, SandboxWrite::None).await;
    };
    let id = sb.id.clone();
    let rt = svc.runtime_for(&sb).await?;
    if !sb.is_terminated() && rt.inspect(&id).await?.is_some() {
        rt.update_resources(&id, sb.spec.cpu_cores, sb.spec.memory_bytes())
            .await?;
    }
    end(svc, op, SandboxWrite::None).await
}

async fn abandon_snapshot(svc: &Service, op: &Operation) -> ServiceResult<()> {
    let scope = Scope::account(op.account_id.clone());
    if let Some(snapshot) = op
        .params
        .get("snapshot_id")
        .and_then(|s| s.as_str())
        .and_then(|s| SnapshotId::parse(s).ok())
    {
        match svc.store.get_snapshot(&scope, &snapshot).await {
            Ok(mut s) if s.status == SnapshotStatus::Creating => {
                s.status = SnapshotStatus::Deleting;
                s.deleted_at = Some(Utc::now());
                svc.store.update_snapshot(&s).await?;
            }
            Ok(_) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    end(svc, op, SandboxWrite::None).await
}
