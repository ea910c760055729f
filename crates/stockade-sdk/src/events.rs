//! Lifecycle events (the feed, read page by page or followed live),
//! webhooks that receive them, and the audit log of calls to the API.

use std::sync::{Arc, Mutex};

use futures_util::stream::{self, BoxStream, StreamExt};
use reqwest::Method;
use stockade_api::{
    AuditPage, CreateWebhookRequest, DeliveryList, EmptyRequest, Event, EventPage,
    UpdateWebhookRequest, Webhook, WebhookDelivery,
};

use crate::client::Client;
use crate::error::Error;
use crate::sse::{Resuming, SseReader};

/// The most events, audit entries or deliveries one page holds.
pub const MAX_PAGE: u32 = 100;

/// Which events to read: after a cursor, of some types, of one sandbox.
///
/// ```no_run
/// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
/// use stockade_sdk::EventParams;
/// let page = client
///     .events(&EventParams::new().event_type("sandbox.lifecycle.created").limit(10))
///     .await?;
/// for e in &page.events {
///     println!("{} {} {:?}", e.timestamp, e.kind, e.sandbox_id);
/// }
/// // The next call reads on from where this one stopped.
/// let newer = client.events(&EventParams::new().since(page.next_cursor)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventParams {
    /// Only events after this cursor (an [`Event::cursor`] or a page's
    /// `next_cursor`); `None`: from the oldest kept.
    pub since: Option<String>,
    /// At most this many (1 to 100; default 100). A stream ignores it.
    pub limit: Option<u32>,
    /// Only these types (`sandbox.lifecycle.created`, `snapshot.deleted`, …);
    /// empty: every type.
    pub types: Vec<String>,
    /// Only the events of this sandbox (its id or name).
    pub sandbox: Option<String>,
}

impl EventParams {
    new_and_setters! {
        since(cursor: impl Into<String>) => since = cursor.into();
        limit(n: u32) => limit = n;
        sandbox(id_or_name: impl Into<String>) => sandbox = id_or_name.into();
    }

    /// Adds a type to those wanted (repeatable).
    pub fn event_type(mut self, kind: impl Into<String>) -> Self {
        self.types.push(kind.into());
        self
    }

    /// The query of the feed's routes, checked; without `since`, which the
    /// caller adds where it belongs.
    fn filters(&self) -> Result<Vec<(&'static str, String)>, Error> {
        let mut q = Vec::new();
        if !self.types.is_empty() {
            for t in &self.types {
                if t.trim().is_empty() || t.contains(',') {
                    return Err(Error::invalid(
                        "type",
                        format!("'{t}' is not an event type (like sandbox.lifecycle.created)"),
                    ));
                }
            }
            q.push(("type", self.types.join(",")));
        }
        if let Some(s) = &self.sandbox {
            if s.trim().is_empty() {
                return Err(Error::invalid("sandboxId", "must not be empty"));
            }
            q.push(("sandboxId", s.clone()));
        }
        Ok(q)
    }
}

/// Which entries of the audit log to read.
///
/// ```no_run
/// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
/// use stockade_sdk::AuditParams;
/// let page = client.audit(&AuditParams::new().resource_id("demo")).await?;
/// for e in &page.entries {
///     println!("{} {} {} -> {}", e.timestamp, e.front_end, e.action, e.status);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditParams {
    /// Only entries after this cursor (an entry's or a page's).
    pub since: Option<String>,
    /// At most this many (1 to 100; default 100).
    pub limit: Option<u32>,
    /// Administrators: only this account's entries. Anyone else sees only
    /// their own account's, and naming another is a 403.
    pub account_id: Option<String>,
    /// Only the entries about this resource (a sandbox's id or name, a
    /// webhook's id, …).
    pub resource_id: Option<String>,
}

impl AuditParams {
    new_and_setters! {
        since(cursor: impl Into<String>) => since = cursor.into();
        limit(n: u32) => limit = n;
        account_id(id: impl Into<String>) => account_id = id.into();
        resource_id(id: impl Into<String>) => resource_id = id.into();
    }
}

/// `limit` as a query pair, refused unless it is 1 to [`MAX_PAGE`].
fn limit_pair(limit: Option<u32>) -> Result<Option<(&'static str, String)>, Error> {
    match limit {
        None => Ok(None),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(Some(("limit", n.to_string()))),
        Some(n) => Err(Error::invalid(
            "limit",
            format!("must be 1 to {MAX_PAGE}, got {n}"),
        )),
    }
}

/// An optional text parameter as a query pair, refused when it is blank.
fn text_pair(
    name: &'static str,
    value: &Option<String>,
) -> Result<Option<(&'static str, String)>, Error> {
    match value {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Err(Error::invalid(name, "must not be empty")),
        Some(v) => Ok(Some((name, v.clone()))),
    }
}

/// A webhook or delivery id as one path segment: letters, digits, `-`, `_`.
fn id_segment<'a>(field: &str, id: &'a str) -> Result<&'a str, Error> {
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(Error::invalid(field, format!("'{id}' is not an id")));
    }
    Ok(id)
}

