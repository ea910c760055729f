//! Workspace sync to the object store: `DELETE /sandbox/{id}?sync=true`
//! uploads `/workspace` as a tar before anything is deleted, and records
//! where it went (`metadata.s3_config`, never a secret) and what was stored
//! (`metadata.s3_sync`: key, bytes, completion time). If the upload or the
//! record write fails, nothing is deleted and the error is returned.

use chrono::{SubsecRound, Utc};
use stockade_core::{Sandbox, Scope};
use stockade_runtime::RuntimeError;
use stockade_store::StoreError;
use tracing::{info, warn};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// `syncs/{account}/{sandbox}/{timestamp}.tar`.
pub fn sync_key(sb: &Sandbox, at: chrono::DateTime<Utc>) -> String {
    format!(
        "syncs/{}/{}/{}.tar",
        sb.account_id,
        sb.id,
        at.format("%Y%m%dT%H%M%S%.6fZ")
    )
}

/// Uploads the sandbox's `/workspace` and records the sync on its record;
/// returns the updated record.
pub async fn sync(svc: &Service, sb: Sandbox) -> ServiceResult<Sandbox> {
    if sb.is_terminated() {
        return Err(ServiceError::Conflict(format!(
            "Sandbox {} is already terminated: there is no /workspace left to sync",
            sb.id
        )));
    }
    if sb.is_being_created() {
        return Err(ServiceError::Conflict(format!(
            "Sandbox {} is still being created; delete it once create returns",
            sb.id
        )));
    }
    let started = Utc::now();
    let key = sync_key(&sb, started);
    let workspace = svc
        .runtime_for(&sb)
        .await?
        .export_workspace(&sb.id)
        .await
        .map_err(|e| match e {
            RuntimeError::NotFound(_) => ServiceError::Conflict(format!(
                "The container of sandbox {} no longer exists on its Docker host, so /workspace cannot be synced; delete without sync=true",
                sb.id
            )),
            other => other.into(),
        })?;
    let bytes = svc.blobs.put_stream(&key, workspace).await?;
    let completed = Utc::now().trunc_subsecs(6);
    let record = serde_json::json!({
        "key": key,
        "bytes": bytes,
        "started_at": started,
        "completed_at": completed,
    });
    let location = svc.blobs.location();
    match write_sync(svc, sb, &record, &location).await {
        Ok(saved) => {
            info!(sandbox.id = %saved.id, key, bytes, "workspace synced to the object store");
            Ok(saved)
        }
        Err(e) => {
            // Nothing will be deleted: do not leave a sync the record does not know.
            if let Err(de) = svc.blobs.delete(&key).await {
                warn!(key, error = %de, "could not remove an unrecorded workspace sync");
            }
            Err(e)
        }
    }
}

/// Writes `s3_sync` and `s3_config`; retries once on a concurrent update.
async fn write_sync(
    svc: &Service,
    mut sb: Sandbox,
    record: &serde_json::Value,
    location: &serde_json::Value,
) -> ServiceResult<Sandbox> {
    for attempt in 0..2 {
        sb.s3_sync = Some(record.clone());
        sb.s3_config = Some(location.clone());
        match svc.store.update_sandbox(&sb).await {
            Ok(saved) => return Ok(saved),
            Err(StoreError::Conflict(_)) if attempt == 0 => {
                sb = svc
                    .store
                    .get_sandbox(&Scope::account(sb.account_id.clone()), &sb.id)
                    .await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ServiceError::Conflict(format!(
        "Sandbox {} kept changing while its sync was recorded; retry",
        sb.id
    )))
}
