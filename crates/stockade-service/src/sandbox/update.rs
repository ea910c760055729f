//! Updates of a sandbox's settings: timeout, labels, tags, name,
//! environment and CPU/memory, as one durable operation — so
//! concurrent updates, stops and deletes of one sandbox take turns, and the
//! container's limits always end up as the record says.
//!
//! CPU and memory go to Docker first (live on a running container), so a
//! limit Docker refuses fails the update before anything is recorded; the
//! record is then written together with the end of the operation. If the
//! process dies in between, recovery brings the container's limits back to
//! the record's.

use chrono::Utc;
use stockade_api::AppliedChanges;
use stockade_core::update::{PatchField, SpecPatch};
use stockade_core::{OperationKind, Sandbox, SandboxStatus, Scope};
use tracing::{info, warn};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// What an update did.
#[derive(Debug, Clone)]
pub struct Updated {
    pub sandbox: Sandbox,
    /// Which given fields hold now and which from the next start.
    pub applied: AppliedChanges,
    /// Why, in words.
    pub notes: Vec<String>,
}

fn ensure_updatable(sb: &Sandbox) -> ServiceResult<()> {
    crate::sandbox::lifecycle::ensure_live(sb, "it cannot be updated")
}

/// Applies `patch` to the sandbox `id` of `scope`.
pub async fn update(
    svc: &Service,
    scope: &Scope,
    id: &str,
    patch: &SpecPatch,
) -> ServiceResult<Updated> {
    if patch.is_empty() {
        return Err(ServiceError::field(
            "body",
            "nothing to update: give at least one of name, timeoutMinutes, labels, tags, \
             environmentVars, cpuCores, memoryGB",
        ));
    }
    let sb = crate::sandbox::lifecycle::load(svc, scope, id).await?;
    // Bad input is a 400 whatever state the sandbox is in.
    let target = patch.apply(&sb.spec, &svc.config.defaults)?;
    crate::sandbox::lifecycle::check_host_fits(svc, &sb.server, &target).await?;
    if patch.network_policy.is_some() {
        svc.check_private_entries(&target.network)?;
        svc.check_policy_enforceable(&target.network, &sb.server)?;
    }
    ensure_updatable(&sb)?;
    let (mut guard, current) =
        crate::sandbox::lifecycle::begin(svc, OperationKind::Update, &sb, serde_json::json!({}))
            .await?;
    guard.check(ensure_updatable(&current)).await?;
    let mut live = false;
    let mut admitted = None;
    if patch.cpu_cores.is_some() || patch.memory_gb.is_some() {
        let target = patch.apply(&current.spec, &svc.config.defaults)?;
        // The admission (quota, host room) is held until the record has the
        // new limits.
        admitted = Some(
            guard
                .check(crate::fleet::admission::admit_resize(svc, &current, &target).await)
                .await?,
        );
        let rt = guard.check(svc.runtime_for(&current).await).await?;
        let applied = async {
            match rt.inspect(&current.id).await? {
                Some(container) => {
                    rt.update_resources(&current.id, target.cpu_cores, target.memory_bytes())
                        .await?;
                    Ok(container.running)
                }
                None => Ok(false),
            }
        }
        .await;
        match applied {
            Ok(running) => live = running,
            Err(e) => {
                guard.abandon().await; // the limits converge to the record's
                return Err(crate::sandbox::lifecycle::docker_refused(e, "cpuCores"));
            }
        }
    }
    svc.crash_point("update.applied")?;
    let defaults = svc.config.defaults.clone();
    let reapply = move |mut fresh: Sandbox| -> ServiceResult<Sandbox> {
        ensure_updatable(&fresh)?;
        fresh.spec = patch.apply(&fresh.spec, &defaults)?;
        if patch.timeout_minutes.is_some() && fresh.status == SandboxStatus::Running {
            // The current session runs under the new timeout, from its start.
            let start = fresh.session_start().unwrap_or_else(Utc::now);
            fresh.session_expires_at = fresh.session_deadline(start);
        }
        Ok(fresh)
    };
    let next = reapply(current)?;
    let saved = guard
        .finish_applying(next, reapply)
        .await
        .map_err(|e| match (e, &patch.name) {
            (ServiceError::Conflict(_), Some(n)) => ServiceError::Conflict(format!(
                "A sandbox named '{n}' already exists in this account"
            )),
            (e, _) => e,
        })?;
    drop(admitted);
    if patch.network_policy.is_some() {
        // The egress policy changes live — the sandbox moves between the sandbox network and
        // the internal one if it must, and its entry is rewritten.
        if let Err(e) = svc.change_egress(&saved).await {
            warn!(sandbox.id = %saved.id, error = %e, "networkPolicy recorded but not applied yet; reconciliation retries");
            return Err(e);
        }
    }
    let (applied, notes) = explain(patch, &saved, live);
    info!(sandbox.id = %saved.id, now = ?applied.now, next_start = ?applied.next_start, "sandbox updated");
    Ok(Updated {
        sandbox: saved,
        applied,
        notes,
    })
}

