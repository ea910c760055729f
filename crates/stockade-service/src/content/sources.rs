//! Create sources: what a new sandbox's `/workspace`
//! (and for snapshots and forks its root filesystem) starts from.
//!
//! Every source becomes a tar stream that the runtime unpacks into the new
//! container before its main process starts:
//! - `git`: cloned on the server with the host's `git` (the image needs
//!   none), `--depth 1` unless the ref is a commit, then tarred.
//! - `tarball`: downloaded by the server (http/https), size-capped.
//! - `upload`: an archive sent earlier to `POST /uploads`, kept in the
//!   object store for [`SourceLimits::upload_ttl`], used once.
//! - `snapshot`: the snapshot's image plus its `/workspace` archive.
//! - `sandbox` (fork): a fresh internal snapshot's image plus the source's
//!   `/workspace`, streamed straight from its container.
//!
//! Downloaded and uploaded archives are checked before use (tar or tar.gz;
//! no absolute or `..` paths, no device files), so a corrupt archive fails
//! the create with a 422 and leaves nothing behind.
//!
//! One unpack ceiling holds for every source
//! (the configuration's `max_unpacked_bytes`): what the files
//! add up to is known before the create starts — counted in the checked
//! download, in the upload and the snapshot archive read once more, in the
//! fork's `/workspace` read once more, and for a clone from `git ls-tree`
//! before anything is checked out — and a source over it is a 413. The
//! archive the runtime unpacks is metered again while it streams
//! ([`crate::content::files::meter_archive`]), so it stops at the ceiling whatever
//! changed in between; the failed create is rolled back.
//!
//! The server fetches URLs on the user's behalf, so it never connects to an
//! internal address ([`crate::net::outbound`]): downloads resolve names
//! through the guarded resolver at every connection and redirect hop, and a
//! clone is pinned to the address that was checked (`http.curloptResolve`,
//! no redirects; a `git://` URL is rewritten to that address). Error
//! messages never contain what was fetched: no archive entry names, no
//! remote messages.

use std::io::Read;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::Url;
use stockade_api::SandboxSource;
use stockade_core::spec::SpecInput;
use stockade_core::{
    AccountId, Quota, Sandbox, SandboxId, SandboxSpec, Snapshot, SnapshotKind, StoredUsage,
    UploadId,
};
use stockade_runtime::{ByteStream, RuntimeError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{info, warn};

use crate::error::{ServiceError, ServiceResult};
use crate::sandbox::request::NewSandbox;
use crate::{access, content::snapshots, Service};
use stockade_core::error::error_chain;
use stockade_core::net::AddressPolicy;
use stockade_core::Scope;

/// The most entries an archive may hold.
const MAX_ENTRIES: u64 = 1_000_000;
/// How much of a failing git's stderr is kept for the error message.
const MAX_GIT_STDERR: u64 = 16 * 1024;

/// How much the server fetches on a user's behalf for a create source.
#[derive(Debug, Clone)]
pub struct SourceLimits {
    /// Largest archive (download or upload) and largest cloned repository
    /// (its `.git`), as fetched; what they unpack to is held to
    /// `max_unpacked_bytes` of the service configuration.
    pub max_archive_bytes: u64,
    /// A clone or download that takes longer fails.
    pub fetch_timeout: Duration,
    /// How long an upload waits to be used.
    pub upload_ttl: Duration,
    /// Internal addresses (loopback, private, link-local …) that sources and
    /// image registries may still reach; none by default.
    pub addresses: AddressPolicy,
}

impl Default for SourceLimits {
    fn default() -> Self {
        Self {
            max_archive_bytes: 1 << 30,
            fetch_timeout: Duration::from_secs(300),
            upload_ttl: Duration::from_secs(24 * 3600),
            addresses: AddressPolicy::default(),
        }
    }
}

/// A source made ready: the archive to unpack and what to do once the
/// create has finished.
pub struct PreparedSource {
    pub archive: ByteStream,
    pub after: AfterCreate,
}

/// Follow-up of a create with a source.
pub enum AfterCreate {
    Nothing,
    /// An upload is used once: removed when the create succeeded.
    ConsumeUpload(String),
    /// A fork's internal snapshot: released whatever the outcome. Dropping
    /// it unreleased (a cancelled create) releases it in the background.
    ReleaseSnapshot(Box<ForkSnapshot>),
}

/// A fork's internal snapshot, released when dropped if nobody did.
pub struct ForkSnapshot {
    svc: Service,
    snapshot: Option<Snapshot>,
}

impl ForkSnapshot {
    async fn release(mut self) {
        if let Some(s) = self.snapshot.take() {
            snapshots::release_fork_snapshot(&self.svc, s).await;
        }
    }
}

impl Drop for ForkSnapshot {
    fn drop(&mut self) {
        if let Some(s) = self.snapshot.take() {
            let svc = self.svc.clone();
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move { snapshots::release_fork_snapshot(&svc, s).await });
            }
        }
    }
}

/// Runs the follow-up of a finished create.
pub async fn finish(svc: &Service, after: AfterCreate, created: bool) {
    match after {
        AfterCreate::Nothing => {}
        AfterCreate::ConsumeUpload(key) => {
            if created {
                if let Err(e) = svc.blobs.delete(&key).await {
                    warn!(key, error = %e, "could not remove a used upload; it expires on its own");
                }
            }
        }
        AfterCreate::ReleaseSnapshot(s) => s.release().await,
    }
}

