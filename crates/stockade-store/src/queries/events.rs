//! Events, webhooks and deliveries: [`EventStore`], and the event writes
//! that record writes make inside their own transactions (the outbox).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use stockade_core::events::{Event, EventKind, ResourceType, StoredEvent};
use stockade_core::{AccountId, DeliveryId, EventId, SandboxId, WebhookId};

use super::corrupt;
use crate::db::{Conn, SqlStore};
use crate::sql::{Backend, DbRow, Q};
use crate::{
    AttemptOutcome, AttemptRecord, DeliveryRecord, DeliveryStatus, DueDelivery, EventFilter,
    EventStore, StoreError, StoreResult, WebhookRecord,
};

const EVENT_COLUMNS: &str = "seq, id, account_id, kind, resource_type, resource_id, sandbox_id, \
                             execution_id, template_id, data, created_at";
const WEBHOOK_COLUMNS: &str =
    "id, account_id, name, url, events, secret, enabled, created_at, updated_at";

fn event_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<StoredEvent> {
    let id: String = row.get("id")?;
    let bad = |problem: String| corrupt("event", &id, problem);
    let kind: String = row.get("kind")?;
    let resource_type: String = row.get("resource_type")?;
    let account: String = row.get("account_id")?;
    let sandbox: Option<String> = row.get("sandbox_id")?;
    let data: Option<String> = row.get("data")?;
    Ok(StoredEvent {
        seq: row.get("seq")?,
        event: Event {
            id: EventId::parse(&id).map_err(|e| bad(e.message))?,
            kind: EventKind::parse(&kind).ok_or_else(|| bad(format!("unknown kind '{kind}'")))?,
            account_id: AccountId::parse(&account).map_err(|e| bad(e.message))?,
            resource_type: ResourceType::parse(&resource_type)
                .ok_or_else(|| bad(format!("unknown resource type '{resource_type}'")))?,
            resource_id: row.get("resource_id")?,
            sandbox_id: sandbox
                .as_deref()
                .map(SandboxId::parse)
                .transpose()
                .map_err(|e| bad(e.message))?,
            execution_id: row.get("execution_id")?,
            template_id: row.get("template_id")?,
            data: data
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| bad(format!("data: {e}")))?,
            at: row.ts("created_at")?,
        },
    })
}

fn webhook_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<WebhookRecord> {
    let id: String = row.get("id")?;
    let bad = |problem: String| corrupt("webhook", &id, problem);
    let account: String = row.get("account_id")?;
    let events: String = row.get("events")?;
    Ok(WebhookRecord {
        id: WebhookId::parse(&id).map_err(|e| bad(e.message))?,
        account_id: AccountId::parse(&account).map_err(|e| bad(e.message))?,
        name: row.get("name")?,
        url: row.get("url")?,
        events: serde_json::from_str(&events).map_err(|e| bad(format!("events: {e}")))?,
        secret: row.get("secret")?,
        enabled: row.get::<i64>("enabled")? != 0,
        created_at: row.ts("created_at")?,
        updated_at: row.ts("updated_at")?,
    })
}

fn delivery_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<DeliveryRecord> {
    let id: String = row.get("id")?;
    let bad = |problem: String| corrupt("delivery", &id, problem);
    let webhook: String = row.get("webhook_id")?;
    let event: String = row.get("event_id")?;
    let status: String = row.get("status")?;
    Ok(DeliveryRecord {
        id: DeliveryId::parse(&id).map_err(|e| bad(e.message))?,
        webhook_id: WebhookId::parse(&webhook).map_err(|e| bad(e.message))?,
        event_id: EventId::parse(&event).map_err(|e| bad(e.message))?,
        event_kind: row.get("kind")?,
        sandbox_id: row.get("sandbox_id")?,
        status: DeliveryStatus::parse(&status)
            .ok_or_else(|| bad(format!("unknown status '{status}'")))?,
        attempts: u32::try_from(row.get::<i64>("attempts")?).unwrap_or(u32::MAX),
        next_attempt_at: row.ts("next_attempt_at")?,
        give_up_at: row.ts("give_up_at")?,
        created_at: row.ts("created_at")?,
        delivered_at: row.opt_ts("delivered_at")?,
        attempt_log: Vec::new(),
    })
}

