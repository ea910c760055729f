//! `/api/v1/…snapshots`, `/sandbox/{id}/fork` and `/uploads`: snapshots,
//! forks and uploaded archives for create sources.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::Utc;
use futures_util::StreamExt;
use stockade_api::{
    CreateSandboxRequest, CreateSnapshotRequest, ErrorBody, ForkSandboxRequest,
    ListSnapshotsResponse, SandboxResponse, SandboxSource, SnapshotResponse, UploadResponse,
};
use stockade_core::{Snapshot, SnapshotKind};
use tokio::io::AsyncWriteExt;
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, Authed, AuthedId};
use crate::routes::apidoc::{AccessErrors, BadRequest};
use crate::AppState;
use stockade_service::sandbox::request::NewSandbox;
use stockade_service::ServiceError;
use stockade_service::{lifecycle, snapshots, sources};

/// The routes of this module, relative to `/api/v1`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/sandbox/{id}/snapshots",
            post(create_snapshot).get(list_sandbox_snapshots),
        )
        .route("/sandbox/{id}/fork", post(fork))
        .route("/snapshots", get(list_snapshots))
        .route("/snapshots/{id}", get(get_snapshot).delete(delete_snapshot))
        .route("/uploads", post(upload))
}

#[derive(OpenApi)]
#[openapi(
    paths(create_snapshot, list_sandbox_snapshots, list_snapshots, get_snapshot, delete_snapshot, fork, upload),
    components(schemas(
        CreateSnapshotRequest, SnapshotResponse, ListSnapshotsResponse, ForkSandboxRequest,
        UploadResponse, SandboxSource,
    )),
    tags((name = "snapshots", description = "Snapshots, forks and uploaded sources"))
)]
pub struct SnapshotsApi;

/// Snapshot a sandbox: its root-filesystem changes (as an image) and its
/// `/workspace` (as a tar in the object store). The container is paused for
/// the moment Docker commits it; a stopped sandbox can be snapshotted too.
/// The account's quota of snapshots (`snapshots`, `snapshotGB`) holds: past
/// the count nothing is made; past the bytes, once they are measured,
/// everything made is removed again.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/snapshots", tag = "snapshots",
    params(("id" = String, Path, description = "sandbox id")),
    request_body = CreateSnapshotRequest,
    responses(
        (status = 201, description = "Captured, READY", body = SnapshotResponse),
        BadRequest,
        (status = 403, description = "Another account's sandbox, or past the account's quota of snapshots (`quota_exceeded`)", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "Terminated, still being created, or its container is gone", body = ErrorBody),
        (status = 502, description = "Docker or the object store failed; nothing was kept", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id, snapshot.id), err(level = "debug", Display))]
pub async fn create_snapshot(
    AuthedId { state, caller, id }: AuthedId,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<SnapshotResponse>)> {
    // The body is optional: none (or `{}`) names the snapshot by its id.
    let req: CreateSnapshotRequest = if body.iter().all(u8::is_ascii_whitespace) {
        CreateSnapshotRequest::default()
    } else {
        crate::extract::parse_json(&body)?
    };
    let name = req
        .name
        .as_deref()
        .map(|n| Snapshot::parse_name(n, "name"))
        .transpose()?;
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    let snapshot =
        snapshots::capture(&state.svc, &caller.scope, &sb, name, SnapshotKind::User).await?;
    tracing::Span::current().record("snapshot.id", snapshot.id.as_str());
    Ok((StatusCode::CREATED, Json(SnapshotResponse::from(&snapshot))))
}

/// The caller's snapshots of one sandbox, newest first.
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/snapshots", tag = "snapshots",
    params(("id" = String, Path, description = "sandbox id")),
    responses((status = 200, body = ListSnapshotsResponse), AccessErrors))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn list_sandbox_snapshots(
    AuthedId { state, caller, id }: AuthedId,
) -> ApiResult<Json<ListSnapshotsResponse>> {
    let list = state.svc.snapshots_of(&caller.scope, &id).await?;
    Ok(Json(ListSnapshotsResponse {
        snapshots: list.iter().map(SnapshotResponse::from).collect(),
    }))
}