/// A source as the first look found it: checked, its records loaded and
/// its settings taken into the request, with the slow part (the clone,
/// the download, the archive read, the fork's capture) still to come in
/// [`fetch`].
pub enum Pending {
    Git {
        url: Url,
        git_ref: Option<String>,
    },
    Tarball {
        url: Url,
    },
    Upload {
        key: String,
    },
    Snapshot {
        key: String,
        workspace_bytes: Option<u64>,
    },
    Fork {
        from: Box<Sandbox>,
    },
}

/// Looks at `new.source` without fetching anything: every field of it is
/// checked, what it names is loaded under the caller's scope, and the
/// settings a snapshot or fork brings are written into `new.spec` (a
/// snapshot's image and captured environment; a fork's settings where the
/// request gives none). `None` without a source.
pub async fn look_up(
    svc: &Service,
    scope: &Scope,
    new: &mut NewSandbox,
) -> ServiceResult<Option<Pending>> {
    let Some(source) = &new.source else {
        return Ok(None);
    };
    let limits = &svc.config.sources;
    let pending = match source {
        SandboxSource::Git { url, git_ref } => Pending::Git {
            url: parse_url(url, &["https", "http", "git"], limits).await?,
            git_ref: git_ref
                .as_deref()
                .map(|r| parse_git_ref(r, "source.ref"))
                .transpose()?,
        },
        SandboxSource::Tarball { url } => Pending::Tarball {
            url: parse_url(url, &["https", "http"], limits).await?,
        },
        SandboxSource::Upload { upload_id } => {
            let id = UploadId::parse_field(upload_id, "source.uploadId")?;
            let key = upload_key(&scope.account_id, &id);
            let meta = svc.blobs.head(&key).await?.ok_or_else(|| {
                ServiceError::NotFound(format!("Upload {id} not found (or already used)"))
            })?;
            if expired(meta.last_modified, limits.upload_ttl) {
                let _ = svc.blobs.delete(&key).await;
                return Err(ServiceError::NotFound(format!(
                    "Upload {id} has expired; upload the archive again"
                )));
            }
            Pending::Upload { key }
        }
        SandboxSource::Snapshot { snapshot_id } => {
            refuse_image_fields(&new.spec, "snapshot")?;
            let snapshot = snapshots::load(svc, scope, snapshot_id, "source.snapshotId").await?;
            if !snapshot.is_usable() {
                return Err(ServiceError::Conflict(format!(
                    "Snapshot {} is {}; only a READY snapshot can be restored",
                    snapshot.id, snapshot.status
                )));
            }
            let key = snapshot.blob_key.clone().ok_or_else(|| {
                ServiceError::Internal(format!("snapshot {} has no workspace archive", snapshot.id))
            })?;
            new.spec.docker_image = Some(snapshot.image_ref.clone());
            // The image was committed with the environment blanked: the
            // values come from the record, under what the request sets.
            if let Some(captured) = &snapshot.environment_vars {
                let mut env = captured.clone();
                env.extend(new.spec.environment_vars.take().unwrap_or_default());
                new.spec.environment_vars = Some(env);
            }
            Pending::Snapshot {
                key,
                workspace_bytes: snapshot.workspace_bytes,
            }
        }
        SandboxSource::Sandbox { sandbox_id } => {
            refuse_image_fields(&new.spec, "sandbox")?;
            let id = SandboxId::parse_field(sandbox_id, "source.sandboxId")?;
            let from = access::load(svc, scope, id.as_str()).await?;
            snapshots::ensure_capturable(&from)?;
            inherit(&mut new.spec, &from.spec);
            Pending::Fork {
                from: Box::new(from),
            }
        }
    };
    Ok(Some(pending))
}

/// Fetches what [`look_up`] found: the archive the runtime unpacks (held
/// to the unpack ceiling however it arrives), and for a fork the image of
/// its fresh internal snapshot, which `sb` then runs.
pub async fn fetch(
    svc: &Service,
    scope: &Scope,
    pending: Pending,
    sb: &mut Sandbox,
) -> ServiceResult<PreparedSource> {
    let limits = &svc.config.sources;
    let ceiling = svc.config.max_unpacked_bytes;
    let (archive, after) = match pending {
        Pending::Git { url, git_ref } => (
            clone_as_tar(limits, ceiling, &url, git_ref.as_deref()).await?,
            AfterCreate::Nothing,
        ),
        Pending::Tarball { url } => (
            download_archive(limits, ceiling, &url).await?,
            AfterCreate::Nothing,
        ),
        Pending::Upload { key } => {
            // Checked when it was uploaded; counted again under today's ceiling.
            let (_, counted) = svc.blobs.get_stream(&key).await?;
            within_ceiling(counted, ceiling, "The uploaded archive").await?;
            let (_, archive) = svc.blobs.get_stream(&key).await?;
            (archive, AfterCreate::ConsumeUpload(key))
        }
        Pending::Snapshot {
            key,
            workspace_bytes,
        } => {
            // An archive no larger than the ceiling cannot unpack to more.
            if workspace_bytes.is_none_or(|b| b > ceiling) {
                let (_, counted) = svc.blobs.get_stream(&key).await?;
                within_ceiling(counted, ceiling, "The snapshot's /workspace").await?;
            }
            (svc.blobs.get_stream(&key).await?.1, AfterCreate::Nothing)
        }
        Pending::Fork { from } => {
            // Counted before anything is made: a sparse file can make a
            // tiny disk hold a huge /workspace.
            let from_rt = svc.runtime_for(&from).await?;
            let counted = from_rt
                .export_workspace(&from.id)
                .await
                .map_err(|e| no_container(e, &from.id))?;
            within_ceiling(counted, ceiling, "The sandbox's /workspace").await?;
            let snapshot = snapshots::capture(svc, scope, &from, None, SnapshotKind::Fork).await?;
            sb.spec.docker_image = snapshot.image_ref.clone();
            let guard = ForkSnapshot {
                svc: svc.clone(),
                snapshot: Some(snapshot),
            };
            match from_rt.export_workspace(&from.id).await {
                Ok(archive) => (archive, AfterCreate::ReleaseSnapshot(Box::new(guard))),
                Err(e) => {
                    guard.release().await;
                    return Err(no_container(e, &from.id));
                }
            }
        }
    };
    // Whatever the source, the runtime unpacks it under the ceiling.
    Ok(PreparedSource {
        archive: crate::content::files::meter_archive(archive, ceiling).0,
        after,
    })
}

