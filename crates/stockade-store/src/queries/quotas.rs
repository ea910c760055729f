//! Account quotas and the resource sums they and admission control compare
//! against: [`QuotaStore`].

use async_trait::async_trait;
use chrono::{SubsecRound, Utc};
use stockade_core::{
    Account, AccountId, Quota, QuotaUsage, Resources, SandboxId, SharedVolumeUsage, SnapshotId,
};

use crate::db::{is_foreign_key_violation, Conn, SqlStore};
use crate::sql::{Backend, DbRow, Q};
use crate::{QuotaStore, StoreError, StoreResult};

/// The statuses of a record whose sandbox holds CPU and memory on its host
/// (see [`stockade_core::quota::holds_resources`]).
pub(super) const HOLDING: &str = "('RUNNING', 'PAUSED', 'PROVISIONING', 'PENDING')";

/// A limit as stored: `NULL` is unlimited.
fn limit(v: Option<u64>) -> Option<i64> {
    v.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

fn read_limit<B: Backend>(row: &DbRow<B>, column: &str) -> StoreResult<Option<u64>> {
    let v: Option<i64> = row.get(column)?;
    Ok(v.map(|n| n.max(0) as u64))
}

pub(super) fn read_sum<B: Backend>(row: &DbRow<B>, column: &str) -> StoreResult<u64> {
    let v: i64 = row.get(column)?;
    Ok(v.max(0) as u64)
}

/// Appends ` AND s.id NOT IN (…)` for a non-empty `except`.
fn except_ids<B: Backend>(mut q: Q<B>, except: &[SandboxId]) -> Q<B> {
    for (i, id) in except.iter().enumerate() {
        q = q.sql(if i == 0 { " AND s.id NOT IN (" } else { ", " });
        q = q.bind(id.to_string());
    }
    if !except.is_empty() {
        q = q.sql(")");
    }
    q
}

/// The CPU and memory sums of an aggregate row (columns `cpu`, `memory`).
fn read_resources<B: Backend>(row: &DbRow<B>) -> StoreResult<Resources> {
    Ok(Resources {
        cpu_millis: read_sum(row, "cpu")?,
        memory_bytes: read_sum(row, "memory")?,
    })
}

impl<B: Backend> SqlStore<B> {
    /// How many volumes of `account` are not deleted and the total of
    /// their `size_gb`, read on `conn` (inside a volume's insert, after
    /// its account's lock).
    pub(super) async fn shared_volume_usage_in(
        &self,
        conn: &mut Conn<B>,
        account: &AccountId,
        context: &str,
    ) -> StoreResult<SharedVolumeUsage> {
        let q = Q::<B>::new(
            "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(size_gb), 0) AS BIGINT) AS gb \
             FROM shared_volumes WHERE account_id = ",
        )
        .bind(account.to_string())
        .sql(" AND deleted_at IS NULL");
        let row = conn.fetch_aggregate(q, context).await?;
        Ok(SharedVolumeUsage {
            volumes: read_sum(&row, "n")?,
            volume_gb: read_sum(&row, "gb")?,
        })
    }

    /// Writes the quota row of `account` (insert or replace).
    async fn upsert_quota_in(
        &self,
        conn: &mut Conn<B>,
        account: &AccountId,
        quota: &Quota,
        context: &str,
    ) -> StoreResult<()> {
        let q = Q::<B>::new(
            "INSERT INTO account_quotas \
             (account_id, sandboxes, cpu_millis, memory_bytes, disk_gb, snapshots, \
             snapshot_bytes, uploads, upload_bytes, volumes, volume_gb, updated_at) VALUES (",
        )
        .bind(account.to_string())
        .next(limit(quota.sandboxes))
        .next(limit(quota.cpu_millis))
        .next(limit(quota.memory_bytes))
        .next(limit(quota.disk_gb))
        .next(limit(quota.snapshots))
        .next(limit(quota.snapshot_bytes))
        .next(limit(quota.uploads))
        .next(limit(quota.upload_bytes))
        .next(limit(quota.volumes))
        .next(limit(quota.volume_gb))
        .next_ts(Utc::now())
        .sql(
            ") ON CONFLICT (account_id) DO UPDATE SET sandboxes = excluded.sandboxes, \
             cpu_millis = excluded.cpu_millis, memory_bytes = excluded.memory_bytes, \
             disk_gb = excluded.disk_gb, snapshots = excluded.snapshots, \
             snapshot_bytes = excluded.snapshot_bytes, uploads = excluded.uploads, \
             upload_bytes = excluded.upload_bytes, volumes = excluded.volumes, \
             volume_gb = excluded.volume_gb, updated_at = excluded.updated_at",
        );
        conn.execute_refined(q, context, |e| {
            is_foreign_key_violation(e).then_some(StoreError::NotFound)
        })
        .await
        .map(drop)
    }
}

#[async_trait]
impl<B: Backend> QuotaStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(account.name = %name), err(level = "debug"))]
    async fn create_account_with_quota(
        &self,
        name: &str,
        is_admin: bool,
        quota: &Quota,
    ) -> StoreResult<Account> {
        // What a later read returns: microsecond precision.
        let account = Account::new(name, is_admin, Utc::now().trunc_subsecs(6));
        let context = format!("create account '{name}' with its quota");
        let mut conn = self.begin(&context).await?;
        let result = async {
            self.insert_account_in(&mut conn, &account, &context)
                .await?;
            if !quota.is_unlimited() {
                self.upsert_quota_in(&mut conn, &account.id, quota, &context)
                    .await?;
            }
            Ok(())
        }
        .await;
        self.finish(conn, result, &context).await?;
        Ok(account)
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn get_quota(&self, account: &AccountId) -> StoreResult<Quota> {
        let q = Q::<B>::new(
            "SELECT q.sandboxes, q.cpu_millis, q.memory_bytes, q.disk_gb, q.snapshots, \
             q.snapshot_bytes, q.uploads, q.upload_bytes, q.volumes, q.volume_gb FROM accounts a \
             LEFT JOIN account_quotas q ON q.account_id = a.id WHERE a.id = ",
        )
        .bind(account.to_string());
        let row = self
            .fetch_optional(q, &format!("get the quota of account {account}"))
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok(Quota {
            sandboxes: read_limit(&row, "sandboxes")?,
            cpu_millis: read_limit(&row, "cpu_millis")?,
            memory_bytes: read_limit(&row, "memory_bytes")?,
            disk_gb: read_limit(&row, "disk_gb")?,
            snapshots: read_limit(&row, "snapshots")?,
            snapshot_bytes: read_limit(&row, "snapshot_bytes")?,
            uploads: read_limit(&row, "uploads")?,
            upload_bytes: read_limit(&row, "upload_bytes")?,
            volumes: read_limit(&row, "volumes")?,
            volume_gb: read_limit(&row, "volume_gb")?,
        })
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn set_quota(&self, account: &AccountId, quota: &Quota) -> StoreResult<()> {
        let context = format!("set the quota of account {account}");
        let mut conn = self.conn(&context).await?;
        self.upsert_quota_in(&mut conn, account, quota, &context)
            .await
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn account_usage(
        &self,
        account: &AccountId,
        except: &[SandboxId],
    ) -> StoreResult<QuotaUsage> {
        let q = Q::<B>::new(format!(
            "SELECT COUNT(*) AS n, \
             CAST(COALESCE(SUM(CASE WHEN s.status IN {HOLDING} THEN s.cpu_millis ELSE 0 END), 0) AS BIGINT) AS cpu, \
             CAST(COALESCE(SUM(CASE WHEN s.status IN {HOLDING} THEN s.memory_bytes ELSE 0 END), 0) AS BIGINT) AS memory, \
             CAST(COALESCE(SUM(s.disk_gb), 0) AS BIGINT) AS disk \
             FROM sandboxes s WHERE s.account_id = "
        ))
        .bind(account.to_string())
        .sql(" AND s.deleted_at IS NULL AND s.status <> 'TERMINATED'");
        let q = except_ids(q, except);
        let row = self
            .fetch_aggregate(q, &format!("sum the usage of account {account}"))
            .await?;
        Ok(QuotaUsage {
            sandboxes: read_sum(&row, "n")?,
            running: read_resources(&row)?,
            disk_gb: read_sum(&row, "disk")?,
        })
    }

    #[tracing::instrument(skip_all, fields(server), err(level = "debug"))]
    async fn server_reserved(&self, server: &str, except: &[SandboxId]) -> StoreResult<Resources> {
        let q = Q::<B>::new(
            "SELECT CAST(COALESCE(SUM(s.cpu_millis), 0) AS BIGINT) AS cpu, \
             CAST(COALESCE(SUM(s.memory_bytes), 0) AS BIGINT) AS memory \
             FROM sandboxes s WHERE s.server = ",
        )
        .bind(server.to_owned())
        .sql(format_args!(
            " AND s.deleted_at IS NULL AND s.status IN {HOLDING}"
        ));
        let q = except_ids(q, except);
        let row = self
            .fetch_aggregate(q, &format!("sum what server '{server}' holds"))
            .await?;
        read_resources(&row)
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn snapshot_usage(
        &self,
        account: &AccountId,
        except: Option<&SnapshotId>,
    ) -> StoreResult<(u64, u64)> {
        let mut q = Q::<B>::new(
            "SELECT COUNT(*) AS n, \
             CAST(COALESCE(SUM(COALESCE(workspace_bytes, 0) + COALESCE(image_bytes, 0)), 0) AS BIGINT) AS bytes \
             FROM snapshots WHERE account_id = ",
        )
        .bind(account.to_string())
        .sql(" AND kind = 'user' AND deleted_at IS NULL");
        if let Some(id) = except {
            q = q.sql(" AND id <> ").bind(id.to_string());
        }
        let row = self
            .fetch_aggregate(q, &format!("sum the snapshots of account {account}"))
            .await?;
        Ok((read_sum(&row, "n")?, read_sum(&row, "bytes")?))
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn shared_volume_usage(&self, account: &AccountId) -> StoreResult<SharedVolumeUsage> {
        let context = format!("sum the volumes of account {account}");
        let mut conn = self.conn(&context).await?;
        self.shared_volume_usage_in(&mut conn, account, &context)
            .await
    }
}
