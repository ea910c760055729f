//! Egress policies of sandboxes: `allow-all`, `deny-all` or lists
//! of addresses, CIDRs and domains, parsed from the API's `networkPolicy`,
//! and the decisions whether a sandbox may reach an address or a name.
//!
//! # JSON
//!
//! `"allow-all"` (the default), `"deny-all"` (also what `networkAccess:
//! false` means), or `{"allow": [...], "deny": [...]}` with either list or
//! both. Entries:
//!
//! - `203.0.113.7`, `2001:db8::1`: one address; `10.0.0.0/8`,
//!   `2001:db8::/32`: a CIDR block (host bits must be zero).
//! - `example.com`: exactly that name.
//! - `*.example.com`: every name below `example.com` (`a.example.com`,
//!   `a.b.example.com`) but not `example.com` itself; list both to allow
//!   both.
//! - Any entry may end in `:port` to match that port only (`example.com:443`,
//!   `10.0.0.0/8:5432`, IPv6 in brackets: `[2001:db8::/32]:443`).
//!
//! At most [`MAX_ENTRIES`] entries in both lists together, each at most
//! [`MAX_ENTRY_LEN`] characters. Names compare case-insensitively and
//! ignore one trailing dot. They are compared as ASCII, as TLS SNI, HTTP
//! `Host` and DNS carry them: an internationalised name is written in its
//! punycode form (`xn--bcher-kva.example`); nothing is converted, and an
//! entry with other characters is refused. Policies serialise to their
//! canonical form (lower case, no trailing dot, an address without `/32` or
//! `/128`), which parses back to the same policy.
//!
//! # Precedence
//!
//! 1. `allow-all` allows everything and `deny-all` nothing.
//! 2. A matching `deny` entry denies, whatever `allow` says.
//! 3. With an `allow` list (even an empty one) only what one of its entries
//!    matches is allowed; without one, everything not denied is.
//!
//! Address entries never match names and name entries never match
//! addresses: the enforcement decides which it asks about (the packet filter
//! asks about addresses; the egress proxy and the DNS forwarder about names).
//!
//! # Private ranges
//!
//! Whatever the policy, [`PRIVATE_RANGES`] (the local network, the cloud
//! metadata service) stay out of reach except for the blocks an
//! administrator opts in ([`PrivateAccess`]); an allow list may name only
//! those ([`PrivateAccess::check_policy`]).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::{FieldError, ValidationErrors};

/// Why an entry, a name or an address block was refused; the Display is the
/// message shown (without the field, which the caller knows).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(String);

impl From<String> for PolicyError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for PolicyError {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

impl From<PolicyError> for String {
    fn from(e: PolicyError) -> Self {
        e.0
    }
}

/// The most entries a policy holds, `allow` and `deny` together.
pub const MAX_ENTRIES: usize = 64;
/// The longest entry, in characters (the longest DNS name).
pub const MAX_ENTRY_LEN: usize = 253;
/// The API field a policy is read from.
pub const FIELD: &str = "networkPolicy";

/// What a sandbox may reach on the network.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum EgressPolicy {
    /// Everything (the default).
    #[default]
    AllowAll,
    /// Nothing: no connection leaves and no DNS name is answered.
    DenyAll,
    /// Lists of entries, with the precedence of the module documentation.
    Rules {
        /// `None`: no allow list (everything not denied is allowed);
        /// `Some(list)`: only what `list` matches (nothing when empty).
        allow: Option<Vec<EgressRule>>,
        /// Entries that deny, ahead of every allow entry.
        deny: Vec<EgressRule>,
    },
}

/// Which list of a policy an entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleList {
    Allow,
    Deny,
}

impl RuleList {
    /// `allow` or `deny`, the JSON key.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
        }
    }
}

/// Why a [`Decision`] came out as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The policy is `allow-all`.
    AllowAll,
    /// The policy is `deny-all`.
    DenyAll,
    /// This entry (an index into its list) matched.
    Entry(RuleList, usize),
    /// There is an allow list and no entry of it matched.
    NotAllowed,
    /// There is no allow list and no deny entry matched.
    NotDenied,
}

/// The answer to "may this sandbox reach that?", with its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    pub allowed: bool,
    pub reason: Reason,
}

impl Decision {
    fn new(allowed: bool, reason: Reason) -> Self {
        Self { allowed, reason }
    }

    /// Whether an entry of the policy's lists decided (rather than its mode
    /// or the absence of a match).
    pub fn by_entry(&self) -> bool {
        matches!(self.reason, Reason::Entry(..))
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.allowed { "allowed" } else { "denied" };
        match self.reason {
            Reason::AllowAll => write!(f, "{verdict}: {FIELD} is allow-all"),
            Reason::DenyAll => write!(f, "{verdict}: {FIELD} is deny-all"),
            Reason::Entry(list, i) => write!(f, "{verdict} by {FIELD}.{}[{i}]", list.as_str()),
            Reason::NotAllowed => write!(f, "{verdict}: not in {FIELD}.allow"),
            Reason::NotDenied => write!(f, "{verdict}: no {FIELD}.deny entry matches"),
        }
    }
}

impl EgressPolicy {
    /// The policy `networkAccess` stands for: `true` allow-all, `false`
    /// deny-all.
    pub fn from_network_access(access: bool) -> Self {
        if access {
            Self::AllowAll
        } else {
            Self::DenyAll
        }
    }

    /// Parses the API's `networkPolicy` value; every error names its field
    /// (`networkPolicy.allow[2]`).
    pub fn parse(value: &Value) -> Result<Self, ValidationErrors> {
        Self::parse_at(value, FIELD)
    }

