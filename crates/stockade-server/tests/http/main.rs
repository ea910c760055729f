//! HTTP tests without Docker: the real router on the fake runtime and
//! SQLite in memory, one request at a time through `oneshot`. Validation,
//! listing, tenancy, quotas, teams, idempotency, credentials and error
//! shapes of every front-end run in seconds. One binary, a module per
//! feature.

#[path = "../shared/cases.rs"]
mod cases;
#[path = "../shared/error_body.rs"]
mod error_body;
mod support;

mod code;
mod credentials;
mod errors;
mod idempotency;
mod listing;
mod quotas;
mod teams;
mod tenancy;
mod validation;
