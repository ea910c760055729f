//! The agent volume on a Docker engine: one named volume per engine
//! and agent version (`stockade-agent-<version>`) holding the embedded
//! static agent, which sandbox containers mount read-only and run as PID 1.
//! Only the Engine API is used (no registry, no host path), so it works with
//! remote engines too.
//!
//! Filling it: a container that is never started, made from the sandbox's
//! image (present by then) with the volume mounted, receives the binary over
//! the archive API (`PUT /containers/{id}/archive`), which writes through
//! the mount into the volume. The container's fixed name
//! (`<volume>-fill`) is a lock across tasks, runtimes and servers on one
//! engine: only its holder writes, and every holder first checks (archive
//! HEAD) whether the binary is already there whole, so a complete binary is
//! never rewritten under running sandboxes. A holder that died leaves its
//! container behind; once the same container has held the name for
//! [`FILL_STALE`] it is removed by id and the lock taken over.
//!
//! A runtime fills (or checks) the volume once, before its first create with
//! an agent, and again when it finds the volume gone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bollard::container::{
    Config, CreateContainerOptions, InspectContainerOptions, UploadToContainerOptions,
};
use bollard::models::{HostConfig, Mount, MountTypeEnum, MountVolumeOptions};
use bollard::volume::{CreateVolumeOptions, ListVolumesOptions};
use bollard::Docker;

use super::containers::remove_container;
use super::files::DockerPathStat;
use super::update::ustar_header;
use super::{error_chain, status_code, DockerRuntime};
use crate::agent::{agent_target, agent_version, AGENT_BINARY, AGENT_MOUNT_PATH, AGENT_PATH};
use crate::files::from_go_mode;
use crate::{labels, FileKind, RuntimeError, RuntimeResult};

/// The label of a fill container: the agent version it writes.
const FILL_LABEL: &str = "io.stockade.agent-fill";
/// How long one container may hold the fill lock before it is taken for the
/// remains of a holder that died (a fill takes well under a second locally).
const FILL_STALE: Duration = Duration::from_secs(60);
/// How long a create waits for another holder of the lock.
const FILL_WAIT: Duration = Duration::from_secs(150);
/// Between two looks at a held lock.
const FILL_POLL: Duration = Duration::from_millis(100);
/// How long the archive upload of the binary may take (a remote engine).
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// Whether this runtime has seen the agent volume complete.
#[derive(Debug, Default)]
pub(super) struct AgentVolumeState {
    ready: AtomicBool,
    /// One fill at a time in this runtime; the others wait for its outcome.
    fill: tokio::sync::Mutex<()>,
}

/// The fill container: removed when dropped (also when the create that
/// fills is cancelled), in the background.
struct FillLock {
    docker: Docker,
    id: Option<String>,
}

impl FillLock {
    async fn release(mut self) {
        if let Some(id) = self.id.take() {
            if let Err(e) = remove_container(&self.docker, &id).await {
                tracing::warn!(error = %error_chain(&e), "could not remove the agent volume's fill container");
            }
        }
    }
}

impl Drop for FillLock {
    fn drop(&mut self) {
        if let (Some(id), Ok(handle)) = (self.id.take(), tokio::runtime::Handle::try_current()) {
            let docker = self.docker.clone();
            handle.spawn(async move {
                let _ = remove_container(&docker, &id).await;
            });
        }
    }
}

/// The one-file archive of the agent binary (root-owned, 0755), to unpack
/// at [`AGENT_MOUNT_PATH`].
fn agent_archive() -> Vec<u8> {
    let name = AGENT_PATH
        .rsplit('/')
        .next()
        .expect("the agent path has a file name");
    let mut out = Vec::with_capacity(AGENT_BINARY.len() + 2048);
    out.extend_from_slice(&ustar_header(name, 0o755, AGENT_BINARY.len(), b'0'));
    out.extend_from_slice(AGENT_BINARY);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// Whether an agent built for the Rust `target` runs on an engine that
/// reports `arch` (Go's names: `amd64`, `arm64`, …); an unknown pair is
/// given the benefit of the doubt.
fn runs_on(target: &str, arch: &str) -> bool {
    let expected = match target.split('-').next().unwrap_or_default() {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        _ => return true,
    };
    arch.is_empty() || arch == expected
}

/// The labels of the agent volume.
pub(super) fn volume_labels() -> HashMap<String, String> {
    HashMap::from([
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::AGENT_VERSION.to_owned(), agent_version().to_owned()),
    ])
}

