//! The code interpreter's HTTP routes under `/code` (E2B's code-interpreter
//! protocol): health, execute (NDJSON stream), and the contexts.

use super::AgentState;
use crate::body::{self, BoxBody, ChannelBody};
use crate::kernel::context::{env_supported, Cell};
use crate::kernel::{CodeError, Launch};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// The largest request body (a cell's code and its env vars).
const MAX_BODY: usize = 8 << 20;
/// Lines queued for a slow client before the cell's reader waits.
const LINE_QUEUE: usize = 16;

fn text(status: StatusCode, message: impl Into<String>) -> Response<BoxBody> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(body::full(message.into()))
        .expect("valid response")
}

fn refuse(e: CodeError) -> Response<BoxBody> {
    text(e.status, e.message)
}

fn json(v: &Value) -> Response<BoxBody> {
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body::full(v.to_string()))
        .expect("valid response")
}

fn ok_empty() -> Response<BoxBody> {
    Response::builder()
        .status(StatusCode::OK)
        .body(body::empty())
        .expect("valid response")
}

/// Answers a request whose path starts with `/code`.
pub async fn route(state: Arc<AgentState>, req: Request<Incoming>) -> Response<BoxBody> {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let parts: Vec<&str> = path.split('/').skip(2).collect();
    let method = req.method().clone();
    let result = match (&method, parts.as_slice()) {
        (&Method::GET, ["health"]) => Ok(json(&Value::String("OK".into()))),
        (&Method::POST, ["execute"]) => execute(state, req).await,
        (&Method::GET, ["contexts"]) => Ok(list(&state)),
        (&Method::POST, ["contexts"]) => create(state, req).await,
        (&Method::POST, ["contexts", id, "restart"]) => {
            let launch = launch(&state);
            state
                .kernels
                .restart(id, &launch)
                .await
                .map(|()| ok_empty())
        }
        (&Method::POST, ["contexts", id, "interrupt"]) => state.kernels.get(id).map(|c| {
            c.interrupt();
            ok_empty()
        }),
        (&Method::DELETE, ["contexts", id]) => state.kernels.delete(id).await.map(|()| ok_empty()),
        (
            _,
            ["health" | "execute" | "contexts"]
            | ["contexts", _]
            | ["contexts", _, "restart" | "interrupt"],
        ) => Err(CodeError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed",
        )),
        _ => Err(CodeError::new(
            StatusCode::NOT_FOUND,
            format!("no route {path}"),
        )),
    };
    result.unwrap_or_else(refuse)
}

/// How kernels start now: the default user, the sandbox's environment.
fn launch(state: &AgentState) -> Launch {
    let user = match state.resolve_user(None) {
        Ok(u) => u,
        Err(_) => state.accounts.user_by_uid(state.agent_uid),
    };
    Launch {
        env: state.process_env(&user, &Default::default()),
        ids: state.ids_for(&user),
        home: user.home,
    }
}

/// A context's default working directory: `/home/user` when it exists
/// (E2B's), else the sandbox's default, else the user's home.
fn default_cwd(state: &AgentState, launch: &Launch) -> String {
    if std::path::Path::new("/home/user").is_dir() {
        return "/home/user".into();
    }
    let workdir = state.defaults.read().expect("defaults").workdir.clone();
    workdir.unwrap_or_else(|| launch.home.clone())
}

