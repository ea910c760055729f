//! `/api/v1/accounts` (admin only), account quotas
//! (`/api/v1/accounts/{id}/quota`), `/api/v1/me`, and the
//! dashboard's cookie session (`/api/v1/session`).

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use stockade_api::{
    AccountResponse, CreateAccountRequest, CreateAccountResponse, ErrorBody, ListAccountsResponse,
    QuotaResponse, QuotaUsageResponse, SessionRequest, SetQuotaRequest, WhoAmIResponse,
};
use stockade_core::{AccountId, Quota};
use stockade_service::fleet::quotas::QuotaReport;
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::{ApiError, ApiResult};
use crate::extract::{
    authenticate, cookie_values, AdminCaller, ApiJson, Authed, Caller, Credential, CSRF_HEADER,
    SECURE_SESSION_COOKIE, SESSION_COOKIE, SESSION_COOKIES,
};
use crate::routes::apidoc::{AccountErrors, AdminOnly, BadRequest, NoSuchAccount};
use crate::AppState;
use stockade_service::ServiceError;

/// The quota routes, relative to `/api/v1` (the other account routes are
/// in the core router).
pub fn routes() -> Router<AppState> {
    Router::new().route(
        "/accounts/{account_id}/quota",
        get(get_quota).put(set_quota),
    )
}

#[derive(OpenApi)]
#[openapi(
    paths(get_quota, set_quota),
    components(schemas(
        stockade_api::SetQuotaRequest,
        stockade_api::QuotaResponse,
        stockade_api::QuotaLimits,
        stockade_api::QuotaUsageResponse,
    ))
)]
pub struct QuotasApi;

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
    responses((status = 201, body = CreateAccountResponse), BadRequest,
              AdminOnly, (status = 409, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id), err(level = "debug", Display))]
pub async fn create(
    Authed { state, caller }: Authed<AdminCaller>,
    ApiJson(req): ApiJson<CreateAccountRequest>,
) -> ApiResult<(StatusCode, Json<CreateAccountResponse>)> {
    check_account_name(&req.name)?;
    // Every account starts with the configured default quota.
    let (account, token) = state.svc.create_account(&req.name, req.is_admin).await?;
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
    responses((status = 200, body = ListAccountsResponse), (status = 403, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    _admin: AdminCaller,
) -> ApiResult<Json<ListAccountsResponse>> {
    let accounts = state.svc.list_accounts().await?;
    Ok(Json(ListAccountsResponse {
        accounts: accounts.iter().map(AccountResponse::from).collect(),
    }))
}

/// The quota of `id` and what the account uses of it, as the API shows it.
fn quota_response(id: &AccountId, report: &QuotaReport) -> QuotaResponse {
    QuotaResponse {
        account_id: id.to_string(),
        quota: (&report.quota).into(),
        usage: QuotaUsageResponse::from(&report.usage)
            .with_stored(&report.stored)
            .with_volumes(&report.volumes),
    }
}

/// An account's quota and what it uses of it: for administrators,
/// and for the account itself. Sandboxes and disk count every sandbox that
/// is not terminated (stopped ones too); CPU and memory count the running
/// ones; snapshots count those not deleted, uploads those not yet used (and
/// not expired), each with the GB it takes in the object store.
#[utoipa::path(get, path = "/api/v1/accounts/{account_id}/quota", tag = "accounts",
    params(("account_id" = String, Path, description = "account id")),
    responses((status = 200, body = QuotaResponse), BadRequest,
              AccountErrors))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn get_quota(
    Authed { state, caller }: Authed,
    Path(account_id): Path<String>,
) -> ApiResult<Json<QuotaResponse>> {
    let id = AccountId::parse_field(&account_id, "account_id")?;
    let report = state.svc.quota_of(&caller.account, &id).await?;
    Ok(Json(quota_response(&id, &report)))
}

/// Set an account's quota (admin only). The body is the whole quota: a
/// field that is absent or `null` is unlimited, so `{}` lifts every limit.
/// A lower quota never stops or removes sandboxes, snapshots, uploads or
/// volumes; it refuses what would exceed it (403 `quota_exceeded`):
/// creates, starts, larger CPU or memory, snapshots, shared volumes; an
/// upload past the bytes left is a 413.
#[utoipa::path(put, path = "/api/v1/accounts/{account_id}/quota", tag = "accounts",
    params(("account_id" = String, Path, description = "account id")),
    request_body = SetQuotaRequest,
    responses((status = 200, body = QuotaResponse), (status = 400, description = "A value is out of range (the field is named)", body = ErrorBody),
              AdminOnly,
              NoSuchAccount))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id), err(level = "debug", Display))]
