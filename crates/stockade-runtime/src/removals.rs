//! Egress entries promised away but not yet removed, on one host.
//!
//! A stop or destroy answers once the container is down and leaves the
//! removal of the sandbox's egress entry (a packet-filter commit of tens of
//! milliseconds) to a task behind it. Until that task is done, the freed
//! address still carries the old sandbox's policy, so nothing may take the
//! address meanwhile: every container start (and network connect) on the
//! host first waits for the removals queued before it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// How long a start waits for removals before it gives up (an `iptables`
/// that hangs must not hang every create with it).
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Removals queued and done, counted in tickets.
#[derive(Debug)]
pub struct PendingRemovals {
    queued: AtomicU64,
    done: watch::Sender<u64>,
}

impl Default for PendingRemovals {
    fn default() -> Self {
        Self {
            queued: AtomicU64::new(0),
            done: watch::channel(0).0,
        }
    }
}

impl PendingRemovals {
    /// Queues one removal: its ticket. Tickets are handed out in order, and
    /// whoever removes must [`finish`](Self::finish) them in that order
    /// (every ticket up to the one finished is taken as done).
    pub fn queue(&self) -> u64 {
        self.queued.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Marks every removal up to `ticket` done (failed ones too: what a
    /// failure leaves, reconciliation and the next entry at the address
    /// replace).
    pub fn finish(&self, ticket: u64) {
        self.done.send_if_modified(|done| {
            let moved = ticket > *done;
            if moved {
                *done = ticket;
            }
            moved
        });
    }

    /// Whether every removal queued so far is done.
    pub fn settled(&self) -> bool {
        *self.done.borrow() >= self.queued.load(Ordering::SeqCst)
    }

    /// Waits until every removal queued before this call is done; an error
    /// naming the wait when that takes longer than thirty seconds.
    pub async fn wait(&self) -> Result<(), String> {
        self.wait_within(SETTLE_LIMIT).await
    }

    async fn wait_within(&self, limit: Duration) -> Result<(), String> {
        let wanted = self.queued.load(Ordering::SeqCst);
        let mut done = self.done.subscribe();
        let reached = tokio::time::timeout(limit, done.wait_for(|d| *d >= wanted)).await;
        if reached.is_ok() {
            return Ok(());
        }
        Err(format!(
            "the egress entries of stopped sandboxes on this host are still being removed \
                 after {} s; try again",
            limit.as_secs()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_once_the_removals_queued_before_it_are_done() {
        let r = std::sync::Arc::new(PendingRemovals::default());
        assert!(r.settled());
        r.wait().await.unwrap();
        let (a, b) = (r.queue(), r.queue());
        assert!(!r.settled());
        let waiting = tokio::spawn({
            let r = r.clone();
            async move { r.wait().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // A removal queued after the wait began is not waited for.
        let c = r.queue();
        r.finish(a);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "done before b was removed");
        r.finish(b);
        waiting.await.unwrap().unwrap();
        assert!(!r.settled());
        // Finishing an older ticket never takes the count back.
        r.finish(c);
        r.finish(a);
        assert!(r.settled());
    }

    #[tokio::test]
    async fn a_removal_that_never_ends_fails_the_wait_with_a_reason() {
        let r = PendingRemovals::default();
        r.queue();
        let err = r.wait_within(Duration::from_millis(50)).await.unwrap_err();
        assert!(err.contains("still being removed"), "{err}");
    }
}
