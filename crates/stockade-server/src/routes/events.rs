//! Lifecycle events (the feed and its live stream), webhooks and their
//! deliveries, and the audit log.

use std::collections::{HashMap, VecDeque};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use stockade_api::{
    AuditEntry, AuditPage, AuditQuery, CreateWebhookRequest, DeliveryAttempt, DeliveryList,
    DeliveryQuery, ErrorBody, Event, EventPage, EventQuery, UpdateWebhookRequest, Webhook,
    WebhookDelivery,
};
use stockade_service::events::audit::{audit_view, AuditRequest};
use stockade_service::events::{
    delivery_view, event_view, webhook_view, FeedRequest, WebhookInput,
};
use stockade_service::Service;
use tracing::instrument;
use utoipa::OpenApi;

use crate::audit::Made;
use crate::error::{ApiError, ApiResult};
use crate::extract::{query_pairs, ApiJson, Authed};
use crate::{sse, AppState};

/// The routes, relative to `/api/v1`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/events", get(list_events))
        .route("/events/stream", get(stream_events))
        .route("/webhooks", get(list_webhooks).post(create_webhook))
        .route(
            "/webhooks/{id}",
            get(get_webhook)
                .patch(update_webhook)
                .delete(delete_webhook),
        )
        .route("/webhooks/{id}/deliveries", get(list_deliveries))
        .route(
            "/webhooks/{id}/deliveries/{delivery_id}/redeliver",
            post(redeliver),
        )
        .route("/audit", get(audit))
}

#[derive(OpenApi)]
#[openapi(
    paths(
        list_events,
        stream_events,
        list_webhooks,
        create_webhook,
        get_webhook,
        update_webhook,
        delete_webhook,
        list_deliveries,
        redeliver,
        audit
    ),
    components(schemas(
        Event,
        EventPage,
        CreateWebhookRequest,
        UpdateWebhookRequest,
        Webhook,
        WebhookDelivery,
        DeliveryAttempt,
        DeliveryList,
        AuditEntry,
        AuditPage,
    ))
)]
pub struct EventsApi;

/// The query's parameters by name; one this route does not know, or one
/// given twice, is a 400 naming it.
pub fn query_map(raw: Option<&str>, allowed: &[&str]) -> ApiResult<HashMap<String, String>> {
    let mut out = HashMap::new();
    for (k, v) in query_pairs(raw) {
        if !allowed.contains(&k.as_str()) {
            return Err(ApiError::field(
                k,
                format!(
                    "unknown query parameter: this route takes {}",
                    allowed.join(", ")
                ),
            ));
        }
        if out.insert(k.clone(), v).is_some() {
            return Err(ApiError::field(k, "is given more than once"));
        }
    }
    Ok(out)
}

/// A whole number from the query, or a 400 naming it.
pub fn query_u32(q: &HashMap<String, String>, key: &str) -> ApiResult<Option<u32>> {
    q.get(key)
        .map(|v| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| ApiError::field(key, format!("must be a whole number, got '{v}'")))
        })
        .transpose()
}

fn feed_request(q: &HashMap<String, String>) -> ApiResult<FeedRequest<'_>> {
    Ok(FeedRequest {
        since: q.get("since").map(String::as_str),
        limit: query_u32(q, "limit")?,
        kinds: q.get("type").map(String::as_str),
        sandbox: q.get("sandboxId").map(String::as_str),
    })
}

