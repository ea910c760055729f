//! Session timeouts (LC-7): a background task ends sessions whose deadline
//! passed — a persistent sandbox is stopped, any other one terminated (its
//! volume removed). Deadlines live in the database, so one that passed while
//! the server was down is acted on at the first tick after start; each due
//! session is claimed once across server instances (SCALE-2).

use std::time::Duration;

use chrono::Utc;
use futures_util::future::join_all;
use stockade_core::{Sandbox, SandboxStatus};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::error::ApiResult;
use crate::{lifecycle, AppState};

/// The status reason of a sandbox whose session ended.
pub const TIMED_OUT: &str = "session timed out";

/// Most sessions one tick acts on (the rest wait for the next tick).
const BATCH: u32 = 100;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SessionReport {
    pub stopped: usize,
    pub terminated: usize,
    /// Sessions of sandboxes that were not running any more: just closed.
    pub closed: usize,
    pub failed: usize,
}

enum Outcome {
    Stopped,
    Terminated,
    Closed,
}

/// Claims the sessions that ended by now on this server and ends each,
/// concurrently (a stop may wait out its grace period).
pub async fn expire_once(state: &AppState) -> SessionReport {
    let mut report = SessionReport::default();
    let now = Utc::now();
    let lease = chrono::Duration::from_std(state.config.session_claim_lease)
        .unwrap_or_else(|_| chrono::Duration::seconds(120));
    let claimed = match state
        .store
        .claim_expired_sessions(&state.runtime.server_name(), now, now + lease, BATCH)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "session timeouts: could not read due sessions");
            return report;
        }
    };
    for (id, outcome) in join_all(claimed.into_iter().map(|sb| async move {
        let id = sb.id.clone();
        (id, expire(state, sb).await)
    }))
    .await
    {
        match outcome {
            Ok(Outcome::Stopped) => report.stopped += 1,
            Ok(Outcome::Terminated) => report.terminated += 1,
            Ok(Outcome::Closed) => report.closed += 1,
            Err(e) => {
                // The claim's lease runs out and a later tick tries again.
                report.failed += 1;
                error!(sandbox.id = %id, error = %e, "session timeout: could not end the session; will retry");
            }
        }
    }
    report
}

/// Ends one claimed session.
async fn expire(state: &AppState, mut sb: Sandbox) -> ApiResult<Outcome> {
    if sb.spec.persistent {
        if sb.status != SandboxStatus::Running {
            // Stopped (or broken) already: only the session is left to close.
            sb.session_expires_at = None;
            state.store.update_sandbox(&sb).await?;
            return Ok(Outcome::Closed);
        }
        sb.status_reason = Some(TIMED_OUT.into());
        let stopped = lifecycle::stop(state, sb, state.config.stop_grace).await?;
        info!(sandbox.id = %stopped.id, "session timed out: sandbox stopped");
        return Ok(Outcome::Stopped);
    }
    sb.status_reason = Some(TIMED_OUT.into());
    let sb = match state.store.update_sandbox(&sb).await {
        Ok(saved) => saved,
        Err(e) => {
            debug!(sandbox.id = %sb.id, error = %e, "session timeout: reason not recorded");
            sb
        }
    };
    let done = lifecycle::destroy(state, sb, false).await?;
    info!(sandbox.id = %done.id, "session timed out: sandbox terminated");
    Ok(Outcome::Terminated)
}

/// Runs [`expire_once`] every `config.session_check_interval` (the first
/// time at once) until `shutdown`.
pub async fn run_periodically(state: AppState, shutdown: CancellationToken) {
    let period = state
        .config
        .session_check_interval
        .max(Duration::from_millis(50));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {
                let r = expire_once(&state).await;
                if r != SessionReport::default() {
                    info!(?r, "session timeouts");
                }
            }
        }
    }
}
