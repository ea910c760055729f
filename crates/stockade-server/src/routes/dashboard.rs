//! The web dashboard (UI-1..UI-4): static files embedded in the binary, so it
//! works offline with no build toolchain at run time.

use axum::extract::Path;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};

use crate::error::ApiError;

/// `GET /`.
pub async fn index() -> Html<&'static str> {
    Html(include_str!("../../assets/dashboard/index.html"))
}

/// `GET /dashboard/{file}`.
pub async fn asset(Path(file): Path<String>) -> Response {
    let (body, mime) = match file.as_str() {
        "app.js" => (
            include_str!("../../assets/dashboard/app.js"),
            "text/javascript; charset=utf-8",
        ),
        "app.css" => (
            include_str!("../../assets/dashboard/app.css"),
            "text/css; charset=utf-8",
        ),
        _ => return ApiError::NotFound(format!("No dashboard file '{file}'")).into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, mime),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
