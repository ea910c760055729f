//! What many operations of the OpenAPI document share: the error answers
//! they list alike (each a type that stands for its answers in a
//! `responses(...)` list), and the bearer token that every operation but a
//! few public ones needs.

use stockade_api::ErrorBody;
use utoipa::openapi::security::SecurityRequirement;
use utoipa::IntoResponses;

/// A request that may be invalid: 400, the bad fields named in the body.
#[derive(IntoResponses)]
pub enum BadRequest {
    #[response(status = 400)]
    Invalid(ErrorBody),
}

/// A resource of one account: 403 for another account's, 404 for one that
/// does not exist.
#[derive(IntoResponses)]
pub enum AccessErrors {
    #[response(status = 403)]
    Forbidden(ErrorBody),
    #[response(status = 404)]
    NotFound(ErrorBody),
}

/// An operation for administrators only.
#[derive(IntoResponses)]
pub enum AdminOnly {
    /// Not an administrator
    #[response(status = 403)]
    Forbidden(ErrorBody),
}

/// An operation on one sandbox, described.
#[derive(IntoResponses)]
pub enum SandboxErrors {
    /// Another account's sandbox
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// Unknown sandbox
    #[response(status = 404)]
    NotFound(ErrorBody),
}

/// An operation on an account that the account itself and administrators
/// may call.
#[derive(IntoResponses)]
pub enum AccountErrors {
    /// Another account, and not an administrator
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such account
    #[response(status = 404)]
    NotFound(ErrorBody),
}

/// An operation on an account named in the path.
#[derive(IntoResponses)]
pub enum NoSuchAccount {
    /// No such account
    #[response(status = 404)]
    NotFound(ErrorBody),
}

/// An operation that needs Docker.
#[derive(IntoResponses)]
pub enum DockerUnavailable {
    /// Docker unavailable
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// A request whose fields are checked, the bad ones named in the body.
#[derive(IntoResponses)]
pub enum InvalidField {
    /// A field is invalid
    #[response(status = 400)]
    Invalid(ErrorBody),
}

/// The paths anyone may call, without a token: the documentation, the
/// health check, signing in and out, the metrics (they check a token of
/// their own) and the proxy (it takes sandbox tokens).
const PUBLIC_PATHS: &[&str] = &[
    "/api/v1/docs",
    "/api/v1/health",
    "/api/v1/openapi.json",
    "/api/v1/session",
    "/metrics",
    "/proxy/{id}/{port}/{path}",
];

/// Marks every operation but those of [`PUBLIC_PATHS`] as needing the
/// bearer token.
pub fn require_bearer(doc: &mut utoipa::openapi::OpenApi) {
    for (path, item) in doc.paths.paths.iter_mut() {
        if PUBLIC_PATHS.contains(&path.as_str()) {
            continue;
        }
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ];
        for op in operations.into_iter().flatten() {
            op.security = Some(vec![SecurityRequirement::new(
                "bearer",
                Vec::<String>::new(),
            )]);
        }
    }
}
