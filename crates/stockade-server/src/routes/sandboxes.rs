//! `/api/v1/sandbox…`: create, list, get, start, stop, destroy, bulk delete.

use std::time::Duration;

use axum::extract::RawQuery;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::Utc;
use stockade_api::{
    BulkDeleteRequest, BulkDeleteResponse, BulkDeleteResult, CreateBodyError, CreateSandboxBody,
    ErrorBody, ListSandboxesResponse, SandboxResponse, UsageHistoryResponse,
};
use stockade_core::{Label, SandboxStatus, TeamId, ValidationErrors};
use stockade_store::SandboxFilter;
use tracing::instrument;

use crate::compat::prime;
use crate::error::{ApiError, ApiResult};
use crate::extract::{idempotency_key, query_pairs, ApiJson, Authed, AuthedId};
use crate::routes::apidoc::{AccessErrors, BadRequest, DockerUnavailable, InvalidField};
use stockade_service::lifecycle;
use stockade_service::sandbox::queries::BulkSelection;
use stockade_service::sandbox::request::NewSandbox;

/// A sandbox as the caller reads it (`prime-sandboxes` gets its start
/// command as a program and arguments).
fn respond(sb: &stockade_core::Sandbox, headers: &HeaderMap) -> Json<SandboxResponse> {
    Json(prime::answer(sb, headers))
}

/// Create a sandbox; returns it RUNNING. With an `Idempotency-Key` header a
/// retried create returns the first result; the same key with different
/// parameters is a 422. The fields may also be written in snake_case, and
/// the fields `prime-sandboxes` sends are taken as documented on
/// [`CreateSandboxBody`] (what cannot map is a 501 saying why).
#[utoipa::path(post, path = "/api/v1/sandbox", tag = "sandboxes",
    request_body = CreateSandboxBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "makes retries of this create return the first result")),
    responses(
        (status = 201, description = "Created and running", body = SandboxResponse),
        InvalidField,
        (status = 409, description = "Name already used", body = ErrorBody),
        (status = 422, description = "Image missing and not pullable, or Idempotency-Key reused with other parameters", body = ErrorBody),
        (status = 501, description = "A prime-sandboxes field Stockade cannot honour (the message says what it offers)", body = ErrorBody),
        DockerUnavailable,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id), err(level = "debug", Display))]
pub async fn create(
    Authed { state, caller }: Authed,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CreateSandboxBody>,
) -> ApiResult<Response> {
    let arch = stockade_api::create::docker_arch(std::env::consts::ARCH);
    let (req, extras) = match body.into_parts(arch) {
        Ok(parts) => parts,
        Err(CreateBodyError::Invalid { field, message }) => {
            return Err(ApiError::field(field, message))
        }
        Err(CreateBodyError::Unsupported(message)) => return Ok(prime::not_implemented(message)),
    };
    let header_key = idempotency_key(&headers)?;
    let key = match (header_key, extras.idempotency_key.as_deref()) {
        (Some(h), Some(b)) if h != b => {
            return Err(ApiError::field(
                "idempotency_key",
                "differs from the Idempotency-Key header; send one of them",
            ))
        }
        (Some(h), _) => Some(h),
        (None, b) => b,
    };
    let created = state
        .svc
        .create_sandbox(&caller.scope, NewSandbox::from(&req), key)
        .await?;
    let mut resp = (
        StatusCode::CREATED,
        Extension(crate::audit::Made(created.sandbox.id.to_string())),
        respond(&created.sandbox, &headers),
    )
        .into_response();
    if created.replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(resp)
}

fn parse_bool(v: &str, field: &str) -> Result<bool, ApiError> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(ApiError::field(
            field,
            format!("expected true or false, got '{v}'"),
        )),
    }
}

fn parse_u32(v: &str, field: &str, min: u32, max: u32) -> Result<u32, ApiError> {
    v.parse::<u32>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            ApiError::field(
                field,
                format!("must be a whole number from {min} to {max}, got '{v}'"),
            )
        })
}

