//! `/api/v1/sandbox/{id}/files…`: read, write, list, stat and
//! delete files, and download/upload tar archives, anywhere in the sandbox
//! (relative paths are below `/workspace`). Docker resolves every path inside
//! the container, so neither `..` nor symlinks reach the host.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::RawQuery;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::TryStreamExt;
use stockade_api::{ArchiveUploadResponse, DirectoryListing, ErrorBody, FileEntry};
use stockade_core::{Sandbox, SandboxId, SandboxPath, SandboxStatus, ValidationErrors, VolumeName};
use stockade_runtime::{FileKind, FsError, FsResult, PathStat};
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::{ApiError, ApiResult};
use crate::extract::{query_pairs, AuthedId, Caller};
use crate::routes::apidoc::{AccessErrors, BadRequest};
use crate::AppState;
use stockade_service::files::{self, BodyStream, Opened, Want};
use stockade_service::lifecycle;
use stockade_service::pause;
use stockade_service::ServiceError;

/// The file routes, relative to `/api/v1`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sandbox/{id}/files", get(read).put(write).delete(delete))
        .route("/sandbox/{id}/files/stat", get(stat))
        .route(
            "/sandbox/{id}/files/archive",
            get(download).put(upload).post(upload),
        )
        .route("/sandbox/{id}/files/mkdir", axum::routing::post(mkdir))
        .route("/sandbox/{id}/files/move", axum::routing::post(move_path))
        .route("/sandbox/{id}/files/watch", get(watch))
}

#[derive(OpenApi)]
#[openapi(
    paths(read, stat, write, delete, download, upload, mkdir, move_path, watch),
    components(schemas(FileEntry, stockade_api::FileType, DirectoryListing, ArchiveUploadResponse, stockade_api::files::Binary, stockade_api::files::MoveRequest)),
    tags((name = "files", description = "Files inside a sandbox"))
)]
pub struct FilesApi;

/// The query of a file request.
#[derive(Debug, Default)]
struct FileQuery {
    path: Option<SandboxPath>,
    recursive: bool,
    mode: Option<u32>,
}

/// Parses `?path=&recursive=&mode=`, accepting only the `allowed` keys.
fn parse_query(raw: Option<&str>, allowed: &[&str]) -> ApiResult<FileQuery> {
    let mut q = FileQuery::default();
    let mut errs = ValidationErrors::default();
    for (k, v) in query_pairs(raw) {
        if !allowed.contains(&k.as_str()) {
            errs.push(k, "unknown query parameter");
            continue;
        }
        match k.as_str() {
            "path" => {
                if let Some(p) = errs.check(SandboxPath::parse_field(&v, "path")) {
                    q.path = Some(p);
                }
            }
            "recursive" => match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => q.recursive = true,
                "false" | "0" | "no" => q.recursive = false,
                _ => errs.push("recursive", format!("expected true or false, got '{v}'")),
            },
            "mode" => {
                let digits = v.strip_prefix("0o").unwrap_or(&v);
                match u32::from_str_radix(digits, 8) {
                    Ok(m) if !digits.is_empty() && m <= 0o7777 => q.mode = Some(m),
                    _ => errs.push(
                        "mode",
                        format!(
                            "expected octal permission bits from 0 to 7777 (e.g. 0644), got '{v}'"
                        ),
                    ),
                }
            }
            _ => {}
        }
    }
    errs.into_result()?;
    Ok(q)
}

fn required_path(q: &FileQuery) -> ApiResult<SandboxPath> {
    q.path
        .clone()
        .ok_or_else(|| ApiError::field("path", "is required"))
}

