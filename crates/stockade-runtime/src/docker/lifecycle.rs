//! Creating, starting, stopping and removing sandbox containers on Docker:
//! the hardened container configuration, image pulls, and the undo
//! of a create that failed or was cancelled.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::{
    Config, CreateContainerOptions, InspectContainerOptions, StartContainerOptions,
    StopContainerOptions,
};
use bollard::errors::Error as BollardError;
use bollard::image::CreateImageOptions;
use bollard::models::{
    HostConfig, ImageInspect, Mount, MountTypeEnum, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::volume::CreateVolumeOptions;
use bollard::Docker;
use futures_util::StreamExt;
use stockade_core::{InstanceId, SandboxId, VolumeName};

use super::containers::remove_container;
use super::loop_disk::VolumeDisk;
use super::{container_name, error_chain, is_connection_error, status_code, DockerRuntime};
use crate::agent::{agent_entrypoint_prefix, agent_version, validate_agent_token, AGENT_TOKEN_ENV};
use crate::{
    labels, ByteStream, ContainerSpec, Lifecycle, PoolMemberSpec, RuntimeError, RuntimeResult,
};

/// Capabilities a sandbox keeps (everything else is dropped): enough
/// for package managers and servers on low ports, nothing that reaches the host.
const CAP_ADD: [&str; 8] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
];

/// What a create needs to know of its image: the default process, which
/// the agent runs as the main process when it replaces the entrypoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ImageFacts {
    pub(super) entrypoint: Vec<String>,
    pub(super) cmd: Vec<String>,
}

impl ImageFacts {
    /// The facts of `image`, inspected under `reference`; a snapshot image
    /// under any name but its own is refused.
    fn of(reference: &str, image: ImageInspect) -> RuntimeResult<Self> {
        let config = image.config.unwrap_or_default();
        crate::check_snapshot_image(reference, config.labels.as_ref())?;
        Ok(Self {
            entrypoint: config.entrypoint.unwrap_or_default(),
            cmd: config.cmd.unwrap_or_default(),
        })
    }
}

impl DockerRuntime {
    /// Makes sure `image` is present (pulling it when missing) and returns
    /// its default process.
    async fn image_facts(&self, docker: &Docker, image: &str) -> RuntimeResult<ImageFacts> {
        match docker.inspect_image(image).await {
            Ok(i) => return ImageFacts::of(image, i),
            Err(e) if status_code(&e) == Some(404) => {}
            Err(e) => return Err(self.map_err(e, "inspect image")),
        }
        tracing::info!(image, "image not present locally: pulling");
        self.pull(docker, image).await?;
        match docker.inspect_image(image).await {
            Ok(i) => ImageFacts::of(image, i),
            Err(e) if status_code(&e) == Some(404) => Err(RuntimeError::ImageUnavailable {
                image: image.to_owned(),
                reason: "the pull finished but the image is still missing".into(),
            }),
            Err(e) => Err(self.map_err(e, "inspect image")),
        }
    }

    fn pull_error(&self, image: &str, e: BollardError) -> RuntimeError {
        if is_connection_error(&e) {
            return self.map_err(e, "pull");
        }
        let message = match &e {
            BollardError::DockerResponseServerError { message, .. } => message.clone(),
            BollardError::DockerStreamError { error } => error.clone(),
            other => error_chain(other),
        };
        RuntimeError::ImageUnavailable {
            image: image.to_owned(),
            reason: pull_reason(&message),
        }
    }

    async fn pull(&self, docker: &Docker, image: &str) -> RuntimeResult<()> {
        let (from_image, tag) = split_reference(image);
        let options = CreateImageOptions {
            from_image,
            tag,
            ..Default::default()
        };
        let pull = async {
            let mut stream = docker.create_image(Some(options), None, None);
            while let Some(item) = stream.next().await {
                item.map_err(|e| self.pull_error(image, e))?;
            }
            Ok::<(), RuntimeError>(())
        };
        match tokio::time::timeout(self.config.pull_timeout, pull).await {
            Ok(result) => result,
            Err(_) => Err(RuntimeError::ImageUnavailable {
                image: image.to_owned(),
                reason: format!(
                    "pull did not finish within {} s",
                    self.config.pull_timeout.as_secs()
                ),
            }),
        }
    }

