//! Logs of a sandbox's main process: the JSON form of
//! `GET /api/v1/sandbox/{id}/logs` and the data of its SSE events.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One line of the main process's output. In the SSE form each line is an
/// event typed `stdout` or `stderr` whose `id` is this `id` and whose data
/// is `text`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogLineResponse {
    /// Stable across requests: `<Docker timestamp in ns>-<sequence among
    /// lines of that timestamp>`. Pass it as `Last-Event-ID` (or
    /// `lastEventId`) to continue after this line.
    pub id: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The line without its line ending.
    pub text: String,
    /// When Docker received the line.
    pub timestamp: DateTime<Utc>,
}

/// `GET /api/v1/sandbox/{id}/logs` as JSON.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogsResponse {
    pub sandbox_id: String,
    /// Oldest first.
    pub lines: Vec<LogLineResponse>,
    /// The id of the last line, to continue from (`lastEventId`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<String>,
    /// After `lastEventId`: more lines follow than `tail` allowed; ask again
    /// from `lastEventId`.
    pub has_more: bool,
    /// Older lines were left out to keep the response under its size limit.
    pub truncated: bool,
    /// The same lines as one text, each ended by a newline (what
    /// `prime-sandboxes` reads).
    #[serde(default)]
    pub logs: String,
}

/// The data of the final SSE event `end`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogsEndEvent {
    /// Why the stream ended, e.g. `sandbox stopped`.
    pub reason: String,
}
