//! `/api/v1/templates`: templates, their builds, build logs and the files
//! of their `COPY` steps.

use std::collections::VecDeque;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use futures_util::StreamExt;
use stockade_api::templates::{
    BuildLogEntry, BuildResponse, BuildStatusResponse, CreateTemplateRequest,
    ListTemplatesResponse, StartBuildRequest, TagBuildRequest, TemplateFilesResponse,
    TemplateResponse, TemplateTag, TemplateTagsResponse, UpdateTemplateRequest,
};
use stockade_api::ErrorBody;
use stockade_core::template::{BuildLogLine, BuildStep, Template, TemplateBuild};
use stockade_service::templates::{BuildRequest, TemplateInput};
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::{ApiError, ApiResult};
use crate::extract::{AdminCaller, ApiJson, Authed};
use crate::routes::apidoc::{AccessErrors, BadRequest};
use crate::routes::events::{query_map, query_u32};
use crate::{sse, AppState};

/// The routes of this module, relative to `/api/v1`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/templates", post(create_template).get(list_templates))
        .route(
            "/templates/{id}",
            get(get_template)
                .patch(update_template)
                .delete(delete_template),
        )
        .route(
            "/templates/{id}/files/{hash}",
            get(files_present).put(upload_files),
        )
        .route(
            "/templates/{id}/builds/{build}",
            post(start_build).get(build_status),
        )
        .route("/templates/{id}/builds/{build}/tags", put(tag_build))
        .route("/templates/{id}/tags", get(template_tags))
        .route("/templates/{id}/tags/{tag}", delete(remove_tag))
}

#[derive(OpenApi)]
#[openapi(
    paths(create_template, list_templates, get_template, update_template, delete_template, files_present,
          upload_files, start_build, build_status, tag_build, template_tags, remove_tag),
    components(schemas(
        CreateTemplateRequest, StartBuildRequest, TemplateResponse, BuildResponse,
        ListTemplatesResponse, BuildStatusResponse, BuildLogEntry, TemplateFilesResponse,
        TagBuildRequest, TemplateTag, TemplateTagsResponse, UpdateTemplateRequest,
    )),
    tags((name = "templates", description = "Templates: sandbox images built from steps or a Dockerfile"))
)]
pub struct TemplatesApi;

pub fn build_view(b: &TemplateBuild) -> BuildResponse {
    BuildResponse {
        build_id: b.id.to_string(),
        template_id: b.template_id.to_string(),
        status: b.status.as_str().to_owned(),
        tags: b.tags.clone(),
        reason: b.reason.clone(),
        failed_step: b.failed_step,
        image: b.image_ref.clone(),
        config: b.config.as_ref().and_then(|c| serde_json::to_value(c).ok()),
        created_at: b.created_at,
        started_at: b.started_at,
        finished_at: b.finished_at,
    }
}

pub fn template_view(
    t: &Template,
    caller: &stockade_core::AccountId,
    builds: Option<&[TemplateBuild]>,
) -> TemplateResponse {
    TemplateResponse {
        template_id: t.id.to_string(),
        names: t.names.iter().map(ToString::to_string).collect(),
        public: t.public,
        shared: t.account_id != *caller,
        cpu_count: t.cpu_count,
        memory_mb: t.memory_mb,
        disk_size_gb: t.disk_size_gb,
        created_at: t.created_at,
        updated_at: t.updated_at,
        builds: builds.map(|b| b.iter().map(build_view).collect()),
    }
}

pub fn log_view(l: &BuildLogLine) -> BuildLogEntry {
    BuildLogEntry {
        offset: l.offset,
        timestamp: l.at,
        level: l.level.as_str().to_owned(),
        step: l.step.clone(),
        message: l.message.clone(),
    }
}

/// The native build body as the service takes it; steps checked one by
/// one, each error naming `steps[i]`.
fn build_request(req: StartBuildRequest) -> ApiResult<BuildRequest> {
    let steps = req
        .steps
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value::<BuildStep>(v)
                .map_err(|e| ApiError::field(format!("steps[{i}]"), e.to_string()))
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(BuildRequest {
        from_image: req.from_image,
        from_template: req.from_template,
        steps,
        dockerfile: req.dockerfile,
        context_hash: req.context_hash,
        start_cmd: req.start_cmd,
        ready_cmd: req.ready_cmd,
        force: req.force.unwrap_or(false),
        provision_user: None,
    })
}

