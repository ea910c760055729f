//! `GET /api/v1/sandbox/{id}/terminal` (AGT-4): a WebSocket carrying a PTY
//! in the sandbox. Binary frames both ways are the terminal's bytes; the
//! client sends text frames `{"type":"resize","cols":N,"rows":N}`; the server
//! ends with a text frame `{"type":"exit","exitCode":N}` and closes. Closing
//! the socket ends the terminal's process. Authenticated like every API call
//! (the bearer token, or the dashboard's session cookie from a page of
//! Stockade's own origin).

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use stockade_api::ErrorBody;
use stockade_core::{SandboxPath, ValidationErrors};
use stockade_service::lifecycle;
use stockade_service::terminal::{TerminalControl, TerminalEvent, TerminalSpec};
use tracing::{debug, instrument};

use crate::error::{ApiError, ApiResult};
use crate::extract::{query_pairs, Caller, Credential};
use crate::AppState;

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
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "The sandbox is not running, or has no agent", body = ErrorBody),
    ),
    security(("bearer" = [])))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn terminal(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> ApiResult<Response> {
    if caller.credential == Credential::SessionCookie && !same_origin(&headers) {
        return Err(ApiError::Forbidden(
            "A terminal opened with the dashboard's session must come from the dashboard's own page"
                .into(),
        ));
    }
    let spec = parse_query(raw.as_deref())?;
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    // Started before the upgrade, so that a refusal is a proper HTTP error.
    let terminal = state.svc.open_terminal(&sb, spec).await?;
    let shutdown = state.svc.shutdown.clone();
    Ok(upgrade.on_upgrade(move |socket| async move {
        serve(socket, terminal, shutdown).await;
    }))
}

/// Pumps the terminal both ways until either side ends.
async fn serve(
    mut socket: WebSocket,
    mut terminal: stockade_service::terminal::Terminal,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let control = terminal.control();
    // Input goes to the agent in order, one frame after another.
    let (input_tx, input_rx) = tokio::sync::mpsc::channel::<Message>(64);
    let writer = tokio::spawn(forward_input(control.clone(), input_rx));
    let mut exited = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            incoming = socket.recv() => match incoming {
                Some(Ok(msg @ (Message::Binary(_) | Message::Text(_)))) => {
                    if input_tx.send(msg).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
            event = terminal.next() => match event {
                Some(Ok(TerminalEvent::Output(bytes))) => {
                    if socket.send(Message::Binary(bytes)).await.is_err() {
                        break;
                    }
                }
                Some(Ok(TerminalEvent::Exit(code))) => {
                    exited = true;
                    let text = serde_json::json!({ "type": "exit", "exitCode": code }).to_string();
                    let _ = socket.send(Message::Text(text.into())).await;
                    break;
                }
                Some(Err(e)) => {
                    debug!(error = %e, "terminal stream failed");
                    break;
                }
                None => break,
            },
        }
    }
    drop(input_tx);
    let _ = writer.await;
    if !exited {
        control.kill().await;
    }
    let _ = socket.send(Message::Close(None)).await;
}

async fn forward_input(control: TerminalControl, mut rx: tokio::sync::mpsc::Receiver<Message>) {
    while let Some(msg) = rx.recv().await {
        let result = match msg {
            Message::Binary(bytes) => control.input(bytes).await,
            Message::Text(text) => match serde_json::from_str::<Control>(&text) {
                Ok(Control::Resize { cols, rows }) if cols > 0 && rows > 0 => {
                    control.resize(cols, rows).await
                }
                // Anything else typed as text is input too.
                _ => {
                    control
                        .input(bytes::Bytes::from(text.as_str().to_owned()))
                        .await
                }
            },
            _ => Ok(()),
        };
        if let Err(e) = result {
            debug!(error = %e, "terminal input failed");
        }
    }
}
