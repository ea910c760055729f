//! End-to-end API tests: a real server over HTTP, the real Docker engine,
//! real SQLite. One binary, a module per feature.

mod failures;
mod health;
mod helpers;
mod lifecycle;
mod listing;
mod restart;
mod snapshots;
mod sources;
mod sync;
mod tenancy;
mod validation;
