//! Accounts, API tokens (hashed at rest) and the caller's scope.

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::FieldError;
use crate::ids::{AccountId, TeamId, TokenId};
use crate::names::check_text_name;

/// An account: the owner of sandboxes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    pub id: AccountId,
    pub name: String,
    pub is_admin: bool,
    pub created_at: DateTime<Utc>,
    /// Set while an administrator has disabled the account: none of its
    /// tokens, sessions or sandbox tokens is accepted until it is enabled.
    pub disabled_at: Option<DateTime<Utc>>,
}

impl Account {
    /// A new, enabled account created at `now`.
    pub fn new(name: &str, is_admin: bool, now: DateTime<Utc>) -> Self {
        Self {
            id: AccountId::generate(),
            name: name.to_owned(),
            is_admin,
            created_at: now,
            disabled_at: None,
        }
    }

    pub fn is_disabled(&self) -> bool {
        self.disabled_at.is_some()
    }
}

/// What a stored credential is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenKind {
    /// An API token (`stk_…`), sent as `Authorization: Bearer`.
    Api,
    /// A dashboard session (`stks_…`), only ever in the session cookie; it
    /// names the API token it was opened with and ends with it.
    Session,
}

impl TokenKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Session => "session",
        }
    }

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        match s {
            "api" => Ok(Self::Api),
            "session" => Ok(Self::Session),
            other => Err(FieldError::new(
                "kind",
                format!("unknown token kind '{other}'"),
            )),
        }
    }
}

/// A stored credential, without its secret (only the secret's hash is
/// stored, and it is never read back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: TokenId,
    pub account_id: AccountId,
    pub name: String,
    pub kind: TokenKind,
    pub created_at: DateTime<Utc>,
    /// `None`: until it is revoked.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it last authenticated a request (kept to the minute or so).
    pub last_used_at: Option<DateTime<Utc>>,
    /// A session's API token: revoking that ends the session too.
    pub parent_id: Option<TokenId>,
}

impl TokenRecord {
    /// The longest name a token may have.
    pub const MAX_NAME_LEN: usize = 64;

    /// A new record (not yet stored) created at `now`.
    pub fn new(
        account_id: AccountId,
        name: String,
        kind: TokenKind,
        now: DateTime<Utc>,
        expires_at: Option<DateTime<Utc>>,
    ) -> Self {
        Self {
            id: TokenId::generate(),
            account_id,
            name,
            kind,
            created_at: now,
            expires_at,
            last_used_at: None,
            parent_id: None,
        }
    }

    /// Checks a token's name: 1 to 64 printable characters.
    pub fn parse_name(name: &str) -> Result<String, FieldError> {
        check_text_name(name, "name", Self::MAX_NAME_LEN)
    }
}

/// What a caller may see: their own sandboxes and those of their teams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub account_id: AccountId,
    pub team_ids: Vec<TeamId>,
}

impl Scope {
    pub fn account(account_id: AccountId) -> Self {
        Self {
            account_id,
            team_ids: Vec::new(),
        }
    }

    /// Whether a sandbox owned by `owner` (optionally shared with `team`) is visible.
    pub fn allows(&self, owner: &AccountId, team: Option<&TeamId>) -> bool {
        owner == &self.account_id || team.is_some_and(|t| self.team_ids.contains(t))
    }
}

/// A freshly generated API token. The plaintext is shown once; only the hash is stored.
pub struct ApiToken {
    plaintext: String,
}

impl ApiToken {
    pub const PREFIX: &'static str = "stk_";
    /// The prefix of a dashboard session's secret.
    pub const SESSION_PREFIX: &'static str = "stks_";

    pub fn generate() -> Self {
        Self::generate_with_prefix(Self::PREFIX)
    }

    /// A dashboard session's secret (`stks_…`).
    pub fn generate_session() -> Self {
        Self::generate_with_prefix(Self::SESSION_PREFIX)
    }

    fn generate_with_prefix(prefix: &str) -> Self {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut rng = rand::thread_rng();
        let body: String = (0..40)
            .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
            .collect();
        Self {
            plaintext: format!("{prefix}{body}"),
        }
    }

    /// Wraps a token chosen by the operator (e.g. `STOCKADE_ADMIN_TOKEN`).
    pub fn from_plaintext(s: impl Into<String>) -> Self {
        Self {
            plaintext: s.into(),
        }
    }

    pub fn plaintext(&self) -> &str {
        &self.plaintext
    }

    pub fn hash(&self) -> String {
        hash_token(&self.plaintext)
    }
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

/// The at-rest form of a token: hex SHA-256.
pub fn hash_token(plaintext: &str) -> String {
    sha256_hex(plaintext.as_bytes())
}

/// Hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hashed() {
        let a = ApiToken::generate();
        let b = ApiToken::generate();
        assert_ne!(a.plaintext(), b.plaintext());
        assert!(a.plaintext().starts_with("stk_"));
        assert_eq!(a.hash().len(), 64);
        assert_ne!(a.hash(), a.plaintext());
        assert_eq!(format!("{a:?}"), "ApiToken(<redacted>)");
    }

    #[test]
    fn scope_allows_owner_and_team() {
        let me = AccountId::generate();
        let other = AccountId::generate();
        let team = TeamId::generate();
        let scope = Scope {
            account_id: me.clone(),
            team_ids: vec![team.clone()],
        };
        assert!(scope.allows(&me, None));
        assert!(!scope.allows(&other, None));
        assert!(scope.allows(&other, Some(&team)));
    }
}
