//! The code interpreter: the first cell after a create (the Python
//! kernel's start included), warm cells through the API against a plain
//! exec round trip in the same sandbox, and the resident memory of an idle
//! Python context.

use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::json;

use super::{ms, vmrss_mib, Bench};
use crate::report::{Better, Row, Target};

/// The cell every measurement runs, and what it answers.
const CELL: &str = "1";
/// The goal for the first cell after a create, in ms.
const FIRST_CELL_GOAL_MS: f64 = 1000.0;
/// The goal for a warm cell's round trip, in ms.
const WARM_CELL_GOAL_MS: f64 = 5.0;
/// Prints the `VmRSS` line of each Python kernel of the sandbox. The
/// pattern `ipykerne[l]` matches the kernel's command line but not this
/// script's own.
const KERNEL_RSS: &str = "for d in /proc/[0-9]*; do \
     if tr '\\0' ' ' < $d/cmdline 2>/dev/null | grep -q 'ipykerne[l]'; then \
     grep VmRSS $d/status; fi; done";

/// Times `run_code("1")` round trips straight to a new Python kernel in the
/// sandbox with Jupyter's own client (no Stockade between): what the kernel
/// itself costs. Prints one duration in ms per line.
const KERNEL_FLOOR: &str = r#"python3 - <<'PY' 2>/dev/null
import sys, time, zmq
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
shell, iopub, session = kc.shell_channel.socket, kc.iopub_channel.socket, kc.session
poller = zmq.Poller()
poller.register(shell, zmq.POLLIN)
poller.register(iopub, zmq.POLLIN)
def cell():
    msg = session.msg("execute_request", {"code": "1", "silent": False, "store_history": True,
        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    session.send(shell, msg)
    mid, reply, idle = msg["header"]["msg_id"], False, False
    while not (reply and idle):
        for sock, _ in poller.poll():
            _, parts = session.feed_identities(sock.recv_multipart())
            m = session.deserialize(parts)
            if m["parent_header"].get("msg_id") != mid:
                continue
            if sock is shell:
                reply = True
            elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                idle = True
for _ in range(20):
    cell()
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else COUNT):
    t = time.perf_counter()
    cell()
    print((time.perf_counter() - t) * 1000)
km.shutdown_kernel(now=True)
PY"#;

impl Bench {
    /// The code-interpreter scenario; skipped with a note when its image is
    /// not present.
    pub(super) async fn code(&mut self) -> anyhow::Result<()> {
        let image = self.code_image.clone();
        if self.raw.docker.inspect_image(&image).await.is_err() {
            self.notes.push(format!(
                "The code interpreter was not measured: the image {image} is not present \
                 (build it with `scripts/build-image code-interpreter`, or pass --code-image)."
            ));
            return Ok(());
        }
        let mut made = Vec::new();
        let outcome = self.code_measure(&image, &mut made).await;
        for id in &made {
            let _ = self.api.delete(id).await;
        }
        let (first, warm, exec, rss, floor) = outcome?;
        self.rows.push(
            Row::new(
                "code_first",
                "First cell after create (`run_code(\"1\")`, the Python kernel's start included)",
                "ms",
                Better::Lower,
                &first,
                None,
                Target::P50AtMost(FIRST_CELL_GOAL_MS),
            )
            .note(format!(
                "one sample per sandbox of {image}: `POST /code` right after the create answered \
                 RUNNING, which starts the default Python context's kernel"
            )),
        );
        self.rows.push(
            Row::new(
                "code",
                "Warm cell round trip (`run_code(\"1\")`) vs an exec round trip (`true`)",
                "ms",
                Better::Lower,
                &warm,
                Some(&exec),
                Target::P50AtMost(WARM_CELL_GOAL_MS),
            )
            .baseline("exec round trip in the same sandbox")
            .note(
                "Stockade: `POST /code` (buffered) to the running default context through the \
                 agent's kernel connection; baseline: `POST /exec` of `true` in the same sandbox, \
                 interleaved",
            ),
        );
        self.rows.push(
            Row::new(
                "code_kernel",
                "Warm cell round trip vs the kernel's own (Jupyter's client in the sandbox)",
                "ms",
                Better::Lower,
                &warm,
                Some(&floor),
                Target::None,
            )
            .baseline("ipykernel's round trip inside the sandbox, no Stockade between")
            .note(
                "baseline: `execute_request` of `1` to a second Python kernel of the same sandbox, \
                 timed from the send to its reply and idle status by jupyter_client's session over \
                 ZeroMQ: the floor any client of the kernel pays",
            ),
        );
        self.rows.push(
            Row::new(
                "code_kernel_rss",
                "Resident memory of an idle Python context (VmRSS of its kernel)",
                "MiB",
                Better::Lower,
                &rss,
                None,
                Target::None,
            )
            .note("one sample per sandbox, after its first cell; read from /proc through exec"),
        );
        Ok(())
    }

    /// Creates sandboxes of `image` (recorded in `made`) and measures:
    /// first cells, warm cells, the exec baseline and kernel memory.
    async fn code_measure(
        &self,
        image: &str,
        made: &mut Vec<String>,
    ) -> anyhow::Result<(Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>)> {
        let (mut first, mut rss) = (Vec::new(), Vec::new());
        for _ in 0..self.plan.code_creates {
            let id = self.api.create(json!({ "dockerImage": image })).await?;
            made.push(id.clone());
            let t = Instant::now();
            let answer = self.api.run_code(&id, CELL).await?;
            first.push(ms(t.elapsed()));
            check_answer(&answer)?;
            rss.push(self.kernel_rss(&id).await?);
        }
        let id = made.first().cloned().context("no code sandbox")?;
        let (mut warm, mut exec) = (Vec::new(), Vec::new());
        for _ in 0..self.plan.code_cells {
            let t = Instant::now();
            let answer = self.api.run_code(&id, CELL).await?;
            warm.push(ms(t.elapsed()));
            check_answer(&answer)?;
            let t = Instant::now();
            let (code, _) = self.api.exec(&id, &["true"]).await?;
            exec.push(ms(t.elapsed()));
            if code != 0 {
                bail!("exec true: exit {code}");
            }
        }
        let script = KERNEL_FLOOR.replace("COUNT", &self.plan.code_cells.to_string());
        let (code, out, _) = self.api.exec_shell(&id, &script).await?;
        let floor: Vec<f64> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if code != 0 || floor.is_empty() {
            bail!("timing the kernel inside {id}: exit {code}: {out}");
        }
        Ok((first, warm, exec, rss, floor))
    }

    /// The resident memory of the Python kernels in sandbox `id` together,
    /// in MiB.
    async fn kernel_rss(&self, id: &str) -> anyhow::Result<f64> {
        let (code, out, _) = self.api.exec_shell(id, KERNEL_RSS).await?;
        if code != 0 {
            bail!("reading the kernel's memory in {id}: exit {code}: {out}");
        }
        let sizes: Vec<f64> = out.lines().filter_map(vmrss_mib).collect();
        if sizes.is_empty() {
            bail!("no Python kernel process in sandbox {id} after its first cell: {out:?}");
        }
        Ok(sizes.iter().sum())
    }
}

/// Fails unless a cell's answer is the main result `1` without an error.
fn check_answer(answer: &serde_json::Value) -> anyhow::Result<()> {
    let text = answer["results"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["isMainResult"] == true))
        .and_then(|r| r["text"].as_str());
    if text != Some(CELL) || !answer["error"].is_null() {
        bail!("run_code({CELL:?}) answered {answer}");
    }
    Ok(())
}