/// Loads a sandbox whose filesystem exists (not terminated, not being created).
async fn load_with_files(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Sandbox> {
    let sb = lifecycle::load(&state.svc, &caller.scope, id).await?;
    match sb.status {
        _ if sb.is_terminated() => Err(ServiceError::Terminated(format!(
            "Sandbox {} is terminated: its files are gone",
            sb.id
        ))
        .into()),
        SandboxStatus::Pending | SandboxStatus::Provisioning => {
            Err(ServiceError::Conflict(format!("Sandbox {} is still being created", sb.id)).into())
        }
        // Its files are read and written as a stopped sandbox's are.
        SandboxStatus::Paused if !sb.spec.lifecycle.auto_resume => Ok(sb),
        _ => Ok(pause::awake(&state.svc, sb).await?),
    }
}

/// The `path` of a request that takes no other parameter (`/workspace`
/// when it names none), and the sandbox, loaded once the query is checked.
async fn path_or_workspace(
    state: &AppState,
    caller: &Caller,
    id: &str,
    raw: Option<&str>,
) -> ApiResult<(SandboxPath, Sandbox)> {
    let q = parse_query(raw, &["path"])?;
    let path = q.path.unwrap_or_else(SandboxPath::workspace);
    Ok((path, load_with_files(state, caller, id).await?))
}

/// `lstat` of `path` in the sandbox (a symlink is reported as one), as the
/// runtime answers it.
async fn lstat(
    state: &AppState,
    sb: &Sandbox,
    path: &SandboxPath,
) -> ApiResult<FsResult<PathStat>> {
    Ok(state
        .svc
        .runtime_for(sb)
        .await?
        .stat_path(&sb.id, path)
        .await)
}

fn body_stream(body: Body) -> BodyStream {
    Box::pin(body.into_data_stream().map_err(std::io::Error::other))
}

/// The `Content-Length` of a request, if it sent one.
fn content_length(headers: &HeaderMap) -> ApiResult<Option<u64>> {
    match headers.get(header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| ApiError::field("Content-Length", "must be a whole number of bytes")),
    }
}

/// Refuses a body whose announced length is over the limit, before reading it
/// (what is sent anyway is drained in the background, so the client sees the 413).
fn check_announced(body: Body, length: Option<u64>, limit: u64) -> ApiResult<BodyStream> {
    let mut stream = body_stream(body);
    if length.is_some_and(|n| n > limit) {
        tokio::spawn(async move { files::drain(&mut stream).await });
        return Err(files::too_large(limit).into());
    }
    Ok(stream)
}

/// Finds the directory an upload to `dir` goes into: `dir` itself or its
/// deepest existing ancestor, with the components still to be made.
async fn existing_dir(
    state: &AppState,
    id: &SandboxId,
    dir: &SandboxPath,
) -> ApiResult<(SandboxPath, Vec<String>)> {
    let mut missing: Vec<String> = Vec::new();
    let mut current = dir.clone();
    loop {
        match state
            .svc
            .runtime_of(id)
            .await?
            .stat_path(id, &current)
            .await
        {
            Ok(st) => match st.kind {
                FileKind::Dir => break,
                FileKind::Symlink => {
                    let target = files::resolve_symlink(&state.svc, id, &current).await?;
                    match state.svc.runtime_of(id).await?.stat_path(id, &target).await {
                        Ok(t) if t.kind == FileKind::Dir => break,
                        Ok(_) => {
                            return Err(ServiceError::Conflict(format!(
                                "Not a directory: {current} (a symlink to {target})"
                            ))
                            .into())
                        }
                        Err(FsError::NotFound(_)) => {
                            return Err(ServiceError::Conflict(format!(
                                "{current} is a symlink to {target}, which does not exist"
                            ))
                            .into())
                        }
                        Err(e) => return Err(files::fs_error(e, id).into()),
                    }
                }
                _ => {
                    return Err(
                        ServiceError::Conflict(format!("Not a directory: {current}")).into(),
                    )
                }
            },
            // Missing (or below a file, which the walk up finds): make it.
            Err(FsError::NotFound(_) | FsError::NotADirectory(_)) => {
                let (Some(name), Some(parent)) = (current.file_name(), current.parent()) else {
                    return Err(
                        ServiceError::Docker("the sandbox has no root directory".into()).into(),
                    );
                };
                missing.push(name.to_owned());
                current = parent;
            }
            Err(e) => return Err(files::fs_error(e, id).into()),
        }
    }
    missing.reverse();
    Ok((current, missing))
}

