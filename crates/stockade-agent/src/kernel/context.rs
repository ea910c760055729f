//! One code context: a kernel process, its ZeroMQ sockets, and the cells it
//! runs one at a time, translated from Jupyter's messages into the NDJSON
//! lines of `/code/execute`.

use super::spec::{InterruptMode, KernelSpec};
use super::wire::{hex, Message, Signer};
use super::{random_bytes, Launch, KEEPALIVE, OUTPUT_CAP, START_TIMEOUT};
use crate::reaper::{signal_description, ExitStatus, Reaper};
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use zeromq::{Socket, SocketRecv, SocketSend};

/// Messages queued from a socket before its reader waits for us.
const SOCKET_QUEUE: usize = 64;
/// How long an interrupted cell may take to wind down before its stream
/// ends anyway (a kernel busy in C code may ignore SIGINT for a while).
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);
/// How long a silent execution (env vars) may take.
const SILENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a kernel's stderr a failed start quotes.
const STDERR_TAIL: usize = 2048;
/// How long a shutdown request may take before the kernel is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);
/// How long a cell's stream stays open after its reply and idle status for
/// a kernel that publishes some output late: Deno's kernel forwards
/// `console.log` from its own stdout pipe, which may reach the socket
/// after it said idle.
const LATE_OUTPUT: Duration = Duration::from_millis(40);
/// The note a cell gets when its output passed [`OUTPUT_CAP`].
pub const OUTPUT_CUT: &str =
    "[output cut: this cell wrote more than 16 MiB; the rest is dropped]\n";

fn log(msg: impl std::fmt::Display) {
    eprintln!("stockade-agent: {msg}");
}

/// What every process of a running kernel shares: enough to interrupt,
/// stop and watch it while a cell holds the sockets.
struct Live {
    pid: u32,
    interrupt_mode: InterruptMode,
    control: mpsc::Sender<Message>,
    session: String,
    exit: watch::Receiver<Option<ExitStatus>>,
    /// Set when the agent itself ends the kernel (restart, delete).
    ended_by_us: AtomicBool,
}

impl Live {
    fn signal_group(&self, sig: rustix::process::Signal) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            // The kernel leads a process group of its own: its children
            // (a subprocess of the cell) get the signal too, as Jupyter
            // sends it.
            if rustix::process::kill_process_group(pid, sig).is_err() {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    }

    fn interrupt(&self) {
        match self.interrupt_mode {
            InterruptMode::Signal => self.signal_group(rustix::process::Signal::INT),
            InterruptMode::Message => {
                let m = Message::request(&self.session, "interrupt_request", json!({}));
                let _ = self.control.try_send(m);
            }
        }
    }

    fn exited(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    fn kill(&self) {
        self.ended_by_us.store(true, Ordering::SeqCst);
        self.signal_group(rustix::process::Signal::KILL);
    }

    /// Asks the kernel to shut down, then kills it if it lingers.
    async fn shutdown(&self) {
        self.ended_by_us.store(true, Ordering::SeqCst);
        let m = Message::request(&self.session, "shutdown_request", json!({"restart": false}));
        let _ = self.control.try_send(m);
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, wait_exit(&mut exit)).await;
        self.kill();
    }
}

/// A running kernel: its shared part and the sockets a cell uses.
struct Kernel {
    live: Arc<Live>,
    shell: mpsc::Sender<Message>,
    shell_in: mpsc::Receiver<Message>,
    iopub: mpsc::Receiver<Message>,
}

/// The channel a cell's lines go to (the response body).
pub type Lines = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// One code context.
pub struct Context {
    pub id: String,
    pub language: String,
    pub cwd: String,
    pub spec: KernelSpec,
    /// The kernel, held by the cell that runs (cells queue on this lock).
    kernel: tokio::sync::Mutex<Option<Kernel>>,
    live: Mutex<Option<Arc<Live>>>,
}

/// One cell to run.
pub struct Cell {
    pub code: String,
    pub env_vars: Vec<(String, String)>,
    /// What to restore afterwards: the sandbox's value, or none (unset).
    pub env_reset: Vec<(String, Option<String>)>,
    pub timeout: Option<Duration>,
}

impl Context {
    /// Starts the kernel of a new context.
    pub async fn start(
        id: String,
        language: String,
        cwd: String,
        spec: KernelSpec,
        launch: &Launch,
        reaper: &Arc<Reaper>,
    ) -> Result<Arc<Self>, String> {
        let kernel = start_kernel(&id, &spec, Path::new(&cwd), launch, reaper).await?;
        Ok(Arc::new(Self {
            id,
            language,
            cwd,
            spec,
            live: Mutex::new(Some(kernel.live.clone())),
            kernel: tokio::sync::Mutex::new(Some(kernel)),
        }))
    }

