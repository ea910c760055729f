//! Lifecycle events and webhooks: the feed an account reads (native and
//! E2B's polling shape), and the webhooks it registers. The events
//! themselves are written by the store beside the changes they report;
//! their delivery is `tasks/webhooks.rs`; the audit log is [`audit`].

use std::net::SocketAddr;
use std::time::Duration;

use chrono::{SubsecRound, Utc};
use rand::distributions::{Alphanumeric, DistString};
use stockade_core::events::{EventKind, StoredEvent};
use stockade_core::{DeliveryId, Scope, WebhookId};
use stockade_store::{DeliveryStatus, EventFilter, StoreError, WebhookRecord};

use crate::{Service, ServiceError, ServiceResult};

pub mod audit;

/// How events and webhooks behave.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    /// Events older than this are removed (their deliveries with them).
    pub retention: Duration,
    /// Audit entries older than this are removed.
    pub audit_retention: Duration,
    /// The longest a receiver may take to answer one delivery.
    pub delivery_timeout: Duration,
    /// The wait after a first failed attempt; each failure doubles it.
    pub retry_base: Duration,
    /// The longest wait between two attempts.
    pub retry_max: Duration,
    /// Deliveries one instance makes at once (a webhook has at most one
    /// in flight).
    pub delivery_concurrency: usize,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(30 * 24 * 3600),
            audit_retention: Duration::from_secs(90 * 24 * 3600),
            delivery_timeout: Duration::from_secs(10),
            retry_base: Duration::from_secs(5),
            retry_max: Duration::from_secs(3600),
            delivery_concurrency: 32,
        }
    }
}

/// The most events or entries one page holds.
pub const MAX_PAGE: u32 = 100;
/// The most webhooks one account may register.
pub const MAX_WEBHOOKS: usize = 20;
const MAX_URL_LEN: usize = 2048;
const MAX_NAME_LEN: usize = 128;
const SECRET_LEN: std::ops::RangeInclusive<usize> = 8..=256;

/// A feed cursor: the sequence number of the last event read. Anything but
/// a decimal number is a 400 naming `field`.
pub fn parse_cursor(cursor: Option<&str>, field: &str) -> ServiceResult<Option<i64>> {
    match cursor.map(str::trim).filter(|c| !c.is_empty()) {
        None => Ok(None),
        Some(c) => c
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| {
                ServiceError::field(
                    field,
                    "is not a cursor: pass the `nextCursor` of an earlier page",
                )
            }),
    }
}

/// A page size between 1 and [`MAX_PAGE`]; `default` when absent.
pub fn parse_limit(limit: Option<u32>, default: u32) -> ServiceResult<u32> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => Err(ServiceError::field(
            "limit",
            format!("must be between 1 and {MAX_PAGE}"),
        )),
    }
}