    /// [`parse`](Self::parse) with the errors named below `field`.
    pub fn parse_at(value: &Value, field: &str) -> Result<Self, ValidationErrors> {
        const SHAPE: &str = "must be \"allow-all\", \"deny-all\" or an object \
                             {\"allow\": [...], \"deny\": [...]}";
        let map = match value {
            Value::String(s) if s == "allow-all" => return Ok(Self::AllowAll),
            Value::String(s) if s == "deny-all" => return Ok(Self::DenyAll),
            Value::Object(map) => map,
            _ => return Err(ValidationErrors::single(field, SHAPE)),
        };
        let mut errors = ValidationErrors::default();
        for key in map.keys() {
            if key != "allow" && key != "deny" {
                errors.push(
                    format!("{field}.{key}"),
                    "unknown field: a policy has only allow and deny",
                );
            }
        }
        let mut list = |key: &str| -> Option<Vec<EgressRule>> {
            let items = match map.get(key) {
                None | Some(Value::Null) => return None,
                Some(Value::Array(items)) => items,
                Some(_) => {
                    errors.push(
                        format!("{field}.{key}"),
                        "must be a list of addresses, CIDRs or domains",
                    );
                    return None;
                }
            };
            let mut rules = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let entry_field = format!("{field}.{key}[{i}]");
                match item {
                    Value::String(s) => match EgressRule::parse(s) {
                        Ok(rule) => rules.push(rule),
                        Err(message) => errors.push(entry_field, message.to_string()),
                    },
                    _ => errors.push(entry_field, "must be a string"),
                }
            }
            Some(rules)
        };
        let allow = list("allow");
        let deny = list("deny");
        let given = |key: &str| !matches!(map.get(key), None | Some(Value::Null));
        if !given("allow") && !given("deny") && errors.is_empty() {
            errors.push(
                field,
                "give allow, deny or both (or \"allow-all\" / \"deny-all\")",
            );
        }
        let count = |key: &str| map.get(key).and_then(Value::as_array).map_or(0, Vec::len);
        let total = count("allow") + count("deny");
        if total > MAX_ENTRIES {
            errors.push(
                field,
                format!("at most {MAX_ENTRIES} entries in allow and deny together (got {total})"),
            );
        }
        errors.into_result()?;
        Ok(Self::Rules {
            allow,
            deny: deny.unwrap_or_default(),
        })
    }

    /// Whether nothing at all may leave: `deny-all`, or an empty allow list.
    /// Whether any traffic may leave (everything but deny-all).
    pub fn allows_egress(&self) -> bool {
        !self.is_deny_all()
    }

    pub fn is_deny_all(&self) -> bool {
        match self {
            Self::DenyAll => true,
            Self::Rules { allow, .. } => allow.as_ref().is_some_and(Vec::is_empty),
            Self::AllowAll => false,
        }
    }

    /// Whether any entry is a name (so connections on 80/443 must go
    /// through the egress proxy to be checked).
    pub fn has_name_entries(&self) -> bool {
        self.entries().any(|(_, _, rule)| !rule.is_cidr())
    }

    /// Every entry with its list and index.
    pub fn entries(&self) -> impl Iterator<Item = (RuleList, usize, &EgressRule)> {
        let (allow, deny): (&[EgressRule], &[EgressRule]) = match self {
            Self::Rules { allow, deny } => (allow.as_deref().unwrap_or_default(), deny),
            _ => (&[], &[]),
        };
        let allow = allow
            .iter()
            .enumerate()
            .map(|(i, r)| (RuleList::Allow, i, r));
        let deny = deny.iter().enumerate().map(|(i, r)| (RuleList::Deny, i, r));
        deny.chain(allow)
    }

    /// May the sandbox send to `ip` port `port`? Only address entries take
    /// part (see the module documentation for the precedence).
    pub fn decide_ip(&self, ip: IpAddr, port: u16) -> Decision {
        let ip = ip.to_canonical();
        self.decide(|rule| rule.matches_ip(ip, Some(port)))
    }

    /// May the sandbox reach the host `name` (case-insensitive, one
    /// trailing dot ignored) on port `port`? Only name entries take part.
    pub fn decide_domain(&self, name: &str, port: u16) -> Decision {
        let name = normalize_name(name);
        self.decide(|rule| rule.matches_name(&name, Some(port)))
    }

    /// [`decide_ip`](Self::decide_ip)`.allowed`.
    pub fn allows_ip(&self, ip: IpAddr, port: u16) -> bool {
        self.decide_ip(ip, port).allowed
    }

    /// [`decide_domain`](Self::decide_domain)`.allowed`.
    pub fn allows_domain(&self, name: &str, port: u16) -> bool {
        self.decide_domain(name, port).allowed
    }

    /// May DNS questions about `name` be answered: is it allowed on at
    /// least one port? A deny entry with a port (`example.com:80`) leaves
    /// the other ports, so the name is still answered.
    pub fn may_resolve(&self, name: &str) -> bool {
        let name = normalize_name(name);
        match self {
            Self::AllowAll => true,
            Self::DenyAll => false,
            Self::Rules { allow, deny } => {
                if deny
                    .iter()
                    .any(|rule| rule.port().is_none() && rule.matches_name(&name, None))
                {
                    return false;
                }
                match allow {
                    None => true,
                    Some(allow) => allow.iter().any(|rule| rule.matches_name(&name, None)),
                }
            }
        }
    }

    fn decide(&self, matches: impl Fn(&EgressRule) -> bool) -> Decision {
        match self {
            Self::AllowAll => Decision::new(true, Reason::AllowAll),
            Self::DenyAll => Decision::new(false, Reason::DenyAll),
            Self::Rules { allow, deny } => {
                if let Some(i) = deny.iter().position(&matches) {
                    return Decision::new(false, Reason::Entry(RuleList::Deny, i));
                }
                match allow {
                    None => Decision::new(true, Reason::NotDenied),
                    Some(allow) => match allow.iter().position(&matches) {
                        Some(i) => Decision::new(true, Reason::Entry(RuleList::Allow, i)),
                        None => Decision::new(false, Reason::NotAllowed),
                    },
                }
            }
        }
    }

    /// The policy as JSON, in canonical form.
    pub fn to_json(&self) -> Value {
        match self {
            Self::AllowAll => Value::String("allow-all".into()),
            Self::DenyAll => Value::String("deny-all".into()),
            Self::Rules { allow, deny } => {
                let texts = |rules: &[EgressRule]| {
                    Value::Array(rules.iter().map(|r| Value::String(r.to_string())).collect())
                };
                let mut map = serde_json::Map::new();
                if let Some(allow) = allow {
                    map.insert("allow".into(), texts(allow));
                }
                if !deny.is_empty() || allow.is_none() {
                    map.insert("deny".into(), texts(deny));
                }
                Value::Object(map)
            }
        }
    }
}

