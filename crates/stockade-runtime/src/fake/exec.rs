//! Commands in a fake sandbox: queued results, a handler, or a tiny
//! built-in shell; a streamed exec yields the same result at once.

use async_trait::async_trait;
use stockade_core::SandboxId;

use super::{not_found, FakeRuntime};
use crate::{
    Exec, ExecEvent, ExecExit, ExecOutput, ExecProcess, ExecSpec, RuntimeError, RuntimeResult,
    DEFAULT_MAX_OUTPUT_BYTES,
};

/// The built-in answers of the fake's exec.
fn builtin_exec(spec: &ExecSpec) -> ExecOutput {
    let ok = |stdout: Vec<u8>| ExecOutput {
        exit_code: Some(0),
        stdout,
        stderr: Vec::new(),
        timed_out: false,
        truncated: false,
    };
    let argv: Vec<&str> = spec.argv.iter().map(String::as_str).collect();
    match argv.as_slice() {
        ["echo", rest @ ..] => ok(format!("{}\n", rest.join(" ")).into_bytes()),
        ["cat"] => ok(spec.stdin.clone().unwrap_or_default()),
        ["true"] => ok(Vec::new()),
        ["false"] => ExecOutput {
            exit_code: Some(1),
            ..ok(Vec::new())
        },
        ["sh" | "/bin/sh" | "bash" | "/bin/bash", "-c", script] => {
            let script = script.trim();
            if let Some(code) = script
                .strip_prefix("exit ")
                .and_then(|c| c.trim().parse::<i64>().ok())
            {
                ExecOutput {
                    exit_code: Some(code),
                    ..ok(Vec::new())
                }
            } else if let Some(text) = script.strip_prefix("echo ") {
                ok(format!("{}\n", text.trim_matches(|c| c == '\'' || c == '"')).into_bytes())
            } else {
                ok(Vec::new())
            }
        }
        _ => ok(Vec::new()),
    }
}

fn cap(mut out: ExecOutput, limit: usize) -> ExecOutput {
    let limit = if limit == 0 {
        DEFAULT_MAX_OUTPUT_BYTES
    } else {
        limit
    };
    for buf in [&mut out.stdout, &mut out.stderr] {
        if buf.len() > limit {
            buf.truncate(limit);
            out.truncated = true;
        }
    }
    out
}

#[async_trait]
impl Exec for FakeRuntime {
    async fn exec(&self, id: &SandboxId, spec: ExecSpec) -> RuntimeResult<ExecOutput> {
        self.check_available()?;
        if spec.argv.is_empty() {
            return Err(RuntimeError::Other(
                "exec needs a command (argv is empty)".into(),
            ));
        }
        let (queued, handler) = {
            let mut st = self.state();
            let c = st.containers.get(id).ok_or_else(|| not_found(id))?;
            if !c.running {
                return Err(RuntimeError::Conflict("sandbox is not running".into()));
            }
            st.exec_calls.push((id.clone(), spec.clone()));
            (st.exec_results.pop_front(), st.exec_handler.clone())
        };
        let out = match (queued, handler) {
            (Some(out), _) => out,
            (None, Some(handler)) => handler(id, &spec),
            (None, None) => builtin_exec(&spec),
        };
        Ok(cap(out, spec.max_output_bytes))
    }

    async fn exec_start(&self, id: &SandboxId, spec: ExecSpec) -> RuntimeResult<ExecProcess> {
        let out = self
            .exec(
                id,
                ExecSpec {
                    max_output_bytes: usize::MAX,
                    ..spec
                },
            )
            .await?;
        let (tx, rx) = tokio::sync::mpsc::channel(3);
        let mut events = Vec::new();
        if !out.stdout.is_empty() {
            events.push(ExecEvent::Stdout(out.stdout.into()));
        }
        if !out.stderr.is_empty() {
            events.push(ExecEvent::Stderr(out.stderr.into()));
        }
        events.push(ExecEvent::Exit(ExecExit {
            exit_code: out.exit_code,
            timed_out: out.timed_out,
            error: None,
        }));
        for event in events {
            // Capacity 3 holds them all.
            let _ = tx.try_send(event);
        }
        let n = self.state().exec_calls.len();
        Ok(ExecProcess::new(format!("fakeexec{n}"), rx))
    }

    async fn exec_kill(&self, id: &SandboxId, _exec_id: &str) -> RuntimeResult<()> {
        self.check_available()?;
        // A fake process has always exited already.
        if self.state().containers.contains_key(id) {
            Ok(())
        } else {
            Err(not_found(id))
        }
    }
}
