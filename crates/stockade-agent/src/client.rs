//! A client of the agent for Stockade's server: pooled keep-alive
//! connections over TCP (`http://IP:49983`) or a unix socket, the access
//! token on every request, and typed calls for processes, files and
//! watches.

use crate::body::{self, BoxBody, ChannelBody};
use crate::connect::{self, Code, Codec, ConnectError, EnvelopeBody};
use crate::proto::filesystem::*;
use crate::proto::process::*;
use crate::proto::Msg;
pub use crate::volume_fs::{
    VolumeAttrs, VolumeEntry, VolumeEntryType, VolumeErrorKind, VolumeUsage,
};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What a call to the agent can fail with.
#[derive(Debug)]
pub enum ClientError {
    /// The agent answered with a Connect error.
    Rpc(ConnectError),
    /// An HTTP route answered with an error status.
    Http { status: u16, message: String },
    /// A volume route (`/volume/…`) refused the request: `code` is the
    /// agent's error code (`not_found`, `symlink`, `exists`, …; see
    /// [`ClientError::volume_error`]).
    Volume {
        status: u16,
        code: String,
        message: String,
    },
    /// The connection failed.
    Transport(String),
    /// The agent's answer made no sense.
    Protocol(String),
}

impl ClientError {
    /// The Connect code of an RPC error.
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Rpc(e) => Some(e.code),
            _ => None,
        }
    }

    /// The kind of a volume route's error; `None` for any other error (a
    /// volume route missing because the agent serves no volume is an
    /// [`ClientError::Http`] 404) or a code this version does not know.
    pub fn volume_error(&self) -> Option<VolumeErrorKind> {
        match self {
            ClientError::Volume { code, .. } => VolumeErrorKind::parse(code),
            _ => None,
        }
    }

    /// What a refused start means, read from the agent's wording of it;
    /// `None` for any error that is not an invalid start request.
    pub fn start_refused(&self) -> Option<StartRefused> {
        let ClientError::Rpc(e) = self else {
            return None;
        };
        if e.code != Code::InvalidArgument {
            return None;
        }
        let m = e.message.as_str();
        let (before, after) = crate::procs::CWD_MISSING;
        if m.starts_with(before) && m.ends_with(after) {
            return Some(StartRefused::CwdMissing);
        }
        if let Some((_, what)) = m.split_once(crate::procs::START_FAILED) {
            return Some(StartRefused::CannotRun {
                what: what.trim().to_owned(),
                permission_denied: what.contains("ermission denied"),
            });
        }
        Some(StartRefused::Invalid)
    }
}

/// Why the agent refused to start a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartRefused {
    /// The working directory is not in the sandbox.
    CwdMissing,
    /// The program could not run: which (`'cmd': reason`, as the agent
    /// words it), and whether a permission was what stopped it.
    CannotRun {
        what: String,
        permission_denied: bool,
    },
    /// Another part of the request was invalid.
    Invalid,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Rpc(e) => write!(f, "agent error {e}"),
            ClientError::Http { status, message } => {
                write!(f, "agent answered {status}: {message}")
            }
            ClientError::Volume {
                status,
                code,
                message,
            } => write!(f, "agent answered {status} ({code}): {message}"),
            ClientError::Transport(m) => write!(f, "agent unreachable: {m}"),
            ClientError::Protocol(m) => write!(f, "unexpected answer from the agent: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<ConnectError> for ClientError {
    fn from(e: ConnectError) -> Self {
        ClientError::Rpc(e)
    }
}

/// Where the agent listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `host:port` (an IP in a sandbox network).
    Tcp(String),
    /// A unix socket.
    Unix(PathBuf),
}

impl Endpoint {
    /// Parses `http://HOST:PORT` (a trailing `/` is fine).
    pub fn http(url: &str) -> Result<Self, ClientError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| {
                ClientError::Protocol(format!("agent URL {url:?} must start with http://"))
            })?
            .trim_end_matches('/');
        if rest.is_empty() || rest.contains('/') || !rest.contains(':') {
            return Err(ClientError::Protocol(format!(
                "agent URL {url:?} must be http://HOST:PORT"
            )));
        }
        Ok(Endpoint::Tcp(rest.to_owned()))
    }
}

/// A connected transport of the pool.
pub enum AgentStream {
    Tcp(TokioIo<tokio::net::TcpStream>),
    Unix(TokioIo<tokio::net::UnixStream>),
}

impl hyper::rt::Read for AgentStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AgentStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            AgentStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for AgentStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            AgentStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            AgentStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AgentStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            AgentStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AgentStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            AgentStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl Connection for AgentStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

/// Dials the endpoint, whatever the request URI says.
#[derive(Clone)]
pub struct Connector {
    endpoint: Arc<Endpoint>,
}

