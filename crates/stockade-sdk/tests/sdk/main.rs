//! The SDK against a real server and the real Docker engine: one test
//! binary, a module per feature.

mod helpers;

mod code;
mod events;
mod exec;
mod files;
mod lifecycle;
mod logs;
mod names;
mod ports;
mod quotas;
mod snapshots;
mod terminal;
mod tokens;
mod update;
mod volumes;
