//! The volume routes (`/volume/…`): plain HTTP and JSON over the files of a
//! shared volume, served when the agent runs in a volume helper container
//! (`STOCKADE_AGENT_VOLUME_ROOT` names the volume's directory). The
//! filesystem work, confined beneath the root, is `volume_fs`'s; this layer
//! reads parameters, runs it off the event loop and maps its errors to
//! statuses with a `{"code", "message"}` body a caller can match on.

use super::{files, http_error, AgentState};
use crate::body::{self, BoxBody};
use crate::volume_fs::{NewFile, VolPath, Volume, VolumeAttrs, VolumeError, VolumeErrorKind};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;
use std::sync::Arc;

/// Bytes of an upload gathered before they are written to disk.
const WRITE_BATCH: usize = 256 << 10;
/// Largest `PATCH` body.
const MAX_ATTRS_BODY: usize = 64 << 10;

/// Answers a request under `/volume/`; without a volume there are no such
/// routes.
pub async fn route(state: Arc<AgentState>, req: Request<Incoming>) -> Response<BoxBody> {
    let path = req.uri().path().to_owned();
    let Some(volume) = state.volume.clone() else {
        return http_error(StatusCode::NOT_FOUND, format!("no route {path}"));
    };
    let answer = match (req.method().clone(), path.as_str()) {
        (Method::GET, "/volume/stat") => stat(volume, &req).await,
        (Method::GET, "/volume/list") => list(volume, &req).await,
        (Method::POST, "/volume/mkdir") => mkdir(volume, &req).await,
        (Method::GET, "/volume/file") => read(volume, &req).await,
        (Method::PUT, "/volume/file") => write(volume, req).await,
        (Method::DELETE, "/volume/path") => remove(volume, &req).await,
        (Method::PATCH, "/volume/path") => set_attrs(volume, req).await,
        (Method::POST, "/volume/rename") => rename(volume, &req).await,
        (Method::GET, "/volume/usage") => usage(volume, &req).await,
        (
            _,
            "/volume/stat" | "/volume/list" | "/volume/mkdir" | "/volume/file" | "/volume/path"
            | "/volume/rename" | "/volume/usage",
        ) => return http_error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        _ => return http_error(StatusCode::NOT_FOUND, format!("no route {path}")),
    };
    answer.unwrap_or_else(|e| error_response(&e))
}

/// The one place a volume error becomes a status.
fn error_response(e: &VolumeError) -> Response<BoxBody> {
    let kind = e.kind();
    let status = match kind {
        VolumeErrorKind::BadPath
        | VolumeErrorKind::BadRequest
        | VolumeErrorKind::Symlink
        | VolumeErrorKind::NotAFile
        | VolumeErrorKind::NotADirectory
        | VolumeErrorKind::TooMany => StatusCode::BAD_REQUEST,
        VolumeErrorKind::NotFound => StatusCode::NOT_FOUND,
        VolumeErrorKind::Exists => StatusCode::CONFLICT,
        VolumeErrorKind::Io => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = serde_json::json!({ "code": kind.as_str(), "message": e.to_string() });
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body::full(body.to_string()))
        .expect("valid response")
}

fn json(status: StatusCode, value: &impl Serialize) -> Result<Response<BoxBody>, VolumeError> {
    let text = serde_json::to_string(value)
        .map_err(|e| VolumeError::io("encoding the answer", std::io::Error::other(e)))?;
    Ok(Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body::full(text))
        .expect("valid response"))
}

/// Runs filesystem work on the blocking pool: a large tree or a slow disk
/// never stalls the agent's other requests.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, VolumeError> + Send + 'static,
) -> Result<T, VolumeError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| VolumeError::io("the filesystem task failed", std::io::Error::other(e)))?
}

/// A request's query parameters, of which a route names those it takes;
/// any other is refused, so a misspelt one does not go unnoticed.
struct Params(Vec<(String, String)>);

impl Params {
    fn of(req: &Request<Incoming>, allowed: &[&str]) -> Result<Self, VolumeError> {
        let pairs: Vec<(String, String)> =
            form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
        if let Some((k, _)) = pairs.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            return Err(VolumeError::BadRequest(format!(
                "unknown parameter {k:?}; this route takes {}",
                allowed.join(", ")
            )));
        }
        Ok(Params(pairs))
    }

    /// The last value of a parameter.
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn path(&self, name: &str) -> Result<VolPath, VolumeError> {
        match self.get(name) {
            Some(p) => VolPath::parse(p),
            None => Err(VolumeError::BadPath(format!(
                "the parameter {name} is required: a path in the volume, e.g. /a/b.txt"
            ))),
        }
    }

    fn flag(&self, name: &str) -> Result<bool, VolumeError> {
        match self.get(name) {
            None | Some("false" | "0") => Ok(false),
            Some("true" | "1" | "") => Ok(true),
            Some(other) => Err(VolumeError::BadRequest(format!(
                "{name}={other:?}: give true or false"
            ))),
        }
    }

    fn number(&self, name: &str) -> Result<Option<u32>, VolumeError> {
        self.get(name)
            .map(|v| {
                v.parse().map_err(|_| {
                    VolumeError::BadRequest(format!(
                        "{name}={v:?}: give a decimal number (a mode too, e.g. 420 for 0o644)"
                    ))
                })
            })
            .transpose()
    }

    fn attrs(&self) -> Result<VolumeAttrs, VolumeError> {
        Ok(VolumeAttrs {
            uid: self.number("uid")?,
            gid: self.number("gid")?,
            mode: self.number("mode")?,
        })
    }
}

