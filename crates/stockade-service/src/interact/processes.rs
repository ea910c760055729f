//! Background processes (exec's `background: true`): a registry per
//! sandbox, in this server's memory, of the processes it watches — their
//! status and their captured (capped) output.
//!
//! In a sandbox with an agent the process itself lives in the agent, tagged
//! with its id: it survives a restart of the server, and any instance that
//! lists the sandbox's processes adopts the ones it does not know yet (it
//! re-attaches and captures their output from then on). In a sandbox
//! without an agent, the process is a `docker exec` that only the server
//! that started it knows.
//!
//! Bounded: at most `max_per_sandbox` processes per sandbox (finished ones
//! make room, oldest first), finished ones are forgotten after
//! [`RETENTION`], and each keeps at most the output limit per stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use stockade_api::{ProcessResponse, ProcessStatus};
use stockade_core::{FieldError, SandboxId};
use stockade_runtime::{ExecEvent, ExecProcess};
use tokio::sync::watch;

use crate::interact::output::Capped;

/// The tag of a background process in a sandbox's agent.
pub fn agent_tag(id: &str) -> String {
    format!("{AGENT_TAG_PREFIX}{id}")
}

/// The process id in an agent tag of Stockade's.
pub fn id_of_agent_tag(tag: &str) -> Option<&str> {
    tag.strip_prefix(AGENT_TAG_PREFIX)
        .filter(|id| parse_process_id(id).is_ok())
}

const AGENT_TAG_PREFIX: &str = "stockade-process-";

/// How long a finished process stays listed.
pub const RETENTION: Duration = Duration::from_secs(3600);

/// A process id: `[a-z0-9]{12}`.
pub fn parse_process_id(s: &str) -> Result<String, FieldError> {
    if s.len() == 12
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        Ok(s.to_owned())
    } else {
        Err(FieldError::new(
            "process_id",
            "expected 12 characters from [a-z0-9]",
        ))
    }
}

#[derive(Debug)]
struct ProcState {
    status: ProcessStatus,
    exit_code: Option<i64>,
    finished_at: Option<DateTime<Utc>>,
    /// When it finished, for retention.
    finished: Option<Instant>,
    duration: Option<Duration>,
    stdout: Capped,
    stderr: Capped,
    kill_requested: bool,
    message: Option<String>,
}

/// One background process.
#[derive(Debug)]
pub struct Process {
    pub id: String,
    pub sandbox_id: SandboxId,
    pub command: Vec<String>,
    pub started_at: DateTime<Utc>,
    started: Instant,
    exec_id: String,
    state: Mutex<ProcState>,
    done: watch::Sender<bool>,
}

impl Process {
    fn state(&self) -> MutexGuard<'_, ProcState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The handle to kill it with ([`stockade_runtime::Exec::exec_kill`]).
    pub fn exec_id(&self) -> &str {
        &self.exec_id
    }

    pub fn is_running(&self) -> bool {
        self.state().status == ProcessStatus::Running
    }

    /// A kill was asked for: its end will be reported as `killed`.
    pub fn mark_kill_requested(&self) {
        self.state().kill_requested = true;
    }

    /// Waits up to `timeout` for it to end; `true` if it has.
    pub async fn wait(&self, timeout: Duration) -> bool {
        let mut rx = self.done.subscribe();
        let ended = async {
            // Err: the sender is gone, which only happens once it finished.
            let _ = rx.wait_for(|done| *done).await;
        };
        let _ = tokio::time::timeout(timeout, ended).await;
        !self.is_running()
    }

    /// Its API view, with the captured output if `with_output`.
    pub fn view(&self, with_output: bool) -> ProcessResponse {
        let st = self.state();
        let duration = st.duration.unwrap_or_else(|| self.started.elapsed());
        ProcessResponse {
            process_id: self.id.clone(),
            sandbox_id: self.sandbox_id.to_string(),
            command: self.command.clone(),
            status: st.status,
            exit_code: st.exit_code,
            started_at: self.started_at,
            finished_at: st.finished_at,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            stdout: with_output.then(|| st.stdout.text()),
            stderr: with_output.then(|| st.stderr.text()),
            truncated: st.stdout.truncated() || st.stderr.truncated(),
            message: st.message.clone(),
        }
    }

