//! The client commands: each parses its flags, calls the SDK and prints.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use stockade_sdk::api::SandboxStatus;
use stockade_sdk::{
    Client, CreateParams, DeleteOptions, FollowLogs, ListParams, NetworkPolicy, Sandbox, Snapshot,
    Source, StreamExt,
};

use crate::output::{self, CliError};

/// What every client command gets from the global flags.
pub struct Ctx {
    pub url: String,
    pub token: Option<String>,
    pub json: bool,
}

impl Ctx {
    pub fn client(&self) -> anyhow::Result<Client> {
        let token = self
            .token
            .as_deref()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                CliError::new("unauthorized", "no API token")
                    .hint("pass --token or set STOCKADE_TOKEN (the server prints the admin token on its first start)")
            })?;
        Ok(Client::new(&self.url, token)
            .and_then(|c| c.with_user_agent(CLI_AGENT))
            .map_err(|e| output::sdk_error(&e, None))?)
    }
}

/// How the CLI names itself to the server (its audit log tells the CLI's
/// calls apart by it).
pub const CLI_AGENT: &str = concat!("stockade-cli/", env!("CARGO_PKG_VERSION"));

/// Turns an SDK error about the sandbox `name` into the CLI's words.
pub fn on(name: &str) -> impl Fn(stockade_sdk::Error) -> anyhow::Error + '_ {
    move |e| output::sdk_error(&e, Some(name)).into()
}

/// The sandbox `arg` names (an id or a name; a name finds the live sandbox
/// first, else the most recently terminated one).
pub async fn sandbox(client: &Client, arg: &str) -> anyhow::Result<Sandbox> {
    match Sandbox::find(client, arg).await {
        Ok(sb) => Ok(sb),
        Err(e) if e.is_not_found() => Err(CliError::new(
            "not_found",
            format!(
                "sandbox `{arg}` not found (by name or id) — `stockade ls` lists your sandboxes"
            ),
        )
        .into()),
        Err(e) => Err(on(arg)(e)),
    }
}

/// The sandbox `arg` names, refused in CLI words when it is terminated.
pub async fn live_sandbox(client: &Client, arg: &str) -> anyhow::Result<Sandbox> {
    let sb = sandbox(client, arg).await?;
    alive(&sb)?;
    Ok(sb)
}

/// The running sandbox of a live session (`what`: "a shell is a live
/// terminal"), refused with `--json`, which such a session cannot print;
/// `instead` names the command that does.
pub async fn live_session(
    ctx: &Ctx,
    arg: &str,
    what: &str,
    instead: &str,
) -> anyhow::Result<Sandbox> {
    if ctx.json {
        return Err(CliError::invalid(format!(
            "{what}, not JSON: drop --json (or run `{instead}`)"
        ))
        .into());
    }
    running_sandbox(&ctx.client()?, arg).await
}

/// The sandbox `arg` names, refused when it is not running.
pub async fn running_sandbox(client: &Client, arg: &str) -> anyhow::Result<Sandbox> {
    let sb = sandbox(client, arg).await?;
    running(&sb)?;
    Ok(sb)
}

/// Refuses a terminated sandbox, in CLI words.
pub fn alive(sb: &Sandbox) -> anyhow::Result<()> {
    if sb.info().status == SandboxStatus::Terminated {
        return Err(output::terminated(sb.name()).into());
    }
    Ok(())
}

/// Refuses a sandbox that is not running, saying how to start it. A
/// paused one that auto-resumes passes: the server resumes it for the call.
pub fn running(sb: &Sandbox) -> anyhow::Result<()> {
    alive(sb)?;
    let i = sb.info();
    if i.status == SandboxStatus::Paused && i.lifecycle.auto_resume {
        return Ok(());
    }
    if i.status != SandboxStatus::Running {
        let status = i.status.to_string();
        return Err(
            output::not_running(sb.name(), Some(&status), i.status_reason.as_deref()).into(),
        );
    }
    Ok(())
}

/// The snapshot `arg` names (an id, or a name: the newest with it).
pub async fn snapshot(client: &Client, arg: &str) -> anyhow::Result<Snapshot> {
    match Snapshot::find(client, arg).await {
        Ok(s) => Ok(s),
        Err(e) if e.is_not_found() => Err(snapshot_not_found(arg).into()),
        Err(e) => Err(output::sdk_error(&e, None).into()),
    }
}

pub fn snapshot_not_found(arg: &str) -> CliError {
    CliError::new(
        "not_found",
        format!(
            "snapshot `{arg}` not found (by name or id) — `stockade snapshot ls` lists your snapshots"
        ),
    )
}

