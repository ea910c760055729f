//! `/api/v1/hosts…`: administrators register the Docker hosts sandboxes are
//! placed on, see their health, load and capacity, cordon, uncordon and
//! drain them, and remove empty ones. Tenants get 403.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::Json;
use stockade_api::{
    CreateHostRequest, ErrorBody, HostResponse, ListHostsResponse, UpdateHostRequest,
};
use stockade_core::Resources;
use stockade_service::host_admin;
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::ApiResult;
use crate::extract::{AdminCaller, ApiJson, Authed};
use crate::routes::apidoc::{AdminOnly, InvalidField};

#[derive(OpenApi)]
#[openapi(
    paths(create, list, get_one, update, remove),
    components(schemas(
        stockade_api::CreateHostRequest, stockade_api::UpdateHostRequest,
        stockade_api::HostTlsFiles, stockade_api::HostCapacityInput,
        stockade_api::HostResponse, stockade_api::HostCapacity, stockade_api::HostHealthResponse,
        stockade_api::HostReserved, stockade_api::ListHostsResponse,
    )),
    tags((name = "hosts", description = "The Docker hosts sandboxes are placed on (administrators only)"))
)]
pub struct HostsApi;

/// Register a Docker host. The server connects to its engine first; one it
/// cannot reach is refused (400 naming `dockerHost`). A `tcp://` engine
/// without TLS is registered with a warning in `warnings` (and the log):
/// whoever reaches its port is root on that host.
#[utoipa::path(post, path = "/api/v1/hosts", tag = "hosts",
    request_body = CreateHostRequest,
    responses(
        (status = 201, description = "Registered; it takes new sandboxes", body = HostResponse),
        (status = 400, description = "A field is invalid, or the engine cannot be reached", body = ErrorBody),
        AdminOnly,
        (status = 409, description = "A host with this name exists", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id, host.name = %req.name), err(level = "debug", Display))]
pub async fn create(
    Authed { state, caller }: Authed<AdminCaller>,
    ApiJson(req): ApiJson<CreateHostRequest>,
) -> ApiResult<(StatusCode, Json<HostResponse>)> {
    let host = host_admin::register(&state.svc, &req).await?;
    Ok((
        StatusCode::CREATED,
        Json(HostResponse::new(&host, false, 0, Resources::default())),
    ))
}

/// List every Docker host with its state, health, capacity and load.
#[utoipa::path(get, path = "/api/v1/hosts", tag = "hosts",
    responses(
        (status = 200, body = ListHostsResponse),
        AdminOnly,
    ))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id), err(level = "debug", Display))]
pub async fn list(
    Authed { state, caller }: Authed<AdminCaller>,
) -> ApiResult<Json<ListHostsResponse>> {
    let hosts = host_admin::list(&state.svc).await?;
    Ok(Json(ListHostsResponse {
        hosts: hosts.iter().map(host_admin::HostView::response).collect(),
    }))
}

/// One Docker host.
#[utoipa::path(get, path = "/api/v1/hosts/{name}", tag = "hosts",
    params(("name" = String, Path, description = "host name")),
    responses(
        (status = 200, body = HostResponse),
        AdminOnly,
        (status = 404, body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id, host.name = %name), err(level = "debug", Display))]
pub async fn get_one(
    Authed { state, caller }: Authed<AdminCaller>,
    Path(name): Path<String>,
) -> ApiResult<Json<HostResponse>> {
    Ok(Json(host_admin::get(&state.svc, &name).await?.response()))
}

/// Change a Docker host: cordon it (`"state": "cordoned"`: no new
/// sandboxes; what runs there stays), uncordon it (`"active"`), drain it
/// (`"draining"`), or replace its labels, capacity or address.
#[utoipa::path(patch, path = "/api/v1/hosts/{name}", tag = "hosts",
    params(("name" = String, Path, description = "host name")),
    request_body = UpdateHostRequest,
    responses(
        (status = 200, description = "The host as changed", body = HostResponse),
        InvalidField,
        AdminOnly,
        (status = 404, body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id, host.name = %name), err(level = "debug", Display))]
pub async fn update(
    Authed { state, caller }: Authed<AdminCaller>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<UpdateHostRequest>,
) -> ApiResult<Json<HostResponse>> {
    host_admin::update(&state.svc, &name, &req).await?;
    Ok(Json(host_admin::get(&state.svc, &name).await?.response()))
}

/// Remove a Docker host that holds no sandbox (terminated ones aside). The
/// server's own host cannot be removed.
#[utoipa::path(delete, path = "/api/v1/hosts/{name}", tag = "hosts",
    params(("name" = String, Path, description = "host name")),
    responses(
        (status = 204, description = "Removed"),
        AdminOnly,
        (status = 404, body = ErrorBody),
        (status = 409, description = "The server's own host, or one that holds sandboxes", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id, host.name = %name), err(level = "debug", Display))]
pub async fn remove(
    Authed { state, caller }: Authed<AdminCaller>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    host_admin::remove(&state.svc, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
