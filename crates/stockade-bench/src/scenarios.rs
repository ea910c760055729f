//! The scenarios of the API and the sandbox lifecycle, of the in-sandbox
//! agent and of gVisor, each
//! measured through Stockade and, where it has one, through its baseline
//! (raw Docker, or Stockade under runc for gVisor) — interleaved, one
//! Stockade sample then one baseline sample, so that drift of the machine
//! hits both alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt};
use serde_json::json;
use stockade_core::{
    spec::SpecInput, AccountId, Defaults, Sandbox, SandboxId, SandboxSpec, SandboxStatus,
};
use stockade_store::{with_database, SqliteStore, Store};

use crate::app::{App, ServerOptions};
use crate::client::Api;
use crate::raw::{Raw, RawSandbox};
use crate::report::{Better, Environment, Report, Row, Target};
use crate::{Cli, Plan};

mod code;
mod events;
mod fleet;
mod hosts;
mod pause;
mod templates;
mod volumes;

/// The scenario groups `--only` takes, in the order a run goes through
/// them. `warmburst` runs only when asked for without `burst`.
pub const GROUPS: [&str; 20] = [
    "api",
    "lists",
    "postgres",
    "create",
    "exec",
    "terminal",
    "code",
    "pause",
    "burst",
    "stop",
    "logs",
    "warm",
    "gvisor",
    "egress",
    "hosts",
    "events",
    "volumes",
    "density",
    "warmburst",
    "templates",
];

/// Records of the list scenario are on a server name no Docker host has,
/// so reconciliation leaves them alone (they have no containers).
const RECORD_SERVER: &str = "bench-records";
/// Every tenth record carries this label (the filtered list).
const TENTH_LABEL: &str = "tenth";
/// The logged process writes lines of this many bytes, newline included.
const LOG_LINE_BYTES: u64 = 100;

/// The pause before each timed exec of the exec scenario, either side.
const EXEC_SETTLE: Duration = Duration::from_millis(20);

/// The pause before each timed stop and destroy, either side.
const STOP_SETTLE: Duration = Duration::from_millis(150);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Awaits `work`, adding how long it took (ms) to `samples`.
async fn timed<T>(
    samples: &mut Vec<f64>,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let t = Instant::now();
    let done = work.await?;
    samples.push(ms(t.elapsed()));
    Ok(done)
}