    fn live(&self) -> Option<Arc<Live>> {
        self.live.lock().expect("live").clone()
    }

    /// Interrupts the running cell, if any.
    pub fn interrupt(&self) {
        if let Some(l) = self.live() {
            l.interrupt();
        }
    }

    /// Ends the kernel for good (the context is being deleted).
    pub async fn stop(&self) {
        let live = self.live.lock().expect("live").take();
        if let Some(l) = live {
            l.shutdown().await;
        }
    }

    /// Ends the kernel now, without waiting (the agent is leaving).
    pub fn kill(&self) {
        if let Some(l) = self.live() {
            l.kill();
        }
    }

    /// A fresh kernel with the same id, language and cwd: a running cell
    /// ends (its kernel is gone), the next one waits for the new kernel.
    pub async fn restart(&self, launch: &Launch, reaper: &Arc<Reaper>) -> Result<(), String> {
        if let Some(l) = self.live() {
            l.kill();
        }
        let mut slot = self.kernel.lock().await;
        *slot = None;
        let kernel =
            start_kernel(&self.id, &self.spec, Path::new(&self.cwd), launch, reaper).await?;
        *self.live.lock().expect("live") = Some(kernel.live.clone());
        *slot = Some(kernel);
        Ok(())
    }

    /// Runs a cell, writing its lines to `lines`; the last one is
    /// `end_of_execution` (or `unexpected_end_of_execution`).
    pub async fn execute(self: Arc<Self>, cell: Cell, lines: Lines) {
        let mut out = Out::new(lines);
        // Wait for the previous cell, with keepalives meanwhile; a client
        // that leaves while waiting runs nothing.
        let mut slot = loop {
            tokio::select! {
                slot = self.kernel.lock() => break slot,
                _ = tokio::time::sleep_until(out.last + KEEPALIVE) => {
                    out.emit(json!({"type": "keepalive"})).await;
                }
                _ = out.tx.closed() => return,
            }
        };
        let dead = match &*slot {
            None => Some("is not running".to_owned()),
            Some(k) => k.live.exited().map(|s| describe_exit(s, &k.live)),
        };
        if let Some(how) = dead {
            *slot = None;
            out.emit_error(
                "KernelDied",
                &format!(
                    "the {} kernel of context {} {how}; restart the context",
                    self.spec.language, self.id
                ),
                "",
            )
            .await;
            out.emit(json!({"type": "end_of_execution"})).await;
            return;
        }
        let kernel = slot.as_mut().expect("checked above");
        let end = self.run(kernel, &cell, &mut out).await;
        let died = match end {
            CellEnd::Done => None,
            CellEnd::Died(status) => Some(status),
        };
        if let Some(status) = died {
            let how = match status {
                Some(s) => describe_exit(s, &kernel.live),
                None => "lost its connection to the agent and was killed".to_owned(),
            };
            if status.is_none() {
                kernel.live.kill();
            }
            out.emit_error(
                "KernelDied",
                &format!(
                    "the {} kernel of context {} {how}; restart the context",
                    self.spec.language, self.id
                ),
                "",
            )
            .await;
            out.emit(json!({"type": "unexpected_end_of_execution"}))
                .await;
            *slot = None;
            return;
        }
        out.emit(json!({"type": "end_of_execution"})).await;
    }

    async fn run(&self, k: &mut Kernel, cell: &Cell, out: &mut Out) -> CellEnd {
        if !cell.env_vars.is_empty() {
            let set: Vec<(String, Option<String>)> = cell
                .env_vars
                .iter()
                .map(|(n, v)| (n.clone(), Some(v.clone())))
                .collect();
            if let Some(code) = env_code(&self.spec.language, &set) {
                if let Err(end) = silent(k, &code).await {
                    return end;
                }
            }
        }
        let end = self.run_cell(k, cell, out).await;
        if matches!(end, CellEnd::Done) && !cell.env_reset.is_empty() {
            if let Some(code) = env_code(&self.spec.language, &cell.env_reset) {
                if let Err(end) = silent(k, &code).await {
                    return end;
                }
            }
        }
        end
    }

