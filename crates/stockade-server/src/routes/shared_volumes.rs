//! `/api/v1/shared-volumes…`: named volumes of an account that its
//! sandboxes mount (`volumeMounts` on create), and their files, read and
//! written without a sandbox.

use axum::body::Body;
use axum::extract::{Path, RawQuery};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::TryStreamExt;
use stockade_agent::client::{VolumeAttrs, VolumeEntry, VolumeEntryType};
use stockade_api::shared_volumes::{
    CreateSharedVolumeRequest, SharedVolumeList, SharedVolumeResponse, SharedVolumeUsage,
    VolumeEntryResponse, VolumeListing, VolumeMountView, VolumeRenameRequest,
};
use stockade_api::ErrorBody;
use stockade_service::content::shared_volumes::{NewSharedVolume, VolumeView};
use stockade_service::files::BodyStream;
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::{ApiError, ApiResult};
use crate::extract::{query_pairs, ApiJson, Authed};
use crate::routes::apidoc::BadRequest;
use crate::AppState;

/// The routes of this module, relative to `/api/v1`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/shared-volumes", get(list).post(create))
        .route("/shared-volumes/{volume}", get(get_one).delete(delete))
        .route("/shared-volumes/{volume}/usage", get(usage))
        .route("/shared-volumes/{volume}/move", post(move_volume))
        .route(
            "/shared-volumes/{volume}/files",
            get(list_files).delete(remove_file),
        )
        .route("/shared-volumes/{volume}/files/stat", get(stat_file))
        .route(
            "/shared-volumes/{volume}/files/content",
            get(read_file).put(write_file),
        )
        .route("/shared-volumes/{volume}/files/mkdir", post(make_dir))
        .route("/shared-volumes/{volume}/files/rename", post(rename))
}

#[derive(OpenApi)]
#[openapi(
    paths(list, create, get_one, delete, usage, move_volume, list_files, stat_file, read_file, write_file, make_dir, rename, remove_file),
    components(schemas(
        CreateSharedVolumeRequest, SharedVolumeResponse, SharedVolumeList, VolumeMountView, SharedVolumeUsage,
        VolumeEntryResponse, VolumeListing, VolumeRenameRequest,
    )),
    tags((name = "shared-volumes", description = "Named volumes that sandboxes share, and their files"))
)]
pub struct SharedVolumesApi;

pub fn volume_view(v: &VolumeView) -> SharedVolumeResponse {
    SharedVolumeResponse {
        id: v.volume.id.to_string(),
        name: v.volume.name.clone(),
        server: v.volume.server.clone(),
        size_gb: v.volume.size_gb,
        labels: v.volume.labels.clone(),
        status: v.volume.status.to_string(),
        created_at: v.volume.created_at,
        mounts: v
            .mounts
            .iter()
            .map(|m| VolumeMountView {
                sandbox_id: m.sandbox_id.to_string(),
                path: m.path.clone(),
                read_only: m.read_only,
            })
            .collect(),
    }
}

/// An entry of a volume as the API shows it (E2B's volume API shows it the
/// same way).
pub fn entry_view(e: VolumeEntry) -> VolumeEntryResponse {
    VolumeEntryResponse {
        name: e.name,
        path: e.path,
        kind: match e.kind {
            VolumeEntryType::File => "file",
            VolumeEntryType::Directory => "directory",
            VolumeEntryType::Symlink => "symlink",
            VolumeEntryType::Unknown => "unknown",
        }
        .to_owned(),
        size: e.size,
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        atime: e.atime,
        mtime: e.mtime,
        ctime: e.ctime,
        target: e.target,
    }
}

/// The query's parameters.
pub struct Params(Vec<(String, String)>);

