//! E2B's control plane under `/e2b`: sandboxes (v1 and v2),
//! timeout, refreshes, connect, pause/resume, fork, snapshots, logs and
//! metrics, as the `e2b` SDKs call them — a thin adapter over the service.
//! Callers authenticate with `X-API-Key` (or `Authorization: Bearer`) and a
//! Stockade API token; account scoping and the 403/404 rules are Stockade's.
//! Every error is E2B's body `{"code": <status>, "message": …}`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, RawQuery};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use stockade_api::e2b::*;
use stockade_api::{CreateSandboxRequest, LifecycleRequest, SandboxResponse, SandboxSource};
use stockade_core::{
    AccountId, Sandbox, SandboxStatus, Scope, Snapshot, SnapshotKind, TimeoutAction,
};
use stockade_service::compat as svc_compat;
use stockade_service::sandbox::request::NewSandbox;
use stockade_service::{lifecycle, pause, snapshots, update};
use tracing::instrument;

use crate::error::ApiError;
use crate::extract::{
    idempotency_key, parse_json, query_pairs, Authed, AuthedId, Caller, Credential,
};
use crate::proxy::token::{self, Purpose};
use crate::AppState;
use stockade_service::ServiceError;

use super::e2b_net;

/// What E2B calls the client of a sandbox.
const CLIENT_ID: &str = "stockade";
/// How long an E2B traffic token (`trafficAccessToken`) lives: as long as
/// the longest session timeout; every create and connect hands out a new one.
const TRAFFIC_TOKEN_TTL: chrono::Duration = chrono::Duration::days(7);
/// The most forks one request may ask for (E2B's limit).
const MAX_FORKS: i64 = 20;
/// The most items of one list page.
const MAX_PAGE: usize = 1000;

/// The routes of E2B's control plane, relative to `/e2b`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sandboxes", post(create_v1).get(list_v1))
        .route("/v2/sandboxes", post(create_v2).get(list_v2))
        .route("/sandboxes/{id}", get(get_one).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/refreshes", post(refresh))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/resume", post(resume))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/fork", post(fork))
        .route("/sandboxes/{id}/snapshots", post(create_snapshot))
        .route("/sandboxes/{id}/logs", get(logs_v1))
        .route("/v2/sandboxes/{id}/logs", get(logs_v2))
        .route("/sandboxes/{id}/metrics", get(metrics))
        .route("/sandboxes/{id}/network", put(update_network))
        .route("/snapshots", get(list_snapshots))
        .merge(super::e2b_templates::routes())
        .merge(super::e2b_events::routes())
        .merge(super::e2b_volumes::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

/// An error in E2B's shape: the status, and `{"code": status, "message"}`.
#[derive(Debug)]
pub enum E2bApiError {
    /// Any of Stockade's errors, with its status.
    Api(ApiError),
    /// A status `ApiError` has no variant for (501), with its message.
    Status(StatusCode, String),
}

impl<E: Into<ApiError>> From<E> for E2bApiError {
    fn from(e: E) -> Self {
        Self::Api(e.into())
    }
}

impl E2bApiError {
    fn not_implemented(message: &str) -> Self {
        Self::Status(StatusCode::NOT_IMPLEMENTED, message.to_owned())
    }

    /// The status and the message the body carries.
    pub fn parts(&self) -> (StatusCode, String) {
        match self {
            Self::Api(e) => (e.status(), e.detail().message),
            Self::Status(s, m) => (*s, m.clone()),
        }
    }
}

impl IntoResponse for E2bApiError {
    fn into_response(self) -> Response {
        let (status, message) = self.parts();
        if status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED {
            tracing::error!(error = %message, status = status.as_u16(), "E2B request failed");
        } else {
            tracing::debug!(error = %message, status = status.as_u16(), "E2B request rejected");
        }
        e2b_error(status, message)
    }
}

/// An E2B error body with `status`.
pub fn e2b_error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(E2bError {
            code: status.as_u16(),
            message: message.into(),
        }),
    )
        .into_response()
}

type E2bResult<T> = Result<T, E2bApiError>;

/// Unknown `/e2b` routes: E2B's 404.
async fn not_found(uri: axum::http::Uri) -> Response {
    e2b_error(
        StatusCode::NOT_FOUND,
        format!("No route for {} in Stockade's E2B API", uri.path()),
    )
}

/// A method an `/e2b` path does not have: E2B's 405 (axum adds `Allow`).
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    e2b_error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} is not allowed on {} in Stockade's E2B API",
            uri.path()
        ),
    )
}

/// The caller of an E2B request: `X-API-Key: <token>`, or `Authorization:
/// Bearer <token>`, with a Stockade API token.
pub struct E2bCaller(pub Caller);

impl std::ops::Deref for E2bCaller {
    type Target = Caller;

    fn deref(&self) -> &Caller {
        &self.0
    }
}

/// The account of an API token.
pub async fn caller_of_token(state: &AppState, token: &str) -> Result<Caller, ApiError> {
    let token = token.trim();
    if token.is_empty() {
        return Err(ApiError::Unauthorized("Empty API key".into()));
    }
    crate::extract::authenticate(state, token, Credential::Bearer).await
}

/// The `X-API-Key` of a request, if it sent one.
pub fn api_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    match headers.get("x-api-key") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(Some)
            .map_err(|_| ApiError::Unauthorized("Malformed X-API-Key header".into())),
    }
}

impl FromRequestParts<AppState> for E2bCaller {
    type Rejection = E2bApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> E2bResult<Self> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(Self(caller.clone()));
        }
        let caller =
            match api_key(&parts.headers)? {
                Some(key) => caller_of_token(state, key).await?,
                None if parts
                    .headers
                    .contains_key(axum::http::header::AUTHORIZATION) =>
                {
                    Caller::from_request_parts(parts, state).await?
                }
                None => return Err(ApiError::Unauthorized(
                    "Missing API key: set E2B_API_KEY to a Stockade API token (sent as X-API-Key)"
                        .into(),
                )
                .into()),
            };
        crate::audit::note_caller(&parts.extensions, &caller);
        parts.extensions.insert(caller.clone());
        Ok(Self(caller))
    }
}