impl Serialize for EgressPolicy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EgressPolicy {
    /// Through [`EgressPolicy::parse`]: the message names the entry.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::parse(&value).map_err(serde::de::Error::custom)
    }
}

/// One entry of an allow or deny list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EgressRule {
    /// An address block, on one port or all.
    Cidr(Cidr, Option<u16>),
    /// Exactly this name, on one port or all.
    Domain(DomainName, Option<u16>),
    /// Every name strictly below this one (`*.example.com` holds
    /// `example.com`), on one port or all.
    Wildcard(DomainName, Option<u16>),
}

impl EgressRule {
    /// Parses one entry; the error says what is wrong with it (without the
    /// field, which the caller knows).
    pub fn parse(entry: &str) -> Result<Self, PolicyError> {
        if entry.is_empty() {
            return Err("must not be empty".into());
        }
        if entry.chars().count() > MAX_ENTRY_LEN {
            return Err(PolicyError(format!(
                "must be at most {MAX_ENTRY_LEN} characters (got {})",
                entry.chars().count()
            )));
        }
        let shown = entry;
        let (host, port) = split_port(entry).map_err(|m| format!("'{shown}': {m}"))?;
        if let Some(v6) = host.strip_prefix('[') {
            // split_port only leaves brackets around IPv6 text.
            let inner = v6.strip_suffix(']').unwrap_or(v6);
            let cidr = Cidr::parse(inner).map_err(|m| format!("'{shown}': {m}"))?;
            if !cidr.addr().is_ipv6() {
                return Err(PolicyError(format!(
                    "'{shown}': brackets are for IPv6; write an IPv4 entry as 10.0.0.0/8:443"
                )));
            }
            return Ok(Self::Cidr(cidr, port));
        }
        if host.contains('/') || host.parse::<IpAddr>().is_ok() {
            let cidr = Cidr::parse(host).map_err(|m| format!("'{shown}': {m}"))?;
            return Ok(Self::Cidr(cidr, port));
        }
        if host.contains(':') {
            return Err(PolicyError(format!(
                "'{shown}' is not an IPv6 address or CIDR (with a port, write [2001:db8::/32]:443)"
            )));
        }
        if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(PolicyError(format!(
                "'{shown}' is not a valid IPv4 address"
            )));
        }
        if let Some(suffix) = host.strip_prefix("*.") {
            let name = DomainName::parse(suffix).map_err(|m| format!("'{shown}': {m}"))?;
            return Ok(Self::Wildcard(name, port));
        }
        if host.contains('*') {
            return Err(PolicyError(format!(
                "'{shown}': a wildcard may only be the whole first label, as in *.example.com"
            )));
        }
        let name = DomainName::parse(host).map_err(|m| format!("'{shown}': {m}"))?;
        Ok(Self::Domain(name, port))
    }

    /// The port this entry is limited to, if any.
    pub fn port(&self) -> Option<u16> {
        match self {
            Self::Cidr(_, port) | Self::Domain(_, port) | Self::Wildcard(_, port) => *port,
        }
    }

    /// Whether this is an address entry.
    pub fn is_cidr(&self) -> bool {
        matches!(self, Self::Cidr(..))
    }

    /// Whether this entry matches `ip` (canonical, see
    /// [`IpAddr::to_canonical`]) on `port` (`None`: on some port).
    fn matches_ip(&self, ip: IpAddr, port: Option<u16>) -> bool {
        match self {
            Self::Cidr(net, p) => net.contains(ip) && port_matches(*p, port),
            _ => false,
        }
    }

    /// Whether this entry matches the normalised `name` on `port` (`None`:
    /// on some port).
    fn matches_name(&self, name: &str, port: Option<u16>) -> bool {
        match self {
            Self::Cidr(..) => false,
            Self::Domain(d, p) => d.as_str() == name && port_matches(*p, port),
            Self::Wildcard(suffix, p) => {
                let suffix = suffix.as_str();
                name.len() > suffix.len() + 1
                    && name.ends_with(suffix)
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
                    && port_matches(*p, port)
            }
        }
    }
}

fn port_matches(rule: Option<u16>, asked: Option<u16>) -> bool {
    match (rule, asked) {
        (Some(rule), Some(asked)) => rule == asked,
        _ => true,
    }
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cidr(net, None) => write!(f, "{net}"),
            Self::Cidr(net, Some(port)) if net.addr().is_ipv6() => write!(f, "[{net}]:{port}"),
            Self::Cidr(net, Some(port)) => write!(f, "{net}:{port}"),
            Self::Domain(name, None) => write!(f, "{name}"),
            Self::Domain(name, Some(port)) => write!(f, "{name}:{port}"),
            Self::Wildcard(name, None) => write!(f, "*.{name}"),
            Self::Wildcard(name, Some(port)) => write!(f, "*.{name}:{port}"),
        }
    }
}

/// Splits `entry` into its host part and port: `host:port`,
/// `[v6]:port`, `[v6]` or a bare host (an IPv6 text with several colons
/// has no port unless bracketed). A bracketed host keeps its brackets.
fn split_port(entry: &str) -> Result<(&str, Option<u16>), String> {
    if entry.starts_with('[') {
        let end = entry
            .find(']')
            .ok_or_else(|| "a '[' without its ']'".to_owned())?;
        let (host, rest) = entry.split_at(end + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(parse_port(port)?))),
                None => Err("after ']' only ':port' may follow".into()),
            },
        };
    }
    match entry.matches(':').count() {
        1 => {
            let (host, port) = entry.split_once(':').unwrap_or((entry, ""));
            if host.is_empty() {
                return Err("the address or name before ':' is missing".into());
            }
            Ok((host, Some(parse_port(port)?)))
        }
        _ => Ok((entry, None)),
    }
}