    /// What [`Runtime::create`] sends to the engine for `spec`: the volume's
    /// create options and the container's configuration (its hardening,
    /// limits, labels, the wrapped main process). Public for the benchmark's
    /// raw-Docker baseline (`stockade-bench`), which must create exactly the
    /// same containers to be a fair comparison. With an agent token, the
    /// image's own entrypoint (which a create puts after the agent's) and
    /// default command are not known here: the main process is
    /// `spec.command` alone.
    pub fn create_request(
        &self,
        spec: &ContainerSpec,
    ) -> (CreateVolumeOptions<String>, Config<String>) {
        let volume = VolumeName::for_sandbox(&spec.sandbox_id);
        let options = CreateVolumeOptions {
            name: volume.as_str().to_owned(),
            driver: "local".to_owned(),
            driver_opts: HashMap::new(),
            labels: stockade_labels(spec),
        };
        (
            options,
            self.container_config(spec, &volume, stockade_labels(spec), None, None),
        )
    }

    /// The container for `spec`. With an agent token the agent is PID 1:
    /// mounted read-only from the agent volume, the entrypoint,
    /// given the token in its environment, and running the main process —
    /// the image's entrypoint followed by `spec.command` (or the image's
    /// command) — with no shell in between; Docker's init is off (the agent
    /// reaps) and the container carries the [`labels::AGENT`] label.
    fn container_config(
        &self,
        spec: &ContainerSpec,
        volume: &VolumeName,
        mut labels: HashMap<String, String>,
        image: Option<&ImageFacts>,
        storage_opt: Option<HashMap<String, String>>,
    ) -> Config<String> {
        let memory = (spec.memory_bytes > 0).then_some(spec.memory_bytes);
        let nano_cpus = (spec.cpu_cores.is_finite() && spec.cpu_cores > 0.0)
            .then(|| (spec.cpu_cores * 1e9).round() as i64);
        let mut mounts = Vec::new();
        if spec.workspace_volume {
            mounts.push(Mount {
                target: Some(VolumeName::MOUNT_PATH.to_owned()),
                source: Some(volume.as_str().to_owned()),
                typ: Some(MountTypeEnum::VOLUME),
                read_only: Some(false),
                ..Default::default()
            });
        }
        let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let (entrypoint, cmd) = match &spec.agent_token {
            None => (
                None,
                // The main process runs through a wrapper that applies
                // environment updates made after create, see update.rs.
                (!spec.command.is_empty()).then(|| super::update::wrap_main(&spec.command)),
            ),
            Some(token) => {
                // Read-only, only what Stockade put there; labelled should the
                // engine have to make it (it vanished).
                mounts.push(self.agent_mount(true, Some(super::agent::volume_labels())));
                env.retain(|kv| !kv.starts_with(&format!("{AGENT_TOKEN_ENV}=")));
                env.push(format!("{AGENT_TOKEN_ENV}={token}"));
                labels.insert(labels::AGENT.to_owned(), agent_version().to_owned());
                let mut entrypoint = agent_entrypoint_prefix();
                let cmd = match image {
                    Some(image) => {
                        entrypoint.extend(image.entrypoint.iter().cloned());
                        if spec.command.is_empty() {
                            image.cmd.clone()
                        } else {
                            spec.command.clone()
                        }
                    }
                    None => spec.command.clone(),
                };
                // The agent applies /.stockade/main.env itself (update.rs).
                (Some(entrypoint), Some(cmd))
            }
        };
        mounts.extend(spec.mounts.iter().map(shared_mount));
        let (port_bindings, exposed_ports) = if spec.agent_token.is_some() {
            self.agent_port_publishing()
        } else {
            (None, None)
        };
        let host_config = HostConfig {
            port_bindings,
            cap_drop: Some(vec!["ALL".to_owned()]),
            cap_add: Some(CAP_ADD.iter().map(|c| (*c).to_owned()).collect()),
            // Docker's default seccomp profile minus io_uring (see
            // seccomp.rs); the default AppArmor profile stays on.
            security_opt: Some(
                std::iter::once("no-new-privileges:true".to_owned())
                    .chain(self.seccomp_option())
                    .collect(),
            ),
            pids_limit: Some(self.config.pids_limit),
            memory,
            memory_swap: memory,
            nano_cpus,
            privileged: Some(false),
            // docker-init as PID 1 (forwards SIGTERM, reaps zombies), unless
            // the agent is PID 1 and does both.
            init: Some(spec.agent_token.is_none()),
            mounts: Some(mounts),
            // Stockade's networks, see network.rs.
            network_mode: Some(self.sandbox_network_mode(spec.network_access)),
            runtime: self.config.oci_runtime.clone(),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            readonly_rootfs: Some(false),
            // The writable root filesystem capped at diskSizeGB
            // where the storage driver can (disk.rs).
            storage_opt,
            // The main process's output kept in rotated files of
            // bounded size, whatever the engine's default log driver.
            log_config: Some(self.log_config()),
            ..Default::default()
        };
        Config {
            image: Some(spec.image.clone()),
            entrypoint,
            cmd,
            env: Some(env),
            working_dir: Some(VolumeName::MOUNT_PATH.to_owned()),
            hostname: (!spec.hostname.is_empty()).then(|| spec.hostname.clone()),
            labels: Some(labels),
            tty: Some(false),
            open_stdin: Some(false),
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            // The default stop grace, also when the engine stops it on its own.
            stop_timeout: Some(30),
            host_config: Some(host_config),
            exposed_ports,
            ..Default::default()
        }
    }

