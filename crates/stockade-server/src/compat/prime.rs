//! What Prime Intellect's `prime-sandboxes` SDK needs beyond Stockade's own
//! API, next to it under `/api/v1`: the bulk delete at
//! `DELETE /sandbox`, batch status, error context, checkpoints (Stockade's
//! snapshots), `POST /sandbox/{id}/auth` — and the sandbox gateway that
//! answer points at, on Stockade itself (`/gateway/{account}/{sandbox}/…`):
//! the `command_session.CommandSession` Connect service (protobuf or JSON)
//! and file upload, download and read, forwarded to the sandbox's agent.
//! What cannot map (LAN networks, SSH sessions, image builds, per-sandbox
//! egress policies) answers 501 with what Stockade offers.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use chrono::Utc;
use stockade_api::prime::*;
use stockade_api::{ErrorBody, ErrorDetail, SandboxResponse};
use stockade_core::{Sandbox, SandboxId, SandboxStatus, Snapshot, SnapshotKind, SnapshotStatus};
use stockade_service::sandbox::queries::BulkSelection;
use stockade_service::{lifecycle, snapshots, ServiceError};
use tracing::instrument;

use crate::error::{ApiError, ApiResult};
use crate::extract::{query_pairs, ApiJson, Authed, AuthedId};
use crate::proxy::token::{self, Purpose};
use crate::proxy::PublicBase;
use crate::AppState;

/// How long a gateway token lives (the SDK asks again before it ends).
const GATEWAY_TOKEN_TTL: chrono::Duration = chrono::Duration::hours(1);
/// The most a `read-file` answer holds.
const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;
/// The most ids one batch lookup or bulk delete takes.
const MAX_BATCH: usize = 1000;
/// The prefix of the gateway's routes.
pub const GATEWAY_PREFIX: &str = "/gateway";

/// Whether a request comes from `prime-sandboxes`, which reads a start
/// command only as `{executable, args}`.
pub fn wants_argv_start_command(headers: &HeaderMap) -> bool {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ua| ua.starts_with("prime-sandboxes/"))
}

/// A sandbox's answer in the shape the caller reads.
pub fn answer(sb: &Sandbox, headers: &HeaderMap) -> SandboxResponse {
    let r = SandboxResponse::from_record(sb, Utc::now());
    if wants_argv_start_command(headers) {
        r.with_argv_start_command()
    } else {
        r
    }
}

/// A 501 in Stockade's error shape, with what Stockade offers instead.
pub fn not_implemented(message: impl Into<String>) -> Response {
    (
        StatusCode::NOT_IMPLEMENTED,
        Json(ErrorBody {
            error: ErrorDetail {
                code: "not_implemented".into(),
                message: message.into(),
                details: None,
            },
        }),
    )
        .into_response()
}

/// The routes of this module under `/api/v1` (the bulk delete is mounted
/// on `/sandbox` with create and list).
pub fn api_routes() -> Router<AppState> {
    Router::new()
        .route("/sandbox/{id}/auth", post(auth))
        .route("/sandbox/status:batchGet", post(status_batch))
        .route("/sandbox/{id}/error-context", get(error_context))
        .route(
            "/sandbox/{id}/checkpoints",
            post(create_checkpoint)
                .get(list_checkpoints)
                .delete(delete_sandbox_checkpoints),
        )
        .route(
            "/sandbox/checkpoints/{cid}",
            get(get_checkpoint).delete(delete_checkpoint),
        )
        .route("/sandbox/checkpoints:batchGet", post(checkpoint_batch))
        .route("/sandbox/networks", any(no_lan))
        .route("/sandbox/networks/{*rest}", any(no_lan))
        .route("/sandbox/{id}/ssh-session", any(no_ssh))
        .route("/sandbox/{id}/ssh-session/{session}", any(no_ssh))
        .route("/sandbox/{id}/egress-policy", any(no_egress_policy))
        .merge(super::prime_volumes::routes())
        .route("/images", any(no_images))
        .route("/images/{*rest}", any(no_images))
}

