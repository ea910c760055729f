//! `GET /api/v1/sandbox/{id}/terminal`: a WebSocket carrying a PTY
//! in the sandbox. Binary frames both ways are the terminal's bytes; the
//! client sends text frames `{"type":"resize","cols":N,"rows":N}`; the server
//! ends with a text frame `{"type":"exit","exitCode":N}` and closes. Closing
//! the socket ends the terminal's process. Authenticated like every API call
//! (the bearer token, or the dashboard's session cookie from a page of
//! Stockade's own origin).
//!
//! A terminal counts against its account's open streams. A client message
//! may be at most [`MAX_MESSAGE`] bytes (more closes the socket with 1009);
//! input waits in a bounded queue, and a program that takes none of it for
//! the write-stall timeout ends the terminal (1008), so a terminal whose
//! program never reads holds neither memory nor its connection.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::RawQuery;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use stockade_api::ErrorBody;
use stockade_core::{SandboxPath, ValidationErrors};
use stockade_service::pause;
use stockade_service::terminal::{TerminalControl, TerminalEvent, TerminalSpec};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, instrument};

use crate::error::ApiResult;
use crate::extract::{query_pairs, websocket, AuthedId, Credential};
use crate::routes::apidoc::{AccessErrors, BadRequest};
use crate::AppState;
use stockade_service::ServiceError;

/// The routes of this module (relative to `/api/v1`).
pub fn routes() -> Router<AppState> {
    Router::new().route("/sandbox/{id}/terminal", get(terminal))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(terminal))]
pub struct TerminalApi;

/// The longest command line `?cmd=` takes.
const MAX_COMMAND: usize = 16 * 1024;

/// A control message of the client.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Control {
    Resize { cols: u16, rows: u16 },
}

fn parse_query(raw: Option<&str>) -> ApiResult<TerminalSpec> {
    let mut spec = TerminalSpec {
        command: None,
        cwd: None,
        cols: 80,
        rows: 24,
    };
    let mut errs = ValidationErrors::default();
    let dim = |v: &str, field: &str, errs: &mut ValidationErrors| match v.parse::<u16>() {
        Ok(n) if (1..=1000).contains(&n) => Some(n),
        _ => {
            errs.push(
                field,
                format!("must be a whole number from 1 to 1000, got '{v}'"),
            );
            None
        }
    };
    for (k, v) in query_pairs(raw) {
        match k.as_str() {
            "cols" => spec.cols = dim(&v, "cols", &mut errs).unwrap_or(spec.cols),
            "rows" => spec.rows = dim(&v, "rows", &mut errs).unwrap_or(spec.rows),
            "cmd" => {
                if v.is_empty() || v.len() > MAX_COMMAND || v.contains('\0') {
                    errs.push(
                        "cmd",
                        format!("must be 1 to {MAX_COMMAND} bytes without NUL"),
                    );
                } else {
                    spec.command = Some(v);
                }
            }
            "cwd" => {
                if let Some(p) = errs.check(SandboxPath::parse_field(&v, "cwd")) {
                    spec.cwd = Some(p);
                }
            }
            other => errs.push(other, "unknown query parameter"),
        }
    }
    errs.into_result()?;
    Ok(spec)
}

/// Whether a browser request came from a page of this very server (a
/// WebSocket is not bound by CORS: a page elsewhere may try to open one).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get("origin").and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some(host) = headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    origin
        .split_once("://")
        .is_some_and(|(_, rest)| rest.trim_end_matches('/') == host)
}

