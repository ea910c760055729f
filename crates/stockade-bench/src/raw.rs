//! The baseline: the same work done through the Docker Engine API directly
//! (bollard, like any Docker client), with exactly the volume and container
//! settings Stockade sends (`DockerRuntime::create_request`), so that the
//! ratio measures Stockade's own overhead and nothing else: the agent as
//! PID 1 included (with a token of its own, from the agent volume the
//! server's first create fills).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{bail, Context};
use bollard::container::{
    InspectContainerOptions, ListContainersOptions, LogOutput, RemoveContainerOptions,
    StartContainerOptions, StopContainerOptions,
};
use bollard::exec::{CreateExecOptions, CreateExecResults, StartExecOptions, StartExecResults};
use bollard::models::ContainerInspectResponse;
use bollard::volume::ListVolumesOptions;
use bollard::{ClientVersion, Docker};
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use stockade_core::{AccountId, InstanceId, SandboxId, StartCommand, VolumeName};
use stockade_runtime::{container_name, ContainerSpec, DockerConfig, DockerRuntime};

/// A connection to the engine's socket.
trait Conn: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Conn for T {}

/// A direct Docker client and the settings of the containers it makes.
pub struct Raw {
    pub docker: Docker,
    host: String,
    builder: DockerRuntime,
    /// Labels the raw containers with an instance id no server knows, so no
    /// reconciler ever looks at them.
    pub instance: InstanceId,
    account: AccountId,
    image: String,
    cpu_cores: f64,
    memory_bytes: i64,
    /// The access token of the raw containers' agents (nothing speaks to
    /// them, but they start with one like the server's).
    agent_token: String,
}

/// A command on a TTY in a container (`docker exec -it`): its input and
/// its output as they come.
pub struct RawTerminal {
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    pub output: BoxStream<'static, anyhow::Result<Vec<u8>>>,
}

/// One container made by [`Raw::create`].
pub struct RawSandbox {
    pub name: String,
    pub volume: String,
}

impl Raw {
    pub async fn connect(
        host: &str,
        image: &str,
        cpu_cores: f64,
        memory_bytes: i64,
    ) -> anyhow::Result<Self> {
        let version = ClientVersion {
            major_version: 1,
            minor_version: 41,
        };
        let docker = if let Some(path) = host.strip_prefix("unix://") {
            Docker::connect_with_unix(path, 120, &version)
        } else if let Some(addr) = host
            .strip_prefix("tcp://")
            .or_else(|| host.strip_prefix("http://"))
        {
            Docker::connect_with_http(addr, 120, &version)
        } else {
            bail!("unsupported Docker host '{host}': use unix:///path/to/docker.sock or tcp://host:port")
        }
        .with_context(|| format!("could not set up a Docker client for {host}"))?;
        let docker = docker
            .negotiate_version()
            .await
            .with_context(|| format!("Docker does not answer at {host}: is the daemon running?"))?;
        let builder = DockerRuntime::new(DockerConfig {
            host: Some(host.to_owned()),
            ..DockerConfig::default()
        })
        .context("could not set up the Docker runtime")?;
        // The same networks (and engine-dependent seccomp choice) Stockade's
        // sandboxes get, so that both sides create the same containers.
        let report = stockade_runtime::Isolation::ensure_isolation(&builder).await;
        tracing::debug!(?report, "raw baseline: sandbox isolation");
        Ok(Self {
            docker,
            host: host.to_owned(),
            builder,
            instance: InstanceId::generate(),
            account: AccountId::generate(),
            image: image.to_owned(),
            cpu_cores,
            memory_bytes,
            agent_token: format!("{}{}", SandboxId::generate(), SandboxId::generate()),
        })
    }

    /// Fails unless the agent volume the raw containers mount exists: the
    /// server's first create with an agent makes and fills it (a missing
    /// one would be made empty by Docker, and the agent would not start).
    pub async fn require_agent_volume(&self) -> anyhow::Result<()> {
        let name = stockade_runtime::agent_volume_name();
        self.docker.inspect_volume(&name).await.with_context(|| {
            format!("raw: the agent volume {name} is missing: create a sandbox through the server first")
        })?;
        Ok(())
    }

    /// The OCI runtimes the engine has registered (`runc`, `runsc`, …).
    pub async fn oci_runtimes(&self) -> anyhow::Result<Vec<String>> {
        let info = self.docker.info().await.context("raw: docker info")?;
        let mut names: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
        names.sort();
        Ok(names)
    }

    /// The spec Stockade's create builds for a sandbox with default settings.
    fn spec(&self, id: &SandboxId, command: Option<&str>) -> ContainerSpec {
        ContainerSpec {
            sandbox_id: id.clone(),
            account_id: self.account.clone(),
            instance_id: self.instance.clone(),
            image: self.image.clone(),
            command: match command {
                Some(c) => vec!["/bin/sh".into(), "-c".into(), c.to_owned()],
                None => StartCommand::keep_alive_argv(),
            },
            env: BTreeMap::new(),
            cpu_cores: self.cpu_cores,
            memory_bytes: self.memory_bytes,
            network_access: true,
            hostname: id.to_string(),
            agent_token: Some(self.agent_token.clone()),
            // The default diskSizeGB, capped where the engine can as Stockade does.
            disk_bytes: Some(10 << 30),
            mounts: Vec::new(),
            workspace_volume: true,
        }
    }

