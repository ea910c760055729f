//! Snapshots and the snapshot half of a fork: capture a
//! sandbox's root-filesystem changes as an image and its `/workspace` as a
//! tar in the object store; delete them; and collect what deleted snapshots
//! and expired uploads leave behind.
//!
//! A user snapshot's `/workspace` is held to the unpack ceiling
//! while it streams into the object store: one that could never be restored
//! is refused (413) and nothing of it is kept.
//!
//! A user snapshot counts against its account's quota of snapshots and of
//! snapshot bytes: one past the count is refused before anything is made;
//! the bytes are known only as the archives stream into the object store,
//! which stops where the bytes left end: that capture is refused and
//! everything it made removed.
//!
//! A capture runs in its own task, so a client that goes away does not leave
//! half a snapshot: it completes, or everything it made is removed again.
//! A deleted snapshot's image may still be used by sandboxes created from it
//! (Docker refuses to remove it then): the record stays DELETING and
//! [`collect_garbage`] removes the image once no container uses it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{SubsecRound, Utc};
use futures_util::StreamExt;
use stockade_core::template::TemplateBuild;
use stockade_core::{
    AccountId, OperationKind, Quota, Sandbox, Scope, Snapshot, SnapshotId, SnapshotKind,
    SnapshotStatus, StoredUsage,
};
use stockade_runtime::{labels, own_image_labels, RuntimeError, SNAPSHOT_LABEL};
use stockade_store::StoreError;
use tracing::{debug, error, info, warn};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// A capture still CREATING after this long died with its server.
pub const STALE_CAPTURE: Duration = Duration::from_secs(3600);

/// A snapshot the caller may use: unknown → 404, another account's → 403,
/// deleted → 404.
pub async fn load(svc: &Service, scope: &Scope, id: &str, field: &str) -> ServiceResult<Snapshot> {
    let id = SnapshotId::parse_field(id, field)?;
    match svc.store.get_snapshot(scope, &id).await {
        Ok(s) if s.deleted_at.is_some() || s.kind != SnapshotKind::User => {
            Err(snapshot_not_found())
        }
        Ok(s) => Ok(s),
        Err(StoreError::NotFound) => Err(snapshot_not_found()),
        Err(StoreError::Forbidden) => Err(ServiceError::Forbidden(
            "Forbidden: this snapshot belongs to another account".into(),
        )),
        Err(e) => Err(e.into()),
    }
}

pub fn snapshot_not_found() -> ServiceError {
    ServiceError::NotFound("Snapshot not found".into())
}

/// Refuses sandboxes whose filesystem cannot be read: terminated, still
/// being created, or without a container.
pub fn ensure_capturable(sb: &Sandbox) -> ServiceResult<()> {
    if sb.is_terminated() {
        return Err(ServiceError::Terminated(format!(
            "Sandbox {} is terminated: there is no filesystem left to capture",
            sb.id
        )));
    }
    if sb.is_being_created() {
        return Err(ServiceError::Conflict(format!(
            "Sandbox {} is still being created",
            sb.id
        )));
    }
    Ok(())
}

