//! Live resource usage of a running sandbox, shown in its details (API-3).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a running sandbox uses right now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    /// CPU in percent of one core (200 = two cores busy), over the last
    /// second or two; absent when not measurable yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    /// Memory in use (reclaimable page cache left out).
    pub memory_bytes: u64,
    /// The enforced memory limit.
    pub memory_limit_bytes: u64,
    /// Human-readable memory in use and limit, e.g. `1.2 GB / 2.1 GB`.
    pub memory: String,
    pub network_rx_bytes: u64,
    pub network_tx_bytes: u64,
    /// Processes and threads.
    pub pids: u64,
    /// When the figures were measured.
    pub sampled_at: DateTime<Utc>,
}
