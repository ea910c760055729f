//! Connections Stockade makes on a tenant's behalf — tarball downloads, git
//! clones, image registries — never reach an internal address:
//! loopback, private, link-local (the metadata service), and the rest of
//! [`stockade_core::net::is_internal`], unless an administrator allowed the
//! range. The check happens where the address is chosen: the HTTP client
//! resolves names through [`GuardedResolver`] and connects to exactly the
//! addresses it let through, for the first request and for every redirect
//! hop, so neither DNS rebinding nor a redirect gets around it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use stockade_core::net::AddressPolicy;

/// Why a host may not be reached. The text names the host and the address
/// class, never anything fetched from it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("cannot resolve host '{0}'")]
    Unresolvable(String),
    #[error("host '{host}' resolves to the internal address {addr}; this server does not connect to internal networks on a tenant's behalf")]
    Internal { host: String, addr: IpAddr },
}

/// The addresses of `host` this policy lets Stockade connect to (all of
/// them must be allowed: a name that resolves to one internal address is
/// refused whole, so the choice cannot be steered).
pub async fn resolve_allowed(
    host: &str,
    port: u16,
    policy: &AddressPolicy,
) -> Result<Vec<SocketAddr>, Refused> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|_| Refused::Unresolvable(bare.to_owned()))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(Refused::Unresolvable(bare.to_owned()));
    }
    if let Some(bad) = addrs.iter().find(|a| !policy.allows(a.ip())) {
        return Err(Refused::Internal {
            host: bare.to_owned(),
            addr: bad.ip(),
        });
    }
    Ok(addrs)
}

/// Resolves names for the HTTP client and lets only allowed addresses
/// through; the client connects to exactly these (the address is pinned).
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<AddressPolicy>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let addrs = resolve_allowed(name.as_str(), 0, &policy).await?;
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// Whether a URL's host, when it is an address literal (which skips name
/// resolution), is allowed.
fn literal_allowed(url: &Url, policy: &AddressPolicy) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => policy.allows(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => policy.allows(IpAddr::V6(ip)),
        Some(url::Host::Domain(_)) => true,
        None => false,
    }
}

/// An HTTP client for fetching on a tenant's behalf: names resolved through
/// [`GuardedResolver`], redirects (at most 5, http and https only) checked
/// hop by hop, no proxy from the environment.
pub fn http_client(
    policy: &AddressPolicy,
    timeout: Duration,
) -> Result<reqwest::Client, reqwest::Error> {
    let policy = Arc::new(policy.clone());
    let for_redirects = policy.clone();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(timeout)
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver { policy }))
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("more than 5 redirects");
            }
            let url = attempt.url();
            if !matches!(url.scheme(), "http" | "https") {
                return attempt.error("a redirect to a scheme other than http or https");
            }
            if !literal_allowed(url, &for_redirects) {
                return attempt.error("a redirect to an internal address");
            }
            attempt.follow()
        }))
        .build()
}

/// An HTTP client for webhook deliveries: names resolved through
/// [`GuardedResolver`], no redirects followed (a POST is never re-sent
/// elsewhere), no proxy from the environment.
pub fn webhook_client(
    policy: &AddressPolicy,
    timeout: Duration,
) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .timeout(timeout)
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver {
            policy: Arc::new(policy.clone()),
        }))
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

/// Checks a URL's host before anything is fetched (a clear, early error;
/// the client checks again at every connection).
pub async fn check_url(url: &Url, policy: &AddressPolicy) -> Result<Vec<SocketAddr>, Refused> {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(9418);
    resolve_allowed(host, port, policy).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn internal_hosts_are_refused_and_allowed_ranges_pass() {
        let deny = AddressPolicy::default();
        for host in [
            "127.0.0.1",
            "localhost",
            "[::1]",
            "169.254.169.254",
            "10.0.0.1",
        ] {
            let err = resolve_allowed(host, 80, &deny).await.unwrap_err();
            assert!(
                matches!(err, Refused::Internal { .. } | Refused::Unresolvable(_)),
                "{host}: {err:?}"
            );
        }
        let allow = AddressPolicy {
            allow: vec![stockade_core::net::IpNet::parse("127.0.0.0/8").unwrap()],
        };
        let ok = resolve_allowed("127.0.0.1", 8080, &allow).await.unwrap();
        assert_eq!(ok, vec!["127.0.0.1:8080".parse().unwrap()]);
        let url = Url::parse("http://127.0.0.2:1/x").unwrap();
        assert!(literal_allowed(&url, &allow));
        assert!(!literal_allowed(&url, &deny));
    }

    #[tokio::test]
    async fn the_client_will_not_connect_to_a_refused_address() {
        // A listener on loopback that must never see a connection.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = http_client(&AddressPolicy::default(), Duration::from_secs(5)).unwrap();
        let err = client
            .get(format!("http://localhost:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_connect() || err.is_request(), "{err}");
        assert!(
            listener.accept().is_err(),
            "the refused address was connected to"
        );
    }
}