/// Open a terminal: a WebSocket carrying a PTY in the sandbox. Query:
/// `cols`, `rows` (default 80×24), `cmd` (a shell command line; default a
/// login shell, bash where the image has it), `cwd` (default `/workspace`).
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/terminal", tag = "exec",
    params(("id" = String, Path, description = "sandbox id"),
           ("cols" = Option<u16>, Query, description = "columns, 1-1000 (default 80)"),
           ("rows" = Option<u16>, Query, description = "rows, 1-1000 (default 24)"),
           ("cmd" = Option<String>, Query, description = "a shell command line instead of a login shell"),
           ("cwd" = Option<String>, Query, description = "working directory (default /workspace)")),
    responses(
        (status = 101, description = "Switched to the WebSocket: binary frames are the terminal's bytes; text frames `{\"type\":\"resize\",\"cols\":N,\"rows\":N}` from the client and `{\"type\":\"exit\",\"exitCode\":N}` from the server"),
        BadRequest, AccessErrors,
        (status = 409, description = "The sandbox is not running, or has no agent", body = ErrorBody),
        (status = 429, description = "The account holds as many terminals, event streams and proxied WebSockets as it may", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn terminal(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    if caller.credential == Credential::SessionCookie && !same_origin(&headers) {
        return Err(ServiceError::Forbidden(
            "A terminal opened with the dashboard's session must come from the dashboard's own page"
                .into(),
        ).into());
    }
    let spec = parse_query(raw.as_deref())?;
    let sb = pause::load_awake(&state.svc, &caller.scope, &id).await?;
    // Only after the ownership check, so that a stranger learns nothing
    // more from a request that is no handshake.
    let upgrade = websocket(upgrade)?;
    // Counted against the account for as long as the terminal lives.
    let permit = state.streams.acquire(&caller.account.id)?;
    // Started before the upgrade, so that a refusal is a proper HTTP error.
    let terminal = state.svc.open_terminal(&sb, spec).await?;
    let shutdown = state.svc.shutdown().clone();
    let input_timeout = state.config.connections.write_stall_timeout;
    Ok(upgrade
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| async move {
            serve(socket, terminal, shutdown, input_timeout).await;
            drop(permit);
        }))
}

/// The largest WebSocket message a client may send (a paste, typically);
/// a larger one closes the terminal with 1009 (message too big).
pub const MAX_MESSAGE: usize = 1 << 20;
/// The most input bytes waiting to go to the terminal's program. While
/// they are all waiting the socket is not read, so a client typing faster
/// than the program reads is held back by TCP, not by memory.
const MAX_QUEUED_INPUT: usize = 1 << 20;
/// Input goes to the agent in pieces of at most this much, each of which
/// the program must take within the input timeout.
const INPUT_CHUNK: usize = 64 << 10;
/// After the client has gone, how long input it sent before may still
/// reach the program before the terminal is ended.
const INPUT_FLUSH: Duration = Duration::from_secs(1);
/// How long ending the terminal's process may take.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the client asked of the terminal.
enum Input {
    Bytes(Bytes),
    Resize(u16, u16),
}

impl Input {
    fn of(msg: Message) -> Option<Self> {
        match msg {
            Message::Binary(bytes) => Some(Self::Bytes(bytes)),
            Message::Text(text) => match serde_json::from_str::<Control>(&text) {
                Ok(Control::Resize { cols, rows }) if cols > 0 && rows > 0 => {
                    Some(Self::Resize(cols, rows))
                }
                // Anything else typed as text is input too.
                _ => Some(Self::Bytes(Bytes::from(text.as_str().to_owned()))),
            },
            _ => None,
        }
    }

    /// What it holds of the input queue (a resize holds a token byte).
    fn cost(&self) -> u32 {
        let n = match self {
            Self::Bytes(b) => b.len(),
            Self::Resize(..) => 1,
        };
        u32::try_from(n.clamp(1, MAX_QUEUED_INPUT)).unwrap_or(u32::MAX)
    }
}

/// Why a terminal ended.
enum End {
    /// Its process exited (the exit frame was sent).
    Exited,
    /// The client closed, the socket failed or the server is stopping.
    Closed,
    /// The client sent a message over [`MAX_MESSAGE`].
    TooBig,
    /// The program did not take its input within the timeout.
    InputStuck,
    /// The agent's stream failed or ended.
    Failed,
}

/// Pumps the terminal both ways until either side ends. Input waits in a
/// queue of at most [`MAX_QUEUED_INPUT`] bytes, written to the agent by a
/// task of its own; when the program does not take it within
/// `input_timeout` the terminal ends, and when the client goes the writer
/// is aborted after a short flush — nothing keeps the socket (and its
/// connection slot) or the queued bytes once the terminal is over.
async fn serve(
    mut socket: WebSocket,
    mut terminal: stockade_service::terminal::Terminal,
    shutdown: tokio_util::sync::CancellationToken,
    input_timeout: Duration,
) {
    let control = terminal.control();
    let room = Arc::new(Semaphore::new(MAX_QUEUED_INPUT));
    // Unbounded in messages, bounded in bytes by `room`.
    let (input_tx, input_rx) = mpsc::unbounded_channel::<(Input, OwnedSemaphorePermit)>();
    let mut writer = tokio::spawn(forward_input(control.clone(), input_rx, input_timeout));
    let mut writer_done = false;
    // A message waiting for room in the queue; the socket is not read meanwhile.
    let mut waiting: Option<Input> = None;
    let end = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break End::Closed,
            done = &mut writer => {
                writer_done = true;
                break match done {
                    Ok(Err(InputStuck)) => End::InputStuck,
                    _ => End::Failed,
                };
            }
            permit = room.clone().acquire_many_owned(waiting.as_ref().map_or(1, Input::cost)),
                if waiting.is_some() =>
            {
                let (Ok(permit), Some(input)) = (permit, waiting.take()) else {
                    break End::Failed;
                };
                if input_tx.send((input, permit)).is_err() {
                    break End::Failed;
                }
            }
            incoming = socket.recv(), if waiting.is_none() => match incoming {
                Some(Ok(msg)) => {
                    if matches!(msg, Message::Close(_)) {
                        break End::Closed;
                    }
                    let Some(input) = Input::of(msg) else { continue };
                    match room.clone().try_acquire_many_owned(input.cost()) {
                        Ok(permit) => {
                            if input_tx.send((input, permit)).is_err() {
                                break End::Failed;
                            }
                        }
                        Err(_) => waiting = Some(input),
                    }
                }
                Some(Err(e)) => {
                    debug!(error = %e, "terminal socket failed");
                    // tungstenite refuses a message over its limit with
                    // "Message too long: N > MAX".
                    break if e.to_string().contains("too long") {
                        End::TooBig
                    } else {
                        End::Closed
                    };
                }
                None => break End::Closed,
            },
            event = terminal.next() => match event {
                Some(Ok(TerminalEvent::Output(bytes))) => {
                    if socket.send(Message::Binary(bytes)).await.is_err() {
                        break End::Closed;
                    }
                }
                Some(Ok(TerminalEvent::Exit(code))) => {
                    let text = serde_json::json!({ "type": "exit", "exitCode": code }).to_string();
                    let _ = socket.send(Message::Text(text.into())).await;
                    break End::Exited;
                }
                Some(Err(e)) => {
                    debug!(error = %e, "terminal stream failed");
                    break End::Failed;
                }
                None => break End::Failed,
            },
        }
    };
    let close = match end {
        End::TooBig => Some(CloseFrame {
            code: close_code::SIZE,
            reason: format!("a message may be at most {MAX_MESSAGE} bytes").into(),
        }),
        End::InputStuck => Some(CloseFrame {
            code: close_code::POLICY,
            reason: format!(
                "the terminal's program did not read its input for {} s",
                input_timeout.as_secs()
            )
            .into(),
        }),
        _ => None,
    };
    // The socket goes first: it holds a connection slot. Sending the close
    // frame is itself bounded by the write-stall timeout.
    let _ = socket.send(Message::Close(close)).await;
    drop(socket);
    drop(input_tx);
    if !writer_done
        && tokio::time::timeout(INPUT_FLUSH, &mut writer)
            .await
            .is_err()
    {
        writer.abort();
    }
    if !matches!(end, End::Exited) {
        let _ = tokio::time::timeout(KILL_TIMEOUT, control.kill()).await;
    }
}

/// The program did not take its input in time.
struct InputStuck;

/// Writes the queued input to the agent, in order, each piece within
/// `timeout`; a queue slot is given back once its input is written.
async fn forward_input(
    control: TerminalControl,
    mut rx: mpsc::UnboundedReceiver<(Input, OwnedSemaphorePermit)>,
    timeout: Duration,
) -> Result<(), InputStuck> {
    while let Some((input, _permit)) = rx.recv().await {
        match input {
            Input::Bytes(bytes) => {
                let mut rest = bytes;
                while !rest.is_empty() {
                    let piece = rest.split_to(rest.len().min(INPUT_CHUNK));
                    match tokio::time::timeout(timeout, control.input(piece)).await {
                        Err(_) => return Err(InputStuck),
                        Ok(Err(e)) => debug!(error = %e, "terminal input failed"),
                        Ok(Ok(())) => {}
                    }
                }
            }
            Input::Resize(cols, rows) => {
                match tokio::time::timeout(timeout, control.resize(cols, rows)).await {
                    Err(_) => return Err(InputStuck),
                    Ok(Err(e)) => debug!(error = %e, "terminal resize failed"),
                    Ok(Ok(())) => {}
                }
            }
        }
    }
    Ok(())
}