/// A JSON body; an empty one is the type's default.
fn body_or_default<T: DeserializeOwned + Default>(body: &Bytes) -> E2bResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    Ok(parse_json(body)?)
}

fn sandbox_not_found(id: &str) -> E2bApiError {
    ServiceError::NotFound(format!("Sandbox {id} not found")).into()
}

/// The caller's sandbox `id`, not terminated (a terminated one is gone, as
/// in E2B: 404).
async fn load_live(state: &AppState, scope: &Scope, id: &str) -> E2bResult<Sandbox> {
    let sb = lifecycle::load(&state.svc, scope, id)
        .await
        .map_err(|e| match e {
            stockade_service::ServiceError::NotFound(_) => sandbox_not_found(id),
            other => other.into(),
        })?;
    if sb.is_terminated() {
        return Err(sandbox_not_found(id));
    }
    Ok(sb)
}

/// E2B's state of a sandbox: `running` or `paused` (`None`: not shown).
fn state_of(sb: &Sandbox) -> Option<&'static str> {
    match sb.status {
        SandboxStatus::Running => Some("running"),
        // E2B knows two states: a stopped sandbox (its files kept) reads as
        // a paused one whose memory was not kept.
        SandboxStatus::Paused | SandboxStatus::Stopped | SandboxStatus::Error => Some("paused"),
        _ => None,
    }
}

/// The template a sandbox was made from, as E2B names it.
fn template_of(state: &AppState, sb: &Sandbox) -> String {
    if let Some(t) = &sb.spec.template {
        return t.template_id.to_string();
    }
    if let Some(r) = &sb.spec.runtime {
        return r.clone();
    }
    let image = &sb.spec.docker_image;
    if let Some(id) = image.strip_prefix(&format!("{}:", Snapshot::IMAGE_REPO)) {
        return id.to_owned();
    }
    if *image == state.svc.config().defaults.image {
        return "base".into();
    }
    image.clone()
}

/// The domain of sandbox ports (`{port}-{id}.DOMAIN`) as the caller
/// reaches it: the proxy domain, with the port this request came to when
/// the domain names none.
fn domain_for(state: &AppState, headers: &HeaderMap) -> Option<String> {
    let domain = state.config.proxy_domain.as_deref()?;
    if domain.contains(':') {
        return Some(domain.to_owned());
    }
    let base = crate::proxy::PublicBase::from_request(headers, &state.config);
    let port = base.host.rsplit_once(':').map(|(_, p)| p).filter(|p| {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !base.host.ends_with(']')
    });
    Some(match port {
        Some(p) => format!("{domain}:{p}"),
        None => domain.to_owned(),
    })
}

/// A sandbox's answer to create, connect and fork.
fn sandbox_answer(
    state: &AppState,
    headers: &HeaderMap,
    holder: &AccountId,
    sb: &Sandbox,
) -> E2bSandbox {
    E2bSandbox {
        template_id: template_of(state, sb),
        sandbox_id: sb.id.to_string(),
        client_id: CLIENT_ID.into(),
        envd_version: ENVD_VERSION.into(),
        envd_access_token: envd_token(state, holder, sb),
        traffic_access_token: traffic_token(state, holder, sb),
        domain: domain_for(state, headers),
    }
}

/// A new traffic token of `sb` (any port through the host form) for
/// `holder`, valid for this run of the sandbox.
pub fn traffic_token(state: &AppState, holder: &AccountId, sb: &Sandbox) -> String {
    let expires = Utc::now() + TRAFFIC_TOKEN_TTL;
    token::mint_for_holder(&state.proxy_keys, Purpose::Traffic, sb, holder, expires)
}

/// A new envd access token of `sb` (its agent, through Stockade) for
/// `holder`, valid for this run of the sandbox.
pub fn envd_token(state: &AppState, holder: &AccountId, sb: &Sandbox) -> String {
    let expires = Utc::now() + TRAFFIC_TOKEN_TTL;
    token::mint_for_holder(&state.proxy_keys, Purpose::Envd, sb, holder, expires)
}

/// When a sandbox times out: its session's end, else (no timeout) far
/// ahead; a paused sandbox's end is when it was paused.
fn end_of(sb: &Sandbox) -> DateTime<Utc> {
    match sb.status {
        SandboxStatus::Running => sb.session_expires_at.unwrap_or_else(|| {
            DateTime::parse_from_rfc3339("9999-12-31T23:59:59Z")
                .map(|t| t.with_timezone(&Utc))
                .unwrap_or_else(|_| Utc::now())
        }),
        SandboxStatus::Paused => sb.paused_at.unwrap_or(sb.created_at),
        _ => sb.stopped_at.unwrap_or(sb.created_at),
    }
}

fn detail_of(
    state: &AppState,
    headers: &HeaderMap,
    holder: &AccountId,
    sb: &Sandbox,
) -> E2bSandboxDetail {
    let spec = &sb.spec;
    E2bSandboxDetail {
        template_id: template_of(state, sb),
        sandbox_id: sb.id.to_string(),
        client_id: CLIENT_ID.into(),
        started_at: sb.started_at.unwrap_or(sb.created_at),
        end_at: end_of(sb),
        envd_version: ENVD_VERSION.into(),
        envd_access_token: envd_token(state, holder, sb),
        domain: domain_for(state, headers),
        cpu_count: (spec.cpu_cores.ceil() as i64).max(1),
        memory_mb: (spec.memory_gb * 1024.0).round() as i64,
        disk_size_mb: i64::from(spec.disk_size_gb) * 1024,
        metadata: spec.metadata.clone(),
        state: state_of(sb).unwrap_or("running").into(),
        allow_internet_access: spec.network.allows_egress(),
        lifecycle: E2bLifecycle {
            // E2B's two actions: a stop keeps the files as a pause does.
            on_timeout: match spec.timeout_action() {
                TimeoutAction::Kill => "kill",
                TimeoutAction::Stop | TimeoutAction::Pause => "pause",
            }
            .into(),
            auto_resume: spec.lifecycle.auto_resume,
        },
    }
}

