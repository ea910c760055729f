//! `POST /api/v1/sandbox/{id}/exec` and `…/processes`: run a command
//! in a sandbox, buffered or streamed as Server-Sent Events, or in the
//! background as a process that can be listed, waited for and killed.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use stockade_api::{
    ErrorBody, ExecExitEvent, ExecRequest, ExecResponse, ListProcessesResponse, ProcessResponse,
    ProcessStatus,
};
use stockade_core::{Sandbox, SandboxStatus, ValidationErrors, VolumeName};
use stockade_runtime::{ExecEvent, ExecProcess, ExecSpec};
use tracing::instrument;
use utoipa::OpenApi;

use crate::config::ServerConfig;
use crate::error::{ApiError, ApiResult};
use crate::extract::{parse_json, query_pairs, Authed, AuthedId, Caller};
use crate::routes::apidoc::{AccessErrors, BadRequest, SandboxErrors};
use crate::{sse, AppState};
use stockade_service::output::{lossy_text, Utf8Decoder};
use stockade_service::processes::{self, parse_process_id, Process, RegistryFull};
use stockade_service::ServiceError;
use stockade_service::{lifecycle, pause};

/// The largest exec request body (it carries `stdin`).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// The most arguments of `cmd`.
const MAX_ARGS: usize = 4096;
/// The most bytes of `cmd` (all arguments) or `shell`.
const MAX_COMMAND_BYTES: usize = 256 * 1024;
const MAX_CWD_BYTES: usize = 4096;
/// `wait` without `?timeout=` waits this long.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
const MAX_WAIT_SECS: u64 = 3600;
/// How long a kill waits for the process to be gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sandbox/{id}/exec", post(exec))
        .route("/sandbox/{id}/processes", get(list_processes))
        .route(
            "/sandbox/{id}/processes/{pid}",
            get(get_process).delete(kill_process),
        )
        .route("/sandbox/{id}/processes/{pid}/wait", post(wait_process))
        .route("/sandbox/{id}/processes/{pid}/kill", post(kill_process))
}

/// This module's part of the OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    paths(exec, list_processes, get_process, wait_process, kill_process),
    components(schemas(
        ExecRequest, ExecResponse, ExecExitEvent, ProcessResponse, ProcessStatus,
        ListProcessesResponse
    )),
    tags((name = "exec", description = "Commands and background processes in a sandbox"))
)]
pub struct ExecApi;

/// A validated exec request.
#[derive(Debug, PartialEq)]
struct ExecPlan {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    timeout: Option<Duration>,
    stdin: Option<Vec<u8>>,
    background: bool,
}

impl ExecPlan {
    fn spec(&self) -> ExecSpec {
        ExecSpec {
            argv: self.argv.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            stdin: self.stdin.clone(),
            timeout: self.timeout,
            max_output_bytes: 0,
        }
    }
}

