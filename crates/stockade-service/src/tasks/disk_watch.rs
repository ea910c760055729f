//! The disk watch: where the kernel cannot cap an area of a sandbox's disk
//! (the root filesystem when the engine's storage driver takes no size;
//! `/workspace` on an engine that can neither cap its volumes nor give them
//! a file system of their own), the leader measures the running sandboxes
//! every `disk_check_interval` and stops one whose uncapped area holds more
//! than its `diskSizeGB`, with the reason in its status.
//!
//! Nothing is deleted: started again, the sandbox can remove files; still
//! over at a check one period or more after its start, it is stopped again
//! (a check while its owner is still cleaning up does not count). Between
//! two checks (up to two periods after a start) a sandbox can write past
//! its limit: the watch bounds for how long, only the kernel's caps bound
//! how much (and the hosts' free-disk check stops new
//! sandboxes from landing on a filling disk).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use stockade_core::{Sandbox, SandboxStatus};
use stockade_runtime::{DiskEnforcement, DiskUsage, Runtime};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{sandbox::lifecycle, Service};

/// The start of the status reason of a sandbox the watch stopped.
pub const DISK_LIMIT_EXCEEDED: &str = "disk limit exceeded";

/// Records read from the database at a time.
const PAGE: u32 = 200;
/// Sandboxes measured at once (a root filesystem's size is a walk of its
/// files by the engine).
const CONCURRENCY: usize = 4;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DiskWatchReport {
    /// Running sandboxes with an uncapped area, measured.
    pub measured: usize,
    /// Of those, stopped for holding more than their limit.
    pub stopped: usize,
    /// Measurements or stops that failed (tried again at the next pass).
    pub failed: usize,
}

/// Why a sandbox with `usage` is over its limit in an area the engine
/// does not cap (`None` when it is not).
pub fn over_limit(sb: &Sandbox, caps: &DiskEnforcement, usage: &DiskUsage) -> Option<String> {
    let limit = u64::from(sb.spec.disk_size_gb) << 30;
    let areas = [
        (
            "/workspace",
            caps.workspace.is_enforced(),
            usage.workspace_bytes,
        ),
        (
            "the root filesystem",
            caps.root_fs.is_enforced(),
            usage.root_fs_bytes,
        ),
    ];
    areas.into_iter().find_map(|(area, capped, used)| {
        let used = used.filter(|&u| !capped && u > limit)?;
        Some(format!(
            "{DISK_LIMIT_EXCEEDED}: {area} holds {:.2} GB, over the sandbox's diskSizeGB of {}; \
             start it to remove files, or create it with a larger diskSizeGB",
            used as f64 / f64::from(1u32 << 30),
            sb.spec.disk_size_gb
        ))
    })
}

/// Whether a pass at `now` measures `sb`: running, and started one
/// `period` ago or more, so that an owner who starts a stopped sandbox to
/// remove files is not stopped by a measurement taken before the removal.
fn is_due(sb: &Sandbox, now: DateTime<Utc>, period: Duration) -> bool {
    sb.status == SandboxStatus::Running
        && !sb.is_terminated()
        && sb.session_start().is_none_or(|at| at + period <= now)
}

/// Measures every running sandbox that has an uncapped area and stops the
/// ones over their limit.
pub async fn check_once(svc: &Service) -> DiskWatchReport {
    let mut report = DiskWatchReport::default();
    let mut pages = crate::access::ActivePages::new(svc, PAGE);
    while let Some(page) = pages.next().await {
        let Ok(page) =
            page.inspect_err(|e| warn!(error = %e, "disk watch: could not list the sandboxes"))
        else {
            report.failed += 1;
            return report;
        };
        let now = Utc::now();
        let running = page
            .into_iter()
            .filter(|sb| is_due(sb, now, svc.config.disk_check_interval));
        let mut checks = futures_util::stream::iter(running.map(|sb| check_one(svc, sb)))
            .buffer_unordered(CONCURRENCY);
        while let Some(outcome) = checks.next().await {
            match outcome {
                Outcome::Capped => {}
                Outcome::Within => report.measured += 1,
                Outcome::Stopped => {
                    report.measured += 1;
                    report.stopped += 1;
                }
                Outcome::Failed => report.failed += 1,
            }
        }
    }
    report
}

enum Outcome {
    /// The engine caps both areas: nothing to watch.
    Capped,
    Within,
    Stopped,
    Failed,
}

