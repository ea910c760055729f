//! `/api/v1/volumes…`: this instance's sandbox volumes with
//! sizes, owners, `inUse` and `orphaned`; deleting one; the confirmed cleanup
//! of every orphan. Only volumes labelled with this instance's id are shown
//! or touched, never another program's. A non-admin caller sees the volumes
//! of the sandboxes it may see, and orphans labelled with its account.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Path, RawQuery};
use axum::routing::get;
use axum::{Json, Router};
use stockade_api::{
    CleanupResponse, ErrorBody, ListVolumesResponse, RemovedVolume, SandboxResponse, VolumeFailure,
    VolumeResponse,
};
use stockade_core::size::volume_warning;
use stockade_core::{human_bytes, Sandbox, SandboxId, SandboxStatus, VolumeName};
use stockade_runtime::{RuntimeError, VolumeInfo};
use stockade_store::RecordOwner;
use tracing::{info, instrument, warn};
use utoipa::OpenApi;

use crate::error::{ApiError, ApiResult};
use crate::extract::{query_pairs, Authed, Caller};
use crate::routes::apidoc::{AccessErrors, DockerUnavailable};
use crate::AppState;
use stockade_service::ServiceError;

/// The routes of this module (relative to `/api/v1`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/volumes", get(list))
        .route("/volumes/orphaned", get(list_orphaned).delete(cleanup))
        .route("/volumes/{name}", get(get_one).delete(delete_one))
}

#[derive(OpenApi)]
#[openapi(
    paths(list, list_orphaned, get_one, delete_one, cleanup),
    components(schemas(
        VolumeResponse, ListVolumesResponse, RemovedVolume, VolumeFailure, CleanupResponse
    )),
    tags((name = "volumes", description = "Sandbox volumes, orphans and cleanup"))
)]
pub struct VolumesApi;

/// How stale the volume size in a sandbox's details may be.
const DETAILS_SIZE_MAX_AGE: Duration = Duration::from_secs(10);
/// How long a sandbox's details wait for a size before leaving it out.
const DETAILS_SIZE_WAIT: Duration = Duration::from_secs(2);

/// One of this instance's volumes with what Stockade knows about its owner.
struct Volume {
    info: VolumeInfo,
    /// The Docker host it is on.
    server: String,
    sandbox_id: SandboxId,
    /// The live (not soft-deleted) record that owns it.
    live: Option<Sandbox>,
    /// Without a live record: the owner of its record, soft-deleted (the
    /// sandbox was destroyed) or inserted after the records were read.
    record: Option<RecordOwner>,
}

impl Volume {
    fn orphaned(&self) -> bool {
        self.live.is_none() && self.record.as_ref().is_none_or(|r| r.deleted)
    }

    /// The owner: the live record's, else the volume's label, else (a
    /// claimed warm-pool member's volume has no account label) the record's.
    fn account_id(&self) -> Option<String> {
        match &self.live {
            Some(sb) => Some(sb.account_id.to_string()),
            None => self
                .info
                .account_id
                .clone()
                .or_else(|| self.record.as_ref().map(|r| r.account_id.to_string())),
        }
    }

    fn visible_to(&self, caller: &Caller) -> bool {
        if caller.account.is_admin {
            return true;
        }
        match &self.live {
            Some(sb) => caller.scope.allows(&sb.account_id, sb.team_id.as_ref()),
            None => self.account_id().as_deref() == Some(caller.account.id.as_str()),
        }
    }

    fn response(&self) -> VolumeResponse {
        let size = self.info.size_bytes;
        VolumeResponse {
            name: self.info.name.to_string(),
            sandbox_id: self.sandbox_id.to_string(),
            account_id: self.account_id(),
            size_bytes: size,
            size: size.map(human_bytes),
            created_at: self.info.created_at,
            in_use: self.info.in_use,
            orphaned: self.orphaned(),
            sandbox_status: match &self.live {
                Some(sb) => Some(sb.status.to_string()),
                None if self.record.as_ref().is_some_and(|r| r.deleted) => {
                    Some(SandboxStatus::Terminated.to_string())
                }
                None => None,
            },
            warning: size.and_then(volume_warning),
        }
    }

