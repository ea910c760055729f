//! `process.Process`: Start, Connect, List, SendInput, StreamInput,
//! SendSignal, CloseStdin and Update over the process table.

use super::rpc::{self, MsgStream, Sink};
use super::{AgentState, Call, Rpc};
use crate::body::BoxBody;
use crate::connect::{Code, ConnectError};
use crate::fsops;
use crate::procs::{end_event, Event, Selector, SpawnSpec};
use crate::proto::process::*;
use hyper::Response;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub async fn route(r: Rpc<'_>) -> Response<BoxBody> {
    match r.method {
        "Start" => rpc::server_stream(r.req, move |m, sink| start(r.state, r.call, m, sink)).await,
        "Connect" => {
            rpc::server_stream(r.req, move |m, sink| connect(r.state, r.call, m, sink)).await
        }
        "List" => {
            rpc::unary(r.req, |_: ListRequest| async {
                Ok(ListResponse {
                    processes: r.state.procs.list(),
                })
            })
            .await
        }
        "SendInput" => rpc::unary(r.req, |m| send_input(&r.state, m)).await,
        "StreamInput" => rpc::client_stream(r.req, |s| stream_input(&r.state, s)).await,
        "SendSignal" => rpc::unary(r.req, |m| send_signal(&r.state, m)).await,
        "CloseStdin" => rpc::unary(r.req, |m| close_stdin(&r.state, m)).await,
        "Update" => rpc::unary(r.req, |m| update(&r.state, m)).await,
        _ => rpc::error_response(&ConnectError::new(
            Code::Unimplemented,
            format!("process.Process/{} is not implemented", r.method),
        )),
    }
}

pub(super) fn selector(sel: Option<ProcessSelector>) -> Result<Selector, ConnectError> {
    match sel.and_then(|s| s.selector) {
        Some(process_selector::Selector::Pid(pid)) => Ok(Selector::Pid(pid)),
        Some(process_selector::Selector::Tag(tag)) => Ok(Selector::Tag(tag)),
        None => Err(ConnectError::invalid("process: a pid or a tag is required")),
    }
}

/// The process a request's selector names.
fn selected(
    state: &AgentState,
    sel: Option<ProcessSelector>,
) -> Result<Arc<crate::procs::Process>, ConnectError> {
    state.procs.get(&selector(sel)?)
}

pub(super) fn event<R: From<ProcessEvent>>(e: process_event::Event) -> R {
    R::from(ProcessEvent { event: Some(e) })
}

impl From<ProcessEvent> for StartResponse {
    fn from(e: ProcessEvent) -> Self {
        Self { event: Some(e) }
    }
}

impl From<ProcessEvent> for ConnectResponse {
    fn from(e: ProcessEvent) -> Self {
        Self { event: Some(e) }
    }
}

fn check_text(field: &str, value: &str) -> Result<(), ConnectError> {
    if value.contains('\0') {
        return Err(ConnectError::invalid(format!(
            "{field} contains a NUL byte"
        )));
    }
    Ok(())
}

fn spawn_spec(
    state: &AgentState,
    call: &Call,
    req: &StartRequest,
) -> Result<SpawnSpec, ConnectError> {
    let config = req
        .process
        .as_ref()
        .ok_or_else(|| ConnectError::invalid("process is required"))?;
    if config.cmd.is_empty() {
        return Err(ConnectError::invalid("process.cmd is required"));
    }
    check_text("process.cmd", &config.cmd)?;
    for a in &config.args {
        check_text("process.args", a)?;
    }
    for (k, v) in &config.envs {
        if k.is_empty() || k.contains('=') {
            return Err(ConnectError::invalid(format!(
                "process.envs: invalid variable name {k:?}"
            )));
        }
        check_text("process.envs", k)?;
        check_text("process.envs", v)?;
    }
    let cwd = fsops::resolve(
        config.cwd.as_deref().unwrap_or(""),
        &call.user,
        call.workdir.as_deref(),
    )?;
    if !cwd.is_dir() {
        return Err(crate::procs::cwd_missing(&cwd));
    }
    let pty = match &req.pty {
        None => None,
        Some(p) => {
            let size = p.size.unwrap_or_default();
            let dim = |v: u32, field: &str, default: u16| -> Result<u16, ConnectError> {
                match v {
                    0 => Ok(default),
                    v => u16::try_from(v).map_err(|_| {
                        ConnectError::invalid(format!("pty.size.{field} is too large"))
                    }),
                }
            };
            Some((dim(size.rows, "rows", 24)?, dim(size.cols, "cols", 80)?))
        }
    };
    if let Some(tag) = &req.tag {
        check_text("tag", tag)?;
    }
    Ok(SpawnSpec {
        cmd: config.cmd.clone(),
        args: config.args.clone(),
        env: state.process_env(&call.user, &config.envs),
        cwd,
        ids: state.ids_for(&call.user),
        pty,
        stdin: req.stdin.unwrap_or(true),
    })
}

/// Forwards a process's events to a stream until its end event, sending
/// keepalives while it is quiet. The process outlives the stream.
pub(super) async fn forward<R: crate::proto::Msg + From<ProcessEvent>>(
    mut rx: mpsc::Receiver<Event>,
    sink: &Sink<R>,
    keepalive: Duration,
) -> Result<(), ConnectError> {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(Event::Data(out)) => {
                    sink.send(&event(process_event::Event::Data(process_event::DataEvent { output: Some(out) }))).await?;
                    ticker.reset();
                }
                Some(Event::End(status)) => {
                    sink.send(&event(process_event::Event::End(end_event(status)))).await?;
                    return Ok(());
                }
                None => return Err(ConnectError::internal("the process's event stream closed")),
            },
            _ = ticker.tick() => {
                sink.send(&event(process_event::Event::Keepalive(process_event::KeepAlive {}))).await?;
            }
            _ = sink.closed() => return Ok(()),
        }
    }
}