fn parse_port(text: &str) -> Result<u16, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 5 {
        return Err(format!("'{text}' is not a port (1 to 65535)"));
    }
    match text.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!("'{text}' is not a port (1 to 65535)")),
    }
}

/// A name as the decisions compare it: ASCII lower case, one trailing dot
/// removed.
pub fn normalize_name(name: &str) -> String {
    let name = name.strip_suffix('.').unwrap_or(name);
    name.to_ascii_lowercase()
}

/// A valid DNS name in canonical form: ASCII, lower case, no trailing dot,
/// labels of 1 to 63 letters, digits, `-` (not first or last) and `_`, at
/// most 253 characters, a last label that is not all digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainName(String);

impl DomainName {
    /// Parses and normalises a name; the error says what is wrong.
    pub fn parse(name: &str) -> Result<Self, PolicyError> {
        if !name.is_ascii() {
            return Err(
                "names are compared as ASCII: write an internationalised name in its \
                        punycode form (xn--...)"
                    .into(),
            );
        }
        let name = normalize_name(name);
        if name.is_empty() {
            return Err("the name is empty".into());
        }
        if name.len() > MAX_ENTRY_LEN {
            return Err(PolicyError(format!(
                "a name has at most {MAX_ENTRY_LEN} characters"
            )));
        }
        for label in name.split('.') {
            if label.is_empty() {
                return Err("a name has no empty labels ('..')".into());
            }
            if label.len() > 63 {
                return Err("a label (between dots) has at most 63 characters".into());
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err("a name has only letters, digits, '-' and '_' between its dots".into());
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err("a label neither starts nor ends with '-'".into());
            }
        }
        let last = name.rsplit('.').next().unwrap_or_default();
        if last.bytes().all(|b| b.is_ascii_digit()) {
            return Err("the last label of a name is not all digits".into());
        }
        Ok(Self(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An IPv4 or IPv6 address block: an address and a prefix length, with the
/// host bits zero. A single address is the block of full length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The block of `addr`'s first `prefix` bits; refused when `prefix` is
    /// too long or `addr` has host bits set.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, PolicyError> {
        let max = max_prefix(addr);
        if prefix > max {
            return Err(PolicyError(format!("the prefix length is at most {max}")));
        }
        let net = Self { addr, prefix };
        let network = net.network();
        if network != addr {
            return Err(PolicyError(format!(
                "host bits are set: did you mean {network}/{prefix}?"
            )));
        }
        Ok(net)
    }

    /// The block of exactly one address.
    pub fn host(addr: IpAddr) -> Self {
        Self {
            addr,
            prefix: max_prefix(addr),
        }
    }

    /// Parses `addr` or `addr/prefix`.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("'{addr}' is not an IPv4 or IPv6 address"))?;
        match prefix {
            None => Ok(Self::host(addr)),
            Some(p) => {
                let prefix = p
                    .parse::<u8>()
                    .ok()
                    .filter(|_| p.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| format!("'{p}' is not a prefix length"))?;
                Self::new(addr, prefix)
            }
        }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is in the block. An IPv4-mapped IPv6 address
    /// (`::ffff:10.0.0.1`) counts as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = mask_v4(self.prefix);
                u32::from(ip) & mask == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = mask_v6(self.prefix);
                u128::from(ip) & mask == u128::from(net)
            }
            _ => false,
        }
    }

    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask_v4(self.prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask_v6(self.prefix))),
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix == max_prefix(self.addr) {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.prefix)
        }
    }
}

fn max_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

fn mask_v4(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask_v6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// Parses one entry into a [`FieldError`] naming it (`networkPolicy.allow[2]`).
pub fn parse_entry(list: RuleList, index: usize, entry: &str) -> Result<EgressRule, FieldError> {
    EgressRule::parse(entry)
        .map_err(|m| FieldError::new(format!("{FIELD}.{}[{index}]", list.as_str()), m.to_string()))
}

/// The blocks of the local network that no sandbox reaches, whatever its
/// policy (`allow-all` included), unless an administrator opts part of them
/// in ([`PrivateAccess`]): private (10.0.0.0/8, 172.16.0.0/12,
/// 192.168.0.0/16), carrier-grade NAT (100.64.0.0/10), link-local
/// (169.254.0.0/16, where cloud metadata services such as 169.254.169.254
/// answer; fe80::/10) and unique-local (fc00::/7). The database, the
/// object store and other Docker hosts usually sit there.
pub const PRIVATE_RANGES: [Cidr; 7] = [
    Cidr::v4([10, 0, 0, 0], 8),
    Cidr::v4([172, 16, 0, 0], 12),
    Cidr::v4([192, 168, 0, 0], 16),
    Cidr::v4([100, 64, 0, 0], 10),
    Cidr::v4([169, 254, 0, 0], 16),
    Cidr::v6(0xfc00, 7),
    Cidr::v6(0xfe80, 10),
];

impl Cidr {
    const fn v4(o: [u8; 4], prefix: u8) -> Self {
        Self {
            addr: IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], o[3])),
            prefix,
        }
    }

    const fn v6(first: u16, prefix: u8) -> Self {
        Self {
            addr: IpAddr::V6(Ipv6Addr::new(first, 0, 0, 0, 0, 0, 0, 0)),
            prefix,
        }
    }

    /// Whether every address of `other` is in this block (same family).
    pub fn covers(&self, other: &Cidr) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4()
            && self.prefix <= other.prefix
            && self.contains(other.addr)
    }
}

