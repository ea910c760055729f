//! E2B's volumes under `/e2b`: `/volumes` (create 201, list, get with the
//! content token, delete 204), authenticated by `X-API-Key`, and the content
//! API `/volumecontent/{id}/{path,dir,file}` that the SDK reaches at
//! `E2B_VOLUME_API_URL`, authenticated by the volume's own token
//! (`Authorization: Bearer`): valid for that volume only, for as long as it
//! lives, across restarts.

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use stockade_agent::client::VolumeAttrs;
use stockade_api::e2b::{E2bNewVolume, E2bVolume, E2bVolumeAndToken, E2bVolumeAttrs};
use stockade_api::shared_volumes::VolumeEntryResponse;
use stockade_core::SharedVolume;
use stockade_service::content::shared_volumes::NewSharedVolume;
use stockade_service::ServiceError;

use super::e2b::{E2bApiError, E2bCaller};
use crate::error::ApiError;
use crate::extract::parse_json;
use crate::routes::shared_volumes::{body_stream, entry_view, file_response, Params};
use crate::AppState;

type E2bResult<T> = Result<T, E2bApiError>;

/// The routes, relative to `/e2b`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/volumes", post(create).get(list))
        .route("/volumes/{id}", get(get_one).delete(remove))
        .route(
            "/volumecontent/{id}/path",
            get(stat).delete(remove_path).patch(set_attrs),
        )
        .route("/volumecontent/{id}/dir", get(list_dir).post(make_dir))
        .route("/volumecontent/{id}/file", get(read_file).put(write_file))
}

fn with_token(state: &AppState, v: &SharedVolume) -> E2bVolumeAndToken {
    E2bVolumeAndToken {
        volume_id: v.id.to_string(),
        name: v.name.clone(),
        token: state.svc.volume_content_token(v),
    }
}

async fn create(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    body: Bytes,
) -> E2bResult<(StatusCode, Json<E2bVolumeAndToken>)> {
    let req: E2bNewVolume = parse_json(&body)?;
    let view = state
        .svc
        .create_shared_volume(
            &caller.scope,
            NewSharedVolume {
                name: Some(req.name),
                ..Default::default()
            },
        )
        .await?;
    Ok((StatusCode::CREATED, Json(with_token(&state, &view.volume))))
}

async fn list(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
) -> E2bResult<Json<Vec<E2bVolume>>> {
    let views = state.svc.shared_volumes(&caller.scope).await?;
    Ok(Json(
        views
            .iter()
            .map(|v| E2bVolume {
                volume_id: v.volume.id.to_string(),
                name: v.volume.name.clone(),
            })
            .collect(),
    ))
}

async fn get_one(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path(id): Path<String>,
) -> E2bResult<Json<E2bVolumeAndToken>> {
    let volume = state.svc.load_shared_volume(&caller.scope, &id).await?;
    Ok(Json(with_token(&state, &volume)))
}

async fn remove(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path(id): Path<String>,
) -> E2bResult<StatusCode> {
    state.svc.delete_shared_volume(&caller.scope, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The volume a content request's bearer token opens: 401 without a
/// token, 403 with another volume's, 404 for a volume that is gone.
async fn volume_of(state: &AppState, headers: &HeaderMap, id: &str) -> E2bResult<SharedVolume> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::Unauthorized("the volume's token is required as a bearer token".into())
        })?;
    Ok(state.svc.volume_of_content_token(id, token).await?)
}

async fn stat(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<VolumeEntryResponse>> {
    let path = Params::of(raw.as_deref()).path(true)?;
    let volume = volume_of(&state, &headers, &id).await?;
    let entry = state.svc.volume_files(&volume).await?.stat(&path).await?;
    Ok(Json(entry_view(entry)))
}

async fn remove_path(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> E2bResult<StatusCode> {
    let path = Params::of(raw.as_deref()).path(false)?;
    let volume = volume_of(&state, &headers, &id).await?;
    state.svc.volume_files(&volume).await?.remove(&path).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_attrs(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> E2bResult<Json<VolumeEntryResponse>> {
    let path = Params::of(raw.as_deref()).path(false)?;
    let req: E2bVolumeAttrs = parse_json(&body)?;
    if req.mode.is_some_and(|m| m > 0o7777) {
        return Err(ApiError::field("mode", "permission bits, at most 0o7777").into());
    }
    let volume = volume_of(&state, &headers, &id).await?;
    let entry = state
        .svc
        .volume_files(&volume)
        .await?
        .set_attrs(
            &path,
            VolumeAttrs {
                uid: req.uid,
                gid: req.gid,
                mode: req.mode,
            },
        )
        .await?;
    Ok(Json(entry_view(entry)))
}

async fn list_dir(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<Vec<VolumeEntryResponse>>> {
    let params = Params::of(raw.as_deref());
    let path = params.path(true)?;
    let depth = params.depth()?;
    let volume = volume_of(&state, &headers, &id).await?;
    let entries = state
        .svc
        .volume_files(&volume)
        .await?
        .list(&path, depth)
        .await?;
    Ok(Json(entries.into_iter().map(entry_view).collect()))
}

async fn make_dir(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> E2bResult<(StatusCode, Json<VolumeEntryResponse>)> {
    let params = Params::of(raw.as_deref());
    let path = params.path(false)?;
    let force = params.flag("force")?;
    let attrs = params.attrs()?;
    let volume = volume_of(&state, &headers, &id).await?;
    let entry = state
        .svc
        .volume_files(&volume)
        .await?
        .make_dir(&path, force, attrs)
        .await?;
    Ok((StatusCode::CREATED, Json(entry_view(entry))))
}

async fn read_file(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> E2bResult<Response> {
    let path = Params::of(raw.as_deref()).path(false)?;
    let volume = volume_of(&state, &headers, &id).await?;
    let (size, body) = state
        .svc
        .volume_files(&volume)
        .await?
        .read_stream(&path)
        .await?;
    Ok(file_response(size, body))
}

/// Writes a file, making missing parents; with `force=false` an existing
/// file is a 409 instead of being replaced.
async fn write_file(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Body,
) -> E2bResult<Response> {
    let params = Params::of(raw.as_deref());
    let path = params.path(false)?;
    let keep_existing = params.get("force") == Some("false");
    let attrs = params.attrs()?;
    let volume = volume_of(&state, &headers, &id).await?;
    let mut files = state.svc.volume_files(&volume).await?;
    if keep_existing {
        match files.stat(&path).await {
            Ok(_) => {
                return Err(ServiceError::Conflict(format!(
                    "{path} exists in the volume (write with force to replace it)"
                ))
                .into())
            }
            Err(ServiceError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let entry = files
        .write_body(&path, true, attrs, body_stream(body))
        .await?;
    Ok((StatusCode::CREATED, Json(entry_view(entry))).into_response())
}
