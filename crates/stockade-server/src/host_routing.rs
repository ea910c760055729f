//! Routing by host name, ahead of every route: a request to a sandbox
//! port's host `{port}-{id}.{proxy domain}` goes to that port through the
//! proxy, or, for the agent's port (49983, E2B's host form of the
//! in-sandbox agent) and the code interpreter's (49999, served by the
//! agent), to the envd front-end, which authenticates it by the
//! sandbox's envd access token; any other request goes on to the routes.
//! The choice between the two front-ends is made here, above both, so the
//! proxy stays below the compatibility APIs that build on it.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::compat::envd;
use crate::{proxy, AppState};

/// Middleware for the host form: a request whose host names a sandbox
/// port goes there, whatever its path; every other request goes on.
pub async fn by_host(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match proxy::host_target(&state.config, &req) {
        None => next.run(req).await,
        Some(Err(e)) => e.into_response(),
        Some(Ok((sandbox_id, port))) if envd::is_in_sandbox_port(port) => {
            envd::by_host(&state, req, sandbox_id, port).await
        }
        Some(Ok((sandbox_id, port))) => proxy::by_host(&state, req, sandbox_id, port).await,
    }
}
