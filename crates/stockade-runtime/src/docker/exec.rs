//! Streaming exec in Docker (API-8): start a process, forward its output as
//! it comes, report its exit; kill it (and its children) on timeout, on
//! request, or when nobody listens any more.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::Docker;
use futures_util::StreamExt;
use stockade_core::{InstanceId, SandboxId};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::docker::{container_name, error_chain, status_code};
use crate::{
    DockerRuntime, ExecEvent, ExecExit, ExecProcess, ExecSpec, RuntimeError, RuntimeResult,
};

/// Output events buffered between the engine and a slow reader; beyond this
/// the process's output is not read (it blocks on a full pipe), so memory
/// stays bounded.
const EVENT_BUFFER: usize = 32;

/// How a pump of an exec's output ended.
enum Pumped {
    /// The output stream ended (the process exited).
    Ended(Option<String>),
    TimedOut,
    /// The receiver was dropped.
    Abandoned,
}

impl DockerRuntime {
    /// [`crate::Runtime::exec_start`] for Docker.
    pub(crate) async fn exec_start_stream(
        &self,
        id: &SandboxId,
        spec: ExecSpec,
    ) -> RuntimeResult<ExecProcess> {
        if spec.argv.is_empty() {
            return Err(RuntimeError::Other(
                "exec needs a command (argv is empty)".into(),
            ));
        }
        let docker = self.client().await?;
        let name = container_name(id);
        let marker = InstanceId::generate().as_str().to_owned();
        let (exec_id, started) = self
            .create_and_start_exec(&docker, id, &spec, Some(&marker))
            .await?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(RuntimeError::Other("exec did not attach".into()));
        };

        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let stdin = spec.stdin;
        let timeout = spec.timeout;
        let container = name.clone();
        let kill_marker = marker.clone();
        tokio::spawn(async move {
            let mut output = output;
            let mut input = input;
            let write = async {
                if let Some(data) = stdin {
                    // The process may exit without reading: a broken pipe is fine.
                    let _ = input.write_all(&data).await;
                    let _ = input.shutdown().await;
                }
            };
            let pump = async {
                while let Some(item) = output.next().await {
                    let event = match item {
                        Ok(LogOutput::StdOut { message }) => ExecEvent::Stdout(message),
                        // Raw text on a non-tty exec is the engine's own
                        // message (e.g. a failed chdir to the cwd).
                        Ok(LogOutput::Console { message }) => ExecEvent::Stderr(message),
                        Ok(LogOutput::StdErr { message }) => ExecEvent::Stderr(message),
                        Ok(LogOutput::StdIn { .. }) => continue,
                        Err(e) => return Pumped::Ended(Some(error_chain(&e))),
                    };
                    if tx.send(event).await.is_err() {
                        return Pumped::Abandoned;
                    }
                }
                Pumped::Ended(None)
            };
            let deadline = async {
                match timeout {
                    Some(t) => tokio::time::sleep(t).await,
                    None => std::future::pending::<()>().await,
                }
            };
            let pumped = tokio::select! {
                (_, p) = async { tokio::join!(write, pump) } => p,
                () = deadline => Pumped::TimedOut,
                () = tx.closed() => Pumped::Abandoned,
            };
            drop(output);
            drop(input);
            let exit = match pumped {
                Pumped::Abandoned => {
                    kill_marked(&docker, &container, &kill_marker).await;
                    return;
                }
                Pumped::TimedOut => {
                    kill_marked(&docker, &container, &kill_marker).await;
                    ExecExit {
                        exit_code: None,
                        timed_out: true,
                        error: None,
                    }
                }
                Pumped::Ended(error) => {
                    if error.is_some() {
                        // Its output can no longer be read: do not leave it
                        // running unobserved.
                        kill_marked(&docker, &container, &kill_marker).await;
                    }
                    ExecExit {
                        exit_code: exit_code(&docker, &exec_id).await,
                        timed_out: false,
                        error,
                    }
                }
            };
            let _ = tx.send(ExecEvent::Exit(exit)).await;
        });
        Ok(ExecProcess::new(marker, rx))
    }

    /// [`crate::Runtime::exec_kill`] for Docker.
    pub(crate) async fn exec_kill_marked(
        &self,
        id: &SandboxId,
        exec_id: &str,
    ) -> RuntimeResult<()> {
        if exec_id.is_empty() || !exec_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(RuntimeError::Other(format!("invalid exec id '{exec_id}'")));
        }
        let docker = self.client().await?;
        kill_marked(&docker, &container_name(id), exec_id).await;
        Ok(())
    }
}

/// Kills every process of `container` whose environment holds
/// `STOCKADE_EXEC_ID=marker` (Docker has no exec-kill API). Failures are
/// logged: a stopped container has nothing left to kill.
pub(crate) async fn kill_marked(docker: &Docker, container: &str, marker: &str) {
    let kill = async {
        let created = docker
            .create_exec(
                container,
                CreateExecOptions::<String> {
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    cmd: Some(vec![
                        "/bin/sh".into(),
                        "-c".into(),
                        crate::docker::KILL_MARKED_SCRIPT.into(),
                        "stockade-kill".into(),
                        marker.to_owned(),
                    ]),
                    ..Default::default()
                },
            )
            .await?;
        if let StartExecResults::Attached { mut output, .. } =
            docker.start_exec(&created.id, None).await?
        {
            while output.next().await.is_some() {}
        }
        Ok::<(), bollard::errors::Error>(())
    };
    match tokio::time::timeout(Duration::from_secs(15), kill).await {
        Ok(Ok(())) => {}
        // A stopped container has nothing left to kill.
        Ok(Err(e)) if status_code(&e) == Some(409) => {}
        Ok(Err(e)) => {
            tracing::warn!(container, error = %error_chain(&e), "could not kill an exec")
        }
        Err(_) => tracing::warn!(container, "killing an exec did not finish"),
    }
}

/// How many times the exit code of an exec is asked for: about two seconds
/// in all with [`exit_poll_delay`].
pub(crate) const EXIT_POLLS: u32 = 105;

/// The pause before asking again for an exit code that is not recorded
/// yet: 1 ms, doubling up to 20 ms. The engine records it within a
/// millisecond or two of the output's end almost always, so a fixed 20 ms
/// pause cost an exec up to 20 ms for nothing (stockade-bench, exec p99).
pub(crate) fn exit_poll_delay(attempt: u32) -> Duration {
    Duration::from_millis((1u64 << attempt.min(5)).min(20))
}

/// The exit code of a finished exec; the output can end a moment before
/// the engine records it.
async fn exit_code(docker: &Docker, exec_id: &str) -> Option<i64> {
    for attempt in 0..EXIT_POLLS {
        match docker.inspect_exec(exec_id).await {
            Ok(i) if i.running != Some(true) => return i.exit_code,
            Ok(_) => tokio::time::sleep(exit_poll_delay(attempt)).await,
            Err(_) => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_polls_start_fast_and_give_up_after_about_two_seconds() {
        assert_eq!(exit_poll_delay(0), Duration::from_millis(1));
        assert_eq!(exit_poll_delay(3), Duration::from_millis(8));
        assert_eq!(exit_poll_delay(5), Duration::from_millis(20));
        assert_eq!(exit_poll_delay(100), Duration::from_millis(20));
        let total: Duration = (0..EXIT_POLLS).map(exit_poll_delay).sum();
        assert!(
            total > Duration::from_millis(1900) && total < Duration::from_millis(2200),
            "{total:?}"
        );
    }
}
