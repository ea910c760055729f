//! `GET /api/v1/health`: Docker and database status, without auth.
//!
//! Cheap under a flood: the Docker probe and the database check are
//! cached and refreshed at most once per [`PROBE_TTL`], by one task at a
//! time, so a thousand `/health` calls cost one Docker round trip and one
//! database check. A request with a stale answer at hand waits at most
//! [`STALE_WAIT`] for the refresh; only when there is no answer yet (the
//! first call, or the database's health changed since the last check) does
//! it wait for the probe itself.
//!
//! The default image and the runtime presets' images are looked up the same
//! way (a local inspect each, no pull): an absent default image is a
//! warning, since every create without an image needs it; absent presets are
//! information only, pulled by the first create that names them.
//!
//! Without an administrator's token the answer keeps its statuses and
//! drops what would tell an outsider about the deployment: the engine's
//! address or socket path, the database's and the engine's error text, the
//! egress filter's addresses.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use stockade_api::{
    DatabaseHealth, DiskAreaHealth, DiskHealth, DockerHealth, EgressHealth, HealthResponse,
    ImageHealth, ImagesHealth, IsolationHealth, LeaderHealth, PresetImageHealth,
};
use stockade_runtime::{DiskEnforcement, Enforcement, Runtime, RuntimeInfo};
use stockade_service::egress::EgressStatus;
use stockade_store::StoreError;
use tokio::sync::watch;

use crate::extract::Caller;
use crate::AppState;

/// How long a probe's answer is reused.
pub const PROBE_TTL: Duration = Duration::from_secs(1);
/// How long a request with a stale answer waits for a fresh one.
pub const STALE_WAIT: Duration = Duration::from_millis(400);
/// How long a probe may take before it counts as no answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// One probe's answer and when (and under which state) it was made.
struct Checked<T> {
    at: Instant,
    tag: u64,
    value: T,
}

/// A probe run by at most one task at a time, its last answer shared.
struct Probe<T> {
    last: watch::Sender<Option<Arc<Checked<T>>>>,
    running: AtomicBool,
}

impl<T: Send + Sync + 'static> Probe<T> {
    fn new() -> Self {
        Self {
            last: watch::Sender::new(None),
            running: AtomicBool::new(false),
        }
    }

    /// The answer for state `tag`: the cached one while fresh, else a new
    /// one (waiting at most [`STALE_WAIT`] when a stale one of the same
    /// state can stand in). `None` if no answer arrived in time.
    async fn get<F, Fut>(self: &Arc<Self>, tag: u64, run: F) -> Option<Arc<Checked<T>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        let fresh = |c: &Option<Arc<Checked<T>>>| {
            c.as_ref()
                .is_some_and(|c| c.tag == tag && c.at.elapsed() < PROBE_TTL)
        };
        let mut rx = self.last.subscribe();
        let current = rx.borrow_and_update().clone();
        if fresh(&current) {
            return current;
        }
        if !self.running.swap(true, Ordering::SeqCst) {
            let probe = run();
            let this = self.clone();
            // Its own task: the answer is kept even if this caller goes away.
            tokio::spawn(async move {
                let value = probe.await;
                this.last.send_replace(Some(Arc::new(Checked {
                    at: Instant::now(),
                    tag,
                    value,
                })));
                this.running.store(false, Ordering::SeqCst);
            });
        }
        let stand_in = current.filter(|c| c.tag == tag);
        let wait = if stand_in.is_some() {
            STALE_WAIT
        } else {
            PROBE_TIMEOUT + Duration::from_secs(1)
        };
        let answer = match tokio::time::timeout(wait, rx.wait_for(|c| fresh(c))).await {
            Ok(Ok(answer)) => answer.clone(),
            _ => stand_in,
        };
        answer
    }
}

/// Why the database is not healthy.
#[derive(Debug, Clone)]
struct DbProblem {
    /// It answers but cannot take writes, as opposed to not at all.
    degraded: bool,
    message: String,
}

/// The cached probes of `/health`.
pub struct HealthCache {
    docker: Arc<Probe<Result<RuntimeInfo, String>>>,
    database: Arc<Probe<Result<(), DbProblem>>>,
    images: Arc<Probe<Result<ImagesHealth, String>>>,
}

impl Default for HealthCache {
    fn default() -> Self {
        Self {
            docker: Arc::new(Probe::new()),
            database: Arc::new(Probe::new()),
            images: Arc::new(Probe::new()),
        }
    }
}

