//! Scope-checked loads: what a caller may see of the records, the one door
//! every use case goes through before it acts.

pub mod tokens;

use chrono::{DateTime, Utc};
use stockade_core::{Sandbox, SandboxId, SandboxName, Scope};
use stockade_store::{SandboxFilter, StoreError};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// Loads a sandbox the caller may see, by id or by name: unknown → 404,
/// another account's id → 403. A name is looked up among the live
/// sandboxes the caller sees (its own and its teams'); one that names
/// several of them is a conflict listing their ids. An id is tried first
/// (a name may look like one).
pub async fn load(svc: &Service, scope: &Scope, id_or_name: &str) -> ServiceResult<Sandbox> {
    let name = SandboxName::parse(id_or_name).ok();
    if let Ok(id) = SandboxId::parse_field(id_or_name, "sandbox_id") {
        match svc.store.get_sandbox(scope, &id).await {
            Err(StoreError::NotFound) if name.is_some() => {}
            found => return Ok(found?),
        }
    }
    let Some(name) = name else {
        let shown: String = id_or_name.chars().take(40).collect();
        return Err(ServiceError::field(
            "sandbox_id",
            format!(
                "'{shown}' is neither a sandbox id (12 characters from [a-z0-9]) nor a sandbox name"
            ),
        ));
    };
    let filter = SandboxFilter {
        name: Some(name.as_str().to_owned()),
        is_active: Some(true),
        page: 1,
        per_page: 10,
        ..Default::default()
    };
    let page = svc.store.list_sandboxes(scope, &filter).await?;
    match page.sandboxes.as_slice() {
        [] => Err(ServiceError::sandbox_not_found()),
        [one] => Ok(one.clone()),
        several => Err(ServiceError::Conflict(format!(
            "The name '{name}' names {} sandboxes you can see ({}): use an id",
            page.total,
            several
                .iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
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
