//! Request and response types of shared volumes (`/api/v1/shared-volumes`)
//! and of their files.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use utoipa::ToSchema;

/// `POST /api/v1/shared-volumes`.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSharedVolumeRequest {
    /// 1 to 63 letters, digits and hyphens; unique among the account's
    /// volumes.
    pub name: String,
    /// A size limit in whole GB, enforced where the Docker host can.
    /// Required when the account's quota sets `volumeGB`.
    #[serde(rename = "sizeGB")]
    pub size_gb: Option<f64>,
    pub labels: Option<BTreeMap<String, String>>,
    /// The Docker host to keep it on (its sandboxes are placed there);
    /// this server's own by default.
    pub server: Option<String>,
}

/// A sandbox that mounts a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMountView {
    pub sandbox_id: String,
    pub path: String,
    pub read_only: bool,
}

/// A shared volume as the API shows it.
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedVolumeResponse {
    pub id: String,
    pub name: String,
    /// The Docker host it lives on.
    pub server: String,
    #[serde(rename = "sizeGB")]
    pub size_gb: Option<u32>,
    pub labels: BTreeMap<String, String>,
    /// `CREATING` or `READY`.
    pub status: String,
    pub created_at: DateTime<Utc>,
    /// The sandboxes (not deleted) that mount it.
    pub mounts: Vec<VolumeMountView>,
}

/// `GET /api/v1/shared-volumes/{volume}/usage`.
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedVolumeUsage {
    /// Bytes its files take on disk.
    pub used_bytes: u64,
    #[serde(rename = "sizeGB")]
    pub size_gb: Option<u32>,
    /// Whether the host holds it to `sizeGB`.
    pub size_enforced: bool,
    /// How the limit is enforced, or why it is not.
    pub enforcement: Option<String>,
}

/// `GET /api/v1/shared-volumes`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedVolumeList {
    pub volumes: Vec<SharedVolumeResponse>,
    pub total: usize,
}

/// A shared volume a sandbox mounts, as its details show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMountView {
    pub volume_id: String,
    /// The volume's name when it was mounted.
    pub name: String,
    pub path: String,
    pub read_only: bool,
}

/// A shared volume mounted by a create: `volumeMounts` of `POST /sandbox`.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeMountRequest {
    /// The volume's name or id.
    pub volume: String,
    /// An absolute path in the sandbox: not `/`, `/workspace` or a
    /// system directory.
    pub path: String,
    /// Mounted read-only (default false).
    #[serde(alias = "read_only")]
    pub read_only: Option<bool>,
}

impl VolumeMountRequest {
    pub fn input(&self) -> stockade_core::MountInput {
        stockade_core::MountInput {
            volume: self.volume.clone(),
            path: self.path.clone(),
            read_only: self.read_only,
        }
    }
}

/// One entry of a volume.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeEntryResponse {
    pub name: String,
    /// Its path in the volume (`/` is the volume's root).
    pub path: String,
    /// `file`, `directory`, `symlink` or `unknown`.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    /// Permission bits, e.g. 420 (0644).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: String,
    pub mtime: String,
    pub ctime: String,
    /// A symlink's target.
    pub target: Option<String>,
}

/// `GET /api/v1/shared-volumes/{volume}/files`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeListing {
    pub path: String,
    pub entries: Vec<VolumeEntryResponse>,
}

/// `POST /api/v1/shared-volumes/{volume}/files/rename`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeRenameRequest {
    pub from: String,
    pub to: String,
}