    fn finished_before(&self, cutoff: Instant) -> bool {
        self.state().finished.is_some_and(|t| t < cutoff)
    }
}

/// Every background process this server started, by sandbox.
#[derive(Debug)]
pub struct ProcessRegistry {
    max_per_sandbox: usize,
    inner: Mutex<HashMap<SandboxId, Vec<Arc<Process>>>>,
}

/// The sandbox already runs its maximum of background processes.
#[derive(Debug)]
pub struct RegistryFull(pub usize);

impl ProcessRegistry {
    pub fn new(max_per_sandbox: usize) -> Self {
        Self {
            max_per_sandbox: max_per_sandbox.max(1),
            inner: Mutex::new(HashMap::new()),
        }
    }

    fn inner(&self) -> MutexGuard<'_, HashMap<SandboxId, Vec<Arc<Process>>>> {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        // Forget what finished long ago.
        if let Some(cutoff) = Instant::now().checked_sub(RETENTION) {
            map.retain(|_, procs| {
                procs.retain(|p| !p.finished_before(cutoff));
                !procs.is_empty()
            });
        }
        map
    }

    /// Makes room for one more process of `sandbox`: forgets its oldest
    /// finished one when it is at the limit; `RegistryFull` when all run.
    pub fn ensure_room(&self, sandbox: &SandboxId) -> Result<(), RegistryFull> {
        match self.inner().get_mut(sandbox) {
            Some(procs) => make_room(procs, self.max_per_sandbox),
            None => Ok(()),
        }
    }

    /// Registers a started process (with the id it was started under) and
    /// collects its output and exit in the background. `RegistryFull` (the
    /// process is handed back, to be killed) when another start took the
    /// last place meanwhile.
    pub fn register(
        &self,
        sandbox: &SandboxId,
        id: String,
        command: Vec<String>,
        process: ExecProcess,
        max_output_bytes: usize,
    ) -> Result<Arc<Process>, (RegistryFull, ExecProcess)> {
        let mut map = self.inner();
        let procs = map.entry(sandbox.clone()).or_default();
        if let Err(full) = make_room(procs, self.max_per_sandbox) {
            return Err((full, process));
        }
        Ok(Self::push(
            procs,
            sandbox,
            id,
            command,
            process,
            max_output_bytes,
        ))
    }

    /// Watches a process that runs already but is not registered here
    /// (started by another server instance, or before a restart). `None`
    /// when it is registered already.
    pub fn adopt(
        &self,
        sandbox: &SandboxId,
        id: String,
        command: Vec<String>,
        process: ExecProcess,
        max_output_bytes: usize,
    ) -> Option<Arc<Process>> {
        let mut map = self.inner();
        let procs = map.entry(sandbox.clone()).or_default();
        if procs.iter().any(|p| p.id == id) {
            return None;
        }
        Some(Self::push(
            procs,
            sandbox,
            id,
            command,
            process,
            max_output_bytes,
        ))
    }

    /// Whether `id` of `sandbox` is registered.
    pub fn knows(&self, sandbox: &SandboxId, id: &str) -> bool {
        self.inner()
            .get(sandbox)
            .is_some_and(|procs| procs.iter().any(|p| p.id == id))
    }

    fn push(
        procs: &mut Vec<Arc<Process>>,
        sandbox: &SandboxId,
        id: String,
        command: Vec<String>,
        process: ExecProcess,
        max_output_bytes: usize,
    ) -> Arc<Process> {
        let (done, _) = watch::channel(false);
        let proc = Arc::new(Process {
            id,
            sandbox_id: sandbox.clone(),
            command,
            started_at: Utc::now(),
            started: Instant::now(),
            exec_id: process.exec_id().to_owned(),
            state: Mutex::new(ProcState {
                status: ProcessStatus::Running,
                exit_code: None,
                finished_at: None,
                finished: None,
                duration: None,
                stdout: Capped::new(max_output_bytes),
                stderr: Capped::new(max_output_bytes),
                kill_requested: false,
                message: None,
            }),
            done,
        });
        procs.push(proc.clone());
        tokio::spawn(collect(proc.clone(), process));
        proc
    }

    /// The processes of a sandbox, oldest first.
    pub fn list(&self, sandbox: &SandboxId) -> Vec<Arc<Process>> {
        self.inner().get(sandbox).cloned().unwrap_or_default()
    }

    pub fn get(&self, sandbox: &SandboxId, id: &str) -> Option<Arc<Process>> {
        self.inner()
            .get(sandbox)
            .and_then(|procs| procs.iter().find(|p| p.id == id).cloned())
    }
}

