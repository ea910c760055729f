//! `stockade-bench`: starts a Stockade server in this process (fresh
//! database, real Docker) and, in the same run, measures each scenario of
//! the API and the sandbox lifecycle — and those of the in-sandbox agent (exec, terminal, memory,
//! warm create → first command), of the code interpreter, of gVisor, of
//! egress policies, of several Docker hosts and of lifecycle events —
//! through Stockade's HTTP API and through a baseline: the Docker Engine
//! API directly with the same container settings (or, for gVisor, Stockade
//! under runc; for egress policies, Stockade with `allow-all`; for several
//! hosts, the own host alone; for code cells, an exec round trip in the
//! same sandbox; for events, no webhooks registered). Writes
//! `results.json` and `results.md`; never fails because of a ratio, only
//! when something breaks.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

mod app;
mod client;
mod outside;
mod raw;
mod report;
mod scenarios;

/// Benchmarks Stockade against the raw Docker Engine API.
#[derive(Parser, Debug)]
#[command(
    name = "stockade-bench",
    version,
    after_help = "Example: cargo run --release -p stockade-bench -- --out target/bench\n\
                  CI runs `stockade-bench --quick` (few iterations; ratios are reported, never enforced)."
)]
pub struct Cli {
    /// Few iterations of everything (about a minute): keeps the benchmark
    /// working in CI; its figures are noisy.
    #[arg(long)]
    pub quick: bool,
    /// Directory for results.json and results.md.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
    /// Image of every sandbox (must be present locally or pullable).
    #[arg(
        long,
        env = "STOCKADE_BENCH_IMAGE",
        default_value = "stockade-test-base:latest"
    )]
    pub image: String,
    /// Image of the code-interpreter scenario (skipped when it is not
    /// present; `scripts/build-image code-interpreter` builds it).
    #[arg(
        long,
        env = "STOCKADE_BENCH_IMAGE_CODE",
        default_value = "stockade-code-interpreter:latest"
    )]
    pub code_image: String,
    /// The Docker engine.
    #[arg(
        long,
        env = "DOCKER_HOST",
        default_value = "unix:///var/run/docker.sock"
    )]
    pub docker_host: String,
    /// PostgreSQL server for the list scenario (a fresh database is created
    /// on it and dropped afterwards); without it only SQLite is measured.
    #[arg(long, env = "STOCKADE_TEST_DATABASE_URL", hide_env_values = true)]
    pub postgres: Option<String>,
    /// Skip PostgreSQL even when a URL is set.
    #[arg(long)]
    pub no_postgres: bool,
    /// Creates one at a time, and pause/resume cycles (default 50; quick 5).
    #[arg(long)]
    pub creates: Option<usize>,
    /// Creates at once (default 20; quick 8).
    #[arg(long)]
    pub burst: Option<usize>,
    /// Code interpreter: warm cells timed, and as many exec round trips
    /// (default 200; quick 20).
    #[arg(long)]
    pub code_cells: Option<usize>,
    /// Code interpreter: sandboxes created, each timed to its first cell
    /// (default 5; quick 2).
    #[arg(long)]
    pub code_creates: Option<usize>,
    /// Rounds of creates at once (default 3; quick 1).
    #[arg(long)]
    pub bursts: Option<usize>,
    /// Creates at once timed to their first command, cold and from a warm
    /// pool as large (default 100; quick 20; at most 256).
    #[arg(long)]
    pub fleet_burst: Option<usize>,
    /// Small idle sandboxes kept at once by the density scenario (default
    /// 500; quick 50).
    #[arg(long)]
    pub density: Option<usize>,
    /// Exec round trips (default 200; quick 20).
    #[arg(long)]
    pub execs: Option<usize>,
    /// Sandbox records for the list scenario (default 10000; quick 1000).
    #[arg(long)]
    pub records: Option<usize>,
    /// List requests per query (default 200; quick 20).
    #[arg(long)]
    pub lists: Option<usize>,
    /// Log volume written by the logged process, in MB (default 100; quick 2).
    #[arg(long)]
    pub log_mb: Option<u64>,
    /// Reads of the whole log, each way (default 3; quick 1).
    #[arg(long)]
    pub log_reads: Option<usize>,
    /// Creates from the warm pool, and as many more with environment
    /// variables (default 50; quick 5).
    #[arg(long)]
    pub warm: Option<usize>,
    /// Size of the warm pool of the warm-create scenario (default 4; quick 2).
    #[arg(long)]
    pub pool_size: Option<usize>,
    /// Keystrokes sent to a terminal, each way (default 200; quick 20).
    #[arg(long)]
    pub keystrokes: Option<usize>,
    /// Creates under gVisor (runsc), and as many under runc (default 10;
    /// quick 3). Skipped when the engine has no `runsc` runtime.
    #[arg(long)]
    pub runsc_creates: Option<usize>,
    /// Exec round trips under gVisor, and as many under runc (default 50;
    /// quick 10).
    #[arg(long)]
    pub runsc_execs: Option<usize>,
    /// Egress scenario: batches of HTTP requests from inside a sandbox, each
    /// way (default 30; quick 5). Skipped without root, `ip` or `python3`.
    #[arg(long)]
    pub egress_batches: Option<usize>,
    /// Egress scenario: requests per batch, timed together by one exec
    /// (default 50; quick 10).
    #[arg(long)]
    pub egress_requests: Option<usize>,
    /// Egress scenario: creates with an allow list, and as many without
    /// (default 20; quick 3).
    #[arg(long)]
    pub egress_creates: Option<usize>,
    /// Placement scenario: placements timed, each also as a refused one
    /// (the decision alone) (default 200; quick 20).
    #[arg(long)]
    pub placements: Option<usize>,
    /// Placement scenario: RUNNING sandbox records spread over the 50
    /// simulated hosts (default 10000; quick 10000).
    #[arg(long)]
    pub placement_sandboxes: Option<usize>,
    /// Three hosts against one: creates one at a time on each side, in two
    /// turns of half as many (default 20; quick 4). Needs
    /// STOCKADE_TEST_HOST2/3 (scripts/test).
    #[arg(long)]
    pub host_creates: Option<usize>,
    /// Three hosts against one: creates at once (default 20; quick 20).
    #[arg(long)]
    pub host_burst: Option<usize>,
    /// Three hosts against one: rounds of creates at once on each side, in
    /// two turns of half as many (default 4; quick 2).
    #[arg(long)]
    pub host_bursts: Option<usize>,
    /// Events scenario: create-and-delete cycles with three webhooks
    /// registered, and as many without (default 30; quick 4).
    #[arg(long)]
    pub event_cycles: Option<usize>,
    /// Run only these scenario groups (comma-separated): api, lists,
    /// postgres, create, exec, burst, stop, logs, warm, terminal, code,
    /// pause, gvisor, egress, hosts, events, volumes, density, templates, and
    /// warmburst (only the warm half of `burst`'s fleet burst, which
    /// `burst` includes). `stop` needs `create`; `exec` and `terminal` make a sandbox when
    /// `create` does not run. `exec` includes the agent's memory.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

