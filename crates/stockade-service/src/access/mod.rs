//! Scope-checked loads: what a caller may see of the records, the one door
//! every use case goes through before it acts.

pub mod tokens;

use chrono::{DateTime, Utc};
use stockade_core::{Sandbox, SandboxId, Scope};
use stockade_store::StoreError;

use crate::error::ServiceResult;
use crate::Service;

/// Loads a sandbox the caller may see: unknown → 404, another account's → 403.
pub async fn load(svc: &Service, scope: &Scope, id: &str) -> ServiceResult<Sandbox> {
    let id = SandboxId::parse_field(id, "sandbox_id")?;
    Ok(svc.store.get_sandbox(scope, &id).await?)
}

impl Service {
    /// The key sandbox auth tokens are signed with, made on first use and
    /// kept in the database so every instance accepts the others' tokens.
    pub async fn token_key(&self) -> Result<tokens::TokenKey, StoreError> {
        tokens::TokenKey::load(self.store.as_ref()).await
    }

    /// The sandbox a presented token opens, checked against its holder
    /// and the sandbox's current run (see [`tokens::sandbox_of_token`]).
    pub async fn sandbox_of_token(
        &self,
        key: &tokens::TokenKey,
        purpose: tokens::Purpose,
        raw: &str,
        expected: Option<&SandboxId>,
        now: DateTime<Utc>,
    ) -> Result<(Sandbox, tokens::Claims), tokens::Refused> {
        tokens::sandbox_of_token(self.store.as_ref(), key, purpose, raw, expected, now).await
    }

    /// Whether a secret is one of this server's own credentials (an API
    /// key or a token of any purpose), so a proxy never hands it on to a
    /// sandbox. An unanswering database counts as "ours": the header is
    /// dropped rather than leaked.
    pub async fn knows_secret(&self, secret: &str) -> bool {
        let hash = stockade_core::account::hash_token(secret);
        !matches!(self.store.authenticate(&hash).await, Ok(None))
    }
}

/// Every sandbox record not yet deleted, page by page in id order: what the
/// background passes walk (reconciliation, drains, host recovery, the disk
/// watch, the egress entries).
pub struct ActivePages {
    svc: Service,
    after: Option<SandboxId>,
    size: u32,
    done: bool,
}

impl ActivePages {
    pub fn new(svc: &Service, size: u32) -> Self {
        Self {
            svc: svc.clone(),
            after: None,
            size,
            done: false,
        }
    }

    /// The next page; `None` after the last one. An error ends the walk.
    pub async fn next(&mut self) -> Option<Result<Vec<Sandbox>, StoreError>> {
        if self.done {
            return None;
        }
        let page = self
            .svc
            .store
            .list_active_sandboxes_page(self.after.as_ref(), self.size)
            .await;
        match &page {
            Ok(p) => {
                self.after = p.last().map(|sb| sb.id.clone());
                self.done = p.len() < self.size as usize;
            }
            Err(_) => self.done = true,
        }
        Some(page)
    }
}
