//! The fake's disk quotas: an enforcement tests set (both areas
//! capped unless they say otherwise) and usage from the sizes they set.

use std::time::Duration;

use async_trait::async_trait;
use stockade_core::SandboxId;

use super::FakeRuntime;
use crate::{Disk, DiskEnforcement, DiskUsage, Enforcement, QuotaMethod, RuntimeResult};

/// The fake's default: both areas capped, as on a host set up for it.
pub(super) fn enforced() -> DiskEnforcement {
    DiskEnforcement {
        workspace: Enforcement::Enforced(QuotaMethod::VolumeDriver),
        root_fs: Enforcement::Enforced(QuotaMethod::StorageDriver),
    }
}

impl FakeRuntime {
    /// What [`Disk::disk_enforcement`] reports from now on.
    pub fn set_disk_enforcement(&self, enforcement: DiskEnforcement) {
        self.state().disk = enforcement;
    }

    /// The root-filesystem use [`Disk::disk_usage`] reports for `id`.
    pub fn set_root_fs_size(&self, id: &SandboxId, bytes: u64) {
        self.state().root_fs_bytes.insert(id.clone(), bytes);
    }
}

#[async_trait]
impl Disk for FakeRuntime {
    async fn disk_enforcement(&self) -> DiskEnforcement {
        self.state().disk.clone()
    }

    async fn disk_usage(
        &self,
        id: &SandboxId,
        _max_age: Duration,
    ) -> RuntimeResult<Option<DiskUsage>> {
        self.check_available()?;
        let st = self.state();
        let Some(container) = st.containers.get(id) else {
            return Ok(None);
        };
        let limit = container.spec.disk_bytes;
        Ok(Some(DiskUsage {
            workspace_bytes: st.volumes.get(id).and_then(|v| v.size_bytes),
            workspace_limit_bytes: limit.filter(|_| st.disk.workspace.is_enforced()),
            root_fs_bytes: Some(st.root_fs_bytes.get(id).copied().unwrap_or(0)),
            root_fs_limit_bytes: limit.filter(|_| st.disk.root_fs.is_enforced()),
        }))
    }
}
