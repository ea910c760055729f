//! Reconciliation (DB-6): compares the records with what Docker runs, at
//! start and periodically, and corrects the records.

use chrono::Utc;
use stockade_core::SandboxStatus;
use stockade_runtime::RuntimeError;
use tracing::{debug, info, warn};

use crate::AppState;

/// What one reconciliation pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    pub checked: usize,
    pub corrected: usize,
    pub abandoned_creates: usize,
    pub unknown_containers: usize,
}

/// One pass over every active record and every labelled container.
pub async fn reconcile_once(state: &AppState) -> Result<ReconcileReport, RuntimeError> {
    let mut report = ReconcileReport::default();
    let records = match state.store.list_active_sandboxes().await {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %e, "reconcile: could not list records");
            return Ok(report);
        }
    };
    let containers = state
        .runtime
        .list_managed()
        .await
        .inspect_err(|e| state.metrics.docker_error("list", e))?;
    let active_ids: Vec<stockade_core::SandboxId> = records.iter().map(|r| r.id.clone()).collect();
    let now = Utc::now();
    for mut sb in records {
        report.checked += 1;
        if sb.server != state.runtime.server_name() {
            continue;
        }
        let container = containers
            .iter()
            .find(|c| c.sandbox_id.as_ref() == Some(&sb.id));
        let before = (sb.status, sb.status_reason.clone());
        match sb.status {
            SandboxStatus::Provisioning | SandboxStatus::Pending => {
                let age = now - sb.created_at;
                if age.to_std().unwrap_or_default() > state.config.provisioning_grace {
                    warn!(sandbox.id = %sb.id, "reconcile: removing a create that never finished");
                    if let Err(e) = state.runtime.remove(&sb.id, false).await {
                        warn!(sandbox.id = %sb.id, error = %e, "reconcile: could not remove the abandoned container");
                        continue;
                    }
                    if let Err(e) = state.store.purge_sandbox(&sb.id).await {
                        warn!(sandbox.id = %sb.id, error = %e, "reconcile: could not remove the abandoned record");
                    }
                    report.abandoned_creates += 1;
                }
                continue;
            }
            SandboxStatus::Terminated => continue,
            _ => {}
        }
        match container {
            None => {
                sb.status = SandboxStatus::Error;
                sb.status_reason = Some(format!("container not found on server '{}'", sb.server));
            }
            Some(c) if c.running && sb.status != SandboxStatus::Running => {
                sb.status = SandboxStatus::Running;
                sb.status_reason = None;
                sb.started_at = Some(now);
                sb.stopped_at = None;
                sb.session_expires_at = sb.session_deadline(now); // LC-7
            }
            Some(c) if !c.running && sb.status == SandboxStatus::Running => {
                let detail = state.runtime.inspect(&sb.id).await.ok().flatten();
                sb.status = SandboxStatus::Stopped;
                sb.stopped_at = detail.as_ref().and_then(|d| d.finished_at).or(Some(now));
                sb.status_reason = Some(match detail {
                    Some(d) if d.oom_killed => "the main process was killed: out of memory".into(),
                    Some(d) => format!(
                        "the main process exited (code {})",
                        d.exit_code.map_or("unknown".into(), |c| c.to_string())
                    ),
                    None => "the container stopped".into(),
                });
            }
            Some(_) => {}
        }
        if (sb.status, sb.status_reason.clone()) != before {
            info!(sandbox.id = %sb.id, from = %before.0, to = %sb.status, reason = ?sb.status_reason, "reconcile: corrected status");
            match state.store.update_sandbox(&sb).await {
                Ok(_) => report.corrected += 1,
                Err(e) => warn!(sandbox.id = %sb.id, error = %e, "reconcile: status write failed"),
            }
        }
    }
    for c in &containers {
        if c.instance_id.as_deref() != Some(state.instance_id.as_str()) {
            continue;
        }
        let Some(id) = &c.sandbox_id else { continue };
        if active_ids.contains(id) {
            continue;
        }
        match state.store.sandbox_owner(id).await {
            // Inserted after the records were read: a create, or a claim of
            // a warm-pool member (SCALE-3), in flight. Nothing to correct.
            Ok(Some(owner)) if !owner.deleted => {}
            Ok(Some(_)) => {
                // The record is terminated but its container survived (e.g. a
                // crash mid-delete): finish the delete, keeping the volume.
                info!(sandbox.id = %id, "reconcile: removing the container of a terminated sandbox");
                if let Err(e) = state.runtime.remove(id, true).await {
                    warn!(sandbox.id = %id, error = %e, "reconcile: could not remove the container");
                }
            }
            // A warm-pool member: the pool looks after it (pool.rs).
            Ok(None) if c.pool_class.is_some() => {}
            Ok(None) => {
                report.unknown_containers += 1;
                warn!(container.id = %c.container_id, sandbox.id = %id, "reconcile: a Stockade container has no record");
            }
            Err(e) => warn!(error = %e, "reconcile: record lookup failed"),
        }
    }
    Ok(report)
}

/// Runs [`reconcile_once`] every `config.reconcile_interval` until `shutdown`.
pub async fn run_periodically(state: AppState, shutdown: tokio_util::sync::CancellationToken) {
    let mut tick = tokio::time::interval(state.config.reconcile_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {
                match reconcile_once(&state).await {
                    Ok(r) if r.corrected + r.abandoned_creates + r.unknown_containers > 0 => info!(?r, "reconcile pass"),
                    Ok(_) => {}
                    Err(e) => debug!(error = %e, "reconcile skipped: Docker unavailable"),
                }
            }
        }
    }
}
