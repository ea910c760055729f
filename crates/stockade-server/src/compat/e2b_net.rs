//! E2B's egress settings (`allow_internet_access`, `network.allowOut`,
//! `network.denyOut`, `network.dnsServers`) as Stockade's `networkPolicy`,
//! for creates and for `PUT /e2b/sandboxes/{id}/network`.
//!
//! E2B's precedence is the reverse of Stockade's: an `allowOut` entry wins
//! over a `denyOut` entry, and `allowOut` only means something as an
//! exception to `denyOut` (E2B refuses it alone). So:
//!
//! - `denyOut` with `0.0.0.0/0` (E2B's `ALL_TRAFFIC`, also what
//!   `allow_internet_access: false` adds) and `allowOut` L → `{"allow": L}`
//!   (plus port 53 of each of `dnsServers` when L has a name: a DNS server
//!   is opened for DNS only, not for DoH or DoT on its other ports);
//!   without L → `"deny-all"`.
//! - `denyOut` D alone → `{"deny": D}`.
//! - `denyOut` D (no `0.0.0.0/0`) and `allowOut` addresses L → `{"deny":
//!   D − L}`: each denied block that an allowed block overlaps is split into
//!   the blocks around the exception, so what E2B allows is allowed and the
//!   rest of D stays denied. Allowed blocks no denied one overlaps are
//!   allowed anyway and dropped.
//! - Nothing → `"allow-all"`.
//!
//! Refused with a 400 naming the field: `allowOut` without `denyOut` (E2B
//! refuses it too), a name in `allowOut` next to a partial `denyOut` (a
//! name cannot be excepted from address blocks; E2B refuses it too), an
//! exception that involves a port, and a result over
//! [`netpolicy::MAX_ENTRIES`] entries.

use serde::Deserialize;
use serde_json::{json, Value};
use stockade_core::netpolicy::{self, Cidr, EgressRule};

use crate::error::ApiError;

/// E2B's "all traffic" CIDR (`ALL_TRAFFIC` in the SDKs).
pub const ALL_TRAFFIC: &str = "0.0.0.0/0";

/// The body of `PUT /e2b/sandboxes/{id}/network`: the whole egress
/// configuration; a field left out is cleared, as E2B does.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct E2bNetworkUpdate {
    #[serde(default)]
    pub allow_out: Option<Vec<String>>,
    #[serde(default)]
    pub deny_out: Option<Vec<String>>,
    #[serde(default)]
    pub dns_servers: Option<Vec<String>>,
    #[serde(default)]
    pub egress_proxy: Option<Value>,
    #[serde(default)]
    pub rules: Option<Value>,
    #[serde(default)]
    pub allow_internet_access: Option<bool>,
}

/// E2B's egress settings of one request, by their E2B field names.
#[derive(Debug, Clone, Copy)]
pub struct Egress<'a> {
    pub allow_out: &'a [String],
    pub deny_out: &'a [String],
    pub dns_servers: Option<&'a [String]>,
    /// `allow_internet_access` (create) or `allowInternetAccess` (update).
    pub internet: Option<bool>,
    /// The name `internet` is sent under, for errors.
    pub internet_field: &'static str,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> ApiError {
    ApiError::field(field, message)
}

