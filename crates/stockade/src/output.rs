//! How the CLI shows things: tables for people, JSON for scripts, spinners
//! and byte bars on slow calls, durations and counts as people write them,
//! and errors as one sentence in CLI words (JSON with a stable code under
//! `--json`). Every write to stdout is fallible, so that a closed pipe ends
//! the program quietly instead of panicking.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use stockade_sdk::api::SandboxResponse;
use stockade_sdk::Error;

/// `println!` that returns the write's `io::Result` instead of panicking.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that never panics (nothing is left to tell when stderr is gone).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes to stdout and flushes, so that output is never held back and a
/// closed pipe shows at once.
pub fn write_stdout(args: fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)?;
    out.flush()
}

/// Writes to stderr, ignoring failures.
pub fn write_stderr(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args);
    let _ = err.flush();
}

/// The exit code after stdout was closed by its reader: 128 + SIGPIPE, as a
/// shell reports a program that SIGPIPE ended.
pub const CLOSED_PIPE_EXIT: u8 = 141;

/// Whether `e` is (caused by) a write into a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Prints `value` as pretty JSON.
pub fn json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    outln!("{text}")?;
    Ok(())
}

/// Prints `value` as JSON when `json` was asked for, else the sentence
/// `words` makes.
pub fn json_or<T: Serialize>(
    json: bool,
    value: &T,
    words: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if json {
        self::json(value)
    } else {
        outln!("{}", words())?;
        Ok(())
    }
}

