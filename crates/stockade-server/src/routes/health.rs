//! `GET /api/v1/health`: Docker and database status, without auth (API-10).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use stockade_api::{
    DatabaseHealth, DiskAreaHealth, DiskHealth, DockerHealth, EgressHealth, HealthResponse,
    IsolationHealth,
};
use stockade_runtime::{DiskEnforcement, Enforcement};
use stockade_service::egress::EgressStatus;

use crate::AppState;

/// Health of the server, its Docker engine and its database.
#[utoipa::path(get, path = "/api/v1/health", tag = "system",
    responses(
        (status = 200, description = "Healthy", body = HealthResponse),
        (status = 503, description = "Docker or the database does not answer, or the database cannot take writes (`database.status` `degraded`, e.g. its disk is full); see `docker.troubleshooting` and `database.error`", body = HealthResponse),
    ))]
pub async fn health(State(state): State<AppState>) -> (StatusCode, Json<HealthResponse>) {
    let timeout = Duration::from_secs(5);
    let store = &state.svc.store;
    // DB-12: after a failed write the database is degraded until a write
    // succeeds again; a tiny write tells whether it does now.
    let db_check = async {
        store.ping().await?;
        if !store.health().is_ok() {
            store.probe_write().await?;
        }
        Ok::<(), stockade_store::StoreError>(())
    };
    let (docker, db, disk) = tokio::join!(
        tokio::time::timeout(timeout, state.svc.runtime.info()),
        tokio::time::timeout(timeout, db_check),
        tokio::time::timeout(timeout, state.svc.runtime.disk_enforcement()),
    );
    let docker = match docker {
        Ok(Ok(info)) => DockerHealth {
            status: "healthy".into(),
            version: Some(info.version),
            api_version: Some(info.api_version),
            os: Some(info.os),
            arch: Some(info.arch),
            runtimes: info.runtimes,
            error: None,
            troubleshooting: Vec::new(),
        },
        Ok(Err(e)) => unhealthy_docker(&state, e.to_string()),
        Err(_) => unhealthy_docker(
            &state,
            format!("Docker did not answer within {} s", timeout.as_secs()),
        ),
    };
    let database = match db {
        Ok(Ok(())) => DatabaseHealth {
            status: "healthy".into(),
            backend: state.svc.store.backend().into(),
            error: None,
        },
        Ok(Err(e @ stockade_store::StoreError::Unavailable(_))) => DatabaseHealth {
            status: "degraded".into(),
            backend: state.svc.store.backend().into(),
            error: Some(e.to_string()),
        },
        Ok(Err(e)) => DatabaseHealth {
            status: "unhealthy".into(),
            backend: state.svc.store.backend().into(),
            error: Some(e.to_string()),
        },
        Err(_) => DatabaseHealth {
            status: "unhealthy".into(),
            backend: state.svc.store.backend().into(),
            error: Some(format!(
                "the database did not answer within {} s",
                timeout.as_secs()
            )),
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
    let egress = match state.svc.egress.status() {
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
    let mut warnings = Vec::new();
    if let Some(why) = &egress.reason {
        warnings.push(format!(
            "networkPolicy allow/deny lists cannot be enforced: {why}"
        ));
    }
    if let Some(w) = disk.as_ref().and_then(|d| d.warning()) {
        warnings.push(w);
    }
    if let Some(i) = isolation.as_ref().filter(|i| i.status == "degraded") {
        warnings.push(format!(
            "sandboxes are not fully isolated: {}",
            i.problems.join("; ")
        ));
    }
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
            warnings,
        }),
    )
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
