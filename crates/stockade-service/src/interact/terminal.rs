//! Interactive terminals and the agent's filesystem verbs:
//! a shell (or any command) on a PTY in the sandbox's agent, its input,
//! resizes and kill; `mkdir`, `move` and watching a directory.

use std::collections::HashMap;

use stockade_agent::client::{
    AgentClient, ProcessOutput, ProcessStream, StartRefused, WatchStream,
};
use stockade_agent::proto::filesystem::{EntryInfo, EventType, FileType as AgentFileType};
use stockade_agent::proto::process::{
    process_input, ProcessConfig, ProcessSelector, Pty, PtySize, Signal, StartRequest,
};
use stockade_api::{FileEntry, FileType};
use stockade_core::{Sandbox, SandboxPath, VolumeName};

use crate::error::{ServiceError, ServiceResult};
use crate::interact::exec::agent_error;
use crate::Service;

/// A login shell: bash where the image has it, else sh.
const DEFAULT_SHELL: &str = "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi";

/// What a terminal runs and how big it is.
#[derive(Debug, Clone)]
pub struct TerminalSpec {
    /// A shell command line; `None` for a login shell.
    pub command: Option<String>,
    /// Working directory (default `/workspace`).
    pub cwd: Option<SandboxPath>,
    pub cols: u16,
    pub rows: u16,
}

/// A command on a PTY in a sandbox.
pub struct Terminal {
    agent: AgentClient,
    pid: u32,
    stream: ProcessStream,
}

/// Something a terminal did.
#[derive(Debug)]
pub enum TerminalEvent {
    Output(bytes::Bytes),
    /// It ended: its exit code (128 + signal when killed).
    Exit(Option<i64>),
}

impl Service {
    /// The agent of `sb`, or a 409 saying why this needs one.
    async fn require_agent(&self, sb: &Sandbox, what: &str) -> ServiceResult<AgentClient> {
        if sb.is_paused() {
            return Err(ServiceError::paused(&sb.id));
        }
        if sb.status != stockade_core::SandboxStatus::Running {
            return Err(ServiceError::NotRunning(format!(
                "sandbox {} is not running (status {}): start it to {what}",
                sb.id, sb.status
            )));
        }
        self.agent(sb).await?.ok_or_else(|| {
            ServiceError::Conflict(format!(
                "sandbox {} was made before sandboxes had an agent, which {what} needs; \
                 fork or re-create it",
                sb.id
            ))
        })
    }

    /// Starts a terminal.
    pub async fn open_terminal(&self, sb: &Sandbox, spec: TerminalSpec) -> ServiceResult<Terminal> {
        let agent = self.require_agent(sb, "open a terminal").await?;
        let mut envs: HashMap<String, String> = sb
            .spec
            .environment_vars
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        envs.insert("TERM".into(), "xterm-256color".into());
        let req = StartRequest {
            process: Some(ProcessConfig {
                cmd: "/bin/sh".into(),
                args: vec![
                    "-c".into(),
                    spec.command.unwrap_or_else(|| DEFAULT_SHELL.to_owned()),
                ],
                envs,
                cwd: Some(
                    spec.cwd
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| VolumeName::MOUNT_PATH.to_owned()),
                ),
            }),
            pty: Some(Pty {
                size: Some(PtySize {
                    cols: u32::from(spec.cols),
                    rows: u32::from(spec.rows),
                }),
            }),
            tag: None,
            stdin: Some(true),
        };
        let stream = agent.start(&req, None).await.map_err(|e| {
            if e.start_refused() == Some(StartRefused::CwdMissing) {
                ServiceError::field("cwd", format!("no such directory in the sandbox: {e}"))
            } else {
                agent_error(e)
            }
        })?;
        Ok(Terminal {
            pid: stream.pid,
            agent,
            stream,
        })
    }

    /// Makes a directory and its missing parents.
    pub async fn make_dir(&self, sb: &Sandbox, path: &SandboxPath) -> ServiceResult<FileEntry> {
        let agent = self.require_agent(sb, "make directories").await?;
        match agent.make_dir(path.as_str()).await {
            Ok(entry) => Ok(entry_of(entry)),
            // There already: fine when it is a directory.
            Err(e) if e.code() == Some(stockade_agent::connect::Code::AlreadyExists) => {
                let existing = agent
                    .stat(path.as_str())
                    .await
                    .map_err(|e| fs_error(e, "path"))?;
                if AgentFileType::try_from(existing.r#type) == Ok(AgentFileType::Directory) {
                    Ok(entry_of(existing))
                } else {
                    Err(ServiceError::Conflict(format!(
                        "{path} exists and is not a directory"
                    )))
                }
            }
            Err(e) => Err(fs_error(e, "path")),
        }
    }

    /// Moves (renames) a file or directory.
    pub async fn move_path(
        &self,
        sb: &Sandbox,
        from: &SandboxPath,
        to: &SandboxPath,
    ) -> ServiceResult<FileEntry> {
        let agent = self.require_agent(sb, "move files").await?;
        let entry = agent
            .move_path(from.as_str(), to.as_str())
            .await
            .map_err(|e| fs_error(e, "from"))?;
        Ok(entry_of(entry))
    }

    /// Watches a directory: its events until the caller drops it.
    pub async fn watch(
        &self,
        sb: &Sandbox,
        path: &SandboxPath,
        recursive: bool,
    ) -> ServiceResult<Watch> {
        let agent = self.require_agent(sb, "watch files").await?;
        let stream = agent
            .watch_dir(path.as_str(), recursive)
            .await
            .map_err(|e| fs_error(e, "path"))?;
        Ok(Watch {
            stream,
            base: path.to_string(),
        })
    }
}

