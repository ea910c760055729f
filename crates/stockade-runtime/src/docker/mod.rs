//! The Docker implementation of the runtime (bollard): the client (lazy
//! connect, API version negotiation), its configuration, the transports to
//! an engine (a unix socket, `tcp://`, and through a private socket of
//! `ssh.rs`: `tcp://` with TLS client certificates and `ssh://`), and errors
//! that say how to fix an unreachable daemon. Each role lives in a file of its own:
//! `lifecycle.rs` (hardened create), `exec.rs`, `files.rs`,
//! `logs.rs`, `inspect.rs`, `ports.rs`, `stats.rs`, `update.rs`,
//! `volumes.rs`, `snapshots.rs`, `network.rs`, `seccomp.rs`,
//! `agent.rs` (the agent volume), `disk.rs` (disk quotas),
//! `ssh.rs` (ssh hosts).

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::{ClientVersion, Docker, API_DEFAULT_VERSION};
use chrono::{DateTime, Utc};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use stockade_core::SandboxId;

mod agent;
mod containers;
mod disk;
mod egress;
mod exec;
mod files;
mod host_command;
mod inspect;
mod lifecycle;
mod logs;
mod loop_disk;
mod network;
mod ports;
mod seccomp;
mod shared_volumes;
mod snapshots;
mod ssh;
mod stats;
mod update;
mod volumes;

pub use network::IsolationConfig;
pub use seccomp::SECCOMP_PROFILE;
pub use ssh::SSH_OPTS_ENV;

use crate::{RuntimeError, RuntimeResult};

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
/// The same over ssh, where the first connection logs in.
const SSH_PROBE_TIMEOUT: Duration = Duration::from_secs(15);
const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// TLS client files of a `tcp://` engine, as `docker --tlsverify
/// --tlscacert --tlscert --tlskey` takes them (PEM): the engine's
/// certificate must be signed by `ca` and name the host, and the engine
/// (`dockerd --tlsverify`) must have signed `cert`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Where and how to reach the Docker engine.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerConfig {
    /// `unix:///path/to/docker.sock`, `tcp://host:port` (with
    /// [`tls`](Self::tls) for an engine that requires TLS) or
    /// `ssh://[user@]host[:port]` (the Docker CLI must be installed there);
    /// `None` means `DOCKER_HOST`, else `unix:///var/run/docker.sock`.
    pub host: Option<String>,
    /// TLS client files for a `tcp://` host; `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Extra options of `ssh` for an `ssh://` host, e.g. `-i`, `-o
    /// UserKnownHostsFile=…`; `None`: `STOCKADE_SSH_OPTS`, split at
    /// whitespace. `BatchMode=yes` is always set.
    pub ssh_options: Option<Vec<String>>,
    /// The name of this engine host ("server location"), e.g. `local`.
    pub server_name: String,
    /// Maximum number of processes in one sandbox.
    pub pids_limit: i64,
    /// OCI runtime for sandboxes, e.g. `runsc` (gVisor); `None` = engine default.
    pub oci_runtime: Option<String>,
    /// How long pulling a missing image may take.
    pub pull_timeout: Duration,
    /// The networks sandboxes join and the packet filter that keeps them
    /// from each other and from the host.
    pub isolation: IsolationConfig,
    /// The volume holding the agent on this engine; the default,
    /// [`crate::agent_volume_name`], names this build's agent version, so
    /// every server with the same agent shares one volume per engine. Tests
    /// take names of their own.
    pub agent_volume: String,
    /// Cap `diskSizeGB` where the engine can (`disk.rs`); off: no
    /// sandbox gets a disk quota and the capability says so.
    pub disk_quotas: bool,
    /// The size at which a sandbox's log file is rotated: Docker's
    /// json-file `max-size`, at least 1 MiB.
    pub log_max_bytes: u64,
    /// How many log files a sandbox keeps, the current one included (json-file
    /// `max-file`, 1 to 100): its logs take at most `log_max_bytes` ×
    /// `log_max_files` on the engine's disk.
    pub log_max_files: u32,
    /// A host that is not this server's machine: each sandbox's
    /// agent port is published on this address of the host (an IP: bound
    /// there; a name: bound on every address), and this server reaches the
    /// agent — and through it the sandbox's ports — there. `None`: the
    /// sandboxes' addresses on the engine's bridge are reachable.
    pub publish_address: Option<String>,
}