fn make_room(procs: &mut Vec<Arc<Process>>, max: usize) -> Result<(), RegistryFull> {
    while procs.len() >= max {
        match procs.iter().position(|p| !p.is_running()) {
            Some(i) => {
                procs.remove(i);
            }
            None => return Err(RegistryFull(max)),
        }
    }
    Ok(())
}

/// Reads a process's events until it ends and records them.
async fn collect(proc: Arc<Process>, mut process: ExecProcess) {
    let mut exit = None;
    while let Some(event) = process.next().await {
        match event {
            ExecEvent::Stdout(b) => proc.state().stdout.push(&b),
            ExecEvent::Stderr(b) => proc.state().stderr.push(&b),
            ExecEvent::Exit(e) => {
                exit = Some(e);
                break;
            }
        }
    }
    {
        let mut st = proc.state();
        st.duration = Some(proc.started.elapsed());
        st.finished_at = Some(Utc::now());
        st.finished = Some(Instant::now());
        match exit {
            Some(e) => {
                st.exit_code = e.exit_code;
                st.status = if st.kill_requested {
                    ProcessStatus::Killed
                } else if e.timed_out {
                    ProcessStatus::TimedOut
                } else {
                    ProcessStatus::Exited
                };
                st.message = match (st.status, e.error) {
                    (ProcessStatus::TimedOut, _) => {
                        Some("killed: its timeoutSeconds expired".to_owned())
                    }
                    (ProcessStatus::Killed, _) => Some("killed on request".to_owned()),
                    (_, Some(err)) => Some(format!("reading its output failed: {err}")),
                    _ => None,
                };
            }
            None => {
                st.status = if st.kill_requested {
                    ProcessStatus::Killed
                } else {
                    ProcessStatus::Exited
                };
                st.message = Some("its exit status is unknown".to_owned());
            }
        }
    }
    proc.done.send_replace(true);
}

#[cfg(test)]
mod tests {
    use stockade_runtime::{ExecExit, ExecProcess};
    use tokio::sync::mpsc;

    use super::*;

    fn new_id() -> String {
        SandboxId::generate().to_string()
    }

    fn fake_process(events: Vec<ExecEvent>) -> (ExecProcess, mpsc::Sender<ExecEvent>) {
        let (tx, rx) = mpsc::channel(16);
        for e in events {
            tx.try_send(e).unwrap();
        }
        (ExecProcess::new("marker".into(), rx), tx)
    }