/// Make a template — or, when the account has one of this name, a new
/// build of it. With a base (`fromImage`, `fromTemplate`) or a
/// `dockerfile` the build starts at once (202, `building`); without, it
/// waits for its steps (`POST /templates/{id}/builds/{buildId}`), so that
/// the files of its `COPY` steps can be uploaded first.
#[utoipa::path(post, path = "/api/v1/templates", tag = "templates",
    request_body = CreateTemplateRequest,
    responses(
        (status = 202, description = "Made; its build `building` or `waiting`", body = TemplateResponse),
        BadRequest,
        (status = 409, description = "A name is another template's", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn create_template(
    Authed { state, caller }: Authed,
    ApiJson(req): ApiJson<CreateTemplateRequest>,
) -> ApiResult<(StatusCode, Json<TemplateResponse>)> {
    let build = build_request(req.build())?;
    // Checked before anything is made.
    let recipe = match build.is_given() {
        true => {
            let recipe = build.recipe()?;
            state.svc.check_recipe(&caller.scope, &recipe).await?;
            Some(recipe)
        }
        false => None,
    };
    let mut names = vec![req.name.clone()];
    names.extend(req.aliases.clone().unwrap_or_default());
    let input = TemplateInput {
        names,
        tags: req.tags.clone().unwrap_or_default(),
        cpu_count: req.cpu_count,
        memory_mb: req.memory_mb,
        disk_size_gb: req.disk_size_gb,
    };
    let (template, mut made) = state.svc.create_template(&caller.scope, input).await?;
    if let Some(recipe) = recipe {
        made = state
            .svc
            .start_build(
                &caller.scope,
                template.id.as_str(),
                made.id.as_str(),
                recipe,
            )
            .await?;
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(template_view(&template, &caller.account.id, Some(&[made]))),
    ))
}

/// The account's templates, then other accounts' public ones.
#[utoipa::path(get, path = "/api/v1/templates", tag = "templates",
    responses((status = 200, body = ListTemplatesResponse), AccessErrors))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn list_templates(
    Authed { state, caller }: Authed,
) -> ApiResult<Json<ListTemplatesResponse>> {
    let templates = state.svc.list_templates(&caller.scope).await?;
    Ok(Json(ListTemplatesResponse {
        templates: templates
            .iter()
            .map(|t| template_view(t, &caller.account.id, None))
            .collect(),
    }))
}

