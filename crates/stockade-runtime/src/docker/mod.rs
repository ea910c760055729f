//! The Docker implementation of [`Runtime`] (bollard): hardened sandbox
//! containers (SEC-3), their volumes, exec, and errors that say how to fix
//! an unreachable daemon.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::RwLock;
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::{
    Config, CreateContainerOptions, InspectContainerOptions, ListContainersOptions, LogOutput,
    RemoveContainerOptions, StartContainerOptions, StopContainerOptions,
};
use bollard::errors::Error as BollardError;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::image::CreateImageOptions;
use bollard::models::{HostConfig, Mount, MountTypeEnum, RestartPolicy, RestartPolicyNameEnum};
use bollard::volume::{CreateVolumeOptions, RemoveVolumeOptions};
use bollard::{ClientVersion, Docker, API_DEFAULT_VERSION};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use stockade_core::{InstanceId, SandboxId, VolumeName};
use tokio::io::AsyncWriteExt;

mod exec;
mod files;
mod logs;
mod ports;
mod snapshots;
mod stats;
mod update;
mod volumes;

use crate::{
    labels, ByteStream, ContainerSpec, ContainerState, ExecOutput, ExecSpec, ManagedContainer,
    Runtime, RuntimeError, RuntimeInfo, RuntimeResult, VolumeInfo, DEFAULT_MAX_OUTPUT_BYTES,
};

/// The API version Stockade speaks first: Docker 20.10. Engines that no
/// longer accept it (Docker 29 requires 1.44) are spoken to in the newest
/// version bollard knows, negotiated down to theirs.
const API_BASELINE: ClientVersion = ClientVersion {
    major_version: 1,
    minor_version: 41,
};
/// Request timeout of the HTTP client (time to the response headers; streamed
/// bodies such as exec output and pulls are not cut by it).
const CLIENT_TIMEOUT_SECS: u64 = 120;
/// How long `/health` (and the first connection) waits for the daemon.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";
/// Capabilities a sandbox keeps (everything else is dropped, SEC-3): enough
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
/// Environment variable that marks the processes of one exec, so a timed-out
/// exec (and its children) can be found and killed: Docker has no exec-kill API.
pub(crate) const EXEC_MARKER_ENV: &str = "STOCKADE_EXEC_ID";
/// Kills every process whose environment holds `STOCKADE_EXEC_ID=$1`.
pub(crate) const KILL_MARKED_SCRIPT: &str = r#"for p in /proc/[0-9]*; do
  if tr '\000' '\n' < "$p/environ" 2>/dev/null | grep -qx "STOCKADE_EXEC_ID=$1"; then
    kill -9 "${p#/proc/}" 2>/dev/null
  fi
done
exit 0"#;

/// Where and how to reach the Docker engine.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerConfig {
    /// `unix:///path/to/docker.sock` or `tcp://host:port`; `None` means
    /// `DOCKER_HOST`, else `unix:///var/run/docker.sock`.
    pub host: Option<String>,
    /// The name of this engine host ("server location"), e.g. `local`.
    pub server_name: String,
    /// Maximum number of processes in one sandbox.
    pub pids_limit: i64,
    /// OCI runtime for sandboxes, e.g. `runsc` (gVisor); `None` = engine default.
    pub oci_runtime: Option<String>,
    /// How long pulling a missing image may take.
    pub pull_timeout: Duration,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            host: None,
            server_name: "local".into(),
            pids_limit: 512,
            oci_runtime: None,
            pull_timeout: Duration::from_secs(300),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Unix(String),
    Tcp(String),
}

/// The Docker engine as a [`Runtime`]. Connects lazily: constructing it never
/// fails because the daemon is down, and it recovers when the daemon returns.
pub struct DockerRuntime {
    config: DockerConfig,
    /// The address tried, as the user wrote it (for error messages).
    host: String,
    /// Where `host` came from: configuration, `DOCKER_HOST` or the default.
    host_source: &'static str,
    pub(crate) endpoint: Endpoint,
    /// The connected client, version negotiated; `None` until the daemon
    /// first answers, and again after it stops answering.
    client: RwLock<Option<Docker>>,
}

impl std::fmt::Debug for DockerRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerRuntime")
            .field("host", &self.host)
            .field("server_name", &self.config.server_name)
            .finish_non_exhaustive()
    }
}