impl Params {
    pub fn of(raw: Option<&str>) -> Self {
        Self(query_pairs(raw))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The `path` parameter (a path of the volume; `/` when `default_root`
    /// and absent).
    pub fn path(&self, default_root: bool) -> ApiResult<String> {
        match self.get("path") {
            Some(p) if !p.is_empty() => Ok(p.to_owned()),
            _ if default_root => Ok("/".to_owned()),
            _ => Err(ApiError::field("path", "a path in the volume is required")),
        }
    }

    pub fn flag(&self, name: &str) -> ApiResult<bool> {
        match self.get(name) {
            None | Some("") => Ok(false),
            Some("true" | "1") => Ok(true),
            Some("false" | "0") => Ok(false),
            Some(_) => Err(ApiError::field(name, "must be true or false")),
        }
    }

    pub fn number(&self, name: &str, max: u32) -> ApiResult<Option<u32>> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= max)
                .map(Some)
                .ok_or_else(|| {
                    ApiError::field(name, format!("must be a whole number from 0 to {max}"))
                }),
        }
    }

    /// `uid`, `gid` and `mode` (permission bits, at most 0o7777).
    pub fn attrs(&self) -> ApiResult<VolumeAttrs> {
        Ok(VolumeAttrs {
            uid: self.number("uid", u32::MAX - 1)?,
            gid: self.number("gid", u32::MAX - 1)?,
            mode: self.number("mode", 0o7777)?,
        })
    }

    /// `depth` of a listing: 1 by default, at most 32.
    pub fn depth(&self) -> ApiResult<u32> {
        match self.number("depth", 32)? {
            None => Ok(1),
            Some(0) => Err(ApiError::field("depth", "must be from 1 to 32")),
            Some(d) => Ok(d),
        }
    }
}

/// A file's bytes as a response.
pub fn file_response(size: Option<u64>, body: BodyStream) -> Response {
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Some(size) = size {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    }
    response
}

/// A request body as a stream of chunks.
pub fn body_stream(body: Body) -> BodyStream {
    Box::pin(body.into_data_stream().map_err(std::io::Error::other))
}

