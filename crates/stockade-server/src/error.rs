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

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Validation(ValidationErrors),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// The path has no such method (405; the router adds `Allow`).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The sandbox is destroyed (409 `sandbox_terminated`).
    #[error("{0}")]
    Terminated(String),
    /// The sandbox must be running for this (409 `sandbox_not_running`).
    #[error("{0}")]
    NotRunning(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// Rate limited; retry after this many seconds.
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after_secs: u64,
    },
    /// The sandbox cannot serve this right now (e.g. stopped).
    #[error("{0}")]
    SandboxUnavailable(String),
    /// An `Idempotency-Key` reused with a different request.
    #[error("{0}")]
    IdempotencyMismatch(String),
    #[error("{0}")]
    ImageUnavailable(String),
    /// A sandbox port the proxy forwards to does not answer (502).
    #[error("{0}")]
    UpstreamUnavailable(String),
    /// A create source (git, tarball, upload) could not be fetched or unpacked.
    #[error("{0}")]
    SourceFailed(String),
    /// The object store (local directory or S3) failed.
    #[error("{0}")]
    ObjectStore(String),
    #[error("{0}")]
    DockerUnavailable(String),
    #[error("{0}")]
    Docker(String),
    #[error("{0}")]
    Database(String),
    /// The database cannot write (disk full, read-only): 507.
    #[error("{0}")]
    StorageFull(String),
    /// The database cannot serve now: 503.
    #[error("{0}")]
    DatabaseUnavailable(String),
    /// The Docker host has no room for it (409 `insufficient_capacity`).
    #[error("{0}")]
    InsufficientCapacity(String),
    /// The account's quota does not allow it (403 `quota_exceeded`).
    #[error("{0}")]
    QuotaExceeded(String),
    /// The server is shutting down: 503.
    #[error("{0}")]
    ShuttingDown(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Validation(ValidationErrors::single(field, message))
    }

    pub fn sandbox_not_found() -> Self {
        Self::NotFound("Sandbox not found".into())
    }

    fn parts(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Validation(_) => (StatusCode::BAD_REQUEST, "validation_failed"),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::Terminated(_) => (StatusCode::CONFLICT, "sandbox_terminated"),
            Self::NotRunning(_) => (StatusCode::CONFLICT, "sandbox_not_running"),
            Self::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::TooManyRequests { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::SandboxUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "sandbox_unavailable"),
            Self::IdempotencyMismatch(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
            }
            Self::ImageUnavailable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "image_unavailable"),
            Self::UpstreamUnavailable(_) => (StatusCode::BAD_GATEWAY, "upstream_unavailable"),
            Self::SourceFailed(_) => (StatusCode::UNPROCESSABLE_ENTITY, "source_failed"),
            Self::ObjectStore(_) => (StatusCode::BAD_GATEWAY, "object_store_error"),
            Self::DockerUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "docker_unavailable"),
            Self::Docker(_) => (StatusCode::BAD_GATEWAY, "docker_error"),
            Self::Database(_) => (StatusCode::INTERNAL_SERVER_ERROR, "database_error"),
            Self::StorageFull(_) => (StatusCode::INSUFFICIENT_STORAGE, "storage_full"),
            Self::DatabaseUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable")
            }
            Self::InsufficientCapacity(_) => (StatusCode::CONFLICT, "insufficient_capacity"),
            Self::QuotaExceeded(_) => (StatusCode::FORBIDDEN, "quota_exceeded"),
            Self::ShuttingDown(_) => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        }
    }

    /// The JSON error detail (also used per item in bulk results).
    pub fn detail(&self) -> ErrorDetail {
        let (_, code) = self.parts();
        let (message, details) = match self {
            Self::Validation(errs) => (
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

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Validation(v) => Self::Validation(v),
            ServiceError::Forbidden(m) => Self::Forbidden(m),
            ServiceError::NotFound(m) => Self::NotFound(m),
            ServiceError::Conflict(m) => Self::Conflict(m),
            ServiceError::Terminated(m) => Self::Terminated(m),
            ServiceError::NotRunning(m) => Self::NotRunning(m),
            ServiceError::PayloadTooLarge(m) => Self::PayloadTooLarge(m),
            ServiceError::SandboxUnavailable(m) => Self::SandboxUnavailable(m),
            ServiceError::IdempotencyMismatch(m) => Self::IdempotencyMismatch(m),
            ServiceError::ImageUnavailable(m) => Self::ImageUnavailable(m),
            ServiceError::SourceFailed(m) => Self::SourceFailed(m),
            ServiceError::ObjectStore(m) => Self::ObjectStore(m),
            ServiceError::DockerUnavailable(m) => Self::DockerUnavailable(m),
            ServiceError::Docker(m) => Self::Docker(m),
            ServiceError::Database(m) => Self::Database(m),
            ServiceError::StorageFull(m) => Self::StorageFull(m),
            ServiceError::DatabaseUnavailable(m) => Self::DatabaseUnavailable(m),
            ServiceError::InsufficientCapacity(m) => Self::InsufficientCapacity(m),
            ServiceError::QuotaExceeded(m) => Self::QuotaExceeded(m),
            ServiceError::ShuttingDown(m) => Self::ShuttingDown(m),
            ServiceError::Internal(m) => Self::Internal(m),
        }
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