/// The `networkPolicy` value `e` stands for, or `None` when it leaves the
/// server's default.
pub fn policy_of(e: &Egress<'_>) -> Result<Option<Value>, ApiError> {
    let allow = parse_list(e.allow_out, "network.allowOut")?;
    let deny = parse_list(e.deny_out, "network.denyOut")?;
    let all_listed = e.deny_out.iter().any(|d| d.trim() == ALL_TRAFFIC);
    if e.internet == Some(true) && all_listed {
        return Err(bad(
            e.internet_field,
            format!(
                "{} true contradicts network.denyOut [\"{ALL_TRAFFIC}\"]",
                e.internet_field
            ),
        ));
    }
    let blocks_all = all_listed || e.internet == Some(false);
    if blocks_all {
        if allow.is_empty() {
            return Ok(Some(json!("deny-all")));
        }
        let mut list: Vec<String> = allow.iter().map(|(_, r)| rule_text(r)).collect();
        if allow.iter().any(|(_, r)| !r.is_cidr()) {
            // E2B opens its DNS servers when allowOut has a name; Stockade
            // answers the sandbox's DNS itself, so only listed ones are added,
            // and only their port 53 (UDP and TCP): the whole address would
            // carry DNS over HTTPS or TLS (443, 853) past the name checks.
            for (i, s) in e.dns_servers.unwrap_or_default().iter().enumerate() {
                let field = format!("network.dnsServers[{i}]");
                let ip: std::net::Ipv4Addr = s
                    .trim()
                    .parse()
                    .map_err(|_| bad(&field, format!("'{s}' is not an IPv4 address")))?;
                list.push(format!("{ip}:53"));
            }
        }
        return checked(json!({ "allow": list }), list.len(), "network.allowOut");
    }
    if !allow.is_empty() {
        if deny.is_empty() {
            return Err(bad(
                "network.allowOut",
                format!(
                    "allowOut only makes exceptions to denyOut, and nothing is denied: add \
                     \"{ALL_TRAFFIC}\" to denyOut to allow only what allowOut lists (as E2B \
                     requires)"
                ),
            ));
        }
        return except(&deny, &allow).map(Some);
    }
    if deny.is_empty() {
        // Only allow_internet_access true is left here.
        return Ok(e.internet.map(|_| json!("allow-all")));
    }
    let list: Vec<String> = deny.iter().map(|(_, r)| rule_text(r)).collect();
    let n = list.len();
    checked(json!({ "deny": list }), n, "network.denyOut")
}

/// Parses the entries of one list; errors name `field[i]`.
fn parse_list(items: &[String], field: &str) -> Result<Vec<(usize, EgressRule)>, ApiError> {
    items
        .iter()
        .enumerate()
        .filter(|(_, s)| !(field.ends_with("denyOut") && s.trim() == ALL_TRAFFIC))
        .map(|(i, s)| {
            EgressRule::parse(s.trim())
                .map(|r| (i, r))
                .map_err(|m| bad(format!("{field}[{i}]"), m.to_string()))
        })
        .collect()
}

/// `denyOut` (without `0.0.0.0/0`) with `allowOut` exceptions, as one deny
/// list: every denied block less the allowed blocks inside it.
fn except(deny: &[(usize, EgressRule)], allow: &[(usize, EgressRule)]) -> Result<Value, ApiError> {
    let mut holes = Vec::new();
    for (i, rule) in allow {
        match rule {
            EgressRule::Cidr(c, None) => holes.push((*i, *c)),
            EgressRule::Cidr(_, Some(_)) => {
                return Err(bad(
                    format!("network.allowOut[{i}]"),
                    "an exception to denyOut cannot be limited to a port: Stockade's deny \
                     entries hold for every port of their block; list the block without the \
                     port, or deny \"0.0.0.0/0\" and allow only what is needed",
                ))
            }
            _ => {
                return Err(bad(
                    format!("network.allowOut[{i}]"),
                    format!(
                        "a domain in allowOut needs denyOut to contain \"{ALL_TRAFFIC}\" (as E2B \
                         requires): a name cannot be excepted from denied address blocks"
                    ),
                ))
            }
        }
    }
    let mut out = Vec::new();
    for (i, rule) in deny {
        let EgressRule::Cidr(block, port) = rule else {
            out.push(rule_text(rule)); // names never overlap addresses
            continue;
        };
        let inside: Vec<Cidr> = holes
            .iter()
            .map(|(_, h)| *h)
            .filter(|h| overlaps(block, h))
            .collect();
        if inside.is_empty() {
            out.push(rule_text(rule));
            continue;
        }
        if port.is_some() {
            return Err(bad(
                format!("network.denyOut[{i}]"),
                "a denied block limited to a port cannot have allowOut exceptions: leave the \
                 port out, or the exception",
            ));
        }
        subtract(*block, &inside, &mut out);
        if out.len() > netpolicy::MAX_ENTRIES {
            break;
        }
    }
    if out.is_empty() {
        return Ok(json!("allow-all"));
    }
    let n = out.len();
    checked(json!({ "deny": out }), n, "network.allowOut").map(|v| v.unwrap_or_default())
}

/// Refuses a policy over Stockade's entry limit, naming `field`.
fn checked(policy: Value, entries: usize, field: &str) -> Result<Option<Value>, ApiError> {
    if entries > netpolicy::MAX_ENTRIES {
        return Err(bad(
            field,
            format!(
                "the egress rules come to {entries} entries and a sandbox holds at most {}: \
                 allowOut exceptions inside denied blocks take up to one entry per prefix bit; \
                 deny smaller blocks, or deny \"{ALL_TRAFFIC}\" and list what is allowed",
                netpolicy::MAX_ENTRIES
            ),
        ));
    }
    Ok(Some(policy))
}