    /// Ends a fake process with `exit` (through its sender `tx`) and waits
    /// until the registry's `proc` saw it.
    async fn end(proc: &Process, tx: &mpsc::Sender<ExecEvent>, exit: ExecExit) {
        tx.send(ExecEvent::Exit(exit)).await.unwrap();
        assert!(proc.wait(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn output_is_captured_capped_and_the_exit_recorded() {
        let reg = ProcessRegistry::new(4);
        let sb = SandboxId::generate();
        let (p, tx) = fake_process(vec![
            ExecEvent::Stdout("hello ".into()),
            ExecEvent::Stdout("world, long".into()),
            ExecEvent::Stderr("warn".into()),
        ]);
        let proc = reg
            .register(&sb, new_id(), vec!["x".into()], p, 11)
            .unwrap();
        assert!(parse_process_id(&proc.id).is_ok());
        assert!(!proc.wait(Duration::from_millis(50)).await, "still running");
        assert_eq!(proc.view(false).status, ProcessStatus::Running);
        let exit = ExecExit {
            exit_code: Some(3),
            ..Default::default()
        };
        end(&proc, &tx, exit).await;
        let v = proc.view(true);
        assert_eq!(v.status, ProcessStatus::Exited);
        assert_eq!(v.exit_code, Some(3));
        assert_eq!(v.stdout.as_deref(), Some("hello world"));
        assert_eq!(v.stderr.as_deref(), Some("warn"));
        assert!(v.truncated);
        assert!(v.finished_at.is_some());
        assert_eq!(reg.list(&sb).len(), 1);
        assert!(reg.get(&sb, &proc.id).is_some());
        assert!(reg.get(&SandboxId::generate(), &proc.id).is_none());
    }

    #[tokio::test]
    async fn the_registry_is_bounded_per_sandbox() {
        let reg = ProcessRegistry::new(2);
        let sb = SandboxId::generate();
        let mut senders = Vec::new();
        for _ in 0..2 {
            let (p, tx) = fake_process(vec![]);
            reg.register(&sb, new_id(), vec![], p, 10).unwrap();
            senders.push(tx);
        }
        let (p, _tx) = fake_process(vec![]);
        assert!(
            reg.register(&sb, new_id(), vec![], p, 10).is_err(),
            "both still run"
        );
        // Another sandbox has its own room.
        let (p, _tx2) = fake_process(vec![]);
        reg.register(&SandboxId::generate(), new_id(), vec![], p, 10)
            .unwrap();

        // One ends: it makes room.
        let first = reg.list(&sb)[0].clone();
        end(&first, &senders[0], ExecExit::default()).await;
        let (p, _tx3) = fake_process(vec![]);
        reg.register(&sb, new_id(), vec![], p, 10).unwrap();
        let ids: Vec<String> = reg.list(&sb).iter().map(|p| p.id.clone()).collect();
        assert_eq!(ids.len(), 2);
        assert!(!ids.contains(&first.id));
    }

    #[tokio::test]
    async fn kills_and_timeouts_are_reported_as_such() {
        let reg = ProcessRegistry::new(4);
        let sb = SandboxId::generate();
        let (p, tx) = fake_process(vec![]);
        let proc = reg.register(&sb, new_id(), vec![], p, 10).unwrap();
        proc.mark_kill_requested();
        let killed = ExecExit {
            exit_code: Some(137),
            ..Default::default()
        };
        end(&proc, &tx, killed).await;
        assert_eq!(proc.view(false).status, ProcessStatus::Killed);

        let (p, tx) = fake_process(vec![]);
        let proc = reg.register(&sb, new_id(), vec![], p, 10).unwrap();
        let timed_out = ExecExit {
            timed_out: true,
            ..Default::default()
        };
        end(&proc, &tx, timed_out).await;
        let v = proc.view(false);
        assert_eq!((v.status, v.exit_code), (ProcessStatus::TimedOut, None));

        // The stream ends without an exit event.
        let (p, tx) = fake_process(vec![]);
        let proc = reg.register(&sb, new_id(), vec![], p, 10).unwrap();
        drop(tx);
        assert!(proc.wait(Duration::from_secs(5)).await);
        assert_eq!(proc.view(false).status, ProcessStatus::Exited);
    }

    #[test]
    fn process_ids_parse() {
        assert!(parse_process_id("abcdef012345").is_ok());
        for bad in ["", "abc", "ABCDEF012345", "abcdef0123456", "abcdef01234/"] {
            assert!(parse_process_id(bad).is_err(), "{bad}");
        }
    }
}
