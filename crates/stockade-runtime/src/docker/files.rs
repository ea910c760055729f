//! Files inside Docker sandboxes, over the engine's archive API on
//! `/containers/{id}/archive`: HEAD (stat), GET (a tar out), PUT (a tar in).
//!
//! The engine resolves every path — symlinks included — inside the
//! container's own root, which is what keeps the host out of reach, and the
//! archive API works on stopped containers too. bollard 0.18 has no HEAD, so
//! the stat is one raw HTTP/1 request on the same socket. There is no archive
//! verb that deletes: delete runs `rm`/`rmdir` in the running sandbox.

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use bollard::container::{
    DownloadFromContainerOptions, InspectContainerOptions, UploadToContainerOptions,
};
use bollard::errors::Error as BollardError;
use bytes::Bytes;
use futures_util::{stream, StreamExt};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use stockade_core::{SandboxId, SandboxPath, VolumeName};

use crate::docker::{container_name, engine_answer, error_chain, status_code, Endpoint};
use crate::files::from_go_mode;
use crate::{
    ArchiveStream, ArchiveUpload, DockerRuntime, Exec, ExecSpec, FileKind, Files, FsError,
    FsResult, PathStat, RuntimeError,
};

/// The header of the archive HEAD/GET answer: base64 JSON of the path's stat.
const STAT_HEADER: &str = "x-docker-container-path-stat";
/// How long a stat may take.
const STAT_TIMEOUT: Duration = Duration::from_secs(30);
/// An upload's response comes only after the whole body was read and
/// unpacked: the client's usual 120 s would cut slow uploads.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long `rm -rf` may run.
const DELETE_TIMEOUT: Duration = Duration::from_secs(300);

/// Docker's `X-Docker-Container-Path-Stat`.
#[derive(Debug, serde::Deserialize)]
pub(super) struct DockerPathStat {
    name: String,
    pub(super) size: i64,
    /// Go's `os.FileMode`.
    pub(super) mode: u32,
    mtime: String,
    #[serde(rename = "linkTarget", default)]
    link_target: String,
}

impl DockerPathStat {
    pub(super) fn decode(header: &str) -> Result<Self, String> {
        let json = base64::engine::general_purpose::STANDARD
            .decode(header.trim())
            .map_err(|e| format!("bad stat header: {e}"))?;
        serde_json::from_slice(&json).map_err(|e| format!("bad stat header: {e}"))
    }

    fn into_stat(self) -> PathStat {
        let (kind, mode) = from_go_mode(self.mode);
        PathStat {
            name: self.name,
            size: u64::try_from(self.size).unwrap_or(0),
            mode,
            kind,
            modified_at: chrono::DateTime::parse_from_rfc3339(&self.mtime)
                .ok()
                .map(|t| t.with_timezone(&chrono::Utc)),
            resolved_target: (kind == FileKind::Symlink && !self.link_target.is_empty())
                .then_some(self.link_target),
        }
    }
}

/// `path=…`, encoded for a query string.
fn path_query(path: &SandboxPath) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("path", path.as_str())
        .finish()
}

/// Removes the engine host's directories from a Docker message
/// (`lstat /var/lib/docker/overlay2/…/merged/etc/x: …` → `lstat /etc/x: …`):
/// a tenant learns nothing about the host's layout.
pub(crate) fn scrub_host_paths(message: &str) -> String {
    let mut out = message.to_owned();
    // A container's root is `…/merged`; its only volume, `…/_data`, is at /workspace.
    for (marker, inside) in [("/merged", ""), ("/_data", VolumeName::MOUNT_PATH)] {
        while let Some(pos) = out.find(marker) {
            let start = out[..pos]
                .rfind(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                .map_or(0, |i| i + 1);
            let end = pos + marker.len();
            let replacement = if inside.is_empty() && !out[end..].starts_with('/') {
                "/"
            } else {
                inside
            };
            out.replace_range(start..end, replacement);
        }
    }
    out
}

/// One HEAD request over an HTTP/1 connection of its own.
async fn send_head<T>(io: T, uri: &str) -> Result<(u16, Option<String>), String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let request = hyper::Request::head(uri)
        .header(hyper::header::HOST, "docker")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| error_chain(&e))?;
    let driver = tokio::spawn(connection);
    let response = sender.send_request(request).await;
    drop(sender);
    driver.abort();
    let response = response.map_err(|e| error_chain(&e))?;
    let header = response
        .headers()
        .get(STAT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok((response.status().as_u16(), header))
}

/// How the engine begins its message when an archive's content cannot be
/// unpacked.
const TAR_REFUSED: &str = "Error processing tar file";

