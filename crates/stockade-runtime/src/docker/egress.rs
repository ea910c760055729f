//! Egress policies on a Docker host: the main egress chains and
//! their jumps (made by `ensure_isolation`, which also drops private
//! ranges' chains no sandbox uses any more), each sandbox's entries written
//! with one `iptables-restore` per change, and moving a sandbox between the
//! sandbox network and the internal one when its policy starts or stops
//! allowing anything. The layout is in `crate::egress`.

use std::collections::HashMap;
use std::net::IpAddr;

use async_trait::async_trait;
use bollard::models::EndpointSettings;
use bollard::network::ListNetworksOptions;
use bollard::network::{ConnectNetworkOptions, DisconnectNetworkOptions, InspectNetworkOptions};
use stockade_core::netpolicy::{Cidr, EgressPolicy};
use stockade_core::SandboxId;
use stockade_egress::iptables::RedirectPorts;

use super::network::Iptables;
use super::{container_name, DockerRuntime};
use crate::egress::{apply_script, entries, parse_listing, remove_script, stale_private, Listings};
use crate::{
    Egress, EgressChains, EgressEntry, EgressHost, IsolationReport, RuntimeError, RuntimeResult,
};

impl DockerRuntime {
    fn egress_chains(&self) -> EgressChains {
        EgressChains::for_isolation_chain(&self.config.isolation.chain)
    }

    /// The packet filter, or why there is none for egress policies.
    fn egress_iptables(&self) -> Result<Iptables, String> {
        if !self.config.isolation.packet_filter {
            return Err("the packet filter is turned off in the configuration".into());
        }
        if let Some(remote) = self.remote_engine() {
            return Err(format!(
                "the Docker engine is remote ({remote}): its packet filter is out of reach"
            ));
        }
        Iptables::find().ok_or_else(|| "iptables not found".to_owned())
    }

    /// The main egress chains, their closing rules and their jumps (called
    /// by `ensure_isolation` after the isolation chain).
    pub(super) async fn ensure_egress_chains(&self, ipt: &Iptables, report: &mut IsolationReport) {
        let chains = self.egress_chains();
        let main = chains.main();
        let bridge = self.config.isolation.bridge.as_str();
        for table in ["filter", "nat"] {
            if ipt.run(&["-t", table, "-S", &main]).await.is_err() {
                match ipt.run(&["-t", table, "-N", &main]).await {
                    Ok(_) => report
                        .repaired
                        .push(format!("created the iptables chain {main} ({table})")),
                    Err(e) => {
                        report
                            .problems
                            .push(format!("egress policies cannot be enforced: {e}"));
                        return;
                    }
                }
            }
        }
        // Whatever no sandbox entry claims is rejected: the closing rules
        // are the chain's last two.
        let listing = ipt.run(&["-S", &main]).await.unwrap_or_default();
        let lines: Vec<&str> = listing.lines().filter(|l| l.starts_with("-A ")).collect();
        let closing = chains.closing_rules();
        if !lines.ends_with(&closing.iter().map(String::as_str).collect::<Vec<_>>()) {
            for rule in &closing {
                let args: Vec<&str> = rule.split(' ').skip(1).collect();
                while ipt.check(&args).await.unwrap_or(false) {
                    let mut del = vec!["-D"];
                    del.extend(&args);
                    if ipt.run(&del).await.is_err() {
                        break;
                    }
                }
            }
            for rule in &closing {
                let args: Vec<&str> = rule.split(' ').collect();
                if let Err(e) = ipt.run(&args).await {
                    report
                        .problems
                        .push(format!("egress policies cannot be enforced: {e}"));
                    return;
                }
            }
            report.repaired.push(format!(
                "the closing rules of {main} (refuse sandboxes without a policy) were put back"
            ));
        }
        let jumps: [(&[&str], &str); 2] = [
            (
                &["DOCKER-USER", "-i", bridge, "!", "-o", bridge, "-j", &main],
                "DOCKER-USER",
            ),
            (
                &["PREROUTING", "-t", "nat", "-i", bridge, "-j", &main],
                "PREROUTING (nat)",
            ),
        ];
        for (rule, name) in jumps {
            match ipt.check(rule).await {
                Ok(true) => {}
                Ok(false) => {
                    let mut insert = vec!["-I", rule[0], "1"];
                    insert.extend(&rule[1..]);
                    match ipt.run(&insert).await {
                        Ok(_) => report
                            .repaired
                            .push(format!("added the {name} rule sending {bridge} to {main}")),
                        Err(e) => report.problems.push(format!(
                            "egress policies cannot be enforced: {e} (is Docker's iptables \
                             integration on? It makes DOCKER-USER)"
                        )),
                    }
                }
                Err(e) => report
                    .problems
                    .push(format!("egress policies cannot be enforced: {e}")),
            }
        }
        self.prune_private_chains(ipt, &chains).await;
    }

