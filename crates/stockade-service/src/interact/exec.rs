//! Commands in a sandbox: through the sandbox's agent when it
//! has one — a millisecond round trip instead of Docker's exec — and through
//! `docker exec` otherwise (sandboxes made before agents existed). Both give
//! the same results: exit codes as a shell reports them (128 + signal for a
//! killed process), `None` for a timeout, output capped per stream.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use stockade_agent::client::{
    AgentClient, ClientError, ProcessOutput, ProcessStream, StartRefused,
};
use stockade_agent::connect::Code;
use stockade_agent::proto::process::{
    process_input, ProcessConfig, ProcessSelector, Signal, StartRequest,
};
use stockade_core::Sandbox;
use stockade_runtime::{
    ExecEvent, ExecExit, ExecOutput, ExecProcess, ExecSpec, DEFAULT_MAX_OUTPUT_BYTES,
};
use tokio::sync::mpsc;

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// The exec ids of processes started through an agent: `agent:{pid}`.
const AGENT_EXEC_PREFIX: &str = "agent:";

/// Events buffered between an agent's stream and the caller.
const CHANNEL: usize = 64;

impl Service {
    /// Runs a command in the running sandbox `sb` and collects its output.
    pub async fn exec(&self, sb: &Sandbox, spec: ExecSpec) -> ServiceResult<ExecOutput> {
        let spec = in_workdir(sb, spec);
        match self.agent(sb).await? {
            Some(agent) => run_buffered(&agent, spec).await,
            None => Ok(self.runtime_for(sb).await?.exec(&sb.id, spec).await?),
        }
    }

    /// Starts a command in the running sandbox `sb`; its output streams as it
    /// comes. Dropping the returned process before its exit kills it.
    pub async fn exec_start(&self, sb: &Sandbox, spec: ExecSpec) -> ServiceResult<ExecProcess> {
        self.exec_start_tagged(sb, spec, None).await
    }

    /// [`Service::exec_start`] with a tag the sandbox's agent keeps on the
    /// process (a background process's id), so that it can be found again.
    pub async fn exec_start_tagged(
        &self,
        sb: &Sandbox,
        spec: ExecSpec,
        tag: Option<String>,
    ) -> ServiceResult<ExecProcess> {
        let spec = in_workdir(sb, spec);
        match self.agent(sb).await? {
            Some(agent) => start_streamed(agent, spec, tag).await,
            None => Ok(self.runtime_for(sb).await?.exec_start(&sb.id, spec).await?),
        }
    }

    /// [`Service::exec`] as `user` of the sandbox, through its agent.
    pub async fn exec_as(
        &self,
        sb: &Sandbox,
        spec: ExecSpec,
        user: &str,
    ) -> ServiceResult<ExecOutput> {
        let spec = in_workdir(sb, spec);
        let Some(agent) = self.agent(sb).await? else {
            return Err(ServiceError::Conflict(format!(
                "Sandbox {} has no agent to run commands as another user",
                sb.id
            )));
        };
        run_buffered(&agent.with_user(user), spec).await
    }

    /// [`Service::exec_start`] as `user` of the sandbox (its agent's
    /// default user when `None`). Needs the sandbox's agent.
    pub async fn exec_start_as(
        &self,
        sb: &Sandbox,
        spec: ExecSpec,
        user: Option<&str>,
    ) -> ServiceResult<ExecProcess> {
        let spec = in_workdir(sb, spec);
        let Some(agent) = self.agent(sb).await? else {
            return Err(ServiceError::Conflict(format!(
                "Sandbox {} has no agent to run commands as another user",
                sb.id
            )));
        };
        let agent = match user {
            Some(u) => agent.with_user(u),
            None => agent,
        };
        start_streamed(agent, spec, None).await
    }

