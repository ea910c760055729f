//! HTTP handlers, one module per resource.

use axum::http::{Method, Uri};

use crate::error::ApiError;
use stockade_service::ServiceError;

pub mod accounts;
pub mod apidoc;
pub mod code;
pub mod dashboard;
pub mod docs;
pub mod events;
pub mod exec;
pub mod files;
pub mod health;
pub mod hosts;
pub mod logs;
pub mod ports;
pub mod sandboxes;
pub mod shared_volumes;
pub mod snapshots;
pub mod teams;
pub mod templates;
pub mod terminal;
pub mod tokens;
pub mod update;
pub mod volumes;

/// Unknown routes: a JSON 404.
pub async fn not_found(uri: Uri) -> ApiError {
    ServiceError::NotFound(format!("No route for {}", uri.path())).into()
}

/// A method the path does not have: a JSON 405 (the router adds the
/// `Allow` header with the methods it does have).
pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!(
        "{method} is not allowed on {}: the Allow header lists the methods it takes",
        uri.path()
    ))
}
