//! The E2B SDKs' in-sandbox calls: with
//! `E2B_SANDBOX_URL=http://HOST:PORT/e2b` they send envd's requests
//! (`/process.Process/…`, `/filesystem.Filesystem/…`, `/files`, `/health`)
//! to Stockade with `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers; with
//! a proxy domain they reach `49983-{id}.DOMAIN`. Either way the request
//! goes to that sandbox's agent as it is, streaming both ways (Connect
//! server-streams, large uploads and downloads are never held in memory).
//! The code-interpreter SDKs' calls (`/execute`, `/contexts…`) name port
//! 49999 (or reach `49999-{id}.DOMAIN`) and go to the agent's code
//! interpreter under `/code`; a client that leaves mid-cell interrupts it.
//!
//! Authentication: the sandbox's envd access token (`X-Access-Token`, what
//! the create answer calls `envdAccessToken`), or a Stockade API token of
//! the sandbox's account (`X-API-Key`, or `Authorization: Bearer`) — with
//! Stockade's 403/404 for another account's sandbox. On port 49999 the
//! sandbox's traffic token (`E2B-Traffic-Access-Token`, the create answer's
//! `trafficAccessToken`) is good too: the SDKs send only it to `/contexts`.
//! Stockade's credentials never reach the sandbox.

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
/// The header naming the port of an in-sandbox call (the agent's, 49983,
/// or the code interpreter's, 49999).
pub const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";
/// The header carrying a sandbox's envd access token.
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";
/// The header carrying a sandbox's E2B traffic token.
pub const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";
/// The port E2B's code-interpreter SDKs call: its server there is the
/// agent's code interpreter, under [`CODE_PREFIX`].
pub const CODE_PORT: u16 = 49999;
/// Where the agent serves the code interpreter.
pub const CODE_PREFIX: &str = "/code";
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
    let port = match req.headers().get(SANDBOX_PORT_HEADER) {
        None => stockade_runtime::AGENT_PORT,
        Some(port) => match port
            .to_str()
            .ok()
            .and_then(|p| p.trim().parse::<u16>().ok())
            .filter(|p| is_in_sandbox_port(*p))
        {
            Some(p) => p,
            None => {
                let agent = stockade_runtime::AGENT_PORT;
                return super::e2b::e2b_error(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "E2b-Sandbox-Port: only {agent} (the sandbox's agent) and {CODE_PORT} \
                         (its code interpreter) are reached this way; reach other ports at \
                         {{port}}-{{sandboxID}}.DOMAIN with the sandbox's trafficAccessToken"
                    ),
                );
            }
        },
    };
    let path = agent_path(port, &in_sandbox_path(req.uri()));
    call(&state, req, id, port, path)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Whether a port's calls go to the agent through this module: the
/// agent's own and the code interpreter's.
pub fn is_in_sandbox_port(port: u16) -> bool {
    port == stockade_runtime::AGENT_PORT || port == CODE_PORT
}

/// The host form `49983-{id}.DOMAIN` or `49999-{id}.DOMAIN` (from
/// [`crate::host_routing`]).
pub async fn by_host(state: &AppState, req: Request, id: SandboxId, port: u16) -> Response {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let path = agent_path(port, &path);
    call(state, req, id, port, path)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The agent's path of a call to `port`: the code interpreter's calls
/// under [`CODE_PREFIX`], the agent's own as they are.
fn agent_path(port: u16, path: &str) -> String {
    if port == CODE_PORT {
        format!("{CODE_PREFIX}{path}")
    } else {
        path.to_owned()
    }
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
    port: u16,
    path: String,
) -> Result<Response, E2bApiError> {
    let sb = authorise(state, req.headers(), &id, port).await?;
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
/// reads it: an API key of the sandbox's account, else the envd token,
/// else the traffic token.
pub(crate) fn presented_credential(headers: &HeaderMap) -> Option<String> {
    match stockade_key(headers) {
        Ok(Some(key)) => Some(key),
        Ok(None) => headers
            .get(ACCESS_TOKEN_HEADER)
            .or_else(|| headers.get(TRAFFIC_TOKEN_HEADER))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        Err(_) => None,
    }
}

/// A sandbox token from `header`, when it is there.
fn token_header<'a>(headers: &'a HeaderMap, header: &str) -> Result<Option<&'a str>, ApiError> {
    match headers.get(header) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|t| Some(t.trim()))
            .map_err(|_| ApiError::Unauthorized(format!("Malformed {header} header"))),
    }
}

