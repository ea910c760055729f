//! Container logs as lines (API-5): what [`crate::Runtime::logs`] takes and
//! yields, independent of the engine.

use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;

use crate::RuntimeResult;

/// A line longer than this is cut into pieces of at most this many bytes (at
/// a UTF-8 character boundary), so one endless line cannot grow a buffer
/// without bound.
pub const MAX_LOG_LINE_BYTES: usize = 64 * 1024;

/// Which output of the main process a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogStream {
    Stdout,
    Stderr,
}

impl LogStream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// One line of a sandbox's main-process output, without its line ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub stream: LogStream,
    /// When the engine received the line (of its first byte, for a line that
    /// arrived in pieces).
    pub timestamp: DateTime<Utc>,
    /// The line, decoded as UTF-8 (invalid bytes become U+FFFD).
    pub text: String,
}

/// Which lines [`crate::Runtime::logs`] yields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogsOptions {
    /// Only the last this many lines (as the engine counts them); `None` = all.
    pub tail: Option<usize>,
    /// Only lines from this time on, at whole-second resolution (the engine's):
    /// lines of `since`'s second are included.
    pub since: Option<DateTime<Utc>>,
    /// Keep the stream open and yield new lines as they come, until the
    /// container stops.
    pub follow: bool,
}

/// The lines of [`crate::Runtime::logs`], in the engine's order. An error ends
/// the stream.
pub type LogLines = BoxStream<'static, RuntimeResult<LogLine>>;
