//! Network isolation on Docker: a sandbox reaches no other sandbox
//! and no service of the Docker host; the host (Stockade's reverse proxy)
//! still reaches every sandbox.
//!
//! Sandboxes with network access join a bridge network of Stockade's own
//! with inter-container traffic off (`enable_icc=false`: Docker drops
//! forwarding between two containers of the bridge); sandboxes without it
//! join a second one that is also `internal` (Docker drops everything
//! forwarded out of it). Both bridges have fixed interface names, so a
//! packet filter chain of Stockade's own, jumped to from the top of `INPUT`
//! for packets arriving on them, can accept only replies to the host's own
//! connections (the proxy's) and drop the rest: the gateway address, every
//! host address and every host port. Traffic between the two networks and
//! to other Docker networks is dropped by Docker's own isolation chains,
//! whose inter-container rules `ensure_isolation` checks are there. What
//! sandboxes forward out to the private and link-local ranges (the local
//! network, the cloud metadata service) is rejected by their egress chains
//! whatever their policy (`crate::egress`), but for the blocks opted in
//! ([`IsolationConfig::private`]).
//!
//! On Docker 20.10 a container on an internal network still has a default
//! route (via the bridge's address on the host); Docker drops whatever it
//! would forward out of the subnet, and the chain above drops what goes to
//! the host itself, so it reaches nothing (tests/isolation.rs).
//!
//! When the networks cannot be made, creates are refused (503, naming the
//! way out) rather than run on Docker's default bridge, where sandboxes
//! reach each other — unless the administrator opted in
//! ([`IsolationConfig::allow_unisolated`]); when the packet filter cannot
//! be applied (no `iptables`, not root, a remote engine), sandboxes still
//! join the networks but can reach the host. Either way the report says
//! why.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use bollard::models::Network;
use bollard::network::{CreateNetworkOptions, InspectNetworkOptions};
use bollard::Docker;
use stockade_core::netpolicy::PrivateAccess;
use tokio::process::Command;

use super::{error_chain, status_code, DockerRuntime, Endpoint};
use crate::{labels, Isolation, IsolationReport, RuntimeError, RuntimeResult};

/// Docker's option that turns inter-container traffic on a bridge on or off.
const ICC_OPTION: &str = "com.docker.network.bridge.enable_icc";
/// Docker's option that names a bridge network's host interface.
const BRIDGE_OPTION: &str = "com.docker.network.bridge.name";
/// How long one `iptables` call may take (it waits for the xtables lock).
const IPTABLES_TIMEOUT: Duration = Duration::from_secs(30);
/// Seconds `iptables -w` waits for the xtables lock Docker also takes.
const XTABLES_WAIT_SECS: &str = "10";

/// Where sandboxes are attached and how they are cut off. The
/// defaults suit one Stockade per Docker host; a second deployment on the
/// same host (or a test) takes other names, e.g. [`IsolationConfig::with_prefix`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolationConfig {
    /// The Docker network of sandboxes with network access.
    pub network: String,
    /// The host interface of [`network`](Self::network)'s bridge.
    pub bridge: String,
    /// The Docker network (internal: no route out) of sandboxes without
    /// network access.
    pub internal_network: String,
    /// The host interface of [`internal_network`](Self::internal_network)'s bridge.
    pub internal_bridge: String,
    /// The `iptables` chain that drops what sandboxes send to the host.
    pub chain: String,
    /// Apply the packet filter (needs `iptables` and root or
    /// `CAP_NET_ADMIN` on the Docker host). Off: sandboxes can reach the
    /// host's services, and the isolation report says so.
    pub packet_filter: bool,
    /// The blocks of the private and link-local ranges sandboxes may reach
    /// (the administrator's opt-in; default none): the packet filter
    /// rejects the rest of those ranges for every policy.
    pub private: PrivateAccess,
    /// When Stockade's networks cannot be made, create sandboxes on
    /// Docker's default networks anyway (where they reach each other). Off:
    /// such creates are refused (the administrator's opt-in).
    pub allow_unisolated: bool,
}

