//! `stockade`: runs the server (`stockade server`) and drives one from the
//! terminal through the SDK (`stockade create`, `ls`, `stop`, …).
#![forbid(unsafe_code)]

#[macro_use]
mod output;
mod cli;
mod code;
mod copy;
mod events;
mod exec;
mod host;
mod manage;
mod server;
mod template;
mod upload;
mod volume;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// The help heading of `--url` and `--token`: neither is needed on the
/// command line when the environment has them. (They are read from it by
/// hand rather than by clap, whose usage lines would otherwise list a flag
/// the environment set as if it had to be typed.)
const CONNECTION: &str =
    "Connection (optional: STOCKADE_URL and STOCKADE_TOKEN in the environment stand for them)";

/// The server `stockade` talks to when neither `--url` nor STOCKADE_URL
/// names one.
const DEFAULT_URL: &str = "http://127.0.0.1:7433";

/// A variable of the environment, unless it is unset or empty.
fn from_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

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
  stockade exec -d demo -- ./server.sh           # in the background: `stockade ps demo`, `stockade kill demo PID`
  stockade shell demo                            # an interactive shell (or `stockade exec -it demo -- CMD`)
  stockade cp ./src demo:/workspace/src
  stockade logs -f demo
  stockade run-code demo analysis.py             # Python in the code interpreter; `stockade repl demo`: a session
  stockade ports demo expose 3000
  stockade volume create data && stockade create --name worker --mount data:/data
  stockade ls --status running
  stockade stop demo && stockade start demo
  stockade pause demo && stockade resume demo    # frozen in place, processes and memory kept
  stockade rm demo
  stockade account create alice
  stockade token create ci --expires 30d         # an API token, shown once; `stockade token ls` lists them
  stockade completions bash > /etc/bash_completion.d/stockade

