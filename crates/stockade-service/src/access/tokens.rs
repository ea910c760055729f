//! Sandbox auth tokens: stateless and unforgeable. A token names a
//! sandbox, its owner account and an expiry, signed with HMAC-SHA256 under a
//! key kept in the database (so every server instance on one database
//! accepts the tokens of the others, and a restart keeps them valid).
//!
//! Format: `stkp_{sandbox id}.{owner account id}.{expiry, Unix seconds}.{signature}`
//! with the signature in unpadded base64url.
//!
//! Three more kinds of token share the format under other prefixes and
//! signing domains ([`Purpose`]), so none is accepted for another's job:
//! E2B traffic tokens (`stkt_`, every port of one sandbox through the host
//! form), E2B envd access tokens (`stke_`, the sandbox's agent) and gateway
//! tokens (`stkg_`, the `prime-sandboxes` command and file gateway of one
//! sandbox).
//!
//! The account a token names is its *holder*, the caller it was handed to:
//! every use checks that the holder is enabled and still reaches the
//! sandbox (its own, or through a team it is still a member of). E2B's
//! traffic and envd tokens are also signed over the sandbox's current run
//! ([`Sandbox::session_epoch`]), so a start or resume ends the ones handed
//! out before it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use stockade_core::{AccountId, Sandbox, SandboxId, Scope};
use stockade_store::{Store, StoreError};

type HmacSha256 = Hmac<Sha256>;

/// The settings key the signing key is stored under.
const SETTING_KEY: &str = "proxy_token_key";
const PREFIX: &str = "stkp_";
/// Longer inputs are rejected before any parsing.
const MAX_TOKEN_LEN: usize = 200;

/// What a token is for. A token verifies only for the purpose it was
/// minted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The exposed ports of a sandbox: `stkp_`.
    Ports,
    /// Every port of a sandbox, as E2B's `trafficAccessToken`: `stkt_`.
    Traffic,
    /// A sandbox's command and file gateway (`prime-sandboxes`): `stkg_`.
    Gateway,
    /// A sandbox's agent, as E2B's `envdAccessToken`: `stke_`.
    Envd,
}

impl Purpose {
    pub fn prefix(self) -> &'static str {
        match self {
            Purpose::Ports => PREFIX,
            Purpose::Traffic => "stkt_",
            Purpose::Gateway => "stkg_",
            Purpose::Envd => "stke_",
        }
    }

    fn domain(self) -> &'static str {
        match self {
            Purpose::Ports => "stockade-proxy-token/v1",
            Purpose::Traffic => "stockade-traffic-token/v2",
            Purpose::Gateway => "stockade-gateway-token/v1",
            Purpose::Envd => "stockade-envd-token/v1",
        }
    }

    /// Whether its tokens are signed over the sandbox's run, and so end
    /// when it starts or resumes again.
    pub fn rotates(self) -> bool {
        matches!(self, Purpose::Traffic | Purpose::Envd)
    }
}

/// What a valid token grants: the proxy to one sandbox until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub sandbox_id: SandboxId,
    /// The sandbox's owner, so the proxy can load the record without a caller.
    pub account_id: AccountId,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("not a sandbox token")]
    Malformed,
    #[error("the token's signature does not match")]
    BadSignature,
    #[error("the token expired at {0}")]
    Expired(DateTime<Utc>),
}

/// A token whose fields were read but whose signature is not checked yet
/// (a rotating token needs its sandbox's run to be checked).
#[derive(Debug, Clone)]
pub struct Unverified {
    purpose: Purpose,
    claims: Claims,
    sig: Vec<u8>,
}

/// The signing key. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct TokenKey(std::sync::Arc<[u8; 32]>);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(<redacted>)")
    }
}

