//! Recovery of the operations whose holder died, every third of the
//! operation lease; once an hour also the expired idempotency keys.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::Service;

/// Every `period` until `shutdown`, recovers the operations whose holder
/// died; once an hour also forgets expired idempotency keys.
pub async fn run_periodically(svc: Service, period: Duration, shutdown: CancellationToken) {
    let mut last_purge: Option<tokio::time::Instant> = None;
    let mut every =
        crate::every::Every::after_first(period.max(Duration::from_millis(10)), shutdown).await;
    while every.next().await {
        if svc.crashed() {
            return;
        }
        let report = crate::sandbox::recovery::recover_expired(&svc, false).await;
        if report.recovered + report.failed > 0 {
            info!(?report, "recovery pass");
        }
        if let Err(e) = svc.recover_shared_volumes(false).await {
            warn!(error = %e, "recovery of volumes failed; retried next pass");
        }
        if last_purge.is_none_or(|t| t.elapsed() > Duration::from_secs(3600)) {
            last_purge = Some(tokio::time::Instant::now());
            let purged = crate::sandbox::idempotency::purge_expired(&svc).await;
            if purged > 0 {
                debug!(purged, "forgot expired idempotency keys");
            }
        }
    }
}

/// Every 30 s until `shutdown`, stops the volumes' files helpers this
/// process left idle.
pub async fn stop_idle_helpers(svc: Service, shutdown: CancellationToken) {
    let mut every = crate::every::Every::after_first(Duration::from_secs(30), shutdown).await;
    while every.next().await {
        svc.stop_idle_volume_helpers().await;
    }
}
