//! `/api/v1/accounts` (admin only) and `/api/v1/me`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use stockade_api::{
    AccountResponse, CreateAccountRequest, CreateAccountResponse, ErrorBody, ListAccountsResponse,
    WhoAmIResponse,
};
use stockade_core::ApiToken;
use stockade_store::StoreError;
use tracing::instrument;

use crate::error::{ApiError, ApiResult};
use crate::extract::{AdminCaller, ApiJson, Caller};
use crate::AppState;

fn check_account_name(name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'@'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::field(
            "name",
            "must be 1 to 63 characters from letters, digits and _ . - @",
        ))
    }
}

/// Create an account and its first API token (shown once).
#[utoipa::path(post, path = "/api/v1/accounts", tag = "accounts",
    request_body = CreateAccountRequest,
    responses((status = 201, body = CreateAccountResponse), (status = 400, body = ErrorBody),
              (status = 403, description = "Not an administrator", body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
#[instrument(skip_all, fields(account.id = %admin.0.account.id), err(level = "debug", Display))]
pub async fn create(
    State(state): State<AppState>,
    admin: AdminCaller,
    ApiJson(req): ApiJson<CreateAccountRequest>,
) -> ApiResult<(StatusCode, Json<CreateAccountResponse>)> {
    check_account_name(&req.name)?;
    let account = state
        .svc
        .store
        .create_account(&req.name, req.is_admin)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => {
                ApiError::Conflict(format!("An account named '{}' already exists", req.name))
            }
            other => other.into(),
        })?;
    let token = ApiToken::generate();
    state
        .svc
        .store
        .add_token(&account.id, &token.hash())
        .await?;
    tracing::info!(new_account.id = %account.id, name = %account.name, "account created");
    Ok((
        StatusCode::CREATED,
        Json(CreateAccountResponse {
            account: AccountResponse::from(&account),
            token: token.plaintext().to_owned(),
        }),
    ))
}

/// List accounts.
#[utoipa::path(get, path = "/api/v1/accounts", tag = "accounts",
    responses((status = 200, body = ListAccountsResponse), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    _admin: AdminCaller,
) -> ApiResult<Json<ListAccountsResponse>> {
    let accounts = state.svc.store.list_accounts().await?;
    Ok(Json(ListAccountsResponse {
        accounts: accounts.iter().map(AccountResponse::from).collect(),
    }))
}

/// The account the token belongs to.
#[utoipa::path(get, path = "/api/v1/me", tag = "accounts",
    responses((status = 200, body = WhoAmIResponse), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn me(caller: Caller) -> Json<WhoAmIResponse> {
    Json(WhoAmIResponse {
        account: AccountResponse::from(&caller.account),
        team_ids: caller
            .scope
            .team_ids
            .iter()
            .map(|t| t.to_string())
            .collect(),
    })
}