fn attempt_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<AttemptRecord> {
    let id: String = row.get("id")?;
    Ok(AttemptRecord {
        id: DeliveryId::parse(&id).map_err(|e| corrupt("attempt", &id, e.message))?,
        at: row.ts("attempted_at")?,
        status_code: row
            .get::<Option<i64>>("status_code")?
            .and_then(|c| u16::try_from(c).ok()),
        error: row.get("error")?,
        duration_ms: u64::try_from(row.get::<i64>("duration_ms")?).unwrap_or(0),
    })
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Event writes inside a caller's transaction.
impl<B: Backend> SqlStore<B> {
    /// Writes `events` and a delivery of each to every enabled webhook of
    /// its account that wants its kind. On PostgreSQL the writers of events
    /// take turns until they commit, so sequence numbers become visible in
    /// order and a reader's cursor never skips one committed late.
    pub(super) async fn write_events_in(
        &self,
        conn: &mut Conn<B>,
        events: &[Event],
        context: &str,
    ) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        if let Some(lock) = B::EVENTS_LOCK {
            conn.fetch_all(Q::new(lock), context).await?;
        }
        let mut hooks: Option<(AccountId, Vec<WebhookRecord>)> = None;
        for event in events {
            let data = event
                .data
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| StoreError::Other(format!("{context}: event data: {e}")))?;
            let q = Q::<B>::new(
                "INSERT INTO events (id, account_id, kind, resource_type, resource_id, \
                 sandbox_id, execution_id, template_id, data, created_at) VALUES (",
            )
            .bind(event.id.to_string())
            .next(event.account_id.to_string())
            .next(event.kind.as_str().to_owned())
            .next(event.resource_type.as_str().to_owned())
            .next(event.resource_id.clone())
            .next(event.sandbox_id.as_ref().map(|s| s.to_string()))
            .next(event.execution_id.clone())
            .next(event.template_id.clone())
            .next(data)
            .next_ts(event.at)
            .sql(") RETURNING seq");
            let seq: i64 = conn
                .returning_optional(q, context)
                .await?
                .ok_or_else(|| StoreError::Other(format!("{context}: no sequence number")))?
                .get("seq")?;
            if hooks.as_ref().map(|(a, _)| a) != Some(&event.account_id) {
                let q = Q::<B>::new(format!(
                    "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE account_id = "
                ))
                .bind(event.account_id.to_string())
                .sql(" AND enabled = 1");
                let rows = conn.fetch_all(q, context).await?;
                let found = rows
                    .iter()
                    .map(webhook_from_row)
                    .collect::<StoreResult<_>>()?;
                hooks = Some((event.account_id.clone(), found));
            }
            let wanted = hooks
                .as_ref()
                .map(|(_, h)| h.as_slice())
                .unwrap_or_default()
                .iter()
                .filter(|h| h.events.iter().any(|k| k == event.kind.as_str()));
            let key = event
                .sandbox_id
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_else(|| event.resource_id.clone());
            for hook in wanted {
                let q = Q::<B>::new(
                    "INSERT INTO webhook_deliveries (id, webhook_id, event_seq, ordering_key, \
                     status, attempts, next_attempt_at, give_up_at, created_at) VALUES (",
                )
                .bind(DeliveryId::generate().to_string())
                .next(hook.id.to_string())
                .next(seq)
                .next(key.clone())
                .next(DeliveryStatus::Pending.as_str().to_owned())
                .next(0_i64)
                .next_ts(event.at)
                .next_ts(event.at + crate::DELIVERY_RETRY_PERIOD)
                .next_ts(event.at)
                .sql(")");
                conn.execute(q, context).await?;
            }
        }
        conn.wrote_events = true;
        Ok(())
    }

    async fn deliveries_with_attempts(
        &self,
        conn: &mut Conn<B>,
        mut deliveries: Vec<DeliveryRecord>,
        context: &str,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        for d in &mut deliveries {
            let q = Q::<B>::new(
                "SELECT id, attempted_at, status_code, error, duration_ms FROM webhook_attempts \
                 WHERE delivery_id = ",
            )
            .bind(d.id.to_string())
            .sql(" ORDER BY attempted_at DESC, id DESC LIMIT 5");
            d.attempt_log = conn
                .fetch_all(q, context)
                .await?
                .iter()
                .map(attempt_from_row)
                .collect::<StoreResult<_>>()?;
        }
        Ok(deliveries)
    }
}

