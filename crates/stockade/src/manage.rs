//! `fork`, `snapshot`, `ports`, `token`, `volumes` and `update`: the
//! commands that manage a sandbox's copies, reach and settings, and the
//! account's API tokens and dashboard sessions (`token create|ls|rm`).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use stockade_sdk::api::{ExposedPort, SnapshotResponse, TokenResponse, VolumeResponse};
use stockade_sdk::{Snapshot, UpdateParams};

use crate::cli::{self, key_value, on, parse_duration, parse_timeout, Batch, Ctx};
use crate::output::{self, CliError};

#[derive(Args)]
#[command(after_help = "Examples:
  stockade fork demo --name demo-experiment
  stockade fork demo --json | jq -r .id")]
pub struct ForkArgs {
    /// The sandbox to fork (id or name).
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// Name of the new sandbox (default: its id).
    #[arg(long, short = 'n')]
    name: Option<String>,
}

pub async fn fork(ctx: &Ctx, a: ForkArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let sb = cli::live_sandbox(&client, &a.sandbox).await?;
    let fork = output::spinning(
        &format!("Forking {}", sb.name()),
        ctx.json,
        sb.fork(a.name.as_deref()),
    )
    .await
    .map_err(on(&a.sandbox))?;
    output::json_or(ctx.json, fork.info(), || {
        format!(
            "Forked {} into {} ({}) {}",
            sb.name(),
            fork.name(),
            fork.id(),
            fork.status()
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Snapshot a sandbox: its root-filesystem changes and /workspace.
    #[command(after_help = "Examples:
  stockade snapshot create demo --name after-install
  stockade create --name restored --from-snapshot after-install")]
    Create {
        /// Sandbox id or name (running or stopped).
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// Name of the snapshot (default: its id).
        #[arg(long, short = 'n')]
        name: Option<String>,
    },
    /// List your snapshots (of one sandbox, if given), newest first.
    #[command(
        alias = "list",
        after_help = "Examples:
  stockade snapshot ls
  stockade snapshot ls demo --json"
    )]
    Ls {
        /// Only this sandbox's snapshots (id or name).
        #[arg(value_name = "SANDBOX")]
        sandbox: Option<String>,
    },
    /// Show one snapshot (by id or name; a name shared by several finds the
    /// newest).
    #[command(after_help = "Examples:
  stockade snapshot get after-install
  stockade snapshot get a1b2c3d4e5f6 --json")]
    Get {
        /// Snapshot id or name.
        #[arg(value_name = "SNAPSHOT")]
        id: String,
    },
    /// Delete snapshots (by id or name; a name shared by several snapshots
    /// is refused: give their ids).
    #[command(
        alias = "delete",
        after_help = "Example:
  stockade snapshot rm after-install a1b2c3d4e5f6"
    )]
    Rm {
        /// Snapshot ids or names.
        #[arg(required = true, value_name = "SNAPSHOT")]
        ids: Vec<String>,
    },
}

fn snapshot_row(s: &SnapshotResponse) -> Vec<String> {
    vec![
        s.id.clone(),
        s.name.clone(),
        s.source_sandbox_id.clone(),
        s.status.clone(),
        s.workspace_size.clone().unwrap_or_default(),
        s.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
    ]
}

const SNAPSHOT_HEADER: [&str; 6] = ["ID", "NAME", "SANDBOX", "STATUS", "WORKSPACE", "CREATED"];

