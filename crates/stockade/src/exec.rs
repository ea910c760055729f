//! `stockade exec` (output streamed live, the exit code passed through,
//! stdin forwarded) and `stockade logs` (the tail, or following).

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use clap::Args;
use stockade_sdk::{Command, CommandEvent, FollowLogs, Sandbox, StreamExt};

use crate::cli::{key_value, parse_duration, Ctx};
use crate::output;

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

The command's exit code becomes stockade's (124 when --timeout killed it).")]
pub struct ExecArgs {
    /// Sandbox id or name.
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
}

pub async fn exec(ctx: &Ctx, a: ExecArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let mut cmd = match (a.shell, a.cmd.is_empty()) {
        (Some(line), _) => Command::shell(line),
        (None, false) => Command::from(a.cmd),
        (None, true) => {
            return Err(anyhow!(
                "give a command: `stockade exec SANDBOX -- CMD ARGS…` or `--shell 'a | b'`"
            ))
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
            anyhow!(
                "stdin is not UTF-8 text, which is all exec can forward; copy binary input \
                 into the sandbox with `stockade cp` and read it from there (or pass -n)"
            )
        })?;
        cmd = cmd.stdin(text);
    }
    let sb = Sandbox::find(&client, &a.sandbox).await?;

    if ctx.json {
        let out = sb.run_command(cmd).await?;
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

    let mut events = sb.run_command_stream(cmd).await?;
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    while let Some(event) = events.next().await {
        match event? {
            CommandEvent::Stdout(text) => {
                stdout.write_all(text.as_bytes())?;
                stdout.flush()?;
            }
            CommandEvent::Stderr(text) => {
                stderr.write_all(text.as_bytes())?;
                stderr.flush()?;
            }
            CommandEvent::Exit(exit) => {
                if let Some(m) = &exit.message {
                    eprintln!("stockade: {m}");
                }
                return Ok(exit_code(exit.exit_code, exit.timed_out));
            }
        }
    }
    Err(anyhow!(
        "the connection ended before the command did; its exit code is unknown"
    ))
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

fn parse_tail(s: &str) -> anyhow::Result<usize> {
    if s == "all" {
        return Ok(MAX_TAIL);
    }
    s.parse::<usize>()
        .ok()
        .filter(|n| *n <= MAX_TAIL)
        .ok_or_else(|| anyhow!("--tail takes a number from 0 to {MAX_TAIL} or `all`, got '{s}'"))
}

fn print_line(line: &stockade_sdk::api::LogLineResponse, timestamps: bool) -> std::io::Result<()> {
    let text = if timestamps {
        format!("{} {}\n", line.timestamp.to_rfc3339(), line.text)
    } else {
        format!("{}\n", line.text)
    };
    if line.stream == "stderr" {
        let mut err = std::io::stderr();
        err.write_all(text.as_bytes())?;
        err.flush()
    } else {
        let mut out = std::io::stdout();
        out.write_all(text.as_bytes())?;
        out.flush()
    }
}

pub async fn logs(ctx: &Ctx, a: LogsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let tail = parse_tail(&a.tail)?;
    let sb = Sandbox::find(&client, &a.sandbox).await?;
    if !a.follow {
        let logs = sb.logs(tail).await?;
        if ctx.json {
            output::json(&logs)?;
        } else {
            for line in &logs.lines {
                print_line(line, a.timestamps)?;
            }
            if logs.truncated {
                eprintln!("(older lines left out: the answer was too large)");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut lines = sb.follow_logs(FollowLogs::new().tail(tail)).await?;
    while let Some(line) = lines.next().await {
        let line = line?;
        if ctx.json {
            println!("{}", serde_json::to_string(&line)?);
        } else {
            print_line(&line, a.timestamps)?;
        }
    }
    if let (Some(reason), false) = (lines.end_reason(), ctx.json) {
        eprintln!("({reason})");
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
