//! Runs sandboxes: the [`Runtime`] trait (a bundle of role traits:
//! [`Lifecycle`], [`Exec`], [`Files`], …), its Docker implementation
//! ([`DockerRuntime`], the only code that talks to Docker) and an in-memory
//! [`FakeRuntime`] for fast logic tests.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use stockade_core::{AccountId, InstanceId, SandboxId, VolumeName};

mod agent;
mod disk;
mod docker;
mod egress;
mod exec_stream;
mod fake;
mod files;
mod isolation;
mod logs;
mod removals;
mod runtime;
mod stats;

pub use agent::{
    agent_target, agent_version, agent_volume_name, validate_agent_token, AgentTokenError,
    AGENT_BINARY, AGENT_MOUNT_PATH, AGENT_PATH, AGENT_PORT, AGENT_TOKEN_ENV,
};
pub use disk::{parse_size, DiskEnforcement, DiskUsage, Enforcement, QuotaMethod};
pub use docker::{
    container_name, DockerConfig, DockerRuntime, IsolationConfig, TlsFiles, MAX_LOG_MAX_FILES,
    MIN_LOG_MAX_BYTES, SECCOMP_PROFILE, SSH_OPTS_ENV,
};
pub use egress::{EgressChains, EgressEntry, EgressHost};
pub use exec_stream::{ExecEvent, ExecExit, ExecProcess};
pub use fake::{ExecHandler, FakeContainer, FakeRuntime};
pub use files::{ArchiveStream, ArchiveUpload, FileKind, FsError, FsResult, PathStat};
pub use isolation::{IsolationReport, IsolationStatus};
pub use logs::{LogLine, LogLines, LogStream, LogsOptions, MAX_LOG_LINE_BYTES};
pub use removals::PendingRemovals;
pub use runtime::{
    Disk, Egress, Exec, Files, Inspect, Isolation, Lifecycle, Logs, Runtime, Snapshots, Update,
    Volumes,
};
pub use stats::{cpu_percent, ContainerStats};

/// Every role trait, for code that calls runtime methods on a concrete
/// type (`DockerRuntime`, `FakeRuntime`): `use stockade_runtime::prelude::*;`.
/// Through `dyn Runtime` (or a `T: Runtime` bound) they are callable with
/// `Runtime` alone.
pub mod prelude {
    pub use crate::runtime::{
        Disk, Egress, Exec, Files, Inspect, Isolation, Lifecycle, Logs, Runtime, Snapshots, Update,
        Volumes,
    };
}

/// Container label keys Stockade puts on everything it creates.
pub mod labels {
    pub const MANAGED: &str = "io.stockade.managed";
    pub const SANDBOX_ID: &str = "io.stockade.sandbox-id";
    pub const ACCOUNT_ID: &str = "io.stockade.account-id";
    pub const INSTANCE_ID: &str = "io.stockade.instance-id";
    /// On a warm-pool member and its volume: the member's own
    /// sandbox id. A container is a pool member only while this equals its
    /// [`SANDBOX_ID`] label: a snapshot image of a claimed member carries the
    /// label on, but the sandboxes made from it have ids of their own.
    pub const POOL_MEMBER: &str = "io.stockade.pool-member";
    /// On a warm-pool member: the key of its pool class (image, resources).
    pub const POOL_CLASS: &str = "io.stockade.pool-class";
    /// On a container whose PID 1 is the in-sandbox agent: the agent's
    /// version ([`crate::agent_version`]). Absent (or empty, on containers
    /// made from a snapshot image of such a container) when the sandbox has
    /// no agent.
    pub const AGENT: &str = "io.stockade.agent";
    /// On the agent volume: the version of the agent it holds.
    pub const AGENT_VERSION: &str = "io.stockade.agent-version";
    /// On the image, containers and volumes of the disk-quota probe:
    /// never a sandbox's.
    pub const DISK_PROBE: &str = "io.stockade.disk-probe";
    /// On a shared volume's Docker volume: the volume's id.
    pub const SHARED_VOLUME: &str = "io.stockade.shared-volume";
    /// On a shared volume's files helper: the Docker volume it serves.
    pub const VOLUME_HELPER: &str = "io.stockade.volume-helper";
}

