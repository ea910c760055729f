//! Group commit of new sandbox records: inserts that arrive while another
//! is being written wait together and are then written in one transaction,
//! each in a savepoint of its own. A burst of creates (a warm pool handing
//! out a hundred members at once) then costs one write lock and one
//! durable commit per group instead of one each, and no insert sleeps in
//! the database's busy handler behind the others. Each insert still gets
//! its own answer: a taken name refuses only its own create.

use std::sync::Mutex;

use tokio::sync::oneshot;

use stockade_core::Sandbox;

use crate::db::SqlStore;
use crate::sql::{Backend, Q};
use crate::{StoreError, StoreResult, Unavailable};

/// Inserts waiting for the writer, and whether a writer runs.
#[derive(Debug, Default)]
pub(crate) struct InsertQueue {
    state: Mutex<QueueState>,
}

#[derive(Debug, Default)]
struct QueueState {
    waiting: Vec<Waiting>,
    writing: bool,
}

#[derive(Debug)]
struct Waiting {
    sandbox: Sandbox,
    done: oneshot::Sender<StoreResult<()>>,
}

/// The most inserts written in one transaction: a group holds the write
/// lock while it runs, and other writers wait for it.
const MAX_GROUP: usize = 128;

impl InsertQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<B: Backend> SqlStore<B> {
    /// Inserts `sandbox` with the inserts that wait with it. The writing
    /// runs in a task of its own, so a caller that goes away does not cut
    /// the others' transaction short.
    pub(crate) async fn insert_grouped(&self, sandbox: &Sandbox) -> StoreResult<()> {
        let (done, answer) = oneshot::channel();
        let start = {
            let mut state = self.inserts.lock();
            state.waiting.push(Waiting {
                sandbox: sandbox.clone(),
                done,
            });
            !std::mem::replace(&mut state.writing, true)
        };
        if start {
            let store = self.clone();
            tokio::spawn(async move { store.write_groups().await });
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Other(format!(
                "insert sandbox {}: the writer stopped before it answered",
                sandbox.id
            )))
        })
    }

    /// Writes groups until none waits.
    async fn write_groups(&self) {
        loop {
            let group = {
                let mut state = self.inserts.lock();
                if state.waiting.is_empty() {
                    state.writing = false;
                    return;
                }
                let take = state.waiting.len().min(MAX_GROUP);
                state.waiting.drain(..take).collect::<Vec<_>>()
            };
            let (n, started) = (group.len(), std::time::Instant::now());
            self.write_group(group).await;
            tracing::debug!(
                inserts = n,
                elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
                "sandbox records written together"
            );
        }
    }

    async fn write_group(&self, group: Vec<Waiting>) {
        if group.len() == 1 {
            for w in group {
                let result = self.insert_alone(&w.sandbox).await;
                let _ = w.done.send(result);
            }
            return;
        }
        let context = format!("insert {} sandboxes", group.len());
        let mut conn = match self.begin(&context).await {
            Ok(conn) => conn,
            Err(e) => {
                let e = shared(&e);
                for w in group {
                    let _ = w.done.send(Err(e()));
                }
                return;
            }
        };
        let mut written: Vec<Waiting> = Vec::with_capacity(group.len());
        let mut rest = group.into_iter();
        for w in rest.by_ref() {
            let context = format!("insert sandbox {}", w.sandbox.id);
            let inserted = match conn.execute(Q::new("SAVEPOINT grouped"), &context).await {
                Ok(_) => {
                    self.insert_sandbox_in(&mut conn, &w.sandbox, &context)
                        .await
                }
                Err(e) => Err(e),
            };
            let closed = match &inserted {
                Ok(()) => conn.execute(Q::new("RELEASE grouped"), &context).await,
                Err(_) if !conn.is_doubtful() => {
                    match conn.execute(Q::new("ROLLBACK TO grouped"), &context).await {
                        Ok(_) => conn.execute(Q::new("RELEASE grouped"), &context).await,
                        Err(e) => Err(e),
                    }
                }
                Err(_) => Ok(0),
            };
            match (inserted, closed) {
                (Ok(()), Ok(_)) => written.push(w),
                (Err(e), Ok(_)) if !conn.is_doubtful() => {
                    // Refused on its own (a taken name): the others go on.
                    let _ = w.done.send(Err(e));
                }
                (inserted, closed) => {
                    // The transaction is lost: this insert gets its error,
                    // the ones before it and after it are written anew.
                    let e = inserted.err().or(closed.err()).unwrap_or_else(|| {
                        StoreError::Other(format!("{context}: the transaction failed"))
                    });
                    let _ = w.done.send(Err(e));
                    conn.rollback(&context).await;
                    for again in written.into_iter().chain(rest) {
                        let result = self.insert_alone(&again.sandbox).await;
                        let _ = again.done.send(result);
                    }
                    return;
                }
            }
        }
        match self.finish(conn, Ok(()), &context).await {
            Ok(()) => {
                for w in written {
                    let _ = w.done.send(Ok(()));
                }
            }
            Err(e) => {
                // A failed commit leaves the group in doubt: each hears so.
                let e = shared(&e);
                for w in written {
                    let _ = w.done.send(Err(e()));
                }
            }
        }
    }

    /// One insert in a transaction of its own.
    async fn insert_alone(&self, sandbox: &Sandbox) -> StoreResult<()> {
        let context = format!("insert sandbox {}", sandbox.id);
        let mut conn = self.begin(&context).await?;
        let result = self.insert_sandbox_in(&mut conn, sandbox, &context).await;
        self.finish(conn, result, &context).await
    }
}

/// Copies of one error for every insert of a group.
fn shared(e: &StoreError) -> impl Fn() -> StoreError + '_ {
    move || match e {
        StoreError::NotFound => StoreError::NotFound,
        StoreError::Forbidden => StoreError::Forbidden,
        StoreError::Conflict(m) => StoreError::Conflict(m.clone()),
        StoreError::Unavailable(u) => StoreError::Unavailable(Unavailable::new(u.kind, &u.message)),
        StoreError::Other(m) => StoreError::Other(m.clone()),
    }
}
