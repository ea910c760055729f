//! Docker hosts (`/api/v1/hosts`, administrators only): the engines
//! sandboxes are placed on — registered, listed with their health, load and
//! capacity, cordoned, drained and removed.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_with::skip_serializing_none;
use stockade_core::quota::BYTES_PER_GB;
use stockade_core::{Host, Resources};
use utoipa::ToSchema;

/// TLS client files of a `tcp://` Docker host, as `docker --tlsverify`
/// takes them: paths on the server's machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostTlsFiles {
    /// The CA certificate that signed the engine's certificate.
    pub ca: String,
    /// The client certificate.
    pub cert: String,
    /// The client certificate's private key.
    pub key: String,
}

/// How much a host may hold; a field that is absent or `null` is what the
/// engine reports.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostCapacityInput {
    /// CPU cores, 1 to 4096.
    pub cpus: Option<u32>,
    /// Memory in GB, above 0 and at most 65536.
    #[serde(rename = "memoryGB")]
    pub memory_gb: Option<f64>,
}

/// `POST /api/v1/hosts`: registers a Docker host. The server connects to it
/// first; one it cannot reach is refused.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateHostRequest {
    /// 1 to 32 characters from lowercase letters, digits and `-`, starting
    /// with a letter or digit; unique.
    pub name: String,
    /// `unix:///path/to/docker.sock`, `tcp://host:port` or
    /// `ssh://[user@]host[:port]`.
    pub docker_host: String,
    /// Client certificates of a `tcp://` host.
    pub tls: Option<HostTlsFiles>,
    /// Where this server reaches what the host publishes when it is another
    /// machine: an IP address or a DNS name.
    pub address: Option<String>,
    /// Up to 32 labels a create may select the host by.
    pub labels: Option<BTreeMap<String, String>>,
    /// Capacity that replaces what the engine reports.
    pub capacity: Option<HostCapacityInput>,
}

/// A field of a `PATCH` that may be absent (unchanged), `null` (cleared) or
/// a value.
fn present<'de, T, D>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// `PATCH /api/v1/hosts/{name}`: what is given changes, the rest stays.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateHostRequest {
    /// `active` (uncordon: takes new sandboxes again), `cordoned` (takes no
    /// new sandboxes; what runs there stays) or `draining` (takes none, and
    /// what it holds is moved off it).
    pub state: Option<String>,
    /// Why it is cordoned or draining (shown with the host and its sandboxes).
    pub reason: Option<String>,
    /// Replaces every label.
    pub labels: Option<BTreeMap<String, String>>,
    /// Replaces the capacity; `null`: what the engine reports.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<HostCapacityInput>, nullable)]
    pub capacity: Option<Option<HostCapacityInput>>,
    /// Replaces the address; `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, nullable)]
    pub address: Option<Option<String>>,
}

/// A host's capacity: what an administrator set, else what the engine
/// reported (`null` until it was checked).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostCapacity {
    pub cpus: Option<u32>,
    #[serde(rename = "memoryGB")]
    pub memory_gb: Option<f64>,
}

/// What the last health check of a host found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostHealthResponse {
    /// `null`: not checked yet.
    pub healthy: Option<bool>,
    /// Why it is unhealthy.
    pub reason: Option<String>,
    pub checked_at: Option<DateTime<Utc>>,
    /// Since when it fails (the first failed check in a row).
    pub failing_since: Option<DateTime<Utc>>,
    /// The engine's CPUs and memory as it reported them.
    pub cpus: Option<u32>,
    pub memory_bytes: Option<u64>,
    /// Free bytes of the engine's data root, where it could be measured.
    pub disk_free_bytes: Option<u64>,
}

/// CPU and memory reserved on a host by the sandboxes that run or are being
/// created there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostReserved {
    pub cpu_cores: f64,
    #[serde(rename = "memoryGB")]
    pub memory_gb: f64,
}