fn no_container(e: RuntimeError, id: &SandboxId) -> ServiceError {
    match e {
        RuntimeError::NotFound(_) => ServiceError::Conflict(format!(
            "The container of sandbox {id} no longer exists: nothing to fork"
        )),
        other => other.into(),
    }
}

/// Reads `archive` through and fails with a 413 when its files unpack to
/// more than `ceiling` (`what` names it in the message).
async fn within_ceiling(archive: ByteStream, ceiling: u64, what: &str) -> ServiceResult<u64> {
    match crate::content::files::measure_archive(archive, ceiling).await {
        Ok(total) => Ok(total),
        Err(crate::content::files::MeterError::TooLarge) => {
            Err(crate::content::files::unpacked_too_large(what, ceiling))
        }
        Err(crate::content::files::MeterError::Invalid(m)) => Err(ServiceError::SourceFailed(
            format!("{what} cannot be read: {m}"),
        )),
    }
}

/// A snapshot or fork brings its own image.
fn refuse_image_fields(req: &SpecInput, kind: &str) -> ServiceResult<()> {
    let message =
        format!("cannot be combined with a source of type '{kind}', which brings its own image");
    if req.docker_image.is_some() {
        return Err(ServiceError::field("dockerImage", message));
    }
    if req.runtime.is_some() {
        return Err(ServiceError::field("runtime", message));
    }
    Ok(())
}

/// A fork's settings: the source's wherever the request gives none. The
/// image is the fork snapshot's, set once it is captured; the name is
/// never inherited (it must be unique) and defaults to the new id.
pub fn inherit(r: &mut SpecInput, from: &SandboxSpec) {
    r.docker_image = None;
    r.runtime = None;
    if r.start_command.is_none() {
        r.start_command = from.start_command.as_ref().map(|c| c.as_str().to_owned());
    }
    r.cpu_cores = r.cpu_cores.or(Some(from.cpu_cores));
    r.memory_gb = r.memory_gb.or(Some(from.memory_gb));
    r.disk_size_gb = r.disk_size_gb.or(Some(f64::from(from.disk_size_gb)));
    r.gpu_count = r.gpu_count.or(Some(f64::from(from.gpu_count)));
    r.network_access = r.network_access.or(Some(from.network.allows_egress()));
    r.timeout_minutes = r.timeout_minutes.or(Some(from.timeout_minutes));
    if r.environment_vars.is_none() {
        r.environment_vars = Some(from.environment_vars.clone());
    }
    if r.labels.is_none() {
        r.labels = Some(from.labels.to_strings());
    }
    if r.tags.is_none() {
        r.tags = Some(from.tags.clone());
    }
    if r.ports.is_none() {
        r.ports = Some(from.ports.iter().map(|p| i64::from(*p)).collect());
    }
    r.persistent = r.persistent.or(Some(from.persistent));
}

/// `uploads/{account}/{id}.tar`: an upload is only ever found by its owner.
pub fn upload_key(account: &AccountId, id: &UploadId) -> String {
    format!("uploads/{account}/{id}.tar")
}

/// How many uploads `account` holds that are neither used nor expired, and
/// their bytes in the object store.
async fn uploads_held(svc: &Service, account: &AccountId) -> ServiceResult<(u64, u64)> {
    let listed = svc.blobs.list(&format!("uploads/{account}")).await?;
    let ttl = svc.config.sources.upload_ttl;
    Ok(listed
        .iter()
        .filter(|m| !expired(m.last_modified, ttl))
        .fold((0, 0), |(n, bytes), m| (n + 1, bytes + m.size)))
}

/// What `account` keeps in the object store, as its quota counts it:
/// its snapshots that are not deleted and its pending uploads.
pub async fn stored_usage(svc: &Service, account: &AccountId) -> ServiceResult<StoredUsage> {
    let (snapshots, snapshot_bytes) = svc.store.snapshot_usage(account, None).await?;
    let (uploads, upload_bytes) = uploads_held(svc, account).await?;
    Ok(StoredUsage {
        snapshots,
        snapshot_bytes,
        uploads,
        upload_bytes,
    })
}

/// An upload let in by its account's quota: how many bytes it may bring.
#[derive(Debug, Clone)]
pub struct UploadAdmission {
    account: AccountId,
    quota: Quota,
    used: StoredUsage,
}

impl UploadAdmission {
    /// Bytes the upload may have before it goes past the account's quota
    /// (`None`: the quota sets none; the server's ceiling still holds).
    pub fn bytes_left(&self) -> Option<u64> {
        self.quota.upload_bytes_left(&self.used)
    }

    /// The refusal of an upload that went past the bytes left: 413, like
    /// the server's ceiling on uploads, with the quota's message.
    pub fn too_large(&self, bytes: u64) -> ServiceError {
        let message = self
            .quota
            .check_upload_bytes(&self.used, bytes)
            .err()
            .map_or_else(
                || "account quota exceeded: uploads".into(),
                |e| e.to_string(),
            );
        ServiceError::PayloadTooLarge(message)
    }
}