    /// Adopts the background processes that run in `sb`'s agent but that
    /// this server does not watch (started by another instance, or
    /// before this one restarted): re-attaches to each and captures its
    /// output and exit from now on.
    pub async fn adopt_processes(&self, sb: &Sandbox) -> ServiceResult<()> {
        let Some(agent) = self.agent(sb).await? else {
            return Ok(());
        };
        let running = agent.list().await.map_err(agent_error)?;
        for info in running {
            let Some(tag) = info.tag.as_deref() else {
                continue;
            };
            let Some(id) = crate::interact::processes::id_of_agent_tag(tag) else {
                continue;
            };
            if self.processes.knows(&sb.id, id) {
                continue;
            }
            let stream = match agent.connect(ProcessSelector::tag(tag)).await {
                Ok(s) => s,
                // It ended in between.
                Err(e) if e.code() == Some(Code::NotFound) => continue,
                Err(e) => return Err(agent_error(e)),
            };
            let command: Vec<String> = info
                .config
                .map(|c| std::iter::once(c.cmd).chain(c.args).collect())
                .unwrap_or_default();
            let process = pump(agent.clone(), stream, None, Instant::now());
            if self
                .processes
                .adopt(
                    &sb.id,
                    id.to_owned(),
                    command,
                    process,
                    self.config.max_exec_output_bytes,
                )
                .is_some()
            {
                tracing::info!(sandbox.id = %sb.id, process.id = %id, "re-attached to a background process in the sandbox's agent");
            }
        }
        Ok(())
    }

    /// Kills a process [`Service::exec_start`] started (and its children).
    pub async fn exec_kill(&self, sb: &Sandbox, exec_id: &str) -> ServiceResult<()> {
        if let Some(pid) = exec_id.strip_prefix(AGENT_EXEC_PREFIX) {
            let pid: u32 = pid
                .parse()
                .map_err(|_| ServiceError::Internal(format!("bad exec id '{exec_id}'")))?;
            if let Some(agent) = self.agent(sb).await? {
                match agent
                    .send_signal(ProcessSelector::pid(pid), Signal::Sigkill)
                    .await
                {
                    Ok(()) => {}
                    // Ended already.
                    Err(e) if e.code() == Some(Code::NotFound) => {}
                    Err(e) => return Err(agent_error(e)),
                }
            }
            return Ok(());
        }
        Ok(self
            .runtime_for(sb)
            .await?
            .exec_kill(&sb.id, exec_id)
            .await?)
    }
}

/// The start request of `spec` (stdin open when it has input).
fn start_request(spec: &ExecSpec) -> ServiceResult<StartRequest> {
    let (cmd, args) = spec
        .argv
        .split_first()
        .ok_or_else(|| ServiceError::field("cmd", "a command is required"))?;
    Ok(StartRequest {
        process: Some(ProcessConfig {
            cmd: cmd.clone(),
            args: args.to_vec(),
            envs: spec
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<HashMap<_, _>>(),
            // As `docker exec`: the container's working directory.
            cwd: Some(
                spec.cwd
                    .clone()
                    .unwrap_or_else(|| stockade_core::VolumeName::MOUNT_PATH.to_owned()),
            ),
        }),
        pty: None,
        tag: None,
        stdin: Some(spec.stdin.is_some()),
    })
}

/// `spec` in the working directory of the sandbox's template when it
/// names none (else `/workspace` applies, as with `docker exec`).
fn in_workdir(sb: &Sandbox, mut spec: ExecSpec) -> ExecSpec {
    if spec.cwd.is_none() {
        spec.cwd = sb.spec.template.as_ref().and_then(|t| t.workdir.clone());
    }
    spec
}

/// A command that could not even start, as a shell reports it: exit 127
/// (not found) or 126 (not executable) with the reason on stderr.
struct NotStarted {
    exit_code: i64,
    message: String,
}

/// Starts `spec` through the agent and writes its input.
async fn start(
    agent: &AgentClient,
    spec: &ExecSpec,
    tag: Option<String>,
) -> ServiceResult<Result<ProcessStream, NotStarted>> {
    let mut req = start_request(spec)?;
    req.tag = tag;
    let stream = match agent.start(&req, spec.timeout).await {
        Ok(s) => s,
        Err(e) => return not_started(e, spec),
    };
    if let Some(input) = &spec.stdin {
        let sel = || ProcessSelector::pid(stream.pid);
        if !input.is_empty() {
            // A process that exits before reading all of it is fine.
            let input = process_input::Input::Stdin(input.clone().into());
            let _ = agent.send_input(sel(), input).await;
        }
        let _ = agent.close_stdin(sel()).await;
    }
    Ok(Ok(stream))
}