impl From<Resources> for HostReserved {
    fn from(r: Resources) -> Self {
        Self {
            cpu_cores: r.cpu_millis as f64 / 1000.0,
            memory_gb: r.memory_bytes as f64 / BYTES_PER_GB as f64,
        }
    }
}

/// A registered Docker host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostResponse {
    pub name: String,
    pub docker_host: String,
    /// The TLS client files of a `tcp://` host.
    pub tls: Option<HostTlsFiles>,
    pub address: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub capacity: HostCapacity,
    /// `active`, `cordoned` or `draining`.
    #[schema(example = "active")]
    pub state: String,
    pub state_reason: Option<String>,
    /// Cordoned by the health check (undone when the host recovers), not by
    /// an administrator.
    pub auto_cordoned: bool,
    /// The server's own Docker host (it cannot be removed).
    pub own: bool,
    pub health: HostHealthResponse,
    /// Sandboxes on the host that are not terminated.
    pub sandboxes: u64,
    pub reserved: HostReserved,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// What needs the administrator's attention about how the host is
    /// reached (a `tcp://` engine without TLS).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl HostResponse {
    /// `host` as the API shows it: `own` when it is the server's own host,
    /// with how many sandboxes it holds and what they reserve.
    pub fn new(host: &Host, own: bool, sandboxes: u64, reserved: Resources) -> Self {
        let h = &host.health;
        Self {
            name: host.name.clone(),
            docker_host: host.docker_host.clone(),
            tls: host.tls.as_ref().map(|t| HostTlsFiles {
                ca: t.ca.clone(),
                cert: t.cert.clone(),
                key: t.key.clone(),
            }),
            address: host.address.clone(),
            labels: host.labels.clone(),
            capacity: HostCapacity {
                cpus: host.cpus.or(h.cpus),
                memory_gb: host
                    .memory_bytes
                    .or(h.memory_bytes)
                    .map(|b| b as f64 / BYTES_PER_GB as f64),
            },
            state: host.state.as_str().to_owned(),
            state_reason: host.state_reason.clone(),
            auto_cordoned: host.auto_cordoned,
            own,
            health: HostHealthResponse {
                healthy: h.healthy,
                reason: h.reason.clone(),
                checked_at: h.checked_at,
                failing_since: h.failing_since,
                cpus: h.cpus,
                memory_bytes: h.memory_bytes,
                disk_free_bytes: h.disk_free_bytes,
            },
            sandboxes,
            reserved: reserved.into(),
            created_at: host.created_at,
            updated_at: host.updated_at,
            warnings: host.warnings(),
        }
    }
}

/// `GET /api/v1/hosts`: every host, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListHostsResponse {
    pub hosts: Vec<HostResponse>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_tells_absent_from_null() {
        let absent: UpdateHostRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(absent, UpdateHostRequest::default());
        let cleared: UpdateHostRequest =
            serde_json::from_str(r#"{"address": null, "capacity": null}"#).unwrap();
        assert_eq!(cleared.address, Some(None));
        assert_eq!(cleared.capacity, Some(None));
        let set: UpdateHostRequest = serde_json::from_str(
            r#"{"state": "cordoned", "address": "10.0.0.5", "capacity": {"cpus": 8}}"#,
        )
        .unwrap();
        assert_eq!(set.address, Some(Some("10.0.0.5".into())));
        assert_eq!(
            set.capacity,
            Some(Some(HostCapacityInput {
                cpus: Some(8),
                memory_gb: None
            }))
        );
        // What the SDK sends reads back the same.
        for req in [absent, cleared, set] {
            let text = serde_json::to_string(&req).unwrap();
            assert_eq!(
                serde_json::from_str::<UpdateHostRequest>(&text).unwrap(),
                req
            );
        }
        assert!(serde_json::from_str::<UpdateHostRequest>(r#"{"name": "x"}"#).is_err());
        assert!(serde_json::from_str::<CreateHostRequest>(
            r#"{"name": "x", "dockerHost": "unix:///s", "tls": {"ca": "a", "cert": "b"}}"#
        )
        .is_err());
    }
}
