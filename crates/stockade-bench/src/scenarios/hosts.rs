//! The several-hosts scenarios: the placement
//! transaction at 10,000 sandboxes over 50 simulated hosts (records only,
//! SQLite and PostgreSQL), and create latency and 20-at-once throughput on
//! three real Docker hosts against the own host alone, in the same run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt};
use reqwest::{Method, StatusCode};
use serde_json::json;
use stockade_core::spec::SpecInput;
use stockade_core::{
    AccountId, Defaults, Host, Operation, OperationKind, Resources, Sandbox, SandboxId,
    SandboxSpec, SandboxStatus,
};
use stockade_store::{Placed, PlacementCandidate, Store};

use super::{admin_account, default_spec, ms, with_database, Bench};
use crate::app::App;
use crate::client::Api;
use crate::report::{Better, Row, Target};

/// Simulated hosts of the placement scenario (the figure).
pub(crate) const PLACEMENT_HOSTS: usize = 50;
/// The goal for one placement, in ms.
const PLACEMENT_GOAL_MS: f64 = 5.0;
/// Placements before any is timed (connections, statement caches).
const PLACEMENT_WARM_UP: usize = 3;
/// What the whole placement call does, for the report.
const PLACEMENT_WHOLE: &str =
    "`HostStore::insert_sandbox_placed` with all 50 hosts as candidates: \
     begin, the placement lock (PostgreSQL: a transaction-scoped advisory lock; SQLite: the \
     write lock its transaction takes), one grouped SUM of CPU and memory of the records \
     holding resources on the candidates, the choice (freest host with room), the insert of \
     the sandbox record and its create operation, commit";
/// What the decision alone does, for the report.
const PLACEMENT_DECISION: &str = "the same call with every candidate's limits at 0, so it \
     refuses: begin, the placement lock, the grouped SUM, the choice (none fits), commit of \
     nothing — the decision without the insert";

/// The simulated host `i` of the placement scenario.
fn sim_host(i: usize) -> String {
    format!("sim-{i:02}")
}

/// The default settings of sandbox `id` (its name comes from the id).
fn spec_of(id: &SandboxId, defaults: &Defaults) -> anyhow::Result<SandboxSpec> {
    SandboxSpec::from_input(SpecInput::default(), id, defaults)
        .map_err(|e| anyhow::anyhow!("default sandbox settings: {e:?}"))
}

/// Figures of one placement run.
struct PlacementFigures {
    whole: Vec<f64>,
    decision: Vec<f64>,
    insert_secs: f64,
    /// Distinct hosts the timed placements went to.
    spread: usize,
    /// PostgreSQL: whole calls right after the bulk insert, before VACUUM
    /// ANALYZE.
    fresh: Option<crate::report::Summary>,
}

/// The engines of `scripts/test` beside the main one: h2 on a unix socket,
/// h3 on TCP with TLS client certificates.
struct Engines {
    h2: String,
    h3: String,
    h3_tls: PathBuf,
}

impl Engines {
    /// `None` (with the reason) when the environment does not name them.
    fn from_env() -> Result<Self, String> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| format!("{name} is not set"))
        };
        Ok(Self {
            h2: var("STOCKADE_TEST_HOST2")?,
            h3: var("STOCKADE_TEST_HOST3")?,
            h3_tls: var("STOCKADE_TEST_HOST3_TLS")?.into(),
        })
    }
}

/// The registered hosts of the three-hosts scenario.
const OTHER_HOSTS: [&str; 2] = ["h2", "h3"];

/// Samples of one side of the three-hosts scenario.
#[derive(Default)]
struct CreateFigures {
    one_by_one: Vec<f64>,
    burst_walls: Vec<f64>,
    /// How many creates each host took, over every create of the side.
    per_host: BTreeMap<String, usize>,
    /// The one-at-a-time samples by the host each went to.
    by_host: BTreeMap<String, Vec<f64>>,
}

