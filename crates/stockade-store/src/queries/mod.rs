//! Every query, written once for both backends: one module per role trait,
//! each implemented for [`crate::SqlStore`] over any [`crate::sql::Backend`].

mod accounts;
mod audit;
mod events;
mod hosts;
mod idempotency;
mod leases;
mod operations;
mod quotas;
mod sandboxes;
mod settings;
mod shared_volumes;
mod snapshots;
mod teams;
mod templates;

use crate::StoreError;

/// A record that cannot be rebuilt from its row: an error, logged, never a panic.
fn corrupt(what: &str, id: &str, problem: impl std::fmt::Display) -> StoreError {
    let message = format!("{what} record '{id}' is corrupt: {problem}");
    tracing::error!(error = %message, "corrupt record");
    StoreError::Other(message)
}