/// What can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The daemon does not answer; the message says how to fix that.
    #[error("{0}")]
    Unavailable(String),
    /// The image is not present and could not be pulled.
    #[error("image '{image}' is not available locally and could not be pulled: {reason}")]
    ImageUnavailable { image: String, reason: String },
    /// No container (or volume) for this sandbox.
    #[error("not found: {0}")]
    NotFound(String),
    /// The resource is in use (e.g. a volume of a running container).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A command's working directory (this one) does not exist in the
    /// sandbox, so the command never started.
    #[error("no such directory in the sandbox: {0}")]
    CwdMissing(String),
    /// The engine refused a resource limit it cannot grant (more CPUs than
    /// the host has, a memory limit under its minimum); the message is the
    /// engine's, after the operation's name.
    #[error("docker error: {0}")]
    LimitRefused(String),
    /// Anything else the daemon reported.
    #[error("docker error: {0}")]
    Other(String),
}

pub type RuntimeResult<T> = Result<T, RuntimeError>;

/// A runtime setting that cannot be used: the message names the setting
/// and what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A stream of bytes: a tar archive on its way in or out of a container.
pub type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send>>;

/// Label on snapshot images: the snapshot's id.
pub const SNAPSHOT_LABEL: &str = "io.stockade.snapshot-id";

/// The label of a template build's image: the build's id.
pub const TEMPLATE_LABEL: &str = "io.stockade.template-build";
/// The label of a build cache's image: its key.
pub const TEMPLATE_LAYER_LABEL: &str = "io.stockade.template-layer";

/// Stockade's own images, each by the label it carries and the one name it
/// answers to (`{repository}:{label value}`).
pub const OWN_IMAGE_LABELS: [(&str, &str); 3] = [
    (SNAPSHOT_LABEL, stockade_core::Snapshot::IMAGE_REPO),
    (
        TEMPLATE_LABEL,
        stockade_core::template::Template::IMAGE_REPO,
    ),
    (
        TEMPLATE_LAYER_LABEL,
        stockade_core::template::Template::LAYER_REPO,
    ),
];

/// The labels that make a committed image `label`'s with `value`, and no
/// other of Stockade's own: an image inherits its base's labels, so each
/// other one is blanked (a template's sandbox snapshotted, a template built
/// from another).
pub fn own_image_labels(label: &str, value: &str) -> Vec<(String, String)> {
    OWN_IMAGE_LABELS
        .iter()
        .map(|(l, _)| {
            let v = if *l == label { value } else { "" };
            ((*l).to_owned(), v.to_owned())
        })
        .collect()
}

/// Refuses to create a container from one of Stockade's own images (a
/// snapshot's, a template build's, a cached build layer — one carrying
/// their label) named any other way than `{its repository}:{its label}`.
/// Only that name is handed out, and only to the owner (through a
/// `source` or a `template`); any other way to the same image — an id
/// prefix, a digest, a tag someone else gave it — is another tenant's image
/// reached around that check.
pub fn check_snapshot_image(
    reference: &str,
    labels: Option<&std::collections::HashMap<String, String>>,
) -> RuntimeResult<()> {
    for (label, repo) in OWN_IMAGE_LABELS {
        let Some(id) = labels.and_then(|l| l.get(label)).filter(|v| !v.is_empty()) else {
            continue;
        };
        if reference != format!("{repo}:{id}") {
            return Err(RuntimeError::ImageUnavailable {
                image: reference.to_owned(),
                reason: if label == SNAPSHOT_LABEL {
                    "it is a snapshot image, which is reached only through its snapshot: start \
                     from a snapshot with `source`"
                } else {
                    "it is a template's image, which is reached only through its template: \
                     create with `template`"
                }
                .into(),
            });
        }
    }
    Ok(())
}