/// Seconds as E2B's `timeout`: 0 to a week.
fn timeout_secs(t: i64, field: &str) -> E2bResult<u64> {
    let max = (stockade_core::spec::MAX_TIMEOUT_MINUTES * 60.0) as i64;
    if !(0..=max).contains(&t) {
        return Err(ApiError::field(field, format!("must be 0 to {max} seconds")).into());
    }
    Ok(t as u64)
}

/// Refuses E2B network settings Stockade has no counterpart for, each with
/// a sentence: per-host transform `rules`, an `egressProxy`.
fn refuse_unmapped_network(
    rules: Option<&serde_json::Value>,
    proxy: Option<&serde_json::Value>,
) -> E2bResult<()> {
    let unsupported = |what: &str, instead: &str| -> E2bApiError {
        E2bApiError::Api(ApiError::field(
            format!("network.{what}"),
            format!("network.{what} is not supported by Stockade's E2B API: {instead}"),
        ))
    };
    if rules.is_some_and(|r| !r.is_null() && r.as_object().is_none_or(|o| !o.is_empty())) {
        return Err(unsupported(
            "rules",
            "Stockade does not rewrite a sandbox's requests; pass credentials as envs",
        ));
    }
    if proxy.is_some_and(|p| !p.is_null()) {
        return Err(unsupported(
            "egressProxy",
            "egress leaves through Stockade's own filter; set a proxy inside the sandbox \
             (HTTPS_PROXY) and allow its address in allowOut",
        ));
    }
    Ok(())
}

/// `network` and `allow_internet_access` of a create as Stockade's
/// `networkPolicy` (see [`e2b_net`]); `None` leaves the server's default.
fn network_policy(req: &E2bNewSandbox) -> E2bResult<Option<serde_json::Value>> {
    let Some(n) = &req.network else {
        return Ok(e2b_net::policy_of(&e2b_net::Egress {
            allow_out: &[],
            deny_out: &[],
            dns_servers: None,
            internet: req.allow_internet_access,
            internet_field: "allow_internet_access",
        })?);
    };
    refuse_unmapped_network(n.rules.as_ref(), n.egress_proxy.as_ref())?;
    if n.allow_public_traffic == Some(true) {
        return Err(E2bApiError::Api(ApiError::field(
            "network.allowPublicTraffic",
            "Stockade does not serve sandbox ports publicly: every request to \
             {port}-{sandboxID}.DOMAIN needs the sandbox's trafficAccessToken (header \
             e2b-traffic-access-token); leave allowPublicTraffic out",
        )));
    }
    Ok(e2b_net::policy_of(&e2b_net::Egress {
        allow_out: n.allow_out.as_deref().unwrap_or_default(),
        deny_out: n.deny_out.as_deref().unwrap_or_default(),
        dns_servers: n.dns_servers.as_deref(),
        internet: req.allow_internet_access,
        internet_field: "allow_internet_access",
    })?)
}

/// Refuses create fields Stockade cannot honour, each with a sentence.
fn refuse_unsupported(req: &E2bNewSandbox) -> E2bResult<()> {
    let set = |v: &Option<serde_json::Value>| {
        v.as_ref().is_some_and(|v| {
            !(v.is_null()
                || v.as_array().is_some_and(|a| a.is_empty())
                || v.as_object().is_some_and(|o| o.is_empty()))
        })
    };
    let not_implemented = E2bApiError::not_implemented;
    if set(&req.mcp) {
        return Err(not_implemented(
            "MCP gateways are not supported by Stockade: start the MCP server yourself with \
             commands.run in the sandbox",
        ));
    }
    if set(&req.iam) {
        return Err(not_implemented(
            "Workload identity (iam) is not supported by Stockade: pass credentials as envs",
        ));
    }
    Ok(())
}

/// E2B's `autoPause`, `autoPauseMemory` and `autoResume` as a lifecycle:
/// a pause that keeps memory freezes the sandbox, one that keeps only the
/// filesystem (`autoPauseMemory: false`) stops it, no pause kills it.
fn lifecycle_of(req: &E2bNewSandbox) -> E2bResult<LifecycleRequest> {
    let on_timeout = match (req.auto_pause, req.auto_pause_memory) {
        (Some(true), Some(false)) => "stop",
        (Some(true), _) => "pause",
        _ => "kill",
    };
    let auto_resume = match &req.auto_resume {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(v) => match v.get("enabled") {
            Some(serde_json::Value::Bool(b)) => *b,
            None | Some(serde_json::Value::Null) => false,
            Some(_) => {
                return Err(ApiError::field("autoResume.enabled", "must be true or false").into())
            }
        },
    };
    if auto_resume && on_timeout != "pause" {
        return Err(ApiError::field(
            "autoResume",
            "auto-resume needs autoPause (with memory): only a paused sandbox wakes on use",
        )
        .into());
    }
    Ok(LifecycleRequest {
        on_timeout: Some(on_timeout.into()),
        auto_resume: Some(auto_resume),
        idle_timeout_minutes: None,
    })
}

