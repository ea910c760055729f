//! End-to-end API tests: a real server over HTTP, the real Docker engine,
//! real SQLite. One binary, a module per feature.

mod failures;
mod health;
mod helpers;
mod lifecycle;
mod listing;
mod live_status;
mod metrics;
mod ratelimit;
mod restart;
mod teams;
mod tenancy;
mod validation;