/// The one of [`PRIVATE_RANGES`] that holds `ip` (an IPv4-mapped IPv6
/// address counts as its IPv4 address).
pub fn private_range_of(ip: IpAddr) -> Option<Cidr> {
    let ip = ip.to_canonical();
    PRIVATE_RANGES.into_iter().find(|r| r.contains(ip))
}

/// What a private range is, for messages.
fn describe_range(range: &Cidr) -> &'static str {
    match range.addr() {
        IpAddr::V4(a) if a.octets()[0] == 169 => "link-local, where cloud metadata services answer",
        IpAddr::V4(a) if a.octets()[0] == 100 => "carrier-grade NAT",
        IpAddr::V4(_) => "private: the local network",
        IpAddr::V6(a) if a.segments()[0] == 0xfe80 => "link-local",
        IpAddr::V6(_) => "unique-local: the local network",
    }
}

/// The flag and variable an administrator opts private blocks in with.
pub const PRIVATE_OPT_IN: &str =
    "stockade server --egress-allow-private (or STOCKADE_EGRESS_ALLOW_PRIVATE)";

/// Which parts of the [`PRIVATE_RANGES`] sandboxes may reach: none by
/// default. An administrator opts blocks in; a sandbox's own policy then
/// decides about them as about any address (`allow-all` reaches them, an
/// allow list must name them). The packet filter, the egress proxy and the
/// check of tenants' allow lists all read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PrivateAccess {
    /// Sorted, without duplicates.
    allowed: Vec<Cidr>,
}

impl PrivateAccess {
    /// No private block is reachable (the default).
    pub fn none() -> Self {
        Self::default()
    }

    /// Opts `blocks` in. Each must lie inside one of the
    /// [`PRIVATE_RANGES`] (anything else is reachable anyway, or wider than
    /// a range: list the ranges themselves); the error names the block.
    pub fn new(blocks: impl IntoIterator<Item = Cidr>) -> Result<Self, PolicyError> {
        let mut allowed = Vec::new();
        for block in blocks {
            if !PRIVATE_RANGES.iter().any(|r| r.covers(&block)) {
                let ranges: Vec<String> = PRIVATE_RANGES.iter().map(Cidr::to_string).collect();
                return Err(PolicyError(format!(
                    "'{block}' is not inside a private or link-local range ({}): only those \
                     are kept from sandboxes, so only blocks inside them can be opted in",
                    ranges.join(", ")
                )));
            }
            allowed.push(block);
        }
        allowed.sort_by_key(|c| (c.addr(), c.prefix()));
        allowed.dedup();
        Ok(Self { allowed })
    }

