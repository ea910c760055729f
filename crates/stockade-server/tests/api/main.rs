//! End-to-end API tests: a real server over HTTP, the real Docker engine,
//! real SQLite. One binary, a module per feature.

mod exec;
mod failures;
mod files;
mod health;
mod helpers;
mod lifecycle;
mod listing;
mod logs;
mod ports;
mod restart;
mod sse_client;
mod tenancy;
mod validation;