/// Captures `sb` as a snapshot owned by `owner`'s account. A user snapshot
/// holds the committed image and the `/workspace` tar in the object store;
/// a fork snapshot only the image (the fork streams `/workspace` directly).
/// On failure nothing it made stays.
pub async fn capture(
    svc: &Service,
    scope: &Scope,
    sb: &Sandbox,
    name: Option<String>,
    kind: SnapshotKind,
) -> ServiceResult<Snapshot> {
    ensure_capturable(sb)?;
    // Fork snapshots are internal and short-lived: only user ones count.
    let quota = match kind {
        SnapshotKind::User => {
            let quota = account_quota(svc, &scope.account_id).await?;
            check_count(svc, &quota, &scope.account_id, None).await?;
            quota
        }
        SnapshotKind::Fork => Quota::unlimited(),
    };
    let mut snapshot = Snapshot::new(
        scope.account_id.clone(),
        sb.id.clone(),
        name,
        kind,
        Utc::now().trunc_subsecs(6),
    );
    // The image is committed without them (see the runtime's commit).
    snapshot.environment_vars = Some(sb.spec.environment_vars.clone());
    // The source is held while it is captured: a stop or delete waits.
    let op = svc.new_operation(
        OperationKind::Snapshot,
        &sb.id,
        &sb.account_id,
        serde_json::json!({ "snapshot_id": snapshot.id.to_string() }),
    );
    let guard = svc.begin_operation(op).await?;
    if let Err(e) = svc.store.insert_snapshot(&snapshot).await {
        guard.release().await;
        return Err(e.into());
    }
    // Checked again with the record in place: of captures racing for the
    // last place, none gets past the quota.
    if let Err(e) = check_count(svc, &quota, &scope.account_id, Some(&snapshot.id)).await {
        guard.release().await;
        discard(svc, &snapshot).await;
        return Err(e);
    }
    let rt = match svc.runtime_for(sb).await {
        Ok(rt) => rt,
        Err(e) => {
            guard.release().await;
            discard(svc, &snapshot).await;
            return Err(e);
        }
    };
    let svc = svc.clone();
    // Its own task: it finishes (or cleans up) even if the caller goes away.
    tokio::spawn(async move {
        let id = snapshot.id.clone();
        let captured = capture_inner(&svc, rt.as_ref(), snapshot.clone(), &quota).await;
        if svc.crashed() {
            return captured;
        }
        guard.release().await;
        match captured {
            Ok(done) => {
                info!(snapshot.id = %id, sandbox.id = %done.source_sandbox_id, kind = done.kind.as_str(), bytes = done.workspace_bytes, "snapshot captured");
                Ok(done)
            }
            Err(e) => {
                warn!(snapshot.id = %id, error = %e, "snapshot capture failed; removing what it made");
                discard(&svc, &snapshot).await;
                Err(e)
            }
        }
    })
    .await
    .map_err(|e| ServiceError::Internal(format!("snapshot task failed: {e}")))?
}

/// The quota of `account` (404 for an unknown account).
async fn account_quota(svc: &Service, account: &AccountId) -> ServiceResult<Quota> {
    svc.store.get_quota(account).await.map_err(|e| match e {
        StoreError::NotFound => ServiceError::NotFound(format!("Account {account} not found")),
        other => other.into(),
    })
}

/// What the account's snapshots but `except` take, as the quota counts them.
async fn snapshots_used(
    svc: &Service,
    account: &AccountId,
    except: Option<&SnapshotId>,
) -> ServiceResult<StoredUsage> {
    let (snapshots, snapshot_bytes) = svc.store.snapshot_usage(account, except).await?;
    Ok(StoredUsage {
        snapshots,
        snapshot_bytes,
        ..StoredUsage::default()
    })
}

/// Refuses one more snapshot past the account's count (403
/// `quota_exceeded`); `own` is the capture's record when it is stored.
async fn check_count(
    svc: &Service,
    quota: &Quota,
    account: &AccountId,
    own: Option<&SnapshotId>,
) -> ServiceResult<()> {
    if quota.snapshots.is_none() {
        return Ok(());
    }
    let used = snapshots_used(svc, account, own).await?;
    quota
        .check_snapshot_count(&used)
        .map_err(|e| ServiceError::QuotaExceeded(e.to_string()))
}

/// Refuses a capture whose archives, `bytes` so far, go past the account's
/// snapshot bytes (403 `quota_exceeded`); the caller removes what it made.
async fn check_bytes(
    svc: &Service,
    quota: &Quota,
    snapshot: &Snapshot,
    bytes: u64,
) -> ServiceResult<()> {
    if quota.snapshot_bytes.is_none() {
        return Ok(());
    }
    let used = snapshots_used(svc, &snapshot.account_id, Some(&snapshot.id)).await?;
    quota
        .check_snapshot_bytes(&used, bytes)
        .map_err(|e| ServiceError::QuotaExceeded(e.to_string()))
}

/// Bytes of the account's snapshot quota this capture may still take
/// (`None`: no limit).
async fn bytes_left(
    svc: &Service,
    quota: &Quota,
    snapshot: &Snapshot,
) -> ServiceResult<Option<u64>> {
    let Some(limit) = quota.snapshot_bytes else {
        return Ok(None);
    };
    let used = snapshots_used(svc, &snapshot.account_id, Some(&snapshot.id)).await?;
    Ok(Some(limit.saturating_sub(used.snapshot_bytes)))
}

