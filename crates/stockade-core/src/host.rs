//! Docker hosts: the engines sandboxes are placed on.
//! The server's own `--docker-host` is always one of them (named by
//! `--server-name`); an administrator registers more. Each sandbox records
//! the name of its host (`server`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::FieldError;
use crate::names::check_name;

/// The longest host name.
pub const MAX_HOST_NAME: usize = 32;

/// Checks a host name: 1 to 32 characters from lowercase letters, digits
/// and `-`, starting with a letter or digit (it names the host in URLs, in
/// labels and in the CLI).
pub fn parse_host_name(name: &str, field: &str) -> Result<String, FieldError> {
    check_name(
        name,
        field,
        MAX_HOST_NAME,
        |bytes| {
            bytes[0] != b'-'
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        },
        || {
            format!(
                "must be 1 to {MAX_HOST_NAME} characters from lowercase letters, digits and -, \
                 starting with a letter or digit"
            )
        },
    )
}

/// Whether new sandboxes may be placed on a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum HostState {
    /// Takes new sandboxes.
    Active,
    /// Takes none; what runs there stays (an administrator's cordon, or the
    /// health check's while the host fails).
    Cordoned,
    /// Takes none, and what it holds is being moved off it.
    Draining,
}

impl HostState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Cordoned => "cordoned",
            Self::Draining => "draining",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(Self::Active),
            "cordoned" => Some(Self::Cordoned),
            "draining" => Some(Self::Draining),
            _ => None,
        }
    }
}

/// TLS client files of a `tcp://` Docker host (paths on the server's
/// machine, as `docker --tlsverify` takes them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostTls {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// What the last health check of a host found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct HostHealth {
    /// `None`: never checked yet.
    pub healthy: Option<bool>,
    /// Why it is unhealthy (the engine's error, a full disk).
    pub reason: Option<String>,
    pub checked_at: Option<DateTime<Utc>>,
    /// Since when it has failed (the first failed check in a row).
    pub failing_since: Option<DateTime<Utc>>,
    /// The engine's size as it reported it.
    pub cpus: Option<u32>,
    pub memory_bytes: Option<u64>,
    /// Free bytes of the engine's data root, where it could be measured.
    pub disk_free_bytes: Option<u64>,
}

/// A registered Docker host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    /// `unix://…`, `tcp://host:port` or `ssh://[user@]host[:port]`.
    pub docker_host: String,
    pub tls: Option<HostTls>,
    /// The address where this server reaches what the host publishes
    /// (sandboxes' agents) when the host is not this machine; `None`: the
    /// sandboxes' own addresses on the host's bridge are reachable.
    pub address: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Capacity that replaces what the engine reports (CPUs, bytes).
    pub cpus: Option<u32>,
    pub memory_bytes: Option<u64>,
    pub state: HostState,
    /// Why it is cordoned or draining, as the administrator or the health
    /// check said.
    pub state_reason: Option<String>,
    /// Cordoned by the health check (undone by it when the host recovers);
    /// an administrator's cordon is never undone automatically.
    pub auto_cordoned: bool,
    pub health: HostHealth,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Host {
    /// A newly registered host at `now`: active, no TLS, address, labels
    /// or capacity of its own, health not yet checked.
    pub fn new(
        name: impl Into<String>,
        docker_host: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            name: name.into(),
            docker_host: docker_host.into(),
            tls: None,
            address: None,
            labels: BTreeMap::new(),
            cpus: None,
            memory_bytes: None,
            state: HostState::Active,
            state_reason: None,
            auto_cordoned: false,
            health: HostHealth::default(),
            created_at: now,
            updated_at: now,
        }
    }

    /// Whether a create may be placed here (ignoring capacity).
    pub fn schedulable(&self) -> bool {
        self.state == HostState::Active && self.health.healthy != Some(false)
    }

    /// What an administrator must know about how the host is reached, one
    /// sentence each: a `tcp://` engine without TLS answers anyone who
    /// reaches its port, and the Docker API is root on that host.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.docker_host.starts_with("tcp://") && self.tls.is_none() {
            warnings.push(format!(
                "{} is a Docker Engine without TLS: anyone who reaches that port, a sandbox \
                 included if its network does, controls the engine, which is root on that host \
                 and on every sandbox there; serve it with --tlsverify and register it with tls \
                 (ca, cert, key), or use ssh://",
                self.docker_host
            ));
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        for good in ["a", "host-1", "0x", &"h".repeat(32)] {
            assert!(parse_host_name(good, "name").is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "A",
            "a_b",
            "a.b",
            "é",
            &"h".repeat(33),
            "a b",
            "../x",
        ] {
            assert_eq!(
                parse_host_name(bad, "name").unwrap_err().field,
                "name",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn plain_tcp_engines_are_warned_about() {
        let host = |docker_host: &str, tls: Option<HostTls>| Host {
            tls,
            ..Host::new("h", docker_host, Utc::now())
        };
        let plain = host("tcp://10.0.0.5:2375", None).warnings();
        assert_eq!(plain.len(), 1);
        assert!(plain[0].contains("tcp://10.0.0.5:2375") && plain[0].contains("without TLS"));
        let tls = HostTls {
            ca: "ca.pem".into(),
            cert: "cert.pem".into(),
            key: "key.pem".into(),
        };
        assert!(host("tcp://10.0.0.5:2376", Some(tls)).warnings().is_empty());
        assert!(host("unix:///var/run/docker.sock", None)
            .warnings()
            .is_empty());
        assert!(host("ssh://root@10.0.0.5", None).warnings().is_empty());
    }

    #[test]
    fn states_round_trip() {
        for s in [HostState::Active, HostState::Cordoned, HostState::Draining] {
            assert_eq!(HostState::parse(s.as_str()), Some(s));
        }
        assert_eq!(HostState::parse("gone"), None);
    }
}
