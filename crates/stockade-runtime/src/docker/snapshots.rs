//! Snapshots, forks, workspace sources and workspace syncs on Docker:
//! commit a container as an image, stream `/workspace` out as a tar,
//! and unpack a tar into a new container's `/workspace` before it starts.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::{Config, DownloadFromContainerOptions, UploadToContainerOptions};
use bollard::image::{CommitContainerOptions, RemoveImageOptions};
use bollard::models::ContainerConfig;
use bollard::Docker;
use bytes::Bytes;
use futures_util::{stream, StreamExt};
use stockade_core::{SandboxId, VolumeName};

use super::lifecycle::stockade_labels;
use super::{container_name, error_chain, status_code, DockerRuntime};
use crate::{ByteStream, ContainerSpec, RuntimeError, RuntimeResult, Snapshots};

/// How long one archive transfer (commit, upload, unpack) may take: the
/// engine answers only when it is done.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(3600);

/// The environment a snapshot image is committed with: every variable the
/// container has beyond its image's — the sandbox's `environmentVars` (API
/// keys, tokens) and the agent's token — goes back to the image's value, or
/// blank where the image had none. Docker merges the container's
/// environment into a committed image's and cannot drop a variable, so each
/// one is named. The values stay in the database: a sandbox made from the
/// snapshot gets them from its record, so only its owner ever sees them.
fn committed_env(container_env: &[String], image_env: &[String]) -> Vec<String> {
    let image: HashMap<&str, &str> = image_env.iter().filter_map(|e| e.split_once('=')).collect();
    container_env
        .iter()
        .filter(|e| !image_env.contains(e))
        .filter_map(|e| {
            let key = e.split_once('=').map_or(e.as_str(), |(k, _)| k);
            (!key.is_empty()).then(|| format!("{key}={}", image.get(key).copied().unwrap_or("")))
        })
        .collect()
}