/// The states a delivery can be in.
const DELIVERY_STATUSES: [&str; 3] = ["pending", "delivered", "failed"];

impl Client {
    /// A page of the account's lifecycle events, oldest first. Its
    /// `next_cursor` is always set: pass it as [`EventParams::since`] to
    /// read what came after.
    pub async fn events(&self, params: &EventParams) -> Result<EventPage, Error> {
        let mut query = params.filters()?;
        query.extend(text_pair("since", &params.since)?);
        query.extend(limit_pair(params.limit)?);
        self.send(self.request(Method::GET, "/api/v1/events").query(&query))
            .await
    }

    /// Follows the account's lifecycle events as they happen (after
    /// [`EventParams::since`] when given), until the stream is dropped. A
    /// dropped connection is resumed after the last event delivered,
    /// without duplicates or gaps.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{EventParams, StreamExt};
    /// let mut events = client.event_stream(&EventParams::new().sandbox("demo")).await?;
    /// while let Some(event) = events.next().await {
    ///     let event = event?;
    ///     println!("{} {}", event.kind, event.resource_id);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn event_stream(&self, params: &EventParams) -> Result<EventStream, Error> {
        let filters = params.filters()?;
        text_pair("since", &params.since)?;
        let cursor = Arc::new(Mutex::new(params.since.clone()));
        // The first connection's errors (400, 401 …) belong to this call.
        let first = connect(self, &filters, &cursor).await?;
        let follower = Follower {
            client: self.clone(),
            filters,
            cursor: cursor.clone(),
            stream: Resuming::new(first, "event stream"),
        };
        let inner = stream::unfold(follower, |mut f| async move {
            f.next().await.map(|item| (item, f))
        })
        .boxed();
        Ok(EventStream { inner, cursor })
    }

    /// The account's webhooks (never their secrets).
    pub async fn webhooks(&self) -> Result<Vec<Webhook>, Error> {
        self.send(self.request(Method::GET, "/api/v1/webhooks"))
            .await
    }

    /// Registers a webhook: every event of the types it names (all when
    /// none) is POSTed to its URL, signed with its secret. When the request
    /// gives no secret, the server makes one and returns it in this answer
    /// only (`signature_secret`).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::api::CreateWebhookRequest;
    /// let hook = client
    ///     .create_webhook(&CreateWebhookRequest {
    ///         url: "https://hooks.example.com/stockade".into(),
    ///         events: Some(vec!["sandbox.lifecycle.killed".into()]),
    ///         ..Default::default()
    ///     })
    ///     .await?;
    /// println!("{} signs with {:?}", hook.id, hook.signature_secret);
    /// # Ok(()) }
    /// ```
    pub async fn create_webhook(&self, params: &CreateWebhookRequest) -> Result<Webhook, Error> {
        if params.url.trim().is_empty() {
            return Err(Error::invalid("url", "must not be empty"));
        }
        self.send(self.request(Method::POST, "/api/v1/webhooks").json(params))
            .await
    }

    /// One webhook of the account (another account's is not found).
    pub async fn webhook(&self, id: &str) -> Result<Webhook, Error> {
        let path = format!("/api/v1/webhooks/{}", id_segment("id", id)?);
        self.send(self.request(Method::GET, &path)).await
    }

    /// Changes a webhook: only the fields given.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client, id: &str) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::api::UpdateWebhookRequest;
    /// let off = UpdateWebhookRequest { enabled: Some(false), ..Default::default() };
    /// assert!(!client.update_webhook(id, &off).await?.enabled);
    /// # Ok(()) }
    /// ```
    pub async fn update_webhook(
        &self,
        id: &str,
        params: &UpdateWebhookRequest,
    ) -> Result<Webhook, Error> {
        let path = format!("/api/v1/webhooks/{}", id_segment("id", id)?);
        self.send(self.request(Method::PATCH, &path).json(params))
            .await
    }

    /// Removes a webhook: nothing more is delivered to it.
    pub async fn delete_webhook(&self, id: &str) -> Result<(), Error> {
        let path = format!("/api/v1/webhooks/{}", id_segment("id", id)?);
        self.send_empty(self.request(Method::DELETE, &path)).await
    }

    /// A webhook's deliveries, newest first: at most `limit` (1 to 100,
    /// default 50), only those in `status` (`pending`, `delivered` or
    /// `failed`) when given.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client, id: &str) -> Result<(), stockade_sdk::Error> {
    /// for d in client.webhook_deliveries(id, Some(10), Some("failed")).await?.deliveries {
    ///     let last = d.attempt_log.first();
    ///     println!("{} {} {:?}", d.event_type, d.attempts, last.and_then(|a| a.error.clone()));
    ///     client.redeliver(id, &d.id).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn webhook_deliveries(
        &self,
        id: &str,
        limit: Option<u32>,
        status: Option<&str>,
    ) -> Result<DeliveryList, Error> {
        let path = format!("/api/v1/webhooks/{}/deliveries", id_segment("id", id)?);
        let mut query: Vec<(&str, String)> = limit_pair(limit)?.into_iter().collect();
        if let Some(s) = status {
            if !DELIVERY_STATUSES.contains(&s) {
                return Err(Error::invalid(
                    "status",
                    format!("'{s}' is none of {}", DELIVERY_STATUSES.join(", ")),
                ));
            }
            query.push(("status", s.to_owned()));
        }
        self.send(self.request(Method::GET, &path).query(&query))
            .await
    }

    /// Queues a delivery again: a new attempt (with a new attempt id) of
    /// the same event, whatever became of the earlier ones.
    pub async fn redeliver(&self, id: &str, delivery_id: &str) -> Result<WebhookDelivery, Error> {
        let path = format!(
            "/api/v1/webhooks/{}/deliveries/{}/redeliver",
            id_segment("id", id)?,
            id_segment("delivery_id", delivery_id)?
        );
        self.send(self.request(Method::POST, &path).json(&EmptyRequest {}))
            .await
    }

    /// A page of the audit log, oldest first: the calls made to the API
    /// (and those refused). Administrators see every account's; anyone
    /// else their own account's.
    pub async fn audit(&self, params: &AuditParams) -> Result<AuditPage, Error> {
        let mut query = Vec::new();
        query.extend(text_pair("since", &params.since)?);
        query.extend(limit_pair(params.limit)?);
        query.extend(text_pair("accountId", &params.account_id)?);
        query.extend(text_pair("resourceId", &params.resource_id)?);
        self.send(self.request(Method::GET, "/api/v1/audit").query(&query))
            .await
    }
}