fn parse_endpoint(host: &str) -> RuntimeResult<Endpoint> {
    if let Some(path) = host.strip_prefix("unix://") {
        if path.is_empty() {
            return Err(RuntimeError::Other(format!(
                "invalid Docker host '{host}': expected unix:///path/to/docker.sock"
            )));
        }
        Ok(Endpoint::Unix(path.to_owned()))
    } else if host.starts_with('/') {
        Ok(Endpoint::Unix(host.to_owned()))
    } else if let Some(addr) = host
        .strip_prefix("tcp://")
        .or_else(|| host.strip_prefix("http://"))
    {
        if addr.is_empty() {
            return Err(RuntimeError::Other(format!(
                "invalid Docker host '{host}': expected tcp://host:port"
            )));
        }
        Ok(Endpoint::Tcp(addr.to_owned()))
    } else {
        Err(RuntimeError::Other(format!(
            "unsupported Docker host '{host}': use unix:///path/to/docker.sock or tcp://host:port \
             (TLS and ssh:// are not supported; tunnel them to a local socket)"
        )))
    }
}

impl DockerRuntime {
    /// Prepares a client for the configured engine. Fails only on an invalid
    /// host address, never because the daemon is down.
    pub fn new(config: DockerConfig) -> RuntimeResult<Self> {
        let (host, host_source) = match &config.host {
            Some(h) => (h.trim().to_owned(), "configured"),
            None => match std::env::var("DOCKER_HOST") {
                Ok(h) if !h.trim().is_empty() => (h.trim().to_owned(), "from DOCKER_HOST"),
                _ => (DEFAULT_HOST.to_owned(), "default socket"),
            },
        };
        let endpoint = parse_endpoint(&host)?;
        Ok(Self {
            config,
            host,
            host_source,
            endpoint,
            client: RwLock::new(None),
        })
    }

    /// The address this runtime talks to (`unix:///var/run/docker.sock`, …).
    pub fn host(&self) -> &str {
        &self.host
    }

    fn connect(&self, version: &ClientVersion) -> Result<Docker, BollardError> {
        match &self.endpoint {
            Endpoint::Unix(path) => Docker::connect_with_unix(path, CLIENT_TIMEOUT_SECS, version),
            Endpoint::Tcp(addr) => Docker::connect_with_http(addr, CLIENT_TIMEOUT_SECS, version),
        }
    }

