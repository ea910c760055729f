//! `ServiceError`: every failure a service operation can report, in the
//! service's own terms. The HTTP adapter maps each to a status code; the
//! service never speaks HTTP.

use stockade_core::{FieldError, ValidationErrors};
use stockade_runtime::RuntimeError;
use stockade_store::{StoreError, UnavailableKind};

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A field of the input is invalid (the errors name the fields).
    #[error("{0}")]
    Validation(ValidationErrors),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// The operation does not apply to the resource as it is now.
    #[error("{0}")]
    Conflict(String),
    /// The sandbox is destroyed: nothing but reading its record applies.
    #[error("{0}")]
    Terminated(String),
    /// The operation needs a running sandbox.
    #[error("{0}")]
    NotRunning(String),
    /// The sandbox is paused and its lifecycle does not resume it on use.
    #[error("{0}")]
    Paused(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The sandbox cannot serve this right now (e.g. stopped).
    #[error("{0}")]
    SandboxUnavailable(String),
    /// An `Idempotency-Key` reused with a different request.
    #[error("{0}")]
    IdempotencyMismatch(String),
    #[error("{0}")]
    ImageUnavailable(String),
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
    /// The database's disk is full: nothing was changed (507).
    #[error("{0}")]
    StorageFull(String),
    /// The database cannot serve now (read-only, I/O errors, unreachable).
    #[error("{0}")]
    DatabaseUnavailable(String),
    /// The Docker host has no room for the CPU or memory asked for.
    #[error("{0}")]
    InsufficientCapacity(String),
    /// The account's quota does not allow it.
    #[error("{0}")]
    QuotaExceeded(String),
    /// The server is shutting down and takes no new operations.
    #[error("{0}")]
    ShuttingDown(String),
    #[error("{0}")]
    Internal(String),
}

impl ServiceError {
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Validation(ValidationErrors::single(field, message))
    }

    pub fn sandbox_not_found() -> Self {
        Self::NotFound("Sandbox not found".into())
    }

    /// The refusal of a call into paused sandbox `id` that does not
    /// auto-resume.
    pub fn paused(id: &stockade_core::SandboxId) -> Self {
        Self::Paused(format!(
            "Sandbox {id} is paused: resume it (POST /api/v1/sandbox/{id}/resume, stockade resume), \
             or create it with lifecycle.autoResume to have it resumed on use"
        ))
    }
}

pub type ServiceResult<T> = Result<T, ServiceError>;

impl From<ValidationErrors> for ServiceError {
    fn from(e: ValidationErrors) -> Self {
        Self::Validation(e)
    }
}

impl From<FieldError> for ServiceError {
    fn from(e: FieldError) -> Self {
        Self::Validation(e.into())
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::sandbox_not_found(),
            StoreError::Forbidden => {
                Self::Forbidden("Forbidden: this sandbox belongs to another account".into())
            }
            StoreError::Conflict(m) => Self::Conflict(m),
            StoreError::Unavailable(u) if u.kind == UnavailableKind::Full => {
                Self::StorageFull(u.message)
            }
            StoreError::Unavailable(u) => Self::DatabaseUnavailable(u.message),
            StoreError::Other(m) => Self::Database(format!("Database error: {m}")),
        }
    }
}

impl From<RuntimeError> for ServiceError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Unavailable(m) => Self::DockerUnavailable(m),
            RuntimeError::ImageUnavailable { image, reason } => {
                let hint = stockade_core::spec::local_build_hint(&image);
                let message = RuntimeError::ImageUnavailable { image, reason }.to_string();
                Self::ImageUnavailable(match hint {
                    Some(hint) => format!("{message}; {hint}"),
                    None => message,
                })
            }
            RuntimeError::NotFound(m) => Self::Conflict(format!(
                "The sandbox's container is missing on its Docker host ({m})"
            )),
            RuntimeError::Conflict(m) => Self::Conflict(m),
            RuntimeError::CwdMissing(cwd) => {
                Self::field("cwd", format!("no such directory in the sandbox: {cwd}"))
            }
            RuntimeError::LimitRefused(m) | RuntimeError::Other(m) => {
                Self::Docker(format!("Docker error: {m}"))
            }
        }
    }
}

impl From<stockade_blob::BlobError> for ServiceError {
    fn from(e: stockade_blob::BlobError) -> Self {
        match e {
            stockade_blob::BlobError::NotFound(key) => {
                Self::ObjectStore(format!("object store: '{key}' is missing"))
            }
            stockade_blob::BlobError::Source(m) => Self::Docker(format!("Docker error: {m}")),
            full @ stockade_blob::BlobError::Full { .. } => Self::StorageFull(full.to_string()),
            other => Self::ObjectStore(format!("Object store error: {other}")),
        }
    }
}

/// A setting that cannot be used: the message names it and says what to
/// give instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl From<String> for ConfigError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_image_stockade_builds_says_how_to_build_it() {
        let absent = |image: &str| {
            ServiceError::from(RuntimeError::ImageUnavailable {
                image: image.to_owned(),
                reason: "no registry".into(),
            })
            .to_string()
        };
        let code = absent(stockade_core::spec::CODE_INTERPRETER_IMAGE);
        assert!(
            code.ends_with("; build it with scripts/build-image code-interpreter"),
            "{code}"
        );
        let other = absent("node:20-bookworm");
        assert!(!other.contains("scripts/build-image"), "{other}");
        assert!(other.contains("node:20-bookworm"), "{other}");
    }
}
