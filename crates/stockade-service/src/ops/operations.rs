//! Durable operations. Every state-changing operation on a
//! sandbox is recorded — its kind, the process that holds it and a lease —
//! before it touches Docker, and there is at most one per sandbox at a time:
//! the row is the per-sandbox lock, across server instances. The holder
//! renews its leases while it lives; ending the operation and writing its
//! result to the record is one transaction. When a holder dies, any live
//! instance claims the operation once its lease ended and finishes or rolls
//! it back (the sandbox layer's recovery, see [`Recovery`]).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use rand::Rng;
use stockade_core::{Operation, OperationId, OperationKind, Sandbox, SandboxId, Scope};
use stockade_store::{SandboxWrite, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// How often a waiting operation looks whether the one ahead of it ended.
const WAIT_POLL: Duration = Duration::from_millis(20);

/// Injected crashes for tests: the service behaves as if its process died at
/// a named point between two steps of an operation (nothing after it runs,
/// its leases are no longer renewed). Production services never set one.
#[derive(Debug, Default)]
pub struct Faults {
    crash_at: Mutex<Option<String>>,
    crashed: AtomicBool,
}

impl Faults {
    /// The next time the service reaches `point`, it "dies" there.
    pub fn crash_at(&self, point: impl Into<String>) {
        *self.crash_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(point.into());
    }

    /// Whether the service has "died" at an injected crash point.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    fn hit(&self, point: &str) -> bool {
        let mut at = self.crash_at.lock().unwrap_or_else(|p| p.into_inner());
        if at.as_deref() == Some(point) {
            *at = None;
            self.crashed.store(true, Ordering::SeqCst);
        }
        self.crashed()
    }
}

/// How an operation is finished or rolled back when its holder gave it up
/// or died: the sandbox layer's recovery, which sits above the operations
/// and is given to them when the service is built.
#[derive(Clone, Copy)]
pub struct Recovery {
    /// Claims an operation whose holder died and recovers it.
    pub claim_and_recover: for<'a> fn(&'a Service, &'a Operation) -> BoxFuture<'a, ()>,
    /// Recovers an operation this process holds; whether it ended.
    pub recover_held: for<'a> fn(&'a Service, Operation) -> BoxFuture<'a, bool>,
}

impl std::fmt::Debug for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recovery")
    }
}

/// This process's side of the operations: who it is, how long its leases
/// last, which operations it holds, and how they are recovered.
#[derive(Debug)]
pub struct Operations {
    holder: String,
    lease: Duration,
    held: Mutex<HashSet<OperationId>>,
    pub(crate) faults: Faults,
    recovery: Recovery,
}

impl Operations {
    pub fn new(lease: Duration, recovery: Recovery) -> Self {
        let tag: String = rand::thread_rng()
            .sample_iter(rand::distributions::Alphanumeric)
            .take(8)
            .map(|c| char::from(c).to_ascii_lowercase())
            .collect();
        Self {
            holder: format!("p{}-{tag}", std::process::id()),
            lease,
            held: Mutex::new(HashSet::new()),
            faults: Faults::default(),
            recovery,
        }
    }

    /// The id of this process as an operation holder.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// When a lease taken or renewed now ends.
    pub fn lease_until(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now + chrono::Duration::from_std(self.lease).unwrap_or(chrono::Duration::seconds(15))
    }