async fn create(
    Authed { state, caller }: Authed<E2bCaller>,
    headers: HeaderMap,
    body: Bytes,
    default_timeout: i64,
) -> E2bResult<Response> {
    let req: E2bNewSandbox = parse_json(&body)?;
    refuse_unsupported(&req)?;
    let network_policy = network_policy(&req)?;
    let secs = timeout_secs(req.timeout.unwrap_or(default_timeout), "timeout")?;
    let template =
        svc_compat::resolve_template(&state.svc, &caller.scope, &req.template_id).await?;
    let mut create = CreateSandboxRequest {
        timeout_minutes: Some(secs as f64 / 60.0),
        persistent: Some(req.auto_pause.unwrap_or(false)),
        lifecycle: Some(lifecycle_of(&req)?),
        environment_vars: req.env_vars.clone().filter(|e| !e.is_empty()),
        network_policy,
        volume_mounts: req.volume_mounts.as_ref().map(|mounts| {
            mounts
                .iter()
                .map(|m| stockade_api::shared_volumes::VolumeMountRequest {
                    volume: m.name.clone(),
                    path: m.path.clone(),
                    read_only: m.read_only,
                })
                .collect()
        }),
        ..Default::default()
    };
    template.apply(&mut create);
    let key = idempotency_key(&headers)?;
    let new = NewSandbox::from(&create).with_metadata(req.metadata.clone().unwrap_or_default());
    let created = state.svc.create_sandbox(&caller.scope, new, key).await?;
    tracing::Span::current().record("sandbox.id", created.sandbox.id.as_str());
    Ok((
        StatusCode::CREATED,
        axum::Extension(crate::audit::Made(created.sandbox.id.to_string())),
        Json(sandbox_answer(
            &state,
            &headers,
            &caller.account.id,
            &created.sandbox,
        )),
    )
        .into_response())
}

/// `POST /e2b/sandboxes` (v1: default timeout 15 s).
#[instrument(skip_all, fields(account.id = %cx.caller.account.id, sandbox.id), err(level = "debug", Debug))]
async fn create_v1(cx: Authed<E2bCaller>, headers: HeaderMap, body: Bytes) -> E2bResult<Response> {
    create(cx, headers, body, 15).await
}

/// `POST /e2b/v2/sandboxes` (default timeout 300 s).
#[instrument(skip_all, fields(account.id = %cx.caller.account.id, sandbox.id), err(level = "debug", Debug))]
async fn create_v2(cx: Authed<E2bCaller>, headers: HeaderMap, body: Bytes) -> E2bResult<Response> {
    create(cx, headers, body, 300).await
}

/// The filters and page of a list.
#[derive(Debug, Default)]
struct ListQuery {
    metadata: BTreeMap<String, String>,
    states: Vec<&'static str>,
    limit: usize,
    next_token: Option<Cursor>,
    ascending: bool,
    started_after: Option<DateTime<Utc>>,
    template: Option<String>,
}

/// Where a page starts: after the sandbox created at `at` with `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor {
    at: i64,
    id: String,
}

impl Cursor {
    fn of(sb: &Sandbox) -> Self {
        Self {
            at: sb.created_at.timestamp_micros(),
            id: sb.id.to_string(),
        }
    }

    fn encode(&self) -> String {
        format!("{}.{}", self.at, self.id)
    }

    fn parse(s: &str, field: &str) -> Result<Self, ApiError> {
        let bad = || ApiError::field(field, "not a token this server handed out");
        let (at, id) = s.split_once('.').ok_or_else(bad)?;
        let at = at.parse::<i64>().map_err(|_| bad())?;
        stockade_core::SandboxId::parse(id).map_err(|_| bad())?;
        Ok(Self {
            at,
            id: id.to_owned(),
        })
    }

    fn key(&self) -> (i64, &str) {
        (self.at, self.id.as_str())
    }
}

/// E2B's `metadata` filter: `k=v&k2=v2`, keys and values percent-encoded
/// once more inside.
fn parse_metadata_filter(raw: &str) -> Result<BTreeMap<String, String>, ApiError> {
    let mut out = BTreeMap::new();
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| ApiError::field("metadata", "not UTF-8 after decoding"))
        };
        out.insert(decode(&k)?, decode(&v)?);
    }
    Ok(out)
}

fn parse_list_query(
    raw: Option<&str>,
    default_states: &[&'static str],
) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery {
        limit: 100,
        ..Default::default()
    };
    for (k, v) in query_pairs(raw) {
        match k.as_str() {
            "metadata" => q.metadata = parse_metadata_filter(&v)?,
            "state" => {
                for s in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    match s {
                        "running" => q.states.push("running"),
                        "paused" => q.states.push("paused"),
                        other => {
                            return Err(ApiError::field(
                                "state",
                                format!("unknown state '{other}': running or paused"),
                            ))
                        }
                    }
                }
            }
            "limit" => {
                q.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| ApiError::field("limit", format!("must be 1 to {MAX_PAGE}")))?
            }
            "nextToken" => q.next_token = Some(Cursor::parse(&v, "nextToken")?),
            "order" => match v.as_str() {
                "asc" => q.ascending = true,
                "desc" => q.ascending = false,
                _ => return Err(ApiError::field("order", "asc or desc")),
            },
            "startedAfter" => {
                q.started_after = Some(
                    DateTime::parse_from_rfc3339(&v)
                        .map_err(|_| ApiError::field("startedAfter", "an RFC 3339 time"))?
                        .with_timezone(&Utc),
                )
            }
            "template" => q.template = Some(v),
            other => return Err(ApiError::field(other, "unknown query parameter")),
        }
    }
    if q.states.is_empty() {
        q.states = default_states.to_vec();
    }
    Ok(q)
}