/// The gateway's routes (at the server's root).
pub fn gateway_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/gateway/{ns}/{job}/command_session.CommandSession/{method}",
            post(gateway_rpc),
        )
        .route("/gateway/{ns}/{job}/upload", post(gateway_upload))
        .route("/gateway/{ns}/{job}/download", get(gateway_download))
        .route("/gateway/{ns}/{job}/read-file", get(gateway_read_file))
        .method_not_allowed_fallback(gateway_method_not_allowed)
}

/// A method a gateway path does not have: 405 in the gateway's plain
/// shape (axum adds `Allow`).
async fn gateway_method_not_allowed(method: Method, uri: Uri) -> Response {
    GatewayError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        stockade_agent::connect::Code::Unimplemented,
        format!("{method} is not allowed on {}", uri.path()),
    )
    .plain()
}

async fn no_lan() -> Response {
    not_implemented(
        "LAN networks are not available: Stockade keeps every sandbox apart from the others; \
         sandboxes reach each other's exposed ports through the proxy with a sandbox \
         token (POST /api/v1/sandbox/{id}/ports, /auth-token)",
    )
}

async fn no_ssh() -> Response {
    not_implemented(
        "SSH sessions are not available: use a terminal instead (`stockade shell`, the \
         dashboard's terminal, or the WebSocket at /api/v1/sandbox/{id}/terminal) and exec",
    )
}

async fn no_egress_policy() -> Response {
    not_implemented(
        "Per-sandbox egress lists are not available here: create the sandbox with network \
         access on or off (networkAccess, or network_allowlist [] / [\"*\"])",
    )
}

async fn no_images() -> Response {
    not_implemented(
        "Prime's image builds are not available here: build a template from a Dockerfile \
         (POST /api/v1/templates, `stockade template build -f Dockerfile . --name NAME`, or \
         E2B's Template SDK) and create sandboxes with docker_image \"NAME\"; or use an \
         image the Docker hosts can pull, or a snapshot",
    )
}

/// `DELETE /api/v1/sandbox`: the SDK's bulk delete, by ids or labels.
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn bulk_delete(
    Authed { state, caller }: Authed,
    ApiJson(req): ApiJson<PrimeBulkDeleteRequest>,
) -> ApiResult<Json<PrimeBulkDeleteResponse>> {
    if req.all_users {
        return Err(ServiceError::Forbidden(
            "Forbidden: all_users deletes other accounts' sandboxes; a caller deletes only its own"
                .into(),
        )
        .into());
    }
    if let Some(u) = &req.user_id {
        if u != caller.account.id.as_str() {
            return Err(
                ServiceError::Forbidden("Forbidden: user_id names another account".into()).into(),
            );
        }
    }
    let ids = req.sandbox_ids.unwrap_or_default();
    let labels = req.labels.unwrap_or_default();
    if ids.is_empty() && labels.is_empty() {
        return Err(ApiError::field(
            "sandbox_ids",
            "give sandbox_ids or labels to delete",
        ));
    }
    if ids.len() > MAX_BATCH {
        return Err(ApiError::field(
            "sandbox_ids",
            format!("at most {MAX_BATCH} ids per request"),
        ));
    }
    let team = match &req.team_id {
        None => None,
        Some(t) => {
            let team = stockade_core::TeamId::parse_field(t, "team_id")?;
            if !caller.scope.team_ids.contains(&team) {
                return Err(ServiceError::Forbidden(format!(
                    "Forbidden: you are not a member of team '{team}'"
                ))
                .into());
            }
            Some(team)
        }
    };
    let targets = state
        .svc
        .bulk_targets(
            &caller.scope,
            BulkSelection {
                ids: &ids,
                ids_field: "sandbox_ids",
                labels: &labels,
                team,
                max_by_labels: MAX_BATCH,
                live_only: true,
            },
        )
        .await?;
    let outcomes = lifecycle::destroy_many(&state.svc, targets, false).await;
    let (mut succeeded, mut failed) = (Vec::new(), Vec::new());
    for o in outcomes {
        match o.result {
            Ok(_) => succeeded.push(o.id),
            Err(e) => failed.push(BTreeMap::from([
                ("sandbox_id".to_owned(), o.id),
                ("error".to_owned(), ApiError::from(e).detail().message),
            ])),
        }
    }
    let message = format!(
        "{} sandbox(es) deleted, {} failed",
        succeeded.len(),
        failed.len()
    );
    Ok(Json(PrimeBulkDeleteResponse {
        succeeded,
        failed,
        message,
    }))
}

