//! Egress policies in the packet filter, the parts without I/O:
//! chain names, the `iptables-restore` input that writes or removes one
//! sandbox's entries, and reading entries back from `iptables -S`.
//!
//! Layout, for a configuration whose isolation chain is `BASE-ISOLATION`
//! (default `STOCKADE-ISOLATION`) and whose sandbox bridge is `BR`:
//!
//! - `filter` chain `BASE-EGRESS`, jumped to from the top of `DOCKER-USER`
//!   for what sandboxes on `BR` forward out: one entry per sandbox
//!   (`-s ADDR/32 -m comment --comment stockade:ID -g BASE-HASH`), then a
//!   final reject of everything else. A sandbox without an entry reaches
//!   nothing outside: the filter fails closed.
//! - `filter` chain `BASE-HASH` per sandbox: first a jump to `BASE-PKEY`,
//!   then what its policy rejects (nothing more for allow-all, so its
//!   traffic goes on to Docker's rules).
//! - `filter` chain `BASE-PKEY`: the private and link-local ranges (the
//!   local network, the cloud metadata service) rejected but for the blocks
//!   the administrator opted in ([`PrivateAccess`]). `KEY` is 8 hex digits
//!   of the SHA-256 of the opt-in, so every sandbox written with the same
//!   opt-in shares it (and servers with another opt-in on the same host
//!   never change it under them); it is rewritten with each sandbox's
//!   entry, and dropped by the isolation check once no chain jumps to it.
//! - `nat` chain `BASE-EGRESS`, jumped to from the top of `PREROUTING` for
//!   packets arriving on `BR`, with the same entries jumping to `nat`
//!   chain `BASE-HASH`: the redirects of the sandbox's DNS (and TCP 80/443)
//!   to the egress filter. Every sandbox's DNS goes there when the filter
//!   runs, allow-all's too: the host's resolver is often in a private range
//!   that the sandbox itself may not reach (a VPC resolver, a home router).
//!
//! `HASH` is 12 hex digits of the SHA-256 of the sandbox id, so the chain
//! name fits iptables' 28 characters.

use std::net::IpAddr;

use sha2::{Digest, Sha256};
use stockade_core::netpolicy::{Cidr, EgressPolicy, PrivateAccess};
use stockade_core::SandboxId;
use stockade_egress::iptables::{
    forward_rules, private_rules, push_chain, redirect_rules, Family, RedirectPorts,
};

/// Where the host-side egress filter listens, and what it must never dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressHost {
    /// The sandbox network's gateway: the host's address on its bridge,
    /// where `REDIRECT`ed traffic arrives.
    pub gateway: IpAddr,
    /// Every Docker network's subnets (sandboxes, other containers).
    pub subnets: Vec<Cidr>,
}

/// One sandbox's entry in the egress chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressEntry {
    pub sandbox_id: SandboxId,
    pub addr: IpAddr,
}

/// The prefix of the comment that marks a sandbox's entry.
const COMMENT_PREFIX: &str = "stockade:";

/// The names of one configuration's egress chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressChains {
    base: String,
}

impl EgressChains {
    /// From the isolation chain's name: `X-ISOLATION` gives `X-EGRESS`
    /// and `X-<hash>`; any other name is used as the base as it is.
    pub fn for_isolation_chain(chain: &str) -> Self {
        let base = chain.strip_suffix("-ISOLATION").unwrap_or(chain);
        Self {
            base: base.to_owned(),
        }
    }

    /// The longest base that leaves room for a sandbox chain's hash.
    pub const MAX_BASE: usize = 28 - 13;