impl DockerRuntime {
    /// Maps an engine error of a file operation on `path`.
    fn fs_err(&self, id: &SandboxId, e: BollardError, path: &str, what: &str) -> FsError {
        if let BollardError::DockerResponseServerError {
            status_code,
            message,
        } = &e
        {
            let lower = message.to_ascii_lowercase();
            return match status_code {
                404 if lower.contains("no such container") => FsError::Runtime(
                    RuntimeError::NotFound(format!("no container for sandbox {id}")),
                ),
                404 => FsError::NotFound(path.to_owned()),
                _ if lower.contains("not a directory") => FsError::NotADirectory(path.to_owned()),
                _ if lower.contains("permission denied")
                    || lower.contains("read-only")
                    || lower.contains("operation not permitted") =>
                {
                    FsError::PermissionDenied(format!("{path}: {}", scrub_host_paths(message)))
                }
                _ if message.contains(TAR_REFUSED) => {
                    let said = scrub_host_paths(message);
                    let reason = said
                        .split(TAR_REFUSED)
                        .nth(1)
                        .map(|r| r.trim_start_matches(|c: char| !c.is_alphanumeric()).trim())
                        .filter(|r| !r.is_empty())
                        .map_or_else(|| format!("{what} {path}: {said}"), str::to_owned);
                    FsError::ArchiveRefused(reason)
                }
                _ => FsError::Runtime(RuntimeError::Other(format!(
                    "{what} {path}: {}",
                    scrub_host_paths(message)
                ))),
            };
        }
        FsError::Runtime(self.map_err(e, what))
    }

    /// HEAD `/containers/{name}/archive?path=`: the status and the stat header.
    pub(super) async fn raw_stat(&self, uri: &str) -> Result<(u16, Option<String>), String> {
        match &self.endpoint {
            Endpoint::Unix(socket) => {
                let io = tokio::net::UnixStream::connect(socket)
                    .await
                    .map_err(|e| format!("connect to {socket}: {e}"))?;
                send_head(TokioIo::new(io), uri).await
            }
            Endpoint::Tcp(addr) => {
                let io = tokio::net::TcpStream::connect(addr)
                    .await
                    .map_err(|e| format!("connect to {addr}: {e}"))?;
                send_head(TokioIo::new(io), uri).await
            }
        }
    }

