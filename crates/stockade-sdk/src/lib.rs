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
//! let out = sandbox.run_command("echo hello from $(hostname)").await?;
//! println!("{}", out.stdout);
//! sandbox.write_file("notes.txt", "kept in /workspace").await?;
//! sandbox.stop().await?;
//! # Ok(()) }
//! ```
//!
//! Everything else hangs off [`Sandbox`] (commands, background processes,
//! terminals, code cells and their contexts, files and watches, logs,
//! ports, snapshots, forks, updates) and [`Client`] (volumes, shared
//! volumes and their files, templates and their builds, uploads, accounts,
//! health). Dropping any future is safe: a dropped create is
//! rolled back by the server, a dropped command stream kills its command,
//! a dropped cell stream interrupts its cell, a dropped [`Terminal`] ends
//! its process.
#![forbid(unsafe_code)]

/// Makes a type that wraps a boxed stream in its `inner` field a [`Stream`]
/// of the same items, `Result<$item, Error>`.
macro_rules! stream_of_inner {
    ($ty:ty, $item:ty) => {
        impl futures_util::stream::Stream for $ty {
            type Item = Result<$item, crate::error::Error>;
            fn poll_next(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Self::Item>> {
                futures_util::stream::StreamExt::poll_next_unpin(&mut self.inner, cx)
            }
        }
    };
}

/// A public struct that holds only a boxed stream of `$item`s and is itself
/// that [`Stream`](futures_util::Stream); its `Debug` is its name.
macro_rules! boxed_stream {
    ($(#[$attr:meta])* pub struct $ty:ident of $item:ty;) => {
        $(#[$attr])*
        pub struct $ty {
            inner: futures_util::stream::BoxStream<'static, Result<$item, crate::error::Error>>,
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(stringify!($ty))
            }
        }

        stream_of_inner!($ty, $item);
    };
}

/// For parameters that derive `Default`: `pub fn new() -> Self`, the
/// defaults, then the chained `setters!`.
macro_rules! new_and_setters {
    ($($setters:tt)*) => {
        pub fn new() -> Self {
            Self::default()
        }
        setters! { $($setters)* }
    };
}

/// Chained setters that fill an `Option` field:
/// `setters! { /// doc
/// name(arg: Type) => field = value; }` makes
/// `pub fn name(mut self, arg: Type) -> Self` that sets `field` to `Some(value)`.
macro_rules! setters {
    ($($(#[$attr:meta])* $name:ident($arg:ident: $ty:ty) => $field:ident = $value:expr;)*) => {
        $(
            $(#[$attr])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$field = Some($value);
                self
            }
        )*
    };
}

mod admin;
mod client;
mod code;
mod error;
mod events;
mod exec;
mod files;
mod logs;
mod ports;
mod sandbox;
mod shared_volumes;
mod snapshots;
mod sse;
mod templates;
mod terminal;
mod volumes;

/// Bytes of file contents and archives.
pub use bytes;
pub use client::Client;
pub use code::{CodeStream, RunCode, MAX_CODE_BYTES};
pub use error::Error;
pub use events::{AuditParams, EventParams, EventStream, MAX_PAGE};
pub use exec::{Command, CommandEvent, CommandExit, CommandOutput, CommandStream, Process};
pub use files::{ByteStream, FileWatch, WatchEvent, WatchEventKind};
/// Streams of command events, log lines and bytes are `futures` streams.
pub use futures_util::stream::{self, Stream, StreamExt};
pub use logs::{FollowLogs, LogStream};
pub use sandbox::{
    CreateParams, DeleteOptions, ListParams, NetworkPolicy, Sandbox, SandboxGuard, SandboxPage,
    Source, UpdateParams,
};
pub use shared_volumes::VolumeWrite;
pub use snapshots::Snapshot;
pub use stockade_api as api;
/// A cell's outcome and events, and code contexts.
pub use stockade_api::code::{
    CodeContext, CodeError, CodeEvent, CodeLogs, CodeOutput, CodeResult, Execution,
};
/// Shared volumes, their files and the mounts a create asks for.
pub use stockade_api::shared_volumes::{
    CreateSharedVolumeRequest, SharedVolumeList, SharedVolumeResponse, VolumeEntryResponse,
    VolumeListing, VolumeMountRequest,
};
/// Templates, their builds and build logs.
pub use stockade_api::templates::{
    BuildLogEntry, BuildResponse, BuildStatusResponse, CreateTemplateRequest,
    ListTemplatesResponse, StartBuildRequest, TagBuildRequest, TemplateFilesResponse,
    TemplateResponse, TemplateTag, TemplateTagsResponse,
};
pub use templates::{files_hash, MAX_BUILD_LOG_PAGE};
pub use terminal::{Terminal, TerminalOptions, TerminalWriter, MAX_TERMINAL_SIDE};
pub use tokio_util::sync::CancellationToken;

pub type Result<T, E = Error> = std::result::Result<T, E>;
