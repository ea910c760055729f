//! Accounts, API tokens (hashed at rest, SEC-2) and the caller's scope.

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ids::{AccountId, TeamId};

/// An account: the owner of sandboxes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    pub id: AccountId,
    pub name: String,
    pub is_admin: bool,
    pub created_at: DateTime<Utc>,
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

    pub fn generate() -> Self {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut rng = rand::thread_rng();
        let body: String = (0..40)
            .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
            .collect();
        Self {
            plaintext: format!("{}{body}", Self::PREFIX),
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