/// One template, by id or name, with its builds (the owner's only).
#[utoipa::path(get, path = "/api/v1/templates/{id}", tag = "templates",
    params(("id" = String, Path, description = "template id or name")),
    responses((status = 200, body = TemplateResponse), (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn get_template(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<TemplateResponse>> {
    let template = state.svc.template(&caller.scope, &id).await?;
    let builds = match template.account_id == caller.account.id {
        true => Some(state.svc.template_builds(&caller.scope, &id).await?.1),
        false => None,
    };
    Ok(Json(template_view(
        &template,
        &caller.account.id,
        builds.as_deref(),
    )))
}

/// Make a template public (usable by every account) or private again:
/// administrators only, by the template's id (or one of their own names).
/// Building, tagging and deleting a public template stay its owner's.
#[utoipa::path(patch, path = "/api/v1/templates/{id}", tag = "templates",
    params(("id" = String, Path, description = "template id")),
    request_body = UpdateTemplateRequest,
    responses((status = 200, body = TemplateResponse), BadRequest,
              (status = 403, description = "Not an administrator", body = ErrorBody),
              (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.0.account.id), err(level = "debug", Display))]
pub async fn update_template(
    Authed { state, caller }: Authed<AdminCaller>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateTemplateRequest>,
) -> ApiResult<Json<TemplateResponse>> {
    let caller = caller.0;
    let template = state
        .svc
        .set_template_public(&caller.scope, &id, req.public)
        .await?;
    Ok(Json(template_view(&template, &caller.account.id, None)))
}

/// Delete a template: its names are free at once; sandboxes made from it
/// keep running (their image stays until they are gone).
#[utoipa::path(delete, path = "/api/v1/templates/{id}", tag = "templates",
    params(("id" = String, Path, description = "template id or name")),
    responses((status = 200, body = TemplateResponse), (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn delete_template(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<TemplateResponse>> {
    let template = state.svc.delete_template(&caller.scope, &id).await?;
    Ok(Json(template_view(&template, &caller.account.id, None)))
}

/// Whether the files a `COPY` step (or a Dockerfile's context) names by
/// their SHA-256 are stored already.
#[utoipa::path(get, path = "/api/v1/templates/{id}/files/{hash}", tag = "templates",
    params(("id" = String, Path, description = "template id or name"),
           ("hash" = String, Path, description = "the files' SHA-256, 64 hex digits")),
    responses((status = 200, body = TemplateFilesResponse), BadRequest, (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn files_present(
    Authed { state, caller }: Authed,
    Path((id, hash)): Path<(String, String)>,
) -> ApiResult<Json<TemplateFilesResponse>> {
    let (_, present) = state
        .svc
        .template_files_present(&caller.scope, &id, &hash)
        .await?;
    Ok(Json(TemplateFilesResponse {
        present,
        bytes: None,
    }))
}

/// Upload the files of a `COPY` step (or a Dockerfile's build context): a
/// tar, plain or gzip, stored under the hash its steps name.
#[utoipa::path(put, path = "/api/v1/templates/{id}/files/{hash}", tag = "templates",
    params(("id" = String, Path, description = "template id or name"),
           ("hash" = String, Path, description = "the files' SHA-256, 64 hex digits")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = TemplateFilesResponse), BadRequest,
              (status = 404, body = ErrorBody),
              (status = 413, description = "Larger than the upload limit", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn upload_files(
    Authed { state, caller }: Authed,
    Path((id, hash)): Path<(String, String)>,
    body: Body,
) -> ApiResult<Json<TemplateFilesResponse>> {
    let stream = body
        .into_data_stream()
        .map(|c| c.map_err(std::io::Error::other));
    let bytes = state
        .svc
        .store_template_files(&caller.scope, &id, &hash, Box::pin(stream))
        .await?;
    Ok(Json(TemplateFilesResponse {
        present: true,
        bytes: Some(bytes),
    }))
}

/// Start a waiting build with its base and steps (or a Dockerfile). It
/// runs in a build sandbox of the account; its status and log are at
/// `GET` of the same path.
#[utoipa::path(post, path = "/api/v1/templates/{id}/builds/{build}", tag = "templates",
    params(("id" = String, Path, description = "template id or name"),
           ("build" = String, Path, description = "build id")),
    request_body = StartBuildRequest,
    responses((status = 202, body = BuildResponse), BadRequest,
              (status = 404, body = ErrorBody),
              (status = 409, description = "The build is not waiting", body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn start_build(
    Authed { state, caller }: Authed,
    Path((id, build)): Path<(String, String)>,
    ApiJson(req): ApiJson<StartBuildRequest>,
) -> ApiResult<(StatusCode, Json<BuildResponse>)> {
    let recipe = build_request(req)?.recipe()?;
    let started = state
        .svc
        .start_build(&caller.scope, &id, &build, recipe)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(build_view(&started))))
}

/// A build's status and its log lines from `logsOffset` (at most `limit`,
/// 100 by default). With `Accept: text/event-stream`, the log as it is
/// written: a `log` event per line from `logsOffset` on, then one `build`
/// event with the build once it is ready or failed, which ends the stream.
#[utoipa::path(get, path = "/api/v1/templates/{id}/builds/{build}", tag = "templates",
    params(("id" = String, Path, description = "template id or name"),
           ("build" = String, Path, description = "build id"),
           ("logsOffset" = Option<u64>, Query, description = "the first log line to return"),
           ("limit" = Option<u32>, Query, description = "at most this many lines (1 to 1000)")),
    responses((status = 200, description = "The status and a page of the log (JSON), or the log as it is written (SSE)",
                content((BuildStatusResponse = "application/json"), (String = "text/event-stream"))),
              BadRequest, (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn build_status(
    Authed { state, caller }: Authed,
    Path((id, build)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let q = query_map(raw.as_deref(), &["logsOffset", "limit"])?;
    let offset = query_u32(&q, "logsOffset")?.unwrap_or(0);
    let limit = log_limit(&q)?;
    let (_, found) = state.svc.template_build(&caller.scope, &id, &build).await?;
    if sse::wants_event_stream(&headers) {
        let steps = BuildLogSteps {
            state: state.clone(),
            scope: caller.scope.clone(),
            template: id,
            build,
            offset: u64::from(offset),
        };
        return Ok(sse::response(
            sse::stepped(steps),
            state.config.sse_keep_alive,
            state.svc.shutdown(),
        ));
    }
    let lines = state
        .svc
        .build_logs(&found, u64::from(offset), limit)
        .await?;
    Ok(Json(BuildStatusResponse {
        build: build_view(&found),
        log_entries: lines.iter().map(log_view).collect(),
    })
    .into_response())
}

/// Give tags to a build (whatever its status; `name:tag` runs it once it
/// is ready). A tag points at one build: the template's other builds lose
/// these tags.
#[utoipa::path(put, path = "/api/v1/templates/{id}/builds/{build}/tags", tag = "templates",
    params(("id" = String, Path, description = "template id or name"),
           ("build" = String, Path, description = "build id")),
    request_body = TagBuildRequest,
    responses((status = 200, body = BuildResponse), BadRequest, (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn tag_build(
    Authed { state, caller }: Authed,
    Path((id, build)): Path<(String, String)>,
    ApiJson(req): ApiJson<TagBuildRequest>,
) -> ApiResult<Json<BuildResponse>> {
    let build = state
        .svc
        .tag_build(&caller.scope, &id, &build, &req.tags)
        .await?;
    Ok(Json(build_view(&build)))
}

/// A template's tags, each with the ready build it points at.
#[utoipa::path(get, path = "/api/v1/templates/{id}/tags", tag = "templates",
    params(("id" = String, Path, description = "template id or name")),
    responses((status = 200, body = TemplateTagsResponse), (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn template_tags(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<TemplateTagsResponse>> {
    let tags = state.svc.template_tags(&caller.scope, &id).await?;
    Ok(Json(TemplateTagsResponse {
        tags: tags
            .into_iter()
            .map(|t| TemplateTag {
                tag: t.tag,
                build_id: t.build_id.to_string(),
                created_at: t.created_at,
            })
            .collect(),
    }))
}

/// Take a tag from the template's builds (no error when none has it).
#[utoipa::path(delete, path = "/api/v1/templates/{id}/tags/{tag}", tag = "templates",
    params(("id" = String, Path, description = "template id or name"),
           ("tag" = String, Path, description = "the tag")),
    responses((status = 204, description = "No build has the tag"), BadRequest,
              (status = 404, body = ErrorBody)))]
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Display))]
pub async fn remove_tag(
    Authed { state, caller }: Authed,
    Path((id, tag)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    state.svc.remove_tags(&caller.scope, &id, &[tag]).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `limit` of a build log read: 1 to 1000 lines, 100 when not given.
pub fn log_limit(q: &std::collections::HashMap<String, String>) -> ApiResult<u32> {
    let limit = query_u32(q, "limit")?.unwrap_or(100);
    if !(1..=stockade_service::templates::MAX_LOG_LINES).contains(&limit) {
        return Err(ApiError::field("limit", "must be between 1 and 1000"));
    }
    Ok(limit)
}

/// How long a followed build's log is left alone when nothing new came.
const FOLLOW_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// The events of a followed build log: its lines as they are written, then
/// the build once it ended (read before its last lines, so none is missed:
/// a build's log is complete before it is marked ready or failed).
struct BuildLogSteps {
    state: AppState,
    scope: stockade_core::Scope,
    template: String,
    build: String,
    offset: u64,
}

impl sse::Steps for BuildLogSteps {
    async fn step(&mut self, queue: &mut VecDeque<Bytes>) -> bool {
        let svc = &self.state.svc;
        let read = async {
            let (_, build) = svc
                .template_build(&self.scope, &self.template, &self.build)
                .await?;
            let lines = svc
                .build_logs(
                    &build,
                    self.offset,
                    stockade_service::templates::MAX_LOG_LINES,
                )
                .await?;
            Ok::<_, stockade_service::ServiceError>((build, lines))
        };
        match read.await {
            Ok((build, lines)) if lines.is_empty() => {
                if build.status.is_final() {
                    queue.push_back(sse::json_event("build", &build_view(&build)));
                    return true;
                }
                tokio::time::sleep(FOLLOW_PAUSE).await;
                false
            }
            Ok((_, lines)) => {
                self.offset += lines.len() as u64;
                queue.extend(lines.iter().map(|l| sse::json_event("log", &log_view(l))));
                false
            }
            Err(e) => {
                queue.push_back(sse::json_event(
                    "error",
                    &serde_json::json!({ "message": e.to_string() }),
                ));
                true
            }
        }
    }
}