pub async fn snapshot(ctx: &Ctx, cmd: SnapshotCommand) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd {
        SnapshotCommand::Create { sandbox, name } => {
            let sb = cli::live_sandbox(&client, &sandbox).await?;
            let snap = output::spinning(
                &format!("Snapshotting {}", sb.name()),
                ctx.json,
                sb.snapshot(name.as_deref()),
            )
            .await
            .map_err(on(&sandbox))?;
            output::json_or(ctx.json, snap.info(), || {
                format!(
                    "Snapshot {} ({}) of {}: {}{}",
                    snap.name(),
                    snap.id(),
                    sb.name(),
                    snap.info().status,
                    snap.info()
                        .workspace_size
                        .as_deref()
                        .map(|s| format!(", /workspace {s}"))
                        .unwrap_or_default()
                )
            })?;
        }
        SnapshotCommand::Ls { sandbox } => {
            let list = match sandbox {
                Some(name) => cli::sandbox(&client, &name)
                    .await?
                    .snapshots()
                    .await
                    .map_err(on(&name))?,
                None => Snapshot::list(&client).await?,
            };
            let infos: Vec<&SnapshotResponse> = list.iter().map(Snapshot::info).collect();
            if ctx.json {
                output::json(&serde_json::json!({ "snapshots": infos }))?;
            } else if infos.is_empty() {
                outln!("No snapshots yet. Take one with `stockade snapshot create SANDBOX`.")?;
            } else {
                let rows: Vec<Vec<String>> = infos.iter().map(|s| snapshot_row(s)).collect();
                output::table(&SNAPSHOT_HEADER, &rows)?;
            }
        }
        SnapshotCommand::Get { id } => {
            let snap = cli::snapshot(&client, &id).await?;
            if ctx.json {
                output::json(snap.info())?;
            } else {
                output::table(&SNAPSHOT_HEADER, &[snapshot_row(snap.info())])?;
            }
        }
        SnapshotCommand::Rm { ids } => {
            let mut batch = Batch::new(ctx.json);
            for id in &ids {
                match remove_snapshot(&client, id).await {
                    Ok(gone) => {
                        let line = format!("{id}: {}", gone.status);
                        batch.ok(serde_json::to_value(&gone)?, &line)?;
                    }
                    Err(e) => batch.failed(id, e)?,
                }
            }
            return batch.finish();
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes the snapshot `arg` names; a name several snapshots share is
/// refused rather than guessed.
async fn remove_snapshot(
    client: &stockade_sdk::Client,
    arg: &str,
) -> anyhow::Result<SnapshotResponse> {
    let by_id = Snapshot::get(client, arg).await;
    let snap = match by_id {
        Ok(s) => s,
        Err(e) if e.is_not_found() || e.status() == Some(400) => {
            let mut named = Snapshot::named(client, arg).await?;
            match named.len() {
                0 => return Err(cli::snapshot_not_found(arg).into()),
                1 => named.remove(0),
                n => {
                    let ids: Vec<&str> = named.iter().map(Snapshot::id).collect();
                    return Err(CliError::new(
                        "ambiguous_name",
                        format!(
                            "{n} snapshots are named `{arg}` ({}) — remove them by id",
                            ids.join(", ")
                        ),
                    )
                    .into());
                }
            }
        }
        Err(e) => return Err(output::sdk_error(&e, None).into()),
    };
    Ok(snap
        .delete()
        .await
        .map_err(|e| output::sdk_error(&e, None))?)
}

#[derive(Clone, Copy, ValueEnum)]
pub enum PortAction {
    /// Expose PORT through the proxy.
    Expose,
    /// Stop exposing PORT.
    Unexpose,
}

#[derive(Args)]
#[command(after_help = "Examples:
  stockade ports demo                  # exposed ports and URLs that open as printed
  stockade ports demo expose 3000
  stockade ports demo unexpose 3000
  stockade ports demo --ttl 10m        # URLs that open for ten minutes
  curl \"$(stockade ports demo expose 3000 --json | jq -r .url)\"

A server in the sandbox must listen on 0.0.0.0:PORT. The URLs carry a
short-lived token (`?stockade_token=…`, valid until the time printed with
them): a browser opens them as they are and keeps a cookie for the port.
`stockade token SANDBOX` prints a token alone, for the X-Stockade-Token
header.")]
pub struct PortsArgs {
    /// Sandbox id or name.
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// What to do (default: list).
    #[arg(value_enum, requires = "port")]
    action: Option<PortAction>,
    /// The port (1-65535).
    #[arg(value_name = "PORT", allow_negative_numbers = true)]
    port: Option<String>,
    /// How long the token in the URLs opens them: 90s, 10m, 1h30m (a bare
    /// number is seconds; default: the server's, 1h).
    #[arg(long)]
    ttl: Option<String>,
}

/// `value` with `key=value` added to its query, the value percent-encoded.
fn with_query(url: &str, key: &str, value: &str) -> String {
    let mut encoded = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    let (base, fragment) = match url.split_once('#') {
        Some((b, f)) => (b, format!("#{f}")),
        None => (url, String::new()),
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}{key}={encoded}{fragment}")
}

/// The ports with a token for them in every URL, so that each opens as it
/// is printed (the proxy takes the token once and answers with a cookie).
fn openable(ports: &[ExposedPort], token: &str) -> Vec<ExposedPort> {
    ports
        .iter()
        .map(|p| ExposedPort {
            url: with_query(&p.url, "stockade_token", token),
            host_url: p
                .host_url
                .as_deref()
                .map(|h| with_query(h, "stockade_token", token)),
            ..p.clone()
        })
        .collect()
}

/// Until when a token is valid, as people read it: `until 2030-01-01 10:00:00 UTC (1h)`.
fn valid_until(expires_at: chrono::DateTime<chrono::Utc>) -> String {
    let left = (expires_at - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    format!(
        "until {} ({} from now)",
        expires_at.format("%Y-%m-%d %H:%M:%S UTC"),
        output::duration(left)
    )
}

/// One port a line with its URL, and the host form of the URL under it
/// (too long for a column of its own once a token is in it).
fn print_ports(ports: &[ExposedPort], name: &str) -> std::io::Result<()> {
    if ports.is_empty() {
        return outln!("No ports exposed. Expose one with `stockade ports {name} expose PORT`.");
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    for p in ports {
        rows.push(vec![p.port.to_string(), p.url.clone()]);
        if let Some(h) = &p.host_url {
            rows.push(vec![String::new(), h.clone()]);
        }
    }
    output::table(&["PORT", "URL"], &rows)
}

pub async fn ports(ctx: &Ctx, a: PortsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let port = a
        .port
        .as_deref()
        .map(|p| cli::port_arg(p, "PORT"))
        .transpose()?;
    let ttl = a
        .ttl
        .as_deref()
        .map(|t| parse_duration(t, "--ttl", "s"))
        .transpose()?;
    let sb = cli::live_sandbox(&client, &a.sandbox).await?;
    let on = on(&a.sandbox);
    match (a.action, port) {
        (Some(PortAction::Expose), Some(port)) => {
            let p = sb.expose_port(port).await.map_err(&on)?;
            let t = sb.auth_token(ttl).await.map_err(&on)?;
            let p = openable(std::slice::from_ref(&p), &t.token).remove(0);
            if ctx.json {
                let mut v = serde_json::to_value(&p)?;
                v["expiresAt"] = serde_json::to_value(t.expires_at)?;
                output::json(&v)?;
            } else {
                outln!("Port {port} of {} is at {}", sb.name(), p.url)?;
                if let Some(h) = &p.host_url {
                    outln!("  and at {h}")?;
                }
                outln!(
                    "The token in the URL opens it {}; then `stockade ports {}` prints a new one.",
                    valid_until(t.expires_at),
                    sb.name()
                )?;
            }
        }
        (Some(PortAction::Unexpose), Some(port)) => {
            let left = sb.unexpose_port(port).await.map_err(&on)?;
            output::json_or(ctx.json, &serde_json::json!({ "ports": left }), || {
                format!("Port {port} of {} is no longer exposed.", sb.name())
            })?;
        }
        (None, None) => {
            let ports = sb.ports().await.map_err(&on)?;
            // A token only when there is a URL to put it in.
            let token = match ports.is_empty() {
                true => None,
                false => Some(sb.auth_token(ttl).await.map_err(&on)?),
            };
            let shown = match &token {
                Some(t) => openable(&ports, &t.token),
                None => ports,
            };
            if ctx.json {
                let mut v = serde_json::json!({ "ports": shown });
                if let Some(t) = &token {
                    v["expiresAt"] = serde_json::to_value(t.expires_at)?;
                }
                output::json(&v)?;
            } else {
                print_ports(&shown, sb.name())?;
                if let Some(t) = &token {
                    outln!(
                        "The token in these URLs opens them {}; run this again for a new one.",
                        valid_until(t.expires_at)
                    )?;
                }
            }
        }
        (None, Some(_)) | (Some(_), None) => return Err(CliError::invalid(
            "say what to do with the port: `stockade ports SANDBOX expose PORT` or `unexpose PORT`",
        )
        .into()),
    }
    Ok(ExitCode::SUCCESS)
}

/// `stockade token`: the account's API tokens and dashboard sessions
/// (`create`, `ls`, `rm`), or with a sandbox a token that opens its exposed
/// ports. A word that names a subcommand is the subcommand; a sandbox
/// named like one is reached by its id.
#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:
  stockade token create ci --expires 30d       # the secret alone on stdout, shown only now
  stockade token ls
  stockade token rm a1b2c3d4e5f6
  stockade token demo                          # a token for sandbox demo's exposed ports
  stockade token demo --ttl 10m --json
  curl -H \"X-Stockade-Token: $(stockade token demo)\" http://127.0.0.1:7433/proxy/ID/3000/"
)]
pub struct TokenArgs {
    #[command(subcommand)]
    command: Option<TokenCommand>,
    /// Sandbox id or name: print a token that opens its exposed ports.
    #[arg(value_name = "SANDBOX", required = true)]
    sandbox: Option<String>,
    /// With SANDBOX, the token's lifetime: 90s, 10m, 1h30m (a bare number is
    /// seconds; default: the server's, 1h).
    #[arg(long)]
    ttl: Option<String>,
}

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Make an API token and print its secret, shown only this once.
    #[command(after_help = "Examples:
  stockade token create laptop
  export STOCKADE_TOKEN=$(stockade token create ci --expires 90d)
  stockade token create deploy --account alice --expires 12h    # administrators
  stockade token create ci --json | jq -r .token")]
    Create {
        /// What the token is for (1 to 64 characters), e.g. ci or laptop.
        name: String,
        /// Lifetime: 12h, 30d, 1d12h (a bare number is days; from a minute
        /// to ten years). Default: until it is revoked.
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
        /// The account, by name or id (default: your own; another needs an
        /// administrator).
        #[arg(long)]
        account: Option<String>,
    },
    /// List the API tokens and dashboard sessions of your account (or
    /// another's, for administrators), newest first; never their secrets.
    #[command(
        alias = "list",
        after_help = "Examples:
  stockade token ls
  stockade token ls --account alice --json"
    )]
    Ls {
        /// The account, by name or id (default: your own).
        #[arg(long)]
        account: Option<String>,
    },
    /// Revoke API tokens (and the dashboard sessions opened with them) or
    /// end sessions, by id: refused from the next request on.
    #[command(
        alias = "revoke",
        alias = "delete",
        after_help = "Example:
  stockade token rm a1b2c3d4e5f6"
    )]
    Rm {
        /// Token ids (from `stockade token ls`, never the secret).
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
}

