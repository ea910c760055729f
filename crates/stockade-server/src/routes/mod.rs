//! HTTP handlers, one module per resource.

use axum::http::Uri;
use axum::response::Html;

use crate::error::ApiError;

pub mod accounts;
pub mod docs;
pub mod health;
pub mod sandboxes;
pub mod snapshots;

/// `GET /`: the landing page.
pub async fn home() -> Html<&'static str> {
    Html(include_str!("../../assets/home.html"))
}

/// Unknown routes: a JSON 404.
pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("No route for {}", uri.path()))
}