/// Lets an upload of `account` begin: refused (403 `quota_exceeded`) when
/// the account holds as many pending uploads as its quota allows.
pub async fn admit_upload(svc: &Service, account: &AccountId) -> ServiceResult<UploadAdmission> {
    let quota = svc.store.get_quota(account).await?;
    let used = if quota.uploads.is_some() || quota.upload_bytes.is_some() {
        let (uploads, upload_bytes) = uploads_held(svc, account).await?;
        StoredUsage {
            uploads,
            upload_bytes,
            ..StoredUsage::default()
        }
    } else {
        StoredUsage::default()
    };
    quota
        .check_upload_count(&used)
        .map_err(|e| ServiceError::QuotaExceeded(e.to_string()))?;
    Ok(UploadAdmission {
        account: account.clone(),
        quota,
        used,
    })
}

/// Stores an admitted upload's archive under a new id; returns the id and
/// its size. Counted again once stored: of uploads racing for the last
/// place (or the last bytes), none stays past the quota — what went over
/// is removed and refused.
pub async fn store_upload(
    svc: &Service,
    admission: &UploadAdmission,
    data: ByteStream,
) -> ServiceResult<(UploadId, u64)> {
    let id = UploadId::generate();
    let key = upload_key(&admission.account, &id);
    let bytes = store_upload_at(svc, admission, &key, data).await?;
    Ok((id, bytes))
}

/// [`store_upload`] under `key`, which must be below the account's
/// `uploads/{account}/` (a template's files): counted, held to the quota and
/// expired like any upload. Returns its size.
pub async fn store_upload_at(
    svc: &Service,
    admission: &UploadAdmission,
    key: &str,
    data: ByteStream,
) -> ServiceResult<u64> {
    debug_assert!(key.starts_with(&format!("uploads/{}/", admission.account)));
    let bytes = svc.blobs.put_stream(key, data).await?;
    let quota = &admission.quota;
    if quota.uploads.is_some() || quota.upload_bytes.is_some() {
        let held = uploads_held(svc, &admission.account).await;
        let refusal = match held {
            Ok((uploads, upload_bytes)) => {
                // What the others hold: all but this one.
                let others = StoredUsage {
                    uploads: uploads.saturating_sub(1),
                    upload_bytes: upload_bytes.saturating_sub(bytes),
                    ..StoredUsage::default()
                };
                if let Err(m) = quota.check_upload_count(&others) {
                    Some(ServiceError::QuotaExceeded(m.to_string()))
                } else if let Err(m) = quota.check_upload_bytes(&others, bytes) {
                    Some(ServiceError::PayloadTooLarge(m.to_string()))
                } else {
                    None
                }
            }
            Err(e) => Some(e),
        };
        if let Some(e) = refusal {
            if let Err(d) = svc.blobs.delete(key).await {
                warn!(key, error = %d, "could not remove an upload refused by its quota; it expires on its own");
            }
            return Err(e);
        }
    }
    Ok(bytes)
}

fn expired(stored_at: chrono::DateTime<chrono::Utc>, ttl: Duration) -> bool {
    chrono::Duration::from_std(ttl).is_ok_and(|ttl| stored_at + ttl < chrono::Utc::now())
}

/// Removes uploads older than their time to live; returns how many.
pub async fn expire_uploads(svc: &Service) -> usize {
    let listed = match svc.blobs.list("uploads").await {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "could not list uploads to expire");
            return 0;
        }
    };
    let mut removed = 0;
    for meta in listed {
        if expired(meta.last_modified, svc.config.sources.upload_ttl) {
            match svc.blobs.delete(&meta.key).await {
                Ok(()) => removed += 1,
                Err(e) => warn!(key = meta.key, error = %e, "could not remove an expired upload"),
            }
        }
    }
    removed
}

// --- URLs ---

/// A URL for the server to fetch: one of `schemes`, with a host that does
/// not resolve to an internal address (unless allowed). Errors name
/// `source.url`.
pub async fn parse_url(raw: &str, schemes: &[&str], limits: &SourceLimits) -> ServiceResult<Url> {
    let bad = |m: String| ServiceError::field("source.url", m);
    if raw.is_empty() || raw.len() > 2048 {
        return Err(bad("must be 1 to 2048 characters".into()));
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("must not contain spaces or control characters".into()));
    }
    let url = Url::parse(raw).map_err(|e| bad(format!("is not a valid URL: {e}")))?;
    if !schemes.contains(&url.scheme()) {
        return Err(bad(format!(
            "scheme '{}' is not allowed: use {}",
            url.scheme(),
            schemes.join(", ")
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("needs a host".into()));
    }
    crate::net::outbound::check_url(&url, &limits.addresses)
        .await
        .map_err(|e| bad(e.to_string()))?;
    Ok(url)
}

/// The URL as it may be shown: without a password or token.
pub fn redacted(url: &Url) -> String {
    let mut u = url.clone();
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
    } else if !u.username().is_empty() {
        let _ = u.set_username("***");
    }
    u.to_string()
}

/// A branch, tag or commit: `[A-Za-z0-9._/-]`, not starting with `-`.
pub fn parse_git_ref(r: &str, field: &str) -> ServiceResult<String> {
    let ok = !r.is_empty()
        && r.len() <= 255
        && !r.starts_with('-')
        && !r.starts_with('/')
        && !r.ends_with('/')
        && !r.ends_with(".lock")
        && !r.contains("..")
        && !r.contains("//")
        && r.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-'));
    if ok {
        Ok(r.to_owned())
    } else {
        Err(ServiceError::field(
            field,
            "must be a branch, tag or commit: 1 to 255 characters from [A-Za-z0-9._/-], not starting with '-'",
        ))
    }
}