/// Checks an exec request against the sandbox and the limits; every
/// problem is a 400 naming its field.
fn plan(req: ExecRequest, sb: &Sandbox, config: &ServerConfig) -> ApiResult<ExecPlan> {
    let mut errs = ValidationErrors::default();
    let argv = match (req.cmd, req.shell) {
        (Some(_), Some(_)) => {
            errs.push(
                "cmd",
                "give either cmd (argv) or shell (a command line), not both",
            );
            Vec::new()
        }
        (None, None) => {
            errs.push("cmd", "give cmd (argv) or shell (a command line)");
            Vec::new()
        }
        (Some(cmd), None) => {
            if cmd.is_empty() || cmd[0].is_empty() {
                errs.push("cmd", "must name a program: [\"program\", \"arg\", …]");
            } else if cmd.len() > MAX_ARGS {
                errs.push("cmd", format!("at most {MAX_ARGS} arguments"));
            } else if cmd.iter().map(String::len).sum::<usize>() > MAX_COMMAND_BYTES {
                errs.push("cmd", format!("at most {MAX_COMMAND_BYTES} bytes in all"));
            }
            for (i, arg) in cmd.iter().enumerate() {
                if arg.contains('\0') {
                    errs.push(format!("cmd[{i}]"), "must not contain NUL bytes");
                }
            }
            cmd
        }
        (None, Some(shell)) => {
            if shell.trim().is_empty() {
                errs.push("shell", "must not be empty");
            } else if shell.len() > MAX_COMMAND_BYTES {
                errs.push("shell", format!("at most {MAX_COMMAND_BYTES} bytes"));
            } else if shell.contains('\0') {
                errs.push("shell", "must not contain NUL bytes");
            }
            vec!["/bin/sh".into(), "-c".into(), shell]
        }
    };
    let cwd = match req.cwd {
        None => None,
        Some(c) if c.trim().is_empty() => {
            errs.push("cwd", "must not be empty (leave it out for /workspace)");
            None
        }
        Some(c) if c.contains('\0') || c.len() > MAX_CWD_BYTES => {
            errs.push(
                "cwd",
                format!("must be at most {MAX_CWD_BYTES} bytes without NUL bytes"),
            );
            None
        }
        Some(c) if c.starts_with('/') => Some(c),
        Some(c) => Some(format!("{}/{c}", VolumeName::MOUNT_PATH)),
    };
    let mut env = sb.spec.environment_vars.clone();
    // Variables removed by an update are still in the container's own
    // environment: unset them (unless this exec sets them again).
    let mut unset: Vec<String> = sb.spec.removed_env.clone();
    if let Some(extra) = &req.env {
        unset.retain(|k| !extra.contains_key(k));
    }
    if let Some(extra) = req.env {
        if let Some(extra) = errs.check(stockade_core::spec::parse_env(&extra, "env")) {
            // parse_env refuses the reserved names (STOCKADE_EXEC_ID, the
            // agent's token).
            env.extend(extra);
        }
    }
    let max = config.service.max_exec_timeout.as_secs().max(1);
    let timeout = match req.timeout_seconds {
        Some(t) if t == 0 || t > max => {
            errs.push(
                "timeoutSeconds",
                format!("must be from 1 to {max} seconds, got {t}"),
            );
            None
        }
        Some(t) => Some(Duration::from_secs(t)),
        // A background process runs until it ends or is killed.
        None if req.background => None,
        None => Some(config.service.default_exec_timeout),
    };
    errs.into_result()?;
    let argv = if unset.is_empty() {
        argv
    } else {
        // Names are validated environment names ([A-Za-z_][A-Za-z0-9_]*).
        let mut wrapped = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            format!("unset {}; exec \"$@\"", unset.join(" ")),
            "stockade-exec".to_owned(),
        ];
        wrapped.extend(argv);
        wrapped
    };
    Ok(ExecPlan {
        argv,
        env,
        cwd,
        timeout,
        stdin: req.stdin.map(String::into_bytes),
        background: req.background,
    })
}

fn ensure_running(sb: &Sandbox) -> ApiResult<()> {
    if sb.status == SandboxStatus::Running {
        return Ok(());
    }
    if sb.is_paused() {
        return Err(ServiceError::paused(&sb.id).into());
    }
    Err(ServiceError::NotRunning(format!(
        "sandbox is not running (status {}): start it with POST /api/v1/sandbox/{}/start",
        sb.status, sb.id
    ))
    .into())
}

async fn read_body(body: Body) -> ApiResult<Bytes> {
    crate::extract::read_capped(body, MAX_BODY_BYTES, || {
        format!(
            "The exec request is larger than {} MiB; pass large input as a file",
            MAX_BODY_BYTES / (1024 * 1024)
        )
    })
    .await
}