/// Facts about the container engine, for `/health`, and the host's size,
/// so that requests larger than the host are refused as such.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeInfo {
    pub version: String,
    pub api_version: String,
    pub os: String,
    pub arch: String,
    /// OCI runtimes the engine offers (e.g. `runc`, `runsc`).
    pub runtimes: Vec<String>,
    /// CPUs of the engine's host (`NCPU`); 0 when the engine does not say.
    pub cpus: u32,
    /// Memory of the engine's host in bytes (`MemTotal`); 0 when the engine
    /// does not say.
    pub memory_bytes: u64,
    /// The engine's data root on its host (`DockerRootDir`), when it says.
    pub data_root: Option<String>,
    /// The engine's own id (`docker info` `ID`): one engine registered
    /// under two names shows the same.
    pub engine_id: Option<String>,
}

/// Everything needed to create one sandbox container (hardening it is the
/// runtime's job, not the caller's). Its `Debug` never shows the agent token.
#[derive(Clone, PartialEq)]
pub struct ContainerSpec {
    pub sandbox_id: SandboxId,
    pub account_id: AccountId,
    pub instance_id: InstanceId,
    pub image: String,
    /// argv of the main process.
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cpu_cores: f64,
    pub memory_bytes: i64,
    pub network_access: bool,
    pub hostname: String,
    /// `Some`: the in-sandbox agent runs as PID 1 in front of the main
    /// process and accepts requests carrying this token; see
    /// [`Lifecycle::create`]. `None`: the container has no agent (Docker's
    /// init is PID 1).
    pub agent_token: Option<String>,
    /// `diskSizeGB` in bytes: the cap of `/workspace` and, apart,
    /// of the writable root filesystem, where the engine can enforce them
    /// ([`crate::Disk::disk_enforcement`]); `None`: no cap.
    pub disk_bytes: Option<u64>,
    /// Shared volumes mounted into the container; each must exist.
    pub mounts: Vec<SharedMount>,
    /// Whether `/workspace` is the sandbox's own volume (always, but for a
    /// template's build: there it is a directory of the container, so that
    /// a commit keeps what the steps wrote, and a sandbox of the template
    /// gets it in its new volume, which Docker fills from the image).
    pub workspace_volume: bool,
}

/// A shared volume in a container: the Docker volume's name and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedMount {
    pub volume: String,
    pub path: String,
    pub read_only: bool,
}

/// Where a shared volume's files helper has the volume.
pub const VOLUME_HELPER_ROOT: &str = "/volume";

/// `Debug` for a spec, its fields in the order given, the agent token shown
/// only as `Some("<redacted>")`.
macro_rules! debug_with_redacted_token {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut d = f.debug_struct(stringify!($ty));
                $(debug_with_redacted_token!(@field d, self, $field);)*
                d.finish()
            }
        }
    };
    (@field $d:ident, $self:ident, agent_token) => {
        $d.field("agent_token", &redacted(&$self.agent_token));
    };
    (@field $d:ident, $self:ident, $field:ident) => {
        $d.field(stringify!($field), &$self.$field);
    };
}

/// `Some("<redacted>")` in place of a token.
fn redacted(token: &Option<String>) -> Option<&'static str> {
    token.as_ref().map(|_| "<redacted>")
}

debug_with_redacted_token!(ContainerSpec {
    sandbox_id,
    account_id,
    instance_id,
    image,
    command,
    env,
    cpu_cores,
    memory_bytes,
    network_access,
    hostname,
    agent_token,
    disk_bytes,
    mounts,
    workspace_volume,
});