/// Live lifecycle events: a [`Stream`](futures_util::Stream) of [`Event`]s
/// that goes on until it is dropped. A dropped connection is resumed after
/// the last event delivered.
pub struct EventStream {
    inner: BoxStream<'static, Result<Event, Error>>,
    cursor: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("cursor", &self.cursor())
            .finish()
    }
}

stream_of_inner!(EventStream, Event);

impl EventStream {
    /// The cursor of the last event delivered (or the `since` it started
    /// from): pass it to [`EventParams::since`] to go on later.
    pub fn cursor(&self) -> Option<String> {
        self.cursor.lock().ok().and_then(|c| c.clone())
    }
}

struct Follower {
    client: Client,
    filters: Vec<(&'static str, String)>,
    cursor: Arc<Mutex<Option<String>>>,
    stream: Resuming,
}

/// Opens the event stream after `cursor` (the header is how a stream
/// resumes; `since` says the same to the first connection).
async fn connect(
    client: &Client,
    filters: &[(&'static str, String)],
    cursor: &Mutex<Option<String>>,
) -> Result<SseReader, Error> {
    let mut req = client
        .request(Method::GET, "/api/v1/events/stream")
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .query(filters);
    if let Some(c) = cursor.lock().ok().and_then(|c| c.clone()) {
        req = req.header("Last-Event-ID", &c).query(&[("since", c)]);
    }
    Ok(SseReader::new(client.send_raw(req).await?))
}

impl Follower {
    async fn next(&mut self) -> Option<Result<Event, Error>> {
        loop {
            let (client, filters, cursor) = (&self.client, &self.filters, &self.cursor);
            let sse = match self
                .stream
                .next(client.base_url(), || connect(client, filters, cursor))
                .await?
            {
                Ok(sse) => sse,
                Err(e) => return Some(Err(e)),
            };
            if sse.event == "error" {
                self.stream.done = true;
                return Some(Err(Error::Decode(format!(
                    "the event stream failed: {}",
                    sse.data
                ))));
            }
            match serde_json::from_str::<Event>(&sse.data) {
                Ok(event) => {
                    self.stream.progressed();
                    let at = sse.id.unwrap_or_else(|| event.cursor.clone());
                    if let Ok(mut c) = self.cursor.lock() {
                        *c = Some(at);
                    }
                    return Some(Ok(event));
                }
                // An event type this SDK does not know: not ours.
                Err(_) if !sse.event.contains('.') => {}
                Err(e) => {
                    self.stream.done = true;
                    return Some(Err(Error::Decode(format!("a {} event: {e}", sse.event))));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_checked_before_any_request() {
        let q = EventParams::new()
            .event_type("sandbox.lifecycle.created")
            .event_type("snapshot.created")
            .sandbox("demo")
            .filters()
            .unwrap();
        assert_eq!(
            q,
            [
                ("type", "sandbox.lifecycle.created,snapshot.created".into()),
                ("sandboxId", "demo".into())
            ]
        );
        let bad = EventParams::new().event_type("a,b").filters().unwrap_err();
        assert!(matches!(bad, Error::InvalidParams { ref field, .. } if field == "type"));
        assert!(limit_pair(Some(0)).is_err() && limit_pair(Some(101)).is_err());
        assert_eq!(
            limit_pair(Some(100)).unwrap(),
            Some(("limit", "100".into()))
        );
        assert!(text_pair("since", &Some(" ".into())).is_err());
        assert!(id_segment("id", "../accounts").is_err());
        assert!(id_segment("id", "").is_err());
        assert_eq!(id_segment("id", "ab12cd34").unwrap(), "ab12cd34");
    }
}