Sandboxes and snapshots are named by id or name everywhere. Every command
has --help with examples; --json prints machine-readable output (and errors
as {\"error\":{\"code\",\"message\"}} on stderr)."
)]
struct Cli {
    /// The Stockade server to talk to [default: $STOCKADE_URL, else
    /// http://127.0.0.1:7433].
    #[arg(long, global = true, value_name = "URL", help_heading = CONNECTION)]
    url: Option<String>,
    /// API token, sent as `Authorization: Bearer` [default:
    /// $STOCKADE_TOKEN].
    #[arg(long, global = true, value_name = "TOKEN", help_heading = CONNECTION)]
    token: Option<String>,
    /// Print machine-readable JSON instead of tables (errors too, on stderr).
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
  stockade create --name restored --from-snapshot after-install
  stockade create --name agent --timeout 1h --idle-timeout 10m --on-timeout pause --auto-resume
  stockade create --name pip --allow pypi.org --allow '*.pythonhosted.org'   # egress to these only
  stockade create --name web --deny 10.1.0.0/16 --deny ads.example.com:443
  stockade create --name worker --mount datasets:/data --mount models:/models:ro
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
    /// Show one sandbox (by id or name; a name finds a live sandbox first,
    /// else the latest terminated one).
    #[command(after_help = "Examples:
  stockade get demo
  stockade get a1b2c3d4e5f6 --json | jq .usage")]
    Get {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
    },
    /// Start sandboxes (a running one stays as it is; a paused one is
    /// resumed).
    #[command(after_help = "Example:
  stockade start demo other")]
    Start {
        /// Sandbox ids or names.
        #[arg(required = true, value_name = "SANDBOX")]
        sandboxes: Vec<String>,
    },
    /// Stop sandboxes: SIGTERM, then SIGKILL after the grace period.
    #[command(after_help = "Examples:
  stockade stop demo
  stockade stop -t 5 demo other")]
    Stop {
        /// Sandbox ids or names.
        #[arg(required = true, value_name = "SANDBOX")]
        sandboxes: Vec<String>,
        /// Seconds between SIGTERM and SIGKILL (default 30).
        #[arg(long, short = 't')]
        timeout: Option<u64>,
    },
    /// Pause running sandboxes: their processes are frozen in place with
    /// their memory and use no CPU until resumed (files stay reachable).
    #[command(after_help = "Examples:
  stockade pause demo
  stockade pause demo other --json

Commands, shells and code cells are refused while it is paused, unless it
was created with --auto-resume: then the first of them resumes it.")]
    Pause {
        /// Sandbox ids or names.
        #[arg(required = true, value_name = "SANDBOX")]
        sandboxes: Vec<String>,
    },
    /// Resume paused sandboxes: their processes go on where they were (the
    /// same PIDs, memory and open files).
    #[command(after_help = "Examples:
  stockade resume demo
  stockade resume demo other --json")]
    Resume {
        /// Sandbox ids or names.
        #[arg(required = true, value_name = "SANDBOX")]
        sandboxes: Vec<String>,
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
        #[arg(required = true, value_name = "SANDBOX")]
        sandboxes: Vec<String>,
        /// Keep the /workspace volume.
        #[arg(long)]
        keep_volume: bool,
        /// Upload /workspace to the server's object store first (nothing is
        /// deleted if that fails).
        #[arg(long)]
        sync: bool,
    },
    /// Run a command in a sandbox; its output streams, its exit code is ours
    /// (-d: in the background; -it: interactively, on a terminal).
    Exec(Box<exec::ExecArgs>),
    /// Open an interactive login shell in a sandbox.
    Shell(exec::ShellArgs),
    /// List a sandbox's background processes, or show one with its output.
    Ps(exec::PsArgs),
    /// Kill background processes of a sandbox (and their children).
    Kill(exec::KillArgs),
    /// Show (or follow) the output of a sandbox's main process.
    Logs(exec::LogsArgs),
    /// Run a cell of code (Python by default) in a sandbox's code
    /// interpreter: output streamed, the result printed, images saved.
    RunCode(Box<code::RunCodeArgs>),
    /// An interactive session (`In [n]:`) on a code context of a sandbox.
    Repl(code::ReplArgs),
    /// List, create, restart, interrupt and remove a sandbox's code
    /// contexts (its Jupyter kernels).
    #[command(subcommand)]
    Code(code::CodeCommand),
    /// Copy files and directories to or from a sandbox (like docker cp).
    Cp(copy::CpArgs),
    /// Make directories, move paths and watch changes inside a sandbox.
    #[command(subcommand, alias = "file")]
    Files(copy::FilesCommand),
    /// Fork a sandbox: a new one with its filesystem and settings.
    Fork(manage::ForkArgs),
    /// Create, list and delete snapshots.
    #[command(subcommand, alias = "snapshots")]
    Snapshot(manage::SnapshotCommand),
    /// List, expose and unexpose a sandbox's ports, with proxy URLs that
    /// open as printed (a short-lived token in each).
    Ports(manage::PortsArgs),
    /// Make, list and revoke API tokens and dashboard sessions (`token
    /// create|ls|rm`), or print a token that opens a sandbox's exposed ports
    /// (`token SANDBOX`).
    Token(manage::TokenArgs),
    /// List the /workspace volumes of your sandboxes, remove orphans
    /// (shared volumes: `stockade volume`).
    #[command(after_help = "Examples:
  stockade volumes
  stockade volumes ls --orphaned
  stockade volumes rm agent-sandbox-a1b2c3d4e5f6
  stockade volumes prune --yes")]
    Volumes {
        #[command(subcommand)]
        command: Option<manage::VolumesCommand>,
    },
    /// Make, list and delete shared volumes (named volumes sandboxes mount
    /// with `create --mount NAME:/path`), and copy, list and remove their
    /// files without a sandbox.
    #[command(subcommand)]
    Volume(volume::VolumeCommand),
    /// Build, list and delete templates (sandbox images built by the
    /// server from a Dockerfile; `create --template NAME` runs one), and
    /// read their builds' logs.
    #[command(subcommand, alias = "templates")]
    Template(template::TemplateCommand),
    /// Change a sandbox's timeout, resources, labels, tags or environment.
    Update(Box<manage::UpdateArgs>),
    /// Manage accounts (administrators only).
    #[command(subcommand)]
    Account(cli::AccountCommand),
    /// Manage the Docker hosts sandboxes are placed on (administrators only).
    #[command(subcommand)]
    Host(host::HostCommand),
    /// Show (or follow) the lifecycle events of your sandboxes and
    /// snapshots: created, stopped, paused, killed, …
    Events(events::EventsArgs),
    /// Register, list, change and remove webhooks that receive lifecycle
    /// events; see and retry their deliveries.
    #[command(subcommand, alias = "webhooks")]
    Webhook(events::WebhookCommand),
    /// Show the audit log: the calls made to the API, and by whom.
    Audit(events::AuditArgs),
    /// Show a server's health (Docker and database).
    #[command(after_help = "Examples:
  stockade health
  STOCKADE_URL=http://sandbox-host:7433 stockade health --json")]
    Health,
    /// Print shell completions (bash, zsh and fish complete sandbox and
    /// snapshot names from the configured server).
    #[command(after_help = "Examples:
  stockade completions bash > /etc/bash_completion.d/stockade
  stockade completions zsh > \"${fpath[1]}/_stockade\"
  stockade completions fish > ~/.config/fish/completions/stockade.fish

The scripts ask `stockade __complete` for candidates, which lists sandbox
names from the server in STOCKADE_URL / --url with STOCKADE_TOKEN / --token.")]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Candidates for the word being completed (called by the completion
    /// scripts): `stockade __complete -- stockade get de`.
    #[command(name = "__complete", hide = true)]
    Complete {
        /// The command line up to the cursor, the word being completed last.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        words: Vec<String>,
    },
}

