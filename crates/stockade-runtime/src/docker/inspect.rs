//! Facts about the Docker engine and Stockade's containers: version and
//! host size (cached after the first answer), a container's state, the
//! managed containers, addresses (`ports.rs`) and usage (`stats.rs`).

use std::collections::HashMap;

use async_trait::async_trait;
use bollard::container::{InspectContainerOptions, ListContainersOptions};
use stockade_core::SandboxId;

use super::{container_name, parse_time, status_code, DockerRuntime, PROBE_TIMEOUT};
use crate::{
    labels, ContainerState, ContainerStats, Inspect, ManagedContainer, RuntimeInfo, RuntimeResult,
};

#[async_trait]
impl Inspect for DockerRuntime {
    async fn info(&self) -> RuntimeResult<RuntimeInfo> {
        let probe = async {
            let docker = self.client().await?;
            let (version, info) = tokio::join!(docker.version(), docker.info());
            let version = version.map_err(|e| self.map_err(e, "docker version"))?;
            let info = info.map_err(|e| self.map_err(e, "docker info"))?;
            let mut runtimes: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
            runtimes.sort();
            Ok(RuntimeInfo {
                version: version.version.unwrap_or_default(),
                api_version: version.api_version.unwrap_or_default(),
                os: version.os.unwrap_or_default(),
                arch: version.arch.unwrap_or_default(),
                runtimes,
            })
        };
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(result) => result,
            Err(_) => Err(self.no_answer()),
        }
    }

    fn server_name(&self) -> String {
        self.config.server_name.clone()
    }

    async fn inspect(&self, id: &SandboxId) -> RuntimeResult<Option<ContainerState>> {
        let docker = self.client().await?;
        let inspected = match docker
            .inspect_container(&container_name(id), None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => c,
            Err(e) if status_code(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(self.map_err(e, "inspect container")),
        };
        let state = inspected.state.unwrap_or_default();
        let running = state.running.unwrap_or(false);
        let finished_at = parse_time(state.finished_at.as_deref());
        Ok(Some(ContainerState {
            container_id: inspected.id.unwrap_or_default(),
            running,
            started_at: parse_time(state.started_at.as_deref()),
            exit_code: if running || finished_at.is_none() {
                None
            } else {
                state.exit_code
            },
            finished_at,
            oom_killed: state.oom_killed.unwrap_or(false),
        }))
    }

    async fn list_managed(&self) -> RuntimeResult<Vec<ManagedContainer>> {
        let docker = self.client().await?;
        let mut filters = HashMap::new();
        filters.insert(
            "label".to_owned(),
            vec![format!("{}=true", labels::MANAGED)],
        );
        let containers = docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters,
                ..Default::default()
            }))
            .await
            .map_err(|e| self.map_err(e, "list containers"))?;
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
                    running: c.state.as_deref() == Some("running"),
                    pool_class: crate::pool_class_of(|k| labels.get(k)),
                })
            })
            .collect())
    }

    async fn container_address(&self, id: &SandboxId) -> RuntimeResult<Option<std::net::IpAddr>> {
        self.container_address_inner(id).await
    }

    async fn stats(&self, id: &SandboxId) -> RuntimeResult<Option<ContainerStats>> {
        self.stats_sample(id).await
    }
}