    /// On a host off this server's machine, the agent's port is published
    /// (a random port of the host) and reached there: the port bindings and
    /// exposed ports of a container with an agent; nothing on a local host.
    pub(super) fn agent_port_publishing(&self) -> (Option<PortBindings>, Option<ExposedPorts>) {
        let Some(address) = self.config.publish_address.as_ref() else {
            return (None, None);
        };
        let agent_port = format!("{}/tcp", crate::AGENT_PORT);
        // Never every interface of the host: its address, or loopback
        // when that is not an IP (the agent is then unreachable from
        // outside, and the host's health says so).
        let bind = match address.parse::<std::net::IpAddr>() {
            Ok(ip) => ip.to_string(),
            Err(_) => "127.0.0.1".to_owned(),
        };
        let bindings = HashMap::from([(
            agent_port.clone(),
            Some(vec![bollard::models::PortBinding {
                host_ip: Some(bind),
                host_port: Some(String::new()),
            }]),
        )]);
        let exposed = HashMap::from([(agent_port, HashMap::<(), ()>::new())]);
        (Some(bindings), Some(exposed))
    }

    /// Creates the sandbox's container (and its volume when missing) with
    /// `labels`; whatever it made is removed again when it fails.
    pub(super) async fn create_or_undo(
        &self,
        spec: &ContainerSpec,
        workspace: Option<ByteStream>,
        labels: HashMap<String, String>,
    ) -> RuntimeResult<String> {
        let docker = self.client().await?;
        let mut undo = CreateUndo::new(docker.clone(), spec);
        let created = self
            .create_inner(&docker, spec, &mut undo, workspace, labels)
            .await;
        if created.is_ok() {
            undo.disarm();
        } else {
            undo.run_now().await;
        }
        created
    }

