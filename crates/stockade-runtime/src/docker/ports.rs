//! Where the reverse proxy reaches a sandbox: the container's own
//! address on its Docker network, read from `docker inspect`. Nothing is
//! published on the host, so exposing a port needs no container change.

use std::net::IpAddr;

use bollard::models::ContainerInspectResponse;
use stockade_core::SandboxId;

use crate::{DockerRuntime, RuntimeResult};

impl DockerRuntime {
    pub(crate) async fn container_address_inner(
        &self,
        id: &SandboxId,
    ) -> RuntimeResult<Option<IpAddr>> {
        Ok(address_of(&self.inspected(id).await?))
    }

    /// The sandbox's container as the engine describes it (NotFound
    /// without one).
    async fn inspected(&self, id: &SandboxId) -> RuntimeResult<ContainerInspectResponse> {
        let docker = self.client().await?;
        self.inspect_existing(&docker, id).await
    }
}

impl DockerRuntime {
    /// Where this server reaches the agent of the inspected container: the
    /// published port on [`DockerConfig::publish_address`](super::DockerConfig)
    /// when the host publishes, else its `address` and the agent's port.
    pub(super) fn agent_addr_of(
        &self,
        c: &ContainerInspectResponse,
        address: Option<IpAddr>,
    ) -> Option<String> {
        let running = c.state.as_ref().and_then(|s| s.running).unwrap_or(false);
        if !running {
            return None;
        }
        match &self.config.publish_address {
            None => address.map(|ip| std::net::SocketAddr::new(ip, crate::AGENT_PORT).to_string()),
            Some(host) => {
                let key = format!("{}/tcp", crate::AGENT_PORT);
                let port = c
                    .network_settings
                    .as_ref()?
                    .ports
                    .as_ref()?
                    .get(&key)?
                    .as_ref()?
                    .iter()
                    .find_map(|b| b.host_port.as_deref()?.parse::<u16>().ok())?;
                Some(match host.parse::<IpAddr>() {
                    Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
                    _ => format!("{host}:{port}"),
                })
            }
        }
    }

    /// [`crate::Inspect::port_upstream`] of this engine.
    pub(super) async fn port_upstream_inner(
        &self,
        id: &SandboxId,
        port: u16,
    ) -> RuntimeResult<Option<crate::Upstream>> {
        if self.config.publish_address.is_none() {
            return Ok(self
                .container_address_inner(id)
                .await?
                .map(|ip| crate::Upstream::Direct(std::net::SocketAddr::new(ip, port))));
        }
        let inspected = self.inspected(id).await?;
        let address = address_of(&inspected);
        Ok(self
            .agent_addr_of(&inspected, address)
            .map(crate::Upstream::ViaAgent))
    }
}

/// The first IP address of a running container on any of its networks
/// (IPv4 preferred); `None` when it is stopped or only has loopback
/// (network mode `none`).
pub(super) fn address_of(c: &ContainerInspectResponse) -> Option<IpAddr> {
    let running = c.state.as_ref().and_then(|s| s.running).unwrap_or(false);
    if !running {
        return None;
    }
    let settings = c.network_settings.as_ref()?;
    let mut candidates: Vec<IpAddr> = Vec::new();
    if let Some(networks) = &settings.networks {
        // A stable order: by network name.
        let mut names: Vec<&String> = networks.keys().collect();
        names.sort();
        for name in names {
            let ep = &networks[name];
            for ip in [&ep.ip_address, &ep.global_ipv6_address]
                .into_iter()
                .flatten()
            {
                if let Ok(ip) = ip.parse::<IpAddr>() {
                    candidates.push(ip);
                }
            }
        }
    }
    #[allow(deprecated)]
    if let Some(ip) = settings.ip_address.as_deref().and_then(|s| s.parse().ok()) {
        candidates.push(ip);
    }
    candidates.sort_by_key(|ip| !ip.is_ipv4());
    candidates
        .into_iter()
        .find(|ip| !ip.is_unspecified() && !ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use bollard::models::{ContainerState, EndpointSettings, NetworkSettings};

    use super::*;

    fn container(running: bool, networks: &[(&str, &str, &str)]) -> ContainerInspectResponse {
        ContainerInspectResponse {
            state: Some(ContainerState {
                running: Some(running),
                ..Default::default()
            }),
            network_settings: Some(NetworkSettings {
                networks: Some(
                    networks
                        .iter()
                        .map(|(name, v4, v6)| {
                            (
                                name.to_string(),
                                EndpointSettings {
                                    ip_address: Some(v4.to_string()),
                                    global_ipv6_address: Some(v6.to_string()),
                                    ..Default::default()
                                },
                            )
                        })
                        .collect::<HashMap<_, _>>(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn addresses() {
        let c = container(true, &[("bridge", "172.17.0.2", "")]);
        assert_eq!(address_of(&c), Some("172.17.0.2".parse().unwrap()));
        // Stopped, or only `none` (empty addresses): nothing to reach.
        assert_eq!(
            address_of(&container(false, &[("bridge", "172.17.0.2", "")])),
            None
        );
        assert_eq!(address_of(&container(true, &[("none", "", "")])), None);
        assert_eq!(address_of(&container(true, &[])), None);
        // IPv4 first; IPv6-only works too.
        let c = container(true, &[("a", "", "fd00::2"), ("b", "10.0.0.5", "")]);
        assert_eq!(address_of(&c), Some("10.0.0.5".parse().unwrap()));
        let c = container(true, &[("a", "", "fd00::2")]);
        assert_eq!(address_of(&c), Some("fd00::2".parse().unwrap()));
    }
}