/// The caller's lifecycle events after `since`, oldest first. `nextCursor`
/// is always given: `since=nextCursor` returns only newer events.
#[utoipa::path(get, path = "/api/v1/events", tag = "events",
    params(EventQuery),
    responses((status = 200, body = EventPage),
              (status = 400, description = "A malformed cursor, an unknown type or a limit out of range (named)", body = ErrorBody),
              (status = 404, description = "The sandbox is not the caller's", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list_events(
    Authed { state, caller }: Authed,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<EventPage>> {
    let q = query_map(raw.as_deref(), &["since", "limit", "type", "sandboxId"])?;
    let page = state
        .svc
        .events_page(&caller.scope, &feed_request(&q)?)
        .await?;
    Ok(Json(EventPage {
        events: page.events.iter().map(event_view).collect(),
        next_cursor: page.next_cursor.to_string(),
    }))
}

/// The same events as a live `text/event-stream`: each event's `id:` is its
/// cursor, `event:` its type; `Last-Event-ID` (or `since`) resumes after
/// one. Without either, only events from now on.
#[utoipa::path(get, path = "/api/v1/events/stream", tag = "events",
    params(EventQuery),
    responses((status = 200, description = "Server-sent events, one per lifecycle event", content_type = "text/event-stream"),
              (status = 400, description = "A malformed cursor or an unknown type (named)", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn stream_events(
    Authed { state, caller }: Authed,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let q = query_map(raw.as_deref(), &["since", "type", "sandboxId"])?;
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let since = match resume.or_else(|| q.get("since").cloned()) {
        Some(s) => s,
        // From now on: the newest event so far is the start.
        None => state
            .svc
            .store()
            .latest_event_seq()
            .await
            .map_err(stockade_service::ServiceError::from)?
            .to_string(),
    };
    let kinds = q.get("type").cloned();
    let sandbox = q.get("sandboxId").cloned();
    // Checked now, so a bad request is a 400 and not a stream that ends.
    let first = state
        .svc
        .events_page(
            &caller.scope,
            &FeedRequest {
                since: Some(&since),
                limit: None,
                kinds: kinds.as_deref(),
                sandbox: sandbox.as_deref(),
            },
        )
        .await?;
    let follower = Follower {
        signal: state.svc.subscribe_events(),
        svc: state.svc.clone(),
        scope: caller.scope.clone(),
        kinds,
        sandbox,
        cursor: first.next_cursor,
        pending: Some(first.events),
    };
    Ok(sse::response(
        sse::stepped(follower),
        state.config.sse_keep_alive,
        state.svc.shutdown(),
    ))
}

/// Follows the feed: reads on from its cursor whenever events were written.
struct Follower {
    svc: Service,
    signal: tokio::sync::watch::Receiver<u64>,
    scope: stockade_core::Scope,
    kinds: Option<String>,
    sandbox: Option<String>,
    cursor: i64,
    pending: Option<Vec<stockade_core::events::StoredEvent>>,
}

impl sse::Steps for Follower {
    async fn step(&mut self, queue: &mut VecDeque<Bytes>) -> bool {
        loop {
            let events = match self.pending.take() {
                Some(events) => events,
                None => {
                    self.svc.wait_for_events(&mut self.signal).await;
                    let since = self.cursor.to_string();
                    let request = FeedRequest {
                        since: Some(&since),
                        limit: None,
                        kinds: self.kinds.as_deref(),
                        sandbox: self.sandbox.as_deref(),
                    };
                    match self.svc.events_page(&self.scope, &request).await {
                        Ok(page) => {
                            self.cursor = page.next_cursor;
                            page.events
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "event stream: read failed, retrying");
                            Vec::new()
                        }
                    }
                }
            };
            if events.is_empty() {
                continue;
            }
            for stored in &events {
                let view = event_view(stored);
                let data = serde_json::to_string(&view).unwrap_or_else(|_| "null".into());
                queue.push_back(sse::event(&view.kind, Some(&view.cursor), &data));
            }
            return false;
        }
    }
}

fn input(
    name: Option<String>,
    url: Option<String>,
    enabled: Option<bool>,
    events: Option<Vec<String>>,
    signature_secret: Option<String>,
) -> WebhookInput {
    WebhookInput {
        name,
        url,
        enabled,
        events,
        signature_secret,
    }
}

/// The body of a webhook create as the service takes it.
pub fn create_input(req: CreateWebhookRequest) -> WebhookInput {
    input(
        req.name,
        Some(req.url),
        req.enabled,
        req.events,
        req.signature_secret,
    )
}

/// The body of a webhook update as the service takes it.
pub fn update_input(req: UpdateWebhookRequest) -> WebhookInput {
    input(
        req.name,
        req.url,
        req.enabled,
        req.events,
        req.signature_secret,
    )
}

/// The caller's webhooks (never their secrets).
#[utoipa::path(get, path = "/api/v1/webhooks", tag = "events",
    responses((status = 200, body = [Webhook])))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list_webhooks(Authed { state, caller }: Authed) -> ApiResult<Json<Vec<Webhook>>> {
    let hooks = state.svc.list_webhooks(&caller.scope).await?;
    Ok(Json(hooks.iter().map(|w| webhook_view(w, false)).collect()))
}

/// Register a webhook: deliveries of the event types it wants, signed with
/// its secret (made here and shown once when none is given).
#[utoipa::path(post, path = "/api/v1/webhooks", tag = "events",
    request_body = CreateWebhookRequest,
    responses((status = 201, body = Webhook),
              (status = 400, description = "A bad URL or scheme, an internal address, an unknown event type (named); nothing is stored", body = ErrorBody),
              (status = 409, description = "The account has its most webhooks", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn create_webhook(
    Authed { state, caller }: Authed,
    ApiJson(req): ApiJson<CreateWebhookRequest>,
) -> ApiResult<Registered> {
    Ok(register(&state, &caller, req).await?)
}

/// A webhook registered: 201 with it, naming it for the audit log.
pub type Registered = (StatusCode, Extension<Made>, Json<Webhook>);

/// Registers a webhook of the caller's: the answer of both front-ends.
pub async fn register(
    state: &AppState,
    caller: &crate::extract::Caller,
    req: CreateWebhookRequest,
) -> Result<Registered, stockade_service::ServiceError> {
    let (hook, generated) = state
        .svc
        .create_webhook(&caller.scope, create_input(req))
        .await?;
    Ok((
        StatusCode::CREATED,
        Extension(Made(hook.id.to_string())),
        Json(webhook_view(&hook, generated)),
    ))
}

/// One of the caller's webhooks.
#[utoipa::path(get, path = "/api/v1/webhooks/{id}", tag = "events",
    params(("id" = String, Path, description = "webhook id")),
    responses((status = 200, body = Webhook),
              (status = 404, description = "No such webhook of the caller's", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn get_webhook(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Webhook>> {
    let hook = state.svc.webhook(&caller.scope, &id).await?;
    Ok(Json(webhook_view(&hook, false)))
}

/// Change a webhook: only the fields given.
#[utoipa::path(patch, path = "/api/v1/webhooks/{id}", tag = "events",
    params(("id" = String, Path, description = "webhook id")),
    request_body = UpdateWebhookRequest,
    responses((status = 200, body = Webhook),
              (status = 400, description = "A field is invalid (named)", body = ErrorBody),
              (status = 404, description = "No such webhook of the caller's", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn update_webhook(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateWebhookRequest>,
) -> ApiResult<Json<Webhook>> {
    let hook = state
        .svc
        .update_webhook(&caller.scope, &id, update_input(req))
        .await?;
    Ok(Json(webhook_view(&hook, false)))
}

/// Remove a webhook and its deliveries.
#[utoipa::path(delete, path = "/api/v1/webhooks/{id}", tag = "events",
    params(("id" = String, Path, description = "webhook id")),
    responses((status = 204, description = "Removed"),
              (status = 404, description = "No such webhook of the caller's", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn delete_webhook(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    state.svc.delete_webhook(&caller.scope, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A webhook's deliveries, newest first, each with its latest attempts.
#[utoipa::path(get, path = "/api/v1/webhooks/{id}/deliveries", tag = "events",
    params(("id" = String, Path, description = "webhook id"), DeliveryQuery),
    responses((status = 200, body = DeliveryList),
              (status = 400, description = "A bad status or limit (named)", body = ErrorBody),
              (status = 404, description = "No such webhook of the caller's", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list_deliveries(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<DeliveryList>> {
    let q = query_map(raw.as_deref(), &["limit", "status"])?;
    let found = state
        .svc
        .webhook_deliveries(
            &caller.scope,
            &id,
            q.get("status").map(String::as_str),
            query_u32(&q, "limit")?,
        )
        .await?;
    Ok(Json(DeliveryList {
        deliveries: found.iter().map(delivery_view).collect(),
    }))
}

/// Send a delivery again: a new attempt (a new attempt id) of the same event.
#[utoipa::path(post, path = "/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver", tag = "events",
    params(("id" = String, Path, description = "webhook id"),
           ("delivery_id" = String, Path, description = "delivery id")),
    responses((status = 202, body = WebhookDelivery),
              (status = 404, description = "No such webhook or delivery of the caller's", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn redeliver(
    Authed { state, caller }: Authed,
    Path((id, delivery)): Path<(String, String)>,
) -> ApiResult<(StatusCode, Json<WebhookDelivery>)> {
    let d = state.svc.redeliver(&caller.scope, &id, &delivery).await?;
    Ok((StatusCode::ACCEPTED, Json(delivery_view(&d))))
}

/// The audit log: every call that changed something or was refused,
/// oldest first after `since`, or newest first (`order=desc`, then
/// `before=nextCursor` for older ones). Administrators read every
/// account's; others their own.
#[utoipa::path(get, path = "/api/v1/audit", tag = "events",
    params(AuditQuery),
    responses((status = 200, body = AuditPage),
              (status = 400, description = "A malformed cursor or limit (named)", body = ErrorBody),
              (status = 403, description = "Another account's entries, asked by a non-administrator", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn audit(
    Authed { state, caller }: Authed,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<AuditPage>> {
    let q = query_map(
        raw.as_deref(),
        &[
            "since",
            "before",
            "order",
            "limit",
            "accountId",
            "resourceId",
        ],
    )?;
    let newest_first = match q.get("order").map(String::as_str) {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(_) => return Err(ApiError::field("order", "must be asc or desc")),
    };
    let request = AuditRequest {
        since: q.get("since").map(String::as_str),
        before: q.get("before").map(String::as_str),
        newest_first,
        limit: query_u32(&q, "limit")?,
        account: q.get("accountId").map(String::as_str),
        resource: q.get("resourceId").map(String::as_str),
    };
    let (entries, next) = state
        .svc
        .audit_page(&caller.scope, caller.account.is_admin, &request)
        .await?;
    Ok(Json(AuditPage {
        entries: entries.iter().map(audit_view).collect(),
        next_cursor: next.to_string(),
    }))
}