    /// Whether the names fit iptables' 28 characters.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        self.check_lengths().map_err(crate::ConfigError)
    }

    fn check_lengths(&self) -> Result<(), String> {
        if self.base.len() > Self::MAX_BASE {
            return Err(format!(
                "chain: '{}' leaves no room for the egress chains (at most {} characters before \
                 -ISOLATION)",
                self.base,
                Self::MAX_BASE
            ));
        }
        Ok(())
    }

    /// The chain every sandbox entry is in (both tables).
    pub fn main(&self) -> String {
        format!("{}-EGRESS", self.base)
    }

    /// The chain of one sandbox (both tables).
    pub fn sandbox(&self, id: &SandboxId) -> String {
        let digest = Sha256::digest(id.as_str().as_bytes());
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}-{hex}", self.base)
    }

    /// The `filter` chain of the private ranges' rules for `private`.
    pub fn private(&self, private: &PrivateAccess) -> String {
        let digest = Sha256::digest(private.to_string().as_bytes());
        let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}-P{hex}", self.base)
    }

    /// Whether `chain` is a private ranges' chain of this configuration
    /// (for any opt-in).
    pub fn is_private(&self, chain: &str) -> bool {
        chain
            .strip_prefix(&format!("{}-P", self.base))
            .is_some_and(|key| key.len() == 8 && key.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// The final rules of the `filter` main chain (after every entry):
    /// whatever no entry claims is rejected.
    pub fn closing_rules(&self) -> Vec<String> {
        let main = self.main();
        vec![
            format!("-A {main} -p tcp -j REJECT --reject-with tcp-reset"),
            format!("-A {main} -j REJECT --reject-with icmp-admin-prohibited"),
        ]
    }
}

/// The entry rule (without `-A`/`-I`/`-D` and the chain) of a sandbox.
fn entry_rule(chains: &EgressChains, id: &SandboxId, addr: IpAddr, verb: &str) -> String {
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    format!(
        "-s {addr}/{bits} -m comment --comment {COMMENT_PREFIX}{} {verb} {}",
        id.as_str(),
        chains.sandbox(id)
    )
}

/// One rule of a main chain as `iptables -S` prints it, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRule {
    /// The whole line, `-A CHAIN …`.
    pub line: String,
    pub sandbox_id: Option<SandboxId>,
    pub source: Option<IpAddr>,
    /// The chain it jumps (or goes) to.
    pub target: Option<String>,
}

/// The rules of `chain` in `iptables -S chain` output.
pub fn parse_listing(chain: &str, listing: &str) -> Vec<ListedRule> {
    let prefix = format!("-A {chain} ");
    listing
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let after = |flag: &str| {
                words
                    .windows(2)
                    .find(|w| w[0] == flag)
                    .map(|w| w[1].trim_matches('"'))
            };
            let source = after("-s")
                .and_then(|s| s.split('/').next())
                .and_then(|s| s.parse().ok());
            let sandbox_id = after("--comment")
                .and_then(|c| c.strip_prefix(COMMENT_PREFIX))
                .and_then(|id| SandboxId::parse(id).ok());
            let target = after("-g").or_else(|| after("-j")).map(str::to_owned);
            ListedRule {
                line: line.to_owned(),
                sandbox_id,
                source,
                target,
            }
        })
        .collect()
}

/// The entries in a main chain's listing.
pub fn entries(listed: &[ListedRule]) -> Vec<EgressEntry> {
    listed
        .iter()
        .filter_map(|r| {
            Some(EgressEntry {
                sandbox_id: r.sandbox_id.clone()?,
                addr: r.source?,
            })
        })
        .collect()
}

/// Of `listed` (the `filter` entries), the sandboxes whose chain does not
/// jump first to the private ranges' chain of `private`, as `table` (the
/// whole `filter` table, `iptables -S`) shows them.
pub fn stale_private(
    chains: &EgressChains,
    listed: &[EgressEntry],
    table: &str,
    private: &PrivateAccess,
) -> Vec<SandboxId> {
    let wanted = format!("-j {}", chains.private(private));
    listed
        .iter()
        .filter(|e| {
            let prefix = format!("-A {} ", chains.sandbox(&e.sandbox_id));
            let first = table.lines().find_map(|l| l.strip_prefix(&prefix));
            first.map(str::trim) != Some(wanted.as_str())
        })
        .map(|e| e.sandbox_id.clone())
        .collect()
}