/// A warm-pool member to create: a sandbox container with the
/// default main process, made before any account asks for it. It carries
/// no account label (the database records the owner once it is claimed),
/// its hostname is its sandbox id and its environment is empty. Its `Debug`
/// never shows the agent token.
#[derive(Clone, PartialEq)]
pub struct PoolMemberSpec {
    pub sandbox_id: SandboxId,
    pub instance_id: InstanceId,
    /// The key of the member's pool class, kept as a label.
    pub class: String,
    pub image: String,
    pub cpu_cores: f64,
    pub memory_bytes: i64,
    pub network_access: bool,
    /// As [`ContainerSpec::agent_token`]: the member's agent and the token
    /// it accepts (the sandbox keeps it once claimed).
    pub agent_token: Option<String>,
    /// As [`ContainerSpec::disk_bytes`]: part of the class, since a claim
    /// cannot change it.
    pub disk_bytes: Option<u64>,
}

debug_with_redacted_token!(PoolMemberSpec {
    sandbox_id,
    instance_id,
    class,
    image,
    cpu_cores,
    memory_bytes,
    network_access,
    agent_token,
    disk_bytes,
});

impl PoolMemberSpec {
    /// The container as a create of this sandbox id with these settings
    /// would make it, but for the labels (see [`labels::POOL_MEMBER`]).
    pub fn container_spec(&self) -> ContainerSpec {
        ContainerSpec {
            sandbox_id: self.sandbox_id.clone(),
            // Not labelled on a pool member; a placeholder for the type.
            account_id: AccountId::parse(POOL_ACCOUNT_PLACEHOLDER)
                .unwrap_or_else(|_| AccountId::generate()),
            instance_id: self.instance_id.clone(),
            image: self.image.clone(),
            command: stockade_core::StartCommand::keep_alive_argv(),
            env: BTreeMap::new(),
            cpu_cores: self.cpu_cores,
            memory_bytes: self.memory_bytes,
            network_access: self.network_access,
            hostname: self.sandbox_id.to_string(),
            agent_token: self.agent_token.clone(),
            disk_bytes: self.disk_bytes,
            mounts: Vec::new(),
            workspace_volume: true,
        }
    }

    /// The labels of the member's container and volume: Stockade's, without
    /// an account, plus [`labels::POOL_MEMBER`] and [`labels::POOL_CLASS`].
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (labels::MANAGED.to_owned(), "true".to_owned()),
            (labels::SANDBOX_ID.to_owned(), self.sandbox_id.to_string()),
            (labels::INSTANCE_ID.to_owned(), self.instance_id.to_string()),
            (labels::POOL_MEMBER.to_owned(), self.sandbox_id.to_string()),
            (labels::POOL_CLASS.to_owned(), self.class.clone()),
        ])
    }
}

/// The account id in a pool member's [`ContainerSpec`]: never labelled,
/// never stored.
const POOL_ACCOUNT_PLACEHOLDER: &str = "poolmember000000";

/// The pool class of a container or volume with `labels`, when it is a
/// warm-pool member (see [`labels::POOL_MEMBER`]).
pub fn pool_class_of<'a>(labels: impl Fn(&str) -> Option<&'a String>) -> Option<String> {
    let member = labels(labels::POOL_MEMBER)?;
    (Some(member) == labels(labels::SANDBOX_ID))
        .then(|| labels(labels::POOL_CLASS).cloned().unwrap_or_default())
}

/// A container's state as the engine reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    pub container_id: String,
    /// Its processes exist (a frozen container runs too).
    pub running: bool,
    /// Frozen by the cgroup freezer (`docker pause`).
    pub paused: bool,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    /// The version of the agent that is the container's PID 1 (its
    /// [`labels::AGENT`] label); `None` for a container without one, whose
    /// commands go through `docker exec`.
    pub agent: Option<String>,
    /// Its address on its Docker network while it runs (what
    /// [`Inspect::container_address`] answers), from the same inspection.
    pub address: Option<std::net::IpAddr>,
    /// Where this server reaches its agent while it runs (`host:port`):
    /// its address and the agent's port, or, on a host whose data plane is
    /// published, the host's address and the published port.
    pub agent_addr: Option<String>,
}

/// How this server reaches a port of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// Straight to the sandbox's address on its Docker network.
    Direct(std::net::SocketAddr),
    /// Through the sandbox's agent at `host:port` (its published port), with
    /// the sandbox's token: the agent's `/stockade/forward`.
    ViaAgent(String),
}

