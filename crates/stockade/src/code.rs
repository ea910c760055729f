//! The code interpreter from the terminal: `stockade run-code` (one cell
//! from a file or stdin, its output streamed, images saved to files),
//! `stockade repl` (an interactive session on one context) and `stockade
//! code` (list, create, restart, interrupt and remove contexts).

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use base64::Engine as _;
use clap::{Args, Subcommand};
use stockade_sdk::{CodeError, CodeEvent, CodeResult, Error, RunCode, Sandbox, StreamExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::cli::{self, key_value, on, parse_duration, Batch, Ctx};
use crate::output::{self, CliError};

#[derive(Args)]
#[command(after_help = "Examples:
  stockade create --name nb --runtime code-interpreter-v1
  echo 'x = 21' | stockade run-code nb            # the code from stdin
  echo 'x * 2' | stockade run-code nb             # 42: variables stay for the next cell
  stockade run-code nb analysis.py --out-dir plots  # images are saved as plots/result-N-M.png
  stockade run-code nb --language javascript - <<< 'Math.max(1, 2)'
  stockade run-code nb -e MODE=test --timeout 30 job.py
  stockade run-code nb --json cell.py | jq .results

The cell's stdout and stderr are written as the kernel sends them, then its
result (the value of its last expression). PNG, JPEG, SVG and PDF results
(plots) are saved to files named result-<execution count>-<n> in --out-dir
and named on stdout. An error is printed with its traceback on stderr
(coloured on a terminal) and the exit code is 1. Ctrl-C interrupts the
cell; the context keeps its state.")]
pub struct RunCodeArgs {
    /// Sandbox id or name (its image needs a Jupyter kernel, as the
    /// code-interpreter-v1 runtime has).
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// The file holding the code; `-` or none: stdin.
    #[arg(value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    file: Option<PathBuf>,
    /// Run in this language's default context: python (the default),
    /// javascript (js), typescript, bash, …
    #[arg(long, short = 'l', conflicts_with = "context")]
    language: Option<String>,
    /// Run in this context (an id from `stockade code contexts`).
    #[arg(long, short = 'c')]
    context: Option<String>,
    /// Environment variable KEY=VALUE for this cell only (repeatable).
    #[arg(long, short = 'e', value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Interrupt the cell after this long: 30s, 5m (a bare number is
    /// seconds); the context keeps its state.
    #[arg(long)]
    timeout: Option<String>,
    /// Where image results are saved (made when missing).
    #[arg(long, value_name = "DIR", default_value = ".", value_hint = clap::ValueHint::DirPath)]
    out_dir: PathBuf,
}

#[derive(Args)]
#[command(after_help = "Examples:
  stockade repl nb
  stockade repl nb --language javascript
  stockade repl nb --context 3f2a…            # a context of `stockade code contexts nb`
  printf 'x = 2\\n\\nprint(x * 21)\\n' | stockade repl nb   # cells separated by blank lines

On a terminal: `In [n]:` prompts a cell. A line ending in `:` or `\\`, or
with a bracket still open, continues the cell (`...:`); then an empty line
runs it. Ctrl-C interrupts a running cell (twice: stops waiting for it) or
drops the lines typed so far; Ctrl-D leaves. Without a terminal on stdin,
cells are read up to each blank line and no prompts are printed.

The session runs in a new context of its own, removed when it ends (with
--context: that context, which stays). Image results are saved as with
`stockade run-code`.")]
pub struct ReplArgs {
    /// Sandbox id or name.
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// The session's language: python (the default), javascript,
    /// typescript, bash, …
    #[arg(long, short = 'l', conflicts_with = "context")]
    language: Option<String>,
    /// Work in this existing context instead of a new one.
    #[arg(long, short = 'c')]
    context: Option<String>,
    /// Working directory of the new context (default: the user's home).
    #[arg(long, short = 'w', conflicts_with = "context")]
    cwd: Option<String>,
    /// Where image results are saved (made when missing).
    #[arg(long, value_name = "DIR", default_value = ".", value_hint = clap::ValueHint::DirPath)]
    out_dir: PathBuf,
}

#[derive(Subcommand)]
pub enum CodeCommand {
    /// List a sandbox's code contexts (kernels), oldest first.
    #[command(
        alias = "ls",
        after_help = "Examples:
  stockade code contexts nb
  stockade code contexts nb --json | jq -r '.[].id'"
    )]
    Contexts {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
    },
    /// Make a new context: a kernel with state of its own; prints its id.
    #[command(after_help = "Examples:
  stockade code create nb
  stockade code create nb --language javascript --cwd /workspace
  ID=$(stockade code create nb --json | jq -r .id); stockade run-code nb --context \"$ID\" cell.py")]
    Create {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// python (the default), javascript, typescript, bash, …
        #[arg(long, short = 'l')]
        language: Option<String>,
        /// Working directory (default: the user's home).
        #[arg(long, short = 'w')]
        cwd: Option<String>,
    },
    /// Restart a context's kernel: same id, language and directory; its
    /// variables are gone.
    #[command(after_help = "Example:
  stockade code restart nb 3f2a9c1e-…")]
    Restart {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// The context's id.
        #[arg(value_name = "CONTEXT")]
        context: String,
    },
    /// Interrupt the cell a context is running; it keeps its state.
    #[command(after_help = "Example:
  stockade code interrupt nb 3f2a9c1e-…")]
    Interrupt {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// The context's id.
        #[arg(value_name = "CONTEXT")]
        context: String,
    },
    /// Remove contexts and end their kernels.
    #[command(
        alias = "remove",
        after_help = "Example:
  stockade code rm nb 3f2a9c1e-… 77b0d2aa-…"
    )]
    Rm {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// The contexts' ids.
        #[arg(value_name = "CONTEXT", required = true)]
        contexts: Vec<String>,
    },
}

