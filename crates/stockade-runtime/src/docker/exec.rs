//! Streaming exec in Docker: start a process, forward its output as
//! it comes, report its exit; kill it (and its children) on timeout, on
//! request, or when nobody listens any more.

use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::Docker;
use futures_util::StreamExt;
use stockade_core::{InstanceId, SandboxId};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::docker::{container_name, error_chain, status_code};
use crate::{
    DockerRuntime, Exec, ExecEvent, ExecExit, ExecOutput, ExecProcess, ExecSpec, RuntimeError,
    RuntimeResult, DEFAULT_MAX_OUTPUT_BYTES,
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
        require_command(&spec)?;
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
            let write = feed_stdin(&mut input, stdin);
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
                        KILL_MARKED_SCRIPT.into(),
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

/// Environment variable that marks the processes of one exec, so a timed-out
/// exec (and its children) can be found and killed: Docker has no exec-kill API.
pub(crate) const EXEC_MARKER_ENV: &str = "STOCKADE_EXEC_ID";
/// Kills every process whose environment holds `STOCKADE_EXEC_ID=$1`.
pub(crate) const KILL_MARKED_SCRIPT: &str = r#"for p in /proc/[0-9]*; do
  if tr '\000' '\n' < "$p/environ" 2>/dev/null | grep -qx "STOCKADE_EXEC_ID=$1"; then
    kill -9 "${p#/proc/}" 2>/dev/null
  fi
done
exit 0"#;

impl DockerRuntime {
    /// Creates an exec for `spec` in the sandbox's container (with the
    /// kill marker in its environment, when given) and starts it attached.
    /// Returns the exec id and its attached streams.
    pub(crate) async fn create_and_start_exec(
        &self,
        docker: &Docker,
        id: &SandboxId,
        spec: &ExecSpec,
        marker: Option<&str>,
    ) -> RuntimeResult<(String, StartExecResults)> {
        // The container's environment holds the agent's token when it has
        // an agent: the engine gives it to every exec, so blank it
        // (the API cannot unset a variable). Nothing in a sandbox may hold
        // the token but the agent itself.
        let mut env = vec![format!("{}=", crate::AGENT_TOKEN_ENV)];
        env.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
        if let Some(m) = marker {
            env.push(format!("{EXEC_MARKER_ENV}={m}"));
        }
        let created = docker
            .create_exec(
                &container_name(id),
                CreateExecOptions::<String> {
                    attach_stdin: Some(spec.stdin.is_some()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    tty: Some(false),
                    env: Some(env),
                    cmd: Some(spec.argv.clone()),
                    working_dir: spec.cwd.clone(),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| match status_code(&e) {
                Some(409) => RuntimeError::Conflict("sandbox is not running".into()),
                Some(404) => RuntimeError::NotFound(format!("no container for sandbox {id}")),
                _ => self.map_err(e, "create exec"),
            })?;
        let started = docker
            .start_exec(
                &created.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| match status_code(&e) {
                Some(409) => RuntimeError::Conflict("sandbox is not running".into()),
                _ => self.map_err(e, "start exec"),
            })?;
        Ok((created.id, started))
    }

    async fn exec_inner(
        &self,
        docker: &Docker,
        id: &SandboxId,
        spec: ExecSpec,
    ) -> RuntimeResult<ExecOutput> {
        require_command(&spec)?;
        let name = container_name(id);
        let marker = spec
            .timeout
            .map(|_| InstanceId::generate().as_str().to_owned());
        let (exec_id, started) = self
            .create_and_start_exec(docker, id, &spec, marker.as_deref())
            .await?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = started
        else {
            return Err(RuntimeError::Other("exec did not attach".into()));
        };

        let limit = if spec.max_output_bytes == 0 {
            DEFAULT_MAX_OUTPUT_BYTES
        } else {
            spec.max_output_bytes
        };
        let mut stdout = Capped::new(limit);
        let mut stderr = Capped::new(limit);
        let mut read_error = None;
        let stdin = spec.stdin;
        let run = async {
            let write = feed_stdin(&mut input, stdin);
            let read = async {
                while let Some(item) = output.next().await {
                    match item {
                        Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                            stdout.push(&message)
                        }
                        Ok(LogOutput::StdErr { message }) => stderr.push(&message),
                        Ok(LogOutput::StdIn { .. }) => {}
                        Err(e) => {
                            read_error = Some(e);
                            break;
                        }
                    }
                }
            };
            tokio::join!(write, read);
        };
        let timed_out = match spec.timeout {
            Some(t) => tokio::time::timeout(t, run).await.is_err(),
            None => {
                run.await;
                false
            }
        };
        drop(output);
        drop(input);

        if timed_out {
            if let Some(m) = &marker {
                self.kill_marked(docker, &name, m).await;
            }
            return Ok(ExecOutput {
                exit_code: None,
                truncated: stdout.truncated || stderr.truncated,
                stdout: stdout.buf,
                stderr: stderr.buf,
                timed_out: true,
            });
        }
        if let Some(e) = read_error {
            return Err(self.map_err(e, "read exec output"));
        }

        // The stream can end a moment before the engine records the exit code.
        let mut exit_code = None;
        for attempt in 0..EXIT_POLLS {
            let inspected = docker
                .inspect_exec(&exec_id)
                .await
                .map_err(|e| self.map_err(e, "inspect exec"))?;
            if inspected.running != Some(true) {
                exit_code = inspected.exit_code;
                break;
            }
            tokio::time::sleep(exit_poll_delay(attempt)).await;
        }
        // The engine cannot enter a missing working directory: it says so in
        // the output and the exec exits 126. This is where that answer is
        // read, so callers get a kind instead of the engine's words.
        if let (Some(126), Some(cwd)) = (exit_code, spec.cwd.as_deref()) {
            if engine_said_cwd_missing(&stdout.buf) || engine_said_cwd_missing(&stderr.buf) {
                return Err(RuntimeError::CwdMissing(cwd.to_owned()));
            }
        }
        Ok(ExecOutput {
            exit_code,
            truncated: stdout.truncated || stderr.truncated,
            stdout: stdout.buf,
            stderr: stderr.buf,
            timed_out: false,
        })
    }

    /// Kills the processes of a timed-out exec (those carrying its marker).
    async fn kill_marked(&self, docker: &Docker, container: &str, marker: &str) {
        kill_marked(docker, container, marker).await;
    }
}

#[async_trait]
impl Exec for DockerRuntime {
    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn exec(&self, id: &SandboxId, spec: ExecSpec) -> RuntimeResult<ExecOutput> {
        let docker = self.client().await?;
        self.exec_inner(&docker, id, spec).await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn exec_start(&self, id: &SandboxId, spec: ExecSpec) -> RuntimeResult<ExecProcess> {
        self.exec_start_stream(id, spec).await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn exec_kill(&self, id: &SandboxId, exec_id: &str) -> RuntimeResult<()> {
        self.exec_kill_marked(id, exec_id).await
    }
}

/// The OCI runtime's message for an exec whose working directory is missing.
fn engine_said_cwd_missing(output: &[u8]) -> bool {
    String::from_utf8_lossy(output).contains("chdir to cwd")
}

/// Keeps the first `limit` bytes of a stream and notes whether more came.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Capped {
    fn new(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            limit,
            truncated: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let room = self.limit.saturating_sub(self.buf.len());
        if bytes.len() > room {
            self.buf.extend_from_slice(&bytes[..room]);
            self.truncated = true;
        } else {
            self.buf.extend_from_slice(bytes);
        }
    }
}

/// Refuses an exec without a command.
fn require_command(spec: &ExecSpec) -> RuntimeResult<()> {
    if spec.argv.is_empty() {
        return Err(RuntimeError::Other(
            "exec needs a command (argv is empty)".into(),
        ));
    }
    Ok(())
}

/// Writes `data` to a process's input, then closes it. The process may exit
/// without reading: a broken pipe is fine.
async fn feed_stdin<W, B>(input: &mut W, data: Option<B>)
where
    W: tokio::io::AsyncWrite + Unpin + ?Sized,
    B: AsRef<[u8]>,
{
    if let Some(data) = data {
        let _ = input.write_all(data.as_ref()).await;
        let _ = input.shutdown().await;
    }
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

    #[test]
    fn capped_truncates() {
        let mut c = Capped::new(5);
        c.push(b"abc");
        assert!(!c.truncated);
        c.push(b"defg");
        assert_eq!(c.buf, b"abcde");
        assert!(c.truncated);
        c.push(b"x");
        assert_eq!(c.buf, b"abcde");
    }
}