/// The current listings of both main chains.
#[derive(Debug, Clone, Default)]
pub struct Listings {
    pub filter: Vec<ListedRule>,
    pub nat: Vec<ListedRule>,
}

/// Lines that delete the entries of `id`, and of whatever sandbox had
/// `addr`, with their sandbox chains.
fn removals(
    chains: &EgressChains,
    listed: &[ListedRule],
    id: &SandboxId,
    addr: Option<IpAddr>,
    keep_chain: Option<&str>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut dropped = Vec::new();
    for r in listed {
        let ours = r.sandbox_id.as_ref() == Some(id);
        let same_addr = addr.is_some() && r.source == addr && r.sandbox_id.is_some();
        if !(ours || same_addr) {
            continue;
        }
        out.push(r.line.replacen("-A ", "-D ", 1));
        if let Some(target) = &r.target {
            let is_sandbox_chain = target.starts_with(&format!("{}-", chains.base))
                && *target != chains.main()
                && Some(target.as_str()) != keep_chain;
            if is_sandbox_chain && !dropped.contains(target) {
                dropped.push(target.clone());
            }
        }
    }
    for chain in dropped {
        out.push(format!("-F {chain}"));
        out.push(format!("-X {chain}"));
    }
    out
}

/// The `iptables-restore --noflush` input that gives sandbox `id` at
/// `addr` the entries of `policy`, replacing its earlier ones and those of
/// any other sandbox that had `addr` — both tables, each swapped at once —
/// and rewrites the private ranges' chain of `private` it jumps to first.
/// `ports`: where the egress filter listens, for the redirects; `None`
/// writes none (the filter does not run).
pub fn apply_script(
    chains: &EgressChains,
    listings: &Listings,
    id: &SandboxId,
    addr: IpAddr,
    policy: &EgressPolicy,
    private: &PrivateAccess,
    ports: Option<RedirectPorts>,
) -> String {
    let own = chains.sandbox(id);
    let main = chains.main();
    let family = if addr.is_ipv4() {
        Family::V4
    } else {
        Family::V6
    };
    // The old entries go and the new one comes first, in the same commit.
    let entry = |out: &mut String, listed: &[ListedRule], verb: &str| {
        for line in removals(chains, listed, id, Some(addr), Some(&own)) {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str(&format!(
            "-I {main} 1 {}\nCOMMIT\n",
            entry_rule(chains, id, addr, verb)
        ));
    };
    let private_chain = chains.private(private);
    let mut filter = vec![vec!["-j".to_owned(), private_chain.clone()]];
    filter.extend(forward_rules(policy, family));
    let mut out = String::from("*filter\n");
    push_chain(&mut out, &private_chain, private_rules(private, family));
    push_chain(&mut out, &own, filter);
    entry(&mut out, &listings.filter, "-g");
    out.push_str("*nat\n");
    let redirects = ports
        .map(|ports| redirect_rules(policy, ports))
        .unwrap_or_default();
    push_chain(&mut out, &own, redirects);
    entry(&mut out, &listings.nat, "-j");
    out
}

/// The `iptables-restore --noflush` input that removes the entries and
/// chains of the sandboxes `ids`, in one commit; `None` when they have none.
pub fn remove_script(
    chains: &EgressChains,
    listings: &Listings,
    ids: &[SandboxId],
) -> Option<String> {
    let of_all = |listed: &[ListedRule]| -> Vec<String> {
        ids.iter()
            .flat_map(|id| removals(chains, listed, id, None, None))
            .collect()
    };
    let (filter, nat) = (of_all(&listings.filter), of_all(&listings.nat));
    if filter.is_empty() && nat.is_empty() {
        return None;
    }
    let mut out = String::new();
    for (name, lines) in [("filter", filter), ("nat", nat)] {
        out.push_str(&format!("*{name}\n"));
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str("COMMIT\n");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PORTS: RedirectPorts = RedirectPorts {
        proxy: 41001,
        dns: 41053,
    };

    fn id(s: &str) -> SandboxId {
        SandboxId::parse(s).unwrap()
    }

    #[test]
    fn names_fit_iptables() {
        let c = EgressChains::for_isolation_chain("STOCKADE-ISOLATION");
        assert_eq!(c.main(), "STOCKADE-EGRESS");
        let sb = c.sandbox(&SandboxId::generate());
        assert!(sb.starts_with("STOCKADE-") && sb.len() == 21, "{sb}");
        assert_ne!(
            c.sandbox(&SandboxId::generate()),
            c.sandbox(&SandboxId::generate())
        );
        assert!(c.validate().is_ok());
        let long = EgressChains::for_isolation_chain("ABCDEFGHIJKLMNOPQRSTUVWXYZ");
        assert!(long.validate().unwrap_err().0.starts_with("chain: "));
    }

    #[test]
    fn apply_replaces_own_and_stale_entries_and_reads_back() {
        let c = EgressChains::for_isolation_chain("STOCKADE-ISOLATION");
        let me = SandboxId::generate();
        let old = SandboxId::generate();
        let addr: IpAddr = "192.168.64.7".parse().unwrap();
        let listing = format!(
            "-N STOCKADE-EGRESS\n\
             -A STOCKADE-EGRESS -s 192.168.64.7/32 -m comment --comment stockade:{old} -g {oc}\n\
             -A STOCKADE-EGRESS -s 192.168.64.9/32 -m comment --comment stockade:{me} -g {mc}\n\
             -A STOCKADE-EGRESS -p tcp -j REJECT --reject-with tcp-reset\n",
            old = old.as_str(),
            me = me.as_str(),
            oc = c.sandbox(&old),
            mc = c.sandbox(&me),
        );
        let listed = parse_listing("STOCKADE-EGRESS", &listing);
        assert_eq!(listed.len(), 3);
        assert_eq!(
            entries(&listed),
            [
                EgressEntry {
                    sandbox_id: old.clone(),
                    addr
                },
                EgressEntry {
                    sandbox_id: me.clone(),
                    addr: "192.168.64.9".parse().unwrap()
                }
            ]
        );
        let listings = Listings {
            filter: listed.clone(),
            nat: Vec::new(),
        };
        let policy =
            EgressPolicy::parse(&json!({"allow": ["10.9.0.0/16", "example.com"]})).unwrap();
        let private = PrivateAccess::parse(&["10.9.0.0/16"]).unwrap();
        let script = apply_script(&c, &listings, &me, addr, &policy, &private, Some(PORTS));
        let mine = c.sandbox(&me);
        // The old sandbox's entry and chain go; our old entry goes, our chain stays (refilled).
        assert!(script.contains("-D STOCKADE-EGRESS -s 192.168.64.7/32"));
        assert!(script.contains(&format!("-F {}\n-X {}", c.sandbox(&old), c.sandbox(&old))));
        assert!(script.contains("-D STOCKADE-EGRESS -s 192.168.64.9/32"));
        assert!(!script.contains(&format!("-X {mine}")));
        assert!(script.contains(&format!(
            "-I STOCKADE-EGRESS 1 -s 192.168.64.7/32 -m comment --comment stockade:{} -g {mine}",
            me.as_str()
        )));
        assert!(script.contains(&format!("-A {mine} -d 10.9.0.0/16 -j RETURN")));
        assert!(script.contains("--to-ports 41053"));
        assert!(script.contains("--to-ports 41001"));
        assert_eq!(script.matches("COMMIT").count(), 2);
        // The private ranges' chain, rewritten, and jumped to first.
        let pc = c.private(&private);
        assert!(c.is_private(&pc) && pc.len() <= 28, "{pc}");
        assert!(script.starts_with(&format!(
            "*filter\n:{pc} - [0:0]\n-A {pc} -m conntrack --ctdir REPLY -j RETURN\n\
             -A {pc} -d 10.9.0.0/16 -j RETURN\n"
        )));
        assert!(script.contains(&format!(
            "-A {pc} -d 169.254.0.0/16 -p tcp -j REJECT --reject-with tcp-reset\n"
        )));
        assert!(script.contains(&format!(":{mine} - [0:0]\n-A {mine} -j {pc}\n")));
        // Another opt-in, another chain; the same opt-in, the same one.
        assert_ne!(c.private(&PrivateAccess::none()), pc);
        assert_eq!(
            c.private(&PrivateAccess::parse(&["10.9.0.0/16", "10.9.0.0/16"]).unwrap()),
            pc
        );
        assert!(!c.is_private(&mine) && !c.is_private(&c.main()));

        // Allow-all: the private ranges, then back to Docker's rules; its DNS
        // to the filter when it runs, no redirects when it does not.
        let none = PrivateAccess::none();
        let allow_all = |ports| {
            apply_script(
                &c,
                &listings,
                &me,
                addr,
                &EgressPolicy::AllowAll,
                &none,
                ports,
            )
        };
        let open = allow_all(Some(PORTS));
        let filter = open.split("*nat").next().unwrap();
        let own_rules: Vec<&str> = filter
            .lines()
            .filter(|l| l.starts_with(&format!("-A {mine} ")))
            .collect();
        assert_eq!(own_rules, [format!("-A {mine} -j {}", c.private(&none))]);
        assert!(open.contains("--dport 53 -j REDIRECT --to-ports 41053"));
        assert!(!open.contains("--to-ports 41001"));
        let unfiltered = allow_all(None);
        assert!(!unfiltered.contains("REDIRECT"));
        assert!(unfiltered.contains(&format!("-A {mine} -j {}", c.private(&none))));

        let gone = remove_script(&c, &listings, std::slice::from_ref(&me)).unwrap();
        assert!(gone.contains("-D STOCKADE-EGRESS -s 192.168.64.9/32"));
        assert!(gone.contains(&format!("-X {mine}")));
        assert!(!gone.contains("192.168.64.7"));
        assert!(remove_script(&c, &Listings::default(), &[id_other()]).is_none());
        // Several at once: one script, one commit per table, both entries
        // and chains gone, the catch-all rule kept.
        let both = remove_script(&c, &listings, &[old.clone(), me.clone(), id_other()]).unwrap();
        assert!(both.contains("-D STOCKADE-EGRESS -s 192.168.64.7/32"));
        assert!(both.contains("-D STOCKADE-EGRESS -s 192.168.64.9/32"));
        assert!(both.contains(&format!("-X {}", c.sandbox(&old))));
        assert!(both.contains(&format!("-X {mine}")));
        assert!(!both.contains("REJECT"));
        assert_eq!(both.matches("COMMIT").count(), 2);
    }

    #[test]
    fn entries_of_another_opt_in_are_stale() {
        let c = EgressChains::for_isolation_chain("STOCKADE-ISOLATION");
        let now = PrivateAccess::parse(&["10.9.0.0/16"]).unwrap();
        let [fresh, earlier, before] = [(); 3].map(|_| SandboxId::generate());
        let table = format!(
            "-N {f}\n-N {e}\n-N {b}\n\
             -A {f} -j {pn}\n-A {f} -j REJECT\n\
             -A {e} -j {pe}\n\
             -A {b} -d 10.0.0.0/8 -j RETURN\n",
            f = c.sandbox(&fresh),
            e = c.sandbox(&earlier),
            b = c.sandbox(&before),
            pn = c.private(&now),
            pe = c.private(&PrivateAccess::none()),
        );
        let listed: Vec<EgressEntry> = [&fresh, &earlier, &before]
            .into_iter()
            .map(|id| EgressEntry {
                sandbox_id: id.clone(),
                addr: "192.168.64.2".parse().unwrap(),
            })
            .collect();
        assert_eq!(stale_private(&c, &listed, &table, &now), [earlier, before]);
    }

    fn id_other() -> SandboxId {
        id(SandboxId::generate().as_str())
    }
}
