//! The fake runtime's snapshots and workspace archives: images are names
//! with labels; a sandbox's `/workspace` is the last archive unpacked into
//! it (an empty tar before that). Honest about the cases Docker refuses.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::{stream, StreamExt};
use stockade_core::SandboxId;

use super::{not_found, FakeRuntime};
use crate::{ByteStream, ContainerSpec, Lifecycle, RuntimeError, RuntimeResult, Snapshots};

/// The most a fake workspace archive may hold (it lives in memory).
const MAX_FAKE_ARCHIVE: usize = 64 * 1024 * 1024;

impl FakeRuntime {
    /// The snapshot images committed so far, by reference.
    pub fn images(&self) -> Vec<String> {
        self.state().images.keys().cloned().collect()
    }

    /// The labels of a committed image.
    pub fn image_labels(&self, image_ref: &str) -> Option<BTreeMap<String, String>> {
        self.state().images.get(image_ref).cloned()
    }

    /// The archive last unpacked into a sandbox's `/workspace`.
    pub fn workspace_archive(&self, id: &SandboxId) -> Option<Vec<u8>> {
        self.state().workspaces.get(id).cloned()
    }

    pub(super) fn commit_snapshot_impl(
        &self,
        id: &SandboxId,
        image_ref: &str,
        labels: &BTreeMap<String, String>,
    ) -> RuntimeResult<()> {
        self.check_available()?;
        let mut st = self.state();
        if !st.containers.contains_key(id) {
            return Err(not_found(id));
        }
        st.images.insert(image_ref.to_owned(), labels.clone());
        Ok(())
    }

    pub(super) fn remove_image_impl(&self, image_ref: &str) -> RuntimeResult<()> {
        self.check_available()?;
        let mut st = self.state();
        if st.containers.values().any(|c| c.spec.image == image_ref) {
            return Err(RuntimeError::Conflict(format!(
                "image {image_ref} is used by a container"
            )));
        }
        st.images.remove(image_ref);
        Ok(())
    }

    pub(super) fn export_workspace_impl(&self, id: &SandboxId) -> RuntimeResult<ByteStream> {
        self.check_available()?;
        let st = self.state();
        if !st.containers.contains_key(id) {
            return Err(not_found(id));
        }
        // An empty tar is two zero blocks.
        let tar = st
            .workspaces
            .get(id)
            .cloned()
            .unwrap_or_else(|| vec![0; 1024]);
        Ok(Box::pin(stream::once(async move { Ok(Bytes::from(tar)) })))
    }

    pub(super) async fn create_with_workspace_impl(
        &self,
        spec: &ContainerSpec,
        mut archive: ByteStream,
    ) -> RuntimeResult<String> {
        let mut tar = Vec::new();
        while let Some(chunk) = archive.next().await {
            let chunk = chunk.map_err(|e| {
                RuntimeError::Other(format!("the archive for /workspace could not be read: {e}"))
            })?;
            if tar.len() + chunk.len() > MAX_FAKE_ARCHIVE {
                return Err(RuntimeError::Other(
                    "archive too big for the fake runtime".into(),
                ));
            }
            tar.extend_from_slice(&chunk);
        }
        let container = self.create(spec).await?;
        self.state().workspaces.insert(spec.sandbox_id.clone(), tar);
        Ok(container)
    }
}

#[async_trait]
impl Snapshots for FakeRuntime {
    async fn commit_snapshot(
        &self,
        id: &SandboxId,
        image_ref: &str,
        labels: &BTreeMap<String, String>,
    ) -> RuntimeResult<()> {
        self.commit_snapshot_impl(id, image_ref, labels)
    }

    async fn remove_image(&self, image_ref: &str) -> RuntimeResult<()> {
        self.remove_image_impl(image_ref)
    }

    async fn export_workspace(&self, id: &SandboxId) -> RuntimeResult<ByteStream> {
        self.export_workspace_impl(id)
    }

    async fn create_with_workspace(
        &self,
        spec: &ContainerSpec,
        archive: ByteStream,
    ) -> RuntimeResult<String> {
        self.create_with_workspace_impl(spec, archive).await
    }