/// How long a connection to an agent may go without its peer acknowledging
/// what was sent (or answering a connect) before it fails. A container that
/// stops takes its address away without a reset, and a pooled connection to
/// it would otherwise wait out TCP's retransmissions (many minutes). A live
/// agent's kernel acknowledges at once, however busy or frozen the agent.
const UNANSWERED: Duration = Duration::from_secs(10);

impl tower_service::Service<Uri> for Connector {
    type Response = AgentStream;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<AgentStream>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let endpoint = self.endpoint.clone();
        Box::pin(async move {
            match &*endpoint {
                Endpoint::Tcp(addr) => {
                    let s = tokio::time::timeout(
                        UNANSWERED,
                        tokio::net::TcpStream::connect(addr.as_str()),
                    )
                    .await
                    .map_err(|_| {
                        std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no answer from {addr} within {} s", UNANSWERED.as_secs()),
                        )
                    })??;
                    s.set_nodelay(true)?;
                    let ms = u32::try_from(UNANSWERED.as_millis()).unwrap_or(u32::MAX);
                    rustix::net::sockopt::set_tcp_user_timeout(&s, ms)?;
                    Ok(AgentStream::Tcp(TokioIo::new(s)))
                }
                Endpoint::Unix(path) => Ok(AgentStream::Unix(TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))),
            }
        })
    }
}

/// A client of one agent. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct AgentClient {
    http: Client<Connector, BoxBody>,
    base: Arc<str>,
    token: Option<Arc<str>>,
    user: Option<Arc<str>>,
    codec: Codec,
}

/// A command for [`AgentClient::run`].
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Arguments after the program.
    pub args: Vec<String>,
    /// Extra environment.
    pub envs: HashMap<String, String>,
    /// Working directory (default: the user's home).
    pub cwd: Option<String>,
    /// Bytes kept per stream (stdout, stderr); 0 means 1 MiB.
    pub output_cap: usize,
    /// The process is killed when this passes.
    pub timeout: Option<Duration>,
}

/// What [`AgentClient::run`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunOutput {
    pub pid: u32,
    /// The exit code (-1 when a signal ended the process).
    pub exit_code: i32,
    pub exited: bool,
    /// `exit status N` or `signal: killed`.
    pub status: String,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Output was cut at the cap.
    pub truncated: bool,
    /// The timeout killed the process.
    pub timed_out: bool,
}

/// One event of a process stream (keepalives are skipped).
#[derive(Clone, Debug, PartialEq)]
pub enum ProcessOutput {
    Stdout(Bytes),
    Stderr(Bytes),
    Pty(Bytes),
    End(process_event::EndEvent),
}

/// The entry a filesystem answer carries; `call` names the call when it
/// has none.
fn entry_of(entry: Option<EntryInfo>, call: &str) -> Result<EntryInfo, ClientError> {
    entry.ok_or_else(|| ClientError::Protocol(format!("{call} answered without an entry")))
}

/// The messages of a server stream.
pub struct RpcStream<Res>(EnvelopeBody<Res>);

impl<Res: Msg> RpcStream<Res> {
    /// The next message; `None` at a clean end, an error if the stream
    /// ended with one (or was cut).
    pub async fn message(&mut self) -> Option<Result<Res, ClientError>> {
        loop {
            match self.0.reader.next_envelope() {
                Err(e) => {
                    self.0.done = true;
                    return Some(Err(e.into()));
                }
                Ok(Some((flags, payload))) => {
                    if flags & connect::FLAG_END_STREAM != 0 {
                        self.0.done = true;
                        return connect::parse_end_stream(&payload)
                            .err()
                            .map(|e| Err(e.into()));
                    }
                    return Some(self.0.decode(&payload).map_err(Into::into));
                }
                Ok(None) if self.0.done => return None,
                Ok(None) => {}
            }
            match self.0.read_frame().await {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    self.0.done = true;
                    return Some(Err(ClientError::Transport(e.to_string())));
                }
                None => {
                    self.0.done = true;
                    return Some(Err(ClientError::Protocol(
                        "the stream ended without an end message".into(),
                    )));
                }
            }
        }
    }

    /// Reads what is left of the body in a task of its own (for at most a
    /// second), so that its connection goes back to the pool instead of
    /// being closed: the agent ends a stream right after its last message,
    /// and a caller that has what it wanted need not wait for that.
    fn drain_in_background(self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(tokio::time::timeout(
            Duration::from_secs(1),
            self.0.discard_rest(64 * 1024),
        ));
    }
}

/// A running process's events, after its start event.
pub struct ProcessStream {
    pub pid: u32,
    /// `None` once dropped.
    inner: Option<RpcStream<StartResponse>>,
    /// The end event came: what follows is the stream's end.
    ended: bool,
}

impl Drop for ProcessStream {
    fn drop(&mut self) {
        if let (true, Some(inner)) = (self.ended, self.inner.take()) {
            inner.drain_in_background();
        }
    }
}