#[derive(Args)]
pub struct CreateArgs {
    /// Name, unique among your sandboxes (default: the id).
    #[arg(long, short = 'n')]
    name: Option<String>,
    /// Docker image (default: the server's default).
    #[arg(long, short = 'i')]
    image: Option<String>,
    /// Runtime preset instead of an image: node22, python3.13, …
    #[arg(long)]
    runtime: Option<String>,
    /// A template to run instead of an image (`stockade template ls`),
    /// by name or id; `name:tag` for a tagged build.
    #[arg(long, value_name = "TEMPLATE", conflicts_with_all = ["image", "runtime"])]
    template: Option<String>,
    /// CPU cores.
    #[arg(long, allow_negative_numbers = true)]
    cpu: Option<f64>,
    /// Memory in GB.
    #[arg(long, allow_negative_numbers = true)]
    memory: Option<f64>,
    /// vCPUs, with 2 GB of memory each (instead of --cpu/--memory).
    #[arg(long, conflicts_with_all = ["cpu", "memory"], allow_negative_numbers = true)]
    vcpus: Option<f64>,
    /// Disk size in GB.
    #[arg(long, allow_negative_numbers = true)]
    disk: Option<i64>,
    /// Environment variable KEY=VALUE (repeatable).
    #[arg(long, short = 'e', value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Label (repeatable).
    #[arg(long, short = 'l')]
    label: Vec<String>,
    /// Tag KEY=VALUE (repeatable, at most 5).
    #[arg(long, value_name = "KEY=VALUE")]
    tag: Vec<String>,
    /// Port to expose (repeatable, at most 4).
    #[arg(long, short = 'p', value_name = "PORT", allow_negative_numbers = true)]
    port: Vec<String>,
    /// Session timeout: 90s, 30m, 1h30m, or minutes (0 = never).
    #[arg(long)]
    timeout: Option<String>,
    /// No network access at all.
    #[arg(long)]
    no_network: bool,
    /// Egress allowed only to ENTRY (repeatable): an address or CIDR, a
    /// name or `*.name`, each with an optional `:PORT` (pypi.org,
    /// *.githubusercontent.com, 10.1.0.0/16:5432).
    #[arg(long, value_name = "ENTRY", conflicts_with = "no_network")]
    allow: Vec<String>,
    /// Egress denied to ENTRY (repeatable, same forms as --allow; a denied
    /// entry wins over an allowed one).
    #[arg(long, value_name = "ENTRY", conflicts_with = "no_network")]
    deny: Vec<String>,
    /// Main process (a shell command line; default: keep-alive). One that
    /// exits within 2 seconds is reported, with its output, and create
    /// exits 1.
    #[arg(long)]
    start_command: Option<String>,
    /// Terminate (not just stop) the sandbox when its session times out.
    #[arg(long)]
    ephemeral: bool,
    /// What the end of a session (--timeout or --idle-timeout) does
    /// (default: stop, or kill with --ephemeral).
    #[arg(long, value_enum, ignore_case = true, value_name = "ACTION")]
    on_timeout: Option<TimeoutAction>,
    /// Resume the sandbox when it is paused and used (a command, a shell,
    /// a file, a code cell, a request to one of its ports) instead of
    /// refusing the call.
    #[arg(long)]
    auto_resume: bool,
    /// End the session after this long without use: 90s, 30m, 1h30m, or
    /// minutes (0 = never, the default); then --on-timeout applies.
    #[arg(long, value_name = "DURATION")]
    idle_timeout: Option<String>,
    /// Share with one of your teams.
    #[arg(long)]
    team: Option<String>,
    /// Makes a retried create return the first result.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Start /workspace (and the root filesystem) from one of your snapshots
    /// (id or name).
    #[arg(long, value_name = "SNAPSHOT", group = "source")]
    from_snapshot: Option<String>,
    /// Clone a git repository into /workspace (https://, http:// or git://).
    #[arg(long, value_name = "URL", group = "source")]
    git: Option<String>,
    /// Branch, tag or commit of --git (default: the remote's default branch).
    #[arg(long = "ref", value_name = "REF", requires = "git")]
    git_ref: Option<String>,
    /// Download a tar archive (plain or compressed) into /workspace.
    #[arg(long, value_name = "URL", group = "source")]
    tarball: Option<String>,
    /// Upload a local directory, or a .tar / .tar.gz archive, into /workspace.
    #[arg(long, value_name = "PATH", group = "source")]
    upload: Option<std::path::PathBuf>,
    /// Mount a shared volume at an absolute path, read-only with `:ro`
    /// (repeatable; `stockade volume create NAME` makes one). The sandbox
    /// runs on the volumes' Docker host.
    #[arg(long = "mount", value_name = "VOLUME:/PATH[:ro]")]
    mounts: Vec<String>,
}

/// What the end of a sandbox's session does.
#[derive(Clone, Copy, ValueEnum)]
pub enum TimeoutAction {
    /// Remove the sandbox with its files.
    Kill,
    /// Stop its container; its files stay.
    Stop,
    /// Freeze it in place: its processes and memory stay.
    Pause,
}

impl TimeoutAction {
    /// The action as the API names it.
    fn as_str(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::Stop => "stop",
            Self::Pause => "pause",
        }
    }
}

pub fn key_value(s: &str, flag: &str) -> Result<(String, String), CliError> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| CliError::invalid(format!("{flag} expects KEY=VALUE, got '{s}'")))
}

/// Parses repeated `KEY=VALUE` arguments of `flag` into a map.
pub fn key_values(pairs: &[String], flag: &str) -> Result<BTreeMap<String, String>, CliError> {
    pairs.iter().map(|pair| key_value(pair, flag)).collect()
}

/// A number a flag gives (`what`: "number of GB"), refused in plain words
/// unless it is positive.
pub fn positive(value: Option<f64>, flag: &str, what: &str) -> Result<Option<f64>, CliError> {
    match value {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(CliError::invalid(format!(
            "{flag} must be a positive {what}, got {v}"
        ))),
        v => Ok(v),
    }
}

/// A port as a command line gives it, refused in plain words unless it is
/// 1 to 65535 (`what`: how the command line names it, `--port` or `PORT`).
pub fn port_arg(value: &str, what: &str) -> Result<u16, CliError> {
    value
        .trim()
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| CliError::invalid(format!("{what} {value}: ports are 1 to 65535")))
}