fn is_commit(r: &str) -> bool {
    (7..=64).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_hexdigit())
}

// --- git ---

/// Clones `url` at `git_ref` into a temporary directory and returns it as a
/// tar stream (the directory goes when the stream is dropped).
///
/// Nothing is checked out before it is known to fit: the clone is made
/// without a work tree, its `.git` held to `max_archive_bytes`, and the
/// files of the revision (`git ls-tree`, read as it streams) with the
/// `.git` to the unpack ceiling — a repository whose trees expand to
/// gigabytes never touches the server's disk.
async fn clone_as_tar(
    limits: &SourceLimits,
    ceiling: u64,
    url: &Url,
    git_ref: Option<&str>,
) -> ServiceResult<ByteStream> {
    let tmp = tempfile::tempdir()
        .map_err(|e| ServiceError::Internal(format!("cannot create a temporary directory: {e}")))?;
    let repo = tmp.path().join("repo");
    let shown = redacted(url);
    // Pinned: git connects to the address that was checked, and follows no
    // redirect (which could lead anywhere).
    let addrs = crate::net::outbound::check_url(url, &limits.addresses)
        .await
        .map_err(|e| ServiceError::field("source.url", e.to_string()))?;
    let pinned = addrs[0];
    let host = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default().unwrap_or(9418);
    let mut target = url.clone();
    if url.scheme() == "git" {
        let _ = target.set_ip_host(pinned.ip());
    }
    let resolve = format!(
        "http.curloptResolve={}:{port}:{}",
        host.trim_start_matches('[').trim_end_matches(']'),
        match pinned.ip() {
            IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        }
    );
    let pin = ["-c", resolve.as_str(), "-c", "http.followRedirects=false"];
    let url = &target;
    let max = limits.max_archive_bytes;
    let work = async {
        let repo_arg = repo.display().to_string();
        let mut clone: Vec<&str> = vec!["clone", "--quiet", "--no-checkout"];
        let rev = match git_ref {
            Some(r) if is_commit(r) => r,
            Some(r) => {
                clone.extend(["--depth", "1", "--single-branch", "--branch", r]);
                "HEAD"
            }
            None => {
                clone.extend(["--depth", "1"]);
                "HEAD"
            }
        };
        clone.extend(["--", url.as_str(), &repo_arg]);
        run_git(tmp.path(), &pin, &clone, &shown).await?;
        let git_dir = repo.clone();
        let fetched = tokio::task::spawn_blocking(move || dir_size(&git_dir))
            .await
            .map_err(|e| ServiceError::Internal(format!("measuring the clone failed: {e}")))?
            .map_err(|e| {
                ServiceError::SourceFailed(format!("git source {shown}: reading the clone: {e}"))
            })?;
        if fetched > max {
            return Err(ServiceError::SourceFailed(format!(
                "git source {shown}: the repository is {fetched} bytes, more than the limit of {max}"
            )));
        }
        let files = tree_size(
            tmp.path(),
            &pin,
            &repo_arg,
            rev,
            ceiling.saturating_sub(fetched),
            &shown,
        )
        .await?;
        if files.is_none() {
            return Err(crate::content::files::unpacked_too_large(
                "The repository",
                ceiling,
            ));
        }
        run_git(
            tmp.path(),
            &pin,
            &["-C", &repo_arg, "checkout", "--quiet", rev, "--"],
            &shown,
        )
        .await
    };
    match tokio::time::timeout(limits.fetch_timeout, work).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(ServiceError::SourceFailed(format!(
                "git clone of {shown} did not finish within {} s",
                limits.fetch_timeout.as_secs()
            )))
        }
    }
    let tar_path = tmp.path().join("workspace.tar");
    let (repo2, tar2) = (repo.clone(), tar_path.clone());
    tokio::task::spawn_blocking(move || -> Result<(), Option<String>> {
        // What the checkout wrote, should git have written more than it listed.
        let size = dir_size(&repo2).map_err(|e| Some(format!("reading the clone: {e}")))?;
        if size > ceiling {
            return Err(None);
        }
        let file = std::fs::File::create(&tar2).map_err(|e| Some(e.to_string()))?;
        let mut b = tar::Builder::new(std::io::BufWriter::new(file));
        b.follow_symlinks(false);
        b.append_dir_all(".", &repo2)
            .map_err(|e| Some(e.to_string()))?;
        b.into_inner()
            .and_then(|mut w| std::io::Write::flush(&mut w))
            .map_err(|e| Some(e.to_string()))
    })
    .await
    .map_err(|e| ServiceError::Internal(format!("packing the clone failed: {e}")))?
    .map_err(|m| match m {
        Some(m) => ServiceError::SourceFailed(format!("git source {shown}: {m}")),
        None => crate::content::files::unpacked_too_large("The repository", ceiling),
    })?;
    info!(url = %shown, git_ref, "repository cloned for a new sandbox");
    file_stream(tar_path, tmp).await
}