pub async fn token(ctx: &Ctx, a: TokenArgs) -> anyhow::Result<ExitCode> {
    match (a.command, a.sandbox) {
        (Some(cmd), _) => api_tokens(ctx, cmd).await,
        (None, Some(sandbox)) => sandbox_token(ctx, &sandbox, a.ttl.as_deref()).await,
        (None, None) => Err(CliError::invalid(
            "name a sandbox (`stockade token SANDBOX`) or say what to do with API tokens: `stockade token create NAME`, `ls` or `rm ID`",
        )
        .into()),
    }
}

/// A token that opens a sandbox's exposed ports, alone on stdout.
async fn sandbox_token(ctx: &Ctx, sandbox: &str, ttl: Option<&str>) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let ttl = ttl.map(|t| parse_duration(t, "--ttl", "s")).transpose()?;
    let sb = match cli::live_sandbox(&client, sandbox).await {
        Ok(sb) => sb,
        Err(e) => {
            // `stockade token lss`: most likely a subcommand mistyped.
            let near = output::nearest(sandbox, &["create", "ls", "rm"]);
            return match (e.downcast::<CliError>(), near) {
                (Ok(c), Some(sub)) if c.code == "not_found" => Err(c
                    .hint(format!("to manage API tokens: `stockade token {sub}`"))
                    .into()),
                (Ok(c), _) => Err(c.into()),
                (Err(e), _) => Err(e),
            };
        }
    };
    let t = sb.auth_token(ttl).await.map_err(on(sandbox))?;
    if ctx.json {
        output::json(&t)?;
    } else {
        outln!("{}", t.token)?;
        if std::io::stderr().is_terminal() {
            let left = (t.expires_at - chrono::Utc::now())
                .to_std()
                .unwrap_or_default();
            errln!(
                "(opens the exposed ports of {} for {}, until {}; send it as the X-Stockade-Token header)",
                sb.name(),
                output::duration(left),
                t.expires_at.to_rfc3339()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The account `--account` names (id and name), else the caller's own.
async fn token_account(
    client: &stockade_sdk::Client,
    account: Option<&str>,
) -> anyhow::Result<(String, String)> {
    match account {
        Some(arg) => cli::account_named(client, arg).await,
        None => {
            let me = client.whoami().await?;
            Ok((me.account.id, me.account.name))
        }
    }
}

/// A token's name as the server takes it, checked before any request.
fn token_name(name: &str) -> Result<&str, CliError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 64 {
        return Err(CliError::invalid("NAME: must be 1 to 64 characters"));
    }
    if name.chars().any(char::is_control) {
        return Err(CliError::invalid(
            "NAME: must not contain control characters",
        ));
    }
    Ok(name)
}

fn token_row(t: &TokenResponse, now: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    let expires = match t.expires_at {
        None => "never".to_owned(),
        Some(at) if at <= now => "expired".to_owned(),
        Some(at) => format!("in {}", output::rough_duration(at - now)),
    };
    let last_used = match t.last_used_at {
        None => "never".to_owned(),
        Some(at) => output::ago(now - at),
    };
    vec![
        t.id.clone(),
        t.name.clone(),
        t.kind.clone(),
        output::ago(now - t.created_at),
        expires,
        last_used,
    ]
}

async fn api_tokens(ctx: &Ctx, cmd: TokenCommand) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd {
        TokenCommand::Create {
            name,
            expires,
            account,
        } => {
            let name = token_name(&name)?;
            let expires = expires
                .as_deref()
                .map(|e| parse_duration(e, "--expires", "d"))
                .transpose()?;
            let (id, account_name) = token_account(&client, account.as_deref()).await?;
            let made = client.create_token(&id, name, expires).await?;
            if ctx.json {
                output::json(&made)?;
            } else {
                // The secret alone on stdout, for `$(…)`; what it is on stderr.
                outln!("{}", made.token)?;
                let lifetime = match made.expires_at {
                    Some(at) => format!(
                        "expires in {} ({})",
                        output::rough_duration(at - made.created_at),
                        at.to_rfc3339()
                    ),
                    None => "does not expire; revoke it with `stockade token rm` when done".into(),
                };
                errln!(
                    "Created API token {} ({}) of account {account_name}; it {lifetime}.",
                    made.name,
                    made.id
                );
                errln!(
                    "The token is shown only now: copy it somewhere safe, it cannot be shown again."
                );
            }
        }
        TokenCommand::Ls { account } => {
            let (id, account_name) = token_account(&client, account.as_deref()).await?;
            let list = client.list_tokens(&id).await?;
            if ctx.json {
                output::json(&list)?;
            } else if list.tokens.is_empty() {
                outln!(
                    "Account {account_name} has no tokens. Make one with `stockade token create NAME`."
                )?;
            } else {
                let now = chrono::Utc::now();
                let rows: Vec<Vec<String>> =
                    list.tokens.iter().map(|t| token_row(t, now)).collect();
                output::table(
                    &["ID", "NAME", "KIND", "CREATED", "EXPIRES", "LAST USED"],
                    &rows,
                )?;
            }
        }
        TokenCommand::Rm { ids } => {
            let mut batch = Batch::new(ctx.json);
            for id in &ids {
                match client.revoke_token(id).await {
                    Ok(()) => batch.ok(
                        serde_json::json!({ "id": id, "revoked": true }),
                        &format!("{id}: revoked"),
                    )?,
                    Err(e) => batch.failed(id, e.into())?,
                }
            }
            return batch.finish();
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand)]
pub enum VolumesCommand {
    /// List volumes with their sizes (the default).
    #[command(
        alias = "list",
        after_help = "Examples:
  stockade volumes ls
  stockade volumes ls --orphaned --json"
    )]
    Ls {
        /// Only volumes no live sandbox owns.
        #[arg(long)]
        orphaned: bool,
    },
    /// Remove orphaned volumes by name.
    #[command(
        alias = "delete",
        after_help = "Example:
  stockade volumes rm agent-sandbox-a1b2c3d4e5f6
  stockade volumes rm demo        # the volume `rm --keep-volume demo` left"
    )]
    Rm {
        /// Volume names (agent-sandbox-ID), or sandboxes (id or name) whose
        /// volume to remove.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Remove every orphaned volume.
    #[command(after_help = "Examples:
  stockade volumes prune          # lists them and asks
  stockade volumes prune --yes    # no questions (for scripts)")]
    Prune {
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// The volume an argument of `volumes rm` names: a volume name as it is,
/// else the volume of the sandbox with that id or name (a terminated one
/// too: `rm --keep-volume` leaves its volume behind).
async fn volume_of(client: &stockade_sdk::Client, arg: &str) -> String {
    if arg.starts_with("agent-sandbox-") {
        return arg.to_owned();
    }
    match cli::sandbox(client, arg).await {
        Ok(sb) => sb.info().volume.name.clone(),
        Err(_) => arg.to_owned(),
    }
}

fn volume_row(v: &VolumeResponse) -> Vec<String> {
    vec![
        v.name.clone(),
        v.sandbox_status.clone().unwrap_or_else(|| "-".into()),
        v.size.clone().unwrap_or_else(|| "?".into()),
        if v.in_use { "yes" } else { "" }.into(),
        if v.orphaned { "yes" } else { "" }.into(),
        v.created_at
            .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_default(),
    ]
}

const VOLUME_HEADER: [&str; 6] = ["NAME", "SANDBOX", "SIZE", "IN USE", "ORPHANED", "CREATED"];

pub async fn volumes(ctx: &Ctx, cmd: Option<VolumesCommand>) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd.unwrap_or(VolumesCommand::Ls { orphaned: false }) {
        VolumesCommand::Ls { orphaned } => {
            let list = if orphaned {
                client.orphaned_volumes().await?
            } else {
                client.volumes().await?
            };
            if ctx.json {
                output::json(&list)?;
            } else if list.volumes.is_empty() {
                outln!("No volumes.")?;
            } else {
                let rows: Vec<Vec<String>> = list.volumes.iter().map(volume_row).collect();
                output::table(&VOLUME_HEADER, &rows)?;
                outln!(
                    "{}, {}",
                    output::count(list.total, "volume", "volumes"),
                    list.total_size
                )?;
            }
        }
        VolumesCommand::Rm { names } => {
            let mut batch = Batch::new(ctx.json);
            for name in &names {
                let volume = volume_of(&client, name).await;
                match client.remove_volume(&volume).await {
                    Ok(gone) => {
                        let line = format!(
                            "{volume}: removed{}",
                            gone.size
                                .as_deref()
                                .map(|s| format!(", {s} freed"))
                                .unwrap_or_default()
                        );
                        batch.ok(serde_json::to_value(&gone)?, &line)?;
                    }
                    Err(e) => batch.failed(name, output::sdk_error(&e, None).into())?,
                }
            }
            return batch.finish();
        }
        VolumesCommand::Prune { yes } => {
            if !yes {
                let orphans = client.orphaned_volumes().await?;
                if orphans.volumes.is_empty() {
                    outln!("No orphaned volumes.")?;
                    return Ok(ExitCode::SUCCESS);
                }
                let what = format!(
                    "{} ({})",
                    output::count(orphans.total, "orphaned volume", "orphaned volumes"),
                    orphans.total_size
                );
                if ctx.json || !std::io::stdin().is_terminal() {
                    return Err(CliError::new(
                        "confirmation_needed",
                        format!("{what} would be removed; pass --yes to remove them"),
                    )
                    .into());
                }
                let rows: Vec<Vec<String>> = orphans.volumes.iter().map(volume_row).collect();
                output::table(&VOLUME_HEADER, &rows)?;
                output::write_stdout(format_args!(
                    "Remove these {what}? This cannot be undone. [y/N] "
                ))?;
                let mut answer = String::new();
                std::io::stdin().read_line(&mut answer)?;
                if !matches!(answer.trim(), "y" | "Y" | "yes") {
                    outln!("Nothing removed.")?;
                    return Ok(ExitCode::SUCCESS);
                }
            }
            let done = client.prune_volumes(true).await?;
            if ctx.json {
                output::json(&done)?;
            } else {
                for r in &done.removed {
                    outln!("removed {}", r.name)?;
                }
                for f in &done.failed {
                    errln!(
                        "{}: error: {}",
                        f.name,
                        output::cli_words(&f.error.message, None)
                    );
                }
                outln!(
                    "{} removed, {} freed",
                    output::count(done.removed.len() as u64, "volume", "volumes"),
                    done.freed
                )?;
            }
            if !done.failed.is_empty() {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
#[command(after_help = "Examples:
  stockade update demo --timeout 2h --cpu 2 --memory 4
  stockade update demo --env DEBUG=1 --rm-env OLD_FLAG
  stockade update demo --label ci --rm-label wip --tag owner=alice
  stockade update demo --name demo-2 --json
  stockade update demo --allow pypi.org --allow '*.pythonhosted.org'
  stockade update demo --allow-all

CPU and memory change live on a running sandbox; the main process sees new
environment variables from its next start (commands run with exec at once).
--env, --label and --tag add to what the sandbox has; --rm-* take away.
--allow and --deny set a new egress policy, replacing the sandbox's whole
(live, within a second); --allow-all and --no-network set the two others.")]
pub struct UpdateArgs {
    /// Sandbox id or name.
    #[arg(value_name = "SANDBOX")]
    sandbox: String,
    /// New name.
    #[arg(long)]
    name: Option<String>,
    /// Session timeout: 90s, 30m, 1h30m, or minutes (0 = never).
    #[arg(long)]
    timeout: Option<String>,
    /// CPU cores.
    #[arg(long, allow_negative_numbers = true)]
    cpu: Option<f64>,
    /// Memory in GB.
    #[arg(long, allow_negative_numbers = true)]
    memory: Option<f64>,
    /// Add a label (repeatable).
    #[arg(long, short = 'l')]
    label: Vec<String>,
    /// Remove a label (repeatable).
    #[arg(long)]
    rm_label: Vec<String>,
    /// Set a tag KEY=VALUE (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    tag: Vec<String>,
    /// Remove a tag (repeatable).
    #[arg(long, value_name = "KEY")]
    rm_tag: Vec<String>,
    /// Set an environment variable KEY=VALUE (repeatable).
    #[arg(long, short = 'e', value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Remove an environment variable (repeatable).
    #[arg(long, value_name = "KEY")]
    rm_env: Vec<String>,
    /// Egress allowed only to ENTRY (repeatable): an address or CIDR, a
    /// name or `*.name`, each with an optional `:PORT`. With --deny, the
    /// new egress policy, replacing the sandbox's whole.
    #[arg(long, value_name = "ENTRY", conflicts_with_all = ["no_network", "allow_all"])]
    allow: Vec<String>,
    /// Egress denied to ENTRY (repeatable, same forms as --allow).
    #[arg(long, value_name = "ENTRY", conflicts_with_all = ["no_network", "allow_all"])]
    deny: Vec<String>,
    /// Cut all network access.
    #[arg(long, conflicts_with = "allow_all")]
    no_network: bool,
    /// Lift the egress policy: everything is reachable again.
    #[arg(long)]
    allow_all: bool,
}

/// `current` without the `remove` keys and with the KEY=VALUE pairs of
/// `set` (given with `flag`); `None` when neither names anything.
fn edited_map(
    current: &BTreeMap<String, String>,
    remove: &[String],
    set: &[String],
    flag: &str,
) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    if remove.is_empty() && set.is_empty() {
        return Ok(None);
    }
    let mut map = current.clone();
    for k in remove {
        map.remove(k);
    }
    for pair in set {
        let (k, v) = key_value(pair, flag)?;
        map.insert(k, v);
    }
    Ok(Some(map))
}

pub async fn update(ctx: &Ctx, a: UpdateArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let mut p = UpdateParams::new();
    p.cpu_cores = cli::positive(a.cpu, "--cpu", "number of CPU cores")?;
    p.memory_gb = cli::positive(a.memory, "--memory", "number of GB")?;
    let mut sb = cli::live_sandbox(&client, &a.sandbox).await?;
    p.name = a.name;
    if let Some(t) = a.timeout {
        p.timeout = Some(parse_timeout(&t)?);
    }
    if !a.label.is_empty() || !a.rm_label.is_empty() {
        let mut labels = sb.info().labels.clone();
        labels.retain(|l| !a.rm_label.contains(l));
        for l in a.label {
            if !labels.contains(&l) {
                labels.push(l);
            }
        }
        p.labels = Some(labels);
    }
    p.tags = edited_map(&sb.info().tags, &a.rm_tag, &a.tag, "--tag")?;
    p.env = edited_map(&sb.info().environment_vars, &a.rm_env, &a.env, "--env")?;
    p.network_policy = cli::egress(a.no_network, a.allow_all, &a.allow, &a.deny)?;
    if p == UpdateParams::default() {
        return Err(CliError::invalid(
            "nothing to update: give at least one of --name, --timeout, --cpu, --memory, \
             --label, --tag, --env (or their --rm-* forms), --allow, --deny, --no-network, \
             --allow-all",
        )
        .into());
    }
    let done = sb.update(p).await.map_err(on(&a.sandbox))?;
    if ctx.json {
        output::json(&done)?;
    } else {
        outln!("Updated {} ({})", sb.name(), sb.id())?;
        if !done.applied.now.is_empty() {
            outln!("  now:             {}", done.applied.now.join(", "))?;
        }
        if !done.applied.next_start.is_empty() {
            outln!("  from next start: {}", done.applied.next_start.join(", "))?;
        }
        for n in &done.notes {
            outln!("  note: {n}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
