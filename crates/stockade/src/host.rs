//! `stockade host …`: administrators register the Docker hosts sandboxes
//! are placed on, list them with their health and load, cordon, uncordon
//! and drain them, and remove empty ones.

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use stockade_sdk::api::{
    CreateHostRequest, HostCapacityInput, HostResponse, HostTlsFiles, UpdateHostRequest,
};

use crate::cli::{key_value, Ctx};
use crate::output::{self, CliError};

// The one host a command is about.
#[derive(Args)]
pub struct HostName {
    #[arg(value_name = "HOST")]
    name: String,
}

// The host that `cordon` or `drain` takes out of placement, and why.
#[derive(Args)]
pub struct Withdraw {
    #[arg(value_name = "HOST")]
    name: String,
    /// Why (shown with the host).
    #[arg(long)]
    reason: Option<String>,
}

#[derive(Subcommand)]
pub enum HostCommand {
    /// Register a Docker host: `unix:///path/docker.sock`, `tcp://host:port`
    /// (with --tls-ca/--tls-cert/--tls-key) or `ssh://[user@]host[:port]`.
    /// The server connects to it first. TLS files are paths on the server's
    /// machine.
    #[command(after_help = "Examples:
  stockade host add docker-2 ssh://root@10.0.0.12 --label zone=eu-1
  stockade host add docker-3 tcp://10.0.0.13:2376 --tls-ca /etc/stockade/ca.pem \\
      --tls-cert /etc/stockade/cert.pem --tls-key /etc/stockade/key.pem --address 10.0.0.13
  stockade host add big unix:///var/run/docker.sock --cpus 16 --memory 64")]
    Add {
        /// 1 to 32 lowercase letters, digits and -.
        #[arg(value_name = "NAME")]
        name: String,
        /// unix:///path, tcp://host:port or ssh://[user@]host[:port].
        #[arg(value_name = "DOCKER_HOST")]
        docker_host: String,
        /// A label a create may select the host by (repeatable).
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// The CA certificate of a tcp:// host's TLS (on the server's machine).
        #[arg(long, value_name = "FILE")]
        tls_ca: Option<String>,
        /// The client certificate of a tcp:// host's TLS.
        #[arg(long, value_name = "FILE")]
        tls_cert: Option<String>,
        /// The client key of a tcp:// host's TLS.
        #[arg(long, value_name = "FILE")]
        tls_key: Option<String>,
        /// Where the server reaches what the host publishes (IP or DNS name).
        #[arg(long, value_name = "ADDRESS")]
        address: Option<String>,
        /// CPU cores to place on it (default: what the engine reports).
        #[arg(long, value_name = "N")]
        cpus: Option<u32>,
        /// Memory in GB to place on it (default: what the engine reports).
        #[arg(long, value_name = "GB")]
        memory: Option<f64>,
    },
    /// List the Docker hosts: state, health, sandboxes, reserved CPU and
    /// memory of the capacity.
    #[command(after_help = "Examples:
  stockade host ls
  stockade host ls --json | jq '.hosts[] | select(.health.healthy == false) | .name'")]
    Ls,
    /// Show one Docker host.
    #[command(after_help = "Example:
  stockade host get docker-2")]
    Get(HostName),
    /// Take no new sandboxes on a host; what runs there stays.
    #[command(after_help = "Example:
  stockade host cordon docker-2 --reason 'kernel upgrade'")]
    Cordon(Withdraw),
    /// Take new sandboxes on a host again.
    #[command(after_help = "Example:
  stockade host uncordon docker-2")]
    Uncordon(HostName),
    /// Take no new sandboxes on a host and move what it holds off it.
    #[command(after_help = "Example:
  stockade host drain docker-2 --reason 'replacing the disk'")]
    Drain(Withdraw),
    /// Remove a host that holds no sandbox (not the server's own).
    #[command(after_help = "Example:
  stockade host rm docker-2")]
    Rm(HostName),
}

/// `used of capacity`, e.g. `1.5/8`; `-` for the capacity when unknown.
fn of(used: f64, capacity: Option<f64>, unit: &str) -> String {
    let cap = capacity.map_or_else(|| "-".to_owned(), output::trim_num);
    format!("{}/{cap}{unit}", output::trim_num(used))
}

fn health(h: &HostResponse) -> String {
    match h.health.healthy {
        None => "unchecked".into(),
        Some(true) => "healthy".into(),
        Some(false) => "unhealthy".into(),
    }
}

fn state(h: &HostResponse) -> String {
    match (&h.state_reason, h.auto_cordoned) {
        (Some(_), true) => format!("{} (auto)", h.state),
        _ => h.state.clone(),
    }
}

fn row(h: &HostResponse) -> Vec<String> {
    let name = if h.own {
        format!("{} (own)", h.name)
    } else {
        h.name.clone()
    };
    vec![
        name,
        state(h),
        health(h),
        h.sandboxes.to_string(),
        of(h.reserved.cpu_cores, h.capacity.cpus.map(f64::from), ""),
        of(h.reserved.memory_gb, h.capacity.memory_gb, " GB"),
        h.docker_host.clone(),
    ]
}

