//! E2B's Template API under `/e2b`, what `Template.build()` and its
//! relatives in E2B's SDKs call: make a template and its waiting build
//! (`POST /v3/templates`, 202), ask where to put a `COPY` step's files
//! (`GET /templates/{id}/files/{hash}`, 201, with a signed upload link to
//! this server that takes them without an API key), start the build with
//! its steps (`POST /v2/templates/{id}/builds/{buildID}`, 202), read its
//! status and log, check an alias, tag builds, list, read and delete
//! templates (a snapshot too, where `DELETE /templates/{id}` names one).
//!
//! E2B's steps are translated into Stockade's (the argument layouts are
//! E2B's: `COPY [src, dest, user, mode]`, `RUN [command, user]`,
//! `ENV [k1, v1, k2, v2…]`); the build itself is the native one: a build
//! sandbox of the account, cached, crash-safe. Every image of E2B has a
//! user `user`: a build whose steps name it makes it when its base lacks it.

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use futures_util::StreamExt;
use stockade_api::e2b::{
    E2bAssignTags, E2bAssignedTags, E2bBuildLogEntry, E2bBuildLogs, E2bBuildReason, E2bBuildStart,
    E2bBuildStatus, E2bDeleteTags, E2bFilesUpload, E2bNewTemplate, E2bTemplate, E2bTemplateAlias,
    E2bTemplateBuild, E2bTemplateRequested, E2bTemplateStep, E2bTemplateTag, ENVD_VERSION,
};
use stockade_core::template::{
    BuildLogLine, BuildStatus, BuildStep, LogLevel, StepKind, Template, TemplateBuild,
};
use stockade_service::compat::{self as svc_compat, Template as Named};
use stockade_service::templates::{BuildRequest, TemplateInput, FILES_LINK_TTL};
use stockade_service::{snapshots, ServiceError};
use tracing::instrument;

use super::e2b::{E2bApiError, E2bCaller};
use crate::error::ApiError;
use crate::extract::{parse_json, AuthedId};
use crate::routes::events::{query_map, query_u32};
use crate::routes::templates::log_limit;
use crate::AppState;

type E2bResult<T> = Result<T, E2bApiError>;

/// The user every image of E2B has, which its SDKs' steps name.
const E2B_USER: &str = "user";
/// E2B's own base image and template, which its SDKs start from by
/// default: the server's default image here.
const E2B_BASE_IMAGES: [&str; 2] = ["e2bdev/base", "e2bdev/base:latest"];
const E2B_BASE_TEMPLATE: &str = "base";

/// The routes, relative to `/e2b`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v3/templates", post(create))
        .route("/templates", get(list))
        .route("/templates/{id}", get(get_one).delete(remove))
        .route("/templates/{id}/files/{hash}", get(files_link))
        .route("/template-files/{token}", put(upload_files))
        .route("/v2/templates/{id}/builds/{build}", post(start_build))
        .route("/templates/{id}/builds/{build}/status", get(build_status))
        .route("/templates/{id}/builds/{build}/logs", get(build_logs))
        .route("/templates/aliases/{alias}", get(alias))
        .route("/templates/tags", post(assign_tags).delete(remove_tags))
        .route("/templates/{id}/tags", get(tags))
}

async fn create(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    body: Bytes,
) -> E2bResult<(StatusCode, Json<E2bTemplateRequested>)> {
    let req: E2bNewTemplate = parse_json(&body)?;
    let name = req
        .name
        .or(req.alias)
        .ok_or_else(|| ApiError::field("name", "a template needs a name"))?;
    let (template, build) = state
        .svc
        .create_template(
            &caller.scope,
            TemplateInput {
                names: vec![name],
                tags: req.tags.unwrap_or_default(),
                cpu_count: req.cpu_count,
                memory_mb: req.memory_mb,
                disk_size_gb: None,
            },
        )
        .await?;
    let names = names_of(&template);
    Ok((
        StatusCode::ACCEPTED,
        Json(E2bTemplateRequested {
            template_id: template.id.to_string(),
            build_id: build.id.to_string(),
            public: template.public,
            aliases: names.clone(),
            names,
            tags: build.tags,
        }),
    ))
}

fn names_of(t: &Template) -> Vec<String> {
    t.names.iter().map(ToString::to_string).collect()
}