/// One page of the caller's sandboxes that match, and the next page's token.
async fn list_page(
    state: &AppState,
    headers: &HeaderMap,
    caller: &Caller,
    q: &ListQuery,
) -> E2bResult<(Vec<E2bListedSandbox>, Option<String>)> {
    let mut all = svc_compat::list_all(&state.svc, &caller.scope).await?;
    all.retain(|sb| {
        state_of(sb).is_some_and(|s| q.states.contains(&s) && sb.status != SandboxStatus::Error)
            && q.metadata
                .iter()
                .all(|(k, v)| sb.spec.metadata.get(k) == Some(v))
            && q.started_after
                .is_none_or(|t| sb.started_at.unwrap_or(sb.created_at) >= t)
            && q.template
                .as_deref()
                .is_none_or(|t| template_of(state, sb) == t)
    });
    let key = |sb: &Sandbox| (sb.created_at.timestamp_micros(), sb.id.to_string());
    all.sort_by_key(key);
    if !q.ascending {
        all.reverse();
    }
    if let Some(c) = &q.next_token {
        all.retain(|sb| {
            let k = key(sb);
            let k = (k.0, k.1.as_str());
            if q.ascending {
                k > c.key()
            } else {
                k < c.key()
            }
        });
    }
    let more = all.len() > q.limit;
    all.truncate(q.limit);
    let next = more
        .then(|| all.last().map(|sb| Cursor::of(sb).encode()))
        .flatten();
    Ok((
        all.iter()
            .map(|sb| detail_of(state, headers, &caller.account.id, sb).into())
            .collect(),
        next,
    ))
}

/// `GET /e2b/sandboxes`: the caller's running sandboxes.
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Debug))]
async fn list_v1(
    Authed { state, caller }: Authed<E2bCaller>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<Vec<E2bListedSandbox>>> {
    let mut q = parse_list_query(raw.as_deref(), &["running"])?;
    q.limit = MAX_PAGE;
    Ok(Json(list_page(&state, &headers, &caller, &q).await?.0))
}

/// `GET /e2b/v2/sandboxes`: running and paused sandboxes, filtered by
/// state and metadata, a page at a time (`x-next-token`).
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Debug))]
async fn list_v2(
    Authed { state, caller }: Authed<E2bCaller>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> E2bResult<Response> {
    let q = parse_list_query(raw.as_deref(), &["running", "paused"])?;
    let (items, next) = list_page(&state, &headers, &caller, &q).await?;
    let mut resp = Json(items).into_response();
    if let Some(next) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
        resp.headers_mut().insert("x-next-token", next);
    }
    Ok(resp)
}

/// `GET /e2b/sandboxes/{id}`.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Debug))]
async fn get_one(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
    headers: HeaderMap,
) -> E2bResult<Json<E2bSandboxDetail>> {
    let sb = load_live(&state, &caller.scope, &id).await?;
    Ok(Json(detail_of(&state, &headers, &caller.account.id, &sb)))
}

