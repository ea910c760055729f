//! Processes the agent started: spawning (pipes or a PTY), the table they
//! are found in by pid or tag, their output fanned out to every attached
//! stream through bounded channels, stdin, signals and PTY resizes. A
//! process belongs to the agent, never to the request that started it.

use crate::connect::{Code, ConnectError};
use crate::proto::process::{process_event, ProcessConfig, ProcessInfo};
use crate::reaper::{signal_description, ExitStatus, Reaper};
use bytes::Bytes;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

/// Bytes read from a pipe at once (envd's chunk size).
const PIPE_CHUNK: usize = 32 << 10;
/// Bytes read from a PTY at once (envd's chunk size).
const PTY_CHUNK: usize = 16 << 10;
/// Events queued per attached stream before the process's output waits.
const SUBSCRIBER_QUEUE: usize = 32;
/// Processes the agent tracks at once.
pub const MAX_PROCESSES: usize = 4096;
/// The `PATH` processes get when the agent itself has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What to run and how.
#[derive(Clone, Debug)]
pub struct SpawnSpec {
    pub cmd: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// Run as this uid/gid (when it differs from the agent's).
    pub ids: Option<(u32, u32)>,
    /// Rows and columns of a PTY, if the process gets one.
    pub pty: Option<(u16, u16)>,
    /// Whether stdin is a pipe (else `/dev/null`); a PTY is always input.
    pub stdin: bool,
}

/// An event of a running process, as attached streams receive it.
#[derive(Clone, Debug)]
pub enum Event {
    Data(process_event::Output),
    End(ExitStatus),
}

/// The end event envd sends for an exit status (Go's `ProcessState` words).
pub fn end_event(status: ExitStatus) -> process_event::EndEvent {
    match status {
        ExitStatus::Exited(code) => {
            let text = format!("exit status {code}");
            process_event::EndEvent {
                exit_code: code,
                exited: true,
                status: text.clone(),
                error: (code != 0).then_some(text),
            }
        }
        ExitStatus::Signaled(sig) => {
            let text = format!("signal: {}", signal_description(sig));
            process_event::EndEvent {
                exit_code: -1,
                exited: false,
                status: text.clone(),
                error: Some(text),
            }
        }
    }
}

/// One process the agent started.
pub struct Process {
    pub pid: u32,
    pub config: ProcessConfig,
    pub tag: Option<String>,
    stdin: tokio::sync::Mutex<Option<pipe::Sender>>,
    pty_input: Option<tokio::sync::Mutex<pipe::Sender>>,
    pty_master: Option<OwnedFd>,
    subscribers: Mutex<Vec<mpsc::Sender<Event>>>,
}

impl Process {
    /// Whether the process has a PTY.
    pub fn is_pty(&self) -> bool {
        self.pty_master.is_some()
    }

    async fn broadcast(&self, event: Event) {
        let subs: Vec<_> = self.subscribers.lock().expect("subscribers").clone();
        let mut lost = false;
        for s in &subs {
            lost |= s.send(event.clone()).await.is_err();
        }
        if lost {
            self.subscribers
                .lock()
                .expect("subscribers")
                .retain(|s| !s.is_closed());
        }
    }

    /// Writes to the process's stdin pipe.
    pub async fn write_stdin(&self, data: &[u8]) -> Result<(), ConnectError> {
        if self.is_pty() {
            return Err(ConnectError::new(
                Code::FailedPrecondition,
                "the process has a PTY: send the input as pty input",
            ));
        }
        let mut stdin = self.stdin.lock().await;
        let pipe = stdin.as_mut().ok_or_else(|| {
            ConnectError::new(Code::FailedPrecondition, "stdin not enabled or closed")
        })?;
        pipe.write_all(data).await.map_err(|e| {
            ConnectError::internal(format!(
                "error writing to stdin of process {}: {e}",
                self.pid
            ))
        })
    }

    /// Writes to the process's PTY.
    pub async fn write_pty(&self, data: &[u8]) -> Result<(), ConnectError> {
        let Some(pty) = &self.pty_input else {
            return Err(ConnectError::new(
                Code::FailedPrecondition,
                "the process has no PTY: send the input as stdin",
            ));
        };
        pty.lock().await.write_all(data).await.map_err(|e| {
            ConnectError::internal(format!(
                "error writing to the PTY of process {}: {e}",
                self.pid
            ))
        })
    }

    /// Closes stdin (EOF for the process). Closing twice is fine.
    pub async fn close_stdin(&self) -> Result<(), ConnectError> {
        if self.is_pty() {
            return Err(ConnectError::new(
                Code::FailedPrecondition,
                "cannot close stdin of a PTY process: send Ctrl+D (0x04) instead",
            ));
        }
        self.stdin.lock().await.take();
        Ok(())
    }

