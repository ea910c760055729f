//! The whole egress filter in one call: the policy registry, the answer
//! log, the resolver, the proxy and the DNS forwarder on their addresses.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::dns::{DnsConfig, DnsForwarder};
use crate::names::ResolvedNames;
use crate::policies::Policies;
use crate::proxy::{EgressProxy, ProxyConfig};
use crate::resolver::{DnsError, Resolver};
use crate::task::Task;

/// Where the filter listens and whom it asks.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    /// Where redirected TCP 80/443 connections arrive (e.g. the sandbox
    /// bridge's gateway address and a free port: `172.18.0.1:15001`).
    pub proxy_addr: SocketAddr,
    /// Where DNS queries arrive, UDP and TCP (e.g. `172.18.0.1:15053`).
    pub dns_addr: SocketAddr,
    /// The upstream DNS servers; empty: the host's `/etc/resolv.conf`.
    pub upstream_dns: Vec<SocketAddr>,
    pub proxy: ProxyConfig,
    pub dns: DnsConfig,
}

/// Why the filter could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "cannot listen for the egress {what} on {addr}: {source} (is it an address of this host, \
         e.g. the sandbox bridge's gateway, with the port free?)"
    )]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("no upstream DNS server for the egress filter: {0} (give upstream_dns)")]
    Dns(#[from] DnsError),
}

/// The running filter. Dropping it stops the listeners.
pub struct EgressFilter {
    /// Sandbox address → policy: set on create and start, replaced on
    /// `PATCH`, removed on stop and destroy.
    pub policies: Arc<Policies>,
    /// The answers each sandbox got.
    pub names: Arc<ResolvedNames>,
    pub resolver: Arc<Resolver>,
    proxy_addr: SocketAddr,
    dns_addr: SocketAddr,
    _tasks: Vec<Task>,
}

impl EgressFilter {
    /// Binds the proxy (TCP) and the forwarder (UDP and TCP) and starts
    /// them. A port 0 in the config picks a free port (see
    /// [`proxy_addr`](Self::proxy_addr), [`dns_addr`](Self::dns_addr)).
    pub async fn start(config: EgressConfig) -> Result<Self, StartError> {
        let resolver = if config.upstream_dns.is_empty() {
            Resolver::from_resolv_conf(Path::new("/etc/resolv.conf"))?
        } else {
            Resolver::new(config.upstream_dns.clone())?
        };
        let resolver = Arc::new(resolver);
        let policies = Arc::new(Policies::new());
        let names = Arc::new(ResolvedNames::new());
        let bind_err = |what, addr| move |source| StartError::Bind { what, addr, source };
        let listener = TcpListener::bind(config.proxy_addr)
            .await
            .map_err(bind_err("proxy", config.proxy_addr))?;
        let proxy_addr = listener
            .local_addr()
            .map_err(bind_err("proxy", config.proxy_addr))?;
        let (udp, tcp) = DnsForwarder::bind(config.dns_addr)
            .await
            .map_err(bind_err("DNS forwarder", config.dns_addr))?;
        let dns_addr = udp
            .local_addr()
            .map_err(bind_err("DNS forwarder", config.dns_addr))?;
        let proxy = EgressProxy::new(
            config.proxy,
            Arc::clone(&policies) as _,
            Arc::clone(&resolver),
            Arc::clone(&names),
        );
        let forwarder = DnsForwarder::new(
            config.dns,
            Arc::clone(&policies) as _,
            Arc::clone(&resolver),
            Arc::clone(&names),
        );
        let tasks = vec![
            proxy.serve(listener),
            forwarder.serve_udp(udp),
            forwarder.serve_tcp(tcp),
        ];
        tracing::info!(%proxy_addr, %dns_addr, "egress filter listening");
        Ok(Self {
            policies,
            names,
            resolver,
            proxy_addr,
            dns_addr,
            _tasks: tasks,
        })
    }

    /// Where the proxy listens (the port to `REDIRECT` TCP 80/443 to).
    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy_addr
    }

    /// Where the forwarder listens (the port to `REDIRECT` port 53 to).
    pub fn dns_addr(&self) -> SocketAddr {
        self.dns_addr
    }
}