/// Ends the program quietly when a print into a closed pipe panics (every
/// print of the CLI is fallible; this covers any that is not), and puts a
/// terminal in raw mode back first whatever the panic.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        exec::restore_terminal();
        let payload = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if payload.contains("Broken pipe") || payload.contains("os error 32") {
            std::process::exit(i32::from(output::CLOSED_PIPE_EXIT));
        }
        default(info);
    }));
}

/// The arguments before a `--` (what follows belongs to a command run in a
/// sandbox).
fn own_args(args: &[OsString]) -> impl Iterator<Item = &str> {
    args.iter()
        .skip(1)
        .map(|a| a.to_str().unwrap_or(""))
        .take_while(|a| *a != "--")
}

/// Whether `--help` of `stockade create` is asked for.
fn wants_create_help(args: &[OsString]) -> bool {
    let own: Vec<&str> = own_args(args).collect();
    let words: Vec<&str> = own
        .iter()
        .copied()
        .filter(|a| !a.starts_with('-'))
        .collect();
    (own.contains(&"create") && own.iter().any(|a| *a == "--help" || *a == "-h"))
        || words.starts_with(&["help", "create"])
}

/// The server URL the command line (or STOCKADE_URL) names.
fn url_in(args: &[OsString]) -> String {
    let own: Vec<&str> = own_args(args).collect();
    for (i, a) in own.iter().enumerate() {
        if let Some(v) = a.strip_prefix("--url=") {
            return v.to_owned();
        }
        if *a == "--url" {
            if let Some(v) = own.get(i + 1) {
                return (*v).to_owned();
            }
        }
    }
    from_env("STOCKADE_URL").unwrap_or_else(|| DEFAULT_URL.into())
}

/// `create --help` names the server's actual default image when the server
/// says which it is.
fn with_default_image(cmd: clap::Command, image: Option<String>) -> clap::Command {
    let help = match image {
        Some(image) => format!("Docker image (default: the server's, {image})."),
        None => "Docker image (default: the server's default).".to_owned(),
    };
    cmd.mut_subcommand("create", |c| c.mut_arg("image", |a| a.help(help)))
}

