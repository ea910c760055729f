//! The client commands: each parses its flags, calls the SDK and prints.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::{Args, Subcommand};
use stockade_sdk::{
    Client, CreateParams, DeleteOptions, ListParams, NetworkPolicy, Sandbox, Source,
};

use crate::output;

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
            .ok_or_else(|| anyhow!("no API token: pass --token or set STOCKADE_TOKEN"))?;
        Ok(Client::new(&self.url, token)?)
    }
}

#[derive(Args)]
pub struct CreateArgs {
    /// Name, unique among your sandboxes (default: the id).
    #[arg(long, short = 'n')]
    name: Option<String>,
    /// Docker image (default: the server's, node:20-bookworm).
    #[arg(long, short = 'i')]
    image: Option<String>,
    /// Runtime preset instead of an image: node22, python3.13, …
    #[arg(long)]
    runtime: Option<String>,
    /// CPU cores.
    #[arg(long)]
    cpu: Option<f64>,
    /// Memory in GB.
    #[arg(long)]
    memory: Option<f64>,
    /// vCPUs, with 2 GB of memory each (instead of --cpu/--memory).
    #[arg(long, conflicts_with_all = ["cpu", "memory"])]
    vcpus: Option<f64>,
    /// Disk size in GB.
    #[arg(long)]
    disk: Option<u32>,
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
    #[arg(long, short = 'p')]
    port: Vec<u16>,
    /// Session timeout: 90s, 30m, 2h, or minutes (0 = never).
    #[arg(long)]
    timeout: Option<String>,
    /// No network access at all.
    #[arg(long)]
    no_network: bool,
    /// Main process (a shell command line; default: keep-alive).
    #[arg(long)]
    start_command: Option<String>,
    /// Terminate (not just stop) the sandbox when its session times out.
    #[arg(long)]
    ephemeral: bool,
    /// Share with one of your teams.
    #[arg(long)]
    team: Option<String>,
    /// Makes a retried create return the first result.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Start /workspace (and the root filesystem) from one of your snapshots.
    #[arg(long, value_name = "SNAPSHOT_ID", group = "source")]
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
}

pub fn key_value(s: &str, flag: &str) -> anyhow::Result<(String, String)> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| anyhow!("{flag} expects KEY=VALUE, got '{s}'"))
}

/// Parses `90s`, `30m`, `2h` or a number of minutes.
pub fn parse_timeout(s: &str) -> anyhow::Result<Duration> {
    parse_duration(s, "--timeout", "m")
}

