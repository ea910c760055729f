//! The agent's HTTP server: routing of envd's Connect services and HTTP
//! routes, the access token, the caller's user, and the accept loops
//! (HTTP/1.1 and h2c on TCP or a unix socket).

mod code;
mod command_session;
mod files;
mod filesystem;
pub mod forward;
mod process;
pub mod rpc;
mod volume;

use crate::body::{self, BoxBody};
use crate::connect::{Code, ConnectError};
use crate::procs::{Processes, DEFAULT_PATH};
use crate::users::{Accounts, User};
use crate::watch::Watchers;
use base64::Engine as _;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Keepalive interval of streams whose client asked for none.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(60);

/// Settings `POST /init` may change.
#[derive(Clone, Debug, Default)]
pub struct Defaults {
    /// The user of requests that name none (else the agent's own user).
    pub user: Option<String>,
    /// The working directory of requests that name none (else home).
    pub workdir: Option<String>,
    /// Variables every started process gets.
    pub env: Vec<(String, String)>,
}

/// Everything the request handlers share.
pub struct AgentState {
    token: Option<Vec<u8>>,
    pub accounts: Accounts,
    pub defaults: RwLock<Defaults>,
    pub procs: Arc<Processes>,
    pub watchers: Watchers,
    /// The code contexts (Jupyter kernels) of `/code`.
    pub kernels: Arc<crate::kernel::Kernels>,
    /// The agent's own uid (processes of other users get their ids set).
    pub agent_uid: u32,
    /// The `PATH` of started processes.
    pub path_env: String,
    /// The shared volume the `/volume/` routes serve, in a volume helper
    /// container; `None` elsewhere (the routes do not exist).
    pub volume: Option<crate::volume_fs::Volume>,
    /// The latest input ids of `command_session` SendInput calls, so a
    /// retried send writes once.
    recent_inputs: std::sync::Mutex<std::collections::VecDeque<String>>,
}

/// How many input ids [`AgentState::first_delivery`] remembers.
const RECENT_INPUTS: usize = 1024;

/// One Connect RPC to route: the agent, the caller, the method's name
/// within its service and the request.
pub struct Rpc<'a> {
    pub state: Arc<AgentState>,
    pub call: Call,
    pub method: &'a str,
    pub req: Request<Incoming>,
}

/// What a handler knows about its call.
#[derive(Clone, Debug)]
pub struct Call {
    pub user: User,
    pub workdir: Option<String>,
    /// `Connect-Timeout-Ms`, if given.
    pub timeout: Option<Duration>,
    /// `Keepalive-Ping-Interval` (seconds), or the default.
    pub keepalive: Duration,
}

