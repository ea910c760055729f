//! Scope-checked loads: what a caller may see of the records, the one door
//! every use case goes through before it acts.

use stockade_core::{Sandbox, SandboxId, Scope};

use crate::error::ServiceResult;
use crate::Service;

/// Loads a sandbox the caller may see: unknown → 404, another account's → 403.
pub async fn load(svc: &Service, scope: &Scope, id: &str) -> ServiceResult<Sandbox> {
    let id = SandboxId::parse_field(id, "sandbox_id")?;
    Ok(svc.store.get_sandbox(scope, &id).await?)
}