/// Run a command in a running sandbox.
///
/// Exactly one of `cmd` (argv, no shell) and `shell` (`/bin/sh -c`). The
/// sandbox's `environmentVars` are the default environment; `env` adds to
/// and overrides them. By default the answer comes when the process ends:
/// `{exitCode, stdout, stderr, durationMs, timedOut, truncated}`, each
/// stream cut at the server's output limit. With `Accept:
/// text/event-stream` the output streams as it comes: `stdout`/`stderr`
/// events whose data is the chunk as a JSON string, then one `exit` event
/// (`ExecExitEvent`); closing the stream kills the process. With
/// `background: true` the answer is 202 with a `processId` at once. A
/// timeout kills the process and its children: `timedOut: true`,
/// `exitCode: null`.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/exec", tag = "exec",
    params(("id" = String, Path, description = "sandbox id")),
    request_body = ExecRequest,
    responses(
        (status = 200, description = "The process ended (JSON), or its live output (SSE: `stdout`, `stderr`, `exit` events)",
            content((ExecResponse = "application/json"), (String = "text/event-stream"))),
        (status = 202, description = "Started in the background", body = ProcessResponse),
        (status = 400, description = "A field is invalid (or cwd does not exist)", body = ErrorBody),
        SandboxErrors,
        (status = 409, description = "The sandbox is not running, or has too many background processes", body = ErrorBody),
        (status = 413, description = "The request body is too large", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn exec(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let req: ExecRequest = parse_json(&read_body(body).await?)?;
    let sb = pause::load_awake(&state.svc, &caller.scope, &id).await?;
    let plan = plan(req, &sb, &state.config)?;
    ensure_running(&sb)?;
    if plan.background {
        let proc = start_background(&state, &sb, &plan).await?;
        return Ok((StatusCode::ACCEPTED, Json(proc.view(false))).into_response());
    }
    if sse::wants_event_stream(&headers) {
        let started = Instant::now();
        let process = state.svc.exec_start(&sb, plan.spec()).await?;
        let events = ExecEvents {
            process,
            started,
            timeout: plan.timeout,
            stdout: Utf8Decoder::default(),
            stderr: Utf8Decoder::default(),
        };
        return Ok(sse::response(
            sse::stepped(events),
            state.config.sse_keep_alive,
            state.svc.shutdown(),
        ));
    }

    let limit = state.svc.config().max_exec_output_bytes;
    let started = Instant::now();
    let out = state
        .svc
        .exec(
            &sb,
            ExecSpec {
                max_output_bytes: limit,
                ..plan.spec()
            },
        )
        .await?;
    let duration_ms = millis(started.elapsed());
    Ok(Json(ExecResponse {
        exit_code: out.exit_code,
        stdout: lossy_text(&out.stdout, out.stdout.len() >= limit),
        stderr: lossy_text(&out.stderr, out.stderr.len() >= limit),
        duration_ms,
        timed_out: out.timed_out,
        truncated: out.truncated,
        message: out.timed_out.then(|| timeout_message(plan.timeout)),
    })
    .into_response())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn timeout_message(timeout: Option<Duration>) -> String {
    format!(
        "killed after its timeout of {} s (timeoutSeconds)",
        timeout.unwrap_or_default().as_secs()
    )
}

fn too_many(full: RegistryFull) -> ServiceError {
    ServiceError::Conflict(format!(
        "this sandbox already has {} background processes running; kill some first (DELETE …/processes/{{pid}})",
        full.0
    ))
}

async fn start_background(
    state: &AppState,
    sb: &Sandbox,
    plan: &ExecPlan,
) -> ApiResult<std::sync::Arc<Process>> {
    state
        .svc
        .processes()
        .ensure_room(&sb.id)
        .map_err(too_many)?;
    // The agent keeps the process under this id.
    let id = stockade_core::SandboxId::generate().to_string();
    let process = state
        .svc
        .exec_start_tagged(sb, plan.spec(), Some(processes::agent_tag(&id)))
        .await?;
    match state.svc.processes().register(
        &sb.id,
        id,
        plan.argv.clone(),
        process,
        state.svc.config().max_exec_output_bytes,
    ) {
        Ok(proc) => {
            tracing::info!(sandbox.id = %sb.id, process.id = %proc.id, "background process started");
            Ok(proc)
        }
        Err((full, process)) => {
            // Another start took the last place meanwhile: this one goes.
            if let Err(e) = state.svc.exec_kill(sb, process.exec_id()).await {
                tracing::warn!(sandbox.id = %sb.id, error = %e, "could not kill a process that found no room");
            }
            Err(too_many(full).into())
        }
    }
}

/// The state of one streamed exec.
struct ExecEvents {
    process: ExecProcess,
    started: Instant,
    timeout: Option<Duration>,
    stdout: Utf8Decoder,
    stderr: Utf8Decoder,
}

impl sse::Steps for ExecEvents {
    async fn step(&mut self, queue: &mut VecDeque<Bytes>) -> bool {
        let exit = match self.process.next().await {
            Some(ExecEvent::Stdout(b)) => {
                chunk(queue, "stdout", &self.stdout.push(&b));
                return false;
            }
            Some(ExecEvent::Stderr(b)) => {
                chunk(queue, "stderr", &self.stderr.push(&b));
                return false;
            }
            Some(ExecEvent::Exit(exit)) => {
                let message = if exit.timed_out {
                    Some(timeout_message(self.timeout))
                } else {
                    exit.error
                        .map(|e| format!("reading its output failed: {e}"))
                };
                ExecExitEvent {
                    exit_code: exit.exit_code,
                    timed_out: exit.timed_out,
                    duration_ms: millis(self.started.elapsed()),
                    message,
                }
            }
            None => ExecExitEvent {
                exit_code: None,
                timed_out: false,
                duration_ms: millis(self.started.elapsed()),
                message: Some("the process's exit status is unknown".into()),
            },
        };
        // The rest of a character split across the last chunks, then the exit.
        chunk(queue, "stdout", &self.stdout.finish());
        chunk(queue, "stderr", &self.stderr.finish());
        queue.push_back(sse::json_event("exit", &exit));
        true
    }
}

/// An output event: the text as a JSON string (none for no text).
fn chunk(queue: &mut VecDeque<Bytes>, kind: &str, text: &str) {
    if !text.is_empty() {
        let data = serde_json::to_string(text).unwrap_or_default();
        queue.push_back(sse::event(kind, None, &data));
    }
}

/// Takes over the sandbox's background processes this server does not
/// watch yet (they live in its agent); a failure only means fewer listed.
async fn adopt(state: &AppState, sb: &Sandbox) {
    if let Err(e) = state.svc.adopt_processes(sb).await {
        tracing::debug!(sandbox.id = %sb.id, error = %e, "could not list the agent's processes");
    }
}

async fn load_process(
    state: &AppState,
    caller: &Caller,
    id: &str,
    pid: &str,
) -> ApiResult<std::sync::Arc<Process>> {
    let pid = parse_process_id(pid)?;
    let sb = pause::load_awake(&state.svc, &caller.scope, id).await?;
    adopt(state, &sb).await;
    state
        .svc
        .processes()
        .get(&sb.id, &pid)
        .ok_or_else(|| ServiceError::NotFound("Process not found".into()).into())
}

/// The sandbox's background processes: those running in its agent —
/// whichever server instance started them, also before a restart — and
/// finished ones for an hour.
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/processes", tag = "exec",
    params(("id" = String, Path, description = "sandbox id")),
    responses(
        (status = 200, body = ListProcessesResponse),
        AccessErrors,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn list_processes(
    AuthedId { state, caller, id }: AuthedId,
) -> ApiResult<Json<ListProcessesResponse>> {
    let sb = pause::load_awake(&state.svc, &caller.scope, &id).await?;
    adopt(&state, &sb).await;
    Ok(Json(ListProcessesResponse {
        processes: state
            .svc
            .processes()
            .list(&sb.id)
            .iter()
            .map(|p| p.view(false))
            .collect(),
    }))
}

/// A background process with its captured output.
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/processes/{pid}", tag = "exec",
    params(("id" = String, Path, description = "sandbox id"), ("pid" = String, Path, description = "process id")),
    responses(
        (status = 200, body = ProcessResponse),
        BadRequest, AccessErrors,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id, process.id = %pid), err(level = "debug", Display))]
pub async fn get_process(
    Authed { state, caller }: Authed,
    Path((id, pid)): Path<(String, String)>,
) -> ApiResult<Json<ProcessResponse>> {
    let proc = load_process(&state, &caller, &id, &pid).await?;
    Ok(Json(proc.view(true)))
}

/// Wait up to `timeout` seconds for a background process to end; returns it
/// either way (`status` tells).
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/processes/{pid}/wait", tag = "exec",
    params(("id" = String, Path, description = "sandbox id"), ("pid" = String, Path, description = "process id"),
           ("timeout" = Option<u64>, Query, description = "seconds to wait, 0-3600 (default 30)")),
    responses(
        (status = 200, body = ProcessResponse),
        BadRequest, AccessErrors,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id, process.id = %pid), err(level = "debug", Display))]
