//! A background service task that stops when its handle is dropped.

use tokio::task::JoinHandle;

/// A running accept or receive loop. Dropping it (or [`Task::stop`]) stops
/// the loop; connections it already handed off finish on their own.
#[derive(Debug)]
pub struct Task(JoinHandle<()>);

impl Task {
    pub(crate) fn spawn<F>(future: F) -> Self
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        Self(tokio::spawn(future))
    }

    /// Stops the loop.
    pub fn stop(self) {
        drop(self);
    }

    /// Whether the loop has ended (it only ends when stopped or when its
    /// socket fails for good).
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}