/// A spinner on stderr while `message` is in progress; invisible when
/// stderr is not a terminal or JSON output was asked for.
pub fn spinner(message: &str, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(message.to_owned());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// Awaits `work` behind a [`spinner`] showing `message`, cleared once it ends.
pub async fn spinning<T>(
    message: &str,
    quiet: bool,
    work: impl std::future::Future<Output = T>,
) -> T {
    let pb = spinner(message, quiet);
    let out = work.await;
    pb.finish_and_clear();
    out
}

/// A progress bar of bytes on stderr (a byte counter when `total` is 0,
/// i.e. unknown); hidden for JSON output, for known totals under 1 MiB, and
/// when stderr is not a terminal.
pub fn bytes_bar(total: u64, message: &str, quiet: bool) -> ProgressBar {
    if quiet || (total > 0 && total < 1024 * 1024) {
        return ProgressBar::hidden();
    }
    let (pb, template) = if total == 0 {
        (
            ProgressBar::new_spinner(),
            "{spinner} {msg} {bytes} ({binary_bytes_per_sec})",
        )
    } else {
        (
            ProgressBar::new(total),
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({binary_bytes_per_sec}, {eta})",
        )
    };
    pb.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(message.to_owned());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// Rows under a header, each column as wide as its widest cell, two spaces
/// between columns, no trailing blanks.
pub fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (c, w) in cells.zip(&widths) {
            text.push_str(c);
            let pad = w.saturating_sub(c.chars().count()) + 2;
            text.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// Prints rows under a header, columns aligned.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    write_stdout(format_args!("{}", render_table(header, rows)))
}

/// `1 sandbox`, `2 sandboxes`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A duration as people write it: `5s`, `1m30s`, `2h`, `1d2h`; whole
/// seconds (a duration under a second shows as `0s`).
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs() + u64::from(d.subsec_millis() >= 500);
    if secs == 0 {
        return "0s".into();
    }
    let parts = [
        (secs / 86_400, "d"),
        (secs / 3600 % 24, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
    ];
    parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect()
}

/// A span as [`duration`] writes it, rounded to the hour past a day and to
/// the minute past an hour (`29d23h59m58s` is `30d`), for tables where the
/// seconds of a long span are noise. Negative spans are `0s`.
pub fn rough_duration(d: chrono::TimeDelta) -> String {
    let secs = d.num_seconds().max(0) as u64;
    let unit = match secs {
        s if s >= 86_400 => 3600,
        s if s >= 3600 => 60,
        _ => 1,
    };
    let rounded = (secs + unit / 2) / unit * unit;
    duration(Duration::from_secs(rounded))
}

/// How long ago something was, `elapsed` after it: `just now`, `5m ago`,
/// `3d2h ago`.
pub fn ago(elapsed: chrono::TimeDelta) -> String {
    if elapsed.num_seconds() < 1 {
        return "just now".into();
    }
    format!("{} ago", rough_duration(elapsed))
}

/// Like [`duration`], with sub-minute precision for short runs: `350ms`,
/// `1.5s`, `42s`, `1m30s`.
pub fn run_time(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 10_000 {
        let s = format!("{:.1}", d.as_secs_f64());
        format!("{}s", s.trim_end_matches(".0"))
    } else {
        duration(d)
    }
}

/// A timeout given in (possibly fractional) minutes, as a duration.
pub fn minutes(m: f64) -> Duration {
    Duration::from_secs_f64((m * 60.0).max(0.0))
}

/// A sandbox's status as people read it: a paused one says for how long
/// (`PAUSED for 3m`).
pub fn status_text(s: &SandboxResponse) -> String {
    match s.paused_at {
        Some(at) if s.status == stockade_sdk::api::SandboxStatus::Paused => {
            format!(
                "{} for {}",
                s.status,
                rough_duration(chrono::Utc::now() - at)
            )
        }
        _ => s.status.to_string(),
    }
}

/// A sandbox's lifecycle in words: what the end of its session does,
/// whether it wakes up on use, its idle timeout.
pub fn lifecycle_text(l: &stockade_sdk::api::LifecycleView) -> String {
    let idle = if l.idle_timeout_minutes > 0.0 {
        duration(minutes(l.idle_timeout_minutes))
    } else {
        "none".to_owned()
    };
    format!(
        "on timeout: {}; auto-resume: {}; idle timeout: {idle}",
        l.on_timeout,
        if l.auto_resume { "yes" } else { "no" }
    )
}

/// What the end of a session does to a sandbox, as the `timeout` line of
/// its details says it.
fn then_text(on_timeout: &str) -> &'static str {
    match on_timeout {
        "pause" => "then paused",
        "stop" => "then stopped",
        _ => "then terminated",
    }
}

pub fn sandbox_row(s: &SandboxResponse) -> Vec<String> {
    vec![
        s.id.clone(),
        s.name.clone(),
        status_text(s),
        s.docker_image.clone(),
        format!(
            "{} CPU / {} GB",
            trim_num(s.cpu_cores),
            trim_num(s.memory_gb)
        ),
        s.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
    ]
}

pub const SANDBOX_HEADER: [&str; 6] = ["ID", "NAME", "STATUS", "IMAGE", "RESOURCES", "CREATED"];

fn bytes(n: u64) -> String {
    indicatif::DecimalBytes(n).to_string()
}

/// Details of one sandbox, one fact a line.
pub fn sandbox_details(s: &SandboxResponse) -> std::io::Result<()> {
    let mut facts: Vec<(&str, String)> = vec![
        ("id", s.id.clone()),
        ("name", s.name.clone()),
        ("status", status_text(s)),
        ("image", s.docker_image.clone()),
        (
            "cpu",
            format!(
                "{} {}",
                trim_num(s.cpu_cores),
                if s.cpu_cores == 1.0 { "core" } else { "cores" }
            ),
        ),
        ("memory", format!("{} GB", trim_num(s.memory_gb))),
        ("disk", format!("{} GB", s.disk_size_gb)),
        (
            "network",
            match &s.network_policy {
                serde_json::Value::String(p) => p.clone(),
                rules => rules.to_string(),
            },
        ),
        ("server", s.server.clone()),
        ("created", s.created_at.to_rfc3339()),
    ];
    if let Some(r) = &s.status_reason {
        facts.push(("reason", r.clone()));
    }
    if let Some(at) = s.paused_at {
        facts.push(("paused", at.to_rfc3339()));
    }
    if let Some(t) = s.terminated_at {
        facts.push(("ended", t.to_rfc3339()));
    }
    if let Some(u) = s.uptime_seconds {
        facts.push(("uptime", duration(Duration::from_secs(u.max(0) as u64))));
    }
    if let Some(u) = &s.usage {
        let cpu = u
            .cpu_percent
            .map(|p| format!("CPU {}%", trim_num((p * 10.0).round() / 10.0)))
            .unwrap_or_else(|| "CPU ?".into());
        facts.push((
            "usage",
            format!(
                "{cpu}, memory {}, {}, network {} in / {} out",
                u.memory,
                count(u.pids, "process", "processes"),
                bytes(u.network_rx_bytes),
                bytes(u.network_tx_bytes)
            ),
        ));
    }
    if s.timeout_minutes > 0.0 {
        let then = then_text(&s.lifecycle.on_timeout);
        let mut text = format!("{} ({then})", duration(minutes(s.timeout_minutes)));
        if let Some(at) = s.session_expires_at {
            let left = (at - chrono::Utc::now()).to_std().unwrap_or_default();
            text = format!(
                "{}, ends in {} ({then})",
                duration(minutes(s.timeout_minutes)),
                duration(left)
            );
        }
        facts.push(("timeout", text));
    }
    facts.push(("lifecycle", lifecycle_text(&s.lifecycle)));
    if !s.labels.is_empty() {
        facts.push(("labels", s.labels.join(", ")));
    }
    if !s.tags.is_empty() {
        let tags: Vec<String> = s.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        facts.push(("tags", tags.join(", ")));
    }
    if !s.ports.is_empty() {
        let ports: Vec<String> = s.ports.iter().map(u16::to_string).collect();
        facts.push(("ports", ports.join(", ")));
    }
    let vol = match &s.volume.size {
        Some(size) => format!("{} at {} ({size})", s.volume.name, s.volume.mount_path),
        None => format!("{} at {}", s.volume.name, s.volume.mount_path),
    };
    facts.push(("volume", vol));
    if let Some(w) = &s.volume.warning {
        facts.push(("warning", w.clone()));
    }
    let mut text = String::new();
    for (k, v) in facts {
        text.push_str(&format!("{k:<9} {v}\n"));
    }
    write_stdout(format_args!("{text}"))
}

pub fn trim_num(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

// ---------------------------------------------------------------------------
// Errors

/// An error as the CLI reports it: a stable machine-readable `code`, one
/// sentence in CLI words, and what to do about it.
///
/// Codes: the API's own (`not_found`, `conflict`, `validation_failed`,
/// `image_unavailable`, `forbidden`, `rate_limited`, …) where the server
/// said so (`sandbox_paused` among them), and the CLI's:
/// `sandbox_not_running`, `sandbox_terminated`, `start_command_exited`,
/// `ambiguous_name`, `invalid_argument`, `confirmation_needed` (`--yes`
/// missing), `unauthorized` (no token), `unreachable`, `bad_response`,
/// `connection_lost`, `io_error`, `usage` (bad flags), `cancelled`,
/// `failed` (anything else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub code: String,
    pub message: String,
    pub hint: Option<String>,
}

impl CliError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            hint: None,
        }
    }

    /// A bad flag or argument, found before any request.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_argument", message)
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Prints the error once, on stderr: `error: …` (and `hint: …`) for
    /// people, `{"error":{"code","message"}}` with `--json`. `target` names
    /// the item of a many-item command (`stockade rm a b`) that failed.
    pub fn print(&self, json: bool, target: Option<&str>) {
        if json {
            let mut error = serde_json::json!({ "code": self.code, "message": self.message });
            if let Some(t) = target {
                error["target"] = t.into();
            }
            errln!("{}", serde_json::json!({ "error": error }));
            return;
        }
        let prefix = target.map(|t| format!("{t}: ")).unwrap_or_default();
        errln!("{prefix}error: {}", self.message);
        if let Some(h) = &self.hint {
            errln!("{}hint: {h}", if target.is_some() { "  " } else { "" });
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// Any error of a command as the CLI reports it.
pub fn classify(e: &anyhow::Error) -> CliError {
    if let Some(c) = e.downcast_ref::<CliError>() {
        return c.clone();
    }
    if let Some(sdk) = e.downcast_ref::<Error>() {
        return sdk_error(sdk, None);
    }
    if e.chain().any(|c| c.is::<std::io::Error>()) {
        return CliError::new("io_error", format!("{e:#}"));
    }
    CliError::new("failed", format!("{e:#}"))
}

/// The candidate `word` is most likely a mistyping of: within two edits
/// (one for words of three letters or fewer), the closest first.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word: Vec<char> = word.chars().collect();
    let distance = |other: &str| {
        let other: Vec<char> = other.chars().collect();
        let mut row: Vec<usize> = (0..=other.len()).collect();
        for (i, a) in word.iter().enumerate() {
            let mut diagonal = row[0];
            row[0] = i + 1;
            for (j, b) in other.iter().enumerate() {
                let above = row[j + 1];
                row[j + 1] = (diagonal + usize::from(a != b))
                    .min(above + 1)
                    .min(row[j] + 1);
                diagonal = above;
            }
        }
        row[other.len()]
    };
    let allowed = if word.len() <= 3 { 1 } else { 2 };
    candidates
        .iter()
        .map(|c| (distance(c), *c))
        .filter(|(d, _)| (1..=allowed).contains(d))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// How a sandbox is named in messages.
fn quoted(name: &str) -> String {
    format!("`{name}`")
}

/// The sandbox cannot do this because it is not running.
pub fn not_running(name: &str, status: Option<&str>, reason: Option<&str>) -> CliError {
    let start = format!("run `stockade start {name}`");
    let message = match status {
        Some("STOPPED") => format!("sandbox {} is stopped — {start}", quoted(name)),
        Some("ERROR") => format!(
            "sandbox {} is in error{} — {start} to try again",
            quoted(name),
            reason.map(|r| format!(" ({r})")).unwrap_or_default()
        ),
        Some("PAUSED") => return paused(name),
        Some("PENDING" | "PROVISIONING") => format!(
            "sandbox {} is still being created — wait until `stockade get {name}` says RUNNING",
            quoted(name)
        ),
        _ => format!("sandbox {} is not running — {start}", quoted(name)),
    };
    CliError::new("sandbox_not_running", message)
}

/// The sandbox is paused and does not wake up on use: its processes are
/// frozen until it is resumed.
pub fn paused(name: &str) -> CliError {
    CliError::new(
        "sandbox_paused",
        format!(
            "sandbox {} is paused (its processes are frozen) — run `stockade resume {name}`",
            quoted(name)
        ),
    )
    .hint("a sandbox created with --auto-resume is resumed by the first command that uses it")
}

/// The sandbox is gone (its container, files and logs with it).
pub fn terminated(name: &str) -> CliError {
    CliError::new(
        "sandbox_terminated",
        format!(
            "sandbox {} is terminated (its container, files and logs are gone) — create a new one with `stockade create --name {name}`",
            quoted(name)
        ),
    )
}

/// API fields (or SDK parameters) and the CLI flags they are set with: a
/// field is named by its full path or by its first name.
const FIELD_FLAGS: &[(&str, &str)] = &[
    ("source.url", "--git/--tarball"),
    ("networkPolicy.allow", "--allow"),
    ("networkPolicy.deny", "--deny"),
    ("networkPolicy", "--allow/--deny"),
    ("lifecycle.onTimeout", "--on-timeout"),
    ("lifecycle.autoResume", "--auto-resume"),
    ("lifecycle.idleTimeoutMinutes", "--idle-timeout"),
    ("source.ref", "--ref"),
    ("source.snapshotId", "--from-snapshot"),
    ("source.uploadId", "--upload"),
    ("resources.vcpus", "--vcpus"),
    ("name", "--name"),
    ("dockerImage", "--image"),
    ("runtime", "--runtime"),
    ("startCommand", "--start-command"),
    ("cpuCores", "--cpu"),
    ("memoryGB", "--memory"),
    ("diskSizeGB", "--disk"),
    ("diskGB", "--disk"),
    ("sandboxes", "--sandboxes"),
    ("snapshots", "--snapshots"),
    ("snapshotGB", "--snapshot-gb"),
    ("uploads", "--uploads"),
    ("uploadGB", "--upload-gb"),
    ("volumes", "--volumes"),
    ("volumeGB", "--volume-gb"),
    ("networkAccess", "--no-network"),
    ("timeoutMinutes", "--timeout"),
    ("timeoutSeconds", "--timeout"),
    ("timeout", "--timeout"),
    ("environmentVars", "--env"),
    ("env", "--env"),
    ("labels", "--label"),
    ("tags", "--tag"),
    ("ports", "--port"),
    ("volumeMounts", "--mount"),
    ("sizeGB", "--size-gb"),
    ("persistent", "--ephemeral"),
    ("teamId", "--team"),
    ("cwd", "--cwd"),
    ("language", "--language"),
    ("contextId", "--context"),
    ("envVars", "--env"),
    ("code", "FILE"),
    ("shell", "--shell"),
    ("cmd", "CMD"),
    ("ttl", "--ttl"),
    ("expiresInSeconds", "--expires"),
];

/// The CLI flag an API field (or SDK parameter) is set with.
fn flag_for(field: &str) -> Option<&'static str> {
    let head = field.split(['.', '[']).next().unwrap_or(field);
    // `networkPolicy.allow[2]` is set by the flag of `networkPolicy.allow`.
    let list = field.split_once('[').map_or(field, |(list, _)| list);
    FIELD_FLAGS
        .iter()
        .find(|(name, _)| *name == field || *name == list)
        .or_else(|| FIELD_FLAGS.iter().find(|(name, _)| *name == head))
        .map(|(_, flag)| *flag)
}

/// `field: message` with the field as the flag that sets it.
fn field_line(field: &str, message: &str) -> String {
    match flag_for(field) {
        Some(flag) => format!("{flag}: {message}"),
        None => format!("{field}: {message}"),
    }
}

/// An API path in a server message, as the `stockade` command that does
/// the same (`POST /api/v1/sandbox/ID/start` → `stockade start NAME`).
/// `name` is the sandbox the command was about; without one, the id in
/// the path stands for it.
fn command_for(method: &str, path: &str, name: Option<&str>) -> String {
    // `/api/v1/sandbox/ID/TAIL`, or `…/TAIL` with the sandbox left out.
    let (rest, (id, tail)) = match path.strip_prefix("…/") {
        Some(tail) => (tail, ("", tail)),
        None => {
            let rest = path
                .split_once("/sandbox/")
                .map(|(_, r)| r)
                .unwrap_or_default();
            (rest, rest.split_once('/').unwrap_or((rest, "")))
        }
    };
    let id_in_path = (!id.is_empty() && !id.contains('{')).then_some(id);
    let sb = name.or(id_in_path).unwrap_or("SANDBOX");
    let cmd = match (method, tail) {
        _ if path.ends_with("/health") => "stockade health".to_owned(),
        _ if path.contains("/volumes") => "stockade volumes".to_owned(),
        _ if rest.is_empty() => "stockade --help".to_owned(),
        ("POST", "start") => format!("stockade start {sb}"),
        ("POST", "stop") => format!("stockade stop {sb}"),
        ("POST", "pause") => format!("stockade pause {sb}"),
        ("POST", "resume") => format!("stockade resume {sb}"),
        ("DELETE", "") => format!("stockade rm {sb}"),
        ("GET", "") => format!("stockade get {sb}"),
        ("PATCH", "") => format!("stockade update {sb}"),
        (_, "logs") => format!("stockade logs {sb}"),
        ("POST", "exec") => format!("stockade exec {sb} -- CMD"),
        ("POST", "code") => format!("stockade run-code {sb} FILE"),
        (_, t) if t.starts_with("code/contexts") => format!("stockade code contexts {sb}"),
        ("POST", "ports") => format!("stockade ports {sb} expose PORT"),
        (_, "auth-token") => format!("stockade token {sb}"),
        ("POST", "fork") => format!("stockade fork {sb}"),
        ("POST", "snapshots") => format!("stockade snapshot create {sb}"),
        (_, t) if t.starts_with("processes") => format!("stockade kill {sb} PID"),
        (_, t) if t.starts_with("files") => format!("stockade cp … {sb}:PATH"),
        _ => "stockade --help".to_owned(),
    };
    format!("`{cmd}`")
}

/// A server message in CLI words: API paths become commands, API field and
/// parameter names become flags.
pub fn cli_words(message: &str, name: Option<&str>) -> String {
    let mut out = String::new();
    let mut at = 0;
    while let Some(tail) = message.get(at..).filter(|t| !t.is_empty()) {
        // `METHOD /api/v1/…` or `METHOD …/…`
        let call = ["GET", "POST", "PUT", "PATCH", "DELETE"]
            .into_iter()
            .find_map(|m| {
                let path = tail.strip_prefix(m)?.strip_prefix(' ')?;
                (path.starts_with("/api/") || path.starts_with('…')).then_some((m, path))
            });
        match call {
            Some((method, after)) => {
                let end = after
                    .find(|c: char| c.is_whitespace() || matches!(c, ')' | ',' | ';'))
                    .unwrap_or(after.len());
                let path = after[..end].trim_end_matches('.');
                out.push_str(&command_for(method, path, name));
                at += tail.len() - after.len() + path.len();
            }
            None => {
                let c = tail.chars().next().unwrap_or(' ');
                out.push(c);
                at += c.len_utf8();
            }
        }
    }
    for (api, cli) in [
        ("(timeoutSeconds)", "(--timeout)"),
        ("networkAccess: false", "--no-network"),
        ("Idempotency-Key", "--idempotency-key"),
        ("preserveVolume", "--keep-volume"),
        ("sync=true", "--sync"),
        ("lifecycle.onTimeout", "--on-timeout"),
        ("lifecycle.autoResume", "--auto-resume"),
        ("lifecycle.idleTimeoutMinutes", "--idle-timeout"),
    ] {
        out = out.replace(api, cli);
    }
    out
}

/// What to do when the server refused to fetch from an internal address
/// on the caller's behalf (`… resolves to the internal address 10.0.0.5;
/// this server does not connect to internal networks …`): only the
/// server's administrator can allow it, with `--allow-internal-addresses`.
fn internal_address_hint(message: &str) -> Option<String> {
    if !message.contains("does not connect to internal networks") {
        return None;
    }
    let range = message
        .split_once("internal address ")
        .and_then(|(_, rest)| rest.split([';', ' ', ',']).next())
        .and_then(|addr| addr.parse::<std::net::IpAddr>().ok())
        .map(|ip| match ip {
            std::net::IpAddr::V4(_) => format!("{ip}/32"),
            std::net::IpAddr::V6(_) => format!("{ip}/128"),
        })
        .unwrap_or_else(|| "CIDR".to_owned());
    Some(format!(
        "if the server should reach it, its administrator can allow the range: \
         `stockade server --allow-internal-addresses {range}` (or \
         STOCKADE_ALLOW_INTERNAL_ADDRESSES={range})"
    ))
}

/// The image a failed create named (`image 'x' is not available …`).
fn image_in(message: &str) -> Option<&str> {
    let start = message.find("image '")? + "image '".len();
    let len = message[start..].find('\'')?;
    Some(&message[start..start + len])
}

/// An SDK error as the CLI reports it; `sandbox` is the sandbox the
/// command was about, when there was one.
pub fn sdk_error(e: &Error, sandbox: Option<&str>) -> CliError {
    match e {
        Error::Api {
            status,
            code,
            message,
            details,
        } => {
            let lower = message.to_ascii_lowercase();
            if let (Some(name), 409 | 503) = (sandbox, status) {
                if code == "sandbox_terminated" || lower.contains("is terminated") {
                    return terminated(name);
                }
                if code == "sandbox_paused" {
                    return paused(name);
                }
                // A resume that found the processes gone says what became
                // of the sandbox: that message is kept.
                let resume_failed = lower.contains("could not be resumed");
                if !resume_failed
                    && (code == "sandbox_not_running" || lower.contains("not running"))
                {
                    let status = ["STOPPED", "ERROR", "PENDING", "PROVISIONING"]
                        .into_iter()
                        .find(|s| message.contains(&format!("status {s}")));
                    return not_running(name, status, None);
                }
            }
            if *status == 401 {
                // The server does not say which: a revoked or expired token
                // looks like one it never made.
                let message = if message == "Invalid API token" {
                    "the API token was refused: it is unknown, revoked or expired".to_owned()
                } else {
                    message.clone()
                };
                return CliError::new(code.as_str(), message)
                .hint("pass --token or set STOCKADE_TOKEN to a valid API token (`stockade token create` makes one)");
            }
            if *status == 403 && lower.contains("disabled") {
                return CliError::new(code.as_str(), cli_words(message, sandbox))
                    .hint("ask an administrator to enable the account (`stockade account enable ACCOUNT`)");
            }
            if let Some(fields) = details.as_ref().and_then(|d| d["fields"].as_array()) {
                let lines: Vec<String> = fields
                    .iter()
                    .map(|f| {
                        field_line(
                            f["field"].as_str().unwrap_or("?"),
                            f["message"].as_str().unwrap_or("?"),
                        )
                    })
                    .collect();
                if !lines.is_empty() {
                    let message = if lines.len() == 1 {
                        lines[0].clone()
                    } else {
                        format!("invalid request:\n  {}", lines.join("\n  "))
                    };
                    let out = CliError::new(code.as_str(), message);
                    return match internal_address_hint(&out.message) {
                        Some(hint) => out.hint(hint),
                        None => out,
                    };
                }
            }
            let out = CliError::new(code.as_str(), cli_words(message, sandbox));
            if let Some(hint) = internal_address_hint(message) {
                return out.hint(hint);
            }
            match code.as_str() {
                "image_unavailable" => {
                    let image = image_in(message).unwrap_or("IMAGE");
                    out.hint(format!(
                        "choose another image with --image IMAGE (or --runtime); the server's default \
                         comes from STOCKADE_DEFAULT_IMAGE (--default-image); or pull the image on the \
                         server's Docker host first: `docker pull {image}`"
                    ))
                }
                "rate_limited" => out.hint("wait a moment and try again"),
                "quota_exceeded" => out.hint(
                    "stop or remove sandboxes you no longer need (`stockade ls`), or ask an \
                     administrator to raise the quota (`stockade account quota`)",
                ),
                "insufficient_capacity" => out.hint(
                    "stop sandboxes you do not need (`stockade stop`), ask for fewer CPUs or \
                     less memory (--cpu, --memory), or try again later",
                ),
                "docker_unavailable" => out
                    .hint("`stockade health` shows what the server knows about its Docker engine"),
                _ => out,
            }
        }
        Error::Transport { url, reason } => CliError::new(
            "unreachable",
            format!("could not reach the Stockade server at {url} ({reason})"),
        )
        .hint(
            "is it running? start it with `stockade server`, or point --url / STOCKADE_URL at it",
        ),
        Error::InvalidParams { field, message } => CliError::invalid(field_line(field, message)),
        Error::Cancelled => CliError::new("cancelled", "cancelled"),
        Error::Config(m) => CliError::invalid(m.clone()),
        Error::Closed(m) => CliError::new("connection_lost", m.clone()),
        Error::BuildFailed {
            template_id,
            build_id,
            reason,
            failed_step,
        } => {
            let at = failed_step
                .map(|s| format!(" at step {s}"))
                .unwrap_or_default();
            CliError::new(
                "build_failed",
                format!("the build {build_id} of template {template_id} failed{at}: {reason}"),
            )
            .hint(format!(
                "`stockade template logs {template_id} --build {build_id}` prints its whole log"
            ))
        }
        Error::Decode(m) => CliError::new(
            "bad_response",
            format!("unexpected response from the server: {m}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_durations_and_counts() {
        assert_eq!(trim_num(2.0), "2");
        assert_eq!(trim_num(0.5), "0.5");
        let s = Duration::from_secs;
        assert_eq!(duration(s(5)), "5s");
        assert_eq!(duration(s(90)), "1m30s");
        assert_eq!(duration(s(7200)), "2h");
        assert_eq!(duration(s(3725)), "1h2m5s");
        assert_eq!(duration(s(90061)), "1d1h1m1s");
        assert_eq!(duration(Duration::ZERO), "0s");
        assert_eq!(duration(minutes(5.0 / 60.0)), "5s", "never 0.083 min");
        assert_eq!(duration(minutes(1.5)), "1m30s");
        assert_eq!(run_time(Duration::from_millis(350)), "350ms");
        assert_eq!(run_time(Duration::from_millis(1500)), "1.5s");
        assert_eq!(run_time(Duration::from_millis(2000)), "2s");
        assert_eq!(run_time(Duration::from_secs(95)), "1m35s");
        assert_eq!(count(1, "sandbox", "sandboxes"), "1 sandbox");
        assert_eq!(count(2, "sandbox", "sandboxes"), "2 sandboxes");
        assert_eq!(count(0, "entry", "entries"), "0 entries");
        let t = chrono::TimeDelta::seconds;
        assert_eq!(rough_duration(t(30 * 86_400 - 2)), "30d");
        assert_eq!(rough_duration(t(3 * 86_400 + 7300)), "3d2h");
        assert_eq!(rough_duration(t(3725)), "1h2m");
        assert_eq!(rough_duration(t(125)), "2m5s");
        assert_eq!(rough_duration(t(-5)), "0s");
        assert_eq!(ago(t(0)), "just now");
        assert_eq!(ago(t(90)), "1m30s ago");
    }

    #[test]
    fn tables_are_aligned() {
        let t = render_table(
            &["ID", "NAME", "STATUS"],
            &[
                vec!["a1".into(), "ünïcödé".into(), "RUNNING".into()],
                vec!["b22222".into(), "x".into(), "".into()],
            ],
        );
        assert_eq!(
            t,
            "ID      NAME     STATUS\na1      ünïcödé  RUNNING\nb22222  x\n"
        );
    }

    fn api(status: u16, code: &str, message: &str) -> Error {
        Error::Api {
            status,
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }

    /// What the CLI says of an API error with `status`, `code` and
    /// `message`, about `target`.
    fn said(status: u16, code: &str, message: &str, target: Option<&str>) -> CliError {
        sdk_error(&api(status, code, message), target)
    }

    #[test]
    fn api_errors_speak_cli() {
        let stopped = "sandbox is not running (status STOPPED): start it with POST /api/v1/sandbox/ab12cd34ef56/start";
        let e = said(409, "conflict", stopped, Some("nb2"));
        assert_eq!(e.code, "sandbox_not_running");
        let m = e.message;
        assert_eq!(m, "sandbox `nb2` is stopped — run `stockade start nb2`");

        let terminated = "Sandbox ab12cd34ef56 is terminated; create a new one";
        let e = said(409, "conflict", terminated, Some("nb2"));
        assert_eq!(e.code, "sandbox_terminated");
        let m = e.message;
        assert!(m.contains("stockade create --name nb2"), "{m}");

        let busy = "this sandbox already has 64 background processes running; kill some first (DELETE …/processes/{pid})";
        let m = said(409, "conflict", busy, Some("nb2")).message;
        assert!(
            m.ends_with("kill some first (`stockade kill nb2 PID`)"),
            "{m}"
        );

        let unexposed =
            "Port 3000 is not exposed on sandbox x: expose it with POST /api/v1/sandbox/x/ports";
        let m = said(503, "sandbox_unavailable", unexposed, None).message;
        assert!(
            m.ends_with("expose it with `stockade ports x expose PORT`"),
            "{m}"
        );

        let unpulled = "image 'nosuch/x:1' is not available locally and could not be pulled: registry unreachable";
        let hint = said(422, "image_unavailable", unpulled, None).hint.unwrap();
        assert!(hint.contains("--image") && hint.contains("STOCKADE_DEFAULT_IMAGE"));
        assert!(hint.contains("`docker pull nosuch/x:1`"), "{hint}");
    }

    #[test]
    fn paused_sandboxes_are_named_with_the_way_out() {
        let refused = "Sandbox ab12cd34ef56 is paused: resume it (POST /api/v1/sandbox/ab12cd34ef56/resume, \
                       stockade resume), or create it with lifecycle.autoResume to have it resumed on use";
        let e = said(409, "sandbox_paused", refused, Some("nb2"));
        assert_eq!(e.code, "sandbox_paused");
        assert!(e.message.contains("`stockade resume nb2`"), "{}", e.message);
        assert!(e.hint.unwrap().contains("--auto-resume"));
        // Without a sandbox to name, the message itself in CLI words.
        let m = said(409, "sandbox_paused", refused, None).message;
        assert!(m.contains("`stockade resume ab12cd34ef56`"), "{m}");
        assert!(m.contains("--auto-resume") && !m.contains("/api/"), "{m}");
        // A pause of a stopped sandbox says how to start it.
        let stopped = "Sandbox ab12cd34ef56 is not running (status STOPPED): only a running sandbox can be paused";
        let e = said(409, "sandbox_not_running", stopped, Some("nb2"));
        assert_eq!(
            e.message,
            "sandbox `nb2` is stopped — run `stockade start nb2`"
        );
        // A resume that found the processes gone keeps what became of it.
        let gone =
            "Sandbox ab12cd34ef56 could not be resumed: its processes ended while it was paused; \
                    it is STOPPED now: start it to run it again with its files";
        let e = said(409, "sandbox_not_running", gone, Some("nb2"));
        assert!(
            e.message.contains("processes ended while it was paused"),
            "{}",
            e.message
        );
        assert_eq!(
            not_running("nb2", Some("PAUSED"), None).code,
            "sandbox_paused"
        );
    }

    #[test]
    fn paused_status_and_lifecycle_in_words() {
        let mut s: SandboxResponse = serde_json::from_value(serde_json::json!({
            "id": "ab12cd34ef56", "name": "nb2", "accountId": "acc", "status": "PAUSED",
            "dockerImage": "img", "cpuCores": 1.0, "memoryGB": 1.0, "diskSizeGB": 10,
            "gpuCount": 0, "networkAccess": true, "networkPolicy": "allow-all",
            "ports": [], "environmentVars": {}, "labels": [], "tags": {},
            "timeoutMinutes": 0, "persistent": true, "server": "local",
            "createdAt": "2020-01-01T00:00:00Z", "logsUrl": "", "metadata": {},
            "pausedAt": (chrono::Utc::now() - chrono::TimeDelta::seconds(185)).to_rfc3339(),
            "lifecycle": { "onTimeout": "pause", "autoResume": true, "idleTimeoutMinutes": 0.05 },
            "volume": { "name": "agent-sandbox-ab12cd34ef56", "mountPath": "/workspace" },
        }))
        .unwrap();
        let shown = status_text(&s);
        assert!(shown.starts_with("PAUSED for 3m"), "{shown}");
        assert_eq!(sandbox_row(&s)[2], shown);
        assert_eq!(
            lifecycle_text(&s.lifecycle),
            "on timeout: pause; auto-resume: yes; idle timeout: 3s"
        );
        s.status = stockade_sdk::api::SandboxStatus::Running;
        s.paused_at = None;
        s.lifecycle.idle_timeout_minutes = 0.0;
        assert_eq!(status_text(&s), "RUNNING");
        assert!(lifecycle_text(&s.lifecycle).ends_with("idle timeout: none"));
    }

    #[test]
    fn an_internal_source_names_the_server_flag() {
        let refused = "host '10.0.0.5' resolves to the internal address 10.0.0.5; this server \
                       does not connect to internal networks on a tenant's behalf";
        let hint = said(422, "source_failed", refused, None).hint.unwrap();
        assert!(
            hint.contains("--allow-internal-addresses 10.0.0.5/32"),
            "{hint}"
        );
        let v6 = refused.replace("address 10.0.0.5", "address ::1");
        let hint = internal_address_hint(&v6).unwrap();
        assert!(hint.contains("::1/128"), "{hint}");
        assert!(internal_address_hint("image 'x' is not available").is_none());
    }

    #[test]
    fn mistyped_words_find_their_nearest() {
        let subs = ["create", "ls", "rm"];
        assert_eq!(nearest("lss", &subs), Some("ls"));
        assert_eq!(nearest("craete", &subs), Some("create"));
        assert_eq!(nearest("demo", &subs), None);
        assert_eq!(
            nearest("ls", &subs),
            None,
            "the word itself is no mistyping"
        );
        assert_eq!(nearest("ab", &subs), None);
    }

    #[test]
    fn egress_fields_name_their_flags() {
        assert_eq!(
            field_line("networkPolicy.allow[2]", "bad name"),
            "--allow: bad name"
        );
        assert_eq!(field_line("networkPolicy.deny[0]", "x"), "--deny: x");
        assert_eq!(field_line("networkPolicy", "x"), "--allow/--deny: x");
        assert_eq!(field_line("environmentVars.A B", "x"), "--env: x");
    }

    #[test]
    fn lifecycle_fields_name_their_flags() {
        assert_eq!(
            field_line("lifecycle.onTimeout", "unknown action"),
            "--on-timeout: unknown action"
        );
        assert_eq!(
            field_line("lifecycle.idleTimeoutMinutes", "too long"),
            "--idle-timeout: too long"
        );
    }

    #[test]
    fn validation_errors_name_flags_once() {
        let e = sdk_error(
            &Error::Api {
                status: 400,
                code: "validation_failed".into(),
                message: "Invalid request: name: must not contain spaces".into(),
                details: Some(serde_json::json!({
                    "fields": [{ "field": "name", "message": "must not contain spaces" }]
                })),
            },
            None,
        );
        assert_eq!(e.message, "--name: must not contain spaces");
        let e = sdk_error(
            &Error::Api {
                status: 400,
                code: "validation_failed".into(),
                message: "Invalid request: …".into(),
                details: Some(serde_json::json!({ "fields": [
                    { "field": "cpuCores", "message": "too many" },
                    { "field": "environmentVars.A B", "message": "bad key" },
                ]})),
            },
            None,
        );
        assert_eq!(
            e.message,
            "invalid request:\n  --cpu: too many\n  --env: bad key"
        );
        let e = sdk_error(
            &Error::InvalidParams {
                field: "ports".into(),
                message: "at most 4 ports".into(),
            },
            None,
        );
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("invalid_argument", "--port: at most 4 ports")
        );
    }
}