async fn run_buffered(agent: &AgentClient, spec: ExecSpec) -> ServiceResult<ExecOutput> {
    let cap = if spec.max_output_bytes == 0 {
        DEFAULT_MAX_OUTPUT_BYTES
    } else {
        spec.max_output_bytes
    };
    let started = Instant::now();
    let mut out = ExecOutput {
        exit_code: None,
        stdout: Vec::new(),
        stderr: Vec::new(),
        timed_out: false,
        truncated: false,
    };
    let mut stream = match start(agent, &spec, None).await? {
        Ok(s) => s,
        Err(failed) => {
            out.exit_code = Some(failed.exit_code);
            out.stderr = format!("{}\n", failed.message).into_bytes();
            return Ok(out);
        }
    };
    // The agent kills at the timeout; this is the backstop should its end
    // event not come.
    let backstop = spec.timeout.map(|t| started + t + Duration::from_secs(2));
    loop {
        let next = match backstop {
            Some(at) => match tokio::time::timeout_at(at.into(), stream.next()).await {
                Ok(n) => n,
                Err(_) => {
                    let _ = agent
                        .send_signal(ProcessSelector::pid(stream.pid), Signal::Sigkill)
                        .await;
                    out.timed_out = true;
                    return Ok(out);
                }
            },
            None => stream.next().await,
        };
        match next {
            Some(Ok(ProcessOutput::Stdout(d))) | Some(Ok(ProcessOutput::Pty(d))) => {
                keep(&mut out.stdout, &d, cap, &mut out.truncated)
            }
            Some(Ok(ProcessOutput::Stderr(d))) => {
                keep(&mut out.stderr, &d, cap, &mut out.truncated)
            }
            Some(Ok(ProcessOutput::End(end))) => {
                let exit = exit_of(&end, spec.timeout, started);
                out.exit_code = exit.exit_code;
                out.timed_out = exit.timed_out;
                return Ok(out);
            }
            Some(Err(e)) => return Err(agent_error(e)),
            None => {
                return Err(ServiceError::Docker(
                    "the sandbox's agent ended the command's stream without its exit".into(),
                ))
            }
        }
    }
}

fn keep(buf: &mut Vec<u8>, data: &[u8], cap: usize, truncated: &mut bool) {
    let room = cap.saturating_sub(buf.len());
    if data.len() > room {
        *truncated = true;
    }
    buf.extend_from_slice(&data[..data.len().min(room)]);
}

/// A streamed command through the agent, as an [`ExecProcess`].
async fn start_streamed(
    agent: AgentClient,
    spec: ExecSpec,
    tag: Option<String>,
) -> ServiceResult<ExecProcess> {
    let started = Instant::now();
    let stream = match start(&agent, &spec, tag).await? {
        Ok(s) => s,
        Err(failed) => {
            let (tx, rx) = mpsc::channel(2);
            let _ = tx
                .send(ExecEvent::Stderr(format!("{}\n", failed.message).into()))
                .await;
            let _ = tx
                .send(ExecEvent::Exit(ExecExit {
                    exit_code: Some(failed.exit_code),
                    timed_out: false,
                    error: None,
                }))
                .await;
            return Ok(ExecProcess::new(format!("{AGENT_EXEC_PREFIX}0"), rx));
        }
    };
    Ok(pump(agent, stream, spec.timeout, started))
}

