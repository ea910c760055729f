//! The Stockade Rust SDK: create, use and tear down sandboxes from code.
//!
//! ```no_run
//! use stockade_sdk::{Client, CreateParams, Sandbox};
//!
//! # async fn demo() -> Result<(), stockade_sdk::Error> {
//! // STOCKADE_URL and STOCKADE_TOKEN
//! let client = Client::from_env()?;
//! let sandbox = Sandbox::create(&client, CreateParams::new().name("demo").vcpus(2.0)).await?;
//! println!("{} is {}", sandbox.id(), sandbox.status());
//! sandbox.stop().await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod admin;
mod client;
mod error;
mod sandbox;

pub use client::Client;
pub use error::Error;
pub use sandbox::{
    CreateParams, DeleteOptions, ListParams, NetworkPolicy, Sandbox, SandboxGuard, SandboxPage,
};
pub use stockade_api as api;
pub use tokio_util::sync::CancellationToken;

pub type Result<T, E = Error> = std::result::Result<T, E>;