/// Health of the server, its Docker engine and its database.
#[utoipa::path(get, path = "/api/v1/health", tag = "system",
    responses(
        (status = 200, description = "Healthy", body = HealthResponse),
        (status = 503, description = "Docker or the database does not answer, or the database cannot take writes (`database.status` `degraded`, e.g. its disk is full); see `docker.troubleshooting` and `database.error`", body = HealthResponse),
    ))]
pub async fn health(
    State(state): State<AppState>,
    mut parts: Parts,
) -> (StatusCode, Json<HealthResponse>) {
    let (code, Json(mut answer)) = probe_all(&state).await;
    // Anyone may ask; only administrators learn where the engine and the
    // database are and what they said.
    let admin = Caller::from_request_parts(&mut parts, &state)
        .await
        .is_ok_and(|c| c.account.is_admin);
    if !admin {
        redact(&mut answer);
    }
    (code, Json(answer))
}

/// What an anonymous caller (or a tenant) may see of an unhealthy answer:
/// the statuses, never an address, a socket path or an error's text.
fn redact(h: &mut HealthResponse) {
    if h.docker.error.is_some() {
        h.docker.error = Some("Docker does not answer".into());
        h.docker.troubleshooting = vec![
            "Is the Docker daemon running? An administrator sees where Stockade looks for it \
             and what it answered (GET /api/v1/health with an administrator's token)."
                .into(),
        ];
    }
    if h.database.error.is_some() {
        h.database.error = Some(
            if h.database.status == "degraded" {
                "the database cannot take writes"
            } else {
                "the database does not answer"
            }
            .into(),
        );
    }
    if let Some(e) = &mut h.egress {
        e.proxy = None;
        e.dns = None;
        if e.reason.is_some() {
            e.reason = Some(DETAILS_FOR_ADMINS.into());
        }
    }
    if let Some(i) = &mut h.isolation {
        if !i.problems.is_empty() {
            i.problems = vec![DETAILS_FOR_ADMINS.into()];
        }
        i.repaired.clear();
    }
    // The warnings that quote what the engine said are said in general.
    for w in &mut h.warnings {
        for (starts, general) in [
            (
                EGRESS_WARNING,
                "networkPolicy allow/deny lists cannot be enforced now",
            ),
            (ISOLATION_WARNING, "sandboxes are not fully isolated now"),
        ] {
            if w.starts_with(starts) {
                *w = format!("{general} ({DETAILS_FOR_ADMINS})");
            }
        }
    }
}

/// Where a redacted answer sends its reader.
const DETAILS_FOR_ADMINS: &str = "an administrator's token shows why";
const EGRESS_WARNING: &str = "networkPolicy allow/deny lists cannot be enforced:";
const ISOLATION_WARNING: &str = "sandboxes are not fully isolated:";

