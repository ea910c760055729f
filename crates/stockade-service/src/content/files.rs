//! File operations on sandboxes over the runtime's tar streams:
//! reading a file or listing a directory out of an archive, building the
//! archive of a file write, and re-packing uploaded archives (tar or tar.gz)
//! with their entries checked and sizes limited while they stream.

use std::ffi::OsStr;
use std::io::{self, BufRead, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::{stream, Stream, StreamExt};
use stockade_api::files::format_mode;
use stockade_api::{FileEntry, FileType};
use stockade_core::{human_bytes, SandboxId, SandboxPath};
use stockade_runtime::{ArchiveStream, ArchiveUpload, FileKind, FsError};
use tokio::sync::{mpsc, oneshot};
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// A directory listing returns at most this many entries (`truncated` says so).
pub const MAX_LIST_ENTRIES: usize = 10_000;
/// How many symlinks a read follows before giving up.
const MAX_SYMLINK_HOPS: usize = 8;
/// Chunk size of streamed file content and of re-packed archives.
const CHUNK: usize = 64 * 1024;
/// After a 413, the rest of the request body is read and dropped (at most
/// this much, for at most [`DRAIN_TIME`]), so that the client, still
/// sending, gets to read the answer instead of a connection reset.
const DRAIN_BYTES: u64 = 64 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// A request body as a stream of chunks.
pub type BodyStream = Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

/// Maps a runtime file error to the API's.
pub fn fs_error(e: FsError, id: &SandboxId) -> ServiceError {
    match e {
        FsError::NotFound(p) => {
            ServiceError::NotFound(format!("No such file or directory in the sandbox: {p}"))
        }
        FsError::NotADirectory(p) => ServiceError::Conflict(format!("Not a directory: {p}")),
        FsError::NotEmpty(p) => ServiceError::Conflict(format!(
            "Directory not empty: {p}; pass recursive=true to delete it with its contents"
        )),
        FsError::PermissionDenied(m) => {
            ServiceError::Forbidden(format!("Permission denied in the sandbox: {m}"))
        }
        FsError::NotRunning => ServiceError::SandboxUnavailable(format!(
            "Sandbox {id} is not running: start it to delete files (reading and writing work on a stopped sandbox)"
        )),
        // The archive's own content is the caller's input: a 400.
        e @ FsError::ArchiveRefused(_) => ServiceError::field("body", e.to_string()),
        FsError::Runtime(e) => e.into(),
    }
}

pub fn too_large(limit: u64) -> ServiceError {
    ServiceError::PayloadTooLarge(format!(
        "The upload is larger than this server's limit of {limit} bytes ({}); the limit is the server's max_file_bytes",
        human_bytes(limit)
    ))
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::File,
        FileKind::Dir => FileType::Dir,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Other => FileType::Other,
    }
}

fn tar_type(kind: tar::EntryType) -> FileType {
    match kind {
        tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::Link => {
            FileType::File
        }
        tar::EntryType::Directory => FileType::Dir,
        tar::EntryType::Symlink => FileType::Symlink,
        _ => FileType::Other,
    }
}

fn tar_time(header: &tar::Header) -> Option<DateTime<Utc>> {
    let secs = i64::try_from(header.mtime().ok()?).ok()?;
    DateTime::from_timestamp(secs, 0)
}

/// The metadata of a path, as `GET …/files/stat` shows it.
pub fn entry_from_stat(
    path: &SandboxPath,
    stat: &stockade_runtime::PathStat,
    link_target: Option<String>,
) -> FileEntry {
    FileEntry {
        name: path.file_name().unwrap_or("/").to_owned(),
        path: path.to_string(),
        file_type: file_type(stat.kind),
        size: stat.size,
        mode: format_mode(stat.mode),
        modified_at: stat.modified_at,
        link_target,
    }
}

/// What to take out of an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Only the first entry's header.
    Header,
    /// A file's bytes, or a directory's entries.
    Content,
}

/// What the path of an archive turned out to be.
pub enum Opened {
    /// A regular file; with [`Want::Content`] its bytes as they arrive.
    File {
        size: u64,
        mode: u32,
        modified_at: Option<DateTime<Utc>>,
        body: ArchiveStream,
    },
    /// A directory; with [`Want::Content`] its entries (not recursive).
    Dir {
        entries: Vec<FileEntry>,
        truncated: bool,
    },
    Symlink {
        /// As stored (what `readlink` prints).
        target: String,
    },
    /// A device, FIFO or socket.
    Other,
}

/// A file operation's outcome in sandbox `id`, its error as [`fs_error`] says it.
fn in_sandbox<T>(id: &SandboxId, outcome: Result<T, FsError>) -> ServiceResult<T> {
    outcome.map_err(|e| fs_error(e, id))
}

