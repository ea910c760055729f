//! Leases held by one server instance at a time: [`LeaseStore`].
//! Taking and renewing are one conditional upsert, so of several instances
//! contending at once exactly one holds the lease afterwards: PostgreSQL
//! locks the conflicting row and checks the condition against its newest
//! version; SQLite writes one statement at a time.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::corrupt;
use crate::db::SqlStore;
use crate::sql::{Backend, DbRow, Q};
use crate::{Lease, LeaseStore, StoreError, StoreResult};

/// The longest lease name and holder id accepted.
const MAX_LEN: usize = 200;

fn lease_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Lease> {
    let name: String = row.get("name")?;
    let holder: String = row.get("holder")?;
    if holder.is_empty() {
        return Err(corrupt("lease", &name, "empty holder"));
    }
    Ok(Lease {
        expires_at: row.ts("expires_at")?,
        name,
        holder,
    })
}

/// A lease name or holder id: not empty, printable, not too long.
fn check_text(field: &str, value: &str) -> StoreResult<()> {
    if value.is_empty() || value.len() > MAX_LEN || value.chars().any(char::is_control) {
        return Err(StoreError::Other(format!(
            "{field} must be 1 to {MAX_LEN} printable characters, got {value:?}"
        )));
    }
    Ok(())
}

#[async_trait]
impl<B: Backend> LeaseStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(lease.name = %name, lease.holder = %holder), err(level = "debug"))]
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<Option<Lease>> {
        check_text("lease name", name)?;
        check_text("lease holder", holder)?;
        if expires_at <= now {
            return Err(StoreError::Other(format!(
                "expires_at ({expires_at}) must be after now ({now})"
            )));
        }
        let context = format!("take the lease '{name}'");
        // Taken when nobody holds it, renewed by its holder, taken over once
        // the holder's term ended: otherwise nothing is written and nothing
        // comes back.
        let q = Q::<B>::new("INSERT INTO leases (name, holder, expires_at) VALUES (")
            .bind(name.to_owned())
            .next(holder.to_owned())
            .next_ts(expires_at)
            .sql(
                ") ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                 expires_at = excluded.expires_at \
                 WHERE leases.holder = excluded.holder OR leases.expires_at <= ",
            )
            .ts(now)
            .sql(" RETURNING name, holder, expires_at");
        let row = self
            .conn(&context)
            .await?
            .returning_optional(q, &context)
            .await?;
        row.as_ref().map(lease_from_row).transpose()
    }

    #[tracing::instrument(skip_all, fields(lease.name = %name), err(level = "debug"))]
    async fn get_lease(&self, name: &str) -> StoreResult<Option<Lease>> {
        let q = Q::<B>::new("SELECT name, holder, expires_at FROM leases WHERE name = ")
            .bind(name.to_owned());
        let row = self
            .fetch_optional(q, &format!("read the lease '{name}'"))
            .await?;
        row.as_ref().map(lease_from_row).transpose()
    }

    #[tracing::instrument(skip_all, fields(lease.name = %name, lease.holder = %holder), err(level = "debug"))]
    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<bool> {
        let q = Q::<B>::new("DELETE FROM leases WHERE name = ")
            .bind(name.to_owned())
            .sql(" AND holder = ")
            .bind(holder.to_owned());
        let gone = self
            .execute(q, &format!("release the lease '{name}'"))
            .await?;
        Ok(gone > 0)
    }
}
