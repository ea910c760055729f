//! The fake's volumes: listing with owners and in-use, Docker's refusal to
//! remove a mounted one, and sizes tests set.

use std::time::Duration;

use async_trait::async_trait;
use stockade_core::VolumeName;

use super::FakeRuntime;
use crate::{RuntimeError, RuntimeResult, VolumeInfo, Volumes};

#[async_trait]
impl Volumes for FakeRuntime {
    async fn list_volumes(&self) -> RuntimeResult<Vec<VolumeInfo>> {
        self.check_available()?;
        let st = self.state();
        Ok(st
            .volumes
            .iter()
            .map(|(id, v)| VolumeInfo {
                name: VolumeName::for_sandbox(id),
                created_at: Some(v.created_at),
                size_bytes: v.size_bytes,
                instance_id: v.instance_id.clone(),
                account_id: v.account_id.clone(),
                in_use: st.containers.get(id).is_some_and(|c| c.running),
                pool_member: v.pool_member,
            })
            .collect())
    }

    async fn remove_volume(&self, name: &VolumeName) -> RuntimeResult<()> {
        self.check_available()?;
        let mut st = self.state();
        let id = name.sandbox_id();
        if !st.volumes.contains_key(&id) {
            return Err(RuntimeError::NotFound(format!("volume {name} not found")));
        }
        // Docker refuses while any container (running or not) mounts it.
        if st.containers.contains_key(&id) {
            return Err(RuntimeError::Conflict(
                "Volume is in use by running sandbox".into(),
            ));
        }
        st.volumes.remove(&id);
        Ok(())
    }

    async fn volume_size(
        &self,
        name: &VolumeName,
        _max_age: Duration,
    ) -> RuntimeResult<Option<u64>> {
        self.check_available()?;
        Ok(self
            .state()
            .volumes
            .get(&name.sandbox_id())
            .and_then(|v| v.size_bytes))
    }
}