/// Parses the list query. `status` and `labels` may repeat or be
/// comma-separated.
pub fn parse_list_query(raw: Option<&str>) -> ApiResult<SandboxFilter> {
    let mut f = SandboxFilter {
        page: 1,
        per_page: 50,
        ..Default::default()
    };
    let mut errs = ValidationErrors::default();
    for (k, v) in query_pairs(raw) {
        match k.as_str() {
            "status" => {
                for s in v.split(',').filter(|s| !s.is_empty()) {
                    if let Some(st) = errs.check(SandboxStatus::parse(s)) {
                        f.statuses.push(st);
                    }
                }
            }
            "labels" | "label" => {
                for l in v.split(',').filter(|s| !s.is_empty()) {
                    if let Some(l) = errs.check(Label::parse_field(l, "labels")) {
                        f.labels.push(l);
                    }
                }
            }
            "is_active" => match parse_bool(&v, "is_active") {
                Ok(b) => f.is_active = Some(b),
                Err(ApiError::Validation(e)) => errs.0.extend(e.0),
                Err(_) => {}
            },
            "team_id" => {
                if let Some(t) = errs.check(TeamId::parse_field(&v, "team_id")) {
                    f.team_id = Some(t);
                }
            }
            "name" => {
                if v.is_empty() || v.len() > 63 {
                    errs.push("name", "must be 1 to 63 characters");
                } else {
                    f.name = Some(v);
                }
            }
            "page" => match parse_u32(&v, "page", 1, 1_000_000) {
                Ok(n) => f.page = n,
                Err(ApiError::Validation(e)) => errs.0.extend(e.0),
                Err(_) => {}
            },
            "per_page" => match parse_u32(&v, "per_page", 1, 1000) {
                Ok(n) => f.per_page = n,
                Err(ApiError::Validation(e)) => errs.0.extend(e.0),
                Err(_) => {}
            },
            other => errs.push(other, "unknown query parameter"),
        }
    }
    errs.into_result()?;
    Ok(f)
}

/// List the caller's sandboxes, newest first.
#[utoipa::path(get, path = "/api/v1/sandbox", tag = "sandboxes",
    params(
        ("status" = Option<String>, Query, description = "PENDING, PROVISIONING, RUNNING, STOPPED, ERROR or TERMINATED, any case; repeatable"),
        ("is_active" = Option<bool>, Query, description = "true: exclude terminated; false: only terminated"),
        ("labels" = Option<String>, Query, description = "must carry ALL of these; repeatable or comma-separated"),
        ("team_id" = Option<String>, Query, description = "only this team's sandboxes"),
        ("name" = Option<String>, Query, description = "exact name"),
        ("page" = Option<u32>, Query, description = "1-based, default 1"),
        ("per_page" = Option<u32>, Query, description = "1-1000, default 50"),
    ),
    responses((status = 200, body = ListSandboxesResponse), BadRequest))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list(
    Authed { state, caller }: Authed,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<ListSandboxesResponse>> {
    let filter = parse_list_query(raw.as_deref())?;
    let page = state.svc.list_sandboxes(&caller.scope, &filter).await?;
    let now = Utc::now();
    let shown = (filter.page as u64 - 1) * filter.per_page as u64 + page.sandboxes.len() as u64;
    let sandboxes = page
        .sandboxes
        .iter()
        .map(|s| {
            let r = SandboxResponse::from_record(s, now);
            if prime::wants_argv_start_command(&headers) {
                r.with_argv_start_command()
            } else {
                r
            }
        })
        .collect();
    Ok(Json(ListSandboxesResponse::new(
        sandboxes,
        page.total,
        filter.page,
        filter.per_page,
        shown < page.total,
    )))
}

/// Details of one sandbox, with live usage (CPU, memory, network, pids) of a
/// running one and the size of its volume.
#[utoipa::path(get, path = "/api/v1/sandbox/{id}", tag = "sandboxes",
    params(("id" = String, Path, description = "sandbox id")),
    responses((status = 200, body = SandboxResponse), AccessErrors))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn get(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
) -> ApiResult<Json<SandboxResponse>> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    let mut details = SandboxResponse::from_record(&sb, Utc::now());
    state.svc.fill_usage(&sb, &mut details).await;
    if details.volume.size_bytes.is_none() {
        super::volumes::fill_volume_size(&state, &mut details).await;
    }
    details.origin = state.svc.sandbox_origin(&caller.scope, &sb).await;
    if prime::wants_argv_start_command(&headers) {
        details = details.with_argv_start_command();
    }
    Ok(Json(details))
}