/// Whether the files are stored, and a link to `PUT` them to: this
/// server, as the caller reached it, signed for this account, template
/// and hash for an hour.
async fn files_link(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path((id, hash)): Path<(String, String)>,
    headers: HeaderMap,
) -> E2bResult<(StatusCode, Json<E2bFilesUpload>)> {
    let (template, present) = state
        .svc
        .template_files_present(&caller.scope, &id, &hash)
        .await?;
    let token = state.svc.template_files_token(
        &caller.account.id,
        &template.id,
        &hash.to_ascii_lowercase(),
        chrono::Utc::now() + FILES_LINK_TTL,
    );
    let base = crate::proxy::PublicBase::from_request(&headers, &state.config);
    let url = format!(
        "{}://{}{}/template-files/{token}",
        base.scheme,
        base.host,
        super::envd::E2B_PREFIX
    );
    Ok((
        StatusCode::CREATED,
        Json(E2bFilesUpload {
            present,
            url: Some(url),
        }),
    ))
}

/// `PUT` of a signed upload link: the files, a tar (plain or gzip).
#[instrument(skip_all, err(level = "debug", Debug))]
async fn upload_files(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Body,
) -> E2bResult<StatusCode> {
    let stream = body
        .into_data_stream()
        .map(|c| c.map_err(std::io::Error::other));
    state
        .svc
        .store_template_files_by_token(&token, Box::pin(stream))
        .await?;
    Ok(StatusCode::OK)
}

/// E2B's steps as Stockade's; errors name `steps[i]` and the argument.
fn steps_of(steps: Vec<E2bTemplateStep>) -> Result<Vec<BuildStep>, ApiError> {
    steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let field = |part: &str| format!("steps[{i}].{part}");
            let args = s.args.unwrap_or_default();
            let arg = |n: usize| args.get(n).map(String::as_str).filter(|a| !a.is_empty());
            let needed = |n: usize, what: &str| {
                arg(n)
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::field(field(&format!("args[{n}]")), format!("{what} is required")))
            };
            let kind = match s.kind.to_ascii_uppercase().as_str() {
                "RUN" => StepKind::Run {
                    command: needed(0, "the command")?,
                    user: arg(1).map(str::to_owned),
                },
                "COPY" => StepKind::Copy {
                    src: needed(0, "the source")?,
                    dest: needed(1, "the destination")?,
                    user: arg(2).map(str::to_owned),
                    mode: match arg(3) {
                        Some(m) => Some(u32::from_str_radix(m, 8).map_err(|_| {
                            ApiError::field(field("args[3]"), "must be an octal file mode such as 0644")
                        })?),
                        None => None,
                    },
                    files_hash: s
                        .files_hash
                        .ok_or_else(|| ApiError::field(field("filesHash"), "a COPY step needs the hash of its files"))?,
                },
                "ENV" => {
                    if args.is_empty() || args.len() % 2 != 0 {
                        return Err(ApiError::field(
                            field("args"),
                            "ENV takes names and values in pairs: [name, value, …]",
                        ));
                    }
                    StepKind::Env {
                        vars: args
                            .chunks(2)
                            .map(|kv| (kv[0].clone(), kv[1].clone()))
                            .collect(),
                    }
                }
                "ARG" => StepKind::Arg {
                    name: needed(0, "the name")?,
                    value: args.get(1).cloned(),
                },
                "WORKDIR" => StepKind::Workdir {
                    path: needed(0, "the path")?,
                },
                "USER" => StepKind::User {
                    user: needed(0, "the user")?,
                },
                other => {
                    return Err(ApiError::field(
                        field("type"),
                        format!("unknown step type '{other}': expected RUN, COPY, ENV, ARG, WORKDIR or USER"),
                    ))
                }
            };
            Ok(BuildStep {
                kind,
                force: s.force.unwrap_or(false),
            })
        })
        .collect()
}

/// Whether a step names E2B's user (which the build then makes).
fn names_e2b_user(step: &BuildStep) -> bool {
    let is = |u: &Option<String>| {
        u.as_deref()
            .is_some_and(|u| u.split(':').next() == Some(E2B_USER))
    };
    match &step.kind {
        StepKind::User { user } => user.split(':').next() == Some(E2B_USER),
        StepKind::Run { user, .. } | StepKind::Copy { user, .. } => is(user),
        _ => false,
    }
}