/// The code of a cell: the file's, or stdin's with none or `-`.
async fn read_code(file: Option<&Path>) -> anyhow::Result<String> {
    let (bytes, source) = match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|e| {
                CliError::invalid(format!("cannot read the code in {}: {e}", path.display()))
            })?;
            (bytes, path.display().to_string())
        }
        None => {
            if std::io::stdin().is_terminal() {
                errln!("(type the code, then Ctrl-D to run it)");
            }
            let bytes = tokio::task::spawn_blocking(|| {
                let mut buf = Vec::new();
                std::io::stdin().read_to_end(&mut buf).map(|_| buf)
            })
            .await
            .context("reading stdin failed")?
            .context("reading stdin failed")?;
            (bytes, "stdin".to_owned())
        }
    };
    String::from_utf8(bytes)
        .map_err(|_| CliError::invalid(format!("the code in {source} is not UTF-8 text")).into())
}

pub async fn run_code(ctx: &Ctx, a: RunCodeArgs) -> anyhow::Result<ExitCode> {
    let env = a
        .env
        .iter()
        .map(|e| key_value(e, "--env"))
        .collect::<Result<Vec<_>, _>>()?;
    let timeout = a
        .timeout
        .as_deref()
        .map(|t| parse_duration(t, "--timeout", "s"))
        .transpose()?;
    let client = ctx.client()?;
    let sb = cli::running_sandbox(&client, &a.sandbox).await?;
    let mut cell = RunCode::new(read_code(a.file.as_deref()).await?);
    if let Some(language) = a.language {
        cell = cell.language(language);
    }
    if let Some(id) = a.context {
        cell = cell.context(id);
    }
    for (k, v) in env {
        cell = cell.env(k, v);
    }
    if let Some(t) = timeout {
        cell = cell.timeout(t);
    }
    let on = on(&a.sandbox);
    if ctx.json {
        let ex = sb.run_code(cell).await.map_err(&on)?;
        output::json(&ex)?;
        return Ok(if ex.error.is_some() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        });
    }
    let mut events = sb.run_code_stream(cell).await.map_err(&on)?;
    let mut printer = Printer::new(a.out_dir, false);
    while let Some(event) = events.next().await {
        printer.event(event.map_err(&on)?)?;
        if printer.ended {
            break;
        }
    }
    if !printer.ended {
        return Err(connection_lost().into());
    }
    Ok(if printer.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn connection_lost() -> CliError {
    CliError::new(
        "connection_lost",
        "the connection ended before the cell did; run `stockade code contexts SANDBOX` to see \
         the context, whose state is kept",
    )
}

/// Prints the events of a cell as they come and saves its images.
struct Printer {
    out_dir: PathBuf,
    /// `Out[n]: ` before the main result (a terminal session).
    out_prompt: bool,
    count: Option<u64>,
    /// Results seen so far in this cell (their files are numbered by it).
    results: usize,
    /// The cell raised, or its kernel died.
    failed: bool,
    ended: bool,
    /// The last byte written to stdout was a newline (or nothing was).
    at_line_start: bool,
}

/// The image and document formats saved to files: the result's field, the
/// file extension, the name people know, and whether it is base64 (SVG is
/// text).
const FILE_FORMATS: [(&str, &str, &str, bool); 4] = [
    ("png", "png", "PNG", true),
    ("jpeg", "jpg", "JPEG", true),
    ("svg", "svg", "SVG", false),
    ("pdf", "pdf", "PDF", true),
];

impl Printer {
    fn new(out_dir: PathBuf, out_prompt: bool) -> Self {
        Self {
            out_dir,
            out_prompt,
            count: None,
            results: 0,
            failed: false,
            ended: false,
            at_line_start: true,
        }
    }

    /// Writes `text` to stdout at once (a closed stdout ends the program).
    fn out(&mut self, text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    /// `text` as a line of its own on stdout.
    fn line(&mut self, text: &str) -> std::io::Result<()> {
        let start = if self.at_line_start { "" } else { "\n" };
        self.out(&format!("{start}{text}\n"))
    }

    fn event(&mut self, event: CodeEvent) -> anyhow::Result<()> {
        match event {
            CodeEvent::ExecutionCount(n) => self.count = Some(n),
            CodeEvent::Stdout(o) => self.out(&o.text)?,
            CodeEvent::Stderr(o) => {
                // A closed stderr must not end the cell.
                let mut stderr = std::io::stderr();
                let _ = stderr.write_all(o.text.as_bytes());
                let _ = stderr.flush();
            }
            CodeEvent::Result(r) => self.result(&r)?,
            CodeEvent::Error(e) => {
                self.failed = true;
                print_error(&e);
            }
            CodeEvent::End(end) => {
                self.ended = true;
                if end.unexpected {
                    self.failed = true;
                    errln!("stockade: the kernel ended during the cell; restart the context (`stockade code restart`)");
                }
            }
        }
        Ok(())
    }

    /// Saves the files of a result and prints what it is.
    fn result(&mut self, r: &CodeResult) -> anyhow::Result<()> {
        self.results += 1;
        let mut saved = false;
        for (field, ext, name, base64) in FILE_FORMATS {
            let Some(content) = format_of(r, field) else {
                continue;
            };
            let bytes = if base64 {
                base64::engine::general_purpose::STANDARD
                    .decode(content.trim())
                    .map_err(|e| {
                        CliError::new(
                            "bad_response",
                            format!("the {name} result is not base64: {e}"),
                        )
                    })?
            } else {
                content.as_bytes().to_vec()
            };
            let path = self.out_dir.join(format!(
                "result-{}-{}.{ext}",
                self.count.unwrap_or(0),
                self.results
            ));
            std::fs::create_dir_all(&self.out_dir)
                .and_then(|()| std::fs::write(&path, &bytes))
                .map_err(|e| {
                    CliError::new(
                        "io_error",
                        format!(
                            "could not save the {name} result to {}: {e}",
                            path.display()
                        ),
                    )
                })?;
            self.line(&format!("[{name} saved to {}]", path.display()))?;
            saved = true;
        }
        if saved {
            return Ok(());
        }
        let Some(text) = shown_text(r) else {
            return Ok(());
        };
        let prompt = match (self.out_prompt && r.is_main_result, self.count) {
            (true, Some(n)) => format!("Out[{n}]: "),
            _ => String::new(),
        };
        self.line(&format!("{prompt}{text}"))?;
        Ok(())
    }
}

/// The content of one of the file formats of a result.
fn format_of<'a>(r: &'a CodeResult, field: &str) -> Option<&'a str> {
    match field {
        "png" => r.png.as_deref(),
        "jpeg" => r.jpeg.as_deref(),
        "svg" => r.svg.as_deref(),
        "pdf" => r.pdf.as_deref(),
        _ => None,
    }
}