fn details(h: &HostResponse) -> anyhow::Result<()> {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    outln!(
        "name:        {}{}",
        h.name,
        if h.own { " (the server's own)" } else { "" }
    )?;
    outln!("docker host: {}", h.docker_host)?;
    if let Some(t) = &h.tls {
        outln!("tls:         ca {}, cert {}, key {}", t.ca, t.cert, t.key)?;
    }
    outln!("address:     {}", opt(&h.address))?;
    outln!("state:       {}", state(h))?;
    if let Some(r) = &h.state_reason {
        outln!("  reason:    {r}")?;
    }
    outln!("health:      {}", health(h))?;
    if let Some(r) = &h.health.reason {
        outln!("  reason:    {r}")?;
    }
    if let Some(t) = h.health.checked_at {
        outln!("  checked:   {}", t.format("%Y-%m-%d %H:%M:%S"))?;
    }
    if let Some(t) = h.health.failing_since {
        outln!("  failing since: {}", t.format("%Y-%m-%d %H:%M:%S"))?;
    }
    if let Some(b) = h.health.disk_free_bytes {
        outln!("  disk free: {}", stockade_core::human_bytes(b))?;
    }
    outln!("sandboxes:   {}", h.sandboxes)?;
    outln!(
        "cpu:         {} reserved",
        of(h.reserved.cpu_cores, h.capacity.cpus.map(f64::from), "")
    )?;
    outln!(
        "memory:      {} reserved",
        of(h.reserved.memory_gb, h.capacity.memory_gb, " GB")
    )?;
    if !h.labels.is_empty() {
        let labels: Vec<String> = h.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        outln!("labels:      {}", labels.join(", "))?;
    }
    outln!("registered:  {}", h.created_at.format("%Y-%m-%d %H:%M:%S"))?;
    for w in &h.warnings {
        outln!("WARNING:     {w}")?;
    }
    Ok(())
}

fn show(ctx: &Ctx, h: &HostResponse) -> anyhow::Result<()> {
    if ctx.json {
        output::json(h)
    } else {
        details(h)
    }
}

/// The TLS files of `host add`: all three flags or none.
fn tls(
    ca: Option<String>,
    cert: Option<String>,
    key: Option<String>,
) -> Result<Option<HostTlsFiles>, CliError> {
    match (ca, cert, key) {
        (None, None, None) => Ok(None),
        (Some(ca), Some(cert), Some(key)) => Ok(Some(HostTlsFiles { ca, cert, key })),
        _ => Err(CliError::invalid(
            "--tls-ca, --tls-cert and --tls-key go together: give all three or none",
        )),
    }
}

/// A change of state: cordoned, active or draining.
/// Puts host `name` into `state` and shows it, after what `said` makes of
/// its name (for people; nothing of it in JSON).
async fn change_state(
    ctx: &Ctx,
    name: &str,
    state: &str,
    reason: Option<String>,
    said: impl Fn(&str) -> String,
) -> anyhow::Result<()> {
    let h = ctx
        .client()?
        .update_host(name, &to_state(state, reason))
        .await?;
    if !ctx.json {
        outln!("{}", said(&h.name))?;
    }
    show(ctx, &h)
}

fn to_state(state: &str, reason: Option<String>) -> UpdateHostRequest {
    UpdateHostRequest {
        state: Some(state.into()),
        reason,
        ..UpdateHostRequest::default()
    }
}

pub async fn host(ctx: &Ctx, cmd: HostCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        HostCommand::Add {
            name,
            docker_host,
            labels,
            tls_ca,
            tls_cert,
            tls_key,
            address,
            cpus,
            memory,
        } => {
            // Every flag is checked before any request.
            let tls = tls(tls_ca, tls_cert, tls_key)?;
            let mut map = BTreeMap::new();
            for l in &labels {
                let (k, v) = key_value(l, "--label")?;
                map.insert(k, v);
            }
            let capacity = (cpus.is_some() || memory.is_some()).then_some(HostCapacityInput {
                cpus,
                memory_gb: memory,
            });
            let req = CreateHostRequest {
                name,
                docker_host,
                tls,
                address,
                labels: (!map.is_empty()).then_some(map),
                capacity,
            };
            let client = ctx.client()?;
            let h = client.add_host(&req).await?;
            if !ctx.json {
                outln!("Registered host {} ({})", h.name, h.docker_host)?;
            }
            show(ctx, &h)?;
        }
        HostCommand::Ls => {
            let resp = ctx.client()?.hosts().await?;
            if ctx.json {
                output::json(&resp)?;
            } else {
                let rows: Vec<Vec<String>> = resp.hosts.iter().map(row).collect();
                output::table(
                    &[
                        "NAME",
                        "STATE",
                        "HEALTH",
                        "SANDBOXES",
                        "CPU",
                        "MEMORY",
                        "DOCKER HOST",
                    ],
                    &rows,
                )?;
            }
        }
        HostCommand::Get(HostName { name }) => {
            let h = ctx.client()?.host(&name).await?;
            show(ctx, &h)?;
        }
        HostCommand::Cordon(Withdraw { name, reason }) => {
            let said = |h: &str| format!("Cordoned host {h}: it takes no new sandboxes");
            change_state(ctx, &name, "cordoned", reason, said).await?;
        }
        HostCommand::Uncordon(HostName { name }) => {
            let said = |h: &str| format!("Host {h} takes new sandboxes again");
            change_state(ctx, &name, "active", None, said).await?;
        }
        HostCommand::Drain(Withdraw { name, reason }) => {
            let said = |h: &str| {
                format!(
                    "Draining host {h}: it takes no new sandboxes and what it holds is moved off it"
                )
            };
            change_state(ctx, &name, "draining", reason, said).await?;
        }
        HostCommand::Rm(HostName { name }) => {
            ctx.client()?.remove_host(&name).await?;
            output::json_or(
                ctx.json,
                &serde_json::json!({ "name": name, "removed": true }),
                || format!("Removed host {name}"),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