/// `DELETE /e2b/sandboxes/{id}`: destroys the sandbox and its volume.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Debug))]
async fn kill(AuthedId { state, caller, id }: AuthedId<E2bCaller>) -> E2bResult<StatusCode> {
    let sb = load_live(&state, &caller.scope, &id).await?;
    lifecycle::destroy(&state.svc, sb, false).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /e2b/sandboxes/{id}/timeout`: the sandbox times out `timeout`
/// seconds from now.
#[instrument(skip_all, fields(account.id = %cx.caller.account.id, sandbox.id = %cx.id), err(level = "debug", Debug))]
async fn set_timeout(cx: AuthedId<E2bCaller>, body: Bytes) -> E2bResult<StatusCode> {
    let req: E2bTimeoutRequest = parse_json(&body)?;
    end_in(cx, timeout_secs(req.timeout, "timeout")?, false).await
}

/// `POST /e2b/sandboxes/{id}/refreshes`: keeps the sandbox alive at least
/// `duration` seconds (default 60) from now.
#[instrument(skip_all, fields(account.id = %cx.caller.account.id, sandbox.id = %cx.id), err(level = "debug", Debug))]
async fn refresh(cx: AuthedId<E2bCaller>, body: Bytes) -> E2bResult<StatusCode> {
    let req: E2bRefreshRequest = body_or_default(&body)?;
    end_in(
        cx,
        timeout_secs(req.duration.unwrap_or(60), "duration")?,
        true,
    )
    .await
}

/// Sets the sandbox's end `secs` from now (`only_extend`: never earlier
/// than it is already); 204.
async fn end_in(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
    secs: u64,
    only_extend: bool,
) -> E2bResult<StatusCode> {
    load_live(&state, &caller.scope, &id).await?;
    update::set_timeout_from_now(&state.svc, &caller.scope, &id, secs, only_extend).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Starts a paused sandbox with a new session of `timeout` seconds (or its
/// recorded timeout).
async fn resume_sandbox(
    state: &AppState,
    scope: &Scope,
    sb: Sandbox,
    timeout: Option<i64>,
) -> E2bResult<Sandbox> {
    let id = sb.id.to_string();
    // A frozen one is thawed (its processes go on), a stopped one started.
    let started = if sb.is_paused() {
        pause::resume(&state.svc, sb).await?
    } else {
        lifecycle::start(&state.svc, sb).await?
    };
    match timeout {
        Some(t) => {
            let secs = timeout_secs(t, "timeout")?;
            Ok(update::set_timeout_from_now(&state.svc, scope, &id, secs, false).await?)
        }
        None => Ok(started),
    }
}

/// `POST /e2b/sandboxes/{id}/connect` (and v2): a running sandbox as it is
/// (its end only moves later), a paused one started again (200 / 201).
#[instrument(skip_all, fields(account.id = %cx.caller.account.id, sandbox.id = %cx.id), err(level = "debug", Debug))]
async fn connect(cx: AuthedId<E2bCaller>, headers: HeaderMap, body: Bytes) -> E2bResult<Response> {
    wake(cx, &headers, &body, false).await
}

/// `POST /e2b/sandboxes/{id}/resume`: starts a paused sandbox (409 when it
/// runs).
#[instrument(skip_all, fields(account.id = %cx.caller.account.id, sandbox.id = %cx.id), err(level = "debug", Debug))]
async fn resume(cx: AuthedId<E2bCaller>, headers: HeaderMap, body: Bytes) -> E2bResult<Response> {
    wake(cx, &headers, &body, true).await
}

/// Connect and resume: a paused sandbox is started again with a new
/// session (201); a running one a connect answers as it is, its end only
/// moved later (200), and a resume refuses (409).
async fn wake(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
    headers: &HeaderMap,
    body: &Bytes,
    resume: bool,
) -> E2bResult<Response> {
    let req: E2bConnectRequest = body_or_default(body)?;
    let sb = load_live(&state, &caller.scope, &id).await?;
    let (sb, status) = match (sb.status, req.timeout) {
        (SandboxStatus::Running, _) if resume => {
            return Err(ServiceError::Conflict(format!("Sandbox {id} is already running")).into())
        }
        (SandboxStatus::Running, None) => (sb, StatusCode::OK),
        (SandboxStatus::Running, Some(t)) => {
            let secs = timeout_secs(t, "timeout")?;
            let sb =
                update::set_timeout_from_now(&state.svc, &caller.scope, &id, secs, true).await?;
            (sb, StatusCode::OK)
        }
        _ => {
            let sb = resume_sandbox(&state, &caller.scope, sb, req.timeout).await?;
            (sb, StatusCode::CREATED)
        }
    };
    let answer = sandbox_answer(&state, headers, &caller.account.id, &sb);
    Ok((status, Json(answer)).into_response())
}

/// `POST /e2b/sandboxes/{id}/pause`: freezes the sandbox in place, its
/// processes and memory kept; with `memory: false` only its filesystem is
/// kept (it is stopped). 409 when it is paused already.
#[instrument(skip_all, fields(account.id = %cx.caller.account.id, sandbox.id = %cx.id), err(level = "debug", Debug))]
async fn pause(cx: AuthedId<E2bCaller>, body: Bytes) -> E2bResult<StatusCode> {
    let req: E2bPauseRequest = body_or_default(&body)?;
    let sb = load_live(&cx.state, &cx.caller.scope, &cx.id).await?;
    if !sb.can_exec() {
        return Err(ServiceError::Conflict(format!("Sandbox {} is already paused", cx.id)).into());
    }
    if req.memory == Some(false) {
        let grace = cx.state.svc.config().stop_grace;
        lifecycle::stop(&cx.state.svc, sb, grace).await?;
    } else {
        pause::pause(&cx.state.svc, sb).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /e2b/sandboxes/{id}/fork`: `count` new sandboxes from the
/// sandbox's filesystem; each succeeds or fails on its own.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Debug))]
async fn fork(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
    headers: HeaderMap,
    body: Bytes,
) -> E2bResult<Response> {
    let req: E2bForkRequest = body_or_default(&body)?;
    let count = req.count.unwrap_or(1);
    if !(1..=MAX_FORKS).contains(&count) {
        return Err(ApiError::field("count", format!("must be 1 to {MAX_FORKS}")).into());
    }
    let secs = timeout_secs(req.timeout.unwrap_or(300), "timeout")?;
    let from = load_live(&state, &caller.scope, &id).await?;
    snapshots::ensure_capturable(&from)?;
    let mut results = Vec::new();
    for _ in 0..count {
        let create = CreateSandboxRequest {
            source: Some(SandboxSource::Sandbox {
                sandbox_id: from.id.to_string(),
            }),
            timeout_minutes: Some(secs as f64 / 60.0),
            persistent: Some(from.spec.persistent),
            ..Default::default()
        };
        let new = NewSandbox::from(&create).with_metadata(from.spec.metadata.clone());
        let made = state.svc.create_sandbox(&caller.scope, new, None).await;
        results.push(match made {
            Ok(c) => E2bForkResult {
                sandbox: Some(sandbox_answer(
                    &state,
                    &headers,
                    &caller.account.id,
                    &c.sandbox,
                )),
                error: None,
            },
            Err(e) => {
                let e = ApiError::from(e);
                E2bForkResult {
                    sandbox: None,
                    error: Some(E2bError {
                        code: e.status().as_u16(),
                        message: e.detail().message,
                    }),
                }
            }
        });
    }
    Ok((StatusCode::CREATED, Json(results)).into_response())
}

/// `POST /e2b/sandboxes/{id}/snapshots`: a snapshot usable as `templateID`.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Debug))]
async fn create_snapshot(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
    body: Bytes,
) -> E2bResult<Response> {
    let req: E2bSnapshotRequest = body_or_default(&body)?;
    let name = req
        .name
        .as_deref()
        .map(|n| Snapshot::parse_name(n, "name"))
        .transpose()?;
    let sb = load_live(&state, &caller.scope, &id).await?;
    let snap = snapshots::capture(&state.svc, &caller.scope, &sb, name, SnapshotKind::User).await?;
    Ok((StatusCode::CREATED, Json(snapshot_info(&snap))).into_response())
}

fn snapshot_info(s: &Snapshot) -> E2bSnapshotInfo {
    let mut names = vec![s.name.clone()];
    if s.name != s.id.as_str() {
        names.push(s.id.to_string());
    }
    E2bSnapshotInfo {
        snapshot_id: s.id.to_string(),
        names,
    }
}

/// `GET /e2b/snapshots`: the caller's snapshots, newest first, a page at a
/// time (`x-next-token`).
#[instrument(skip_all, fields(account.id = %caller.account.id), err(level = "debug", Debug))]
async fn list_snapshots(
    Authed { state, caller }: Authed<E2bCaller>,
    RawQuery(raw): RawQuery,
) -> E2bResult<Response> {
    let (mut sandbox, mut name, mut limit, mut after) = (None, None, 100usize, None);
    for (k, v) in query_pairs(raw.as_deref()) {
        match k.as_str() {
            "sandboxID" => sandbox = Some(stockade_core::SandboxId::parse_field(&v, "sandboxID")?),
            "name" => name = Some(v),
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| ApiError::field("limit", format!("must be 1 to {MAX_PAGE}")))?
            }
            "nextToken" => after = Some(v),
            other => return Err(ApiError::field(other, "unknown query parameter").into()),
        }
    }
    let mut list: Vec<Snapshot> = state
        .svc
        .list_snapshots(&caller.scope, sandbox.as_ref())
        .await?
        .into_iter()
        .filter(|s| {
            s.kind == SnapshotKind::User
                && s.deleted_at.is_none()
                && s.status == stockade_core::SnapshotStatus::Ready
                && name.as_deref().is_none_or(|n| s.name == n)
        })
        .collect();
    if let Some(after) = &after {
        match list.iter().position(|s| s.id.as_str() == after) {
            Some(i) => {
                list.drain(..=i);
            }
            None => {
                return Err(
                    ApiError::field("nextToken", "not a token this server handed out").into(),
                )
            }
        }
    }
    let more = list.len() > limit;
    list.truncate(limit);
    let mut resp = Json(list.iter().map(snapshot_info).collect::<Vec<_>>()).into_response();
    if more {
        if let Some(v) = list
            .last()
            .and_then(|s| HeaderValue::from_str(s.id.as_str()).ok())
        {
            resp.headers_mut().insert("x-next-token", v);
        }
    }
    Ok(resp)
}