async fn read_json(req: Request<Incoming>) -> Result<Map<String, Value>, CodeError> {
    let bytes = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|_| {
            CodeError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is over {} MiB (or was cut)",
                    MAX_BODY >> 20
                ),
            )
        })?
        .to_bytes();
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(CodeError::bad_request("the body must be a JSON object")),
        Err(e) => Err(CodeError::bad_request(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

/// An optional string field (`null` counts as absent).
fn opt_str(body: &Map<String, Value>, field: &str) -> Result<Option<String>, CodeError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(CodeError::bad_request(format!("{field} must be a string"))),
    }
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

async fn execute(
    state: Arc<AgentState>,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, CodeError> {
    let body = read_json(req).await?;
    let code = match body.get("code") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => return Err(CodeError::bad_request("code is required")),
        Some(_) => return Err(CodeError::bad_request("code must be a string")),
    };
    let context_id = opt_str(&body, "context_id")?;
    let language = opt_str(&body, "language")?;
    if context_id.is_some() && language.is_some() {
        return Err(CodeError::bad_request(
            "Only one of context_id or language can be provided",
        ));
    }
    let mut env_vars = Vec::new();
    match body.get("env_vars") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let Value::String(v) = v else {
                    return Err(CodeError::bad_request(format!(
                        "env_vars: the value of {k} must be a string"
                    )));
                };
                if !valid_env_name(k) {
                    return Err(CodeError::bad_request(format!(
                        "env_vars: {k:?} is not a variable name (letters, digits, _)"
                    )));
                }
                if v.contains('\0') {
                    return Err(CodeError::bad_request(format!(
                        "env_vars: the value of {k} contains a NUL byte"
                    )));
                }
                env_vars.push((k.clone(), v.clone()));
            }
        }
        Some(_) => {
            return Err(CodeError::bad_request(
                "env_vars must be an object of strings",
            ))
        }
    }
    let timeout = match body.get("timeout_ms") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(0) => None,
            Some(ms) => Some(Duration::from_millis(ms)),
            None => {
                return Err(CodeError::bad_request(
                    "timeout_ms must be a whole number of milliseconds",
                ))
            }
        },
    };
    let launch = launch(&state);
    let ctx = match (context_id, language) {
        (Some(id), _) => state.kernels.get(&id)?,
        (None, lang) => {
            let cwd = default_cwd(&state, &launch);
            let lang = lang.unwrap_or_else(|| "python".into());
            state.kernels.default_for(&lang, cwd, &launch).await?
        }
    };
    if !env_vars.is_empty() && !env_supported(&ctx.spec.language) {
        return Err(CodeError::bad_request(format!(
            "env_vars: cannot set variables in a {} kernel ({}); set them with the sandbox's environment instead",
            ctx.spec.language, ctx.spec.name
        )));
    }
    let sandbox_env = state.defaults.read().expect("defaults").env.clone();
    let env_reset = env_vars
        .iter()
        .map(|(k, _)| {
            let value = launch
                .env
                .iter()
                .chain(sandbox_env.iter())
                .rev()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone());
            (k.clone(), value)
        })
        .collect();
    let cell = Cell {
        code,
        env_vars,
        env_reset,
        timeout,
    };
    let (tx, body) = ChannelBody::new(LINE_QUEUE);
    tokio::spawn(ctx.execute(cell, tx));
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/x-ndjson")
        .header(http::header::CACHE_CONTROL, "no-cache")
        .body(body.boxed())
        .expect("valid response"))
}

fn describe(c: &crate::kernel::context::Context) -> Value {
    serde_json::json!({"id": c.id, "language": c.language, "cwd": c.cwd})
}

fn list(state: &AgentState) -> Response<BoxBody> {
    let all: Vec<Value> = state.kernels.list().iter().map(|c| describe(c)).collect();
    json(&Value::Array(all))
}

async fn create(
    state: Arc<AgentState>,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, CodeError> {
    let body = read_json(req).await?;
    let language = opt_str(&body, "language")?.unwrap_or_else(|| "python".into());
    let launch = launch(&state);
    let cwd = match opt_str(&body, "cwd")? {
        None => default_cwd(&state, &launch),
        Some(c) if c.trim().is_empty() => default_cwd(&state, &launch),
        Some(c) => {
            let p = std::path::Path::new(&c);
            let p = if p.is_absolute() {
                p.to_owned()
            } else {
                std::path::Path::new(&launch.home).join(p)
            };
            if !p.is_dir() {
                return Err(CodeError::bad_request(format!(
                    "cwd: {} is not a directory in this sandbox",
                    p.display()
                )));
            }
            p.to_string_lossy().into_owned()
        }
    };
    let ctx = state.kernels.create(&language, cwd, &launch).await?;
    Ok(json(&describe(&ctx)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_identifiers() {
        assert!(valid_env_name("A_1"));
        assert!(valid_env_name("_x"));
        assert!(!valid_env_name("1A"));
        assert!(!valid_env_name("A-B"));
        assert!(!valid_env_name("A;rm"));
        assert!(!valid_env_name(""));
    }
}
