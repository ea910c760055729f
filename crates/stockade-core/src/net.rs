//! IP networks and the address classes Stockade never reaches on a
//! tenant's behalf: loopback, private, link-local (the cloud
//! metadata service lives there), carrier-grade NAT, unique-local,
//! unspecified, broadcast, multicast and documentation ranges.

use std::net::IpAddr;

/// An address or a CIDR block, e.g. `10.0.0.0/8`, `::1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

/// Why a text is not an [`IpNet`]; the Display is the message shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpNetError {
    #[error("'{0}' is not an IP address or CIDR")]
    NotAnAddress(String),
    #[error("invalid prefix length in '{0}'")]
    BadPrefix(String),
}

impl IpNet {
    pub fn parse(s: &str) -> Result<Self, IpNetError> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| IpNetError::NotAnAddress(s.to_owned()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| IpNetError::BadPrefix(s.to_owned()))?,
        };
        Ok(Self { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (canonical(self.addr), canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Whether `ip` is not a public internet address: loopback, private,
/// link-local (169.254.169.254, the metadata service, included),
/// carrier-grade NAT, unique-local, unspecified, broadcast, multicast,
/// benchmarking or documentation ranges.
pub fn is_internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // carrier-grade NAT
                || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking
                || o[0] >= 240 // reserved
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link local
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x0064 && s[1] == 0xff9b) // NAT64 of anything
        }
    }
}

/// Addresses a tenant may make Stockade reach: public ones, and internal
/// ones an administrator allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    pub allow: Vec<IpNet>,
}

impl AddressPolicy {
    pub fn allows(&self, ip: IpAddr) -> bool {
        !is_internal(ip) || self.allow.iter().any(|n| n.contains(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.17.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(is_internal(ip(internal)), "{internal}");
        }
        for public in ["1.1.1.1", "8.8.8.8", "2606:4700::1111", "151.101.1.69"] {
            assert!(!is_internal(ip(public)), "{public}");
        }
    }

    #[test]
    fn nets_parse_and_match() {
        let net = IpNet::parse("10.0.0.0/8").unwrap();
        assert!(net.contains(ip("10.200.0.1")));
        assert!(net.contains(ip("::ffff:10.0.0.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(IpNet::parse("10.0.0.0/33").is_err());
        assert!(IpNet::parse("nope").is_err());
        assert!(IpNet::parse("::1/128").unwrap().contains(ip("::1")));
        assert!(IpNet::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        let policy = AddressPolicy {
            allow: vec![IpNet::parse("127.0.0.1").unwrap()],
        };
        assert!(policy.allows(ip("127.0.0.1")));
        assert!(!policy.allows(ip("127.0.0.2")));
        assert!(policy.allows(ip("1.1.1.1")));
    }
}
