//! `fork`, `snapshot`, `ports`, `token`, `volumes` and `update`: the
//! commands that manage a sandbox's copies, reach and settings.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use stockade_sdk::api::{ExposedPort, SnapshotResponse, VolumeResponse};
use stockade_sdk::{Sandbox, Snapshot, UpdateParams};

use crate::cli::{key_value, parse_duration, parse_timeout, Ctx};
use crate::output;

#[derive(Args)]
#[command(after_help = "Examples:
  stockade fork demo --name demo-experiment
  stockade fork demo --json | jq -r .id")]
pub struct ForkArgs {
    /// The sandbox to fork (id or name).
    sandbox: String,
    /// Name of the new sandbox (default: its id).
    #[arg(long, short = 'n')]
    name: Option<String>,
}

pub async fn fork(ctx: &Ctx, a: ForkArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let sb = Sandbox::find(&client, &a.sandbox).await?;
    let pb = output::spinner(&format!("Forking {}", sb.name()), ctx.json);
    let fork = sb.fork(a.name.as_deref()).await;
    pb.finish_and_clear();
    let fork = fork?;
    if ctx.json {
        output::json(fork.info())?;
    } else {
        println!(
            "Forked {} into {} ({}) {}",
            sb.name(),
            fork.name(),
            fork.id(),
            fork.status()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Snapshot a sandbox: its root-filesystem changes and /workspace.
    #[command(after_help = "Examples:
  stockade snapshot create demo --name after-install
  stockade create --name restored --from-snapshot SNAPSHOT_ID")]
    Create {
        /// Sandbox id or name (running or stopped).
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
        /// Only this sandbox's snapshots.
        sandbox: Option<String>,
    },
    /// Show one snapshot.
    #[command(after_help = "Example:
  stockade snapshot get SNAPSHOT_ID")]
    Get {
        /// Snapshot id.
        id: String,
    },
    /// Delete snapshots.
    #[command(
        alias = "delete",
        after_help = "Example:
  stockade snapshot rm SNAPSHOT_ID OTHER_ID"
    )]
    Rm {
        /// Snapshot ids.
        #[arg(required = true)]
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
            let sb = Sandbox::find(&client, &sandbox).await?;
            let pb = output::spinner(&format!("Snapshotting {}", sb.name()), ctx.json);
            let snap = sb.snapshot(name.as_deref()).await;
            pb.finish_and_clear();
            let snap = snap?;
            if ctx.json {
                output::json(snap.info())?;
            } else {
                println!(
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
                );
            }
        }
        SnapshotCommand::Ls { sandbox } => {
            let list = match sandbox {
                Some(name) => Sandbox::find(&client, &name).await?.snapshots().await?,
                None => Snapshot::list(&client).await?,
            };
            let infos: Vec<&SnapshotResponse> = list.iter().map(Snapshot::info).collect();
            if ctx.json {
                output::json(&serde_json::json!({ "snapshots": infos }))?;
            } else if infos.is_empty() {
                println!("No snapshots yet. Take one with `stockade snapshot create SANDBOX`.");
            } else {
                let rows: Vec<Vec<String>> = infos.iter().map(|s| snapshot_row(s)).collect();
                output::table(&SNAPSHOT_HEADER, &rows);
            }
        }
        SnapshotCommand::Get { id } => {
            let snap = Snapshot::get(&client, &id).await?;
            if ctx.json {
                output::json(snap.info())?;
            } else {
                output::table(&SNAPSHOT_HEADER, &[snapshot_row(snap.info())]);
            }
        }
        SnapshotCommand::Rm { ids } => {
            let mut failed = 0;
            let mut results = Vec::new();
            for id in &ids {
                let outcome = match Snapshot::get(&client, id).await {
                    Ok(snap) => snap.delete().await,
                    Err(e) => Err(e),
                };
                match outcome {
                    Ok(gone) => {
                        if !ctx.json {
                            println!("{id}: {}", gone.status);
                        }
                        results.push(serde_json::to_value(&gone)?);
                    }
                    Err(e) => {
                        failed += 1;
                        let e = anyhow::Error::from(e);
                        eprintln!("{id}: error: {}", output::describe(&e));
                        results.push(serde_json::json!({ "id": id, "error": e.to_string() }));
                    }
                }
            }
            if ctx.json {
                output::json(&results)?;
            }
            if failed > 0 {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
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
  stockade ports demo                  # exposed ports and their proxy URLs
  stockade ports demo expose 3000
  stockade ports demo unexpose 3000
  curl -H \"X-Stockade-Token: $(stockade token demo)\" \"$(stockade ports demo expose 3000 --json | jq -r .url)\"

A server in the sandbox must listen on 0.0.0.0:PORT. Requests through the
proxy need a token from `stockade token`.")]
pub struct PortsArgs {
    /// Sandbox id or name.
    sandbox: String,
    /// What to do (default: list).
    #[arg(value_enum, requires = "port")]
    action: Option<PortAction>,
    /// The port (1-65535).
    port: Option<u16>,
}

fn port_rows(ports: &[ExposedPort]) -> Vec<Vec<String>> {
    ports
        .iter()
        .map(|p| {
            vec![
                p.port.to_string(),
                p.url.clone(),
                p.host_url.clone().unwrap_or_default(),
            ]
        })
        .collect()
}

fn print_ports(ports: &[ExposedPort]) {
    if ports.is_empty() {
        println!("No ports exposed. Expose one with `stockade ports SANDBOX expose PORT`.");
        return;
    }
    if ports.iter().any(|p| p.host_url.is_some()) {
        output::table(&["PORT", "URL", "HOST URL"], &port_rows(ports));
    } else {
        let rows: Vec<Vec<String>> = port_rows(ports)
            .into_iter()
            .map(|mut r| {
                r.truncate(2);
                r
            })
            .collect();
        output::table(&["PORT", "URL"], &rows);
    }
}

pub async fn ports(ctx: &Ctx, a: PortsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let sb = Sandbox::find(&client, &a.sandbox).await?;
    match (a.action, a.port) {
        (Some(PortAction::Expose), Some(port)) => {
            let p = sb.expose_port(port).await?;
            if ctx.json {
                output::json(&p)?;
            } else {
                println!("Port {port} of {} is at {}", sb.name(), p.url);
                if let Some(h) = &p.host_url {
                    println!("  and at {h}");
                }
                println!("Requests need a token: `stockade token {}`", sb.name());
            }
        }
        (Some(PortAction::Unexpose), Some(port)) => {
            let left = sb.unexpose_port(port).await?;
            if ctx.json {
                output::json(&serde_json::json!({ "ports": left }))?;
            } else {
                println!("Port {port} of {} is no longer exposed.", sb.name());
            }
        }
        (None, None) => {
            let ports = sb.ports().await?;
            if ctx.json {
                output::json(&serde_json::json!({ "ports": ports }))?;
            } else {
                print_ports(&ports);
            }
        }
        (None, Some(_)) | (Some(_), None) => {
            bail!("say what to do with the port: `stockade ports SANDBOX expose PORT` or `unexpose PORT`")
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
#[command(after_help = "Examples:
  stockade token demo                  # the token alone on stdout, for scripts
  stockade token demo --ttl 10m --json
  curl -H \"X-Stockade-Token: $(stockade token demo)\" http://127.0.0.1:7433/proxy/ID/3000/")]
pub struct TokenArgs {
    /// Sandbox id or name.
    sandbox: String,
    /// Lifetime: 90s, 10m, 24h (a bare number is seconds; default: the server's, 1h).
    #[arg(long)]
    ttl: Option<String>,
}

pub async fn token(ctx: &Ctx, a: TokenArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let ttl = a
        .ttl
        .as_deref()
        .map(|t| parse_duration(t, "--ttl", "s"))
        .transpose()?;
    let sb = Sandbox::find(&client, &a.sandbox).await?;
    let t = sb.auth_token(ttl).await?;
    if ctx.json {
        output::json(&t)?;
    } else {
        println!("{}", t.token);
        if std::io::stderr().is_terminal() {
            eprintln!(
                "(opens the exposed ports of {} until {}; send it as the X-Stockade-Token header)",
                sb.name(),
                t.expires_at.to_rfc3339()
            );
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
  stockade volumes rm agent-sandbox-a1b2c3d4e5f6"
    )]
    Rm {
        /// Volume names (agent-sandbox-ID).
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
                println!("No volumes.");
            } else {
                let rows: Vec<Vec<String>> = list.volumes.iter().map(volume_row).collect();
                output::table(&VOLUME_HEADER, &rows);
                println!("{} volumes, {}", list.total, list.total_size);
            }
        }
        VolumesCommand::Rm { names } => {
            let mut failed = 0;
            let mut results = Vec::new();
            for name in &names {
                match client.remove_volume(name).await {
                    Ok(gone) => {
                        if !ctx.json {
                            println!(
                                "{name}: removed{}",
                                gone.size
                                    .as_deref()
                                    .map(|s| format!(", {s} freed"))
                                    .unwrap_or_default()
                            );
                        }
                        results.push(serde_json::to_value(&gone)?);
                    }
                    Err(e) => {
                        failed += 1;
                        let e = anyhow::Error::from(e);
                        eprintln!("{name}: error: {}", output::describe(&e));
                        results.push(serde_json::json!({ "name": name, "error": e.to_string() }));
                    }
                }
            }
            if ctx.json {
                output::json(&results)?;
            }
            if failed > 0 {
                return Ok(ExitCode::FAILURE);
            }
        }
        VolumesCommand::Prune { yes } => {
            if !yes {
                let orphans = client.orphaned_volumes().await?;
                if orphans.volumes.is_empty() {
                    println!("No orphaned volumes.");
                    return Ok(ExitCode::SUCCESS);
                }
                if ctx.json || !std::io::stdin().is_terminal() {
                    bail!(
                        "{} orphaned volumes ({}) would be removed; pass --yes to remove them",
                        orphans.total,
                        orphans.total_size
                    );
                }
                let rows: Vec<Vec<String>> = orphans.volumes.iter().map(volume_row).collect();
                output::table(&VOLUME_HEADER, &rows);
                print!(
                    "Remove these {} volumes ({})? This cannot be undone. [y/N] ",
                    orphans.total, orphans.total_size
                );
                std::io::stdout().flush()?;
                let mut answer = String::new();
                std::io::stdin().read_line(&mut answer)?;
                if !matches!(answer.trim(), "y" | "Y" | "yes") {
                    println!("Nothing removed.");
                    return Ok(ExitCode::SUCCESS);
                }
            }
            let done = client.prune_volumes(true).await?;
            if ctx.json {
                output::json(&done)?;
            } else {
                for r in &done.removed {
                    println!("removed {}", r.name);
                }
                for f in &done.failed {
                    eprintln!("{}: error: {}", f.name, f.error.message);
                }
                println!(
                    "{} volumes removed, {} freed",
                    done.removed.len(),
                    done.freed
                );
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

CPU and memory change live on a running sandbox; the main process sees new
environment variables from its next start (commands run with exec at once).
--env, --label and --tag add to what the sandbox has; --rm-* take away.")]
pub struct UpdateArgs {
    /// Sandbox id or name.
    sandbox: String,
    /// New name.
    #[arg(long)]
    name: Option<String>,
    /// Session timeout: 90s, 30m, 2h, or minutes (0 = never).
    #[arg(long)]
    timeout: Option<String>,
    /// CPU cores.
    #[arg(long)]
    cpu: Option<f64>,
    /// Memory in GB.
    #[arg(long)]
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
}

pub async fn update(ctx: &Ctx, a: UpdateArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    let mut sb = Sandbox::find(&client, &a.sandbox).await?;
    let mut p = UpdateParams::new();
    p.name = a.name;
    p.cpu_cores = a.cpu;
    p.memory_gb = a.memory;
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
    if !a.tag.is_empty() || !a.rm_tag.is_empty() {
        let mut tags = sb.info().tags.clone();
        for k in &a.rm_tag {
            tags.remove(k);
        }
        for t in &a.tag {
            let (k, v) = key_value(t, "--tag")?;
            tags.insert(k, v);
        }
        p.tags = Some(tags);
    }
    if !a.env.is_empty() || !a.rm_env.is_empty() {
        let mut env = sb.info().environment_vars.clone();
        for k in &a.rm_env {
            env.remove(k);
        }
        for e in &a.env {
            let (k, v) = key_value(e, "--env")?;
            env.insert(k, v);
        }
        p.env = Some(env);
    }
    if p == UpdateParams::default() {
        return Err(anyhow!(
            "nothing to update: give at least one of --name, --timeout, --cpu, --memory, \
             --label, --tag, --env (or their --rm-* forms)"
        ));
    }
    let done = sb.update(p).await?;
    if ctx.json {
        output::json(&done)?;
    } else {
        println!("Updated {} ({})", sb.name(), sb.id());
        if !done.applied.now.is_empty() {
            println!("  now:             {}", done.applied.now.join(", "));
        }
        if !done.applied.next_start.is_empty() {
            println!("  from next start: {}", done.applied.next_start.join(", "));
        }
        for n in &done.notes {
            println!("  note: {n}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