impl ProcessStream {
    /// The next output or the end; `None` after the end.
    pub async fn next(&mut self) -> Option<Result<ProcessOutput, ClientError>> {
        loop {
            let msg = match self.inner.as_mut()?.message().await? {
                Ok(m) => m,
                Err(e) => return Some(Err(e)),
            };
            match msg.event.and_then(|e| e.event) {
                Some(process_event::Event::Data(d)) => match d.output {
                    Some(process_event::Output::Stdout(b)) => {
                        return Some(Ok(ProcessOutput::Stdout(b)))
                    }
                    Some(process_event::Output::Stderr(b)) => {
                        return Some(Ok(ProcessOutput::Stderr(b)))
                    }
                    Some(process_event::Output::Pty(b)) => return Some(Ok(ProcessOutput::Pty(b))),
                    None => continue,
                },
                Some(process_event::Event::End(end)) => {
                    self.ended = true;
                    return Some(Ok(ProcessOutput::End(end)));
                }
                Some(process_event::Event::Start(_))
                | Some(process_event::Event::Keepalive(_))
                | None => continue,
            }
        }
    }
}

/// A directory watch's events, after its start event.
pub struct WatchStream {
    inner: RpcStream<WatchDirResponse>,
}

impl WatchStream {
    pub async fn next(&mut self) -> Option<Result<FilesystemEvent, ClientError>> {
        loop {
            match self.inner.message().await? {
                Err(e) => return Some(Err(e)),
                Ok(m) => {
                    if let Some(watch_dir_response::Event::Filesystem(ev)) = m.event {
                        return Some(Ok(ev));
                    }
                }
            }
        }
    }
}

/// A file being downloaded.
pub struct Download {
    /// Its size, when the agent said.
    pub size: Option<u64>,
    body: Incoming,
}

impl Download {
    /// The body of an answer, with the size its `Content-Length` says.
    fn of(resp: Response<Incoming>) -> Self {
        let size = resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        Self {
            size,
            body: resp.into_body(),
        }
    }

    /// The next chunk; `None` at the end.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, ClientError>> {
        loop {
            match self.body.frame().await? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some(Ok(data));
                    }
                }
                Err(e) => return Some(Err(ClientError::Transport(e.to_string()))),
            }
        }
    }

    /// The whole file (use `chunk` for large ones).
    pub async fn bytes(mut self) -> Result<Vec<u8>, ClientError> {
        let mut out = Vec::new();
        while let Some(c) = self.chunk().await {
            out.extend_from_slice(&c?);
        }
        Ok(out)
    }
}

/// What an upload wrote.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct WrittenEntry {
    pub path: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
}

fn sel_of(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector::pid(pid))
}

impl AgentClient {
    /// A client of the agent at an endpoint, with its token.
    pub fn new(endpoint: Endpoint, token: Option<String>) -> Self {
        let base: Arc<str> = match &endpoint {
            Endpoint::Tcp(addr) => format!("http://{addr}").into(),
            Endpoint::Unix(_) => "http://agent".into(),
        };
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(32)
            .build(Connector {
                endpoint: Arc::new(endpoint),
            });
        Self {
            http,
            base,
            token: token.map(Into::into),
            user: None,
            codec: Codec::Proto,
        }
    }

