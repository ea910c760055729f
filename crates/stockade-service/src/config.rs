//! The service's configuration: sandbox defaults, limits, intervals of the
//! background tasks, the object store, the warm pool and admission control.

pub use crate::error::ConfigError;
use std::time::Duration;

use stockade_blob::BlobConfig;
use stockade_core::Defaults;

use crate::observe::usage::UsageConfig;
use crate::sandbox::pool::PoolConfig;

/// What a local object store leaves free on its file system by default.
pub const DEFAULT_BLOB_KEEP_FREE_BYTES: u64 = 1 << 30;

/// The default unpack ceiling: 4096 MiB.
pub const DEFAULT_MAX_UNPACKED_BYTES: u64 = 4096 << 20;

/// Everything the service needs besides its store and runtime.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Defaults and bounds for new sandboxes.
    pub defaults: Defaults,
    /// Grace period of a stop without `?timeout=` (30 s).
    pub stop_grace: Duration,
    /// The longest `?timeout=` a stop accepts.
    pub max_stop_grace: Duration,
    /// How often records and containers are reconciled.
    pub reconcile_interval: Duration,
    /// How long an operation's lease lasts without a renewal: when the
    /// instance holding it dies, another finishes or rolls it back this long
    /// after its last heartbeat.
    pub operation_lease: Duration,
    /// How long an operation waits for another one in progress on the same
    /// sandbox before it gives up with a conflict.
    pub operation_wait: Duration,
    /// How long a retried create waits for the first create with its
    /// `Idempotency-Key` to finish.
    pub create_wait: Duration,
    /// How long a labelled container without a record is left alone before
    /// reconciliation removes it.
    pub orphan_grace: Duration,
    /// Logs and exec: output kept per stream of a buffered
    /// exec or a background process.
    pub max_exec_output_bytes: usize,
    /// Timeout of an exec that names none (background processes have none).
    pub default_exec_timeout: Duration,
    /// The longest `timeoutSeconds` an exec accepts.
    pub max_exec_timeout: Duration,
    /// Background processes one sandbox may have listed at once.
    pub max_processes_per_sandbox: usize,
    /// Largest file write or archive upload, as sent; more is refused.
    pub max_file_bytes: u64,
    /// The unpack ceiling: the most an archive's files may unpack
    /// to, on every path that unpacks one — the files API's archive upload,
    /// `POST /uploads`, git, tarball and upload sources, snapshot restores,
    /// forks and snapshot captures. Counted while the archive streams.
    pub max_unpacked_bytes: u64,
    /// How the live figures of sandbox details are measured.
    pub usage: UsageConfig,
    /// How often ended sessions are looked for.
    pub session_check_interval: Duration,
    /// How often the running sandboxes' disks are measured where the
    /// engine cannot cap an area of them (`disk_watch.rs`).
    pub disk_check_interval: Duration,
    /// How long an instance that claimed an ended session has to stop or
    /// terminate the sandbox before another instance may try.
    pub session_claim_lease: Duration,
    /// Where snapshots' workspaces, syncs and uploads are kept.
    pub blob_store: BlobConfig,
    /// A local object store stops storing when its file system would have
    /// less free than this: the database (by default on the same disk)
    /// keeps room to write.
    pub blob_keep_free_bytes: u64,
    /// Limits of git / tarball / upload sources.
    pub sources: crate::content::sources::SourceLimits,
    /// The warm pool; no classes by default.
    pub pool: PoolConfig,
    /// The images tenants may name in `dockerImage`.
    pub images: crate::content::images::ImagePolicy,
    /// Sandboxes one bulk operation works on at once.
    pub bulk_concurrency: usize,
    /// How long a template build may take, its steps together.
    pub template_build_timeout: Duration,
    /// How long a template build's cache layer is kept after the last
    /// build that made or used it.
    pub template_cache_ttl: Duration,
    /// The egress filter of network policies.
    pub egress: crate::net::egress::EgressSettings,
    /// Admission control per Docker host and the quota of new
    /// accounts.
    pub admission: crate::fleet::admission::AdmissionConfig,
    /// Registered Docker hosts: how they are connected and checked
    ///.
    pub hosts: crate::fleet::hosts::HostsConfig,
    /// Event and audit retention, webhook deliveries.
    pub events: crate::events::EventsConfig,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            defaults: Defaults::default(),
            stop_grace: Duration::from_secs(30),
            max_stop_grace: Duration::from_secs(600),
            reconcile_interval: Duration::from_secs(30),
            operation_lease: Duration::from_secs(15),
            operation_wait: Duration::from_secs(120),
            create_wait: Duration::from_secs(600),
            orphan_grace: Duration::from_secs(60),
            max_exec_output_bytes: 1024 * 1024,
            default_exec_timeout: Duration::from_secs(300),
            max_exec_timeout: Duration::from_secs(24 * 3600),
            max_processes_per_sandbox: 64,
            max_file_bytes: 100 * 1024 * 1024,
            max_unpacked_bytes: DEFAULT_MAX_UNPACKED_BYTES,
            usage: UsageConfig::default(),
            session_check_interval: Duration::from_secs(1),
            disk_check_interval: Duration::from_secs(30),
            session_claim_lease: Duration::from_secs(120),
            // The binary uses `<data dir>/blobs`; a library user sets its own.
            blob_store: BlobConfig::Local {
                dir: std::env::temp_dir().join("stockade-blobs"),
            },
            blob_keep_free_bytes: DEFAULT_BLOB_KEEP_FREE_BYTES,
            sources: crate::content::sources::SourceLimits::default(),
            pool: PoolConfig::default(),
            images: crate::content::images::ImagePolicy::default(),
            bulk_concurrency: 8,
            template_build_timeout: Duration::from_secs(30 * 60),
            template_cache_ttl: Duration::from_secs(7 * 24 * 3600),
            egress: crate::net::egress::EgressSettings::default(),
            admission: crate::fleet::admission::AdmissionConfig::default(),
            hosts: crate::fleet::hosts::HostsConfig::default(),
            events: crate::events::EventsConfig::default(),
        }
    }
}