    /// Drops the private ranges' chains of other opt-ins (an earlier start
    /// with another `--egress-allow-private`) that no sandbox chain jumps
    /// to. Emptying and deleting happen in one commit, which fails as a
    /// whole when a chain is jumped to meanwhile.
    async fn prune_private_chains(&self, ipt: &Iptables, chains: &EgressChains) {
        let current = chains.private(&self.config.isolation.private);
        let Ok(listing) = ipt.run(&["-S"]).await else {
            return;
        };
        for chain in listing.lines().filter_map(|l| l.strip_prefix("-N ")) {
            if !chains.is_private(chain) || chain == current {
                continue;
            }
            let jumped_to = listing.lines().any(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                words.windows(2).any(|w| w[0] == "-j" && w[1] == chain)
            });
            if jumped_to {
                continue;
            }
            match ipt
                .restore(&format!("*filter\n-F {chain}\n-X {chain}\nCOMMIT\n"))
                .await
            {
                Ok(()) => tracing::info!(chain, "dropped an unused chain of private ranges"),
                Err(e) => tracing::debug!(chain, error = %e, "unused chain of private ranges kept"),
            }
        }
    }

    #[tracing::instrument(skip_all)]
    async fn egress_listings(&self, ipt: &Iptables) -> Result<Listings, String> {
        let main = self.egress_chains().main();
        // Two processes, run side by side: a stop or a delete waits for them.
        let (filter_args, nat_args) = (["-S", main.as_str()], ["-t", "nat", "-S", main.as_str()]);
        let (filter, nat) = tokio::join!(ipt.run(&filter_args), ipt.run(&nat_args));
        let (filter, nat) = (filter?, nat?);
        Ok(Listings {
            filter: parse_listing(&main, &filter),
            nat: parse_listing(&main, &nat),
        })
    }

    /// The sandbox's address on the sandbox network, `None` when it is not
    /// there (or not running).
    async fn sandbox_network_address(&self, id: &SandboxId) -> RuntimeResult<Option<IpAddr>> {
        let docker = self.client().await?;
        let Some(inspected) = self
            .inspect_sandbox(&docker, id)
            .await?
            .filter(|c| c.state.as_ref().and_then(|s| s.running) == Some(true))
        else {
            return Ok(None);
        };
        Ok(inspected
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|mut n| n.remove(&self.config.isolation.network))
            .and_then(|e| e.ip_address)
            .and_then(|ip| ip.parse().ok()))
    }

    /// Runs one restore, reading the listings afresh and trying once more
    /// when it failed (another process changed the chains in between).
    #[tracing::instrument(skip_all)]
    async fn egress_restore(
        &self,
        ipt: &Iptables,
        mut script: impl FnMut(&Listings) -> Option<String>,
    ) -> RuntimeResult<()> {
        let mut last = String::new();
        for _ in 0..2 {
            let listings = self
                .egress_listings(ipt)
                .await
                .map_err(RuntimeError::Other)?;
            let Some(input) = script(&listings) else {
                return Ok(());
            };
            match ipt.restore(&input).await {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
        }
        Err(RuntimeError::Other(format!(
            "the sandbox's egress rules could not be written: {last}"
        )))
    }
}

