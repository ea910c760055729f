//! `prime-sandboxes`' volumes under `/api/v1/sandbox/volumes`: Stockade's
//! shared volumes by name, in prime's shapes (a volume with `id`, `name`,
//! `created_at`; a list page). Volumes belong to an account here: a
//! `team_id` is refused, and so is `publish` (prime's published versions
//! are checkpoints of a volume; Stockade's volumes are live, shared as
//! they are).

use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{any, get};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use stockade_service::content::shared_volumes::{NewSharedVolume, VolumeView};

use super::prime::not_implemented;
use crate::error::{ApiError, ApiResult};
use crate::extract::{query_pairs, ApiJson, Authed};
use crate::AppState;

/// The routes, relative to `/api/v1`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sandbox/volumes", get(list).post(create))
        .route("/sandbox/volumes/{name}", get(get_one).delete(delete))
        .route("/sandbox/{id}/volumes/{name}/publish", any(no_publish))
}

/// `POST /api/v1/sandbox/volumes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrimeNewVolume {
    name: String,
    team_id: Option<String>,
}

/// A volume as prime reads it.
#[derive(Debug, Serialize)]
struct PrimeVolume {
    id: String,
    name: String,
    user_id: String,
    team_id: Option<String>,
    head_checkpoint_id: Option<String>,
    created_at: chrono::DateTime<chrono::Utc>,
    occupied_bytes: u64,
}

#[derive(Debug, Serialize)]
struct PrimeVolumeList {
    volumes: Vec<PrimeVolume>,
    total: usize,
    page: usize,
    per_page: usize,
    has_next: bool,
}

fn view(v: &VolumeView) -> PrimeVolume {
    PrimeVolume {
        id: v.volume.id.to_string(),
        name: v.volume.name.clone(),
        user_id: v.volume.account_id.to_string(),
        team_id: None,
        head_checkpoint_id: None,
        created_at: v.volume.created_at,
        occupied_bytes: 0,
    }
}

/// Refuses a team scope: Stockade's volumes are an account's.
fn no_team(team: Option<&str>) -> ApiResult<()> {
    match team {
        Some(t) if !t.is_empty() => Err(ApiError::field(
            "team_id",
            "volumes belong to an account in Stockade, not to a team: leave team_id out",
        )),
        _ => Ok(()),
    }
}

async fn create(
    Authed { state, caller }: Authed,
    ApiJson(req): ApiJson<PrimeNewVolume>,
) -> ApiResult<(StatusCode, Json<PrimeVolume>)> {
    no_team(req.team_id.as_deref())?;
    let v = state
        .svc
        .create_shared_volume(
            &caller.scope,
            NewSharedVolume {
                name: Some(req.name),
                ..Default::default()
            },
        )
        .await?;
    Ok((StatusCode::CREATED, Json(view(&v))))
}

async fn list(
    Authed { state, caller }: Authed,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<PrimeVolumeList>> {
    let mut page = 1usize;
    let mut per_page = 50usize;
    for (k, v) in query_pairs(raw.as_deref()) {
        let number = |field: &str| {
            v.parse::<usize>()
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| ApiError::field(field, "a whole number from 1 to 1000"))
        };
        match k.as_str() {
            "page" => page = number("page")?,
            "per_page" => per_page = number("per_page")?,
            "team_id" => no_team(Some(&v))?,
            other => return Err(ApiError::field(other, "unknown query parameter")),
        }
    }
    let all = state.svc.shared_volumes(&caller.scope).await?;
    let total = all.len();
    let start = (page - 1).saturating_mul(per_page).min(total);
    let end = start.saturating_add(per_page).min(total);
    Ok(Json(PrimeVolumeList {
        volumes: all[start..end].iter().map(view).collect(),
        total,
        page,
        per_page,
        has_next: end < total,
    }))
}

async fn get_one(
    Authed { state, caller }: Authed,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<PrimeVolume>> {
    team_of_query(raw.as_deref())?;
    let v = state.svc.shared_volume(&caller.scope, &name).await?;
    Ok(Json(view(&v)))
}

async fn delete(
    Authed { state, caller }: Authed,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<StatusCode> {
    team_of_query(raw.as_deref())?;
    state.svc.delete_shared_volume(&caller.scope, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn team_of_query(raw: Option<&str>) -> ApiResult<()> {
    for (k, v) in query_pairs(raw) {
        match k.as_str() {
            "team_id" => no_team(Some(&v))?,
            other => return Err(ApiError::field(other, "unknown query parameter")),
        }
    }
    Ok(())
}

async fn no_publish() -> Response {
    not_implemented(
        "Publishing a volume is not available: Stockade's shared volumes are live — every \
         sandbox that mounts one sees the others' writes at once; take a snapshot \
         (checkpoint) to keep a version",
    )
}