    /// Volume create + container create + start: what `docker run` with a
    /// named volume does, with Stockade's settings.
    pub async fn create(&self) -> anyhow::Result<RawSandbox> {
        let id = SandboxId::generate();
        let (volume, config) = self.builder.create_request(&self.spec(&id, None));
        let name = container_name(&id);
        let vol = volume.name.clone();
        self.docker
            .create_volume(volume)
            .await
            .context("raw: create volume")?;
        self.docker
            .create_container(
                Some(bollard::container::CreateContainerOptions {
                    name: name.clone(),
                    platform: None,
                }),
                config,
            )
            .await
            .context("raw: create container")?;
        self.docker
            .start_container(&name, None::<StartContainerOptions<String>>)
            .await
            .context("raw: start container")?;
        Ok(RawSandbox { name, volume: vol })
    }

    /// Makes an exec of `argv` in `container`'s workspace with stdout and
    /// stderr attached, and stdin and a TTY too with `tty`.
    async fn create_exec(
        &self,
        container: &str,
        argv: Vec<String>,
        tty: bool,
    ) -> anyhow::Result<CreateExecResults> {
        let options = CreateExecOptions::<String> {
            attach_stdin: tty.then_some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: tty.then_some(true),
            cmd: Some(argv),
            working_dir: Some(VolumeName::MOUNT_PATH.to_owned()),
            ..Default::default()
        };
        let what = if tty {
            "raw: create exec (tty)"
        } else {
            "raw: create exec"
        };
        self.docker
            .create_exec(container, options)
            .await
            .context(what)
    }

    /// Runs `argv` in a running container and returns its exit code and
    /// stdout: create, start attached, read to the end, read the exit code.
    pub async fn exec(&self, container: &str, argv: &[&str]) -> anyhow::Result<(i64, Vec<u8>)> {
        let argv = argv.iter().map(|s| (*s).to_owned()).collect();
        let created = self.create_exec(container, argv, false).await?;
        let started = self
            .docker
            .start_exec(&created.id, None)
            .await
            .context("raw: start exec")?;
        let mut stdout = Vec::new();
        if let StartExecResults::Attached { mut output, .. } = started {
            while let Some(item) = output.next().await {
                if let LogOutput::StdOut { message } = item.context("raw: exec output")? {
                    stdout.extend_from_slice(&message);
                }
            }
        }
        for _ in 0..1000 {
            let inspected = self
                .docker
                .inspect_exec(&created.id)
                .await
                .context("raw: inspect exec")?;
            if inspected.running != Some(true) {
                return Ok((inspected.exit_code.unwrap_or(-1), stdout));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        bail!("raw: the exec's exit code never came")
    }

    /// Starts `command` (a shell command line) on a TTY in a running
    /// container, attached: what `docker exec -it` does.
    pub async fn terminal(&self, container: &str, command: &str) -> anyhow::Result<RawTerminal> {
        let argv = vec!["/bin/sh".into(), "-c".into(), command.to_owned()];
        let created = self.create_exec(container, argv, true).await?;
        let started = self
            .docker
            .start_exec(
                &created.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: true,
                    output_capacity: None,
                }),
            )
            .await
            .context("raw: start exec (tty)")?;
        match started {
            StartExecResults::Attached { output, input } => Ok(RawTerminal {
                input,
                output: output
                    .map(|item| {
                        item.map(|o| o.into_bytes().to_vec())
                            .context("raw: terminal output")
                    })
                    .boxed(),
            }),
            StartExecResults::Detached => bail!("raw: the terminal's exec started detached"),
        }
    }

    /// Stop with Stockade's default grace (30 s; the keep-alive exits at once).
    pub async fn stop(&self, sb: &RawSandbox) -> anyhow::Result<()> {
        self.docker
            .stop_container(&sb.name, Some(StopContainerOptions { t: 30 }))
            .await
            .context("raw: stop container")
    }

