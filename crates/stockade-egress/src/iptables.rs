//! The packet-filter half of a sandbox's policy, as iptables rules: its
//! address entries on the forwarding path, and the redirects of its DNS
//! (to the forwarder) and, when its policy names hosts, of its TCP 80/443
//! (to the proxy). Pure text; applying it (`iptables-restore --noflush`)
//! and hooking the chains up is the caller's.
//!
//! Per sandbox there are two chains, each reached for the sandbox's source
//! address only:
//!
//! - a `filter` chain, jumped to from `DOCKER-USER` (the top of `FORWARD`)
//!   for packets from the sandbox bridge: it `REJECT`s what the policy
//!   denies and `RETURN`s what it allows, so Docker's own rules go on to
//!   accept it. Every packet passes it, not just the first of a
//!   connection, so a change cuts established connections too.
//! - a `nat` chain, jumped to from `PREROUTING`: it `REDIRECT`s port 53
//!   (UDP and TCP) to the forwarder and, for policies with name entries,
//!   TCP 80/443 to anything but the host's own addresses to the proxy.
//!   Redirected packets go to the host (`INPUT`), never through `FORWARD`.

use stockade_core::netpolicy::{Cidr, EgressPolicy, EgressRule};

/// Which of `iptables` / `ip6tables` the rules are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    fn holds(self, net: &Cidr) -> bool {
        net.addr().is_ipv4() == (self == Self::V4)
    }

    fn icmp_reject(self) -> &'static str {
        match self {
            Self::V4 => "icmp-admin-prohibited",
            Self::V6 => "icmp6-adm-prohibited",
        }
    }
}

/// Where the redirects send a sandbox's traffic: the ports the proxy and
/// the forwarder listen on (on the address of the bridge the traffic
/// arrives on, which is where `REDIRECT` delivers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedirectPorts {
    pub proxy: u16,
    pub dns: u16,
}

/// Whether the policy's TCP 80/443 must go through the proxy: it allows
/// something and has name entries.
pub fn needs_proxy(policy: &EgressPolicy) -> bool {
    !policy.is_deny_all() && policy.has_name_entries()
}

/// The sandbox's `filter` chain: each rule as the arguments after
/// `-A <chain>`.
///
/// - allow-all: nothing (everything returns to Docker's rules);
/// - deny-all (or an empty allow list): everything rejected;
/// - lists: deny entries rejected, then allow entries returned, then (with
///   an allow list) the rest rejected. With name entries and no allow list,
///   UDP 443 is rejected first: QUIC would pass the proxy's name check by.
///
/// Name entries have no rules here (the proxy and the forwarder enforce
/// them); entries of the other address family are left out.
pub fn forward_rules(policy: &EgressPolicy, family: Family) -> Vec<Vec<String>> {
    let mut rules = Vec::new();
    let reject = |rules: &mut Vec<Vec<String>>, matches: &[&str], port: Option<u16>| {
        let port = port.map(|p| p.to_string());
        let with = |proto: &str, target: &[&str]| {
            let mut rule: Vec<String> = matches.iter().map(|s| s.to_string()).collect();
            rule.extend(["-p", proto].map(String::from));
            if let Some(port) = &port {
                rule.extend(["--dport".to_owned(), port.clone()]);
            }
            rule.extend(target.iter().map(|s| s.to_string()));
            rule
        };
        rules.push(with("tcp", &["-j", "REJECT", "--reject-with", "tcp-reset"]));
        let icmp = ["-j", "REJECT", "--reject-with", family.icmp_reject()];
        match port {
            Some(_) => rules.push(with("udp", &icmp)),
            None => {
                let mut rule: Vec<String> = matches.iter().map(|s| s.to_string()).collect();
                rule.extend(icmp.map(String::from));
                rules.push(rule);
            }
        }
    };
    let (allow, deny) = match policy {
        EgressPolicy::AllowAll => return rules,
        EgressPolicy::DenyAll => {
            reject(&mut rules, &[], None);
            return rules;
        }
        EgressPolicy::Rules { allow, deny } => (allow, deny),
    };
    if allow.is_none() && policy.has_name_entries() {
        let icmp = family.icmp_reject();
        rules.push(
            [
                "-p",
                "udp",
                "--dport",
                "443",
                "-j",
                "REJECT",
                "--reject-with",
                icmp,
            ]
            .map(String::from)
            .to_vec(),
        );
    }
    for rule in deny {
        if let EgressRule::Cidr(net, port) = rule {
            if family.holds(net) {
                reject(&mut rules, &["-d", &net.to_string()], *port);
            }
        }
    }
    if let Some(allow) = allow {
        for rule in allow {
            if let EgressRule::Cidr(net, port) = rule {
                if !family.holds(net) {
                    continue;
                }
                let d = net.to_string();
                match port {
                    None => rules.push(["-d", &d, "-j", "RETURN"].map(String::from).to_vec()),
                    Some(port) => {
                        let p = port.to_string();
                        for proto in ["tcp", "udp"] {
                            let rule = ["-d", &d, "-p", proto, "--dport", &p, "-j", "RETURN"];
                            rules.push(rule.map(String::from).to_vec());
                        }
                    }
                }
            }
        }
        reject(&mut rules, &[], None);
    }
    rules
}

