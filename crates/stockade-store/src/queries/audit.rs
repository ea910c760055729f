//! The audit log: [`AuditStore`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use stockade_core::AccountId;

use super::corrupt;
use crate::db::SqlStore;
use crate::sql::{Backend, DbRow, Q};
use crate::{AuditFilter, AuditRecord, AuditStore, StoreResult};

const COLUMNS: &str = "seq, id, account_id, token_id, client_ip, action, front_end, resource_id, \
                       status, duration_ms, created_at";

fn entry_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<AuditRecord> {
    let id: String = row.get("id")?;
    let account: Option<String> = row.get("account_id")?;
    Ok(AuditRecord {
        seq: row.get("seq")?,
        account_id: account
            .as_deref()
            .map(AccountId::parse)
            .transpose()
            .map_err(|e| corrupt("audit entry", &id, e.message))?,
        token_id: row.get("token_id")?,
        client_ip: row.get("client_ip")?,
        action: row.get("action")?,
        front_end: row.get("front_end")?,
        resource_id: row.get("resource_id")?,
        status: u16::try_from(row.get::<i64>("status")?).unwrap_or(0),
        duration_ms: u64::try_from(row.get::<i64>("duration_ms")?).unwrap_or(0),
        at: row.ts("created_at")?,
        id,
    })
}

#[async_trait]
impl<B: Backend> AuditStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(entries = entries.len()), err(level = "debug"))]
    async fn insert_audit(&self, entries: &[AuditRecord]) -> StoreResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let context = "write audit entries";
        let mut conn = self.begin(context).await?;
        let result = async {
            // A few hundred rows per statement keeps well under both
            // databases' limits on bound values.
            for chunk in entries.chunks(200) {
                let mut q = Q::<B>::new(format!(
                    "INSERT INTO audit_log ({}) VALUES ",
                    COLUMNS.trim_start_matches("seq, ")
                ));
                for (i, e) in chunk.iter().enumerate() {
                    q = q
                        .sql(if i == 0 { "(" } else { ", (" })
                        .bind(e.id.clone())
                        .next(e.account_id.as_ref().map(|a| a.to_string()))
                        .next(e.token_id.clone())
                        .next(e.client_ip.clone())
                        .next(e.action.clone())
                        .next(e.front_end.clone())
                        .next(e.resource_id.clone())
                        .next(i64::from(e.status))
                        .next(i64::try_from(e.duration_ms).unwrap_or(i64::MAX))
                        .next_ts(e.at)
                        .sql(")");
                }
                conn.execute(q, context).await?;
            }
            Ok(())
        }
        .await;
        self.finish(conn, result, context).await
    }

    async fn list_audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditRecord>> {
        let mut q = Q::<B>::new(format!("SELECT {COLUMNS} FROM audit_log WHERE 1 = 1"));
        if let Some(account) = &filter.account {
            q = q.sql(" AND account_id = ").bind(account.to_string());
        }
        if let Some(after) = filter.after {
            q = q.sql(" AND seq > ").bind(after);
        }
        if let Some(before) = filter.before {
            q = q.sql(" AND seq < ").bind(before);
        }
        if let Some(resource) = &filter.resource {
            q = q.sql(" AND resource_id = ").bind(resource.clone());
        }
        q = q
            .sql(if filter.newest_first {
                " ORDER BY seq DESC LIMIT "
            } else {
                " ORDER BY seq LIMIT "
            })
            .bind(i64::from(filter.limit));
        self.list(q, "list audit entries", entry_from_row).await
    }

    async fn purge_audit(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let q = Q::<B>::new("DELETE FROM audit_log WHERE created_at < ").ts(before);
        self.execute(q, "purge audit entries").await
    }
}
