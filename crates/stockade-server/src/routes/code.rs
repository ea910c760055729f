//! `POST /api/v1/sandbox/{id}/code` and `…/code/contexts`: cells of code
//! run in the sandbox's Jupyter kernels (the code interpreter), answered as
//! one JSON outcome or streamed as Server-Sent Events, and the contexts that
//! keep each kernel's state.

use std::collections::VecDeque;

use axum::body::{Body, Bytes};
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use stockade_api::code::{
    CodeContext, CodeContexts, CodeEndEvent, CodeError, CodeEvent, CodeLogs, CodeOutput,
    CodeResult, CreateCodeContextRequest, Execution, ExecutionCountEvent, RunCodeRequest,
};
use stockade_api::ErrorBody;
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::ApiResult;
use crate::extract::{parse_json, Authed, AuthedId};
use crate::routes::apidoc::SandboxErrors;
use crate::{sse, AppState};
use stockade_service::code::{CodeRun, MAX_COLLECTED_BYTES};
use stockade_service::pause;

/// The largest request body (a cell's code is at most 1 MiB, but JSON may
/// spell each of its bytes in six).
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sandbox/{id}/code", post(run_code))
        .route(
            "/sandbox/{id}/code/contexts",
            get(list_contexts).post(create_context),
        )
        .route(
            "/sandbox/{id}/code/contexts/{context_id}",
            delete(delete_context),
        )
        .route(
            "/sandbox/{id}/code/contexts/{context_id}/restart",
            post(restart_context),
        )
        .route(
            "/sandbox/{id}/code/contexts/{context_id}/interrupt",
            post(interrupt_context),
        )
}

/// This module's part of the OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    paths(run_code, list_contexts, create_context, delete_context, restart_context, interrupt_context),
    components(schemas(
        RunCodeRequest, Execution, CodeLogs, CodeResult, CodeError, CodeContext, CodeContexts,
        CreateCodeContextRequest, CodeOutput, ExecutionCountEvent, CodeEndEvent
    )),
    tags((name = "code", description = "Code interpreter: cells of Python, JavaScript or bash run in a sandbox's Jupyter kernels"))
)]
pub struct CodeApi;

async fn read_body(body: Body) -> ApiResult<Bytes> {
    crate::extract::read_capped(body, MAX_BODY_BYTES, || {
        format!(
            "The request is larger than {} MiB; a cell's code may be 1 MiB",
            MAX_BODY_BYTES >> 20
        )
    })
    .await
}

