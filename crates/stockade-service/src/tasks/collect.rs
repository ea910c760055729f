//! The collection of what is left over: images of deleted snapshots that
//! no container uses any more, captures that died midway, uploads past
//! their time, template cache layers no build used for a while.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::{content::snapshots, content::sources, Service};

/// How often the collection runs in the background.
pub const COLLECT_INTERVAL: Duration = Duration::from_secs(60);

/// What one collection removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CollectReport {
    pub snapshots: snapshots::CollectReport,
    pub uploads_expired: usize,
    /// Template build images out of reach and cache layers no build used
    /// for a while.
    pub templates: crate::templates::collect::Collected,
    /// Events and audit entries past their retention.
    pub events_expired: u64,
    pub audit_expired: u64,
}

/// One collection of snapshots and uploads.
pub async fn collect_once(svc: &Service) -> CollectReport {
    let now = chrono::Utc::now();
    let before = |keep: Duration| {
        chrono::Duration::from_std(keep)
            .ok()
            .and_then(|keep| now.checked_sub_signed(keep))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
    };
    let config = &svc.config().events;
    let expired = |what: &str, r: Result<u64, stockade_store::StoreError>| {
        r.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "could not remove {what} past their retention");
            0
        })
    };
    CollectReport {
        snapshots: snapshots::collect_garbage(svc).await,
        uploads_expired: sources::expire_uploads(svc).await,
        templates: crate::templates::collect::collect(svc).await,
        events_expired: expired(
            "events",
            svc.store().purge_events(before(config.retention)).await,
        ),
        audit_expired: expired(
            "audit entries",
            svc.store()
                .purge_audit(before(config.audit_retention))
                .await,
        ),
    }
}

/// Runs [`collect_once`] every [`COLLECT_INTERVAL`] until `shutdown`.
pub async fn collect_periodically(svc: Service, shutdown: CancellationToken) {
    let mut every = crate::every::Every::new(COLLECT_INTERVAL, shutdown);
    while every.next().await {
        let r = collect_once(&svc).await;
        if r != CollectReport::default() {
            info!(?r, "snapshot and upload collection");
        }
    }
}