/// What a result without a file shows on a terminal: its plain text, else
/// the first of its other text forms, else which forms it has.
fn shown_text(r: &CodeResult) -> Option<String> {
    if let Some(t) = r.text.as_deref().or(r.markdown.as_deref()) {
        return Some(t.to_owned());
    }
    if let Some(j) = &r.json {
        return Some(j.to_string());
    }
    let forms: Vec<&str> = [
        ("HTML", r.html.is_some()),
        ("LaTeX", r.latex.is_some()),
        ("JavaScript", r.javascript.is_some()),
        ("data", r.data.is_some()),
        ("chart", r.chart.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, has)| has.then_some(name))
    .collect();
    (!forms.is_empty()).then(|| format!("[a result in {} (see --json)]", forms.join(", ")))
}

/// A cell's error on stderr: its traceback (coloured as the kernel sent it
/// on a terminal, plain otherwise), or its name and value without one.
fn print_error(e: &CodeError) {
    let text = if e.traceback.trim().is_empty() {
        format!("{}: {}", e.name, e.value)
    } else {
        e.traceback.clone()
    };
    let text = if std::io::stderr().is_terminal() {
        text
    } else {
        strip_ansi(&text)
    };
    errln!("{}", text.trim_end_matches('\n'));
}

/// `text` without ANSI escape sequences (colours, cursor moves, titles).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            // CSI: parameters and intermediates up to a final byte @ to ~.
            Some('[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            // OSC: up to BEL or ESC \.
            Some(']') => {
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            // A two-character sequence.
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    out
}

/// Whether the lines of a cell typed so far ask for more: the last ends in
/// `:` or `\`, or a bracket is still open (brackets in strings and
/// comments do not count).
fn continues(lines: &[String]) -> bool {
    let Some(last) = lines.iter().rev().find(|l| !l.trim().is_empty()) else {
        return false;
    };
    let last = last.trim_end();
    if last.ends_with(':') || last.ends_with('\\') {
        return true;
    }
    let mut depth: i64 = 0;
    for line in lines {
        let mut quote: Option<char> = None;
        let mut escaped = false;
        for c in line.chars() {
            match quote {
                Some(q) => {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == q {
                        quote = None;
                    }
                }
                None => match c {
                    '#' => break,
                    '\'' | '"' | '`' => quote = Some(c),
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' => depth -= 1,
                    _ => {}
                },
            }
        }
    }
    depth > 0
}

/// Lines of stdin as they are read, on a thread of their own (it may sit
/// in `read` when the session ends); the channel closes at the end of
/// stdin.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match std::io::BufRead::read_until(&mut stdin, b'\n', &mut buf) {
                Ok(0) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    let line = line.strip_suffix('\n').unwrap_or(&line);
                    let line = line.strip_suffix('\r').unwrap_or(line);
                    if tx.send(line.to_owned()).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    });
    rx
}