/// Opens the archive of `path` and looks at its first entry: the path itself.
pub async fn open(
    svc: &Service,
    id: &SandboxId,
    path: &SandboxPath,
    want: Want,
) -> ServiceResult<Opened> {
    let archive = in_sandbox(id, svc.runtime_of(id).await?.read_archive(id, path).await)?;
    let reader = SyncIoBridge::new(StreamReader::new(archive));
    let (first_tx, first_rx) = oneshot::channel();
    let dir = path.clone();
    tokio::task::spawn_blocking(move || parse_archive(reader, &dir, want, first_tx));
    match first_rx.await {
        Ok(Ok(opened)) => Ok(opened),
        Ok(Err(message)) => Err(ServiceError::Docker(format!(
            "Could not read {path} from the sandbox: {message}"
        ))),
        Err(_) => Err(ServiceError::Internal(format!(
            "Reading {path} from the sandbox stopped unexpectedly"
        ))),
    }
}

/// Like [`open`], but a symlink at `path` is followed (inside the sandbox:
/// the engine resolves it) to what it points at.
pub async fn open_following(
    svc: &Service,
    id: &SandboxId,
    path: &SandboxPath,
    want: Want,
) -> ServiceResult<Opened> {
    let mut current = path.clone();
    for _ in 0..MAX_SYMLINK_HOPS {
        let opened = match open(svc, id, &current, want).await {
            Err(ServiceError::NotFound(_)) if &current != path => {
                return Err(ServiceError::NotFound(format!(
                    "No such file or directory in the sandbox: {path} (a symlink to {current}, which does not exist)"
                )))
            }
            other => other?,
        };
        let Opened::Symlink { .. } = opened else {
            return Ok(opened);
        };
        current = resolve_symlink(svc, id, &current).await?;
    }
    Err(ServiceError::field(
        "path",
        format!("{path}: too many levels of symbolic links"),
    ))
}

/// Where the symlink at `path` finally points, as the engine resolves it.
pub async fn resolve_symlink(
    svc: &Service,
    id: &SandboxId,
    path: &SandboxPath,
) -> ServiceResult<SandboxPath> {
    let stat = in_sandbox(id, svc.runtime_of(id).await?.stat_path(id, path).await)?;
    let target = stat.resolved_target.ok_or_else(|| {
        ServiceError::NotFound(format!(
            "No such file or directory in the sandbox: {path} (a symlink that resolves to nothing)"
        ))
    })?;
    SandboxPath::parse_field(&target, "path").map_err(|_| {
        ServiceError::NotFound(format!(
            "No such file or directory in the sandbox: {path} (a symlink to {target})"
        ))
    })
}

/// Reads the archive of `dir` on a blocking thread: sends what its first
/// entry is through `first`, then (files) streams the content.
fn parse_archive<R: Read>(
    reader: R,
    path: &SandboxPath,
    want: Want,
    first: oneshot::Sender<Result<Opened, String>>,
) {
    let mut archive = tar::Archive::new(reader);
    let mut entries = match archive.entries() {
        Ok(e) => e,
        Err(e) => {
            let _ = first.send(Err(e.to_string()));
            return;
        }
    };
    let mut entry = match entries.next() {
        Some(Ok(entry)) => entry,
        Some(Err(e)) => {
            let _ = first.send(Err(e.to_string()));
            return;
        }
        None => {
            let _ = first.send(Err("the engine sent an empty archive".into()));
            return;
        }
    };
    let header = entry.header().clone();
    let mode = header.mode().unwrap_or(0) & 0o7777;
    let modified_at = tar_time(&header);
    match header.entry_type() {
        tar::EntryType::Regular | tar::EntryType::Continuous => {
            let size = entry.size();
            if want == Want::Header {
                let _ = first.send(Ok(Opened::File {
                    size,
                    mode,
                    modified_at,
                    body: Box::pin(stream::empty()),
                }));
                return;
            }
            let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
            let body: ArchiveStream = Box::pin(stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            }));
            if first
                .send(Ok(Opened::File {
                    size,
                    mode,
                    modified_at,
                    body,
                }))
                .is_err()
            {
                return;
            }
            let mut buf = vec![0u8; CHUNK];
            loop {
                match entry.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        // The client went away: stop reading.
                        if tx
                            .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                }
            }
        }
        tar::EntryType::Directory => {
            if want == Want::Header {
                let _ = first.send(Ok(Opened::Dir {
                    entries: Vec::new(),
                    truncated: false,
                }));
                return;
            }
            let root = String::from_utf8_lossy(&entry.path_bytes())
                .trim_end_matches('/')
                .to_owned();
            drop(entry);
            let result = list_children(&mut entries, &root, path, &first);
            let _ =
                first.send(result.map(|(entries, truncated)| Opened::Dir { entries, truncated }));
        }
        tar::EntryType::Symlink => {
            let target = entry
                .link_name_bytes()
                .map(|t| String::from_utf8_lossy(&t).into_owned())
                .unwrap_or_default();
            let _ = first.send(Ok(Opened::Symlink { target }));
        }
        _ => {
            let _ = first.send(Ok(Opened::Other));
        }
    }
}