    async fn run_cell(&self, k: &mut Kernel, cell: &Cell, out: &mut Out) -> CellEnd {
        let req = Message::request(
            &k.live.session,
            "execute_request",
            json!({
                "code": cell.code,
                "silent": false,
                "store_history": true,
                "user_expressions": {},
                "allow_stdin": false,
                "stop_on_error": true,
            }),
        );
        let msg_id = req.id().to_owned();
        if k.shell.send(req).await.is_err() {
            return died(&k.live).await;
        }
        let mut exit = k.live.exit.clone();
        let mut got_reply = false;
        let mut got_idle = false;
        let mut error_sent = false;
        let mut timed_out = false;
        let mut client_gone = false;
        let mut grace: Option<Instant> = None;
        let deadline = cell.timeout.map(|t| Instant::now() + t);
        let far = Instant::now() + Duration::from_secs(365 * 86400);
        while !(got_reply && got_idle) {
            tokio::select! {
                biased;
                m = k.iopub.recv() => {
                    let Some(m) = m else { return died(&k.live).await };
                    if m.parent_id() != msg_id {
                        continue;
                    }
                    match m.msg_type() {
                        "status" => got_idle |= m.content["execution_state"] == "idle",
                        "execute_input" => {
                            out.emit(json!({
                                "type": "number_of_executions",
                                "execution_count": m.content["execution_count"],
                            })).await;
                        }
                        "error" if !error_sent => {
                            error_sent = true;
                            let c = &m.content;
                            out.emit_error(
                                c["ename"].as_str().unwrap_or("Error"),
                                c["evalue"].as_str().unwrap_or(""),
                                &traceback(c),
                            ).await;
                        }
                        _ => {
                            if let Some(line) = output_line(&m) {
                                out.emit_output(line).await;
                            }
                        }
                    }
                }
                m = k.shell_in.recv() => {
                    let Some(m) = m else { return died(&k.live).await };
                    if m.parent_id() != msg_id || m.msg_type() != "execute_reply" {
                        continue;
                    }
                    got_reply = true;
                    let c = &m.content;
                    match c["status"].as_str() {
                        Some("error") if !error_sent => {
                            error_sent = true;
                            out.emit_error(
                                c["ename"].as_str().unwrap_or("Error"),
                                c["evalue"].as_str().unwrap_or(""),
                                &traceback(c),
                            ).await;
                        }
                        Some("aborted") if !error_sent => {
                            error_sent = true;
                            out.emit_error(
                                "ExecutionAborted",
                                "the kernel aborted the cell (an earlier cell failed or it was interrupted)",
                                "",
                            ).await;
                        }
                        _ => {}
                    }
                }
                _ = wait_exit(&mut exit) => {
                    // Output the kernel sent before dying is still on its way.
                    while let Ok(Some(m)) =
                        tokio::time::timeout(Duration::from_millis(100), k.iopub.recv()).await
                    {
                        if m.parent_id() == msg_id {
                            if let Some(line) = output_line(&m) {
                                out.emit_output(line).await;
                            }
                        }
                    }
                    return CellEnd::Died(k.live.exited());
                }
                _ = tokio::time::sleep_until(out.last + KEEPALIVE), if !client_gone => {
                    out.emit(json!({"type": "keepalive"})).await;
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() && !timed_out => {
                    timed_out = true;
                    k.live.interrupt();
                    grace = Some(Instant::now() + INTERRUPT_GRACE);
                    if !error_sent {
                        error_sent = true;
                        let secs = cell.timeout.unwrap_or_default().as_secs_f64();
                        out.emit_error(
                            "TimeoutError",
                            &format!(
                                "Execution timed out after {secs:.1} s and was interrupted; the context keeps its state"
                            ),
                            "",
                        ).await;
                    }
                }
                _ = out.tx.closed(), if !client_gone => {
                    // The client left: stop the cell, and keep the context
                    // locked until the kernel is idle again, so the next
                    // cell starts on a quiet kernel.
                    client_gone = true;
                    k.live.interrupt();
                    grace.get_or_insert(Instant::now() + INTERRUPT_GRACE);
                }
                _ = tokio::time::sleep_until(grace.unwrap_or(far)), if grace.is_some() => {
                    log(format!(
                        "context {}: the kernel did not finish an interrupted cell within {} s",
                        self.id,
                        INTERRUPT_GRACE.as_secs()
                    ));
                    break;
                }
            }
        }
        if got_reply && got_idle && self.spec.publishes_late() {
            while let Ok(Some(m)) = tokio::time::timeout(LATE_OUTPUT, k.iopub.recv()).await {
                if m.parent_id() == msg_id {
                    if let Some(line) = output_line(&m) {
                        out.emit_output(line).await;
                    }
                }
            }
        }
        CellEnd::Done
    }
}

/// How a cell ended.
enum CellEnd {
    Done,
    /// The kernel died (its status if known; none when the agent lost its
    /// sockets without an exit).
    Died(Option<ExitStatus>),
}

/// Waits until the kernel has exited.
async fn wait_exit(exit: &mut watch::Receiver<Option<ExitStatus>>) {
    let _ = exit.wait_for(Option::is_some).await;
}

/// A lost socket: the kernel exited (or is about to).
async fn died(live: &Live) -> CellEnd {
    let mut exit = live.exit.clone();
    let _ = tokio::time::timeout(Duration::from_secs(2), wait_exit(&mut exit)).await;
    CellEnd::Died(live.exited())
}

fn describe_exit(status: ExitStatus, live: &Live) -> String {
    if live.ended_by_us.load(Ordering::SeqCst) {
        return "was stopped (the context was restarted or deleted)".into();
    }
    match status {
        ExitStatus::Exited(code) => format!("exited (status {code})"),
        ExitStatus::Signaled(9) => "exited (signal 9: killed, e.g. out of memory)".into(),
        ExitStatus::Signaled(s) => format!("exited (signal {s}: {})", signal_description(s)),
    }
}

/// Runs code silently (env vars), waiting for its reply.
async fn silent(k: &mut Kernel, code: &str) -> Result<(), CellEnd> {
    let req = Message::request(
        &k.live.session,
        "execute_request",
        json!({
            "code": code,
            "silent": true,
            "store_history": false,
            "user_expressions": {},
            "allow_stdin": false,
            "stop_on_error": false,
        }),
    );
    let id = req.id().to_owned();
    if k.shell.send(req).await.is_err() {
        return Err(died(&k.live).await);
    }
    let mut exit = k.live.exit.clone();
    let deadline = Instant::now() + SILENT_TIMEOUT;
    loop {
        tokio::select! {
            m = k.shell_in.recv() => match m {
                None => return Err(died(&k.live).await),
                Some(m) if m.parent_id() == id && m.msg_type() == "execute_reply" => {
                    if m.content["status"] != "ok" {
                        log(format!("setting env vars failed in the kernel: {}", m.content));
                    }
                    return Ok(());
                }
                Some(_) => {}
            },
            // Its iopub messages (busy, idle) are skipped by the cell.
            _ = wait_exit(&mut exit) => return Err(CellEnd::Died(k.live.exited())),
            _ = tokio::time::sleep_until(deadline) => {
                log("setting env vars in the kernel took too long; going on");
                return Ok(());
            }
        }
    }
}

/// The code setting (`Some`) or removing (`None`) variables in a kernel of
/// a language; `None` for a language we cannot do it in. Values are JSON
/// string literals (valid Python and JavaScript strings) or single-quoted
/// for bash; names were checked to be identifiers.
pub fn env_code(language: &str, vars: &[(String, Option<String>)]) -> Option<String> {
    let mut set = Map::new();
    let mut unset = Vec::new();
    for (k, v) in vars {
        match v {
            Some(v) => {
                set.insert(k.clone(), Value::String(v.clone()));
            }
            None => unset.push(Value::String(k.clone())),
        }
    }
    let set = Value::Object(set).to_string();
    let unset = Value::Array(unset).to_string();
    match language {
        // A comprehension's variable stays inside it: nothing is left in
        // the user's namespace.
        "python" => Some(format!(
            "__import__('os').environ.update({set})\n\
             [__import__('os').environ.pop(k, None) for k in {unset}]"
        )),
        "javascript" | "typescript" => Some(format!(
            "(() => {{ const s = {set}; const u = {unset}; const g = globalThis; \
             if (g.Deno) {{ for (const k in s) g.Deno.env.set(k, s[k]); for (const k of u) g.Deno.env.delete(k); }} \
             else {{ for (const k in s) g.process.env[k] = s[k]; for (const k of u) delete g.process.env[k]; }} }})();"
        )),
        "bash" => {
            let mut code = String::new();
            for (k, v) in vars {
                match v {
                    Some(v) => code.push_str(&format!("export {k}={}\n", bash_quote(v))),
                    None => code.push_str(&format!("unset {k}\n")),
                }
            }
            Some(code)
        }
        _ => None,
    }
}

fn bash_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', "'\\''"))
}

