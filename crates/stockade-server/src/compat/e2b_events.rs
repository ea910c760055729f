//! E2B's lifecycle events API: webhooks under `/events/webhooks` and the
//! polling routes `/events/sandboxes[/{id}]`, with E2B's bodies and status
//! codes (a create is 201, a delete 200), authenticated by `X-API-Key`.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use stockade_api::{CreateWebhookRequest, Event, UpdateWebhookRequest, Webhook};
use stockade_service::events::{event_view, webhook_view};

use super::e2b::{E2bApiError, E2bCaller};
use crate::extract::parse_json;
use crate::routes::events::{query_map, query_u32, register, update_input, Registered};
use crate::AppState;

type E2bResult<T> = Result<T, E2bApiError>;

/// The routes, relative to `/e2b`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/events/webhooks", get(list).post(create))
        .route(
            "/events/webhooks/{id}",
            get(get_one).patch(update).delete(remove),
        )
        .route("/events/sandboxes", get(team_events))
        .route("/events/sandboxes/{id}", get(sandbox_events))
}

async fn list(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
) -> E2bResult<Json<Vec<Webhook>>> {
    let hooks = state.svc.list_webhooks(&caller.scope).await?;
    Ok(Json(hooks.iter().map(|w| webhook_view(w, false)).collect()))
}

async fn create(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    body: Bytes,
) -> E2bResult<Registered> {
    let req: CreateWebhookRequest = parse_json(&body)?;
    Ok(register(&state, &caller, req).await?)
}

async fn get_one(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path(id): Path<String>,
) -> E2bResult<Json<Webhook>> {
    let hook = state.svc.webhook(&caller.scope, &id).await?;
    Ok(Json(webhook_view(&hook, false)))
}

async fn update(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path(id): Path<String>,
    body: Bytes,
) -> E2bResult<Json<Webhook>> {
    let req: UpdateWebhookRequest = parse_json(&body)?;
    let hook = state
        .svc
        .update_webhook(&caller.scope, &id, update_input(req))
        .await?;
    Ok(Json(webhook_view(&hook, false)))
}

async fn remove(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path(id): Path<String>,
) -> E2bResult<StatusCode> {
    state.svc.delete_webhook(&caller.scope, &id).await?;
    Ok(StatusCode::OK)
}

/// Events of the caller's sandboxes, newest first unless `orderAsc=true`.
async fn team_events(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<Vec<Event>>> {
    polled(&state, &caller, None, raw.as_deref()).await
}

async fn sandbox_events(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<Vec<Event>>> {
    polled(&state, &caller, Some(&id), raw.as_deref()).await
}

async fn polled(
    state: &AppState,
    caller: &crate::extract::Caller,
    sandbox: Option<&str>,
    raw: Option<&str>,
) -> E2bResult<Json<Vec<Event>>> {
    let q = query_map(raw, &["offset", "limit", "orderAsc"])?;
    let oldest_first = match q.get("orderAsc").map(|v| v.to_ascii_lowercase()) {
        None => false,
        Some(v) if v == "true" => true,
        Some(v) if v == "false" => false,
        Some(_) => {
            return Err(crate::error::ApiError::field("orderAsc", "must be true or false").into())
        }
    };
    let events = state
        .svc
        .events_by_offset(
            &caller.scope,
            sandbox,
            query_u32(&q, "offset")?.unwrap_or(0),
            query_u32(&q, "limit")?,
            oldest_first,
        )
        .await?;
    Ok(Json(events.iter().map(event_view).collect()))
}