/// The direct children of the archive's root entry `root`.
fn list_children<R: Read>(
    entries: &mut tar::Entries<'_, R>,
    root: &str,
    dir: &SandboxPath,
    first: &oneshot::Sender<Result<Opened, String>>,
) -> Result<(Vec<FileEntry>, bool), String> {
    let prefix = format!("{root}/");
    let mut children: Vec<FileEntry> = Vec::new();
    let mut truncated = false;
    for (n, entry) in entries.enumerate() {
        // Nobody waits for the listing any more.
        if n % 256 == 0 && first.is_closed() {
            return Err("the request was cancelled".into());
        }
        let entry = entry.map_err(|e| e.to_string())?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let rest = rest.trim_end_matches('/');
        if rest.is_empty() || rest.contains('/') {
            continue;
        }
        if children.len() >= MAX_LIST_ENTRIES {
            truncated = true;
            break;
        }
        let header = entry.header();
        let kind = header.entry_type();
        let mut size = if kind.is_file() { entry.size() } else { 0 };
        if kind == tar::EntryType::Link {
            // A second name of a file listed before: take its size.
            let target = entry
                .link_name_bytes()
                .map(|t| String::from_utf8_lossy(&t).into_owned())
                .unwrap_or_default();
            if let Some(first_name) = target.strip_prefix(&prefix) {
                size = children
                    .iter()
                    .find(|c| c.name == first_name)
                    .map_or(0, |c| c.size);
            }
        }
        children.push(FileEntry {
            name: rest.to_owned(),
            path: dir.child(rest).to_string(),
            file_type: tar_type(kind),
            size,
            mode: format_mode(header.mode().unwrap_or(0)),
            modified_at: tar_time(header),
            link_target: (kind == tar::EntryType::Symlink)
                .then(|| {
                    entry
                        .link_name_bytes()
                        .map(|t| String::from_utf8_lossy(&t).into_owned())
                })
                .flatten(),
        });
    }
    children.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((children, truncated))
}

/// The header block(s) of one tar entry (GNU long-name blocks included)
/// for `size` bytes of content that the caller streams after it.
fn entry_header(
    path: &[u8],
    kind: tar::EntryType,
    size: u64,
    mode: u32,
    mtime: u64,
) -> io::Result<Vec<u8>> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_mtime(mtime);
    header.set_uid(0);
    header.set_gid(0);
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_data(&mut header, Path::new(OsStr::from_bytes(path)), io::empty())?;
    // The builder's drop writes the end-of-archive blocks into the emptied
    // buffer, which is thrown away.
    Ok(std::mem::take(builder.get_mut()))
}

/// The zero padding after `size` bytes of content.
fn padding(size: u64) -> usize {
    let rem = (size % 512) as usize;
    if rem == 0 {
        0
    } else {
        512 - rem
    }
}

/// The directory entries for `missing` (components below the existing
/// directory the archive is unpacked into), outermost first.
fn missing_dir_headers(missing: &[String], mtime: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    for depth in 1..=missing.len() {
        let path = missing[..depth].join("/");
        out.extend(entry_header(
            path.as_bytes(),
            tar::EntryType::Directory,
            0,
            0o755,
            mtime,
        )?);
    }
    Ok(out)
}

/// A request body problem noticed while the archive streams to the engine.
pub type Failure = Arc<Mutex<Option<ServiceError>>>;

fn fail(slot: &Failure, e: ServiceError) {
    let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        *guard = Some(e);
    }
}