/// What the files of `rev` add up to in the clone at `repo` (no work tree
/// needed): `git ls-tree -r -l`, read as it streams; `None` as soon as the
/// total passes `limit` (git is stopped then).
async fn tree_size(
    home: &Path,
    pin: &[&str],
    repo: &str,
    rev: &str,
    limit: u64,
    shown: &str,
) -> ServiceResult<Option<u64>> {
    use tokio::io::AsyncBufReadExt;
    let failed =
        |m: String| ServiceError::SourceFailed(format!("git clone of {shown} failed: {m}"));
    let mut child = git_command(home, pin)
        .args(["-C", repo, "ls-tree", "-r", "-l", "-z", "--full-tree", rev])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| ServiceError::Internal(format!("cannot run git: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| ServiceError::Internal("git ls-tree has no output".into()))?;
    let mut out = tokio::io::BufReader::new(stdout);
    let (mut total, mut entries) = (0u64, 0u64);
    let mut record = Vec::new();
    loop {
        record.clear();
        // `<mode> <type> <object> <size>\t<path>\0`; a path is at most a few KiB.
        let n = (&mut out)
            .take(64 * 1024)
            .read_until(0, &mut record)
            .await
            .map_err(|e| failed(format!("listing the files: {e}")))?;
        if n == 0 {
            break;
        }
        entries += 1;
        if entries > MAX_ENTRIES {
            return Err(failed(format!("more than {MAX_ENTRIES} files")));
        }
        let meta = record
            .split(|b| *b == b'\t')
            .next()
            .and_then(|m| std::str::from_utf8(m).ok())
            .ok_or_else(|| failed("git listed a file it cannot describe".into()))?;
        // Submodules (commits) and other non-blobs show `-`.
        let size = meta
            .split_ascii_whitespace()
            .nth(3)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        total = total.saturating_add(size);
        if total > limit {
            return Ok(None);
        }
    }
    let status = child
        .wait()
        .await
        .map_err(|e| ServiceError::Internal(format!("waiting for git failed: {e}")))?;
    if !status.success() {
        return Err(failed(format!(
            "{rev} is not a revision of the repository (git ls-tree exited with {status})"
        )));
    }
    Ok(Some(total))
}

/// `git` without prompts, user or system configuration, with only the
/// network transports allowed (no `file://`, no `ext::`), killed when dropped.
fn git_command(home: &Path, pin: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    cmd.args([
        "-c",
        "protocol.allow=never",
        "-c",
        "protocol.https.allow=always",
        "-c",
        "protocol.http.allow=always",
        "-c",
        "protocol.git.allow=always",
        "-c",
        "advice.detachedHead=false",
        "-c",
        "core.hooksPath=/dev/null",
    ])
    .args(pin)
    .env_clear()
    .env(
        "PATH",
        std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
    )
    .env("HOME", home)
    .env("GIT_TERMINAL_PROMPT", "0")
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .env("GIT_CONFIG_GLOBAL", "/dev/null")
    .env("GIT_ALLOW_PROTOCOL", "http:https:git")
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    cmd
}

/// Runs git without prompts, user or system configuration, and with only
/// the network transports allowed (no `file://`, no `ext::`).
async fn run_git(home: &Path, pin: &[&str], args: &[&str], shown: &str) -> ServiceResult<()> {
    let mut cmd = git_command(home, pin);
    cmd.args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ServiceError::Internal(
                "git is not installed on the Stockade server: install it (e.g. `apt-get install git`) to use git sources".into(),
            )
        } else {
            ServiceError::Internal(format!("cannot run git: {e}"))
        }
    })?;
    let mut stderr = Vec::new();
    if let Some(err) = child.stderr.take() {
        let _ = err.take(MAX_GIT_STDERR).read_to_end(&mut stderr).await;
    }
    let status = child
        .wait()
        .await
        .map_err(|e| ServiceError::Internal(format!("waiting for git failed: {e}")))?;
    if status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&stderr);
    // git's own words only: lines the remote sent ("remote: …") are its
    // content and are never shown.
    let reason: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("remote:"))
        .collect();
    Err(ServiceError::SourceFailed(format!(
        "git clone of {shown} failed: {}",
        if reason.is_empty() {
            format!("git exited with {status}")
        } else {
            reason.join("; ")
        }
    )))
}

fn dir_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

// --- archives ---

/// A temporary file could not be written.
fn temp_write_failed(e: std::io::Error) -> ServiceError {
    ServiceError::Internal(format!("cannot write a temporary file: {e}"))
}

/// Downloads a tarball into a temporary file (at most
/// `max_archive_bytes`), checks it, and returns it as a stream.
async fn download_archive(
    limits: &SourceLimits,
    ceiling: u64,
    url: &Url,
) -> ServiceResult<ByteStream> {
    let shown = redacted(url);
    let tmp = tempfile::tempdir()
        .map_err(|e| ServiceError::Internal(format!("cannot create a temporary directory: {e}")))?;
    let path = tmp.path().join("download");
    let client = crate::net::outbound::http_client(&limits.addresses, limits.fetch_timeout)
        .map_err(|e| ServiceError::Internal(format!("HTTP client: {e}")))?;
    let failed = |m: String| ServiceError::SourceFailed(format!("download of {shown} failed: {m}"));
    let resp = client
        .get(url.clone())
        .send()
        .await
        .map_err(|e| failed(error_chain(&e)))?;
    if !resp.status().is_success() {
        return Err(failed(format!("the server answered {}", resp.status())));
    }
    let max = limits.max_archive_bytes;
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(failed(format!(
            "the archive is larger than the limit of {max} bytes"
        )));
    }
    let mut file = tokio::fs::File::create(&path)
        .await
        .map_err(temp_write_failed)?;
    let mut body = resp.bytes_stream();
    let mut total: u64 = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| failed(error_chain(&e)))?;
        total += chunk.len() as u64;
        if total > max {
            return Err(failed(format!(
                "the archive is larger than the limit of {max} bytes"
            )));
        }
        file.write_all(&chunk).await.map_err(temp_write_failed)?;
    }
    file.flush().await.map_err(temp_write_failed)?;
    drop(file);
    check_archive_file(&path, ceiling, Quote::Nothing)
        .await
        .map_err(|e| match e {
            ArchiveError::TooLarge { limit } => {
                crate::content::files::unpacked_too_large(&format!("The archive at {shown}"), limit)
            }
            ArchiveError::Invalid(m) => {
                ServiceError::SourceFailed(format!("the archive at {shown} is unusable: {m}"))
            }
        })?;
    info!(url = %shown, bytes = total, "tarball downloaded for a new sandbox");
    file_stream(path, tmp).await
}