    async fn export_image(&self, image_ref: &str) -> RuntimeResult<ByteStream> {
        self.check_available()?;
        let labels = self
            .state()
            .images
            .get(image_ref)
            .cloned()
            .ok_or_else(|| RuntimeError::NotFound(format!("image {image_ref}")))?;
        // The fake's "archive": the reference and the labels, as JSON.
        let body = serde_json::to_vec(&(image_ref, labels))
            .map_err(|e| RuntimeError::Other(e.to_string()))?;
        Ok(Box::pin(stream::once(async move { Ok(Bytes::from(body)) })))
    }

    async fn import_image(&self, mut archive: ByteStream) -> RuntimeResult<()> {
        self.check_available()?;
        let mut body = Vec::new();
        while let Some(chunk) = archive.next().await {
            body.extend_from_slice(&chunk.map_err(|e| RuntimeError::Other(e.to_string()))?);
        }
        let (image_ref, labels): (String, BTreeMap<String, String>) = serde_json::from_slice(&body)
            .map_err(|e| RuntimeError::Other(format!("not an image archive: {e}")))?;
        let mut st = self.state();
        st.missing_images.remove(&image_ref);
        st.images.insert(image_ref, labels);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use futures_util::StreamExt;
    use stockade_core::{AccountId, InstanceId, SandboxId};

    use super::*;

    fn spec(image: &str) -> ContainerSpec {
        ContainerSpec {
            sandbox_id: SandboxId::generate(),
            account_id: AccountId::generate(),
            instance_id: InstanceId::generate(),
            image: image.into(),
            command: vec![],
            env: BTreeMap::new(),
            cpu_cores: 1.0,
            memory_bytes: 1 << 30,
            network_access: true,
            hostname: "h".into(),
            agent_token: None,
            disk_bytes: None,
            mounts: Vec::new(),
            workspace_volume: true,
        }
    }

    async fn collect(mut s: ByteStream) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(c) = s.next().await {
            out.extend_from_slice(&c.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn snapshot_and_restore() {
        let rt = FakeRuntime::new();
        let src = spec("busybox");
        rt.create(&src).await.unwrap();
        assert_eq!(
            collect(rt.export_workspace(&src.sandbox_id).await.unwrap()).await,
            vec![0; 1024]
        );
        let labels = BTreeMap::from([("k".to_string(), "v".to_string())]);
        rt.commit_snapshot(&src.sandbox_id, "stockade-snapshot:abc", &labels)
            .await
            .unwrap();
        assert_eq!(rt.image_labels("stockade-snapshot:abc"), Some(labels));

        let restored = spec("stockade-snapshot:abc");
        let archive: ByteStream = Box::pin(stream::iter(vec![Ok(Bytes::from_static(b"tar!"))]));
        rt.create_with_workspace(&restored, archive).await.unwrap();
        assert_eq!(
            collect(rt.export_workspace(&restored.sandbox_id).await.unwrap()).await,
            b"tar!"
        );
        // In use: refused; once the container is gone: removed.
        assert!(matches!(
            rt.remove_image("stockade-snapshot:abc").await,
            Err(RuntimeError::Conflict(_))
        ));
        rt.remove(&restored.sandbox_id, false).await.unwrap();
        rt.remove_image("stockade-snapshot:abc").await.unwrap();
        rt.remove_image("stockade-snapshot:abc").await.unwrap();
        assert!(rt.images().is_empty());
    }

    #[tokio::test]
    async fn broken_archives_create_nothing() {
        let rt = FakeRuntime::new();
        let s = spec("busybox");
        let archive: ByteStream = Box::pin(stream::iter(vec![
            Ok(Bytes::from_static(b"part")),
            Err(std::io::Error::other("gone")),
        ]));
        assert!(rt.create_with_workspace(&s, archive).await.is_err());
        assert!(rt.containers().is_empty() && rt.volume_names().is_empty());
        assert!(matches!(
            rt.export_workspace(&s.sandbox_id).await,
            Err(RuntimeError::NotFound(_))
        ));
        assert!(matches!(
            rt.commit_snapshot(&s.sandbox_id, "x:y", &BTreeMap::new())
                .await,
            Err(RuntimeError::NotFound(_))
        ));
    }
}