async fn start_build(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path((id, build)): Path<(String, String)>,
    body: Bytes,
) -> E2bResult<StatusCode> {
    let req: E2bBuildStart = parse_json(&body)?;
    if req
        .from_image_registry
        .as_ref()
        .is_some_and(|r| !r.is_null())
    {
        return Err(ApiError::field(
            "fromImageRegistry",
            "registry credentials are not supported: load the image on the Docker hosts (or \
             give a registry the hosts reach without credentials) and name it in fromImage",
        )
        .into());
    }
    let steps = steps_of(req.steps.unwrap_or_default())?;
    let default_image = state.svc.config().defaults.image.clone();
    let (from_image, from_template) = match (req.from_image, req.from_template) {
        (Some(i), t) if E2B_BASE_IMAGES.contains(&i.as_str()) => (Some(default_image), t),
        (None, Some(t)) if t == E2B_BASE_TEMPLATE => (Some(default_image), None),
        other => other,
    };
    let provision_user = steps
        .iter()
        .any(names_e2b_user)
        .then(|| E2B_USER.to_owned());
    let recipe = BuildRequest {
        from_image,
        from_template,
        steps,
        start_cmd: req.start_cmd.filter(|c| !c.trim().is_empty()),
        ready_cmd: req.ready_cmd.filter(|c| !c.trim().is_empty()),
        force: req.force.unwrap_or(false),
        provision_user,
        ..BuildRequest::default()
    }
    .recipe()?;
    state
        .svc
        .start_build(&caller.scope, &id, &build, recipe)
        .await?;
    Ok(StatusCode::ACCEPTED)
}

fn entry_of(l: &BuildLogLine) -> E2bBuildLogEntry {
    E2bBuildLogEntry {
        timestamp: l.at,
        level: l.level.as_str().to_owned(),
        message: l.message.clone(),
        step: l.step.clone(),
    }
}

/// The lines of a log page at `level` or above (all without one).
fn at_level(lines: &[BuildLogLine], level: Option<LogLevel>) -> Vec<E2bBuildLogEntry> {
    lines
        .iter()
        .filter(|l| level.is_none_or(|min| l.level >= min))
        .map(entry_of)
        .collect()
}

/// `level` of a log query: `debug`, `info`, `warn` or `error`.
fn level_of(q: &std::collections::HashMap<String, String>) -> Result<Option<LogLevel>, ApiError> {
    match q.get("level").map(String::as_str) {
        None => Ok(None),
        Some(l @ ("debug" | "info" | "warn" | "error")) => Ok(Some(LogLevel::parse(l))),
        Some(_) => Err(ApiError::field(
            "level",
            "must be one of debug, info, warn, error",
        )),
    }
}

