//! The leader lease: of several server instances on one database,
//! the one holding the `background` lease runs the deployment-wide
//! background work — periodic recovery of dead operations, reconciliation
//! of records against Docker (and the removal of record-less containers),
//! session timeouts, snapshot and upload collection, the disk watch. Every instance keeps
//! running what belongs to its own process: the heartbeat of the operations
//! it holds, its warm-pool members, its egress filter and the sandboxes'
//! entries in it, the isolation check whose report its `/health` shows.
//!
//! Each instance tries to take or renew the lease every third of its term
//! (`--leader-lease-seconds`, 15 s by default). A term is a
//! [`CancellationToken`]: the leader's tasks run under it and stop as soon
//! as a renewal is refused or the term ends locally without a successful
//! renewal (the database did not answer), before another instance may take
//! over. After a crash the lease is taken over once its term has ended; a
//! server that shuts down gives it up at once.
//!
//! The lease avoids doing the work twice; it is not what keeps the work
//! correct. Sessions, operations and warm-pool members are still claimed
//! with conditional writes, so two leaders for a moment (clocks that
//! disagree, a stalled process) waste work but never double it.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use stockade_store::{Lease, BACKGROUND_LEASE};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::ConfigError;
use crate::Service;

/// The lease's term when none is configured: a crashed leader is replaced
/// within 15 to 20 s.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// The shortest term accepted (tests use short ones; production seconds).
pub const MIN_LEASE: Duration = Duration::from_millis(300);

/// What this instance knows of the lease, for `/health` and the banner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderStatus {
    /// This server process, as the lease's holder.
    pub instance: String,
    /// Whether this instance runs the deployment-wide background work now.
    pub is_leader: bool,
    /// The holder of the lease when last seen, if anyone held it.
    pub holder: Option<String>,
    /// When that holder's term ends unless it renews.
    pub expires_at: Option<DateTime<Utc>>,
}

/// This process's side of the lease: its id as a holder, the term, and
/// what it last saw.
#[derive(Debug)]
pub struct Leader {
    instance: String,
    lease: Mutex<Duration>,
    status: watch::Sender<LeaderStatus>,
}

impl Leader {
    /// `instance` is this process's holder id (unique per process).
    pub fn new(instance: &str) -> Self {
        Self {
            instance: instance.to_owned(),
            lease: Mutex::new(DEFAULT_LEASE),
            status: watch::Sender::new(LeaderStatus {
                instance: instance.to_owned(),
                is_leader: false,
                holder: None,
                expires_at: None,
            }),
        }
    }

    /// Sets the lease's term; takes effect at the next renewal. Shorter
    /// than [`MIN_LEASE`] is an error naming the setting.
    pub fn set_lease(&self, lease: Duration) -> Result<(), ConfigError> {
        if lease < MIN_LEASE {
            return Err(ConfigError(format!(
                "leader lease must be at least {} ms, got {} ms",
                MIN_LEASE.as_millis(),
                lease.as_millis()
            )));
        }
        *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = lease;
        Ok(())
    }