    /// Acts as a user of the sandbox (else the agent's default user).
    pub fn with_user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into().into());
        self
    }

    fn request(&self, method: http::Method, path_and_query: &str) -> http::request::Builder {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path_and_query));
        if let Some(t) = &self.token {
            b = b.header("x-access-token", &**t);
        }
        if let Some(u) = &self.user {
            let enc = base64::engine::general_purpose::STANDARD.encode(format!("{u}:"));
            b = b.header(http::header::AUTHORIZATION, format!("Basic {enc}"));
        }
        b
    }

    async fn send(&self, req: Request<BoxBody>) -> Result<Response<Incoming>, ClientError> {
        self.http
            .request(req)
            .await
            .map_err(|e| ClientError::Transport(format!("{e:?}")))
    }

    async fn error_of(resp: Response<Incoming>) -> ClientError {
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), 64 << 10)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        match ConnectError::from_json(&body) {
            Some(e) => ClientError::Rpc(e),
            None => ClientError::Rpc(ConnectError::new(
                Code::from_http_status(status),
                String::from_utf8_lossy(&body).into_owned(),
            )),
        }
    }

    /// A unary call by path (`/process.Process/List`).
    pub async fn unary<Req: Msg, Res: Msg>(
        &self,
        path: &str,
        msg: &Req,
    ) -> Result<Res, ClientError> {
        let req = self
            .request(http::Method::POST, path)
            .header(http::header::CONTENT_TYPE, self.codec.unary_content_type())
            .header("connect-protocol-version", "1")
            .body(body::full(self.codec.encode(msg)))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = self.send(req).await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::error_of(resp).await);
        }
        let data = Limited::new(resp.into_body(), connect::MAX_MESSAGE_BYTES)
            .collect()
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?
            .to_bytes();
        Ok(self.codec.decode(&data)?)
    }

    /// A server-streaming call by path.
    pub async fn server_stream<Req: Msg, Res: Msg>(
        &self,
        path: &str,
        msg: &Req,
        timeout: Option<Duration>,
    ) -> Result<RpcStream<Res>, ClientError> {
        let mut b = self
            .request(http::Method::POST, path)
            .header(http::header::CONTENT_TYPE, self.codec.stream_content_type())
            .header("connect-protocol-version", "1");
        if let Some(t) = timeout {
            b = b.header("connect-timeout-ms", t.as_millis().max(1).to_string());
        }
        let req = b
            .body(body::full(connect::envelope(0, &self.codec.encode(msg))))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = self.send(req).await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::error_of(resp).await);
        }
        Ok(RpcStream(EnvelopeBody::new(resp.into_body(), self.codec)))
    }

    /// Sends `req` to the agent as it is — its method, path and query,
    /// headers and (streamed) body — with the access token, and returns the
    /// answer with its body still streaming. For a front door that forwards
    /// a client's own envd calls.
    pub async fn forward(&self, req: Request<BoxBody>) -> Result<Response<Incoming>, ClientError> {
        let (mut parts, body) = req.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        parts.uri = format!("{}{}", self.base, path)
            .parse()
            .map_err(|e| ClientError::Protocol(format!("cannot forward {path}: {e}")))?;
        parts.version = http::Version::HTTP_11;
        parts.headers.remove("x-access-token");
        if let Some(t) = &self.token {
            let v = http::HeaderValue::from_str(t)
                .map_err(|e| ClientError::Protocol(format!("access token: {e}")))?;
            parts.headers.insert("x-access-token", v);
        }
        self.send(Request::from_parts(parts, body)).await
    }

    /// `GET /identity?challenge=…`, sent without the access token: the
    /// agent's proof for `challenge` (URL-safe characters, such as hex),
    /// which [`crate::identity::verify`] checks.
    pub async fn identity(&self, challenge: &str) -> Result<String, ClientError> {
        let req = Request::builder()
            .method(http::Method::GET)
            .uri(format!("{}/identity?challenge={challenge}", self.base))
            .body(body::empty())
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = self.send(req).await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::error_of(resp).await);
        }
        let data = Limited::new(resp.into_body(), 4 << 10)
            .collect()
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?
            .to_bytes();
        serde_json::from_slice::<serde_json::Value>(&data)
            .ok()
            .and_then(|v| v.get("proof")?.as_str().map(str::to_owned))
            .ok_or_else(|| ClientError::Protocol("identity answer without a proof".into()))
    }

    /// `GET /health`.
    pub async fn health(&self) -> Result<(), ClientError> {
        let req = self
            .request(http::Method::GET, "/health")
            .body(body::empty())
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = self.send(req).await?;
        match resp.status() {
            StatusCode::NO_CONTENT | StatusCode::OK => Ok(()),
            s => Err(ClientError::Http {
                status: s.as_u16(),
                message: "health check failed".into(),
            }),
        }
    }

    async fn open_process(
        &self,
        mut stream: RpcStream<StartResponse>,
    ) -> Result<ProcessStream, ClientError> {
        match stream.message().await {
            Some(Ok(StartResponse {
                event:
                    Some(ProcessEvent {
                        event: Some(process_event::Event::Start(s)),
                    }),
            })) => Ok(ProcessStream {
                pid: s.pid,
                inner: Some(stream),
                ended: false,
            }),
            Some(Err(e)) => Err(e),
            other => Err(ClientError::Protocol(format!(
                "expected a start event, got {:?}",
                other.map(|r| r.ok())
            ))),
        }
    }

    /// Starts a process and streams its events. With a timeout the agent
    /// kills it when the time is up.
    pub async fn start(
        &self,
        req: &StartRequest,
        timeout: Option<Duration>,
    ) -> Result<ProcessStream, ClientError> {
        let stream = self
            .server_stream("/process.Process/Start", req, timeout)
            .await?;
        self.open_process(stream).await
    }

    /// Re-attaches to a running process: its further events.
    pub async fn connect(&self, sel: ProcessSelector) -> Result<ProcessStream, ClientError> {
        // ConnectResponse and StartResponse share their one field.
        let stream = self
            .server_stream::<_, StartResponse>(
                "/process.Process/Connect",
                &ConnectRequest { process: Some(sel) },
                None,
            )
            .await?;
        self.open_process(stream).await
    }

    /// Runs a command to its end, keeping at most `output_cap` bytes of
    /// each stream; the timeout kills it.
    pub async fn run(&self, cmd: &str, opts: &RunOptions) -> Result<RunOutput, ClientError> {
        let cap = if opts.output_cap == 0 {
            1 << 20
        } else {
            opts.output_cap
        };
        let req = StartRequest {
            process: Some(ProcessConfig {
                cmd: cmd.to_owned(),
                args: opts.args.clone(),
                envs: opts.envs.clone(),
                cwd: opts.cwd.clone(),
            }),
            pty: None,
            tag: None,
            stdin: Some(false),
        };
        let started = Instant::now();
        let mut stream = self.start(&req, opts.timeout).await?;
        let mut out = RunOutput {
            pid: stream.pid,
            ..Default::default()
        };
        // Our own deadline, should the agent's kill not end the stream.
        let backstop = opts.timeout.map(|t| started + t + Duration::from_secs(2));
        let mut killed = false;
        loop {
            let next = match backstop {
                Some(at) if !killed => {
                    match tokio::time::timeout_at(at.into(), stream.next()).await {
                        Ok(n) => n,
                        Err(_) => {
                            killed = true;
                            let _ = self
                                .send_signal(ProcessSelector::pid(out.pid), Signal::Sigkill)
                                .await;
                            continue;
                        }
                    }
                }
                _ => stream.next().await,
            };
            let keep = |buf: &mut Vec<u8>, data: &[u8], truncated: &mut bool| {
                let room = cap.saturating_sub(buf.len());
                if data.len() > room {
                    *truncated = true;
                }
                buf.extend_from_slice(&data[..data.len().min(room)]);
            };
            match next {
                Some(Ok(ProcessOutput::Stdout(d))) | Some(Ok(ProcessOutput::Pty(d))) => {
                    keep(&mut out.stdout, &d, &mut out.truncated)
                }
                Some(Ok(ProcessOutput::Stderr(d))) => keep(&mut out.stderr, &d, &mut out.truncated),
                Some(Ok(ProcessOutput::End(end))) => {
                    out.exit_code = end.exit_code;
                    out.exited = end.exited;
                    out.status = end.status;
                    out.timed_out =
                        !end.exited && opts.timeout.is_some_and(|t| started.elapsed() >= t);
                    return Ok(out);
                }
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(ClientError::Protocol(
                        "the process stream ended without an end event".into(),
                    ))
                }
            }
        }
    }

    /// The running processes.
    pub async fn list(&self) -> Result<Vec<ProcessInfo>, ClientError> {
        let res: ListResponse = self.unary("/process.Process/List", &ListRequest {}).await?;
        Ok(res.processes)
    }

    /// Sends SIGTERM or SIGKILL.
    pub async fn send_signal(
        &self,
        sel: ProcessSelector,
        signal: Signal,
    ) -> Result<(), ClientError> {
        let _: SendSignalResponse = self
            .unary(
                "/process.Process/SendSignal",
                &SendSignalRequest {
                    process: Some(sel),
                    signal: signal as i32,
                },
            )
            .await?;
        Ok(())
    }

    /// Writes to stdin (or to the PTY with `ProcessInput::Pty`).
    pub async fn send_input(
        &self,
        sel: ProcessSelector,
        input: process_input::Input,
    ) -> Result<(), ClientError> {
        let _: SendInputResponse = self
            .unary(
                "/process.Process/SendInput",
                &SendInputRequest {
                    process: Some(sel),
                    input: Some(ProcessInput { input: Some(input) }),
                },
            )
            .await?;
        Ok(())
    }

    /// Streams input in order until `inputs` closes (client streaming).
    pub async fn stream_input(
        &self,
        sel: ProcessSelector,
        mut inputs: mpsc::Receiver<process_input::Input>,
    ) -> Result<(), ClientError> {
        let (tx, body) = ChannelBody::new(8);
        let codec = self.codec;
        let start = StreamInputRequest {
            event: Some(stream_input_request::Event::Start(
                stream_input_request::StartEvent { process: Some(sel) },
            )),
        };
        let feeder = tokio::spawn(async move {
            if tx
                .send(Ok(connect::envelope(0, &codec.encode(&start))))
                .await
                .is_err()
            {
                return;
            }
            while let Some(input) = inputs.recv().await {
                let msg = StreamInputRequest {
                    event: Some(stream_input_request::Event::Data(
                        stream_input_request::DataEvent {
                            input: Some(ProcessInput { input: Some(input) }),
                        },
                    )),
                };
                if tx
                    .send(Ok(connect::envelope(0, &codec.encode(&msg))))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        let req = self
            .request(http::Method::POST, "/process.Process/StreamInput")
            .header(http::header::CONTENT_TYPE, self.codec.stream_content_type())
            .header("connect-protocol-version", "1")
            .body(body.boxed())
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = self.send(req).await;
        feeder.abort();
        let resp = resp?;
        if resp.status() != StatusCode::OK {
            return Err(Self::error_of(resp).await);
        }
        let mut stream: RpcStream<StreamInputResponse> =
            RpcStream(EnvelopeBody::new(resp.into_body(), self.codec));
        while let Some(m) = stream.message().await {
            m?;
        }
        Ok(())
    }

    /// Closes stdin (EOF).
    pub async fn close_stdin(&self, sel: ProcessSelector) -> Result<(), ClientError> {
        let _: CloseStdinResponse = self
            .unary(
                "/process.Process/CloseStdin",
                &CloseStdinRequest { process: Some(sel) },
            )
            .await?;
        Ok(())
    }

    /// Resizes a process's PTY.
    pub async fn resize(
        &self,
        sel: ProcessSelector,
        cols: u32,
        rows: u32,
    ) -> Result<(), ClientError> {
        let _: UpdateResponse = self
            .unary(
                "/process.Process/Update",
                &UpdateRequest {
                    process: Some(sel),
                    pty: Some(Pty {
                        size: Some(PtySize { cols, rows }),
                    }),
                },
            )
            .await?;
        Ok(())
    }

    /// Kills a process by pid (SIGKILL).
    pub async fn kill(&self, pid: u32) -> Result<(), ClientError> {
        self.send_signal(sel_of(pid).expect("pid selector"), Signal::Sigkill)
            .await
    }

    pub async fn stat(&self, path: &str) -> Result<EntryInfo, ClientError> {
        let req = StatRequest { path: path.into() };
        let res: StatResponse = self.unary("/filesystem.Filesystem/Stat", &req).await?;
        entry_of(res.entry, "stat")
    }

    pub async fn list_dir(&self, path: &str, depth: u32) -> Result<Vec<EntryInfo>, ClientError> {
        let res: ListDirResponse = self
            .unary(
                "/filesystem.Filesystem/ListDir",
                &ListDirRequest {
                    path: path.into(),
                    depth,
                },
            )
            .await?;
        Ok(res.entries)
    }

    pub async fn make_dir(&self, path: &str) -> Result<EntryInfo, ClientError> {
        let req = MakeDirRequest { path: path.into() };
        let res: MakeDirResponse = self.unary("/filesystem.Filesystem/MakeDir", &req).await?;
        entry_of(res.entry, "mkdir")
    }

    pub async fn move_path(
        &self,
        source: &str,
        destination: &str,
    ) -> Result<EntryInfo, ClientError> {
        let res: MoveResponse = self
            .unary(
                "/filesystem.Filesystem/Move",
                &MoveRequest {
                    source: source.into(),
                    destination: destination.into(),
                },
            )
            .await?;
        entry_of(res.entry, "move")
    }

    pub async fn remove(&self, path: &str) -> Result<(), ClientError> {
        let _: RemoveResponse = self
            .unary(
                "/filesystem.Filesystem/Remove",
                &RemoveRequest { path: path.into() },
            )
            .await?;
        Ok(())
    }

    /// Watches a directory; events come after the watch is in place.
    pub async fn watch_dir(&self, path: &str, recursive: bool) -> Result<WatchStream, ClientError> {
        let mut inner = self
            .server_stream::<_, WatchDirResponse>(
                "/filesystem.Filesystem/WatchDir",
                &WatchDirRequest {
                    path: path.into(),
                    recursive,
                    ..Default::default()
                },
                None,
            )
            .await?;
        match inner.message().await {
            Some(Ok(WatchDirResponse {
                event: Some(watch_dir_response::Event::Start(_)),
            })) => Ok(WatchStream { inner }),
            Some(Err(e)) => Err(e),
            _ => Err(ClientError::Protocol(
                "expected the watch's start event".into(),
            )),
        }
    }

    fn files_query(path: &str) -> String {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("path", path)
            .finish();
        format!("/files?{q}")
    }

    /// Downloads a file as a stream.
    pub async fn download(&self, path: &str) -> Result<Download, ClientError> {
        let req = self
            .request(http::Method::GET, &Self::files_query(path))
            .body(body::empty())
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = self.send(req).await?;
        if resp.status() != StatusCode::OK {
            let status = resp.status().as_u16();
            let message = match Self::error_of(resp).await {
                ClientError::Rpc(e) => e.message,
                other => other.to_string(),
            };
            return Err(ClientError::Http { status, message });
        }
        Ok(Download::of(resp))
    }

    /// Uploads a file from a stream of chunks (a raw body); parents are
    /// created. An `Err` chunk aborts the upload.
    pub async fn upload(
        &self,
        path: &str,
        chunks: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    ) -> Result<Vec<WrittenEntry>, ClientError> {
        let body = BodyExt::boxed_unsync(ChannelBodyFrom(chunks));
        self.upload_body(path, body).await
    }

    /// Uploads a file from memory.
    pub async fn upload_bytes(
        &self,
        path: &str,
        data: impl Into<Bytes>,
    ) -> Result<Vec<WrittenEntry>, ClientError> {
        self.upload_body(path, body::full(data)).await
    }

    async fn upload_body(
        &self,
        path: &str,
        body: BoxBody,
    ) -> Result<Vec<WrittenEntry>, ClientError> {
        let req = self
            .request(http::Method::POST, &Self::files_query(path))
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .body(body)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = self.send(req).await?;
        let status = resp.status();
        let data = Limited::new(resp.into_body(), 1 << 20)
            .collect()
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?
            .to_bytes();
        if status != StatusCode::OK {
            let message = serde_json::from_slice::<serde_json::Value>(&data)
                .ok()
                .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&data).into_owned());
            return Err(ClientError::Http {
                status: status.as_u16(),
                message,
            });
        }
        serde_json::from_slice(&data)
            .map_err(|e| ClientError::Protocol(format!("upload answer: {e}")))
    }

    /// A volume route with its query.
    fn volume_uri(route: &str, params: &[(&str, String)]) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in params {
            q.append_pair(k, v);
        }
        format!("/volume/{route}?{}", q.finish())
    }

    /// The query parameters of a path, a flag and attributes.
    fn volume_params(
        path: &str,
        parents: bool,
        attrs: &VolumeAttrs,
    ) -> Vec<(&'static str, String)> {
        let mut params = vec![("path", path.to_owned())];
        if parents {
            params.push(("parents", "true".into()));
        }
        for (name, value) in [("uid", attrs.uid), ("gid", attrs.gid), ("mode", attrs.mode)] {
            if let Some(v) = value {
                params.push((name, v.to_string()));
            }
        }
        params
    }

    /// Sends a volume request; an error status becomes
    /// [`ClientError::Volume`] (or [`ClientError::Http`] when the answer
    /// carries no volume error code, e.g. the agent serves no volume).
    async fn volume_send(
        &self,
        method: http::Method,
        uri: &str,
        content_type: Option<&str>,
        body: BoxBody,
    ) -> Result<Response<Incoming>, ClientError> {
        let mut b = self.request(method, uri);
        if let Some(ct) = content_type {
            b = b.header(http::header::CONTENT_TYPE, ct);
        }
        let req = b
            .body(body)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let resp = self.send(req).await?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let data = Limited::new(resp.into_body(), 64 << 10)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let value = serde_json::from_slice::<serde_json::Value>(&data).ok();
        let message = value
            .as_ref()
            .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&data).into_owned());
        Err(
            match value
                .as_ref()
                .and_then(|v| v.get("code")?.as_str().map(str::to_owned))
            {
                Some(code) => ClientError::Volume {
                    status,
                    code,
                    message,
                },
                None => ClientError::Http { status, message },
            },
        )
    }

    /// A volume request answered with JSON.
    async fn volume_json<T: serde::de::DeserializeOwned>(
        &self,
        method: http::Method,
        uri: &str,
        content_type: Option<&str>,
        body: BoxBody,
    ) -> Result<T, ClientError> {
        let resp = self.volume_send(method, uri, content_type, body).await?;
        let data = Limited::new(resp.into_body(), MAX_VOLUME_ANSWER)
            .collect()
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?
            .to_bytes();
        serde_json::from_slice(&data)
            .map_err(|e| ClientError::Protocol(format!("volume answer to {uri}: {e}")))
    }

    /// `GET /volume/stat`: an entry of the volume, a symbolic link's own.
    pub async fn volume_stat(&self, path: &str) -> Result<VolumeEntry, ClientError> {
        let uri = Self::volume_uri("stat", &[("path", path.to_owned())]);
        self.volume_json(http::Method::GET, &uri, None, body::empty())
            .await
    }

    /// `GET /volume/list`: the entries beneath a directory to `depth`
    /// levels (1 to 32), never through a symbolic link.
    pub async fn volume_list(
        &self,
        path: &str,
        depth: u32,
    ) -> Result<Vec<VolumeEntry>, ClientError> {
        let uri = Self::volume_uri(
            "list",
            &[("path", path.to_owned()), ("depth", depth.to_string())],
        );
        self.volume_json(http::Method::GET, &uri, None, body::empty())
            .await
    }

    /// `POST /volume/mkdir`: creates a directory (with `parents`, its
    /// missing parents too, and an existing directory is fine).
    pub async fn volume_mkdir(
        &self,
        path: &str,
        parents: bool,
        attrs: &VolumeAttrs,
    ) -> Result<VolumeEntry, ClientError> {
        let uri = Self::volume_uri("mkdir", &Self::volume_params(path, parents, attrs));
        self.volume_json(http::Method::POST, &uri, None, body::empty())
            .await
    }

    /// `GET /volume/file`: a regular file of the volume, streamed.
    pub async fn volume_read(&self, path: &str) -> Result<Download, ClientError> {
        let uri = Self::volume_uri("file", &[("path", path.to_owned())]);
        let resp = self
            .volume_send(http::Method::GET, &uri, None, body::empty())
            .await?;
        Ok(Download::of(resp))
    }

    /// `PUT /volume/file`: writes a regular file from a stream of chunks;
    /// the file appears whole once the stream ends (an `Err` chunk aborts
    /// and leaves any earlier file as it was).
    pub async fn volume_write(
        &self,
        path: &str,
        parents: bool,
        attrs: &VolumeAttrs,
        chunks: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    ) -> Result<VolumeEntry, ClientError> {
        let uri = Self::volume_uri("file", &Self::volume_params(path, parents, attrs));
        let body = BodyExt::boxed_unsync(ChannelBodyFrom(chunks));
        self.volume_json(
            http::Method::PUT,
            &uri,
            Some("application/octet-stream"),
            body,
        )
        .await
    }

    /// `DELETE /volume/path`: removes an entry, a directory with all it
    /// holds.
    pub async fn volume_remove(&self, path: &str) -> Result<(), ClientError> {
        let uri = Self::volume_uri("path", &[("path", path.to_owned())]);
        self.volume_send(http::Method::DELETE, &uri, None, body::empty())
            .await?;
        Ok(())
    }

    /// `POST /volume/rename`: renames an entry; answers the entry at `to`.
    pub async fn volume_rename(&self, from: &str, to: &str) -> Result<VolumeEntry, ClientError> {
        let uri = Self::volume_uri(
            "rename",
            &[("from", from.to_owned()), ("to", to.to_owned())],
        );
        self.volume_json(http::Method::POST, &uri, None, body::empty())
            .await
    }

    /// `PATCH /volume/path`: changes an entry's owner and mode.
    pub async fn volume_set_attrs(
        &self,
        path: &str,
        attrs: &VolumeAttrs,
    ) -> Result<VolumeEntry, ClientError> {
        let uri = Self::volume_uri("path", &[("path", path.to_owned())]);
        let data = serde_json::to_vec(attrs).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.volume_json(
            http::Method::PATCH,
            &uri,
            Some("application/json"),
            body::full(data),
        )
        .await
    }

    /// `GET /volume/usage`: bytes allocated to the volume and its entries.
    pub async fn volume_usage(&self) -> Result<VolumeUsage, ClientError> {
        self.volume_json(http::Method::GET, "/volume/usage", None, body::empty())
            .await
    }
}