fn parse_limit(
    raw: Option<&str>,
    known: &[&str],
) -> Result<(usize, Vec<(String, String)>), ApiError> {
    let mut limit = 1000usize;
    let mut rest = Vec::new();
    for (k, v) in query_pairs(raw) {
        if k == "limit" {
            limit = v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| ApiError::field("limit", "must be 1 to 10000"))?;
        } else if known.contains(&k.as_str()) {
            rest.push((k, v));
        } else {
            return Err(ApiError::field(k, "unknown query parameter"));
        }
    }
    Ok((limit, rest))
}

fn entry_of(line: &stockade_runtime::LogLine) -> E2bLogEntry {
    let stderr = line.stream.as_str() == "stderr";
    E2bLogEntry {
        timestamp: line.timestamp,
        message: line.text.clone(),
        level: if stderr { "error" } else { "info" }.into(),
        fields: [("stream".to_owned(), line.stream.as_str().to_owned())].into(),
    }
}

/// The recent output of a sandbox's main process (its logs).
async fn recent(
    state: &AppState,
    caller: &Caller,
    id: &str,
    limit: usize,
) -> E2bResult<Vec<stockade_runtime::LogLine>> {
    let sb = load_live(state, &caller.scope, id).await?;
    Ok(crate::routes::logs::recent_lines(state, &sb, limit).await?)
}