pub fn take_failure(slot: &Failure) -> Option<ServiceError> {
    slot.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// The archive of one file write: the missing parent directories, then
/// `name` with exactly `size` bytes from `body`. A body that fails, ends
/// early or runs long ends the archive mid-entry (the engine then refuses
/// it) and is reported in `failure`.
pub fn file_archive(
    missing: &[String],
    name: &str,
    size: u64,
    mode: u32,
    body: BodyStream,
    failure: Failure,
) -> ServiceResult<ArchiveUpload> {
    let now = u64::try_from(Utc::now().timestamp()).unwrap_or(0);
    let mut head = missing_dir_headers(missing, now)
        .map_err(|e| ServiceError::Internal(format!("could not build the archive: {e}")))?;
    let mut path = missing.join("/");
    if !path.is_empty() {
        path.push('/');
    }
    path.push_str(name);
    head.extend(
        entry_header(path.as_bytes(), tar::EntryType::Regular, size, mode, now)
            .map_err(|e| ServiceError::Internal(format!("could not build the archive: {e}")))?,
    );
    let mut tail = vec![0u8; padding(size)];
    tail.extend_from_slice(&[0u8; 1024]);

    enum Phase {
        Head(Bytes),
        Body,
        Tail(Bytes),
        Done,
    }
    struct State {
        phase: Phase,
        body: BodyStream,
        remaining: u64,
        failure: Failure,
    }
    let svc = State {
        phase: Phase::Head(Bytes::from(head)),
        body,
        remaining: size,
        failure,
    };
    let tail = Bytes::from(tail);
    Ok(Box::pin(stream::unfold(svc, move |mut st| {
        let tail = tail.clone();
        async move {
            loop {
                match std::mem::replace(&mut st.phase, Phase::Done) {
                    Phase::Head(bytes) => {
                        st.phase = Phase::Body;
                        return Some((bytes, st));
                    }
                    Phase::Body if st.remaining == 0 => st.phase = Phase::Tail(tail.clone()),
                    Phase::Body => match st.body.next().await {
                        Some(Ok(chunk)) => {
                            let len = chunk.len() as u64;
                            if len > st.remaining {
                                fail(
                                    &st.failure,
                                    ServiceError::field(
                                        "body",
                                        "the body is longer than its Content-Length",
                                    ),
                                );
                                return None;
                            }
                            st.remaining -= len;
                            st.phase = Phase::Body;
                            if !chunk.is_empty() {
                                return Some((chunk, st));
                            }
                        }
                        Some(Err(e)) => {
                            fail(&st.failure, body_error(&e));
                            return None;
                        }
                        None => {
                            fail(
                                &st.failure,
                                ServiceError::field(
                                    "body",
                                    "the body ended before its Content-Length",
                                ),
                            );
                            return None;
                        }
                    },
                    Phase::Tail(bytes) => return Some((bytes, st)),
                    Phase::Done => return None,
                }
            }
        }
    })))
}

/// A request body that could not be read (or was cut by [`limit_body`]).
fn body_error(e: &io::Error) -> ServiceError {
    ServiceError::field("body", format!("could not read the request body: {e}"))
}

/// What [`limit_body`] saw go wrong with a request body.
#[derive(Debug, Default)]
pub struct BodyWatch {
    /// More than the limit arrived.
    pub too_large: AtomicBool,
    /// Reading the body failed (e.g. the client went away).
    pub failed: AtomicBool,
}

/// Passes `body` through while it stays within `limit` bytes. Past it,
/// `watch.too_large` is set, the rest is drained (bounded) and the stream
/// fails; a failing body sets `watch.failed`.
pub fn limit_body(body: BodyStream, limit: u64, watch: Arc<BodyWatch>) -> BodyStream {
    Box::pin(stream::unfold(
        (body, 0u64, false),
        move |(mut body, mut seen, done)| {
            let watch = watch.clone();
            async move {
                if done {
                    return None;
                }
                match body.next().await {
                    None => None,
                    Some(Err(e)) => {
                        watch.failed.store(true, Ordering::SeqCst);
                        Some((Err(e), (body, seen, true)))
                    }
                    Some(Ok(chunk)) => {
                        seen += chunk.len() as u64;
                        if seen <= limit {
                            return Some((Ok(chunk), (body, seen, false)));
                        }
                        watch.too_large.store(true, Ordering::SeqCst);
                        drain(&mut body).await;
                        Some((
                            Err(io::Error::other("the upload is larger than the limit")),
                            (body, seen, true),
                        ))
                    }
                }
            }
        },
    ))
}

/// Reads and drops what is left of a body, within [`DRAIN_BYTES`] and [`DRAIN_TIME`].
pub async fn drain(body: &mut BodyStream) {
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        let mut dropped = 0u64;
        while let Some(Ok(chunk)) = body.next().await {
            dropped += chunk.len() as u64;
            if dropped > DRAIN_BYTES {
                break;
            }
        }
    })
    .await;
}

/// Writes a body of unknown length to a temporary file (at most `limit`
/// bytes, else 413) and returns it with its length.
pub async fn spool(body: BodyStream, limit: u64) -> ServiceResult<(tokio::fs::File, u64)> {
    use tokio::io::{AsyncSeekExt, AsyncWriteExt};
    let file = tokio::task::spawn_blocking(tempfile::tempfile)
        .await
        .map_err(|e| ServiceError::Internal(format!("could not make a temporary file: {e}")))?
        .map_err(|e| ServiceError::Internal(format!("could not make a temporary file: {e}")))?;
    let mut file = tokio::fs::File::from_std(file);
    let spool_failed =
        |e: std::io::Error| ServiceError::Internal(format!("could not spool the upload: {e}"));
    let watch = Arc::new(BodyWatch::default());
    let mut body = limit_body(body, limit, watch.clone());
    let mut size = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(_) if watch.too_large.load(Ordering::SeqCst) => return Err(too_large(limit)),
            Err(e) => return Err(body_error(&e)),
        };
        size += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(spool_failed)?;
    }
    file.flush().await.map_err(spool_failed)?;
    file.rewind().await.map_err(spool_failed)?;
    Ok((file, size))
}

