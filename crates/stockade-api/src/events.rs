//! Lifecycle events, webhooks and the audit log: what the feed, the webhook
//! routes (native and E2B's, one shape) and the audit route exchange.
//!
//! An event has E2B's webhook payload shape (`version`, `id`, `type`,
//! `eventData`, `sandbox*`, `timestamp`) plus the resource it is about and
//! its cursor in the feed, so one body serves the feed, the stream, E2B's
//! polling routes and every delivery.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// One thing that happened to a resource of an account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The payload's version: `v1`.
    pub version: String,
    /// The event's id: the same in every delivery of it.
    pub id: String,
    /// What happened, e.g. `sandbox.lifecycle.created`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A few facts of the change (`sandbox_metadata`, `reason`,
    /// `set_timeout`, `changed`, …); `null` when there are none.
    #[schema(value_type = Option<Object>)]
    pub event_data: Option<serde_json::Value>,
    /// Always `null`: Stockade builds no template images.
    pub sandbox_build_id: Option<String>,
    /// One run of the sandbox: the same from a start to its stop.
    pub sandbox_execution_id: Option<String>,
    /// The sandbox the event is about (a snapshot's source sandbox).
    pub sandbox_id: Option<String>,
    /// The account that owns the resource.
    pub sandbox_team_id: String,
    /// The image the sandbox runs.
    pub sandbox_template_id: Option<String>,
    /// When it happened (RFC 3339).
    pub timestamp: DateTime<Utc>,
    /// `sandbox` or `snapshot`.
    pub resource_type: String,
    /// The id of the resource the event is about.
    pub resource_id: String,
    /// This event's place in the feed: `since=<cursor>` gives the events
    /// after it.
    pub cursor: String,
}

/// A page of the feed, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Always present: the cursor of the last event returned, or the one
    /// given when none was newer, so `since=nextCursor` reads on.
    pub next_cursor: String,
}

/// The feed's query: `GET /api/v1/events`, and its live stream.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    /// The cursor of the last event already read; absent: from the oldest
    /// kept.
    pub since: Option<String>,
    /// At most this many events (1–100, default 100).
    pub limit: Option<u32>,
    /// Only these types, comma-separated.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Only the events of this sandbox (id or name).
    pub sandbox_id: Option<String>,
}

/// E2B's polling query (`GET /e2b/events/sandboxes[/{id}]`): newest first
/// unless `orderAsc`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct E2bEventQuery {
    /// Events to skip (default 0).
    pub offset: Option<u32>,
    /// 1–100, default 10.
    pub limit: Option<u32>,
    /// Oldest first when true (default false).
    pub order_asc: Option<bool>,
}

/// Registers a webhook (`POST /api/v1/webhooks`, E2B's
/// `POST /e2b/events/webhooks`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateWebhookRequest {
    /// A name for people (default: the URL's host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where deliveries are POSTed: `http` or `https`.
    pub url: String,
    /// Whether it receives deliveries (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The event types it wants (default: every type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// The secret each delivery is signed with (8–256 characters); absent:
    /// one is made and returned in this answer only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_secret: Option<String>,
}

/// Changes a webhook: only the fields given (`PATCH`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateWebhookRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_secret: Option<String>,
}

/// A webhook as read back: never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    pub id: String,
    /// The account it belongs to (E2B's spelling).
    #[serde(rename = "teamID")]
    pub team_id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub enabled: bool,
    pub url: String,
    pub events: Vec<String>,
    /// Only in the answer to a create that made the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_secret: Option<String>,
}

/// One attempt to deliver an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryAttempt {
    /// The `e2b-delivery-id` header it carried.
    pub id: String,
    pub at: DateTime<Utc>,
    /// The receiver's status code; absent when it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// An event on its way to one webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    pub id: String,
    pub webhook_id: String,
    pub event_id: String,
    pub event_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    /// `pending` (waiting for its turn or its next attempt), `delivered`
    /// (a 2xx answer) or `failed` (given up after the retry period).
    pub status: String,
    pub attempts: u32,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<DateTime<Utc>>,
    /// The latest attempts, newest first.
    pub attempt_log: Vec<DeliveryAttempt>,
}

/// A webhook's deliveries, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryList {
    pub deliveries: Vec<WebhookDelivery>,
}

/// `GET /api/v1/webhooks/{id}/deliveries`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct DeliveryQuery {
    /// 1–100, default 50.
    pub limit: Option<u32>,
    /// Only `pending`, `delivered` or `failed` ones.
    pub status: Option<String>,
}

/// One call made to the API, or refused by it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    pub id: String,
    /// Who: absent when no credential was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// The API token or dashboard session that authenticated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<String>,
    /// The method and route template, e.g. `DELETE /api/v1/sandbox/{id}`.
    pub action: String,
    /// `api`, `dashboard`, `cli`, `e2b`, `prime` or `proxy`.
    pub front_end: String,
    /// The resource the path named (a sandbox's id or name, a webhook's id…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
    pub timestamp: DateTime<Utc>,
    pub duration_ms: u64,
    /// This entry's place in the log.
    pub cursor: String,
}

/// A page of the audit log, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub next_cursor: String,
}

/// `GET /api/v1/audit`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Entries after this cursor, oldest first.
    pub since: Option<String>,
    /// Entries before this cursor, newest first.
    pub before: Option<String>,
    /// `asc` (default) or `desc`: newest first from the latest.
    pub order: Option<String>,
    /// 1–100, default 100.
    pub limit: Option<u32>,
    /// Administrators: only this account's entries.
    pub account_id: Option<String>,
    /// Only entries for this resource.
    pub resource_id: Option<String>,
}
