//! Facts about the Docker engine and Stockade's containers: version and
//! host size (the size cached after the first answer), a container's state,
//! the managed containers, addresses (`ports.rs`) and usage (`stats.rs`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bollard::Docker;
use stockade_core::SandboxId;

use super::{parse_time, DockerRuntime, PROBE_TIMEOUT};
use crate::{
    labels, ContainerState, ContainerStats, Inspect, ManagedContainer, RuntimeInfo, RuntimeResult,
};

/// How long the host facts of `docker info` (CPUs, memory, OCI runtimes)
/// are reused: they change rarely (a runtime registered, memory added), and
/// a create that checks the host's size should not wait for them.
const HOST_FACTS_TTL: Duration = Duration::from_secs(60);

/// What the engine said about itself and its host, kept between calls.
#[derive(Debug, Default)]
pub(super) struct EngineFacts {
    /// The engine's version (`20.10.24+dfsg1`), from its first answer.
    pub(super) version: Option<String>,
    /// From `docker info`, with when it was read.
    host: Option<(Instant, HostFacts)>,
}

#[derive(Debug, Clone)]
struct HostFacts {
    cpus: u32,
    memory_bytes: u64,
    runtimes: Vec<String>,
    data_root: Option<String>,
    engine_id: Option<String>,
}

impl DockerRuntime {
    /// Reads the engine's version once a client is connected (best
    /// effort: the seccomp profile depends on it, see `seccomp.rs`).
    pub(super) async fn note_engine_version(&self, docker: &Docker) {
        if let Ok(Ok(v)) = tokio::time::timeout(PROBE_TIMEOUT, docker.version()).await {
            self.engine_facts().version = v.version;
        }
    }

    pub(super) fn engine_facts(&self) -> std::sync::RwLockWriteGuard<'_, EngineFacts> {
        self.engine
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The engine's major version (`20` for 20.10.24), when known.
    pub(super) fn engine_major_version(&self) -> Option<u32> {
        let facts = self
            .engine
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        major_version(facts.version.as_deref()?)
    }

    /// The cached host facts while fresh, else `docker info`'s.
    async fn host_facts(&self, docker: &Docker) -> RuntimeResult<HostFacts> {
        let cached = self
            .engine
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .host
            .clone();
        if let Some((at, facts)) = cached {
            if at.elapsed() < HOST_FACTS_TTL {
                return Ok(facts);
            }
        }
        let info = docker
            .info()
            .await
            .map_err(|e| self.map_err(e, "docker info"))?;
        let mut runtimes: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
        runtimes.sort();
        let facts = HostFacts {
            cpus: info
                .ncpu
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or_default(),
            memory_bytes: info
                .mem_total
                .and_then(|m| u64::try_from(m).ok())
                .unwrap_or_default(),
            runtimes,
            data_root: info.docker_root_dir.filter(|d| !d.is_empty()),
            engine_id: info.id.filter(|d| !d.is_empty()),
        };
        self.engine_facts().host = Some((Instant::now(), facts.clone()));
        Ok(facts)
    }
}

/// `20` for `20.10.24+dfsg1`, `25` for `25.0.3`.
fn major_version(version: &str) -> Option<u32> {
    version.split('.').next()?.trim().parse().ok()
}

#[async_trait]
impl Inspect for DockerRuntime {
    /// Asks the engine for its version every time (this is `/health`'s
    /// probe); the host's size and runtimes come from `docker info`, read
    /// at most once a minute.
    async fn info(&self) -> RuntimeResult<RuntimeInfo> {
        let probe = async {
            let docker = self.client().await?;
            let (version, host) = tokio::join!(docker.version(), self.host_facts(&docker));
            let version = version.map_err(|e| self.map_err(e, "docker version"))?;
            let host = host?;
            self.engine_facts().version = version.version.clone();
            Ok(RuntimeInfo {
                version: version.version.unwrap_or_default(),
                api_version: version.api_version.unwrap_or_default(),
                os: version.os.unwrap_or_default(),
                arch: version.arch.unwrap_or_default(),
                runtimes: host.runtimes,
                cpus: host.cpus,
                memory_bytes: host.memory_bytes,
                data_root: host.data_root,
                engine_id: host.engine_id,
            })
        };
        match tokio::time::timeout(self.probe_timeout(), probe).await {
            Ok(result) => result,
            Err(_) => Err(self.no_answer()),
        }
    }

    fn server_name(&self) -> String {
        self.config.server_name.clone()
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn inspect(&self, id: &SandboxId) -> RuntimeResult<Option<ContainerState>> {
        let docker = self.client().await?;
        let Some(inspected) = self.inspect_sandbox(&docker, id).await? else {
            return Ok(None);
        };
        let agent = inspected
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| crate::agent_of(|k| l.get(k)));
        let address = super::ports::address_of(&inspected);
        let agent_addr = self.agent_addr_of(&inspected, address);
        let state = inspected.state.unwrap_or_default();
        let running = state.running.unwrap_or(false);
        let finished_at = parse_time(state.finished_at.as_deref());
        Ok(Some(ContainerState {
            container_id: inspected.id.unwrap_or_default(),
            running,
            paused: running && state.paused.unwrap_or(false),
            started_at: parse_time(state.started_at.as_deref()),
            exit_code: if running || finished_at.is_none() {
                None
            } else {
                state.exit_code
            },
            finished_at,
            oom_killed: state.oom_killed.unwrap_or(false),
            agent,
            address,
            agent_addr,
        }))
    }

    async fn list_managed(&self) -> RuntimeResult<Vec<ManagedContainer>> {
        let docker = self.client().await?;
        let mut filters = HashMap::new();
        filters.insert(
            "label".to_owned(),
            vec![format!("{}=true", labels::MANAGED)],
        );
        let containers = self.list_containers_by(&docker, true, filters).await?;
        Ok(containers
            .into_iter()
            .filter_map(|c| {
                let labels = c.labels.unwrap_or_default();
                Some(ManagedContainer {
                    container_id: c.id?,
                    sandbox_id: labels
                        .get(labels::SANDBOX_ID)
                        .and_then(|s| SandboxId::parse(s).ok()),
                    instance_id: labels.get(labels::INSTANCE_ID).cloned(),
                    // A frozen container still runs.
                    running: matches!(c.state.as_deref(), Some("running" | "paused")),
                    paused: c.state.as_deref() == Some("paused"),
                    pool_class: crate::pool_class_of(|k| labels.get(k)),
                    agent: crate::agent_of(|k| labels.get(k)),
                })
            })
            .collect())
    }

    async fn container_address(&self, id: &SandboxId) -> RuntimeResult<Option<std::net::IpAddr>> {
        self.container_address_inner(id).await
    }

    async fn port_upstream(
        &self,
        id: &SandboxId,
        port: u16,
    ) -> RuntimeResult<Option<crate::Upstream>> {
        self.port_upstream_inner(id, port).await
    }

    async fn stats(&self, id: &SandboxId) -> RuntimeResult<Option<ContainerStats>> {
        self.stats_sample(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_versions() {
        assert_eq!(major_version("20.10.24+dfsg1"), Some(20));
        assert_eq!(major_version("25.0.3"), Some(25));
        assert_eq!(major_version("29.0.0-rc.1"), Some(29));
        assert_eq!(major_version("dev"), None);
    }
}
