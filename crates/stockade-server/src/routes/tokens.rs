//! Credentials as resources: an account's API tokens (made, listed, revoked)
//! and its dashboard sessions; an administrator disables and enables
//! accounts. A revoked token or a disabled account is refused on the next
//! request: every request looks its credential up.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use chrono::{Duration, SubsecRound, Utc};
use stockade_api::{
    AccountResponse, CreateTokenRequest, CreateTokenResponse, EmptyRequest, ErrorBody,
    ListTokensResponse, TokenResponse,
};
use stockade_core::{AccountId, TokenId, TokenRecord};
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::{ApiError, ApiResult};
use crate::extract::{AdminCaller, ApiJson, Authed, Caller};
use crate::routes::apidoc::{AccountErrors, AdminOnly, BadRequest, NoSuchAccount};
use crate::AppState;
use stockade_service::ServiceError;

/// The shortest and longest life a token may be given.
const MIN_TOKEN_SECONDS: i64 = 60;
const MAX_TOKEN_SECONDS: i64 = 10 * 365 * 24 * 3600;

/// The routes, relative to `/api/v1`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/accounts/{account_id}/tokens",
            get(list_tokens).post(create_token),
        )
        .route("/tokens/{token_id}", delete(revoke_token))
        .route("/accounts/{account_id}/disable", post(disable))
        .route("/accounts/{account_id}/enable", post(enable))
}

#[derive(OpenApi)]
#[openapi(
    paths(create_token, list_tokens, revoke_token, disable, enable),
    components(schemas(
        CreateTokenRequest,
        CreateTokenResponse,
        TokenResponse,
        ListTokensResponse,
        EmptyRequest,
    ))
)]
pub struct TokensApi;

/// The account a caller may manage the credentials of: its own, or any
/// when it is an administrator (another account is 403 for others).
fn managed_account(caller: &Caller, raw: &str) -> ApiResult<AccountId> {
    let id = AccountId::parse_field(raw, "account_id")?;
    if !caller.account.is_admin && caller.account.id != id {
        return Err(ServiceError::Forbidden(
            "Only administrators manage the tokens of another account".into(),
        )
        .into());
    }
    Ok(id)
}

/// Make an API token of the account: for the account itself and for
/// administrators. The secret is in this answer only.
#[utoipa::path(post, path = "/api/v1/accounts/{account_id}/tokens", tag = "accounts",
    params(("account_id" = String, Path, description = "account id")),
    request_body = CreateTokenRequest,
    responses((status = 201, body = CreateTokenResponse),
              (status = 400, description = "A field is invalid (it is named)", body = ErrorBody),
              AccountErrors))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn create_token(
    Authed { state, caller }: Authed,
    Path(account_id): Path<String>,
    ApiJson(req): ApiJson<CreateTokenRequest>,
) -> ApiResult<(StatusCode, Json<CreateTokenResponse>)> {
    let id = managed_account(&caller, &account_id)?;
    let name = TokenRecord::parse_name(&req.name)?;
    let now = Utc::now().trunc_subsecs(0);
    let expires_at = match req.expires_in_seconds {
        None => None,
        Some(s) if (MIN_TOKEN_SECONDS..=MAX_TOKEN_SECONDS).contains(&s) => {
            Some(now + Duration::seconds(s))
        }
        Some(_) => {
            return Err(ApiError::field(
                "expiresInSeconds",
                format!("must be {MIN_TOKEN_SECONDS} to {MAX_TOKEN_SECONDS} seconds, or absent for a token that does not expire"),
            ))
        }
    };
    let (record, secret) = state
        .svc
        .create_api_token(&id, name, now, expires_at)
        .await?;
    tracing::info!(token.id = %record.id, token.account.id = %id, "API token created");
    Ok((
        StatusCode::CREATED,
        Json(CreateTokenResponse {
            id: record.id.to_string(),
            name: record.name,
            token: secret.plaintext().to_owned(),
            created_at: record.created_at,
            expires_at: record.expires_at,
        }),
    ))
}

/// The account's API tokens and dashboard sessions, newest first, without
/// their secrets.
#[utoipa::path(get, path = "/api/v1/accounts/{account_id}/tokens", tag = "accounts",
    params(("account_id" = String, Path, description = "account id")),
    responses((status = 200, body = ListTokensResponse),
              BadRequest,
              AccountErrors))]
pub async fn list_tokens(
    Authed { state, caller }: Authed,
    Path(account_id): Path<String>,
) -> ApiResult<Json<ListTokensResponse>> {
    let id = managed_account(&caller, &account_id)?;
    let tokens = state.svc.list_tokens(&id).await?;
    Ok(Json(ListTokensResponse {
        tokens: tokens.iter().map(TokenResponse::from).collect(),
    }))
}

/// Revoke an API token (and the dashboard sessions opened with it) or end
/// a session: refused from the next request on. The token's account and
/// administrators may; for anyone else the token does not exist.
#[utoipa::path(delete, path = "/api/v1/tokens/{token_id}", tag = "accounts",
    params(("token_id" = String, Path, description = "token id (from the list, never the secret)")),
    responses((status = 204, description = "Revoked"),
              BadRequest,
              (status = 404, description = "No such token of the caller's", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn revoke_token(
    Authed { state, caller }: Authed,
    Path(token_id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = TokenId::parse_field(&token_id, "token_id")?;
    let token = state.svc.revoke_token(&caller.account, &id).await?;
    tracing::info!(token.id = %id, token.account.id = %token.account_id, kind = token.kind.as_str(), "token revoked");
    Ok(StatusCode::NO_CONTENT)
}

async fn set_disabled(
    state: &AppState,
    admin: &AdminCaller,
    raw: &str,
    disable: bool,
) -> ApiResult<Json<AccountResponse>> {
    let id = AccountId::parse_field(raw, "account_id")?;
    let account = state
        .svc
        .set_account_disabled(&admin.0.account, &id, disable)
        .await?;
    tracing::info!(target.account.id = %id, disabled = disable, "account {}", if disable { "disabled" } else { "enabled" });
    Ok(Json(AccountResponse::from(&account)))
}

/// Disable an account (administrators): its API tokens, dashboard sessions
/// and sandbox tokens are refused (403) until it is enabled. Its sandboxes
/// are left as they are.
#[utoipa::path(post, path = "/api/v1/accounts/{account_id}/disable", tag = "accounts",
    params(("account_id" = String, Path, description = "account id")),
    request_body = EmptyRequest,
    responses((status = 200, body = AccountResponse),
              AdminOnly,
              NoSuchAccount,
              (status = 409, description = "The caller's own account", body = ErrorBody)))]
pub async fn disable(
    Authed { state, caller }: Authed<AdminCaller>,
    Path(account_id): Path<String>,
    ApiJson(_): ApiJson<EmptyRequest>,
) -> ApiResult<Json<AccountResponse>> {
    set_disabled(&state, &caller, &account_id, true).await
}

/// Enable a disabled account again (administrators): its tokens and
/// sessions work as before.
#[utoipa::path(post, path = "/api/v1/accounts/{account_id}/enable", tag = "accounts",
    params(("account_id" = String, Path, description = "account id")),
    request_body = EmptyRequest,
    responses((status = 200, body = AccountResponse),
              AdminOnly,
              NoSuchAccount))]
pub async fn enable(
    Authed { state, caller }: Authed<AdminCaller>,
    Path(account_id): Path<String>,
    ApiJson(_): ApiJson<EmptyRequest>,
) -> ApiResult<Json<AccountResponse>> {
    set_disabled(&state, &caller, &account_id, false).await
}