/// `data`, ended with an error as soon as it passes `limit` bytes, so that a
/// capture past the quota stops streaming into the object store; the
/// counter says how far it got.
fn cut_after(
    data: stockade_runtime::ByteStream,
    limit: Option<u64>,
) -> (stockade_runtime::ByteStream, Arc<AtomicU64>) {
    let seen = Arc::new(AtomicU64::new(0));
    let Some(limit) = limit else {
        return (data, seen);
    };
    let counter = seen.clone();
    let stream = data.map(move |item| {
        let chunk = item?;
        let total = counter.fetch_add(chunk.len() as u64, Ordering::SeqCst) + chunk.len() as u64;
        if total > limit {
            return Err(std::io::Error::other(
                "the snapshot passed its account's quota",
            ));
        }
        Ok(chunk)
    });
    (Box::pin(stream), seen)
}

/// The refusal of a capture cut off at `bytes`, past what it had left.
async fn cut_off(svc: &Service, quota: &Quota, snapshot: &Snapshot, bytes: u64) -> ServiceError {
    match check_bytes(svc, quota, snapshot, bytes).await {
        Err(e) => e,
        Ok(()) => ServiceError::QuotaExceeded("account quota exceeded: snapshots".into()),
    }
}

async fn capture_inner(
    svc: &Service,
    rt: &dyn stockade_runtime::Runtime,
    mut snapshot: Snapshot,
    quota: &Quota,
) -> ServiceResult<Snapshot> {
    let mut image_labels: BTreeMap<String, String> =
        own_image_labels(SNAPSHOT_LABEL, snapshot.id.as_str())
            .into_iter()
            .collect();
    image_labels.extend([
        (
            labels::ACCOUNT_ID.to_owned(),
            snapshot.account_id.to_string(),
        ),
        (labels::INSTANCE_ID.to_owned(), svc.instance_id.to_string()),
        (
            "io.stockade.source-sandbox-id".to_owned(),
            snapshot.source_sandbox_id.to_string(),
        ),
    ]);
    rt.commit_snapshot(
        &snapshot.source_sandbox_id,
        &snapshot.image_ref,
        &image_labels,
    )
    .await
    .map_err(|e| missing_container(e, &snapshot))?;
    svc.crash_point("snapshot.committed")?;
    if snapshot.kind == SnapshotKind::User {
        let key = Snapshot::blob_key_for(&snapshot.id);
        let workspace = rt
            .export_workspace(&snapshot.source_sandbox_id)
            .await
            .map_err(|e| missing_container(e, &snapshot))?;
        // A /workspace that unpacks to more than the ceiling could
        // never be restored; it is refused while it streams.
        let ceiling = svc.config.max_unpacked_bytes;
        let (workspace, over) = crate::content::files::meter_archive(workspace, ceiling);
        // The account's snapshot bytes: the stream stops where they end.
        let left = bytes_left(svc, quota, &snapshot).await?;
        let (workspace, seen) = cut_after(workspace, left);
        let past = |seen: &AtomicU64| {
            let seen = seen.load(Ordering::SeqCst);
            left.is_some_and(|left| seen > left).then_some(seen)
        };
        // Recorded before the upload so that a crash leaves a key to clean.
        snapshot.blob_key = Some(key.clone());
        svc.store.update_snapshot(&snapshot).await?;
        let bytes = match svc.blobs.put_stream(&key, workspace).await {
            Ok(bytes) => bytes,
            Err(_) if over.load(Ordering::SeqCst) => {
                return Err(crate::content::files::unpacked_too_large(
                    "The sandbox's /workspace",
                    ceiling,
                ))
            }
            Err(e) => match past(&seen) {
                Some(n) => return Err(cut_off(svc, quota, &snapshot, n).await),
                None => return Err(e.into()),
            },
        };
        snapshot.workspace_bytes = Some(bytes);
        // Recorded at once, so that captures running beside it count it.
        svc.store.update_snapshot(&snapshot).await?;
        check_bytes(svc, quota, &snapshot, bytes).await?;
        // The image too, so that a sandbox on any host can start
        // from it, also once this host is gone.
        let image = rt
            .export_image(&snapshot.image_ref)
            .await
            .map_err(|e| missing_container(e, &snapshot))?;
        let left = left.map(|l| l.saturating_sub(bytes));
        let (image, seen) = cut_after(image, left);
        let image_bytes = match svc
            .blobs
            .put_stream(&Snapshot::image_blob_key_for(&snapshot.id), image)
            .await
        {
            Ok(n) => n,
            Err(e) => match left.filter(|&l| seen.load(Ordering::SeqCst) > l) {
                Some(_) => {
                    let n = bytes.saturating_add(seen.load(Ordering::SeqCst));
                    return Err(cut_off(svc, quota, &snapshot, n).await);
                }
                None => return Err(e.into()),
            },
        };
        snapshot.image_bytes = Some(image_bytes);
        check_bytes(svc, quota, &snapshot, bytes.saturating_add(image_bytes)).await?;
        svc.crash_point("snapshot.image_stored")?;
    }
    snapshot.status = SnapshotStatus::Ready;
    svc.store.update_snapshot(&snapshot).await?;
    Ok(snapshot)
}