    fn cached_client(&self) -> Option<Docker> {
        self.client
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn forget_client(&self) {
        *self
            .client
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }

    /// The connected client; connects and negotiates the API version on
    /// first use (and after the daemon stopped answering).
    pub(crate) async fn client(&self) -> RuntimeResult<Docker> {
        if let Some(docker) = self.cached_client() {
            return Ok(docker);
        }
        let docker = self.negotiate().await?;
        *self
            .client
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(docker.clone());
        Ok(docker)
    }

    async fn negotiate(&self) -> RuntimeResult<Docker> {
        let baseline = self
            .connect(&API_BASELINE)
            .map_err(|e| self.map_err(e, "connect"))?;
        let err = match tokio::time::timeout(PROBE_TIMEOUT, baseline.negotiate_version()).await {
            Err(_) => return Err(self.no_answer()),
            Ok(Ok(docker)) => {
                tracing::debug!(host = %self.host, version = %docker.client_version(), "connected to Docker");
                return Ok(docker);
            }
            Ok(Err(e)) => e,
        };
        if !is_version_too_old(&err) {
            return Err(self.map_err(err, "negotiate API version"));
        }
        // The engine dropped 1.41: start from bollard's newest and go down.
        let newest = self
            .connect(API_DEFAULT_VERSION)
            .map_err(|e| self.map_err(e, "connect"))?;
        match tokio::time::timeout(PROBE_TIMEOUT, newest.negotiate_version()).await {
            Err(_) => Err(self.no_answer()),
            Ok(Ok(docker)) => {
                tracing::debug!(host = %self.host, version = %docker.client_version(), "connected to Docker");
                Ok(docker)
            }
            Ok(Err(e)) => Err(self.map_err(e, "negotiate API version")),
        }
    }

    fn no_answer(&self) -> RuntimeError {
        self.forget_client();
        self.unavailable(
            &format!("no answer within {} s", PROBE_TIMEOUT.as_secs()),
            false,
        )
    }

    pub(crate) fn unavailable(&self, detail: &str, permission_denied: bool) -> RuntimeError {
        let mut msg = format!(
            "Docker daemon not reachable at {} ({}): {detail}. ",
            self.host, self.host_source
        );
        if permission_denied {
            msg.push_str(
                "Permission denied on the Docker socket: add this user to the `docker` group \
                 (`sudo usermod -aG docker $USER`, then log in again) or fix the socket's \
                 permissions. ",
            );
        }
        msg.push_str(
            "Is the daemon running? Start it with `sudo systemctl start docker` (or `dockerd &`). \
             If it is running, check that this user may use the socket (member of the `docker` \
             group, socket permissions) and that DOCKER_HOST points at it \
             (e.g. unix:///var/run/docker.sock or tcp://host:2375).",
        );
        RuntimeError::Unavailable(msg)
    }

    /// Maps a bollard error: 404 → NotFound, 409 → Conflict, no connection →
    /// Unavailable with guidance, anything else → Other. `what` names the
    /// operation for the message.
    pub(crate) fn map_err(&self, e: BollardError, what: &str) -> RuntimeError {
        match &e {
            BollardError::DockerResponseServerError {
                status_code: 404,
                message,
            } => RuntimeError::NotFound(message.clone()),
            BollardError::DockerResponseServerError {
                status_code: 409,
                message,
            } => RuntimeError::Conflict(message.clone()),
            _ if is_connection_error(&e) => {
                self.forget_client();
                self.unavailable(&error_chain(&e), is_permission_denied(&e))
            }
            _ => {
                if is_version_too_old(&e) {
                    // The engine was upgraded under us: negotiate again next time.
                    self.forget_client();
                }
                RuntimeError::Other(format!("{what}: {}", error_chain(&e)))
            }
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
    /// create options and the container's configuration (SEC-3 hardening,
    /// limits, labels, the wrapped main process). Public for the benchmark's
    /// raw-Docker baseline (`stockade-bench`), which must create exactly the
    /// same containers to be a fair comparison.
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
            self.container_config(spec, &volume, stockade_labels(spec)),
        )
    }

    fn container_config(
        &self,
        spec: &ContainerSpec,
        volume: &VolumeName,
        labels: HashMap<String, String>,
    ) -> Config<String> {
        let memory = (spec.memory_bytes > 0).then_some(spec.memory_bytes);
        let nano_cpus = (spec.cpu_cores.is_finite() && spec.cpu_cores > 0.0)
            .then(|| (spec.cpu_cores * 1e9).round() as i64);
        let host_config = HostConfig {
            cap_drop: Some(vec!["ALL".to_owned()]),
            cap_add: Some(CAP_ADD.iter().map(|c| (*c).to_owned()).collect()),
            // Default seccomp and AppArmor profiles stay on.
            security_opt: Some(vec!["no-new-privileges:true".to_owned()]),
            pids_limit: Some(self.config.pids_limit),
            memory,
            memory_swap: memory,
            nano_cpus,
            privileged: Some(false),
            // docker-init as PID 1: forwards SIGTERM, reaps zombies.
            init: Some(true),
            mounts: Some(vec![Mount {
                target: Some(VolumeName::MOUNT_PATH.to_owned()),
                source: Some(volume.as_str().to_owned()),
                typ: Some(MountTypeEnum::VOLUME),
                read_only: Some(false),
                ..Default::default()
            }]),
            network_mode: (!spec.network_access).then(|| "none".to_owned()),
            runtime: self.config.oci_runtime.clone(),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            readonly_rootfs: Some(false),
            ..Default::default()
        };
        Config {
            image: Some(spec.image.clone()),
            // The main process runs through a wrapper that applies environment
            // updates made after create (LC-8), see docker_update.rs.
            cmd: (!spec.command.is_empty()).then(|| update::wrap_main(&spec.command)),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: Some(VolumeName::MOUNT_PATH.to_owned()),
            hostname: (!spec.hostname.is_empty()).then(|| spec.hostname.clone()),
            labels: Some(labels),
            tty: Some(false),
            open_stdin: Some(false),
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            // LC-4's default grace, also when the engine stops it on its own.
            stop_timeout: Some(30),
            host_config: Some(host_config),
            ..Default::default()
        }
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

        // Two independent questions at once: one round trip fewer per create.
        let (image, existing) = tokio::join!(
            self.ensure_image(&spec.image),
            docker.inspect_volume(volume.as_str())
        );
        image?;
        match existing {
            // A preserved volume of this sandbox: reuse it (and keep it on failure).
            Ok(_) => {}
            Err(e) if status_code(&e) == Some(404) => {
                undo.volume_owned = true;
                docker
                    .create_volume(CreateVolumeOptions {
                        name: volume.as_str().to_owned(),
                        driver: "local".to_owned(),
                        driver_opts: HashMap::new(),
                        labels: labels.clone(),
                    })
                    .await
                    .map_err(|e| self.map_err(e, "create volume"))?;
            }
            Err(e) => return Err(self.map_err(e, "inspect volume")),
        }

        undo.container = ContainerUndo::Pending;
        let created = docker
            .create_container(
                Some(CreateContainerOptions {
                    name: name.clone(),
                    platform: None,
                }),
                self.container_config(spec, &volume, labels),
            )
            .await;
        let created = match created {
            Ok(c) => c,
            Err(e) => {
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

        docker
            .start_container(&created.id, None::<StartContainerOptions<String>>)
            .await
            .map_err(|e| match self.map_err(e, "start container") {
                RuntimeError::NotFound(m) | RuntimeError::Conflict(m) => {
                    RuntimeError::Other(format!("start container: {m}"))
                }
                other => other,
            })?;
        Ok(created.id)
    }

    /// Creates an exec for `spec` in the sandbox's container (with the
    /// kill marker in its environment, when given) and starts it attached.
    /// Returns the exec id and its attached streams.
    pub(crate) async fn create_and_start_exec(
        &self,
        docker: &Docker,
        id: &SandboxId,
        spec: &ExecSpec,
        marker: Option<&str>,
    ) -> RuntimeResult<(String, StartExecResults)> {
        let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if let Some(m) = marker {
            env.push(format!("{EXEC_MARKER_ENV}={m}"));
        }
        let created = docker
            .create_exec(
                &container_name(id),
                CreateExecOptions::<String> {
                    attach_stdin: Some(spec.stdin.is_some()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    tty: Some(false),
                    env: Some(env),
                    cmd: Some(spec.argv.clone()),
                    working_dir: spec.cwd.clone(),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| match status_code(&e) {
                Some(409) => RuntimeError::Conflict("sandbox is not running".into()),
                Some(404) => RuntimeError::NotFound(format!("no container for sandbox {id}")),
                _ => self.map_err(e, "create exec"),
            })?;
        let started = docker
            .start_exec(
                &created.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| match status_code(&e) {
                Some(409) => RuntimeError::Conflict("sandbox is not running".into()),
                _ => self.map_err(e, "start exec"),
            })?;
        Ok((created.id, started))
    }

    async fn exec_inner(
        &self,
        docker: &Docker,
        id: &SandboxId,
        spec: ExecSpec,
    ) -> RuntimeResult<ExecOutput> {
        if spec.argv.is_empty() {
            return Err(RuntimeError::Other(
                "exec needs a command (argv is empty)".into(),
            ));
        }
        let name = container_name(id);
        let marker = spec
            .timeout
            .map(|_| InstanceId::generate().as_str().to_owned());
        let (exec_id, started) = self
            .create_and_start_exec(docker, id, &spec, marker.as_deref())
            .await?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = started
        else {
            return Err(RuntimeError::Other("exec did not attach".into()));
        };

        let limit = if spec.max_output_bytes == 0 {
            DEFAULT_MAX_OUTPUT_BYTES
        } else {
            spec.max_output_bytes
        };
        let mut stdout = Capped::new(limit);
        let mut stderr = Capped::new(limit);
        let mut read_error = None;
        let stdin = spec.stdin;
        let run = async {
            let write = async {
                if let Some(data) = stdin {
                    // The process may exit without reading: a broken pipe is fine.
                    let _ = input.write_all(&data).await;
                    let _ = input.shutdown().await;
                }
            };
            let read = async {
                while let Some(item) = output.next().await {
                    match item {
                        Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                            stdout.push(&message)
                        }
                        Ok(LogOutput::StdErr { message }) => stderr.push(&message),
                        Ok(LogOutput::StdIn { .. }) => {}
                        Err(e) => {
                            read_error = Some(e);
                            break;
                        }
                    }
                }
            };
            tokio::join!(write, read);
        };
        let timed_out = match spec.timeout {
            Some(t) => tokio::time::timeout(t, run).await.is_err(),
            None => {
                run.await;
                false
            }
        };
        drop(output);
        drop(input);

        if timed_out {
            if let Some(m) = &marker {
                self.kill_marked(docker, &name, m).await;
            }
            return Ok(ExecOutput {
                exit_code: None,
                truncated: stdout.truncated || stderr.truncated,
                stdout: stdout.buf,
                stderr: stderr.buf,
                timed_out: true,
            });
        }
        if let Some(e) = read_error {
            return Err(self.map_err(e, "read exec output"));
        }

        // The stream can end a moment before the engine records the exit code.
        let mut exit_code = None;
        for attempt in 0..exec::EXIT_POLLS {
            let inspected = docker
                .inspect_exec(&exec_id)
                .await
                .map_err(|e| self.map_err(e, "inspect exec"))?;
            if inspected.running != Some(true) {
                exit_code = inspected.exit_code;
                break;
            }
            tokio::time::sleep(exec::exit_poll_delay(attempt)).await;
        }
        Ok(ExecOutput {
            exit_code,
            truncated: stdout.truncated || stderr.truncated,
            stdout: stdout.buf,
            stderr: stderr.buf,
            timed_out: false,
        })
    }

    /// Kills the processes of a timed-out exec (those carrying its marker).
    async fn kill_marked(&self, docker: &Docker, container: &str, marker: &str) {
        exec::kill_marked(docker, container, marker).await;
    }
}

#[async_trait]
impl Runtime for DockerRuntime {
    async fn info(&self) -> RuntimeResult<RuntimeInfo> {
        let probe = async {
            let docker = self.client().await?;
            let (version, info) = tokio::join!(docker.version(), docker.info());
            let version = version.map_err(|e| self.map_err(e, "docker version"))?;
            let info = info.map_err(|e| self.map_err(e, "docker info"))?;
            let mut runtimes: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
            runtimes.sort();
            Ok(RuntimeInfo {
                version: version.version.unwrap_or_default(),
                api_version: version.api_version.unwrap_or_default(),
                os: version.os.unwrap_or_default(),
                arch: version.arch.unwrap_or_default(),
                runtimes,
            })
        };
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(result) => result,
            Err(_) => Err(self.no_answer()),
        }
    }

    fn server_name(&self) -> String {
        self.config.server_name.clone()
    }

    #[tracing::instrument(skip(self))]
    async fn ensure_image(&self, image: &str) -> RuntimeResult<()> {
        let docker = self.client().await?;
        match docker.inspect_image(image).await {
            Ok(_) => return Ok(()),
            Err(e) if status_code(&e) == Some(404) => {}
            Err(e) => return Err(self.map_err(e, "inspect image")),
        }
        tracing::info!(image, "image not present locally: pulling");
        self.pull(&docker, image).await?;
        match docker.inspect_image(image).await {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Err(RuntimeError::ImageUnavailable {
                image: image.to_owned(),
                reason: "the pull finished but the image is still missing".into(),
            }),
            Err(e) => Err(self.map_err(e, "inspect image")),
        }
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %spec.sandbox_id, image = %spec.image))]
    async fn create(&self, spec: &ContainerSpec) -> RuntimeResult<String> {
        let docker = self.client().await?;
        let mut undo = CreateUndo::new(docker.clone(), spec);
        match self
            .create_inner(&docker, spec, &mut undo, None, stockade_labels(spec))
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

    #[tracing::instrument(skip_all, fields(sandbox.id = %member.sandbox_id, image = %member.image))]
    async fn create_pool_member(&self, member: &crate::PoolMemberSpec) -> RuntimeResult<String> {
        let spec = member.container_spec();
        let docker = self.client().await?;
        let mut undo = CreateUndo::new(docker.clone(), &spec);
        let labels = member.labels().into_iter().collect();
        match self
            .create_inner(&docker, &spec, &mut undo, None, labels)
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

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn start(&self, id: &SandboxId) -> RuntimeResult<()> {
        let docker = self.client().await?;
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
        }
        Ok(())
    }

    async fn inspect(&self, id: &SandboxId) -> RuntimeResult<Option<ContainerState>> {
        let docker = self.client().await?;
        let inspected = match docker
            .inspect_container(&container_name(id), None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => c,
            Err(e) if status_code(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(self.map_err(e, "inspect container")),
        };
        let state = inspected.state.unwrap_or_default();
        let running = state.running.unwrap_or(false);
        let finished_at = parse_time(state.finished_at.as_deref());
        Ok(Some(ContainerState {
            container_id: inspected.id.unwrap_or_default(),
            running,
            started_at: parse_time(state.started_at.as_deref()),
            exit_code: if running || finished_at.is_none() {
                None
            } else {
                state.exit_code
            },
            finished_at,
            oom_killed: state.oom_killed.unwrap_or(false),
        }))
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn exec(&self, id: &SandboxId, spec: ExecSpec) -> RuntimeResult<ExecOutput> {
        let docker = self.client().await?;
        self.exec_inner(&docker, id, spec).await
    }

    async fn list_managed(&self) -> RuntimeResult<Vec<ManagedContainer>> {
        let docker = self.client().await?;
        let mut filters = HashMap::new();
        filters.insert(
            "label".to_owned(),
            vec![format!("{}=true", labels::MANAGED)],
        );
        let containers = docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters,
                ..Default::default()
            }))
            .await
            .map_err(|e| self.map_err(e, "list containers"))?;
        Ok(containers
            .into_iter()
            .filter_map(|c| {
                let labels = c.labels.unwrap_or_default();
                Some(ManagedContainer {
                    container_id: c.id?,
                    sandbox_id: labels
                        .get(labels::SANDBOX_ID)
                        .and_then(|s| SandboxId::parse(s).ok()),
                    instance_id: labels.get(labels::INSTANCE_ID).cloned(),
                    running: c.state.as_deref() == Some("running"),
                    pool_class: crate::pool_class_of(|k| labels.get(k)),
                })
            })
            .collect())
    }

    async fn list_volumes(&self) -> RuntimeResult<Vec<VolumeInfo>> {
        self.list_volumes_detailed().await
    }

    async fn remove_volume(&self, name: &VolumeName) -> RuntimeResult<()> {
        let docker = self.client().await?;
        docker
            .remove_volume(name.as_str(), None::<RemoveVolumeOptions>)
            .await
            .map_err(|e| match status_code(&e) {
                Some(409) => RuntimeError::Conflict("Volume is in use by running sandbox".into()),
                Some(404) => RuntimeError::NotFound(format!("volume {name} not found")),
                _ => self.map_err(e, "remove volume"),
            })
    }

    async fn container_address(&self, id: &SandboxId) -> RuntimeResult<Option<std::net::IpAddr>> {
        self.container_address_inner(id).await
    }

    // --- Logs and streaming exec (issue 3: API-5, API-8): docker_logs.rs, docker_exec.rs ---

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn logs(
        &self,
        id: &SandboxId,
        options: crate::LogsOptions,
    ) -> RuntimeResult<crate::LogLines> {
        self.logs_lines(id, options).await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn exec_start(
        &self,
        id: &SandboxId,
        spec: ExecSpec,
    ) -> RuntimeResult<crate::ExecProcess> {
        self.exec_start_stream(id, spec).await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn exec_kill(&self, id: &SandboxId, exec_id: &str) -> RuntimeResult<()> {
        self.exec_kill_marked(id, exec_id).await
    }

    async fn stat_path(
        &self,
        id: &SandboxId,
        path: &stockade_core::SandboxPath,
    ) -> crate::FsResult<crate::PathStat> {
        self.stat_path_impl(id, path).await
    }

    async fn read_archive(
        &self,
        id: &SandboxId,
        path: &stockade_core::SandboxPath,
    ) -> crate::FsResult<crate::ArchiveStream> {
        self.read_archive_impl(id, path).await
    }

    async fn write_archive(
        &self,
        id: &SandboxId,
        dir: &stockade_core::SandboxPath,
        archive: crate::ArchiveUpload,
    ) -> crate::FsResult<()> {
        self.write_archive_impl(id, dir, archive).await
    }

    async fn delete_path(
        &self,
        id: &SandboxId,
        path: &stockade_core::SandboxPath,
        recursive: bool,
    ) -> crate::FsResult<()> {
        self.delete_path_impl(id, path, recursive).await
    }

    async fn stats(&self, id: &SandboxId) -> RuntimeResult<Option<crate::ContainerStats>> {
        self.stats_sample(id).await
    }

    // --- Volumes, resources and environment (slice "volumes-timeouts"):
    // docker_volumes.rs, docker_update.rs ---

    async fn volume_size(
        &self,
        name: &VolumeName,
        max_age: Duration,
    ) -> RuntimeResult<Option<u64>> {
        self.volume_size_of(name, max_age).await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id, cpu_cores, memory_bytes))]
    async fn update_resources(
        &self,
        id: &SandboxId,
        cpu_cores: f64,
        memory_bytes: i64,
    ) -> RuntimeResult<()> {
        self.update_container_resources(id, cpu_cores, memory_bytes)
            .await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn set_main_process_env(
        &self,
        id: &SandboxId,
        env: &std::collections::BTreeMap<String, String>,
    ) -> RuntimeResult<()> {
        self.write_main_env(id, env).await
    }

    // --- snapshots, fork and workspace sources (issue 4): docker/snapshots.rs ---

    async fn commit_snapshot(
        &self,
        id: &SandboxId,
        image_ref: &str,
        labels: &std::collections::BTreeMap<String, String>,
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

/// The labels on a sandbox's container and volume.
fn stockade_labels(spec: &ContainerSpec) -> HashMap<String, String> {
    HashMap::from([
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::SANDBOX_ID.to_owned(), spec.sandbox_id.to_string()),
        (labels::ACCOUNT_ID.to_owned(), spec.account_id.to_string()),
        (labels::INSTANCE_ID.to_owned(), spec.instance_id.to_string()),
    ])
}

/// The container of a sandbox: `stockade-{id}`.
pub fn container_name(id: &SandboxId) -> String {
    format!("stockade-{id}")
}

/// Force-removes a container with its anonymous volumes (named volumes stay);
/// gone already is fine, and so is a removal already in progress (waited for).
async fn remove_container(docker: &Docker, name: &str) -> Result<(), BollardError> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        link: false,
    };
    match docker.remove_container(name, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if status_code(&e) == Some(404) => Ok(()),
        Err(BollardError::DockerResponseServerError {
            status_code: 409,
            message,
        }) if message.contains("already in progress") => {
            for _ in 0..50 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                match docker
                    .inspect_container(name, None::<InspectContainerOptions>)
                    .await
                {
                    Err(e) if status_code(&e) == Some(404) => return Ok(()),
                    Err(e) => return Err(e),
                    Ok(_) => {}
                }
            }
            Err(BollardError::DockerResponseServerError {
                status_code: 409,
                message,
            })
        }
        Err(e) => Err(e),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ContainerUndo {
    /// Nothing was created.
    None,
    /// A create request was sent and its outcome is unknown.
    Pending,
    Created(String),
}

/// What a `create` made so far, removed again when it fails or is cancelled
/// (LC-11, LC-12): the container, and the volume only if this call made it.
struct CreateUndo {
    docker: Docker,
    sandbox_id: SandboxId,
    instance_id: InstanceId,
    container: ContainerUndo,
    volume_owned: bool,
    armed: bool,
}

impl CreateUndo {
    fn new(docker: Docker, spec: &ContainerSpec) -> Self {
        Self {
            docker,
            sandbox_id: spec.sandbox_id.clone(),
            instance_id: spec.instance_id.clone(),
            container: ContainerUndo::None,
            volume_owned: false,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    async fn run_now(&mut self) {
        self.armed = false;
        undo_create(
            self.docker.clone(),
            self.sandbox_id.clone(),
            self.instance_id.clone(),
            self.container.clone(),
            self.volume_owned,
        )
        .await;
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
            handle.spawn(undo_create(
                self.docker.clone(),
                self.sandbox_id.clone(),
                self.instance_id.clone(),
                self.container.clone(),
                self.volume_owned,
            ));
        }
    }
}

async fn undo_create(
    docker: Docker,
    sandbox_id: SandboxId,
    instance_id: InstanceId,
    container: ContainerUndo,
    volume_owned: bool,
) {
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
                    tracing::warn!(sandbox.id = %sandbox_id, error = %error_chain(&e), "could not remove the volume of a failed create")
                }
            }
        }
    }
}

