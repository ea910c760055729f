//! Snapshot records (LC-10) on SQLite; the `Store` methods delegate here.

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use stockade_core::{SandboxId, Scope, Snapshot, SnapshotId};

use super::{get, get_opt_ts, get_ts, opt_ts, ts, SqliteStore};
use crate::common::map_err;
use crate::snapshots::{bytes_column, SnapshotRow, SNAPSHOT_COLUMNS};
use crate::{StoreError, StoreResult, MAX_SNAPSHOTS_LISTED};

fn snapshot_from_row(row: &SqliteRow) -> StoreResult<Snapshot> {
    SnapshotRow {
        id: get(row, "id")?,
        account_id: get(row, "account_id")?,
        source_sandbox_id: get(row, "source_sandbox_id")?,
        name: get(row, "name")?,
        kind: get(row, "kind")?,
        status: get(row, "status")?,
        image_ref: get(row, "image_ref")?,
        blob_key: get(row, "blob_key")?,
        workspace_bytes: get(row, "workspace_bytes")?,
        created_at: get_ts(row, "created_at")?,
        deleted_at: get_opt_ts(row, "deleted_at")?,
    }
    .into_snapshot()
}

impl SqliteStore {
    pub(super) async fn insert_snapshot_impl(&self, s: &Snapshot) -> StoreResult<()> {
        sqlx::query(&format!(
            "INSERT INTO snapshots ({SNAPSHOT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ))
        .bind(s.id.as_str())
        .bind(s.account_id.as_str())
        .bind(s.source_sandbox_id.as_str())
        .bind(&s.name)
        .bind(s.kind.as_str())
        .bind(s.status.as_str())
        .bind(&s.image_ref)
        .bind(s.blob_key.as_deref())
        .bind(bytes_column(s.workspace_bytes))
        .bind(ts(s.created_at))
        .bind(opt_ts(s.deleted_at))
        .execute(&self.pool)
        .await
        .map_err(map_err(format_args!("insert snapshot {}", s.id)))?;
        Ok(())
    }

    pub(super) async fn get_snapshot_impl(
        &self,
        scope: &Scope,
        id: &SnapshotId,
    ) -> StoreResult<Snapshot> {
        let row = sqlx::query(&format!(
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE id = ?"
        ))
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err(format_args!("get snapshot {id}")))?
        .ok_or(StoreError::NotFound)?;
        let snapshot = snapshot_from_row(&row)?;
        if snapshot.account_id == scope.account_id {
            Ok(snapshot)
        } else {
            Err(StoreError::Forbidden)
        }
    }

    pub(super) async fn list_snapshots_impl(
        &self,
        scope: &Scope,
        source: Option<&SandboxId>,
    ) -> StoreResult<Vec<Snapshot>> {
        let source_filter = if source.is_some() {
            " AND source_sandbox_id = ?"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE account_id = ? AND kind = 'user' \
             AND deleted_at IS NULL{source_filter} ORDER BY created_at DESC, id DESC \
             LIMIT {MAX_SNAPSHOTS_LISTED}"
        );
        let mut query = sqlx::query(&sql).bind(scope.account_id.as_str());
        if let Some(source) = source {
            query = query.bind(source.as_str());
        }
        query
            .fetch_all(&self.pool)
            .await
            .map_err(map_err(format_args!(
                "list snapshots of account {}",
                scope.account_id
            )))?
            .iter()
            .map(snapshot_from_row)
            .collect()
    }

    pub(super) async fn update_snapshot_impl(&self, s: &Snapshot) -> StoreResult<()> {
        let updated = sqlx::query(
            "UPDATE snapshots SET name = ?, status = ?, blob_key = ?, workspace_bytes = ?, \
             deleted_at = ? WHERE id = ?",
        )
        .bind(&s.name)
        .bind(s.status.as_str())
        .bind(s.blob_key.as_deref())
        .bind(bytes_column(s.workspace_bytes))
        .bind(opt_ts(s.deleted_at))
        .bind(s.id.as_str())
        .execute(&self.pool)
        .await
        .map_err(map_err(format_args!("update snapshot {}", s.id)))?
        .rows_affected();
        if updated == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub(super) async fn purge_snapshot_impl(&self, id: &SnapshotId) -> StoreResult<()> {
        let deleted = sqlx::query("DELETE FROM snapshots WHERE id = ?")
            .bind(id.as_str())
            .execute(&self.pool)
            .await
            .map_err(map_err(format_args!("purge snapshot {id}")))?
            .rows_affected();
        if deleted == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub(super) async fn pending_snapshots_impl(
        &self,
        creating_before: DateTime<Utc>,
    ) -> StoreResult<Vec<Snapshot>> {
        sqlx::query(&format!(
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE status = 'DELETING' \
             OR (status = 'CREATING' AND created_at < ?) ORDER BY created_at, id"
        ))
        .bind(ts(creating_before))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err("list snapshots pending removal"))?
        .iter()
        .map(snapshot_from_row)
        .collect()
    }
}