/// What a re-packed upload held.
#[derive(Debug, Default)]
pub struct Repacked {
    pub entries: u64,
    pub bytes: u64,
}

// --- The unpack ceiling ---

/// The ceiling as messages show it: `4096 MiB`, or bytes when it is not a
/// whole number of MiB.
pub fn describe_limit(limit: u64) -> String {
    if limit > 0 && limit & ((1 << 20) - 1) == 0 {
        format!("{} MiB", limit >> 20)
    } else {
        format!("{limit} bytes")
    }
}

/// The 413 of an archive (`what`: "The archive", "The sandbox's
/// /workspace" …) that unpacks to more than the ceiling.
pub fn unpacked_too_large(what: &str, limit: u64) -> ServiceError {
    ServiceError::PayloadTooLarge(format!(
        "{what} is too large: unpacked size exceeds the limit of {} (the server's --max-unpacked-mb)",
        describe_limit(limit)
    ))
}

/// The most bytes a decompressed tar stream may have when its files may
/// unpack to `limit`: room for headers besides. Only archives of endless
/// headers (a gzip of nothing but metadata) reach it.
pub fn unpacked_stream_bound(limit: u64) -> u64 {
    limit.saturating_add(limit / 4).saturating_add(1 << 20)
}

/// What an entry writes to disk when unpacked: a regular file's size, a
/// sparse file's full size (GNU sparse entries, and the PAX sparse formats
/// whose header says less than the file holds); nothing for the others.
pub fn unpacked_size<R: Read>(entry: &mut tar::Entry<'_, R>) -> io::Result<u64> {
    let kind = entry.header().entry_type();
    if !matches!(
        kind,
        tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse
    ) {
        return Ok(0);
    }
    // The tar crate gives a GNU sparse entry's full size already.
    let mut size = entry.size();
    if let Some(extensions) = entry.pax_extensions()? {
        for ext in extensions {
            let ext = ext?;
            if matches!(ext.key_bytes(), b"GNU.sparse.realsize" | b"GNU.sparse.size") {
                let full = ext
                    .value()
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "a sparse file without a size")
                    })?;
                size = size.max(full);
            }
        }
    }
    Ok(size)
}

/// Why [`meter`] stopped reading an archive.
#[derive(Debug)]
pub enum MeterError {
    /// Its files unpack to more than the ceiling.
    TooLarge,
    /// Not a tar or tar.gz, or a broken one (or its source failed).
    Invalid(String),
}

/// Reads a tar stream (gzip-compressed or not) entry by entry, counting what
/// its files unpack to, and stops as soon as that passes `limit`. With
/// `forward`, the uncompressed tar goes on into it as it is read, ended by
/// two zero blocks when the archive is whole. Returns the unpacked size.
fn meter<R: Read>(
    input: R,
    limit: u64,
    forward: Option<mpsc::Sender<io::Result<Bytes>>>,
) -> Result<u64, MeterError> {
    let over = Arc::new(AtomicBool::new(false));
    let invalid = |e: io::Error, over: &AtomicBool| {
        if over.load(Ordering::SeqCst) {
            MeterError::TooLarge
        } else {
            MeterError::Invalid(e.to_string())
        }
    };
    let mut input = io::BufReader::with_capacity(CHUNK, input);
    let gzip = input
        .fill_buf()
        .map_err(|e| MeterError::Invalid(e.to_string()))?
        .starts_with(&[0x1f, 0x8b]);
    let decoded: Box<dyn Read> = if gzip {
        Box::new(flate2::bufread::MultiGzDecoder::new(input))
    } else {
        Box::new(input)
    };
    let mut tee = Tee {
        inner: LimitedReader {
            inner: decoded,
            left: unpacked_stream_bound(limit),
            over: over.clone(),
        },
        forward,
        buf: Vec::with_capacity(CHUNK),
    };
    let mut total = 0u64;
    {
        let mut archive = tar::Archive::new(&mut tee);
        let entries = archive.entries().map_err(|e| invalid(e, &over))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| invalid(e, &over))?;
            total = total.saturating_add(unpacked_size(&mut entry).map_err(|e| invalid(e, &over))?);
            if total > limit {
                return Err(MeterError::TooLarge);
            }
        }
    }
    tee.finish().map_err(|e| invalid(e, &over))?;
    Ok(total)
}