/// The smallest [`DockerConfig::log_max_bytes`].
pub const MIN_LOG_MAX_BYTES: u64 = 1 << 20;
/// The largest [`DockerConfig::log_max_files`].
pub const MAX_LOG_MAX_FILES: u32 = 100;

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            host: None,
            tls: None,
            ssh_options: None,
            server_name: "local".into(),
            pids_limit: 512,
            oci_runtime: None,
            pull_timeout: Duration::from_secs(300),
            isolation: IsolationConfig::default(),
            agent_volume: crate::agent_volume_name(),
            disk_quotas: true,
            log_max_bytes: 10 << 20,
            log_max_files: 3,
            publish_address: None,
        }
    }
}

/// A Docker volume name: `[A-Za-z0-9][A-Za-z0-9_.-]+`, at most 255 bytes.
fn is_volume_name(name: &str) -> bool {
    let b = name.as_bytes();
    (2..=255).contains(&b.len())
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// Where connections to the engine go: a unix socket (a TLS or ssh host's
/// is the private socket of its tunnel) or a TCP address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Unix(String),
    Tcp(String),
}

/// What a Docker host address names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Address {
    Direct(Endpoint),
    Ssh(ssh::SshTarget),
}

/// How connections reach the engine beyond the endpoint.
enum Transport {
    Plain,
    /// Through a tunnel whose every connection is a TLS one to the engine.
    Tls {
        files: TlsFiles,
        tunnel: ssh::SshTunnel,
    },
    Ssh(ssh::SshTunnel),
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
    /// TLS or the ssh tunnel, when the host needs one.
    transport: Transport,
    /// The connected client, version negotiated; `None` until the daemon
    /// first answers, and again after it stops answering.
    client: RwLock<Option<Docker>>,
    /// Whether Stockade's network with access (0) and its internal network
    /// (1) are known to exist as they should (`network.rs`).
    networks_ready: [AtomicBool; 2],
    /// What the engine said about itself and its host (`inspect.rs`).
    engine: RwLock<inspect::EngineFacts>,
    /// Whether the agent volume is known to be complete (`agent.rs`).
    agent: agent::AgentVolumeState,
    /// What the engine enforces of `diskSizeGB`, once probed (`disk.rs`).
    disk: disk::DiskState,
    /// Where the volumes' own file systems live (`loop_disk.rs`).
    loop_disks: loop_disk::LoopDisks,
    /// Egress entries whose removal is queued (`removals.rs`): starts wait
    /// for them.
    pub(crate) removals: Arc<crate::PendingRemovals>,
}

impl std::fmt::Debug for DockerRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerRuntime")
            .field("host", &self.host)
            .field("server_name", &self.config.server_name)
            .finish_non_exhaustive()
    }
}

fn parse_endpoint(host: &str) -> RuntimeResult<Address> {
    if let Some(path) = host.strip_prefix("unix://") {
        if path.is_empty() {
            return Err(RuntimeError::Other(format!(
                "invalid Docker host '{host}': expected unix:///path/to/docker.sock"
            )));
        }
        Ok(Address::Direct(Endpoint::Unix(path.to_owned())))
    } else if host.starts_with('/') {
        Ok(Address::Direct(Endpoint::Unix(host.to_owned())))
    } else if let Some(addr) = host
        .strip_prefix("tcp://")
        .or_else(|| host.strip_prefix("http://"))
    {
        let addr = addr.strip_suffix('/').unwrap_or(addr);
        if addr.is_empty() || addr.contains('/') {
            return Err(RuntimeError::Other(format!(
                "invalid Docker host '{host}': expected tcp://host:port"
            )));
        }
        Ok(Address::Direct(Endpoint::Tcp(addr.to_owned())))
    } else if host.starts_with("ssh://") {
        ssh::SshTarget::parse(host)
            .map(Address::Ssh)
            .map_err(|e| RuntimeError::Other(format!("invalid Docker host {e}")))
    } else {
        Err(RuntimeError::Other(format!(
            "unsupported Docker host '{host}': use unix:///path/to/docker.sock, tcp://host:port \
             (with TLS client files for an engine started with --tlsverify) or \
             ssh://[user@]host[:port]"
        )))
    }
}

/// The host part of `host:port` (brackets of an IPv6 address removed).
fn host_part(addr: &str) -> &str {
    let host = match addr.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => addr,
    };
    host.trim_matches(|c| c == '[' || c == ']')
}

