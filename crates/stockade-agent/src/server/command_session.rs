//! `command_session.CommandSession` (what `prime-sandboxes` speaks through
//! its gateway): Start, Connect, List, SendInput, StreamInput,
//! SendSignal and Update over the same process table as `process.Process`.
//! A session uuid is a process tag; a Start naming a running session
//! attaches to it (its command must be the same); a command may name the
//! user it runs as.

use super::process as proc_rpc;
use super::rpc::{self, MsgStream, Sink};
use super::{AgentState, Call, Rpc};
use crate::body::BoxBody;
use crate::connect::{Code, ConnectError};
use crate::procs::Selector;
use crate::proto::command_session::*;
use crate::proto::process::{self, process_event, ProcessConfig};
use hyper::Response;
use std::sync::Arc;

pub async fn route(r: Rpc<'_>) -> Response<BoxBody> {
    match r.method {
        "Start" => rpc::server_stream(r.req, move |m, sink| start(r.state, r.call, m, sink)).await,
        "Connect" => {
            rpc::server_stream(r.req, move |m, sink| connect(r.state, r.call, m, sink)).await
        }
        "List" => {
            rpc::unary(r.req, |_: ListRequest| async {
                Ok(ListResponse {
                    sessions: list(&r.state),
                })
            })
            .await
        }
        "SendInput" => rpc::unary(r.req, |m| send_input(&r.state, m)).await,
        "StreamInput" => rpc::client_stream(r.req, |s| stream_input(&r.state, s)).await,
        "SendSignal" => rpc::unary(r.req, |m| send_signal(&r.state, m)).await,
        "Update" => rpc::unary(r.req, |m| update(&r.state, m)).await,
        _ => rpc::error_response(&ConnectError::new(
            Code::Unimplemented,
            format!(
                "command_session.CommandSession/{} is not implemented",
                r.method
            ),
        )),
    }
}

fn selector(sel: Option<CommandSessionSelector>) -> Result<Selector, ConnectError> {
    match sel.and_then(|s| s.selector) {
        Some(command_session_selector::Selector::Pid(pid)) => Ok(Selector::Pid(pid)),
        Some(command_session_selector::Selector::SessionUuid(u)) if !u.is_empty() => {
            Ok(Selector::Tag(u))
        }
        _ => Err(ConnectError::invalid(
            "session: a pid or a session_uuid is required",
        )),
    }
}

fn process_selector(sel: Selector) -> process::ProcessSelector {
    match sel {
        Selector::Pid(pid) => process::ProcessSelector::pid(pid),
        Selector::Tag(tag) => process::ProcessSelector::tag(tag),
    }
}

/// A session selector as process.Process's selector of the same process.
fn envd_selector(
    sel: Option<CommandSessionSelector>,
) -> Result<Option<process::ProcessSelector>, ConnectError> {
    Ok(Some(process_selector(selector(sel)?)))
}

fn config_of(spec: &CommandSpec) -> ProcessConfig {
    ProcessConfig {
        cmd: spec.cmd.clone(),
        args: spec.args.clone(),
        envs: spec.envs.clone(),
        cwd: spec.cwd.clone(),
    }
}

async fn start(
    state: Arc<AgentState>,
    mut call: Call,
    req: StartRequest,
    sink: Sink<process::StartResponse>,
) -> Result<(), ConnectError> {
    let spec = req
        .command
        .as_ref()
        .ok_or_else(|| ConnectError::invalid("command is required"))?;
    if let Some(user) = &spec.user {
        if user.is_empty() {
            return Err(ConnectError::invalid(
                "command.user must be a user of the sandbox (or left out)",
            ));
        }
        call.user = state.resolve_user(Some(user))?;
    }
    let config = config_of(spec);
    if let Some(uuid) = req.session_uuid.as_deref().filter(|u| !u.is_empty()) {
        let sel = Selector::Tag(uuid.to_owned());
        if let Ok(running) = state.procs.get(&sel) {
            if running.config != config {
                return Err(ConnectError::new(
                    Code::FailedPrecondition,
                    format!("session {uuid} runs another command; use a new session_uuid"),
                ));
            }
            let (process, rx) = state.procs.subscribe(&sel)?;
            sink.send(&proc_rpc::event(process_event::Event::Start(
                process_event::StartEvent { pid: process.pid },
            )))
            .await?;
            return proc_rpc::forward(rx, &sink, call.keepalive).await;
        }
    }
    let preq = process::StartRequest {
        process: Some(config),
        pty: req.pty,
        tag: req.session_uuid.filter(|u| !u.is_empty()),
        stdin: req.stdin,
    };
    proc_rpc::start(state, call, preq, sink).await
}

async fn connect(
    state: Arc<AgentState>,
    call: Call,
    req: ConnectRequest,
    sink: Sink<process::ConnectResponse>,
) -> Result<(), ConnectError> {
    let sel = selector(req.session)?;
    let preq = process::ConnectRequest {
        process: Some(process_selector(sel)),
    };
    proc_rpc::connect(state, call, preq, sink).await
}

fn list(state: &AgentState) -> Vec<CommandSessionInfo> {
    state
        .procs
        .list()
        .into_iter()
        .map(|p| {
            let c = p.config.unwrap_or_default();
            CommandSessionInfo {
                command: Some(CommandSpec {
                    cmd: c.cmd,
                    args: c.args,
                    envs: c.envs,
                    cwd: c.cwd,
                    user: None,
                }),
                pid: p.pid,
                session_uuid: p.tag,
            }
        })
        .collect()
}

async fn send_input(
    state: &AgentState,
    req: SendInputRequest,
) -> Result<SendInputResponse, ConnectError> {
    let sel = selector(req.session)?;
    if let Some(id) = req.input_uuid.as_deref().filter(|u| !u.is_empty()) {
        if !state.first_delivery(id) {
            return Ok(SendInputResponse {});
        }
    }
    proc_rpc::write_input(state, &sel, req.input).await?;
    Ok(SendInputResponse {})
}

async fn stream_input(
    state: &AgentState,
    stream: MsgStream<StreamInputRequest>,
) -> Result<StreamInputResponse, ConnectError> {
    use process::stream_input_request as envd;
    // The same events as process.Process's, with a session selector.
    proc_rpc::write_input_stream(state, stream, |msg| {
        let event = match msg.event {
            Some(stream_input_request::Event::Start(s)) => {
                Some(envd::Event::Start(envd::StartEvent {
                    process: envd_selector(s.session)?,
                }))
            }
            Some(stream_input_request::Event::Data(d)) => {
                Some(envd::Event::Data(envd::DataEvent { input: d.input }))
            }
            Some(stream_input_request::Event::Keepalive(k)) => Some(envd::Event::Keepalive(k)),
            None => None,
        };
        Ok(process::StreamInputRequest { event })
    })
    .await
}

async fn send_signal(
    state: &AgentState,
    req: SendSignalRequest,
) -> Result<SendSignalResponse, ConnectError> {
    let envd = process::SendSignalRequest {
        process: envd_selector(req.session)?,
        signal: req.signal,
    };
    proc_rpc::send_signal(state, envd).await
}

async fn update(state: &AgentState, req: UpdateRequest) -> Result<UpdateResponse, ConnectError> {
    let envd = process::UpdateRequest {
        process: envd_selector(req.session)?,
        pty: req.pty,
    };
    proc_rpc::update(state, envd).await
}
