//! Snapshot records (LC-10) on PostgreSQL; the `Store` methods delegate here.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use stockade_core::{SandboxId, Scope, Snapshot, SnapshotId};

use super::{get, PgStore};
use crate::common::map_err;
use crate::snapshots::{bytes_column, SnapshotRow, SNAPSHOT_COLUMNS};
use crate::{StoreError, StoreResult, MAX_SNAPSHOTS_LISTED};

fn snapshot_from_row(row: &PgRow) -> StoreResult<Snapshot> {
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
        created_at: get(row, "created_at")?,
        deleted_at: get(row, "deleted_at")?,
    }
    .into_snapshot()
}

impl PgStore {
    pub(super) async fn insert_snapshot_impl(&self, s: &Snapshot) -> StoreResult<()> {
        sqlx::query(&format!(
            "INSERT INTO snapshots ({SNAPSHOT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
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
        .bind(s.created_at)
        .bind(s.deleted_at)
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
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE id = $1"
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
            " AND source_sandbox_id = $2"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE account_id = $1 AND kind = 'user' \
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
            "UPDATE snapshots SET name = $1, status = $2, blob_key = $3, workspace_bytes = $4, \
             deleted_at = $5 WHERE id = $6",
        )
        .bind(&s.name)
        .bind(s.status.as_str())
        .bind(s.blob_key.as_deref())
        .bind(bytes_column(s.workspace_bytes))
        .bind(s.deleted_at)
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
        let deleted = sqlx::query("DELETE FROM snapshots WHERE id = $1")
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
             OR (status = 'CREATING' AND created_at < $1) ORDER BY created_at, id"
        ))
        .bind(creating_before)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err("list snapshots pending removal"))?
        .iter()
        .map(snapshot_from_row)
        .collect()
    }
}
