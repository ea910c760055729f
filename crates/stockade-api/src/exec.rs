//! Running commands in a sandbox: `POST /api/v1/sandbox/{id}/exec`
//! and background processes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use utoipa::ToSchema;

/// `POST /api/v1/sandbox/{id}/exec`: exactly one of `cmd` and `shell`.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecRequest {
    /// The program and its arguments, run as they are (no shell).
    pub cmd: Option<Vec<String>>,
    /// A shell command line, run with `/bin/sh -c`.
    pub shell: Option<String>,
    /// Working directory; relative paths are under `/workspace` (the default).
    pub cwd: Option<String>,
    /// Added to (and overriding) the sandbox's `environmentVars`.
    pub env: Option<BTreeMap<String, String>>,
    /// Kill the process after this many seconds. Default 300, or none for a
    /// background process.
    pub timeout_seconds: Option<u64>,
    /// Written to the process's stdin, which is then closed.
    pub stdin: Option<String>,
    /// Return at once with a `processId` instead of waiting for the exit.
    #[serde(default)]
    pub background: bool,
}

/// The buffered result of an exec.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecResponse {
    /// `null` when the process was killed by its timeout.
    pub exit_code: Option<i64>,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// stdout or stderr went beyond the server's output limit and was cut.
    pub truncated: bool,
    /// What happened, when it is not a plain exit (e.g. the timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The data of the final SSE event `exit` of a streamed exec.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecExitEvent {
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where a background process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProcessStatus {
    Running,
    /// It exited on its own; see `exitCode`.
    Exited,
    /// Killed on request (`DELETE …/processes/{pid}`).
    Killed,
    /// Killed by its `timeoutSeconds`.
    TimedOut,
}

/// A background process.
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessResponse {
    /// `[a-z0-9]{12}`.
    pub process_id: String,
    pub sandbox_id: String,
    /// The argv it runs (`/bin/sh -c …` for a `shell` command).
    pub command: Vec<String>,
    pub status: ProcessStatus,
    // Written as `null` while there is no exit code.
    #[serialize_always]
    pub exit_code: Option<i64>,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Run time so far, or until it ended.
    pub duration_ms: u64,
    /// Captured output (details, wait and kill only), at most the server's
    /// output limit per stream.
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    /// Output beyond the limit was dropped.
    pub truncated: bool,
    pub message: Option<String>,
}

/// `GET /api/v1/sandbox/{id}/processes`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ListProcessesResponse {
    /// Oldest first.
    pub processes: Vec<ProcessResponse>,
}
