//! The E2B SDKs' in-sandbox calls: with
//! `E2B_SANDBOX_URL=http://HOST:PORT/e2b` they send envd's requests
//! (`/process.Process/…`, `/filesystem.Filesystem/…`, `/files`, `/health`)
//! to Stockade with `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers; with
//! a proxy domain they reach `49983-{id}.DOMAIN`. Either way the request
//! goes to that sandbox's agent as it is, streaming both ways (Connect
//! server-streams, large uploads and downloads are never held in memory).
//!
//! Authentication: the sandbox's envd access token (`X-Access-Token`, what
//! the create answer calls `envdAccessToken`), or a Stockade API token of
//! the sandbox's account (`X-API-Key`, or `Authorization: Bearer`) — with
//! Stockade's 403/404 for another account's sandbox. Stockade's
//! credentials never reach the sandbox.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderName};
use axum::http::{StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use stockade_core::{Sandbox, SandboxId};
use stockade_service::ServiceError;

use super::e2b::{api_key, caller_of_token, E2bApiError};
use crate::error::ApiError;
use crate::proxy::token::{self, Purpose};
use crate::AppState;

/// The header naming the sandbox of an in-sandbox call.
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
/// The header naming the port of an in-sandbox call (the agent's, 49983).
pub const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";
/// The header carrying a sandbox's envd access token.
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";
/// The prefix of the E2B API, which the SDK keeps on in-sandbox paths.
pub const E2B_PREFIX: &str = "/e2b";

/// Middleware: a request with `E2b-Sandbox-Id` goes to that sandbox's
/// agent (its path without the `/e2b` prefix); others go on.
pub async fn by_header(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(raw) = req.headers().get(SANDBOX_ID_HEADER) else {
        return next.run(req).await;
    };
    let id = match raw
        .to_str()
        .ok()
        .and_then(|v| SandboxId::parse_field(v.trim(), "E2b-Sandbox-Id").ok())
    {
        Some(id) => id,
        None => {
            return super::e2b::e2b_error(
                StatusCode::BAD_REQUEST,
                "E2b-Sandbox-Id: not a sandbox id (12 lower-case letters and digits)",
            )
        }
    };
    if let Some(port) = req.headers().get(SANDBOX_PORT_HEADER) {
        let agent = stockade_runtime::AGENT_PORT.to_string();
        if port.to_str().ok().map(str::trim) != Some(agent.as_str()) {
            return super::e2b::e2b_error(
                StatusCode::BAD_REQUEST,
                format!(
                    "E2b-Sandbox-Port: only {agent} (the sandbox's agent) is reached this way; \
                     reach other ports at {{port}}-{{sandboxID}}.DOMAIN with the sandbox's \
                     trafficAccessToken"
                ),
            );
        }
    }
    let path = in_sandbox_path(req.uri());
    call(&state, req, id, path)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The host form `49983-{id}.DOMAIN` (from [`crate::host_routing`]).
pub async fn by_host(state: &AppState, req: Request, id: SandboxId) -> Response {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    call(state, req, id, path)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The path (and query) the agent sees: without the `/e2b` prefix.
fn in_sandbox_path(uri: &Uri) -> String {
    let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    match pq.strip_prefix(E2B_PREFIX) {
        Some("") => "/".into(),
        Some(rest) if rest.starts_with('?') => format!("/{rest}"),
        Some(rest) if rest.starts_with('/') => rest.to_owned(),
        _ => pq.to_owned(),
    }
}

async fn call(
    state: &AppState,
    req: Request,
    id: SandboxId,
    path: String,
) -> Result<Response, E2bApiError> {
    let sb = authorise(state, req.headers(), &id).await?;
    forward_to_agent(state, &sb, req, &path).await
}

/// The answer E2B's SDKs read as "the sandbox is gone or not running".
fn gone(id: &SandboxId, why: &str) -> E2bApiError {
    E2bApiError::Status(
        StatusCode::BAD_GATEWAY,
        format!("The sandbox {id} was not found{why}"),
    )
}

/// The API token of an in-sandbox call: `X-API-Key`, or a Stockade API
/// token as `Authorization: Bearer` (a sandbox's own schemes pass).
fn stockade_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    if let Some(k) = api_key(headers)? {
        return Ok(Some(k.to_owned()));
    }
    Ok(crate::extract::bearer_token(headers)
        .map(str::trim)
        .filter(|t| t.starts_with(stockade_core::ApiToken::PREFIX))
        .map(str::to_owned))
}

/// The credential an in-sandbox call authenticates with, as [`authorise`]
/// reads it: an API key of the sandbox's account, else the envd token.
pub(crate) fn presented_credential(headers: &HeaderMap) -> Option<String> {
    match stockade_key(headers) {
        Ok(Some(key)) => Some(key),
        Ok(None) => headers
            .get(ACCESS_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        Err(_) => None,
    }
}

/// The running sandbox an in-sandbox call may reach.
async fn authorise(
    state: &AppState,
    headers: &HeaderMap,
    id: &SandboxId,
) -> Result<Sandbox, E2bApiError> {
    let token = match headers.get(ACCESS_TOKEN_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::Unauthorized("Malformed X-Access-Token header".into()))?,
        ),
    };
    let sb = match stockade_key(headers)? {
        Some(key) => {
            let caller = caller_of_token(state, &key).await?;
            match state.svc.sandbox(&caller.scope, id).await {
                Ok(sb) => sb,
                Err(ServiceError::NotFound(_)) => return Err(gone(id, "")),
                Err(ServiceError::Forbidden(_)) => {
                    return Err(ServiceError::Forbidden(format!(
                        "Forbidden: sandbox {id} belongs to another account"
                    ))
                    .into())
                }
                Err(e) => return Err(e.into()),
            }
        }
        None => {
            let Some(t) = token else {
                return Err(ApiError::Unauthorized(format!(
                    "Calls into sandbox {id} need its envdAccessToken as X-Access-Token (or an \
                     API key of its account as X-API-Key)"
                ))
                .into());
            };
            // The token names its holder and this run of the sandbox: it
            // ends when the sandbox starts again, when the holder leaves
            // the sandbox's team, or when the holder's account is disabled.
            match state
                .svc
                .sandbox_of_token(
                    &state.proxy_keys,
                    Purpose::Envd,
                    t,
                    Some(id),
                    chrono::Utc::now(),
                )
                .await
            {
                Ok((sb, _)) => sb,
                // Another sandbox's token is as good as none here.
                Err(token::Refused::Invalid | token::Refused::OtherSandbox(_)) => {
                    return Err(E2bApiError::Api(ApiError::Unauthorized(format!(
                        "Invalid access token for sandbox {id}: send the envdAccessToken of the \
                         sandbox's latest create, connect or resume as X-Access-Token"
                    ))))
                }
                Err(e) => return Err(crate::proxy::refused(e, id).into()),
            }
        }
    };
    if sb.is_terminated() {
        return Err(gone(id, ": it was killed or reached its timeout"));
    }
    if !sb.can_exec() {
        return Err(gone(
            id,
            &format!(
                ": it is {} (paused); resume it with Sandbox.connect()",
                sb.status
            ),
        ));
    }
    Ok(sb)
}

/// Headers that are Stockade's or the front door's, never the agent's.
const NOT_FORWARDED: [&str; 6] = [
    "x-api-key",
    SANDBOX_ID_HEADER,
    SANDBOX_PORT_HEADER,
    "e2b-traffic-access-token",
    crate::proxy::TOKEN_HEADER,
    "cookie",
];

/// Sends `req` to `sb`'s agent at `path` and streams the answer back. The
/// request keeps its method, headers (less hop-by-hop ones and Stockade's
/// credentials; an `Authorization: Basic` naming the user passes) and body.
pub async fn forward_to_agent(
    state: &AppState,
    sb: &Sandbox,
    req: Request,
    path: &str,
) -> Result<Response, E2bApiError> {
    let id = &sb.id;
    let client = state.svc.agent(sb).await?.ok_or_else(|| {
        E2bApiError::Status(
            StatusCode::BAD_GATEWAY,
            format!(
                "Sandbox {id} runs without Stockade's in-sandbox agent (it was created before \
                 agents existed): its port is not open to E2B's SDKs; create a new sandbox"
            ),
        )
    })?;
    let (mut parts, body) = req.into_parts();
    parts.uri = Uri::try_from(path)
        .map_err(|e| ApiError::field("path", format!("cannot forward this path: {e}")))?;
    clean_headers(&mut parts.headers);
    let body = body
        .map_err(|e| std::io::Error::other(e.to_string()))
        .boxed_unsync();
    let resp = client
        .forward(axum::http::Request::from_parts(parts, body))
        .await
        .map_err(|e| {
            E2bApiError::Status(
                StatusCode::BAD_GATEWAY,
                format!("Sandbox {id} is running but its agent's port is not open: {e}"),
            )
        })?;
    let (mut parts, body) = resp.into_parts();
    crate::proxy::remove_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// Removes what only concerns the front door from a request to an agent:
/// hop-by-hop headers, Stockade's credentials (an API key, a bearer token
/// of any kind, cookies) and the routing headers. `Authorization: Basic`,
/// which names the sandbox user of an envd call, passes.
fn clean_headers(h: &mut HeaderMap) {
    crate::proxy::remove_hop_by_hop(h);
    for name in NOT_FORWARDED {
        h.remove(name);
    }
    let basic = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("basic ")));
    if !basic {
        h.remove(header::AUTHORIZATION);
    }
}

