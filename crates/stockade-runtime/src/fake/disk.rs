//! The fake's disk quotas: both areas capped, as on a host set up for it,
//! and usage from the workspace volume's size.

use std::time::Duration;

use async_trait::async_trait;
use stockade_core::SandboxId;

use super::FakeRuntime;
use crate::{Disk, DiskEnforcement, DiskUsage, Enforcement, QuotaMethod, RuntimeResult};

/// Both areas capped.
fn enforced() -> DiskEnforcement {
    DiskEnforcement {
        workspace: Enforcement::Enforced(QuotaMethod::VolumeDriver),
        root_fs: Enforcement::Enforced(QuotaMethod::StorageDriver),
    }
}

#[async_trait]
impl Disk for FakeRuntime {
    async fn disk_enforcement(&self) -> DiskEnforcement {
        enforced()
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
            workspace_limit_bytes: limit,
            root_fs_bytes: Some(0),
            root_fs_limit_bytes: limit,
        }))
    }
}
