//! Account quotas (`/api/v1/accounts/{id}/quota`): limits an
//! administrator sets on an account, and what the account uses of them.

use serde::{Deserialize, Serialize};
use stockade_core::quota::BYTES_PER_GB;
use stockade_core::{Quota, QuotaInput, QuotaUsage, SharedVolumeUsage, StoredUsage};
use utoipa::ToSchema;

/// `PUT /api/v1/accounts/{id}/quota` (admin only): the whole quota; a field
/// that is absent or `null` is unlimited.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetQuotaRequest {
    /// Sandboxes that are not terminated (stopped ones count).
    pub sandboxes: Option<u64>,
    /// CPU cores of the running sandboxes together (fractions allowed).
    pub cpu_cores: Option<f64>,
    /// Memory of the running sandboxes together, in GB (fractions allowed).
    #[serde(rename = "memoryGB")]
    pub memory_gb: Option<f64>,
    /// `diskSizeGB` of the sandboxes that are not terminated, together.
    #[serde(rename = "diskGB")]
    pub disk_gb: Option<u64>,
    /// Snapshots that are not deleted.
    pub snapshots: Option<u64>,
    /// What those snapshots take in the object store (workspace and image
    /// archives), in GB (fractions allowed).
    #[serde(rename = "snapshotGB")]
    pub snapshot_gb: Option<f64>,
    /// Uploads not yet used by a create (and not expired).
    pub uploads: Option<u64>,
    /// What those uploads take in the object store, in GB (fractions
    /// allowed).
    #[serde(rename = "uploadGB")]
    pub upload_gb: Option<f64>,
    /// Shared volumes that are not deleted. Without it the server keeps an
    /// account to 100.
    pub volumes: Option<u64>,
    /// The `sizeGB` of those volumes together, in whole GB; where it is set,
    /// a volume created without `sizeGB` is refused.
    #[serde(rename = "volumeGB")]
    pub volume_gb: Option<u64>,
}

impl SetQuotaRequest {
    /// The input the quota is checked from.
    pub fn input(&self) -> QuotaInput {
        QuotaInput {
            sandboxes: self.sandboxes,
            cpu_cores: self.cpu_cores,
            memory_gb: self.memory_gb,
            disk_gb: self.disk_gb,
            snapshots: self.snapshots,
            snapshot_gb: self.snapshot_gb,
            uploads: self.uploads,
            upload_gb: self.upload_gb,
            volumes: self.volumes,
            volume_gb: self.volume_gb,
        }
    }

    /// Checks the values as the server does (each error names its field).
    pub fn check(&self) -> Result<(), stockade_core::ValidationErrors> {
        Quota::from_input(&self.input()).map(drop)
    }
}

/// An account's limits; `null` is unlimited.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaLimits {
    pub sandboxes: Option<u64>,
    pub cpu_cores: Option<f64>,
    #[serde(rename = "memoryGB")]
    pub memory_gb: Option<f64>,
    #[serde(rename = "diskGB")]
    pub disk_gb: Option<u64>,
    pub snapshots: Option<u64>,
    #[serde(rename = "snapshotGB")]
    pub snapshot_gb: Option<f64>,
    pub uploads: Option<u64>,
    #[serde(rename = "uploadGB")]
    pub upload_gb: Option<f64>,
    pub volumes: Option<u64>,
    #[serde(rename = "volumeGB")]
    pub volume_gb: Option<u64>,
}

impl From<&Quota> for QuotaLimits {
    fn from(q: &Quota) -> Self {
        let i = q.to_input();
        Self {
            sandboxes: i.sandboxes,
            cpu_cores: i.cpu_cores,
            memory_gb: i.memory_gb,
            disk_gb: i.disk_gb,
            snapshots: i.snapshots,
            snapshot_gb: i.snapshot_gb,
            uploads: i.uploads,
            upload_gb: i.upload_gb,
            volumes: i.volumes,
            volume_gb: i.volume_gb,
        }
    }
}

impl QuotaLimits {
    /// The same limits as a request (to change one of them and put it back).
    pub fn to_request(&self) -> SetQuotaRequest {
        SetQuotaRequest {
            sandboxes: self.sandboxes,
            cpu_cores: self.cpu_cores,
            memory_gb: self.memory_gb,
            disk_gb: self.disk_gb,
            snapshots: self.snapshots,
            snapshot_gb: self.snapshot_gb,
            uploads: self.uploads,
            upload_gb: self.upload_gb,
            volumes: self.volumes,
            volume_gb: self.volume_gb,
        }
    }
}

/// What an account uses, as its quota counts it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaUsageResponse {
    /// Sandboxes that are not terminated.
    pub sandboxes: u64,
    /// CPU cores of the sandboxes that run (or are being created).
    pub cpu_cores: f64,
    /// Memory of the sandboxes that run (or are being created), in GB.
    #[serde(rename = "memoryGB")]
    pub memory_gb: f64,
    /// `diskSizeGB` of the sandboxes that are not terminated.
    #[serde(rename = "diskGB")]
    pub disk_gb: u64,
    /// Snapshots that are not deleted (being captured ones too).
    #[serde(default)]
    pub snapshots: u64,
    /// What they take in the object store, in GB.
    #[serde(default, rename = "snapshotGB")]
    pub snapshot_gb: f64,
    /// Uploads not yet used and not expired.
    #[serde(default)]
    pub uploads: u64,
    /// What they take in the object store, in GB.
    #[serde(default, rename = "uploadGB")]
    pub upload_gb: f64,
    /// Shared volumes that are not deleted.
    #[serde(default)]
    pub volumes: u64,
    /// Their declared `sizeGB` together (a volume without one counts none).
    #[serde(default, rename = "volumeGB")]
    pub volume_gb: u64,
}

impl From<&QuotaUsage> for QuotaUsageResponse {
    fn from(u: &QuotaUsage) -> Self {
        Self {
            sandboxes: u.sandboxes,
            cpu_cores: u.running.cpu_millis as f64 / 1000.0,
            memory_gb: u.running.memory_bytes as f64 / BYTES_PER_GB as f64,
            disk_gb: u.disk_gb,
            ..Self::default()
        }
    }
}

impl QuotaUsageResponse {
    /// With what the account keeps in the object store.
    pub fn with_stored(self, s: &StoredUsage) -> Self {
        let gb = |b: u64| b as f64 / BYTES_PER_GB as f64;
        Self {
            snapshots: s.snapshots,
            snapshot_gb: gb(s.snapshot_bytes),
            uploads: s.uploads,
            upload_gb: gb(s.upload_bytes),
            ..self
        }
    }

    /// With what the account's shared volumes take.
    pub fn with_volumes(self, v: &SharedVolumeUsage) -> Self {
        Self {
            volumes: v.volumes,
            volume_gb: v.volume_gb,
            ..self
        }
    }
}

/// `GET`/`PUT /api/v1/accounts/{id}/quota`: the account's quota and use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaResponse {
    pub account_id: String,
    pub quota: QuotaLimits,
    pub usage: QuotaUsageResponse,
}
