//! A process started in a sandbox whose output is streamed as it comes:
//! what [`crate::Runtime::exec_start`] returns.

use bytes::Bytes;
use tokio::sync::mpsc;

/// Something a streamed exec did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// Bytes the process wrote to stdout, as they came (no line splitting;
    /// a multi-byte character may be split between two events).
    Stdout(Bytes),
    /// Bytes the process wrote to stderr.
    Stderr(Bytes),
    /// The process ended; always the last event.
    Exit(ExecExit),
}

/// How a streamed exec ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecExit {
    /// `None` when it was killed by its timeout or its exit code is unknown.
    pub exit_code: Option<i64>,
    /// The timeout of its [`crate::ExecSpec`] expired and it was killed.
    pub timed_out: bool,
    /// Reading its output failed; what is known is in the other fields.
    pub error: Option<String>,
}

/// A running process. Its events come from [`next`](Self::next); the last
/// one is always [`ExecEvent::Exit`].
///
/// Dropping it before the exit kills the process (and its children), so a
/// client that goes away leaves nothing running.
#[derive(Debug)]
pub struct ExecProcess {
    exec_id: String,
    events: mpsc::Receiver<ExecEvent>,
}

impl ExecProcess {
    /// Wraps the receiving end of a runtime's event channel. The runtime
    /// must kill the process when the receiver is dropped early.
    pub fn new(exec_id: String, events: mpsc::Receiver<ExecEvent>) -> Self {
        Self { exec_id, events }
    }

    /// The handle [`crate::Runtime::exec_kill`] takes.
    pub fn exec_id(&self) -> &str {
        &self.exec_id
    }

    /// The next event; `None` after the exit.
    pub async fn next(&mut self) -> Option<ExecEvent> {
        self.events.recv().await
    }
}
