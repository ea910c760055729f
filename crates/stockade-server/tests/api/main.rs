//! End-to-end API tests: a real server over HTTP, the real Docker engine,
//! real SQLite. One binary, a module per feature.

mod agent;
#[path = "../shared/cases.rs"]
mod cases;
mod code_interpreter;
mod connections;
mod credentials;
mod disk;
mod docs;
mod egress;
#[path = "../shared/error_body.rs"]
mod error_body;
mod events;
mod exec;
mod failures;
mod files;
mod fleet;
mod health;
mod helpers;
mod hostile;
mod hosts;
mod lifecycle;
mod listing;
mod live_status;
mod logs;
mod metrics;
mod pause;
mod pool;
mod ports;
mod quotas;
mod races;
mod ratelimit;
mod restart;
mod sessions;
mod shared_volumes;
mod snapshots;
mod sources;
mod sse_client;
mod storage;
mod sync;
mod teams;
mod templates;
mod tenancy;
mod terminal;
mod update;
mod usage_history;
mod validation;
mod volumes;
