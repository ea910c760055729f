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
//!
//! Whatever the policy, the `filter` chain first jumps to a chain of
//! [`private_rules`], shared by every sandbox with the same opt-in: it
//! rejects what goes to the private and link-local ranges (the local
//! network, the cloud metadata service) outside the blocks an
//! administrator opted in, and returns the rest to the policy's rules.

use stockade_core::netpolicy::{Cidr, EgressPolicy, EgressRule, PrivateAccess, PRIVATE_RANGES};

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

/// The chain that keeps sandboxes from the private ranges, jumped to (`-j`)
/// first from every sandbox's `filter` chain: each rule as the arguments
/// after `-A <chain>`.
///
/// - packets that answer a connection opened from elsewhere return (a
///   client on the local network reaching a published port gets its
///   replies);
/// - what goes to a block opted in returns, so the policy decides;
/// - what goes to the rest of the private ranges is rejected.
///
/// Ranges of the other address family are left out.
pub fn private_rules(access: &PrivateAccess, family: Family) -> Vec<Vec<String>> {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut rules = vec![words(&[
        "-m",
        "conntrack",
        "--ctdir",
        "REPLY",
        "-j",
        "RETURN",
    ])];
    for block in access.allowed().iter().filter(|b| family.holds(b)) {
        rules.push(words(&["-d", &block.to_string(), "-j", "RETURN"]));
    }
    for range in PRIVATE_RANGES.iter().filter(|r| family.holds(r)) {
        let d = range.to_string();
        rules.push(words(&[
            "-d",
            &d,
            "-p",
            "tcp",
            "-j",
            "REJECT",
            "--reject-with",
            "tcp-reset",
        ]));
        rules.push(words(&[
            "-d",
            &d,
            "-j",
            "REJECT",
            "--reject-with",
            family.icmp_reject(),
        ]));
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
/// sandbox at once, and the chain of [`private_rules`] its `filter` chain
/// jumps to first (each table is swapped atomically; a chain named with
/// `:` is created or emptied). `filter_chain`/`nat_chain`/`private_chain`
/// are the caller's names for them (at most 28 characters, e.g.
/// `STK-EG-<sandbox id>`).
pub fn restore_script(
    policy: &EgressPolicy,
    family: Family,
    filter_chain: &str,
    nat_chain: &str,
    (private_chain, private): (&str, &PrivateAccess),
    ports: RedirectPorts,
) -> String {
    let mut filter = vec![vec!["-j".to_owned(), private_chain.to_owned()]];
    filter.extend(forward_rules(policy, family));
    let mut out = String::from("*filter\n");
    push_chain(&mut out, private_chain, private_rules(private, family));
    push_chain(&mut out, filter_chain, filter);
    out.push_str("COMMIT\n*nat\n");
    push_chain(&mut out, nat_chain, redirect_rules(policy, ports));
    out.push_str("COMMIT\n");
    out
}

/// Appends `chain` (created or emptied) with `rules` to a restore input.
pub fn push_chain(out: &mut String, chain: &str, rules: Vec<Vec<String>>) {
    out.push_str(&format!(":{chain} - [0:0]\n"));
    for rule in rules {
        out.push_str(&format!("-A {chain} {}\n", rule.join(" ")));
    }
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
    fn private_ranges_are_rejected_but_opted_in_blocks() {
        let none = lines(private_rules(&PrivateAccess::none(), Family::V4));
        assert_eq!(none[0], "-m conntrack --ctdir REPLY -j RETURN");
        assert_eq!(none.len(), 1 + 5 * 2);
        assert!(none.contains(&"-d 169.254.0.0/16 -p tcp -j REJECT --reject-with tcp-reset".into()));
        assert!(none
            .contains(&"-d 10.0.0.0/8 -j REJECT --reject-with icmp-admin-prohibited".to_owned()));
        assert!(!none
            .iter()
            .any(|r| r.contains("RETURN") && r.contains("-d ")));
        let some = PrivateAccess::parse(&["10.9.0.0/16", "fd00::/8"]).unwrap();
        let v4 = lines(private_rules(&some, Family::V4));
        assert_eq!(v4[1], "-d 10.9.0.0/16 -j RETURN");
        assert_eq!(v4.len(), 2 + 5 * 2);
        let v6 = lines(private_rules(&some, Family::V6));
        assert_eq!(v6[1], "-d fd00::/8 -j RETURN");
        assert!(v6.contains(&"-d fe80::/10 -j REJECT --reject-with icmp6-adm-prohibited".into()));
        assert_eq!(v6.len(), 2 + 2 * 2);
    }

    #[test]
    fn restore_scripts_replace_both_chains() {
        let p = policy(json!({"allow": ["example.com"]}));
        let private = PrivateAccess::parse(&["10.9.0.0/16"]).unwrap();
        let script = restore_script(
            &p,
            Family::V4,
            "STK-EG-abc",
            "STK-EGN-abc",
            ("STK-P", &private),
            PORTS,
        );
        let private_lines: String = private_rules(&private, Family::V4)
            .into_iter()
            .map(|r| format!("-A STK-P {}\n", r.join(" ")))
            .collect();
        assert_eq!(
            script,
            "*filter\n:STK-P - [0:0]\n".to_owned()
                + &private_lines
                + ":STK-EG-abc - [0:0]\n\
             -A STK-EG-abc -j STK-P\n\
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
