//! `stockade`: runs the server (`stockade server`) and drives one from the
//! terminal through the SDK (`stockade create`, `ls`, `stop`, …).
#![forbid(unsafe_code)]

mod cli;
mod copy;
mod exec;
mod manage;
mod output;
mod server;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Isolated Docker sandboxes behind one API.
#[derive(Parser)]
#[command(
    name = "stockade",
    version,
    after_help = "Examples:
  stockade server                                # SQLite in ~/.local/share/stockade, http://127.0.0.1:7433
  export STOCKADE_TOKEN=stk_…                    # the token the server printed on its first start
  stockade create --name demo --cpu 2 --memory 4
  stockade exec demo -- ls -la
  stockade cp ./src demo:/workspace/src
  stockade logs -f demo
  stockade ports demo expose 3000
  stockade ls --status running
  stockade stop demo && stockade start demo
  stockade rm demo
  stockade account create alice
  stockade completions bash > /etc/bash_completion.d/stockade

Every command has --help with examples; --json prints machine-readable output."
)]
struct Cli {
    /// The Stockade server to talk to.
    #[arg(
        long,
        global = true,
        env = "STOCKADE_URL",
        default_value = "http://127.0.0.1:7433"
    )]
    url: String,
    /// API token (`Authorization: Bearer`).
    #[arg(long, global = true, env = "STOCKADE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Stockade server.
    #[command(after_help = "Examples:
  stockade server                                   # SQLite in the data directory, 127.0.0.1:7433
  stockade server --listen 0.0.0.0:7433 --proxy-domain sandboxes.example.com
  stockade server --database postgres://stockade:secret@db/stockade")]
    Server(Box<server::ServerArgs>),
    /// Create a sandbox and wait until it runs.
    #[command(after_help = "Examples:
  stockade create --name demo
  stockade create --name api --runtime node22 --vcpus 2 --port 3000 --timeout 2h
  stockade create --name ci --image python:3.13 -e CI=1 --label ci --tag owner=alice
  stockade create --name site --git https://github.com/org/site.git --ref main
  stockade create --name data --tarball https://example.com/data.tar.gz
  stockade create --name local --upload ./my-project
  stockade create --name restored --from-snapshot SNAPSHOT_ID
  stockade create --name demo --json | jq -r .id")]
    Create(Box<cli::CreateArgs>),
    /// List your sandboxes, newest first.
    #[command(
        alias = "list",
        after_help = "Examples:
  stockade ls
  stockade ls --status running --label ci
  stockade ls --terminated --json"
    )]
    Ls(cli::ListArgs),
    /// Show one sandbox (by id or name).
    #[command(after_help = "Examples:
  stockade get demo
  stockade get a1b2c3d4e5f6 --json | jq .usage")]
    Get {
        /// Sandbox id or name.
        sandbox: String,
    },
    /// Start sandboxes (a running one stays as it is).
    #[command(after_help = "Example:
  stockade start demo other")]
    Start {
        /// Sandbox ids or names.
        #[arg(required = true)]
        sandboxes: Vec<String>,
    },
    /// Stop sandboxes: SIGTERM, then SIGKILL after the grace period.
    #[command(after_help = "Examples:
  stockade stop demo
  stockade stop -t 5 demo other")]
    Stop {
        /// Sandbox ids or names.
        #[arg(required = true)]
        sandboxes: Vec<String>,
        /// Seconds between SIGTERM and SIGKILL (default 30).
        #[arg(long, short = 't')]
        timeout: Option<u64>,
    },
    /// Destroy sandboxes (their volumes too, unless --keep-volume).
    #[command(
        alias = "delete",
        after_help = "Examples:
  stockade rm demo
  stockade rm --keep-volume demo   # the volume stays, as an orphan (see `stockade volumes`)"
    )]
    Rm {
        /// Sandbox ids or names.
        #[arg(required = true)]
        sandboxes: Vec<String>,
        /// Keep the /workspace volume.
        #[arg(long)]
        keep_volume: bool,
        /// Upload /workspace to the server's object store first (nothing is
        /// deleted if that fails).
        #[arg(long)]
        sync: bool,
    },
    /// Run a command in a sandbox; its output streams, its exit code is ours.
    Exec(Box<exec::ExecArgs>),
    /// Show (or follow) the output of a sandbox's main process.
    Logs(exec::LogsArgs),
    /// Copy files and directories to or from a sandbox (like docker cp).
    Cp(copy::CpArgs),
    /// Fork a sandbox: a new one with its filesystem and settings.
    Fork(manage::ForkArgs),
    /// Create, list and delete snapshots.
    #[command(subcommand, alias = "snapshots")]
    Snapshot(manage::SnapshotCommand),
    /// List, expose and unexpose a sandbox's ports (with their proxy URLs).
    Ports(manage::PortsArgs),
    /// Print a token that opens a sandbox's exposed ports.
    Token(manage::TokenArgs),
    /// List volumes, remove orphans.
    #[command(
        alias = "volume",
        after_help = "Examples:
  stockade volumes
  stockade volumes ls --orphaned
  stockade volumes rm agent-sandbox-a1b2c3d4e5f6
  stockade volumes prune --yes"
    )]
    Volumes {
        #[command(subcommand)]
        command: Option<manage::VolumesCommand>,
    },
    /// Change a sandbox's timeout, resources, labels, tags or environment.
    Update(Box<manage::UpdateArgs>),
    /// Manage accounts (administrators only).
    #[command(subcommand)]
    Account(cli::AccountCommand),
    /// Show a server's health (Docker and database).
    #[command(after_help = "Examples:
  stockade health
  STOCKADE_URL=http://sandbox-host:7433 stockade health --json")]
    Health,
    /// Print shell completions.
    #[command(after_help = "Examples:
  stockade completions bash > /etc/bash_completion.d/stockade
  stockade completions zsh > \"${fpath[1]}/_stockade\"
  stockade completions fish > ~/.config/fish/completions/stockade.fish")]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let json = cli.json;
    let ctx = cli::Ctx {
        url: cli.url,
        token: cli.token,
        json,
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Server(args) => server::run(*args).await,
            Command::Create(args) => cli::create(&ctx, *args).await,
            Command::Ls(args) => cli::list(&ctx, args).await,
            Command::Get { sandbox } => cli::get(&ctx, &sandbox).await,
            Command::Start { sandboxes } => cli::start(&ctx, &sandboxes).await,
            Command::Stop { sandboxes, timeout } => cli::stop(&ctx, &sandboxes, timeout).await,
            Command::Rm {
                sandboxes,
                keep_volume,
                sync,
            } => cli::remove(&ctx, &sandboxes, keep_volume, sync).await,
            Command::Exec(args) => exec::exec(&ctx, *args).await,
            Command::Logs(args) => exec::logs(&ctx, args).await,
            Command::Cp(args) => copy::cp(&ctx, args).await,
            Command::Fork(args) => manage::fork(&ctx, args).await,
            Command::Snapshot(cmd) => manage::snapshot(&ctx, cmd).await,
            Command::Ports(args) => manage::ports(&ctx, args).await,
            Command::Token(args) => manage::token(&ctx, args).await,
            Command::Volumes { command } => manage::volumes(&ctx, command).await,
            Command::Update(args) => manage::update(&ctx, *args).await,
            Command::Account(cmd) => cli::account(&ctx, cmd).await,
            Command::Health => cli::health(&ctx).await,
            Command::Completions { shell } => {
                clap_complete::generate(
                    shell,
                    &mut Cli::command(),
                    "stockade",
                    &mut std::io::stdout(),
                );
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", output::describe(&e));
            ExitCode::FAILURE
        }
    }
}
