//! `GET /metrics` and the middleware that feeds it: every request
//! is counted and timed by its route template; the figures themselves live
//! in the service's [`Metrics`](stockade_service::metrics::Metrics).

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use stockade_service::metrics::UNMATCHED;

use crate::error::ApiError;
use crate::AppState;

/// Middleware: counts and times every request by its route template.
pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let method = req.method().clone();
    let started = Instant::now();
    let response = next.run(req).await;
    state.svc.metrics().observe_request(
        method.as_str(),
        route.as_deref().unwrap_or(UNMATCHED),
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// Whether `headers` carry `Authorization: Bearer <expected>`.
fn bearer_matches(headers: &HeaderMap, expected: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(given) = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
    else {
        return false;
    };
    // Compare digests, so the time taken says nothing about the token.
    stockade_core::account::hash_token(given.trim()) == stockade_core::account::hash_token(expected)
}

/// `GET /metrics`: Prometheus text format. Open unless a metrics token is
/// configured, then it needs `Authorization: Bearer <token>`.
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses(
        (status = 200, description = "Prometheus text exposition format", content_type = "text/plain"),
        (status = 401, description = "A metrics token is configured and was not sent", body = stockade_api::ErrorBody),
    ))]
pub async fn scrape(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(expected) = &state.config.metrics_token {
        if !bearer_matches(&headers, expected) {
            return ApiError::Unauthorized(
                "This server's metrics need `Authorization: Bearer <metrics token>`".into(),
            )
            .into_response();
        }
    }
    let counts = match state.svc.count_sandboxes_by_status().await {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: could not count sandboxes");
            None
        }
    };
    let mut body = state.svc.metrics().render(counts.as_deref());
    body.push_str(&state.svc.pool().render_metrics());
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(scrape))]
pub struct MetricsApi;