/// The caller's volumes, newest first, each with the sandboxes that mount it.
#[utoipa::path(get, path = "/api/v1/shared-volumes", tag = "shared-volumes",
    responses((status = 200, body = SharedVolumeList)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list(Authed { state, caller }: Authed) -> ApiResult<Json<SharedVolumeList>> {
    let volumes: Vec<SharedVolumeResponse> = state
        .svc
        .shared_volumes(&caller.scope)
        .await?
        .iter()
        .map(volume_view)
        .collect();
    Ok(Json(SharedVolumeList {
        total: volumes.len(),
        volumes,
    }))
}

/// Create a volume on this server's Docker host or the one named.
#[utoipa::path(post, path = "/api/v1/shared-volumes", tag = "shared-volumes",
    request_body = CreateSharedVolumeRequest,
    responses(
        (status = 201, body = SharedVolumeResponse),
        BadRequest,
        (status = 403, description = "Past the account's quota of volumes (`volumes`, or `volumeGB` with this one's sizeGB)", body = ErrorBody),
        (status = 409, description = "The account has a volume of that name", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn create(
    Authed { state, caller }: Authed,
    ApiJson(req): ApiJson<CreateSharedVolumeRequest>,
) -> ApiResult<(StatusCode, Json<SharedVolumeResponse>)> {
    let view = state
        .svc
        .create_shared_volume(
            &caller.scope,
            NewSharedVolume {
                name: Some(req.name),
                size_gb: req.size_gb,
                labels: req.labels,
                server: req.server,
            },
        )
        .await?;
    Ok((StatusCode::CREATED, Json(volume_view(&view))))
}

/// One volume, by id or name.
#[utoipa::path(get, path = "/api/v1/shared-volumes/{volume}", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name")),
    responses((status = 200, body = SharedVolumeResponse), (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn get_one(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
) -> ApiResult<Json<SharedVolumeResponse>> {
    let view = state.svc.shared_volume(&caller.scope, &volume).await?;
    Ok(Json(volume_view(&view)))
}

/// What a volume's files take on disk, and whether its host holds it to
/// its `sizeGB` (and how, or why not).
#[utoipa::path(get, path = "/api/v1/shared-volumes/{volume}/usage", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name")),
    responses((status = 200, body = SharedVolumeUsage), (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn usage(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
) -> ApiResult<Json<SharedVolumeUsage>> {
    let volume = state.svc.load_shared_volume(&caller.scope, &volume).await?;
    let u = state.svc.volume_usage(&volume).await?;
    Ok(Json(SharedVolumeUsage {
        used_bytes: u.used_bytes,
        size_gb: u.size_gb,
        size_enforced: u.enforced,
        enforcement: u.enforcement,
    }))
}

/// Move a volume no sandbox mounts to another Docker host (`server`): its
/// files go through the object store, and its sandboxes are placed there
/// from then on. Refused while a sandbox mounts it.
#[utoipa::path(post, path = "/api/v1/shared-volumes/{volume}/move", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name"),
           ("server" = String, Query, description = "the Docker host to move it to")),
    responses(
        (status = 200, description = "Moved", body = SharedVolumeResponse),
        BadRequest,
        (status = 404, body = ErrorBody),
        (status = 409, description = "Mounted by sandboxes (named), or the host takes nothing now", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn move_volume(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<SharedVolumeResponse>> {
    let params = Params::of(raw.as_deref());
    let server = params
        .get("server")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::field("server", "the Docker host to move the volume to"))?
        .to_owned();
    let view = state
        .svc
        .move_shared_volume(&caller.scope, &volume, &server)
        .await?;
    Ok(Json(volume_view(&view)))
}

/// Delete a volume and its files; refused while a sandbox mounts it.
#[utoipa::path(delete, path = "/api/v1/shared-volumes/{volume}", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, body = ErrorBody),
        (status = 409, description = "Mounted by sandboxes (named)", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn delete(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
) -> ApiResult<StatusCode> {
    state
        .svc
        .delete_shared_volume(&caller.scope, &volume)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// List a directory of the volume (`depth` levels, default 1).
#[utoipa::path(get, path = "/api/v1/shared-volumes/{volume}/files", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name"),
           ("path" = Option<String>, Query, description = "a directory of the volume (default /)"),
           ("depth" = Option<u32>, Query, description = "levels, 1 to 32")),
    responses((status = 200, body = VolumeListing), BadRequest, (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list_files(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<VolumeListing>> {
    let params = Params::of(raw.as_deref());
    let path = params.path(true)?;
    let depth = params.depth()?;
    let volume = state.svc.load_shared_volume(&caller.scope, &volume).await?;
    let entries = state
        .svc
        .volume_files(&volume)
        .await?
        .list(&path, depth)
        .await?;
    Ok(Json(VolumeListing {
        path,
        entries: entries.into_iter().map(entry_view).collect(),
    }))
}

/// Metadata of one entry (a symlink is reported, never followed).
#[utoipa::path(get, path = "/api/v1/shared-volumes/{volume}/files/stat", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name"),
           ("path" = String, Query, description = "a path of the volume")),
    responses((status = 200, body = VolumeEntryResponse), BadRequest, (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn stat_file(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<VolumeEntryResponse>> {
    let path = Params::of(raw.as_deref()).path(true)?;
    let volume = state.svc.load_shared_volume(&caller.scope, &volume).await?;
    let entry = state.svc.volume_files(&volume).await?.stat(&path).await?;
    Ok(Json(entry_view(entry)))
}

/// A file's bytes.
#[utoipa::path(get, path = "/api/v1/shared-volumes/{volume}/files/content", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name"),
           ("path" = String, Query, description = "a file of the volume")),
    responses(
        (status = 200, description = "The file's bytes", content((stockade_api::files::Binary = "application/octet-stream"))),
        BadRequest, (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn read_file(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let path = Params::of(raw.as_deref()).path(false)?;
    let volume = state.svc.load_shared_volume(&caller.scope, &volume).await?;
    let (size, body) = state
        .svc
        .volume_files(&volume)
        .await?
        .read_stream(&path)
        .await?;
    Ok(file_response(size, body))
}

/// Write a file from the raw body, replacing one in its place whole (a
/// reader never sees half of it); missing directories are made unless
/// `parents=false`.
#[utoipa::path(put, path = "/api/v1/shared-volumes/{volume}/files/content", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name"),
           ("path" = String, Query, description = "a file of the volume"),
           ("parents" = Option<bool>, Query, description = "make missing parent directories (default true)"),
           ("mode" = Option<u32>, Query, description = "permission bits (default 420, i.e. 0644)"),
           ("uid" = Option<u32>, Query), ("gid" = Option<u32>, Query)),
    request_body(content = stockade_api::files::Binary, content_type = "application/octet-stream"),
    responses(
        (status = 201, body = VolumeEntryResponse), BadRequest, (status = 404, body = ErrorBody),
        (status = 413, description = "Over the unpack ceiling", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn write_file(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
    RawQuery(raw): RawQuery,
    body: Body,
) -> ApiResult<(StatusCode, Json<VolumeEntryResponse>)> {
    let params = Params::of(raw.as_deref());
    let path = params.path(false)?;
    let parents = params.get("parents").is_none() || params.flag("parents")?;
    let attrs = params.attrs()?;
    let volume = state.svc.load_shared_volume(&caller.scope, &volume).await?;
    let entry = state
        .svc
        .volume_files(&volume)
        .await?
        .write_body(&path, parents, attrs, body_stream(body))
        .await?;
    Ok((StatusCode::CREATED, Json(entry_view(entry))))
}

/// Make a directory (`parents`: with its missing parents, and no error if
/// it exists).
#[utoipa::path(post, path = "/api/v1/shared-volumes/{volume}/files/mkdir", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name"),
           ("path" = String, Query), ("parents" = Option<bool>, Query),
           ("mode" = Option<u32>, Query), ("uid" = Option<u32>, Query), ("gid" = Option<u32>, Query)),
    responses(
        (status = 201, body = VolumeEntryResponse), BadRequest, (status = 404, body = ErrorBody),
        (status = 409, description = "It exists", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn make_dir(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<(StatusCode, Json<VolumeEntryResponse>)> {
    let params = Params::of(raw.as_deref());
    let path = params.path(false)?;
    let parents = params.flag("parents")?;
    let attrs = params.attrs()?;
    let volume = state.svc.load_shared_volume(&caller.scope, &volume).await?;
    let entry = state
        .svc
        .volume_files(&volume)
        .await?
        .make_dir(&path, parents, attrs)
        .await?;
    Ok((StatusCode::CREATED, Json(entry_view(entry))))
}

/// Rename or move an entry within the volume.
#[utoipa::path(post, path = "/api/v1/shared-volumes/{volume}/files/rename", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name")),
    request_body = VolumeRenameRequest,
    responses((status = 200, body = VolumeEntryResponse), BadRequest, (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn rename(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
    ApiJson(req): ApiJson<VolumeRenameRequest>,
) -> ApiResult<Json<VolumeEntryResponse>> {
    let volume = state.svc.load_shared_volume(&caller.scope, &volume).await?;
    let entry = state
        .svc
        .volume_files(&volume)
        .await?
        .rename(&req.from, &req.to)
        .await?;
    Ok(Json(entry_view(entry)))
}

/// Remove a file, or a directory with everything in it.
#[utoipa::path(delete, path = "/api/v1/shared-volumes/{volume}/files", tag = "shared-volumes",
    params(("volume" = String, Path, description = "the volume's id or name"),
           ("path" = String, Query, description = "a path of the volume, not /")),
    responses((status = 204, description = "Removed"), BadRequest, (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn remove_file(
    Authed { state, caller }: Authed,
    Path(volume): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let path = Params::of(raw.as_deref()).path(false)?;
    let volume = state.svc.load_shared_volume(&caller.scope, &volume).await?;
    state.svc.volume_files(&volume).await?.remove(&path).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
