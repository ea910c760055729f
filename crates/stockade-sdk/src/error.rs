//! The SDK's error: what the server said, or why it could not be asked.

/// Everything a call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error (`{"error":{code,message,details}}`).
    #[error("{message} (HTTP {status}, {code})")]
    Api {
        status: u16,
        code: String,
        message: String,
        details: Option<serde_json::Value>,
    },
    /// The server could not be reached.
    #[error("could not reach the Stockade server at {url}: {reason}")]
    Transport { url: String, reason: String },
    /// A parameter was rejected before any request was sent.
    #[error("invalid {field}: {message}")]
    InvalidParams { field: String, message: String },
    /// The call was cancelled through its [`crate::CancellationToken`].
    #[error("the call was cancelled")]
    Cancelled,
    /// Missing or bad client configuration (URL, token).
    #[error("{0}")]
    Config(String),
    /// A terminal (or another live connection) has ended: nothing more can
    /// be sent through it.
    #[error("{0}")]
    Closed(String),
    /// A template build ended in `error`: `reason` says why (the step,
    /// its exit code and its last lines), `failed_step` where (from 1).
    #[error("the build {build_id} of template {template_id} failed: {reason}")]
    BuildFailed {
        template_id: String,
        build_id: String,
        reason: String,
        failed_step: Option<u32>,
    },
    /// The server sent something this SDK does not understand.
    #[error("unexpected response from the server: {0}")]
    Decode(String),
}

impl Error {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The API's machine-readable error code (`not_found`, `conflict`, …).
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    pub fn is_conflict(&self) -> bool {
        self.status() == Some(409)
    }

    pub(crate) fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::InvalidParams {
            field: field.into(),
            message: message.into(),
        }
    }
}