impl DockerRuntime {
    /// The agent volume at [`AGENT_MOUNT_PATH`], never filled from the
    /// image's files; `labels` for the volume should the engine have to
    /// make it.
    pub(super) fn agent_mount(
        &self,
        read_only: bool,
        labels: Option<HashMap<String, String>>,
    ) -> Mount {
        Mount {
            target: Some(AGENT_MOUNT_PATH.to_owned()),
            source: Some(self.agent_volume().to_owned()),
            typ: Some(MountTypeEnum::VOLUME),
            read_only: Some(read_only),
            volume_options: Some(MountVolumeOptions {
                no_copy: Some(true),
                labels,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The agent volume's name on this engine.
    pub(super) fn agent_volume(&self) -> &str {
        &self.config.agent_volume
    }

    /// Forgets that the agent volume is complete: the next create with an
    /// agent checks it (and fills it) again.
    pub(super) fn forget_agent_volume(&self) {
        self.agent.ready.store(false, Ordering::Release);
    }

    /// `true` when this runtime has seen the agent volume complete and it
    /// still exists (one inspect); `false` when it must be (re)filled.
    pub(super) async fn agent_volume_known(&self, docker: &Docker) -> RuntimeResult<bool> {
        if !self.agent.ready.load(Ordering::Acquire) {
            return Ok(false);
        }
        match docker.inspect_volume(self.agent_volume()).await {
            Ok(_) => Ok(true),
            Err(e) if status_code(&e) == Some(404) => {
                tracing::warn!(
                    volume = self.agent_volume(),
                    "the agent volume is gone: making it again"
                );
                self.forget_agent_volume();
                Ok(false)
            }
            Err(e) => Err(self.map_err(e, "inspect the agent volume")),
        }
    }

    /// Makes sure the agent volume exists and holds this build's agent
    /// whole. `image` must be present on the engine (it backs the fill
    /// container, which never starts).
    pub(super) async fn ensure_agent_volume(
        &self,
        docker: &Docker,
        image: &str,
    ) -> RuntimeResult<()> {
        let _one_at_a_time = self.agent.fill.lock().await;
        // Another task of this runtime may have done it while this one waited.
        if self.agent_volume_known(docker).await? {
            return Ok(());
        }
        let started = Instant::now();
        self.fill_agent_volume(docker, image).await?;
        tracing::info!(
            volume = self.agent_volume(),
            version = agent_version(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "agent volume ready"
        );
        self.agent.ready.store(true, Ordering::Release);
        self.remove_old_agent_volumes(docker).await;
        Ok(())
    }

    /// Removes the agent volumes of other agent versions that no container
    /// refers to any more (best effort: the engine refuses to remove a
    /// volume any container, running or not, still mounts; a server still
    /// running an older agent makes its volume again when it needs it).
    async fn remove_old_agent_volumes(&self, docker: &Docker) {
        let filters = HashMap::from([(
            "label".to_owned(),
            vec![
                format!("{}=true", labels::MANAGED),
                labels::AGENT_VERSION.to_owned(),
            ],
        )]);
        let listed = match docker
            .list_volumes(Some(ListVolumesOptions { filters }))
            .await
        {
            Ok(l) => l.volumes.unwrap_or_default(),
            Err(e) => {
                tracing::debug!(error = %error_chain(&e), "could not list agent volumes");
                return;
            }
        };
        for volume in listed {
            let version = volume.labels.get(labels::AGENT_VERSION).map(String::as_str);
            if version == Some(agent_version()) || volume.name == self.agent_volume() {
                continue;
            }
            match docker.remove_volume(&volume.name, None).await {
                Ok(()) => {
                    tracing::info!(volume = %volume.name, "removed the volume of an older agent")
                }
                Err(e) => {
                    tracing::debug!(volume = %volume.name, error = %error_chain(&e), "older agent volume kept")
                }
            }
        }
    }

    async fn fill_agent_volume(&self, docker: &Docker, image: &str) -> RuntimeResult<()> {
        // An agent of another architecture would fail every start.
        if let Ok(v) = docker.version().await {
            let arch = v.arch.unwrap_or_default();
            if !runs_on(agent_target(), &arch) {
                return Err(RuntimeError::Other(format!(
                    "the embedded agent is built for {} but the Docker engine runs on {arch}: \
                     build Stockade for the engine's architecture",
                    agent_target()
                )));
            }
        }
        // An existing volume is returned as it is (one being filled elsewhere too).
        docker
            .create_volume(CreateVolumeOptions {
                name: self.agent_volume().to_owned(),
                driver: "local".to_owned(),
                driver_opts: HashMap::new(),
                labels: volume_labels(),
            })
            .await
            .map_err(|e| self.map_err(e, "create the agent volume"))?;
        let lock = self.take_fill_lock(docker, image).await?;
        let container = lock.id.clone().expect("a held lock has a container");
        let result = async {
            if self.agent_file_is_whole(docker, &container).await? {
                return Ok(());
            }
            docker
                .clone()
                .with_timeout(UPLOAD_TIMEOUT)
                .upload_to_container(
                    &container,
                    Some(UploadToContainerOptions {
                        path: AGENT_MOUNT_PATH.to_owned(),
                        no_overwrite_dir_non_dir: "false".to_owned(),
                    }),
                    agent_archive().into(),
                )
                .await
                .map_err(|e| self.map_err(e, "copy the agent into its volume"))?;
            if self.agent_file_is_whole(docker, &container).await? {
                Ok(())
            } else {
                Err(RuntimeError::Other(format!(
                    "the agent volume {} does not hold the agent after copying it there",
                    self.agent_volume()
                )))
            }
        }
        .await;
        lock.release().await;
        result
    }

    /// Creates the fill container (the lock), waiting while another holds
    /// it and taking over one that has held it for [`FILL_STALE`].
    async fn take_fill_lock(&self, docker: &Docker, image: &str) -> RuntimeResult<FillLock> {
        let name = format!("{}-fill", self.agent_volume());
        let config = Config::<String> {
            image: Some(image.to_owned()),
            // Never started; a command only because the engine wants one.
            entrypoint: Some(vec![AGENT_PATH.to_owned()]),
            cmd: Some(Vec::new()),
            labels: Some(HashMap::from([(
                FILL_LABEL.to_owned(),
                agent_version().to_owned(),
            )])),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                network_mode: Some("none".to_owned()),
                mounts: Some(vec![self.agent_mount(false, None)]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let deadline = Instant::now() + FILL_WAIT;
        // The holder seen last, and since when (this host's clock: the
        // engine's may differ).
        let mut holder: Option<(String, Instant)> = None;
        loop {
            let created = docker
                .create_container(
                    Some(CreateContainerOptions {
                        name: name.clone(),
                        platform: None,
                    }),
                    config.clone(),
                )
                .await;
            let err = match created {
                Ok(c) => {
                    return Ok(FillLock {
                        docker: docker.clone(),
                        id: Some(c.id),
                    })
                }
                Err(e) if status_code(&e) == Some(409) => e,
                Err(e) => return Err(self.map_err(e, "create the agent volume's fill container")),
            };
            let current = match docker
                .inspect_container(&name, None::<InspectContainerOptions>)
                .await
            {
                Ok(c) => c.id.unwrap_or_default(),
                // Released in between: try again at once.
                Err(e) if status_code(&e) == Some(404) => continue,
                Err(e) => return Err(self.map_err(e, "inspect the agent volume's fill container")),
            };
            match &holder {
                Some((id, since)) if *id == current => {
                    if since.elapsed() >= FILL_STALE {
                        tracing::warn!(container = %current, "taking over the agent volume's fill lock from a holder that stopped");
                        // By id: never the container of a holder that came after.
                        remove_container(docker, &current)
                            .await
                            .map_err(|e| self.map_err(e, "remove a stale fill container"))?;
                        holder = None;
                        continue;
                    }
                }
                _ => holder = Some((current, Instant::now())),
            }
            if Instant::now() >= deadline {
                return Err(RuntimeError::Other(format!(
                    "the agent volume {} is being filled by another Stockade server for more than {} s ({})",
                    self.agent_volume(),
                    FILL_WAIT.as_secs(),
                    error_chain(&err)
                )));
            }
            tokio::time::sleep(FILL_POLL).await;
        }
    }

    /// Whether the fill container sees the agent binary whole in the volume
    /// (a regular executable file of the embedded binary's size).
    async fn agent_file_is_whole(&self, docker: &Docker, container: &str) -> RuntimeResult<bool> {
        let version = docker.client_version();
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("path", AGENT_PATH)
            .finish();
        let uri = format!(
            "/v{}.{}/containers/{container}/archive?{query}",
            version.major_version, version.minor_version
        );
        let (status, header) = self
            .raw_stat(&uri)
            .await
            .map_err(|e| RuntimeError::Other(format!("stat the agent in its volume: {e}")))?;
        match (status, header) {
            (200, Some(h)) => {
                let stat = DockerPathStat::decode(&h).map_err(|e| {
                    RuntimeError::Other(format!("stat the agent in its volume: {e}"))
                })?;
                let (kind, mode) = from_go_mode(stat.mode);
                Ok(kind == FileKind::File
                    && usize::try_from(stat.size).ok() == Some(AGENT_BINARY.len())
                    && mode & 0o111 == 0o111)
            }
            (404, _) => Ok(false),
            (status, _) => Err(RuntimeError::Other(format!(
                "stat the agent in its volume: the engine answered {status}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_match_go_names() {
        assert!(runs_on("x86_64-unknown-linux-gnu", "amd64"));
        assert!(!runs_on("x86_64-unknown-linux-gnu", "arm64"));
        assert!(runs_on("aarch64-unknown-linux-gnu", "arm64"));
        assert!(!runs_on("aarch64-unknown-linux-gnu", "amd64"));
        assert!(runs_on("x86_64-unknown-linux-gnu", ""));
        assert!(runs_on("riscv64gc-unknown-linux-gnu", "riscv64"));
    }

    #[test]
    fn the_archive_holds_the_executable() {
        let tar = agent_archive();
        assert_eq!(tar.len() % 512, 0);
        assert_eq!(&tar[..14], b"stockade-agent");
        assert_eq!(&tar[100..107], b"0000755");
        assert_eq!(tar[156], b'0');
        let size = std::str::from_utf8(&tar[124..135]).unwrap();
        assert_eq!(usize::from_str_radix(size, 8).unwrap(), AGENT_BINARY.len());
        assert_eq!(&tar[512..512 + 64], &AGENT_BINARY[..64]);
        assert!(tar[tar.len() - 1024..].iter().all(|b| *b == 0));
    }
}