    async fn create_inner(
        &self,
        docker: &Docker,
        spec: &ContainerSpec,
        undo: &mut CreateUndo,
        workspace: Option<ByteStream>,
        labels: HashMap<String, String>,
    ) -> RuntimeResult<String> {
        let name = container_name(&spec.sandbox_id);
        let volume = VolumeName::for_sandbox(&spec.sandbox_id);
        let agent = spec.agent_token.is_some();
        if let Some(token) = &spec.agent_token {
            validate_agent_token(token).map_err(|e| RuntimeError::Other(e.to_string()))?;
        }

        // Independent questions at once: round trips fewer per create.
        let (image, existing, (), agent_ready, quotas, shared) = tokio::join!(
            self.image_facts(docker, &spec.image),
            docker.inspect_volume(volume.as_str()),
            self.prepare_networks(docker),
            async {
                if agent {
                    self.agent_volume_known(docker).await
                } else {
                    Ok(true)
                }
            },
            async {
                match spec.disk_bytes {
                    Some(_) => Some(self.disk_quotas(docker).await),
                    None => None,
                }
            },
            self.check_shared_volumes(docker, &spec.mounts)
        );
        let (volume_opts, storage_opt) = Self::disk_options(quotas.as_ref(), spec.disk_bytes);
        let image = image?;
        shared?;
        // Before anything is made: nothing half-made stays on a refusal.
        self.check_isolated(spec.network_access)?;
        if !agent_ready? {
            self.ensure_agent_volume(docker, &spec.image).await?;
        }
        match existing {
            // A template's build keeps `/workspace` in the container.
            _ if !spec.workspace_volume => {}
            // A preserved volume of this sandbox: reuse it (and keep it on
            // failure), with its own file system in place if it has one.
            Ok(_) => self.mount_volume_disk(docker, volume.as_str()).await?,
            Err(e) if status_code(&e) == Some(404) => {
                undo.volume_owned = true;
                let mut driver_opts = volume_opts;
                if let Some(disk) = self
                    .new_volume_disk(docker, quotas.as_ref(), volume.as_str(), spec.disk_bytes)
                    .await?
                {
                    driver_opts = disk.volume_options();
                    undo.disk = Some(disk);
                }
                docker
                    .create_volume(CreateVolumeOptions {
                        name: volume.as_str().to_owned(),
                        driver: "local".to_owned(),
                        driver_opts,
                        labels: labels.clone(),
                    })
                    .await
                    .map_err(|e| self.map_err(e, "create volume"))?;
                self.cap_new_volume(docker, quotas.as_ref(), volume.as_str(), spec.disk_bytes)
                    .await?;
            }
            Err(e) => return Err(self.map_err(e, "inspect volume")),
        }

        undo.container = ContainerUndo::Pending;
        let options = CreateContainerOptions {
            name: name.clone(),
            platform: None,
        };
        let mut created = docker
            .create_container(
                Some(options.clone()),
                self.container_config(
                    spec,
                    &volume,
                    labels.clone(),
                    Some(&image),
                    storage_opt.clone(),
                ),
            )
            .await;
        if matches!(&created, Err(e) if is_missing_network(e)) {
            // Stockade's network was removed behind its back: make it again.
            self.forget_networks();
            self.prepare_networks(docker).await;
            self.check_isolated(spec.network_access)?;
            created = docker
                .create_container(
                    Some(options),
                    self.container_config(spec, &volume, labels, Some(&image), storage_opt),
                )
                .await;
        }
        let created = match created {
            Ok(c) => c,
            Err(e) => {
                if agent {
                    // Perhaps the agent volume went away: check it next time.
                    self.forget_agent_volume();
                }
                if status_code(&e).is_some() {
                    // The daemon answered: it made nothing (a 409 means the name
                    // belongs to another container, which is not ours to remove).
                    undo.container = ContainerUndo::None;
                }
                return Err(match self.map_err(e, "create container") {
                    RuntimeError::NotFound(m) => {
                        RuntimeError::Other(format!("create container: {m}"))
                    }
                    RuntimeError::Conflict(m) => {
                        RuntimeError::Conflict(format!("container {name} already exists: {m}"))
                    }
                    other => other,
                });
            }
        };
        undo.container = ContainerUndo::Created(created.id.clone());
        for warning in &created.warnings {
            tracing::warn!(sandbox.id = %spec.sandbox_id, %warning, "docker create warning");
        }

        if let Some(archive) = workspace {
            self.unpack_workspace(docker, &created.id, archive).await?;
        }

        self.removals
            .wait()
            .await
            .map_err(RuntimeError::Unavailable)?;
        let mut started = docker
            .start_container(&created.id, None::<StartContainerOptions<String>>)
            .await;
        if agent && started.is_err() {
            // The agent volume may have been emptied or removed (and made
            // again, empty, by the mount) since it was checked: check it,
            // fill it if need be, and try once more.
            self.forget_agent_volume();
            self.ensure_agent_volume(docker, &spec.image).await?;
            started = docker
                .start_container(&created.id, None::<StartContainerOptions<String>>)
                .await;
        }
        started.map_err(|e| match self.map_err(e, "start container") {
            RuntimeError::NotFound(m) | RuntimeError::Conflict(m) => {
                RuntimeError::Other(format!("start container: {m}"))
            }
            other => other,
        })?;
        Ok(created.id)
    }
}

#[async_trait]
impl Lifecycle for DockerRuntime {
    #[tracing::instrument(skip(self))]
    async fn ensure_image(&self, image: &str) -> RuntimeResult<()> {
        let docker = self.client().await?;
        self.image_facts(&docker, image).await.map(|_| ())
    }