/// The columns of a delivery read, over `webhook_deliveries d JOIN events e`.
const DELIVERY_SELECT: &str = "SELECT d.id, d.webhook_id, e.id AS event_id, e.kind, e.sandbox_id, \
     d.status, d.attempts, d.next_attempt_at, d.give_up_at, d.created_at, d.delivered_at \
     FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq";

#[async_trait]
impl<B: Backend> EventStore for SqlStore<B> {
    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn list_events(&self, filter: &EventFilter) -> StoreResult<Vec<StoredEvent>> {
        let mut q = Q::<B>::new(format!("SELECT {EVENT_COLUMNS} FROM events WHERE 1 = 1"));
        if let Some(account) = &filter.account {
            q = q.sql(" AND account_id = ").bind(account.to_string());
        }
        if let Some(after) = filter.after {
            q = q.sql(" AND seq > ").bind(after);
        }
        if let Some(sandbox) = &filter.sandbox {
            q = q.sql(" AND sandbox_id = ").bind(sandbox.to_string());
        }
        for (i, kind) in filter.kinds.iter().enumerate() {
            q = q.sql(if i == 0 { " AND kind IN (" } else { ", " });
            q = q.bind(kind.as_str().to_owned());
        }
        if !filter.kinds.is_empty() {
            q = q.sql(")");
        }
        q = q
            .sql(if filter.newest_first {
                " ORDER BY seq DESC LIMIT "
            } else {
                " ORDER BY seq LIMIT "
            })
            .bind(i64::from(filter.limit))
            .sql(" OFFSET ")
            .bind(i64::from(filter.offset));
        self.list(q, "list events", event_from_row).await
    }