/// Run a cell of code in a running sandbox.
///
/// The cell runs in a context: a Jupyter kernel that keeps its variables
/// from cell to cell. `contextId` names one; `language` (`python`,
/// `javascript`, `typescript`, `bash`, …) picks that language's default
/// context; neither runs it in the default Python context. The sandbox's
/// image needs a kernel for the language: the `code-interpreter-v1`
/// runtime has Python, JavaScript/TypeScript (Deno) and bash.
///
/// By default the answer comes when the cell ends: its results (each in
/// every form the kernel gave: `text`, `html`, `png`, `chart`, `data`, …),
/// its stdout and stderr chunks, the error with its traceback, and the
/// execution count; output beyond 64 MiB is dropped with a note on stderr.
/// With `Accept: text/event-stream` the events stream as they come:
/// `executionCount`, `stdout`/`stderr` (`CodeOutput`), `result`
/// (`CodeResult`), `error` (`CodeError`), and last `end` (`CodeEndEvent`).
/// Closing the stream interrupts the cell; the context keeps its state.
/// `timeoutSeconds` (default 300) interrupts the cell too: the error is
/// `TimeoutError`.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/code", tag = "code",
    params(("id" = String, Path, description = "sandbox id")),
    request_body = RunCodeRequest,
    responses(
        (status = 200, description = "The cell ended (JSON), or its live events (SSE)",
            content((Execution = "application/json"), (String = "text/event-stream"))),
        (status = 400, description = "A field is invalid, or the image has no kernel for the language", body = ErrorBody),
        (status = 403, description = "Another account's sandbox", body = ErrorBody),
        (status = 404, description = "Unknown sandbox, or no such context (`contextId`)", body = ErrorBody),
        (status = 409, description = "The sandbox is not running, or has no agent", body = ErrorBody),
        (status = 413, description = "The request body is too large", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn run_code(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let req: RunCodeRequest = parse_json(&read_body(body).await?)?;
    let sb = pause::load_awake(&state.svc, &caller.scope, &id).await?;
    let run = state.svc.run_code(&sb, req).await?;
    if sse::wants_event_stream(&headers) {
        return Ok(sse::response(
            sse::stepped(CodeSteps { run }),
            state.config.sse_keep_alive,
            state.svc.shutdown(),
        ));
    }
    Ok(Json(run.collect(MAX_COLLECTED_BYTES).await?).into_response())
}

/// The events of one streamed cell. Dropping it (the client left) drops
/// the request to the agent, which interrupts the cell.
struct CodeSteps {
    run: CodeRun,
}

impl sse::Steps for CodeSteps {
    async fn step(&mut self, queue: &mut VecDeque<Bytes>) -> bool {
        match self.run.next().await {
            Some(Ok(event)) => {
                queue.push_back(sse::json_event(event.name(), &event.data()));
                matches!(event, CodeEvent::End(_))
            }
            Some(Err(e)) => {
                // The stream broke off: say why, and end it as a cell
                // whose end is unknown.
                let error = CodeError {
                    name: "StreamError".into(),
                    value: e.to_string(),
                    traceback: String::new(),
                };
                queue.push_back(sse::json_event("error", &error));
                queue.push_back(sse::json_event("end", &CodeEndEvent { unexpected: true }));
                true
            }
            None => true,
        }
    }
}

/// The sandbox's code contexts, oldest first: those made with
/// `POST …/code/contexts` and each language's default context once used.
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/code/contexts", tag = "code",
    params(("id" = String, Path, description = "sandbox id")),
    responses(
        (status = 200, body = CodeContexts),
        SandboxErrors,
        (status = 409, description = "The sandbox is not running, or has no agent", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn list_contexts(
    AuthedId { state, caller, id }: AuthedId,
) -> ApiResult<Json<CodeContexts>> {
    let sb = pause::load_awake(&state.svc, &caller.scope, &id).await?;
    let contexts = state.svc.code_contexts(&sb).await?;
    Ok(Json(CodeContexts { contexts }))
}

/// Start a new context: a kernel of `language` (default `python`) in `cwd`
/// (default `/home/user` when the image has it). A sandbox holds at most 16.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/code/contexts", tag = "code",
    params(("id" = String, Path, description = "sandbox id")),
    request_body = CreateCodeContextRequest,
    responses(
        (status = 201, body = CodeContext),
        (status = 400, description = "A field is invalid, the directory does not exist, or the image has no kernel for the language", body = ErrorBody),
        SandboxErrors,
        (status = 409, description = "The sandbox is not running, has no agent, or has 16 contexts", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn create_context(
    AuthedId { state, caller, id }: AuthedId,
    body: Body,
) -> ApiResult<(StatusCode, Json<CodeContext>)> {
    let bytes = read_body(body).await?;
    // No body at all asks for the defaults.
    let req: CreateCodeContextRequest = if bytes.iter().all(u8::is_ascii_whitespace) {
        CreateCodeContextRequest::default()
    } else {
        parse_json(&bytes)?
    };
    let sb = pause::load_awake(&state.svc, &caller.scope, &id).await?;
    let context = state.svc.create_code_context(&sb, req).await?;
    Ok((StatusCode::CREATED, Json(context)))
}

/// Delete a context; its kernel ends and its state is gone.
#[utoipa::path(delete, path = "/api/v1/sandbox/{id}/code/contexts/{context_id}", tag = "code",
    params(("id" = String, Path, description = "sandbox id"),
           ("context_id" = String, Path, description = "context id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Not a context id", body = ErrorBody),
        (status = 403, description = "Another account's sandbox", body = ErrorBody),
        (status = 404, description = "Unknown sandbox or context", body = ErrorBody),
        (status = 409, description = "The sandbox is not running, or has no agent", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id, context.id = %context_id), err(level = "debug", Display))]
pub async fn delete_context(
    Authed { state, caller }: Authed,
    Path((id, context_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let sb = pause::load_awake(&state.svc, &caller.scope, &id).await?;
    state.svc.delete_code_context(&sb, &context_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Restart a context's kernel: the same id, language and directory, its
/// state gone.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/code/contexts/{context_id}/restart", tag = "code",
    params(("id" = String, Path, description = "sandbox id"),
           ("context_id" = String, Path, description = "context id")),
    responses(
        (status = 204, description = "Restarted"),
        (status = 400, description = "Not a context id", body = ErrorBody),
        (status = 403, description = "Another account's sandbox", body = ErrorBody),
        (status = 404, description = "Unknown sandbox or context", body = ErrorBody),
        (status = 409, description = "The sandbox is not running, or has no agent", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id, context.id = %context_id), err(level = "debug", Display))]
pub async fn restart_context(
    Authed { state, caller }: Authed,
    Path((id, context_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let sb = pause::load_awake(&state.svc, &caller.scope, &id).await?;
    state.svc.restart_code_context(&sb, &context_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Interrupt the cell a context runs (a `KeyboardInterrupt` in Python);
/// the context keeps its state. Nothing happens when it runs none.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/code/contexts/{context_id}/interrupt", tag = "code",
    params(("id" = String, Path, description = "sandbox id"),
           ("context_id" = String, Path, description = "context id")),
    responses(
        (status = 204, description = "Interrupted"),
        (status = 400, description = "Not a context id", body = ErrorBody),
        (status = 403, description = "Another account's sandbox", body = ErrorBody),
        (status = 404, description = "Unknown sandbox or context", body = ErrorBody),
        (status = 409, description = "The sandbox is not running, or has no agent", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id, context.id = %context_id), err(level = "debug", Display))]
pub async fn interrupt_context(
    Authed { state, caller }: Authed,
    Path((id, context_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let sb = pause::load_awake(&state.svc, &caller.scope, &id).await?;
    state.svc.interrupt_code_context(&sb, &context_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
