//! Credentials: who a secret belongs to (every request asks), the
//! dashboard's sessions, and an account's API tokens as resources (made,
//! listed, revoked). Secrets are kept as hashes only; the plaintext of a
//! new one is handed back once.

use chrono::{DateTime, Duration, SubsecRound, Utc};
use stockade_core::account::hash_token;
use stockade_core::{Account, AccountId, ApiToken, TokenId, TokenKind, TokenRecord};
use stockade_store::{Authenticated, StoreError};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// A store failure on an account's credentials: an unknown account is 404.
pub(crate) fn account_not_found(e: StoreError) -> ServiceError {
    match e {
        StoreError::NotFound => ServiceError::NotFound("Account not found".into()),
        other => other.into(),
    }
}

impl Service {
    /// The account, its teams and the credential `secret` is, when it is a
    /// live credential of `kind` (unknown, revoked, expired or of another
    /// kind: `None`). A disabled account is found; the caller refuses it.
    pub async fn authenticate(
        &self,
        secret: &str,
        kind: TokenKind,
    ) -> ServiceResult<Option<Authenticated>> {
        Ok(self
            .store
            .authenticate(&hash_token(secret.trim()))
            .await?
            .filter(|a| a.token.kind == kind))
    }

    /// Writes a token's `lastUsedAt` in the background: a failure there
    /// never fails the request that used it.
    pub fn record_token_use(&self, id: TokenId) {
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.touch_token(&id, Utc::now()).await {
                tracing::debug!(token.id = %id, error = %e, "could not record a token's use");
            }
        });
    }

    /// Opens a dashboard session of `account`, signed in with its API token
    /// `parent`, for `max_age`; returns its secret (shown once).
    pub async fn open_session(
        &self,
        account: &AccountId,
        parent: &TokenId,
        max_age: Duration,
    ) -> ServiceResult<ApiToken> {
        let now = Utc::now().trunc_subsecs(6);
        let mut session = TokenRecord::new(
            account.clone(),
            "dashboard".into(),
            TokenKind::Session,
            now,
            Some(now + max_age),
        );
        session.parent_id = Some(parent.clone());
        let secret = ApiToken::generate_session();
        self.store.insert_token(&session, &secret.hash()).await?;
        Ok(secret)
    }

    /// Ends the sessions whose secrets these are; other credentials and
    /// unknown secrets are left alone.
    pub async fn end_sessions(&self, secrets: &[&str]) -> ServiceResult<()> {
        for secret in secrets {
            let Some(found) = self.store.authenticate(&hash_token(secret)).await? else {
                continue;
            };
            if found.token.kind == TokenKind::Session {
                match self.store.delete_token(&found.token.id).await {
                    Ok(()) | Err(StoreError::NotFound) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Makes an API token of `account` named `name`, expiring at
    /// `expires_at` (`None`: never); returns its record and its secret
    /// (shown once).
    pub async fn create_api_token(
        &self,
        account: &AccountId,
        name: String,
        now: DateTime<Utc>,
        expires_at: Option<DateTime<Utc>>,
    ) -> ServiceResult<(TokenRecord, ApiToken)> {
        let record = TokenRecord::new(account.clone(), name, TokenKind::Api, now, expires_at);
        let secret = ApiToken::generate();
        self.store
            .insert_token(&record, &secret.hash())
            .await
            .map_err(account_not_found)?;
        Ok((record, secret))
    }

    /// The account's API tokens and sessions, without their secrets
    /// (404 for an unknown account).
    pub async fn list_tokens(&self, account: &AccountId) -> ServiceResult<Vec<TokenRecord>> {
        self.store
            .get_account(account)
            .await
            .map_err(account_not_found)?;
        Ok(self.store.list_tokens(account).await?)
    }

    /// Revokes a token (an API token with the sessions opened with it) as
    /// `actor`: its own tokens, or any for an administrator; for anyone
    /// else the token does not exist. Returns what was revoked.
    pub async fn revoke_token(&self, actor: &Account, id: &TokenId) -> ServiceResult<TokenRecord> {
        let not_found = || ServiceError::NotFound(format!("Token {id} not found"));
        let token = match self.store.get_token(id).await {
            Ok(t) => t,
            Err(StoreError::NotFound) => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        if !actor.is_admin && token.account_id != actor.id {
            return Err(not_found());
        }
        match self.store.delete_token(id).await {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(token)
    }
}
