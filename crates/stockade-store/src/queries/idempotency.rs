//! `Idempotency-Key`s of creates: [`IdempotencyStore`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use stockade_core::{AccountId, SandboxId};

use super::corrupt;
use crate::db::SqlStore;
use crate::sql::{Backend, Q};
use crate::{IdempotencyStore, StoreError, StoreResult};

#[async_trait]
impl<B: Backend> IdempotencyStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn insert_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        request_hash: &str,
        sandbox: &SandboxId,
        expired_before: DateTime<Utc>,
    ) -> StoreResult<()> {
        // A key recorded earlier is taken over only when it has expired.
        let q = Q::<B>::new(
            "INSERT INTO idempotency_keys (account_id, key, request_hash, sandbox_id, created_at) \
             VALUES (",
        )
        .bind(account.to_string())
        .next(key.to_owned())
        .next(request_hash.to_owned())
        .next(sandbox.to_string())
        .next_ts(Utc::now())
        .sql(
            ") ON CONFLICT (account_id, key) DO UPDATE SET request_hash = excluded.request_hash, \
             sandbox_id = excluded.sandbox_id, created_at = excluded.created_at \
             WHERE idempotency_keys.created_at < ",
        )
        .ts(expired_before);
        match self.execute(q, "record idempotency key").await? {
            0 => Err(StoreError::Conflict("idempotency key already used".into())),
            _ => Ok(()),
        }
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn get_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        expired_before: DateTime<Utc>,
    ) -> StoreResult<Option<(String, SandboxId)>> {
        let q = Q::<B>::new(
            "SELECT request_hash, sandbox_id FROM idempotency_keys WHERE account_id = ",
        )
        .bind(account.to_string())
        .sql(" AND key = ")
        .bind(key.to_owned())
        .sql(" AND created_at >= ")
        .ts(expired_before);
        let Some(row) = self.fetch_optional(q, "read idempotency key").await? else {
            return Ok(None);
        };
        let id: String = row.get("sandbox_id")?;
        let id = SandboxId::parse(&id).map_err(|e| corrupt("idempotency key", key, e.message))?;
        Ok(Some((row.get("request_hash")?, id)))
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn delete_idempotency_key(&self, account: &AccountId, key: &str) -> StoreResult<()> {
        let q = Q::<B>::new("DELETE FROM idempotency_keys WHERE account_id = ")
            .bind(account.to_string())
            .sql(" AND key = ")
            .bind(key.to_owned());
        self.execute(q, "delete idempotency key").await.map(drop)
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn purge_idempotency_keys(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let q = Q::<B>::new("DELETE FROM idempotency_keys WHERE created_at < ").ts(before);
        self.execute(q, "purge expired idempotency keys").await
    }
}
