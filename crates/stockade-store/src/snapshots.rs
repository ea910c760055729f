//! What both backends share for snapshots (LC-10): the columns, and
//! rebuilding a [`Snapshot`] from its row without panicking on bad data.

use chrono::{DateTime, Utc};
use stockade_core::{AccountId, SandboxId, Snapshot, SnapshotId, SnapshotKind, SnapshotStatus};

use crate::StoreError;

/// The columns every snapshot read selects, in [`SnapshotRow`] order.
pub(crate) const SNAPSHOT_COLUMNS: &str = "id, account_id, source_sandbox_id, name, kind, \
     status, image_ref, blob_key, workspace_bytes, created_at, deleted_at";

/// One `snapshots` row with timestamps already decoded.
pub(crate) struct SnapshotRow {
    pub id: String,
    pub account_id: String,
    pub source_sandbox_id: String,
    pub name: String,
    pub kind: String,
    pub status: String,
    pub image_ref: String,
    pub blob_key: Option<String>,
    pub workspace_bytes: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

impl SnapshotRow {
    pub fn into_snapshot(self) -> Result<Snapshot, StoreError> {
        let corrupt = |what: String| {
            let message = format!("snapshot record '{}' is corrupt: {what}", self.id);
            tracing::error!(error = %message, "corrupt record");
            StoreError::Other(message)
        };
        Ok(Snapshot {
            id: SnapshotId::parse(&self.id).map_err(|e| corrupt(e.message))?,
            account_id: AccountId::parse(&self.account_id).map_err(|e| corrupt(e.message))?,
            source_sandbox_id: SandboxId::parse(&self.source_sandbox_id)
                .map_err(|e| corrupt(e.message))?,
            kind: SnapshotKind::parse(&self.kind).map_err(|e| corrupt(e.message))?,
            status: SnapshotStatus::parse(&self.status).map_err(|e| corrupt(e.message))?,
            workspace_bytes: self
                .workspace_bytes
                .map(u64::try_from)
                .transpose()
                .map_err(|_| corrupt("negative workspace_bytes".into()))?,
            name: self.name,
            image_ref: self.image_ref,
            blob_key: self.blob_key,
            created_at: self.created_at,
            deleted_at: self.deleted_at,
        })
    }
}

/// A byte count as the databases store it.
pub(crate) fn bytes_column(bytes: Option<u64>) -> Option<i64> {
    bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX))
}