    async fn latest_event_seq(&self) -> StoreResult<i64> {
        let q = Q::<B>::new("SELECT COALESCE(MAX(seq), 0) AS seq FROM events");
        self.fetch_aggregate(q, "the latest event")
            .await?
            .get("seq")
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn append_events(&self, events: &[Event]) -> StoreResult<()> {
        let context = "append events";
        let mut conn = self.begin(context).await?;
        let result = self.write_events_in(&mut conn, events, context).await;
        self.finish(conn, result, context).await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn purge_events(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let q = Q::<B>::new("DELETE FROM events WHERE created_at < ").ts(before);
        self.execute(q, "purge events").await
    }

    fn subscribe_events(&self) -> tokio::sync::watch::Receiver<u64> {
        self.events.subscribe()
    }

    #[tracing::instrument(skip_all, fields(webhook.id = %w.id), err(level = "debug"))]
    async fn insert_webhook(&self, w: &WebhookRecord) -> StoreResult<()> {
        let q = Q::<B>::new(format!("INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES ("))
            .bind(w.id.to_string())
            .next(w.account_id.to_string())
            .next(w.name.clone())
            .next(w.url.clone())
            .next(events_column(&w.events)?)
            .next(w.secret.clone())
            .next(i64::from(w.enabled))
            .next_ts(w.created_at)
            .next_ts(w.updated_at)
            .sql(")");
        self.execute(q, &format!("insert webhook {}", w.id))
            .await
            .map(drop)
    }

    async fn list_webhooks(&self, account: &AccountId) -> StoreResult<Vec<WebhookRecord>> {
        let q = Q::<B>::new(format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE account_id = "
        ))
        .bind(account.to_string())
        .sql(" ORDER BY created_at, id");
        self.list(q, "list webhooks", webhook_from_row).await
    }

    async fn get_webhook(&self, id: &WebhookId) -> StoreResult<WebhookRecord> {
        let q = Q::<B>::new(format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = "
        ))
        .bind(id.to_string());
        self.one(q, &format!("get webhook {id}"), webhook_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(webhook.id = %w.id), err(level = "debug"))]
    async fn update_webhook(&self, w: &WebhookRecord) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE webhooks SET name = ")
            .bind(w.name.clone())
            .set("url", w.url.clone())
            .set("events", events_column(&w.events)?)
            .set("secret", w.secret.clone())
            .set("enabled", i64::from(w.enabled))
            .set_ts("updated_at", w.updated_at)
            .sql(" WHERE id = ")
            .bind(w.id.to_string());
        self.execute_one(q, &format!("update webhook {}", w.id))
            .await
    }

    #[tracing::instrument(skip_all, fields(webhook.id = %id), err(level = "debug"))]
    async fn delete_webhook(&self, id: &WebhookId) -> StoreResult<()> {
        let q = Q::<B>::new("DELETE FROM webhooks WHERE id = ").bind(id.to_string());
        self.execute_one(q, &format!("delete webhook {id}")).await
    }

    #[tracing::instrument(skip_all, fields(holder), err(level = "debug"))]
    async fn claim_deliveries(
        &self,
        holder: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<DueDelivery>> {
        let context = "claim webhook deliveries";
        // The oldest pending delivery of each webhook and sandbox that is due
        // and not held: a later one waits until the earlier is delivered or
        // given up on. A webhook has one delivery in flight at a time, so a
        // receiver that never answers holds one sender, not all of them.
        let due = Q::<B>::new(
            "SELECT d.id, d.webhook_id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id \
             WHERE d.status = 'pending' AND w.enabled = 1 AND d.next_attempt_at <= ",
        )
        .ts(now)
        .sql(" AND (d.claimed_until IS NULL OR d.claimed_until <= ")
        .ts(now)
        .sql(
            ") AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p WHERE p.webhook_id = d.webhook_id \
             AND p.ordering_key = d.ordering_key AND p.status = 'pending' AND p.event_seq < d.event_seq) \
             AND NOT EXISTS (SELECT 1 FROM webhook_deliveries c WHERE c.webhook_id = d.webhook_id \
             AND c.status = 'pending' AND c.claimed_until > ",
        )
        .ts(now)
        .sql(") ORDER BY d.event_seq LIMIT ")
        .bind(i64::from(limit.saturating_mul(4)));
        let claim = |row: &DbRow<B>| -> StoreResult<Q<B>> {
            Ok(Q::new("UPDATE webhook_deliveries SET claimed_by = ")
                .bind(holder.to_owned())
                .sql(", claimed_until = ")
                .ts(lease_until)
                .sql(" WHERE id = ")
                .bind(row.get::<String>("id")?)
                .sql(" AND status = 'pending' AND (claimed_until IS NULL OR claimed_until <= ")
                .ts(now)
                .sql(") RETURNING id"))
        };
        let mut conn = self.conn(context).await?;
        let mut taken_hooks = std::collections::HashSet::new();
        let mut won: Vec<String> = Vec::new();
        for row in conn.fetch_all(due, context).await? {
            if won.len() >= limit as usize || !taken_hooks.insert(row.get::<String>("webhook_id")?)
            {
                continue;
            }
            if let Some(row) = conn.returning_optional(claim(&row)?, context).await? {
                won.push(row.get("id")?);
            }
        }
        let mut out = Vec::with_capacity(won.len());
        for id in won {
            let q = Q::<B>::new(
                "SELECT d.id AS delivery_id, d.attempts, d.give_up_at, d.webhook_id FROM \
                 webhook_deliveries d WHERE d.id = ",
            )
            .bind(id.clone());
            let Some(row) = conn.fetch_optional(q, context).await? else {
                continue;
            };
            let attempts = u32::try_from(row.get::<i64>("attempts")?).unwrap_or(u32::MAX);
            let give_up_at = row.ts("give_up_at")?;
            let webhook: String = row.get("webhook_id")?;
            let q = Q::<B>::new(format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = "
            ))
            .bind(webhook);
            let Some(webhook) = conn.fetch_optional(q, context).await? else {
                continue;
            };
            let q = Q::<B>::new(format!(
                "SELECT {} FROM events e JOIN webhook_deliveries d ON d.event_seq = e.seq WHERE d.id = ",
                EVENT_COLUMNS
                    .split(", ")
                    .map(|c| format!("e.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .bind(id.clone());
            let Some(event) = conn.fetch_optional(q, context).await? else {
                continue;
            };
            out.push(DueDelivery {
                id: DeliveryId::parse(&id).map_err(|e| corrupt("delivery", &id, e.message))?,
                attempts,
                give_up_at,
                webhook: webhook_from_row(&webhook)?,
                event: event_from_row(&event)?,
            });
        }
        Ok(out)
    }

    #[tracing::instrument(skip_all, fields(delivery.id = %delivery), err(level = "debug"))]
    async fn record_attempt(
        &self,
        delivery: &DeliveryId,
        attempt: &AttemptRecord,
        outcome: AttemptOutcome,
    ) -> StoreResult<()> {
        let context = format!("record an attempt at delivery {delivery}");
        let mut conn = self.begin(&context).await?;
        let result = async {
            let q = Q::<B>::new(
                "INSERT INTO webhook_attempts (id, delivery_id, attempted_at, status_code, error, \
                 duration_ms) VALUES (",
            )
            .bind(attempt.id.to_string())
            .next(delivery.to_string())
            .next_ts(attempt.at)
            .next(attempt.status_code.map(i64::from))
            .next(attempt.error.clone())
            .next(to_i64(attempt.duration_ms))
            .sql(")");
            conn.execute(q, &context).await?;
            let q = Q::<B>::new("UPDATE webhook_deliveries SET attempts = attempts + 1, claimed_by = NULL, claimed_until = NULL");
            let q = match outcome {
                AttemptOutcome::Delivered => q
                    .sql(", status = 'delivered', delivered_at = ")
                    .ts(attempt.at),
                AttemptOutcome::RetryAt(at) => q.sql(", next_attempt_at = ").ts(at),
                AttemptOutcome::GiveUp => q.sql(", status = 'failed'"),
            };
            let q = q.sql(" WHERE id = ").bind(delivery.to_string());
            conn.execute(q, &context).await.map(drop)
        }
        .await;
        self.finish(conn, result, &context).await
    }

    async fn list_deliveries(
        &self,
        webhook: &WebhookId,
        status: Option<DeliveryStatus>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let context = format!("list the deliveries of webhook {webhook}");
        let mut q = Q::<B>::new(format!("{DELIVERY_SELECT} WHERE d.webhook_id = "))
            .bind(webhook.to_string());
        if let Some(status) = status {
            q = q.sql(" AND d.status = ").bind(status.as_str().to_owned());
        }
        q = q
            .sql(" ORDER BY d.event_seq DESC, d.id LIMIT ")
            .bind(i64::from(limit));
        let mut conn = self.conn(&context).await?;
        let rows = conn.fetch_all(q, &context).await?;
        let deliveries = rows
            .iter()
            .map(delivery_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        self.deliveries_with_attempts(&mut conn, deliveries, &context)
            .await
    }

    #[tracing::instrument(skip_all, fields(delivery.id = %delivery), err(level = "debug"))]
    async fn redeliver(
        &self,
        webhook: &WebhookId,
        delivery: &DeliveryId,
        now: DateTime<Utc>,
        give_up_at: DateTime<Utc>,
    ) -> StoreResult<DeliveryRecord> {
        let context = format!("redeliver {delivery}");
        let mut conn = self.begin(&context).await?;
        let result = async {
            let q =
                Q::<B>::new("UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ")
                    .ts(now)
                    .set_ts("give_up_at", give_up_at)
                    .sql(", delivered_at = NULL WHERE id = ")
                    .bind(delivery.to_string())
                    .sql(" AND webhook_id = ")
                    .bind(webhook.to_string());
            if conn.execute(q, &context).await? == 0 {
                return Err(StoreError::NotFound);
            }
            let q =
                Q::<B>::new(format!("{DELIVERY_SELECT} WHERE d.id = ")).bind(delivery.to_string());
            let row = conn
                .fetch_optional(q, &context)
                .await?
                .ok_or(StoreError::NotFound)?;
            let found = delivery_from_row(&row)?;
            let mut found = self
                .deliveries_with_attempts(&mut conn, vec![found], &context)
                .await?;
            found.pop().ok_or(StoreError::NotFound)
        }
        .await;
        let result = self.finish(conn, result, &context).await;
        if result.is_ok() {
            self.events.send_modify(|n| *n = n.wrapping_add(1));
        }
        result
    }
}

fn events_column(events: &[String]) -> StoreResult<String> {
    serde_json::to_string(events).map_err(|e| StoreError::Other(format!("webhook events: {e}")))
}