impl Default for IsolationConfig {
    fn default() -> Self {
        Self {
            network: "stockade-sandboxes".into(),
            bridge: "stk0".into(),
            internal_network: "stockade-offline".into(),
            internal_bridge: "stk1".into(),
            chain: "STOCKADE-ISOLATION".into(),
            packet_filter: true,
            private: PrivateAccess::none(),
            allow_unisolated: false,
        }
    }
}

impl IsolationConfig {
    /// A set of names of its own: networks `{prefix}-sandboxes` and
    /// `{prefix}-offline`, bridges `{prefix}0` and `{prefix}1`, chain
    /// `{PREFIX}-ISOLATION`. `prefix` should be at most 14 characters
    /// (interface names are limited to 15); [`validate`](Self::validate) says
    /// when it is not.
    pub fn with_prefix(prefix: &str) -> Self {
        Self {
            network: format!("{prefix}-sandboxes"),
            bridge: format!("{prefix}0"),
            internal_network: format!("{prefix}-offline"),
            internal_bridge: format!("{prefix}1"),
            chain: format!("{}-ISOLATION", prefix.to_ascii_uppercase()),
            packet_filter: true,
            private: PrivateAccess::none(),
            allow_unisolated: false,
        }
    }

    /// The names of a registered Docker host: the prefix `stk`
    /// and 8 hex digits of the SHA-256 of its name, so engines of several
    /// hosts on one machine never share bridges (`stk<hash>0`, `…1`),
    /// networks (`stk<hash>-sandboxes`, `-offline`) or a chain
    /// (`STK<HASH>-ISOLATION`). The server's own host keeps its configured
    /// names.
    pub fn for_host(name: &str) -> Self {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(name.as_bytes());
        let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        Self::with_prefix(&format!("stk{hash}"))
    }

    /// Checks every name; the error names the field.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        self.check_names().map_err(crate::ConfigError)
    }

    fn check_names(&self) -> Result<(), String> {
        for (field, name) in [
            ("network", &self.network),
            ("internal_network", &self.internal_network),
        ] {
            let ok = name.len() <= 64
                && name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
            if !ok || name == "bridge" || name == "host" || name == "none" {
                return Err(format!(
                    "{field}: '{name}' is not a Docker network name Stockade can own \
                     (letters, digits, '_', '.', '-', starting with a letter or digit, at most 64; \
                     not bridge, host or none)"
                ));
            }
        }
        for (field, name) in [
            ("bridge", &self.bridge),
            ("internal_bridge", &self.internal_bridge),
        ] {
            let ok = (1..=15).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
            if !ok {
                return Err(format!(
                    "{field}: '{name}' is not an interface name (1 to 15 letters, digits, '_', '.', '-')"
                ));
            }
        }
        let chain_ok = (1..=28).contains(&self.chain.len())
            && self
                .chain
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c));
        if !chain_ok {
            return Err(format!(
                "chain: '{}' is not an iptables chain name (1 to 28 letters, digits, '_', '-')",
                self.chain
            ));
        }
        crate::EgressChains::for_isolation_chain(&self.chain)
            .validate()
            .map_err(|e| e.0)?;
        if self.network == self.internal_network {
            return Err("internal_network: must differ from network".into());
        }
        if self.bridge == self.internal_bridge {
            return Err("internal_bridge: must differ from bridge".into());
        }
        Ok(())
    }

    fn networks(&self) -> [NetworkSpec<'_>; 2] {
        [
            NetworkSpec {
                name: &self.network,
                bridge: &self.bridge,
                internal: false,
            },
            NetworkSpec {
                name: &self.internal_network,
                bridge: &self.internal_bridge,
                internal: true,
            },
        ]
    }
}

