//! Draining a Docker host: nothing new is placed there (its
//! state), running sandboxes are stopped (persistent) or destroyed (the
//! others), and stopped persistent sandboxes move to another host — their
//! `/workspace` through the object store, their container made anew from
//! the same image (changes to the root filesystem outside `/workspace` stay
//! behind, as after any re-create).
//!
//! A move is a durable operation (`move`): its steps are export →
//! container on the new host → the record names the new host → the old
//! container and volume go. Recovery finishes it by the record: naming the
//! new host, the old copy is removed; else the new one is.

use chrono::Utc;
use stockade_core::{Host, HostState, OperationKind, Sandbox, SandboxId, SandboxStatus, Scope};
use stockade_store::{SandboxWrite, StoreError};
use tracing::{info, warn};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// Where a move keeps the workspace while it travels.
fn move_key(id: &SandboxId) -> String {
    format!("moves/{id}/workspace.tar")
}

/// One pass over a draining host: what runs is stopped or destroyed, what
/// is stopped moves. Sandboxes with an operation in progress wait for the
/// next pass (every host check).
pub async fn drain_once(svc: &Service, host: &Host) {
    if host.state != HostState::Draining || host.name == svc.hosts.own_name() {
        // The server's own host cannot be drained: it is where this
        // server's filter and pool live (an administrator stops it instead).
        return;
    }
    let mut pages = crate::access::ActivePages::new(svc, 200);
    while let Some(page) = pages.next().await {
        let page = match page {
            Ok(p) => p,
            Err(e) => {
                warn!(host = %host.name, error = %e, "drain: records not read");
                return;
            }
        };
        for sb in page.into_iter().filter(|sb| sb.server == host.name) {
            let id = sb.id.clone();
            if let Err(e) = drain_one(svc, sb).await {
                warn!(sandbox.id = %id, host = %host.name, error = %e, "drain: will retry");
            }
        }
    }
}

async fn drain_one(svc: &Service, sb: Sandbox) -> ServiceResult<()> {
    match sb.status {
        // A paused one's processes cannot move with it: stopped, files kept.
        SandboxStatus::Running | SandboxStatus::Paused if sb.spec.persistent => {
            let reason = Some("stopped: its Docker host is being drained".to_owned());
            crate::sandbox::lifecycle::stop_because(svc, sb, svc.config.stop_grace, reason).await?;
        }
        SandboxStatus::Stopped | SandboxStatus::Error if sb.spec.persistent => {
            move_sandbox(svc, sb).await?;
        }
        SandboxStatus::Provisioning | SandboxStatus::Pending => {}
        _ => {
            crate::sandbox::lifecycle::destroy(svc, sb, false).await?;
        }
    }
    Ok(())
}

