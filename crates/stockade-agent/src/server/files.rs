//! envd's HTTP routes: `GET /files` (download), `POST /files` (multipart
//! or raw upload), `POST /init` and `GET /envs`.

use super::{http_error, AgentState};
use crate::body::{self, BoxBody, ChannelBody};
use crate::connect::{Code, ConnectError};
use crate::fsops;
use crate::multipart::{self, Multipart};
use crate::users::User;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes read from a file per download chunk.
const DOWNLOAD_CHUNK: usize = 64 << 10;

struct FileQuery {
    path: String,
    username: Option<String>,
}

fn query(req: &Request<Incoming>) -> FileQuery {
    let mut q = FileQuery {
        path: String::new(),
        username: None,
    };
    for (k, v) in form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "path" => q.path = v.into_owned(),
            "username" => q.username = Some(v.into_owned()),
            _ => {} // signature, signature_expiration: the token already guards us
        }
    }
    q
}

fn connect_to_http(e: &ConnectError) -> Response<BoxBody> {
    let status = match e.code {
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::InvalidArgument | Code::AlreadyExists | Code::FailedPrecondition => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    http_error(status, e.message.clone())
}

fn io_to_http(e: &std::io::Error, what: &str) -> Response<BoxBody> {
    let status = match e.kind() {
        std::io::ErrorKind::NotFound => StatusCode::NOT_FOUND,
        std::io::ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        std::io::ErrorKind::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    http_error(status, format!("{what}: {e}"))
}

fn user_and_path(
    state: &AgentState,
    q: &FileQuery,
) -> Result<(User, Option<PathBuf>), ConnectError> {
    let user = state.resolve_user(q.username.as_deref())?;
    let workdir = state.defaults.read().expect("defaults").workdir.clone();
    let path = if q.path.is_empty() {
        None
    } else {
        Some(fsops::resolve(&q.path, &user, workdir.as_deref())?)
    };
    Ok((user, path))
}

/// `GET /files?path=…`: the file's bytes, streamed.
pub async fn download(state: Arc<AgentState>, req: Request<Incoming>) -> Response<BoxBody> {
    let q = query(&req);
    let (_, path) = match user_and_path(&state, &q) {
        Ok(x) => x,
        Err(e) => return connect_to_http(&e),
    };
    let Some(path) = path else {
        return http_error(StatusCode::BAD_REQUEST, "path is required");
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return http_error(
                StatusCode::NOT_FOUND,
                format!("path '{}' does not exist", path.display()),
            )
        }
        Err(e) => return io_to_http(&e, "error opening file"),
    };
    let meta = match file.metadata().await {
        Ok(m) => m,
        Err(e) => return io_to_http(&e, "error reading file metadata"),
    };
    if meta.is_dir() {
        return http_error(
            StatusCode::BAD_REQUEST,
            format!("path '{}' is a directory", path.display()),
        );
    }
    let size = meta.len();
    let body = stream_file(file, size);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().replace('"', ""))
        .unwrap_or_default();
    Response::builder()
        .header(http::header::CONTENT_TYPE, "application/octet-stream")
        .header(
            http::header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}\""),
        )
        .body(body)
        .expect("valid response")
}