/// Every probe of `/health`, in full.
async fn probe_all(state: &AppState) -> (StatusCode, Json<HealthResponse>) {
    let state = state.clone();
    let svc = state.svc.clone();
    let runtime = state.svc.runtime().clone();
    // A write failing or succeeding changes the store's own health: the
    // database is checked again at once then.
    let db_tag = u64::from(svc.database_degraded());
    let docker_probe = state.health.docker.get(0, move || async move {
        match tokio::time::timeout(PROBE_TIMEOUT, runtime.info()).await {
            Ok(Ok(info)) => Ok(info),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "Docker did not answer within {} s",
                PROBE_TIMEOUT.as_secs()
            )),
        }
    });
    // After a failed write the database is degraded until a write
    // succeeds again; a tiny write tells whether it does now.
    let db_probe = state.health.database.get(db_tag, move || async move {
        match tokio::time::timeout(PROBE_TIMEOUT, svc.check_database()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(DbProblem {
                degraded: matches!(e, StoreError::Unavailable(_)),
                message: e.to_string(),
            }),
            Err(_) => Err(db_no_answer()),
        }
    });
    let defaults = &state.config.service.defaults;
    let (default_image, presets) = (defaults.image.clone(), defaults.runtimes.clone());
    let runtime = state.svc.runtime().clone();
    let images_probe = state.health.images.get(0, move || async move {
        let presets = presets.into_iter().collect::<Vec<_>>();
        tokio::time::timeout(
            PROBE_TIMEOUT,
            images_health(runtime.as_ref(), &default_image, &presets),
        )
        .await
        .map(|checked| checked.map_err(|e| e.to_string()))
        .unwrap_or_else(|_| Err("Docker did not answer".to_owned()))
    });
    let (docker, db, images, disk) = tokio::join!(
        docker_probe,
        db_probe,
        images_probe,
        // Probed once and cached by the runtime.
        tokio::time::timeout(PROBE_TIMEOUT, state.svc.runtime().disk_enforcement()),
    );
    let docker_no_answer = || {
        Err(format!(
            "Docker did not answer within {} s",
            PROBE_TIMEOUT.as_secs()
        ))
    };
    let docker = docker.map_or_else(docker_no_answer, |c| c.value.clone());
    let db = db.map_or_else(|| Err(db_no_answer()), |c| c.value.clone());
    let docker = match docker {
        Ok(info) => DockerHealth {
            status: "healthy".into(),
            version: Some(info.version),
            api_version: Some(info.api_version),
            os: Some(info.os),
            arch: Some(info.arch),
            runtimes: info.runtimes,
            error: None,
            troubleshooting: Vec::new(),
        },
        Err(e) => unhealthy_docker(&state, e),
    };
    let database = match db {
        Ok(()) => DatabaseHealth {
            status: "healthy".into(),
            backend: state.svc.database_backend().into(),
            error: None,
        },
        Err(p) => DatabaseHealth {
            status: if p.degraded { "degraded" } else { "unhealthy" }.into(),
            backend: state.svc.database_backend().into(),
            error: Some(p.message),
        },
    };
    let healthy = docker.status == "healthy" && database.status == "healthy";
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let overall = if healthy {
        "healthy"
    } else if docker.status == "healthy" && database.status == "degraded" {
        "degraded"
    } else {
        "unhealthy"
    };
    let isolation = state.svc.isolation_report().map(|r| IsolationHealth {
        status: r.status().as_str().to_owned(),
        checked_at: r.checked_at,
        problems: r.problems.clone(),
        repaired: r.repaired.clone(),
    });
    // Probed once and cached by the runtime; an engine that did not answer
    // is reported as not enforcing, which says nothing while it is down.
    let disk = disk.ok().filter(|_| docker.status == "healthy");
    let egress = match state.svc.egress().status() {
        EgressStatus::Running { proxy, dns } => EgressHealth {
            status: "running".into(),
            proxy: Some(proxy.to_string()),
            dns: Some(dns.to_string()),
            reason: None,
        },
        EgressStatus::Starting => EgressHealth {
            status: "starting".into(),
            proxy: None,
            dns: None,
            reason: None,
        },
        EgressStatus::Unavailable(why) => EgressHealth {
            status: "unavailable".into(),
            proxy: None,
            dns: None,
            reason: Some(why),
        },
    };
    let images = images
        .and_then(|c| c.value.clone().ok())
        .filter(|_| docker.status == "healthy");
    let mut warnings = Vec::new();
    if let Some(i) = images.as_ref().filter(|i| !i.default.present) {
        warnings.push(absent_default_image_warning(&i.default.image));
    }
    if let Some(why) = &egress.reason {
        warnings.push(format!("{EGRESS_WARNING} {why}"));
    }
    if let Some(w) = disk.as_ref().and_then(|d| d.warning()) {
        warnings.push(w);
    }
    if let Some(i) = isolation.as_ref().filter(|i| i.status == "degraded") {
        warnings.push(format!("{ISOLATION_WARNING} {}", i.problems.join("; ")));
    }
    let leader = state.svc.leader().status();
    let leader = LeaderHealth {
        instance: leader.instance,
        is_leader: leader.is_leader,
        holder: leader.holder,
        expires_at: leader.expires_at,
    };
    (
        code,
        Json(HealthResponse {
            status: overall.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            docker,
            database,
            isolation,
            disk: disk.as_ref().map(disk_health),
            egress: Some(egress),
            images,
            leader: Some(leader),
            warnings,
        }),
    )
}

/// The default image and each preset's image, present or not (a local
/// inspect each, at once; nothing is pulled).
pub async fn images_health(
    runtime: &dyn Runtime,
    default_image: &str,
    presets: &[(String, String)],
) -> Result<ImagesHealth, stockade_runtime::RuntimeError> {
    let default = runtime.image_present(default_image);
    let presets = futures_util::future::join_all(presets.iter().map(|(name, image)| async move {
        runtime
            .image_present(image)
            .await
            .map(|present| PresetImageHealth {
                name: name.clone(),
                image: image.clone(),
                present,
                hint: (!present)
                    .then(|| stockade_core::spec::local_build_hint(image))
                    .flatten()
                    .map(str::to_owned),
            })
    }));
    let (default, presets) = tokio::join!(default, presets);
    Ok(ImagesHealth {
        default: ImageHealth {
            image: default_image.to_owned(),
            present: default?,
        },
        presets: presets.into_iter().collect::<Result<_, _>>()?,
    })
}