/// The resident memory of this process (`VmRSS`), in MiB.
fn rss_mib() -> Option<f64> {
    vmrss_mib(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The `VmRSS` of a `/proc/PID/status` text, in MiB.
fn vmrss_mib(status: &str) -> Option<f64> {
    let kb: f64 = status_field(status, "VmRSS")?
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// A field of a `/proc/PID/status` text (`Name`, `VmRSS`, …), trimmed.
fn status_field<'a>(status: &'a str, field: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// What a terminal scenario runs: `cat` on a raw TTY (no line discipline:
/// each byte reaches `cat` at once and comes back from it alone), after a
/// marker saying the TTY is set up.
const TERMINAL_COMMAND: &str = "stty raw -echo && printf READY && exec cat";
/// The terminal's marker that it is ready.
const TERMINAL_READY: &[u8] = b"READY";
/// How long one terminal read may take before the scenario fails.
const TERMINAL_WAIT: Duration = Duration::from_secs(15);

struct Bench {
    plan: Plan,
    cli_image: String,
    /// The code-interpreter image of the code scenario.
    code_image: String,
    docker_host: String,
    postgres: Option<String>,
    defaults: Defaults,
    raw: Raw,
    app: Option<App>,
    api: Api,
    rows: Vec<Row>,
    notes: Vec<String>,
    /// Instance ids whose containers and volumes are removed at the end.
    instances: Vec<String>,
    stockade_made: Vec<String>,
    raw_made: Vec<RawSandbox>,
}

/// Runs every scenario and returns the report; removes every container and
/// volume it made, also when a scenario fails or the run is interrupted.
pub async fn run(cli: &Cli, plan: Plan) -> anyhow::Result<Report> {
    let started_at = Utc::now();
    let load_at_start = crate::report::load_average();
    let defaults = Defaults {
        image: cli.image.clone(),
        ..Defaults::default()
    };
    let probe = default_spec(&defaults)?;
    let raw = Raw::connect(
        &cli.docker_host,
        &cli.image,
        probe.cpu_cores,
        probe.memory_bytes(),
    )
    .await?;
    if raw.docker.inspect_image(&cli.image).await.is_err() {
        bail!(
            "image '{}' is not present locally: build it with scripts/build-test-image, \
             pull it, or pass --image",
            cli.image
        );
    }
    let version = raw.docker.version().await.context("Docker version")?;
    let postgres = cli
        .postgres
        .clone()
        .filter(|u| !cli.no_postgres && !u.is_empty());
    let environment = Environment {
        stockade_version: env!("CARGO_PKG_VERSION").to_owned(),
        docker_version: version.version.unwrap_or_default(),
        docker_api_version: version.api_version.unwrap_or_default(),
        kernel: version.kernel_version.unwrap_or_default(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        image: cli.image.clone(),
        quick: plan.quick,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .to_owned(),
        postgres: postgres.is_some(),
        instances: Vec::new(),
        load_average: None,
    };

    let rss_before = rss_mib();
    let (_dir, store) = fresh_sqlite("bench").await?;
    let app = App::start(ServerOptions {
        store,
        docker_host: cli.docker_host.clone(),
        image: cli.image.clone(),
        oci_runtime: None,
        configure: None,
    })
    .await?;
    let api = Api::new(&app.base, &app.token)?;
    let mut bench = Bench {
        plan,
        cli_image: cli.image.clone(),
        code_image: cli.code_image.clone(),
        docker_host: cli.docker_host.clone(),
        postgres,
        defaults,
        instances: vec![app.instance_id(), raw.instance.to_string()],
        raw,
        app: Some(app),
        api,
        rows: Vec::new(),
        notes: Vec::new(),
        stockade_made: Vec::new(),
        raw_made: Vec::new(),
    };
    if let Some(before) = rss_before {
        bench.notes.push(format!(
            "Resident memory is this process's VmRSS (the server runs in it); before the \
             server started it was {before:.1} MiB (HTTP and Docker clients, async runtime)."
        ));
    }
    let outcome = tokio::select! {
        r = bench.all() => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    if let Some(app) = bench.app.take() {
        app.stop().await;
    }
    let (containers, volumes) = bench.raw.remove_everything(&bench.instances).await;
    tracing::info!(containers, volumes, "removed what the benchmark made");
    outcome?;
    let mut environment = environment;
    environment.instances = bench.instances.clone();
    environment.load_average = load_at_start.zip(crate::report::load_average());
    Ok(Report {
        started_at,
        duration_secs: 0.0,
        environment,
        rows: bench.rows,
        notes: bench.notes,
    })
}

fn default_spec(defaults: &Defaults) -> anyhow::Result<SandboxSpec> {
    SandboxSpec::from_input(SpecInput::default(), &SandboxId::generate(), defaults)
        .map_err(|e| anyhow::anyhow!("default sandbox settings: {e:?}"))
}

impl Bench {
    /// The rows of the list scenario on `backend` (`key` in their names):
    /// a page of all records and a label-filtered one.
    fn list_rows(&mut self, key: &str, backend: &str, all: &[f64], labelled: &[f64]) {
        let records = self.plan.records;
        let pages = [
            (
                "",
                format!("List, page of 50 of {records} records ({backend})"),
                all,
            ),
            (
                "_labels",
                format!("List with a label filter, {records} records ({backend})"),
                labelled,
            ),
        ];
        for (suffix, title, samples) in pages {
            self.rows.push(Row::new(
                &format!("list_{key}{suffix}"),
                &title,
                "ms",
                Better::Lower,
                samples,
                None,
                Target::P50AtMost(10.0),
            ));
        }
    }

    /// The first sandbox and raw container made, to use `purpose`
    /// (`to exec in`, `for a terminal`).
    fn first_pair(&self, purpose: &str) -> anyhow::Result<(String, String)> {
        let id = self.stockade_made.first().cloned();
        let raw = self.raw_made.first().map(|m| m.name.clone());
        Ok((
            id.with_context(|| format!("no sandbox {purpose}"))?,
            raw.with_context(|| format!("no raw container {purpose}"))?,
        ))
    }

    /// A second server on `store`, its sandboxes on `oci_runtime` and its
    /// settings changed by `configure`, with a client; its instance is
    /// recorded for the clean-up.
    async fn second_server(
        &mut self,
        store: Arc<dyn Store>,
        oci_runtime: Option<String>,
        configure: Option<crate::app::Configure>,
    ) -> anyhow::Result<(App, Api)> {
        let app = App::start(ServerOptions {
            store,
            docker_host: self.docker_host.clone(),
            image: self.cli_image.clone(),
            oci_runtime,
            configure,
        })
        .await?;
        self.instances.push(app.instance_id());
        let api = Api::new(&app.base, &app.token)?;
        Ok((app, api))
    }

    /// A second server on a fresh SQLite database `name`, its settings
    /// changed by `configure`: the database's directory (to keep while the
    /// server runs), the server and a client.
    async fn configured_server(
        &mut self,
        name: &str,
        configure: impl FnOnce(&mut stockade_server::ServerConfig) + Send + 'static,
    ) -> anyhow::Result<(tempfile::TempDir, App, Api)> {
        let (dir, store) = fresh_sqlite(name).await?;
        let (app, api) = self
            .second_server(store, None, Some(Box::new(configure)))
            .await?;
        Ok((dir, app, api))
    }

    async fn all(&mut self) -> anyhow::Result<()> {
        self.warm_up().await?;
        // Every scenario the plan runs, in this order.
        for scenario in GROUPS {
            if !self.plan.runs(scenario) {
                continue;
            }
            match scenario {
                "api" => self.api_round_trip().await?,
                "lists" => self.memory_and_lists().await?,
                "postgres" => match self.postgres.clone() {
                    Some(url) => self.postgres_lists(&url).await?,
                    None => self.notes.push(
                        "PostgreSQL was not measured: set STOCKADE_TEST_DATABASE_URL or --postgres."
                            .into(),
                    ),
                },
                "create" => self.creates().await?,
                "exec" => {
                    self.ensure_pair().await?;
                    self.execs().await?;
                    self.agent_memory().await?;
                }
                "terminal" => {
                    self.ensure_pair().await?;
                    self.terminal().await?;
                }
                "code" => self.code().await?,
                "pause" => self.pause().await?,
                "burst" => {
                    self.bursts().await?;
                    self.fleet_bursts().await?;
                }
                "stop" => self.stop_and_destroy().await?,
                "logs" => self.logs().await?,
                "warm" if self.plan.warm > 0 => self.warm().await?,
                "gvisor" => self.gvisor().await?,
                "egress" => self.egress().await?,
                "hosts" => self.hosts().await?,
                "events" => self.events().await?,
                "volumes" => self.volumes().await?,
                "density" => self.density().await?,
                "templates" => self.templates().await?,
                // Asked for alone: `burst` runs it too, and a full run
                // runs `burst`.
                "warmburst" if !self.plan.only.is_empty() && !self.plan.runs("burst") => {
                    self.warm_burst(self.plan.fleet_burst).await?
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// One create and delete on each side before anything is measured: the
    /// first create of a server fills the agent volume the raw
    /// containers mount too, and makes the networks when they are missing.
    async fn warm_up(&mut self) -> anyhow::Result<()> {
        let id = self.api.create(json!({})).await?;
        self.api.delete(&id).await?;
        self.raw.require_agent_volume().await?;
        let made = self.raw.create().await?;
        self.raw.destroy(&made).await
    }

    /// Makes one sandbox on each side unless the create scenario has.
    async fn ensure_pair(&mut self) -> anyhow::Result<()> {
        if self.stockade_made.is_empty() || self.raw_made.is_empty() {
            let id = self.api.create(json!({})).await?;
            self.stockade_made.push(id);
            self.raw_made.push(self.raw.create().await?);
        }
        Ok(())
    }

    /// The fixed cost of one authenticated request: `GET /api/v1/me`.
    async fn api_round_trip(&mut self) -> anyhow::Result<()> {
        let mut s = Vec::new();
        for _ in 0..self.plan.execs {
            let t = Instant::now();
            self.api.me().await?;
            s.push(ms(t.elapsed()));
        }
        self.rows.push(
            Row::new(
                "api",
                "API round trip (`GET /me`: HTTP and token check)",
                "ms",
                Better::Lower,
                &s,
                None,
                Target::None,
            )
            .note("what every Stockade request costs before it does any work"),
        );
        Ok(())
    }

    fn app(&self) -> anyhow::Result<&App> {
        self.app.as_ref().context("the server is not running")
    }

    /// Scenarios 5 and 7 on SQLite: resident memory idle, then 10,000
    /// records inserted through the store and listed over HTTP.
    async fn memory_and_lists(&mut self) -> anyhow::Result<()> {
        // A few requests first, so lazily built state counts as idle.
        for _ in 0..5 {
            self.api.list("per_page=50").await?;
        }
        let idle = rss_mib();
        let app = self.app()?;
        let store = app.state.svc.store().clone();
        let account = admin_account(store.as_ref(), &app.token).await?;
        let inserted = insert_records(&store, &account, self.plan.records, &self.defaults).await?;
        self.notes.push(format!(
            "{} records inserted through the SQLite store in {:.1} s.",
            self.plan.records, inserted
        ));
        let (all, labelled) = self.measure_lists(&self.api.clone()).await?;
        // The server lists every active record on each reconciliation pass
        // (every 30 s): include one in "with records".
        let state = self.app()?.state.clone();
        stockade_service::reconcile::reconcile_once(&state.svc)
            .await
            .context("reconciliation")?;
        let with_records = rss_mib();
        self.list_rows("sqlite", "SQLite", &all, &labelled);
        if let (Some(idle), Some(with)) = (idle, with_records) {
            self.rows.push(Row::new(
                "rss_idle",
                "Resident memory, idle",
                "MiB",
                Better::Lower,
                &[idle],
                None,
                Target::None,
            ));
            self.rows.push(Row::new(
                "rss_records",
                &format!("Resident memory with {} records", self.plan.records),
                "MiB",
                Better::Lower,
                &[with],
                None,
                Target::None,
            ));
        }
        Ok(())
    }

    /// Two queries, `lists` times each, alternating: all sandboxes and the
    /// label filter, page of 50.
    async fn measure_lists(&self, api: &Api) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
        let records = self.plan.records as u64;
        let tenth = records.div_ceil(10);
        let (mut all, mut labelled) = (Vec::new(), Vec::new());
        for _ in 0..self.plan.lists {
            let t = Instant::now();
            let (n, total) = api.list("per_page=50").await?;
            all.push(ms(t.elapsed()));
            if total < records || n != 50.min(total as usize) {
                bail!(
                    "list: {n} sandboxes of {total}, expected a page of 50 of at least {records}"
                );
            }
            let t = Instant::now();
            let (n, total) = api
                .list(&format!("per_page=50&labels={TENTH_LABEL}"))
                .await?;
            labelled.push(ms(t.elapsed()));
            if total != tenth || n != 50.min(tenth as usize) {
                bail!("labelled list: {n} sandboxes of {total}, expected 50 of {tenth}");
            }
        }
        Ok((all, labelled))
    }

    /// Scenario 5 on PostgreSQL: a second server on a fresh database.
    async fn postgres_lists(&mut self, url: &str) -> anyhow::Result<()> {
        use sqlx::{Connection, Executor, PgConnection};
        let scratch = ScratchDatabase::create(url).await?;
        let database = scratch.name.clone();
        let result = async {
            let store = stockade_store::connect(&with_database(url, &database)).await?;
            let (app, api) = self.second_server(store.clone(), None, None).await?;
            let outcome = async {
                let account = admin_account(store.as_ref(), &app.token).await?;
                let secs =
                    insert_records(&store, &account, self.plan.records, &self.defaults).await?;
                self.notes.push(format!(
                    "{} records inserted through the PostgreSQL store in {secs:.1} s.",
                    self.plan.records
                ));
                // Right after a bulk insert the planner has no statistics
                // yet; autovacuum gathers them within about a minute. Show
                // that state, then measure the steady one.
                let mut fresh = Vec::new();
                for _ in 0..self.plan.lists.div_ceil(4) {
                    let t = Instant::now();
                    api.list(&format!("per_page=50&labels={TENTH_LABEL}"))
                        .await?;
                    fresh.push(ms(t.elapsed()));
                }
                let mut conn = PgConnection::connect(&with_database(url, &database)).await?;
                conn.execute("ANALYZE sandboxes; ANALYZE sandbox_labels")
                    .await
                    .context("ANALYZE")?;
                if let Some(f) = crate::report::summarize(&fresh) {
                    self.notes.push(format!(
                        "PostgreSQL lists are measured after ANALYZE (what autovacuum does within \
                         about a minute of a bulk insert); right after inserting, before any \
                         statistics, the label-filtered list took p50 {:.1} ms (n={}).",
                        f.p50, f.n
                    ));
                }
                self.measure_lists(&api).await
            }
            .await;
            app.stop().await;
            outcome
        }
        .await;
        self.notes.extend(scratch.remove().await);
        let (all, labelled) = result?;
        self.list_rows("postgres", "PostgreSQL", &all, &labelled);
        Ok(())
    }

    /// Scenario 1: create → RUNNING with default settings, one at a time.
    async fn creates(&mut self) -> anyhow::Result<()> {
        let (mut s, mut r) = (Vec::new(), Vec::new());
        for _ in 0..self.plan.creates {
            let t = Instant::now();
            let id = self.api.create(json!({})).await?;
            s.push(ms(t.elapsed()));
            self.stockade_made.push(id);
            let t = Instant::now();
            let made = self.raw.create().await?;
            r.push(ms(t.elapsed()));
            self.raw_made.push(made);
        }
        self.rows.push(
            Row::new(
                "create",
                "Create → RUNNING, one at a time",
                "ms",
                Better::Lower,
                &s,
                Some(&r),
                Target::RatioAtMost(1.10),
            )
            .note(
                "both sides make the same container, the agent as PID 1 included (raw: \
                 `DockerRuntime::create_request` with an agent token)",
            ),
        );
        Ok(())
    }

    /// Scenario 3: a trivial command's round trip — through the API and
    /// the sandbox's agent, and through `docker exec` — on the same kind of
    /// container (the first each side made).
    async fn execs(&mut self) -> anyhow::Result<()> {
        let (id, raw) = self.first_pair("to exec in")?;
        // Output arrives on both sides before anything is timed.
        let (code, out) = self.api.exec(&id, &["echo", "hi"]).await?;
        if code != 0 || out != "hi\n" {
            bail!("exec: exit {code}, stdout {out:?}");
        }
        let (code, out) = self.raw.exec(&raw, &["echo", "hi"]).await?;
        if code != 0 || out != b"hi\n" {
            bail!("raw exec: exit {code}, stdout {out:?}");
        }
        let (mut s, mut r) = (Vec::new(), Vec::new());
        for _ in 0..self.plan.execs {
            // Each side's exec starts once the other's trailing work (the
            // engine's clean-up of its exec, Stockade's audit record) is
            // done, so that neither is timed against the other's.
            tokio::time::sleep(EXEC_SETTLE).await;
            let t = Instant::now();
            let (code, _) = self.api.exec(&id, &["true"]).await?;
            s.push(ms(t.elapsed()));
            if code != 0 {
                bail!("exec true: exit {code}");
            }
            tokio::time::sleep(EXEC_SETTLE).await;
            let t = Instant::now();
            let (code, _) = self.raw.exec(&raw, &["true"]).await?;
            r.push(ms(t.elapsed()));
            if code != 0 {
                bail!("raw exec true: exit {code}");
            }
        }
        self.rows.push(
            Row::new(
                "exec",
                "Exec round trip (`true`): API through the agent vs `docker exec`",
                "ms",
                Better::Lower,
                &s,
                Some(&r),
                Target::P50AtMost(3.0),
            )
            .also(Target::SpeedupAtLeast(15.0))
            .note(
                "Stockade: `POST /exec` (buffered), which the server runs through the \
                 sandbox's agent; raw: exec create, start attached, inspect for the exit code; \
                 the sides take turns, each after a 20 ms pause",
            ),
        );
        Ok(())
    }

    /// The agent's resident memory in each idle sandbox made so far: the
    /// `VmRSS` of PID 1 (which must be the agent), read through exec.
    async fn agent_memory(&mut self) -> anyhow::Result<()> {
        let mut s = Vec::new();
        for id in &self.stockade_made {
            let (code, out) = self.api.exec(id, &["cat", "/proc/1/status"]).await?;
            if code != 0 {
                bail!("cat /proc/1/status in {id}: exit {code}");
            }
            let name = status_field(&out, "Name").unwrap_or_default();
            if name != "stockade-agent" {
                bail!("PID 1 of sandbox {id} is {name:?}, not the agent");
            }
            s.push(
                vmrss_mib(&out)
                    .with_context(|| format!("no VmRSS in /proc/1/status of {id}:\n{out}"))?,
            );
        }
        self.rows.push(
            Row::new(
                "agent_rss",
                "Agent resident memory per idle sandbox (VmRSS of PID 1)",
                "MiB",
                Better::Lower,
                &s,
                None,
                Target::P50AtMost(5.0),
            )
            .note(format!(
                "one sample per sandbox ({} running only the default main process), read while \
                 the agent serves the exec that reads it",
                match s.len() {
                    1 => "1 sandbox".to_owned(),
                    n => format!("{n} sandboxes"),
                }
            )),
        );
        Ok(())
    }

    /// A keystroke's round trip on a terminal running `cat`: one byte sent,
    /// the same byte back. Stockade: the terminal WebSocket (through the
    /// agent's PTY); raw: `docker exec -it` (an attached exec with a TTY).
    async fn terminal(&mut self) -> anyhow::Result<()> {
        use futures_util::SinkExt;
        use tokio::io::AsyncWriteExt;
        use tokio_tungstenite::tungstenite::Message;

        let (id, raw) = self.first_pair("for a terminal")?;
        let mut ws = self.api.terminal(&id, TERMINAL_COMMAND).await?;
        let mut seen = Vec::new();
        read_until(&mut ws, &mut seen, TERMINAL_READY).await?;
        let mut term = self.raw.terminal(&raw, TERMINAL_COMMAND).await?;
        let mut raw_seen = Vec::new();
        read_until(&mut term, &mut raw_seen, TERMINAL_READY).await?;
        let (mut s, mut r) = (Vec::new(), Vec::new());
        for i in 0..self.plan.keystrokes {
            let key = [b'a' + (i % 26) as u8];
            seen.clear();
            let t = Instant::now();
            ws.send(Message::Binary(key.to_vec().into()))
                .await
                .context("terminal: send")?;
            read_until(&mut ws, &mut seen, &key).await?;
            s.push(ms(t.elapsed()));
            raw_seen.clear();
            let t = Instant::now();
            term.input
                .write_all(&key)
                .await
                .context("raw terminal: send")?;
            term.input.flush().await.context("raw terminal: send")?;
            read_until(&mut term, &mut raw_seen, &key).await?;
            r.push(ms(t.elapsed()));
            if seen != key || raw_seen != key {
                bail!(
                    "terminal: sent {:?}, got {:?} (raw: {:?})",
                    String::from_utf8_lossy(&key),
                    String::from_utf8_lossy(&seen),
                    String::from_utf8_lossy(&raw_seen)
                );
            }
        }
        // Closing the socket ends the terminal's `cat`; the raw one ends
        // with its container.
        let _ = ws.close(None).await;
        let _ = term.input.shutdown().await;
        self.rows.push(
            Row::new(
                "terminal",
                "Terminal keystroke → echo (`cat` on a raw TTY)",
                "ms",
                Better::Lower,
                &s,
                Some(&r),
                Target::P50AtMost(5.0),
            )
            .note(
                "Stockade: one byte in a binary WebSocket frame to `GET /terminal`, back from \
                 `cat` through the agent's PTY; raw: the same over an attached `docker exec -it`",
            ),
        );
        Ok(())
    }

    /// Scenario 2: `burst` creates at once: wall time and sandboxes per second.
    async fn bursts(&mut self) -> anyhow::Result<()> {
        let k = self.plan.burst;
        let (mut s, mut r) = (Vec::new(), Vec::new());
        for _ in 0..self.plan.bursts {
            let t = Instant::now();
            let made =
                futures_util::future::join_all((0..k).map(|_| self.api.create(json!({})))).await;
            s.push(ms(t.elapsed()));
            for m in made {
                self.stockade_made.push(m?);
            }
            let t = Instant::now();
            let made = futures_util::future::join_all((0..k).map(|_| self.raw.create())).await;
            r.push(ms(t.elapsed()));
            for m in made {
                self.raw_made.push(m?);
            }
        }
        let rate =
            |walls: &[f64]| -> Vec<f64> { walls.iter().map(|w| k as f64 / (w / 1000.0)).collect() };
        self.rows.push(Row::new(
            "burst",
            &format!("{k} creates at once, wall time"),
            "ms",
            Better::Lower,
            &s,
            Some(&r),
            Target::None,
        ));
        self.rows.push(Row::new(
            "burst_rate",
            &format!("{k} creates at once, throughput"),
            "sandboxes/s",
            Better::Higher,
            &rate(&s),
            Some(&rate(&r)),
            Target::None,
        ));
        Ok(())
    }

    /// Scenario 4: stop, then destroy, every sandbox made so far.
    async fn stop_and_destroy(&mut self) -> anyhow::Result<()> {
        let (mut ss, mut rs, mut sd, mut rd) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let stockade: Vec<String> = std::mem::take(&mut self.stockade_made);
        let raw: Vec<RawSandbox> = std::mem::take(&mut self.raw_made);
        // The sides take turns, each after a pause: what one leaves running
        // behind its answer (the engine's clean-up of a stopped container,
        // Stockade's removal of its egress entry and file system, its audit
        // record) is not timed against the other.
        let settle = || tokio::time::sleep(STOP_SETTLE);
        for (id, made) in stockade.iter().zip(raw.iter()) {
            settle().await;
            timed(&mut ss, self.api.stop(id)).await?;
            settle().await;
            timed(&mut rs, self.raw.stop(made)).await?;
            settle().await;
            timed(&mut sd, self.api.delete(id)).await?;
            settle().await;
            timed(&mut rd, self.raw.destroy(made)).await?;
        }
        self.rows.push(Row::new(
            "stop",
            "Stop (SIGTERM, the keep-alive exits)",
            "ms",
            Better::Lower,
            &ss,
            Some(&rs),
            Target::RatioAtMost(1.10),
        ));
        self.rows.push(
            Row::new(
                "destroy",
                "Destroy (container and volume)",
                "ms",
                Better::Lower,
                &sd,
                Some(&rd),
                Target::None,
            )
            .note("on a stopped sandbox; Stockade also looks up and soft-deletes the record"),
        );
        let sum =
            |a: &[f64], b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(x, y)| x + y).collect() };
        self.rows.push(
            Row::new(
                "stop_destroy",
                "Stop and destroy",
                "ms",
                Better::Lower,
                &sum(&ss, &sd),
                Some(&sum(&rs, &rd)),
                Target::RatioAtMost(1.10),
            )
            .note("the sides take turns, each step after a 150 ms pause"),
        );
        Ok(())
    }

    /// Scenario 6: a process writes `log_bytes` of 100-byte lines and exits;
    /// its whole log is read over SSE and straight from Docker.
    async fn logs(&mut self) -> anyhow::Result<()> {
        let bytes = self.plan.log_bytes;
        let text = "stockade-bench log line ".repeat(5);
        let line = &text[..(LOG_LINE_BYTES - 1) as usize];
        let cursor = format!(
            "{}-0",
            (Utc::now() - chrono::Duration::seconds(60))
                .timestamp_nanos_opt()
                .unwrap_or(0)
        );
        let id = self
            .api
            .create(json!({ "startCommand": format!("yes '{line}' | head -c {bytes}") }))
            .await?;
        let container = container_of(&id)?;
        let deadline = Instant::now() + Duration::from_secs(600);
        while self.raw.running(&container).await? {
            if Instant::now() > deadline {
                bail!("the logging process did not finish within 10 minutes");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let lines = bytes / LOG_LINE_BYTES;
        let (mut s, mut r) = (Vec::new(), Vec::new());
        for _ in 0..self.plan.log_reads {
            let t = Instant::now();
            let (got_bytes, got_lines) = self.api.read_logs_sse(&id, &cursor).await?;
            s.push(bytes as f64 / 1e6 / t.elapsed().as_secs_f64());
            if got_bytes != bytes || got_lines != lines {
                bail!(
                    "SSE logs: {got_lines} lines / {got_bytes} bytes, expected {lines} / {bytes}"
                );
            }
            let t = Instant::now();
            let (got_bytes, got_lines) = self.raw.read_logs(&container).await?;
            r.push(bytes as f64 / 1e6 / t.elapsed().as_secs_f64());
            if got_bytes != bytes || got_lines != lines {
                bail!(
                    "raw logs: {got_lines} lines / {got_bytes} bytes, expected {lines} / {bytes}"
                );
            }
        }
        self.api.delete(&id).await?;
        self.rows.push(
            Row::new(
                "logs",
                &format!("Log throughput, {} MB in 100-byte lines", bytes / 1_000_000),
                "MB/s",
                Better::Higher,
                &s,
                Some(&r),
                Target::RatioAtLeast(0.80),
            )
            .note("Stockade: SSE (one event per line, with ids) from the start of the log; raw: the Engine API's logs request read straight off the socket, like `docker logs`."),
        );
        Ok(())
    }
}

impl Bench {
    /// Create → RUNNING when a warm-pool member is ready, on a
    /// second server with a pool of the default class. Before each create
    /// the pool is full again, so every sample is a claim (a create that
    /// finds the pool empty is a cold one, measured above).
    async fn warm(&mut self) -> anyhow::Result<()> {
        use stockade_service::pool::{PoolClassConfig, PoolConfig};
        let size = self.plan.pool_size;
        let (_dir, app, api) = self
            .configured_server("warm", move |c| {
                c.service.pool = PoolConfig {
                    classes: vec![PoolClassConfig::default_class(size)],
                    check_interval: Duration::from_millis(200),
                    drain_on_shutdown: true,
                    max_concurrent_fills: 2,
                };
            })
            .await?;
        let result = async {
            let (mut s, mut r, mut made) = (Vec::new(), Vec::new(), Vec::new());
            let (mut s_exec, mut r_exec, mut with_env) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..self.plan.warm * 2 {
                let deadline = Instant::now() + Duration::from_secs(120);
                while app.state.svc.pool().ready_total() < size {
                    if Instant::now() > deadline {
                        bail!("the warm pool did not fill to {size} within 2 minutes");
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let members = app.state.svc.pool().members();
                // Every other create sets environment variables, which a
                // claim writes for the main process's next start.
                let body = if i % 2 == 0 {
                    json!({})
                } else {
                    json!({ "environmentVars": { "APP_ENV": "bench", "DEBUG": "0" } })
                };
                let t = Instant::now();
                let id = api.create(body).await?;
                let took = ms(t.elapsed());
                // Without environment variables: the first command at once.
                let first = if i % 2 == 0 {
                    let (code, _) = api.exec(&id, &["true"]).await?;
                    if code != 0 {
                        bail!("first exec in {id}: exit {code}");
                    }
                    Some(ms(t.elapsed()))
                } else {
                    None
                };
                if !members.iter().any(|m| m.as_str() == id) {
                    bail!("sandbox {id} was not served from the warm pool");
                }
                made.push(id);
                let Some(first) = first else {
                    with_env.push(took);
                    continue;
                };
                s.push(took);
                s_exec.push(first);
                let t = Instant::now();
                let raw = self.raw.create().await?;
                r.push(ms(t.elapsed()));
                let (code, _) = self.raw.exec(&raw.name, &["true"]).await?;
                r_exec.push(ms(t.elapsed()));
                self.raw_made.push(raw);
                if code != 0 {
                    bail!("raw first exec: exit {code}");
                }
            }
            for id in &made {
                api.delete(id).await?;
            }
            Ok::<_, anyhow::Error>((s, r, with_env, s_exec, r_exec))
        }
        .await;
        app.stop().await;
        let (s, r, with_env, s_exec, r_exec) = result?;
        let cold = self
            .rows
            .iter()
            .find(|row| row.id == "create")
            .and_then(|row| row.stockade.as_ref())
            .map(|c| c.p50);
        let mut row = Row::new(
            "create_warm",
            &format!("Create → RUNNING from the warm pool ({size} members)"),
            "ms",
            Better::Lower,
            &s,
            Some(&r),
            Target::P50AtMost(30.0),
        );
        if let Some(cold) = cold {
            row = row.note(format!(
                "cold create p50 {cold:.1} ms (above); raw is a plain Docker create, which has no pool"
            ));
        }
        self.rows.push(row);
        self.rows.push(Row::new(
            "create_warm_env",
            "Create from the warm pool, with environmentVars",
            "ms",
            Better::Lower,
            &with_env,
            Some(&r),
            Target::P50AtMost(30.0),
        ));
        self.rows.push(
            Row::new(
                "create_warm_exec",
                "Create → first command from the warm pool (claim, then exec `true`)",
                "ms",
                Better::Lower,
                &s_exec,
                Some(&r_exec),
                Target::P50AtMost(10.0),
            )
            .note(
                "from the create request to the first exec's answer (the server finds the \
                 claimed sandbox's agent); raw: Docker create and start, then `docker exec true`",
            ),
        );
        // The raw sandboxes made here are removed with the rest at the end.
        Ok(())
    }

    /// Create and exec latency under gVisor (`--oci-runtime runsc`,
    /// a second server) against the same under runc (the first server),
    /// interleaved. Skipped with a note when the engine has no `runsc`.
    async fn gvisor(&mut self) -> anyhow::Result<()> {
        if let Some(reason) = std::env::var("STOCKADE_RUNSC_UNUSABLE")
            .ok()
            .filter(|r| !r.trim().is_empty())
        {
            self.notes.push(format!(
                "gVisor was not measured: runsc is unusable on this host ({reason})."
            ));
            return Ok(());
        }
        let runtimes = self.raw.oci_runtimes().await?;
        if !runtimes.iter().any(|r| r == "runsc") {
            self.notes.push(format!(
                "gVisor was not measured: the Docker engine has no `runsc` runtime (it has {}); \
                 scripts/lib/runsc.sh registers one.",
                runtimes.join(", ")
            ));
            return Ok(());
        }
        let (_dir, store) = fresh_sqlite("runsc").await?;
        let (app, runsc) = self
            .second_server(store, Some("runsc".into()), None)
            .await?;
        let result = async {
            let (mut cs, mut cr, mut es, mut er) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let (mut made_s, mut made_r) = (Vec::new(), Vec::new());
            let outcome = async {
                for _ in 0..self.plan.runsc_creates {
                    let t = Instant::now();
                    made_s.push(runsc.create(json!({})).await?);
                    cs.push(ms(t.elapsed()));
                    let t = Instant::now();
                    made_r.push(self.api.create(json!({})).await?);
                    cr.push(ms(t.elapsed()));
                }
                let (a, b) = (made_s[0].clone(), made_r[0].clone());
                let runtime = self.raw.oci_runtime_of(&container_of(&a)?).await?;
                if runtime != "runsc" {
                    bail!("sandbox {a} runs under {runtime:?}, not runsc");
                }
                for _ in 0..self.plan.runsc_execs {
                    let t = Instant::now();
                    let (code, _) = runsc.exec(&a, &["true"]).await?;
                    es.push(ms(t.elapsed()));
                    let t = Instant::now();
                    let (code_r, _) = self.api.exec(&b, &["true"]).await?;
                    er.push(ms(t.elapsed()));
                    if code != 0 || code_r != 0 {
                        bail!("exec true: exit {code} under runsc, {code_r} under runc");
                    }
                }
                Ok::<_, anyhow::Error>(())
            }
            .await;
            for id in &made_s {
                let _ = runsc.delete(id).await;
            }
            for id in &made_r {
                let _ = self.api.delete(id).await;
            }
            outcome.map(|()| (cs, cr, es, er))
        }
        .await;
        app.stop().await;
        let (cs, cr, es, er) = result?;
        self.rows.push(
            Row::new(
                "create_runsc",
                "Create → RUNNING under gVisor (runsc)",
                "ms",
                Better::Lower,
                &cs,
                Some(&cr),
                Target::None,
            )
            .baseline("Stockade under runc"),
        );
        self.rows.push(
            Row::new(
                "exec_runsc",
                "Exec round trip (`true`) under gVisor (runsc)",
                "ms",
                Better::Lower,
                &es,
                Some(&er),
                Target::None,
            )
            .baseline("Stockade under runc")
            .note("both through the API and the sandbox's agent"),
        );
        Ok(())
    }
}

/// The outside host's name in the egress scenarios (answered by its DNS).
const EGRESS_NAME: &str = "bench.test";
/// What the outside host's HTTP server answers.
const EGRESS_BODY: &str = "bench-http";

/// One HTTP/1.0 GET of `/` on `host` port 80 from a shell, printing the
/// response: busybox `nc` with the request on its stdin. (The test image's
/// busybox `wget` segfaults when run through the agent's exec.)
fn http_get(host: &str) -> String {
    format!("printf 'GET / HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' | nc -w 5 {host} 80")
}

/// A shell loop of `n` HTTP GETs of `host`, each checked for the outside
/// host's answer, stopping at the first failure.
fn get_loop(n: usize, host: &str) -> String {
    format!(
        "i=0; while [ $i -lt {n} ]; do {} | grep -q {EGRESS_BODY} || exit 1; \
         i=$((i+1)); done",
        http_get(host)
    )
}

impl Bench {
    /// What an egress policy costs. A second server whose egress
    /// filter asks the outside host's DNS server; HTTP from inside a
    /// sandbox to the outside host under an allow list by name (DNS through
    /// the filter's forwarder, TCP 80 through its transparent proxy) and by
    /// CIDR (packet filter only) against `allow-all` by address, and create
    /// with an allow list against create without. Skipped with a note when
    /// the machine cannot make outside hosts or the filter is not running.
    async fn egress(&mut self) -> anyhow::Result<()> {
        if let Some(why) = crate::outside::unavailable() {
            self.notes.push(format!("Egress was not measured: {why}."));
            return Ok(());
        }
        let host = crate::outside::addr(2);
        let outside = crate::outside::Outside::start(&[(
            2,
            vec![
                "--dns".into(),
                format!("{EGRESS_NAME}={host}"),
                "--http".into(),
                format!("80:{EGRESS_BODY}"),
            ],
        )])?;
        let dns: std::net::SocketAddr = format!("{host}:53")
            .parse()
            .context("the outside host's DNS address")?;
        let (_dir, app, api) = self
            .configured_server("egress", move |c| {
                c.service.egress.upstream_dns = vec![dns];
                // The outside host sits in a private range: opted in.
                let subnet = format!("10.251.{}.0/24", crate::outside::SUBNET);
                c.service.egress.private =
                    stockade_core::netpolicy::PrivateAccess::parse(&[subnet])
                        .expect("the outside subnet is private");
            })
            .await?;
        let mut made = Vec::new();
        let result = self.egress_measure(&api, &host, &mut made).await;
        for id in &made {
            let _ = api.delete(id).await;
        }
        app.stop().await;
        drop(outside);
        if let Some(rows) = result? {
            self.rows.extend(rows);
        }
        Ok(())
    }

    /// The egress measurements on a server that asks the outside DNS; the
    /// sandboxes it makes go into `made`. `None` (and a note) when the
    /// server's egress filter is not running.
    async fn egress_measure(
        &mut self,
        api: &Api,
        host: &str,
        made: &mut Vec<String>,
    ) -> anyhow::Result<Option<Vec<Row>>> {
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            let health = api.health().await?;
            let egress = &health["egress"];
            if egress["status"] != "starting" || Instant::now() > deadline {
                break egress.clone();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if status["status"] != "running" {
            self.notes.push(format!(
                "Egress was not measured: the server's egress filter is not running \
                 (/health egress: {status})."
            ));
            return Ok(None);
        }

        // Create with an allow list by name against create with allow-all,
        // taking turns.
        let by_name = json!({ "networkPolicy": { "allow": [EGRESS_NAME] } });
        let (mut cs, mut cr) = (Vec::new(), Vec::new());
        let (mut named, mut open) = (Vec::new(), Vec::new());
        for _ in 0..self.plan.egress_creates {
            let t = Instant::now();
            let id = api.create(by_name.clone()).await?;
            cs.push(ms(t.elapsed()));
            made.push(id.clone());
            named.push(id);
            let t = Instant::now();
            let id = api.create(json!({})).await?;
            cr.push(ms(t.elapsed()));
            made.push(id.clone());
            open.push(id);
        }
        let cidr = api
            .create(json!({ "networkPolicy": { "allow": [format!("{host}/32")] } }))
            .await?;
        made.push(cidr.clone());
        let (named, open) = (named[0].clone(), open[0].clone());

        // Each side reaches the outside host before anything is timed, and
        // the allow list by name really goes through the filter: the
        // address itself is refused there.
        for (id, target, what) in [
            (&named, EGRESS_NAME, "allow list by name"),
            (&open, host, "allow-all"),
            (&cidr, host, "allow list by CIDR"),
        ] {
            let mut last = String::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                last = api
                    .exec_shell(id, &format!("{} 2>&1", http_get(target)))
                    .await?
                    .1;
                if last.contains(EGRESS_BODY) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if !last.contains(EGRESS_BODY) {
                bail!("{what}: GET http://{target}/ from sandbox {id} answered {last:?}");
            }
        }
        let (_, direct, _) = api
            .exec_shell(&named, &format!("{} 2>&1", http_get(host)))
            .await?;
        if direct.contains(EGRESS_BODY) {
            bail!(
                "the allow list by name let http://{host}/ through: the filter is not in the path"
            );
        }

        // Batches of N requests in one exec each; a sample is the exec's
        // run time over N. The three kinds take turns.
        let n = self.plan.egress_requests;
        let (empty_code, _, empty) = api
            .exec_shell(
                &open,
                &format!("i=0; while [ $i -lt {n} ]; do i=$((i+1)); done"),
            )
            .await?;
        if empty_code != 0 {
            bail!("an empty loop exited {empty_code}");
        }
        let (mut name_s, mut open_s, mut cidr_s) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..self.plan.egress_batches {
            for (id, target, samples) in [
                (&named, EGRESS_NAME, &mut name_s),
                (&open, host, &mut open_s),
                (&cidr, host, &mut cidr_s),
            ] {
                let (code, out, took) = api.exec_shell(id, &get_loop(n, target)).await?;
                if code != 0 {
                    bail!("{n} GETs of http://{target}/ in sandbox {id}: exit {code}: {out}");
                }
                samples.push(took / n as f64);
            }
        }
        let method = format!(
            "One exec runs {n} HTTP/1.0 GETs in a shell loop (`printf … | nc host 80 | grep -q`: \
             new processes and a new TCP connection per request; the image's busybox `wget` \
             segfaults under the agent's exec); a sample is the exec's durationMs / {n} ({} \
             batches; an empty loop's exec took {empty:.0} ms)",
            self.plan.egress_batches
        );
        Ok(Some(vec![
            Row::new(
                "egress_http_name",
                &format!("HTTP GET from a sandbox, allow list by name (`{EGRESS_NAME}`)"),
                "ms",
                Better::Lower,
                &name_s,
                Some(&open_s),
                Target::None,
            )
            .baseline("allow-all, by address")
            .note(format!(
                "by name: DNS through the egress filter's forwarder, TCP 80 through its \
                 transparent proxy; allow-all: straight to the address. {method}"
            )),
            Row::new(
                "egress_http_cidr",
                "HTTP GET from a sandbox, allow list by CIDR (packet filter only)",
                "ms",
                Better::Lower,
                &cidr_s,
                Some(&open_s),
                Target::None,
            )
            .baseline("allow-all, by address")
            .note(format!("both by address. {method}")),
            Row::new(
                "egress_create",
                "Create → RUNNING with an allow list (`networkPolicy`)",
                "ms",
                Better::Lower,
                &cs,
                Some(&cr),
                Target::None,
            )
            .baseline("Stockade, allow-all")
            .note(
                "the same server, taking turns; the allow list adds the sandbox's egress \
                 entry (packet filter, DNS and proxy redirects) before the create answers",
            ),
        ]))
    }
}

/// A terminal's output, read chunk by chunk.
trait TerminalOutput {
    /// Names the terminal in errors.
    const WHICH: &'static str;

    /// The next chunk of output (empty for a message that carries none); an
    /// error once the terminal ended.
    async fn chunk(&mut self) -> anyhow::Result<Vec<u8>>;
}

impl TerminalOutput for crate::client::Terminal {
    const WHICH: &'static str = "terminal";

    async fn chunk(&mut self) -> anyhow::Result<Vec<u8>> {
        use tokio_tungstenite::tungstenite::Message;
        match self.next().await {
            Some(Ok(Message::Binary(b))) => Ok(b.to_vec()),
            Some(Ok(Message::Text(t))) => bail!("the terminal ended: {t}"),
            Some(Ok(Message::Close(c))) => bail!("the terminal's WebSocket closed: {c:?}"),
            Some(Ok(_)) => Ok(Vec::new()),
            Some(Err(e)) => bail!("terminal: {e}"),
            None => bail!("the terminal's WebSocket ended"),
        }
    }
}

impl TerminalOutput for crate::raw::RawTerminal {
    const WHICH: &'static str = "raw terminal";

    async fn chunk(&mut self) -> anyhow::Result<Vec<u8>> {
        match self.output.next().await {
            Some(chunk) => chunk,
            None => bail!("the raw terminal ended"),
        }
    }
}

/// Reads a terminal until its output ends with `want`, into `seen`.
async fn read_until<T: TerminalOutput>(
    term: &mut T,
    seen: &mut Vec<u8>,
    want: &[u8],
) -> anyhow::Result<()> {
    while !seen.ends_with(want) {
        let chunk = tokio::time::timeout(TERMINAL_WAIT, term.chunk())
            .await
            .map_err(|_| terminal_stuck(T::WHICH, want, seen))?;
        seen.extend_from_slice(&chunk?);
    }
    Ok(())
}

fn terminal_stuck(which: &str, want: &[u8], seen: &[u8]) -> anyhow::Error {
    anyhow::anyhow!(
        "{which}: waited {} s for {:?}; got {:?}",
        TERMINAL_WAIT.as_secs(),
        String::from_utf8_lossy(want),
        String::from_utf8_lossy(seen)
    )
}

/// The Docker container of a sandbox Stockade made.
fn container_of(id: &str) -> anyhow::Result<String> {
    let id = SandboxId::parse(id).map_err(|e| {
        anyhow::anyhow!("the server returned a bad sandbox id '{id}': {}", e.message)
    })?;
    Ok(stockade_runtime::container_name(&id))
}

/// The account the admin token belongs to.
async fn admin_account(store: &dyn Store, token: &str) -> anyhow::Result<AccountId> {
    let hash = stockade_core::account::hash_token(token);
    let (account, _) = store
        .account_by_token_hash(&hash)
        .await?
        .context("the admin token has no account")?;
    Ok(account.id)
}

/// Inserts `n` stopped sandbox records straight through the store (no
/// containers); every record has the label `bench`, every tenth also
/// [`TENTH_LABEL`]. Returns the seconds it took.
async fn insert_records(
    store: &Arc<dyn Store>,
    account: &AccountId,
    n: usize,
    defaults: &Defaults,
) -> anyhow::Result<f64> {
    insert_each(store, account, n, SandboxStatus::Stopped, |i, id| {
        let mut labels = vec!["bench".to_owned()];
        if i % 10 == 0 {
            labels.push(TENTH_LABEL.to_owned());
        }
        let spec = SandboxSpec::from_input(
            SpecInput {
                labels: Some(labels),
                ..Default::default()
            },
            id,
            defaults,
        )
        .map_err(|e| anyhow::anyhow!("record settings: {e:?}"))?;
        Ok((spec, RECORD_SERVER.into()))
    })
    .await
}

/// Inserts `n` records of `account` straight through the store, eight at a
/// time, each a millisecond older than the one before and `status`
/// (`Running` or `Stopped`) since then; `settings` gives the i-th its spec
/// and host. Returns the seconds it took.
pub(crate) async fn insert_each(
    store: &Arc<dyn Store>,
    account: &AccountId,
    n: usize,
    status: SandboxStatus,
    settings: impl Fn(usize, &SandboxId) -> anyhow::Result<(SandboxSpec, String)>,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let now = Utc::now();
    let record = |i: usize| -> anyhow::Result<Sandbox> {
        let id = SandboxId::generate();
        let (spec, server) = settings(i, &id)?;
        let created = now - chrono::Duration::milliseconds(i as i64);
        let mut sb = Sandbox::new(id, account.clone(), None, spec, server, created);
        sb.status = status;
        match status {
            SandboxStatus::Running => sb.started_at = Some(created),
            _ => sb.stopped_at = Some(created),
        }
        Ok(sb)
    };
    futures_util::stream::iter(0..n)
        .map(|i| {
            let store = store.clone();
            let sb = record(i);
            async move {
                store.insert_sandbox(&sb?).await?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(started.elapsed().as_secs_f64())
}

/// A fresh PostgreSQL database of its own on the server at a URL, for one
/// measurement.
pub(crate) struct ScratchDatabase {
    admin: sqlx::PgConnection,
    pub(crate) name: String,
}

impl ScratchDatabase {
    pub(crate) async fn create(url: &str) -> anyhow::Result<Self> {
        use sqlx::{Connection, Executor};
        let name = format!("stockade_bench_{}", SandboxId::generate());
        let mut admin = sqlx::PgConnection::connect(url)
            .await
            .context("could not connect to PostgreSQL (--postgres / STOCKADE_TEST_DATABASE_URL)")?;
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .context("CREATE DATABASE (does the role have CREATEDB?)")?;
        Ok(Self { admin, name })
    }

    /// Drops the database; a note saying why when it could not be.
    pub(crate) async fn remove(mut self) -> Option<String> {
        use sqlx::Executor;
        let name = &self.name;
        let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        let outcome = self.admin.execute(drop.as_str()).await;
        outcome
            .err()
            .map(|e| format!("could not drop the database {name}: {e}"))
    }
}

/// A fresh SQLite database `NAME.db` in a temporary directory of its own
/// (removed when the directory is dropped).
pub(crate) async fn fresh_sqlite(
    name: &str,
) -> anyhow::Result<(tempfile::TempDir, Arc<dyn Store>)> {
    let dir = tempfile::tempdir().context("could not create a temporary directory")?;
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::connect(&format!(
            "sqlite://{}",
            dir.path().join(format!("{name}.db")).display()
        ))
        .await
        .context("could not open the SQLite database")?,
    );
    Ok((dir, store))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_fields_are_read() {
        let status = "Name:\tstockade-agent\nUmask:\t0022\nVmRSSx:\t1 kB\nVmRSS:\t    3584 kB\n";
        assert_eq!(status_field(status, "Name"), Some("stockade-agent"));
        assert_eq!(vmrss_mib(status), Some(3.5));
        assert_eq!(status_field(status, "VmHWM"), None);
        assert_eq!(vmrss_mib("Name:\tx\nVmRSS:\tlots\n"), None);
    }
}
