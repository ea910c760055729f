//! Shared volumes and their mounts: [`SharedVolumeStore`], and the mounts a
//! sandbox's insert writes (`insert_mounts_in`).

use async_trait::async_trait;
use chrono::Utc;
use stockade_core::{
    AccountId, Quota, Sandbox, SandboxId, Scope, SharedVolume, SharedVolumeId, SharedVolumeStatus,
    StoredQuotaExceeded,
};

use super::corrupt;
use crate::db::{Conn, SqlStore};
use crate::sql::{Backend, DbRow, Q};
use crate::{MountRecord, SharedVolumeStore, StoreError, StoreResult, MAX_VOLUMES_LISTED};

/// The columns every volume read selects.
const COLUMNS: &str = "id, account_id, name, server, size_gb, labels, status, created_at, \
     moving_to, moving_since, moved_from, deleted_at";

/// The name of the unique index on an account's volume names (PostgreSQL
/// reports it; SQLite names the columns).
const NAME_INDEX: &str = "shared_volumes_account_name";

fn volume_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<SharedVolume> {
    let id: String = row.get("id")?;
    let bad = |problem: String| corrupt("volume", &id, problem);
    let account_id: String = row.get("account_id")?;
    let status: String = row.get("status")?;
    let labels: String = row.get("labels")?;
    let size_gb: Option<i64> = row.get("size_gb")?;
    Ok(SharedVolume {
        id: SharedVolumeId::parse(&id).map_err(|e| bad(e.message))?,
        account_id: AccountId::parse(&account_id).map_err(|e| bad(e.message))?,
        name: row.get("name")?,
        server: row.get("server")?,
        size_gb: size_gb
            .map(u32::try_from)
            .transpose()
            .map_err(|_| bad("size_gb out of range".into()))?,
        labels: serde_json::from_str(&labels).map_err(|e| bad(format!("labels: {e}")))?,
        status: SharedVolumeStatus::parse(&status).map_err(|e| bad(e.message))?,
        created_at: row.ts("created_at")?,
        deleted_at: row.opt_ts("deleted_at")?,
        moving_to: row.get("moving_to")?,
        moving_since: row.opt_ts("moving_since")?,
        moved_from: row.get("moved_from")?,
    })
}

fn mount_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<MountRecord> {
    let volume: String = row.get("volume_id")?;
    let sandbox: String = row.get("sandbox_id")?;
    let bad = |problem: String| corrupt("volume mount", &volume, problem);
    Ok(MountRecord {
        volume_id: SharedVolumeId::parse(&volume).map_err(|e| bad(e.message))?,
        sandbox_id: SandboxId::parse(&sandbox).map_err(|e| bad(e.message))?,
        path: row.get("path")?,
        read_only: row.get("read_only")?,
    })
}

/// A taken name as the conflict it is.
fn name_conflict(err: &sqlx::Error, volume: &SharedVolume) -> Option<StoreError> {
    let db = err
        .as_database_error()
        .filter(|e| e.is_unique_violation())?;
    let on_name =
        db.constraint() == Some(NAME_INDEX) || db.message().contains("shared_volumes.name");
    Some(if on_name {
        StoreError::Conflict(format!("a volume named '{}' already exists", volume.name))
    } else {
        StoreError::Conflict(format!("a volume with id '{}' already exists", volume.id))
    })
}

impl<B: Backend> SqlStore<B> {
    /// Sets a READY volume's status to `to` (and `moving_to`) unless a
    /// sandbox not deleted mounts it; the ids of those that do (nothing
    /// changed) otherwise. `NotFound` when it is deleted; `Conflict` when it
    /// is not READY.
    async fn claim_unmounted(
        &self,
        id: &SharedVolumeId,
        to: SharedVolumeStatus,
        moving_to: Option<&str>,
    ) -> StoreResult<Vec<SandboxId>> {
        let context = format!("claim volume {id}");
        let mut conn = self.begin(&context).await?;
        let result = async {
            // The row first, locked: a create that mounts it has committed
            // its mount (read below) or waits and then finds it changed.
            let q = Q::<B>::new("SELECT status FROM shared_volumes WHERE id = ")
                .bind(id.to_string())
                .sql(" AND deleted_at IS NULL")
                .sql(B::ROW_UPDATE);
            let Some(row) = conn.fetch_optional(q, &context).await? else {
                return Err(StoreError::NotFound);
            };
            let status: String = row.get("status")?;
            if status != SharedVolumeStatus::Ready.as_str() {
                return Err(StoreError::Conflict(format!(
                    "the volume is {} now",
                    status.to_lowercase()
                )));
            }
            let q = Q::<B>::new(
                "SELECT DISTINCT m.sandbox_id FROM volume_mounts m JOIN sandboxes s \
                 ON s.id = m.sandbox_id WHERE s.deleted_at IS NULL AND m.volume_id = ",
            )
            .bind(id.to_string())
            .sql(" ORDER BY m.sandbox_id");
            let users = conn
                .fetch_all(q, &context)
                .await?
                .iter()
                .map(|row| {
                    let s: String = row.get("sandbox_id")?;
                    SandboxId::parse(&s)
                        .map_err(|e| corrupt("volume mount", id.as_str(), e.message))
                })
                .collect::<StoreResult<Vec<_>>>()?;
            if users.is_empty() {
                let q = Q::<B>::new("UPDATE shared_volumes SET status = ")
                    .bind(to.as_str().to_owned())
                    .set("moving_to", moving_to.map(str::to_owned))
                    .set_opt_ts("moving_since", moving_to.map(|_| Utc::now()))
                    .sql(" WHERE id = ")
                    .bind(id.to_string());
                conn.execute(q, &context).await?;
            }
            Ok(users)
        }
        .await;
        self.finish(conn, result, &context).await
    }