/// `POST /api/v1/sandbox/{id}/auth`: where the sandbox's gateway is (on
/// this server) and a token for it.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
async fn auth(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
) -> ApiResult<Json<PrimeGatewayAuth>> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    if sb.is_terminated() {
        return Err(ServiceError::Terminated(format!(
            "Sandbox {id} is terminated: there is no gateway to reach"
        ))
        .into());
    }
    let now = Utc::now();
    let expires_at = chrono::DateTime::from_timestamp((now + GATEWAY_TOKEN_TTL).timestamp(), 0)
        .ok_or_else(|| ServiceError::Internal("token expiry out of range".into()))?;
    // The caller holds it: it stops working when the caller loses access.
    let token = token::mint_for_holder(
        &state.proxy_keys,
        Purpose::Gateway,
        &sb,
        &caller.account.id,
        expires_at,
    );
    let base = PublicBase::from_request(&headers, &state.config);
    Ok(Json(PrimeGatewayAuth {
        gateway_url: format!("{}://{}{GATEWAY_PREFIX}", base.scheme, base.host),
        user_ns: caller.account.id.to_string(),
        job_id: sb.id.to_string(),
        token,
        expires_at,
    }))
}

/// The SDK's error type of a sandbox in ERROR or TERMINATED.
fn error_type(sb: &Sandbox) -> Option<String> {
    match sb.status {
        SandboxStatus::Error => Some("ERROR".into()),
        SandboxStatus::Terminated => Some("TERMINATED".into()),
        _ => None,
    }
}

/// `POST /api/v1/sandbox/status:batchGet`: the statuses of many sandboxes.
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
async fn status_batch(
    Authed { state, caller }: Authed,
    ApiJson(req): ApiJson<PrimeStatusBatchRequest>,
) -> ApiResult<Json<PrimeStatusBatchResponse>> {
    if req.sandbox_ids.len() > MAX_BATCH {
        return Err(ApiError::field(
            "sandbox_ids",
            format!("at most {MAX_BATCH} ids per request"),
        ));
    }
    let (mut statuses, mut errors) = (Vec::new(), Vec::new());
    for id in req.sandbox_ids {
        let lookup = match SandboxId::parse_field(&id, "sandbox_ids") {
            Ok(sid) => state.svc.sandbox(&caller.scope, &sid).await,
            Err(_) => Err(ServiceError::sandbox_not_found()),
        };
        match lookup {
            Ok(sb) => statuses.push(PrimeStatusSnapshot {
                sandbox_id: id,
                status: sb.status.to_string(),
                error_type: error_type(&sb),
                error_message: sb.status_reason.clone(),
            }),
            Err(ServiceError::Forbidden(_)) => errors.push(PrimeStatusLookupError {
                sandbox_id: id,
                code: "FORBIDDEN".into(),
                message: "this sandbox belongs to another account".into(),
            }),
            Err(ServiceError::NotFound(_)) => errors.push(PrimeStatusLookupError {
                sandbox_id: id,
                code: "NOT_FOUND".into(),
                message: "Sandbox not found".into(),
            }),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Json(PrimeStatusBatchResponse { statuses, errors }))
}

/// `GET /api/v1/sandbox/{id}/error-context`: the status and why.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
async fn error_context(
    AuthedId { state, caller, id }: AuthedId,
) -> ApiResult<Json<PrimeErrorContext>> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    Ok(Json(PrimeErrorContext {
        status: sb.status.to_string(),
        error_type: error_type(&sb),
        error_message: sb.status_reason.clone(),
    }))
}