/// Whether a header is one this module strips.
pub fn is_front_door_header(name: &HeaderName) -> bool {
    NOT_FORWARDED.contains(&name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_e2b_prefix_is_dropped() {
        let p = |s: &str| in_sandbox_path(&s.parse::<Uri>().unwrap());
        assert_eq!(p("/e2b/process.Process/Start"), "/process.Process/Start");
        assert_eq!(p("/e2b/files?path=%2Fa"), "/files?path=%2Fa");
        assert_eq!(p("/files?path=x"), "/files?path=x");
        assert_eq!(p("/e2b"), "/");
        assert_eq!(p("/e2b?x=1"), "/?x=1");
        assert_eq!(p("/e2bfoo/health"), "/e2bfoo/health");
        assert_eq!(p("/health"), "/health");
    }

    #[test]
    fn stockade_credentials_never_reach_an_agent() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("x-api-key", "stk_key"),
            ("authorization", "Bearer stkg_gateway"),
            ("cookie", "stockade_session=stk_x; theirs=1"),
            ("e2b-sandbox-id", "abcdefghijkl"),
            ("e2b-sandbox-port", "49983"),
            ("e2b-traffic-access-token", "stkt_x"),
            ("x-stockade-token", "stkp_x"),
            ("connection", "keep-alive"),
            ("x-access-token", "envd"),
            ("content-type", "application/json"),
            ("connect-protocol-version", "1"),
        ] {
            h.insert(HeaderName::from_static(k), v.parse().unwrap());
        }
        clean_headers(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(
            left,
            ["connect-protocol-version", "content-type", "x-access-token"],
            "{left:?}"
        );
        // The user of an envd call passes.
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Basic cm9vdDo=".parse().unwrap());
        clean_headers(&mut h);
        assert_eq!(h[header::AUTHORIZATION], "Basic cm9vdDo=");
    }

    #[test]
    fn stockade_credentials_are_recognised() {
        let mut h = HeaderMap::new();
        assert_eq!(stockade_key(&h).unwrap(), None);
        h.insert(header::AUTHORIZATION, "Basic dXNlcjo=".parse().unwrap());
        assert_eq!(stockade_key(&h).unwrap(), None);
        h.insert(header::AUTHORIZATION, "Bearer stk_abc".parse().unwrap());
        assert_eq!(stockade_key(&h).unwrap().as_deref(), Some("stk_abc"));
        h.insert("x-api-key", "stk_key".parse().unwrap());
        assert_eq!(stockade_key(&h).unwrap().as_deref(), Some("stk_key"));
        assert!(is_front_door_header(&HeaderName::from_static("x-api-key")));
        assert!(!is_front_door_header(&HeaderName::from_static(
            "x-access-token"
        )));
    }
}
