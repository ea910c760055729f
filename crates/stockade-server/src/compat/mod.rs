//! The compatibility front-ends: E2B's control plane under
//! `/e2b` and its in-sandbox routing (`e2b`, `envd`), and what
//! `prime-sandboxes` needs next to Stockade's own API, with its sandbox
//! gateway (`prime`). Each is a thin adapter over the service, like the
//! routes of Stockade's own API.

pub mod e2b;
pub mod e2b_events;
pub mod e2b_net;
pub mod e2b_templates;
pub mod e2b_volumes;
pub mod envd;
pub mod prime;
pub mod prime_volumes;

use axum::Router;

use crate::AppState;

/// The routes of E2B's control plane, mounted at [`envd::E2B_PREFIX`].
pub fn e2b_routes() -> Router<AppState> {
    e2b::routes()
}