/// Whether `net` exists as it should after a create of it failed: made by
/// someone else in the meantime.
async fn made_meanwhile(docker: &Docker, net: NetworkSpec<'_>) -> bool {
    matches!(
        inspect_network(docker, net.name).await,
        Ok(Some(found)) if network_mismatches(&found, net).is_empty()
    )
}

/// One of Stockade's two networks, as it should be.
#[derive(Debug, Clone, Copy)]
struct NetworkSpec<'a> {
    name: &'a str,
    bridge: &'a str,
    internal: bool,
}

impl DockerRuntime {
    /// The network a new sandbox joins: Stockade's when it is ready, else
    /// Docker's default bridge (with network access) or none (without).
    pub(super) fn sandbox_network_mode(&self, network_access: bool) -> String {
        let iso = &self.config.isolation;
        if network_access {
            if self.networks_ready[0].load(Ordering::Acquire) {
                iso.network.clone()
            } else {
                "bridge".into()
            }
        } else if self.networks_ready[1].load(Ordering::Acquire) {
            iso.internal_network.clone()
        } else {
            "none".into()
        }
    }

    /// Refuses a create while the network it would join is not Stockade's,
    /// unless the administrator allowed sandboxes on Docker's default
    /// networks.
    pub(super) fn check_isolated(&self, network_access: bool) -> RuntimeResult<()> {
        let ready = self.networks_ready[usize::from(!network_access)].load(Ordering::Acquire);
        if ready || self.config.isolation.allow_unisolated {
            return Ok(());
        }
        Err(RuntimeError::Unavailable(format!(
            "Stockade's sandbox network '{}' could not be set up on Docker host '{}' (the \
             isolation report in /health says why), and sandboxes are not created on Docker's \
             default networks, where they would reach each other: fix the engine, or start the \
             server with --allow-unisolated-sandboxes",
            if network_access {
                &self.config.isolation.network
            } else {
                &self.config.isolation.internal_network
            },
            self.config.server_name
        )))
    }

    /// Makes Stockade's networks when they are not known to be ready (the
    /// first create, or after one vanished); a failure is logged and the
    /// sandbox falls back (see [`Self::sandbox_network_mode`]).
    pub(super) async fn prepare_networks(&self, docker: &Docker) {
        if self
            .networks_ready
            .iter()
            .all(|ready| ready.load(Ordering::Acquire))
        {
            return;
        }
        let mut report = IsolationReport::new();
        self.ensure_networks(docker, &mut report).await;
        if !report.problems.is_empty() {
            tracing::warn!(
                report = %report.summary(),
                "Stockade's sandbox networks are not ready: sandboxes join Docker's default networks"
            );
        }
    }

    /// Forgets that the networks are ready (one was removed behind our back).
    pub(super) fn forget_networks(&self) {
        for ready in &self.networks_ready {
            ready.store(false, Ordering::Release);
        }
    }

    async fn ensure_networks(&self, docker: &Docker, report: &mut IsolationReport) {
        for (i, net) in self.config.isolation.networks().into_iter().enumerate() {
            let ready = self.ensure_network(docker, net, report).await;
            self.networks_ready[i].store(ready, Ordering::Release);
        }
    }