/// Keeps the first `limit` bytes of a stream and notes whether more came.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Capped {
    fn new(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            limit,
            truncated: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let room = self.limit.saturating_sub(self.buf.len());
        if bytes.len() > room {
            self.buf.extend_from_slice(&bytes[..room]);
            self.truncated = true;
        } else {
            self.buf.extend_from_slice(bytes);
        }
    }
}

pub(crate) fn status_code(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// The daemon could not be reached (as opposed to: it answered with an error).
fn is_connection_error(e: &BollardError) -> bool {
    matches!(
        e,
        BollardError::HyperLegacyError { .. }
            | BollardError::HyperResponseError { .. }
            | BollardError::IOError { .. }
            | BollardError::RequestTimeoutError
            | BollardError::SocketNotFoundError(_)
    )
}

fn is_permission_denied(e: &BollardError) -> bool {
    let mut source: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::PermissionDenied {
                return true;
            }
        }
        source = err.source();
    }
    error_chain(e).contains("ermission denied")
}

/// The engine refuses our API version as too old (or too new).
fn is_version_too_old(e: &BollardError) -> bool {
    matches!(
        e,
        BollardError::DockerResponseServerError { status_code: 400, message }
            if message.contains("is too old") || message.contains("Minimum supported API version")
    )
}