/// The resolved iteration counts of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    pub creates: usize,
    pub burst: usize,
    pub bursts: usize,
    pub fleet_burst: usize,
    pub density: usize,
    pub execs: usize,
    pub code_cells: usize,
    pub code_creates: usize,
    pub records: usize,
    pub lists: usize,
    pub log_bytes: u64,
    pub log_reads: usize,
    pub warm: usize,
    pub pool_size: usize,
    pub keystrokes: usize,
    pub runsc_creates: usize,
    pub runsc_execs: usize,
    pub egress_batches: usize,
    pub egress_requests: usize,
    pub egress_creates: usize,
    pub placements: usize,
    pub placement_sandboxes: usize,
    pub host_creates: usize,
    pub host_burst: usize,
    pub host_bursts: usize,
    pub event_cycles: usize,
    /// Scenario groups to run; empty = all.
    pub only: Vec<String>,
}

impl Plan {
    /// Whether the scenario group `name` runs.
    pub fn runs(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
}

impl Plan {
    fn from_cli(cli: &Cli) -> Self {
        let q = cli.quick;
        let pick =
            |v: Option<usize>, full: usize, quick: usize| v.unwrap_or(if q { quick } else { full });
        // Counts that must be at least one to measure anything.
        let at_least_one = |v, full, quick| pick(v, full, quick).max(1);
        Self {
            quick: q,
            creates: at_least_one(cli.creates, 50, 5),
            burst: at_least_one(cli.burst, 20, 8),
            bursts: at_least_one(cli.bursts, 3, 1),
            fleet_burst: at_least_one(cli.fleet_burst, 100, 20).min(256),
            density: pick(cli.density, 500, 50).max(2),
            execs: at_least_one(cli.execs, 200, 20),
            code_cells: at_least_one(cli.code_cells, 200, 20),
            code_creates: at_least_one(cli.code_creates, 5, 2),
            records: pick(cli.records, 10_000, 1_000),
            lists: at_least_one(cli.lists, 200, 20),
            log_bytes: cli.log_mb.unwrap_or(if q { 2 } else { 100 }).max(1) * 1_000_000,
            log_reads: at_least_one(cli.log_reads, 3, 1),
            warm: pick(cli.warm, 50, 5),
            pool_size: at_least_one(cli.pool_size, 4, 2),
            keystrokes: at_least_one(cli.keystrokes, 200, 20),
            runsc_creates: at_least_one(cli.runsc_creates, 10, 3),
            runsc_execs: at_least_one(cli.runsc_execs, 50, 10),
            egress_batches: at_least_one(cli.egress_batches, 30, 5),
            egress_requests: at_least_one(cli.egress_requests, 50, 10),
            egress_creates: at_least_one(cli.egress_creates, 20, 3),
            placements: at_least_one(cli.placements, 200, 20),
            placement_sandboxes: pick(cli.placement_sandboxes, 10_000, 10_000),
            host_creates: at_least_one(cli.host_creates, 20, 4),
            host_burst: at_least_one(cli.host_burst, 20, 20),
            host_bursts: at_least_one(cli.host_bursts, 4, 2),
            event_cycles: at_least_one(cli.event_cycles, 30, 4),
            only: cli
                .only
                .iter()
                .map(|s| s.trim().to_ascii_lowercase())
                .collect(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(bad) = cli
        .only
        .iter()
        .find(|o| !scenarios::GROUPS.contains(&o.trim().to_ascii_lowercase().as_str()))
    {
        eprintln!(
            "stockade-bench: unknown scenario group '{bad}' in --only: use {}",
            scenarios::GROUPS.join(", ")
        );
        return ExitCode::from(2);
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("STOCKADE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // STOCKADE_BENCH_SPANS=1 prints how long each traced span of the server
    // took (with STOCKADE_LOG=info): where a slow request spends its time.
    let spans = if std::env::var_os("STOCKADE_BENCH_SPANS").is_some() {
        tracing_subscriber::fmt::format::FmtSpan::CLOSE
    } else {
        tracing_subscriber::fmt::format::FmtSpan::NONE
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(spans)
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stockade-bench: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    match runtime.block_on(scenarios::run(&cli, Plan::from_cli(&cli))) {
        Ok(mut report) => {
            report.duration_secs = started.elapsed().as_secs_f64();
            println!("{}", report.markdown());
            match report.write(&cli.out) {
                Ok((json, md)) => {
                    println!("Wrote {} and {}", json.display(), md.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("stockade-bench: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("stockade-bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