/// Keeps a container's agent out of the snapshot image committed with
/// `commit`: the image gets the entrypoint the container's image had
/// (what followed the agent's `--`) and a blank agent label. The agent
/// itself is never in the image: it lives on a volume, which a commit leaves
/// out. A container made from the image gets an agent only when its create
/// asks for one.
fn without_agent(commit: &mut Config<String>, container: &ContainerConfig) {
    let has_agent = container
        .labels
        .as_ref()
        .is_some_and(|l| crate::agent_of(|k| l.get(k)).is_some());
    if !has_agent {
        return;
    }
    commit
        .labels
        .get_or_insert_with(HashMap::new)
        .insert(crate::labels::AGENT.to_owned(), String::new());
    let entrypoint = container.entrypoint.clone().unwrap_or_default();
    let image_entrypoint = match entrypoint.first() {
        Some(first) if first == crate::AGENT_PATH => entrypoint
            .iter()
            .position(|a| a == "--")
            .map(|i| entrypoint[i + 1..].to_vec())
            .unwrap_or_default(),
        _ => entrypoint,
    };
    // `[]`, not absent: an absent entrypoint would be the container's.
    commit.entrypoint = Some(image_entrypoint);
    // Given, since the engine takes the container's only with no entrypoint.
    commit.cmd = Some(container.cmd.clone().unwrap_or_default());
}

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
        let mut config = Config::<String> {
            labels: Some(labels.clone().into_iter().collect::<HashMap<_, _>>()),
            ..Default::default()
        };
        let inspected = self.inspect_existing(&docker, id).await?;
        if let Some(container) = inspected.config {
            without_agent(&mut config, &container);
            let image_env = match inspected.image.as_deref() {
                Some(image) => docker
                    .inspect_image(image)
                    .await
                    .map_err(|e| self.map_err(e, "inspect the sandbox's image"))?
                    .config
                    .and_then(|c| c.env)
                    .unwrap_or_default(),
                None => Vec::new(),
            };
            let env = committed_env(&container.env.unwrap_or_default(), &image_env);
            if !env.is_empty() {
                config.env = Some(env);
            }
        }
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
        self.export_dir(&docker, &container_name(id), VolumeName::MOUNT_PATH)
            .await
            .map_err(|e| match e {
                RuntimeError::NotFound(_) => RuntimeError::NotFound(format!(
                    "no container (or no {}) for sandbox {id}",
                    VolumeName::MOUNT_PATH
                )),
                other => other,
            })
    }

    /// A tar stream of what directory `dir` of `container` holds, its
    /// entries relative to it (`./…`); `NotFound` without the container.
    pub(super) async fn export_dir(
        &self,
        docker: &Docker,
        container: &str,
        dir: &str,
    ) -> RuntimeResult<ByteStream> {
        // `dir/.` makes the entries relative to the directory (`./…`).
        let path = format!("{dir}/.");
        let mut body = docker
            .download_from_container(container, Some(DownloadFromContainerOptions { path }))
            .boxed();
        // The first item tells whether the container exists at all.
        let first = match body.next().await {
            None => Bytes::new(),
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                return Err(match status_code(&e) {
                    Some(404) => RuntimeError::NotFound(format!("no {dir} in {container}")),
                    _ => self.map_err(e, &format!("read {dir}")),
                })
            }
        };
        let what = dir.to_owned();
        let rest = body.map(move |item| {
            item.map_err(|e| std::io::Error::other(format!("reading {what}: {}", error_chain(&e))))
        });
        Ok(Box::pin(stream::once(async move { Ok(first) }).chain(rest)))
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %spec.sandbox_id, image = %spec.image))]
    pub(super) async fn create_with_workspace_impl(
        &self,
        spec: &ContainerSpec,
        archive: ByteStream,
    ) -> RuntimeResult<String> {
        self.create_or_undo(spec, Some(archive), stockade_labels(spec))
            .await
    }

    /// Unpacks `archive` into `/workspace` of a (created, not yet started)
    /// container.
    pub(super) async fn unpack_workspace(
        &self,
        docker: &Docker,
        container: &str,
        archive: ByteStream,
    ) -> RuntimeResult<()> {
        self.unpack_into(docker, container, VolumeName::MOUNT_PATH, archive)
            .await
    }

    /// Unpacks `archive` into directory `dir` of `container`. A broken
    /// source stream fails the unpack, even when what arrived happened to
    /// end on a tar boundary.
    pub(super) async fn unpack_into(
        &self,
        docker: &Docker,
        container: &str,
        dir: &str,
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
                    path: dir.to_owned(),
                    no_overwrite_dir_non_dir: "false".to_owned(),
                }),
                body,
            )
            .await;
        if let Some(reason) = broken.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(RuntimeError::Other(format!(
                "the archive for {dir} could not be read: {reason}"
            )));
        }
        result.map_err(|e| match &e {
            bollard::errors::Error::DockerResponseServerError { message, .. }
                if status_code(&e) != Some(404) =>
            {
                RuntimeError::Other(format!(
                    "unpacking the archive into {dir} failed: {message}"
                ))
            }
            _ => self.map_err(e, &format!("unpack archive into {dir}")),
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

    async fn export_image(&self, image_ref: &str) -> RuntimeResult<ByteStream> {
        let docker = self.client().await?;
        // Absent: a clear NotFound before any byte streams.
        if let Err(e) = docker.inspect_image(image_ref).await {
            return Err(match status_code(&e) {
                Some(404) => RuntimeError::NotFound(format!("image {image_ref}")),
                _ => self.map_err(e, "inspect image"),
            });
        }
        let stream = docker
            .export_image(image_ref)
            .map(|chunk| chunk.map_err(|e| std::io::Error::other(error_chain(&e))));
        Ok(Box::pin(stream))
    }

    async fn import_image(&self, archive: ByteStream) -> RuntimeResult<()> {
        let docker = self.client().await?;
        // The engine takes a stream without errors: a failed read ends it
        // (the engine then refuses a truncated archive) and is reported.
        let failed: Arc<Mutex<Option<std::io::Error>>> = Arc::default();
        let seen = failed.clone();
        let body = archive.scan((), move |_, chunk| {
            let next = match chunk {
                Ok(bytes) => Some(bytes),
                Err(e) => {
                    *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    None
                }
            };
            futures_util::future::ready(next)
        });
        let mut progress = docker.import_image_stream(
            bollard::image::ImportImageOptions { quiet: true },
            body,
            None,
        );
        let loading = async {
            while let Some(step) = progress.next().await {
                let info = step.map_err(|e| self.map_err(e, "load image"))?;
                if let Some(err) = info.error {
                    return Err(RuntimeError::Other(format!(
                        "loading an image failed: {err}"
                    )));
                }
            }
            Ok(())
        };
        let loaded = tokio::time::timeout(TRANSFER_TIMEOUT, loading)
            .await
            .map_err(|_| RuntimeError::Other("loading an image timed out".into()))?;
        if let Some(e) = failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(RuntimeError::Other(format!(
                "the image archive could not be read: {e}"
            )));
        }
        loaded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(entrypoint: &[&str], agent: Option<&str>) -> ContainerConfig {
        let mut labels = HashMap::from([("k".to_owned(), "v".to_owned())]);
        if let Some(a) = agent {
            labels.insert(crate::labels::AGENT.to_owned(), a.to_owned());
        }
        ContainerConfig {
            entrypoint: Some(entrypoint.iter().map(|s| s.to_string()).collect()),
            cmd: Some(vec!["/bin/sh".into(), "-c".into(), "sleep 9".into()]),
            env: Some(vec![format!("{}=secret", crate::AGENT_TOKEN_ENV)]),
            labels: Some(labels),
            ..Default::default()
        }
    }

    #[test]
    fn snapshot_images_lose_the_agent() {
        let mut prefix = crate::agent::agent_entrypoint_prefix();
        prefix.push("/docker-entrypoint.sh".into());
        let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
        let mut commit = Config::<String>::default();
        without_agent(&mut commit, &container(&prefix, Some("0123456789ab")));
        assert_eq!(
            commit.entrypoint,
            Some(vec!["/docker-entrypoint.sh".into()])
        );
        assert_eq!(commit.cmd.as_ref().unwrap()[2], "sleep 9");
        assert_eq!(commit.labels.unwrap()[crate::labels::AGENT], "");

        // No image entrypoint: an empty one, not the container's.
        let mut commit = Config::<String>::default();
        let bare = crate::agent::agent_entrypoint_prefix();
        let bare: Vec<&str> = bare.iter().map(String::as_str).collect();
        without_agent(&mut commit, &container(&bare, Some("0123456789ab")));
        assert_eq!(commit.entrypoint, Some(vec![]));

        // Without an agent (or with the blank label of an earlier snapshot):
        // nothing changes.
        for agent in [None, Some("")] {
            let mut commit = Config::<String>::default();
            without_agent(&mut commit, &container(&["/e"], agent));
            assert_eq!(commit, Config::<String>::default());
        }
    }

    #[test]
    fn snapshot_images_keep_no_sandbox_secrets() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let image = strings(&["PATH=/usr/bin", "LANG=C.UTF-8", "BLANKED="]);
        let container = strings(&[
            "PATH=/custom/bin",
            "LANG=C.UTF-8",
            "ALICE_KEY=sk-secret",
            "BLANKED=again",
            &format!("{}=token", crate::AGENT_TOKEN_ENV),
        ]);
        assert_eq!(
            committed_env(&container, &image),
            strings(&[
                "PATH=/usr/bin",
                "ALICE_KEY=",
                "BLANKED=",
                &format!("{}=", crate::AGENT_TOKEN_ENV),
            ])
        );
        // Nothing beyond the image: nothing to name.
        assert!(committed_env(&image, &image).is_empty());
    }
}