/// Exit codes of a session a signal ended (128 + the signal).
const SIGHUP_EXIT: u8 = 129;
const SIGTERM_EXIT: u8 = 143;

/// How a session's loop ended.
enum SessionEnd {
    /// End of input (Ctrl-D).
    Done,
    /// A signal; the exit code it stands for.
    Signal(u8),
}

/// The signals a session answers: Ctrl-C (interrupts), and the hang-up and
/// termination that end it (after its own context is removed).
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        let listen = |kind| signal(kind).context("could not listen for signals");
        Ok(Self {
            interrupt: listen(SignalKind::interrupt())?,
            hangup: listen(SignalKind::hangup())?,
            terminate: listen(SignalKind::terminate())?,
        })
    }
}

/// The next hang-up or termination: its exit code.
async fn ending(
    hangup: &mut tokio::signal::unix::Signal,
    terminate: &mut tokio::signal::unix::Signal,
) -> u8 {
    tokio::select! {
        _ = hangup.recv() => SIGHUP_EXIT,
        _ = terminate.recv() => SIGTERM_EXIT,
    }
}

pub async fn repl(ctx: &Ctx, a: ReplArgs) -> anyhow::Result<ExitCode> {
    let sb = cli::live_session(
        ctx,
        &a.sandbox,
        "a repl is a live session",
        "stockade run-code --json SANDBOX FILE",
    )
    .await?;
    let on = on(&a.sandbox);
    let mut signals = Signals::new()?;
    let (id, made) = match a.context {
        Some(id) => (id, false),
        None => {
            let made = output::spinning(
                "Starting a kernel",
                !std::io::stderr().is_terminal(),
                sb.create_code_context(a.language.as_deref(), a.cwd.as_deref()),
            )
            .await
            .map_err(&on)?;
            (made.id, true)
        }
    };
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        errln!(
            "Context {id} in {}: Ctrl-C interrupts a cell, Ctrl-D leaves{}.",
            sb.name(),
            if made { " (and removes it)" } else { "" }
        );
    }
    let mut session = Session {
        sb: &sb,
        id: &id,
        interactive,
        out_dir: a.out_dir,
        next: made.then_some(1),
    };
    let ended = session.run(&mut signals).await;
    if made {
        if let Err(e) = sb.remove_code_context(&id).await {
            errln!(
                "stockade: could not remove the session's context {id}: {}",
                output::sdk_error(&e, Some(&a.sandbox))
            );
        }
    }
    match ended? {
        SessionEnd::Done => Ok(ExitCode::SUCCESS),
        SessionEnd::Signal(code) => Ok(ExitCode::from(code)),
    }
}