/// Which given fields hold now and which from the next start, and why.
fn explain(patch: &SpecPatch, saved: &Sandbox, live_limits: bool) -> (AppliedChanges, Vec<String>) {
    let running = saved.status == SandboxStatus::Running;
    let mut applied = AppliedChanges::default();
    let mut notes = Vec::new();
    let mut limits_noted = false;
    for field in patch.fields() {
        let now = match field {
            PatchField::Name | PatchField::Labels | PatchField::Tags => true,
            PatchField::TimeoutMinutes => {
                notes.push(match (running, saved.session_expires_at) {
                    (true, Some(t)) => format!(
                        "timeoutMinutes: the current session now ends at {} (its start plus the new timeout)",
                        t.to_rfc3339()
                    ),
                    (true, None) => "timeoutMinutes: the current session no longer times out".into(),
                    (false, _) => "timeoutMinutes: applies to the session the next start opens".into(),
                });
                running
            }
            PatchField::EnvironmentVars => {
                notes.push(
                    "environmentVars: the main process sees the new environment from its next \
                     start (stop and start the sandbox); commands run with exec use it at once"
                        .into(),
                );
                false
            }
            PatchField::NetworkPolicy => {
                notes.push(if running {
                    "networkPolicy: applied to the running sandbox's traffic now".into()
                } else {
                    "networkPolicy: recorded; the sandbox's traffic follows it when it starts"
                        .into()
                });
                running
            }
            PatchField::CpuCores | PatchField::MemoryGb => {
                if !limits_noted {
                    limits_noted = true;
                    notes.push(if live_limits {
                        "cpuCores/memoryGB: updated live on the running container".into()
                    } else {
                        "cpuCores/memoryGB: recorded; the container gets them when it next starts"
                            .into()
                    });
                }
                live_limits
            }
        };
        let list = if now {
            &mut applied.now
        } else {
            &mut applied.next_start
        };
        list.push(field.api_name().to_owned());
    }
    (applied, notes)
}

/// Changes a sandbox's record with `change` as one update operation, like
/// [`update`] for fields Docker never sees (the same serialisation with
/// other operations, the same re-application on a concurrent write).
async fn update_record(
    svc: &Service,
    scope: &Scope,
    id: &str,
    change: impl Fn(Sandbox) -> ServiceResult<Sandbox>,
) -> ServiceResult<Sandbox> {
    let sb = crate::sandbox::lifecycle::load(svc, scope, id).await?;
    ensure_updatable(&sb)?;
    let (mut guard, current) =
        crate::sandbox::lifecycle::begin(svc, OperationKind::Update, &sb, serde_json::json!({}))
            .await?;
    let reapply = |fresh: Sandbox| -> ServiceResult<Sandbox> {
        ensure_updatable(&fresh)?;
        change(fresh)
    };
    let next = guard.check(reapply(current)).await?;
    guard.finish_applying(next, reapply).await
}

/// Sets a sandbox's session timeout the way E2B means it: the sandbox
/// times out `seconds` from now. The timeout is recorded as
/// `timeoutMinutes` too, so the next session (after a stop and start) gets
/// as long. With `only_extend`, a running sandbox's end only moves later.
pub async fn set_timeout_from_now(
    svc: &Service,
    scope: &Scope,
    id: &str,
    seconds: u64,
    only_extend: bool,
) -> ServiceResult<Sandbox> {
    let minutes = seconds as f64 / 60.0;
    stockade_core::spec::parse_timeout_minutes(minutes, "timeout").map_err(|_| {
        ServiceError::field(
            "timeout",
            format!(
                "must be at most {} seconds",
                (stockade_core::spec::MAX_TIMEOUT_MINUTES * 60.0) as u64
            ),
        )
    })?;
    let saved = update_record(svc, scope, id, move |mut fresh| {
        let now = Utc::now();
        let end = now + chrono::Duration::seconds(seconds as i64);
        let keep = only_extend
            && fresh.status == SandboxStatus::Running
            && match fresh.session_expires_at {
                None => fresh.spec.timeout_minutes == 0.0,
                Some(current) => current >= end,
            };
        if keep {
            return Ok(fresh);
        }
        fresh.spec.timeout_minutes = minutes;
        if fresh.status == SandboxStatus::Running {
            fresh.session_expires_at = (seconds > 0).then_some(end);
        }
        Ok(fresh)
    })
    .await?;
    info!(sandbox.id = %saved.id, seconds, "session timeout set from now");
    Ok(saved)
}