async fn check_one(svc: &Service, sb: Sandbox) -> Outcome {
    let rt: Arc<dyn Runtime> = match svc.runtime_for(&sb).await {
        Ok(rt) => rt,
        Err(_) => return Outcome::Failed,
    };
    let caps = rt.disk_enforcement().await;
    if caps.is_enforced() {
        return Outcome::Capped;
    }
    let usage = match rt
        .disk_usage(&sb.id, svc.config.usage.volume_size_ttl)
        .await
    {
        Ok(Some(usage)) => usage,
        // Gone meanwhile: reconciliation's business.
        Ok(None) => return Outcome::Within,
        Err(e) => {
            warn!(sandbox.id = %sb.id, error = %e, "disk watch: could not measure");
            return Outcome::Failed;
        }
    };
    let Some(reason) = over_limit(&sb, &caps, &usage) else {
        return Outcome::Within;
    };
    let id = sb.id.clone();
    match lifecycle::stop_because(svc, sb, svc.config.stop_grace, Some(reason.clone())).await {
        Ok(_) => {
            info!(sandbox.id = %id, %reason, "disk watch: sandbox stopped");
            Outcome::Stopped
        }
        Err(e) => {
            warn!(sandbox.id = %id, error = %e, "disk watch: could not stop a sandbox over its disk limit");
            Outcome::Failed
        }
    }
}

/// Every `config.disk_check_interval` until `shutdown`, one pass.
pub async fn run_periodically(svc: Service, shutdown: CancellationToken) {
    let period = svc
        .config
        .disk_check_interval
        .max(Duration::from_millis(100));
    // Not at once: a new leader has other work first.
    let mut every = crate::every::Every::after_first(period, shutdown).await;
    while every.next().await {
        let report = check_once(&svc).await;
        if report.stopped > 0 || report.failed > 0 {
            info!(?report, "disk watch pass");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use stockade_runtime::{Enforcement, QuotaMethod};

    const GB: u64 = 1 << 30;

    fn sandbox(disk_size_gb: u32) -> Sandbox {
        crate::test_support::sandbox(|spec| spec.disk_size_gb = disk_size_gb)
    }

    fn caps(workspace: bool, root_fs: bool) -> DiskEnforcement {
        let area = |capped: bool, method| match capped {
            true => Enforcement::Enforced(method),
            false => Enforcement::NotEnforced("overlay over extfs".into()),
        };
        DiskEnforcement {
            workspace: area(workspace, QuotaMethod::LoopFile),
            root_fs: area(root_fs, QuotaMethod::StorageDriver),
        }
    }

    fn usage(workspace: u64, root_fs: u64) -> DiskUsage {
        DiskUsage {
            workspace_bytes: Some(workspace),
            root_fs_bytes: Some(root_fs),
            ..Default::default()
        }
    }

    #[test]
    fn only_an_uncapped_area_over_the_limit_stops_a_sandbox() {
        let sb = sandbox(1);
        // Over in the root filesystem, which the engine does not cap.
        let why = over_limit(&sb, &caps(true, false), &usage(0, GB + GB / 2)).unwrap();
        assert!(why.starts_with(DISK_LIMIT_EXCEEDED), "{why}");
        assert!(why.contains("the root filesystem holds 1.50 GB"), "{why}");
        assert!(why.contains("diskSizeGB of 1"), "{why}");
        // At the limit, or over in a capped area: nothing.
        assert_eq!(over_limit(&sb, &caps(true, false), &usage(0, GB)), None);
        assert_eq!(
            over_limit(&sb, &caps(true, true), &usage(2 * GB, 2 * GB)),
            None
        );
        // An uncapped /workspace counts too; a limit of 10 GB is 10 GB.
        let why = over_limit(&sb, &caps(false, true), &usage(GB + 1, 0)).unwrap();
        assert!(why.contains("/workspace holds"), "{why}");
        assert_eq!(
            over_limit(&sandbox(10), &caps(false, false), &usage(9 * GB, 9 * GB)),
            None
        );
        // Not measured: not over.
        assert_eq!(
            over_limit(&sb, &caps(false, false), &DiskUsage::default()),
            None
        );
    }

    #[test]
    fn a_sandbox_just_started_is_measured_one_period_later() {
        let period = Duration::from_secs(30);
        let now = Utc::now();
        let mut sb = sandbox(1);
        sb.mark_running(now - Duration::from_secs(10));
        assert!(!is_due(&sb, now, period));
        assert!(is_due(&sb, now + Duration::from_secs(20), period));
        sb.mark_stopped(now, None);
        assert!(!is_due(&sb, now + Duration::from_secs(60), period));
    }
}