/// Passes what its reader reads on into a channel, in chunks.
struct Tee<R> {
    inner: R,
    forward: Option<mpsc::Sender<io::Result<Bytes>>>,
    buf: Vec<u8>,
}

impl<R> Tee<R> {
    fn send(&mut self) -> io::Result<()> {
        let Some(tx) = &self.forward else {
            return Ok(());
        };
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        tx.blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the reader went away"))
    }

    /// The end of a whole archive: two zero blocks, whatever the source had.
    fn finish(&mut self) -> io::Result<()> {
        if self.forward.is_some() {
            self.buf.extend_from_slice(&[0u8; 1024]);
        }
        self.send()
    }
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        if self.forward.is_some() {
            self.buf.extend_from_slice(&out[..n]);
            if self.buf.len() >= CHUNK {
                self.send()?;
            }
        }
        Ok(n)
    }
}

/// An archive stream held to the unpack ceiling while it streams: the
/// uncompressed tar of `archive` (tar or tar.gz), which fails as soon as
/// its files unpack to more than `limit` (setting the returned flag) or
/// the archive is broken. The consumer (the engine) then sees a failed
/// stream and unpacks nothing more.
pub fn meter_archive(
    archive: stockade_runtime::ByteStream,
    limit: u64,
) -> (stockade_runtime::ByteStream, Arc<AtomicBool>) {
    let over = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(8);
    let reader = SyncIoBridge::new(StreamReader::new(archive));
    let flag = over.clone();
    let errors = tx.clone();
    tokio::task::spawn_blocking(move || {
        let failure = match meter(reader, limit, Some(tx)) {
            Ok(_) => return,
            Err(MeterError::TooLarge) => {
                flag.store(true, Ordering::SeqCst);
                io::Error::other(format!(
                    "unpacked size exceeds the limit of {}",
                    describe_limit(limit)
                ))
            }
            Err(MeterError::Invalid(m)) => io::Error::new(io::ErrorKind::InvalidData, m),
        };
        let _ = errors.blocking_send(Err(failure));
    });
    let stream = Box::pin(stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    (stream, over)
}

/// Reads `archive` (tar or tar.gz) to its end, or to the point its files
/// unpack to more than `limit`, and returns what they unpack to.
pub async fn measure_archive(
    archive: stockade_runtime::ByteStream,
    limit: u64,
) -> Result<u64, MeterError> {
    let reader = SyncIoBridge::new(StreamReader::new(archive));
    tokio::task::spawn_blocking(move || meter(reader, limit, None))
        .await
        .map_err(|e| MeterError::Invalid(format!("measuring the archive failed: {e}")))?
}

/// Blocking `Write` into the channel that feeds the engine's upload.
struct ChannelWriter {
    tx: mpsc::Sender<Bytes>,
    buf: Vec<u8>,
    closed: Arc<AtomicBool>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        self.tx.blocking_send(chunk).map_err(|_| {
            self.closed.store(true, Ordering::SeqCst);
            io::Error::new(io::ErrorKind::BrokenPipe, "the engine stopped reading")
        })
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// Counts what is read and fails past `limit`, setting `over`.
struct LimitedReader<R> {
    inner: R,
    left: u64,
    over: Arc<AtomicBool>,
}

impl<R: Read> Read for LimitedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            self.over.store(true, Ordering::SeqCst);
            return Err(io::Error::other(
                "the archive unpacks to more than the limit",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// One archive entry's path made relative to the target directory: a
/// leading `/` or `./` is dropped (as GNU tar does), `..` is refused.
/// `None` for the target directory itself.
fn entry_path(raw: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                return Err(format!(
                    "entry '{}' leaves the target directory (`..`)",
                    String::from_utf8_lossy(raw)
                ))
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    Ok(Some(parts.join(&b'/')))
}

/// Re-packs an uploaded tar (or tar.gz, told by its magic bytes) into
/// `sink`: entries below the missing directories `missing`, checked one by
/// one, the unpacked size limited to `limit`. Runs on a blocking thread.
fn repack<R: Read, W: Write>(
    body: R,
    missing: &[String],
    limit: u64,
    sink: &mut tar::Builder<W>,
    over: Arc<AtomicBool>,
) -> Result<Repacked, io::Error> {
    let mut body = io::BufReader::with_capacity(CHUNK, body);
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < 2 {
        let n = body.read(&mut magic[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    if got == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the body is empty: send a tar or tar.gz archive",
        ));
    }
    let head = io::Cursor::new(magic[..got].to_vec());
    let raw = head.chain(body);
    let unpacked: Box<dyn Read> = if got == 2 && magic == [0x1f, 0x8b] {
        Box::new(flate2::read::MultiGzDecoder::new(raw))
    } else {
        Box::new(raw)
    };
    // File content is held to `limit` exactly, entry by entry, before an
    // entry is passed on; this looser bound on the whole unpacked stream only
    // stops archives of endless headers (a gzip of nothing but metadata).
    let reader = LimitedReader {
        inner: unpacked,
        left: unpacked_stream_bound(limit),
        over: over.clone(),
    };

    let now = u64::try_from(Utc::now().timestamp()).unwrap_or(0);
    let prefix: Vec<u8> = if missing.is_empty() {
        Vec::new()
    } else {
        format!("{}/", missing.join("/")).into_bytes()
    };
    sink.get_mut()
        .write_all(&missing_dir_headers(missing, now)?)?;

    let mut done = Repacked::default();
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        let raw_path = entry.path_bytes().into_owned();
        let rel =
            entry_path(&raw_path).map_err(|m| io::Error::new(io::ErrorKind::InvalidData, m))?;
        let Some(rel) = rel else {
            continue;
        };
        let mut path = prefix.clone();
        path.extend_from_slice(&rel);
        let path_ref = Path::new(OsStr::from_bytes(&path));
        let mut header = tar::Header::new_gnu();
        header.set_mode(entry.header().mode().unwrap_or(0o644) & 0o7777);
        header.set_mtime(entry.header().mtime().unwrap_or(now));
        header.set_uid(0);
        header.set_gid(0);
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.size();
                done.bytes += size;
                if done.bytes > limit {
                    over.store(true, Ordering::SeqCst);
                    return Err(io::Error::other(
                        "the archive unpacks to more than the limit",
                    ));
                }
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                sink.append_data(&mut header, path_ref, &mut entry)?;
            }
            tar::EntryType::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                sink.append_data(&mut header, path_ref, io::empty())?;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .map(|t| t.into_owned())
                    .unwrap_or_default();
                if target.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "symlink '{}' has no target",
                            String::from_utf8_lossy(&raw_path)
                        ),
                    ));
                }
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                sink.append_link(&mut header, path_ref, Path::new(OsStr::from_bytes(&target)))?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .map(|t| t.into_owned())
                    .unwrap_or_default();
                let target_rel = entry_path(&target)
                    .map_err(|m| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("hard link '{}': {m}", String::from_utf8_lossy(&raw_path)),
                        )
                    })?
                    .ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            "a hard link to the target directory itself",
                        )
                    })?;
                let mut target_path = prefix.clone();
                target_path.extend_from_slice(&target_rel);
                header.set_entry_type(tar::EntryType::Link);
                header.set_size(0);
                sink.append_link(
                    &mut header,
                    path_ref,
                    Path::new(OsStr::from_bytes(&target_path)),
                )?;
            }
            // Metadata a reader merges into the next entry.
            tar::EntryType::XGlobalHeader => continue,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "entry '{}' is a {} — uploads hold files, directories and links only",
                        String::from_utf8_lossy(&raw_path),
                        match other {
                            tar::EntryType::Char | tar::EntryType::Block => "device file",
                            tar::EntryType::Fifo => "FIFO",
                            tar::EntryType::GNUSparse => "sparse file",
                            _ => "entry of an unsupported type",
                        }
                    ),
                ));
            }
        }
        done.entries += 1;
    }
    sink.finish()?;
    sink.get_mut().flush()?;
    Ok(done)
}

