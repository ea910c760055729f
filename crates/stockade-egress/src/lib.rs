//! The egress filter for sandbox network policies: a transparent
//! TCP proxy that checks the TLS server name or HTTP `Host` of connections
//! to ports 80/443 against the sandbox's [`EgressPolicy`], and a DNS
//! forwarder that answers only names the policy allows.
//!
//! The packet filter (outside this crate) redirects what sandboxes send to
//! TCP 80/443 to the [`EgressProxy`] and what they send to port 53 to the
//! [`DnsForwarder`]; address (CIDR) entries it enforces itself. Both
//! services find a sandbox's policy by its source address through a
//! [`PolicySource`], normally the [`Policies`] registry, whose entries can
//! be swapped at any time: the next connection or query sees the new policy,
//! and spliced connections the new policy refuses are cut.
//!
//! A connection for a name goes through only to an address the proxy's own
//! DNS resolution returned for that name, and only when it is the address
//! the sandbox dialled: a sandbox cannot borrow an allowed name for another
//! host. Nothing goes to the private and link-local ranges (the local
//! network, the cloud metadata service) outside the blocks an
//! administrator opted in, whatever the policy. The answers the forwarder
//! gave each sandbox are kept in [`ResolvedNames`] (name → addresses, with
//! their TTL), where the proxy looks first and the packet filter may look
//! too.
//!
//! [`EgressFilter::start`] runs both on given addresses; the pieces are
//! public for other arrangements and for tests. [`iptables`] writes the
//! packet-filter half of a policy (address entries and the redirects).
#![forbid(unsafe_code)]

mod dns;
mod filter;
pub mod iptables;
mod limits;
mod names;
mod origdst;
mod policies;
mod proxy;
mod resolver;
mod sniff;
mod task;

pub use dns::{DnsConfig, DnsForwarder};
pub use filter::{EgressConfig, EgressFilter, StartError};
pub use names::{ResolvedAddr, ResolvedName, ResolvedNames};
pub use origdst::{OriginalDst, SoOriginalDst};
pub use policies::{Policies, PolicySource};
pub use proxy::{EgressProxy, ProxyConfig};
pub use resolver::{DnsError, Resolver, Transport};
pub use sniff::{sniff, Sniffed};
pub use stockade_core::netpolicy::EgressPolicy;
pub use task::Task;