    /// The injected-crash switches (tests).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    fn hold(&self, id: &OperationId) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone());
    }

    fn release(&self, id: &OperationId) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// How many operations this process holds right now.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Service {
    /// A crash point (tests): `Err` when the service is to "die" here.
    pub(crate) fn crash_point(&self, point: &str) -> ServiceResult<()> {
        if self.ops.faults.hit(point) {
            return Err(ServiceError::Internal(format!(
                "the server stopped at '{point}'"
            )));
        }
        Ok(())
    }

    /// Whether this service "died" at an injected crash point: nothing it
    /// would still do may happen.
    pub(crate) fn crashed(&self) -> bool {
        self.ops.faults.crashed()
    }

    /// A new operation of `kind` on `target`, held by this process.
    pub(crate) fn new_operation(
        &self,
        kind: OperationKind,
        target: &SandboxId,
        account: &stockade_core::AccountId,
        params: serde_json::Value,
    ) -> Operation {
        let now = Utc::now();
        Operation {
            id: OperationId::generate(),
            target: target.to_string(),
            kind,
            account_id: account.clone(),
            holder: self.ops.holder.clone(),
            lease_until: self.ops.lease_until(now),
            params,
            created_at: now,
        }
    }

    /// Records `op` for its sandbox and holds it. If another operation is
    /// in progress on the sandbox, waits for it to end (up to
    /// `config.operation_wait`); one whose holder died is recovered first.
    pub(crate) async fn begin_operation(&self, mut op: Operation) -> ServiceResult<OpGuard> {
        if self.shutdown.is_cancelled() {
            return Err(ServiceError::ShuttingDown(
                "The server is shutting down; retry on another instance or after it restarts"
                    .into(),
            ));
        }
        let deadline = tokio::time::Instant::now() + self.config.operation_wait;
        loop {
            // The lease runs from when the operation is recorded, not from
            // when it began to wait.
            op.lease_until = self.ops.lease_until(Utc::now());
            match self.store.begin_operation(&op).await {
                Ok(()) => {
                    self.ops.hold(&op.id);
                    return Ok(OpGuard::new(self.clone(), op));
                }
                Err(StoreError::Conflict(_)) => {}
                Err(e) => return Err(e.into()),
            }
            let Some(ahead) = self.store.get_operation(&op.target).await? else {
                continue; // it ended in between
            };
            if ahead.lease_until <= Utc::now() {
                // Its holder died: finish or roll back its work first.
                (self.ops.recovery.claim_and_recover)(self, &ahead).await;
                continue;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ServiceError::Conflict(format!(
                    "Sandbox {} is busy: another operation ({}) has been in progress for over {} s; try again",
                    op.target,
                    ahead.kind,
                    self.config.operation_wait.as_secs()
                )));
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }

    /// Holds `op`, which was just recorded together with its record.
    pub(crate) fn hold_operation(&self, op: Operation) -> OpGuard {
        self.ops.hold(&op.id);
        OpGuard::new(self.clone(), op)
    }

    /// Renews the leases of every operation this process holds, every
    /// third of a lease, until `shutdown` (or an injected crash).
    pub async fn renew_leases(self, shutdown: CancellationToken) {
        let period = (self.ops.lease / 3).max(Duration::from_millis(10));
        let mut every = crate::every::Every::new(period, shutdown);
        while every.next().await {
            if self.crashed() {
                return;
            }
            if self.ops.held() == 0 {
                continue;
            }
            let until = self.ops.lease_until(Utc::now());
            if let Err(e) = self.store.renew_operations(&self.ops.holder, until).await {
                warn!(error = %e, "could not renew the leases of operations in progress");
            }
        }
    }
}

/// An operation this process holds. [`OpGuard::finish`] ends it together
/// with its write to the record; a guard dropped unfinished (an error, a
/// panic, a cancelled task) hands the operation to recovery at once.
pub struct OpGuard {
    svc: Service,
    op: Operation,
    done: bool,
}

impl OpGuard {
    fn new(svc: Service, op: Operation) -> Self {
        Self {
            svc,
            op,
            done: false,
        }
    }

    pub fn operation(&self) -> &Operation {
        &self.op
    }

    /// Ends the operation and writes `write` in one transaction. Returns
    /// the record as stored when `write` is an update.
    pub async fn finish(mut self, write: SandboxWrite<'_>) -> ServiceResult<Option<Sandbox>> {
        self.write(write).await
    }

    /// Writes the status of `transitioned` (a copy of the record with a
    /// transition applied) and ends the operation. A concurrent writer (a
    /// rename, a port exposed) is not lost: the transition is applied again
    /// to the fresh record. On failure the guard is dropped: recovery takes
    /// the operation.
    pub async fn finish_with_status(self, transitioned: Sandbox) -> ServiceResult<Sandbox> {
        self.try_finish_with_status(transitioned)
            .await
            .map_err(|(e, _guard)| e)
    }

    /// [`OpGuard::finish_with_status`], handing the guard back on failure
    /// (to roll back at once with [`OpGuard::abandon`]).
    pub async fn try_finish_with_status(
        mut self,
        mut transitioned: Sandbox,
    ) -> Result<Sandbox, (ServiceError, Self)> {
        let scope = Scope::account(transitioned.account_id.clone());
        for _ in 0..8 {
            match self.write(SandboxWrite::Update(&transitioned)).await {
                Ok(saved) => return Ok(saved.unwrap_or(transitioned)),
                Err(ServiceError::Conflict(_)) => {
                    match self.svc.store.get_sandbox(&scope, &transitioned.id).await {
                        Ok(mut fresh) => {
                            fresh.take_status_of(&transitioned);
                            transitioned = fresh;
                        }
                        Err(e) => return Err((e.into(), self)),
                    }
                }
                Err(e) => return Err((e, self)),
            }
        }
        let id = transitioned.id.clone();
        Err((
            ServiceError::Conflict(format!(
                "Sandbox {id} kept changing while its status was written; try again"
            )),
            self,
        ))
    }