    #[tracing::instrument(skip(self))]
    async fn image_present(&self, image: &str) -> RuntimeResult<bool> {
        let docker = self.client().await?;
        match docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if status_code(&e) == Some(404) => Ok(false),
            Err(e) => Err(self.map_err(e, "inspect image")),
        }
    }

    #[tracing::instrument(skip(self))]
    async fn image_id(&self, image: &str) -> RuntimeResult<Option<String>> {
        let docker = self.client().await?;
        match docker.inspect_image(image).await {
            Ok(i) => Ok(i.id),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(self.map_err(e, "inspect image")),
        }
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %spec.sandbox_id, image = %spec.image))]
    async fn create(&self, spec: &ContainerSpec) -> RuntimeResult<String> {
        self.create_or_undo(spec, None, stockade_labels(spec)).await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %member.sandbox_id, image = %member.image))]
    async fn create_pool_member(&self, member: &PoolMemberSpec) -> RuntimeResult<String> {
        let spec = member.container_spec();
        let labels = member.labels().into_iter().collect();
        self.create_or_undo(&spec, None, labels).await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn start(&self, id: &SandboxId) -> RuntimeResult<()> {
        let docker = self.client().await?;
        self.mount_volume_disk(&docker, VolumeName::for_sandbox(id).as_str())
            .await?;
        self.removals
            .wait()
            .await
            .map_err(RuntimeError::Unavailable)?;
        // 304 (already running) counts as success.
        docker
            .start_container(&container_name(id), None::<StartContainerOptions<String>>)
            .await
            .map_err(|e| match status_code(&e) {
                Some(404) => RuntimeError::NotFound(format!("no container for sandbox {id}")),
                _ => self.map_err(e, "start container"),
            })
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id, grace_s = grace.as_secs_f64()))]
    async fn stop(&self, id: &SandboxId, grace: Duration) -> RuntimeResult<()> {
        let t = grace.as_secs() + u64::from(grace.subsec_nanos() > 0);
        let mut docker = self.client().await?;
        // The engine answers only once the container stopped: up to `t` seconds.
        let needed = Duration::from_secs(t + 60);
        if docker.timeout() < needed {
            docker = docker.with_timeout(needed);
        }
        docker
            .stop_container(
                &container_name(id),
                Some(StopContainerOptions {
                    t: i64::try_from(t).unwrap_or(i64::MAX),
                }),
            )
            .await
            .map_err(|e| match status_code(&e) {
                Some(404) => RuntimeError::NotFound(format!("no container for sandbox {id}")),
                _ => self.map_err(e, "stop container"),
            })
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn pause(&self, id: &SandboxId) -> RuntimeResult<()> {
        let docker = self.client().await?;
        let done = docker.pause_container(&container_name(id)).await;
        self.freezer_result(done, id, "is already paused", "pause container")
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn unpause(&self, id: &SandboxId) -> RuntimeResult<()> {
        let docker = self.client().await?;
        let done = docker.unpause_container(&container_name(id)).await;
        self.freezer_result(done, id, "is not paused", "unpause container")
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id, preserve_volume))]
    async fn remove(&self, id: &SandboxId, preserve_volume: bool) -> RuntimeResult<()> {
        let docker = self.client().await?;
        let name = container_name(id);
        remove_container(&docker, &name)
            .await
            .map_err(|e| self.map_err(e, "remove container"))?;
        if !preserve_volume {
            let volume = VolumeName::for_sandbox(id);
            match docker.remove_volume(volume.as_str(), None).await {
                Ok(()) => {}
                Err(e) if status_code(&e) == Some(404) => {}
                Err(e) => {
                    return Err(match self.map_err(e, "remove volume") {
                        RuntimeError::Conflict(m) => RuntimeError::Conflict(format!(
                            "volume {volume} is still used by another container: {m}"
                        )),
                        other => other,
                    })
                }
            }
            self.remove_volume_disk(&docker, volume.as_str()).await?;
        }
        Ok(())
    }
}

/// The labels on a sandbox's container and volume.
/// Published ports of a container, as the engine takes them.
pub(super) type PortBindings = HashMap<String, Option<Vec<bollard::models::PortBinding>>>;
/// Exposed ports of a container, as the engine takes them.
pub(super) type ExposedPorts = HashMap<String, HashMap<(), ()>>;