/// The sandbox's `nat` chain: each rule as the arguments after
/// `-A <chain>`. DNS always goes to the forwarder (which refuses what the
/// policy does not allow, and answers nothing under deny-all); TCP 80/443
/// goes to the proxy when [`needs_proxy`].
pub fn redirect_rules(policy: &EgressPolicy, ports: RedirectPorts) -> Vec<Vec<String>> {
    let dns = ports.dns.to_string();
    let mut rules: Vec<Vec<String>> = ["udp", "tcp"]
        .iter()
        .map(|proto| {
            [
                "-p",
                proto,
                "--dport",
                "53",
                "-j",
                "REDIRECT",
                "--to-ports",
                &dns,
            ]
            .map(String::from)
            .to_vec()
        })
        .collect();
    if needs_proxy(policy) {
        let proxy = ports.proxy.to_string();
        let rule = [
            "-p",
            "tcp",
            "-m",
            "multiport",
            "--dports",
            "80,443",
            "-m",
            "addrtype",
            "!",
            "--dst-type",
            "LOCAL",
            "-j",
            "REDIRECT",
            "--to-ports",
            &proxy,
        ];
        rules.push(rule.map(String::from).to_vec());
    }
    rules
}

/// An `iptables-restore --noflush` input that replaces both chains of one
/// sandbox at once (each table is swapped atomically; a chain named with
/// `:` is created or emptied). `filter_chain`/`nat_chain` are the caller's
/// names for them (at most 28 characters, e.g. `STK-EG-<sandbox id>`).
pub fn restore_script(
    policy: &EgressPolicy,
    family: Family,
    filter_chain: &str,
    nat_chain: &str,
    ports: RedirectPorts,
) -> String {
    let mut out = String::new();
    let mut table = |name: &str, chain: &str, rules: Vec<Vec<String>>| {
        out.push_str(&format!("*{name}\n:{chain} - [0:0]\n"));
        for rule in rules {
            out.push_str(&format!("-A {chain} {}\n", rule.join(" ")));
        }
        out.push_str("COMMIT\n");
    };
    table("filter", filter_chain, forward_rules(policy, family));
    table("nat", nat_chain, redirect_rules(policy, ports));
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(v: serde_json::Value) -> EgressPolicy {
        EgressPolicy::parse(&v).unwrap()
    }

    fn lines(rules: Vec<Vec<String>>) -> Vec<String> {
        rules.into_iter().map(|r| r.join(" ")).collect()
    }

    const PORTS: RedirectPorts = RedirectPorts {
        proxy: 15001,
        dns: 15053,
    };

    #[test]
    fn modes() {
        assert!(forward_rules(&EgressPolicy::AllowAll, Family::V4).is_empty());
        assert_eq!(
            lines(forward_rules(&EgressPolicy::DenyAll, Family::V4)),
            [
                "-p tcp -j REJECT --reject-with tcp-reset",
                "-j REJECT --reject-with icmp-admin-prohibited"
            ]
        );
        assert_eq!(
            lines(forward_rules(&policy(json!({"allow": []})), Family::V6)),
            [
                "-p tcp -j REJECT --reject-with tcp-reset",
                "-j REJECT --reject-with icmp6-adm-prohibited"
            ]
        );
        for p in [EgressPolicy::AllowAll, EgressPolicy::DenyAll] {
            assert_eq!(
                lines(redirect_rules(&p, PORTS)),
                [
                    "-p udp --dport 53 -j REDIRECT --to-ports 15053",
                    "-p tcp --dport 53 -j REDIRECT --to-ports 15053"
                ]
            );
        }
    }

    #[test]
    fn lists() {
        let p = policy(json!({
            "allow": ["example.com", "10.0.0.0/8", "192.0.2.7:5432", "2001:db8::/32"],
            "deny": ["10.9.0.0/16", "10.1.0.1:22", "evil.example"]
        }));
        assert_eq!(
            lines(forward_rules(&p, Family::V4)),
            [
                "-d 10.9.0.0/16 -p tcp -j REJECT --reject-with tcp-reset",
                "-d 10.9.0.0/16 -j REJECT --reject-with icmp-admin-prohibited",
                "-d 10.1.0.1 -p tcp --dport 22 -j REJECT --reject-with tcp-reset",
                "-d 10.1.0.1 -p udp --dport 22 -j REJECT --reject-with icmp-admin-prohibited",
                "-d 10.0.0.0/8 -j RETURN",
                "-d 192.0.2.7 -p tcp --dport 5432 -j RETURN",
                "-d 192.0.2.7 -p udp --dport 5432 -j RETURN",
                "-p tcp -j REJECT --reject-with tcp-reset",
                "-j REJECT --reject-with icmp-admin-prohibited",
            ]
        );
        assert_eq!(
            lines(forward_rules(&p, Family::V6)),
            [
                "-d 2001:db8::/32 -j RETURN",
                "-p tcp -j REJECT --reject-with tcp-reset",
                "-j REJECT --reject-with icmp6-adm-prohibited",
            ]
        );
        assert_eq!(
            lines(redirect_rules(&p, PORTS))[2],
            "-p tcp -m multiport --dports 80,443 -m addrtype ! --dst-type LOCAL \
             -j REDIRECT --to-ports 15001"
        );
    }

    #[test]
    fn deny_lists_reject_quic_when_names_are_listed() {
        let p = policy(json!({"deny": ["evil.example", "169.254.0.0/16"]}));
        assert_eq!(
            lines(forward_rules(&p, Family::V4)),
            [
                "-p udp --dport 443 -j REJECT --reject-with icmp-admin-prohibited",
                "-d 169.254.0.0/16 -p tcp -j REJECT --reject-with tcp-reset",
                "-d 169.254.0.0/16 -j REJECT --reject-with icmp-admin-prohibited",
            ]
        );
        // Address entries only: no proxy, no QUIC rule.
        let p = policy(json!({"allow": ["10.0.0.0/8"]}));
        assert!(!needs_proxy(&p));
        assert_eq!(redirect_rules(&p, PORTS).len(), 2);
        assert_eq!(
            lines(forward_rules(&p, Family::V4))[0],
            "-d 10.0.0.0/8 -j RETURN"
        );
        assert!(!needs_proxy(&policy(json!({"allow": []}))));
        assert!(needs_proxy(&policy(json!({"deny": ["evil.example"]}))));
    }

    #[test]
    fn restore_scripts_replace_both_chains() {
        let p = policy(json!({"allow": ["example.com"]}));
        let script = restore_script(&p, Family::V4, "STK-EG-abc", "STK-EGN-abc", PORTS);
        assert_eq!(
            script,
            "*filter\n:STK-EG-abc - [0:0]\n\
             -A STK-EG-abc -p tcp -j REJECT --reject-with tcp-reset\n\
             -A STK-EG-abc -j REJECT --reject-with icmp-admin-prohibited\n\
             COMMIT\n\
             *nat\n:STK-EGN-abc - [0:0]\n\
             -A STK-EGN-abc -p udp --dport 53 -j REDIRECT --to-ports 15053\n\
             -A STK-EGN-abc -p tcp --dport 53 -j REDIRECT --to-ports 15053\n\
             -A STK-EGN-abc -p tcp -m multiport --dports 80,443 -m addrtype ! --dst-type LOCAL \
             -j REDIRECT --to-ports 15001\n\
             COMMIT\n"
        );
    }
}