/// Reads the TLS client files of `addr` into a client configuration (the
/// CA alone is trusted, as `docker --tlsverify` does); every error names
/// the file.
fn tls_client(
    files: &TlsFiles,
    addr: &str,
) -> RuntimeResult<(Arc<rustls::ClientConfig>, ServerName<'static>)> {
    let bad = |what: &str, path: &Path, why: String| {
        RuntimeError::Other(format!("TLS {what} file {}: {why}", path.display()))
    };
    let certs = |what: &str, path: &Path| -> RuntimeResult<Vec<CertificateDer<'static>>> {
        std::fs::metadata(path).map_err(|e| bad(what, path, format!("cannot be read: {e}")))?;
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| bad(what, path, format!("is not PEM: {e}")))?;
        if certs.is_empty() {
            return Err(bad(what, path, "holds no PEM certificate".into()));
        }
        Ok(certs)
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs("CA (ca)", &files.ca)? {
        roots
            .add(cert)
            .map_err(|e| bad("CA (ca)", &files.ca, format!("is not a usable CA: {e}")))?;
    }
    let chain = certs("certificate (cert)", &files.cert)?;
    std::fs::metadata(&files.key)
        .map_err(|e| bad("key (key)", &files.key, format!("cannot be read: {e}")))?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        bad(
            "key (key)",
            &files.key,
            format!("holds no PEM private key: {e}"),
        )
    })?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| RuntimeError::Other(format!("TLS: {e}")))?
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .map_err(|e| {
        bad(
            "key (key)",
            &files.key,
            format!(
                "cannot be used with the certificate {}: {e}",
                files.cert.display()
            ),
        )
    })?;
    let name = ServerName::try_from(host_part(addr).to_owned()).map_err(|e| {
        RuntimeError::Other(format!(
            "invalid Docker host tcp://{addr}: '{}' is not a TLS server name: {e}",
            host_part(addr)
        ))
    })?;
    Ok((Arc::new(config), name))
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
        let (endpoint, transport) = match parse_endpoint(&host)? {
            Address::Direct(endpoint) => match (&config.tls, &endpoint) {
                (None, _) => (endpoint, Transport::Plain),
                (Some(files), Endpoint::Tcp(addr)) => {
                    let (tls, server_name) = tls_client(files, addr)?;
                    let tunnel = ssh::SshTunnel::new(ssh::Dial::Tls {
                        addr: addr.clone(),
                        config: tls,
                        server_name,
                    })
                    .map_err(|e| RuntimeError::Other(e.to_string()))?;
                    let socket = tunnel.socket().to_string_lossy().into_owned();
                    (
                        Endpoint::Unix(socket),
                        Transport::Tls {
                            files: files.clone(),
                            tunnel,
                        },
                    )
                }
                (Some(_), Endpoint::Unix(_)) => {
                    return Err(RuntimeError::Other(format!(
                        "invalid tls for Docker host '{host}': TLS client files are for a \
                             tcp:// host"
                    )))
                }
            },
            Address::Ssh(target) => {
                if config.tls.is_some() {
                    return Err(RuntimeError::Other(format!(
                        "invalid tls for Docker host '{host}': an ssh:// host takes no TLS files"
                    )));
                }
                let options = ssh::ssh_options(config.ssh_options.as_deref());
                let tunnel = ssh::SshTunnel::new(ssh::Dial::Ssh {
                    target,
                    options: Arc::new(options),
                })
                .map_err(|e| RuntimeError::Other(e.to_string()))?;
                let socket = tunnel.socket().to_string_lossy().into_owned();
                (Endpoint::Unix(socket), Transport::Ssh(tunnel))
            }
        };
        config
            .isolation
            .validate()
            .map_err(|e| RuntimeError::Other(format!("invalid isolation setting {e}")))?;
        // The fill container's name (`<volume>-fill`) must be valid too.
        if !is_volume_name(&config.agent_volume) || config.agent_volume.len() > 200 {
            return Err(RuntimeError::Other(format!(
                "invalid agent_volume {:?}: a Docker volume name ([A-Za-z0-9][A-Za-z0-9_.-]+, \
                 at most 200 characters)",
                config.agent_volume
            )));
        }
        if config.log_max_bytes < MIN_LOG_MAX_BYTES {
            return Err(RuntimeError::Other(format!(
                "invalid log_max_bytes {}: at least {MIN_LOG_MAX_BYTES} (1 MiB)",
                config.log_max_bytes
            )));
        }
        if !(1..=MAX_LOG_MAX_FILES).contains(&config.log_max_files) {
            return Err(RuntimeError::Other(format!(
                "invalid log_max_files {}: 1 to {MAX_LOG_MAX_FILES}",
                config.log_max_files
            )));
        }
        Ok(Self {
            config,
            host,
            host_source,
            endpoint,
            transport,
            client: RwLock::new(None),
            networks_ready: [AtomicBool::new(false), AtomicBool::new(false)],
            engine: RwLock::new(inspect::EngineFacts::default()),
            agent: agent::AgentVolumeState::default(),
            disk: disk::DiskState::default(),
            loop_disks: loop_disk::LoopDisks::default(),
            removals: Arc::default(),
        })
    }

    /// Every sandbox's log configuration: json-file, rotated at
    /// `log_max_bytes`, `log_max_files` files kept.
    pub(crate) fn log_config(&self) -> bollard::models::HostConfigLogConfig {
        bollard::models::HostConfigLogConfig {
            typ: Some("json-file".to_owned()),
            config: Some(std::collections::HashMap::from([
                ("max-size".to_owned(), self.config.log_max_bytes.to_string()),
                ("max-file".to_owned(), self.config.log_max_files.to_string()),
            ])),
        }
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

    /// The tunnel to a TLS or ssh host.
    fn tunnel(&self) -> Option<&ssh::SshTunnel> {
        match &self.transport {
            Transport::Ssh(tunnel) | Transport::Tls { tunnel, .. } => Some(tunnel),
            Transport::Plain => None,
        }
    }

    /// The engine behind a tunnel (`ssh://…`, `tcp://…`) and whether it is
    /// on this machine.
    pub(crate) fn tunneled_engine(&self) -> Option<(String, bool)> {
        self.tunnel()
            .map(|t| (t.dial().address(), t.dial().is_loopback()))
    }

    pub(crate) fn probe_timeout(&self) -> Duration {
        match self.transport {
            Transport::Ssh(_) => SSH_PROBE_TIMEOUT,
            _ => PROBE_TIMEOUT,
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
        self.note_engine_version(&docker).await;
        *self
            .client
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(docker.clone());
        Ok(docker)
    }

    async fn negotiate(&self) -> RuntimeResult<Docker> {
        if let Some(tunnel) = self.tunnel() {
            tunnel
                .ensure_serving()
                .map_err(|e| self.unavailable(&e.to_string(), false))?;
        }
        let probe = self.probe_timeout();
        let baseline = self
            .connect(&API_BASELINE)
            .map_err(|e| self.map_err(e, "connect"))?;
        let err = match tokio::time::timeout(probe, baseline.negotiate_version()).await {
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
        match tokio::time::timeout(probe, newest.negotiate_version()).await {
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
            &format!("no answer within {} s", self.probe_timeout().as_secs()),
            false,
        )
    }

    pub(crate) fn unavailable(&self, detail: &str, permission_denied: bool) -> RuntimeError {
        let mut msg = format!(
            "Docker daemon not reachable at {} ({}): {detail}. ",
            self.host, self.host_source
        );
        match &self.transport {
            Transport::Tls { files, tunnel } => {
                if let Some(said) = tunnel.last_error() {
                    msg.push_str(said.trim_end_matches('.'));
                    msg.push_str(". ");
                }
                msg.push_str(&format!(
                    "Check that the engine listens there with --tlsverify and that its CA \
                     ({}) signed the client certificate ({}) and its own certificate for \
                     this address.",
                    files.ca.display(),
                    files.cert.display()
                ));
                return RuntimeError::Unavailable(msg);
            }
            Transport::Ssh(tunnel) => {
                if let Some(said) = tunnel.last_error() {
                    msg.push_str(said.trim_end_matches('.'));
                    msg.push_str(". ");
                }
                msg.push_str(&format!(
                    "Check that `ssh {} docker version` works for this user without a prompt \
                     (a key, the host key known; extra options in {}) and that the user there \
                     may use Docker.",
                    tunnel.dial().address(),
                    ssh::SSH_OPTS_ENV
                ));
                return RuntimeError::Unavailable(msg);
            }
            Transport::Plain => {}
        }
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

    /// The sandbox's container as the engine describes it; `None` when
    /// there is none.
    pub(crate) async fn inspect_sandbox(
        &self,
        docker: &Docker,
        id: &SandboxId,
    ) -> RuntimeResult<Option<bollard::models::ContainerInspectResponse>> {
        match docker
            .inspect_container(
                &container_name(id),
                None::<bollard::container::InspectContainerOptions>,
            )
            .await
        {
            Ok(c) => Ok(Some(c)),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(self.map_err(e, "inspect container")),
        }
    }

    /// [`Self::inspect_sandbox`] for a container that must be there: a
    /// missing one is NotFound, naming the sandbox.
    pub(crate) async fn inspect_existing(
        &self,
        docker: &Docker,
        id: &SandboxId,
    ) -> RuntimeResult<bollard::models::ContainerInspectResponse> {
        self.inspect_sandbox(docker, id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound(format!("no container for sandbox {id}")))
    }

    /// The containers the engine lists for `filters`, stopped ones too
    /// when `all`.
    pub(crate) async fn list_containers_by(
        &self,
        docker: &Docker,
        all: bool,
        filters: std::collections::HashMap<String, Vec<String>>,
    ) -> RuntimeResult<Vec<bollard::models::ContainerSummary>> {
        docker
            .list_containers(Some(bollard::container::ListContainersOptions {
                all,
                filters,
                ..Default::default()
            }))
            .await
            .map_err(|e| self.map_err(e, "list containers"))
    }

    /// Maps a bollard error: 404 → NotFound, 409 → Conflict, no connection →
    /// Unavailable with guidance, a refused CPU or memory limit →
    /// LimitRefused, anything else → Other. `what` names the operation for
    /// the message.
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
                let message = format!("{what}: {}", error_chain(&e));
                if is_limit_refused(&e) {
                    RuntimeError::LimitRefused(message)
                } else {
                    RuntimeError::Other(message)
                }
            }
        }
    }
}