pub async fn set_quota(
    Authed { state, caller }: Authed<AdminCaller>,
    Path(account_id): Path<String>,
    ApiJson(req): ApiJson<SetQuotaRequest>,
) -> ApiResult<Json<QuotaResponse>> {
    let id = AccountId::parse_field(&account_id, "account_id")?;
    let quota = Quota::from_input(&req.input())?;
    let report = state.svc.set_quota(&id, &quota).await?;
    tracing::info!(quota.account.id = %id, ?quota, "account quota set");
    Ok(Json(quota_response(&id, &report)))
}

/// The account the token belongs to.
#[utoipa::path(get, path = "/api/v1/me", tag = "accounts",
    responses((status = 200, body = WhoAmIResponse), (status = 401, body = ErrorBody)))]
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

/// The `Set-Cookie` value of the dashboard's session (`max_age` 0 ends it):
/// over HTTPS the `__Host-` cookie (`Secure`, `Path=/`), else the plain one
/// scoped to `/api/`.
fn session_cookie(secret: &str, max_age: i64, secure: bool) -> ApiResult<HeaderValue> {
    let (name, scope) = if secure {
        (SECURE_SESSION_COOKIE, "Path=/; Secure")
    } else {
        (SESSION_COOKIE, "Path=/api/")
    };
    HeaderValue::from_str(&format!(
        "{name}={secret}; {scope}; Max-Age={max_age}; HttpOnly; SameSite=Strict"
    ))
    .map_err(|_| ServiceError::Internal("a session secret that is no cookie value".into()).into())
}

/// How long a dashboard session lasts without signing in again.
const SESSION_MAX_AGE: i64 = 12 * 3600;

fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// Sign the dashboard in: checks the API token and opens a session on the
/// server, whose secret only the session cookie holds (`HttpOnly`,
/// `SameSite=Strict`, path `/api/`) — never the API token, which no script,
/// the dashboard's own included, ever holds. The session ends when it is
/// signed out, after 12 hours, or when its API token is revoked; it is
/// listed with the account's tokens. Needs the `X-Stockade-CSRF` header,
/// which a cross-site form cannot send.
#[utoipa::path(post, path = "/api/v1/session", tag = "accounts",
    request_body = SessionRequest,
    params(("X-Stockade-CSRF" = String, Header, description = "any value; a cross-site form cannot send it")),
    responses((status = 200, description = "Signed in; the cookie is set", body = WhoAmIResponse),
              (status = 401, description = "Unknown token", body = ErrorBody),
              (status = 403, description = "The X-Stockade-CSRF header is missing, or the account is disabled", body = ErrorBody)))]
pub async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<SessionRequest>,
) -> ApiResult<Response> {
    if !headers.contains_key(CSRF_HEADER) {
        return Err(
            ServiceError::Forbidden(format!("Signing in needs the {CSRF_HEADER} header")).into(),
        );
    }
    let caller = authenticate(&state, &req.token, Credential::Bearer)
        .await
        .map_err(|e| match e {
            ApiError::Unauthorized(_) => {
                ApiError::Unauthorized("That API token is not valid".into())
            }
            other => other,
        })?;
    let secret = state
        .svc
        .open_session(
            &caller.account.id,
            &caller.token_id,
            chrono::Duration::seconds(SESSION_MAX_AGE),
        )
        .await?;
    let cookie = session_cookie(secret.plaintext(), SESSION_MAX_AGE, over_https(&headers))?;
    let body = WhoAmIResponse {
        account: AccountResponse::from(&caller.account),
        team_ids: caller
            .scope
            .team_ids
            .iter()
            .map(ToString::to_string)
            .collect(),
    };
    let mut resp = Json(body).into_response();
    resp.headers_mut().insert(header::SET_COOKIE, cookie);
    Ok(resp)
}

/// Sign the dashboard out: the session ends on the server (the same cookie
/// sent again is refused) and the cookie is removed.
#[utoipa::path(delete, path = "/api/v1/session", tag = "accounts",
    responses((status = 204, description = "Signed out")))]
pub async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    let secrets: Vec<&str> = SESSION_COOKIES
        .iter()
        .flat_map(|name| cookie_values(&headers, name))
        .collect();
    state.svc.end_sessions(&secrets).await?;
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(
        header::SET_COOKIE,
        session_cookie("", 0, over_https(&headers))?,
    );
    Ok(resp)
}