#[async_trait]
impl Egress for DockerRuntime {
    async fn egress_host(&self) -> RuntimeResult<EgressHost> {
        let unavailable = RuntimeError::Unavailable;
        self.egress_iptables().map_err(unavailable)?;
        let docker = self
            .client()
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let net = docker
            .inspect_network(
                &self.config.isolation.network,
                None::<InspectNetworkOptions<String>>,
            )
            .await
            .map_err(|e| unavailable(format!("the sandbox network is not there: {e}")))?;
        let gateway = net
            .ipam
            .and_then(|i| i.config)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|c| c.gateway?.parse::<IpAddr>().ok())
            .find(IpAddr::is_ipv4)
            .ok_or_else(|| unavailable("the sandbox network has no IPv4 gateway".to_owned()))?;
        let networks = docker
            .list_networks(None::<ListNetworksOptions<String>>)
            .await
            .map_err(|e| unavailable(format!("could not list Docker's networks: {e}")))?;
        let subnets = networks
            .into_iter()
            .flat_map(|n| n.ipam.and_then(|i| i.config).unwrap_or_default())
            .filter_map(|c| Cidr::parse(&c.subnet?).ok())
            .collect();
        Ok(EgressHost { gateway, subnets })
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn apply_egress(
        &self,
        id: &SandboxId,
        policy: &EgressPolicy,
        ports: Option<RedirectPorts>,
    ) -> RuntimeResult<Option<IpAddr>> {
        let Some(addr) = self.sandbox_network_address(id).await? else {
            // Not on the sandbox network: nothing leaves it; forget old entries.
            if let Ok(ipt) = self.egress_iptables() {
                let chains = self.egress_chains();
                self.egress_restore(&ipt, |l| {
                    remove_script(&chains, l, std::slice::from_ref(id))
                })
                .await?;
            }
            return Ok(None);
        };
        let ipt = match self.egress_iptables() {
            Ok(ipt) => ipt,
            // Without a packet filter only allow-all can hold.
            Err(_) if matches!(policy, EgressPolicy::AllowAll) => return Ok(Some(addr)),
            Err(why) => {
                return Err(RuntimeError::Other(format!(
                    "egress policies cannot be enforced on this host: {why}"
                )))
            }
        };
        // Without the filter only the two modes hold (and nothing is
        // redirected: no forwarder answers DNS).
        if ports.is_none() && !matches!(policy, EgressPolicy::AllowAll | EgressPolicy::DenyAll) {
            return Err(RuntimeError::Other(
                "the egress filter does not run on this host: allow and deny lists cannot be \
                 enforced"
                    .into(),
            ));
        }
        let chains = self.egress_chains();
        let private = &self.config.isolation.private;
        self.egress_restore(&ipt, |l| {
            Some(apply_script(&chains, l, id, addr, policy, private, ports))
        })
        .await?;
        Ok(Some(addr))
    }

    #[tracing::instrument(skip_all, fields(sandboxes = ids.len()))]
    async fn remove_egress(&self, ids: &[SandboxId]) -> RuntimeResult<Vec<IpAddr>> {
        let Ok(ipt) = self.egress_iptables() else {
            return Ok(Vec::new());
        };
        let chains = self.egress_chains();
        // The addresses come from the listing the removal itself reads.
        let mut addrs = Vec::new();
        self.egress_restore(&ipt, |l| {
            addrs = entries(&l.filter)
                .into_iter()
                .filter(|e| ids.contains(&e.sandbox_id))
                .map(|e| e.addr)
                .collect();
            remove_script(&chains, l, ids)
        })
        .await?;
        Ok(addrs)
    }

    fn pending_removals(&self) -> Option<std::sync::Arc<crate::PendingRemovals>> {
        Some(self.removals.clone())
    }