    /// Creates the network when missing, recreates it when it is Stockade's
    /// but wrong and unused; `true` when it is as it should be now.
    async fn ensure_network(
        &self,
        docker: &Docker,
        net: NetworkSpec<'_>,
        report: &mut IsolationReport,
    ) -> bool {
        let found = match inspect_network(docker, net.name).await {
            Ok(found) => found,
            Err(e) => {
                report
                    .problems
                    .push(format!("could not inspect network {}: {e}", net.name));
                return false;
            }
        };
        let Some(found) = found else {
            return match create_network(docker, net).await {
                Ok(()) => {
                    report.repaired.push(format!(
                        "created network {} (bridge {}{})",
                        net.name,
                        net.bridge,
                        if net.internal { ", internal" } else { "" }
                    ));
                    true
                }
                // Another create (a task of this server, another server
                // on this engine) may have made it first.
                Err(_) if made_meanwhile(docker, net).await => true,
                Err(e) => {
                    report
                        .problems
                        .push(format!("could not create network {}: {e}", net.name));
                    false
                }
            };
        };
        let wrong = network_mismatches(&found, net);
        if wrong.is_empty() {
            return true;
        }
        let wrong = wrong.join(", ");
        let ours = found
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::MANAGED))
            .is_some_and(|v| v == "true");
        if !ours {
            report.problems.push(format!(
                "network {} exists but is not Stockade's ({wrong}): sandboxes use Docker's \
                 default networks; choose another network name or remove it",
                net.name
            ));
            return false;
        }
        let attached = found.containers.as_ref().map_or(0, HashMap::len);
        if attached > 0 {
            report.problems.push(format!(
                "network {} {wrong}, and {attached} container(s) are attached, so it cannot be \
                 recreated: remove those sandboxes or the network",
                net.name
            ));
            return false;
        }
        if let Err(e) = docker.remove_network(net.name).await {
            report.problems.push(format!(
                "network {} {wrong}; removing it to recreate it failed: {}",
                net.name,
                error_chain(&e)
            ));
            return false;
        }
        match create_network(docker, net).await {
            Ok(()) => {
                report
                    .repaired
                    .push(format!("network {} {wrong}: recreated", net.name));
                true
            }
            Err(_) if made_meanwhile(docker, net).await => true,
            Err(e) => {
                report.problems.push(format!(
                    "network {} {wrong}; recreating it failed: {e}",
                    net.name
                ));
                false
            }
        }
    }

    /// The packet filter: Stockade's chain with its two rules, a jump to it
    /// from `INPUT` for each bridge, and Docker's own rules it relies on.
    async fn ensure_packet_filter(&self, report: &mut IsolationReport) {
        let iso = &self.config.isolation;
        if !iso.packet_filter {
            report.problems.push(
                "the packet filter is turned off in the configuration: sandboxes can reach \
                 services of the Docker host"
                    .into(),
            );
            return;
        }
        if let Some(remote) = self.remote_engine() {
            report.problems.push(format!(
                "the Docker engine is remote ({remote}): the packet filter that keeps sandboxes \
                 from the host's services must be set up on that host (see README, Security \
                 model)"
            ));
            return;
        }
        let ipt = match Iptables::find() {
            Some(ipt) => ipt,
            None => {
                report.problems.push(
                    "iptables not found: sandboxes can reach services of the Docker host \
                     (install iptables; Stockade needs root or CAP_NET_ADMIN to use it)"
                        .into(),
                );
                return;
            }
        };
        if let Err(e) = self.ensure_chain(&ipt, report).await {
            report.problems.push(e);
            return;
        }
        self.ensure_egress_chains(&ipt, report).await;
        for bridge in [&iso.bridge, &iso.internal_bridge] {
            let jump = ["INPUT", "-i", bridge.as_str(), "-j", iso.chain.as_str()];
            match ipt.check(&jump).await {
                Ok(true) => {}
                Ok(false) => match ipt.run(&with_verb("-I", &jump, Some("1"))).await {
                    Ok(_) => report.repaired.push(format!(
                        "added the INPUT rule sending packets from {bridge} to {}",
                        iso.chain
                    )),
                    Err(e) => report.problems.push(e),
                },
                Err(e) => report.problems.push(e),
            }
            // Docker's rule for enable_icc=false: no forwarding between two
            // sandboxes on one bridge.
            let icc = [
                "FORWARD",
                "-i",
                bridge.as_str(),
                "-o",
                bridge.as_str(),
                "-j",
                "DROP",
            ];
            match ipt.check(&icc).await {
                Ok(true) => {}
                Ok(false) => report.problems.push(format!(
                    "Docker's rule dropping traffic between sandboxes on {bridge} is missing: is \
                     Docker's iptables integration off (dockerd --iptables=false)? Sandboxes \
                     may reach each other"
                )),
                Err(e) => report.problems.push(e),
            }
        }
    }

    /// Creates Stockade's chain when missing and rewrites it when its rules
    /// are not exactly: accept replies, drop the rest.
    async fn ensure_chain(
        &self,
        ipt: &Iptables,
        report: &mut IsolationReport,
    ) -> Result<(), String> {
        let chain = self.config.isolation.chain.as_str();
        // A missing chain is an error whose wording differs between the
        // legacy and nf_tables iptables: try to create it then.
        let listed = match ipt.run(&["-S", chain]).await {
            Ok(out) => Some(out),
            Err(e) if e.contains("permission denied") => return Err(e),
            Err(_) => None,
        };
        let expected = chain_rules(chain, &self.config.isolation.bridge);
        let current: Vec<String> = listed
            .as_deref()
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("-A "))
            .map(str::to_owned)
            .collect();
        if listed.is_some() && current == expected {
            return Ok(());
        }
        if listed.is_none() {
            ipt.run(&["-N", chain]).await?;
            report
                .repaired
                .push(format!("created the iptables chain {chain}"));
        } else {
            ipt.run(&["-F", chain]).await?;
            report.repaired.push(format!(
                "the iptables chain {chain} held {} rule(s) other than Stockade's: rewritten",
                current.len()
            ));
        }
        for rule in &expected {
            let args: Vec<&str> = rule.split(' ').collect();
            ipt.run(&args).await?;
        }
        Ok(())
    }

    /// The Docker engine's address when it is not on this host (the packet
    /// filter would then be applied to the wrong host).
    pub(super) fn remote_engine(&self) -> Option<String> {
        if let Some((engine, local)) = self.tunneled_engine() {
            return (!local).then_some(engine);
        }
        match &self.endpoint {
            Endpoint::Unix(_) => None,
            Endpoint::Tcp(addr) => {
                let host = super::host_part(addr);
                let local = host == "localhost"
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback());
                (!local).then(|| format!("tcp://{addr}"))
            }
        }
    }

    /// Removes what [`Isolation::ensure_isolation`] made for this
    /// configuration's names — the `INPUT` jumps, the chain, both networks
    /// — and nothing else. For uninstalling, and for tests, which use names
    /// of their own. Fails while a container is attached to a network.
    pub async fn remove_isolation(&self) -> RuntimeResult<()> {
        let iso = &self.config.isolation;
        if self.remote_engine().is_none() {
            if let Some(ipt) = Iptables::find() {
                for bridge in [&iso.bridge, &iso.internal_bridge] {
                    let jump = ["INPUT", "-i", bridge.as_str(), "-j", iso.chain.as_str()];
                    while ipt.check(&jump).await.map_err(RuntimeError::Other)? {
                        ipt.run(&with_verb("-D", &jump, None))
                            .await
                            .map_err(RuntimeError::Other)?;
                    }
                }
                if ipt.run(&["-S", &iso.chain]).await.is_ok() {
                    ipt.run(&["-F", &iso.chain])
                        .await
                        .map_err(RuntimeError::Other)?;
                    ipt.run(&["-X", &iso.chain])
                        .await
                        .map_err(RuntimeError::Other)?;
                }
            }
        }
        let docker = self.client().await?;
        self.forget_networks();
        for net in iso.networks() {
            match docker.remove_network(net.name).await {
                Ok(()) => {}
                Err(e) if status_code(&e) == Some(404) => {}
                Err(e) => return Err(self.map_err(e, "remove network")),
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Isolation for DockerRuntime {
    #[tracing::instrument(skip_all)]
    async fn ensure_isolation(&self) -> IsolationReport {
        let mut report = IsolationReport::new();
        match self.client().await {
            Ok(docker) => self.ensure_networks(&docker, &mut report).await,
            Err(e) => report.problems.push(format!(
                "Stockade's sandbox networks could not be checked: {e}"
            )),
        }
        self.ensure_packet_filter(&mut report).await;
        if report.problems.is_empty() {
            if !report.repaired.is_empty() {
                tracing::info!(report = %report.summary(), "sandbox isolation repaired");
            }
        } else {
            tracing::warn!(report = %report.summary(), "sandbox isolation is incomplete");
        }
        report
    }
}

/// The network `name`, `None` when there is none.
async fn inspect_network(docker: &Docker, name: &str) -> Result<Option<Network>, String> {
    match docker
        .inspect_network(name, None::<InspectNetworkOptions<String>>)
        .await
    {
        Ok(n) => Ok(Some(n)),
        Err(e) if status_code(&e) == Some(404) => Ok(None),
        Err(e) => Err(error_chain(&e)),
    }
}

/// Creates one of Stockade's networks; one created meanwhile by another
/// Stockade (same name) is fine when it is right.
async fn create_network(docker: &Docker, net: NetworkSpec<'_>) -> Result<(), String> {
    let options = CreateNetworkOptions {
        name: net.name.to_owned(),
        check_duplicate: true,
        driver: "bridge".to_owned(),
        internal: net.internal,
        enable_ipv6: false,
        options: HashMap::from([
            (ICC_OPTION.to_owned(), "false".to_owned()),
            (BRIDGE_OPTION.to_owned(), net.bridge.to_owned()),
        ]),
        labels: HashMap::from([(labels::MANAGED.to_owned(), "true".to_owned())]),
        ..Default::default()
    };
    match docker.create_network(options).await {
        Ok(_) => Ok(()),
        Err(e) if status_code(&e) == Some(409) => match inspect_network(docker, net.name).await? {
            Some(found) if network_mismatches(&found, net).is_empty() => Ok(()),
            _ => Err(error_chain(&e)),
        },
        Err(e) => Err(error_chain(&e)),
    }
}

/// How `found` differs from what `net` should be, one phrase each.
fn network_mismatches(found: &Network, net: NetworkSpec<'_>) -> Vec<String> {
    let mut wrong = Vec::new();
    let option = |key: &str| found.options.as_ref().and_then(|o| o.get(key)).cloned();
    if found.driver.as_deref() != Some("bridge") {
        wrong.push(format!(
            "has driver {} instead of bridge",
            found.driver.as_deref().unwrap_or("?")
        ));
    }
    if option(ICC_OPTION).as_deref() != Some("false") {
        wrong.push("lets containers talk to each other (enable_icc is not false)".into());
    }
    if option(BRIDGE_OPTION).as_deref() != Some(net.bridge) {
        wrong.push(format!(
            "has bridge interface {} instead of {}",
            option(BRIDGE_OPTION).unwrap_or_else(|| "(generated)".into()),
            net.bridge
        ));
    }
    if found.internal.unwrap_or(false) != net.internal {
        wrong.push(if net.internal {
            "is not internal".into()
        } else {
            "is internal (no way out)".into()
        });
    }
    if found.enable_ipv6.unwrap_or(false) {
        wrong.push("has IPv6 on (the packet filter covers IPv4)".into());
    }
    if found
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::MANAGED))
        .is_none_or(|v| v != "true")
    {
        wrong.push(format!("lacks the label {}", labels::MANAGED));
    }
    wrong
}

/// The rules of Stockade's chain, as `iptables -S` prints them: replies
/// to the host's own connections, and what the egress chains redirected
/// from the sandbox bridge to the egress filter (only a `REDIRECT`
/// delivers a DNAT'd packet from there to the host), are accepted.
fn chain_rules(chain: &str, bridge: &str) -> Vec<String> {
    vec![
        format!("-A {chain} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
        format!("-A {chain} -i {bridge} -m conntrack --ctstate DNAT -j ACCEPT"),
        format!("-A {chain} -j DROP"),
    ]
}

/// `rule` (`CHAIN args…`) with a verb in front and, for `-I`, a position.
fn with_verb<'a>(verb: &'a str, rule: &[&'a str], position: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec![verb, rule[0]];
    args.extend(position);
    args.extend(&rule[1..]);
    args
}

/// The `iptables` command of the host.
pub(super) struct Iptables {
    path: PathBuf,
}

impl Iptables {
    /// `iptables` on `PATH` or in the usual system directories (often not on
    /// a service's `PATH`).
    pub(super) fn find() -> Option<Self> {
        let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
        dirs.into_iter()
            .map(|d| d.join("iptables"))
            .find(|p| is_executable(p))
            .map(|path| Self { path })
    }

    /// Runs `iptables -w N args…` on the filter table; its stdout, or an
    /// error that says what failed and why.
    pub(super) async fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = self.output(args).await?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        Err(self.failure(args, &out.stderr))
    }

    /// `iptables -C rule`: whether the rule is there.
    pub(super) async fn check(&self, rule: &[&str]) -> Result<bool, String> {
        let args = with_verb("-C", rule, None);
        let out = self.output(&args).await?;
        match out.status.code() {
            Some(0) => Ok(true),
            // 1: no such rule; 2 with this text: its target chain is missing.
            Some(1) if !is_permission_error(&out.stderr) => Ok(false),
            Some(2) if String::from_utf8_lossy(&out.stderr).contains("does not exist") => Ok(false),
            _ => Err(self.failure(&args, &out.stderr)),
        }
    }

    async fn output(&self, args: &[&str]) -> Result<std::process::Output, String> {
        let run = Command::new(&self.path)
            .arg("-w")
            .arg(XTABLES_WAIT_SECS)
            .args(args)
            .kill_on_drop(true)
            .output();
        match tokio::time::timeout(IPTABLES_TIMEOUT, run).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => Err(format!("could not run {}: {e}", self.path.display())),
            Err(_) => Err(format!(
                "iptables {} did not finish within {} s",
                args.join(" "),
                IPTABLES_TIMEOUT.as_secs()
            )),
        }
    }

    /// Runs `iptables-restore -w N --noflush` (next to `iptables`) with
    /// `input`: each table in it is changed at once, or not at all.
    #[tracing::instrument(skip_all)]
    pub(super) async fn restore(&self, input: &str) -> Result<(), String> {
        use tokio::io::AsyncWriteExt;
        let path = self.path.with_file_name("iptables-restore");
        let mut child = Command::new(&path)
            .args(["-w", XTABLES_WAIT_SECS, "--noflush"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("could not run {}: {e}", path.display()))?;
        let mut stdin = child.stdin.take().expect("piped");
        let input = input.to_owned();
        let run = async move {
            stdin.write_all(input.as_bytes()).await?;
            drop(stdin);
            child.wait_with_output().await
        };
        match tokio::time::timeout(IPTABLES_TIMEOUT, run).await {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(self.failure(&["-restore"], &out.stderr)),
            Ok(Err(e)) => Err(format!("could not run {}: {e}", path.display())),
            Err(_) => Err(format!(
                "iptables-restore did not finish within {} s",
                IPTABLES_TIMEOUT.as_secs()
            )),
        }
    }

    fn failure(&self, args: &[&str], stderr: &[u8]) -> String {
        let text = String::from_utf8_lossy(stderr).trim().to_owned();
        if is_permission_error(stderr) {
            format!(
                "iptables {}: permission denied: Stockade needs root or CAP_NET_ADMIN to keep \
                 sandboxes from the host's services ({text})",
                args.join(" ")
            )
        } else {
            format!("iptables {} failed: {text}", args.join(" "))
        }
    }
}

fn is_permission_error(stderr: &[u8]) -> bool {
    let text = String::from_utf8_lossy(stderr);
    text.contains("Permission denied")
        || text.contains("you must be root")
        || text.contains("Operation not permitted")
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_has_names_of_its_own() {
        let a = IsolationConfig::for_host("h2");
        let b = IsolationConfig::for_host("h3");
        for iso in [&a, &b] {
            iso.validate().unwrap();
            assert_eq!(iso.bridge.len(), 12, "{iso:?}");
            assert!(iso.bridge.starts_with("stk") && iso.bridge.ends_with('0'));
            assert!(iso.internal_bridge.ends_with('1'));
            assert_eq!(iso.network, format!("{}-sandboxes", &iso.bridge[..11]));
            assert_eq!(
                iso.internal_network,
                format!("{}-offline", &iso.bridge[..11])
            );
            assert_eq!(
                iso.chain,
                format!("{}-ISOLATION", iso.bridge[..11].to_ascii_uppercase())
            );
            assert!(iso.packet_filter);
        }
        assert_ne!(a.bridge, b.bridge);
        assert_ne!(a.chain, b.chain);
        assert_eq!(a, IsolationConfig::for_host("h2"), "stable");
        let longest = IsolationConfig::for_host(&"h".repeat(32));
        longest.validate().unwrap();
        let defaults = IsolationConfig::default();
        assert_ne!(a.bridge, defaults.bridge);
        assert_ne!(a.network, defaults.network);
    }

    #[test]
    fn default_and_prefixed_names_are_valid() {
        IsolationConfig::default().validate().unwrap();
        let c = IsolationConfig::with_prefix("stkt1a2b3c");
        c.validate().unwrap();
        assert_eq!(c.bridge, "stkt1a2b3c0");
        assert_eq!(c.chain, "STKT1A2B3C-ISOLATION");
    }

    #[test]
    fn bad_names_are_refused_naming_the_field() {
        let with = |change: fn(&mut IsolationConfig)| {
            let mut c = IsolationConfig::default();
            change(&mut c);
            c
        };
        for (c, field) in [
            (
                IsolationConfig::with_prefix("a-very-long-prefix"),
                "bridge:",
            ),
            (with(|c| c.network = "bridge".into()), "network:"),
            (with(|c| c.chain = "bad chain".into()), "chain:"),
            (
                with(|c| c.internal_bridge = "stk0".into()),
                "internal_bridge:",
            ),
            (
                with(|c| c.internal_network = "x/y".into()),
                "internal_network:",
            ),
        ] {
            let err = c.validate().unwrap_err().0;
            assert!(err.starts_with(field), "{err}");
        }
    }

    #[test]
    fn mismatches_are_named() {
        let net = NetworkSpec {
            name: "n",
            bridge: "stk0",
            internal: true,
        };
        let right = Network {
            driver: Some("bridge".into()),
            internal: Some(true),
            options: Some(HashMap::from([
                (ICC_OPTION.into(), "false".into()),
                (BRIDGE_OPTION.into(), "stk0".into()),
            ])),
            labels: Some(HashMap::from([(labels::MANAGED.into(), "true".into())])),
            ..Default::default()
        };
        assert!(network_mismatches(&right, net).is_empty());
        let wrong = Network {
            internal: Some(false),
            options: None,
            labels: None,
            ..right
        };
        let found = network_mismatches(&wrong, net).join("; ");
        assert!(found.contains("enable_icc"), "{found}");
        assert!(found.contains("(generated) instead of stk0"), "{found}");
        assert!(found.contains("is not internal"), "{found}");
        assert!(found.contains("lacks the label"), "{found}");
    }

    #[test]
    fn rules_are_spelled_as_iptables_prints_them() {
        assert_eq!(
            with_verb("-I", &["INPUT", "-i", "stk0", "-j", "C"], Some("1")),
            ["-I", "INPUT", "1", "-i", "stk0", "-j", "C"]
        );
        let rules = chain_rules("C", "stk0");
        assert_eq!(
            rules[1],
            "-A C -i stk0 -m conntrack --ctstate DNAT -j ACCEPT"
        );
        assert_eq!(rules[2], "-A C -j DROP");
    }
}
