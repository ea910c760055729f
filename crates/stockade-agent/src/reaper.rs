//! The one child reaper: on every SIGCHLD it collects all exited children
//! with `waitpid(-1)` (zombies of orphans too, as PID 1 must) and hands each
//! status to whoever watches that pid. Nothing else in the agent waits for
//! children, so no exit status is ever stolen.

use rustix::process::{wait, WaitOptions};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
}

impl ExitStatus {
    /// The status a shell would report: the code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Exited(c) => c,
            ExitStatus::Signaled(s) => 128 + s,
        }
    }
}

/// Dispatches exit statuses to their watchers.
#[derive(Default)]
pub struct Reaper {
    waiters: Mutex<HashMap<u32, oneshot::Sender<ExitStatus>>>,
}

impl Reaper {
    /// Installs the SIGCHLD handler and starts reaping. Call it before
    /// spawning any child, from inside the runtime.
    pub fn start() -> std::io::Result<Arc<Reaper>> {
        let reaper = Arc::new(Reaper::default());
        let mut sigchld = signal(SignalKind::child())?;
        let r = reaper.clone();
        tokio::spawn(async move {
            loop {
                r.reap_all();
                if sigchld.recv().await.is_none() {
                    return;
                }
            }
        });
        Ok(reaper)
    }

    /// Watches a pid just spawned. Register it before the next `.await` so
    /// the reaper (on the same thread) cannot see its exit first.
    pub fn watch(&self, pid: u32) -> oneshot::Receiver<ExitStatus> {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().expect("reaper lock").insert(pid, tx);
        rx
    }

    /// Collects every exited child now.
    pub fn reap_all(&self) {
        loop {
            match wait(WaitOptions::NOHANG) {
                Ok(Some((pid, status))) => {
                    let status = if let Some(code) = status.exit_status() {
                        ExitStatus::Exited(code)
                    } else if let Some(sig) = status.terminating_signal() {
                        ExitStatus::Signaled(sig)
                    } else {
                        continue;
                    };
                    let pid = pid.as_raw_nonzero().get() as u32;
                    let waiter = self.waiters.lock().expect("reaper lock").remove(&pid);
                    if let Some(tx) = waiter {
                        let _ = tx.send(status);
                    }
                }
                Ok(None) => return,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return, // ECHILD: no children left
            }
        }
    }
}

/// Go's name of a signal as `os.ProcessState` prints it (`killed`), which is
/// what envd reports in an end event.
pub fn signal_description(sig: i32) -> String {
    let name = match sig {
        1 => "hangup",
        2 => "interrupt",
        3 => "quit",
        4 => "illegal instruction",
        5 => "trace/breakpoint trap",
        6 => "aborted",
        7 => "bus error",
        8 => "floating point exception",
        9 => "killed",
        10 => "user defined signal 1",
        11 => "segmentation fault",
        12 => "user defined signal 2",
        13 => "broken pipe",
        14 => "alarm clock",
        15 => "terminated",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}