fn missing_container(e: RuntimeError, snapshot: &Snapshot) -> ServiceError {
    match e {
        RuntimeError::NotFound(_) => ServiceError::Conflict(format!(
            "The container of sandbox {} no longer exists on its Docker host: nothing to capture",
            snapshot.source_sandbox_id
        )),
        other => other.into(),
    }
}

/// Whether a sandbox on the host of `rt` can start from `image`: it is
/// there, or it is a snapshot's or template's and the object store holds it (loaded by
/// [`ensure_image_on`] before the create).
pub(crate) async fn image_available_on(
    svc: &Service,
    rt: &dyn stockade_runtime::Runtime,
    image: &str,
) -> bool {
    if rt.image_present(image).await.unwrap_or(false) {
        return true;
    }
    match stored_image_key(image) {
        Some(key) => matches!(svc.blobs.head(&key).await, Ok(Some(_))),
        None => false,
    }
}

/// Where the object store keeps `image`, when it is one of Stockade's own
/// (a snapshot's or a template build's), which hosts load from there.
fn stored_image_key(image: &str) -> Option<String> {
    Snapshot::id_of_image(image)
        .map(|id| Snapshot::image_blob_key_for(&id))
        .or_else(|| {
            TemplateBuild::id_of_image(image).map(|id| TemplateBuild::image_blob_key_for(&id))
        })
}

/// Loads a snapshot's or template's image `image` from the object store
/// into the host of `rt` unless it is there already. Other images are left to the
/// create (which pulls them).
pub(crate) async fn ensure_image_on(
    svc: &Service,
    rt: &dyn stockade_runtime::Runtime,
    image: &str,
) -> ServiceResult<()> {
    let Some(key) = stored_image_key(image) else {
        return Ok(());
    };
    if rt.image_present(image).await.unwrap_or(false) {
        return Ok(());
    }
    let (bytes, archive) = svc.blobs.get_stream(&key).await?;
    info!(image, host = %rt.server_name(), bytes, "loading a stored image onto another host");
    rt.import_image(archive).await?;
    Ok(())
}

/// Removes a snapshot's image from every host that has it (restores on
/// other hosts load it there). A host where a container still uses
/// it answers `Conflict`, which is returned once every host was tried.
async fn remove_image_everywhere(svc: &Service, image: &str) -> Result<(), RuntimeError> {
    let mut outcome = Ok(());
    for (host, rt) in svc.host_runtimes().await {
        match rt.remove_image(image).await {
            Ok(()) | Err(RuntimeError::NotFound(_)) => {}
            Err(e) => {
                debug!(host = %host, image, error = %e, "snapshot image not removed there");
                if !matches!(outcome, Err(RuntimeError::Conflict(_))) {
                    outcome = Err(e);
                }
            }
        }
    }
    outcome
}

/// Removes a capture that failed: image, archive and record.
async fn discard(svc: &Service, snapshot: &Snapshot) {
    if let Err(e) = remove_image_everywhere(svc, &snapshot.image_ref).await {
        warn!(snapshot.id = %snapshot.id, error = %e, "could not remove the image of a failed capture");
    }
    for key in [
        Snapshot::blob_key_for(&snapshot.id),
        Snapshot::image_blob_key_for(&snapshot.id),
    ] {
        if let Err(e) = svc.blobs.delete(&key).await {
            warn!(snapshot.id = %snapshot.id, error = %e, "could not remove the archive of a failed capture");
        }
    }
    match svc.store.purge_snapshot(&snapshot.id).await {
        Ok(()) | Err(StoreError::NotFound) => {}
        Err(e) => {
            error!(snapshot.id = %snapshot.id, error = %e, "could not remove the record of a failed capture")
        }
    }
}

/// Deletes a snapshot: the record is marked deleted, the archive removed,
/// and the image removed now or, while sandboxes made from it still exist,
/// by [`collect_garbage`] once they are gone.
pub async fn delete(svc: &Service, mut snapshot: Snapshot) -> ServiceResult<Snapshot> {
    if snapshot.status == SnapshotStatus::Creating {
        return Err(ServiceError::Conflict(format!(
            "Snapshot {} is still being captured",
            snapshot.id
        )));
    }
    snapshot.status = SnapshotStatus::Deleting;
    snapshot.deleted_at = Some(Utc::now().trunc_subsecs(6));
    svc.store.update_snapshot(&snapshot).await?;
    release(svc, &mut snapshot).await;
    Ok(snapshot)
}

