//! `stockade exec` (output streamed live in the order it comes, the exit
//! code passed through, stdin forwarded; `-d` in the background; `-it` on a
//! terminal), `stockade shell` (an interactive login shell), `ps` and `kill`
//! for background processes, and `stockade logs` (the tail, or following).

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use stockade_core::shell::quote_if_needed;
use stockade_sdk::api::{ProcessResponse, ProcessStatus};
use stockade_sdk::{Command, CommandEvent, FollowLogs, StreamExt, TerminalOptions};

use crate::cli::{self, key_value, on, parse_duration, Batch, Ctx};
use crate::output::{self, CliError};

/// The exit code of `stockade exec` when the command hit its timeout (as
/// `timeout(1)` does).
const TIMED_OUT: u8 = 124;

#[derive(Args)]
#[command(after_help = "Examples:
  stockade exec demo -- ls -la /workspace
  stockade exec demo --shell 'npm ci && npm test'
  stockade exec demo --cwd app -e NODE_ENV=test -- node index.js
  echo 'print(1 + 1)' | stockade exec demo -- python3 -   # stdin is forwarded
  stockade exec demo --timeout 30s -- ./long-job.sh; echo \"exit code $?\"
  stockade exec -d demo -- python3 -m http.server 8000    # prints the process id
  stockade ps demo && stockade kill demo PROCESS_ID
  stockade exec -it demo -- python3                        # an interactive program on a terminal
  stockade exec -it demo --shell 'cd app && exec bash'

The command's exit code becomes stockade's (124 when --timeout killed it).
Its stdout and stderr are written as each chunk arrives, so on one terminal
they interleave as the program wrote them.

With -t the command runs on a terminal (a PTY) sized like yours and resized
with it; with -it your keystrokes go to it as you type them (Ctrl-C too:
it reaches the program in the sandbox), and your terminal is put back as it
was when the command ends. -i alone forwards stdin until its end.")]
pub struct ExecArgs {
    /// Sandbox id or name.
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// The program and its arguments, run as they are (no shell).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmd: Vec<String>,
    /// A shell command line instead, run with /bin/sh -c.
    #[arg(long, short = 's', conflicts_with = "cmd")]
    shell: Option<String>,
    /// Working directory (relative: under /workspace, the default).
    #[arg(long, short = 'w')]
    cwd: Option<String>,
    /// Environment variable KEY=VALUE (repeatable).
    #[arg(long, short = 'e', value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Kill the command after this long: 30s, 5m, 1h (a bare number is seconds).
    #[arg(long)]
    timeout: Option<String>,
    /// Do not forward stdin even when it is not a terminal.
    #[arg(long, short = 'n', conflicts_with = "interactive")]
    no_stdin: bool,
    /// Forward stdin (also from a terminal, until Ctrl-D); with -t every
    /// keystroke as it is typed.
    #[arg(long, short = 'i')]
    interactive: bool,
    /// Run on a terminal (a PTY) sized like the local one; needs a terminal
    /// on stdin. With -i the local terminal is in raw mode meanwhile.
    #[arg(long, short = 't')]
    tty: bool,
    /// Run in the background: print the process id and return at once
    /// (see `stockade ps` and `stockade kill`).
    #[arg(long, short = 'd', conflicts_with_all = ["interactive", "tty"])]
    detach: bool,
}

#[derive(Args)]
#[command(after_help = "Examples:
  stockade shell demo
  stockade shell demo --cwd /srv/app

A login shell (bash where the image has it) on a terminal sized like yours:
keystrokes go to it as you type them, Ctrl-C included; `exit` leaves, and
the shell's exit code becomes stockade's. Your terminal is put back as it
was however the session ends. `stockade exec -it SANDBOX -- CMD` runs any
other program this way.")]
pub struct ShellArgs {
    /// Sandbox id or name.
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// Start in this directory (relative: under /workspace, the default).
    #[arg(long, short = 'w')]
    cwd: Option<String>,
}

/// `stockade shell`: a login shell on a terminal.
pub async fn shell(ctx: &Ctx, a: ShellArgs) -> anyhow::Result<ExitCode> {
    tty::require_terminal("stockade shell")?;
    let sb = cli::live_session(
        ctx,
        &a.sandbox,
        "a shell is a live terminal",
        "stockade exec --json SANDBOX -- CMD",
    )
    .await?;
    let mut options = TerminalOptions::new();
    options.cwd = a.cwd;
    tty::session(&sb, &a.sandbox, options, true, None).await
}

