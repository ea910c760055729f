//! `stockade`: runs the server (`stockade server`) and talks to one from the
//! terminal (`stockade account create`, `stockade health`).
#![forbid(unsafe_code)]

mod client;
mod server;

use clap::{Parser, Subcommand};

/// Isolated Docker sandboxes behind one API.
#[derive(Parser)]
#[command(
    name = "stockade",
    version,
    after_help = "Examples:\n  stockade server                       # SQLite in ~/.local/share/stockade, http://127.0.0.1:7433\n  stockade server --database postgres://stockade@localhost/stockade\n  STOCKADE_TOKEN=stk_… stockade account create alice\n  stockade health"
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
    /// Manage accounts (administrators only).
    #[command(subcommand)]
    Account(client::AccountCommand),
    /// Show the server's health (Docker and database).
    Health,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Server(args) => server::run(*args).await,
            Command::Account(cmd) => {
                let c = client::Client::new(&cli.url, cli.token.as_deref())?;
                client::account(&c, cmd, cli.json).await
            }
            Command::Health => {
                let c = client::Client::new(&cli.url, cli.token.as_deref())?;
                client::health(&c, cli.json).await
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
