//! `/api/v1/teams…`: administrators create teams and manage their members;
//! everyone lists the teams they belong to. Membership is read with the
//! token on every request, so a change applies to the very next call.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use stockade_api::{
    AddTeamMemberRequest, CreateTeamRequest, ErrorBody, ListTeamsResponse, TeamResponse,
};
use stockade_core::team::parse_team_name;
use stockade_core::{AccountId, Team};
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::ApiResult;
use crate::extract::{AdminCaller, ApiJson, Authed};
use crate::routes::apidoc::{AdminOnly, BadRequest};
use crate::AppState;

/// The team routes, relative to `/api/v1`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/teams", post(create).get(list))
        .route("/teams/{team_id}", get(get_one))
        .route("/teams/{team_id}/members", post(add_member))
        .route(
            "/teams/{team_id}/members/{account_id}",
            delete(remove_member),
        )
}

#[derive(OpenApi)]
#[openapi(
    paths(create, list, get_one, add_member, remove_member),
    components(schemas(
        stockade_api::CreateTeamRequest, stockade_api::AddTeamMemberRequest,
        stockade_api::TeamResponse, stockade_api::TeamMember, stockade_api::ListTeamsResponse,
    )),
    tags((name = "teams", description = "Teams of accounts that share sandboxes"))
)]
pub struct TeamsApi;

async fn respond(state: &AppState, team: &Team) -> ApiResult<Json<TeamResponse>> {
    let members = state.svc.team_members(&team.id).await?;
    Ok(Json(TeamResponse::new(team, &members)))
}

/// Create a team.
#[utoipa::path(post, path = "/api/v1/teams", tag = "teams",
    request_body = CreateTeamRequest,
    responses(
        (status = 201, description = "Created, without members", body = TeamResponse),
        (status = 400, description = "The name is invalid", body = ErrorBody),
        AdminOnly,
        (status = 409, description = "A team with this name exists", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id), err(level = "debug", Display))]
pub async fn create(
    Authed { state, caller }: Authed<AdminCaller>,
    ApiJson(req): ApiJson<CreateTeamRequest>,
) -> ApiResult<(StatusCode, Json<TeamResponse>)> {
    let name = parse_team_name(&req.name, "name")?;
    let team = state.svc.create_team(&name).await?;
    tracing::info!(team.id = %team.id, team.name = %team.name, "team created");
    Ok((StatusCode::CREATED, Json(TeamResponse::new(&team, &[]))))
}

/// List teams: every team for an administrator, one's own teams otherwise.
#[utoipa::path(get, path = "/api/v1/teams", tag = "teams",
    responses((status = 200, body = ListTeamsResponse), (status = 401, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list(Authed { state, caller }: Authed) -> ApiResult<Json<ListTeamsResponse>> {
    let teams = state.svc.teams_for(&caller.account).await?;
    let mut out = Vec::with_capacity(teams.len());
    for team in &teams {
        out.push(respond(&state, team).await?.0);
    }
    Ok(Json(ListTeamsResponse { teams: out }))
}

/// One team and its members (administrators and members only).
#[utoipa::path(get, path = "/api/v1/teams/{team_id}", tag = "teams",
    params(("team_id" = String, Path, description = "team id")),
    responses((status = 200, body = TeamResponse), (status = 403, description = "Not a member", body = ErrorBody),
              (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id, team.id = %team_id), err(level = "debug", Display))]
pub async fn get_one(
    Authed { state, caller }: Authed,
    Path(team_id): Path<String>,
) -> ApiResult<Json<TeamResponse>> {
    let team = state
        .svc
        .team_for(&caller.account, &caller.scope.team_ids, &team_id)
        .await?;
    respond(&state, &team).await
}

/// Add an account to a team (already a member is fine).
#[utoipa::path(post, path = "/api/v1/teams/{team_id}/members", tag = "teams",
    params(("team_id" = String, Path, description = "team id")),
    request_body = AddTeamMemberRequest,
    responses((status = 200, description = "The team with its members", body = TeamResponse),
              BadRequest, AdminOnly,
              (status = 404, description = "Unknown team or account", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id, team.id = %team_id), err(level = "debug", Display))]
pub async fn add_member(
    Authed { state, caller }: Authed<AdminCaller>,
    Path(team_id): Path<String>,
    ApiJson(req): ApiJson<AddTeamMemberRequest>,
) -> ApiResult<Json<TeamResponse>> {
    let team = state.svc.team(&team_id).await?;
    let account = AccountId::parse_field(&req.account_id, "accountId")?;
    state.svc.add_team_member(&team.id, &account).await?;
    tracing::info!(team.id = %team.id, member.id = %account, "team member added");
    respond(&state, &team).await
}

/// Remove an account from a team.
#[utoipa::path(delete, path = "/api/v1/teams/{team_id}/members/{account_id}", tag = "teams",
    params(("team_id" = String, Path, description = "team id"),
           ("account_id" = String, Path, description = "account id")),
    responses((status = 200, description = "The team with its remaining members", body = TeamResponse),
              BadRequest, AdminOnly,
              (status = 404, description = "Unknown team, or the account is not a member", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id, team.id = %team_id), err(level = "debug", Display))]
pub async fn remove_member(
    Authed { state, caller }: Authed<AdminCaller>,
    Path((team_id, account_id)): Path<(String, String)>,
) -> ApiResult<Json<TeamResponse>> {
    let team = state.svc.team(&team_id).await?;
    let account = AccountId::parse_field(&account_id, "account_id")?;
    state.svc.remove_team_member(&team.id, &account).await?;
    tracing::info!(team.id = %team.id, member.id = %account, "team member removed");
    respond(&state, &team).await
}
