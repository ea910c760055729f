//! Server configuration: where it listens, what its HTTP surface allows, and
//! the service configuration it passes on.

use std::net::SocketAddr;
use std::time::Duration;

use stockade_service::ServiceConfig;

use crate::ratelimit::settings::RateLimitConfig;
use crate::serve::ConnectionLimits;

/// Everything the server needs besides its store and runtime.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// How the Docker daemon is reached, for troubleshooting messages.
    pub docker_host: String,
    /// Host-form proxy domain: `{port}-{id}.{proxy_domain}` reaches a
    /// sandbox's exposed port; `None` = path form (`/proxy/{id}/{port}/`) only.
    /// Lower case, optionally with `:port`; see [`crate::proxy::parse_proxy_domain`].
    pub proxy_domain: Option<String>,
    /// Lifetime of a sandbox auth token that asks for none.
    pub sandbox_token_ttl: Duration,
    /// How often an idle SSE stream gets a keep-alive comment.
    pub sse_keep_alive: Duration,
    /// Rate limits of the API and of the traffic into sandboxes (see
    /// [`crate::ratelimit`]); `None` turns them off.
    pub rate_limit: Option<RateLimitConfig>,
    /// When set, `GET /metrics` needs `Authorization: Bearer <this>`.
    pub metrics_token: Option<String>,
    /// On shutdown, how long requests in flight may take to finish.
    pub shutdown_grace: Duration,
    /// The connection cap and the header and idle timeouts.
    pub connections: ConnectionLimits,
    /// Sandbox defaults, limits, background tasks, object store, warm pool.
    pub service: ServiceConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7433)),
            docker_host: "unix:///var/run/docker.sock".into(),
            proxy_domain: None,
            sandbox_token_ttl: Duration::from_secs(3600),
            sse_keep_alive: Duration::from_secs(15),
            rate_limit: Some(RateLimitConfig::default()),
            metrics_token: None,
            shutdown_grace: Duration::from_secs(10),
            connections: ConnectionLimits::default(),
            service: ServiceConfig::default(),
        }
    }
}
