//! `stockade exec` (output streamed live in the order it comes, the exit
//! code passed through, stdin forwarded; `-d` in the background), `ps` and
//! `kill` for background processes, and `stockade logs` (the tail, or
//! following).

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use stockade_sdk::api::{ProcessResponse, ProcessStatus};
use stockade_sdk::{Command, CommandEvent, FollowLogs, StreamExt};

use crate::cli::{self, alive, key_value, on, parse_duration, running, Batch, Ctx};
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

The command's exit code becomes stockade's (124 when --timeout killed it).
Its stdout and stderr are written as each chunk arrives, so on one terminal
they interleave as the program wrote them.")]
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
    #[arg(long, short = 'n')]
    no_stdin: bool,
    /// Run in the background: print the process id and return at once
    /// (see `stockade ps` and `stockade kill`).
    #[arg(long, short = 'd')]
    detach: bool,
}

pub async fn exec(ctx: &Ctx, a: ExecArgs) -> anyhow::Result<ExitCode> {
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
    if !a.no_stdin && !std::io::stdin().is_terminal() {
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
    let sb = cli::sandbox(&client, &a.sandbox).await?;
    running(&sb)?;
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
    let sb = cli::sandbox(&client, &a.sandbox).await?;
    alive(&sb)?;
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
    let sb = cli::sandbox(&client, &a.sandbox).await?;
    alive(&sb)?;
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
    let sb = cli::sandbox(&client, &a.sandbox).await?;
    alive(&sb)?;
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
}