    /// Parses a list of CIDRs (blank items skipped), as
    /// [`new`](Self::new) checks them.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, PolicyError> {
        let blocks = items
            .iter()
            .map(|s| s.as_ref().trim())
            .filter(|s| !s.is_empty())
            .map(|s| Cidr::parse(s).map_err(|e| format!("'{s}': {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(blocks)
    }

    /// The blocks opted in.
    pub fn allowed(&self) -> &[Cidr] {
        &self.allowed
    }

    /// Whether a sandbox may reach `ip` as far as the private ranges go:
    /// it is in none, or in a block opted in.
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.refused_range(ip).is_none()
    }

    /// The private range `ip` is in when that keeps it from sandboxes.
    pub fn refused_range(&self, ip: IpAddr) -> Option<Cidr> {
        let ip = ip.to_canonical();
        let range = private_range_of(ip)?;
        (!self.allowed.iter().any(|a| a.contains(ip))).then_some(range)
    }

    /// Refuses allow-list entries inside a private range that is not opted
    /// in (each error names its entry, `networkPolicy.allow[2]`, and says
    /// what the administrator must set). Entries wider than a range
    /// (`0.0.0.0/0`) are accepted: the private part stays out of reach.
    pub fn check_policy(&self, policy: &EgressPolicy) -> Result<(), ValidationErrors> {
        let mut errors = ValidationErrors::default();
        for (list, i, rule) in policy.entries() {
            let EgressRule::Cidr(net, _) = rule else {
                continue;
            };
            if list != RuleList::Allow || self.allowed.iter().any(|a| a.covers(net)) {
                continue;
            }
            let Some(range) = PRIVATE_RANGES.iter().find(|r| r.covers(net)) else {
                continue;
            };
            let opted = if self.allowed.is_empty() {
                "none is".to_owned()
            } else {
                let blocks: Vec<String> = self.allowed.iter().map(Cidr::to_string).collect();
                format!("only {} are", blocks.join(", "))
            };
            errors.push(
                format!("{FIELD}.{}[{i}]", list.as_str()),
                format!(
                    "'{rule}' is in {range} ({}), which sandboxes cannot reach unless the \
                     server's administrator opts it in with {PRIVATE_OPT_IN}; {opted} opted in",
                    describe_range(range)
                ),
            );
        }
        errors.into_result()
    }
}

impl fmt::Display for PrivateAccess {
    /// The blocks, comma-separated; `none` when there are none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.allowed.is_empty() {
            return f.write_str("none");
        }
        let blocks: Vec<String> = self.allowed.iter().map(Cidr::to_string).collect();
        f.write_str(&blocks.join(","))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(v: Value) -> EgressPolicy {
        EgressPolicy::parse(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    fn errors(v: Value) -> Vec<(String, String)> {
        EgressPolicy::parse(&v)
            .expect_err("should be refused")
            .0
            .into_iter()
            .map(|e| (e.field, e.message))
            .collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn modes_parse_and_round_trip() {
        assert_eq!(policy(json!("allow-all")), EgressPolicy::AllowAll);
        assert_eq!(policy(json!("deny-all")), EgressPolicy::DenyAll);
        assert_eq!(EgressPolicy::default(), EgressPolicy::AllowAll);
        assert_eq!(
            EgressPolicy::from_network_access(false),
            EgressPolicy::DenyAll
        );
        assert_eq!(
            EgressPolicy::from_network_access(true),
            EgressPolicy::AllowAll
        );
        for v in [json!("allow-all"), json!("deny-all")] {
            assert_eq!(serde_json::to_value(policy(v.clone())).unwrap(), v);
        }
    }

    #[test]
    fn rules_round_trip_in_canonical_form() {
        let canonical = json!({
            "allow": ["example.com", "*.example.org", "10.0.0.0/8", "203.0.113.7",
                      "2001:db8::/32", "[2001:db8::1]:443", "10.1.0.0/16:5432",
                      "api.example.net:443", "*.xn--bcher-kva.example:8443"],
            "deny": ["bad.example.com"]
        });
        let p = policy(canonical.clone());
        assert_eq!(p.to_json(), canonical);
        assert_eq!(serde_json::to_value(&p).unwrap(), canonical);
        let back: EgressPolicy = serde_json::from_value(canonical).unwrap();
        assert_eq!(back, p);

        // Other spellings become the canonical one.
        let p = policy(json!({"allow": ["Example.COM.", "10.0.0.1/32", "2001:DB8:0::1"]}));
        assert_eq!(
            p.to_json(),
            json!({"allow": ["example.com", "10.0.0.1", "2001:db8::1"]})
        );
        // Only deny, and an empty allow list, keep their shape.
        for v in [
            json!({"deny": ["10.0.0.0/8"]}),
            json!({"allow": []}),
            json!({"deny": []}),
        ] {
            assert_eq!(policy(v.clone()).to_json(), v);
        }
        assert_eq!(
            policy(json!({"allow": ["a.example"], "deny": null})).to_json(),
            json!({"allow": ["a.example"]})
        );
    }

    #[test]
    fn entries_are_typed() {
        let cases = [
            (
                "10.0.0.0/8",
                EgressRule::Cidr(Cidr::new(ip("10.0.0.0"), 8).unwrap(), None),
            ),
            (
                "10.0.0.0/8:443",
                EgressRule::Cidr(Cidr::new(ip("10.0.0.0"), 8).unwrap(), Some(443)),
            ),
            (
                "192.0.2.1:80",
                EgressRule::Cidr(Cidr::host(ip("192.0.2.1")), Some(80)),
            ),
            ("::1", EgressRule::Cidr(Cidr::host(ip("::1")), None)),
            ("[::1]", EgressRule::Cidr(Cidr::host(ip("::1")), None)),
            (
                "[2001:db8::/32]:53",
                EgressRule::Cidr(Cidr::new(ip("2001:db8::"), 32).unwrap(), Some(53)),
            ),
            (
                "example.com",
                EgressRule::Domain(DomainName::parse("example.com").unwrap(), None),
            ),
            (
                "example.com:443",
                EgressRule::Domain(DomainName::parse("example.com").unwrap(), Some(443)),
            ),
            (
                "*.example.com",
                EgressRule::Wildcard(DomainName::parse("example.com").unwrap(), None),
            ),
            (
                "*.test:80",
                EgressRule::Wildcard(DomainName::parse("test").unwrap(), Some(80)),
            ),
            (
                "localhost",
                EgressRule::Domain(DomainName::parse("localhost").unwrap(), None),
            ),
            (
                "_acme-challenge.example.com",
                EgressRule::Domain(
                    DomainName::parse("_acme-challenge.example.com").unwrap(),
                    None,
                ),
            ),
        ];
        for (text, rule) in cases {
            assert_eq!(EgressRule::parse(text).as_ref(), Ok(&rule), "{text}");
        }
    }

    #[test]
    fn bad_entries_are_named_and_explained() {
        let long_name = format!("{}.com", "a.".repeat(126));
        assert!(long_name.len() > MAX_ENTRY_LEN);
        let long_label = format!("{}.com", "a".repeat(64));
        let bad = [
            ("", "must not be empty"),
            ("10.0.0.1/8", "host bits are set: did you mean 10.0.0.0/8?"),
            ("10.0.0.0/33", "prefix length is at most 32"),
            ("10.0.0.0/x", "not a prefix length"),
            ("10.0.0.0/+8", "not a prefix length"),
            ("300.1.1.1", "not a valid IPv4 address"),
            ("10.0.0", "not a valid IPv4 address"),
            ("1.2.3.4:0", "not a port"),
            ("1.2.3.4:65536", "not a port"),
            ("1.2.3.4:", "not a port"),
            ("example.com:http", "not a port"),
            (":443", "before ':' is missing"),
            ("2001:db8::/129", "prefix length is at most 128"),
            ("2001:db8::g", "not an IPv6 address"),
            ("[2001:db8::1", "without its ']'"),
            ("[2001:db8::1]443", "only ':port'"),
            ("[10.0.0.1]:443", "brackets are for IPv6"),
            ("*", "wildcard may only be the whole first label"),
            ("*example.com", "wildcard may only be the whole first label"),
            (
                "a.*.example.com",
                "wildcard may only be the whole first label",
            ),
            ("*.", "the name is empty"),
            ("bücher.example", "punycode"),
            ("a..b", "no empty labels"),
            ("-a.example", "neither starts nor ends with '-'"),
            ("a b.example", "only letters, digits"),
            ("http://example.com", "not a port"),
            ("example.com/path", "not an IPv4 or IPv6 address"),
            ("example.123", "not all digits"),
            (long_label.as_str(), "at most 63 characters"),
            (long_name.as_str(), "at most 253 characters"),
        ];
        for (entry, expected) in bad {
            let errs = errors(json!({"allow": ["ok.example", entry]}));
            assert_eq!(errs.len(), 1, "{entry}: {errs:?}");
            assert_eq!(errs[0].0, "networkPolicy.allow[1]", "{entry}");
            assert!(errs[0].1.contains(expected), "{entry}: {}", errs[0].1);
        }
        let errs = errors(json!({"deny": ["10.0.0.0/8", 7, "x..y"]}));
        assert_eq!(
            errs.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            ["networkPolicy.deny[1]", "networkPolicy.deny[2]"]
        );
        assert_eq!(errs[0].1, "must be a string");
        let e = parse_entry(RuleList::Deny, 3, "10.0.0.1/8").unwrap_err();
        assert_eq!(e.field, "networkPolicy.deny[3]");
    }

    #[test]
    fn bad_shapes_are_named() {
        let shape = |v: Value| errors(v)[0].clone();
        assert_eq!(shape(json!("allow")).0, "networkPolicy");
        assert_eq!(shape(json!("ALLOW-ALL")).0, "networkPolicy");
        assert_eq!(shape(json!(true)).0, "networkPolicy");
        assert_eq!(shape(json!(["example.com"])).0, "networkPolicy");
        assert_eq!(shape(json!({})).0, "networkPolicy");
        assert!(shape(json!({})).1.contains("allow, deny or both"));
        assert_eq!(
            shape(json!({"allow": "example.com"})).0,
            "networkPolicy.allow"
        );
        assert_eq!(
            shape(json!({"allow": [], "allowOut": []})).0,
            "networkPolicy.allowOut"
        );
        let many: Vec<String> = (0..40).map(|i| format!("h{i}.example")).collect();
        let errs = errors(json!({"allow": many, "deny": many}));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "networkPolicy");
        assert!(errs[0].1.contains("at most 64"), "{}", errs[0].1);
        let exactly: Vec<String> = (0..MAX_ENTRIES).map(|i| format!("h{i}.example")).collect();
        policy(json!({ "allow": exactly }));
        // Deserialising reports the field in its message.
        let err = serde_json::from_value::<EgressPolicy>(json!({"allow": ["ok.example", "a..b"]}))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("networkPolicy.allow[1]: "), "{err}");
        let at = EgressPolicy::parse_at(&json!({"deny": ["x..y"]}), "policy").unwrap_err();
        assert_eq!(at.0[0].field, "policy.deny[0]");
    }

    #[test]
    fn modes_decide_everything() {
        let all = EgressPolicy::AllowAll;
        let none = EgressPolicy::DenyAll;
        assert!(all.allows_ip(ip("192.0.2.1"), 443));
        assert!(all.allows_domain("anything.example", 80));
        assert!(all.may_resolve("anything.example"));
        assert!(!none.allows_ip(ip("192.0.2.1"), 443));
        assert!(!none.allows_domain("anything.example", 80));
        assert!(!none.may_resolve("anything.example"));
        assert!(none.is_deny_all());
        assert!(policy(json!({"allow": []})).is_deny_all());
        assert!(!policy(json!({"deny": []})).is_deny_all());
        assert_eq!(
            none.decide_ip(ip("192.0.2.1"), 1).to_string(),
            "denied: networkPolicy is deny-all"
        );
    }

    #[test]
    fn allow_list_denies_what_it_does_not_list() {
        let p = policy(json!({"allow": ["10.0.0.0/8", "example.com", "[2001:db8::/32]:443"]}));
        assert!(p.allows_ip(ip("10.1.2.3"), 22));
        assert!(!p.allows_ip(ip("11.0.0.1"), 22));
        assert!(p.allows_ip(ip("2001:db8::5"), 443));
        assert!(!p.allows_ip(ip("2001:db8::5"), 80));
        assert!(!p.allows_ip(ip("2001:db9::5"), 443));
        // An IPv4-mapped IPv6 address is its IPv4 address.
        assert!(p.allows_ip(ip("::ffff:10.0.0.1"), 22));
        assert!(p.allows_domain("example.com", 443));
        assert!(!p.allows_domain("www.example.com", 443));
        assert!(!p.allows_domain("other.example", 443));
        // Names and addresses never match each other.
        assert!(!p.allows_domain("10.0.0.1", 80));
        assert_eq!(
            p.decide_domain("example.com", 80),
            Decision {
                allowed: true,
                reason: Reason::Entry(RuleList::Allow, 1)
            }
        );
        assert_eq!(
            p.decide_domain("other.example", 80).to_string(),
            "denied: not in networkPolicy.allow"
        );
        assert!(p.has_name_entries());
        assert!(!policy(json!({"allow": ["10.0.0.0/8"]})).has_name_entries());
    }

    #[test]
    fn deny_beats_allow() {
        let p = policy(json!({
            "allow": ["10.0.0.0/8", "*.example.com", "example.com"],
            "deny": ["10.9.0.0/16", "secret.example.com", "example.com:80"]
        }));
        assert!(p.allows_ip(ip("10.1.0.1"), 443));
        assert!(!p.allows_ip(ip("10.9.0.1"), 443));
        assert_eq!(
            p.decide_ip(ip("10.9.0.1"), 443).to_string(),
            "denied by networkPolicy.deny[0]"
        );
        assert!(p.allows_domain("www.example.com", 443));
        assert!(!p.allows_domain("secret.example.com", 443));
        assert!(!p.allows_domain("example.com", 80));
        assert!(p.allows_domain("example.com", 443));
        // A port-limited deny leaves the name resolvable; a full one not.
        assert!(p.may_resolve("example.com"));
        assert!(!p.may_resolve("secret.example.com"));
        assert!(p.may_resolve("deep.www.example.com"));
        assert!(!p.may_resolve("example.org"));
    }

    #[test]
    fn deny_list_alone_allows_the_rest() {
        let p = policy(json!({"deny": ["169.254.0.0/16", "*.evil.example", "evil.example"]}));
        assert!(p.allows_ip(ip("192.0.2.1"), 443));
        assert!(!p.allows_ip(ip("169.254.169.254"), 80));
        assert!(p.allows_domain("good.example", 443));
        assert!(!p.allows_domain("evil.example", 443));
        assert!(!p.allows_domain("x.evil.example", 443));
        assert!(!p.may_resolve("x.evil.example"));
        assert!(p.may_resolve("good.example"));
        assert_eq!(p.decide_domain("good.example", 1).reason, Reason::NotDenied);
        assert!(!p.decide_domain("good.example", 1).by_entry());
    }

    #[test]
    fn wildcards_match_below_not_at_the_name() {
        let p = policy(json!({"allow": ["*.example.com"]}));
        assert!(p.allows_domain("sub.example.com", 443));
        assert!(p.allows_domain("a.b.example.com", 443));
        assert!(!p.allows_domain("example.com", 443));
        assert!(!p.allows_domain("badexample.com", 443));
        assert!(!p.allows_domain(".example.com", 443));
        assert!(!p.allows_domain("example.com.evil", 443));
        assert!(p.may_resolve("sub.example.com"));
        assert!(!p.may_resolve("example.com"));
    }

    #[test]
    fn names_compare_case_insensitively_and_ignore_a_trailing_dot() {
        let p = policy(json!({"allow": ["Example.com.", "*.XN--BCHER-KVA.example"]}));
        assert!(p.allows_domain("EXAMPLE.COM", 443));
        assert!(p.allows_domain("example.com.", 443));
        assert!(p.allows_domain("shop.xn--bcher-kva.example", 443));
        // Punycode is not decoded: the Unicode spelling is another string.
        assert!(!p.allows_domain("shop.bücher.example", 443));
        assert!(p.may_resolve("Example.Com."));
    }

    #[test]
    fn ports_limit_entries() {
        let p = policy(json!({"allow": ["api.example:443", "10.0.0.5:5432", "*.cdn.example:80"]}));
        assert!(p.allows_domain("api.example", 443));
        assert!(!p.allows_domain("api.example", 80));
        assert!(p.allows_ip(ip("10.0.0.5"), 5432));
        assert!(!p.allows_ip(ip("10.0.0.5"), 5433));
        assert!(p.allows_domain("a.cdn.example", 80));
        assert!(!p.allows_domain("a.cdn.example", 443));
        // A name allowed on one port is resolvable.
        assert!(p.may_resolve("api.example"));
    }

    #[test]
    fn private_ranges_are_kept_unless_opted_in() {
        let none = PrivateAccess::none();
        for addr in [
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "fd00::1",
            "fe80::1",
        ] {
            assert!(!none.allows(ip(addr)), "{addr}");
        }
        for addr in [
            "172.32.0.1",
            "100.128.0.1",
            "192.0.2.1",
            "8.8.8.8",
            "2001:db8::1",
        ] {
            assert!(none.allows(ip(addr)), "{addr}");
        }
        assert_eq!(
            none.refused_range(ip("169.254.169.254"))
                .unwrap()
                .to_string(),
            "169.254.0.0/16"
        );
        let some = PrivateAccess::parse(&["10.9.0.0/16", " ", "169.254.169.254"]).unwrap();
        assert!(some.allows(ip("10.9.1.1")));
        assert!(!some.allows(ip("10.8.1.1")));
        assert!(some.allows(ip("169.254.169.254")));
        assert_eq!(some.to_string(), "10.9.0.0/16,169.254.169.254");
        assert_eq!(none.to_string(), "none");
        // Only blocks inside a range can be opted in.
        for bad in ["0.0.0.0/0", "10.0.0.0/7", "8.8.8.8"] {
            let e = PrivateAccess::parse(&[bad]).unwrap_err();
            assert!(e.to_string().contains("not inside a private"), "{bad}: {e}");
        }
        assert!(PrivateAccess::parse(&["10.0.0.0/33"]).is_err());
        assert_eq!(
            PrivateAccess::parse(&["10.0.0.0/8", "10.0.0.0/8"])
                .unwrap()
                .allowed()
                .len(),
            1
        );
    }

    #[test]
    fn allow_lists_name_private_blocks_only_when_opted_in() {
        let p = policy(json!({
            "allow": ["example.com", "10.9.1.0/24:5432", "0.0.0.0/0", "169.254.169.254",
                      "203.0.113.7"],
            "deny": ["192.168.0.0/16"]
        }));
        let errs = PrivateAccess::none().check_policy(&p).unwrap_err().0;
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["networkPolicy.allow[1]", "networkPolicy.allow[3]"]);
        assert!(
            errs[0].message.contains("--egress-allow-private"),
            "{}",
            errs[0].message
        );
        assert!(
            errs[0].message.contains("none is opted in"),
            "{}",
            errs[0].message
        );
        assert!(errs[1].message.contains("metadata"), "{}", errs[1].message);
        let some = PrivateAccess::parse(&["10.9.0.0/16"]).unwrap();
        let errs = some.check_policy(&p).unwrap_err().0;
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("only 10.9.0.0/16 are opted in"));
        let all = PrivateAccess::parse(&["10.9.0.0/16", "169.254.169.254"]).unwrap();
        all.check_policy(&p).unwrap();
        // A block wider than what is opted in is still refused.
        let wide = policy(json!({"allow": ["10.0.0.0/8"]}));
        assert!(some.check_policy(&wide).is_err());
        PrivateAccess::none()
            .check_policy(&EgressPolicy::AllowAll)
            .unwrap();
    }

    #[test]
    fn cidr_blocks_contain_their_addresses() {
        let net = Cidr::parse("192.168.0.0/16").unwrap();
        assert!(net.contains(ip("192.168.255.255")));
        assert!(!net.contains(ip("192.169.0.0")));
        assert!(!net.contains(ip("::1")));
        let any = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(any.contains(ip("203.0.113.1")));
        assert!(any.contains(ip("::ffff:203.0.113.1")));
        assert!(!any.contains(ip("2001:db8::1")));
        let any6 = Cidr::parse("::/0").unwrap();
        assert!(any6.contains(ip("2001:db8::1")));
        let host = Cidr::parse("2001:db8::1").unwrap();
        assert!(host.contains(ip("2001:db8::1")));
        assert!(!host.contains(ip("2001:db8::2")));
        assert_eq!(host.to_string(), "2001:db8::1");
        assert_eq!(Cidr::parse("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(Cidr::parse("10.0.0.0/8").unwrap().prefix(), 8);
    }
}