/// Removes a DELETING snapshot's archive and, if no container uses it any
/// more, its image (then the record becomes DELETED). Failures are logged:
/// the next collection tries again.
pub async fn release(svc: &Service, snapshot: &mut Snapshot) {
    let image_key = Snapshot::image_blob_key_for(&snapshot.id);
    for key in snapshot.blob_key.iter().chain([&image_key]) {
        if let Err(e) = svc.blobs.delete(key).await {
            warn!(snapshot.id = %snapshot.id, error = %e, "could not remove a deleted snapshot's archive; will retry");
            return;
        }
    }
    match remove_image_everywhere(svc, &snapshot.image_ref).await {
        Ok(()) => {
            snapshot.status = SnapshotStatus::Deleted;
            if let Err(e) = svc.store.update_snapshot(snapshot).await {
                warn!(snapshot.id = %snapshot.id, error = %e, "could not record a snapshot as deleted; will retry");
            }
        }
        Err(RuntimeError::Conflict(_)) => {
            debug!(snapshot.id = %snapshot.id, "snapshot image still used by a sandbox; kept for now")
        }
        Err(e) => {
            warn!(snapshot.id = %snapshot.id, error = %e, "could not remove a deleted snapshot's image; will retry")
        }
    }
}

/// Marks a fork's internal snapshot deleted at once; its image goes when
/// the fork (and any other container using it) is gone.
pub async fn release_fork_snapshot(svc: &Service, mut snapshot: Snapshot) {
    snapshot.status = SnapshotStatus::Deleting;
    snapshot.deleted_at = Some(Utc::now().trunc_subsecs(6));
    if let Err(e) = svc.store.update_snapshot(&snapshot).await {
        error!(snapshot.id = %snapshot.id, error = %e, "could not mark a fork's snapshot deleted");
        return;
    }
    release(svc, &mut snapshot).await;
}

/// What one collection of snapshots removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CollectReport {
    pub snapshots_released: usize,
    pub stale_captures: usize,
}

/// Removes the images of deleted snapshots that no container uses any more
/// and what captures that died midway left.
pub async fn collect_garbage(svc: &Service) -> CollectReport {
    let mut report = CollectReport::default();
    let stale_before = Utc::now()
        - chrono::Duration::from_std(STALE_CAPTURE).unwrap_or(chrono::Duration::hours(1));
    match svc.store.pending_snapshots(stale_before).await {
        Ok(pending) => {
            for mut s in pending {
                match s.status {
                    SnapshotStatus::Deleting => {
                        release(svc, &mut s).await;
                        if s.status == SnapshotStatus::Deleted {
                            report.snapshots_released += 1;
                        }
                    }
                    SnapshotStatus::Creating => {
                        discard(svc, &s).await;
                        report.stale_captures += 1;
                    }
                    _ => {}
                }
            }
        }
        Err(e) => warn!(error = %e, "snapshot collection: could not list pending snapshots"),
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(n: usize, size: usize) -> stockade_runtime::ByteStream {
        let items = (0..n).map(move |_| Ok(bytes::Bytes::from(vec![7u8; size])));
        Box::pin(futures_util::stream::iter(items))
    }

    #[tokio::test]
    async fn a_stream_past_the_bytes_left_ends_there() {
        let (s, seen) = cut_after(chunks(10, 100), Some(250));
        let items: Vec<_> = s.collect().await;
        // Two chunks pass, the third ends the stream with an error.
        assert!(items[..2].iter().all(Result::is_ok));
        assert!(items[2].is_err());
        assert!(seen.load(Ordering::SeqCst) > 250);
        // No limit: everything passes, nothing is counted.
        let (s, seen) = cut_after(chunks(10, 100), None);
        let items: Vec<_> = s.collect().await;
        assert!(items.iter().all(Result::is_ok) && items.len() == 10);
        assert_eq!(seen.load(Ordering::SeqCst), 0);
        // Exactly the bytes left fit.
        let (s, _) = cut_after(chunks(2, 100), Some(200));
        assert!(s.collect::<Vec<_>>().await.iter().all(Result::is_ok));
    }
}