/// CPU and memory of a sandbox over the last five minutes, oldest first,
/// as the server measured them for its details: about one sample a second
/// while someone reads its details (a details request starts the
/// measuring, which goes on for a minute after the last one). Empty when
/// nobody did lately or it is not running. Kept in the server's memory: a
/// restart starts it afresh.
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/usage/history", tag = "sandboxes",
    params(("id" = String, Path, description = "sandbox id")),
    responses((status = 200, body = UsageHistoryResponse), AccessErrors))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn usage_history(
    AuthedId { state, caller, id }: AuthedId,
) -> ApiResult<Json<UsageHistoryResponse>> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    Ok(Json(UsageHistoryResponse {
        samples: state.svc.usage().history(&sb.id),
    }))
}

/// Start a sandbox (idempotent).
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/start", tag = "sandboxes",
    params(("id" = String, Path, description = "sandbox id")),
    responses((status = 200, body = SandboxResponse), AccessErrors, (status = 409, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn start(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
) -> ApiResult<Json<SandboxResponse>> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    let sb = lifecycle::start(&state.svc, sb).await?;
    Ok(respond(&sb, &headers))
}

/// Stop a sandbox: SIGTERM, then SIGKILL after `timeout` seconds (default 30).
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/stop", tag = "sandboxes",
    params(("id" = String, Path, description = "sandbox id"),
           ("timeout" = Option<u64>, Query, description = "seconds between SIGTERM and SIGKILL (default 30)")),
    responses((status = 200, body = SandboxResponse), AccessErrors))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn stop(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<SandboxResponse>> {
    let mut grace = state.svc.config().stop_grace;
    for (k, v) in query_pairs(raw.as_deref()) {
        match k.as_str() {
            "timeout" => {
                let max = state.svc.config().max_stop_grace.as_secs();
                let secs = v.parse::<u64>().ok().filter(|s| *s <= max).ok_or_else(|| {
                    ApiError::field("timeout", format!("must be whole seconds from 0 to {max}"))
                })?;
                grace = Duration::from_secs(secs);
            }
            other => return Err(ApiError::field(other, "unknown query parameter")),
        }
    }
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    let sb = lifecycle::stop(&state.svc, sb, grace).await?;
    Ok(respond(&sb, &headers))
}

/// Pause a running sandbox: every process is frozen in place (the cgroup
/// freezer) with its memory, open files and connections, and uses no CPU;
/// status `PAUSED`. Its memory stays allocated on the host. Commands,
/// terminals, file calls, code cells and its ports answer 409
/// `sandbox_paused` until it is resumed, or resume it first when its
/// `lifecycle.autoResume` is set. 409 when it is not running.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/pause", tag = "sandboxes",
    params(("id" = String, Path, description = "sandbox id")),
    responses((status = 200, body = SandboxResponse), AccessErrors,
              (status = 409, description = "The sandbox is not running (or is paused already)", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn pause(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
) -> ApiResult<Json<SandboxResponse>> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    let sb = stockade_service::pause::pause(&state.svc, sb).await?;
    Ok(respond(&sb, &headers))
}

/// Resume a paused sandbox: its processes go on where they were, and a new
/// session (its timeout) starts. 409 when it is not paused.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/resume", tag = "sandboxes",
    params(("id" = String, Path, description = "sandbox id")),
    responses((status = 200, body = SandboxResponse), AccessErrors,
              (status = 409, description = "The sandbox is not paused", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn resume(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
) -> ApiResult<Json<SandboxResponse>> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    let sb = stockade_service::pause::resume(&state.svc, sb).await?;
    Ok(respond(&sb, &headers))
}

/// `preserveVolume` and `sync` of a delete.
fn parse_preserve(raw: Option<&str>) -> ApiResult<(bool, bool)> {
    let (mut preserve, mut sync) = (false, false);
    for (k, v) in query_pairs(raw) {
        match k.as_str() {
            "preserveVolume" | "preserve_volume" => preserve = parse_bool(&v, "preserveVolume")?,
            "sync" => sync = parse_bool(&v, "sync")?,
            other => return Err(ApiError::field(other, "unknown query parameter")),
        }
    }
    Ok((preserve, sync))
}

/// Destroy a sandbox. `preserveVolume=true` keeps its `/workspace` volume;
/// `sync=true` first uploads `/workspace` to the object store and records it
/// in `metadata.s3_sync` (if that fails, nothing is deleted).
#[utoipa::path(delete, path = "/api/v1/sandbox/{id}", tag = "sandboxes",
    params(("id" = String, Path, description = "sandbox id"),
           ("preserveVolume" = Option<bool>, Query, description = "keep the volume (default false)"),
           ("sync" = Option<bool>, Query, description = "upload /workspace to the object store first (default false)")),
    responses((status = 200, description = "Terminated", body = SandboxResponse), AccessErrors,
              (status = 409, description = "sync=true but there is no /workspace to sync", body = ErrorBody),
              (status = 502, description = "sync=true and the object store failed; nothing was deleted", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn destroy(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<SandboxResponse>> {
    let (preserve, sync) = parse_preserve(raw.as_deref())?;
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    // Owned lookup → sync → runtime terminate → TERMINATED.
    let sb = lifecycle::destroy_with(&state.svc, sb, preserve, sync).await?;
    Ok(respond(&sb, &headers))
}

/// Destroy several sandboxes, by ids or by labels (ALL must match).
#[utoipa::path(delete, path = "/api/v1/sandbox/bulk", tag = "sandboxes",
    request_body = BulkDeleteRequest,
    responses((status = 200, description = "Per-sandbox results", body = BulkDeleteResponse), BadRequest))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn bulk_delete(
    Authed { state, caller }: Authed,
    ApiJson(req): ApiJson<BulkDeleteRequest>,
) -> ApiResult<Json<BulkDeleteResponse>> {
    const MAX: usize = 1000;
    if req.ids.is_empty() && req.labels.is_empty() {
        return Err(ApiError::field(
            "ids",
            "give sandbox ids or labels to delete",
        ));
    }
    if req.ids.len() > MAX {
        return Err(ApiError::field(
            "ids",
            format!("at most {MAX} ids per request"),
        ));
    }
    let targets = state
        .svc
        .bulk_targets(
            &caller.scope,
            BulkSelection {
                ids: &req.ids,
                ids_field: "ids",
                labels: &req.labels,
                team: None,
                max_by_labels: MAX,
                live_only: false,
            },
        )
        .await?;
    let results = lifecycle::destroy_many(&state.svc, targets, req.preserve_volume)
        .await
        .into_iter()
        .map(|o| match o.result {
            Ok(_) => BulkDeleteResult {
                id: o.id,
                deleted: true,
                error: None,
            },
            Err(e) => BulkDeleteResult {
                id: o.id,
                deleted: false,
                error: Some(ApiError::from(e).detail()),
            },
        })
        .collect();
    Ok(Json(BulkDeleteResponse { results }))
}