impl AgentState {
    pub fn new(
        token: Option<String>,
        accounts: Accounts,
        defaults: Defaults,
        procs: Arc<Processes>,
        kernels: Arc<crate::kernel::Kernels>,
        volume: Option<crate::volume_fs::Volume>,
    ) -> Arc<Self> {
        Arc::new(Self {
            token: token.map(String::into_bytes),
            accounts,
            defaults: RwLock::new(defaults),
            procs,
            watchers: Watchers::default(),
            kernels,
            agent_uid: rustix::process::geteuid().as_raw(),
            path_env: std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_owned()),
            volume,
            recent_inputs: std::sync::Mutex::new(std::collections::VecDeque::new()),
        })
    }

    /// Whether an input id is new (and remembers it): a retried input is
    /// written only once.
    pub fn first_delivery(&self, id: &str) -> bool {
        let mut seen = self.recent_inputs.lock().unwrap_or_else(|p| p.into_inner());
        if seen.iter().any(|s| s == id) {
            return false;
        }
        if seen.len() >= RECENT_INPUTS {
            seen.pop_front();
        }
        seen.push_back(id.to_owned());
        true
    }

    fn token_ok(&self, req: &Request<Incoming>) -> bool {
        let Some(expected) = &self.token else {
            return true;
        };
        let given = req
            .headers()
            .get("x-access-token")
            .map(|v| v.as_bytes())
            .unwrap_or(b"");
        given.len() == expected.len() && bool::from(given.ct_eq(expected))
    }

    /// The uid/gid to run as for a user, if it differs from the agent's.
    pub fn ids_for(&self, user: &User) -> Option<(u32, u32)> {
        (user.uid != self.agent_uid).then_some((user.uid, user.gid))
    }

    /// The user a request acts as: a named one, or the default.
    pub fn resolve_user(&self, name: Option<&str>) -> Result<User, ConnectError> {
        let name = match name {
            Some(n) if !n.is_empty() => Some(n.to_owned()),
            _ => self.defaults.read().expect("defaults").user.clone(),
        };
        match name {
            Some(n) => self.accounts.user_by_name(&n).ok_or_else(|| {
                ConnectError::new(Code::Unauthenticated, format!("invalid username: '{n}'"))
            }),
            None => Ok(self.accounts.user_by_uid(self.agent_uid)),
        }
    }

    fn call(&self, req: &Request<Incoming>) -> Result<Call, ConnectError> {
        let headers = req.headers();
        let basic_user = match headers.get(http::header::AUTHORIZATION) {
            None => None,
            Some(v) => Some(basic_username(v.to_str().unwrap_or("")).ok_or_else(|| {
                ConnectError::new(Code::Unauthenticated, "malformed Authorization header")
            })?),
        };
        let user = self.resolve_user(basic_user.as_deref())?;
        let timeout = match headers.get("connect-timeout-ms") {
            None => None,
            Some(v) => {
                let ms: u64 = v
                    .to_str()
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| {
                        ConnectError::invalid("Connect-Timeout-Ms must be a number of milliseconds")
                    })?;
                (ms > 0).then(|| Duration::from_millis(ms))
            }
        };
        let keepalive = headers
            .get("keepalive-ping-interval")
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_KEEPALIVE);
        Ok(Call {
            user,
            workdir: self.defaults.read().expect("defaults").workdir.clone(),
            timeout,
            keepalive,
        })
    }

    /// The environment of a started process: PATH, HOME, USER, LOGNAME,
    /// the defaults, then the request's own (last one wins).
    pub fn process_env(
        &self,
        user: &User,
        extra: &std::collections::HashMap<String, String>,
    ) -> Vec<(String, String)> {
        let mut env = vec![
            ("PATH".to_owned(), self.path_env.clone()),
            ("HOME".to_owned(), user.home.clone()),
            ("USER".to_owned(), user.name.clone()),
            ("LOGNAME".to_owned(), user.name.clone()),
        ];
        let set = |env: &mut Vec<(String, String)>, k: &str, v: &str| {
            env.retain(|(name, _)| name != k);
            env.push((k.to_owned(), v.to_owned()));
        };
        for (k, v) in &self.defaults.read().expect("defaults").env {
            set(&mut env, k, v);
        }
        let mut extra: Vec<_> = extra.iter().collect();
        extra.sort();
        for (k, v) in extra {
            set(&mut env, k, v);
        }
        env
    }
}

/// The user name of `Authorization: Basic base64(user:)`.
fn basic_username(value: &str) -> Option<String> {
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    Some(
        text.split_once(':')
            .map_or(text.as_str(), |(u, _)| u)
            .to_owned(),
    )
}

/// `GET /identity?challenge=C`: the proof that this agent holds its
/// token, `{"proof": …}` (`crate::identity`), asked without the token.
/// 404 where the agent has no token (nothing to prove).
fn identity(state: &AgentState, req: &Request<Incoming>) -> Response<BoxBody> {
    let Some(token) = &state.token else {
        return http_error(StatusCode::NOT_FOUND, "this agent has no access token");
    };
    let challenge = req
        .uri()
        .query()
        .and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "challenge")
                .map(|(_, v)| v.into_owned())
        })
        .unwrap_or_default();
    if challenge.is_empty() || challenge.len() > crate::identity::MAX_CHALLENGE {
        return http_error(
            StatusCode::BAD_REQUEST,
            format!(
                "challenge: 1 to {} characters are required",
                crate::identity::MAX_CHALLENGE
            ),
        );
    }
    let body = serde_json::json!({ "proof": crate::identity::proof(token, &challenge) });
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body::full(body.to_string()))
        .expect("valid response")
}

/// A plain JSON error of the HTTP routes (`{"code": 404, "message": …}`).
pub fn http_error(status: StatusCode, message: impl Into<String>) -> Response<BoxBody> {
    let body = serde_json::json!({ "code": status.as_u16(), "message": message.into() });
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body::full(body.to_string()))
        .expect("valid response")
}

