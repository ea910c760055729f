//! `/api/v1/sandbox…/ports` and `/auth-token`: expose and unexpose sandbox
//! ports at run time and hand out the short-lived tokens the proxy
//! asks for. A sandbox's exposed ports are its `spec.ports`, changed
//! with optimistic updates; the proxy reads them on every request, so a
//! change applies at once.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use stockade_api::{
    AuthTokenRequest, AuthTokenResponse, ErrorBody, ExposePortRequest, ExposedPort, PortsResponse,
};
use stockade_core::spec::parse_port;
use stockade_core::Sandbox;
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::{ApiError, ApiResult};
use crate::extract::{parse_json, query_pairs, ApiJson, Authed, AuthedId};
use crate::proxy::{parse_port_segment, token::Claims, PublicBase};
use crate::routes::apidoc::{AccessErrors, BadRequest};
use crate::AppState;
use stockade_service::lifecycle;
use stockade_service::ServiceError;

/// The longest lifetime a sandbox token may ask for.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// The routes of this module, relative to `/api/v1`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sandbox/ports", get(list_all))
        .route("/sandbox/{id}/ports", get(list).post(expose))
        .route("/sandbox/{id}/ports/{port}", delete(unexpose))
        .route("/sandbox/{id}/auth-token", post(auth_token))
}

#[derive(OpenApi)]
#[openapi(
    paths(list, expose, unexpose, list_all, auth_token, crate::proxy::by_path),
    components(schemas(
        ExposePortRequest, ExposedPort, PortsResponse, AuthTokenRequest, AuthTokenResponse,
    )),
    tags((name = "ports", description = "Exposed ports, the reverse proxy and sandbox tokens"))
)]
pub struct PortsApi;

fn ports_of(sb: &Sandbox, base: &PublicBase, state: &AppState) -> Vec<ExposedPort> {
    sb.spec
        .ports
        .iter()
        .map(|p| base.exposed_port(&state.config, &sb.id, *p))
        .collect()
}

/// The exposed ports of a sandbox and their proxy URLs.
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/ports", tag = "ports",
    params(("id" = String, Path, description = "sandbox id")),
    responses((status = 200, body = PortsResponse), AccessErrors))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn list(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
) -> ApiResult<Json<PortsResponse>> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    let base = PublicBase::from_request(&headers, &state.config);
    Ok(Json(PortsResponse {
        ports: ports_of(&sb, &base, &state),
    }))
}

/// Expose a port: reachable through the proxy at once. Idempotent: 201 when
/// newly exposed, 200 when it already was.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/ports", tag = "ports",
    params(("id" = String, Path, description = "sandbox id")),
    request_body = ExposePortRequest,
    responses(
        (status = 201, description = "Exposed", body = ExposedPort),
        (status = 200, description = "Already exposed", body = ExposedPort),
        (status = 400, description = "Not a port, or too many exposed", body = ErrorBody),
        AccessErrors,
        (status = 409, description = "Terminated, or created without network access", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn expose(
    AuthedId { state, caller, id }: AuthedId,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ExposePortRequest>,
) -> ApiResult<(StatusCode, Json<ExposedPort>)> {
    let port = parse_port(req.port, "port")?;
    let (sb, changed) = state.svc.expose_port(&caller.scope, &id, port).await?;
    let base = PublicBase::from_request(&headers, &state.config);
    let status = if changed {
        tracing::info!(sandbox.id = %sb.id, port, "port exposed");
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(base.exposed_port(&state.config, &sb.id, port))))
}

/// Unexpose a port: the proxy answers 404 for it from the next request on.
#[utoipa::path(delete, path = "/api/v1/sandbox/{id}/ports/{port}", tag = "ports",
    params(("id" = String, Path, description = "sandbox id"), ("port" = u16, Path, description = "an exposed port")),
    responses(
        (status = 200, description = "The ports still exposed", body = PortsResponse),
        BadRequest, (status = 403, body = ErrorBody),
        (status = 404, description = "Unknown sandbox, or the port is not exposed", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id, port = %port), err(level = "debug", Display))]
pub async fn unexpose(
    Authed { state, caller }: Authed,
    Path((id, port)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Json<PortsResponse>> {
    let port = parse_port_segment(&port)?;
    let sb = state.svc.unexpose_port(&caller.scope, &id, port).await?;
    tracing::info!(sandbox.id = %sb.id, port, "port unexposed");
    let base = PublicBase::from_request(&headers, &state.config);
    Ok(Json(PortsResponse {
        ports: ports_of(&sb, &base, &state),
    }))
}

/// The exposed ports of all the caller's running sandboxes.
#[utoipa::path(get, path = "/api/v1/sandbox/ports", tag = "ports",
    responses((status = 200, body = PortsResponse), BadRequest))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list_all(
    Authed { state, caller }: Authed,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Json<PortsResponse>> {
    if let Some((k, _)) = query_pairs(raw.as_deref()).into_iter().next() {
        return Err(ApiError::field(k, "unknown query parameter"));
    }
    let base = PublicBase::from_request(&headers, &state.config);
    let ports = state
        .svc
        .running_sandboxes(&caller.scope)
        .await?
        .iter()
        .flat_map(|sb| ports_of(sb, &base, &state))
        .collect();
    Ok(Json(PortsResponse { ports }))
}

/// A short-lived token that opens this sandbox's exposed ports through the
/// proxy and nothing else. The body is optional.
#[utoipa::path(post, path = "/api/v1/sandbox/{id}/auth-token", tag = "ports",
    params(("id" = String, Path, description = "sandbox id")),
    request_body(content = Option<AuthTokenRequest>, description = "optional"),
    responses(
        (status = 200, body = AuthTokenResponse),
        (status = 400, description = "ttlSeconds out of range", body = ErrorBody),
        AccessErrors,
        (status = 409, description = "Terminated", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn auth_token(
    AuthedId { state, caller, id }: AuthedId,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<AuthTokenResponse>> {
    let body =
        body.map_err(|e| ApiError::field("body", format!("could not read the request body: {e}")))?;
    let req: AuthTokenRequest = if body.iter().all(u8::is_ascii_whitespace) {
        AuthTokenRequest::default()
    } else {
        parse_json(&body)?
    };
    let max = MAX_TOKEN_TTL.as_secs() as i64;
    let ttl = match req.ttl_seconds {
        None => state.config.sandbox_token_ttl.as_secs() as i64,
        Some(t) if (1..=max).contains(&t) => t,
        Some(_) => {
            return Err(ApiError::field(
                "ttlSeconds",
                format!("must be whole seconds from 1 to {max}"),
            ))
        }
    };
    let sb = state.svc.sandbox_for_port_token(&caller.scope, &id).await?;
    // Whole seconds, rounded up: the token lives at least `ttl` seconds.
    let now = Utc::now();
    let now_secs = now.timestamp() + i64::from(now.timestamp_subsec_nanos() > 0);
    let expires_at = DateTime::from_timestamp(now_secs + ttl, 0)
        .ok_or_else(|| ServiceError::Internal("token expiry out of range".into()))?;
    // The caller holds it: it stops working when the caller loses access.
    let token = state.proxy_keys.mint(&Claims {
        sandbox_id: sb.id.clone(),
        account_id: caller.account.id.clone(),
        expires_at,
    });
    Ok(Json(AuthTokenResponse {
        token,
        expires_at,
        sandbox_id: sb.id.to_string(),
    }))
}