    async fn egress_entries(&self) -> RuntimeResult<Vec<EgressEntry>> {
        let Ok(ipt) = self.egress_iptables() else {
            return Ok(Vec::new());
        };
        let listings = self.egress_listings(&ipt).await.unwrap_or_default();
        Ok(entries(&listings.filter))
    }

    async fn stale_private_entries(&self) -> RuntimeResult<Vec<SandboxId>> {
        let Ok(ipt) = self.egress_iptables() else {
            return Ok(Vec::new());
        };
        let chains = self.egress_chains();
        let filter = ipt
            .run(&["-S", &chains.main()])
            .await
            .map_err(RuntimeError::Other)?;
        let listed = entries(&parse_listing(&chains.main(), &filter));
        if listed.is_empty() {
            return Ok(Vec::new());
        }
        let table = ipt.run(&["-S"]).await.map_err(RuntimeError::Other)?;
        Ok(stale_private(
            &chains,
            &listed,
            &table,
            &self.config.isolation.private,
        ))
    }

    async fn prune_egress(&self) -> RuntimeResult<Vec<EgressEntry>> {
        let Ok(ipt) = self.egress_iptables() else {
            return Ok(Vec::new());
        };
        let listings = self.egress_listings(&ipt).await.unwrap_or_default();
        let current = entries(&listings.filter);
        if current.is_empty() {
            return Ok(Vec::new());
        }
        // Where each running Stockade container is on the sandbox network.
        let docker = self.client().await?;
        let filters =
            HashMap::from([("label".to_owned(), vec![crate::labels::MANAGED.to_owned()])]);
        let containers = self.list_containers_by(&docker, false, filters).await?;
        let network = &self.config.isolation.network;
        let live: HashMap<String, IpAddr> = containers
            .into_iter()
            .filter_map(|c| {
                let id = c.labels.as_ref()?.get(crate::labels::SANDBOX_ID)?.clone();
                let ip = c
                    .network_settings?
                    .networks?
                    .remove(network)?
                    .ip_address?
                    .parse()
                    .ok()?;
                Some((id, ip))
            })
            .collect();
        let stale: Vec<EgressEntry> = current
            .into_iter()
            .filter(|e| live.get(e.sandbox_id.as_str()) != Some(&e.addr))
            .collect();
        let chains = self.egress_chains();
        let ids: Vec<SandboxId> = stale.iter().map(|e| e.sandbox_id.clone()).collect();
        if !ids.is_empty() {
            self.egress_restore(&ipt, |l| remove_script(&chains, l, &ids))
                .await?;
        }
        Ok(stale)
    }

    async fn set_network_access(
        &self,
        id: &SandboxId,
        network_access: bool,
    ) -> RuntimeResult<bool> {
        let docker = self.client().await?;
        let name = container_name(id);
        let inspected = self.inspect_existing(&docker, id).await?;
        let iso = &self.config.isolation;
        let (target, other) = if network_access {
            (&iso.network, &iso.internal_network)
        } else {
            (&iso.internal_network, &iso.network)
        };
        let attached: Vec<String> = inspected
            .network_settings
            .and_then(|n| n.networks)
            .map(|n| n.into_keys().collect())
            .unwrap_or_default();
        if !attached.contains(other) {
            return Ok(false);
        }
        self.prepare_networks(&docker).await;
        if !attached.contains(target) {
            // A new address on the sandbox network: not one whose old
            // entry is still being removed.
            self.removals
                .wait()
                .await
                .map_err(RuntimeError::Unavailable)?;
            docker
                .connect_network(
                    target,
                    ConnectNetworkOptions {
                        container: name.clone(),
                        endpoint_config: EndpointSettings::default(),
                    },
                )
                .await
                .map_err(|e| self.map_err(e, "connect network"))?;
        }
        docker
            .disconnect_network(
                other,
                DisconnectNetworkOptions {
                    container: name,
                    force: true,
                },
            )
            .await
            .map_err(|e| self.map_err(e, "disconnect network"))?;
        Ok(true)
    }
}
