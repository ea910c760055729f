//! `Idempotency-Key` on create. A key is recorded — with
//! the hash of the request and the sandbox id it will make — before the
//! create begins, and follows its operation: a retry returns the sandbox
//! the first create made, waits while that create is still running on a
//! live instance, recovers it at once when its instance died, and creates
//! anew when the first create failed or was rolled back. Keys expire after
//! [`KEY_TTL`].

use std::time::Duration;

use chrono::Utc;
use stockade_core::{OperationKind, Sandbox, SandboxId, Scope};
use stockade_store::StoreError;
use tracing::error;

use crate::error::{ServiceError, ServiceResult};
use crate::ops::operations::OpGuard;
use crate::sandbox::lifecycle::{Created, IdempotencyKey};
use crate::Service;

/// How long a key is remembered.
pub const KEY_TTL: Duration = Duration::from_secs(24 * 3600);

/// How often a retry looks whether the first create finished.
const POLL: Duration = Duration::from_millis(50);

/// Checks an `Idempotency-Key`: 1 to 255 visible ASCII characters.
pub fn parse_key(key: &str) -> ServiceResult<&str> {
    if !key.is_empty() && key.len() <= 255 && key.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(key)
    } else {
        Err(ServiceError::field(
            "Idempotency-Key",
            "must be 1 to 255 visible ASCII characters",
        ))
    }
}

/// The oldest moment a key still counts from.
pub fn expired_before() -> chrono::DateTime<Utc> {
    Utc::now() - chrono::Duration::from_std(KEY_TTL).unwrap_or(chrono::Duration::days(1))
}

/// What the first create with a key left.
enum Replay {
    Done(Box<Sandbox>),
    /// It failed, was rolled back, or never began: the key can be reused.
    Gone,
}

/// What a create with a key does next (the shape of zero2prod's
/// `idempotency::try_processing`).
pub enum NextAction {
    /// An earlier create with the same key and the same request made it.
    ReturnSaved(Box<Created>),
    /// This request is the one that creates: the key names its sandbox id
    /// and its operation is held.
    StartProcessing(Box<Processing>),
}

/// A create under way with a key: its operation, held since before the
/// key was recorded (so a retry that finds the key also finds the
/// operation), and the key.
pub struct Processing {
    pub guard: OpGuard,
    pub key: IdempotencyKey,
}

impl Processing {
    /// The create never began (refused, its source failed): the key is
    /// forgotten so that a retry may try again.
    pub async fn abort(self, svc: &Service) {
        forget(svc, &self.key).await;
        self.guard.release().await;
    }
}

/// Forgets a key whose create failed: a retry with it may create anew.
pub async fn forget(svc: &Service, key: &IdempotencyKey) {
    if let Err(e) = svc
        .store
        .delete_idempotency_key(&key.account, &key.key)
        .await
    {
        error!(error = %e, "could not forget the idempotency key of a failed create");
    }
}

/// Looks `key` up for a create of sandbox `id` whose request hashes to
/// `hash`: the first create's sandbox for a repeated request (waiting while
/// it is still being made), a conflict for the same key with another
/// request, else the key recorded for this create.
pub async fn try_processing(
    svc: &Service,
    scope: &Scope,
    key: &str,
    hash: &str,
    id: &SandboxId,
) -> ServiceResult<NextAction> {
    let key = parse_key(key)?;
    let account = scope.account_id.clone();
    // A handful of rounds: a concurrent request with the same key, or a
    // first create rolled back in between, sends us round again.
    for _ in 0..20 {
        if let Some((first_hash, first_id)) = svc
            .store
            .get_idempotency_key(&account, key, expired_before())
            .await?
        {
            if first_hash != hash {
                return Err(ServiceError::IdempotencyMismatch(format!(
                    "Idempotency-Key '{key}' was already used with different parameters"
                )));
            }
            match replay(svc, scope, &first_id, key).await? {
                Replay::Done(sandbox) => {
                    return Ok(NextAction::ReturnSaved(Box::new(Created {
                        sandbox: *sandbox,
                        replayed: true,
                    })))
                }
                Replay::Gone => {
                    svc.store.delete_idempotency_key(&account, key).await?;
                    continue;
                }
            }
        }
        // The create's operation is recorded before the key, so a retry
        // that finds the key also finds the operation (or its record) —
        // never nothing while the first create is still on its way.
        let op = svc.new_operation(
            OperationKind::Create,
            id,
            &account,
            serde_json::json!({ "idempotency_key": key }),
        );
        let guard = svc.begin_operation(op).await?;
        match svc
            .store
            .insert_idempotency_key(&account, key, hash, id, expired_before())
            .await
        {
            Ok(()) => {
                return Ok(NextAction::StartProcessing(Box::new(Processing {
                    guard,
                    key: IdempotencyKey {
                        account,
                        key: key.to_owned(),
                    },
                })))
            }
            // A concurrent request with the same key won: replay its result.
            Err(StoreError::Conflict(_)) => guard.release().await,
            Err(e) => {
                guard.release().await;
                return Err(e.into());
            }
        }
    }
    Err(ServiceError::Conflict(format!(
        "Idempotency-Key '{key}' is being used by other requests right now; retry"
    )))
}

/// Follows the first create with `key` (of sandbox `id`) to its end.
async fn replay(svc: &Service, scope: &Scope, id: &SandboxId, key: &str) -> ServiceResult<Replay> {
    let deadline = tokio::time::Instant::now() + svc.config.create_wait;
    loop {
        // The operation first: a create ends its operation in the same
        // write as its record, so a record read after "no operation" shows
        // how it ended (read the other way round, a create finishing in
        // between looks like one that never recorded an operation).
        let op = svc.store.get_operation(id.as_str()).await?;
        let record = match svc.store.get_sandbox(scope, id).await {
            Ok(sb) => Some(sb),
            Err(StoreError::NotFound) => None,
            Err(e) => return Err(e.into()),
        };
        match (record, op) {
            (Some(sb), None) if !sb.is_being_created() => return Ok(Replay::Done(Box::new(sb))),
            // A record left in PROVISIONING by a create that recorded no
            // operation (before operations existed): reconciliation removes it.
            (Some(_), None) => {
                return Err(ServiceError::Conflict(format!(
                    "The first create with Idempotency-Key '{key}' did not finish; retry with another key"
                )))
            }
            (None, None) => return Ok(Replay::Gone),
            (_, Some(op)) if op.lease_until <= Utc::now() => {
                // Its instance died: roll it back now instead of waiting.
                crate::sandbox::recovery::claim_and_recover(svc, &op).await;
            }
            (_, Some(_)) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(ServiceError::Conflict(format!(
                        "The first create with Idempotency-Key '{key}' is still in progress; retry later"
                    )));
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// Removes the keys older than [`KEY_TTL`]; returns how many.
pub async fn purge_expired(svc: &Service) -> u64 {
    match svc.store.purge_idempotency_keys(expired_before()).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "could not remove expired idempotency keys");
            0
        }
    }
}