/// A container carrying Stockade's labels, found by [`Inspect::list_managed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedContainer {
    pub container_id: String,
    pub sandbox_id: Option<SandboxId>,
    pub instance_id: Option<String>,
    /// Its processes exist (a frozen container runs too).
    pub running: bool,
    /// Frozen by the cgroup freezer.
    pub paused: bool,
    /// A warm-pool member's class; `None` for any other container.
    pub pool_class: Option<String>,
    /// The version of the container's agent, as in [`ContainerState::agent`].
    pub agent: Option<String>,
}

/// The agent version a container's labels name: [`labels::AGENT`] when it is
/// not empty.
pub fn agent_of<'a>(labels: impl Fn(&str) -> Option<&'a String>) -> Option<String> {
    labels(labels::AGENT).filter(|v| !v.is_empty()).cloned()
}

/// A Stockade volume (`agent-sandbox-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeInfo {
    pub name: VolumeName,
    pub created_at: Option<DateTime<Utc>>,
    /// Disk usage in bytes, when the engine reports it.
    pub size_bytes: Option<u64>,
    pub instance_id: Option<String>,
    /// The owner named by the volume's `io.stockade.account-id` label.
    pub account_id: Option<String>,
    /// A running container mounts it.
    pub in_use: bool,
    /// The volume of a warm-pool member (it has no account label).
    pub pool_member: bool,
}

/// A command to run inside a running sandbox.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// Written to the process's stdin, which is then closed.
    pub stdin: Option<Vec<u8>>,
    /// Kill the process after this long.
    pub timeout: Option<Duration>,
    /// Keep at most this many bytes of stdout and of stderr each; `0` means
    /// [`DEFAULT_MAX_OUTPUT_BYTES`].
    pub max_output_bytes: usize,
}

/// The output cap of an [`ExecSpec`] that sets none (`max_output_bytes: 0`).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 16 * 1024 * 1024;

/// The buffered result of [`Exec::exec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// `None` when the process was killed by the timeout.
    pub exit_code: Option<i64>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub timed_out: bool,
    /// Output beyond `max_output_bytes` was dropped.
    pub truncated: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_image_answers_only_to_its_own_name() {
        let labels = std::collections::HashMap::from([(
            SNAPSHOT_LABEL.to_owned(),
            "s4n7q2b9x1kd".to_owned(),
        )]);
        assert!(check_snapshot_image("stockade-snapshot:s4n7q2b9x1kd", Some(&labels)).is_ok());
        for other in [
            "9f3c1a",
            "sha256:9f3c1a2b",
            "innocent:1",
            "stockade-snapshot:aaaaaaaaaaaa",
            "docker.io/library/stockade-snapshot:s4n7q2b9x1kd",
        ] {
            let e = check_snapshot_image(other, Some(&labels)).unwrap_err();
            assert!(
                matches!(e, RuntimeError::ImageUnavailable { .. }),
                "{other}: {e}"
            );
        }
        // A template's image answers to its own name only, whatever its
        // base carried (blanked at commit).
        let build = "0b6c5a43-7c1e-4d2a-9f3e-2b8d1c0a9e11";
        let template: std::collections::HashMap<_, _> = own_image_labels(TEMPLATE_LABEL, build)
            .into_iter()
            .collect();
        assert!(
            check_snapshot_image(&format!("stockade-template:{build}"), Some(&template)).is_ok()
        );
        assert!(check_snapshot_image("stockade-snapshot:s4n7q2b9x1kd", Some(&template)).is_err());
        assert!(
            check_snapshot_image(&format!("stockade-template-layer:{build}"), Some(&template))
                .is_err()
        );
        // Images without the label (or with a blank one) are anyone's.
        assert!(check_snapshot_image("node:20", None).is_ok());
        let blank = std::collections::HashMap::from([(SNAPSHOT_LABEL.to_owned(), String::new())]);
        assert!(check_snapshot_image("node:20", Some(&blank)).is_ok());
    }
}
