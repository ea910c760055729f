//! End-to-end tests of the agent binary: real processes, real files, raw
//! HTTP in both encodings, the client library, and Docker.

mod auth;
mod docker;
mod e2b;
mod files;
mod forward;
mod helpers;
mod main_process;
mod process;
mod raw;
mod volume;

/// This crate's directory as `cargo test` says when it runs the test: a
/// test binary that another checkout sharing the target directory built
/// would otherwise look in that checkout.
pub fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    )
}
