//! The wire types Prime Intellect's `prime-sandboxes` SDK reads beyond
//! Stockade's own: its bulk delete, the sandbox gateway's
//! credentials (`POST /api/v1/sandbox/{id}/auth`), the gateway's file
//! answers and the status lookups. Field names are the SDK's (snake_case).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `DELETE /api/v1/sandbox` (the SDK's bulk delete): by ids or by labels
/// (ALL must match).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PrimeBulkDeleteRequest {
    pub sandbox_ids: Option<Vec<String>>,
    pub labels: Option<Vec<String>>,
    /// Must be a team of the caller's, if given.
    pub team_id: Option<String>,
    /// Only the caller's own account.
    pub user_id: Option<String>,
    /// Only `false`: a caller deletes its own sandboxes.
    #[serde(default)]
    pub all_users: bool,
}

/// The outcome of a bulk delete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PrimeBulkDeleteResponse {
    /// Ids of the deleted sandboxes.
    pub succeeded: Vec<String>,
    /// `{"sandbox_id": …, "error": …}` per sandbox that was not deleted.
    pub failed: Vec<std::collections::BTreeMap<String, String>>,
    pub message: String,
}

/// `POST /api/v1/sandbox/{id}/auth`: where and how to reach the sandbox's
/// gateway (commands and files), on this server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PrimeGatewayAuth {
    /// `{scheme}://{host}/gateway`.
    pub gateway_url: String,
    /// The owner account (the first path segment after the gateway URL).
    pub user_ns: String,
    /// The sandbox id (the second path segment).
    pub job_id: String,
    /// A gateway token of this sandbox: `Authorization: Bearer …` on the
    /// gateway, good for nothing else.
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// The gateway's `POST …/upload`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PrimeUploadResponse {
    pub success: bool,
    pub path: String,
    pub size: u64,
    pub timestamp: DateTime<Utc>,
}

/// The gateway's `GET …/read-file`: a text file, or a window of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PrimeReadFileResponse {
    /// The bytes read, as UTF-8 (invalid sequences replaced).
    pub content: String,
    /// How many bytes `content` holds.
    pub size: u64,
    /// The file's size.
    pub total_size: u64,
    pub offset: u64,
    /// More of the file follows the window.
    pub truncated: bool,
}

/// `POST /api/v1/sandbox/status:batchGet`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PrimeStatusBatchRequest {
    pub sandbox_ids: Vec<String>,
}

/// One sandbox's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PrimeStatusSnapshot {
    pub sandbox_id: String,
    pub status: String,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
}

/// A sandbox a status lookup could not report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PrimeStatusLookupError {
    pub sandbox_id: String,
    /// `NOT_FOUND` or `FORBIDDEN`.
    pub code: String,
    pub message: String,
}

/// The answer of a status lookup, in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PrimeStatusBatchResponse {
    pub statuses: Vec<PrimeStatusSnapshot>,
    pub errors: Vec<PrimeStatusLookupError>,
}

/// `GET /api/v1/sandbox/{id}/error-context`: why a sandbox does not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrimeErrorContext {
    pub status: String,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
}

/// A snapshot as the SDK's checkpoint (`POST /sandbox/{id}/checkpoints`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PrimeCheckpoint {
    pub id: String,
    pub sandbox_id: String,
    /// `DURABLE` (restorable), `PENDING`, `DELETING` or `DELETED`.
    pub state: String,
    pub depth: u32,
    pub docker_image: String,
    pub stored_bytes: Option<u64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_bulk_delete_body_parses() {
        // prime-sandboxes: BulkDeleteSandboxRequest.model_dump(exclude_none=True)
        let r: PrimeBulkDeleteRequest =
            serde_json::from_str(r#"{"sandbox_ids":["a","b"],"all_users":false}"#).unwrap();
        assert_eq!(r.sandbox_ids.unwrap().len(), 2);
        assert!(serde_json::from_str::<PrimeBulkDeleteRequest>(r#"{"ids":["a"]}"#).is_err());
    }
}