    /// Resizes the PTY (the kernel tells the process with SIGWINCH).
    pub fn resize(&self, rows: u16, cols: u16) -> Result<(), ConnectError> {
        let Some(master) = &self.pty_master else {
            return Err(ConnectError::new(
                Code::FailedPrecondition,
                "the process has no PTY to resize",
            ));
        };
        rustix::termios::tcsetwinsize(
            master,
            rustix::termios::Winsize {
                ws_row: rows,
                ws_col: cols,
                ws_xpixel: 0,
                ws_ypixel: 0,
            },
        )
        .map_err(|e| ConnectError::internal(format!("error resizing the PTY: {e}")))
    }

    /// Sends a signal to the process and everything it started: every
    /// process runs in a process group of its own (a PTY's in a session of
    /// its own), so a timeout or a kill leaves no child behind.
    pub fn signal(&self, sig: rustix::process::Signal) -> Result<(), ConnectError> {
        let pid = rustix::process::Pid::from_raw(self.pid as i32)
            .ok_or_else(|| ConnectError::internal("invalid pid"))?;
        let group = rustix::process::kill_process_group(pid, sig);
        let own = rustix::process::kill_process(pid, sig);
        match (group, own) {
            (Ok(()), _) | (_, Ok(())) => Ok(()),
            (_, Err(e)) => Err(ConnectError::internal(format!(
                "error signalling process: {e}"
            ))),
        }
    }

    /// What `List` shows of it.
    pub fn info(&self) -> ProcessInfo {
        ProcessInfo {
            config: Some(self.config.clone()),
            pid: self.pid,
            tag: self.tag.clone(),
        }
    }
}

/// Which process a request means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    Pid(u32),
    Tag(String),
}

/// The processes the agent tracks, from start until their end event.
pub struct Processes {
    table: Mutex<HashMap<u32, Arc<Process>>>,
    reaper: Arc<Reaper>,
}

fn nonblocking(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    rustix::io::ioctl_fionbio(&fd, true)?;
    Ok(fd)
}

fn receiver(fd: impl Into<OwnedFd>) -> std::io::Result<pipe::Receiver> {
    pipe::Receiver::from_owned_fd_unchecked(nonblocking(fd.into())?)
}

fn sender(fd: impl Into<OwnedFd>) -> std::io::Result<pipe::Sender> {
    pipe::Sender::from_owned_fd_unchecked(nonblocking(fd.into())?)
}