    fn removed(&self) -> RemovedVolume {
        RemovedVolume {
            name: self.info.name.to_string(),
            sandbox_id: self.sandbox_id.to_string(),
            size_bytes: self.info.size_bytes,
            size: self.info.size_bytes.map(human_bytes),
        }
    }
}

/// This instance's volumes, each with its owning record.
///
/// Docker is asked first and the database second: a create inserts its
/// record before it makes the volume, so every volume listed here has its
/// record in the read that follows, and a volume being created right now is
/// never taken for an orphan.
async fn instance_volumes(state: &AppState) -> ApiResult<Vec<Volume>> {
    let mut infos: Vec<(String, VolumeInfo)> = Vec::new();
    for (server, rt) in state.svc.host_runtimes().await {
        let listed = match rt.list_volumes().await {
            Ok(l) => l,
            // Another host that does not answer: its volumes are not listed.
            Err(e) if server != state.svc.hosts().own_name() => {
                tracing::warn!(host = %server, error = %e, "volumes of a host left out");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // An engine registered under two names lists its volumes once.
        let seen: std::collections::HashSet<String> = infos
            .iter()
            .map(|(_, v)| v.name.as_str().to_owned())
            .collect();
        infos.extend(
            listed
                .into_iter()
                .filter(|v| v.instance_id.as_deref() == Some(state.svc.instance_id().as_str()))
                .filter(|v| !seen.contains(v.name.as_str()))
                .map(|v| (server.clone(), v)),
        );
    }
    let live: HashMap<SandboxId, Sandbox> = state
        .svc
        .live_sandboxes()
        .await?
        .into_iter()
        .map(|sb| (sb.id.clone(), sb))
        .collect();
    let mut out = Vec::with_capacity(infos.len());
    for (server, info) in infos {
        let sandbox_id = info.name.sandbox_id();
        let live = live.get(&sandbox_id).cloned();
        let record = match live {
            Some(_) => None,
            None => state.svc.record_owner(&sandbox_id).await?,
        };
        if info.pool_member && live.is_none() && record.is_none() {
            // A warm-pool member: nobody's yet, never listed.
            continue;
        }
        out.push(Volume {
            info,
            server,
            sandbox_id,
            live,
            record,
        });
    }
    out.sort_by(|a, b| {
        b.info
            .created_at
            .cmp(&a.info.created_at)
            .then_with(|| a.info.name.as_str().cmp(b.info.name.as_str()))
    });
    Ok(out)
}

fn no_query(raw: Option<&str>) -> ApiResult<()> {
    match query_pairs(raw).into_iter().next() {
        Some((k, _)) => Err(ApiError::field(k, "unknown query parameter")),
        None => Ok(()),
    }
}

fn listing(volumes: Vec<VolumeResponse>) -> ListVolumesResponse {
    let total_bytes = volumes.iter().filter_map(|v| v.size_bytes).sum();
    ListVolumesResponse {
        total: volumes.len() as u64,
        total_bytes,
        total_size: human_bytes(total_bytes),
        volumes,
    }
}

/// The listing of this instance's volumes the caller may see and `keep`
/// keeps (the request has no query).
async fn visible_listing(
    state: &AppState,
    caller: &Caller,
    raw: Option<&str>,
    keep: impl Fn(&Volume) -> bool,
) -> ApiResult<Json<ListVolumesResponse>> {
    no_query(raw)?;
    let volumes = instance_volumes(state).await?;
    Ok(Json(listing(
        volumes
            .iter()
            .filter(|v| keep(v) && v.visible_to(caller))
            .map(Volume::response)
            .collect(),
    )))
}

/// List the volumes of the caller's sandboxes (an admin: all of this
/// instance's volumes), newest first, with sizes as Docker measures them.
#[utoipa::path(get, path = "/api/v1/volumes", tag = "volumes",
    responses(
        (status = 200, body = ListVolumesResponse),
        (status = 400, description = "Unknown query parameter", body = ErrorBody),
        DockerUnavailable,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list(
    Authed { state, caller }: Authed,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<ListVolumesResponse>> {
    visible_listing(&state, &caller, raw.as_deref(), |_| true).await
}

/// List orphaned volumes: no live sandbox record owns them (e.g. the
/// preserved volume of a destroyed sandbox).
#[utoipa::path(get, path = "/api/v1/volumes/orphaned", tag = "volumes",
    responses((status = 200, body = ListVolumesResponse), (status = 503, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list_orphaned(
    Authed { state, caller }: Authed,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<ListVolumesResponse>> {
    visible_listing(&state, &caller, raw.as_deref(), Volume::orphaned).await
}

/// The volume `name` if it is this instance's and the caller may see it.
async fn find(state: &AppState, caller: &Caller, name: &str) -> ApiResult<Volume> {
    let name = VolumeName::parse(name)?;
    let volume = instance_volumes(state)
        .await?
        .into_iter()
        .find(|v| v.info.name == name)
        .ok_or_else(|| ServiceError::NotFound(format!("Volume {name} not found")))?;
    if !volume.visible_to(caller) {
        return Err(ServiceError::Forbidden(
            "Forbidden: this volume belongs to another account".into(),
        )
        .into());
    }
    Ok(volume)
}

/// One volume.
#[utoipa::path(get, path = "/api/v1/volumes/{name}", tag = "volumes",
    params(("name" = String, Path, description = "agent-sandbox-{sandbox id}")),
    responses(
        (status = 200, body = VolumeResponse),
        (status = 400, description = "Not a Stockade volume name", body = ErrorBody),
        AccessErrors,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, volume = %name), err(level = "debug", Display))]
pub async fn get_one(
    Authed { state, caller }: Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<VolumeResponse>> {
    Ok(Json(find(&state, &caller, &name).await?.response()))
}

/// Delete a volume no live sandbox owns. The volume of a running sandbox is
/// a 409 `Volume is in use by running sandbox`; so is the volume of any other
/// live sandbox (stopped, error): deleting it would break that sandbox, so
/// destroy the sandbox instead (`DELETE /api/v1/sandbox/{id}` removes its
/// volume). There is no force option.
#[utoipa::path(delete, path = "/api/v1/volumes/{name}", tag = "volumes",
    params(("name" = String, Path, description = "agent-sandbox-{sandbox id}")),
    responses(
        (status = 200, description = "Removed; the space it used", body = RemovedVolume),
        (status = 400, description = "Not a Stockade volume name", body = ErrorBody),
        AccessErrors,
        (status = 409, description = "A running sandbox uses it, or a live sandbox owns it", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, volume = %name), err(level = "debug", Display))]
pub async fn delete_one(
    Authed { state, caller }: Authed,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<RemovedVolume>> {
    no_query(raw.as_deref())?;
    let volume = find(&state, &caller, &name).await?;
    if let Some(sb) = &volume.live {
        if volume.info.in_use || sb.status == SandboxStatus::Running {
            return Err(
                ServiceError::Conflict("Volume is in use by running sandbox".into()).into(),
            );
        }
        return Err(ServiceError::Conflict(format!(
            "Volume belongs to sandbox {} ({}); removing it would break that sandbox. \
             Destroy the sandbox instead (DELETE /api/v1/sandbox/{}), which removes its volume",
            sb.id, sb.status, sb.id
        ))
        .into());
    }
    if !volume.orphaned() {
        return Err(ServiceError::Conflict(format!(
            "Volume belongs to sandbox {}, which was just created; destroy the sandbox instead",
            volume.sandbox_id
        ))
        .into());
    }
    remove(&state, &volume).await?;
    info!(volume = %volume.info.name, size_bytes = ?volume.info.size_bytes, "volume removed");
    Ok(Json(volume.removed()))
}

/// Removes an orphaned volume. A container that still mounts it has no
/// live record either (a sandbox destroyed with its volume preserved whose
/// container removal failed, or a create that never finished): it is
/// removed first, keeping the volume, so that what is listed can be removed.
async fn remove(state: &AppState, volume: &Volume) -> ApiResult<()> {
    let runtime = state.svc.runtime_on(&volume.server).await?;
    let mut result = runtime.remove_volume(&volume.info.name).await;
    if matches!(result, Err(RuntimeError::Conflict(_))) && volume.orphaned() {
        info!(volume = %volume.info.name, "removing the dead container that still mounts an orphaned volume");
        runtime.remove(&volume.sandbox_id, true).await?;
        result = runtime.remove_volume(&volume.info.name).await;
    }
    result.map_err(|e| match e {
        RuntimeError::NotFound(_) => {
            ServiceError::NotFound(format!("Volume {} not found", volume.info.name)).into()
        }
        e => e.into(),
    })
}

/// Remove every orphaned volume the caller may see. Needs `confirm=true`.
/// Each volume's size is measured before it is removed; the response lists
/// each removed volume and the total space freed.
#[utoipa::path(delete, path = "/api/v1/volumes/orphaned", tag = "volumes",
    params(("confirm" = bool, Query, description = "must be true: removes every orphaned volume")),
    responses(
        (status = 200, body = CleanupResponse),
        (status = 400, description = "confirm=true missing", body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn cleanup(
    Authed { state, caller }: Authed,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<CleanupResponse>> {
    let mut confirmed = false;
    for (k, v) in query_pairs(raw.as_deref()) {
        match k.as_str() {
            "confirm" => {
                confirmed = matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes")
            }
            other => return Err(ApiError::field(other, "unknown query parameter")),
        }
    }
    if !confirmed {
        return Err(ApiError::field(
            "confirm",
            "set confirm=true to remove every orphaned volume (GET /api/v1/volumes/orphaned lists them)",
        ));
    }
    let orphans: Vec<Volume> = instance_volumes(&state)
        .await?
        .into_iter()
        .filter(|v| v.orphaned() && v.visible_to(&caller))
        .collect();
    let mut removed = Vec::new();
    let mut failed = Vec::new();
    for v in &orphans {
        match remove(&state, v).await {
            Ok(()) => removed.push(v.removed()),
            Err(e) => {
                warn!(volume = %v.info.name, error = %e, "orphan cleanup: could not remove");
                failed.push(VolumeFailure {
                    name: v.info.name.to_string(),
                    error: e.detail(),
                });
            }
        }
    }
    let freed_bytes = removed.iter().filter_map(|r| r.size_bytes).sum();
    info!(
        removed = removed.len(),
        failed = failed.len(),
        freed_bytes,
        "orphaned volumes removed"
    );
    Ok(Json(CleanupResponse {
        removed,
        failed,
        freed_bytes,
        freed: human_bytes(freed_bytes),
    }))
}

/// Fills in the size of a sandbox's volume in its details from a
/// recent measurement; left out when Docker does not answer in time.
pub async fn fill_volume_size(state: &AppState, resp: &mut SandboxResponse) {
    let Ok(name) = VolumeName::parse(&resp.volume.name) else {
        return;
    };
    let Ok(rt) = state.svc.runtime_on(&resp.server).await else {
        return;
    };
    let size = tokio::time::timeout(
        DETAILS_SIZE_WAIT,
        rt.volume_size(&name, DETAILS_SIZE_MAX_AGE),
    )
    .await;
    if let Ok(Ok(Some(bytes))) = size {
        resp.volume = stockade_api::VolumeSummary::new(resp.volume.name.clone(), Some(bytes));
    }
}