    pub(crate) async fn stat_path_impl(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> FsResult<PathStat> {
        let docker = self.client().await?;
        let version = docker.client_version();
        let uri = format!(
            "/v{}.{}/containers/{}/archive?{}",
            version.major_version,
            version.minor_version,
            container_name(id),
            path_query(path)
        );
        let (status, header) =
            engine_answer(&format!("stat {path}"), STAT_TIMEOUT, self.raw_stat(&uri)).await?;
        match (status, header) {
            (200, Some(h)) => Ok(DockerPathStat::decode(&h)
                .map_err(|e| RuntimeError::Other(format!("stat {path}: {e}")))?
                .into_stat()),
            (404, _) => {
                // A HEAD answer has no body: tell a missing path from a missing container.
                match docker
                    .inspect_container(&container_name(id), None::<InspectContainerOptions>)
                    .await
                {
                    Err(e) if status_code(&e) == Some(404) => Err(FsError::Runtime(
                        RuntimeError::NotFound(format!("no container for sandbox {id}")),
                    )),
                    _ => Err(FsError::NotFound(path.to_string())),
                }
            }
            // The engine's reason is only in a GET's body: ask again.
            (status, _) => match self.read_archive_impl(id, path).await {
                Err(e) => Err(e),
                Ok(_) => Err(FsError::Runtime(RuntimeError::Other(format!(
                    "stat {path}: the engine answered {status}"
                )))),
            },
        }
    }

    pub(crate) async fn read_archive_impl(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> FsResult<ArchiveStream> {
        let docker = self.client().await?;
        let mut archive = Box::pin(docker.download_from_container(
            &container_name(id),
            Some(DownloadFromContainerOptions {
                path: path.to_string(),
            }),
        ));
        // Errors (404 above all) arrive before the first byte: report them as such.
        let first = match archive.next().await {
            None => return Ok(Box::pin(stream::empty())),
            Some(Err(e)) => return Err(self.fs_err(id, e, path.as_str(), "read")),
            Some(Ok(bytes)) => bytes,
        };
        let rest = archive.map(|item| item.map_err(|e| std::io::Error::other(error_chain(&e))));
        Ok(Box::pin(
            stream::once(async move { Ok::<_, std::io::Error>(first) }).chain(rest),
        ))
    }

    pub(crate) async fn write_archive_impl(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
        archive: ArchiveUpload,
    ) -> FsResult<()> {
        let docker = self.client().await?.with_timeout(UPLOAD_TIMEOUT);
        docker
            .upload_to_container_streaming(
                &container_name(id),
                Some(UploadToContainerOptions {
                    path: dir.to_string(),
                    ..Default::default()
                }),
                archive,
            )
            .await
            .map_err(|e| self.fs_err(id, e, dir.as_str(), "write"))
    }

    pub(crate) async fn delete_path_impl(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
        recursive: bool,
    ) -> FsResult<()> {
        let stat = self.stat_path_impl(id, path).await?;
        let tool: &[&str] = match (stat.kind, recursive) {
            (FileKind::Dir, true) => &["rm", "-rf", "--"],
            (FileKind::Dir, false) => &["rmdir", "--"],
            // A symlink is removed itself, never what it points at.
            _ => &["rm", "-f", "--"],
        };
        let mut argv: Vec<String> = tool.iter().map(|s| (*s).to_owned()).collect();
        argv.push(path.to_string());
        let spec = ExecSpec {
            argv,
            timeout: Some(DELETE_TIMEOUT),
            max_output_bytes: 64 * 1024,
            ..Default::default()
        };
        let out = match Exec::exec(self, id, spec).await {
            Ok(out) => out,
            Err(RuntimeError::Conflict(_)) => return Err(FsError::NotRunning),
            Err(e) => return Err(e.into()),
        };
        if out.timed_out {
            return Err(FsError::Runtime(RuntimeError::Other(format!(
                "deleting {path} did not finish within {} s",
                DELETE_TIMEOUT.as_secs()
            ))));
        }
        match out.exit_code {
            Some(0) => Ok(()),
            code => Err(delete_failure(
                path,
                tool[0],
                code,
                &String::from_utf8_lossy(&out.stderr),
            )),
        }
    }
}

/// Why `rm`/`rmdir` failed, from its exit code and message.
fn delete_failure(path: &SandboxPath, tool: &str, code: Option<i64>, stderr: &str) -> FsError {
    let stderr = scrub_host_paths(stderr.trim());
    let lower = stderr.to_ascii_lowercase();
    if lower.contains("not empty") {
        FsError::NotEmpty(path.to_string())
    } else if lower.contains("permission denied")
        || lower.contains("read-only")
        || lower.contains("operation not permitted")
        || lower.contains("resource busy")
    {
        FsError::PermissionDenied(format!("{path}: {stderr}"))
    } else if matches!(code, Some(126 | 127)) || lower.contains("executable file not found") {
        FsError::Runtime(RuntimeError::Other(format!(
            "deleting files needs `{tool}` in the sandbox's image: {stderr}"
        )))
    } else {
        FsError::Runtime(RuntimeError::Other(format!(
            "{tool} {path} failed (exit {}): {stderr}",
            code.map_or_else(|| "unknown".to_owned(), |c| c.to_string())
        )))
    }
}

#[async_trait]
impl Files for DockerRuntime {
    async fn stat_path(&self, id: &SandboxId, path: &SandboxPath) -> FsResult<PathStat> {
        self.stat_path_impl(id, path).await
    }

    async fn read_archive(&self, id: &SandboxId, path: &SandboxPath) -> FsResult<ArchiveStream> {
        self.read_archive_impl(id, path).await
    }

    async fn write_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
        archive: ArchiveUpload,
    ) -> FsResult<()> {
        self.write_archive_impl(id, dir, archive).await
    }

    async fn delete_path(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
        recursive: bool,
    ) -> FsResult<()> {
        self.delete_path_impl(id, path, recursive).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_are_scrubbed() {
        assert_eq!(
            scrub_host_paths(
                "lstat /var/lib/docker/overlay2/abc/merged/workspace/a/x: not a directory"
            ),
            "lstat /workspace/a/x: not a directory"
        );
        assert_eq!(
            scrub_host_paths(
                "open /var/lib/docker/volumes/agent-sandbox-x/_data/f: permission denied"
            ),
            "open /workspace/f: permission denied"
        );
        assert_eq!(
            scrub_host_paths("mkdir /var/lib/docker/overlay2/abc/merged: busy"),
            "mkdir /: busy"
        );
        assert_eq!(scrub_host_paths("plain message"), "plain message");
    }

    #[test]
    fn stat_headers_decode() {
        // As Docker 20.10 sends it for a symlink `/workspace/evil -> /`.
        let h = "eyJuYW1lIjoiZXZpbCIsInNpemUiOjEsIm1vZGUiOjEzNDIxODIzOSwibXRpbWUiOiIyMDI2LTExLTI1VDIxOjQ2OjAyLjEzODYwMDIwNloiLCJsaW5rVGFyZ2V0IjoiLyJ9";
        let s = DockerPathStat::decode(h).unwrap().into_stat();
        assert_eq!(s.name, "evil");
        assert_eq!(s.kind, FileKind::Symlink);
        assert_eq!(s.mode, 0o777);
        assert_eq!(s.resolved_target.as_deref(), Some("/"));
        assert!(s.modified_at.is_some());
        assert!(DockerPathStat::decode("not base64!").is_err());
    }

    #[test]
    fn delete_failures_are_classified() {
        let p = SandboxPath::parse_field("/workspace/d", "path").unwrap();
        assert!(matches!(
            delete_failure(
                &p,
                "rmdir",
                Some(1),
                "rmdir: '/workspace/d': Directory not empty"
            ),
            FsError::NotEmpty(_)
        ));
        assert!(matches!(
            delete_failure(
                &p,
                "rm",
                Some(1),
                "rm: can't remove '/workspace/d': Read-only file system"
            ),
            FsError::PermissionDenied(_)
        ));
        let e = delete_failure(
            &p,
            "rm",
            Some(127),
            "exec: \"rm\": executable file not found in $PATH",
        );
        assert!(e.to_string().contains("needs `rm`"), "{e}");
    }
}