    /// Writes `changed` and ends the operation. When another writer moved
    /// the record on in between, `reapply` makes the change again on the
    /// fresh record and the write is retried. A write refused although
    /// nobody else wrote (a unique name taken) ends the operation unwritten
    /// and returns the store's conflict.
    pub async fn finish_applying(
        mut self,
        mut changed: Sandbox,
        reapply: impl Fn(Sandbox) -> ServiceResult<Sandbox>,
    ) -> ServiceResult<Sandbox> {
        let scope = Scope::account(changed.account_id.clone());
        for _ in 0..8 {
            match self.write(SandboxWrite::Update(&changed)).await {
                Ok(saved) => return Ok(saved.unwrap_or(changed)),
                Err(ServiceError::Conflict(message)) => {
                    let fresh = self.svc.store.get_sandbox(&scope, &changed.id).await?;
                    if fresh.version == changed.version {
                        self.release().await;
                        return Err(ServiceError::Conflict(message));
                    }
                    changed = reapply(fresh)?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(ServiceError::Conflict(format!(
            "Sandbox {} kept changing while it was written; try again",
            changed.id
        )))
    }

    /// Ends the operation without writing to the record (it no longer
    /// applies, or it failed before changing anything). A failure to end
    /// it is logged; recovery takes the operation then.
    pub async fn release(mut self) {
        self.release_here().await;
    }

    /// Passes `result` on; an error first ends the operation with nothing
    /// changed, as [`OpGuard::release`] does: for the steps that can fail
    /// before anything was changed.
    pub async fn check<T, E: Into<ServiceError>>(
        &mut self,
        result: Result<T, E>,
    ) -> ServiceResult<T> {
        match result {
            Ok(value) => Ok(value),
            Err(e) => {
                self.release_here().await;
                Err(e.into())
            }
        }
    }

    async fn release_here(&mut self) {
        if let Err(e) = self.write(SandboxWrite::None).await {
            warn!(operation = %self.op.id, error = %e, "could not end an operation; recovery will");
        }
    }

    /// Gives up the operation half-way and recovers it here and now:
    /// a create is rolled back, a start or stop converges to Docker's
    /// state (the sandbox layer's recovery).
    pub async fn abandon(mut self) {
        self.done = true;
        self.svc.ops.release(&self.op.id);
        if self.svc.crashed() {
            return;
        }
        (self.svc.ops.recovery.recover_held)(&self.svc, self.op.clone()).await;
    }

    /// One attempt at ending the operation with `write`. A `Conflict` (the
    /// record moved on) leaves the operation held.
    async fn write(&mut self, write: SandboxWrite<'_>) -> ServiceResult<Option<Sandbox>> {
        if self.svc.crashed() {
            self.done = true;
            return Err(ServiceError::Internal("the server stopped".into()));
        }
        let result = self
            .svc
            .store
            .finish_operation(&self.op.id, &self.op.holder, write)
            .await;
        match result {
            Ok(saved) => {
                self.done = true;
                self.svc.ops.release(&self.op.id);
                Ok(saved)
            }
            Err(StoreError::Conflict(m)) => {
                // A stale record, or the operation is no longer ours (its
                // lease ran out and recovery took it over).
                let ours = matches!(
                    self.svc.store.get_operation(&self.op.target).await,
                    Ok(Some(current)) if current.id == self.op.id && current.holder == self.op.holder
                );
                if ours {
                    return Err(ServiceError::Conflict(m));
                }
                self.done = true;
                self.svc.ops.release(&self.op.id);
                Err(ServiceError::Internal(format!(
                    "operation {} on {} was taken over by another instance before it ended",
                    self.op.id, self.op.target
                )))
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let svc = self.svc.clone();
        let op = self.op.clone();
        svc.ops.release(&op.id);
        if svc.crashed() {
            return; // a dead process does nothing more
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            error!(operation = %op.id, "an operation ended unfinished outside a runtime; recovery will take it after its lease");
            return;
        };
        handle.spawn(async move {
            match svc.store.get_operation(&op.target).await {
                Ok(Some(current)) if current.id == op.id => {
                    debug!(operation = %op.id, kind = %op.kind, "an operation ended unfinished; recovering it now");
                    (svc.ops.recovery.recover_held)(&svc, current).await;
                }
                Ok(_) => {} // finished after all
                Err(e) => {
                    warn!(operation = %op.id, error = %e, "could not look up an unfinished operation; recovery will take it after its lease")
                }
            }
        });
    }
}
