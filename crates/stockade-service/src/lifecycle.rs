//! Sandbox lifecycle operations (LC-1..LC-6) over the store and the runtime,
//! with the database as the single source of truth (DB-3..DB-5).

use std::time::Duration;

use chrono::Utc;
use stockade_api::CreateSandboxRequest;
use stockade_core::{AccountId, Sandbox, SandboxId, SandboxSpec, SandboxStatus, Scope, TeamId};
use stockade_runtime::{ContainerSpec, RuntimeError};
use stockade_store::StoreError;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// Loads a sandbox the caller may see: unknown → 404, another account's → 403.
pub async fn load(svc: &Service, scope: &Scope, id: &str) -> ServiceResult<Sandbox> {
    let id = SandboxId::parse_field(id, "sandbox_id")?;
    Ok(svc.store.get_sandbox(scope, &id).await?)
}

/// Validates a create request into a record in PROVISIONING (not yet saved).
pub fn prepare(svc: &Service, scope: &Scope, req: &CreateSandboxRequest) -> ServiceResult<Sandbox> {
    prepare_with_id(svc, scope, req, SandboxId::generate())
}

/// [`prepare`] for a sandbox whose id was chosen already.
pub fn prepare_with_id(
    svc: &Service,
    scope: &Scope,
    req: &CreateSandboxRequest,
    id: SandboxId,
) -> ServiceResult<Sandbox> {
    let spec = SandboxSpec::from_input(req.spec_input(), &id, &svc.config.defaults)?;
    let team_id = match &req.team_id {
        None => None,
        Some(t) => {
            let team = TeamId::parse_field(t, "teamId")?;
            if !scope.team_ids.contains(&team) {
                return Err(ServiceError::field(
                    "teamId",
                    format!("you are not a member of team '{team}'"),
                ));
            }
            Some(team)
        }
    };
    Ok(Sandbox::new(
        id,
        scope.account_id.clone(),
        team_id,
        spec,
        svc.runtime.server_name(),
        Utc::now(),
    ))
}

fn container_spec(svc: &Service, sb: &Sandbox) -> ContainerSpec {
    ContainerSpec {
        sandbox_id: sb.id.clone(),
        account_id: sb.account_id.clone(),
        instance_id: svc.instance_id.clone(),
        image: sb.spec.docker_image.clone(),
        command: sb.spec.command_argv(),
        env: sb.spec.environment_vars.clone(),
        cpu_cores: sb.spec.cpu_cores,
        memory_bytes: sb.spec.memory_bytes(),
        network_access: sb.spec.network.allows_egress(),
        hostname: sb.spec.name.to_string().to_lowercase(),
    }
}

/// An `Idempotency-Key` a create was recorded under (API-2).
#[derive(Debug, Clone)]
pub struct IdempotencyKey {
    pub account: AccountId,
    pub key: String,
}

/// Creates a sandbox and returns it RUNNING (LC-1, LC-2).
///
/// The record is inserted first (PROVISIONING) so that the unique name is
/// claimed before any container exists (DB-7). If the runtime fails the
/// record is removed (DB-3); if the final status write fails the container
/// and volume are removed and the error returned.
///
/// The work runs in its own task. If the caller goes away before it ends
/// (the client disconnected, so this future was dropped), the task rolls the
/// create back when it finishes: no container, volume or record stays (LC-12).
pub async fn create(
    svc: &Service,
    sandbox: Sandbox,
    idempotency: Option<IdempotencyKey>,
) -> ServiceResult<Sandbox> {
    create_from(svc, sandbox, idempotency, None).await
}

/// [`create`] with a source (LC-9, LC-10, LC-11): its archive is unpacked
/// into `/workspace` before the container starts, and a failure there rolls
/// the create back like any runtime failure.
pub async fn create_from(
    svc: &Service,
    sandbox: Sandbox,
    idempotency: Option<IdempotencyKey>,
    source: Option<crate::sources::PreparedSource>,
) -> ServiceResult<Sandbox> {
    let abandoned = CancellationToken::new();
    let guard = abandoned.clone().drop_guard();
    let svc = svc.clone();
    let result = tokio::spawn(async move {
        let id = sandbox.id.clone();
        let (archive, after) = match source {
            Some(s) => (Some(s.archive), Some(s.after)),
            None => (None, None),
        };
        // SCALE-3: a create without a source may come from the warm pool
        // (not with an idempotency key: it names the sandbox id up front).
        let poolable = archive.is_none() && idempotency.is_none();
        let mut result = create_inner(&svc, sandbox, &abandoned, archive, poolable).await;
        if result.is_err() {
            forget_key(&svc, idempotency.as_ref()).await;
        } else if abandoned.is_cancelled() {
            // A sandbox from the pool has the member's id.
            let id = result.as_ref().map_or(id, |sb| sb.id.clone());
            warn!(sandbox.id = %id, "the client went away during create; rolling it back");
            rollback(&svc, &id).await;
            forget_key(&svc, idempotency.as_ref()).await;
            result = Err(ServiceError::Conflict("the create was cancelled".into()));
        }
        if let Some(after) = after {
            crate::sources::finish(&svc, after, result.is_ok()).await;
        }
        result
    })
    .await;
    guard.disarm();
    result.map_err(|e| ServiceError::Internal(format!("create task failed: {e}")))?
}