fn rule_text(rule: &EgressRule) -> String {
    match rule {
        EgressRule::Cidr(c, None) => c.to_string(),
        EgressRule::Cidr(c, Some(p)) if c.addr().is_ipv6() => format!("[{c}]:{p}"),
        EgressRule::Cidr(c, Some(p)) => format!("{c}:{p}"),
        EgressRule::Domain(d, None) => d.as_str().to_owned(),
        EgressRule::Domain(d, Some(p)) => format!("{}:{p}", d.as_str()),
        EgressRule::Wildcard(d, None) => format!("*.{}", d.as_str()),
        EgressRule::Wildcard(d, Some(p)) => format!("*.{}:{p}", d.as_str()),
    }
}

/// Whether two blocks share an address (one holds the other's start).
fn overlaps(a: &Cidr, b: &Cidr) -> bool {
    a.addr().is_ipv4() == b.addr().is_ipv4() && (a.contains(b.addr()) || b.contains(a.addr()))
}

/// Whether `outer` holds all of `inner`.
fn covers(outer: &Cidr, inner: &Cidr) -> bool {
    outer.prefix() <= inner.prefix() && overlaps(outer, inner)
}

/// Appends to `out` the blocks of `block` outside every one of `holes`.
fn subtract(block: Cidr, holes: &[Cidr], out: &mut Vec<String>) {
    if out.len() > netpolicy::MAX_ENTRIES || holes.iter().any(|h| covers(h, &block)) {
        return;
    }
    if !holes.iter().any(|h| overlaps(h, &block)) {
        out.push(block.to_string());
        return;
    }
    // A hole inside and none covering: the block is wider than a host, so
    // its halves exist.
    for half in halves(block) {
        subtract(half, holes, out);
    }
}

