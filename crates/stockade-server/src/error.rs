//! `ApiError`: every failure a handler can return, and the one place that
//! maps them to HTTP status codes and the `{"error":{code,message,details}}` body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use stockade_api::{ErrorBody, ErrorDetail};
use stockade_core::{FieldError, ValidationErrors};
use stockade_runtime::RuntimeError;
use stockade_service::ServiceError;
use stockade_store::StoreError;

/// A failure a handler returns: the service's own errors, wrapped, and the
/// few that only the HTTP tier knows (credentials, rate limits, methods,
/// the proxy's upstream).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// What the service reported, in its own terms.
    #[error(transparent)]
    Service(ServiceError),
    /// Invalid input, every field named (400). Handlers put together the
    /// errors of a request's parts here; the service's are moved here too,
    /// so that there is one place to find them.
    #[error("{0}")]
    Validation(ValidationErrors),
    /// No valid credential (401).
    #[error("{0}")]
    Unauthorized(String),
    /// The path has no such method (405; the router adds `Allow`).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// Rate limited; retry after this many seconds.
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after_secs: u64,
    },
    /// A sandbox port the proxy forwards to does not answer (502).
    #[error("{0}")]
    UpstreamUnavailable(String),
}

impl ApiError {
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Validation(ValidationErrors::single(field, message))
    }

    pub fn sandbox_not_found() -> Self {
        ServiceError::sandbox_not_found().into()
    }

    /// The status code and the stable error code: the only place either is
    /// chosen.
    fn parts(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Validation(_) => (StatusCode::BAD_REQUEST, "validation_failed"),
            Self::Service(e) => match e {
                ServiceError::Validation(_) => (StatusCode::BAD_REQUEST, "validation_failed"),
                ServiceError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
                ServiceError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
                ServiceError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
                ServiceError::Terminated(_) => (StatusCode::CONFLICT, "sandbox_terminated"),
                ServiceError::NotRunning(_) => (StatusCode::CONFLICT, "sandbox_not_running"),
                ServiceError::Paused(_) => (StatusCode::CONFLICT, "sandbox_paused"),
                ServiceError::PayloadTooLarge(_) => {
                    (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
                }
                ServiceError::SandboxUnavailable(_) => {
                    (StatusCode::SERVICE_UNAVAILABLE, "sandbox_unavailable")
                }
                ServiceError::IdempotencyMismatch(_) => {
                    (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
                }
                ServiceError::ImageUnavailable(_) => {
                    (StatusCode::UNPROCESSABLE_ENTITY, "image_unavailable")
                }
                ServiceError::SourceFailed(_) => {
                    (StatusCode::UNPROCESSABLE_ENTITY, "source_failed")
                }
                ServiceError::ObjectStore(_) => (StatusCode::BAD_GATEWAY, "object_store_error"),
                ServiceError::DockerUnavailable(_) => {
                    (StatusCode::SERVICE_UNAVAILABLE, "docker_unavailable")
                }
                ServiceError::Docker(_) => (StatusCode::BAD_GATEWAY, "docker_error"),
                ServiceError::Database(_) => (StatusCode::INTERNAL_SERVER_ERROR, "database_error"),
                ServiceError::StorageFull(_) => (StatusCode::INSUFFICIENT_STORAGE, "storage_full"),
                ServiceError::DatabaseUnavailable(_) => {
                    (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable")
                }
                ServiceError::InsufficientCapacity(_) => {
                    (StatusCode::CONFLICT, "insufficient_capacity")
                }
                ServiceError::QuotaExceeded(_) => (StatusCode::FORBIDDEN, "quota_exceeded"),
                ServiceError::ShuttingDown(_) => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
                ServiceError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
            },
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::TooManyRequests { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::UpstreamUnavailable(_) => (StatusCode::BAD_GATEWAY, "upstream_unavailable"),
        }
    }

    /// The JSON error detail (also used per item in bulk results).
    pub fn detail(&self) -> ErrorDetail {
        let (_, code) = self.parts();
        let (message, details) = match self {
            Self::Validation(errs) | Self::Service(ServiceError::Validation(errs)) => (
                format!("Invalid request: {errs}"),
                Some(serde_json::json!({ "fields": errs.0 })),
            ),
            other => (other.to_string(), None),
        };
        ErrorDetail {
            code: code.into(),
            message,
            details,
        }
    }

    pub fn status(&self) -> StatusCode {
        self.parts().0
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(error = %self, status = status.as_u16(), "request failed");
        } else {
            tracing::debug!(error = %self, status = status.as_u16(), "request rejected");
        }
        let retry_after = match &self {
            Self::TooManyRequests {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        };
        let mut response = (
            status,
            Json(ErrorBody {
                error: self.detail(),
            }),
        )
            .into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Validation(errors) => Self::Validation(errors),
            other => Self::Service(other),
        }
    }
}

impl From<ValidationErrors> for ApiError {
    fn from(e: ValidationErrors) -> Self {
        Self::Validation(e)
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self::Validation(e.into())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ServiceError::from(e).into()
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        ServiceError::from(e).into()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

impl From<stockade_blob::BlobError> for ApiError {
    fn from(e: stockade_blob::BlobError) -> Self {
        ServiceError::from(e).into()
    }
}