/// A repl on one context.
struct Session<'a> {
    sb: &'a Sandbox,
    id: &'a str,
    interactive: bool,
    out_dir: PathBuf,
    /// The execution count of the next cell, when known.
    next: Option<u64>,
}

impl Session<'_> {
    fn prompt(&self, first: bool) -> std::io::Result<()> {
        if !self.interactive {
            return Ok(());
        }
        let n = self.next.map_or_else(|| " ".to_owned(), |n| n.to_string());
        let text = if first {
            format!("In [{n}]: ")
        } else {
            format!("{}...: ", " ".repeat(n.len() + 2))
        };
        output::write_stdout(format_args!("{text}"))
    }

    async fn run(&mut self, signals: &mut Signals) -> anyhow::Result<SessionEnd> {
        let mut lines = stdin_lines();
        let mut cell: Vec<String> = Vec::new();
        self.prompt(true)?;
        loop {
            let line = tokio::select! {
                line = lines.recv() => line,
                _ = signals.interrupt.recv() => {
                    // Ctrl-C at the prompt drops what was typed.
                    cell.clear();
                    if self.interactive {
                        output::write_stdout(format_args!("\nKeyboardInterrupt\n"))?;
                        self.prompt(true)?;
                    }
                    continue;
                }
                code = ending(&mut signals.hangup, &mut signals.terminate) => return Ok(SessionEnd::Signal(code)),
            };
            let Some(line) = line else {
                if self.interactive {
                    output::write_stdout(format_args!("\n"))?;
                }
                if cell.iter().any(|l| !l.trim().is_empty()) {
                    if let Some(end) = self.cell(&cell.join("\n"), signals).await? {
                        return Ok(end);
                    }
                }
                return Ok(SessionEnd::Done);
            };
            let blank = line.trim().is_empty();
            let complete = if self.interactive {
                if blank && cell.is_empty() {
                    self.prompt(true)?;
                    continue;
                }
                if !blank {
                    cell.push(line);
                }
                // One complete line runs at once; a cell of several lines
                // runs at the empty line after it.
                blank || (cell.len() == 1 && !continues(&cell))
            } else {
                if !blank {
                    cell.push(line);
                }
                blank && !cell.is_empty()
            };
            if !complete {
                self.prompt(false)?;
                continue;
            }
            let code = std::mem::take(&mut cell).join("\n");
            if let Some(end) = self.cell(&code, signals).await? {
                return Ok(end);
            }
            self.prompt(true)?;
        }
    }

    /// Runs one cell, printing as it goes; Ctrl-C interrupts it (a second
    /// stops waiting). `Some` when a signal ended the session.
    async fn cell(
        &mut self,
        code: &str,
        signals: &mut Signals,
    ) -> anyhow::Result<Option<SessionEnd>> {
        let cell = RunCode::new(code).context(self.id);
        let mut events = match self.sb.run_code_stream(cell).await {
            Ok(events) => events,
            Err(e) => return self.failed(&e).map(|()| None),
        };
        let mut printer = Printer::new(self.out_dir.clone(), self.interactive);
        let mut interrupts = 0;
        while !printer.ended {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) => printer.event(event)?,
                    Some(Err(e)) => {
                        self.failed(&e)?;
                        break;
                    }
                    None => {
                        output::classify(&connection_lost().into()).print(false, None);
                        break;
                    }
                },
                _ = signals.interrupt.recv() => {
                    interrupts += 1;
                    if interrupts > 1 {
                        // Dropping the stream interrupts the cell too.
                        errln!("stockade: stopped waiting for the cell");
                        break;
                    }
                    if let Err(e) = self.sb.interrupt_code_context(self.id).await {
                        self.failed(&e)?;
                    }
                }
                code = ending(&mut signals.hangup, &mut signals.terminate) => return Ok(Some(SessionEnd::Signal(code))),
            }
        }
        if !printer.at_line_start {
            printer.out("\n")?;
        }
        self.next = printer.count.map(|n| n + 1).or(self.next);
        Ok(None)
    }

    /// Reports a failed cell and goes on, unless the context is gone.
    fn failed(&self, e: &Error) -> anyhow::Result<()> {
        if e.is_not_found() {
            return Err(CliError::new(
                "not_found",
                format!(
                    "the context {} is gone (removed, or the sandbox restarted) — start a new session",
                    self.id
                ),
            )
            .into());
        }
        output::sdk_error(e, Some(self.sb.name())).print(false, None);
        Ok(())
    }
}

