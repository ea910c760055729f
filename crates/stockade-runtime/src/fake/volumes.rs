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

    async fn create_shared_volume(
        &self,
        name: &str,
        _labels: std::collections::BTreeMap<String, String>,
        _size_bytes: Option<u64>,
    ) -> RuntimeResult<()> {
        self.check_available()?;
        self.state().shared_volumes.insert(name.to_owned());
        Ok(())
    }

    async fn prepare_shared_volumes(&self, mounts: &[crate::SharedMount]) -> RuntimeResult<()> {
        self.check_available()?;
        let st = self.state();
        match mounts
            .iter()
            .find(|m| !st.shared_volumes.contains(&m.volume))
        {
            Some(m) => Err(RuntimeError::NotFound(format!(
                "the shared volume {} is missing on this Docker host",
                m.volume
            ))),
            None => Ok(()),
        }
    }

    async fn remove_shared_volume(&self, name: &str) -> RuntimeResult<()> {
        self.check_available()?;
        let mut st = self.state();
        let mounted = st
            .containers
            .values()
            .any(|c| c.spec.mounts.iter().any(|m| m.volume == name));
        if mounted {
            return Err(RuntimeError::Conflict(format!(
                "the shared volume {name} is still mounted by a container"
            )));
        }
        st.shared_volumes.remove(name);
        Ok(())
    }

    /// The fake keeps no files in its volumes: an empty archive.
    async fn export_shared_volume(
        &self,
        name: &str,
        _token: &str,
    ) -> RuntimeResult<crate::ByteStream> {
        self.check_available()?;
        if !self.state().shared_volumes.contains(name) {
            return Err(RuntimeError::NotFound(format!("volume {name} not found")));
        }
        let empty = bytes::Bytes::from(vec![0u8; 1024]);
        Ok(Box::pin(futures_util::stream::once(
            async move { Ok(empty) },
        )))
    }

    async fn import_shared_volume(
        &self,
        name: &str,
        _token: &str,
        _archive: crate::ByteStream,
    ) -> RuntimeResult<()> {
        self.check_available()?;
        if !self.state().shared_volumes.contains(name) {
            return Err(RuntimeError::NotFound(format!("volume {name} not found")));
        }
        Ok(())
    }

    /// The fake runs no agent: a volume's files are not reachable.
    async fn volume_helper(&self, name: &str, _token: &str) -> RuntimeResult<String> {
        self.check_available()?;
        if !self.state().shared_volumes.contains(name) {
            return Err(RuntimeError::NotFound(format!("volume {name} not found")));
        }
        Err(RuntimeError::Unavailable(
            "the fake runtime has no files helper".into(),
        ))
    }

    async fn stop_volume_helper(&self, _name: &str) -> RuntimeResult<()> {
        Ok(())
    }
}