/// `GET /volume/stat?path=`: the entry itself (a symbolic link's own).
async fn stat(volume: Volume, req: &Request<Incoming>) -> Result<Response<BoxBody>, VolumeError> {
    let path = Params::of(req, &["path"])?.path("path")?;
    let entry = blocking(move || volume.stat(&path)).await?;
    json(StatusCode::OK, &entry)
}

/// `GET /volume/list?path=&depth=`: the entries beneath a directory.
async fn list(volume: Volume, req: &Request<Incoming>) -> Result<Response<BoxBody>, VolumeError> {
    let params = Params::of(req, &["path", "depth"])?;
    let path = params.path("path")?;
    let depth = params.number("depth")?.unwrap_or(1);
    let entries = blocking(move || volume.list(&path, depth)).await?;
    json(StatusCode::OK, &entries)
}

/// `POST /volume/mkdir?path=&parents=&uid=&gid=&mode=`.
async fn mkdir(volume: Volume, req: &Request<Incoming>) -> Result<Response<BoxBody>, VolumeError> {
    let params = Params::of(req, &["path", "parents", "uid", "gid", "mode"])?;
    let path = params.path("path")?;
    let parents = params.flag("parents")?;
    let attrs = params.attrs()?;
    let entry = blocking(move || volume.mkdir(&path, parents, &attrs)).await?;
    json(StatusCode::CREATED, &entry)
}

/// `GET /volume/file?path=`: a regular file's bytes, streamed.
async fn read(volume: Volume, req: &Request<Incoming>) -> Result<Response<BoxBody>, VolumeError> {
    let path = Params::of(req, &["path"])?.path("path")?;
    let (file, size) = blocking(move || volume.open_file(&path)).await?;
    Ok(Response::builder()
        .header(http::header::CONTENT_TYPE, "application/octet-stream")
        .body(files::stream_file(tokio::fs::File::from_std(file), size))
        .expect("valid response"))
}

/// `PUT /volume/file?path=&parents=&uid=&gid=&mode=`: the body, streamed
/// to a temporary file renamed over the target once complete. A body that
/// breaks off leaves the target as it was.
async fn write(volume: Volume, req: Request<Incoming>) -> Result<Response<BoxBody>, VolumeError> {
    let params = Params::of(&req, &["path", "parents", "uid", "gid", "mode"])?;
    let path = params.path("path")?;
    let parents = params.flag("parents")?;
    let attrs = params.attrs()?;
    let mut file = blocking(move || volume.create_file(&path, parents, &attrs)).await?;
    let mut body = req.into_body();
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batched = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| VolumeError::BadRequest(format!("reading the body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            batched += data.len();
            batch.push(data);
            if batched >= WRITE_BATCH {
                file = write_batch(file, std::mem::take(&mut batch)).await?;
                batched = 0;
            }
        }
    }
    if !batch.is_empty() {
        file = write_batch(file, batch).await?;
    }
    let entry = blocking(move || file.commit()).await?;
    json(StatusCode::CREATED, &entry)
}

async fn write_batch(mut file: NewFile, batch: Vec<Bytes>) -> Result<NewFile, VolumeError> {
    blocking(move || {
        for chunk in &batch {
            file.write(chunk)?;
        }
        Ok(file)
    })
    .await
}

/// `DELETE /volume/path?path=`: an entry, a directory with its contents.
async fn remove(volume: Volume, req: &Request<Incoming>) -> Result<Response<BoxBody>, VolumeError> {
    let path = Params::of(req, &["path"])?.path("path")?;
    blocking(move || volume.remove(&path)).await?;
    Ok(Response::builder()
        .status(StatusCode::NO_CONTENT)
        .body(body::empty())
        .expect("valid response"))
}

/// `PATCH /volume/path?path=` with `{"uid"?, "gid"?, "mode"?}`.
async fn set_attrs(
    volume: Volume,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, VolumeError> {
    let path = Params::of(&req, &["path"])?.path("path")?;
    let data = Limited::new(req.into_body(), MAX_ATTRS_BODY)
        .collect()
        .await
        .map_err(|e| VolumeError::BadRequest(format!("reading the body: {e}")))?
        .to_bytes();
    let attrs: VolumeAttrs = serde_json::from_slice(&data).map_err(|e| {
        VolumeError::BadRequest(format!(
            "the body must be {{\"uid\"?: n, \"gid\"?: n, \"mode\"?: n}}: {e}"
        ))
    })?;
    let entry = blocking(move || volume.set_attrs(&path, &attrs)).await?;
    json(StatusCode::OK, &entry)
}

/// `POST /volume/rename?from=&to=`.
async fn rename(volume: Volume, req: &Request<Incoming>) -> Result<Response<BoxBody>, VolumeError> {
    let params = Params::of(req, &["from", "to"])?;
    let from = params.path("from")?;
    let to = params.path("to")?;
    let entry = blocking(move || volume.rename(&from, &to)).await?;
    json(StatusCode::OK, &entry)
}

/// `GET /volume/usage`: bytes allocated and entries beneath the root.
async fn usage(volume: Volume, req: &Request<Incoming>) -> Result<Response<BoxBody>, VolumeError> {
    Params::of(req, &[])?;
    let usage = blocking(move || volume.usage()).await?;
    json(StatusCode::OK, &usage)
}
