//! Several Docker hosts (SCALE-4..SCALE-6): the runtime of each registered
//! host, the one every operation on a sandbox goes to (its record's
//! `server`), placement, and the hosts' health.
//!
//! The server's own runtime (`--docker-host`, named `--server-name`) is
//! always a host; others are registered in the database (`hosts` table) and
//! connected here through the [`RuntimeFactory`] the binary gives, the first
//! time one is needed. Every instance reads the same table, so any instance
//! reaches every sandbox.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use stockade_core::{Host, Sandbox};
use stockade_runtime::Runtime;

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// Connects a runtime to a registered host (the binary's Docker settings
/// with the host's `dockerHost`, TLS files and name).
pub trait RuntimeFactory: Send + Sync {
    fn connect(&self, host: &Host) -> Result<Arc<dyn Runtime>, String>;
}

/// Settings of the hosts' registry and health checks.
#[derive(Clone)]
pub struct HostsConfig {
    /// Connects registered hosts; `None`: only the server's own host.
    pub factory: Option<Arc<dyn RuntimeFactory>>,
    /// How often the leader checks every host.
    pub check_interval: Duration,
    /// How long one check may take before it counts as failed.
    pub check_timeout: Duration,
    /// Free bytes of a host's data root under which it counts as unhealthy.
    pub min_free_disk_bytes: u64,
}

impl std::fmt::Debug for HostsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostsConfig")
            .field("factory", &self.factory.is_some())
            .field("check_interval", &self.check_interval)
            .field("check_timeout", &self.check_timeout)
            .field("min_free_disk_bytes", &self.min_free_disk_bytes)
            .finish()
    }
}

impl Default for HostsConfig {
    fn default() -> Self {
        Self {
            factory: None,
            check_interval: Duration::from_secs(3),
            check_timeout: Duration::from_secs(5),
            min_free_disk_bytes: 512 << 20,
        }
    }
}

/// What connects a host: a changed one is connected anew.
fn fingerprint(host: &Host) -> String {
    format!("{}|{:?}|{:?}", host.docker_host, host.tls, host.address)
}

/// The runtimes of the hosts this process has used.
pub struct Hosts {
    own_name: String,
    own: Arc<dyn Runtime>,
    config: HostsConfig,
    connected: RwLock<HashMap<String, (String, Arc<dyn Runtime>)>>,
}

impl std::fmt::Debug for Hosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosts")
            .field("own_name", &self.own_name)
            .finish_non_exhaustive()
    }
}

impl Hosts {
    pub fn new(own: Arc<dyn Runtime>, config: HostsConfig) -> Self {
        Self {
            own_name: own.server_name(),
            own,
            config,
            connected: RwLock::default(),
        }
    }

    pub fn config(&self) -> &HostsConfig {
        &self.config
    }

    /// The name of the server's own host.
    pub fn own_name(&self) -> &str {
        &self.own_name
    }

    /// The server's own runtime.
    pub fn own(&self) -> &Arc<dyn Runtime> {
        &self.own
    }

    /// The runtime of `host`, connected now if it was not (or changed).
    pub fn runtime(&self, host: &Host) -> ServiceResult<Arc<dyn Runtime>> {
        if host.name == self.own_name {
            return Ok(self.own.clone());
        }
        let print = fingerprint(host);
        if let Some((p, rt)) = self
            .connected
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&host.name)
        {
            if *p == print {
                return Ok(rt.clone());
            }
        }
        let factory = self.config.factory.as_ref().ok_or_else(|| {
            ServiceError::DockerUnavailable(format!(
                "host '{}' is registered, but this server connects only its own Docker host",
                host.name
            ))
        })?;
        let rt = factory.connect(host).map_err(|e| {
            ServiceError::DockerUnavailable(format!("host '{}' cannot be reached: {e}", host.name))
        })?;
        self.connected
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(host.name.clone(), (print, rt.clone()));
        Ok(rt)
    }

    /// Forgets the runtime of a host that was removed.
    pub fn forget(&self, name: &str) {
        self.connected
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// The runtime of a host already connected by name (no database read).
    pub fn connected(&self, name: &str) -> Option<Arc<dyn Runtime>> {
        if name == self.own_name {
            return Some(self.own.clone());
        }
        self.connected
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|(_, rt)| rt.clone())
    }
}

impl Service {
    /// The runtime of the host named `server`.
    pub async fn runtime_on(&self, server: &str) -> ServiceResult<Arc<dyn Runtime>> {
        if let Some(rt) = self.hosts.connected(server) {
            return Ok(rt);
        }
        let host = match self.store.get_host(server).await {
            Ok(h) => h,
            Err(stockade_store::StoreError::NotFound) => {
                return Err(ServiceError::DockerUnavailable(format!(
                    "host '{server}' is not registered with this deployment"
                )))
            }
            Err(e) => return Err(e.into()),
        };
        self.hosts.runtime(&host)
    }

    /// The runtime of the host `sb` lives on: every operation on a sandbox
    /// goes through this.
    pub async fn runtime_for(&self, sb: &Sandbox) -> ServiceResult<Arc<dyn Runtime>> {
        self.runtime_on(&sb.server).await
    }
}