async fn forget_key(svc: &Service, key: Option<&IdempotencyKey>) {
    if let Some(k) = key {
        if let Err(e) = svc.store.delete_idempotency_key(&k.account, &k.key).await {
            error!(account.id = %k.account, error = %e, "could not forget the idempotency key of a failed create");
        }
    }
}

/// Removes the container, volume and record of a create that must not stay.
/// When the container cannot be removed the record stays, soft-deleted, so
/// that reconciliation removes the container later (and a warm-pool member
/// that was claimed never looks unclaimed again).
async fn rollback(svc: &Service, id: &SandboxId) {
    if let Err(e) = svc.runtime.remove(id, false).await {
        error!(sandbox.id = %id, error = %e, "rollback: could not remove the container; keeping its record as TERMINATED for reconciliation");
        match svc.store.soft_delete_sandbox(id, Utc::now()).await {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => {
                error!(sandbox.id = %id, error = %e, "rollback: could not mark the record TERMINATED")
            }
        }
        return;
    }
    match svc.store.purge_sandbox(id).await {
        Ok(()) | Err(StoreError::NotFound) => {}
        Err(e) => error!(sandbox.id = %id, error = %e, "rollback: could not remove the record"),
    }
}

async fn create_inner(
    svc: &Service,
    mut sb: Sandbox,
    abandoned: &CancellationToken,
    archive: Option<stockade_runtime::ByteStream>,
    poolable: bool,
) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("create");
    if poolable {
        if let Some(served) = crate::pool::claim(svc, &sb).await {
            return served;
        }
    }
    svc.store.insert_sandbox(&sb).await.map_err(|e| match e {
        StoreError::Conflict(_) => ServiceError::Conflict(format!(
            "A sandbox named '{}' already exists in this account",
            sb.spec.name
        )),
        other => other.into(),
    })?;
    if abandoned.is_cancelled() {
        rollback(svc, &sb.id).await;
        return Err(ServiceError::Conflict("the create was cancelled".into()));
    }
    let created = match archive {
        Some(archive) => {
            svc.runtime
                .create_with_workspace(&container_spec(svc, &sb), archive)
                .await
        }
        None => svc.runtime.create(&container_spec(svc, &sb)).await,
    };
    let container_id = match created {
        Ok(cid) => cid,
        Err(e) => {
            svc.metrics.docker_error("create", &e);
            warn!(sandbox.id = %sb.id, error = %e, "runtime create failed; removing the record");
            if let Err(pe) = svc.store.purge_sandbox(&sb.id).await {
                error!(sandbox.id = %sb.id, error = %pe, "could not remove the record of a failed create");
            }
            return Err(e.into());
        }
    };
    let now = Utc::now();
    sb.container_id = Some(container_id);
    sb.status = SandboxStatus::Running;
    sb.started_at = Some(now);
    sb.session_expires_at = sb.session_deadline(now); // LC-7: the first session
    match svc.store.update_sandbox(&sb).await {
        Ok(saved) => {
            info!(sandbox.id = %saved.id, account.id = %saved.account_id, image = %saved.spec.docker_image, "sandbox created");
            Ok(saved)
        }
        Err(e) => {
            error!(sandbox.id = %sb.id, error = %e, "saving the new sandbox failed; removing its container and volume");
            rollback(svc, &sb.id).await;
            Err(ServiceError::Database(format!(
                "The sandbox could not be saved, so it was removed again: {e}"
            )))
        }
    }
}

/// Writes a status change; a failed write is logged and the operation goes on (DB-4).
async fn record_status(svc: &Service, sb: Sandbox) -> Sandbox {
    match svc.store.update_sandbox(&sb).await {
        Ok(saved) => saved,
        Err(StoreError::Conflict(_)) => {
            // Someone else wrote in between: retry once on the fresh record.
            match svc
                .store
                .get_sandbox(&Scope::account(sb.account_id.clone()), &sb.id)
                .await
            {
                Ok(mut fresh) => {
                    fresh.status = sb.status;
                    fresh.status_reason = sb.status_reason.clone();
                    fresh.started_at = sb.started_at;
                    fresh.stopped_at = sb.stopped_at;
                    // A session opened here runs under the freshest timeout.
                    fresh.session_expires_at = match (sb.status, sb.started_at) {
                        (SandboxStatus::Running, Some(t)) => fresh.session_deadline(t),
                        _ => sb.session_expires_at,
                    };
                    match svc.store.update_sandbox(&fresh).await {
                        Ok(saved) => saved,
                        Err(e) => {
                            error!(sandbox.id = %sb.id, status = %sb.status, error = %e, "status write failed");
                            sb
                        }
                    }
                }
                Err(e) => {
                    error!(sandbox.id = %sb.id, status = %sb.status, error = %e, "status write failed");
                    sb
                }
            }
        }
        Err(e) => {
            error!(sandbox.id = %sb.id, status = %sb.status, error = %e, "status write failed; continuing");
            sb
        }
    }
}