fn checkpoint_of(s: &Snapshot) -> PrimeCheckpoint {
    PrimeCheckpoint {
        id: s.id.to_string(),
        sandbox_id: s.source_sandbox_id.to_string(),
        state: match s.status {
            SnapshotStatus::Ready => "DURABLE",
            SnapshotStatus::Creating => "PENDING",
            SnapshotStatus::Deleting => "DELETING",
            SnapshotStatus::Deleted => "DELETED",
        }
        .into(),
        depth: 0,
        docker_image: s.image_ref.clone(),
        stored_bytes: s.workspace_bytes,
        created_at: s.created_at,
        updated_at: s.deleted_at.unwrap_or(s.created_at),
    }
}

/// `POST /api/v1/sandbox/{id}/checkpoints`: a snapshot, restorable with
/// `checkpoint_id` on create.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
async fn create_checkpoint(
    AuthedId { state, caller, id }: AuthedId,
) -> ApiResult<(StatusCode, Json<PrimeCheckpoint>)> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    let snap = snapshots::capture(&state.svc, &caller.scope, &sb, None, SnapshotKind::User).await?;
    Ok((StatusCode::CREATED, Json(checkpoint_of(&snap))))
}

/// `GET /api/v1/sandbox/{id}/checkpoints`: oldest first.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
async fn list_checkpoints(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<serde_json::Value>> {
    let mut only = None;
    for (k, v) in query_pairs(raw.as_deref()) {
        match k.as_str() {
            "checkpoint_id" => only = Some(v),
            other => return Err(ApiError::field(other, "unknown query parameter")),
        }
    }
    let mut list: Vec<PrimeCheckpoint> = state
        .svc
        .snapshots_of(&caller.scope, &id)
        .await?
        .iter()
        .filter(|s| s.kind == SnapshotKind::User && s.deleted_at.is_none())
        .filter(|s| only.as_deref().is_none_or(|o| s.id.as_str() == o))
        .map(checkpoint_of)
        .collect();
    list.sort_by_key(|c| c.created_at);
    Ok(Json(serde_json::json!({ "checkpoints": list })))
}

/// `GET /api/v1/sandbox/checkpoints/{cid}`.
#[instrument(skip_all, fields(account.id = %caller.account.id, checkpoint = %cid), err(level = "debug", Display))]
async fn get_checkpoint(
    Authed { state, caller }: Authed,
    Path(cid): Path<String>,
) -> ApiResult<Json<PrimeCheckpoint>> {
    let snap = snapshots::load(&state.svc, &caller.scope, &cid, "checkpoint_id").await?;
    Ok(Json(checkpoint_of(&snap)))
}

/// `DELETE /api/v1/sandbox/checkpoints/{cid}`.
#[instrument(skip_all, fields(account.id = %caller.account.id, checkpoint = %cid), err(level = "debug", Display))]
async fn delete_checkpoint(
    Authed { state, caller }: Authed,
    Path(cid): Path<String>,
) -> ApiResult<StatusCode> {
    let snap = snapshots::load(&state.svc, &caller.scope, &cid, "checkpoint_id").await?;
    snapshots::delete(&state.svc, snap).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/v1/sandbox/{id}/checkpoints`: every checkpoint of one sandbox.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
async fn delete_sandbox_checkpoints(
    AuthedId { state, caller, id }: AuthedId,
) -> ApiResult<Json<serde_json::Value>> {
    let list = state.svc.snapshots_of(&caller.scope, &id).await?;
    let (mut deleted, mut errors) = (Vec::new(), Vec::new());
    for s in list
        .into_iter()
        .filter(|s| s.kind == SnapshotKind::User && s.deleted_at.is_none())
    {
        let sid = s.id.to_string();
        match snapshots::delete(&state.svc, s).await {
            Ok(_) => deleted.push(sid),
            Err(e) => errors.push(serde_json::json!({
                "checkpoint_id": sid, "code": "CONFLICT", "message": ApiError::from(e).detail().message,
            })),
        }
    }
    Ok(Json(
        serde_json::json!({ "deleted": deleted, "errors": errors }),
    ))
}

/// `POST /api/v1/sandbox/checkpoints:batchGet`.
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
async fn checkpoint_batch(
    Authed { state, caller }: Authed,
    ApiJson(req): ApiJson<serde_json::Value>,
) -> ApiResult<Json<serde_json::Value>> {
    let ids: Vec<String> = req
        .get("checkpoint_ids")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .ok_or_else(|| ApiError::field("checkpoint_ids", "a list of checkpoint ids is required"))?;
    if ids.len() > MAX_BATCH {
        return Err(ApiError::field(
            "checkpoint_ids",
            format!("at most {MAX_BATCH} ids per request"),
        ));
    }
    let (mut found, mut errors) = (Vec::new(), Vec::new());
    for id in ids {
        match snapshots::load(&state.svc, &caller.scope, &id, "checkpoint_ids").await {
            Ok(s) => found.push(checkpoint_of(&s)),
            Err(_) => errors.push(serde_json::json!({
                "checkpoint_id": id, "code": "NOT_FOUND", "message": "Checkpoint not found",
            })),
        }
    }
    Ok(Json(
        serde_json::json!({ "checkpoints": found, "errors": errors }),
    ))
}

/// A gateway error: plain JSON `{"error", "message"}` for the file routes,
/// a Connect error for the command service.
struct GatewayError {
    status: StatusCode,
    /// `sandbox_terminated`, `sandbox_not_found`, … (the file routes).
    error: &'static str,
    /// The Connect code (the command service).
    code: stockade_agent::connect::Code,
    message: String,
}

impl GatewayError {
    fn new(
        status: StatusCode,
        error: &'static str,
        code: stockade_agent::connect::Code,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            error,
            code,
            message: message.into(),
        }
    }

    fn plain(self) -> Response {
        (
            self.status,
            Json(serde_json::json!({ "error": self.error, "message": self.message })),
        )
            .into_response()
    }

    /// As a Connect answer: for a stream, HTTP 200 and an end-of-stream
    /// message with the error; for a unary call, the code's status and JSON.
    fn connect(self, request_content_type: &str) -> Response {
        let e = stockade_agent::connect::ConnectError::new(self.code, self.message);
        if request_content_type.starts_with("application/connect+") {
            let mut resp = Response::new(Body::from(stockade_agent::connect::end_stream(Some(&e))));
            if let Ok(v) = HeaderValue::from_str(request_content_type) {
                resp.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            return resp;
        }
        let status =
            StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            e.to_json().to_string(),
        )
            .into_response()
    }
}

impl From<ApiError> for GatewayError {
    fn from(e: ApiError) -> Self {
        use stockade_agent::connect::Code;
        let code = match e.status().as_u16() {
            400 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::NotFound,
            409 => Code::FailedPrecondition,
            429 => Code::ResourceExhausted,
            503 => Code::Unavailable,
            _ => Code::Internal,
        };
        let error = e.detail().code;
        let error: &'static str = match error.as_str() {
            "validation_failed" => "invalid_request",
            "not_found" => "not_found",
            "forbidden" => "forbidden",
            "unauthorized" => "unauthorized",
            _ => "gateway_error",
        };
        Self::new(e.status(), error, code, e.detail().message)
    }
}

/// The gateway's answer to a client past its rate limit: a Connect
/// `resource_exhausted` error for the command service, and
/// `{"error": "rate_limited", "message"}` with 429 for the file routes.
pub(crate) fn too_many_requests(path: &str, content_type: &str, message: String) -> Response {
    let e = GatewayError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        stockade_agent::connect::Code::ResourceExhausted,
        message,
    );
    if path.contains("/command_session.CommandSession/") {
        e.connect(content_type)
    } else {
        e.plain()
    }
}

/// The running sandbox a gateway request may reach: a gateway token of
/// that sandbox (`Authorization: Bearer stkg_…`), under its holder's path.
async fn gateway_sandbox(
    state: &AppState,
    headers: &HeaderMap,
    ns: &str,
    job: &str,
) -> Result<Sandbox, GatewayError> {
    use stockade_agent::connect::Code;
    let unauthorized = |m: &str| {
        GatewayError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            Code::Unauthenticated,
            m,
        )
    };
    let token = crate::extract::bearer_token(headers)
        .map(str::trim)
        .ok_or_else(|| {
            unauthorized(
                "The gateway needs `Authorization: Bearer <token>` with the token of POST \
                 /api/v1/sandbox/{id}/auth",
            )
        })?;
    let job_id = SandboxId::parse(job).ok();
    let (sb, claims) = match state
        .svc
        .sandbox_of_token(
            &state.proxy_keys,
            Purpose::Gateway,
            token,
            job_id.as_ref(),
            Utc::now(),
        )
        .await
    {
        Ok(found) => found,
        Err(token::Refused::OtherSandbox(other)) => {
            return Err(GatewayError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                Code::PermissionDenied,
                format!("Forbidden: this gateway token is for sandbox {other}, not {job}"),
            ))
        }
        Err(e @ (token::Refused::Disabled(_) | token::Refused::NoAccess)) => {
            return Err(GatewayError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                Code::PermissionDenied,
                format!("Forbidden: {e}"),
            ))
        }
        Err(token::Refused::Store(e)) => return Err(ApiError::from(e).into()),
        Err(e) => {
            return Err(unauthorized(&format!(
                "Invalid gateway token: {e}; ask POST /api/v1/sandbox/{{id}}/auth again"
            )))
        }
    };
    if claims.account_id.as_str() != ns {
        return Err(GatewayError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            Code::PermissionDenied,
            format!("Forbidden: this gateway token is not for the namespace {ns}"),
        ));
    }
    if sb.is_terminated() {
        return Err(GatewayError::new(
            StatusCode::GONE,
            "sandbox_terminated",
            Code::NotFound,
            format!("Sandbox {job} was deleted"),
        ));
    }
    // A paused sandbox is resumed first when its lifecycle auto-resumes.
    let sb = match stockade_service::pause::awake(&state.svc, sb).await {
        Ok(sb) => sb,
        Err(ServiceError::Paused(m)) => {
            return Err(GatewayError::new(
                StatusCode::CONFLICT,
                "sandbox_paused",
                Code::Unavailable,
                m,
            ))
        }
        Err(e) => return Err(ApiError::from(e).into()),
    };
    if !sb.can_exec() {
        return Err(GatewayError::new(
            StatusCode::CONFLICT,
            "sandbox_not_running",
            Code::Unavailable,
            format!(
                "Sandbox {job} is {}: start it (POST /api/v1/sandbox/{job}/start)",
                sb.status
            ),
        ));
    }
    Ok(sb)
}

/// `POST /gateway/{ns}/{job}/command_session.CommandSession/{method}`:
/// forwarded to the sandbox's agent, streaming.
async fn gateway_rpc(
    State(state): State<AppState>,
    Path((ns, job, method)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let sb = match gateway_sandbox(&state, req.headers(), &ns, &job).await {
        Ok(sb) => sb,
        Err(e) => return e.connect(&ct),
    };
    let path = format!("/command_session.CommandSession/{method}");
    match super::envd::forward_to_agent(&state, &sb, req, &path).await {
        Ok(r) => r,
        Err(e) => {
            let (status, message) = e.parts();
            GatewayError::new(
                status,
                "sandbox_unreachable",
                stockade_agent::connect::Code::Unavailable,
                message,
            )
            .connect(&ct)
        }
    }
}

/// The `path` of a gateway file request (the SDK also sends `sandbox_id`).
/// A negative `offset` counts from the end of the file (the SDK reads the
/// tail of a job's output so).
fn file_query(raw: Option<&str>) -> Result<(String, Option<i64>, Option<u64>), ApiError> {
    let (mut path, mut offset, mut length) = (None, None, None);
    for (k, v) in query_pairs(raw) {
        match k.as_str() {
            "path" => path = Some(v),
            "sandbox_id" => {}
            "offset" => {
                offset = Some(v.parse::<i64>().map_err(|_| {
                    ApiError::field("offset", "a whole number of bytes (negative: from the end)")
                })?)
            }
            "length" => {
                length = Some(
                    v.parse::<u64>()
                        .map_err(|_| ApiError::field("length", "a whole number of bytes"))?,
                )
            }
            other => return Err(ApiError::field(other, "unknown query parameter")),
        }
    }
    let path = path
        .filter(|p| !p.is_empty() && !p.contains('\0'))
        .ok_or_else(|| ApiError::field("path", "the file's path in the sandbox is required"))?;
    Ok((path, offset, length))
}

fn files_path(path: &str) -> String {
    let q: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("path", path)
        .finish();
    format!("/files?{q}")
}

/// An agent error answer turned into the gateway's.
async fn agent_error(resp: Response) -> Response {
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 64 << 10)
        .await
        .unwrap_or_default();
    let message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    let error = match status.as_u16() {
        404 => "file_not_found",
        400 => "invalid_request",
        507 => "disk_full",
        _ => "sandbox_error",
    };
    (
        status,
        Json(serde_json::json!({ "error": error, "message": message })),
    )
        .into_response()
}

/// A gateway file request: the sandbox its token reaches under
/// `/gateway/{ns}/{job}` and what its query names. Rejected with the
/// gateway's plain error body.
struct GatewayFile {
    sb: Sandbox,
    path: String,
    offset: Option<i64>,
    length: Option<u64>,
}

impl axum::extract::FromRequestParts<AppState> for GatewayFile {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Response> {
        let Path((ns, job)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let sb = gateway_sandbox(state, &parts.headers, &ns, &job)
            .await
            .map_err(GatewayError::plain)?;
        let (path, offset, length) =
            file_query(parts.uri.query()).map_err(|e| GatewayError::from(e).plain())?;
        Ok(Self {
            sb,
            path,
            offset,
            length,
        })
    }
}

/// `POST /gateway/{ns}/{job}/upload?path=…`: the multipart `file` part
/// written to `path` (streamed through to the agent).
async fn gateway_upload(
    State(state): State<AppState>,
    GatewayFile { sb, path, .. }: GatewayFile,
    req: Request,
) -> Response {
    let resp = match super::envd::forward_to_agent(&state, &sb, req, &files_path(&path)).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if !resp.status().is_success() {
        return agent_error(resp).await;
    }
    let size = match state.svc.agent(&sb).await {
        Ok(Some(client)) => client.stat(&path).await.map(|e| e.size.max(0) as u64),
        _ => Ok(0),
    };
    match size {
        Ok(size) => Json(PrimeUploadResponse {
            success: true,
            path,
            size,
            timestamp: Utc::now(),
        })
        .into_response(),
        Err(e) => GatewayError::new(
            StatusCode::BAD_GATEWAY,
            "sandbox_error",
            stockade_agent::connect::Code::Internal,
            format!("the file was written but could not be read back: {e}"),
        )
        .plain(),
    }
}

/// `GET /gateway/{ns}/{job}/download?path=…`: the file's bytes, streamed.
async fn gateway_download(
    State(state): State<AppState>,
    GatewayFile { sb, path, .. }: GatewayFile,
    req: Request,
) -> Response {
    match super::envd::forward_to_agent(&state, &sb, req, &files_path(&path)).await {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => agent_error(r).await,
        Err(e) => e.into_response(),
    }
}

/// `GET /gateway/{ns}/{job}/read-file?path=…[&offset=&length=]`: a text
/// file (or a window of it) as JSON; a file above 16 MiB needs a window.
async fn gateway_read_file(
    State(state): State<AppState>,
    GatewayFile {
        sb,
        path,
        offset,
        length,
    }: GatewayFile,
) -> Response {
    match read_window(&state, &sb, &path, offset.unwrap_or(0), length).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => e.plain(),
    }
}

async fn read_window(
    state: &AppState,
    sb: &Sandbox,
    path: &str,
    offset: i64,
    length: Option<u64>,
) -> Result<PrimeReadFileResponse, GatewayError> {
    use stockade_agent::client::ClientError;
    use stockade_agent::connect::Code;
    let client = state
        .svc
        .agent(sb)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| {
            GatewayError::new(
                StatusCode::BAD_GATEWAY,
                "sandbox_unreachable",
                Code::Unavailable,
                format!("Sandbox {} has no in-sandbox agent", sb.id),
            )
        })?;
    let mut dl = client.download(path).await.map_err(|e| match e {
        ClientError::Http {
            status: 404,
            message,
        } => GatewayError::new(
            StatusCode::NOT_FOUND,
            "file_not_found",
            Code::NotFound,
            message,
        ),
        ClientError::Http { status, message } => GatewayError::new(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            "sandbox_error",
            Code::Internal,
            message,
        ),
        other => GatewayError::new(
            StatusCode::BAD_GATEWAY,
            "sandbox_unreachable",
            Code::Unavailable,
            other.to_string(),
        ),
    })?;
    let total = dl.size.unwrap_or(0);
    let offset = if offset < 0 {
        total.saturating_sub(offset.unsigned_abs())
    } else {
        (offset as u64).min(total)
    };
    let want = length.unwrap_or(u64::MAX).min(total.saturating_sub(offset));
    if want > MAX_READ_BYTES {
        return Err(GatewayError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "file_too_large",
            Code::ResourceExhausted,
            format!(
                "{path} holds {total} bytes: read at most {MAX_READ_BYTES} at once (offset and \
                 length), or download it"
            ),
        ));
    }
    let mut out = Vec::with_capacity(want as usize);
    let mut pos = 0u64;
    while let Some(chunk) = dl.chunk().await {
        let chunk = chunk.map_err(|e| {
            GatewayError::new(
                StatusCode::BAD_GATEWAY,
                "sandbox_error",
                Code::Internal,
                e.to_string(),
            )
        })?;
        let start = offset.saturating_sub(pos).min(chunk.len() as u64) as usize;
        let room = (want - out.len() as u64) as usize;
        let end = (start + room).min(chunk.len());
        out.extend_from_slice(&chunk[start..end]);
        pos += chunk.len() as u64;
        if out.len() as u64 >= want {
            break;
        }
    }
    let size = out.len() as u64;
    Ok(PrimeReadFileResponse {
        content: String::from_utf8_lossy(&out).into_owned(),
        size,
        total_size: total,
        offset,
        truncated: offset > 0 || offset + size < total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prime_client_is_recognised() {
        let agent = |a| HeaderMap::from_iter([(header::USER_AGENT, HeaderValue::from_static(a))]);
        assert!(!wants_argv_start_command(&HeaderMap::new()));
        assert!(!wants_argv_start_command(&agent("python-requests/2.32")));
        assert!(wants_argv_start_command(&agent(
            "prime-sandboxes/0.5.1 python/3.11.7"
        )));
    }

    #[test]
    fn file_queries_need_a_path() {
        assert_eq!(
            file_query(Some("path=%2Fa%20b&sandbox_id=x")).unwrap(),
            ("/a b".into(), None, None)
        );
        assert_eq!(
            file_query(Some("path=/a&offset=2&length=3")).unwrap(),
            ("/a".into(), Some(2), Some(3))
        );
        assert_eq!(
            file_query(Some("path=/a&offset=-10")).unwrap(),
            ("/a".into(), Some(-10), None)
        );
        for bad in [
            "",
            "path=",
            "path=/a&offset=x",
            "path=/a&length=-1",
            "path=/a&x=1",
        ] {
            assert!(file_query(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(files_path("/a b&c"), "/files?path=%2Fa+b%26c");
    }
}
