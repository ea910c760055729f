//! `stockade`: runs the server (`stockade server`) and drives one from the
//! terminal through the SDK (`stockade create`, `ls`, `stop`, …).
#![forbid(unsafe_code)]

mod cli;
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
  stockade ls --status running
  stockade stop demo && stockade start demo
  stockade rm demo
  stockade account create alice
  stockade completions bash > /etc/bash_completion.d/stockade"
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
    Server(Box<server::ServerArgs>),
    /// Create a sandbox and wait until it runs.
    Create(Box<cli::CreateArgs>),
    /// List your sandboxes, newest first.
    #[command(alias = "list")]
    Ls(cli::ListArgs),
    /// Show one sandbox (by id or name).
    Get {
        /// Sandbox id or name.
        sandbox: String,
    },
    /// Start sandboxes (a running one stays as it is).
    Start {
        /// Sandbox ids or names.
        #[arg(required = true)]
        sandboxes: Vec<String>,
    },
    /// Stop sandboxes: SIGTERM, then SIGKILL after the grace period.
    Stop {
        /// Sandbox ids or names.
        #[arg(required = true)]
        sandboxes: Vec<String>,
        /// Seconds between SIGTERM and SIGKILL (default 30).
        #[arg(long, short = 't')]
        timeout: Option<u64>,
    },
    /// Destroy sandboxes (their volumes too, unless --keep-volume).
    #[command(alias = "delete")]
    Rm {
        /// Sandbox ids or names.
        #[arg(required = true)]
        sandboxes: Vec<String>,
        /// Keep the /workspace volume.
        #[arg(long)]
        keep_volume: bool,
    },
    /// Manage accounts (administrators only).
    #[command(subcommand)]
    Account(cli::AccountCommand),
    /// Show a server's health (Docker and database).
    Health,
    /// Print shell completions.
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
            } => cli::remove(&ctx, &sandboxes, keep_volume).await,
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