pub async fn wait_process(
    Authed { state, caller }: Authed,
    Path((id, pid)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<ProcessResponse>> {
    let proc = load_process(&state, &caller, &id, &pid).await?;
    let mut wait = DEFAULT_WAIT;
    for (k, v) in query_pairs(raw.as_deref()) {
        match k.as_str() {
            "timeout" => {
                let secs = v
                    .parse::<u64>()
                    .ok()
                    .filter(|s| *s <= MAX_WAIT_SECS)
                    .ok_or_else(|| {
                        ApiError::field(
                            "timeout",
                            format!("must be whole seconds from 0 to {MAX_WAIT_SECS}"),
                        )
                    })?;
                wait = Duration::from_secs(secs);
            }
            other => return Err(ApiError::field(other, "unknown query parameter")),
        }
    }
    proc.wait(wait).await;
    Ok(Json(proc.view(true)))
}

/// Kill a background process and its children (SIGKILL); returns it once it
/// is gone. One that has ended already is returned as it is.
#[utoipa::path(delete, path = "/api/v1/sandbox/{id}/processes/{pid}", tag = "exec",
    params(("id" = String, Path, description = "sandbox id"), ("pid" = String, Path, description = "process id")),
    responses(
        (status = 200, body = ProcessResponse),
        BadRequest, AccessErrors,
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id, process.id = %pid), err(level = "debug", Display))]
pub async fn kill_process(
    Authed { state, caller }: Authed,
    Path((id, pid)): Path<(String, String)>,
) -> ApiResult<Json<ProcessResponse>> {
    let proc = load_process(&state, &caller, &id, &pid).await?;
    if proc.is_running() {
        proc.mark_kill_requested();
        let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
        state.svc.exec_kill(&sb, proc.exec_id()).await?;
        if !proc.wait(KILL_WAIT).await {
            tracing::warn!(sandbox.id = %proc.sandbox_id, process.id = %proc.id, "a killed process is still running");
        }
    }
    Ok(Json(proc.view(true)))
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use stockade_core::{AccountId, Defaults, SandboxId, SandboxSpec};

    use super::*;

    fn sandbox() -> Sandbox {
        let id = SandboxId::generate();
        let input = stockade_core::spec::SpecInput {
            environment_vars: Some(BTreeMap::from([
                ("A".to_string(), "sandbox".to_string()),
                ("B".to_string(), "sandbox".to_string()),
            ])),
            ..Default::default()
        };
        let spec = SandboxSpec::from_input(input, &id, &Defaults::default()).unwrap();
        let owner = AccountId::generate();
        Sandbox::new(id, owner, None, spec, "local".into(), Utc::now())
    }

    fn req(v: serde_json::Value) -> ExecRequest {
        serde_json::from_value(v).unwrap()
    }

    fn fields(v: serde_json::Value) -> Vec<String> {
        match plan(req(v), &sandbox(), &ServerConfig::default()) {
            Err(ApiError::Validation(e)) => e.0.into_iter().map(|f| f.field).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn plans_merge_env_resolve_cwd_and_default_the_timeout() {
        let config = ServerConfig::default();
        let p = plan(
            req(serde_json::json!({"shell": "echo hi", "env": {"B": "request", "C": "c"}, "cwd": "src", "stdin": "x"})),
            &sandbox(),
            &config,
        )
        .unwrap();
        assert_eq!(p.argv, ["/bin/sh", "-c", "echo hi"]);
        assert_eq!(p.env["A"], "sandbox");
        assert_eq!(p.env["B"], "request", "the request overrides");
        assert_eq!(p.env["C"], "c");
        assert_eq!(p.cwd.as_deref(), Some("/workspace/src"));
        assert_eq!(p.timeout, Some(config.service.default_exec_timeout));
        assert_eq!(p.stdin.as_deref(), Some(&b"x"[..]));

        let p = plan(
            req(serde_json::json!({"cmd": ["ls", "-l"], "background": true})),
            &sandbox(),
            &config,
        )
        .unwrap();
        assert_eq!(p.timeout, None, "background processes run until killed");
        assert!(p.background);
    }

    #[test]
    fn bad_requests_name_their_field() {
        assert_eq!(fields(serde_json::json!({})), ["cmd"]);
        assert_eq!(
            fields(serde_json::json!({"cmd": ["a"], "shell": "b"})),
            ["cmd"]
        );
        assert_eq!(fields(serde_json::json!({"cmd": []})), ["cmd"]);
        assert_eq!(fields(serde_json::json!({"cmd": [""]})), ["cmd"]);
        assert_eq!(
            fields(serde_json::json!({"cmd": ["a", "b\u{0}"]})),
            ["cmd[1]"]
        );
        assert_eq!(fields(serde_json::json!({"shell": "  "})), ["shell"]);
        assert_eq!(
            fields(serde_json::json!({"shell": "x", "cwd": ""})),
            ["cwd"]
        );
        assert_eq!(
            fields(serde_json::json!({"shell": "x", "timeoutSeconds": 0})),
            ["timeoutSeconds"]
        );
        assert_eq!(
            fields(serde_json::json!({"shell": "x", "timeoutSeconds": 10_000_000})),
            ["timeoutSeconds"]
        );
        assert_eq!(
            fields(serde_json::json!({"shell": "x", "env": {"1A": "x"}})),
            ["env.1A"]
        );
        assert_eq!(
            fields(serde_json::json!({"shell": "x", "env": {"STOCKADE_EXEC_ID": "x"}})),
            ["env.STOCKADE_EXEC_ID"]
        );
    }
}