/// Parses `90s`, `30m`, `2h`, `1h30m` or a number of minutes.
pub fn parse_timeout(s: &str) -> Result<Duration, CliError> {
    parse_duration(s, "--timeout", "m")
}

/// Parses a duration as people write it: `90s`, `30m`, `2h`, `1m30s`,
/// `1d`, or a bare number in `default_unit`.
pub fn parse_duration(s: &str, flag: &str, default_unit: &str) -> Result<Duration, CliError> {
    let bad = || {
        CliError::invalid(format!(
            "{flag}: '{s}' is not a duration like 90s, 30m, 1h30m or 2h"
        ))
    };
    let text = s.trim();
    if text.starts_with('-') {
        return Err(CliError::invalid(format!("{flag} must not be negative")));
    }
    if text.is_empty() {
        return Err(bad());
    }
    let mut secs = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at(split);
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit = if unit.is_empty() {
            if split != rest.len() || rest.len() != text.len() {
                return Err(bad()); // a bare number only alone
            }
            default_unit
        } else {
            unit
        };
        let n: f64 = num.parse().map_err(|_| bad())?;
        secs += n * match unit {
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => {
                return Err(CliError::invalid(format!(
                    "{flag}: unknown unit '{unit}' (use s, m, h or d)"
                )))
            }
        };
        rest = next;
    }
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The egress policy the flags of `create` or `update` ask for, if any:
/// `--no-network` (deny-all), `--allow-all`, or the entries of `--allow` and
/// `--deny` (an empty entry is refused here; the server checks the rest and
/// names a bad one).
pub fn egress(
    no_network: bool,
    allow_all: bool,
    allow: &[String],
    deny: &[String],
) -> Result<Option<NetworkPolicy>, CliError> {
    if no_network {
        return Ok(Some(NetworkPolicy::DenyAll));
    }
    if allow_all {
        return Ok(Some(NetworkPolicy::AllowAll));
    }
    if allow.is_empty() && deny.is_empty() {
        return Ok(None);
    }
    let entries = |list: &[String], flag: &str| -> Result<Vec<String>, CliError> {
        list.iter()
            .map(|e| match e.trim() {
                "" => Err(CliError::invalid(format!(
                    "{flag} takes an address, a CIDR, a name or *.name (with an optional :PORT), got ''"
                ))),
                entry => Ok(entry.to_owned()),
            })
            .collect()
    };
    Ok(Some(NetworkPolicy::Lists {
        allow: entries(allow, "--allow")?,
        deny: entries(deny, "--deny")?,
    }))
}

