//! The audit log: who called what, on which resource, when, and what the
//! answer was. Front-ends hand entries over as calls end; one writer task
//! per service writes whatever is queued in one transaction, so a burst of
//! calls costs one write, and a request never waits for the database.

use stockade_core::{AccountId, Scope};
use stockade_store::{AuditFilter, AuditRecord};
use tokio::sync::mpsc;

use crate::events::{parse_cursor, parse_limit, MAX_PAGE};
use crate::{Service, ServiceError, ServiceResult};

/// Entries queued for the writer; when it falls this far behind, callers
/// wait for room rather than lose entries.
const QUEUE: usize = 10_000;
/// The most entries one write takes.
const BATCH: usize = 500;

/// The queue into the writer task.
#[derive(Debug, Clone)]
pub struct AuditLog {
    queue: mpsc::Sender<AuditRecord>,
}

impl AuditLog {
    /// The log and its writer task, which ends once every sender is gone
    /// and the queue is written.
    pub fn start(store: std::sync::Arc<dyn stockade_store::Store>) -> Self {
        let (queue, mut rx) = mpsc::channel::<AuditRecord>(QUEUE);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH);
            while rx.recv_many(&mut batch, BATCH).await > 0 {
                // A database that cannot write now is asked again a few
                // times; then the entries are logged and dropped, so the
                // queue never blocks the API for good.
                let mut tries = 0;
                while let Err(e) = store.insert_audit(&batch).await {
                    tries += 1;
                    if tries >= 5 {
                        tracing::error!(error = %e, entries = batch.len(), "audit entries could not be written");
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200 * tries)).await;
                }
                batch.clear();
            }
        });
        Self { queue }
    }

    /// Queues an entry (its `seq` is the database's to give); waits only
    /// when the writer is far behind.
    pub async fn record(&self, entry: AuditRecord) {
        if self.queue.send(entry).await.is_err() {
            tracing::warn!("the audit log's writer has ended; an entry was not written");
        }
    }
}

/// What an audit read asks for.
#[derive(Debug, Clone, Default)]
pub struct AuditRequest<'a> {
    pub since: Option<&'a str>,
    pub before: Option<&'a str>,
    pub newest_first: bool,
    pub limit: Option<u32>,
    /// Administrators: one account's entries.
    pub account: Option<&'a str>,
    pub resource: Option<&'a str>,
}

impl Service {
    /// A page of the audit log: an administrator's of every account (or of
    /// `account`), anyone else's only of their own. Oldest first after
    /// `since`; newest first before `before` (from the newest when
    /// `newest_first` and no `before`). The cursor reads on in the same
    /// direction.
    pub async fn audit_page(
        &self,
        scope: &Scope,
        is_admin: bool,
        request: &AuditRequest<'_>,
    ) -> ServiceResult<(Vec<AuditRecord>, i64)> {
        let after = parse_cursor(request.since, "since")?;
        let before = parse_cursor(request.before, "before")?;
        if after.is_some() && before.is_some() {
            return Err(ServiceError::field(
                "before",
                "reads back from a cursor: give `since` or `before`, not both",
            ));
        }
        let newest_first = request.newest_first || before.is_some();
        let limit = parse_limit(request.limit, MAX_PAGE)?;
        let (account, resource) = (request.account, request.resource);
        let account = match account.map(str::trim).filter(|a| !a.is_empty()) {
            Some(a) => {
                let id = AccountId::parse_field(a, "accountId").map_err(ServiceError::from)?;
                if !is_admin && id != scope.account_id {
                    return Err(ServiceError::Forbidden(
                        "Only administrators read other accounts' audit entries".into(),
                    ));
                }
                Some(id)
            }
            None if is_admin => None,
            None => Some(scope.account_id.clone()),
        };
        let filter = AuditFilter {
            account,
            after,
            before,
            newest_first,
            resource: resource
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_owned),
            limit,
        };
        let entries = self.store.list_audit(&filter).await?;
        let next = entries
            .last()
            .map(|e| e.seq)
            .or(if newest_first { before } else { after })
            .unwrap_or_default();
        Ok((entries, next))
    }

    /// Queues an audit entry of a call: `action` is the method and the
    /// route template, never the path as sent (a path can carry a token).
    pub async fn audit(&self, entry: AuditRecord) {
        self.audit_log().record(entry).await;
    }
}

/// The wire form of an audit entry.
pub fn audit_view(e: &AuditRecord) -> stockade_api::AuditEntry {
    stockade_api::AuditEntry {
        id: e.id.clone(),
        account_id: e.account_id.as_ref().map(|a| a.to_string()),
        token_id: e.token_id.clone(),
        client_ip: e.client_ip.clone(),
        action: e.action.clone(),
        front_end: e.front_end.clone(),
        resource_id: e.resource_id.clone(),
        status: e.status,
        timestamp: e.at,
        duration_ms: e.duration_ms,
        cursor: e.seq.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[tokio::test]
    async fn queued_entries_are_written_in_batches() {
        let store = stockade_store::connect("sqlite::memory:").await.unwrap();
        let log = AuditLog::start(store.clone());
        for i in 0..1200 {
            log.record(AuditRecord {
                seq: 0,
                id: format!("entry-{i}"),
                account_id: None,
                token_id: None,
                client_ip: None,
                action: format!("POST /api/v1/thing/{i}"),
                front_end: "api".into(),
                resource_id: None,
                status: 201,
                duration_ms: 1,
                at: Utc::now(),
            })
            .await;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let all = store
                .list_audit(&AuditFilter {
                    limit: 100,
                    after: Some(1100),
                    ..AuditFilter::default()
                })
                .await
                .unwrap();
            if all.len() == 100 {
                assert_eq!(all.last().unwrap().action, "POST /api/v1/thing/1199");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "only {} written",
                all.len()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