impl CreateFigures {
    /// "h2 8 (p50 420.1 ms one at a time), …" for the report.
    fn spread(&self) -> String {
        self.per_host
            .iter()
            .map(|(h, n)| {
                match self
                    .by_host
                    .get(h)
                    .and_then(|s| crate::report::summarize(s))
                {
                    Some(s) => format!("{h} {n} (one at a time: p50 {:.1} ms)", s.p50),
                    None => format!("{h} {n}"),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Bench {
    /// The `hosts` group: placement on SQLite (and PostgreSQL when the run
    /// has a URL), then three hosts against one.
    pub(super) async fn hosts(&mut self) -> anyhow::Result<()> {
        let (_dir, store) = super::fresh_sqlite("placement").await?;
        let figures = measure_placement(&store, &self.plan, &self.defaults, None).await?;
        drop(store);
        self.placement_rows("SQLite", "sqlite", figures);
        match self.postgres.clone() {
            Some(url) => self.placement_postgres(&url).await?,
            None => self.notes.push(
                "Placement on PostgreSQL was not measured: set STOCKADE_TEST_DATABASE_URL or \
                 --postgres."
                    .into(),
            ),
        }
        self.three_hosts().await
    }

    /// The placement scenario on a fresh PostgreSQL database (dropped after).
    async fn placement_postgres(&mut self, url: &str) -> anyhow::Result<()> {
        let scratch = super::ScratchDatabase::create(url).await?;
        let result = async {
            let url = with_database(url, &scratch.name);
            let store = stockade_store::connect(&url).await?;
            measure_placement(&store, &self.plan, &self.defaults, Some(&url)).await
        }
        .await;
        self.notes.extend(scratch.remove().await);
        self.placement_rows("PostgreSQL", "postgres", result?);
        Ok(())
    }

    fn placement_rows(&mut self, backend: &str, key: &str, f: PlacementFigures) {
        let records = self.plan.placement_sandboxes;
        if let Some(fresh) = &f.fresh {
            self.notes.push(format!(
                "Placement ({backend}) is measured after VACUUM ANALYZE (what autovacuum does \
                 within about a minute of a bulk insert; the covering index is read alone only \
                 once the visibility map is set); right after inserting, the whole call took \
                 p50 {:.2} ms (n={}).",
                fresh.p50, fresh.n
            ));
        }
        self.notes.push(format!(
            "Placement ({backend}): {records} RUNNING records on {PLACEMENT_HOSTS} simulated \
             hosts inserted through the store in {:.1} s; the {} timed placements went to {} \
             different hosts.",
            f.insert_secs,
            f.whole.len(),
            f.spread
        ));
        self.rows.push(
            Row::new(
                &format!("placement_{key}"),
                &format!(
                    "Placement, {records} sandboxes on {PLACEMENT_HOSTS} hosts, whole call ({backend})"
                ),
                "ms",
                Better::Lower,
                &f.whole,
                None,
                Target::P50AtMost(PLACEMENT_GOAL_MS),
            )
            .note(PLACEMENT_WHOLE),
        );
        self.rows.push(
            Row::new(
                &format!("placement_decision_{key}"),
                &format!(
                    "Placement decision alone, {records} sandboxes on {PLACEMENT_HOSTS} hosts ({backend})"
                ),
                "ms",
                Better::Lower,
                &f.decision,
                None,
                Target::P50AtMost(PLACEMENT_GOAL_MS),
            )
            .note(PLACEMENT_DECISION),
        );
    }

    /// Create → RUNNING one at a time and `host_burst` at once, first with
    /// the own host alone (the others cordoned), then with all three, on a
    /// server of its own. Skipped with a note without the engines.
    async fn three_hosts(&mut self) -> anyhow::Result<()> {
        let engines = match Engines::from_env() {
            Ok(e) => e,
            Err(why) => {
                self.notes.push(format!(
                    "Three hosts against one was not measured: {why} (scripts/test sets \
                     STOCKADE_TEST_HOST2, STOCKADE_TEST_HOST3 and STOCKADE_TEST_HOST3_TLS; see \
                     the README's benchmark section)."
                ));
                return Ok(());
            }
        };
        let (_dir, store) = super::fresh_sqlite("hosts").await?;
        let (app, api) = self.second_server(store, None, None).await?;
        let mut made = Vec::new();
        let mut registered = Vec::new();
        let result = self
            .three_hosts_measure(&app, &api, &engines, &mut made, &mut registered)
            .await;
        // Everything it made goes, also when a step failed: the sandboxes
        // through the API, what is left on any host by its label, then the
        // registered hosts.
        let deletes = futures_util::stream::iter(made.iter().map(|id| api.delete(id)))
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
        let failed = deletes.iter().filter(|d| d.is_err()).count();
        let swept = sweep(&app).await;
        if failed > 0 || swept > 0 {
            self.notes.push(format!(
                "Three hosts: {failed} sandbox deletes failed; {swept} containers or volumes \
                 were removed by their label afterwards."
            ));
        }
        for name in &registered {
            if let Err(e) = api
                .hosts_call(
                    Method::DELETE,
                    &format!("/hosts/{name}"),
                    None,
                    StatusCode::NO_CONTENT,
                )
                .await
            {
                self.notes
                    .push(format!("could not remove host {name} afterwards: {e:#}"));
            }
        }
        app.stop().await;
        let Some((one, three)) = result? else {
            return Ok(());
        };
        let k = self.plan.host_burst;
        let note = format!(
            "the own engine plus h2 (unix socket) and h3 (TCP with TLS), three dockerd on this \
             one machine sharing its CPUs; the sides take turns (own host alone, three, three, \
             own host alone; half of each side's creates and bursts per turn); one at a time \
             keeps each sandbox until the turn's last create; each burst is deleted before the \
             next. Creates per host, three hosts: {}; own host only: {}",
            three.spread(),
            one.spread()
        );
        self.rows.push(
            Row::new(
                "create_hosts",
                "Create → RUNNING, one at a time, on three hosts",
                "ms",
                Better::Lower,
                &three.one_by_one,
                Some(&one.one_by_one),
                Target::None,
            )
            .baseline("Stockade, own host only")
            .note(note),
        );
        let rate =
            |walls: &[f64]| -> Vec<f64> { walls.iter().map(|w| k as f64 / (w / 1000.0)).collect() };
        self.rows.push(
            Row::new(
                "burst_hosts",
                &format!("{k} creates at once on three hosts, wall time"),
                "ms",
                Better::Lower,
                &three.burst_walls,
                Some(&one.burst_walls),
                Target::None,
            )
            .baseline("Stockade, own host only"),
        );
        self.rows.push(
            Row::new(
                "burst_hosts_rate",
                &format!("{k} creates at once on three hosts, throughput"),
                "sandboxes/s",
                Better::Higher,
                &rate(&three.burst_walls),
                Some(&rate(&one.burst_walls)),
                Target::None,
            )
            .baseline("Stockade, own host only"),
        );
        Ok(())
    }

    /// Registers h2 and h3 (into `registered`), warms every host up, and
    /// measures the own host alone, then all three. Sandboxes it keeps go
    /// into `made`. `None` (and a note) when an engine lacks the image.
    async fn three_hosts_measure(
        &mut self,
        app: &App,
        api: &Api,
        engines: &Engines,
        made: &mut Vec<String>,
        registered: &mut Vec<String>,
    ) -> anyhow::Result<Option<(CreateFigures, CreateFigures)>> {
        let tls = |f: &str| engines.h3_tls.join(f).display().to_string();
        for (name, body) in [
            (
                "h2",
                json!({ "name": "h2", "dockerHost": engines.h2, "labels": { "bench": "h2" } }),
            ),
            (
                "h3",
                json!({
                    "name": "h3", "dockerHost": engines.h3, "labels": { "bench": "h3" },
                    "tls": { "ca": tls("ca.pem"), "cert": tls("cert.pem"), "key": tls("key.pem") },
                }),
            ),
        ] {
            api.hosts_call(Method::POST, "/hosts", Some(body), StatusCode::CREATED)
                .await
                .with_context(|| format!("registering {name}"))?;
            registered.push(name.to_owned());
        }
        let own = app.state.svc.hosts().own_name().to_owned();
        for (name, rt) in app.state.svc.host_runtimes().await {
            if !rt.image_present(&self.cli_image).await.unwrap_or(false) {
                self.notes.push(format!(
                    "Three hosts against one was not measured: the image {} is not on host \
                     {name} (scripts/lib/engine.sh `test_engine_load` copies it there).",
                    self.cli_image
                ));
                return Ok(None);
            }
        }
        // One create on each host first: the agent volume and the networks
        // are made on a host's first create.
        for name in [own.as_str(), OTHER_HOSTS[0], OTHER_HOSTS[1]] {
            let (id, server) = api.create_placed(json!({ "server": name })).await?;
            if server != name {
                bail!("a create for server {name} was placed on {server}");
            }
            api.delete(&id).await?;
        }
        // Own host alone, three, three, own host alone: half of each
        // side's work in each turn, so that drift of the machine's load
        // hits both sides alike.
        let mut one = CreateFigures::default();
        let mut three = CreateFigures::default();
        for cordoned in [true, false, false, true] {
            let state = if cordoned { "cordoned" } else { "active" };
            for name in OTHER_HOSTS {
                api.hosts_call(
                    Method::PATCH,
                    &format!("/hosts/{name}"),
                    Some(json!({ "state": state })),
                    StatusCode::OK,
                )
                .await?;
            }
            let figures = if cordoned { &mut one } else { &mut three };
            self.create_side(api, figures, made).await?;
        }
        if one.per_host.keys().any(|h| *h != own) {
            bail!(
                "with h2 and h3 cordoned, creates went to {:?}",
                one.per_host
            );
        }
        Ok(Some((one, three)))
    }

    /// Half of one side of the three-hosts scenario: half of `host_creates`
    /// one at a time (kept until the end of the turn), then half of
    /// `host_bursts` rounds of `host_burst` at once, each deleted before
    /// the next.
    async fn create_side(
        &self,
        api: &Api,
        figures: &mut CreateFigures,
        made: &mut Vec<String>,
    ) -> anyhow::Result<()> {
        let mut kept = Vec::new();
        for _ in 0..self.plan.host_creates.div_ceil(2) {
            let t = Instant::now();
            let (id, server) = api.create_placed(json!({})).await?;
            let took = ms(t.elapsed());
            figures.one_by_one.push(took);
            figures
                .by_host
                .entry(server.clone())
                .or_default()
                .push(took);
            *figures.per_host.entry(server).or_default() += 1;
            made.push(id.clone());
            kept.push(id);
        }
        delete_all(api, &kept, made).await?;
        for _ in 0..self.plan.host_bursts.div_ceil(2) {
            let t = Instant::now();
            let results = futures_util::future::join_all(
                (0..self.plan.host_burst).map(|_| api.create_placed(json!({}))),
            )
            .await;
            figures.burst_walls.push(ms(t.elapsed()));
            let mut burst = Vec::new();
            let mut first_error = None;
            for r in results {
                match r {
                    Ok((id, server)) => {
                        *figures.per_host.entry(server).or_default() += 1;
                        made.push(id.clone());
                        burst.push(id);
                    }
                    Err(e) => first_error = first_error.or(Some(e)),
                }
            }
            if let Some(e) = first_error {
                return Err(e.context("a create of the burst failed"));
            }
            delete_all(api, &burst, made).await?;
        }
        Ok(())
    }
}

/// Deletes `ids` (eight at a time) and takes them out of `made`.
async fn delete_all(api: &Api, ids: &[String], made: &mut Vec<String>) -> anyhow::Result<()> {
    futures_util::stream::iter(ids.iter().map(|id| api.delete(id)))
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    made.retain(|m| !ids.contains(m));
    Ok(())
}

/// Removes every container and volume of `app`'s instance left on any of
/// its hosts; returns how many.
async fn sweep(app: &App) -> usize {
    let instance = app.instance_id();
    let mut removed = 0;
    for (_, rt) in app.state.svc.host_runtimes().await {
        for c in rt.list_managed().await.unwrap_or_default() {
            if c.instance_id.as_deref() != Some(instance.as_str()) {
                continue;
            }
            if let Some(id) = c.sandbox_id {
                removed += usize::from(rt.remove(&id, false).await.is_ok());
            }
        }
        for v in rt.list_volumes().await.unwrap_or_default() {
            if v.instance_id.as_deref() == Some(instance.as_str()) {
                removed += usize::from(rt.remove_volume(&v.name).await.is_ok());
            }
        }
    }
    removed
}

/// The placement scenario on `store` (fresh): 50 hosts,
/// `placement_sandboxes` RUNNING records spread evenly over them, then
/// `placements` placements with every host a candidate, each followed by a
/// refused one (the decision alone), taking turns. `settle`, when given,
/// runs after a quarter as many placements (not in the rows) right after
/// the insert (PostgreSQL: what autovacuum does within a minute of a
/// bulk insert); their p50 comes back as `fresh`.
async fn measure_placement(
    store: &Arc<dyn Store>,
    plan: &crate::Plan,
    defaults: &Defaults,
    settle: Option<&str>,
) -> anyhow::Result<PlacementFigures> {
    let token = format!("stk_bench_{}", SandboxId::generate());
    stockade_server::bootstrap(store.as_ref(), Some(&token))
        .await
        .context("could not create the admin account")?;
    let account = admin_account(store.as_ref(), &token).await?;
    let now = chrono::SubsecRound::trunc_subsecs(Utc::now(), 6);
    for i in 0..PLACEMENT_HOSTS {
        store
            .insert_host(&Host {
                labels: BTreeMap::from([("bench".to_owned(), "placement".to_owned())]),
                cpus: Some(1024),
                memory_bytes: Some(4 << 40),
                // Never connected: placement reads records only.
                ..Host::new(sim_host(i), format!("tcp://192.0.2.{}:2376", i + 1), now)
            })
            .await
            .with_context(|| format!("insert host {}", sim_host(i)))?;
    }
    let records = plan.placement_sandboxes;
    // RUNNING records spread evenly over the simulated hosts.
    let running = SandboxStatus::Running;
    let insert_secs = super::insert_each(store, &account, records, running, |i, id| {
        Ok((spec_of(id, defaults)?, sim_host(i % PLACEMENT_HOSTS)))
    })
    .await?;
    let need = Resources::of(&default_spec(defaults)?);
    let fresh_n = settle.map_or(0, |_| plan.placements.div_ceil(4));
    // Room for every record and placement on every host: each placement fits.
    let room = (records + plan.placements + fresh_n + PLACEMENT_WARM_UP + 1) as u64;
    let open: Vec<PlacementCandidate> = (0..PLACEMENT_HOSTS)
        .map(|i| PlacementCandidate {
            server: sim_host(i),
            cpu_limit_millis: Some(need.cpu_millis * room),
            memory_limit_bytes: Some(need.memory_bytes * room),
            extra: Resources::default(),
        })
        .collect();
    let mut run = Placements {
        store: store.clone(),
        account,
        defaults,
        shut: open
            .iter()
            .map(|c| PlacementCandidate {
                cpu_limit_millis: Some(0),
                memory_limit_bytes: Some(0),
                ..c.clone()
            })
            .collect(),
        open,
        need,
        held: records as u64,
    };
    run.sample(PLACEMENT_WARM_UP).await?;
    let fresh = match settle {
        Some(url) => {
            use sqlx::{Connection, Executor};
            let (whole, _, _) = run.sample(fresh_n).await?;
            let mut conn = sqlx::PgConnection::connect(url)
                .await
                .context("could not connect to the benchmark's PostgreSQL database")?;
            conn.execute("VACUUM ANALYZE sandboxes")
                .await
                .context("VACUUM ANALYZE")?;
            crate::report::summarize(&whole)
        }
        None => None,
    };
    let (whole, decision, chosen) = run.sample(plan.placements).await?;
    Ok(PlacementFigures {
        whole,
        decision,
        insert_secs,
        spread: chosen.len(),
        fresh,
    })
}

/// Placements on one store, counting what its records hold.
struct Placements<'a> {
    store: Arc<dyn Store>,
    account: AccountId,
    defaults: &'a Defaults,
    /// Every simulated host, with room for every placement.
    open: Vec<PlacementCandidate>,
    /// The same hosts without any room: the call refuses.
    shut: Vec<PlacementCandidate>,
    /// What one default sandbox reserves.
    need: Resources,
    /// Records holding resources so far.
    held: u64,
}

impl Placements<'_> {
    /// One placement onto `candidates`: its time in ms and its outcome.
    async fn place(&self, candidates: &[PlacementCandidate]) -> anyhow::Result<(f64, Placed)> {
        let id = SandboxId::generate();
        let spec = spec_of(&id, self.defaults)?;
        let now = Utc::now();
        let mut sb = Sandbox::new(
            id.clone(),
            self.account.clone(),
            None,
            spec,
            String::new(),
            now,
        );
        let op = Operation::new(
            id.to_string(),
            OperationKind::Create,
            self.account.clone(),
            "stockade-bench",
            now,
            now + chrono::Duration::seconds(60),
        );
        let t = Instant::now();
        let placed = self
            .store
            .insert_sandbox_placed(&mut sb, Some(&op), candidates)
            .await
            .context("insert_sandbox_placed")?;
        Ok((ms(t.elapsed()), placed))
    }

    /// `n` placements, each followed by a refused one; the times of each
    /// kind and the hosts chosen. Every refusal checks that the decision
    /// read every record holding resources.
    async fn sample(&mut self, n: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>, BTreeSet<String>)> {
        let (mut whole, mut decision, mut chosen) = (Vec::new(), Vec::new(), BTreeSet::new());
        for _ in 0..n {
            let (took, placed) = self.place(&self.open).await?;
            match placed {
                Placed::On(server) => chosen.insert(server),
                Placed::Full(_) => bail!("a placement found no room on {PLACEMENT_HOSTS} hosts"),
            };
            whole.push(took);
            self.held += 1;
            let (took, refused) = self.place(&self.shut).await?;
            let Placed::Full(loads) = refused else {
                bail!("a placement onto hosts without room was not refused: {refused:?}");
            };
            let seen: u64 = loads.iter().map(|l| l.reserved.cpu_millis).sum();
            let expected = self.held * self.need.cpu_millis;
            if loads.len() != PLACEMENT_HOSTS || seen != expected {
                bail!(
                    "the placement saw {seen} CPU millis reserved on {} hosts, expected \
                     {expected} on {PLACEMENT_HOSTS}",
                    loads.len()
                );
            }
            decision.push(took);
        }
        Ok((whole, decision, chosen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_host_names_are_valid_host_names() {
        for i in [0, 9, PLACEMENT_HOSTS - 1] {
            let name = sim_host(i);
            assert_eq!(
                stockade_core::host::parse_host_name(&name, "name"),
                Ok(name.clone())
            );
        }
        assert_eq!(sim_host(7), "sim-07");
    }
}
