//! Server configuration: where it listens and the sandbox defaults it applies.

use std::net::SocketAddr;
use std::time::Duration;

use stockade_blob::BlobConfig;
use stockade_core::Defaults;

/// Everything the server needs besides its store and runtime.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Defaults and bounds for new sandboxes.
    pub defaults: Defaults,
    /// Grace period of a stop without `?timeout=` (LC-4: 30 s).
    pub stop_grace: Duration,
    /// The longest `?timeout=` a stop accepts.
    pub max_stop_grace: Duration,
    /// How the Docker daemon is reached, for troubleshooting messages.
    pub docker_host: String,
    /// How often records and containers are reconciled (DB-6).
    pub reconcile_interval: Duration,
    /// A PROVISIONING record older than this belongs to a create that died.
    pub provisioning_grace: Duration,
    /// Where snapshots' workspaces, syncs and uploads are kept (S3-1).
    pub blob_store: BlobConfig,
    /// Limits of git / tarball / upload sources (LC-11).
    pub sources: SourceLimits,
}

/// How much the server fetches on a user's behalf for a create source.
#[derive(Debug, Clone)]
pub struct SourceLimits {
    /// Largest archive (download or upload) and largest cloned repository.
    pub max_archive_bytes: u64,
    /// Largest total of the files an archive unpacks to.
    pub max_unpacked_bytes: u64,
    /// A clone or download that takes longer fails.
    pub fetch_timeout: Duration,
    /// How long an upload waits to be used.
    pub upload_ttl: Duration,
    /// Refuse source URLs whose host resolves to a loopback, private or
    /// link-local address (SSRF guard). Off by default.
    pub deny_private_networks: bool,
}

impl Default for SourceLimits {
    fn default() -> Self {
        Self {
            max_archive_bytes: 1 << 30,
            max_unpacked_bytes: 10 << 30,
            fetch_timeout: Duration::from_secs(300),
            upload_ttl: Duration::from_secs(24 * 3600),
            deny_private_networks: false,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7433)),
            defaults: Defaults::default(),
            stop_grace: Duration::from_secs(30),
            max_stop_grace: Duration::from_secs(600),
            docker_host: "unix:///var/run/docker.sock".into(),
            reconcile_interval: Duration::from_secs(30),
            provisioning_grace: Duration::from_secs(600),
            // The binary uses `<data dir>/blobs`; a library user sets its own.
            blob_store: BlobConfig::Local {
                dir: std::env::temp_dir().join("stockade-blobs"),
            },
            sources: SourceLimits::default(),
        }
    }
}