/// What `/health` (and the start banner) say while the default image is
/// not on the Docker host: what happens, and the three ways out.
pub fn absent_default_image_warning(image: &str) -> String {
    format!(
        "the default image {image} is not on the Docker host: a create without dockerImage or runtime pulls it first and fails with image_unavailable if it cannot be pulled; run `docker pull {image}`, or choose a local image with --default-image or STOCKADE_DEFAULT_IMAGE"
    )
}

fn db_no_answer() -> DbProblem {
    DbProblem {
        degraded: false,
        message: format!(
            "the database did not answer within {} s",
            PROBE_TIMEOUT.as_secs()
        ),
    }
}

fn disk_health(d: &DiskEnforcement) -> DiskHealth {
    let area = |e: &Enforcement| DiskAreaHealth {
        enforced: e.is_enforced(),
        method: e.method().map(|m| m.describe().to_owned()),
        reason: match e {
            Enforcement::NotEnforced(why) => Some(why.clone()),
            Enforcement::Enforced(_) => None,
        },
    };
    DiskHealth {
        enforced: d.is_enforced(),
        workspace: area(&d.workspace),
        root_fs: area(&d.root_fs),
    }
}

fn unhealthy_docker(state: &AppState, error: String) -> DockerHealth {
    let host = &state.config.docker_host;
    let mut troubleshooting = vec![
        format!("Stockade connects to Docker at {host}; set DOCKER_HOST or --docker-host if your daemon listens elsewhere."),
        "Is the daemon running? Start it with `sudo systemctl start docker` (or run `dockerd` in the background) and check `docker info`.".to_owned(),
    ];
    if let Some(path) = host.strip_prefix("unix://") {
        troubleshooting.push(format!(
            "Check that the socket {path} exists and that the user running Stockade may use it (e.g. is in the `docker` group: `sudo usermod -aG docker $USER`)."
        ));
    }
    troubleshooting.push(
        "Stockade keeps running and reports healthy again as soon as Docker answers.".to_owned(),
    );
    DockerHealth {
        status: "unhealthy".into(),
        version: None,
        api_version: None,
        os: None,
        arch: None,
        runtimes: Vec::new(),
        error: Some(error),
        troubleshooting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A probe that counts its runs and takes `delay`.
    fn counted(
        runs: &Arc<AtomicUsize>,
        delay: Duration,
    ) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = usize> + Send>> {
        let runs = runs.clone();
        move || {
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                runs.fetch_add(1, Ordering::SeqCst) + 1
            })
        }
    }

    #[tokio::test]
    async fn a_thousand_calls_cost_one_probe_per_ttl() {
        let probe = Arc::new(Probe::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let calls: Vec<_> = (0..1000)
            .map(|_| {
                let probe = probe.clone();
                let run = counted(&runs, Duration::from_millis(50));
                tokio::spawn(async move { probe.get(0, run).await.map(|c| c.value) })
            })
            .collect();
        for call in calls {
            assert_eq!(call.await.unwrap(), Some(1));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Fresh: no run at all.
        let got = probe.get(0, counted(&runs, Duration::ZERO)).await;
        assert_eq!(got.map(|c| c.value), Some(1));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Stale: one more.
        tokio::time::sleep(PROBE_TTL + Duration::from_millis(50)).await;
        let got = probe.get(0, counted(&runs, Duration::ZERO)).await;
        assert_eq!(got.map(|c| c.value), Some(2));
    }

    #[tokio::test]
    async fn a_slow_probe_leaves_the_stale_answer_in_time() {
        let probe = Arc::new(Probe::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let _ = probe.get(0, counted(&runs, Duration::ZERO)).await;
        tokio::time::sleep(PROBE_TTL + Duration::from_millis(50)).await;
        // The engine hangs: callers get the last answer after STALE_WAIT,
        // and only one probe runs for all of them.
        let asked = Instant::now();
        for _ in 0..3 {
            let got = probe.get(0, counted(&runs, Duration::from_secs(3))).await;
            assert_eq!(got.map(|c| c.value), Some(1));
        }
        assert!(asked.elapsed() < 3 * STALE_WAIT + Duration::from_millis(300));
        // A different state (the database's health changed) has no stand-in.
        let got = tokio::time::timeout(
            Duration::from_millis(100),
            probe.get(1, counted(&runs, Duration::ZERO)),
        )
        .await;
        assert!(got.is_err(), "waited for a probe of the new state");
    }
}