/// Whether env vars can be set in a kernel of this language.
pub fn env_supported(language: &str) -> bool {
    env_code(language, &[]).is_some()
}

fn traceback(content: &Value) -> String {
    match &content["traceback"] {
        Value::Array(lines) => lines
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("\n"),
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

/// A line of output (stdout, stderr, result) for an iopub message.
fn output_line(m: &Message) -> Option<Output> {
    let c = &m.content;
    match m.msg_type() {
        "stream" => {
            let text = c["text"].as_str()?.to_owned();
            let stderr = c["name"] == "stderr";
            Some(Output::Stream { stderr, text })
        }
        "execute_result" => Some(Output::Result(result(&c["data"], true))),
        "display_data" | "update_display_data" => Some(Output::Result(result(&c["data"], false))),
        _ => None,
    }
}

enum Output {
    Stream { stderr: bool, text: String },
    Result(Value),
}

/// A result line from a MIME bundle, as E2B's server shapes it.
pub fn result(data: &Value, main: bool) -> Value {
    let mut r = Map::new();
    r.insert("type".into(), "result".into());
    r.insert("is_main_result".into(), main.into());
    let mut extra = Map::new();
    if let Value::Object(bundle) = data {
        for (mime, v) in bundle {
            let field = match mime.as_str() {
                "text/plain" => {
                    r.insert("text".into(), Value::String(strip_quotes(v)));
                    continue;
                }
                "text/html" => "html",
                "text/markdown" => "markdown",
                "image/svg+xml" => "svg",
                "image/png" => "png",
                "image/jpeg" => "jpeg",
                "application/pdf" => "pdf",
                "text/latex" => "latex",
                "application/json" => "json",
                "application/javascript" => "javascript",
                "e2b/data" => "data",
                "e2b/chart" => "chart",
                _ => {
                    extra.insert(mime.clone(), v.clone());
                    continue;
                }
            };
            r.insert(field.into(), joined(v));
        }
    }
    if !extra.is_empty() {
        r.insert("extra".into(), Value::Object(extra));
    }
    Value::Object(r)
}

/// A MIME value: text may come as a list of lines (nbformat style).
fn joined(v: &Value) -> Value {
    match v {
        Value::Array(parts) if parts.iter().all(Value::is_string) => {
            Value::String(parts.iter().filter_map(Value::as_str).collect::<String>())
        }
        other => other.clone(),
    }
}

fn strip_quotes(v: &Value) -> String {
    let text = match joined(v) {
        Value::String(s) => s,
        other => other.to_string(),
    };
    for q in ['\'', '"'] {
        if text.len() >= 2 && text.starts_with(q) && text.ends_with(q) {
            return text[1..text.len() - 1].to_owned();
        }
    }
    text
}

/// The lines of one cell: counted against the output cap, with the time
/// of the last one (for keepalives). A client that left gets nothing.
struct Out {
    tx: Lines,
    last: Instant,
    bytes: usize,
    cut: bool,
    gone: bool,
}

impl Out {
    fn new(tx: Lines) -> Self {
        Self {
            tx,
            last: Instant::now(),
            bytes: 0,
            cut: false,
            gone: false,
        }
    }

    /// Sends one line; the channel is bounded, so a slow client makes the
    /// cell's reader (and the kernel's socket) wait instead of buffering.
    async fn emit(&mut self, v: Value) -> usize {
        self.last = Instant::now();
        if self.gone {
            return 0;
        }
        let mut line = serde_json::to_vec(&v).expect("JSON values serialize");
        line.push(b'\n');
        let n = line.len();
        if self.tx.send(Ok(Bytes::from(line))).await.is_err() {
            self.gone = true;
        }
        n
    }

    async fn emit_error(&mut self, name: &str, value: &str, traceback: &str) {
        self.emit(json!({"type": "error", "name": name, "value": value, "traceback": traceback}))
            .await;
    }

    async fn emit_output(&mut self, o: Output) {
        if self.cut {
            return;
        }
        let line = match o {
            Output::Stream { stderr, text } => {
                let kind = if stderr { "stderr" } else { "stdout" };
                let line = json!({"type": kind, "text": text, "timestamp": super::now_rfc3339()});
                let size = line.to_string().len() + 1;
                if self.bytes + size > OUTPUT_CAP {
                    // The part of the text that still fits, then the note.
                    let room = OUTPUT_CAP.saturating_sub(self.bytes + (size - text.len()));
                    let mut end = room.min(text.len());
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    if end > 0 {
                        self.bytes += self
                            .emit(json!({"type": kind, "text": &text[..end], "timestamp": super::now_rfc3339()}))
                            .await;
                    }
                    return self.cut_here().await;
                }
                line
            }
            Output::Result(r) => {
                if self.bytes + r.to_string().len() + 1 > OUTPUT_CAP {
                    return self.cut_here().await;
                }
                r
            }
        };
        self.bytes += self.emit(line).await;
    }

    async fn cut_here(&mut self) {
        self.cut = true;
        self.emit(json!({"type": "stderr", "text": OUTPUT_CUT, "timestamp": super::now_rfc3339()}))
            .await;
    }
}

/// A message's frames to the socket, and a socket's messages back, each
/// through a task of its own: zeromq's sockets cannot be split into a
/// reader and a writer, and a reader that fails on a dropped peer ends only
/// its own task (its channel closes; the cell sees the kernel gone).
fn dealer(
    mut sock: zeromq::DealerSocket,
    signer: Signer,
    inbound: Option<mpsc::Sender<Message>>,
) -> mpsc::Sender<Message> {
    let (tx, mut rx) = mpsc::channel::<Message>(SOCKET_QUEUE);
    tokio::spawn(async move {
        loop {
            let outgoing = tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => m,
                    None => return,
                },
                r = sock.recv() => {
                    let Ok(zm) = r else { return };
                    match Message::decode(zm.into_vec(), &signer) {
                        Ok(m) => {
                            if let Some(tx) = &inbound {
                                if tx.send(m).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Err(e) => log(format!("dropped a kernel message: {e}")),
                    }
                    continue;
                }
            };
            let frames = outgoing.encode(&signer);
            let zm = zeromq::ZmqMessage::try_from(frames).expect("a message has frames");
            if sock.send(zm).await.is_err() {
                return;
            }
        }
    });
    tx
}

fn subscriber(mut sock: zeromq::SubSocket, signer: Signer) -> mpsc::Receiver<Message> {
    let (tx, rx) = mpsc::channel(SOCKET_QUEUE);
    tokio::spawn(async move {
        while let Ok(zm) = sock.recv().await {
            match Message::decode(zm.into_vec(), &signer) {
                Ok(m) => {
                    if tx.send(m).await.is_err() {
                        return;
                    }
                }
                Err(e) => log(format!("dropped a kernel message: {e}")),
            }
        }
    });
    rx
}

/// Five free loopback ports (shell, iopub, stdin, control, heartbeat),
/// held together so they differ, then released for the kernel to bind.
fn free_ports() -> std::io::Result<[u16; 5]> {
    let listeners = (0..5)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut ports = [0u16; 5];
    for (p, l) in ports.iter_mut().zip(&listeners) {
        *p = l.local_addr()?.port();
    }
    Ok(ports)
}

/// The directory of a kernel's connection file: fresh (mkdir fails on
/// anything already there, a planted symlink too), 0700, the kernel user's.
fn connection_dir(ids: Option<(u32, u32)>) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(".stockade-kernel-{}", hex(&random_bytes(8))));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    if let Some((uid, gid)) = ids {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
    }
    Ok(dir)
}

