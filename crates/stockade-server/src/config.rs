//! Server configuration: where it listens and the sandbox defaults it applies.

use std::net::SocketAddr;
use std::time::Duration;

use stockade_core::Defaults;

use crate::ratelimit::RateLimitConfig;
use crate::usage::UsageConfig;

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
    /// Rate limits of `/api/v1` (API-12); `None` turns them off.
    pub rate_limit: Option<RateLimitConfig>,
    /// When set, `GET /metrics` needs `Authorization: Bearer <this>`.
    pub metrics_token: Option<String>,
    /// How the live figures of sandbox details are measured (API-3).
    pub usage: UsageConfig,
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
            rate_limit: Some(RateLimitConfig::default()),
            metrics_token: None,
            usage: UsageConfig::default(),
        }
    }
}