/// The two blocks one bit longer that make up `block`.
fn halves(block: Cidr) -> [Cidr; 2] {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let p = block.prefix() + 1;
    let (low, high) = match block.addr() {
        IpAddr::V4(a) => {
            let bit = 1u32 << (32 - u32::from(p));
            (
                IpAddr::V4(a),
                IpAddr::V4(Ipv4Addr::from(u32::from(a) | bit)),
            )
        }
        IpAddr::V6(a) => {
            let bit = 1u128 << (128 - u32::from(p));
            (
                IpAddr::V6(a),
                IpAddr::V6(Ipv6Addr::from(u128::from(a) | bit)),
            )
        }
    };
    // Both are aligned to `p` bits by construction.
    [
        Cidr::new(low, p).unwrap_or(block),
        Cidr::new(high, p).unwrap_or(block),
    ]
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use stockade_core::netpolicy::EgressPolicy;

    use super::*;

    fn strings(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    fn map(allow: &[&str], deny: &[&str], internet: Option<bool>) -> Result<Value, String> {
        let (a, d) = (strings(allow), strings(deny));
        policy_of(&Egress {
            allow_out: &a,
            deny_out: &d,
            dns_servers: None,
            internet,
            internet_field: "allow_internet_access",
        })
        .map(|v| v.unwrap_or(Value::Null))
        .map_err(|e| e.detail().message)
    }

    #[test]
    fn all_or_nothing() {
        assert_eq!(map(&[], &[], None), Ok(Value::Null));
        assert_eq!(map(&[], &[], Some(true)), Ok(json!("allow-all")));
        assert_eq!(map(&[], &[], Some(false)), Ok(json!("deny-all")));
        assert_eq!(map(&[], &["0.0.0.0/0"], None), Ok(json!("deny-all")));
        let e = map(&[], &["0.0.0.0/0"], Some(true)).unwrap_err();
        assert!(e.contains("allow_internet_access"), "{e}");
    }

    #[test]
    fn allow_lists_under_all_traffic() {
        assert_eq!(
            map(
                &["Example.com", "*.pypi.org", "1.1.1.1"],
                &["0.0.0.0/0", "10.0.0.0/8"],
                None
            ),
            Ok(json!({"allow": ["example.com", "*.pypi.org", "1.1.1.1"]}))
        );
        // allow_internet_access false stands for denyOut 0.0.0.0/0.
        assert_eq!(
            map(&["8.8.8.0/24"], &[], Some(false)),
            Ok(json!({"allow": ["8.8.8.0/24"]}))
        );
        let (a, d, dns) = (
            strings(&["example.com"]),
            strings(&[ALL_TRAFFIC]),
            strings(&["1.1.1.1"]),
        );
        let e = Egress {
            allow_out: &a,
            deny_out: &d,
            dns_servers: Some(&dns),
            internet: None,
            internet_field: "allow_internet_access",
        };
        assert_eq!(
            policy_of(&e).unwrap(),
            Some(json!({"allow": ["example.com", "1.1.1.1:53"]}))
        );
        // Port 53 only: DNS over HTTPS or TLS to the server stays refused.
        let policy = EgressPolicy::parse(&policy_of(&e).unwrap().unwrap()).unwrap();
        let server: IpAddr = "1.1.1.1".parse().unwrap();
        assert!(policy.allows_ip(server, 53));
        assert!(!policy.allows_ip(server, 443));
        assert!(!policy.allows_ip(server, 853));
    }

    #[test]
    fn deny_lists_and_exceptions() {
        assert_eq!(
            map(&[], &["10.0.0.0/8", "evil.example"], None),
            Ok(json!({"deny": ["10.0.0.0/8", "evil.example"]}))
        );
        // Exceptions that no denied block overlaps are allowed anyway.
        assert_eq!(
            map(&["192.168.1.0/24"], &["10.0.0.0/8"], None),
            Ok(json!({"deny": ["10.0.0.0/8"]}))
        );
        // An exception covering a whole denied block removes it.
        assert_eq!(
            map(&["10.0.0.0/8"], &["10.1.0.0/16"], None),
            Ok(json!("allow-all"))
        );
        // One /24 out of a /22: the other three /24s stay denied.
        assert_eq!(
            map(&["10.0.1.0/24"], &["10.0.0.0/22"], None),
            Ok(json!({"deny": ["10.0.0.0/24", "10.0.2.0/23"]}))
        );
    }

    #[test]
    fn exceptions_decide_as_e2b_does() {
        let allow = ["10.1.2.3", "10.200.0.0/16", "fd00::1"];
        let deny = ["10.0.0.0/8", "172.16.0.0/12", "fd00::/120"];
        let value = map(&allow, &deny, None).unwrap();
        let policy = EgressPolicy::parse(&value).unwrap();
        let e2b = |ip: IpAddr| {
            let c = |s: &str| Cidr::parse(s).unwrap();
            allow.iter().any(|a| c(a).contains(ip)) || !deny.iter().any(|d| c(d).contains(ip))
        };
        for ip in [
            "10.1.2.3",
            "10.1.2.2",
            "10.1.2.4",
            "10.0.0.0",
            "10.255.255.255",
            "10.200.7.7",
            "10.199.255.255",
            "10.201.0.0",
            "172.16.0.1",
            "172.32.0.1",
            "8.8.8.8",
            "fd00::1",
            "fd00::2",
            "fe80::1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(policy.allows_ip(ip, 443), e2b(ip), "{ip}");
        }
    }

    #[test]
    fn inexpressible_cases_are_refused_by_field() {
        let e = map(&["example.com"], &["10.0.0.0/8"], None).unwrap_err();
        assert!(
            e.contains("network.allowOut[0]") && e.contains("0.0.0.0/0"),
            "{e}"
        );
        let e = map(&["10.1.1.1:443"], &["10.0.0.0/8"], None).unwrap_err();
        assert!(
            e.contains("network.allowOut[0]") && e.contains("port"),
            "{e}"
        );
        let e = map(&["1.1.1.1"], &[], None).unwrap_err();
        assert!(
            e.contains("network.allowOut") && e.contains("0.0.0.0/0"),
            "{e}"
        );
        let e = map(&[], &["0.0.0.0/0", "not a host"], None).unwrap_err();
        assert!(e.contains("network.denyOut[1]"), "{e}");
        // Three single addresses out of a /8 need 3 × 24 blocks: over the limit.
        let e = map(
            &["10.0.0.1", "10.90.0.1", "10.200.0.1"],
            &["10.0.0.0/8"],
            None,
        )
        .unwrap_err();
        assert!(e.contains("at most 64"), "{e}");
    }
}