/// Parses `90s`, `30m`, `2h`, or a bare number in `default_unit`.
pub fn parse_duration(s: &str, flag: &str, default_unit: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, default_unit),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow!("{flag}: '{s}' is not a duration like 90s, 30m or 2h"))?;
    let secs = match unit {
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(anyhow!("{flag}: unknown unit '{unit}' (use s, m or h)")),
    };
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(anyhow!("{flag} must not be negative"));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub async fn create(ctx: &Ctx, a: CreateArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let mut p = CreateParams::new();
    p.name = a.name;
    p.image = a.image;
    p.runtime = a.runtime;
    p.cpu_cores = a.cpu;
    p.memory_gb = a.memory;
    p.vcpus = a.vcpus;
    p.disk_size_gb = a.disk;
    p.start_command = a.start_command;
    p.ports = a.port;
    p.labels = a.label;
    p.team_id = a.team;
    p.idempotency_key = a.idempotency_key;
    if a.no_network {
        p.network_policy = Some(NetworkPolicy::DenyAll);
    }
    if a.ephemeral {
        p.persistent = Some(false);
    }
    if let Some(t) = a.timeout {
        p.timeout = Some(parse_timeout(&t)?);
    }
    for e in &a.env {
        let (k, v) = key_value(e, "--env")?;
        p.env.insert(k, v);
    }
    for t in &a.tag {
        let (k, v) = key_value(t, "--tag")?;
        p.tags.insert(k, v);
    }
    if let Some(id) = a.from_snapshot {
        p.source = Some(Source::Snapshot { id });
    } else if let Some(url) = a.git {
        p.source = Some(Source::Git {
            url,
            git_ref: a.git_ref,
        });
    } else if let Some(url) = a.tarball {
        p.source = Some(Source::Tarball { url });
    } else if let Some(path) = a.upload {
        let up = crate::copy::upload_source(&client, &path, ctx.json).await?;
        p.source = Some(Source::Upload { id: up.upload_id });
    }
    let pb = output::spinner("Creating sandbox (pulling the image if needed)", ctx.json);
    let result = Sandbox::create(&client, p).await;
    pb.finish_and_clear();
    let sb = result?;
    if ctx.json {
        output::json(sb.info())?;
    } else {
        let i = sb.info();
        println!(
            "Created sandbox {} ({}) {} — {}",
            i.name, i.id, i.status, i.docker_image
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct ListArgs {
    /// Only these statuses (running, stopped, …; repeatable).
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
    } else if page.sandboxes.is_empty() {
        println!("No sandboxes yet. Create one with `stockade create --name demo`.");
    } else {
        let rows: Vec<Vec<String>> = page
            .sandboxes
            .iter()
            .map(|s| output::sandbox_row(s.info()))
            .collect();
        output::table(&output::SANDBOX_HEADER, &rows);
        if page.has_next {
            println!(
                "… {} in all; next page: --page {}",
                page.total,
                page.page + 1
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn get(ctx: &Ctx, sandbox: &str) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let sb = Sandbox::find(&client, sandbox).await?;
    if ctx.json {
        output::json(sb.info())?;
    } else {
        output::sandbox_details(sb.info());
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `op` on each sandbox, reporting each; fails if any failed.
async fn each<F, Fut>(
    ctx: &Ctx,
    sandboxes: &[String],
    verb: &str,
    op: F,
) -> anyhow::Result<ExitCode>
where
    F: Fn(Sandbox) -> Fut,
    Fut: std::future::Future<Output = Result<serde_json::Value, stockade_sdk::Error>>,
{
    let client = ctx.client()?;
    let mut failed = 0;
    let mut results = Vec::new();
    for name in sandboxes {
        let pb = output::spinner(&format!("{verb} {name}"), ctx.json);
        let outcome = match Sandbox::find(&client, name).await {
            Ok(sb) => op(sb).await,
            Err(e) => Err(e),
        };
        pb.finish_and_clear();
        match outcome {
            Ok(v) => {
                if !ctx.json {
                    println!("{name}: {}", v["status"].as_str().unwrap_or("done"));
                }
                results.push(v);
            }
            Err(e) => {
                failed += 1;
                let e = anyhow::Error::from(e);
                eprintln!("{name}: error: {}", output::describe(&e));
                results.push(serde_json::json!({ "sandbox": name, "error": e.to_string() }));
            }
        }
    }
    if ctx.json {
        output::json(&results)?;
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn to_value(sb: &Sandbox) -> serde_json::Value {
    serde_json::to_value(sb.info()).unwrap_or_default()
}

pub async fn start(ctx: &Ctx, sandboxes: &[String]) -> anyhow::Result<ExitCode> {
    each(ctx, sandboxes, "Starting", |mut sb| async move {
        sb.start().await?;
        Ok(to_value(&sb))
    })
    .await
}

pub async fn stop(
    ctx: &Ctx,
    sandboxes: &[String],
    timeout: Option<u64>,
) -> anyhow::Result<ExitCode> {
    each(ctx, sandboxes, "Stopping", |sb| async move {
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
}

pub async fn account(ctx: &Ctx, cmd: AccountCommand) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd {
        AccountCommand::Create { name, admin } => {
            let resp = client.create_account(&name, admin).await?;
            if ctx.json {
                output::json(&resp)?;
            } else {
                println!(
                    "Created account {} ({})",
                    resp.account.name, resp.account.id
                );
                println!("API token (shown once): {}", resp.token);
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
                        ]
                    })
                    .collect();
                output::table(&["ID", "NAME", "ADMIN", "CREATED"], &rows);
            }
        }
        AccountCommand::Whoami => {
            let me = client.whoami().await?;
            if ctx.json {
                output::json(&me)?;
            } else {
                println!(
                    "{} ({}){}",
                    me.account.name,
                    me.account.id,
                    if me.account.is_admin {
                        ", administrator"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn health(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let client = match ctx.token.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => Client::new(&ctx.url, t)?,
        None => Client::anonymous(&ctx.url)?,
    };
    let h = client.health().await.context("health check failed")?;
    if ctx.json {
        output::json(&h)?;
    } else {
        println!("status:   {}", h.status);
        match (&h.docker.version, &h.docker.api_version) {
            (Some(v), Some(a)) => println!("docker:   {} (Docker {v}, API {a})", h.docker.status),
            _ => println!("docker:   {}", h.docker.status),
        }
        if let Some(e) = &h.docker.error {
            println!("  error:  {e}");
        }
        for t in &h.docker.troubleshooting {
            println!("  - {t}");
        }
        println!("database: {} ({})", h.database.status, h.database.backend);
        if let Some(e) = &h.database.error {
            println!("  error:  {e}");
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
        assert!(parse_timeout("soon").is_err());
        assert!(parse_timeout("5d").is_err());
        assert!(parse_timeout("-1m").is_err());
    }
}
