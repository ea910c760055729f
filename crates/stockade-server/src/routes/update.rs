//! `PATCH /api/v1/sandbox/{id}`: change timeout, labels, tags, name,
//! environment and CPU/memory of a sandbox, and say which changes hold now
//! and which from the next start (the work is `stockade_service::update`).

use axum::routing::patch;
use axum::{Json, Router};
use chrono::Utc;
use stockade_api::{
    AppliedChanges, ErrorBody, SandboxResponse, UpdateSandboxRequest, UpdateSandboxResponse,
};
use stockade_service::update;
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::ApiResult;
use crate::extract::{ApiJson, AuthedId};
use crate::routes::apidoc::{AccessErrors, DockerUnavailable};
use crate::AppState;

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
        AccessErrors,
        (status = 409, description = "Name taken, sandbox terminated or being created, or Docker refused the new limits", body = ErrorBody),
        DockerUnavailable,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn update(
    AuthedId { state, caller, id }: AuthedId,
    ApiJson(req): ApiJson<UpdateSandboxRequest>,
) -> ApiResult<Json<UpdateSandboxResponse>> {
    let updated = update::update(&state.svc, &caller.scope, &id, &req.patch()).await?;
    Ok(Json(UpdateSandboxResponse {
        sandbox: SandboxResponse::from_record(&updated.sandbox, Utc::now()),
        applied: updated.applied,
        notes: updated.notes,
    }))
}