/// Transport: TCP on 127.0.0.1. ipykernel names IPC endpoints `path-port`
/// while Deno's kernel names them `path:port`, so IPC would need a dialect
/// per kernel; TCP is spoken alike by all, and the HMAC key (in a file only
/// the kernel's user reads) keeps other processes from talking to it.
fn write_connection_file(
    dir: &Path,
    ports: [u16; 5],
    key: &str,
    spec: &KernelSpec,
    ids: Option<(u32, u32)>,
) -> std::io::Result<PathBuf> {
    let path = dir.join("connection.json");
    let body = json!({
        "shell_port": ports[0],
        "iopub_port": ports[1],
        "stdin_port": ports[2],
        "control_port": ports[3],
        "hb_port": ports[4],
        "ip": "127.0.0.1",
        "transport": "tcp",
        "key": key,
        "signature_scheme": "hmac-sha256",
        "kernel_name": spec.name,
    });
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    f.write_all(body.to_string().as_bytes())?;
    if let Some((uid, gid)) = ids {
        std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
    }
    Ok(path)
}

/// The end of a kernel's stderr, kept for the error of a failed start.
type Tail = Arc<Mutex<Vec<u8>>>;

fn tail_text(tail: &Tail) -> String {
    let t = tail.lock().expect("tail");
    String::from_utf8_lossy(&t).trim().to_owned()
}