/// Read a file, or list a directory.
///
/// A file comes back as its bytes (`application/octet-stream`, with
/// `Content-Length`); a directory as a JSON listing of its entries. A
/// symlink is followed, inside the sandbox. Works on a stopped sandbox.
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/files", tag = "files", operation_id = "readFile",
    params(("id" = String, Path, description = "sandbox id"),
           ("path" = Option<String>, Query, description = "absolute, or relative to /workspace (default /workspace)")),
    responses(
        (status = 200, description = "The file's bytes, or the directory's listing",
            content((stockade_api::files::Binary = "application/octet-stream"), (DirectoryListing = "application/json"))),
        (status = 400, description = "Invalid path", body = ErrorBody),
        (status = 403, description = "Another account's sandbox", body = ErrorBody),
        (status = 404, description = "No such sandbox, file or directory", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn read(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let (path, sb) = path_or_workspace(&state, &caller, &id, raw.as_deref()).await?;
    match files::open_following(&state.svc, &sb.id, &path, Want::Content).await? {
        Opened::File {
            size,
            modified_at,
            body,
            ..
        } => {
            let mut response = Response::new(Body::from_stream(body));
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
            if let Some(t) = modified_at {
                if let Ok(v) =
                    HeaderValue::from_str(&t.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
                {
                    headers.insert(header::LAST_MODIFIED, v);
                }
            }
            Ok(response)
        }
        Opened::Dir { entries, truncated } => Ok(Json(DirectoryListing {
            path: path.to_string(),
            entries,
            truncated,
        })
        .into_response()),
        Opened::Symlink { .. } | Opened::Other => Err(ApiError::field(
            "path",
            format!("{path} is neither a regular file nor a directory"),
        )),
    }
}

/// Metadata of one path (`lstat`: a symlink is reported as a symlink).
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/files/stat", tag = "files", operation_id = "statFile",
    params(("id" = String, Path, description = "sandbox id"),
           ("path" = Option<String>, Query, description = "absolute, or relative to /workspace (default /workspace)")),
    responses(
        (status = 200, body = FileEntry),
        BadRequest, AccessErrors,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn stat(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<FileEntry>> {
    let (path, sb) = path_or_workspace(&state, &caller, &id, raw.as_deref()).await?;
    let st = lstat(&state, &sb, &path)
        .await?
        .map_err(|e| files::fs_error(e, &sb.id))?;
    let link_target = if st.kind == FileKind::Symlink {
        // The target as stored, as `readlink` shows it.
        match files::open(&state.svc, &sb.id, &path, Want::Header).await? {
            Opened::Symlink { target } => Some(target),
            _ => st.resolved_target.clone(),
        }
    } else {
        None
    };
    Ok(Json(files::entry_from_stat(&path, &st, link_target)))
}

/// Write a file from the raw request body.
///
/// Missing parent directories are created. An existing file is replaced
/// (keeping its mode unless `mode` is given); a symlink at the path is
/// replaced, not written through. Bodies above the server's
/// `max_file_bytes` are refused with 413 while they stream.
#[utoipa::path(put, path = "/api/v1/sandbox/{id}/files", tag = "files", operation_id = "writeFile",
    params(("id" = String, Path, description = "sandbox id"),
           ("path" = String, Query, description = "absolute, or relative to /workspace"),
           ("mode" = Option<String>, Query, description = "octal permission bits, e.g. 0755 (default 0644, or the replaced file's)")),
    request_body(content = stockade_api::files::Binary, content_type = "application/octet-stream", description = "the file's bytes"),
    responses(
        (status = 201, description = "Created", body = FileEntry),
        (status = 200, description = "Replaced", body = FileEntry),
        BadRequest, AccessErrors,
        (status = 409, description = "A parent is not a directory, or the path is one", body = ErrorBody),
        (status = 413, description = "Larger than max_file_bytes", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn write(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<FileEntry>)> {
    let q = parse_query(raw.as_deref(), &["path", "mode"])?;
    let path = required_path(&q)?;
    let (Some(name), Some(parent)) = (path.file_name(), path.parent()) else {
        return Err(ApiError::field("path", "must name a file, not /"));
    };
    let sb = load_with_files(&state, &caller, &id).await?;
    let limit = state.svc.config().max_file_bytes;
    let length = content_length(&headers)?;
    let body = check_announced(body, length, limit)?;

    let existing = match lstat(&state, &sb, &path).await? {
        Ok(st) if st.kind == FileKind::Dir => {
            return Err(ServiceError::Conflict(format!(
                "{path} is a directory; write a file below it"
            ))
            .into())
        }
        Ok(st) => Some(st),
        Err(FsError::NotFound(_) | FsError::NotADirectory(_)) => None,
        Err(e) => return Err(files::fs_error(e, &sb.id).into()),
    };
    let mode = q.mode.unwrap_or_else(|| match &existing {
        Some(st) if st.kind == FileKind::File => st.mode,
        _ => 0o644,
    });
    let (dir, missing) = existing_dir(&state, &sb.id, &parent).await?;

    // A known length streams straight through; an unknown one is spooled
    // (up to the limit) so the archive header can say the size.
    let (body, size) = match length {
        Some(n) => (body, n),
        None => {
            let (file, n) = files::spool(body, limit).await?;
            let stream: BodyStream = Box::pin(tokio_util::io::ReaderStream::new(file));
            (stream, n)
        }
    };
    let failure: files::Failure = Arc::default();
    let archive = files::file_archive(&missing, name, size, mode, body, failure.clone())?;
    let written = state
        .svc
        .runtime_for(&sb)
        .await?
        .write_archive(&sb.id, &dir, archive)
        .await;
    if let Some(e) = files::take_failure(&failure) {
        return Err(e.into());
    }
    written.map_err(|e| files::fs_error(e, &sb.id))?;

    let st = lstat(&state, &sb, &path)
        .await?
        .map_err(|e| files::fs_error(e, &sb.id))?;
    let status = if existing.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(files::entry_from_stat(&path, &st, None))))
}

/// Delete a file, symlink or directory (`recursive=true` for a directory
/// with contents). Runs `rm` inside the sandbox, so it must be running.
#[utoipa::path(delete, path = "/api/v1/sandbox/{id}/files", tag = "files", operation_id = "deleteFile",
    params(("id" = String, Path, description = "sandbox id"),
           ("path" = String, Query, description = "absolute, or relative to /workspace"),
           ("recursive" = Option<bool>, Query, description = "delete a directory with its contents (default false)")),
    responses(
        (status = 204, description = "Deleted"),
        BadRequest, AccessErrors,
        (status = 409, description = "Directory not empty", body = ErrorBody),
        (status = 503, description = "The sandbox is not running", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn delete(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
) -> ApiResult<StatusCode> {
    let q = parse_query(raw.as_deref(), &["path", "recursive"])?;
    let path = required_path(&q)?;
    if path.is_root() || path.as_str() == VolumeName::MOUNT_PATH {
        return Err(ApiError::field(
            "path",
            format!("refusing to delete {path} itself; delete what is inside it"),
        ));
    }
    let sb = load_with_files(&state, &caller, &id).await?;
    if !sb.can_exec() {
        return Err(files::fs_error(FsError::NotRunning, &sb.id).into());
    }
    state
        .svc
        .runtime_for(&sb)
        .await?
        .delete_path(&sb.id, &path, q.recursive)
        .await
        .map_err(|e| files::fs_error(e, &sb.id))?;
    Ok(StatusCode::NO_CONTENT)
}

/// Download a tar archive of a file or directory (a symlink at `path` is
/// followed). Works on a stopped sandbox.
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/files/archive", tag = "files", operation_id = "downloadArchive",
    params(("id" = String, Path, description = "sandbox id"),
           ("path" = Option<String>, Query, description = "absolute, or relative to /workspace (default /workspace)")),
    responses(
        (status = 200, description = "A tar archive; its entries start with the path's last component",
            content_type = "application/x-tar", body = stockade_api::files::Binary),
        BadRequest, AccessErrors,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn download(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let (mut path, sb) = path_or_workspace(&state, &caller, &id, raw.as_deref()).await?;
    let st = lstat(&state, &sb, &path)
        .await?
        .map_err(|e| files::fs_error(e, &sb.id))?;
    if st.kind == FileKind::Symlink {
        path = files::resolve_symlink(&state.svc, &sb.id, &path).await?;
    }
    let archive = state
        .svc
        .runtime_for(&sb)
        .await?
        .read_archive(&sb.id, &path)
        .await
        .map_err(|e| files::fs_error(e, &sb.id))?;
    let name: String = path
        .file_name()
        .unwrap_or("root")
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut response = Response::new(Body::from_stream(archive));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}.tar\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(response)
}

/// Upload a tar (or tar.gz) archive and unpack it into a directory, made
/// with its parents when missing. Entries must stay below it (no `..`);
/// devices and FIFOs are refused. Limited to `max_file_bytes` as sent and
/// to the server's unpack ceiling (`--max-unpacked-mb`) unpacked (413).
/// The whole archive is checked before anything is unpacked: a refused
/// archive leaves nothing in the sandbox.
#[utoipa::path(method(put, post), path = "/api/v1/sandbox/{id}/files/archive", tag = "files", operation_id = "uploadArchive",
    params(("id" = String, Path, description = "sandbox id"),
           ("path" = Option<String>, Query, description = "directory to unpack into: absolute, or relative to /workspace (default /workspace)")),
    request_body(content = stockade_api::files::Binary, content_type = "application/x-tar", description = "a tar or gzip-compressed tar archive"),
    responses(
        (status = 200, body = ArchiveUploadResponse),
        (status = 400, description = "Not a tar archive, or an entry that leaves the directory", body = ErrorBody),
        AccessErrors,
        (status = 409, description = "The path is not a directory", body = ErrorBody),
        (status = 413, description = "Larger than max_file_bytes as sent, or than the unpack ceiling unpacked", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn upload(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<ArchiveUploadResponse>> {
    let (path, sb) = path_or_workspace(&state, &caller, &id, raw.as_deref()).await?;
    let length = content_length(&headers)?;
    let body = check_announced(body, length, state.svc.config().max_file_bytes)?;
    let (dir, missing) = existing_dir(&state, &sb.id, &path).await?;
    let done = files::upload_archive(&state.svc, &sb.id, &dir, missing, body).await?;
    Ok(Json(ArchiveUploadResponse {
        path: path.to_string(),
        entries: done.entries,
        bytes: done.bytes,
    }))
}

/// Make a directory (and its missing parents). Needs a running sandbox.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/files/mkdir", tag = "files",
    params(("id" = String, Path, description = "sandbox id"),
           ("path" = String, Query, description = "the directory; relative paths are under /workspace")),
    responses(
        (status = 201, description = "Made (or there already)", body = FileEntry),
        BadRequest, AccessErrors,
        (status = 409, description = "The sandbox is not running, or a file is in the way", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn mkdir(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
) -> ApiResult<(StatusCode, Json<FileEntry>)> {
    let q = parse_query(raw.as_deref(), &["path"])?;
    let path = required_path(&q)?;
    let sb = load_with_files(&state, &caller, &id).await?;
    let entry = state.svc.make_dir(&sb, &path).await?;
    Ok((StatusCode::CREATED, Json(entry)))
}

/// Move or rename a file or directory inside the sandbox. Needs a running
/// sandbox.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/files/move", tag = "files",
    params(("id" = String, Path, description = "sandbox id")),
    request_body = stockade_api::files::MoveRequest,
    responses(
        (status = 200, description = "Moved; the entry at its new place", body = FileEntry),
        BadRequest, (status = 403, body = ErrorBody),
        (status = 404, description = "Unknown sandbox, or `from` does not exist", body = ErrorBody),
        (status = 409, description = "The sandbox is not running", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn move_path(
    AuthedId { state, caller, id }: AuthedId,
    crate::extract::ApiJson(req): crate::extract::ApiJson<stockade_api::files::MoveRequest>,
) -> ApiResult<Json<FileEntry>> {
    let mut errs = ValidationErrors::default();
    let from = errs.check(SandboxPath::parse_field(&req.from, "from"));
    let to = errs.check(SandboxPath::parse_field(&req.to, "to"));
    errs.into_result()?;
    let (Some(from), Some(to)) = (from, to) else {
        return Err(ApiError::field("from", "is required"));
    };
    let sb = load_with_files(&state, &caller, &id).await?;
    Ok(Json(state.svc.move_path(&sb, &from, &to).await?))
}

/// Watch a directory: Server-Sent Events `create`, `write`, `remove`,
/// `rename` and `chmod`, each with data `{"path","type"}`, until the client
/// closes the stream (or the sandbox stops: a final `end` event).
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/files/watch", tag = "files",
    params(("id" = String, Path, description = "sandbox id"),
           ("path" = String, Query, description = "the directory; relative paths are under /workspace"),
           ("recursive" = Option<bool>, Query, description = "its subdirectories too (default false)")),
    responses(
        (status = 200, description = "The events", content_type = "text/event-stream"),
        BadRequest, AccessErrors,
        (status = 409, description = "The sandbox is not running", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn watch(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let q = parse_query(raw.as_deref(), &["path", "recursive"])?;
    let path = required_path(&q)?;
    let sb = load_with_files(&state, &caller, &id).await?;
    let watch = state.svc.watch(&sb, &path, q.recursive).await?;
    let events = futures_util::stream::unfold(Some(watch), |watch| async move {
        let mut watch = watch?;
        match watch.next().await {
            Some(Ok(ev)) => {
                let data = serde_json::to_string(&ev).unwrap_or_default();
                Some((crate::sse::event(ev.kind, None, &data), Some(watch)))
            }
            Some(Err(e)) => {
                let data = serde_json::json!({ "reason": e.to_string() }).to_string();
                Some((crate::sse::event("end", None, &data), None))
            }
            None => Some((
                crate::sse::event("end", None, r#"{"reason":"the watch ended"}"#),
                None,
            )),
        }
    });
    Ok(crate::sse::response(
        Box::pin(events),
        state.config.sse_keep_alive,
        state.svc.shutdown(),
    ))
}