/// A bad command line: clap's own message (help and version go to stdout as
/// usual), or under `--json` a JSON error with the code `usage`.
fn usage_failure(e: clap::Error, json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if json && !informational {
        let text = e.render().to_string();
        let mut message = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("invalid command line")
            .trim_start_matches("error: ")
            .to_owned();
        // clap's suggestion (`tip: a similar subcommand exists: 'create'`)
        // is worth as much to a script's reader as to a person.
        let tips: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("tip: "))
            .collect();
        if !tips.is_empty() {
            message = format!("{message} ({})", tips.join("; "));
        }
        output::CliError::new("usage", message).print(true, None);
        return ExitCode::from(2);
    }
    let _ = e.print();
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let args: Vec<OsString> = std::env::args_os().collect();
    let json = own_args(&args).any(|a| a == "--json");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = Cli::command();
    if wants_create_help(&args) {
        let url = url_in(&args);
        let image = runtime.block_on(async {
            let client = stockade_sdk::Client::anonymous(url).ok()?;
            tokio::time::timeout(Duration::from_secs(2), client.default_image())
                .await
                .ok()?
                .ok()
                .flatten()
        });
        command = with_default_image(command, image);
    }
    let cli = match command
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) => return usage_failure(e, json),
    };
    let json = cli.json;
    let ctx = cli::Ctx {
        url: cli
            .url
            .or_else(|| from_env("STOCKADE_URL"))
            .unwrap_or_else(|| DEFAULT_URL.into()),
        token: cli.token.or_else(|| from_env("STOCKADE_TOKEN")),
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
            Command::Pause { sandboxes } => cli::pause(&ctx, &sandboxes).await,
            Command::Resume { sandboxes } => cli::resume(&ctx, &sandboxes).await,
            Command::Rm {
                sandboxes,
                keep_volume,
                sync,
            } => cli::remove(&ctx, &sandboxes, keep_volume, sync).await,
            Command::Exec(args) => exec::exec(&ctx, *args).await,
            Command::Shell(args) => exec::shell(&ctx, args).await,
            Command::Ps(args) => exec::ps(&ctx, args).await,
            Command::Kill(args) => exec::kill(&ctx, args).await,
            Command::Logs(args) => exec::logs(&ctx, args).await,
            Command::RunCode(args) => code::run_code(&ctx, *args).await,
            Command::Repl(args) => code::repl(&ctx, args).await,
            Command::Code(cmd) => code::code(&ctx, cmd).await,
            Command::Cp(args) => copy::cp(&ctx, args).await,
            Command::Files(cmd) => copy::files(&ctx, cmd).await,
            Command::Fork(args) => manage::fork(&ctx, args).await,
            Command::Snapshot(cmd) => manage::snapshot(&ctx, cmd).await,
            Command::Ports(args) => manage::ports(&ctx, args).await,
            Command::Token(args) => manage::token(&ctx, args).await,
            Command::Volumes { command } => manage::volumes(&ctx, command).await,
            Command::Volume(cmd) => volume::volume(&ctx, cmd).await,
            Command::Template(cmd) => template::template(&ctx, cmd).await,
            Command::Update(args) => manage::update(&ctx, *args).await,
            Command::Account(cmd) => cli::account(&ctx, cmd).await,
            Command::Host(cmd) => host::host(&ctx, cmd).await,
            Command::Events(args) => events::events(&ctx, args).await,
            Command::Webhook(cmd) => events::webhook(&ctx, cmd).await,
            Command::Audit(args) => events::audit(&ctx, args).await,
            Command::Health => cli::health(&ctx).await,
            Command::Completions { shell } => complete::script(shell),
            Command::Complete { words } => complete::answer(&ctx, &words).await,
        }
    });
    let flushed = std::io::Write::flush(&mut std::io::stdout());
    match result {
        Err(e) if output::is_broken_pipe(&e) => ExitCode::from(output::CLOSED_PIPE_EXIT),
        Err(e) => {
            output::classify(&e).print(json, None);
            ExitCode::FAILURE
        }
        Ok(_) if flushed.is_err() => ExitCode::from(output::CLOSED_PIPE_EXIT),
        Ok(code) => code,
    }
}

mod complete {
    //! Shell completion: the scripts `stockade completions bash|zsh|fish`
    //! prints, and `stockade __complete`, which they call with the words
    //! typed so far. It walks the clap model to see what the word under
    //! the cursor is (a subcommand, a flag, a flag's value or a positional
    //! argument) and offers sandbox, snapshot, process, host and shared
    //! volume ids/names from the configured server where the argument's
    //! value name says so.

    use std::process::ExitCode;
    use std::time::Duration;

    use clap::{ArgAction, CommandFactory, ValueHint};
    use stockade_sdk::{Client, ListParams, Sandbox, Snapshot};

    use crate::cli::Ctx;

    /// The last line of an answer when file names fit too.
    const FILES: &str = ":files";