/// Logs a kernel's stderr line by line (never into a cell) and keeps its
/// end.
fn log_stderr(id: String, pipe: std::process::ChildStderr, tail: Tail) {
    let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(pipe.into()) else {
        return;
    };
    tokio::spawn(async move {
        let mut buf = vec![0u8; 8192];
        let mut pending: Vec<u8> = Vec::new();
        while let Ok(n) = pipe.read(&mut buf).await {
            if n == 0 {
                break;
            }
            {
                let mut t = tail.lock().expect("tail");
                t.extend_from_slice(&buf[..n]);
                let excess = t.len().saturating_sub(STDERR_TAIL);
                t.drain(..excess);
            }
            pending.extend_from_slice(&buf[..n]);
            while let Some(at) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=at).collect();
                let text = String::from_utf8_lossy(&line[..line.len().min(2000)]);
                log(format!("kernel of context {id}: {}", text.trim_end()));
            }
            if pending.len() > 8192 {
                pending.clear();
            }
        }
    });
}

/// Starts a kernel and waits until it answers (at most [`START_TIMEOUT`]).
async fn start_kernel(
    id: &str,
    spec: &KernelSpec,
    cwd: &Path,
    launch: &Launch,
    reaper: &Arc<Reaper>,
) -> Result<Kernel, String> {
    let what = format!("the {} kernel ({})", spec.name, spec.argv.join(" "));
    let setup = |e: std::io::Error| format!("cannot prepare {what}: {e}");
    let ports = free_ports().map_err(setup)?;
    let key = hex(&random_bytes(32));
    let dir = connection_dir(launch.ids).map_err(setup)?;
    let file = match write_connection_file(&dir, ports, &key, spec, launch.ids) {
        Ok(f) => f,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(setup(e));
        }
    };
    let argv = spec.command(&file);
    let mut env = launch.env.clone();
    if spec.colours_results() && !env.iter().any(|(k, _)| k == "NO_COLOR") {
        // Results are data for a program, not a terminal: Deno's kernel
        // colours its plain-text results unless told not to.
        env.push(("NO_COLOR".to_owned(), "1".to_owned()));
    }
    for (k, v) in &spec.env {
        env.retain(|(name, _)| name != k);
        env.push((k.clone(), v.clone()));
    }
    let mut cmd = std::process::Command::new(&argv[0]);
    // A group of its own: an interrupt or a kill reaches what the kernel
    // started too.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some((uid, gid)) = launch.ids {
        std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, gid);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("cannot start {what}: {e}"));
        }
    };
    let pid = child.id();
    // Registered before any await: the reaper runs on this thread.
    let exited = reaper.watch(pid);
    let tail: Tail = Arc::default();
    if let Some(stderr) = child.stderr.take() {
        log_stderr(id.to_owned(), stderr, tail.clone());
    }
    drop(child); // never waited on here: the reaper collects it
    let (exit_tx, exit_rx) = watch::channel(None);
    {
        let dir = dir.clone();
        tokio::spawn(async move {
            let status = exited.await.unwrap_or(ExitStatus::Signaled(9));
            let _ = exit_tx.send(Some(status));
            let _ = std::fs::remove_dir_all(&dir);
        });
    }
    let signer = Signer::new(&key);
    let session = super::new_id();
    let (control_tx, _) = mpsc::channel(1);
    let live = Arc::new(Live {
        pid,
        interrupt_mode: spec.interrupt_mode,
        control: control_tx,
        session: session.clone(),
        exit: exit_rx,
        ended_by_us: AtomicBool::new(false),
    });
    let fail = |why: String| {
        live.kill();
        why
    };
    let deadline = Instant::now() + START_TIMEOUT;
    let connected = tokio::time::timeout_at(deadline, connect(ports, &signer, live.exit.clone()));
    let (shell, shell_in, iopub, control) = match connected.await {
        Ok(Ok(sockets)) => sockets,
        Ok(Err(None)) | Err(_) => {
            return Err(fail(format!(
                "{what} did not open its ports within {} s{}",
                START_TIMEOUT.as_secs(),
                stderr_note(&tail)
            )))
        }
        Ok(Err(Some(status))) => {
            return Err(fail(format!(
                "{what} exited while starting ({}){}",
                exit_words(status),
                stderr_note(&tail)
            )))
        }
    };
    let mut live = Arc::into_inner(live).expect("not shared yet");
    live.control = control;
    let live = Arc::new(live);
    let mut kernel = Kernel {
        live,
        shell,
        shell_in,
        iopub,
    };
    match handshake(&mut kernel, deadline).await {
        Ok(()) => Ok(kernel),
        Err(status) => {
            kernel.live.kill();
            Err(match status {
                Some(s) => format!(
                    "{what} exited while starting ({}){}",
                    exit_words(s),
                    stderr_note(&tail)
                ),
                None => format!(
                    "{what} did not answer kernel_info_request within {} s{}",
                    START_TIMEOUT.as_secs(),
                    stderr_note(&tail)
                ),
            })
        }
    }
}

