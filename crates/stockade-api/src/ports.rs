//! Ports and the reverse proxy and sandbox auth tokens:
//! request and response bodies.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /api/v1/sandbox/{id}/ports`: expose one more port.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExposePortRequest {
    /// 1-65535: the port a server inside the sandbox listens on (on 0.0.0.0).
    pub port: i64,
}

/// An exposed port and where the proxy serves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExposedPort {
    pub sandbox_id: String,
    pub port: u16,
    /// Path form: `{server}/proxy/{id}/{port}/`.
    pub url: String,
    /// Host form, `{scheme}://{port}-{id}.{proxy domain}/`, when the server
    /// has a proxy domain configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_url: Option<String>,
}

/// The exposed ports of one sandbox, or of all the caller's running ones.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PortsResponse {
    pub ports: Vec<ExposedPort>,
}

/// `POST /api/v1/sandbox/{id}/auth-token`; the body is optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthTokenRequest {
    /// Lifetime in seconds, 1 to 86400 (default: the server's, 1 hour).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<i64>,
}

/// A token that opens this sandbox's exposed ports through the proxy, and
/// nothing else. Send it as the `X-Stockade-Token` header, or once as the
/// `stockade_token` query parameter (the proxy then sets a cookie).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthTokenResponse {
    pub token: String,
    pub expires_at: DateTime<Utc>,
    pub sandbox_id: String,
}