/// The caller's snapshots, newest first (at most 1000).
#[utoipa::path(get, path = "/api/v1/snapshots", tag = "snapshots",
    responses((status = 200, body = ListSnapshotsResponse)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list_snapshots(
    Authed { state, caller }: Authed,
) -> ApiResult<Json<ListSnapshotsResponse>> {
    let list = state.svc.list_snapshots(&caller.scope, None).await?;
    Ok(Json(ListSnapshotsResponse {
        snapshots: list.iter().map(SnapshotResponse::from).collect(),
    }))
}

/// One snapshot (404 unknown or deleted, 403 another account's).
#[utoipa::path(get, path = "/api/v1/snapshots/{id}", tag = "snapshots",
    params(("id" = String, Path, description = "snapshot id")),
    responses((status = 200, body = SnapshotResponse), AccessErrors))]
#[instrument(skip_all, fields(account.id = %caller.account.id, snapshot.id = %id), err(level = "debug", Display))]
pub async fn get_snapshot(
    AuthedId { state, caller, id }: AuthedId,
) -> ApiResult<Json<SnapshotResponse>> {
    let snapshot = snapshots::load(&state.svc, &caller.scope, &id, "snapshot_id").await?;
    Ok(Json(SnapshotResponse::from(&snapshot)))
}

/// Delete a snapshot: its archive at once, its image as soon as no sandbox
/// made from it is left (status DELETING until then, then DELETED).
#[utoipa::path(delete, path = "/api/v1/snapshots/{id}", tag = "snapshots",
    params(("id" = String, Path, description = "snapshot id")),
    responses((status = 200, description = "Deleted", body = SnapshotResponse), AccessErrors,
              (status = 409, description = "Still being captured", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id, snapshot.id = %id), err(level = "debug", Display))]
pub async fn delete_snapshot(
    AuthedId { state, caller, id }: AuthedId,
) -> ApiResult<Json<SnapshotResponse>> {
    let snapshot = snapshots::load(&state.svc, &caller.scope, &id, "snapshot_id").await?;
    let snapshot = snapshots::delete(&state.svc, snapshot).await?;
    Ok(Json(SnapshotResponse::from(&snapshot)))
}

/// Fork a sandbox: a new sandbox with the source's root-filesystem changes,
/// its `/workspace` and its settings (resources, env, labels, tags, ports,
/// start command, timeout). The source keeps running, unchanged; later
/// writes in either do not show in the other. Same as creating with
/// `source: {"type":"sandbox","sandboxId":…}`.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/fork", tag = "snapshots",
    params(("id" = String, Path, description = "the sandbox to fork")),
    request_body = ForkSandboxRequest,
    responses(
        (status = 201, description = "The fork, RUNNING", body = SandboxResponse),
        BadRequest, AccessErrors,
        (status = 409, description = "Name taken, or the source is terminated or has no container", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id, fork.id), err(level = "debug", Display))]
pub async fn fork(
    AuthedId { state, caller, id }: AuthedId,
    ApiJson(req): ApiJson<ForkSandboxRequest>,
) -> ApiResult<(StatusCode, Json<SandboxResponse>)> {
    let from = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    snapshots::ensure_capturable(&from)?;
    let create = CreateSandboxRequest {
        name: req.name,
        source: Some(SandboxSource::Sandbox {
            sandbox_id: from.id.to_string(),
        }),
        ..Default::default()
    };
    let created = state
        .svc
        .create_sandbox(&caller.scope, NewSandbox::from(&create), None)
        .await?;
    let sb = created.sandbox;
    tracing::Span::current().record("fork.id", sb.id.as_str());
    Ok((
        StatusCode::CREATED,
        Json(SandboxResponse::from_record(&sb, Utc::now())),
    ))
}