fn ensure_not_terminated(sb: &Sandbox) -> ServiceResult<()> {
    if sb.status == SandboxStatus::Terminated || sb.deleted_at.is_some() {
        return Err(ServiceError::Conflict(format!(
            "Sandbox {} is terminated; create a new one",
            sb.id
        )));
    }
    Ok(())
}

/// Starts a sandbox; one that is already running is returned as it is (LC-3).
pub async fn start(svc: &Service, mut sb: Sandbox) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("start");
    ensure_not_terminated(&sb)?;
    if sb.status == SandboxStatus::Provisioning || sb.status == SandboxStatus::Pending {
        return Err(ServiceError::Conflict(format!(
            "Sandbox {} is still being created",
            sb.id
        )));
    }
    let state_now = svc
        .runtime
        .inspect(&sb.id)
        .await
        .inspect_err(|e| svc.metrics.docker_error("inspect", e))?;
    let Some(container) = state_now else {
        sb.status = SandboxStatus::Error;
        sb.status_reason = Some(format!("container not found on server '{}'", sb.server));
        record_status(svc, sb.clone()).await;
        return Err(ServiceError::Conflict(format!(
            "The container of sandbox {} no longer exists on its Docker host; its /workspace volume may still be listed under volumes",
            sb.id
        )));
    };
    if container.running && sb.status == SandboxStatus::Running {
        return Ok(sb);
    }
    if !container.running {
        // LC-8: the environment as updated since create, for the main process.
        svc.runtime
            .set_main_process_env(&sb.id, &sb.spec.environment_vars)
            .await
            .inspect_err(|e| svc.metrics.docker_error("start", e))?;
        svc.runtime
            .start(&sb.id)
            .await
            .inspect_err(|e| svc.metrics.docker_error("start", e))?;
    }
    let now = Utc::now();
    sb.status = SandboxStatus::Running;
    sb.status_reason = None;
    sb.started_at = Some(now);
    sb.stopped_at = None;
    sb.session_expires_at = sb.session_deadline(now); // LC-7: a new session
    Ok(record_status(svc, sb).await)
}

/// Stops a sandbox: SIGTERM, up to `grace`, then SIGKILL (LC-4).
pub async fn stop(svc: &Service, mut sb: Sandbox, grace: Duration) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("stop");
    ensure_not_terminated(&sb)?;
    if sb.status == SandboxStatus::Provisioning || sb.status == SandboxStatus::Pending {
        return Err(ServiceError::Conflict(format!(
            "Sandbox {} is still being created",
            sb.id
        )));
    }
    match svc.runtime.stop(&sb.id, grace).await {
        Ok(()) => {}
        Err(RuntimeError::NotFound(_)) => {
            sb.status_reason = Some(format!("container not found on server '{}'", sb.server));
        }
        Err(e) => {
            svc.metrics.docker_error("stop", &e);
            return Err(e.into());
        }
    }
    if sb.status == SandboxStatus::Stopped && sb.status_reason.is_none() {
        return Ok(sb);
    }
    sb.status = SandboxStatus::Stopped;
    sb.stopped_at = Some(Utc::now());
    sb.session_expires_at = None; // the session ends with the stop
    Ok(record_status(svc, sb).await)
}

/// Destroys a sandbox (LC-5, DB-5): runtime terminate → TERMINATED → soft
/// delete. If the runtime fails the record stays as it was.
pub async fn destroy(svc: &Service, sb: Sandbox, preserve_volume: bool) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("destroy");
    if sb.status == SandboxStatus::Provisioning {
        return Err(ServiceError::Conflict(format!(
            "Sandbox {} is still being created; delete it once create returns",
            sb.id
        )));
    }
    svc.runtime
        .remove(&sb.id, preserve_volume)
        .await
        .inspect_err(|e| svc.metrics.docker_error("remove", e))?;
    if sb.deleted_at.is_some() {
        return Ok(sb);
    }
    let now = Utc::now();
    let mut done = sb.clone();
    done.status = SandboxStatus::Terminated;
    done.terminated_at = Some(now);
    done.deleted_at = Some(now);
    if let Err(e) = svc.store.soft_delete_sandbox(&sb.id, now).await {
        error!(sandbox.id = %sb.id, error = %e, "the container was removed but the record could not be marked TERMINATED");
        return Err(e.into());
    }
    info!(sandbox.id = %sb.id, preserve_volume, "sandbox destroyed");
    Ok(done)
}
