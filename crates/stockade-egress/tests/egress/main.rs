//! The egress filter against real sockets on this machine only: loopback
//! upstreams and a fake upstream DNS server, plus (as root) the real
//! transparent path through a network namespace and iptables `REDIRECT`.

mod dns;
mod filter;
mod latency;
mod netns;
mod proxy;
mod support;