fn exit_words(status: ExitStatus) -> String {
    match status {
        ExitStatus::Exited(c) => format!("status {c}"),
        ExitStatus::Signaled(s) => format!("signal {s}: {}", signal_description(s)),
    }
}

fn stderr_note(tail: &Tail) -> String {
    let t = tail_text(tail);
    if t.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with: {t}")
    }
}

type Sockets = (
    mpsc::Sender<Message>,
    mpsc::Receiver<Message>,
    mpsc::Receiver<Message>,
    mpsc::Sender<Message>,
);

/// Waits until the kernel listens, then connects shell, iopub and control.
/// `Err(Some(status))` when it exited first.
async fn connect(
    ports: [u16; 5],
    signer: &Signer,
    mut exit: watch::Receiver<Option<ExitStatus>>,
) -> Result<Sockets, Option<ExitStatus>> {
    let [shell_port, iopub_port, _, control_port, _] = ports;
    // zeromq's connect retries a refused connection only after a second
    // or more; probing first keeps a kernel's start as quick as it is.
    for port in [shell_port, iopub_port, control_port] {
        loop {
            if let Some(s) = *exit.borrow() {
                return Err(Some(s));
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(15)) => {}
                _ = exit.changed() => {}
            }
        }
    }
    let endpoint = |p: u16| format!("tcp://127.0.0.1:{p}");
    let mut shell = zeromq::DealerSocket::new();
    let mut iopub = zeromq::SubSocket::new();
    let mut control = zeromq::DealerSocket::new();
    let joined = async {
        iopub.subscribe("").await?;
        iopub.connect(&endpoint(iopub_port)).await?;
        shell.connect(&endpoint(shell_port)).await?;
        control.connect(&endpoint(control_port)).await?;
        Ok::<_, zeromq::ZmqError>(())
    };
    if let Err(e) = joined.await {
        log(format!("connecting to a kernel: {e}"));
        return Err(*exit.borrow());
    }
    let (shell_tx, shell_rx) = mpsc::channel(SOCKET_QUEUE);
    let shell = dealer(shell, signer.clone(), Some(shell_tx));
    let iopub = subscriber(iopub, signer.clone());
    let control = dealer(control, signer.clone(), None);
    Ok((shell, shell_rx, iopub, control))
}