impl Terminal {
    /// The process id in the sandbox.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A handle to write to and resize the terminal while its output is read.
    pub fn control(&self) -> TerminalControl {
        TerminalControl {
            agent: self.agent.clone(),
            pid: self.pid,
        }
    }

    /// The next output, or the exit.
    pub async fn next(&mut self) -> Option<ServiceResult<TerminalEvent>> {
        match self.stream.next().await? {
            Ok(ProcessOutput::Pty(b))
            | Ok(ProcessOutput::Stdout(b))
            | Ok(ProcessOutput::Stderr(b)) => Some(Ok(TerminalEvent::Output(b))),
            Ok(ProcessOutput::End(end)) => {
                let exit = crate::interact::exec::exit_of(&end, None, std::time::Instant::now());
                Some(Ok(TerminalEvent::Exit(exit.exit_code)))
            }
            Err(e) => Some(Err(agent_error(e))),
        }
    }
}

/// Writes to, resizes and kills a terminal.
#[derive(Clone)]
pub struct TerminalControl {
    agent: AgentClient,
    pid: u32,
}

impl TerminalControl {
    /// Keystrokes (or pasted bytes) for the terminal.
    pub async fn input(&self, bytes: bytes::Bytes) -> ServiceResult<()> {
        self.agent
            .send_input(
                ProcessSelector::pid(self.pid),
                process_input::Input::Pty(bytes),
            )
            .await
            .map_err(agent_error)
    }

    pub async fn resize(&self, cols: u16, rows: u16) -> ServiceResult<()> {
        self.agent
            .resize(
                ProcessSelector::pid(self.pid),
                u32::from(cols),
                u32::from(rows),
            )
            .await
            .map_err(agent_error)
    }

    /// Ends the terminal's process (its client went away).
    pub async fn kill(&self) {
        let _ = self
            .agent
            .send_signal(ProcessSelector::pid(self.pid), Signal::Sigkill)
            .await;
    }
}

/// A directory being watched.
pub struct Watch {
    stream: WatchStream,
    base: String,
}

/// A change in a watched directory.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WatchEvent {
    /// `create`, `write`, `remove`, `rename` or `chmod`.
    #[serde(skip)]
    pub kind: &'static str,
    /// The absolute path that changed.
    pub path: String,
    /// `file`, `dir`, `symlink` when known.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub file_type: Option<&'static str>,
}

impl Watch {
    pub async fn next(&mut self) -> Option<ServiceResult<WatchEvent>> {
        loop {
            let ev = match self.stream.next().await? {
                Ok(ev) => ev,
                Err(e) => return Some(Err(agent_error(e))),
            };
            let kind = match EventType::try_from(ev.r#type) {
                Ok(EventType::Create) => "create",
                Ok(EventType::Write) => "write",
                Ok(EventType::Remove) => "remove",
                Ok(EventType::Rename) => "rename",
                Ok(EventType::Chmod) => "chmod",
                _ => continue,
            };
            let path = ev
                .entry
                .as_ref()
                .map(|e| e.path.clone())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| format!("{}/{}", self.base.trim_end_matches('/'), ev.name));
            let file_type = ev.entry.as_ref().map(|e| file_type_name(e.r#type));
            return Some(Ok(WatchEvent {
                kind,
                path,
                file_type,
            }));
        }
    }
}

fn file_type_name(t: i32) -> &'static str {
    match AgentFileType::try_from(t) {
        Ok(AgentFileType::Directory) => "dir",
        Ok(AgentFileType::Symlink) => "symlink",
        _ => "file",
    }
}

/// An agent's entry as the API shows files.
fn entry_of(e: EntryInfo) -> FileEntry {
    FileEntry {
        name: e.name,
        path: e.path,
        file_type: match AgentFileType::try_from(e.r#type) {
            Ok(AgentFileType::Directory) => FileType::Dir,
            Ok(AgentFileType::Symlink) => FileType::Symlink,
            Ok(AgentFileType::File) => FileType::File,
            _ => FileType::Other,
        },
        size: u64::try_from(e.size).unwrap_or(0),
        mode: format!("{:04o}", e.mode & 0o7777),
        modified_at: e
            .modified_time
            .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, t.nanos.max(0) as u32)),
        link_target: e.symlink_target,
    }
}

/// An agent's filesystem error: a missing path is a 404, a path that
/// exists already or cannot be used a 409/400 naming `field`.
fn fs_error(e: stockade_agent::client::ClientError, field: &str) -> ServiceError {
    use stockade_agent::connect::Code;
    let text = e.to_string();
    if text.to_ascii_lowercase().contains("not a directory") {
        return ServiceError::Conflict(format!("A file is in the way: {text}"));
    }
    match e.code() {
        Some(Code::NotFound) => {
            ServiceError::NotFound(format!("No such file or directory in the sandbox: {text}"))
        }
        Some(Code::AlreadyExists) => ServiceError::Conflict(text),
        Some(Code::InvalidArgument) | Some(Code::FailedPrecondition) => {
            ServiceError::field(field, text)
        }
        Some(Code::PermissionDenied) => {
            ServiceError::Forbidden(format!("Permission denied in the sandbox: {text}"))
        }
        _ => agent_error(e),
    }
}