    /// Remove the container and its volume.
    pub async fn destroy(&self, sb: &RawSandbox) -> anyhow::Result<()> {
        self.docker
            .remove_container(
                &sb.name,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    link: false,
                }),
            )
            .await
            .context("raw: remove container")?;
        self.docker
            .remove_volume(&sb.volume, None)
            .await
            .context("raw: remove volume")
    }

    /// Reads a container's whole log as `docker logs` does: one request to
    /// the Engine API, its multiplexed frames taken apart as they arrive.
    /// Spoken directly over the socket (HTTP/1.0, so the body is not
    /// chunked) because a client library's per-frame work would make the
    /// baseline slower than Docker is. Returns the bytes and lines of text.
    pub async fn read_logs(&self, container: &str) -> anyhow::Result<(u64, u64)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let request = format!(
            "GET /v1.41/containers/{container}/logs?stdout=1&stderr=1 HTTP/1.0\r\nHost: docker\r\n\r\n"
        );
        let mut conn: Box<dyn Conn> = if let Some(path) = self.host.strip_prefix("unix://") {
            Box::new(
                tokio::net::UnixStream::connect(path)
                    .await
                    .context("raw: connect")?,
            )
        } else {
            let addr = self
                .host
                .trim_start_matches("tcp://")
                .trim_start_matches("http://");
            Box::new(
                tokio::net::TcpStream::connect(addr)
                    .await
                    .context("raw: connect")?,
            )
        };
        conn.write_all(request.as_bytes())
            .await
            .context("raw: send")?;
        let mut buf = vec![0u8; 256 * 1024];
        let mut have = 0usize;
        // The response head.
        let body_start = loop {
            let n = conn.read(&mut buf[have..]).await.context("raw: read")?;
            if n == 0 {
                bail!("raw logs: the connection closed before the response head");
            }
            have += n;
            if let Some(i) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..i]);
                if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
                    bail!("raw logs: {}", head.lines().next().unwrap_or_default());
                }
                break i + 4;
            }
        };
        // Frames: stream (1 byte), 3 zero bytes, payload length (u32 BE).
        let (mut bytes, mut lines) = (0u64, 0u64);
        let mut pending: Vec<u8> = buf[body_start..have].to_vec();
        let mut pos = 0usize;
        loop {
            while pending.len() - pos >= 8 {
                let len = u32::from_be_bytes([
                    pending[pos + 4],
                    pending[pos + 5],
                    pending[pos + 6],
                    pending[pos + 7],
                ]) as usize;
                if pending.len() - pos < 8 + len {
                    break;
                }
                let payload = &pending[pos + 8..pos + 8 + len];
                bytes += len as u64;
                lines += payload.iter().filter(|b| **b == b'\n').count() as u64;
                pos += 8 + len;
            }
            pending.drain(..pos);
            pos = 0;
            let n = conn.read(&mut buf).await.context("raw: read")?;
            if n == 0 {
                break;
            }
            pending.extend_from_slice(&buf[..n]);
        }
        if !pending.is_empty() {
            bail!("raw logs: the stream ended inside a frame");
        }
        Ok((bytes, lines))
    }

    /// Whether the container's main process still runs.
    pub async fn running(&self, container: &str) -> anyhow::Result<bool> {
        let c = self.inspect(container).await?;
        Ok(c.state.and_then(|s| s.running).unwrap_or(false))
    }

    /// The OCI runtime a container runs under (`runc`, `runsc`, …).
    pub async fn oci_runtime_of(&self, container: &str) -> anyhow::Result<String> {
        let c = self.inspect(container).await?;
        Ok(c.host_config.and_then(|h| h.runtime).unwrap_or_default())
    }

    async fn inspect(&self, container: &str) -> anyhow::Result<ContainerInspectResponse> {
        self.docker
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .context("raw: inspect container")
    }

    /// The ids of the containers and the names of the volumes labelled
    /// with `instance`.
    async fn labelled(&self, instance: &str) -> anyhow::Result<(Vec<String>, Vec<String>)> {
        let label = format!("{}={instance}", stockade_runtime::labels::INSTANCE_ID);
        let filters = HashMap::from([("label".to_owned(), vec![label])]);
        let containers = self
            .docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: filters.clone(),
                ..Default::default()
            }))
            .await
            .context("raw: list containers")?
            .into_iter()
            .filter_map(|c| c.id)
            .collect();
        let volumes = self
            .docker
            .list_volumes(Some(ListVolumesOptions { filters }))
            .await
            .context("raw: list volumes")?
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.name)
            .collect();
        Ok((containers, volumes))
    }

    /// How many containers and volumes labelled with `instance` exist.
    pub async fn left_of(&self, instance: &str) -> anyhow::Result<(usize, usize)> {
        let (containers, volumes) = self.labelled(instance).await?;
        Ok((containers.len(), volumes.len()))
    }

    /// Removes every container and volume labelled with one of `instances`.
    pub async fn remove_everything(&self, instances: &[String]) -> (usize, usize) {
        let (mut containers, mut volumes) = (0, 0);
        for instance in instances {
            let (listed, vols) = self.labelled(instance).await.unwrap_or_default();
            for id in listed {
                let removed = self
                    .docker
                    .remove_container(
                        &id,
                        Some(RemoveContainerOptions {
                            force: true,
                            v: true,
                            link: false,
                        }),
                    )
                    .await;
                containers += usize::from(removed.is_ok());
            }
            for name in vols {
                volumes += usize::from(self.docker.remove_volume(&name, None).await.is_ok());
            }
        }
        (containers, volumes)
    }
}