/// The running sandbox an in-sandbox call to `port` may reach.
async fn authorise(
    state: &AppState,
    headers: &HeaderMap,
    id: &SandboxId,
    port: u16,
) -> Result<Sandbox, E2bApiError> {
    let token = token_header(headers, ACCESS_TOKEN_HEADER)?;
    // The code interpreter's calls may carry the traffic token instead.
    let traffic = match port {
        CODE_PORT => token_header(headers, TRAFFIC_TOKEN_HEADER)?,
        _ => None,
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
            let candidates: Vec<(Purpose, &str)> = token
                .map(|t| (Purpose::Envd, t))
                .into_iter()
                .chain(traffic.map(|t| (Purpose::Traffic, t)))
                .collect();
            if candidates.is_empty() {
                let traffic = if port == CODE_PORT {
                    ", its trafficAccessToken as E2B-Traffic-Access-Token"
                } else {
                    ""
                };
                return Err(ApiError::Unauthorized(format!(
                    "Calls into sandbox {id} need its envdAccessToken as X-Access-Token{traffic} \
                     (or an API key of its account as X-API-Key)"
                ))
                .into());
            }
            let mut found = None;
            for (purpose, t) in candidates {
                // The token names its holder and this run of the sandbox: it
                // ends when the sandbox starts again, when the holder leaves
                // the sandbox's team, or when the holder's account is
                // disabled.
                match state
                    .svc
                    .sandbox_of_token(&state.proxy_keys, purpose, t, Some(id), chrono::Utc::now())
                    .await
                {
                    Ok((sb, _)) => {
                        found = Some(sb);
                        break;
                    }
                    // Another sandbox's token is as good as none here.
                    Err(token::Refused::Invalid | token::Refused::OtherSandbox(_)) => {}
                    Err(e) => return Err(crate::proxy::refused(e, id).into()),
                }
            }
            match found {
                Some(sb) => sb,
                None => {
                    return Err(E2bApiError::Api(ApiError::Unauthorized(format!(
                        "Invalid access token for sandbox {id}: send the envdAccessToken of the \
                         sandbox's latest create, connect or resume as X-Access-Token"
                    ))))
                }
            }
        }
    };
    if sb.is_terminated() {
        return Err(gone(id, ": it was killed or reached its timeout"));
    }
    // A paused sandbox is resumed first when its lifecycle auto-resumes.
    let sb = match stockade_service::pause::awake(&state.svc, sb).await {
        Ok(sb) => sb,
        Err(ServiceError::Paused(_)) => {
            return Err(gone(id, ": it is paused; resume it with Sandbox.connect()"))
        }
        Err(e) => return Err(e.into()),
    };
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
    TRAFFIC_TOKEN_HEADER,
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
    fn the_code_interpreter_port_goes_under_code() {
        assert_eq!(agent_path(CODE_PORT, "/execute"), "/code/execute");
        assert_eq!(
            agent_path(CODE_PORT, "/contexts/abc/restart"),
            "/code/contexts/abc/restart"
        );
        assert_eq!(agent_path(stockade_runtime::AGENT_PORT, "/files"), "/files");
        assert!(is_in_sandbox_port(49983) && is_in_sandbox_port(49999));
        assert!(!is_in_sandbox_port(8080));
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