/// A body streaming `size` bytes of an open file, with that length
/// declared; a file that shrinks meanwhile cuts the body short with an
/// error, so the client sees the transfer incomplete.
pub(super) fn stream_file(mut file: tokio::fs::File, size: u64) -> BoxBody {
    let (tx, body) = ChannelBody::new(4);
    tokio::spawn(async move {
        let mut sent = 0u64;
        while sent < size {
            let want = DOWNLOAD_CHUNK.min((size - sent) as usize);
            let mut buf = vec![0u8; want];
            match file.read(&mut buf).await {
                Ok(0) => {
                    let _ = tx
                        .send(Err(std::io::Error::other("file shrank while it was read")))
                        .await;
                    return;
                }
                Ok(n) => {
                    buf.truncate(n);
                    sent += n as u64;
                    if tx.send(Ok(Bytes::from(buf))).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
    });
    body.with_size(size).boxed()
}

/// What an upload answers per file.
fn written(path: &Path) -> serde_json::Value {
    serde_json::json!({
        "path": path.to_string_lossy(),
        "name": path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        "type": "file",
    })
}

async fn open_for_write(
    path: &Path,
    ids: Option<(u32, u32)>,
) -> Result<tokio::fs::File, Response<BoxBody>> {
    if let Ok(m) = std::fs::metadata(path) {
        if m.is_dir() {
            return Err(http_error(
                StatusCode::BAD_REQUEST,
                format!("path '{}' is a directory", path.display()),
            ));
        }
    }
    if let Some(parent) = path.parent() {
        fsops::ensure_dirs(parent, ids).map_err(|e| connect_to_http(&e))?;
    }
    let file = tokio::fs::File::create(path)
        .await
        .map_err(|e| io_to_http(&e, "error creating file"))?;
    fsops::chown(path, ids).map_err(|e| connect_to_http(&e))?;
    Ok(file)
}

async fn finish_write(mut file: tokio::fs::File) -> Result<(), Response<BoxBody>> {
    file.flush()
        .await
        .map_err(|e| io_to_http(&e, "error writing file"))
}

/// `POST /files`: a multipart form (each `file` part is written to `path`,
/// or to its file name) or a raw body written to `path`.
pub async fn upload(state: Arc<AgentState>, req: Request<Incoming>) -> Response<BoxBody> {
    match upload_inner(&state, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn upload_inner(
    state: &AgentState,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, Response<BoxBody>> {
    let q = query(&req);
    let (user, path) = user_and_path(state, &q).map_err(|e| connect_to_http(&e))?;
    let ids = state.ids_for(&user);
    let encoding = req
        .headers()
        .get(http::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity")
        .to_ascii_lowercase();
    if encoding != "identity" {
        return Err(http_error(
            StatusCode::BAD_REQUEST,
            format!("Content-Encoding {encoding:?} is not supported; send the file uncompressed"),
        ));
    }
    let ct = super::rpc::content_type(&req);
    let mut results = Vec::new();
    if let Some(boundary) = multipart::boundary(&ct) {
        let workdir = state.defaults.read().expect("defaults").workdir.clone();
        let mut form = Multipart::new(req.into_body(), &boundary);
        loop {
            let part = form
                .next_part()
                .await
                .map_err(|e| http_error(StatusCode::BAD_REQUEST, e.0))?;
            let Some(part) = part else { break };
            if part.name.as_deref() != Some("file") {
                continue;
            }
            let target = match (&path, &part.filename) {
                (Some(p), _) => p.clone(),
                (None, Some(name)) if !name.is_empty() => {
                    fsops::resolve(name, &user, workdir.as_deref())
                        .map_err(|e| connect_to_http(&e))?
                }
                _ => {
                    return Err(http_error(
                        StatusCode::BAD_REQUEST,
                        "path is required (as a parameter or the part's file name)",
                    ))
                }
            };
            let mut file = open_for_write(&target, ids).await?;
            while let Some(chunk) = form
                .next_chunk()
                .await
                .map_err(|e| http_error(StatusCode::BAD_REQUEST, e.0))?
            {
                file.write_all(&chunk)
                    .await
                    .map_err(|e| io_to_http(&e, "error writing file"))?;
            }
            finish_write(file).await?;
            results.push(written(&target));
        }
    } else {
        let Some(target) = path else {
            return Err(http_error(StatusCode::BAD_REQUEST, "path is required"));
        };
        let mut file = open_for_write(&target, ids).await?;
        let mut body = req.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                http_error(StatusCode::BAD_REQUEST, format!("reading the body: {e}"))
            })?;
            if let Ok(data) = frame.into_data() {
                file.write_all(&data)
                    .await
                    .map_err(|e| io_to_http(&e, "error writing file"))?;
            }
        }
        finish_write(file).await?;
        results.push(written(&target));
    }
    Ok(Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body::full(serde_json::Value::Array(results).to_string()))
        .expect("valid response"))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitRequest {
    #[serde(default)]
    env_vars: Option<HashMap<String, String>>,
    #[serde(default)]
    default_user: Option<String>,
    #[serde(default)]
    default_workdir: Option<String>,
}

/// `POST /init`: default environment, user and working directory.
pub async fn init(state: Arc<AgentState>, req: Request<Incoming>) -> Response<BoxBody> {
    let data = match Limited::new(req.into_body(), 1 << 20).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => return http_error(StatusCode::BAD_REQUEST, format!("reading the body: {e}")),
    };
    let init: InitRequest = if data.is_empty() {
        InitRequest {
            env_vars: None,
            default_user: None,
            default_workdir: None,
        }
    } else {
        match serde_json::from_slice(&data) {
            Ok(i) => i,
            Err(e) => return http_error(StatusCode::BAD_REQUEST, format!("invalid body: {e}")),
        }
    };
    if let Some(u) = &init.default_user {
        if state.accounts.user_by_name(u).is_none() {
            return http_error(
                StatusCode::BAD_REQUEST,
                format!("defaultUser: no user {u:?}"),
            );
        }
    }
    if let Some(w) = &init.default_workdir {
        if !w.starts_with('/') {
            return http_error(
                StatusCode::BAD_REQUEST,
                "defaultWorkdir must be an absolute path",
            );
        }
    }
    if let Some(env) = &init.env_vars {
        if let Some(bad) = env.keys().find(|k| k.is_empty() || k.contains(['=', '\0'])) {
            return http_error(
                StatusCode::BAD_REQUEST,
                format!("envVars: invalid name {bad:?}"),
            );
        }
    }
    let mut d = state.defaults.write().expect("defaults");
    if let Some(env) = init.env_vars {
        let mut env: Vec<_> = env.into_iter().collect();
        env.sort();
        d.env = env;
    }
    if init.default_user.is_some() {
        d.user = init.default_user;
    }
    if init.default_workdir.is_some() {
        d.workdir = init.default_workdir;
    }
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .body(body::empty())
        .expect("valid response")
}

/// `GET /envs`: the default environment of started processes.
pub fn envs(state: Arc<AgentState>) -> Response<BoxBody> {
    let env: serde_json::Map<String, serde_json::Value> = state
        .defaults
        .read()
        .expect("defaults")
        .env
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body::full(serde_json::Value::Object(env).to_string()))
        .expect("valid response")
}
