//! Request and response types of templates (`/api/v1/templates`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use utoipa::ToSchema;

/// `POST /api/v1/templates`: a template (or, when the caller has one of
/// that name, a new build of it). With a base (`fromImage`,
/// `fromTemplate`) or a `dockerfile`, the build starts at once; without,
/// it waits for `POST /templates/{id}/builds/{buildId}` (after the files
/// of its `COPY` steps were uploaded).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateTemplateRequest {
    /// Its name (`name:tag` tags the build): 1 to 63 characters from
    /// `[a-z0-9_-]`, unique among the account's templates.
    pub name: String,
    /// More names (aliases).
    pub aliases: Option<Vec<String>>,
    /// Tags of the build.
    pub tags: Option<Vec<String>>,
    /// CPU cores of its sandboxes (and builds) unless a create says.
    pub cpu_count: Option<u32>,
    /// Memory of its sandboxes (and builds) in MiB unless a create says.
    #[serde(rename = "memoryMB")]
    pub memory_mb: Option<u32>,
    /// Disk of its sandboxes (and builds) in GB unless a create says.
    #[serde(rename = "diskSizeGB")]
    pub disk_size_gb: Option<u32>,
    pub from_image: Option<String>,
    pub from_template: Option<String>,
    /// The steps, as [`StartBuildRequest::steps`].
    #[schema(value_type = Option<Vec<Object>>)]
    pub steps: Option<Vec<serde_json::Value>>,
    pub dockerfile: Option<String>,
    pub context_hash: Option<String>,
    pub start_cmd: Option<String>,
    pub ready_cmd: Option<String>,
    pub force: Option<bool>,
}

impl CreateTemplateRequest {
    /// The build half of the request.
    pub fn build(&self) -> StartBuildRequest {
        StartBuildRequest {
            from_image: self.from_image.clone(),
            from_template: self.from_template.clone(),
            steps: self.steps.clone(),
            dockerfile: self.dockerfile.clone(),
            context_hash: self.context_hash.clone(),
            start_cmd: self.start_cmd.clone(),
            ready_cmd: self.ready_cmd.clone(),
            force: self.force,
        }
    }
}

/// `POST /api/v1/templates/{id}/builds/{buildId}`: what the build does.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartBuildRequest {
    /// The base: an image on the hosts (checked like `dockerImage`).
    pub from_image: Option<String>,
    /// The base: another template (its newest ready build), by id or name.
    pub from_template: Option<String>,
    /// The steps: `{"type": "RUN", "command": "…", "user"?}`,
    /// `{"type": "COPY", "src", "dest", "user"?, "mode"?, "filesHash"}`,
    /// `{"type": "ENV", "vars": [["K", "v"]]}`, `{"type": "ARG", "name",
    /// "value"?}`, `{"type": "WORKDIR", "path"}`, `{"type": "USER",
    /// "user"}`; each may say `"force": true`.
    #[schema(value_type = Option<Vec<Object>>)]
    pub steps: Option<Vec<serde_json::Value>>,
    /// A Dockerfile instead of a base and steps; its `COPY` sources come
    /// from the files uploaded under `contextHash`.
    pub dockerfile: Option<String>,
    /// The hash the build context (a tar, plain or gzip) was uploaded
    /// under (`PUT /templates/{id}/files/{hash}`).
    pub context_hash: Option<String>,
    /// Started at every start of the template's sandboxes.
    pub start_cmd: Option<String>,
    /// Run until it exits 0 before a create answers.
    pub ready_cmd: Option<String>,
    /// Run every step, whatever the cache holds.
    pub force: Option<bool>,
}

/// One build of a template.
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildResponse {
    pub build_id: String,
    pub template_id: String,
    /// `waiting`, `building`, `ready` or `error`.
    pub status: String,
    pub tags: Vec<String>,
    /// Why it failed: the step, its exit code and its last lines.
    pub reason: Option<String>,
    /// The step it failed at (from 1).
    pub failed_step: Option<u32>,
    /// The image its sandboxes run, once ready.
    pub image: Option<String>,
    /// What its sandboxes get: `env`, `workdir`, `user`, `startCmd`,
    /// `readyCmd`.
    #[schema(value_type = Option<Object>)]
    pub config: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A template as the API shows it.
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateResponse {
    pub template_id: String,
    /// Its names; the first is its name.
    pub names: Vec<String>,
    /// Usable by every account.
    pub public: bool,
    /// Another account's public template.
    pub shared: bool,
    pub cpu_count: Option<u32>,
    #[serde(rename = "memoryMB")]
    pub memory_mb: Option<u32>,
    #[serde(rename = "diskSizeGB")]
    pub disk_size_gb: Option<u32>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Its builds, newest first (on the detail and after a create).
    pub builds: Option<Vec<BuildResponse>>,
}

/// `GET /api/v1/templates`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListTemplatesResponse {
    pub templates: Vec<TemplateResponse>,
}

/// One line of a build's log.
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildLogEntry {
    /// Its place in the log, from 0.
    pub offset: u64,
    pub timestamp: DateTime<Utc>,
    /// `debug`, `info`, `warn` or `error`.
    pub level: String,
    /// `base`, a step's number, or `finalize`.
    pub step: Option<String>,
    pub message: String,
}

/// `GET /api/v1/templates/{id}/builds/{buildId}`: the build and its log
/// from `logsOffset`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildStatusResponse {
    pub build: BuildResponse,
    pub log_entries: Vec<BuildLogEntry>,
}

/// `GET /api/v1/templates/{id}/files/{hash}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateFilesResponse {
    /// Whether the files are stored already (a build may name them).
    pub present: bool,
    /// Their size, once stored.
    pub bytes: Option<u64>,
}

/// `PUT /api/v1/templates/{id}/builds/{buildId}/tags`: tags for this
/// build, taken from the template's other builds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TagBuildRequest {
    pub tags: Vec<String>,
}

/// One tag of a template and the build it points at.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateTag {
    pub tag: String,
    pub build_id: String,
    /// When that build was made.
    pub created_at: DateTime<Utc>,
}

/// `GET /api/v1/templates/{id}/tags`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateTagsResponse {
    pub tags: Vec<TemplateTag>,
}

/// `PATCH /api/v1/templates/{id}` (administrators): whether every account
/// may use the template.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateTemplateRequest {
    pub public: bool,
}
