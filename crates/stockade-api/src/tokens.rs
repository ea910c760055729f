//! Credentials as resources (`/api/v1/accounts/{id}/tokens`,
//! `/api/v1/tokens/{id}`): API tokens an account makes, lists and revokes,
//! and the dashboard sessions opened with them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /api/v1/accounts/{id}/tokens`: a new API token of the account.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateTokenRequest {
    /// What the token is for: 1 to 64 characters (e.g. `ci`, `laptop`).
    pub name: String,
    /// Seconds until the token expires: 60 to 315 360 000 (ten years);
    /// absent: until it is revoked.
    pub expires_in_seconds: Option<i64>,
}

/// The new token: `token` is the secret, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateTokenResponse {
    pub id: String,
    pub name: String,
    /// The secret (`stk_…`), sent as `Authorization: Bearer`. Only its hash
    /// is stored: it cannot be shown again.
    pub token: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// One credential of an account, never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenResponse {
    pub id: String,
    pub name: String,
    /// `api` (an API token) or `session` (a dashboard session, which ends
    /// with the API token it was opened with).
    pub kind: String,
    pub created_at: DateTime<Utc>,
    /// `null`: until it is revoked.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it last authenticated a request (to the minute); `null`: never.
    pub last_used_at: Option<DateTime<Utc>>,
    /// A session's API token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
}

impl From<&stockade_core::TokenRecord> for TokenResponse {
    fn from(t: &stockade_core::TokenRecord) -> Self {
        Self {
            id: t.id.to_string(),
            name: t.name.clone(),
            kind: t.kind.as_str().to_owned(),
            created_at: t.created_at,
            expires_at: t.expires_at,
            last_used_at: t.last_used_at,
            parent_id: t.parent_id.as_ref().map(ToString::to_string),
        }
    }
}

/// `GET /api/v1/accounts/{id}/tokens`: newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ListTokensResponse {
    pub tokens: Vec<TokenResponse>,
}

/// The body of `POST /api/v1/accounts/{id}/disable` and `/enable`: `{}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyRequest {}
