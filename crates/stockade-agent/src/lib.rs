//! `stockade-agent`: the in-sandbox agent. It runs
//! as PID 1 of a sandbox, speaks E2B's envd protocol (Connect RPC
//! `process.Process` and `filesystem.Filesystem`, HTTP `/files` and
//! `/health`), serves a shared volume's files (`/volume/…`) in a volume
//! helper container, and ships the client Stockade's server uses to talk
//! to it.

pub mod agent;
pub mod body;
pub mod client;
pub mod config;
pub mod connect;
pub mod envfile;
pub mod fsops;
pub mod identity;
pub mod kernel;
pub mod multipart;
pub mod procs;
pub mod proto;
pub mod reaper;
pub mod server;
pub mod users;
pub mod volume_fs;
pub mod watch;