/// Largest JSON answer of a volume route (a listing of 100 000 entries
/// with long paths).
const MAX_VOLUME_ANSWER: usize = 256 << 20;

/// A request body read from a caller's channel.
struct ChannelBodyFrom(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl http_body::Body for ChannelBodyFrom {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|c| c.map(|r| r.map(http_body::Frame::data)))
    }
}

/// Opens a TCP connection to `port` inside a sandbox through its agent at
/// `agent` (`host:port`), authorised by `token`: the agent's
/// `/stockade/forward` upgrade. The answer's head is read byte by
/// byte, so nothing the sandbox sends right after it is lost.
pub async fn open_forward(
    agent: &str,
    token: &str,
    port: u16,
) -> Result<tokio::net::TcpStream, ForwardError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(agent)
        .await
        .map_err(|e| ForwardError::Failed(format!("the sandbox's agent at {agent}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let head = format!(
        "GET /stockade/forward?port={port} HTTP/1.1\r\nHost: {agent}\r\nX-Access-Token: {token}\r\n\
         Connection: Upgrade\r\nUpgrade: {}\r\n\r\n",
        crate::server::forward::PROTOCOL
    );
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| ForwardError::Failed(format!("the sandbox's agent at {agent}: {e}")))?;
    let mut answer = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() > 16 * 1024 {
            return Err(ForwardError::Failed(format!(
                "the sandbox's agent at {agent}: an answer too long"
            )));
        }
        match stream.read(&mut byte).await {
            Ok(0) => {
                return Err(ForwardError::Failed(format!(
                    "the sandbox's agent at {agent} closed the connection"
                )))
            }
            Ok(_) => answer.push(byte[0]),
            Err(e) => {
                return Err(ForwardError::Failed(format!(
                    "the sandbox's agent at {agent}: {e}"
                )))
            }
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text.split_whitespace().nth(1).unwrap_or_default();
    if status == "101" {
        return Ok(stream);
    }
    // The agent's error body, when it sent one.
    let mut body = vec![0u8; 4096];
    let n = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        stream.read(&mut body),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or(0);
    let message = format!(
        "port {port} through the sandbox's agent: {} {}",
        status,
        String::from_utf8_lossy(&body[..n]).trim()
    );
    // The agent answers 502 when nothing accepts connections on the port.
    Err(if status == "502" {
        ForwardError::NothingListening(message)
    } else {
        ForwardError::Failed(message)
    })
}

/// Why [`open_forward`] opened no connection.
#[derive(Debug)]
pub enum ForwardError {
    /// The agent answered that nothing accepts connections on the port.
    NothingListening(String),
    /// The agent could not be reached, refused the request or answered
    /// something else.
    Failed(String),
}

impl std::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardError::NothingListening(m) | ForwardError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ForwardError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            Endpoint::http("http://10.0.0.2:49983/").unwrap(),
            Endpoint::Tcp("10.0.0.2:49983".into())
        );
        assert!(Endpoint::http("https://x:1").is_err());
        assert!(Endpoint::http("http://x").is_err());
        assert!(Endpoint::http("http://x:1/path").is_err());
    }
}