async fn build_status(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path((id, build)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<E2bBuildStatus>> {
    let q = query_map(raw.as_deref(), &["logsOffset", "limit", "level"])?;
    let offset = query_u32(&q, "logsOffset")?.unwrap_or(0);
    let limit = log_limit(&q)?;
    let level = level_of(&q)?;
    let (template, build) = state.svc.template_build(&caller.scope, &id, &build).await?;
    let lines = state
        .svc
        .build_logs(&build, u64::from(offset), limit)
        .await?;
    let entries = at_level(&lines, level);
    let reason = match (build.status, &build.reason) {
        (BuildStatus::Error, Some(message)) => Some(E2bBuildReason {
            message: message.clone(),
            step: build.failed_step.map(|s| s.to_string()),
            log_entries: None,
        }),
        _ => None,
    };
    Ok(Json(E2bBuildStatus {
        template_id: template.id.to_string(),
        build_id: build.id.to_string(),
        status: build.status.as_str().to_owned(),
        logs: entries.iter().map(|e| e.message.clone()).collect(),
        log_entries: entries,
        reason,
    }))
}

/// A build's log from `cursor` (a line number), at most `limit` lines.
async fn build_logs(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    Path((id, build)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<E2bBuildLogs>> {
    let q = query_map(
        raw.as_deref(),
        &["cursor", "limit", "direction", "level", "source"],
    )?;
    if q.get("direction").is_some_and(|d| d != "forward") {
        return Err(ApiError::field("direction", "only forward is supported").into());
    }
    let cursor = query_u32(&q, "cursor")?.unwrap_or(0);
    let limit = log_limit(&q)?;
    let level = level_of(&q)?;
    let (_, build) = state.svc.template_build(&caller.scope, &id, &build).await?;
    let lines = state
        .svc
        .build_logs(&build, u64::from(cursor), limit)
        .await?;
    Ok(Json(E2bBuildLogs {
        logs: at_level(&lines, level),
    }))
}

/// 200 for a template the caller may use by this name, else 404: another
/// account's private template is not there for the caller.
async fn alias(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
) -> E2bResult<Json<E2bTemplateAlias>> {
    let template = state.svc.template(&caller.scope, &id).await?;
    Ok(Json(E2bTemplateAlias {
        template_id: template.id.to_string(),
        public: template.public,
    }))
}

async fn assign_tags(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    body: Bytes,
) -> E2bResult<(StatusCode, Json<E2bAssignedTags>)> {
    let req: E2bAssignTags = parse_json(&body)?;
    let build = state
        .svc
        .assign_tags(&caller.scope, &req.target, &req.tags)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(E2bAssignedTags {
            tags: req.tags,
            build_id: build.id.to_string(),
        }),
    ))
}

async fn remove_tags(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    body: Bytes,
) -> E2bResult<StatusCode> {
    let req: E2bDeleteTags = parse_json(&body)?;
    state
        .svc
        .remove_tags(&caller.scope, &req.name, &req.tags)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn tags(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
) -> E2bResult<Json<Vec<E2bTemplateTag>>> {
    let tags = state.svc.template_tags(&caller.scope, &id).await?;
    Ok(Json(
        tags.into_iter()
            .map(|t| E2bTemplateTag {
                tag: t.tag,
                build_id: t.build_id.to_string(),
                created_at: t.created_at,
            })
            .collect(),
    ))
}

/// A template in E2B's shape; its builds when given (the owner's view).
fn template_view(
    state: &AppState,
    t: &Template,
    builds: &[TemplateBuild],
    with_builds: bool,
) -> E2bTemplate {
    let defaults = &state.svc.config().defaults;
    let cpu = t
        .cpu_count
        .unwrap_or_else(|| defaults.cpu_cores.ceil().max(1.0) as u32);
    let memory = t
        .memory_mb
        .unwrap_or_else(|| (defaults.memory_gb * 1024.0).round() as u32);
    let disk = t
        .disk_size_gb
        .unwrap_or(defaults.disk_size_gb)
        .saturating_mul(1024);
    let current = builds
        .iter()
        .find(|b| b.status == BuildStatus::Ready)
        .or(builds.first());
    let names = names_of(t);
    E2bTemplate {
        template_id: t.id.to_string(),
        build_id: current.map(|b| b.id.to_string()).unwrap_or_default(),
        cpu_count: cpu,
        memory_mb: memory,
        disk_size_mb: disk,
        public: t.public,
        aliases: names.clone(),
        names,
        created_at: t.created_at,
        updated_at: t.updated_at,
        created_by: None,
        last_spawned_at: None,
        spawn_count: 0,
        build_count: builds.len() as u64,
        envd_version: ENVD_VERSION.into(),
        build_status: current
            .map_or(BuildStatus::Waiting, |b| b.status)
            .as_str()
            .to_owned(),
        builds: with_builds.then(|| {
            builds
                .iter()
                .map(|b| E2bTemplateBuild {
                    build_id: b.id.to_string(),
                    status: b.status.as_str().to_owned(),
                    created_at: b.created_at,
                    updated_at: b.finished_at.or(b.started_at).unwrap_or(b.created_at),
                    finished_at: b.finished_at,
                    cpu_count: cpu,
                    memory_mb: memory,
                    disk_size_mb: Some(disk),
                    envd_version: Some(ENVD_VERSION.into()),
                })
                .collect()
        }),
    }
}

/// The caller's templates (with their builds' state), then public ones.
async fn list(
    State(state): State<AppState>,
    E2bCaller(caller): E2bCaller,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<Vec<E2bTemplate>>> {
    query_map(raw.as_deref(), &["teamID"])?;
    let mut out = Vec::new();
    for t in state.svc.list_templates(&caller.scope).await? {
        let builds = match t.account_id == caller.account.id {
            true => {
                state
                    .svc
                    .template_builds(&caller.scope, t.id.as_str())
                    .await?
                    .1
            }
            false => Vec::new(),
        };
        out.push(template_view(&state, &t, &builds, false));
    }
    Ok(Json(out))
}

async fn get_one(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
) -> E2bResult<Json<E2bTemplate>> {
    let (t, builds) = state.svc.template_builds(&caller.scope, &id).await?;
    Ok(Json(template_view(&state, &t, &builds, true)))
}

/// Deletes the caller's template of this id or name, else its snapshot
/// (E2B deletes snapshots with the same call).
#[instrument(skip_all, fields(account.id = %caller.account.id, template = %id), err(level = "debug", Debug))]
async fn remove(AuthedId { state, caller, id }: AuthedId<E2bCaller>) -> E2bResult<StatusCode> {
    match state.svc.delete_template(&caller.scope, &id).await {
        Ok(_) => return Ok(StatusCode::NO_CONTENT),
        Err(ServiceError::NotFound(_) | ServiceError::Validation(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let Ok(Named::Snapshot(sid)) =
        svc_compat::resolve_template(&state.svc, &caller.scope, &id).await
    else {
        return Err(ServiceError::NotFound(format!("Template {id} not found")).into());
    };
    let snap = snapshots::load(&state.svc, &caller.scope, sid.as_str(), "templateID").await?;
    snapshots::delete(&state.svc, snap).await?;
    Ok(StatusCode::NO_CONTENT)
}