/// `kernel_info_request` until both its reply (the kernel serves) and an
/// iopub message about it (our subscription is live, so a cell's first
/// output is not lost) arrive. A kernel that never publishes about it is
/// taken as ready after a few replies.
async fn handshake(k: &mut Kernel, deadline: Instant) -> Result<(), Option<ExitStatus>> {
    let mut asked = HashSet::new();
    let mut replies = 0;
    let mut published = false;
    let mut exit = k.live.exit.clone();
    let mut wait = Duration::from_millis(300);
    loop {
        let req = Message::request(&k.live.session, "kernel_info_request", json!({}));
        asked.insert(req.id().to_owned());
        if k.shell.send(req).await.is_err() {
            return Err(k.live.exited());
        }
        let round = Instant::now() + wait;
        wait = (wait * 2).min(Duration::from_secs(2));
        loop {
            tokio::select! {
                m = k.shell_in.recv() => match m {
                    None => return Err(k.live.exited()),
                    Some(m) if asked.contains(m.parent_id()) && m.msg_type() == "kernel_info_reply" => {
                        replies += 1;
                        if published || replies >= 3 {
                            return Ok(());
                        }
                    }
                    Some(_) => {}
                },
                m = k.iopub.recv() => match m {
                    None => return Err(k.live.exited()),
                    Some(m) if asked.contains(m.parent_id()) => {
                        published = true;
                        if replies > 0 {
                            return Ok(());
                        }
                    }
                    Some(_) => {}
                },
                _ = wait_exit(&mut exit) => return Err(k.live.exited()),
                _ = tokio::time::sleep_until(deadline) => return Err(None),
                _ = tokio::time::sleep_until(round) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_take_e2bs_shape() {
        let r = result(
            &json!({"text/plain": "'hi'", "text/html": ["<b>", "x</b>"], "image/png": "AAA",
                    "e2b/chart": {"type": "line"}, "application/x-custom": {"a": 1}}),
            true,
        );
        assert_eq!(r["type"], "result");
        assert_eq!(r["is_main_result"], true);
        assert_eq!(r["text"], "hi");
        assert_eq!(r["html"], "<b>x</b>");
        assert_eq!(r["png"], "AAA");
        assert_eq!(r["chart"]["type"], "line");
        assert_eq!(r["extra"]["application/x-custom"]["a"], 1);
        assert!(r.get("markdown").is_none());
        assert_eq!(
            result(&json!({"text/plain": "\"x'"}), false)["text"],
            "\"x'"
        );
        assert_eq!(result(&json!({"text/plain": "2"}), false)["text"], "2");
    }

    #[test]
    fn env_code_escapes_values() {
        let vars = vec![
            ("A".to_owned(), Some("it's \"q\"\n$HOME \\".to_owned())),
            ("B".to_owned(), None),
        ];
        let bash = env_code("bash", &vars).unwrap();
        assert_eq!(bash, "export A='it'\\''s \"q\"\n$HOME \\'\nunset B\n");
        let py = env_code("python", &vars).unwrap();
        assert!(py.contains(r#"{"A":"it's \"q\"\n$HOME \\"}"#), "{py}");
        assert!(py.contains(r#"["B"]"#), "{py}");
        assert!(env_code("javascript", &vars)
            .unwrap()
            .contains("Deno.env.set"));
        assert!(env_code("r", &vars).is_none());
        assert!(!env_supported("java"));
    }
}
