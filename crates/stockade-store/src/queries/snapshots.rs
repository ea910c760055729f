//! Snapshot records: [`SnapshotStore`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use stockade_core::events::snapshot_events;
use stockade_core::{
    AccountId, SandboxId, Scope, Snapshot, SnapshotId, SnapshotKind, SnapshotStatus,
};

use super::corrupt;
use crate::db::SqlStore;
use crate::sql::{Backend, DbRow, Q};
use crate::{SnapshotStore, StoreError, StoreResult, MAX_SNAPSHOTS_LISTED};

/// The columns every snapshot read selects.
const COLUMNS: &str = "id, account_id, source_sandbox_id, name, kind, status, image_ref, \
     blob_key, workspace_bytes, image_bytes, environment_vars, created_at, deleted_at";

fn snapshot_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Snapshot> {
    let id: String = row.get("id")?;
    let bad = |problem: String| corrupt("snapshot", &id, problem);
    let account_id: String = row.get("account_id")?;
    let source: String = row.get("source_sandbox_id")?;
    let kind: String = row.get("kind")?;
    let status: String = row.get("status")?;
    let bytes: Option<i64> = row.get("workspace_bytes")?;
    let image_bytes: Option<i64> = row.get("image_bytes")?;
    let env: Option<String> = row.get("environment_vars")?;
    Ok(Snapshot {
        environment_vars: env
            .map(|e| serde_json::from_str(&e))
            .transpose()
            .map_err(|e| bad(format!("environment_vars: {e}")))?,
        id: SnapshotId::parse(&id).map_err(|e| bad(e.message))?,
        account_id: AccountId::parse(&account_id).map_err(|e| bad(e.message))?,
        source_sandbox_id: SandboxId::parse(&source).map_err(|e| bad(e.message))?,
        kind: SnapshotKind::parse(&kind).map_err(|e| bad(e.message))?,
        status: SnapshotStatus::parse(&status).map_err(|e| bad(e.message))?,
        workspace_bytes: bytes
            .map(u64::try_from)
            .transpose()
            .map_err(|_| bad("negative workspace_bytes".into()))?,
        image_bytes: image_bytes
            .map(u64::try_from)
            .transpose()
            .map_err(|_| bad("negative image_bytes".into()))?,
        name: row.get("name")?,
        image_ref: row.get("image_ref")?,
        blob_key: row.get("blob_key")?,
        created_at: row.ts("created_at")?,
        deleted_at: row.opt_ts("deleted_at")?,
    })
}

/// A byte count as the databases store it.
fn bytes_column(bytes: Option<u64>) -> Option<i64> {
    bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX))
}

/// The environment column: a JSON object, or NULL.
fn env_column(s: &Snapshot) -> StoreResult<Option<String>> {
    s.environment_vars
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Other(format!("serialize environment of snapshot {}: {e}", s.id)))
}

#[async_trait]
impl<B: Backend> SnapshotStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(snapshot.id = %s.id), err(level = "debug"))]
    async fn insert_snapshot(&self, s: &Snapshot) -> StoreResult<()> {
        let q = Q::<B>::new(format!("INSERT INTO snapshots ({COLUMNS}) VALUES ("))
            .bind(s.id.to_string())
            .next(s.account_id.to_string())
            .next(s.source_sandbox_id.to_string())
            .next(s.name.clone())
            .next(s.kind.as_str().to_owned())
            .next(s.status.as_str().to_owned())
            .next(s.image_ref.clone())
            .next(s.blob_key.clone())
            .next(bytes_column(s.workspace_bytes))
            .next(bytes_column(s.image_bytes))
            .next(env_column(s)?)
            .next_ts(s.created_at)
            .next_opt_ts(s.deleted_at)
            .sql(")");
        let context = format!("insert snapshot {}", s.id);
        let mut conn = self.begin(&context).await?;
        let result = async {
            conn.execute(q, &context).await?;
            let events = snapshot_events(None, s, Utc::now());
            self.write_events_in(&mut conn, &events, &context).await
        }
        .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(snapshot.id = %id), err(level = "debug"))]
    async fn get_snapshot(&self, scope: &Scope, id: &SnapshotId) -> StoreResult<Snapshot> {
        let q = Q::<B>::new(format!("SELECT {COLUMNS} FROM snapshots WHERE id = "))
            .bind(id.to_string());
        let snapshot = self
            .one(q, &format!("get snapshot {id}"), snapshot_from_row)
            .await?;
        if snapshot.account_id == scope.account_id {
            Ok(snapshot)
        } else {
            Err(StoreError::Forbidden)
        }
    }

    #[tracing::instrument(skip_all, fields(account.id = %scope.account_id), err(level = "debug"))]
    async fn list_snapshots(
        &self,
        scope: &Scope,
        source: Option<&SandboxId>,
    ) -> StoreResult<Vec<Snapshot>> {
        let mut q = Q::<B>::new(format!(
            "SELECT {COLUMNS} FROM snapshots WHERE account_id = "
        ))
        .bind(scope.account_id.to_string())
        .sql(" AND kind = 'user' AND deleted_at IS NULL");
        if let Some(source) = source {
            q = q.sql(" AND source_sandbox_id = ").bind(source.to_string());
        }
        let q = q.sql(format_args!(
            " ORDER BY created_at DESC, id DESC LIMIT {MAX_SNAPSHOTS_LISTED}"
        ));
        let context = format!("list snapshots of account {}", scope.account_id);
        self.list(q, &context, snapshot_from_row).await
    }

    #[tracing::instrument(skip_all, fields(snapshot.id = %s.id), err(level = "debug"))]
    async fn update_snapshot(&self, s: &Snapshot) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE snapshots SET name = ")
            .bind(s.name.clone())
            .set("status", s.status.as_str().to_owned())
            .set("blob_key", s.blob_key.clone())
            .set("workspace_bytes", bytes_column(s.workspace_bytes))
            .set("image_bytes", bytes_column(s.image_bytes))
            .set_opt_ts("deleted_at", s.deleted_at)
            .sql(" WHERE id = ")
            .bind(s.id.to_string());
        let context = format!("update snapshot {}", s.id);
        let mut conn = self.begin(&context).await?;
        let result = async {
            let before = Q::<B>::new(format!("SELECT {COLUMNS} FROM snapshots WHERE id = "))
                .bind(s.id.to_string());
            let before = conn.fetch_optional(before, &context).await?;
            let before = before.as_ref().map(snapshot_from_row).transpose()?;
            if conn.execute(q, &context).await? == 0 {
                return Err(StoreError::NotFound);
            }
            let events = snapshot_events(before.as_ref(), s, Utc::now());
            self.write_events_in(&mut conn, &events, &context).await
        }
        .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(snapshot.id = %id), err(level = "debug"))]
    async fn purge_snapshot(&self, id: &SnapshotId) -> StoreResult<()> {
        let q = Q::<B>::new("DELETE FROM snapshots WHERE id = ").bind(id.to_string());
        self.execute_one(q, &format!("purge snapshot {id}")).await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn pending_snapshots(
        &self,
        creating_before: DateTime<Utc>,
    ) -> StoreResult<Vec<Snapshot>> {
        let q = Q::<B>::new(format!(
            "SELECT {COLUMNS} FROM snapshots WHERE status = 'DELETING' \
             OR (status = 'CREATING' AND created_at < "
        ))
        .ts(creating_before)
        .sql(") ORDER BY created_at, id");
        self.list(q, "list snapshots pending removal", snapshot_from_row)
            .await
    }
}