/// Why re-packing an upload stopped.
#[derive(Debug)]
enum RepackError {
    /// Its files unpack to more than the ceiling.
    TooLarge,
    /// Not a tar/tar.gz, or an entry that may not be unpacked.
    Invalid(String),
    /// The engine stopped reading (its own error says why).
    SinkClosed,
    /// The temporary copy of the upload could not be read.
    Io(String),
}

/// Unpacks an uploaded tar/tar.gz `body` into `dir` (an existing directory)
/// below the missing directories `missing`.
///
/// The body (at most `max_file_bytes`) is kept in a temporary file and
/// read twice: first every entry is checked and what the files unpack to is
/// counted (stopping as soon as it passes the unpack ceiling), and
/// only an archive that passes is re-packed, on a blocking thread, while it
/// streams to the engine. So a refused archive leaves nothing in the sandbox.
pub async fn upload_archive(
    svc: &Service,
    id: &SandboxId,
    dir: &SandboxPath,
    missing: Vec<String>,
    body: BodyStream,
) -> ServiceResult<Repacked> {
    let limit = svc.config.max_unpacked_bytes;
    let (file, _) = spool(body, svc.config.max_file_bytes).await?;
    let file = file.into_std().await;
    let io_failed =
        |e: io::Error| ServiceError::Internal(format!("could not read the spooled upload: {e}"));

    // The check: the whole archive through a sink.
    let check_missing = missing.clone();
    let (checked, mut file) = tokio::task::spawn_blocking(move || {
        let over = Arc::new(AtomicBool::new(false));
        let mut sink = tar::Builder::new(io::sink());
        let result = repack(
            io::BufReader::new(&file),
            &check_missing,
            limit,
            &mut sink,
            over.clone(),
        );
        let checked = match result {
            Ok(r) => Ok(r),
            Err(_) if over.load(Ordering::SeqCst) => Err(RepackError::TooLarge),
            Err(e) => Err(RepackError::Invalid(e.to_string())),
        };
        (checked, file)
    })
    .await
    .map_err(|e| ServiceError::Internal(format!("the upload check failed: {e}")))?;
    match checked {
        Ok(_) => {}
        Err(RepackError::TooLarge) => return Err(unpacked_too_large("The archive", limit)),
        Err(e) => return Err(repack_failed(e)),
    }
    {
        use std::io::Seek;
        file.rewind().map_err(io_failed)?;
    }

    // The unpack: re-packed again, now into the engine.
    let rt = svc.runtime_of(id).await?;
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    let closed = Arc::new(AtomicBool::new(false));
    let writer = ChannelWriter {
        tx,
        buf: Vec::with_capacity(CHUNK),
        closed: closed.clone(),
    };
    let task = tokio::task::spawn_blocking(move || {
        let over = Arc::new(AtomicBool::new(false));
        let mut sink = tar::Builder::new(writer);
        let result = repack(
            io::BufReader::new(file),
            &missing,
            limit,
            &mut sink,
            over.clone(),
        );
        // Dropping the sink ends the stream: on error the engine sees a
        // truncated archive.
        drop(sink);
        match result {
            Ok(r) => Ok(r),
            Err(_) if over.load(Ordering::SeqCst) => Err(RepackError::TooLarge),
            Err(_) if closed.load(Ordering::SeqCst) => Err(RepackError::SinkClosed),
            Err(e) => Err(RepackError::Io(e.to_string())),
        }
    });
    let upload: ArchiveUpload = Box::pin(stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    }));
    let written = rt.write_archive(id, dir, upload).await;
    let repacked = task
        .await
        .map_err(|e| ServiceError::Internal(format!("the upload task failed: {e}")))?;
    match (repacked, written) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(RepackError::TooLarge), _) => Err(unpacked_too_large("The archive", limit)),
        (Err(e @ (RepackError::Invalid(_) | RepackError::Io(_))), _) => Err(repack_failed(e)),
        (_, Err(e)) => Err(fs_error(e, id)),
        (Err(RepackError::SinkClosed), Ok(())) => Err(ServiceError::Internal(
            "the engine stopped reading the archive but reported success".into(),
        )),
    }
}

