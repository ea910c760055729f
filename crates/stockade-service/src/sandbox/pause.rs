//! Pause and resume: a running sandbox frozen in place by the cgroup
//! freezer (its processes, memory, open files and connections kept, no CPU
//! used) and thawed again. Both are durable operations like start and stop:
//! recorded before they touch Docker, and converged to what Docker shows if
//! the process dies in between. A paused sandbox is used through
//! [`awake`]: resumed first when its lifecycle says so, refused otherwise.

use std::time::Duration;

use chrono::Utc;
use stockade_core::{OperationKind, Sandbox, SandboxStatus, Scope};
use stockade_runtime::RuntimeError;
use tracing::{debug, info};

use crate::error::{ServiceError, ServiceResult};
use crate::sandbox::lifecycle::{begin, ensure_live, record_status};
use crate::Service;

/// Freezes a running sandbox. One that is not running is a conflict
/// naming its status.
pub async fn pause(svc: &Service, sb: Sandbox) -> ServiceResult<Sandbox> {
    pause_because(svc, sb, None).await
}

/// [`pause`], recording `reason` as the status reason (a session that
/// ended).
pub async fn pause_because(
    svc: &Service,
    sb: Sandbox,
    reason: Option<String>,
) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("pause");
    ensure_live(&sb, "create a new one")?;
    ensure_pausable(&sb)?;
    let (mut guard, mut sb) = begin(svc, OperationKind::Pause, &sb, serde_json::json!({})).await?;
    guard.check(ensure_live(&sb, "create a new one")).await?;
    guard.check(ensure_pausable(&sb)).await?;
    let rt = guard.check(svc.runtime_for(&sb).await).await?;
    if let Err(e) = rt.pause(&sb.id).await {
        svc.metrics.docker_error("pause", &e);
        // The record converges to Docker's state (stopped, gone).
        guard.abandon().await;
        return Err(match e {
            RuntimeError::Conflict(_) | RuntimeError::NotFound(_) => {
                ServiceError::NotRunning(format!(
                    "Sandbox {} is not running on its Docker host, so it cannot be paused",
                    sb.id
                ))
            }
            e => e.into(),
        });
    }
    svc.crash_point("pause.paused")?;
    sb.mark_paused(Utc::now(), reason);
    let saved = record_status(guard, sb).await?;
    info!(sandbox.id = %saved.id, "sandbox paused");
    Ok(saved)
}

fn ensure_pausable(sb: &Sandbox) -> ServiceResult<()> {
    match sb.status {
        SandboxStatus::Running => Ok(()),
        SandboxStatus::Paused => Err(ServiceError::Conflict(format!(
            "Sandbox {} is already paused",
            sb.id
        ))),
        other => Err(ServiceError::NotRunning(format!(
            "Sandbox {} is not running (status {other}): only a running sandbox can be paused",
            sb.id
        ))),
    }
}

/// Thaws a paused sandbox; its processes go on where they were. One that
/// is not paused is a conflict naming its status.
pub async fn resume(svc: &Service, sb: Sandbox) -> ServiceResult<Sandbox> {
    ensure_live(&sb, "create a new one")?;
    if !sb.is_paused() {
        return Err(ServiceError::Conflict(format!(
            "Sandbox {} is not paused (status {})",
            sb.id, sb.status
        )));
    }
    thaw(svc, sb).await
}

/// Thaws `sb` unless an operation ahead of this one already did: the
/// record as it is afterwards.
async fn thaw(svc: &Service, sb: Sandbox) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("resume");
    let (mut guard, mut sb) = begin(svc, OperationKind::Resume, &sb, serde_json::json!({})).await?;
    guard.check(ensure_live(&sb, "create a new one")).await?;
    if !sb.is_paused() {
        // Resumed (or stopped) meanwhile: nothing left to do here.
        guard.release().await;
        return Ok(sb);
    }
    let rt = guard.check(svc.runtime_for(&sb).await).await?;
    if let Err(e) = rt.unpause(&sb.id).await {
        svc.metrics.docker_error("unpause", &e);
        let id = sb.id.clone();
        let scope = stockade_core::Scope::account(sb.account_id.clone());
        // The record converges to Docker's state: a container that stopped
        // while paused (its host restarted) leaves a STOPPED sandbox.
        guard.abandon().await;
        return Err(match e {
            RuntimeError::Conflict(_) | RuntimeError::NotFound(_) => {
                let status = svc
                    .store
                    .get_sandbox(&scope, &id)
                    .await
                    .map_or(SandboxStatus::Stopped, |s| s.status);
                ServiceError::NotRunning(format!(
                    "Sandbox {id} could not be resumed: its processes ended while it was paused; \
                     it is {status} now: start it to run it again with its files"
                ))
            }
            e => e.into(),
        });
    }
    svc.crash_point("resume.resumed")?;
    sb.mark_resumed(Utc::now());
    let saved = record_status(guard, sb).await?;
    info!(sandbox.id = %saved.id, "sandbox resumed");
    Ok(saved)
}

/// The sandbox ready for a call into its processes (a command, a
/// terminal, a file call, a code cell, a request to one of its ports): a
/// paused one is resumed first when its lifecycle auto-resumes, and
/// refused with [`ServiceError::Paused`] otherwise (it stays paused). The
/// use counts as activity for the idle timeout.
pub async fn awake(svc: &Service, sb: Sandbox) -> ServiceResult<Sandbox> {
    if sb.is_paused() {
        if !sb.spec.lifecycle.auto_resume {
            return Err(ServiceError::paused(&sb.id));
        }
        debug!(sandbox.id = %sb.id, "auto-resuming a paused sandbox on use");
        return thaw(svc, sb).await;
    }
    touch(svc, &sb).await;
    Ok(sb)
}

/// Records a use of a running sandbox for its idle timeout: its session's
/// end moves to the idle timeout from now (never past its timeout). The
/// write is skipped while the stored end is within a twentieth of the idle
/// timeout (1 to 30 s) of where it would move, so busy sandboxes cost no
/// write per call.
pub async fn touch(svc: &Service, sb: &Sandbox) {
    let now = Utc::now();
    let Some(next) = sb.deadline_after_use(now) else {
        return;
    };
    let idle = Duration::from_secs_f64(sb.spec.lifecycle.idle_timeout_minutes * 60.0);
    let step = chrono::Duration::from_std(
        (idle / 20).clamp(Duration::from_secs(1), Duration::from_secs(30)),
    )
    .unwrap_or_else(|_| chrono::Duration::seconds(1));
    if sb.session_expires_at.is_some_and(|cur| next - cur < step) {
        return;
    }
    if let Err(e) = svc.store.extend_session(&sb.id, next).await {
        debug!(sandbox.id = %sb.id, error = %e, "idle timeout: the use was not recorded");
    }
}

/// Loads a sandbox the caller may see and makes it ready for a call into
/// its processes ([`awake`]).
pub async fn load_awake(svc: &Service, scope: &Scope, id: &str) -> ServiceResult<Sandbox> {
    let sb = crate::access::load(svc, scope, id).await?;
    awake(svc, sb).await
}
