//! The code interpreter (`/code/...`) end to end: the agent binary starts
//! real Jupyter kernels from a Python environment with ipykernel (and
//! bash_kernel) that `STOCKADE_TEST_KERNEL_PYTHON` names, e.g.
//! `python3 -m venv /var/cache/stockade-py/kernel-dev &&
//! /var/cache/stockade-py/kernel-dev/bin/pip install ipykernel bash_kernel &&
//! /var/cache/stockade-py/kernel-dev/bin/python -m bash_kernel.install --sys-prefix`.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "code-test-token";

/// The Python of the kernel environment; fails loudly without one.
fn kernel_python() -> PathBuf {
    match std::env::var("STOCKADE_TEST_KERNEL_PYTHON") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "STOCKADE_TEST_KERNEL_PYTHON is not set: these tests need a Python with ipykernel and \
             bash_kernel (see the top of tests/code.rs); they cannot run without it"
        ),
    }
}

struct Agent {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    async fn start() -> Agent {
        let python = kernel_python();
        let prefix = python.parent().and_then(Path::parent).expect("venv layout");
        let bin = python.parent().expect("bin").to_string_lossy().into_owned();
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_stockade-agent"))
            .arg("--listen")
            .arg(&addr)
            .arg("--workdir")
            .arg(dir.path())
            .env("STOCKADE_AGENT_TOKEN", TOKEN)
            .env(
                "PATH",
                format!("{bin}:{}", std::env::var("PATH").unwrap_or_default()),
            )
            .env("JUPYTER_PATH", prefix.join("share/jupyter"))
            .env("SANDBOX_VAR", "from-sandbox")
            .env_remove("STOCKADE_AGENT_LISTEN")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let agent = Agent {
            child,
            addr,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(r) = reqwest::get(agent.url("/health")).await {
                if r.status() == 204 {
                    return agent;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the agent did not become healthy");
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url(path))
            .header("x-access-token", TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Runs a cell and returns its lines (keepalives left out).
    async fn run(&self, body: Value) -> Vec<Value> {
        let res = self.post("/code/execute", body).await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "application/x-ndjson");
        let text = res.text().await.unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["type"] != "keepalive")
            .collect()
    }
}

fn of_type<'a>(lines: &'a [Value], t: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

fn stdout(lines: &[Value]) -> String {
    of_type(lines, "stdout")
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn python_cells_keep_state_and_stream_output_results_and_errors() {
    let agent = Agent::start().await;
    let started = Instant::now();
    let first = agent
        .run(json!({"code": "x = 41\nprint('a')\nimport sys; print('b', file=sys.stderr)\nx + 1"}))
        .await;
    eprintln!(
        "first execute (kernel start included): {:?}",
        started.elapsed()
    );
    let types: Vec<&str> = first.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "number_of_executions",
            "stdout",
            "stderr",
            "result",
            "end_of_execution"
        ]
    );
    assert_eq!(first[0]["execution_count"], 1);
    assert_eq!(first[1]["text"], "a\n");
    assert!(first[1]["timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(first[3]["text"], "42");
    assert_eq!(first[3]["is_main_result"], true);

    let started = Instant::now();
    let again = agent.run(json!({"code": "x"})).await;
    eprintln!("round trip of a cell: {:?}", started.elapsed());
    assert_eq!(again[0]["execution_count"], 2);
    assert_eq!(of_type(&again, "result")[0]["text"], "41");

    let err = agent.run(json!({"code": "1/0"})).await;
    let e = of_type(&err, "error");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["name"], "ZeroDivisionError");
    assert_eq!(e[0]["value"], "division by zero");
    assert!(e[0]["traceback"]
        .as_str()
        .unwrap()
        .contains("ZeroDivisionError"));
    assert_eq!(err.last().unwrap()["type"], "end_of_execution");

    let html = agent
        .run(
            json!({"code": "from IPython.display import HTML, display; display(HTML('<b>x</b>'))"}),
        )
        .await;
    let r = of_type(&html, "result");
    assert_eq!(r[0]["html"], "<b>x</b>");
    assert_eq!(r[0]["is_main_result"], false);

    // The sandbox's variables reach the kernel.
    let env = agent
        .run(json!({"code": "import os; print(os.environ['SANDBOX_VAR'])"}))
        .await;
    assert_eq!(stdout(&env), "from-sandbox\n");
}

#[tokio::test]
async fn env_vars_are_set_for_one_cell_then_reset() {
    let agent = Agent::start().await;
    let code = "import os; print(os.environ.get('A'), os.environ.get('SANDBOX_VAR'))";
    let tricky = "it's \"q\"\n$HOME \\ é";
    let set = agent
        .run(json!({"code": code, "env_vars": {"A": tricky, "SANDBOX_VAR": "over"}}))
        .await;
    assert_eq!(stdout(&set), format!("{tricky} over\n"));
    let after = agent.run(json!({"code": code})).await;
    assert_eq!(stdout(&after), "None from-sandbox\n");

    let bash = agent
        .run(json!({"code": "echo \"$A|$SANDBOX_VAR\"", "language": "bash", "env_vars": {"A": tricky}}))
        .await;
    assert_eq!(stdout(&bash).trim_end(), format!("{tricky}|from-sandbox"));
    let bash = agent
        .run(json!({"code": "echo \"[$A]\"", "language": "bash"}))
        .await;
    assert_eq!(stdout(&bash).trim_end(), "[]");

    let bad = agent
        .post(
            "/code/execute",
            json!({"code": "1", "env_vars": {"A-B": "x"}}),
        )
        .await;
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("env_vars"));
}

#[tokio::test]
async fn timeouts_and_disconnects_interrupt_and_the_context_keeps_its_state() {
    let agent = Agent::start().await;
    agent.run(json!({"code": "kept = 7"})).await;
    let started = Instant::now();
    let timed = agent
        .run(json!({"code": "import time; time.sleep(30)", "timeout_ms": 1000}))
        .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    let e = of_type(&timed, "error");
    assert_eq!(e.len(), 1, "{timed:?}");
    assert_eq!(e[0]["name"], "TimeoutError");
    assert_eq!(timed.last().unwrap()["type"], "end_of_execution");
    assert_eq!(
        of_type(&agent.run(json!({"code": "kept"})).await, "result")[0]["text"],
        "7"
    );

    // A client that leaves mid-cell interrupts it.
    let res = agent
        .post(
            "/code/execute",
            json!({"code": "import time; time.sleep(30)"}),
        )
        .await;
    let mut res = res;
    let _first = res.chunk().await.unwrap();
    drop(res);
    let started = Instant::now();
    let next = agent.run(json!({"code": "kept + 1"})).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(of_type(&next, "result")[0]["text"], "8");
}

#[tokio::test]
async fn a_dead_kernel_is_reported_and_a_restart_revives_the_context() {
    let agent = Agent::start().await;
    let ctx: Value = agent
        .post("/code/contexts", json!({"language": "python"}))
        .await
        .json()
        .await
        .unwrap();
    let id = ctx["id"].as_str().unwrap().to_owned();
    assert_eq!(ctx["language"], "python");
    let died = agent
        .run(json!({"code": "import os; os._exit(1)", "context_id": id}))
        .await;
    let e = of_type(&died, "error");
    assert_eq!(e[0]["name"], "KernelDied");
    assert!(e[0]["value"].as_str().unwrap().contains("restart"));
    assert_eq!(died.last().unwrap()["type"], "unexpected_end_of_execution");
    let still = agent.run(json!({"code": "1", "context_id": id})).await;
    assert_eq!(of_type(&still, "error")[0]["name"], "KernelDied");

    let r = agent
        .post(&format!("/code/contexts/{id}/restart"), json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let back = agent.run(json!({"code": "2 + 2", "context_id": id})).await;
    assert_eq!(of_type(&back, "result")[0]["text"], "4");

    let r = agent
        .post(&format!("/code/contexts/{id}/interrupt"), json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let del = reqwest::Client::new()
        .delete(agent.url(&format!("/code/contexts/{id}")))
        .header("x-access-token", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 200);
    let gone = agent
        .post("/code/execute", json!({"code": "1", "context_id": id}))
        .await;
    assert_eq!(gone.status(), 404);
    assert_eq!(
        gone.text().await.unwrap(),
        format!("Context {id} not found")
    );
}

#[tokio::test]
async fn bad_requests_and_the_context_limit() {
    let agent = Agent::start().await;
    let both = agent
        .post(
            "/code/execute",
            json!({"code": "1", "context_id": "x", "language": "python"}),
        )
        .await;
    assert_eq!(both.status(), 400);
    assert_eq!(
        both.text().await.unwrap(),
        "Only one of context_id or language can be provided"
    );
    let unknown = agent
        .post("/code/execute", json!({"code": "1", "language": "cobol"}))
        .await;
    assert_eq!(unknown.status(), 400);
    let text = unknown.text().await.unwrap();
    assert!(text.contains("python3"), "{text}");
    let cwd = agent
        .post("/code/contexts", json!({"cwd": "/no/such/dir"}))
        .await;
    assert_eq!(cwd.status(), 400);
    assert!(cwd.text().await.unwrap().starts_with("cwd"));
    let no_token = reqwest::get(agent.url("/code/contexts")).await.unwrap();
    assert_eq!(no_token.status(), 401);

    for _ in 0..16 {
        let r = agent
            .post("/code/contexts", json!({"language": "bash"}))
            .await;
        assert_eq!(r.status(), 200);
    }
    let over = agent
        .post("/code/contexts", json!({"language": "bash"}))
        .await;
    assert_eq!(over.status(), 409);
    let listed: Vec<Value> = reqwest::Client::new()
        .get(agent.url("/code/contexts"))
        .header("x-access-token", TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed.len(), 16);
}

#[tokio::test]
async fn output_beyond_the_cap_is_cut_and_the_cell_runs_on() {
    let agent = Agent::start().await;
    let lines = agent
        .run(json!({"code": "for i in range(40): print('x' * (1 << 20))\nprint('done')\n'end'"}))
        .await;
    let cut = of_type(&lines, "stderr");
    assert_eq!(cut.len(), 1);
    assert!(cut[0]["text"].as_str().unwrap().starts_with("[output cut"));
    let out: usize = of_type(&lines, "stdout")
        .iter()
        .map(|l| l["text"].as_str().unwrap().len())
        .sum();
    assert!(out <= 16 << 20 && out > 15 << 20, "{out}");
    assert_eq!(lines.last().unwrap()["type"], "end_of_execution");
    // The agent's peak follows the largest single kernel message (ipykernel
    // sends what a cell printed in 0.2 s as one message, here tens of MiB,
    // held a few times over while parsed), not the cell's total output.
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id())).unwrap();
    let rss_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(rss_kb < 400 * 1024, "peak RSS {rss_kb} kB");
}