/// A shared volume mounted into a sandbox: never filled from the image's
/// files at that path, so the volume holds only what was written to it.
fn shared_mount(m: &crate::SharedMount) -> Mount {
    Mount {
        target: Some(m.path.clone()),
        source: Some(m.volume.clone()),
        typ: Some(MountTypeEnum::VOLUME),
        read_only: Some(m.read_only),
        volume_options: Some(bollard::models::MountVolumeOptions {
            no_copy: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn stockade_labels(spec: &ContainerSpec) -> HashMap<String, String> {
    HashMap::from([
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::SANDBOX_ID.to_owned(), spec.sandbox_id.to_string()),
        (labels::ACCOUNT_ID.to_owned(), spec.account_id.to_string()),
        (labels::INSTANCE_ID.to_owned(), spec.instance_id.to_string()),
    ])
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ContainerUndo {
    /// Nothing was created.
    None,
    /// A create request was sent and its outcome is unknown.
    Pending,
    Created(String),
}

/// What a `create` made so far: the container, and the volume only if
/// this call made it.
#[derive(Clone)]
struct Made {
    docker: Docker,
    sandbox_id: SandboxId,
    instance_id: InstanceId,
    container: ContainerUndo,
    volume_owned: bool,
    /// The file system of its own the new volume binds, when it has one.
    disk: Option<VolumeDisk>,
}

/// [`Made`], removed again when the create fails or is cancelled.
struct CreateUndo {
    made: Made,
    armed: bool,
}

impl std::ops::Deref for CreateUndo {
    type Target = Made;
    fn deref(&self) -> &Made {
        &self.made
    }
}

impl std::ops::DerefMut for CreateUndo {
    fn deref_mut(&mut self) -> &mut Made {
        &mut self.made
    }
}

impl CreateUndo {
    fn new(docker: Docker, spec: &ContainerSpec) -> Self {
        Self {
            made: Made {
                docker,
                sandbox_id: spec.sandbox_id.clone(),
                instance_id: spec.instance_id.clone(),
                container: ContainerUndo::None,
                volume_owned: false,
                disk: None,
            },
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    async fn run_now(&mut self) {
        self.armed = false;
        self.made.clone().remove().await;
    }
}

impl Drop for CreateUndo {
    fn drop(&mut self) {
        if !self.armed || (self.container == ContainerUndo::None && !self.volume_owned) {
            return;
        }
        // The create future was dropped midway (client gone): clean up in the
        // background, outside the cancelled task.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            tracing::info!(sandbox.id = %self.sandbox_id, "create cancelled: removing what it made");
            handle.spawn(self.made.clone().remove());
        }
    }
}

impl Made {
    /// Removes it all; what is gone already is no error.
    async fn remove(self) {
        let Made {
            docker,
            sandbox_id,
            instance_id,
            container,
            volume_owned,
            disk,
        } = self;
        let name = container_name(&sandbox_id);
        let volume = VolumeName::for_sandbox(&sandbox_id);
        // A pending create may still land after our first look: look again.
        let attempts = if container == ContainerUndo::Pending {
            3
        } else {
            1
        };
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let target = match &container {
                ContainerUndo::None => None,
                ContainerUndo::Created(id) => Some(id.clone()),
                // Only a container that carries this create's labels is ours.
                ContainerUndo::Pending => match docker
                    .inspect_container(&name, None::<InspectContainerOptions>)
                    .await
                {
                    Ok(c) => {
                        let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
                        let ours = labels.get(labels::SANDBOX_ID).map(String::as_str)
                            == Some(sandbox_id.as_str())
                            && labels.get(labels::INSTANCE_ID).map(String::as_str)
                                == Some(instance_id.as_str());
                        ours.then_some(name.clone())
                    }
                    Err(_) => None,
                },
            };
            if let Some(target) = target {
                if let Err(e) = remove_container(&docker, &target).await {
                    tracing::warn!(sandbox.id = %sandbox_id, error = %error_chain(&e), "could not remove the container of a failed create");
                }
            }
            if volume_owned {
                match docker.remove_volume(volume.as_str(), None).await {
                    Ok(()) => {}
                    Err(e) if status_code(&e) == Some(404) => {}
                    Err(e) => {
                        tracing::warn!(sandbox.id = %sandbox_id, error = %error_chain(&e), "could not remove the volume of a failed create");
                        // Its file system stays with it (a later look may remove both).
                        continue;
                    }
                }
                if let Some(disk) = &disk {
                    if let Err(why) = disk.destroy().await {
                        tracing::warn!(sandbox.id = %sandbox_id, %why, "could not remove the volume's file system of a failed create");
                    }
                }
            }
        }
    }
}

/// The engine refused a create because its network does not exist.
fn is_missing_network(e: &BollardError) -> bool {
    matches!(
        e,
        BollardError::DockerResponseServerError { status_code: 404, message }
            if message.contains("network")
    )
}

/// A short reason for a failed pull, for [`RuntimeError::ImageUnavailable`].
fn pull_reason(message: &str) -> String {
    let lower = message.to_ascii_lowercase();
    let kind = if lower.contains("pull access denied")
        || lower.contains("repository does not exist")
        || lower.contains("manifest unknown")
        || lower.contains("not found")
        || lower.contains("unauthorized")
    {
        "pull access denied or no such image in the registry"
    } else if lower.contains("no such host")
        || lower.contains("dial tcp")
        || lower.contains("connection refused")
        || lower.contains("i/o timeout")
        || lower.contains("tls handshake")
        || lower.contains("network is unreachable")
        || lower.contains("timeout")
    {
        "registry unreachable"
    } else {
        "pull failed"
    };
    // Only the kind and the registry's status code: what a registry (or
    // anything that answers in its place) wrote is never echoed back.
    match http_status_in(&lower) {
        Some(code) => format!("{kind} (HTTP {code})"),
        None => kind.to_owned(),
    }
}

/// The HTTP status a pull error names (`… HTTP status: 503 …`,
/// `error parsing HTTP 403 response body`), if any.
fn http_status_in(lower: &str) -> Option<u16> {
    ["http status: ", "http "].iter().find_map(|marker| {
        let at = lower.find(marker)? + marker.len();
        let digits: String = lower[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok().filter(|c| (100..600).contains(c))
    })
}

/// Splits `name[:tag]` / `name@digest` for the pull API (no tag = `latest`,
/// never "all tags").
fn split_reference(image: &str) -> (String, String) {
    if let Some((name, digest)) = image.split_once('@') {
        return (name.to_owned(), digest.to_owned());
    }
    let name_start = image.rfind('/').map_or(0, |i| i + 1);
    match image[name_start..].rfind(':') {
        Some(i) => (
            image[..name_start + i].to_owned(),
            image[name_start + i + 1..].to_owned(),
        ),
        None => (image.to_owned(), "latest".to_owned()),
    }
}

impl DockerRuntime {
    /// The outcome of a pause or unpause: the engine's 409 that says it is
    /// in that state already (`already`) is success; any other 409 (not
    /// running) is a conflict, a 404 no container.
    fn freezer_result(
        &self,
        done: Result<(), BollardError>,
        id: &SandboxId,
        already: &str,
        what: &str,
    ) -> RuntimeResult<()> {
        match done {
            Ok(()) => Ok(()),
            Err(e) => match status_code(&e) {
                Some(404) => Err(RuntimeError::NotFound(format!(
                    "no container for sandbox {id}"
                ))),
                Some(409) if e.to_string().contains(already) => Ok(()),
                Some(409) => Err(RuntimeError::Conflict(format!(
                    "the container of sandbox {id} is not running"
                ))),
                _ => Err(self.map_err(e, what)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split() {
        for (image, name, tag) in [
            ("node:20-bookworm", "node", "20-bookworm"),
            ("busybox", "busybox", "latest"),
            ("localhost:5000/a/b", "localhost:5000/a/b", "latest"),
            ("localhost:5000/a/b:1.2", "localhost:5000/a/b", "1.2"),
            ("x@sha256:abc", "x", "sha256:abc"),
        ] {
            assert_eq!(split_reference(image), (name.into(), tag.into()), "{image}");
        }
    }

    #[test]
    fn pull_reasons_are_short_and_classified() {
        let r = pull_reason(
            "pull access denied for nope, repository does not exist or may require 'docker login'",
        );
        assert!(r.starts_with("pull access denied"), "{r}");
        let too_long = "x".repeat(1000);
        for (message, reason) in [
            (
                "Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such host",
                "registry unreachable",
            ),
            (too_long.as_str(), "pull failed"),
            // A registry's own words never come back, its status code does.
            (
                "error parsing HTTP 418 response body: invalid character '<': \
                 \"<html>SECRET-INTERNAL-PAGE</html>\"",
                "pull failed (HTTP 418)",
            ),
            (
                "received unexpected HTTP status: 503 Service Unavailable SECRET",
                "pull failed (HTTP 503)",
            ),
        ] {
            assert_eq!(pull_reason(message), reason, "{message}");
        }
    }
}