/// Event kinds from a list of names; an unknown one is a 400 naming `field`.
pub fn parse_kinds<'a>(
    names: impl IntoIterator<Item = &'a str>,
    field: &str,
) -> ServiceResult<Vec<EventKind>> {
    let mut kinds = Vec::new();
    for name in names.into_iter().map(str::trim).filter(|n| !n.is_empty()) {
        let kind = EventKind::parse(name).ok_or_else(|| {
            ServiceError::field(
                field,
                format!(
                    "unknown event type '{}': expected one of {}",
                    name.chars().take(64).collect::<String>(),
                    EventKind::ALL
                        .iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

/// What a feed read asks for.
#[derive(Debug, Clone, Default)]
pub struct FeedRequest<'a> {
    pub since: Option<&'a str>,
    pub limit: Option<u32>,
    /// Comma-separated kinds.
    pub kinds: Option<&'a str>,
    /// A sandbox's id or name.
    pub sandbox: Option<&'a str>,
}

/// A page of events and the cursor to read on from.
#[derive(Debug, Clone)]
pub struct FeedPage {
    pub events: Vec<StoredEvent>,
    pub next_cursor: i64,
}

/// A webhook's settings as sent (create: `url` required; update: any).
#[derive(Debug, Clone, Default)]
pub struct WebhookInput {
    pub name: Option<String>,
    pub url: Option<String>,
    pub enabled: Option<bool>,
    pub events: Option<Vec<String>>,
    pub signature_secret: Option<String>,
}

fn webhook_not_found(id: &str) -> ServiceError {
    ServiceError::NotFound(format!(
        "Webhook '{}' not found",
        id.chars().take(40).collect::<String>()
    ))
}

impl Service {
    /// The filter of a feed read: the caller's account, or one sandbox it
    /// may see (a team's included).
    async fn feed_filter(
        &self,
        scope: &Scope,
        sandbox: Option<&str>,
        kinds: Vec<EventKind>,
    ) -> ServiceResult<EventFilter> {
        let mut filter = EventFilter {
            account: Some(scope.account_id.clone()),
            kinds,
            ..EventFilter::default()
        };
        if let Some(sandbox) = sandbox.map(str::trim).filter(|s| !s.is_empty()) {
            let sb = crate::access::load(self, scope, sandbox)
                .await
                .map_err(|e| match e {
                    ServiceError::Forbidden(_) => ServiceError::sandbox_not_found(),
                    e => e,
                })?;
            filter.account = None;
            filter.sandbox = Some(sb.id);
        }
        Ok(filter)
    }

    /// A page of the caller's events after `since`, oldest first.
    pub async fn events_page(
        &self,
        scope: &Scope,
        request: &FeedRequest<'_>,
    ) -> ServiceResult<FeedPage> {
        let after = parse_cursor(request.since, "since")?;
        let limit = parse_limit(request.limit, MAX_PAGE)?;
        let kinds = parse_kinds(request.kinds.unwrap_or("").split(','), "type")?;
        let mut filter = self.feed_filter(scope, request.sandbox, kinds).await?;
        filter.after = after;
        filter.limit = limit;
        let events = self.store.list_events(&filter).await?;
        let next_cursor = events.last().map(|e| e.seq).or(after).unwrap_or_default();
        Ok(FeedPage {
            events,
            next_cursor,
        })
    }

    /// E2B's polling read: the newest first unless `oldest_first`.
    pub async fn events_by_offset(
        &self,
        scope: &Scope,
        sandbox: Option<&str>,
        offset: u32,
        limit: Option<u32>,
        oldest_first: bool,
    ) -> ServiceResult<Vec<StoredEvent>> {
        let limit = parse_limit(limit, 10)?;
        let mut filter = self.feed_filter(scope, sandbox, Vec::new()).await?;
        filter.limit = limit;
        filter.offset = offset;
        filter.newest_first = !oldest_first;
        Ok(self.store.list_events(&filter).await?)
    }

    /// Waits until events may have been written (by this process, or up to
    /// a second for other instances').
    pub async fn wait_for_events(&self, seen: &mut tokio::sync::watch::Receiver<u64>) {
        let _ = tokio::time::timeout(Duration::from_secs(1), seen.changed()).await;
    }

    /// A receiver of the signal that events were written.
    pub fn subscribe_events(&self) -> tokio::sync::watch::Receiver<u64> {
        self.store.subscribe_events()
    }

    /// The caller's webhooks.
    pub async fn list_webhooks(&self, scope: &Scope) -> ServiceResult<Vec<WebhookRecord>> {
        Ok(self.store.list_webhooks(&scope.account_id).await?)
    }

    /// One of the caller's webhooks; another account's is not found.
    pub async fn webhook(&self, scope: &Scope, id: &str) -> ServiceResult<WebhookRecord> {
        let parsed = WebhookId::parse(id).map_err(|_| webhook_not_found(id))?;
        match self.store.get_webhook(&parsed).await {
            Ok(w) if w.account_id == scope.account_id => Ok(w),
            Ok(_) | Err(StoreError::NotFound) => Err(webhook_not_found(id)),
            Err(e) => Err(e.into()),
        }
    }

    /// Registers a webhook: every field checked before anything is stored.
    /// The secret comes back only when it was made here.
    pub async fn create_webhook(
        &self,
        scope: &Scope,
        input: WebhookInput,
    ) -> ServiceResult<(WebhookRecord, bool)> {
        let url = match input.url.as_deref() {
            Some(u) => self.check_webhook_url(u).await?,
            None => return Err(ServiceError::field("url", "is required")),
        };
        let events = match &input.events {
            Some(names) => checked_kinds(names)?,
            None => EventKind::ALL
                .iter()
                .map(|k| k.as_str().to_owned())
                .collect(),
        };
        let generated = input.signature_secret.is_none();
        let secret = match input.signature_secret {
            Some(s) => checked_secret(s)?,
            None => Alphanumeric.sample_string(&mut rand::thread_rng(), 40),
        };
        let name = match input.name {
            Some(n) => checked_name(n)?,
            None => reqwest::Url::parse(&url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_else(|| "webhook".into()),
        };
        if self.store.list_webhooks(&scope.account_id).await?.len() >= MAX_WEBHOOKS {
            return Err(ServiceError::Conflict(format!(
                "An account may have at most {MAX_WEBHOOKS} webhooks: delete one first"
            )));
        }
        // What the database keeps: microseconds, so the answer reads back alike.
        let now = Utc::now().trunc_subsecs(6);
        let record = WebhookRecord {
            id: WebhookId::generate(),
            account_id: scope.account_id.clone(),
            name,
            url,
            events,
            secret,
            enabled: input.enabled.unwrap_or(true),
            created_at: now,
            updated_at: now,
        };
        self.store.insert_webhook(&record).await?;
        Ok((record, generated))
    }

    /// Changes only the fields given.
    pub async fn update_webhook(
        &self,
        scope: &Scope,
        id: &str,
        input: WebhookInput,
    ) -> ServiceResult<WebhookRecord> {
        let mut record = self.webhook(scope, id).await?;
        if let Some(url) = input.url.as_deref() {
            record.url = self.check_webhook_url(url).await?;
        }
        if let Some(names) = &input.events {
            record.events = checked_kinds(names)?;
        }
        if let Some(secret) = input.signature_secret {
            record.secret = checked_secret(secret)?;
        }
        if let Some(name) = input.name {
            record.name = checked_name(name)?;
        }
        if let Some(enabled) = input.enabled {
            record.enabled = enabled;
        }
        record.updated_at = Utc::now().trunc_subsecs(6);
        self.store
            .update_webhook(&record)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => webhook_not_found(id),
                e => e.into(),
            })?;
        Ok(record)
    }

    pub async fn delete_webhook(&self, scope: &Scope, id: &str) -> ServiceResult<()> {
        let record = self.webhook(scope, id).await?;
        self.store
            .delete_webhook(&record.id)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => webhook_not_found(id),
                e => e.into(),
            })
    }

    /// A webhook's deliveries, newest first.
    pub async fn webhook_deliveries(
        &self,
        scope: &Scope,
        id: &str,
        status: Option<&str>,
        limit: Option<u32>,
    ) -> ServiceResult<Vec<stockade_store::DeliveryRecord>> {
        let record = self.webhook(scope, id).await?;
        let status = status
            .map(|s| {
                DeliveryStatus::parse(s).ok_or_else(|| {
                    ServiceError::field("status", "must be pending, delivered or failed")
                })
            })
            .transpose()?;
        let limit = parse_limit(limit, 50)?;
        Ok(self
            .store
            .list_deliveries(&record.id, status, limit)
            .await?)
    }

    /// Queues a delivery again (a new attempt, the same event).
    pub async fn redeliver(
        &self,
        scope: &Scope,
        id: &str,
        delivery: &str,
    ) -> ServiceResult<stockade_store::DeliveryRecord> {
        let record = self.webhook(scope, id).await?;
        let not_found = || {
            ServiceError::NotFound(format!(
                "Delivery '{}' of webhook {} not found",
                delivery.chars().take(40).collect::<String>(),
                record.id
            ))
        };
        let delivery = DeliveryId::parse(delivery).map_err(|_| not_found())?;
        let now = Utc::now();
        self.store
            .redeliver(
                &record.id,
                &delivery,
                now,
                now + stockade_store::DELIVERY_RETRY_PERIOD,
            )
            .await
            .map_err(|e| match e {
                StoreError::NotFound => not_found(),
                e => e.into(),
            })
    }

    /// A webhook URL as stored: `http` or `https`, a host, no credentials,
    /// and not an internal address unless the administrator allowed its
    /// range (the same setting as create sources), never this server. A
    /// name that does not resolve now is kept: each delivery checks again.
    async fn check_webhook_url(&self, url: &str) -> ServiceResult<String> {
        let bad = |m: String| Err(ServiceError::field("url", m));
        let url = url.trim();
        if url.is_empty() {
            return bad("is required".into());
        }
        if url.len() > MAX_URL_LEN {
            return bad(format!("is longer than {MAX_URL_LEN} characters"));
        }
        let Ok(parsed) = reqwest::Url::parse(url) else {
            return bad("is not a URL (e.g. https://example.com/hooks/stockade)".into());
        };
        if !matches!(parsed.scheme(), "http" | "https") {
            return bad(format!(
                "scheme '{}' is not allowed: use http or https",
                parsed.scheme()
            ));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return bad("has no host".into());
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return bad("must not carry credentials: deliveries are signed instead".into());
        }
        match self.webhook_target(&parsed).await {
            Ok(_) | Err(WebhookTargetError::Unresolvable) => Ok(parsed.to_string()),
            Err(WebhookTargetError::Refused(m)) => bad(m),
        }
    }

    /// The addresses a delivery to `url` may connect to.
    pub(crate) async fn webhook_target(
        &self,
        url: &reqwest::Url,
    ) -> Result<Vec<SocketAddr>, WebhookTargetError> {
        let addrs = match crate::net::outbound::check_url(url, &self.config.sources.addresses).await
        {
            Ok(addrs) => addrs,
            Err(crate::net::outbound::Refused::Unresolvable(_)) => {
                return Err(WebhookTargetError::Unresolvable)
            }
            Err(e) => {
                return Err(WebhookTargetError::Refused(format!(
                    "{e} (an administrator can allow the range with --allow-internal-addresses)"
                )))
            }
        };
        if let Some(own) = addrs.iter().find(|a| self.is_own_address(a)) {
            return Err(WebhookTargetError::Refused(format!(
                "{own} is this server's own address: webhooks cannot call the API back"
            )));
        }
        Ok(addrs)
    }

    /// Notes an address this server listens on: webhooks never target it.
    pub fn note_listen_address(&self, addr: SocketAddr) {
        self.own_addresses
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(addr);
    }

    fn is_own_address(&self, addr: &SocketAddr) -> bool {
        let own = self.own_addresses.read().unwrap_or_else(|p| p.into_inner());
        own.iter().any(|own| {
            own.port() == addr.port()
                && (own.ip() == addr.ip()
                    || (own.ip().is_unspecified()
                        && (addr.ip().is_loopback() || local_ip(addr.ip()))))
        })
    }
}

/// Why a webhook's target cannot be called.
#[derive(Debug, Clone)]
pub(crate) enum WebhookTargetError {
    Unresolvable,
    Refused(String),
}

/// Whether `ip` is one of this machine's addresses (a server listening on
/// every address answers there too).
fn local_ip(ip: std::net::IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

fn checked_kinds(names: &[String]) -> ServiceResult<Vec<String>> {
    if names.is_empty() {
        return Err(ServiceError::field(
            "events",
            "must name at least one event type",
        ));
    }
    let kinds = parse_kinds(names.iter().map(String::as_str), "events")?;
    if kinds.is_empty() {
        return Err(ServiceError::field(
            "events",
            "must name at least one event type",
        ));
    }
    Ok(kinds.iter().map(|k| k.as_str().to_owned()).collect())
}

fn checked_secret(secret: String) -> ServiceResult<String> {
    let n = secret.chars().count();
    if !SECRET_LEN.contains(&n) {
        return Err(ServiceError::field(
            "signatureSecret",
            format!(
                "must be {} to {} characters",
                SECRET_LEN.start(),
                SECRET_LEN.end()
            ),
        ));
    }
    Ok(secret)
}

fn checked_name(name: String) -> ServiceResult<String> {
    let name = name.trim().to_owned();
    if name.is_empty() || name.chars().count() > MAX_NAME_LEN || name.chars().any(char::is_control)
    {
        return Err(ServiceError::field(
            "name",
            format!("must be 1 to {MAX_NAME_LEN} printable characters"),
        ));
    }
    Ok(name)
}

/// The wire form of an event: E2B's payload shape and the resource it is
/// about, with its cursor.
pub fn event_view(stored: &StoredEvent) -> stockade_api::Event {
    let e = &stored.event;
    stockade_api::Event {
        version: "v1".into(),
        id: e.id.to_string(),
        kind: e.kind.as_str().into(),
        event_data: e.data.clone(),
        sandbox_build_id: None,
        sandbox_execution_id: e.execution_id.clone(),
        sandbox_id: e.sandbox_id.as_ref().map(|s| s.to_string()),
        sandbox_team_id: e.account_id.to_string(),
        sandbox_template_id: e.template_id.clone(),
        timestamp: e.at,
        resource_type: e.resource_type.as_str().into(),
        resource_id: e.resource_id.clone(),
        cursor: stored.seq.to_string(),
    }
}

/// The wire form of a webhook (never its secret, unless `with_secret`).
pub fn webhook_view(w: &WebhookRecord, with_secret: bool) -> stockade_api::Webhook {
    stockade_api::Webhook {
        id: w.id.to_string(),
        team_id: w.account_id.to_string(),
        name: w.name.clone(),
        created_at: w.created_at,
        enabled: w.enabled,
        url: w.url.clone(),
        events: w.events.clone(),
        signature_secret: with_secret.then(|| w.secret.clone()),
    }
}

/// The wire form of a delivery.
pub fn delivery_view(d: &stockade_store::DeliveryRecord) -> stockade_api::WebhookDelivery {
    stockade_api::WebhookDelivery {
        id: d.id.to_string(),
        webhook_id: d.webhook_id.to_string(),
        event_id: d.event_id.to_string(),
        event_type: d.event_kind.clone(),
        sandbox_id: d.sandbox_id.clone(),
        status: d.status.as_str().into(),
        attempts: d.attempts,
        created_at: d.created_at,
        next_attempt_at: (d.status == DeliveryStatus::Pending).then_some(d.next_attempt_at),
        delivered_at: d.delivered_at,
        attempt_log: d
            .attempt_log
            .iter()
            .map(|a| stockade_api::DeliveryAttempt {
                id: a.id.to_string(),
                at: a.at,
                status_code: a.status_code,
                error: a.error.clone(),
                duration_ms: a.duration_ms,
            })
            .collect(),
    }
}