/// An agent's process stream as an [`ExecProcess`]: a task pumps its events
/// into the channel, and kills the process when the receiver goes away
/// before the exit (a client that left). When the server itself stops, the
/// task just ends: the process lives on in the agent.
fn pump(
    agent: AgentClient,
    mut stream: ProcessStream,
    timeout: Option<Duration>,
    started: Instant,
) -> ExecProcess {
    let pid = stream.pid;
    let (tx, rx) = mpsc::channel(CHANNEL);
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                next = stream.next() => next,
                () = tx.closed() => {
                    let _ = agent.send_signal(ProcessSelector::pid(pid), Signal::Sigkill).await;
                    return;
                }
            };
            let event = match event {
                Some(Ok(ProcessOutput::Stdout(d))) | Some(Ok(ProcessOutput::Pty(d))) => {
                    ExecEvent::Stdout(d)
                }
                Some(Ok(ProcessOutput::Stderr(d))) => ExecEvent::Stderr(d),
                Some(Ok(ProcessOutput::End(end))) => {
                    let _ = tx
                        .send(ExecEvent::Exit(exit_of(&end, timeout, started)))
                        .await;
                    return;
                }
                Some(Err(e)) => {
                    let _ = tx
                        .send(ExecEvent::Exit(ExecExit {
                            exit_code: None,
                            timed_out: false,
                            error: Some(agent_error(e).to_string()),
                        }))
                        .await;
                    return;
                }
                None => {
                    let _ = tx
                        .send(ExecEvent::Exit(ExecExit {
                            exit_code: None,
                            timed_out: false,
                            error: Some("the agent's stream ended without the exit".into()),
                        }))
                        .await;
                    return;
                }
            };
            if tx.send(event).await.is_err() {
                let _ = agent
                    .send_signal(ProcessSelector::pid(pid), Signal::Sigkill)
                    .await;
                return;
            }
        }
    });
    ExecProcess::new(format!("{AGENT_EXEC_PREFIX}{pid}"), rx)
}

/// How a process ended, as `docker exec` reports it: its exit code, or 128
/// plus the signal that killed it; none when the timeout killed it.
pub fn exit_of(
    end: &stockade_agent::proto::process::process_event::EndEvent,
    timeout: Option<Duration>,
    started: Instant,
) -> ExecExit {
    if end.exited {
        return ExecExit {
            exit_code: Some(i64::from(end.exit_code)),
            timed_out: false,
            error: None,
        };
    }
    let timed_out = timeout.is_some_and(|t| started.elapsed() >= t);
    ExecExit {
        exit_code: if timed_out {
            None
        } else {
            signal_number(&end.status).map(|s| 128 + s)
        },
        timed_out,
        error: None,
    }
}

/// The number of a signal from its description (`signal: killed`).
fn signal_number(status: &str) -> Option<i64> {
    let name = status.strip_prefix("signal: ")?;
    Some(match name {
        "hangup" => 1,
        "interrupt" => 2,
        "quit" => 3,
        "illegal instruction" => 4,
        "trace/breakpoint trap" => 5,
        "aborted" => 6,
        "bus error" => 7,
        "floating point exception" => 8,
        "killed" => 9,
        "user defined signal 1" => 10,
        "segmentation fault" => 11,
        "user defined signal 2" => 12,
        "broken pipe" => 13,
        "alarm clock" => 14,
        "terminated" => 15,
        _ => return None,
    })
}

/// A failed start: a missing working directory is the caller's input (400
/// naming the field); a program that cannot run exits 127 or 126 with the
/// reason, as it would under a shell or `docker exec`.
fn not_started(
    e: ClientError,
    spec: &ExecSpec,
) -> ServiceResult<Result<ProcessStream, NotStarted>> {
    match e.start_refused() {
        None => Err(agent_error(e)),
        Some(StartRefused::CwdMissing) => Err(ServiceError::field(
            "cwd",
            format!(
                "no such directory in the sandbox: {}",
                spec.cwd.as_deref().unwrap_or("")
            ),
        )),
        Some(StartRefused::CannotRun {
            what,
            permission_denied,
        }) => Ok(Err(NotStarted {
            exit_code: if permission_denied { 126 } else { 127 },
            message: format!("cannot run {what}"),
        })),
        Some(StartRefused::Invalid) => Err(ServiceError::field("cmd", e.to_string())),
    }
}

/// An agent failure as the service reports it.
pub fn agent_error(e: ClientError) -> ServiceError {
    match e {
        ClientError::Transport(m) => ServiceError::SandboxUnavailable(format!(
            "the sandbox's agent does not answer ({m}); is the sandbox running?"
        )),
        other => ServiceError::Docker(format!("the sandbox's agent failed: {other}")),
    }
}