fn start_error(spec: &SpawnSpec, e: impl std::fmt::Display) -> ConnectError {
    let cmd = std::iter::once(spec.cmd.as_str())
        .chain(spec.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    ConnectError::invalid(format!("{START_FAILED}'{cmd}': {e}"))
}

/// How the agent words a start that failed to run its program (E2B's
/// envd words it the same); [`crate::client::ClientError::start_refused`]
/// reads it back.
pub(crate) const START_FAILED: &str = "error starting process ";

/// How the agent words a working directory that is not there.
pub(crate) const CWD_MISSING: (&str, &str) = ("cwd '", "' does not exist");

/// The refusal of a start whose working directory is not there.
pub(crate) fn cwd_missing(cwd: &std::path::Path) -> ConnectError {
    let (before, after) = CWD_MISSING;
    ConnectError::invalid(format!("{before}{}{after}", cwd.display()))
}

/// The error of a program that is not in the sandbox at all: say so, and
/// what to do, instead of a bare "No such file or directory".
fn missing_program(spec: &SpawnSpec, path_env: Option<&str>) -> Option<ConnectError> {
    let program = spec.cmd.as_str();
    let exists = if program.contains('/') {
        let p = if program.starts_with('/') {
            PathBuf::from(program)
        } else {
            spec.cwd.join(program)
        };
        p.exists()
    } else {
        path_env
            .unwrap_or(DEFAULT_PATH)
            .split(':')
            .filter(|d| !d.is_empty())
            .any(|d| std::path::Path::new(d).join(program).exists())
    };
    (!exists).then(|| {
        let shell_hint = if matches!(program, "/bin/bash" | "bash") {
            " (SDKs such as e2b and prime-sandboxes run every command with /bin/bash)"
        } else {
            ""
        };
        start_error(
            spec,
            format!(
                "'{program}' does not exist in this sandbox{shell_hint}: its image does not \
                 provide it; create the sandbox from an image that does (for example a \
                 Debian- or Ubuntu-based one)"
            ),
        )
    })
}

/// A spawn's error: a missing program said plainly, anything else as is.
fn spawn_failed(spec: &SpawnSpec, e: impl std::fmt::Display + IoKind) -> ConnectError {
    if e.is_not_found() {
        let path = spec
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        if let Some(err) = missing_program(spec, path) {
            return err;
        }
    }
    start_error(spec, e)
}

/// Whether a spawn error is "no such file".
trait IoKind {
    fn is_not_found(&self) -> bool;
}

impl IoKind for std::io::Error {
    fn is_not_found(&self) -> bool {
        self.kind() == std::io::ErrorKind::NotFound
    }
}

impl IoKind for pty_process::Error {
    fn is_not_found(&self) -> bool {
        match self {
            pty_process::Error::Io(e) => e.kind() == std::io::ErrorKind::NotFound,
            _ => false,
        }
    }
}

async fn read_opt(r: Option<&mut pipe::Receiver>, buf: &mut [u8]) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

impl Processes {
    pub fn new(reaper: Arc<Reaper>) -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::new(HashMap::new()),
            reaper,
        })
    }

    /// Spawns a process and attaches a first stream to it (so no output is
    /// missed). Synchronous from spawn to registration on purpose.
    pub fn spawn(
        self: &Arc<Self>,
        spec: &SpawnSpec,
        config: ProcessConfig,
        tag: Option<String>,
    ) -> Result<(Arc<Process>, mpsc::Receiver<Event>), ConnectError> {
        if self.table.lock().expect("table").len() >= MAX_PROCESSES {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!("the agent already runs {MAX_PROCESSES} processes"),
            ));
        }
        let (pid, exit, stdin, outputs, pty_input, pty_master) = match spec.pty {
            None => {
                let mut cmd = std::process::Command::new(&spec.cmd);
                // A group of its own: a signal reaches its children too.
                std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
                cmd.args(&spec.args)
                    .env_clear()
                    .envs(spec.env.iter().map(|(k, v)| (k, v)))
                    .current_dir(&spec.cwd)
                    .stdin(if spec.stdin {
                        Stdio::piped()
                    } else {
                        Stdio::null()
                    })
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                if let Some((uid, gid)) = spec.ids {
                    std::os::unix::process::CommandExt::uid(&mut cmd, uid);
                    std::os::unix::process::CommandExt::gid(&mut cmd, gid);
                }
                let mut child = cmd.spawn().map_err(|e| spawn_failed(spec, e))?;
                let pid = child.id();
                let exit = self.reaper.watch(pid);
                let io = |e: std::io::Error| ConnectError::internal(format!("pipe setup: {e}"));
                let stdin = child.stdin.take().map(sender).transpose().map_err(io)?;
                let out = child.stdout.take().map(receiver).transpose().map_err(io)?;
                let err = child.stderr.take().map(receiver).transpose().map_err(io)?;
                (pid, exit, stdin, (out, err), None, None)
            }
            Some((rows, cols)) => {
                let (pty, pts) = pty_process::blocking::open()
                    .map_err(|e| start_error(spec, format!("opening a PTY: {e}")))?;
                pty.resize(pty_process::Size::new(rows, cols))
                    .map_err(|e| start_error(spec, format!("sizing the PTY: {e}")))?;
                let mut cmd = pty_process::blocking::Command::new(&spec.cmd)
                    .args(&spec.args)
                    .env_clear()
                    .envs(spec.env.iter().map(|(k, v)| (k, v)))
                    .current_dir(&spec.cwd);
                if let Some((uid, gid)) = spec.ids {
                    cmd = cmd.uid(uid).gid(gid);
                }
                let child = cmd.spawn(pts).map_err(|e| spawn_failed(spec, e))?;
                let pid = child.id();
                let exit = self.reaper.watch(pid);
                let master: OwnedFd = pty.into();
                let io = |e: std::io::Error| ConnectError::internal(format!("PTY setup: {e}"));
                let reader = receiver(master.try_clone().map_err(io)?).map_err(io)?;
                let writer = sender(master.try_clone().map_err(io)?).map_err(io)?;
                (
                    pid,
                    exit,
                    None,
                    (Some(reader), None),
                    Some(writer),
                    Some(master),
                )
            }
        };
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        let is_pty = pty_master.is_some();
        let process = Arc::new(Process {
            pid,
            config,
            tag,
            stdin: tokio::sync::Mutex::new(stdin),
            pty_input: pty_input.map(tokio::sync::Mutex::new),
            pty_master,
            subscribers: Mutex::new(vec![tx]),
        });
        self.table
            .lock()
            .expect("table")
            .insert(pid, process.clone());
        tokio::spawn(self.clone().pump(process.clone(), outputs, is_pty, exit));
        Ok((process, rx))
    }

    /// Reads the output until the process exits, then what is left in the
    /// pipes (never waiting on grandchildren that keep them open), then sends
    /// the end event and forgets the process.
    async fn pump(
        self: Arc<Self>,
        p: Arc<Process>,
        (mut out, mut err): (Option<pipe::Receiver>, Option<pipe::Receiver>),
        is_pty: bool,
        mut exit: oneshot::Receiver<ExitStatus>,
    ) {
        let chunk = if is_pty { PTY_CHUNK } else { PIPE_CHUNK };
        let mut buf_out = vec![0u8; chunk];
        let mut buf_err = vec![0u8; if err.is_some() { chunk } else { 0 }];
        let wrap = |data: &[u8], stderr: bool| {
            let bytes = Bytes::copy_from_slice(data);
            Event::Data(if is_pty {
                process_event::Output::Pty(bytes)
            } else if stderr {
                process_event::Output::Stderr(bytes)
            } else {
                process_event::Output::Stdout(bytes)
            })
        };
        let status = loop {
            if out.is_none() && err.is_none() {
                break (&mut exit).await;
            }
            tokio::select! {
                r = read_opt(out.as_mut(), &mut buf_out) => match r {
                    Ok(n) if n > 0 => p.broadcast(wrap(&buf_out[..n], false)).await,
                    _ => out = None,
                },
                r = read_opt(err.as_mut(), &mut buf_err) => match r {
                    Ok(n) if n > 0 => p.broadcast(wrap(&buf_err[..n], true)).await,
                    _ => err = None,
                },
                s = &mut exit => break s,
            }
        };
        for (reader, buf, stderr) in [
            (&mut out, &mut buf_out, false),
            (&mut err, &mut buf_err, true),
        ] {
            if let Some(r) = reader {
                while let Ok(n) = r.try_read(buf) {
                    if n == 0 {
                        break;
                    }
                    p.broadcast(wrap(&buf[..n], stderr)).await;
                }
            }
        }
        // A lost status (cannot happen while the reaper runs) reads as a kill.
        let status = status.unwrap_or(ExitStatus::Signaled(9));
        self.finish(&p, status);
    }

    fn finish(&self, p: &Arc<Process>, status: ExitStatus) {
        let subs = {
            let mut table = self.table.lock().expect("table");
            if table.get(&p.pid).is_some_and(|q| Arc::ptr_eq(q, p)) {
                table.remove(&p.pid);
            }
            std::mem::take(&mut *p.subscribers.lock().expect("subscribers"))
        };
        for s in subs {
            tokio::spawn(async move {
                let _ = s.send(Event::End(status)).await;
            });
        }
    }

    /// The process a selector means.
    pub fn get(&self, sel: &Selector) -> Result<Arc<Process>, ConnectError> {
        let table = self.table.lock().expect("table");
        find(&table, sel)
    }

    /// Attaches a stream to a running process: its further events.
    pub fn subscribe(
        &self,
        sel: &Selector,
    ) -> Result<(Arc<Process>, mpsc::Receiver<Event>), ConnectError> {
        let table = self.table.lock().expect("table");
        let p = find(&table, sel)?;
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        p.subscribers.lock().expect("subscribers").push(tx);
        Ok((p, rx))
    }

    /// Every running process, by pid.
    pub fn list(&self) -> Vec<ProcessInfo> {
        let table = self.table.lock().expect("table");
        let mut out: Vec<ProcessInfo> = table.values().map(|p| p.info()).collect();
        out.sort_by_key(|p| p.pid);
        out
    }

    /// Sends SIGKILL to every tracked process (the agent is leaving).
    pub fn kill_all(&self) {
        let table = self.table.lock().expect("table");
        for p in table.values() {
            let _ = p.signal(rustix::process::Signal::KILL);
        }
    }

    /// Whether this very process is still tracked (it has not ended).
    pub fn is_running(&self, p: &Arc<Process>) -> bool {
        self.table
            .lock()
            .expect("table")
            .get(&p.pid)
            .is_some_and(|q| Arc::ptr_eq(q, p))
    }
}

fn find(table: &HashMap<u32, Arc<Process>>, sel: &Selector) -> Result<Arc<Process>, ConnectError> {
    match sel {
        Selector::Pid(pid) => table
            .get(pid)
            .cloned()
            .ok_or_else(|| ConnectError::not_found(format!("process with pid {pid} not found"))),
        Selector::Tag(tag) => table
            .values()
            .find(|p| p.tag.as_deref() == Some(tag))
            .cloned()
            .ok_or_else(|| ConnectError::not_found(format!("process with tag {tag} not found"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_events_read_like_go() {
        let e = end_event(ExitStatus::Exited(0));
        assert_eq!(
            (e.exit_code, e.exited, e.status.as_str()),
            (0, true, "exit status 0")
        );
        assert_eq!(e.error, None);
        let e = end_event(ExitStatus::Exited(3));
        assert_eq!(e.error.as_deref(), Some("exit status 3"));
        let e = end_event(ExitStatus::Signaled(9));
        assert_eq!(
            (e.exit_code, e.exited, e.status.as_str()),
            (-1, false, "signal: killed")
        );
        assert_eq!(
            end_event(ExitStatus::Signaled(15)).status,
            "signal: terminated"
        );
    }
}