/// Upload a tar or tar.gz archive (the raw request body) for one later
/// create with `source: {"type":"upload","uploadId":…}`. The archive is
/// checked now, its unpacked size held to the server's unpack ceiling
/// (`--max-unpacked-mb`); it is kept until used or until it expires (24 h
/// by default), and only this account can use it. The account's quota of
/// pending uploads (`uploads`, `uploadGB`) holds too.
#[utoipa::path(post, path = "/api/v1/uploads", tag = "snapshots",
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "a tar or tar.gz archive"),
    responses(
        (status = 201, body = UploadResponse),
        (status = 400, description = "Not a usable tar or tar.gz archive", body = ErrorBody),
        (status = 403, description = "The account holds as many pending uploads as its quota allows (`quota_exceeded`)", body = ErrorBody),
        (status = 413, description = "Larger than the server's limit, as sent or unpacked, or than the bytes of uploads the account's quota has left", body = ErrorBody),
        (status = 502, description = "The object store failed", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, upload.id), err(level = "debug", Display))]
pub async fn upload(
    Authed { state, caller }: Authed,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<UploadResponse>)> {
    let limits = &state.svc.config().sources;
    let max = limits.max_archive_bytes;
    let too_large = || {
        ServiceError::PayloadTooLarge(format!(
            "The archive is larger than this server's limit of {max} bytes"
        ))
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large().into());
    }
    // The account's quota: refused at once when it holds its count of
    // uploads; the bytes it has left cut the body off like the ceiling.
    let admission = sources::admit_upload(&state.svc, &caller.account.id).await?;
    let left = admission.bytes_left();
    if let (Some(n), Some(left)) = (declared, left) {
        if n > left {
            return Err(admission.too_large(n).into());
        }
    }
    let tmp = tempfile::tempdir()
        .map_err(|e| ServiceError::Internal(format!("cannot create a temporary directory: {e}")))?;
    let path = tmp.path().join("upload");
    let io_err =
        |e: std::io::Error| ServiceError::Internal(format!("cannot write a temporary file: {e}"));
    let mut file = tokio::fs::File::create(&path).await.map_err(io_err)?;
    let mut stream = body.into_data_stream();
    let mut total: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::field("body", format!("could not read the request body: {e}"))
        })?;
        total += chunk.len() as u64;
        if total > max {
            return Err(too_large().into());
        }
        if left.is_some_and(|left| total > left) {
            return Err(admission.too_large(total).into());
        }
        file.write_all(&chunk).await.map_err(io_err)?;
    }
    file.flush().await.map_err(io_err)?;
    drop(file);
    // The unpack ceiling, counted while the archive is read.
    let ceiling = state.svc.config().max_unpacked_bytes;
    let summary = sources::check_archive_file(&path, ceiling, sources::Quote::Names)
        .await
        .map_err(|e| match e {
            sources::ArchiveError::TooLarge { limit } => ApiError::from(
                stockade_service::files::unpacked_too_large("The archive", limit),
            ),
            sources::ArchiveError::Invalid(m) => {
                ApiError::field("body", format!("not a usable tar or tar.gz archive: {m}"))
            }
        })?;

    let file = tokio::fs::File::open(&path).await.map_err(io_err)?;
    let data = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
    let (id, bytes) = sources::store_upload(&state.svc, &admission, Box::pin(data)).await?;
    tracing::Span::current().record("upload.id", id.as_str());
    tracing::info!(upload.id = %id, bytes, entries = summary.entries, "archive uploaded");
    let ttl = chrono::Duration::from_std(limits.upload_ttl).unwrap_or(chrono::Duration::days(1));
    Ok((
        StatusCode::CREATED,
        Json(UploadResponse {
            upload_id: id.to_string(),
            bytes,
            expires_at: Utc::now() + ttl,
        }),
    ))
}
