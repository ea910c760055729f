//! Session timeouts: a background task ends sessions whose deadline
//! passed (its timeout, or its idle timeout) as the sandbox's lifecycle
//! says — paused, stopped, or terminated with its volume; by default a
//! persistent sandbox is stopped and any other one terminated. Deadlines live in the database, so one that passed while
//! the server was down is acted on at the first tick after start; each due
//! session is claimed once across server instances.

use chrono::Utc;
use stockade_core::{Sandbox, SandboxStatus, TimeoutAction};
use tracing::{debug, error, info, warn};

use crate::error::ServiceResult;
use crate::{sandbox::lifecycle, Service};

/// The status reason of a sandbox whose session ended.
pub const TIMED_OUT: &str = "session timed out";

/// The status reason of a sandbox whose session ended for lack of use.
pub const IDLE: &str = "idle timeout: nothing used it";

/// Most sessions one tick acts on (the rest wait for the next tick).
const BATCH: u32 = 100;

pub(crate) enum Outcome {
    Paused,
    Stopped,
    Terminated,
    Closed,
}

/// Claims the sessions that ended by now on every Docker host (each one
/// for `config.session_claim_lease`).
pub(crate) async fn claim_due(svc: &Service) -> Vec<Sandbox> {
    let now = Utc::now();
    let lease = chrono::Duration::from_std(svc.config.session_claim_lease)
        .unwrap_or_else(|_| chrono::Duration::seconds(120));
    let mut servers = vec![svc.hosts.own_name().to_owned()];
    match svc.store.list_hosts().await {
        Ok(hosts) => servers.extend(
            hosts
                .into_iter()
                .map(|h| h.name)
                .filter(|n| n != svc.hosts.own_name()),
        ),
        Err(e) => warn!(error = %e, "session timeouts: could not list the hosts"),
    }
    let mut due = Vec::new();
    for server in servers {
        match svc
            .store
            .claim_expired_sessions(&server, now, now + lease, BATCH)
            .await
        {
            Ok(c) => due.extend(c),
            Err(e) => {
                warn!(error = %e, host = %server, "session timeouts: could not read due sessions");
            }
        }
    }
    due
}

/// Ends one claimed session and logs what happened.
pub(crate) async fn expire_logged(svc: &Service, sb: Sandbox) -> Option<Outcome> {
    let id = sb.id.clone();
    match expire(svc, sb).await {
        Ok(outcome) => Some(outcome),
        Err(e) => {
            // The claim's lease runs out and a later tick tries again.
            error!(sandbox.id = %id, error = %e, "session timeout: could not end the session; will retry");
            None
        }
    }
}

/// Ends one claimed session.
async fn expire(svc: &Service, mut sb: Sandbox) -> ServiceResult<Outcome> {
    let reason = if sb.ended_idle(Utc::now()) {
        IDLE
    } else {
        TIMED_OUT
    };
    let action = sb.spec.timeout_action();
    if action != TimeoutAction::Kill && sb.status != SandboxStatus::Running {
        // Stopped, paused (or broken) already: only the session is left to close.
        sb.session_expires_at = None;
        svc.store.update_sandbox(&sb).await?;
        return Ok(Outcome::Closed);
    }
    match action {
        TimeoutAction::Pause => {
            let paused = crate::sandbox::pause::pause_because(svc, sb, Some(reason.into())).await?;
            info!(sandbox.id = %paused.id, reason, "session ended: sandbox paused");
            Ok(Outcome::Paused)
        }
        TimeoutAction::Stop => {
            let stopped =
                lifecycle::stop_because(svc, sb, svc.config.stop_grace, Some(reason.into()))
                    .await?;
            info!(sandbox.id = %stopped.id, reason, "session ended: sandbox stopped");
            Ok(Outcome::Stopped)
        }
        TimeoutAction::Kill => {
            sb.status_reason = Some(reason.into());
            let sb = match svc.store.update_sandbox(&sb).await {
                Ok(saved) => saved,
                Err(e) => {
                    debug!(sandbox.id = %sb.id, error = %e, "session timeout: reason not recorded");
                    sb
                }
            };
            let done = lifecycle::destroy(svc, sb, false).await?;
            info!(sandbox.id = %done.id, reason, "session ended: sandbox terminated");
            Ok(Outcome::Terminated)
        }
    }
}
