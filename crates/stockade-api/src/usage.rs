//! Live resource usage of a running sandbox, shown in its details.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use utoipa::ToSchema;

/// What a running sandbox uses right now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    /// CPU in percent of one core (200 = two cores busy), over the last
    /// second or two; absent when not measurable yet.
    #[serde(skip_serializing_if = "Option::is_none")]
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

/// One measurement of a sandbox's CPU and memory, in its usage history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageSample {
    /// When it was measured.
    pub at: DateTime<Utc>,
    /// CPU in percent of one core (200 = two cores busy); absent when it
    /// could not be measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    /// Memory in use (reclaimable page cache left out).
    pub memory_bytes: u64,
    /// The memory limit in force then.
    pub memory_limit_bytes: u64,
}

/// The CPU and memory of a sandbox over the last minutes, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageHistoryResponse {
    pub samples: Vec<UsageSample>,
}

/// A sandbox's disk use against the limits the kernel enforces:
/// `/workspace` and the writable root filesystem are each capped at
/// `diskSizeGB` where the host can. A limit is absent when none is enforced;
/// a figure is absent when it could not be measured in time.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskUsageSummary {
    pub workspace_bytes: Option<u64>,
    pub workspace_limit_bytes: Option<u64>,
    pub root_fs_bytes: Option<u64>,
    pub root_fs_limit_bytes: Option<u64>,
}

/// Whether `diskSizeGB` is enforced on this host (`/health`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskHealth {
    /// Both areas are capped.
    pub enforced: bool,
    pub workspace: DiskAreaHealth,
    pub root_fs: DiskAreaHealth,
}

/// One writable area of a sandbox: capped how, or why not.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskAreaHealth {
    pub enforced: bool,
    /// How the kernel caps it, when it does.
    pub method: Option<String>,
    /// Why it is not capped, in the engine's words.
    pub reason: Option<String>,
}

/// The egress filter of network policies, in `/health`.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressHealth {
    /// `running`, `starting` or `unavailable` (allow/deny lists are then
    /// refused; allow-all and deny-all still work).
    pub status: String,
    pub proxy: Option<String>,
    pub dns: Option<String>,
    pub reason: Option<String>,
}