fn repack_failed(e: RepackError) -> ServiceError {
    match e {
        RepackError::Invalid(m) => {
            ServiceError::field("body", format!("not a valid tar or tar.gz archive: {m}"))
        }
        RepackError::Io(m) => ServiceError::Internal(format!("could not read the upload: {m}")),
        RepackError::TooLarge => ServiceError::Internal("the archive is too large".into()),
        RepackError::SinkClosed => ServiceError::Internal("the engine stopped reading".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_paths_stay_below_the_target() {
        assert_eq!(entry_path(b"a/b").unwrap(), Some(b"a/b".to_vec()));
        assert_eq!(entry_path(b"./a//b/").unwrap(), Some(b"a/b".to_vec()));
        assert_eq!(
            entry_path(b"/etc/passwd").unwrap(),
            Some(b"etc/passwd".to_vec())
        );
        assert_eq!(entry_path(b"./").unwrap(), None);
        assert!(entry_path(b"../x").is_err());
        assert!(entry_path(b"a/../../x").is_err());
    }

    #[test]
    fn headers_and_padding_make_a_valid_archive() {
        let content = b"hello, world";
        let mut tar = missing_dir_headers(&["a".into(), "b".into()], 1).unwrap();
        let long = format!("a/b/{}", "n".repeat(150));
        tar.extend(
            entry_header(
                long.as_bytes(),
                tar::EntryType::Regular,
                content.len() as u64,
                0o600,
                1,
            )
            .unwrap(),
        );
        tar.extend_from_slice(content);
        tar.extend(vec![0u8; padding(content.len() as u64)]);
        tar.extend_from_slice(&[0u8; 1024]);
        let mut ar = tar::Archive::new(&tar[..]);
        let mut seen = Vec::new();
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let mut body = String::new();
            e.read_to_string(&mut body).unwrap();
            seen.push((
                e.path().unwrap().display().to_string(),
                e.header().mode().unwrap(),
                body,
            ));
        }
        assert_eq!(
            seen,
            vec![
                ("a".to_owned(), 0o755, String::new()),
                ("a/b".to_owned(), 0o755, String::new()),
                (long, 0o600, "hello, world".to_owned()),
            ]
        );
        assert_eq!(padding(512), 0);
        assert_eq!(padding(1), 511);
    }
}