pub(super) async fn start(
    state: Arc<AgentState>,
    call: Call,
    req: StartRequest,
    sink: Sink<StartResponse>,
) -> Result<(), ConnectError> {
    let spec = spawn_spec(&state, &call, &req)?;
    let (process, rx) = state.procs.spawn(
        &spec,
        req.process.clone().unwrap_or_default(),
        req.tag.clone(),
    )?;
    if let Some(timeout) = call.timeout {
        // envd's deadline: the process is killed when the call's time is up.
        let procs = state.procs.clone();
        let p = process.clone();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if procs.is_running(&p) {
                let _ = p.signal(rustix::process::Signal::KILL);
            }
        });
    }
    sink.send(&event(process_event::Event::Start(
        process_event::StartEvent { pid: process.pid },
    )))
    .await?;
    forward(rx, &sink, call.keepalive).await
}

pub(super) async fn connect(
    state: Arc<AgentState>,
    call: Call,
    req: ConnectRequest,
    sink: Sink<ConnectResponse>,
) -> Result<(), ConnectError> {
    let sel = selector(req.process)?;
    let (process, rx) = state.procs.subscribe(&sel)?;
    sink.send(&event(process_event::Event::Start(
        process_event::StartEvent { pid: process.pid },
    )))
    .await?;
    match call.timeout {
        None => forward(rx, &sink, call.keepalive).await,
        Some(t) => tokio::time::timeout(t, forward(rx, &sink, call.keepalive))
            .await
            .unwrap_or_else(|_| {
                Err(ConnectError::new(
                    Code::DeadlineExceeded,
                    "the call's deadline passed",
                ))
            }),
    }
}

pub(super) async fn write_input(
    state: &AgentState,
    sel: &Selector,
    input: Option<ProcessInput>,
) -> Result<(), ConnectError> {
    let process = state.procs.get(sel)?;
    match input.and_then(|i| i.input) {
        Some(process_input::Input::Stdin(data)) => process.write_stdin(&data).await,
        Some(process_input::Input::Pty(data)) => process.write_pty(&data).await,
        None => Err(ConnectError::invalid(
            "input: stdin or pty data is required",
        )),
    }
}

async fn send_input(
    state: &AgentState,
    req: SendInputRequest,
) -> Result<SendInputResponse, ConnectError> {
    let sel = selector(req.process)?;
    write_input(state, &sel, req.input).await?;
    Ok(SendInputResponse {})
}

async fn stream_input(
    state: &AgentState,
    stream: MsgStream<StreamInputRequest>,
) -> Result<StreamInputResponse, ConnectError> {
    write_input_stream(state, stream, Ok).await
}

/// StreamInput: the first event names the process, the data events after it
/// are written to its input. `read` takes another service's message as the
/// same events.
pub(super) async fn write_input_stream<Req: crate::proto::Msg>(
    state: &AgentState,
    mut stream: MsgStream<Req>,
    read: impl Fn(Req) -> Result<StreamInputRequest, ConnectError>,
) -> Result<StreamInputResponse, ConnectError> {
    let mut sel: Option<Selector> = None;
    while let Some(msg) = stream.next().await {
        match read(msg?)?.event {
            Some(stream_input_request::Event::Start(s)) => {
                let chosen = selector(s.process)?;
                state.procs.get(&chosen)?;
                sel = Some(chosen);
            }
            Some(stream_input_request::Event::Data(d)) => {
                let Some(sel) = &sel else {
                    return Err(ConnectError::invalid(
                        "the first message of StreamInput must be a start event",
                    ));
                };
                write_input(state, sel, d.input).await?;
            }
            Some(stream_input_request::Event::Keepalive(_)) | None => {}
        }
    }
    Ok(StreamInputResponse {})
}

pub(super) async fn send_signal(
    state: &AgentState,
    req: SendSignalRequest,
) -> Result<SendSignalResponse, ConnectError> {
    let sel = selector(req.process)?;
    let sig = match req.signal {
        15 => rustix::process::Signal::TERM,
        9 => rustix::process::Signal::KILL,
        other => {
            return Err(ConnectError::invalid(format!(
                "signal: unsupported value {other} (use SIGNAL_SIGTERM or SIGNAL_SIGKILL)"
            )))
        }
    };
    state.procs.get(&sel)?.signal(sig)?;
    Ok(SendSignalResponse {})
}

async fn close_stdin(
    state: &AgentState,
    req: CloseStdinRequest,
) -> Result<CloseStdinResponse, ConnectError> {
    selected(state, req.process)?.close_stdin().await?;
    Ok(CloseStdinResponse {})
}

pub(super) async fn update(
    state: &AgentState,
    req: UpdateRequest,
) -> Result<UpdateResponse, ConnectError> {
    let process = selected(state, req.process)?;
    if let Some(pty) = req.pty {
        let size = pty
            .size
            .ok_or_else(|| ConnectError::invalid("pty.size is required"))?;
        let rows = u16::try_from(size.rows)
            .ok()
            .filter(|r| *r > 0)
            .ok_or_else(|| ConnectError::invalid("pty.size.rows must be 1..65535"))?;
        let cols = u16::try_from(size.cols)
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| ConnectError::invalid("pty.size.cols must be 1..65535"))?;
        process.resize(rows, cols)?;
    }
    Ok(UpdateResponse {})
}