pub async fn create(ctx: &Ctx, a: CreateArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let mut p = CreateParams {
        name: a.name,
        image: a.image,
        runtime: a.runtime,
        template: a.template,
        start_command: a.start_command,
        ports: a
            .port
            .iter()
            .map(|p| port_arg(p, "--port"))
            .collect::<Result<_, _>>()?,
        timeout: a.timeout.map(|t| parse_timeout(&t)).transpose()?,
        vcpus: positive(a.vcpus, "--vcpus", "number of vCPUs")?,
        cpu_cores: positive(a.cpu, "--cpu", "number of CPU cores")?,
        memory_gb: positive(a.memory, "--memory", "number of GB")?,
        disk_size_gb: match a.disk {
            Some(gb) => Some(u32::try_from(gb).ok().filter(|gb| *gb > 0).ok_or_else(|| {
                CliError::invalid(format!(
                    "--disk must be a positive whole number of GB, got {gb}"
                ))
            })?),
            None => None,
        },
        network_policy: egress(a.no_network, false, &a.allow, &a.deny)?,
        env: key_values(&a.env, "--env")?,
        tags: key_values(&a.tag, "--tag")?,
        labels: a.label,
        persistent: a.ephemeral.then_some(false),
        team_id: a.team,
        idempotency_key: a.idempotency_key,
        on_timeout: a.on_timeout.map(|t| t.as_str().to_owned()),
        auto_resume: a.auto_resume.then_some(true),
        idle_timeout: a
            .idle_timeout
            .map(|t| parse_duration(&t, "--idle-timeout", "m"))
            .transpose()?,
        volume_mounts: a
            .mounts
            .iter()
            .map(|m| crate::volume::mount_arg(m))
            .collect::<Result<_, _>>()?,
        ..CreateParams::new()
    };
    if let Some(snap) = a.from_snapshot {
        let id = snapshot(&client, &snap).await?.id().to_owned();
        p.source = Some(Source::Snapshot { id });
    } else if let Some(url) = a.git {
        p.source = Some(Source::Git {
            url,
            git_ref: a.git_ref,
        });
    } else if let Some(url) = a.tarball {
        p.source = Some(Source::Tarball { url });
    } else if let Some(path) = a.upload {
        let up = crate::upload::upload_source(&client, &path, ctx.json).await?;
        p.source = Some(Source::Upload { id: up.upload_id });
    }
    let watch = p.start_command.is_some();
    let mut sb = output::spinning(
        "Creating sandbox (pulling the image if needed)",
        ctx.json,
        Sandbox::create(&client, p),
    )
    .await
    .map_err(|e| crate::volume::mount_error(output::sdk_error(&e, None), &a.mounts))?;
    if watch {
        let exited = output::spinning(
            "Watching the start command",
            ctx.json,
            start_command_exited(&mut sb),
        )
        .await;
        if exited {
            let error = start_command_failed(&sb).await;
            if ctx.json {
                output::json(sb.info())?;
            }
            return Err(error.into());
        }
    }
    if ctx.json {
        output::json(sb.info())?;
    } else {
        let i = sb.info();
        outln!(
            "Created sandbox {} ({}) {} — {}",
            i.name,
            i.id,
            i.status,
            i.docker_image
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How long `create --start-command` watches a new sandbox for a start
/// command that exits at once (a typo, a missing program).
const START_WATCH: Duration = Duration::from_secs(2);

/// How often the watch asks for the sandbox's status.
const START_POLL: Duration = Duration::from_millis(250);

/// Whether the main process of the new sandbox `sb` ended within
/// [`START_WATCH`]. Two signs, whichever comes first: the sandbox's record
/// says STOPPED or ERROR, or its log stream ends because the container
/// stopped (the record may learn of that only later). `sb` is refreshed.
async fn start_command_exited(sb: &mut Sandbox) -> bool {
    let ended = |s: SandboxStatus| matches!(s, SandboxStatus::Stopped | SandboxStatus::Error);
    let logs = sb.clone();
    let container_stopped = async move {
        if let Ok(mut lines) = logs.follow_logs(FollowLogs::new().tail(0)).await {
            while let Some(Ok(_)) = lines.next().await {}
            if lines.end_reason().as_deref() == Some("sandbox stopped") {
                return;
            }
        }
        std::future::pending::<()>().await
    };
    let record_stopped = async {
        loop {
            tokio::time::sleep(START_POLL).await;
            if sb.refresh().await.is_ok() && ended(sb.info().status) {
                return;
            }
        }
    };
    let exited = tokio::select! {
        () = container_stopped => true,
        () = record_stopped => true,
        () = tokio::time::sleep(START_WATCH) => false,
    };
    if exited && !ended(sb.info().status) {
        // The record's reason (the exit code) when it has caught up.
        let _ = sb.refresh().await;
    }
    exited
}

/// The error of a sandbox whose start command exited right after it was
/// created: why (the record's reason, when it has one), the last lines the
/// command printed, and where to see all of them.
async fn start_command_failed(sb: &Sandbox) -> CliError {
    let name = sb.name();
    let i = sb.info();
    let why = match (i.status, i.status_reason.as_deref()) {
        (SandboxStatus::Stopped | SandboxStatus::Error, Some(reason)) => format!(": {reason}"),
        _ => " right after it started".to_owned(),
    };
    let mut message = format!(
        "sandbox `{name}` ({}) was created, but its start command exited{why}",
        sb.id()
    );
    let lines = sb.logs(10).await.map(|l| l.lines).unwrap_or_default();
    if lines.is_empty() {
        message.push_str("\n  (it printed nothing)");
    } else {
        message.push_str("\n  its last output:");
        for line in &lines {
            message.push_str(&format!("\n    {}", line.text));
        }
    }
    CliError::new("start_command_exited", message).hint(format!(
        "see `stockade logs {name}`; `stockade rm {name}` removes the sandbox"
    ))
}

#[derive(Args)]
pub struct ListArgs {
    /// Only these statuses (running, paused, stopped, …; repeatable).
    #[arg(long, short = 's')]
    status: Vec<String>,
    /// Only sandboxes with ALL these labels (repeatable).
    #[arg(long, short = 'l')]
    label: Vec<String>,
    /// Exact name.
    #[arg(long)]
    name: Option<String>,
    /// Only this team's sandboxes.
    #[arg(long)]
    team: Option<String>,
    /// List terminated sandboxes instead.
    #[arg(long)]
    terminated: bool,
    #[arg(long, default_value_t = 1)]
    page: u32,
    #[arg(long, default_value_t = 50)]
    per_page: u32,
}

pub async fn list(ctx: &Ctx, a: ListArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let page = Sandbox::list(
        &client,
        ListParams {
            statuses: a.status,
            labels: a.label,
            name: a.name,
            team_id: a.team,
            is_active: a.terminated.then_some(false),
            page: Some(a.page),
            per_page: Some(a.per_page),
        },
    )
    .await?;
    if ctx.json {
        let infos: Vec<_> = page.sandboxes.iter().map(|s| s.info().clone()).collect();
        output::json(&serde_json::json!({
            "sandboxes": infos,
            "total": page.total,
            "page": page.page,
            "per_page": page.per_page,
            "has_next": page.has_next,
        }))?;
    } else if page.sandboxes.is_empty() && a.terminated {
        outln!("No terminated sandboxes.")?;
    } else if page.sandboxes.is_empty() {
        outln!("No sandboxes yet. Create one with `stockade create --name demo`.")?;
    } else {
        let rows: Vec<Vec<String>> = page
            .sandboxes
            .iter()
            .map(|s| output::sandbox_row(s.info()))
            .collect();
        output::table(&output::SANDBOX_HEADER, &rows)?;
        if page.has_next {
            outln!(
                "… {} in all; next page: --page {}",
                output::count(page.total, "sandbox", "sandboxes"),
                page.page + 1
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn get(ctx: &Ctx, arg: &str) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let mut sb = sandbox(&client, arg).await?;
    if sb.id() != arg {
        // Found by name through the list, which leaves out what only the
        // details carry (usage, volume size): fetch those as for an id.
        sb.refresh().await.map_err(on(arg))?;
    }
    if ctx.json {
        output::json(sb.info())?;
    } else {
        output::sandbox_details(sb.info())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The outcome of a command over many items (`stockade rm a b`): each
/// success is reported on stdout as it happens (a JSON array of them at
/// the end with `--json`), each failure once on stderr; the exit code is 1
/// if any failed.
pub struct Batch {
    json: bool,
    done: Vec<serde_json::Value>,
    failed: usize,
}

impl Batch {
    pub fn new(json: bool) -> Self {
        Self {
            json,
            done: Vec::new(),
            failed: 0,
        }
    }

    /// One item done; `line` is what people see.
    pub fn ok(&mut self, value: serde_json::Value, line: &str) -> std::io::Result<()> {
        self.done.push(value);
        if self.json {
            return Ok(());
        }
        outln!("{line}")
    }

    /// One item failed (a closed stdout is passed on, not reported).
    pub fn failed(&mut self, item: &str, e: anyhow::Error) -> anyhow::Result<()> {
        if output::is_broken_pipe(&e) {
            return Err(e);
        }
        self.failed += 1;
        output::classify(&e).print(self.json, Some(item));
        Ok(())
    }

    pub fn finish(self) -> anyhow::Result<ExitCode> {
        if self.json {
            output::json(&self.done)?;
        }
        Ok(if self.failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

/// Runs `op` on each sandbox, reporting each (`NAME: STATUS`); fails if
/// any failed.
async fn each<F, Fut>(
    ctx: &Ctx,
    sandboxes: &[String],
    verb: &str,
    op: F,
) -> anyhow::Result<ExitCode>
where
    F: Fn(Sandbox) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<serde_json::Value>>,
{
    each_saying(ctx, sandboxes, verb, op, |name, v| {
        if v["already"] == true {
            format!("{name}: already terminated")
        } else {
            format!("{name}: {}", v["status"].as_str().unwrap_or("done"))
        }
    })
    .await
}

/// [`each`], with `said` making the line people see of a sandbox done
/// (from the argument that named it and what `op` returned).
async fn each_saying<F, Fut>(
    ctx: &Ctx,
    sandboxes: &[String],
    verb: &str,
    op: F,
    said: impl Fn(&str, &serde_json::Value) -> String,
) -> anyhow::Result<ExitCode>
where
    F: Fn(Sandbox) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<serde_json::Value>>,
{
    let client = ctx.client()?;
    let mut batch = Batch::new(ctx.json);
    for name in sandboxes {
        let pb = output::spinner(&format!("{verb} {name}"), ctx.json);
        let outcome = match sandbox(&client, name).await {
            Ok(sb) => op(sb)
                .await
                .map_err(|e| match e.downcast::<stockade_sdk::Error>() {
                    Ok(sdk) => on(name)(sdk),
                    Err(other) => other,
                }),
            Err(e) => Err(e),
        };
        pb.finish_and_clear();
        match outcome {
            Ok(v) => {
                let line = said(name, &v);
                batch.ok(v, &line)?;
            }
            Err(e) => batch.failed(name, e)?,
        }
    }
    batch.finish()
}

fn to_value(sb: &Sandbox) -> serde_json::Value {
    serde_json::to_value(sb.info()).unwrap_or_default()
}

pub async fn start(ctx: &Ctx, sandboxes: &[String]) -> anyhow::Result<ExitCode> {
    each(ctx, sandboxes, "Starting", |mut sb| async move {
        alive(&sb)?;
        sb.start().await?;
        Ok(to_value(&sb))
    })
    .await
}

/// The name and id of the sandbox a command returned.
fn name_and_id(v: &serde_json::Value) -> (&str, &str) {
    (
        v["name"].as_str().unwrap_or_default(),
        v["id"].as_str().unwrap_or_default(),
    )
}

pub async fn pause(ctx: &Ctx, sandboxes: &[String]) -> anyhow::Result<ExitCode> {
    each_saying(
        ctx,
        sandboxes,
        "Pausing",
        |mut sb| async move {
            alive(&sb)?;
            sb.pause().await?;
            Ok(to_value(&sb))
        },
        |_, v| {
            let (name, id) = name_and_id(v);
            let wakes = if v["lifecycle"]["autoResume"] == true {
                format!("`stockade resume {name}` or its next use wakes it")
            } else {
                format!("`stockade resume {name}` wakes it")
            };
            format!("Paused {name} ({id}): its processes are frozen; {wakes}")
        },
    )
    .await
}

pub async fn resume(ctx: &Ctx, sandboxes: &[String]) -> anyhow::Result<ExitCode> {
    each_saying(
        ctx,
        sandboxes,
        "Resuming",
        |mut sb| async move {
            alive(&sb)?;
            sb.resume().await?;
            Ok(to_value(&sb))
        },
        |_, v| {
            let (name, id) = name_and_id(v);
            format!("Resumed {name} ({id}): its processes go on where they were")
        },
    )
    .await
}

pub async fn stop(
    ctx: &Ctx,
    sandboxes: &[String],
    timeout: Option<u64>,
) -> anyhow::Result<ExitCode> {
    each(ctx, sandboxes, "Stopping", |sb| async move {
        alive(&sb)?;
        let stopped = sb.stop_with(timeout.map(Duration::from_secs)).await?;
        Ok(to_value(&stopped))
    })
    .await
}

pub async fn remove(
    ctx: &Ctx,
    sandboxes: &[String],
    keep_volume: bool,
    sync: bool,
) -> anyhow::Result<ExitCode> {
    let verb = if sync {
        "Uploading /workspace and removing"
    } else {
        "Removing"
    };
    each(ctx, sandboxes, verb, |sb| async move {
        if sb.info().status == SandboxStatus::Terminated {
            return Ok(serde_json::json!({
                "id": sb.id(), "name": sb.name(), "status": "TERMINATED", "already": true
            }));
        }
        sb.delete_with(DeleteOptions {
            preserve_volume: keep_volume,
            sync,
        })
        .await?;
        Ok(serde_json::json!({ "id": sb.id(), "name": sb.name(), "status": "TERMINATED" }))
    })
    .await
}

#[derive(Subcommand)]
pub enum AccountCommand {
    /// Create an account and print its API token (shown once).
    #[command(after_help = "Examples:
  stockade account create alice
  stockade account create ops --admin --json | jq -r .token")]
    Create {
        /// Account name (letters, digits, _ . - @).
        name: String,
        /// Make it an administrator.
        #[arg(long)]
        admin: bool,
    },
    /// List accounts.
    #[command(after_help = "Example:
  stockade account ls --json")]
    Ls,
    /// Show the account of the current token.
    #[command(after_help = "Example:
  STOCKADE_TOKEN=stk_… stockade account whoami")]
    Whoami,
    /// Show an account's quota and what it uses; with flags, change it
    /// (administrators only). Sandboxes and disk count every sandbox that
    /// is not removed, stopped ones too; CPUs and memory count the running
    /// ones; snapshots count those not deleted, uploads those not yet used,
    /// each with what it takes in the object store; shared volumes count
    /// those not deleted, with their sizeGB together. A flag changes only
    /// its own limit; `unlimited` lifts it.
    #[command(after_help = "Examples:
  stockade account quota alice
  stockade account quota alice --sandboxes 5 --cpu 4 --memory 16
  stockade account quota alice --snapshots 20 --snapshot-gb 50 --uploads 5 --upload-gb 2
  stockade account quota alice --volumes 10 --volume-gb 200
  stockade account quota alice --disk unlimited
  stockade account quota alice --clear")]
    Quota {
        /// Account name or id.
        account: String,
        #[command(flatten)]
        limits: Box<QuotaFlags>,
        /// Lift every limit first (flags given with it set new ones).
        #[arg(long)]
        clear: bool,
    },
    /// Disable an account (administrators only): its API tokens, dashboard
    /// sessions and sandbox tokens are refused until it is enabled again.
    /// Its sandboxes are left as they are.
    #[command(after_help = "Example:
  stockade account disable alice")]
    Disable {
        /// Account name or id.
        account: String,
    },
    /// Enable a disabled account again (administrators only): its tokens
    /// and sessions work as before.
    #[command(after_help = "Example:
  stockade account enable alice")]
    Enable {
        /// Account name or id.
        account: String,
    },
}

/// The limits `stockade account quota` changes, each a number or
/// `unlimited` (boxed in the command: they are many).
#[derive(Debug, Args)]
pub struct QuotaFlags {
    /// Most sandboxes at once (stopped ones count), or `unlimited`.
    #[arg(long, value_name = "N")]
    sandboxes: Option<String>,
    /// Most CPU cores of running sandboxes together, or `unlimited`.
    #[arg(long, value_name = "CORES")]
    cpu: Option<String>,
    /// Most memory of running sandboxes together, in GB, or `unlimited`.
    #[arg(long, value_name = "GB")]
    memory: Option<String>,
    /// Most disk (diskSizeGB) of all sandboxes together, in GB, or `unlimited`.
    #[arg(long, value_name = "GB")]
    disk: Option<String>,
    /// Most snapshots kept at once (not deleted), or `unlimited`.
    #[arg(long, value_name = "N")]
    snapshots: Option<String>,
    /// Most GB the snapshots take in the object store together, or
    /// `unlimited`.
    #[arg(long, value_name = "GB")]
    snapshot_gb: Option<String>,
    /// Most uploads waiting to be used at once, or `unlimited`.
    #[arg(long, value_name = "N")]
    uploads: Option<String>,
    /// Most GB those uploads take together, or `unlimited`.
    #[arg(long, value_name = "GB")]
    upload_gb: Option<String>,
    /// Most shared volumes kept at once (not deleted), or `unlimited`
    /// (the server then keeps an account to 100).
    #[arg(long, value_name = "N")]
    volumes: Option<String>,
    /// Most GB of shared volumes (their sizeGB) together, or
    /// `unlimited`; with a limit, every volume must be given a size.
    #[arg(long, value_name = "GB")]
    volume_gb: Option<String>,
}

/// A quota flag's value: `unlimited` (or `none`) is `None`.
fn limit<T: std::str::FromStr>(value: &str, flag: &str, what: &str) -> anyhow::Result<Option<T>> {
    let v = value.trim();
    if v.eq_ignore_ascii_case("unlimited") || v.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    v.parse::<T>().map(Some).map_err(|_| {
        CliError::invalid(format!("{flag}: '{value}' is not {what} (or `unlimited`)")).into()
    })
}

/// A change to one limit of a quota request, from its flag.
type QuotaEdit = Box<dyn FnOnce(&mut stockade_sdk::api::SetQuotaRequest)>;

/// The change `value` of `flag` asks for (a number, or `unlimited`), if the
/// flag was given: it sets the `field` of a quota request.
fn quota_edit<T: std::str::FromStr + 'static>(
    value: Option<String>,
    flag: &str,
    what: &str,
    field: fn(&mut stockade_sdk::api::SetQuotaRequest) -> &mut Option<T>,
) -> anyhow::Result<Option<QuotaEdit>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let limit = limit::<T>(&value, flag, what)?;
    Ok(Some(Box::new(move |req| *field(req) = limit)))
}

/// The account `arg` names (an id or a name): its id and name. Anyone
/// finds their own account; other accounts need an administrator's token.
pub async fn account_named(client: &Client, arg: &str) -> anyhow::Result<(String, String)> {
    let me = client.whoami().await?;
    if me.account.id == arg || me.account.name == arg {
        return Ok((me.account.id, me.account.name));
    }
    let accounts = client.list_accounts().await?.accounts;
    let found = accounts
        .iter()
        .find(|a| a.id == arg)
        .or_else(|| accounts.iter().find(|a| a.name == arg));
    match found {
        Some(a) => Ok((a.id.clone(), a.name.clone())),
        None => Err(CliError::new(
            "not_found",
            format!(
                "account `{arg}` not found (by name or id) — `stockade account ls` lists accounts"
            ),
        )
        .into()),
    }
}

/// Prints an account's quota and use as a table.
fn print_quota(name: &str, q: &stockade_sdk::api::QuotaResponse) -> anyhow::Result<()> {
    // What a row counts.
    const EXISTING: &str = "not removed, stopped ones too";
    const RUNNING: &str = "of running sandboxes";
    const ARCHIVES: &str = "their archives in the object store";
    // The use and the limit in the resource's unit; no limit is `unlimited`.
    fn shown<T: Copy>(used: T, limit: Option<T>, unit: impl Fn(T) -> String) -> [String; 2] {
        [
            unit(used),
            limit.map_or_else(|| "unlimited".to_owned(), unit),
        ]
    }
    let count = |n: u64| n.to_string();
    let gb = |v: f64| format!("{} GB", output::trim_num(v));
    let whole_gb = |n: u64| format!("{n} GB");
    let (u, l) = (&q.usage, &q.quota);
    outln!("Quota of account {name} ({})", q.account_id)?;
    let resources = [
        ("sandboxes", EXISTING),
        ("cpu", RUNNING),
        ("memory", RUNNING),
        ("disk", EXISTING),
        ("snapshots", "not deleted"),
        ("snapshot storage", ARCHIVES),
        ("uploads", "not yet used, not expired"),
        ("upload storage", ARCHIVES),
        ("volumes", "shared volumes, not deleted"),
        ("volume size", "their sizeGB together"),
    ];
    // Their use and limit, in the same order.
    let values = [
        shown(u.sandboxes, l.sandboxes, count),
        shown(u.cpu_cores, l.cpu_cores, output::trim_num),
        shown(u.memory_gb, l.memory_gb, gb),
        shown(u.disk_gb, l.disk_gb, whole_gb),
        shown(u.snapshots, l.snapshots, count),
        shown(u.snapshot_gb, l.snapshot_gb, gb),
        shown(u.uploads, l.uploads, count),
        shown(u.upload_gb, l.upload_gb, gb),
        shown(u.volumes, l.volumes, count),
        shown(u.volume_gb, l.volume_gb, whole_gb),
    ];
    let rows: Vec<Vec<String>> = resources
        .into_iter()
        .zip(values)
        .map(|((resource, counts), [used, limit])| {
            vec![resource.to_owned(), used, limit, counts.to_owned()]
        })
        .collect();
    output::table(&["RESOURCE", "USED", "LIMIT", "COUNTS"], &rows)?;
    Ok(())
}

/// Prints what became of an account (or its JSON): `{done} account NAME
/// (ID): its tokens and sessions {now}.`
fn said_of_account(
    ctx: &Ctx,
    a: &stockade_sdk::api::AccountResponse,
    done: &str,
    now: &str,
) -> anyhow::Result<()> {
    output::json_or(ctx.json, a, || {
        format!(
            "{done} account {} ({}): its tokens and sessions {now}.",
            a.name, a.id
        )
    })
}

pub async fn account(ctx: &Ctx, cmd: AccountCommand) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd {
        AccountCommand::Create { name, admin } => {
            let resp = client.create_account(&name, admin).await?;
            if ctx.json {
                output::json(&resp)?;
            } else {
                outln!(
                    "Created account {} ({})",
                    resp.account.name,
                    resp.account.id
                )?;
                outln!("API token (shown once): {}", resp.token)?;
            }
        }
        AccountCommand::Ls => {
            let resp = client.list_accounts().await?;
            if ctx.json {
                output::json(&resp)?;
            } else {
                let rows: Vec<Vec<String>> = resp
                    .accounts
                    .iter()
                    .map(|a| {
                        vec![
                            a.id.clone(),
                            a.name.clone(),
                            if a.is_admin {
                                "yes".into()
                            } else {
                                String::new()
                            },
                            a.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                            a.disabled_at
                                .map(|at| {
                                    format!("disabled {}", output::ago(chrono::Utc::now() - at))
                                })
                                .unwrap_or_default(),
                        ]
                    })
                    .collect();
                output::table(&["ID", "NAME", "ADMIN", "CREATED", "STATUS"], &rows)?;
            }
        }
        AccountCommand::Quota {
            account,
            limits,
            clear,
        } => {
            let QuotaFlags {
                sandboxes,
                cpu,
                memory,
                disk,
                snapshots,
                snapshot_gb,
                uploads,
                upload_gb,
                volumes,
                volume_gb,
            } = *limits;
            // Every value is checked before any request.
            let edits: Vec<QuotaEdit> = [
                quota_edit(sandboxes, "--sandboxes", "a whole number", |r| {
                    &mut r.sandboxes
                })?,
                quota_edit(cpu, "--cpu", "a number of cores", |r| &mut r.cpu_cores)?,
                quota_edit(memory, "--memory", "a number of GB", |r| &mut r.memory_gb)?,
                quota_edit(disk, "--disk", "a whole number of GB", |r| &mut r.disk_gb)?,
                quota_edit(snapshots, "--snapshots", "a whole number", |r| {
                    &mut r.snapshots
                })?,
                quota_edit(snapshot_gb, "--snapshot-gb", "a number of GB", |r| {
                    &mut r.snapshot_gb
                })?,
                quota_edit(uploads, "--uploads", "a whole number", |r| &mut r.uploads)?,
                quota_edit(upload_gb, "--upload-gb", "a number of GB", |r| {
                    &mut r.upload_gb
                })?,
                quota_edit(volumes, "--volumes", "a whole number", |r| &mut r.volumes)?,
                quota_edit(volume_gb, "--volume-gb", "a whole number of GB", |r| {
                    &mut r.volume_gb
                })?,
            ]
            .into_iter()
            .flatten()
            .collect();
            let (id, name) = account_named(&client, &account).await?;
            let changes = clear || !edits.is_empty();
            let mut q = client.quota(&id).await?;
            if changes {
                let mut req = if clear {
                    stockade_sdk::api::SetQuotaRequest::default()
                } else {
                    q.quota.to_request()
                };
                for edit in edits {
                    edit(&mut req);
                }
                q = client.set_quota(&id, &req).await?;
            }
            if ctx.json {
                output::json(&q)?;
            } else {
                print_quota(&name, &q)?;
            }
        }
        AccountCommand::Disable { account } => {
            let (id, _) = account_named(&client, &account).await?;
            let a = client.disable_account(&id).await?;
            let refused_until = format!("are refused until `stockade account enable {}`", a.name);
            said_of_account(ctx, &a, "Disabled", &refused_until)?;
        }
        AccountCommand::Enable { account } => {
            let (id, _) = account_named(&client, &account).await?;
            let a = client.enable_account(&id).await?;
            said_of_account(ctx, &a, "Enabled", "work again")?;
        }
        AccountCommand::Whoami => {
            let me = client.whoami().await?;
            output::json_or(ctx.json, &me, || {
                format!(
                    "{} ({}){}",
                    me.account.name,
                    me.account.id,
                    if me.account.is_admin {
                        ", administrator"
                    } else {
                        ""
                    }
                )
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn health(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let client = match ctx.token.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => Client::new(&ctx.url, t)?.with_user_agent(CLI_AGENT)?,
        None => Client::anonymous(&ctx.url)?.with_user_agent(CLI_AGENT)?,
    };
    let h = client
        .health()
        .await
        .map_err(|e| output::sdk_error(&e, None))?;
    if ctx.json {
        output::json(&h)?;
    } else {
        outln!("status:   {}", h.status)?;
        match (&h.docker.version, &h.docker.api_version) {
            (Some(v), Some(a)) => outln!("docker:   {} (Docker {v}, API {a})", h.docker.status)?,
            _ => outln!("docker:   {}", h.docker.status)?,
        }
        if let Some(e) = &h.docker.error {
            outln!("  error:  {e}")?;
        }
        for t in &h.docker.troubleshooting {
            outln!("  - {t}")?;
        }
        outln!("database: {} ({})", h.database.status, h.database.backend)?;
        if let Some(e) = &h.database.error {
            outln!("  error:  {e}")?;
        }
        if let Some(images) = &h.images {
            let presence = |present: bool| if present { "present" } else { "absent" };
            outln!(
                "image:    {} ({})",
                images.default.image,
                presence(images.default.present)
            )?;
            let presets: Vec<String> = images
                .presets
                .iter()
                .map(|p| format!("{} {}", p.name, presence(p.present)))
                .collect();
            if !presets.is_empty() {
                outln!("runtimes: {}", presets.join(", "))?;
            }
        }
        for w in &h.warnings {
            outln!("warning:  {w}")?;
        }
    }
    Ok(if h.status == "healthy" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_timeout("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_timeout("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_timeout("5").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_timeout("0.5").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_timeout("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_timeout("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_timeout("2d").unwrap(), Duration::from_secs(172_800));
        assert_eq!(
            parse_duration("45", "--ttl", "s").unwrap(),
            Duration::from_secs(45)
        );
        assert!(parse_timeout("soon").is_err());
        assert!(parse_timeout("5w").is_err());
        assert!(parse_timeout("1m30").is_err(), "a bare number only alone");
        assert!(parse_timeout("").is_err());
        let e = positive(Some(-1.0), "--memory", "number of GB").unwrap_err();
        assert_eq!(
            e.message,
            "--memory must be a positive number of GB, got -1"
        );
        assert!(positive(Some(f64::NAN), "--cpu", "number of CPU cores").is_err());
        assert_eq!(positive(Some(0.5), "--cpu", "x").unwrap(), Some(0.5));
        assert_eq!(
            port_arg("0", "--port").unwrap_err().message,
            "--port 0: ports are 1 to 65535"
        );
        assert!(port_arg("70000", "PORT").is_err() && port_arg("-1", "PORT").is_err());
        assert_eq!(port_arg("8080", "PORT").unwrap(), 8080);
        let e = parse_timeout("-1m").unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("invalid_argument", "--timeout must not be negative")
        );
    }
}