    /// Where the candidates for a word come from.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Source {
        /// Names of live sandboxes, each followed by `suffix`.
        Sandboxes {
            suffix: &'static str,
        },
        Snapshots,
        /// Names of registered Docker hosts.
        Hosts,
        /// Names of shared volumes, each followed by `suffix`.
        Volumes {
            suffix: &'static str,
        },
        /// Names of templates.
        Templates,
        /// Background processes of this sandbox.
        Processes {
            sandbox: String,
        },
    }

    /// What to offer for the word under the cursor.
    #[derive(Debug, Default, PartialEq, Eq)]
    pub struct Plan {
        /// Typed so far (candidates must start with it).
        pub current: String,
        /// Put before each candidate (`--flag=` of an inline value).
        pub prefix: String,
        pub fixed: Vec<String>,
        pub dynamic: Option<Source>,
        pub files: bool,
        /// `--url` / `--token` on the line being completed.
        pub url: Option<String>,
        pub token: Option<String>,
    }

    fn takes_value(arg: &clap::Arg) -> bool {
        arg.get_action().takes_values()
    }

    fn long<'a>(cmd: &'a clap::Command, name: &str) -> Option<&'a clap::Arg> {
        cmd.get_arguments().find(|a| {
            a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|al| al.contains(&name))
        })
    }

    fn short(cmd: &clap::Command, c: char) -> Option<&clap::Arg> {
        cmd.get_arguments().find(|a| a.get_short() == Some(c))
    }

    /// Candidates for a value of `arg`; `positionals` are the positional
    /// words typed before it.
    fn values_of(arg: &clap::Arg, positionals: &[String], plan: &mut Plan) {
        let name = arg
            .get_value_names()
            .and_then(|n| n.first())
            .map(|n| n.as_str().to_owned())
            .unwrap_or_default();
        match name.as_str() {
            "SANDBOX" => plan.dynamic = Some(Source::Sandboxes { suffix: "" }),
            "SNAPSHOT" => plan.dynamic = Some(Source::Snapshots),
            "HOST" => plan.dynamic = Some(Source::Hosts),
            "VOLUME" => plan.dynamic = Some(Source::Volumes { suffix: "" }),
            "TEMPLATE" => plan.dynamic = Some(Source::Templates),
            "VOLUME:PATH" | "VOLUME:/PATH[:ro]" => {
                if !plan.current.contains(':') {
                    plan.dynamic = Some(Source::Volumes { suffix: ":" });
                }
            }
            "SOURCE" | "TARGET" => {
                if !plan.current.contains(':') {
                    plan.dynamic = Some(Source::Volumes { suffix: ":" });
                    plan.files = true;
                }
            }
            "PID" => {
                if let Some(sb) = positionals.first() {
                    plan.dynamic = Some(Source::Processes {
                        sandbox: sb.clone(),
                    });
                }
            }
            "SRC" | "DEST" => {
                if !plan.current.contains(':') {
                    plan.dynamic = Some(Source::Sandboxes { suffix: ":" });
                    plan.files = true;
                }
            }
            _ => {
                plan.fixed.extend(
                    arg.get_possible_values()
                        .iter()
                        .filter(|v| !v.is_hide_set())
                        .map(|v| v.get_name().to_owned()),
                );
                plan.files = plan.fixed.is_empty()
                    && matches!(
                        arg.get_value_hint(),
                        ValueHint::AnyPath | ValueHint::FilePath | ValueHint::DirPath
                    );
            }
        }
    }

    /// What the word under the cursor (the last of `words`; `words[0]` is
    /// the program) is, and so what to offer for it.
    pub fn plan(root: &clap::Command, words: &[String]) -> Plan {
        let mut plan = Plan {
            current: words.last().cloned().unwrap_or_default(),
            ..Plan::default()
        };
        let typed = if words.len() > 1 {
            &words[1..words.len() - 1]
        } else {
            &[]
        };
        let mut cmd = root;
        let mut positionals: Vec<String> = Vec::new();
        let mut pending: Option<&clap::Arg> = None; // a flag waiting for its value
        let mut raw = false; // after `--`
        for w in typed {
            if let Some(arg) = pending.take() {
                match arg.get_long() {
                    Some("url") => plan.url = Some(w.clone()),
                    Some("token") => plan.token = Some(w.clone()),
                    _ => {}
                }
                continue;
            }
            if raw {
                positionals.push(w.clone());
                continue;
            }
            if w == "--" {
                raw = true;
                continue;
            }
            if let Some(flag) = w.strip_prefix("--") {
                let (name, inline) = match flag.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (flag, None),
                };
                if let Some(arg) = long(cmd, name).filter(|a| takes_value(a)) {
                    match (inline, name) {
                        (Some(v), "url") => plan.url = Some(v.to_owned()),
                        (Some(v), "token") => plan.token = Some(v.to_owned()),
                        (Some(_), _) => {}
                        (None, _) => pending = Some(arg),
                    }
                }
                continue;
            }
            if w.len() > 1 && w.starts_with('-') {
                // -abc: a value-taking short flag last waits for the next word.
                if let Some(arg) = w.chars().last().and_then(|c| short(cmd, c)) {
                    if takes_value(arg) && w.chars().skip(1).all(|c| short(cmd, c).is_some()) {
                        pending = Some(arg);
                    }
                }
                continue;
            }
            if positionals.is_empty() {
                if let Some(sub) = cmd.find_subcommand(w) {
                    cmd = sub;
                    continue;
                }
            }
            positionals.push(w.clone());
        }
        if raw {
            // The command line of a program run in the sandbox.
            return plan;
        }
        if let Some(arg) = pending {
            values_of(arg, &positionals, &mut plan);
            return plan;
        }
        if let Some(flag) = plan.current.strip_prefix("--") {
            if let Some((name, value)) = flag.split_once('=') {
                if let Some(arg) = long(cmd, name).filter(|a| takes_value(a)) {
                    plan.prefix = format!("--{name}=");
                    plan.current = value.to_owned();
                    values_of(arg, &positionals, &mut plan);
                }
                return plan;
            }
        }
        if plan.current.starts_with('-') {
            let mut flags: Vec<String> = cmd
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
                .collect();
            flags.sort();
            plan.fixed = flags;
            return plan;
        }
        if positionals.is_empty() {
            plan.fixed.extend(
                cmd.get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(|s| s.get_name().to_owned()),
            );
        }
        let args: Vec<&clap::Arg> = cmd.get_positionals().collect();
        let arg = args.get(positionals.len()).copied().or_else(|| {
            args.last().copied().filter(|a| {
                matches!(a.get_action(), ArgAction::Append)
                    || a.get_num_args().is_some_and(|r| r.max_values() > 1)
            })
        });
        if let Some(arg) = arg {
            values_of(arg, &positionals, &mut plan);
        }
        plan
    }

    /// Sandbox, snapshot or process names from the server; nothing when it
    /// does not answer within a moment.
    async fn fetch(client: &Client, source: &Source) -> Vec<String> {
        let work = async {
            Ok::<Vec<String>, stockade_sdk::Error>(match source {
                Source::Sandboxes { suffix } => {
                    let page = Sandbox::list(
                        client,
                        ListParams {
                            per_page: Some(1000),
                            ..Default::default()
                        },
                    )
                    .await?;
                    page.sandboxes
                        .iter()
                        .map(|s| format!("{}{suffix}", s.name()))
                        .collect()
                }
                Source::Snapshots => Snapshot::list(client)
                    .await?
                    .iter()
                    .map(|s| s.name().to_owned())
                    .collect(),
                Source::Hosts => client
                    .hosts()
                    .await?
                    .hosts
                    .into_iter()
                    .map(|h| h.name)
                    .collect(),
                Source::Volumes { suffix } => client
                    .shared_volumes()
                    .await?
                    .volumes
                    .into_iter()
                    .map(|v| format!("{}{suffix}", v.name))
                    .collect(),
                Source::Templates => client
                    .templates()
                    .await?
                    .templates
                    .into_iter()
                    .filter_map(|t| t.names.into_iter().next())
                    .collect(),
                Source::Processes { sandbox } => Sandbox::find(client, sandbox)
                    .await?
                    .processes()
                    .await?
                    .iter()
                    .filter(|p| p.is_running())
                    .map(|p| p.id().to_owned())
                    .collect(),
            })
        };
        match tokio::time::timeout(Duration::from_secs(3), work).await {
            Ok(Ok(mut names)) => {
                names.sort();
                names.dedup();
                names
            }
            _ => Vec::new(),
        }
    }

    /// `stockade __complete WORDS…`: one candidate a line, then `:files`
    /// when file names fit too. Never fails: a completion that cannot ask
    /// the server offers what it knows without it.
    pub async fn answer(ctx: &Ctx, words: &[String]) -> anyhow::Result<ExitCode> {
        let mut root = crate::Cli::command();
        root.build();
        let plan = plan(&root, words);
        let mut candidates = plan.fixed.clone();
        if let Some(source) = &plan.dynamic {
            let url = plan.url.clone().unwrap_or_else(|| ctx.url.clone());
            let token = plan
                .token
                .clone()
                .or_else(|| ctx.token.clone())
                .unwrap_or_default();
            if let Ok(client) = Client::new(url, token) {
                candidates.extend(fetch(&client, source).await);
            }
        }
        let mut text = String::new();
        for c in candidates.iter().filter(|c| c.starts_with(&plan.current)) {
            text.push_str(&plan.prefix);
            text.push_str(c);
            text.push('\n');
        }
        if plan.files {
            text.push_str(FILES);
            text.push('\n');
        }
        crate::output::write_stdout(format_args!("{text}"))?;
        Ok(ExitCode::SUCCESS)
    }

    const BASH: &str = r#"# bash completion for stockade; sandbox and snapshot names come from the