/// What an archive error may quote of the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quote {
    /// Entry names and the parser's words (the caller's own upload).
    Names,
    /// Nothing from the archive: it was fetched on the caller's behalf
    /// from somewhere else, and must not be echoed back.
    Nothing,
}

/// Why an archive cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveError {
    /// Its files unpack to more than the ceiling (a 413).
    TooLarge { limit: u64 },
    /// Not a tar or tar.gz, broken, or with an entry that may not be unpacked.
    Invalid(String),
}

impl std::fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge { limit } => write!(
                f,
                "unpacked size exceeds the limit of {}",
                crate::content::files::describe_limit(*limit)
            ),
            Self::Invalid(m) => f.write_str(m),
        }
    }
}

impl From<String> for ArchiveError {
    fn from(m: String) -> Self {
        Self::Invalid(m)
    }
}

impl From<&str> for ArchiveError {
    fn from(m: &str) -> Self {
        Self::Invalid(m.to_owned())
    }
}

/// Checks a tar or tar.gz file in a blocking task.
pub async fn check_archive_file(
    path: &Path,
    max_unpacked: u64,
    quote: Quote,
) -> Result<ArchiveSummary, ArchiveError> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&path).map_err(|e| e.to_string())?;
        check_archive(std::io::BufReader::new(file), max_unpacked, quote)
    })
    .await
    .map_err(|e| format!("checking the archive failed: {e}"))?
}

/// What [`check_archive`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSummary {
    pub entries: u64,
    pub unpacked_bytes: u64,
    pub gzip: bool,
}

/// Counts what it reads of the decompressed stream and fails past `left`.
struct Bounded<R> {
    inner: R,
    left: u64,
    over: bool,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            self.over = true;
            return Err(std::io::Error::other("the archive unpacks to too much"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Reads a whole tar (optionally gzip-compressed) archive: every header and
/// every byte, so truncation and corruption show. Refuses other formats,
/// absolute or `..` paths, device files and FIFOs, and — as soon as the
/// count passes it — archives whose files unpack to more than `max_unpacked`
/// bytes (sparse files at their full size; the decompressed stream as a
/// whole is bounded too, against archives of endless headers).
pub fn check_archive<R: std::io::BufRead>(
    mut input: R,
    max_unpacked: u64,
    quote: Quote,
) -> Result<ArchiveSummary, ArchiveError> {
    // The parser's messages quote header bytes; entry names are content.
    let detail = |e: &dyn std::fmt::Display| match quote {
        Quote::Names => format!(": {e}"),
        Quote::Nothing => String::new(),
    };
    let name = |p: &Path| match quote {
        Quote::Names => format!(" '{}'", p.display()),
        Quote::Nothing => String::new(),
    };
    let too_large = ArchiveError::TooLarge {
        limit: max_unpacked,
    };
    let head = input.fill_buf().map_err(|e| e.to_string())?.to_vec();
    if head.is_empty() {
        return Err("the archive is empty".into());
    }
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    if head.starts_with(b"PK\x03\x04") {
        return Err("zip archives are not supported: use tar or tar.gz".into());
    }
    if head.starts_with(b"BZh") || head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        return Err("bzip2 and xz archives are not supported: use tar or tar.gz".into());
    }
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::bufread::MultiGzDecoder::new(input))
    } else {
        Box::new(input)
    };
    let mut bounded = Bounded {
        inner: reader,
        left: crate::content::files::unpacked_stream_bound(max_unpacked),
        over: false,
    };
    let mut summary = ArchiveSummary {
        entries: 0,
        unpacked_bytes: 0,
        gzip,
    };
    let result = (|| {
        let mut archive = tar::Archive::new(&mut bounded);
        let entries = archive
            .entries()
            .map_err(|e| format!("not a tar archive{}", detail(&e)))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| format!("not a valid tar archive{}", detail(&e)))?;
            summary.entries += 1;
            if summary.entries > MAX_ENTRIES {
                return Err(format!("more than {MAX_ENTRIES} entries").into());
            }
            let kind = entry.header().entry_type();
            if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
                return Err("device files and FIFOs are not allowed".into());
            }
            let path: PathBuf = entry
                .path()
                .map_err(|e| format!("an entry has an unreadable name{}", detail(&e)))?
                .into_owned();
            if path.components().any(|c| {
                matches!(
                    c,
                    Component::RootDir | Component::Prefix(_) | Component::ParentDir
                )
            }) {
                return Err(format!(
                    "an entry{} would unpack outside /workspace (absolute or '..' path)",
                    name(&path)
                )
                .into());
            }
            let size = crate::content::files::unpacked_size(&mut entry)
                .map_err(|e| format!("an entry{} is corrupt{}", name(&path), detail(&e)))?;
            summary.unpacked_bytes = summary.unpacked_bytes.saturating_add(size);
            if summary.unpacked_bytes > max_unpacked {
                return Err(too_large.clone());
            }
            // Read the data: a truncated or corrupt body fails here.
            std::io::copy(&mut entry, &mut std::io::sink())
                .map_err(|e| format!("an entry{} is corrupt{}", name(&path), detail(&e)))?;
        }
        Ok(())
    })();
    match result {
        Err(_) if bounded.over => return Err(too_large),
        Err(e) => return Err(e),
        Ok(()) => {}
    }
    if summary.entries == 0 {
        return Err("not a tar archive (no entries found)".into());
    }
    Ok(summary)
}