/// Moves the stopped sandbox `sb` to the freest other host that may take
/// it and returns its record there.
pub async fn move_sandbox(svc: &Service, sb: Sandbox) -> ServiceResult<Sandbox> {
    let from = sb.server.clone();
    if !sb.spec.mounts.is_empty() {
        // Its shared volumes live on this host and do not move with it.
        return Err(ServiceError::Conflict(format!(
            "sandbox {} mounts shared volumes of host '{from}' and stays there",
            sb.id
        )));
    }
    let mut wanted = sb.clone();
    // A move goes wherever there is a host: the request's own wishes were
    // for the first placement.
    wanted.spec.placement = Default::default();
    let candidates = crate::fleet::placement::candidates(svc, &wanted).await?;
    let counts = svc.store.sandboxes_per_server().await?;
    let Some(target) = candidates
        .into_iter()
        .filter(|c| c.host.name != from)
        .min_by_key(|c| counts.get(&c.host.name).copied().unwrap_or(0))
    else {
        return Err(ServiceError::InsufficientCapacity(format!(
            "sandbox {} cannot leave host '{from}': no other host takes sandboxes now",
            sb.id
        )));
    };
    let to = target.host.name.clone();
    let params = serde_json::json!({ "from": from, "to": to });
    let op = svc.new_operation(OperationKind::Move, &sb.id, &sb.account_id, params);
    let guard = svc.begin_operation(op).await?;
    let scope = Scope::account(sb.account_id.clone());
    let mut sb = match svc.store.get_sandbox(&scope, &sb.id).await {
        Ok(fresh)
            if fresh.status == SandboxStatus::Stopped || fresh.status == SandboxStatus::Error =>
        {
            fresh
        }
        Ok(_) | Err(StoreError::NotFound) => {
            guard.release().await;
            return Err(ServiceError::Conflict(format!(
                "sandbox {} changed while its move began",
                sb.id
            )));
        }
        Err(e) => {
            guard.release().await;
            return Err(e.into());
        }
    };
    let from_rt = svc.runtime_on(&from).await?;
    let key = move_key(&sb.id);
    let moved = async {
        let workspace = from_rt.export_workspace(&sb.id).await?;
        svc.blobs.put_stream(&key, workspace).await?;
        svc.crash_point("move.exported")?;
        crate::content::snapshots::ensure_image_on(
            svc,
            target.runtime.as_ref(),
            &sb.spec.docker_image,
        )
        .await?;
        let (_, archive) = svc.blobs.get_stream(&key).await?;
        let spec = crate::sandbox::lifecycle::container_spec(svc, &sb);
        let cid = target.runtime.create_with_workspace(&spec, archive).await?;
        // Stopped it was, stopped it stays.
        target.runtime.stop(&sb.id, svc.config.stop_grace).await?;
        svc.crash_point("move.created")?;
        Ok::<String, ServiceError>(cid)
    }
    .await;
    let cid = match moved {
        Ok(cid) => cid,
        Err(e) => {
            if !svc.crashed() {
                let _ = target.runtime.remove(&sb.id, false).await;
                let _ = svc.blobs.delete(&key).await;
                guard.release().await;
            }
            return Err(e);
        }
    };
    sb.server = to.clone();
    sb.container_id = Some(cid);
    sb.status = SandboxStatus::Stopped;
    sb.status_reason = Some(format!("moved from host '{from}', which is being drained"));
    sb.stopped_at = sb.stopped_at.or(Some(Utc::now()));
    guard.finish(SandboxWrite::Update(&sb)).await?;
    svc.hosts.remember(&sb.id, &to);
    svc.agents.forget(&sb.id);
    // The old copy: container and volume.
    if let Err(e) = from_rt.remove(&sb.id, false).await {
        warn!(sandbox.id = %sb.id, host = %from, error = %e, "move: the old container stays for reconciliation");
    }
    let _ = svc.blobs.delete(&key).await;
    info!(sandbox.id = %sb.id, from = %from, to = %to, "sandbox moved off a draining host");
    Ok(sb)
}

/// Recovery of an interrupted move (see the module's comment).
pub(crate) async fn finish_move(svc: &Service, op: &stockade_core::Operation) -> ServiceResult<()> {
    let id = SandboxId::parse_field(&op.target, "target")?;
    let text = |k: &str| op.params.get(k).and_then(|v| v.as_str()).map(str::to_owned);
    let (Some(from), Some(to)) = (text("from"), text("to")) else {
        return Err(ServiceError::Internal(format!(
            "move operation {} lacks its hosts",
            op.id
        )));
    };
    let scope = Scope::account(op.account_id.clone());
    let server = match svc.store.get_sandbox(&scope, &id).await {
        Ok(sb) => Some(sb.server),
        Err(StoreError::NotFound) => None,
        Err(e) => return Err(e.into()),
    };
    // The copy the record does not name goes.
    let stale = if server.as_deref() == Some(to.as_str()) {
        from
    } else {
        to
    };
    svc.runtime_on(&stale).await?.remove(&id, false).await?;
    let _ = svc.blobs.delete(&move_key(&id)).await;
    match svc
        .store
        .finish_operation(&op.id, svc.ops.holder(), SandboxWrite::None)
        .await
    {
        Ok(_) | Err(StoreError::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