/// The container of a sandbox: `stockade-{id}`.
pub fn container_name(id: &SandboxId) -> String {
    format!("stockade-{id}")
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

/// The engine refuses a CPU or memory limit it cannot grant: more CPUs than
/// the host has, a CPU set out of range, a memory limit under its minimum or
/// under the swap limit.
fn is_limit_refused(e: &BollardError) -> bool {
    const PHRASES: [&str; 4] = [
        "CPUs available",
        "Range of CPUs",
        "Minimum memory limit",
        "cannot be less than",
    ];
    matches!(e, BollardError::DockerResponseServerError { message, .. }
        if PHRASES.iter().any(|p| message.contains(p)))
}

pub(crate) use stockade_core::error::error_chain;

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

/// Awaits a raw exchange with the engine for at most `limit`: no answer in
/// time and a failed exchange are errors that start with `what`.
async fn engine_answer<T, E: std::fmt::Display>(
    what: &str,
    limit: Duration,
    exchange: impl std::future::Future<Output = Result<T, E>>,
) -> RuntimeResult<T> {
    tokio::time::timeout(limit, exchange)
        .await
        .map_err(|_| {
            RuntimeError::Other(format!(
                "{what}: the engine did not answer within {} s",
                limit.as_secs()
            ))
        })?
        .map_err(|e| RuntimeError::Other(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Inspect;

    #[test]
    fn hosts_parse() {
        let unix = |p: &str| Address::Direct(Endpoint::Unix(p.into()));
        let tcp = |a: &str| Address::Direct(Endpoint::Tcp(a.into()));
        for (host, address) in [
            ("unix:///var/run/docker.sock", unix("/var/run/docker.sock")),
            ("/tmp/d.sock", unix("/tmp/d.sock")),
            ("tcp://10.0.0.2:2375", tcp("10.0.0.2:2375")),
            ("tcp://10.0.0.2:2376/", tcp("10.0.0.2:2376")),
        ] {
            assert_eq!(parse_endpoint(host).unwrap(), address, "{host}");
        }
        assert_eq!(
            parse_endpoint("ssh://me@host:2222").unwrap(),
            Address::Ssh(ssh::SshTarget {
                user: Some("me".into()),
                host: "host".into(),
                port: Some(2222)
            })
        );
        assert!(parse_endpoint("ssh://-oProxyCommand=x").is_err());
        assert!(parse_endpoint("unix://").is_err());
        let err = parse_endpoint("npipe:////./pipe/docker").unwrap_err();
        assert!(err.to_string().contains("ssh://"), "{err}");
        assert_eq!(host_part("127.0.0.1:2376"), "127.0.0.1");
        assert_eq!(host_part("[::1]:2376"), "::1");
        assert_eq!(host_part("docker.example"), "docker.example");
    }

    #[test]
    fn tls_files_are_checked_and_named() {
        let dir = std::env::temp_dir().join(format!("stockade-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let missing = dir.join("missing.pem");
        let new = |host: &str, ca: &Path, cert: &Path, key: &Path| {
            DockerRuntime::new(DockerConfig {
                host: Some(host.into()),
                tls: Some(TlsFiles {
                    ca: ca.to_owned(),
                    cert: cert.to_owned(),
                    key: key.to_owned(),
                }),
                ..Default::default()
            })
            .unwrap_err()
            .to_string()
        };
        let err = new("tcp://127.0.0.1:2376", &missing, &not_pem, &not_pem);
        assert!(
            err.contains("CA (ca)") && err.contains("missing.pem"),
            "{err}"
        );
        let err = new("tcp://127.0.0.1:2376", &not_pem, &not_pem, &not_pem);
        assert!(err.contains("not.pem") && err.contains("no PEM"), "{err}");
        let err = new("unix:///run/docker.sock", &not_pem, &not_pem, &not_pem);
        assert!(err.contains("tls") && err.contains("tcp://"), "{err}");
        let err = new("ssh://me@host", &not_pem, &not_pem, &not_pem);
        assert!(err.contains("ssh://"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ssh_hosts_talk_to_a_private_socket() {
        let rt = DockerRuntime::new(DockerConfig {
            host: Some("ssh://root@127.0.0.1:2222".into()),
            ssh_options: Some(vec![]),
            ..Default::default()
        })
        .unwrap();
        let Endpoint::Unix(socket) = rt.endpoint.clone() else {
            panic!("an ssh host is reached through a unix socket");
        };
        assert!(Path::new(&socket).exists());
        assert_eq!(rt.host(), "ssh://root@127.0.0.1:2222");
        assert!(rt.remote_engine().is_none(), "loopback: this machine");
        drop(rt);
        assert!(!Path::new(&socket).exists(), "removed with the runtime");
        let remote = DockerRuntime::new(DockerConfig {
            host: Some("ssh://docker.example".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            remote.remote_engine().as_deref(),
            Some("ssh://docker.example")
        );
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
    fn agent_volume_names_are_checked() {
        assert_eq!(
            DockerConfig::default().agent_volume,
            format!("stockade-agent-{}", crate::agent_version())
        );
        for bad in ["", "x", "-lead", "has space", "a/b", &"v".repeat(201)] {
            let err = DockerRuntime::new(DockerConfig {
                agent_volume: bad.to_owned(),
                ..Default::default()
            })
            .unwrap_err();
            assert!(err.to_string().contains("agent_volume"), "{err}");
        }
        assert!(DockerRuntime::new(DockerConfig {
            agent_volume: "test-agent_1.x".into(),
            ..Default::default()
        })
        .is_ok());
    }

    #[test]
    fn log_limits_are_checked() {
        for (bytes, files, field) in [
            (1000, 3, "log_max_bytes"),
            (10 << 20, 0, "log_max_files"),
            (10 << 20, 101, "log_max_files"),
        ] {
            let err = DockerRuntime::new(DockerConfig {
                log_max_bytes: bytes,
                log_max_files: files,
                ..Default::default()
            })
            .unwrap_err();
            assert!(err.to_string().contains(field), "{err}");
        }
        let rt = DockerRuntime::new(DockerConfig::default()).unwrap();
        let log = rt.log_config();
        assert_eq!(log.typ.as_deref(), Some("json-file"));
        let config = log.config.unwrap();
        assert_eq!(config["max-size"], (10u64 << 20).to_string());
        assert_eq!(config["max-file"], "3");
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

    #[test]
    fn refused_limits_are_recognised() {
        let refusal = |message: &str| BollardError::DockerResponseServerError {
            status_code: 400,
            message: message.into(),
        };
        for message in [
            "range of CPUs is from 0.01 to 2.00, as there are only 2 CPUs available",
            "Range of CPUs is from 0.01 to 2.00",
            "Minimum memory limit allowed is 6MB",
            "Memory limit should be smaller than already set memoryswap limit, update the memoryswap at the same time; memoryswap cannot be less than memory",
        ] {
            assert!(is_limit_refused(&refusal(message)), "{message}");
        }
        assert!(!is_limit_refused(&refusal("bad parameter")));
    }
}