/// An error and its causes, `outer: inner: innermost`, without repeats.
pub(crate) fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = source {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = err.source();
    }
    parts.join(": ")
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
    let message = message.trim();
    let message: String = if message.chars().count() > 300 {
        message.chars().take(300).chain("…".chars()).collect()
    } else {
        message.to_owned()
    };
    format!("{kind}: {message}")
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

/// Docker's timestamps; its zero time (`0001-01-01T00:00:00Z`) means never.
fn parse_time(s: Option<&str>) -> Option<DateTime<Utc>> {
    let s = s?.trim();
    if s.is_empty() || s.starts_with("0001-01-01") {
        return None;
    }
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse() {
        assert_eq!(
            parse_endpoint("unix:///var/run/docker.sock").unwrap(),
            Endpoint::Unix("/var/run/docker.sock".into())
        );
        assert_eq!(
            parse_endpoint("/tmp/d.sock").unwrap(),
            Endpoint::Unix("/tmp/d.sock".into())
        );
        assert_eq!(
            parse_endpoint("tcp://10.0.0.2:2375").unwrap(),
            Endpoint::Tcp("10.0.0.2:2375".into())
        );
        assert!(parse_endpoint("ssh://me@host").is_err());
        assert!(parse_endpoint("unix://").is_err());
    }

    #[test]
    fn new_does_not_touch_the_daemon() {
        let rt = DockerRuntime::new(DockerConfig {
            host: Some("unix:///tmp/nonexistent-stockade-unit.sock".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(rt.server_name(), "local");
        assert_eq!(rt.host(), "unix:///tmp/nonexistent-stockade-unit.sock");
    }

    #[test]
    fn references_split() {
        assert_eq!(
            split_reference("node:20-bookworm"),
            ("node".into(), "20-bookworm".into())
        );
        assert_eq!(
            split_reference("busybox"),
            ("busybox".into(), "latest".into())
        );
        assert_eq!(
            split_reference("localhost:5000/a/b"),
            ("localhost:5000/a/b".into(), "latest".into())
        );
        assert_eq!(
            split_reference("localhost:5000/a/b:1.2"),
            ("localhost:5000/a/b".into(), "1.2".into())
        );
        assert_eq!(
            split_reference("x@sha256:abc"),
            ("x".into(), "sha256:abc".into())
        );
    }

    #[test]
    fn times_parse() {
        assert_eq!(parse_time(Some("0001-01-01T00:00:00Z")), None);
        assert_eq!(parse_time(None), None);
        assert_eq!(parse_time(Some("")), None);
        let t = parse_time(Some("2024-05-01T10:20:30.123456789Z")).unwrap();
        assert_eq!(t.to_rfc3339(), "2024-05-01T10:20:30.123456789+00:00");
    }

    #[test]
    fn capped_truncates() {
        let mut c = Capped::new(5);
        c.push(b"abc");
        assert!(!c.truncated);
        c.push(b"defg");
        assert_eq!(c.buf, b"abcde");
        assert!(c.truncated);
        c.push(b"x");
        assert_eq!(c.buf, b"abcde");
    }

    #[test]
    fn pull_reasons_are_short_and_classified() {
        let r = pull_reason("Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such host");
        assert!(r.starts_with("registry unreachable: "), "{r}");
        let r = pull_reason(
            "pull access denied for nope, repository does not exist or may require 'docker login'",
        );
        assert!(r.starts_with("pull access denied"), "{r}");
        assert!(pull_reason(&"x".repeat(1000)).chars().count() < 350);
    }

    #[test]
    fn version_errors_are_recognised() {
        let e = BollardError::DockerResponseServerError {
            status_code: 400,
            message: "client version 1.41 is too old. Minimum supported API version is 1.44, please upgrade your client to a newer version".into(),
        };
        assert!(is_version_too_old(&e));
        let e = BollardError::DockerResponseServerError {
            status_code: 400,
            message: "bad parameter".into(),
        };
        assert!(!is_version_too_old(&e));
    }
}