/// The shell command line a terminal runs for `exec -t`: the variables
/// exported, then the program `exec`uted in place of the shell (so that
/// signals and the exit code are its own) or the `--shell` line.
fn terminal_command(
    argv: &[String],
    shell: Option<&str>,
    env: &[(String, String)],
) -> Result<String, CliError> {
    let mut line = String::new();
    for (k, v) in env {
        let valid = k
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(CliError::invalid(format!(
                "--env: '{k}' is not a variable name (letters, digits and _, not starting with a digit)"
            )));
        }
        line.push_str(&format!("export {k}={}; ", quote_if_needed(v)));
    }
    match shell {
        Some(s) => line.push_str(s),
        None => {
            let words: Vec<String> = argv.iter().map(|w| quote_if_needed(w)).collect();
            line.push_str("exec ");
            line.push_str(&words.join(" "));
        }
    }
    Ok(line)
}

pub async fn exec(ctx: &Ctx, a: ExecArgs) -> anyhow::Result<ExitCode> {
    if a.tty {
        return exec_tty(ctx, a).await;
    }
    let client = ctx.client()?;
    let mut cmd = match (a.shell, a.cmd.is_empty()) {
        (Some(line), _) => Command::shell(line),
        (None, false) => Command::from(a.cmd),
        (None, true) => {
            return Err(CliError::invalid(
                "give a command: `stockade exec SANDBOX -- CMD ARGS…` or `--shell 'a | b'`",
            )
            .into())
        }
    };
    if let Some(dir) = a.cwd {
        cmd = cmd.cwd(dir);
    }
    for e in &a.env {
        let (k, v) = key_value(e, "--env")?;
        cmd = cmd.env(k, v);
    }
    if let Some(t) = a.timeout {
        cmd = cmd.timeout(parse_duration(&t, "--timeout", "s")?);
    }
    if !a.no_stdin && (a.interactive || !std::io::stdin().is_terminal()) {
        let input = tokio::task::spawn_blocking(|| {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).map(|_| buf)
        })
        .await
        .context("reading stdin failed")?
        .context("reading stdin failed")?;
        let text = String::from_utf8(input).map_err(|_| {
            CliError::invalid(
                "stdin is not UTF-8 text, which is all exec can forward; copy binary input \
                 into the sandbox with `stockade cp` and read it from there (or pass -n)",
            )
        })?;
        cmd = cmd.stdin(text);
    }
    let sb = cli::running_sandbox(&client, &a.sandbox).await?;
    let on = on(&a.sandbox);

    if a.detach {
        let p = sb.spawn(cmd).await.map_err(&on)?;
        if ctx.json {
            output::json(p.info())?;
        } else {
            outln!("{}", p.id())?;
            if std::io::stderr().is_terminal() {
                errln!(
                    "(running in the background in {0}: `stockade ps {0}` lists it, `stockade kill {0} {1}` ends it)",
                    sb.name(),
                    p.id()
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    }

    if ctx.json {
        let out = sb.run_command(cmd).await.map_err(&on)?;
        output::json(&serde_json::json!({
            "exitCode": out.exit_code,
            "stdout": out.stdout,
            "stderr": out.stderr,
            "durationMs": u64::try_from(out.duration.as_millis()).unwrap_or(u64::MAX),
            "timedOut": out.timed_out,
            "truncated": out.truncated,
            "message": out.message,
        }))?;
        return Ok(exit_code(out.exit_code, out.timed_out));
    }

    let mut events = sb.run_command_stream(cmd).await.map_err(&on)?;
    // Each chunk is written (and flushed) the moment it arrives, never
    // batched per stream: on one terminal stdout and stderr then interleave
    // as the program wrote them. A closed stdout ends the command (dropping
    // the stream kills it) and this program quietly.
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    while let Some(event) = events.next().await {
        match event.map_err(&on)? {
            CommandEvent::Stdout(text) => {
                stdout.write_all(text.as_bytes())?;
                stdout.flush()?;
            }
            CommandEvent::Stderr(text) => {
                // A closed stderr must not end the command.
                let _ = stderr.write_all(text.as_bytes());
                let _ = stderr.flush();
            }
            CommandEvent::Exit(exit) => {
                if let Some(m) = &exit.message {
                    errln!("stockade: {}", output::cli_words(m, Some(&a.sandbox)));
                }
                return Ok(exit_code(exit.exit_code, exit.timed_out));
            }
        }
    }
    Err(CliError::new(
        "connection_lost",
        "the connection ended before the command did; its exit code is unknown",
    )
    .into())
}

/// `stockade exec -t`: the command on a terminal.
async fn exec_tty(ctx: &Ctx, a: ExecArgs) -> anyhow::Result<ExitCode> {
    tty::require_terminal("stockade exec -t")?;
    if ctx.json {
        return Err(CliError::invalid(
            "-t shows a live terminal, not JSON: drop one of -t and --json",
        )
        .into());
    }
    if a.shell.is_none() && a.cmd.is_empty() {
        return Err(CliError::invalid(
            "give a command: `stockade exec -it SANDBOX -- CMD ARGS…` or `--shell 'a | b'` \
             (`stockade shell SANDBOX` opens a login shell)",
        )
        .into());
    }
    let mut env = Vec::new();
    for e in &a.env {
        env.push(key_value(e, "--env")?);
    }
    let line = terminal_command(&a.cmd, a.shell.as_deref(), &env)?;
    let timeout = a
        .timeout
        .as_deref()
        .map(|t| parse_duration(t, "--timeout", "s"))
        .transpose()?;
    let client = ctx.client()?;
    let sb = cli::running_sandbox(&client, &a.sandbox).await?;
    let mut options = TerminalOptions::new().command(line);
    options.cwd = a.cwd;
    tty::session(&sb, &a.sandbox, options, a.interactive, timeout).await
}

/// Restores the local terminal if a terminal session changed it (for the
/// panic hook; a session restores it itself on every other way out).
pub fn restore_terminal() {
    tty::restore();
}

mod tty {
    //! A terminal session: the local terminal in raw mode (restored on
    //! every way out: the end, an error, a signal, a panic), keystrokes
    //! passed through as typed, the remote PTY sized like the local one and
    //! resized on SIGWINCH, output written as it comes, the remote exit
    //! code as ours.

    use std::io::{IsTerminal, Read, Write};
    use std::process::ExitCode;
    use std::sync::Mutex;
    use std::time::Duration;

    use rustix::termios::{self, OptionalActions, Termios};
    use stockade_sdk::{Sandbox, StreamExt, TerminalOptions, MAX_TERMINAL_SIDE};
    use tokio::signal::unix::{signal, SignalKind};
    use tokio::sync::mpsc;

    use crate::cli::on;
    use crate::output::CliError;

    /// The local terminal's settings while a session has it in raw mode.
    static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

    /// Refuses to go on without a terminal on stdin.
    pub fn require_terminal(what: &str) -> Result<(), CliError> {
        if std::io::stdin().is_terminal() {
            return Ok(());
        }
        Err(CliError::invalid(format!(
            "{what} needs a terminal on stdin, and stdin is a pipe or a file here"
        ))
        .hint("run it from an interactive terminal, or drop -t: `stockade exec SANDBOX -- CMD` forwards stdin as input"))
    }

    /// The local terminal in raw mode until dropped.
    struct RawMode;

    impl RawMode {
        fn enter() -> std::io::Result<Self> {
            let stdin = std::io::stdin();
            let saved = termios::tcgetattr(&stdin)?;
            let mut raw = saved.clone();
            raw.make_raw();
            if let Ok(mut slot) = SAVED.lock() {
                *slot = Some(saved);
            }
            termios::tcsetattr(&stdin, OptionalActions::Now, &raw)?;
            Ok(Self)
        }
    }

    impl Drop for RawMode {
        fn drop(&mut self) {
            restore();
        }
    }

    /// Puts the local terminal back as it was before raw mode, if it is in it.
    pub fn restore() {
        let saved = match SAVED.try_lock() {
            Ok(mut slot) => slot.take(),
            Err(_) => None,
        };
        if let Some(t) = saved {
            let _ = termios::tcsetattr(std::io::stdin(), OptionalActions::Now, &t);
        }
    }

    /// The local terminal's size (columns, rows); 80×24 when it says none.
    fn local_size() -> (u16, u16) {
        let size = if std::io::stdout().is_terminal() {
            termios::tcgetwinsize(std::io::stdout())
        } else {
            termios::tcgetwinsize(std::io::stdin())
        };
        match size {
            Ok(w) if w.ws_col > 0 && w.ws_row > 0 => (
                w.ws_col.min(MAX_TERMINAL_SIDE),
                w.ws_row.min(MAX_TERMINAL_SIDE),
            ),
            _ => (80, 24),
        }
    }

    /// Keystrokes as they are typed, read on a thread of their own (a
    /// thread, not a task: it may sit in `read` when the program ends).
    fn keystrokes() -> mpsc::Receiver<Vec<u8>> {
        let (tx, rx) = mpsc::channel(64);
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin();
            let mut buf = [0u8; 4096];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
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
    const SIGINT_EXIT: u8 = 130;
    const SIGTERM_EXIT: u8 = 143;

    /// Runs a terminal session in `sb` (named `name` on the command line);
    /// with `input` the keystrokes go to it and the local terminal is in
    /// raw mode meanwhile. `timeout` ends it with 124.
    pub async fn session(
        sb: &Sandbox,
        name: &str,
        options: TerminalOptions,
        input: bool,
        timeout: Option<Duration>,
    ) -> anyhow::Result<ExitCode> {
        let (cols, rows) = local_size();
        let mut term = sb
            .terminal(options.size(cols, rows))
            .await
            .map_err(on(name))?;
        // Signals are ours before the terminal goes raw, so that none of
        // them can end the program with the terminal left raw.
        let mut winch = signal(SignalKind::window_change())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut term_sig = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        let raw = if input { Some(RawMode::enter()?) } else { None };
        let mut keys = input.then(keystrokes);
        let writer = term.writer();
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut stdout = std::io::stdout();
        let code = loop {
            tokio::select! {
                chunk = term.next() => match chunk {
                    Some(Ok(bytes)) => {
                        stdout.write_all(&bytes)?;
                        stdout.flush()?;
                    }
                    Some(Err(e)) => return Err(on(name)(e)),
                    None => break super::exit_code(term.exit_code(), false),
                },
                typed = async { keys.as_mut()?.recv().await }, if keys.is_some() => match typed {
                    // A write after the end fails; the end arrives as output.
                    Some(bytes) => { let _ = writer.write(&bytes).await; }
                    None => keys = None,
                },
                _ = winch.recv() => {
                    let (cols, rows) = local_size();
                    let _ = writer.resize(cols, rows).await;
                }
                _ = int.recv() => break ExitCode::from(SIGINT_EXIT),
                _ = term_sig.recv() => break ExitCode::from(SIGTERM_EXIT),
                _ = hup.recv() => break ExitCode::from(SIGHUP_EXIT),
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => {
                    drop(raw);
                    errln!("stockade: the command was still running after its --timeout and was ended");
                    return Ok(ExitCode::from(super::TIMED_OUT));
                }
            }
        };
        drop(raw);
        Ok(code)
    }
}

#[derive(Args)]
#[command(after_help = "Examples:
  stockade ps demo                     # background processes (ended ones stay an hour)
  stockade ps demo --json | jq -r '.processes[].processId'
  stockade ps demo PROCESS_ID          # one, with the output it captured

Start background processes with `stockade exec -d SANDBOX -- CMD`.")]
pub struct PsArgs {
    /// Sandbox id or name.
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// Show this process, with its output so far.
    #[arg(value_name = "PID")]
    process: Option<String>,
}

fn status_word(s: ProcessStatus) -> &'static str {
    match s {
        ProcessStatus::Running => "running",
        ProcessStatus::Exited => "exited",
        ProcessStatus::Killed => "killed",
        ProcessStatus::TimedOut => "timed out",
    }
}

/// A command line as one string, words with blanks quoted.
fn command_line(argv: &[String]) -> String {
    let argv = match argv {
        [sh, c, line] if sh == "/bin/sh" && c == "-c" => return line.clone(),
        argv => argv,
    };
    argv.iter()
        .map(|w| {
            if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                format!("'{}'", w.replace('\'', r"'\''"))
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn process_row(p: &ProcessResponse) -> Vec<String> {
    vec![
        p.process_id.clone(),
        status_word(p.status).to_owned(),
        p.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into()),
        p.started_at.format("%Y-%m-%d %H:%M:%S").to_string(),
        output::run_time(Duration::from_millis(p.duration_ms)),
        command_line(&p.command),
    ]
}

const PROCESS_HEADER: [&str; 6] = ["PID", "STATUS", "EXIT", "STARTED", "TIME", "COMMAND"];

pub async fn ps(ctx: &Ctx, a: PsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let sb = cli::live_sandbox(&client, &a.sandbox).await?;
    let on = on(&a.sandbox);
    if let Some(pid) = a.process {
        let p = sb
            .process(&pid)
            .await
            .map_err(|e| process_error(e, &pid, sb.name()))?;
        let p = p.info();
        if ctx.json {
            output::json(p)?;
            return Ok(ExitCode::SUCCESS);
        }
        output::table(&PROCESS_HEADER, &[process_row(p)])?;
        if let Some(m) = &p.message {
            outln!("note: {}", output::cli_words(m, Some(sb.name())))?;
        }
        for (name, text) in [("stdout", &p.stdout), ("stderr", &p.stderr)] {
            if let Some(text) = text.as_deref().filter(|t| !t.is_empty()) {
                outln!("--- {name}")?;
                output::write_stdout(format_args!("{text}"))?;
                if !text.ends_with('\n') {
                    outln!()?;
                }
            }
        }
        if p.truncated {
            outln!("(output beyond the server's limit was left out)")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let list = sb.processes().await.map_err(&on)?;
    let infos: Vec<&ProcessResponse> = list.iter().map(|p| p.info()).collect();
    if ctx.json {
        output::json(&serde_json::json!({ "processes": infos }))?;
    } else if infos.is_empty() {
        outln!(
            "No background processes in {0}. Start one with `stockade exec -d {0} -- CMD`.",
            sb.name()
        )?;
    } else {
        let rows: Vec<Vec<String>> = infos.iter().map(|p| process_row(p)).collect();
        output::table(&PROCESS_HEADER, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A process lookup that failed, in CLI words.
fn process_error(e: stockade_sdk::Error, pid: &str, sandbox: &str) -> anyhow::Error {
    // A malformed id (400) is as absent as an unknown one.
    if e.is_not_found() || e.status() == Some(400) {
        return CliError::new(
            "not_found",
            format!(
                "no background process `{pid}` in sandbox `{sandbox}` — `stockade ps {sandbox}` lists them"
            ),
        )
        .into();
    }
    output::sdk_error(&e, Some(sandbox)).into()
}

#[derive(Args)]
#[command(after_help = "Examples:
  stockade kill demo PROCESS_ID
  stockade kill demo $(stockade ps demo --json | jq -r '.processes[] | select(.status == \"running\") | .processId')

The process and its children get SIGKILL; one that ended already is shown as it is.")]
pub struct KillArgs {
    /// Sandbox id or name.
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// Process ids (from `stockade exec -d` or `stockade ps`).
    #[arg(required = true, value_name = "PID")]
    processes: Vec<String>,
}

pub async fn kill(ctx: &Ctx, a: KillArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let sb = cli::live_sandbox(&client, &a.sandbox).await?;
    let mut batch = Batch::new(ctx.json);
    for pid in &a.processes {
        let outcome = async {
            let mut p = sb
                .process(pid)
                .await
                .map_err(|e| process_error(e, pid, sb.name()))?;
            let was_running = p.is_running();
            p.kill()
                .await
                .map_err(|e| process_error(e, pid, sb.name()))?;
            Ok::<_, anyhow::Error>((p.info().clone(), was_running))
        }
        .await;
        match outcome {
            Ok((info, was_running)) => {
                let line = match (was_running, info.exit_code) {
                    (true, _) => format!("{pid}: killed"),
                    (false, Some(code)) => {
                        format!(
                            "{pid}: had ended already ({}, exit code {code})",
                            status_word(info.status)
                        )
                    }
                    (false, None) => {
                        format!("{pid}: had ended already ({})", status_word(info.status))
                    }
                };
                batch.ok(serde_json::to_value(&info)?, &line)?;
            }
            Err(e) => batch.failed(pid, e)?,
        }
    }
    batch.finish()
}

/// The command's exit code as this process's: the low 8 bits, as a shell
/// sees them; 124 for a timeout; 1 when unknown.
fn exit_code(code: Option<i64>, timed_out: bool) -> ExitCode {
    if timed_out {
        return ExitCode::from(TIMED_OUT);
    }
    match code {
        Some(c) => ExitCode::from((c & 0xff) as u8),
        None => ExitCode::FAILURE,
    }
}

#[derive(Args)]
#[command(after_help = "Examples:
  stockade logs demo                 # everything kept so far (up to 10000 lines)
  stockade logs demo --tail 20
  stockade logs -f demo              # follow until the sandbox stops (Ctrl-C to leave)
  stockade logs -f --json demo | jq -r .text

The main process's stdout goes to stdout, its stderr to stderr. With -f a
dropped connection resumes after the last line shown.")]
pub struct LogsArgs {
    /// Sandbox id or name.
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// Follow: keep printing new lines until the sandbox stops.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Lines of history to show first (0-10000, or `all`).
    #[arg(long, short = 'n', default_value = "all")]
    tail: String,
    /// Prefix each line with its time (RFC 3339).
    #[arg(long, short = 't')]
    timestamps: bool,
}

/// The most lines the API returns at once.
const MAX_TAIL: usize = 10_000;

fn parse_tail(s: &str) -> Result<usize, CliError> {
    if s == "all" {
        return Ok(MAX_TAIL);
    }
    s.parse::<usize>()
        .ok()
        .filter(|n| *n <= MAX_TAIL)
        .ok_or_else(|| {
            CliError::invalid(format!(
                "--tail takes a number from 0 to {MAX_TAIL} or `all`, got '{s}'"
            ))
        })
}

fn print_line(line: &stockade_sdk::api::LogLineResponse, timestamps: bool) -> std::io::Result<()> {
    let text = if timestamps {
        format!("{} {}\n", line.timestamp.to_rfc3339(), line.text)
    } else {
        format!("{}\n", line.text)
    };
    if line.stream == "stderr" {
        let mut err = std::io::stderr();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
        Ok(())
    } else {
        let mut out = std::io::stdout();
        out.write_all(text.as_bytes())?;
        out.flush()
    }
}

pub async fn logs(ctx: &Ctx, a: LogsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let tail = parse_tail(&a.tail)?;
    let sb = cli::live_sandbox(&client, &a.sandbox).await?;
    let on = on(&a.sandbox);
    if !a.follow {
        let logs = sb.logs(tail).await.map_err(&on)?;
        if ctx.json {
            output::json(&logs)?;
        } else {
            for line in &logs.lines {
                print_line(line, a.timestamps)?;
            }
            if logs.truncated {
                errln!("(older lines left out: the answer was too large)");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut lines = sb
        .follow_logs(FollowLogs::new().tail(tail))
        .await
        .map_err(&on)?;
    while let Some(line) = lines.next().await {
        let line = line.map_err(&on)?;
        if ctx.json {
            outln!("{}", serde_json::to_string(&line)?)?;
        } else {
            print_line(&line, a.timestamps)?;
        }
    }
    if let (Some(reason), false) = (lines.end_reason(), ctx.json) {
        errln!("({reason})");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_and_exit_codes() {
        assert_eq!(parse_tail("all").unwrap(), MAX_TAIL);
        assert_eq!(parse_tail("5").unwrap(), 5);
        assert!(parse_tail("10001").is_err());
        assert!(parse_tail("-1").is_err());
        assert_eq!(exit_code(Some(3), false), ExitCode::from(3));
        assert_eq!(exit_code(Some(256 + 7), false), ExitCode::from(7));
        assert_eq!(exit_code(None, true), ExitCode::from(124));
        assert_eq!(exit_code(None, false), ExitCode::FAILURE);
    }

    #[test]
    fn terminal_commands_quote_words_and_export_variables() {
        let argv: Vec<String> = ["python3", "-c", "print('a b')", ""]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(
            terminal_command(&argv, None, &[]).unwrap(),
            r#"exec python3 -c 'print('\''a b'\'')' ''"#
        );
        let env = vec![("A_1".to_owned(), "x y".to_owned())];
        assert_eq!(
            terminal_command(&[], Some("cd app && make"), &env).unwrap(),
            "export A_1='x y'; cd app && make"
        );
        let bad = vec![("1A".to_owned(), "x".to_owned())];
        assert!(terminal_command(&argv, None, &bad).is_err());
        let bad = vec![("A;rm".to_owned(), "x".to_owned())];
        assert!(terminal_command(&argv, None, &bad).is_err());
        assert_eq!(quote_if_needed("a$b"), "'a$b'");
        assert_eq!(quote_if_needed("/usr/bin/env"), "/usr/bin/env");
    }
}