    /// Writes `sandbox`'s mounts inside its insert: each volume read with a
    /// share lock (a delete of it waits for this commit, and this waits for
    /// a delete's) and mounted only while it is READY, of the sandbox's
    /// account and not deleted; a `Conflict` naming it otherwise.
    pub(super) async fn insert_mounts_in(
        &self,
        conn: &mut Conn<B>,
        sandbox: &Sandbox,
        context: &str,
    ) -> StoreResult<()> {
        for mount in &sandbox.spec.mounts {
            let q = Q::<B>::new("SELECT status, account_id FROM shared_volumes WHERE id = ")
                .bind(mount.volume.clone())
                .sql(" AND deleted_at IS NULL")
                .sql(B::ROW_SHARE);
            let usable = match conn.fetch_optional(q, context).await? {
                Some(row) => {
                    row.get::<String>("status")? == SharedVolumeStatus::Ready.as_str()
                        && row.get::<String>("account_id")? == sandbox.account_id.as_str()
                }
                None => false,
            };
            if !usable {
                return Err(StoreError::Conflict(format!(
                    "volume '{}' is being deleted or is gone",
                    mount.name
                )));
            }
            let q = Q::<B>::new(
                "INSERT INTO volume_mounts (volume_id, sandbox_id, path, read_only) VALUES (",
            )
            .bind(mount.volume.clone())
            .next(sandbox.id.to_string())
            .next(mount.path.clone())
            .next(mount.read_only)
            .sql(")");
            conn.execute(q, context).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl<B: Backend> SharedVolumeStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(volume.id = %v.id), err(level = "debug"))]
    async fn insert_shared_volume(
        &self,
        v: &SharedVolume,
        quota: &Quota,
    ) -> StoreResult<Result<(), StoredQuotaExceeded>> {
        let labels = serde_json::to_string(&v.labels)
            .map_err(|e| StoreError::Other(format!("serialize labels of volume {}: {e}", v.id)))?;
        let context = format!("insert volume {}", v.id);
        let mut conn = self.begin(&context).await?;
        let result = async {
            // The account's other inserts wait from here to the commit, so
            // the sums below count every volume that is in.
            if let Some(lock) = B::ACCOUNT_LOCK {
                let q = Q::<B>::new(lock).bind(v.account_id.to_string()).sql("))");
                conn.fetch_all(q, &context).await?;
            }
            let used = self
                .shared_volume_usage_in(&mut conn, &v.account_id, &context)
                .await?;
            if let Err(refused) = quota.check_volume(&used, v.size_gb) {
                return Ok(Err(refused));
            }
            let q = Q::<B>::new(format!("INSERT INTO shared_volumes ({COLUMNS}) VALUES ("))
                .bind(v.id.to_string())
                .next(v.account_id.to_string())
                .next(v.name.clone())
                .next(v.server.clone())
                .next(v.size_gb.map(i64::from))
                .next(labels)
                .next(v.status.as_str().to_owned())
                .next_ts(v.created_at)
                .next(v.moving_to.clone())
                .next_opt_ts(v.moving_since)
                .next(v.moved_from.clone())
                .next_opt_ts(v.deleted_at)
                .sql(")");
            conn.execute_refined(q, &context, |e| name_conflict(e, v))
                .await?;
            Ok(Ok(()))
        }
        .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id), err(level = "debug"))]
    async fn get_shared_volume(&self, id: &SharedVolumeId) -> StoreResult<SharedVolume> {
        let q = Q::<B>::new(format!("SELECT {COLUMNS} FROM shared_volumes WHERE id = "))
            .bind(id.to_string());
        self.one(q, &format!("get volume {id}"), volume_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(account.id = %scope.account_id), err(level = "debug"))]
    async fn shared_volume_by_name(&self, scope: &Scope, name: &str) -> StoreResult<SharedVolume> {
        let q = Q::<B>::new(format!(
            "SELECT {COLUMNS} FROM shared_volumes WHERE account_id = "
        ))
        .bind(scope.account_id.to_string())
        .sql(" AND name = ")
        .bind(name.to_owned())
        .sql(" AND deleted_at IS NULL");
        self.one(q, &format!("get volume named {name}"), volume_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(account.id = %scope.account_id), err(level = "debug"))]
    async fn list_shared_volumes(&self, scope: &Scope) -> StoreResult<Vec<SharedVolume>> {
        let q = Q::<B>::new(format!(
            "SELECT {COLUMNS} FROM shared_volumes WHERE account_id = "
        ))
        .bind(scope.account_id.to_string())
        .sql(format_args!(
            " AND deleted_at IS NULL ORDER BY created_at DESC, id DESC LIMIT {MAX_VOLUMES_LISTED}"
        ));
        let context = format!("list volumes of account {}", scope.account_id);
        self.list(q, &context, volume_from_row).await
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id), err(level = "debug"))]
    async fn set_shared_volume_status(
        &self,
        id: &SharedVolumeId,
        status: SharedVolumeStatus,
    ) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE shared_volumes SET status = ")
            .bind(status.as_str().to_owned())
            .sql(" WHERE id = ")
            .bind(id.to_string())
            .sql(" AND deleted_at IS NULL");
        self.execute_one(q, &format!("set status of volume {id}"))
            .await
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id), err(level = "debug"))]
    async fn begin_shared_volume_delete(&self, id: &SharedVolumeId) -> StoreResult<Vec<SandboxId>> {
        self.claim_unmounted(id, SharedVolumeStatus::Deleting, None)
            .await
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id), err(level = "debug"))]
    async fn begin_shared_volume_move(
        &self,
        id: &SharedVolumeId,
        to: &str,
    ) -> StoreResult<Vec<SandboxId>> {
        self.claim_unmounted(id, SharedVolumeStatus::Moving, Some(to))
            .await
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id), err(level = "debug"))]
    async fn finish_shared_volume_move(&self, id: &SharedVolumeId) -> StoreResult<()> {
        // Every right-hand side reads the row as it was.
        let q = Q::<B>::new(
            "UPDATE shared_volumes SET moved_from = server, server = moving_to, \
             moving_to = NULL, moving_since = NULL, status = 'READY' \
             WHERE status = 'MOVING' AND id = ",
        )
        .bind(id.to_string());
        self.execute_one(q, &format!("end the move of volume {id}"))
            .await
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id), err(level = "debug"))]
    async fn abort_shared_volume_move(&self, id: &SharedVolumeId) -> StoreResult<()> {
        let q = Q::<B>::new(
            "UPDATE shared_volumes SET moving_to = NULL, moving_since = NULL, \
             status = 'READY' WHERE status = 'MOVING' AND id = ",
        )
        .bind(id.to_string());
        self.execute(q, &format!("give up the move of volume {id}"))
            .await
            .map(|_| ())
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id), err(level = "debug"))]
    async fn forget_moved_from(&self, id: &SharedVolumeId) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE shared_volumes SET moved_from = NULL WHERE id = ")
            .bind(id.to_string());
        self.execute(q, &format!("forget the old host of volume {id}"))
            .await
            .map(|_| ())
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id), err(level = "debug"))]
    async fn finish_shared_volume_delete(&self, id: &SharedVolumeId) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE shared_volumes SET deleted_at = ")
            .ts(Utc::now())
            .sql(" WHERE id = ")
            .bind(id.to_string())
            .sql(" AND deleted_at IS NULL");
        self.execute(q, &format!("end delete of volume {id}"))
            .await
            .map(|_| ())
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn pending_shared_volumes(&self) -> StoreResult<Vec<SharedVolume>> {
        let q = Q::<B>::new(format!(
            "SELECT {COLUMNS} FROM shared_volumes WHERE deleted_at IS NULL \
             AND (status <> 'READY' OR moved_from IS NOT NULL) ORDER BY created_at, id"
        ));
        self.list(q, "list pending volumes", volume_from_row).await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn mounts_of_volumes(&self, volumes: &[SharedVolumeId]) -> StoreResult<Vec<MountRecord>> {
        if volumes.is_empty() {
            return Ok(Vec::new());
        }
        let mut q = Q::<B>::new(
            "SELECT m.volume_id, m.sandbox_id, m.path, m.read_only FROM volume_mounts m \
             JOIN sandboxes s ON s.id = m.sandbox_id WHERE s.deleted_at IS NULL \
             AND m.volume_id IN (",
        );
        for (i, v) in volumes.iter().enumerate() {
            if i > 0 {
                q = q.sql(", ");
            }
            q = q.bind(v.to_string());
        }
        let q = q.sql(") ORDER BY m.volume_id, m.sandbox_id, m.path");
        self.list(q, "list volume mounts", mount_from_row).await
    }
}