/// `GET /e2b/sandboxes/{id}/logs`: the main process's recent output.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Debug))]
async fn logs_v1(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<E2bSandboxLogs>> {
    let (limit, rest) = parse_limit(raw.as_deref(), &["start"])?;
    let start = match rest.iter().find(|(k, _)| k == "start") {
        None => None,
        Some((_, v)) => Some(
            v.parse::<i64>()
                .ok()
                .and_then(DateTime::from_timestamp_millis)
                .ok_or_else(|| ApiError::field("start", "milliseconds since the epoch"))?,
        ),
    };
    let lines = recent(&state, &caller, &id, limit).await?;
    let lines: Vec<_> = lines
        .into_iter()
        .filter(|l| start.is_none_or(|s| l.timestamp >= s))
        .collect();
    Ok(Json(E2bSandboxLogs {
        logs: lines
            .iter()
            .map(|l| E2bLogLine {
                timestamp: l.timestamp,
                line: l.text.clone(),
            })
            .collect(),
        log_entries: lines.iter().map(entry_of).collect(),
    }))
}

/// `GET /e2b/v2/sandboxes/{id}/logs`: the same as entries, filtered.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Debug))]
async fn logs_v2(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<E2bSandboxLogsV2>> {
    let (limit, rest) = parse_limit(
        raw.as_deref(),
        &["cursor", "direction", "level", "search", "source"],
    )?;
    let mut cursor = None;
    let mut backward = false;
    let mut level = None;
    let mut search = None;
    for (k, v) in rest {
        match k.as_str() {
            "cursor" => {
                cursor = Some(
                    v.parse::<i64>()
                        .ok()
                        .and_then(DateTime::from_timestamp_millis)
                        .ok_or_else(|| ApiError::field("cursor", "milliseconds since the epoch"))?,
                )
            }
            "direction" => match v.as_str() {
                "forward" => backward = false,
                "backward" => backward = true,
                _ => return Err(ApiError::field("direction", "forward or backward").into()),
            },
            "level" => match v.as_str() {
                "debug" | "info" => level = None,
                "warn" | "error" => level = Some("error"),
                _ => return Err(ApiError::field("level", "debug, info, warn or error").into()),
            },
            "search" => search = Some(v),
            _ => {}
        }
    }
    let lines = recent(&state, &caller, &id, 10_000).await?;
    let mut entries: Vec<E2bLogEntry> = lines
        .iter()
        .filter(|l| match cursor {
            None => true,
            Some(c) if backward => l.timestamp <= c,
            Some(c) => l.timestamp >= c,
        })
        .map(entry_of)
        .filter(|e| level.is_none_or(|lv| e.level == lv))
        .filter(|e| search.as_deref().is_none_or(|s| e.message.contains(s)))
        .collect();
    if backward {
        entries.reverse();
    }
    entries.truncate(limit);
    Ok(Json(E2bSandboxLogsV2 { logs: entries }))
}

/// `GET /e2b/sandboxes/{id}/metrics`: a sample of the sandbox's CPU,
/// memory and disk now (Stockade keeps no history); none when it is paused.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Debug))]
async fn metrics(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
    RawQuery(raw): RawQuery,
) -> E2bResult<Json<Vec<E2bSandboxMetric>>> {
    for (k, v) in query_pairs(raw.as_deref()) {
        if !matches!(k.as_str(), "start" | "end") || v.parse::<i64>().is_err() {
            return Err(ApiError::field(k, "start and end are Unix seconds").into());
        }
    }
    let sb = load_live(&state, &caller.scope, &id).await?;
    if !sb.can_exec() {
        return Ok(Json(Vec::new()));
    }
    let mut details = SandboxResponse::from_record(&sb, Utc::now());
    state.svc.fill_usage(&sb, &mut details).await;
    let Some(usage) = details.usage else {
        return Ok(Json(Vec::new()));
    };
    let cpus = (sb.spec.cpu_cores.ceil() as i64).max(1);
    Ok(Json(vec![E2bSandboxMetric {
        timestamp: usage.sampled_at,
        timestamp_unix: usage.sampled_at.timestamp(),
        cpu_count: cpus,
        cpu_used_pct: usage.cpu_percent.unwrap_or(0.0) / cpus as f64,
        mem_used: usage.memory_bytes,
        mem_total: usage.memory_limit_bytes,
        mem_cache: 0,
        disk_used: details.volume.size_bytes.unwrap_or(0),
        disk_total: u64::from(sb.spec.disk_size_gb) << 30,
    }]))
}

/// `PUT /e2b/sandboxes/{id}/network`: replaces the sandbox's egress rules
/// (fields left out are cleared, as E2B does) through Stockade's update,
/// live on a running sandbox; 204.
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Debug))]
async fn update_network(
    AuthedId { state, caller, id }: AuthedId<E2bCaller>,
    body: Bytes,
) -> E2bResult<Response> {
    load_live(&state, &caller.scope, &id).await?;
    let req: e2b_net::E2bNetworkUpdate = parse_json(&body)?;
    refuse_unmapped_network(req.rules.as_ref(), req.egress_proxy.as_ref())?;
    let policy = e2b_net::policy_of(&e2b_net::Egress {
        allow_out: req.allow_out.as_deref().unwrap_or_default(),
        deny_out: req.deny_out.as_deref().unwrap_or_default(),
        dns_servers: req.dns_servers.as_deref(),
        internet: req.allow_internet_access,
        internet_field: "allowInternetAccess",
    })?
    .unwrap_or_else(|| serde_json::json!("allow-all"));
    let patch = stockade_core::update::SpecPatch {
        network_policy: Some(policy),
        ..Default::default()
    };
    update::update(&state.svc, &caller.scope, &id, &patch).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_filters_decode_twice() {
        // What e2b 2.63.0 sends for SandboxQuery(metadata={"user": "a b",
        // "k&": "v=1"}) once the query string itself is decoded.
        let raw = "user=a%2520b&k%2526=v%253D1";
        let m = parse_metadata_filter(raw).unwrap();
        assert_eq!(m["user"], "a b");
        assert_eq!(m["k&"], "v=1");
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = Cursor {
            at: 1_700_000_000_000_000,
            id: "abcdefghijkl".into(),
        };
        assert_eq!(Cursor::parse(&c.encode(), "nextToken").unwrap(), c);
        for bad in ["", "x", "1.", "1.UPPER", "a.abcdefghijkl", "1.abc/../x"] {
            assert!(Cursor::parse(bad, "nextToken").is_err(), "{bad}");
        }
    }

    #[test]
    fn list_queries_parse() {
        let q = parse_list_query(
            Some("state=running,paused&limit=2&order=asc&metadata=a%3D1"),
            &["running"],
        )
        .unwrap();
        assert_eq!(q.states, vec!["running", "paused"]);
        assert_eq!(q.limit, 2);
        assert!(q.ascending);
        assert_eq!(q.metadata["a"], "1");
        let q = parse_list_query(None, &["running"]).unwrap();
        assert_eq!(q.states, vec!["running"]);
        for bad in [
            "state=dead",
            "limit=0",
            "limit=x",
            "order=up",
            "bogus=1",
            "nextToken=zz",
        ] {
            assert!(parse_list_query(Some(bad), &["running"]).is_err(), "{bad}");
        }
    }

    #[test]
    fn create_network_settings_map_to_policies() {
        let req = |json: &str| serde_json::from_str::<E2bNewSandbox>(json).unwrap();
        let policy = |json: &str| network_policy(&req(json)).map_err(|e| e.parts().1);
        assert_eq!(policy(r#"{"templateID":"base"}"#), Ok(None));
        assert_eq!(
            policy(r#"{"templateID":"base","allow_internet_access":false}"#),
            Ok(Some(serde_json::json!("deny-all")))
        );
        assert_eq!(
            policy(
                r#"{"templateID":"base","network":{"allowOut":["example.com"],"denyOut":["0.0.0.0/0"]}}"#
            ),
            Ok(Some(serde_json::json!({"allow": ["example.com"]})))
        );
        assert_eq!(
            policy(r#"{"templateID":"base","network":{"denyOut":["10.0.0.0/8"]}}"#),
            Ok(Some(serde_json::json!({"deny": ["10.0.0.0/8"]})))
        );
        assert!(policy(r#"{"templateID":"base","network":{"allowPublicTraffic":true}}"#).is_err());
        assert!(policy(r#"{"templateID":"base","network":{"rules":{"a.com":[{}]}}}"#).is_err());
        assert!(
            policy(r#"{"templateID":"base","network":{"egressProxy":{"address":"p:1080"}}}"#)
                .is_err()
        );
    }
}
