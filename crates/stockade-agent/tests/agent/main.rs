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
