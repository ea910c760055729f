//! `PATCH /api/v1/sandbox/{id}` (LC-8): change timeout, labels, tags, name,
//! environment and CPU/memory of a sandbox, and say which changes hold now
//! and which from the next start.
//!
//! CPU and memory go to Docker first (live on a running container), so a
//! limit Docker refuses fails the update before anything is recorded. The
//! record is then written optimistically: a concurrent writer makes the
//! write retry on the fresh record, so no update is lost (DB-7). Afterwards
//! the container's limits are brought to what the record finally says, in
//! case a concurrent update applied its own in between.

use axum::extract::{Path, State};
use axum::routing::patch;
use axum::{Json, Router};
use chrono::Utc;
use stockade_api::{
    AppliedChanges, ErrorBody, SandboxResponse, UpdateSandboxRequest, UpdateSandboxResponse,
};
use stockade_core::update::{PatchField, SpecPatch};
use stockade_core::{Sandbox, SandboxStatus, Scope};
use stockade_store::StoreError;
use tracing::{info, instrument, warn};
use utoipa::OpenApi;

use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, Caller};
use crate::AppState;
use stockade_service::lifecycle;

/// The routes of this module (relative to `/api/v1`).
pub fn routes() -> Router<AppState> {
    Router::new().route("/sandbox/{id}", patch(update))
}

#[derive(OpenApi)]
#[openapi(
    paths(update),
    components(schemas(UpdateSandboxRequest, UpdateSandboxResponse, AppliedChanges))
)]
pub struct UpdateApi;

/// How often a write that lost to a concurrent writer is retried.
const MAX_ATTEMPTS: usize = 16;

fn ensure_updatable(sb: &Sandbox) -> ApiResult<()> {
    if sb.status == SandboxStatus::Terminated || sb.deleted_at.is_some() {
        return Err(ApiError::Conflict(format!(
            "Sandbox {} is terminated; it cannot be updated",
            sb.id
        )));
    }
    if matches!(
        sb.status,
        SandboxStatus::Provisioning | SandboxStatus::Pending
    ) {
        return Err(ApiError::Conflict(format!(
            "Sandbox {} is still being created; update it once create returns",
            sb.id
        )));
    }
    Ok(())
}

/// Update a sandbox's settings. A field left out stays; a field given
/// replaces the current value as a whole. `name`, `labels`, `tags` apply at
/// once; `timeoutMinutes` at once on a running sandbox (the current
/// session's deadline becomes its start plus the new timeout, so it may
/// end at the next check) and from the next start otherwise; `cpuCores` and
/// `memoryGB` live on a running sandbox (Docker container update) and from
/// the next start otherwise; `environmentVars` from the next start for the
/// main process, at once for commands run with exec. `applied` says which.
#[utoipa::path(patch, path = "/api/v1/sandbox/{id}", tag = "sandboxes",
    params(("id" = String, Path, description = "sandbox id")),
    request_body = UpdateSandboxRequest,
    responses(
        (status = 200, description = "Updated; `applied` says when each change takes effect", body = UpdateSandboxResponse),
        (status = 400, description = "A field is invalid, or nothing to update", body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Name taken, sandbox terminated or being created, or Docker refused the new limits", body = ErrorBody),
        (status = 503, description = "Docker unavailable", body = ErrorBody),
    ),
    security(("bearer" = [])))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateSandboxRequest>,
) -> ApiResult<Json<UpdateSandboxResponse>> {
    let patch = req.patch();
    if patch.is_empty() {
        return Err(ApiError::field(
            "body",
            "nothing to update: give at least one of name, timeoutMinutes, labels, tags, \
             environmentVars, cpuCores, memoryGB",
        ));
    }
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    // Bad input is a 400 whatever state the sandbox is in.
    patch.apply(&sb.spec, &state.svc.config.defaults)?;
    ensure_updatable(&sb)?;
    let (saved, live_limits) = apply(&state, &caller.scope, sb, &patch).await?;
    let (applied, notes) = explain(&patch, &saved, live_limits);
    info!(now = ?applied.now, next_start = ?applied.next_start, "sandbox updated");
    Ok(Json(UpdateSandboxResponse {
        sandbox: SandboxResponse::from_record(&saved, Utc::now()),
        applied,
        notes,
    }))
}