impl TokenKey {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(std::sync::Arc::new(bytes))
    }

    /// The database's key, created (random) on first use.
    pub async fn load(store: &dyn Store) -> Result<Self, StoreError> {
        let mut fresh = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut fresh);
        let stored = store
            .setting_get_or_insert(SETTING_KEY, &hex::encode(fresh))
            .await?;
        let bytes = hex::decode(stored.trim())
            .ok()
            .and_then(|v| <[u8; 32]>::try_from(v).ok())
            .ok_or_else(|| {
                StoreError::Other(format!(
                    "the setting '{SETTING_KEY}' is not 32 hex-encoded bytes"
                ))
            })?;
        Ok(Self::from_bytes(bytes))
    }

    fn mac(
        &self,
        purpose: Purpose,
        sandbox: &str,
        account: &str,
        expiry: i64,
        epoch: i64,
    ) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(self.0.as_slice()).expect("HMAC takes any key size");
        let mut message = format!("{}\n{sandbox}\n{account}\n{expiry}", purpose.domain());
        if purpose.rotates() {
            message.push_str(&format!("\n{epoch}"));
        }
        mac.update(message.as_bytes());
        mac
    }

    /// A port token for `claims` (the expiry is kept to the second).
    pub fn mint(&self, claims: &Claims) -> String {
        self.mint_for(Purpose::Ports, claims)
    }

    /// A token of `purpose` for `claims`.
    pub fn mint_for(&self, purpose: Purpose, claims: &Claims) -> String {
        self.mint_bound(purpose, claims, 0)
    }

    /// A token of `purpose` for `claims`, signed over the sandbox's run
    /// `epoch` when the purpose rotates.
    pub fn mint_bound(&self, purpose: Purpose, claims: &Claims, epoch: i64) -> String {
        let expiry = claims.expires_at.timestamp();
        let sig = self
            .mac(
                purpose,
                claims.sandbox_id.as_str(),
                claims.account_id.as_str(),
                expiry,
                epoch,
            )
            .finalize()
            .into_bytes();
        format!(
            "{}{}.{}.{expiry}.{}",
            purpose.prefix(),
            claims.sandbox_id,
            claims.account_id,
            URL_SAFE_NO_PAD.encode(sig)
        )
    }

    /// Checks a port token: the signature, then the expiry, and returns
    /// what the token grants.
    pub fn verify(&self, token: &str, now: DateTime<Utc>) -> Result<Claims, TokenError> {
        self.verify_for(Purpose::Ports, token, now)
    }

    /// Checks a token of a purpose that does not rotate.
    pub fn verify_for(
        &self,
        purpose: Purpose,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<Claims, TokenError> {
        self.check(&parse(purpose, token)?, 0, now)
    }

    /// Checks a parsed token's signature (over `epoch` when its purpose
    /// rotates), then its expiry.
    pub fn check(
        &self,
        token: &Unverified,
        epoch: i64,
        now: DateTime<Utc>,
    ) -> Result<Claims, TokenError> {
        let c = &token.claims;
        // Constant-time comparison.
        self.mac(
            token.purpose,
            c.sandbox_id.as_str(),
            c.account_id.as_str(),
            c.expires_at.timestamp(),
            epoch,
        )
        .verify_slice(&token.sig)
        .map_err(|_| TokenError::BadSignature)?;
        if now >= c.expires_at {
            return Err(TokenError::Expired(c.expires_at));
        }
        Ok(c.clone())
    }
}

/// Reads a token of `purpose` without checking its signature.
pub fn parse(purpose: Purpose, token: &str) -> Result<Unverified, TokenError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::Malformed);
    }
    let body = token
        .strip_prefix(purpose.prefix())
        .ok_or(TokenError::Malformed)?;
    let mut parts = body.split('.');
    let (Some(sandbox), Some(account), Some(expiry), Some(sig), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(TokenError::Malformed);
    };
    let sandbox_id = SandboxId::parse(sandbox).map_err(|_| TokenError::Malformed)?;
    let account_id = AccountId::parse(account).map_err(|_| TokenError::Malformed)?;
    if expiry.is_empty() || expiry.len() > 12 || !expiry.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TokenError::Malformed);
    }
    let expiry: i64 = expiry.parse().map_err(|_| TokenError::Malformed)?;
    let sig = URL_SAFE_NO_PAD
        .decode(sig)
        .map_err(|_| TokenError::Malformed)?;
    let expires_at = DateTime::from_timestamp(expiry, 0).ok_or(TokenError::Malformed)?;
    Ok(Unverified {
        purpose,
        claims: Claims {
            sandbox_id,
            account_id,
            expires_at,
        },
        sig,
    })
}

