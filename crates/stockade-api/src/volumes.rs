//! `/api/v1/volumes…`: Stockade's volumes, their sizes and
//! owners, and the orphans a confirmed cleanup removes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ErrorDetail;

/// One volume of this Stockade instance.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeResponse {
    /// `agent-sandbox-{sandboxId}`.
    pub name: String,
    pub sandbox_id: String,
    /// The owning account (the sandbox record's, else the volume's label).
    pub account_id: Option<String>,
    /// Bytes used, as Docker measured them; absent when Docker did not report it.
    pub size_bytes: Option<u64>,
    /// Human-readable, e.g. `1.2 GB`.
    pub size: Option<String>,
    pub created_at: Option<DateTime<Utc>>,
    /// A running container mounts it.
    pub in_use: bool,
    /// No live (not deleted) sandbox record owns it — e.g. the preserved
    /// volume of a destroyed sandbox.
    pub orphaned: bool,
    /// Status of the owning sandbox record, when one exists (also TERMINATED).
    pub sandbox_status: Option<String>,
    /// Set above 10 GB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// `GET /api/v1/volumes` and `GET /api/v1/volumes/orphaned`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListVolumesResponse {
    pub volumes: Vec<VolumeResponse>,
    pub total: u64,
    /// Sum of the known sizes.
    pub total_bytes: u64,
    pub total_size: String,
}

/// A volume that was removed, with the space it used (measured before removal).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemovedVolume {
    pub name: String,
    pub sandbox_id: String,
    pub size_bytes: Option<u64>,
    pub size: Option<String>,
}

/// A volume the cleanup could not remove, and why.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeFailure {
    pub name: String,
    pub error: ErrorDetail,
}

/// `DELETE /api/v1/volumes/orphaned?confirm=true`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CleanupResponse {
    pub removed: Vec<RemovedVolume>,
    /// Orphans that could not be removed (e.g. a container outside Stockade mounts one).
    pub failed: Vec<VolumeFailure>,
    /// Total of the removed volumes' sizes, measured before removal.
    pub freed_bytes: u64,
    pub freed: String,
}