# server in STOCKADE_URL / --url (ask `stockade __complete`).
_stockade() {
    local line="${COMP_LINE:0:COMP_POINT}"
    local -a words
    read -r -a words <<< "$line"
    if [[ -z "$line" || "$line" == *[[:space:]] ]]; then
        words+=("")
    fi
    local cur="${words[${#words[@]}-1]}"
    local IFS=$'\n'
    local -a answer
    answer=($("${COMP_WORDS[0]}" __complete -- "${words[@]}" 2>/dev/null))
    local -a names=()
    local files=0 c
    for c in "${answer[@]}"; do
        if [[ "$c" == ":files" ]]; then files=1; else names+=("$c"); fi
    done
    COMPREPLY=()
    for c in "${names[@]}"; do
        [[ "$c" == "$cur"* ]] && COMPREPLY+=("$c")
    done
    if (( files )); then
        compopt -o filenames 2>/dev/null
        COMPREPLY+=($(compgen -f -- "$cur"))
    fi
    if [[ ${#COMPREPLY[@]} -eq 1 && "${COMPREPLY[0]}" == *[:=] ]]; then
        compopt -o nospace 2>/dev/null
    fi
    # bash splits words at : and =; complete only the part after the last one.
    if [[ "$cur" == *[:=]* ]]; then
        local head="${cur%"${cur##*[:=]}"}"
        local i
        for i in "${!COMPREPLY[@]}"; do
            COMPREPLY[i]="${COMPREPLY[i]#"$head"}"
        done
    fi
}
complete -F _stockade stockade
"#;

    const ZSH: &str = r#"#compdef stockade
# zsh completion for stockade; sandbox and snapshot names come from the
# server in STOCKADE_URL / --url (ask `stockade __complete`).
_stockade() {
    local -a answer names glued
    local files=0 c
    answer=("${(@f)$("${words[1]}" __complete -- "${(@)words[1,CURRENT]}" 2>/dev/null)}")
    for c in "${answer[@]}"; do
        if [[ "$c" == ":files" ]]; then
            files=1
        elif [[ "$c" == *[:=] ]]; then
            glued+=("$c")
        elif [[ -n "$c" ]]; then
            names+=("$c")
        fi
    done
    (( ${#names} )) && compadd -Q -- "${names[@]}"
    (( ${#glued} )) && compadd -Q -S '' -- "${glued[@]}"
    (( files )) && _files
    return 0
}
if [[ "${funcstack[1]}" == "_stockade" ]]; then
    _stockade "$@"
else
    compdef _stockade stockade
fi
"#;

    const FISH: &str = r#"# fish completion for stockade; sandbox and snapshot names come from the
# server in STOCKADE_URL / --url (ask `stockade __complete`).
function __stockade_complete
    set -l words (commandline -opc) (commandline -ct)
    for c in ($words[1] __complete -- $words 2>/dev/null)
        if test "$c" = ":files"
            __fish_complete_path (commandline -ct)
        else
            echo $c
        end
    end
end
complete -c stockade -f -a '(__stockade_complete)'
"#;

    /// `stockade completions SHELL`.
    pub fn script(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
        use clap_complete::Shell;
        let text = match shell {
            Shell::Bash => BASH,
            Shell::Zsh => ZSH,
            Shell::Fish => FISH,
            other => {
                // Static completion (subcommands and flags) for the others.
                let mut buf = Vec::new();
                clap_complete::generate(other, &mut crate::Cli::command(), "stockade", &mut buf);
                outln!("{}", String::from_utf8_lossy(&buf).trim_end())?;
                return Ok(ExitCode::SUCCESS);
            }
        };
        outln!("{}", text.trim_end())?;
        Ok(ExitCode::SUCCESS)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn plan_for(line: &[&str]) -> Plan {
            let mut root = crate::Cli::command();
            root.build();
            let words: Vec<String> = line.iter().map(|s| (*s).to_owned()).collect();
            plan(&root, &words)
        }

        #[test]
        fn subcommands_flags_and_values() {
            let p = plan_for(&["stockade", "ex"]);
            assert!(p.fixed.contains(&"exec".to_owned()) && p.dynamic.is_none());
            assert!(!p.fixed.contains(&"__complete".to_owned()), "hidden");
            let p = plan_for(&["stockade", "get", ""]);
            assert_eq!(p.dynamic, Some(Source::Sandboxes { suffix: "" }));
            let p = plan_for(&["stockade", "--url", "http://x:1", "rm", "a", ""]);
            assert_eq!(p.dynamic, Some(Source::Sandboxes { suffix: "" }), "many");
            assert_eq!(p.url.as_deref(), Some("http://x:1"));
            let p = plan_for(&["stockade", "exec", "-e", "A=1", "box", "--", "l"]);
            assert_eq!(
                p,
                Plan {
                    current: "l".into(),
                    ..Plan::default()
                }
            );
            let p = plan_for(&["stockade", "exec", "box", "--ti"]);
            assert!(p.fixed.contains(&"--timeout".to_owned()), "{p:?}");
            let p = plan_for(&["stockade", "create", "--from-snapshot", ""]);
            assert_eq!(p.dynamic, Some(Source::Snapshots));
            let p = plan_for(&["stockade", "create", "--from-snapshot=s"]);
            assert_eq!(
                (p.prefix.as_str(), p.current.as_str()),
                ("--from-snapshot=", "s")
            );
            assert_eq!(p.dynamic, Some(Source::Snapshots));
            let p = plan_for(&["stockade", "create", "--upload", ""]);
            assert!(p.files && p.dynamic.is_none());
            let p = plan_for(&["stockade", "snapshot", "rm", ""]);
            assert_eq!(p.dynamic, Some(Source::Snapshots));
            let p = plan_for(&["stockade", "kill", "box", ""]);
            assert_eq!(
                p.dynamic,
                Some(Source::Processes {
                    sandbox: "box".into()
                })
            );
            let p = plan_for(&["stockade", "ports", "box", ""]);
            assert_eq!(p.fixed, ["expose", "unexpose"]);
            let p = plan_for(&["stockade", "cp", "./x", ""]);
            assert_eq!(p.dynamic, Some(Source::Sandboxes { suffix: ":" }));
            assert!(p.files);
            let p = plan_for(&["stockade", "token", ""]);
            assert!(p.fixed.contains(&"create".to_owned()), "{p:?}");
            assert_eq!(p.dynamic, Some(Source::Sandboxes { suffix: "" }));
            let p = plan_for(&["stockade", "token", "create", "ci", "--ex"]);
            assert!(p.fixed.contains(&"--expires".to_owned()), "{p:?}");
            let p = plan_for(&["stockade", "pause", "a", ""]);
            assert_eq!(p.dynamic, Some(Source::Sandboxes { suffix: "" }), "many");
            let p = plan_for(&["stockade", "create", "--on-timeout", ""]);
            assert_eq!(p.fixed, ["kill", "stop", "pause"]);
            let p = plan_for(&["stockade", "volume", "rm", ""]);
            assert_eq!(p.dynamic, Some(Source::Volumes { suffix: "" }));
            let p = plan_for(&["stockade", "volume", "cp", "./x", ""]);
            assert_eq!(p.dynamic, Some(Source::Volumes { suffix: ":" }));
            assert!(p.files);
            let p = plan_for(&["stockade", "create", "--mount", ""]);
            assert_eq!(p.dynamic, Some(Source::Volumes { suffix: ":" }));
            let p = plan_for(&["stockade", "volumes", ""]);
            assert!(p.fixed.contains(&"prune".to_owned()), "{p:?}");
            let p = plan_for(&["stockade", "template", "rm", ""]);
            assert_eq!(p.dynamic, Some(Source::Templates));
            let p = plan_for(&["stockade", "template", "build", "-f", ""]);
            assert!(p.files && p.dynamic.is_none());
            let p = plan_for(&["stockade", "completions", ""]);
            assert!(p.fixed.contains(&"fish".to_owned()));
        }
    }
}