/// Applies `patch`: limits to Docker, then the record (retried on
/// concurrent writes), then the limits again if the record moved on.
/// Returns the saved record and whether the limits changed live.
async fn apply(
    state: &AppState,
    scope: &Scope,
    mut current: Sandbox,
    patch: &SpecPatch,
) -> ApiResult<(Sandbox, bool)> {
    let defaults = &state.svc.config.defaults;
    let limits_given = patch.cpu_cores.is_some() || patch.memory_gb.is_some();
    let mut applied_limits = None;
    let mut live = false;
    if limits_given {
        if let Some(container) = state.svc.runtime.inspect(&current.id).await? {
            let target = patch.apply(&current.spec, defaults)?;
            let limits = (target.cpu_cores, target.memory_bytes());
            state
                .svc
                .runtime
                .update_resources(&current.id, limits.0, limits.1)
                .await?;
            applied_limits = Some(limits);
            live = container.running;
        }
    }

    let mut attempt = 0;
    let saved = loop {
        attempt += 1;
        let mut next = current.clone();
        next.spec = patch.apply(&current.spec, defaults)?;
        if patch.timeout_minutes.is_some() && current.status == SandboxStatus::Running {
            // The current session runs under the new timeout, from its start.
            let start = current.started_at.unwrap_or_else(Utc::now);
            next.session_expires_at = next.session_deadline(start);
        }
        match state.svc.store.update_sandbox(&next).await {
            Ok(saved) => break saved,
            Err(StoreError::Conflict(message)) => {
                let fresh = state.svc.store.get_sandbox(scope, &current.id).await?;
                if fresh.version == current.version {
                    // Not a concurrent writer: the new name is taken.
                    return Err(ApiError::Conflict(match &patch.name {
                        Some(n) => format!("A sandbox named '{n}' already exists in this account"),
                        None => message,
                    }));
                }
                ensure_updatable(&fresh)?;
                if attempt >= MAX_ATTEMPTS {
                    return Err(ApiError::Conflict(
                        "The sandbox kept changing while it was being updated; try again".into(),
                    ));
                }
                current = fresh;
            }
            Err(e) => return Err(e.into()),
        }
    };

    // A concurrent update may have set other limits in between: converge on
    // what the record says (the last writer to check fixes Docker up).
    if let Some(mut applied) = applied_limits {
        let mut record = saved.clone();
        for _ in 0..MAX_ATTEMPTS {
            let want = (record.spec.cpu_cores, record.spec.memory_bytes());
            if want == applied {
                break;
            }
            if let Err(e) = state
                .svc
                .runtime
                .update_resources(&record.id, want.0, want.1)
                .await
            {
                warn!(sandbox.id = %record.id, error = %e, "could not bring the container's limits to the record's");
                break;
            }
            applied = want;
            record = state.svc.store.get_sandbox(scope, &record.id).await?;
        }
    }
    Ok((saved, live))
}

/// Which given fields hold now and which from the next start, and why.
fn explain(patch: &SpecPatch, saved: &Sandbox, live_limits: bool) -> (AppliedChanges, Vec<String>) {
    let running = saved.status == SandboxStatus::Running;
    let mut applied = AppliedChanges::default();
    let mut notes = Vec::new();
    let mut limits_noted = false;
    for field in patch.fields() {
        let now = match field {
            PatchField::Name | PatchField::Labels | PatchField::Tags => true,
            PatchField::TimeoutMinutes => {
                notes.push(match (running, saved.session_expires_at) {
                    (true, Some(t)) => format!(
                        "timeoutMinutes: the current session now ends at {} (its start plus the new timeout)",
                        t.to_rfc3339()
                    ),
                    (true, None) => "timeoutMinutes: the current session no longer times out".into(),
                    (false, _) => "timeoutMinutes: applies to the session the next start opens".into(),
                });
                running
            }
            PatchField::EnvironmentVars => {
                notes.push(
                    "environmentVars: the main process sees the new environment from its next \
                     start (stop and start the sandbox); commands run with exec use it at once"
                        .into(),
                );
                false
            }
            PatchField::CpuCores | PatchField::MemoryGb => {
                if !limits_noted {
                    limits_noted = true;
                    notes.push(if live_limits {
                        "cpuCores/memoryGB: updated live on the running container".into()
                    } else {
                        "cpuCores/memoryGB: recorded; the container gets them when it next starts"
                            .into()
                    });
                }
                live_limits
            }
        };
        let list = if now {
            &mut applied.now
        } else {
            &mut applied.next_start
        };
        list.push(field.api_name().to_owned());
    }
    (applied, notes)
}
