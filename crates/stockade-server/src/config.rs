//! Server configuration: where it listens and the sandbox defaults it applies.

use std::net::SocketAddr;
use std::time::Duration;

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
    /// How often ended sessions are looked for (LC-7).
    pub session_check_interval: Duration,
    /// How long an instance that claimed an ended session has to stop or
    /// terminate the sandbox before another instance may try (SCALE-2).
    pub session_claim_lease: Duration,
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
            session_check_interval: Duration::from_secs(1),
            session_claim_lease: Duration::from_secs(120),
        }
    }
}
