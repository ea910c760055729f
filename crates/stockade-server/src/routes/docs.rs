//! The OpenAPI document generated from the handlers (API-11) and a browsable
//! page that renders it without any CDN.

use axum::response::{Html, IntoResponse};
use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{accounts, exec, health, logs, sandboxes};
use super::{update, volumes};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Stockade API", description = "Create, run and tear down isolated Docker sandboxes."),
    paths(
        sandboxes::create, sandboxes::list, sandboxes::get, sandboxes::start, sandboxes::stop,
        sandboxes::destroy, sandboxes::bulk_delete,
        accounts::create, accounts::list, accounts::me, accounts::sign_in, accounts::sign_out,
        health::health,
    ),
    components(schemas(
        stockade_api::ErrorBody, stockade_api::ErrorDetail,
        stockade_api::CreateSandboxRequest, stockade_api::SandboxResponse, stockade_api::VolumeSummary,
        stockade_api::ResourceUsage,
        stockade_api::DiskUsageSummary,
        stockade_api::DiskHealth,
        stockade_api::DiskAreaHealth,
        stockade_api::EgressHealth,
        stockade_api::ListSandboxesResponse, stockade_api::BulkDeleteRequest,
        stockade_api::BulkDeleteResponse, stockade_api::BulkDeleteResult,
        stockade_api::HealthResponse, stockade_api::DockerHealth, stockade_api::DatabaseHealth,
        stockade_api::IsolationHealth,
        stockade_api::CreateAccountRequest, stockade_api::CreateAccountResponse,
        stockade_api::AccountResponse, stockade_api::ListAccountsResponse, stockade_api::WhoAmIResponse,
        stockade_api::SessionRequest,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "sandboxes", description = "Sandbox lifecycle"),
        (name = "accounts", description = "Accounts and API tokens"),
        (name = "system", description = "Health"),
    )
)]
pub struct ApiDoc;

/// The whole OpenAPI document: the core API plus each feature module's own
/// `#[derive(OpenApi)]` part, merged.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    // Feature modules add their documents here, e.g. `doc.merge(logs::LogsApi::openapi());`
    doc.merge(super::ports::PortsApi::openapi());
    doc.merge(logs::LogsApi::openapi());
    doc.merge(exec::ExecApi::openapi());
    doc.merge(super::files::FilesApi::openapi());
    doc.merge(super::terminal::TerminalApi::openapi());
    doc.merge(super::teams::TeamsApi::openapi());
    doc.merge(accounts::QuotasApi::openapi());
    doc.merge(crate::metrics::MetricsApi::openapi());
    doc.merge(volumes::VolumesApi::openapi());
    doc.merge(update::UpdateApi::openapi());
    doc.merge(super::snapshots::SnapshotsApi::openapi());
    doc
}

/// `GET /api/v1/openapi.json`.
pub async fn openapi_json() -> impl IntoResponse {
    Json(openapi())
}

/// `GET /api/v1/docs`: a browsable rendering of the OpenAPI document.
pub async fn docs_page() -> Html<&'static str> {
    Html(include_str!("../../assets/api-docs.html"))
}