pub async fn code(ctx: &Ctx, cmd: CodeCommand) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd {
        CodeCommand::Contexts { sandbox } => {
            let sb = cli::running_sandbox(&client, &sandbox).await?;
            let contexts = sb.code_contexts().await.map_err(on(&sandbox))?;
            if ctx.json {
                output::json(&contexts)?;
            } else if contexts.is_empty() {
                outln!(
                    "No code contexts in {} yet: the first `stockade run-code {}` makes one.",
                    sb.name(),
                    sb.name()
                )?;
            } else {
                let rows: Vec<Vec<String>> = contexts
                    .iter()
                    .map(|c| vec![c.id.clone(), c.language.clone(), c.cwd.clone()])
                    .collect();
                output::table(&["ID", "LANGUAGE", "CWD"], &rows)?;
            }
        }
        CodeCommand::Create {
            sandbox,
            language,
            cwd,
        } => {
            let sb = cli::running_sandbox(&client, &sandbox).await?;
            let made = output::spinning(
                "Starting a kernel",
                ctx.json,
                sb.create_code_context(language.as_deref(), cwd.as_deref()),
            )
            .await
            .map_err(on(&sandbox))?;
            output::json_or(ctx.json, &made, || made.id.clone())?;
        }
        CodeCommand::Restart { sandbox, context } => {
            let sb = cli::running_sandbox(&client, &sandbox).await?;
            output::spinning(
                "Restarting the kernel",
                ctx.json,
                sb.restart_code_context(&context),
            )
            .await
            .map_err(on(&sandbox))?;
            let done = serde_json::json!({ "id": context, "restarted": true });
            output::json_or(ctx.json, &done, || {
                format!("Restarted context {context}: its variables are gone.")
            })?;
        }
        CodeCommand::Interrupt { sandbox, context } => {
            let sb = cli::running_sandbox(&client, &sandbox).await?;
            sb.interrupt_code_context(&context)
                .await
                .map_err(on(&sandbox))?;
            let done = serde_json::json!({ "id": context, "interrupted": true });
            output::json_or(ctx.json, &done, || {
                format!("Interrupted context {context}.")
            })?;
        }
        CodeCommand::Rm { sandbox, contexts } => {
            let sb = cli::running_sandbox(&client, &sandbox).await?;
            let mut batch = Batch::new(ctx.json);
            for id in &contexts {
                match sb.remove_code_context(id).await {
                    Ok(()) => batch.ok(
                        serde_json::json!({ "id": id, "removed": true }),
                        &format!("{id}: removed"),
                    )?,
                    Err(e) => batch.failed(id, on(&sandbox)(e))?,
                }
            }
            return batch.finish();
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_sequences_are_stripped() {
        let tb = "\u{1b}[0;31mZeroDivisionError\u{1b}[0m: division by zero\u{1b}]0;title\u{7}!";
        assert_eq!(strip_ansi(tb), "ZeroDivisionError: division by zero!");
        assert_eq!(strip_ansi("plain ü"), "plain ü");
        assert_eq!(strip_ansi("cut \u{1b}["), "cut ");
    }

    #[test]
    fn cells_continue_after_colons_backslashes_and_open_brackets() {
        let cell = |lines: &[&str]| lines.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
        assert!(continues(&cell(&["def f(x):"])));
        assert!(continues(&cell(&["x = 1 + \\"])));
        assert!(continues(&cell(&["xs = [1,", "  2,"])));
        assert!(!continues(&cell(&["xs = [1,", "  2]"])));
        assert!(!continues(&cell(&["print('(')"])), "a bracket in a string");
        assert!(!continues(&cell(&["x = 1  # (comment"])));
        assert!(!continues(&cell(&["x = 1"])));
        assert!(!continues(&cell(&[])));
    }

    #[test]
    fn results_show_their_text_or_their_forms() {
        let r = CodeResult {
            is_main_result: true,
            text: Some("42".into()),
            ..CodeResult::default()
        };
        assert_eq!(shown_text(&r).as_deref(), Some("42"));
        let r = CodeResult {
            html: Some("<b>x</b>".into()),
            ..CodeResult::default()
        };
        assert_eq!(
            shown_text(&r).as_deref(),
            Some("[a result in HTML (see --json)]")
        );
        assert_eq!(shown_text(&CodeResult::default()), None);
    }
}