/// Why a sandbox token was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Unknown, forged, for another purpose, or from an earlier run.
    #[error("invalid sandbox token")]
    Invalid,
    #[error("the sandbox token expired at {0}")]
    Expired(DateTime<Utc>),
    /// The token is for another sandbox.
    #[error("this token is for sandbox {0}")]
    OtherSandbox(SandboxId),
    /// The holder's account is disabled.
    #[error("the account '{0}' is disabled")]
    Disabled(String),
    /// The holder no longer reaches the sandbox (removed from its team).
    #[error("the token's holder no longer has access to this sandbox")]
    NoAccess,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The sandbox a token of `purpose` opens, checked as this module's header
/// says: signature and expiry (over the sandbox's current run when the
/// purpose rotates), then the holder. `expected`: the sandbox the request
/// names. The record is read whoever owns it, so that nothing about access
/// is told before the signature holds.
pub async fn sandbox_of_token(
    store: &dyn Store,
    key: &TokenKey,
    purpose: Purpose,
    raw: &str,
    expected: Option<&SandboxId>,
    now: DateTime<Utc>,
) -> Result<(Sandbox, Claims), Refused> {
    let token = parse(purpose, raw.trim()).map_err(|_| Refused::Invalid)?;
    let id = token.claims.sandbox_id.clone();
    if expected.is_some_and(|e| *e != id) {
        return Err(Refused::OtherSandbox(id));
    }
    // One read when the holder owns the sandbox (the usual case); the
    // owner's read otherwise.
    let holder_scope = Scope::account(token.claims.account_id.clone());
    let sb = match store.get_sandbox(&holder_scope, &id).await {
        Ok(sb) => sb,
        Err(StoreError::Forbidden) => {
            let owner = store.sandbox_owner(&id).await?.ok_or(Refused::Invalid)?;
            match store
                .get_sandbox(&Scope::account(owner.account_id), &id)
                .await
            {
                Ok(sb) => sb,
                Err(StoreError::NotFound | StoreError::Forbidden) => return Err(Refused::Invalid),
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::NotFound) => return Err(Refused::Invalid),
        Err(e) => return Err(e.into()),
    };
    let claims = key
        .check(&token, sb.session_epoch(), now)
        .map_err(|e| match e {
            TokenError::Expired(at) => Refused::Expired(at),
            _ => Refused::Invalid,
        })?;
    let (holder, teams) = match store.get_account(&claims.account_id).await {
        Ok(found) => found,
        Err(StoreError::NotFound) => return Err(Refused::Invalid),
        Err(e) => return Err(e.into()),
    };
    if holder.is_disabled() {
        return Err(Refused::Disabled(holder.name));
    }
    let scope = Scope {
        account_id: holder.id,
        team_ids: teams,
    };
    if !scope.allows(&sb.account_id, sb.team_id.as_ref()) {
        return Err(Refused::NoAccess);
    }
    Ok((sb, claims))
}

/// A token of `purpose` for `holder` to reach `sb` until `expires_at`.
pub fn mint_for_holder(
    key: &TokenKey,
    purpose: Purpose,
    sb: &Sandbox,
    holder: &AccountId,
    expires_at: DateTime<Utc>,
) -> String {
    key.mint_bound(
        purpose,
        &Claims {
            sandbox_id: sb.id.clone(),
            account_id: holder.clone(),
            expires_at: DateTime::from_timestamp(expires_at.timestamp(), 0).unwrap_or(expires_at),
        },
        sb.session_epoch(),
    )
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;

    /// A key, the time now, claims that expire in an hour and the token
    /// the key mints for them.
    fn minted() -> (TokenKey, DateTime<Utc>, Claims, String) {
        let key = TokenKey::from_bytes([7; 32]);
        let now = Utc::now();
        let c = claims(now);
        let t = key.mint(&c);
        (key, now, c, t)
    }

    fn claims(now: DateTime<Utc>) -> Claims {
        Claims {
            sandbox_id: SandboxId::generate(),
            account_id: AccountId::generate(),
            expires_at: DateTime::from_timestamp((now + Duration::hours(1)).timestamp(), 0)
                .unwrap(),
        }
    }

    #[test]
    fn round_trip() {
        let (key, now, c, t) = minted();
        assert!(t.starts_with("stkp_"), "{t}");
        assert!(t.len() <= MAX_TOKEN_LEN, "{}", t.len());
        assert_eq!(key.verify(&t, now), Ok(c.clone()));
        // Expired at exactly the expiry second.
        assert_eq!(
            key.verify(&t, c.expires_at),
            Err(TokenError::Expired(c.expires_at))
        );
    }

    #[test]
    fn forgeries_and_other_keys_are_rejected() {
        let (key, now, c, t) = minted();
        assert_eq!(
            TokenKey::from_bytes([8; 32]).verify(&t, now),
            Err(TokenError::BadSignature)
        );
        // Another sandbox id or a later expiry under the same signature.
        let other = SandboxId::generate();
        let swapped = t.replacen(c.sandbox_id.as_str(), other.as_str(), 1);
        assert_eq!(key.verify(&swapped, now), Err(TokenError::BadSignature));
        let exp = c.expires_at.timestamp().to_string();
        let later = t.replacen(&exp, &(c.expires_at.timestamp() + 1).to_string(), 1);
        assert_eq!(key.verify(&later, now), Err(TokenError::BadSignature));
        // A flipped signature character.
        let mut bytes = t.clone().into_bytes();
        let last = bytes.len() - 2;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(bytes).unwrap();
        assert_eq!(key.verify(&flipped, now), Err(TokenError::BadSignature));
    }

    #[test]
    fn a_token_serves_only_its_purpose() {
        let key = TokenKey::from_bytes([7; 32]);
        let now = Utc::now();
        let c = claims(now);
        let all = [
            Purpose::Ports,
            Purpose::Traffic,
            Purpose::Gateway,
            Purpose::Envd,
        ];
        for minted in all {
            let t = key.mint_for(minted, &c);
            for checked in all {
                let got = key.verify_for(checked, &t, now);
                if minted == checked {
                    assert_eq!(got, Ok(c.clone()));
                } else {
                    assert!(got.is_err(), "{minted:?} accepted as {checked:?}");
                }
            }
            // The prefix swapped: the signature no longer matches.
            let body = t.split_once('_').unwrap().1;
            for other in all.into_iter().filter(|p| *p != minted) {
                let forged = format!("{}{body}", other.prefix());
                assert_eq!(
                    key.verify_for(other, &forged, now),
                    Err(TokenError::BadSignature)
                );
            }
        }
    }

    #[test]
    fn garbage_is_malformed_never_a_panic() {
        let key = TokenKey::from_bytes([7; 32]);
        let now = Utc::now();
        let long = "x".repeat(10_000);
        for bad in [
            "",
            "stkp_",
            "stk_abc",
            "stkp_a.b.c.d",
            "stkp_abcdefghijkl.abcdefghijklmnop.12.!!",
            "stkp_abcdefghijkl.abcdefghijklmnop.-5.AAAA",
            "stkp_abcdefghijkl.abcdefghijklmnop.99999999999999999999.AAAA",
            "stkp_abcdefghijkl.abcdefghijklmnop.12.AAAA.extra",
            "stkp_ÄÖÜ.ü.1.A",
            long.as_str(),
        ] {
            assert_eq!(key.verify(bad, now), Err(TokenError::Malformed), "{bad}");
        }
    }
}
