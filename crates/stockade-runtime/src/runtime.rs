//! What a runtime does, cut into small role traits ([`Lifecycle`], [`Exec`],
//! [`Files`], …) that [`Runtime`] bundles: callers hold `Arc<dyn Runtime>`,
//! while a test double or a wrapper can implement one role at a time.

use std::collections::BTreeMap;
use std::time::Duration;

use std::net::IpAddr;

use async_trait::async_trait;
use stockade_core::netpolicy::EgressPolicy;
use stockade_core::{SandboxId, SandboxPath, VolumeName};
use stockade_egress::iptables::RedirectPorts;

use crate::{
    ArchiveStream, ArchiveUpload, ByteStream, ContainerSpec, ContainerState, ContainerStats,
    DiskEnforcement, DiskUsage, EgressEntry, EgressHost, ExecOutput, ExecProcess, ExecSpec,
    FsResult, IsolationReport, LogLines, LogsOptions, ManagedContainer, PathStat, PoolMemberSpec,
    RuntimeInfo, RuntimeResult, VolumeInfo,
};

/// Declares `Runtime` as all of the given roles together, implemented for
/// each type that implements them all (the list is written once).
macro_rules! all_roles {
    ($(#[$doc:meta])* pub trait $name:ident: $first:ident $(+ $role:ident)*) => {
        $(#[$doc])*
        pub trait $name: $first $(+ $role)* + 'static {}

        impl<T> $name for T where T: $first $(+ $role)* + 'static {}
    };
}

all_roles! {
    /// Creates, runs and removes sandbox containers and their volumes: every
    /// role below. Implemented for each type that implements them all.
    pub trait Runtime:
        Inspect + Lifecycle + Exec + Logs + Files + Volumes + Update + Snapshots + Isolation + Egress + Disk
}

/// Facts about the engine and its containers.
#[async_trait]
pub trait Inspect: Send + Sync {
    /// Engine version facts and the host's size; `Unavailable` when it does
    /// not answer.
    async fn info(&self) -> RuntimeResult<RuntimeInfo>;

    /// A short name of the engine host ("server location").
    fn server_name(&self) -> String;

    /// The container's state; `None` when there is no container.
    async fn inspect(&self, id: &SandboxId) -> RuntimeResult<Option<ContainerState>>;

    /// Every container labelled as Stockade's.
    async fn list_managed(&self) -> RuntimeResult<Vec<ManagedContainer>>;

    /// The IP address the sandbox's container has on its Docker network,
    /// which the reverse proxy connects to (no port is published on the
    /// host). `None` when the container is not running or has no network
    /// (`networkAccess: false`);
    /// `NotFound` when there is no container.
    async fn container_address(&self, id: &SandboxId) -> RuntimeResult<Option<std::net::IpAddr>>;

    /// How this server reaches `port` of the sandbox: straight to its
    /// address, or through its agent on a host whose data plane is
    /// published. `None` when it does not run (or has no network).
    async fn port_upstream(
        &self,
        id: &SandboxId,
        port: u16,
    ) -> RuntimeResult<Option<crate::Upstream>> {
        Ok(self
            .container_address(id)
            .await?
            .map(|ip| crate::Upstream::Direct(std::net::SocketAddr::new(ip, port))))
    }

    /// One sample of the sandbox's resource usage; `None` when it has no
    /// running container. May take a second or two (the engine samples twice
    /// to measure CPU).
    async fn stats(&self, id: &SandboxId) -> RuntimeResult<Option<ContainerStats>>;
}

/// Images, and creating, starting, stopping and removing sandboxes.
#[async_trait]
pub trait Lifecycle: Send + Sync {
    /// Makes sure `image` is present, pulling it when missing.
    async fn ensure_image(&self, image: &str) -> RuntimeResult<()>;

    /// Whether `image` is present on the engine already, without pulling it
    /// (one local inspect: fast, no registry traffic). For the start banner
    /// and `/health`.
    async fn image_present(&self, image: &str) -> RuntimeResult<bool>;

    /// The content id of `image` when it is present (`sha256:…`); what a
    /// template build's cache keys on, so that a base image pulled anew
    /// builds anew. Engines that cannot tell say `None`.
    async fn image_id(&self, image: &str) -> RuntimeResult<Option<String>> {
        let _ = image;
        Ok(None)
    }

    /// Creates the volume `agent-sandbox-{id}` (if absent) and the container
    /// with the volume mounted at `/workspace`, and starts it. On any failure
    /// nothing it made is left behind. Returns the container id.
    async fn create(&self, spec: &ContainerSpec) -> RuntimeResult<String>;

    /// Creates and starts a warm-pool member: the volume and the
    /// container a create of the same settings would make, labelled as in
    /// [`PoolMemberSpec::labels`]. On any failure nothing it made is left
    /// behind. Returns the container id.
    async fn create_pool_member(&self, spec: &PoolMemberSpec) -> RuntimeResult<String>;

    /// Starts the sandbox's container; already running is fine.
    async fn start(&self, id: &SandboxId) -> RuntimeResult<()>;

    /// SIGTERM, wait up to `grace`, then SIGKILL. Already stopped is fine.
    async fn stop(&self, id: &SandboxId, grace: Duration) -> RuntimeResult<()>;

    /// Freezes every process of the running container (the cgroup
    /// freezer); already frozen is fine. `Conflict` when it is not running,
    /// `NotFound` when there is no container.
    async fn pause(&self, id: &SandboxId) -> RuntimeResult<()>;

    /// Thaws a frozen container; one that is not frozen is fine. `Conflict`
    /// when it is not running, `NotFound` when there is no container.
    async fn unpause(&self, id: &SandboxId) -> RuntimeResult<()>;

    /// Removes the container (gone already is fine) and, unless
    /// `preserve_volume`, its volume.
    async fn remove(&self, id: &SandboxId, preserve_volume: bool) -> RuntimeResult<()>;
}

/// Commands in a running sandbox, buffered or streamed.
#[async_trait]
pub trait Exec: Send + Sync {
    /// Runs a command in the running sandbox and collects its output.
    async fn exec(&self, id: &SandboxId, spec: ExecSpec) -> RuntimeResult<ExecOutput>;

    /// Starts a command in the running sandbox and streams its output
    /// (`spec.max_output_bytes` does not apply: nothing is buffered). The
    /// timeout of `spec`, if any, kills it. `Conflict` when the sandbox is not
    /// running.
    async fn exec_start(&self, id: &SandboxId, spec: ExecSpec) -> RuntimeResult<ExecProcess>;

    /// Kills a process started by [`exec_start`](Self::exec_start) and its
    /// children (SIGKILL); one that has exited already is fine.
    async fn exec_kill(&self, id: &SandboxId, exec_id: &str) -> RuntimeResult<()>;
}

/// The main process's output.
#[async_trait]
pub trait Logs: Send + Sync {
    /// The main process's output as lines with the engine's timestamps,
    /// stdout and stderr apart. A line is yielded once its newline came (a
    /// final line without one when the stream ends), however the engine
    /// split it. `NotFound` when the sandbox has no container. With
    /// `follow` the stream stays open until the container stops.
    async fn logs(&self, id: &SandboxId, options: LogsOptions) -> RuntimeResult<LogLines>;
}

/// Files. The engine resolves every path, symlinks included, inside
/// the sandbox's own root.
#[async_trait]
pub trait Files: Send + Sync {
    /// `lstat` of a path (a symlink is reported as one, with the path it
    /// resolves to). Works on stopped sandboxes too.
    async fn stat_path(&self, id: &SandboxId, path: &SandboxPath) -> FsResult<PathStat>;

    /// A tar archive of `path`, its entries named from the path's last
    /// component down (a symlink at `path` is archived as the link). Works on
    /// stopped sandboxes. A missing path is `NotFound` before any byte.
    async fn read_archive(&self, id: &SandboxId, path: &SandboxPath) -> FsResult<ArchiveStream>;

    /// Unpacks a tar archive into the existing directory `dir` (files are
    /// replaced, a symlink in the archive's place is replaced, not followed).
    async fn write_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
        archive: ArchiveUpload,
    ) -> FsResult<()>;

    /// Removes `path` (a directory only when empty, unless `recursive`; a
    /// symlink itself, not its target). Needs a running sandbox: `NotRunning`.
    async fn delete_path(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
        recursive: bool,
    ) -> FsResult<()>;
}

/// Stockade's volumes.
#[async_trait]
pub trait Volumes: Send + Sync {
    /// Stockade's volumes, with sizes where the engine reports them.
    async fn list_volumes(&self) -> RuntimeResult<Vec<VolumeInfo>>;

    /// Removes a volume; `Conflict` when a container uses it.
    async fn remove_volume(&self, name: &VolumeName) -> RuntimeResult<()>;

    /// The disk usage of one volume in bytes, from a measurement that started
    /// at most `max_age` ago (measuring walks every volume: slow on big
    /// hosts). `None` when the engine does not report it.
    async fn volume_size(&self, name: &VolumeName, max_age: Duration)
        -> RuntimeResult<Option<u64>>;

    /// Makes the Docker volume of a shared volume, labelled with `labels`
    /// and capped at `size_bytes` where the engine can cap it (as a
    /// sandbox's `/workspace`); nothing when it exists already.
    async fn create_shared_volume(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        size_bytes: Option<u64>,
    ) -> RuntimeResult<()>;

    /// Makes sure each shared volume of `mounts` exists and is whole before
    /// a container that mounts it starts (a volume capped by a file system
    /// of its own has it mounted again after a reboot); `NotFound` naming
    /// the first that is missing.
    async fn prepare_shared_volumes(&self, mounts: &[crate::SharedMount]) -> RuntimeResult<()>;

    /// Removes a shared volume's Docker volume and its files helper (nothing
    /// when they are gone already); `Conflict` when a sandbox's container
    /// still mounts it.
    async fn remove_shared_volume(&self, name: &str) -> RuntimeResult<()>;

    /// A tar stream of everything shared volume `name` holds (entries
    /// relative to its root), read through its files helper's container
    /// (made when missing, with `token`; it need not run).
    async fn export_shared_volume(&self, name: &str, token: &str) -> RuntimeResult<ByteStream>;

    /// Unpacks `archive` into shared volume `name` through its files
    /// helper's container (made when missing, with `token`).
    async fn import_shared_volume(
        &self,
        name: &str,
        token: &str,
        archive: ByteStream,
    ) -> RuntimeResult<()>;

    /// Starts (or finds running) the files helper of shared volume `name`:
    /// a container of no image content whose PID 1 is the agent, accepting
    /// `token`, with the volume at [`crate::VOLUME_HELPER_ROOT`] and no
    /// network beyond the server. Where the server reaches its agent.
    async fn volume_helper(&self, name: &str, token: &str) -> RuntimeResult<String>;

    /// Stops the files helper of `name` (kept for its next use; nothing
    /// when there is none).
    async fn stop_volume_helper(&self, name: &str) -> RuntimeResult<()>;
}

/// Changes to a sandbox after create.
#[async_trait]
pub trait Update: Send + Sync {
    /// Sets the CPU and memory limits (memory + swap = `memory_bytes`) of the
    /// sandbox's container: at once when it runs, and for every later start.
    async fn update_resources(
        &self,
        id: &SandboxId,
        cpu_cores: f64,
        memory_bytes: i64,
    ) -> RuntimeResult<()>;

    /// Makes `env` the environment of the sandbox's main process from its
    /// next start on (a running process keeps the one it started with).
    /// Variables given at create but missing from `env` are removed.
    async fn set_main_process_env(
        &self,
        id: &SandboxId,
        env: &BTreeMap<String, String>,
    ) -> RuntimeResult<()>;
}

/// Snapshots, forks and workspace sources.
#[async_trait]
pub trait Snapshots: Send + Sync {
    /// Commits the sandbox's container — its root-filesystem changes, not
    /// the `/workspace` volume — as the image `image_ref` (`repo:tag`),
    /// carrying `labels`. The container is paused while Docker commits.
    async fn commit_snapshot(
        &self,
        id: &SandboxId,
        image_ref: &str,
        labels: &BTreeMap<String, String>,
    ) -> RuntimeResult<()>;

    /// Removes an image; an absent one is fine; `Conflict` while a container
    /// (running or not) is made from it.
    async fn remove_image(&self, image_ref: &str) -> RuntimeResult<()>;

    /// The sandbox's `/workspace` as an uncompressed tar stream, entries
    /// relative to it (`./…`), owners and modes kept. Works on a stopped
    /// container too; `NotFound` without a container.
    async fn export_workspace(&self, id: &SandboxId) -> RuntimeResult<ByteStream>;

    /// [`Lifecycle::create`], with `archive` (a tar: plain, gzip, bzip2 or
    /// xz) unpacked into `/workspace` after the container is made and before
    /// its main process starts. If anything fails, nothing it made is left.
    async fn create_with_workspace(
        &self,
        spec: &ContainerSpec,
        archive: ByteStream,
    ) -> RuntimeResult<String>;

    /// The image `image_ref` with its layers as one archive (`docker
    /// save`), to be loaded on another engine; `NotFound` when absent.
    async fn export_image(&self, image_ref: &str) -> RuntimeResult<ByteStream>;

    /// Loads the images of an archive [`Snapshots::export_image`] made
    /// (`docker load`).
    async fn import_image(&self, archive: ByteStream) -> RuntimeResult<()>;
}

/// Network isolation of sandboxes from each other and from the host.
#[async_trait]
pub trait Isolation: Send + Sync {
    /// Makes sure sandboxes are isolated: creates what is missing (networks,
    /// packet-filter rules), checks what is there and repairs it. Never
    /// fails: what could not be applied, and why, is in the report. Meant
    /// to be called at server start and periodically; the last report is
    /// what `/health` shows.
    async fn ensure_isolation(&self) -> IsolationReport;
}

/// Egress policies, the packet-filter half: per sandbox, chains
/// that reject what its policy denies and redirect its DNS (and, for
/// policies naming hosts, its TCP 80/443) to the host's egress filter.
/// Sandboxes without network access sit on the internal network and have
/// none; a sandbox on the sandbox network without an entry reaches nothing
/// outside (fail closed) until one is applied.
#[async_trait]
pub trait Egress: Send + Sync {
    /// Where the egress filter must listen (the sandbox network's gateway)
    /// and what it must never dial (every Docker network's subnet), or why
    /// policies cannot be enforced on this host (`Unavailable`: no packet
    /// filter, no sandbox network).
    async fn egress_host(&self) -> RuntimeResult<EgressHost>;

    /// Writes `policy` for the sandbox at its current address on the
    /// sandbox network, replacing what an earlier call (or another sandbox
    /// that had the address) left; `ports` are where the filter listens
    /// (`None`: it does not run, and only policies without host names can
    /// be applied). Returns the address, `None` when the sandbox is not on
    /// the sandbox network (not running, or without network access).
    async fn apply_egress(
        &self,
        id: &SandboxId,
        policy: &EgressPolicy,
        ports: Option<RedirectPorts>,
    ) -> RuntimeResult<Option<IpAddr>>;

    /// Removes the entries of the sandboxes `ids` (in one change of the
    /// packet filter); the addresses they were for.
    async fn remove_egress(&self, ids: &[SandboxId]) -> RuntimeResult<Vec<IpAddr>>;

    /// The removals of entries that callers queued on this host and make
    /// behind the answers of their stops and destroys; every container
    /// start (and move to the sandbox network) here waits for those queued
    /// before it, so no new container takes an address while the old
    /// sandbox's entry still holds it. `None`: this runtime writes no
    /// entries.
    fn pending_removals(&self) -> Option<std::sync::Arc<crate::PendingRemovals>> {
        None
    }

    /// Every sandbox entry of this configuration's chains (all servers').
    async fn egress_entries(&self) -> RuntimeResult<Vec<EgressEntry>>;

    /// The sandboxes whose entry does not keep them from the private ranges
    /// as this configuration's opt-in says (written under another
    /// `--egress-allow-private`, or before there was one): to be written
    /// again. None where the packet filter is not applied.
    async fn stale_private_entries(&self) -> RuntimeResult<Vec<SandboxId>> {
        Ok(Vec::new())
    }

    /// Removes the entries whose sandbox does not run at that address on
    /// the sandbox network any more (stopped behind Stockade's back,
    /// removed, moved); the entries removed.
    async fn prune_egress(&self) -> RuntimeResult<Vec<EgressEntry>>;

    /// Moves a running sandbox to the network its access asks for (the
    /// sandbox network or the internal one), keeping it running; `true`
    /// when it moved. A stopped one is moved as well (it starts there).
    async fn set_network_access(&self, id: &SandboxId, network_access: bool)
        -> RuntimeResult<bool>;
}

/// Disk quotas: what the engine can cap, and what a sandbox uses.
#[async_trait]
pub trait Disk: Send + Sync {
    /// Whether `diskSizeGB` is enforced on this engine, for `/workspace`
    /// and for the root filesystem, and why not. Probed once (through the
    /// engine's API, so remote engines too) and cached; never fails: an
    /// engine that does not answer is reported as not enforcing (and asked
    /// again next time). Creates apply what this says.
    async fn disk_enforcement(&self) -> DiskEnforcement;

    /// The sandbox's disk use and the limits enforced on it; `None` when it
    /// has no container. Sizes the engine measures by walking files (the
    /// root filesystem; `/workspace` unless its quota says) may take a
    /// while on big sandboxes; `/workspace` comes from a measurement at
    /// most `max_age` old where it is measured for every volume at once.
    async fn disk_usage(
        &self,
        id: &SandboxId,
        max_age: Duration,
    ) -> RuntimeResult<Option<DiskUsage>>;

    /// Waits until the volumes' own file systems that removals left to be
    /// taken down behind their answers are gone (at shutdown).
    async fn finish_disk_removals(&self) {}
}
