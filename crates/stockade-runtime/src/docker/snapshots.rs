//! Snapshots, forks and workspace sources on Docker (LC-9, LC-10, LC-11,
//! S3-2): commit a container as an image, stream `/workspace` out as a tar,
//! and unpack a tar into a new container's `/workspace` before it starts.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::{Config, DownloadFromContainerOptions, UploadToContainerOptions};
use bollard::image::{CommitContainerOptions, RemoveImageOptions};
use bollard::Docker;
use bytes::Bytes;
use futures_util::{stream, StreamExt};
use stockade_core::{SandboxId, VolumeName};

use super::lifecycle::{stockade_labels, CreateUndo};
use super::{container_name, error_chain, status_code, DockerRuntime};
use crate::{ByteStream, ContainerSpec, RuntimeError, RuntimeResult, Snapshots};

/// How long one archive transfer (commit, upload, unpack) may take: the
/// engine answers only when it is done.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(3600);

impl DockerRuntime {
    #[tracing::instrument(skip(self, labels), fields(sandbox.id = %id))]
    pub(super) async fn commit_snapshot_impl(
        &self,
        id: &SandboxId,
        image_ref: &str,
        labels: &BTreeMap<String, String>,
    ) -> RuntimeResult<()> {
        let docker = self.client().await?.with_timeout(TRANSFER_TIMEOUT);
        let (repo, tag) = image_ref.rsplit_once(':').ok_or_else(|| {
            RuntimeError::Other(format!("snapshot image '{image_ref}' has no tag"))
        })?;
        let options = CommitContainerOptions {
            container: container_name(id),
            repo: repo.to_owned(),
            tag: tag.to_owned(),
            comment: format!("Stockade snapshot of sandbox {id}"),
            author: "stockade".to_owned(),
            pause: true,
            changes: None,
        };
        // Docker merges these labels with the container's own.
        let config = Config::<String> {
            labels: Some(labels.clone().into_iter().collect::<HashMap<_, _>>()),
            ..Default::default()
        };
        docker
            .commit_container(options, config)
            .await
            .map_err(|e| match status_code(&e) {
                Some(404) => RuntimeError::NotFound(format!("no container for sandbox {id}")),
                _ => self.map_err(e, "commit container"),
            })?;
        Ok(())
    }

    #[tracing::instrument(skip(self))]
    pub(super) async fn remove_image_impl(&self, image_ref: &str) -> RuntimeResult<()> {
        let docker = self.client().await?;
        match docker
            .remove_image(
                image_ref,
                Some(RemoveImageOptions {
                    force: false,
                    noprune: false,
                }),
                None,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            Err(e) if status_code(&e) == Some(409) => Err(RuntimeError::Conflict(format!(
                "image {image_ref} is used by a container"
            ))),
            Err(e) => Err(self.map_err(e, "remove image")),
        }
    }

    #[tracing::instrument(skip(self), fields(sandbox.id = %id))]
    pub(super) async fn export_workspace_impl(&self, id: &SandboxId) -> RuntimeResult<ByteStream> {
        let docker = self.client().await?;
        // `/workspace/.` makes the entries relative to the directory (`./…`).
        let path = format!("{}/.", VolumeName::MOUNT_PATH);
        let mut body = docker
            .download_from_container(
                &container_name(id),
                Some(DownloadFromContainerOptions { path }),
            )
            .boxed();
        // The first item tells whether the container exists at all.
        let first = match body.next().await {
            None => Bytes::new(),
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                return Err(match status_code(&e) {
                    Some(404) => RuntimeError::NotFound(format!(
                        "no container (or no {}) for sandbox {id}",
                        VolumeName::MOUNT_PATH
                    )),
                    _ => self.map_err(e, "read /workspace"),
                })
            }
        };
        let rest = body.map(|item| {
            item.map_err(|e| {
                std::io::Error::other(format!("reading /workspace: {}", error_chain(&e)))
            })
        });
        Ok(Box::pin(stream::once(async move { Ok(first) }).chain(rest)))
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %spec.sandbox_id, image = %spec.image))]
    pub(super) async fn create_with_workspace_impl(
        &self,
        spec: &ContainerSpec,
        archive: ByteStream,
    ) -> RuntimeResult<String> {
        let docker = self.client().await?;
        let mut undo = CreateUndo::new(docker.clone(), spec);
        match self
            .create_inner(
                &docker,
                spec,
                &mut undo,
                Some(archive),
                stockade_labels(spec),
            )
            .await
        {
            Ok(id) => {
                undo.disarm();
                Ok(id)
            }
            Err(e) => {
                undo.run_now().await;
                Err(e)
            }
        }
    }

    /// Unpacks `archive` into `/workspace` of a (created, not yet started)
    /// container. A broken source stream fails the unpack, even when what
    /// arrived happened to end on a tar boundary.
    pub(super) async fn unpack_workspace(
        &self,
        docker: &Docker,
        container: &str,
        archive: ByteStream,
    ) -> RuntimeResult<()> {
        let docker = docker.clone().with_timeout(TRANSFER_TIMEOUT);
        let broken: Arc<Mutex<Option<String>>> = Arc::default();
        let seen = broken.clone();
        let body = archive
            .take_while(move |item| {
                let ok = match item {
                    Ok(_) => true,
                    Err(e) => {
                        *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                        false
                    }
                };
                std::future::ready(ok)
            })
            .filter_map(|item| std::future::ready(item.ok()));
        let result = docker
            .upload_to_container_streaming(
                container,
                Some(UploadToContainerOptions {
                    path: VolumeName::MOUNT_PATH.to_owned(),
                    no_overwrite_dir_non_dir: "false".to_owned(),
                }),
                body,
            )
            .await;
        if let Some(reason) = broken.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(RuntimeError::Other(format!(
                "the archive for /workspace could not be read: {reason}"
            )));
        }
        result.map_err(|e| match &e {
            bollard::errors::Error::DockerResponseServerError { message, .. }
                if status_code(&e) != Some(404) =>
            {
                RuntimeError::Other(format!(
                    "unpacking the archive into /workspace failed: {message}"
                ))
            }
            _ => self.map_err(e, "unpack archive into /workspace"),
        })
    }
}

#[async_trait]
impl Snapshots for DockerRuntime {
    async fn commit_snapshot(
        &self,
        id: &SandboxId,
        image_ref: &str,
        labels: &BTreeMap<String, String>,
    ) -> RuntimeResult<()> {
        self.commit_snapshot_impl(id, image_ref, labels).await
    }

    async fn remove_image(&self, image_ref: &str) -> RuntimeResult<()> {
        self.remove_image_impl(image_ref).await
    }

    async fn export_workspace(&self, id: &SandboxId) -> RuntimeResult<ByteStream> {
        self.export_workspace_impl(id).await
    }

    async fn create_with_workspace(
        &self,
        spec: &ContainerSpec,
        archive: ByteStream,
    ) -> RuntimeResult<String> {
        self.create_with_workspace_impl(spec, archive).await
    }
}