    /// The lease's term.
    pub fn lease(&self) -> Duration {
        *self.lease.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This process's id as the lease's holder.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// What this instance knows of the lease now.
    pub fn status(&self) -> LeaderStatus {
        self.status.borrow().clone()
    }

    /// Whether this instance runs the deployment-wide background work now.
    pub fn is_leader(&self) -> bool {
        self.status.borrow().is_leader
    }

    /// Follows the status as it changes (tests, diagnostics).
    pub fn subscribe(&self) -> watch::Receiver<LeaderStatus> {
        self.status.subscribe()
    }

    fn seen(&self, is_leader: bool, lease: Option<&Lease>) {
        self.status.send_modify(|s| {
            s.is_leader = is_leader;
            s.holder = lease.map(|l| l.holder.clone());
            s.expires_at = lease.map(|l| l.expires_at);
        });
    }
}

/// One try to take or renew the lease, bounded by a third of the term.
/// `Ok(Some(deadline))`: held until `deadline` (local time, measured from
/// before the request, so never later than the stored end); `Ok(None)`:
/// another instance holds it.
async fn try_take(svc: &Service) -> Result<Option<tokio::time::Instant>, String> {
    let term = svc.leader.lease();
    let sent = tokio::time::Instant::now();
    let now = Utc::now();
    let until = now + chrono::Duration::from_std(term).unwrap_or(chrono::Duration::seconds(15));
    let holder = svc.leader.instance().to_owned();
    let took = tokio::time::timeout(
        term / 3,
        svc.store
            .acquire_lease(BACKGROUND_LEASE, &holder, now, until),
    )
    .await
    .map_err(|_| format!("the database did not answer within {:?}", term / 3))?
    .map_err(|e| e.to_string())?;
    match took {
        Some(lease) => {
            svc.leader.seen(true, Some(&lease));
            Ok(Some(sent + term))
        }
        None => {
            let current = svc.store.get_lease(BACKGROUND_LEASE).await.ok().flatten();
            svc.leader.seen(false, current.as_ref());
            Ok(None)
        }
    }
}

/// The leader's term: the deployment-wide background tasks, stopped
/// together by cancelling `term`.
fn start_term(svc: &Service, term: &CancellationToken) {
    use crate::tasks::{collect, disk_watch, hosts, reconcile, recovery, sessions};
    let period = (svc.config.operation_lease / 3).max(Duration::from_millis(100));
    tokio::spawn(recovery::run_periodically(
        svc.clone(),
        period,
        term.clone(),
    ));
    // Its first pass runs at once: a new leader reconciles straight away.
    tokio::spawn(reconcile::run_periodically(svc.clone(), term.clone()));
    tokio::spawn(sessions::run_periodically(svc.clone(), term.clone()));
    // Every host checked, cordoned and recovered by one instance.
    tokio::spawn(hosts::check_periodically(svc.clone(), term.clone()));
    tokio::spawn(collect::collect_periodically(svc.clone(), term.clone()));
    tokio::spawn(disk_watch::run_periodically(svc.clone(), term.clone()));
}

/// Takes the lease once, at start, so that a lone instance leads from its
/// first moment: until when it holds it, if it does. On SQLite, which
/// serves one server process (its database lock), a lease held by another
/// holder was left by this installation's previous process, dead now: its
/// term is over (as every operation it held is recovered at once).
pub(crate) async fn take_at_start(svc: &Service) -> Option<tokio::time::Instant> {
    if svc.store.backend() == "sqlite" {
        if let Ok(Some(stale)) = svc.store.get_lease(BACKGROUND_LEASE).await {
            if stale.holder != svc.leader.instance() && stale.expires_at > Utc::now() {
                let until = stale.expires_at
                    + chrono::Duration::from_std(svc.leader.lease())
                        .unwrap_or(chrono::Duration::seconds(15));
                let taken = svc
                    .store
                    .acquire_lease(
                        BACKGROUND_LEASE,
                        svc.leader.instance(),
                        stale.expires_at,
                        until,
                    )
                    .await;
                if let Ok(Some(_)) = taken {
                    info!(previous = %stale.holder, "took over the leader lease of the previous run");
                }
            }
        }
    }
    match try_take(svc).await {
        Ok(held) => held,
        Err(e) => {
            warn!(error = %e, "could not take the leader lease at start; trying again shortly");
            None
        }
    }
}

/// Holds, renews or waits for the lease until `shutdown`; runs the
/// deployment-wide tasks while it holds it, and gives it up on shutdown.
/// `held` is what [`take_at_start`] took.
pub(crate) async fn run(
    svc: Service,
    held: Option<tokio::time::Instant>,
    shutdown: CancellationToken,
) {
    let mut term: Option<(CancellationToken, tokio::time::Instant)> = None;
    if let Some(until) = held {
        let t = shutdown.child_token();
        start_term(&svc, &t);
        info!(instance = %svc.leader.instance(), "this instance leads the background work");
        term = Some((t, until));
    }
    let step_down = |term: &mut Option<(CancellationToken, tokio::time::Instant)>, why: &str| {
        if let Some((t, _)) = term.take() {
            t.cancel();
            warn!(
                reason = why,
                "this instance stopped leading the background work"
            );
        }
    };
    let mut next = tokio::time::Instant::now() + svc.leader.lease() / 3;
    loop {
        let deadline = term.as_ref().map(|(_, d)| *d);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep_until(next) => {}
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                // No renewal got through in the whole term: another
                // instance may take over now, so stop first.
                step_down(&mut term, "the lease could not be renewed in time");
                continue;
            }
        }
        if svc.crashed() {
            // A simulated crash: stop without giving the lease up.
            if let Some((t, _)) = term.take() {
                t.cancel();
            }
            return;
        }
        next = tokio::time::Instant::now() + svc.leader.lease() / 3;
        match try_take(&svc).await {
            Ok(Some(until)) => match &mut term {
                Some((_, d)) => *d = until,
                None => {
                    let t = shutdown.child_token();
                    start_term(&svc, &t);
                    info!(instance = %svc.leader.instance(), "this instance took over the background work");
                    term = Some((t, until));
                }
            },
            Ok(None) => step_down(&mut term, "another instance holds the lease"),
            Err(e) => {
                debug!(error = %e, "could not renew the leader lease");
                if term.is_none() {
                    svc.leader.seen(false, None);
                }
            }
        }
    }
    // Shutdown: the tasks stop with `shutdown`; hand the lease on at once.
    if term.take().is_some() && !svc.crashed() {
        let released = tokio::time::timeout(
            Duration::from_secs(2),
            svc.store
                .release_lease(BACKGROUND_LEASE, svc.leader.instance()),
        )
        .await;
        match released {
            Ok(Ok(_)) => info!("gave up the leader lease"),
            Ok(Err(e)) => {
                warn!(error = %e, "could not give up the leader lease; it ends with its term")
            }
            Err(_) => warn!("could not give up the leader lease in time; it ends with its term"),
        }
    }
    svc.leader.seen(false, None);
}

/// What every instance runs for itself while another leads: the isolation
/// check (its `/health` report) and its egress filter's entries, every
/// `reconcile_interval` (the leader's reconciliation pass does both).
pub(crate) async fn run_local(svc: Service, shutdown: CancellationToken) {
    // Not at once: the start has just done both.
    let mut every = crate::every::Every::after_first(svc.config.reconcile_interval, shutdown).await;
    while every.next().await {
        if svc.leader.is_leader() {
            continue;
        }
        svc.check_isolation().await;
        svc.reconcile_egress().await;
    }
}