/// A file as a byte stream that keeps `guard` (its temporary directory)
/// alive until the stream is dropped.
async fn file_stream(path: PathBuf, guard: tempfile::TempDir) -> ServiceResult<ByteStream> {
    let file = tokio::fs::File::open(&path)
        .await
        .map_err(|e| ServiceError::Internal(format!("cannot read a temporary file: {e}")))?;
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024).map(move |chunk| {
        let _keep = &guard;
        chunk
    });
    Ok(Box::pin(stream))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, path, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn good_archives_pass() {
        let t = tar_of(&[("a/b.txt", b"hello"), ("c", b"")]);
        let s = check_archive(t.as_slice(), 1000, Quote::Names).unwrap();
        assert_eq!((s.entries, s.unpacked_bytes, s.gzip), (2, 5, false));
        let s = check_archive(gz(&t).as_slice(), 1000, Quote::Names).unwrap();
        assert!(s.gzip);
    }

    #[test]
    fn bad_archives_are_refused_with_a_reason() {
        let t = tar_of(&[("a", &[7u8; 2000])]);
        let mut truncated = t.clone();
        truncated.truncate(1000);
        let err = check_archive(truncated.as_slice(), u64::MAX, Quote::Names)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("corrupt") || err.contains("not a valid tar"),
            "{err}"
        );
        let mut gz_truncated = gz(&t);
        gz_truncated.truncate(gz_truncated.len() / 2);
        assert!(check_archive(gz_truncated.as_slice(), u64::MAX, Quote::Names).is_err());
        assert!(check_archive(
            &b"garbage that is not a tar archive"[..],
            u64::MAX,
            Quote::Names
        )
        .is_err());
        assert!(check_archive(&[][..], u64::MAX, Quote::Names)
            .unwrap_err()
            .to_string()
            .contains("empty"));
        assert!(
            check_archive(&b"PK\x03\x04rest"[..], u64::MAX, Quote::Names)
                .unwrap_err()
                .to_string()
                .contains("zip")
        );
        assert_eq!(
            check_archive(t.as_slice(), 100, Quote::Names).unwrap_err(),
            ArchiveError::TooLarge { limit: 100 }
        );
        // `..` and absolute paths (written raw: the tar crate refuses to make them).
        for evil in ["../escape", "/etc/passwd"] {
            let mut h = tar::Header::new_gnu();
            h.as_gnu_mut().unwrap().name[..evil.len()].copy_from_slice(evil.as_bytes());
            h.set_size(1);
            h.set_mode(0o644);
            h.set_cksum();
            let mut raw = h.as_bytes().to_vec();
            raw.extend_from_slice(b"x");
            raw.resize(1024, 0);
            raw.extend_from_slice(&[0u8; 1024]);
            let err = check_archive(raw.as_slice(), u64::MAX, Quote::Names)
                .unwrap_err()
                .to_string();
            assert!(err.contains("outside /workspace"), "{evil}: {err}");
        }
    }

    #[test]
    fn git_refs_and_urls() {
        for good in ["main", "v1.2.3", "feature/x-y", "0123abcd"] {
            assert!(parse_git_ref(good, "source.ref").is_ok(), "{good}");
        }
        for bad in ["", "-upload-pack=x", "a..b", "a b", "x.lock", "/abs", "a;b"] {
            assert!(parse_git_ref(bad, "source.ref").is_err(), "{bad}");
        }
        assert!(is_commit("0123abcd") && !is_commit("main") && !is_commit("abc"));
        let u = Url::parse("https://user:secret@example.com/r.git").unwrap();
        assert!(!redacted(&u).contains("secret"));
        let u = Url::parse("https://tok3n@example.com/r.git").unwrap();
        assert!(!redacted(&u).contains("tok3n"));
    }

    #[tokio::test]
    async fn url_rules() {
        let open = SourceLimits {
            addresses: stockade_core::net::AddressPolicy {
                allow: vec![stockade_core::net::IpNet::parse("127.0.0.0/8").unwrap()],
            },
            ..SourceLimits::default()
        };
        for bad in [
            "file:///etc/passwd",
            "/srv/repo",
            "ssh://h/r",
            "ext::sh -c x",
            "https://",
            "http://a b/",
        ] {
            let e = parse_url(bad, &["https", "http", "git"], &open)
                .await
                .unwrap_err();
            match e {
                ServiceError::Validation(v) => assert_eq!(v.0[0].field, "source.url", "{bad}"),
                other => panic!("{bad}: {other}"),
            }
        }
        assert!(
            parse_url("git://127.0.0.1:9418/r", &["https", "http", "git"], &open)
                .await
                .is_ok()
        );
        assert!(parse_url("git://127.0.0.1/r", &["https", "http"], &open)
            .await
            .is_err());
        let closed = SourceLimits::default();
        for private in [
            "http://127.0.0.1/x.tar",
            "http://10.1.2.3/x",
            "http://[::1]/x",
            "http://169.254.169.254/latest",
        ] {
            assert!(
                parse_url(private, &["http"], &closed).await.is_err(),
                "{private}"
            );
        }
        assert!(parse_url("http://93.184.216.34/x.tar", &["http"], &closed)
            .await
            .is_ok());
    }
}