/// Answers one request.
pub async fn handle(state: Arc<AgentState>, req: Request<Incoming>) -> Response<BoxBody> {
    let path = req.uri().path().to_owned();
    if path == "/health" {
        return Response::builder()
            .status(StatusCode::NO_CONTENT)
            .body(body::empty())
            .expect("valid response");
    }
    if path == "/identity" {
        return identity(&state, &req);
    }
    let is_rpc = path.starts_with("/process.Process/")
        || path.starts_with("/filesystem.Filesystem/")
        || path.starts_with("/command_session.CommandSession/");
    if !state.token_ok(&req) {
        let msg = "missing or invalid access token (X-Access-Token)";
        return if is_rpc {
            rpc::error_response(&ConnectError::new(Code::Unauthenticated, msg))
        } else {
            http_error(StatusCode::UNAUTHORIZED, msg)
        };
    }
    if is_rpc {
        if req.method() != Method::POST {
            return Response::builder()
                .status(StatusCode::METHOD_NOT_ALLOWED)
                .header(http::header::ALLOW, "POST")
                .body(body::empty())
                .expect("valid response");
        }
        let call = match state.call(&req) {
            Ok(c) => c,
            Err(e) => return rpc::error_response(&e),
        };
        let (service, method) = path[1..].split_once('/').unwrap_or_default();
        let rpc = Rpc {
            state,
            call,
            method,
            req,
        };
        return match service {
            "process.Process" => process::route(rpc).await,
            "command_session.CommandSession" => command_session::route(rpc).await,
            _ => filesystem::route(rpc).await,
        };
    }
    if path == "/code" || path.starts_with("/code/") {
        return code::route(state, req).await;
    }
    if path.starts_with("/volume/") {
        return volume::route(state, req).await;
    }
    match (req.method().clone(), path.as_str()) {
        (Method::GET, "/files") => files::download(state, req).await,
        (Method::POST, "/files") => files::upload(state, req).await,
        (Method::POST, "/init") => files::init(state, req).await,
        (Method::GET, "/envs") => files::envs(state),
        (Method::GET, "/stockade/forward") => forward::forward(state, req).await,
        (_, "/files" | "/init" | "/envs") => {
            http_error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        }
        _ => http_error(StatusCode::NOT_FOUND, format!("no route {path}")),
    }
}

/// How long a request head may take to arrive: the agent's port may be
/// published on a Docker host's address, where anyone can connect.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections served at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 512;

fn serve_connection<I>(io: I, state: Arc<AgentState>, slot: tokio::sync::OwnedSemaphorePermit)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let svc = hyper::service::service_fn(move |req| {
            let st = state.clone();
            async move { Ok::<_, Infallible>(handle(st, req).await) }
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT);
        let _ = builder.serve_connection_with_upgrades(io, svc).await;
        drop(slot);
    });
}

/// Accepts connections on a TCP listener forever, at most
/// [`MAX_CONNECTIONS`] at a time.
pub async fn serve_tcp(listener: tokio::net::TcpListener, state: Arc<AgentState>) {
    let listener = &listener;
    serve(state, move || async move {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    })
    .await
}

/// Accepts connections on a unix socket forever, at most
/// [`MAX_CONNECTIONS`] at a time.
pub async fn serve_unix(listener: tokio::net::UnixListener, state: Arc<AgentState>) {
    let listener = &listener;
    serve(state, move || async move { Ok(listener.accept().await?.0) }).await
}

/// Serves each connection `accept` gives, at most [`MAX_CONNECTIONS`] at a
/// time; when accepting fails (out of descriptors or similar) it backs off
/// instead of spinning.
async fn serve<S, F>(state: Arc<AgentState>, accept: impl Fn() -> F)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: std::future::Future<Output = std::io::Result<S>>,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        match accept().await {
            Ok(stream) => serve_connection(TokioIo::new(stream), state.clone(), slot),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_names_the_user() {
        let enc = base64::engine::general_purpose::STANDARD.encode("user:");
        assert_eq!(
            basic_username(&format!("Basic {enc}")).as_deref(),
            Some("user")
        );
        let enc = base64::engine::general_purpose::STANDARD.encode("root");
        assert_eq!(
            basic_username(&format!("basic {enc}")).as_deref(),
            Some("root")
        );
        assert_eq!(basic_username("Bearer x"), None);
        assert_eq!(basic_username("Basic !!"), None);
    }
}
