//! Fleets: a burst of creates at once, each timed to its first command,
//! cold and from a warm pool as large as the burst; and density, hundreds of
//! small idle sandboxes on one host — the server's memory, list and exec
//! against one sandbox (a list also against a full page), its idle CPU,
//! what each sandbox costs the host, and one bulk delete of them all against
//! Docker removing as many containers.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::bail;
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::{ms, rss_mib, Bench};
use crate::client::Api;
use crate::raw::{Raw, RawSandbox};
use crate::report::{Better, Row, Target};

/// The small sandbox of bursts and density: a tenth of a core, 64 MB.
const SMALL_CPU: f64 = 0.1;
const SMALL_MEMORY_GB: f64 = 0.0625;
/// The warm burst's goal: its p50 at most this many ms above the p50 of as
/// many concurrent `GET /me` (the client's and server's own floor).
const WARM_BURST_ABOVE_FLOOR_MS: f64 = 60.0;
/// Creates at once while density fills the host.
const DENSITY_WAVE: usize = 10;
/// Lists and execs measured at one sandbox and at full density.
const DENSITY_SAMPLES: usize = 50;
/// The page the density lists ask for.
const DENSITY_PAGE: usize = 50;
/// Removals at once in the raw baseline of the bulk delete: the server's
/// default `bulk_concurrency`.
const RAW_REMOVALS_AT_ONCE: usize = 8;

fn small_body(labels: Value) -> Value {
    json!({ "cpuCores": SMALL_CPU, "memoryGB": SMALL_MEMORY_GB, "labels": labels })
}

/// `n` tasks at once; each sample is one task's own time (ms) from the
/// common start. Returns the samples of the tasks that succeeded, what each
/// made, and the errors of the others.
async fn all_at_once<T, F, Fut>(n: usize, task: F) -> (Vec<f64>, Vec<T>, Vec<String>)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let start = Instant::now();
    let done = futures_util::future::join_all((0..n).map(|i| {
        let work = task(i);
        async move {
            let r = work.await;
            (ms(start.elapsed()), r)
        }
    }))
    .await;
    let (mut samples, mut made, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    for (took, r) in done {
        match r {
            Ok(m) => {
                samples.push(took);
                made.push(m);
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    (samples, made, errors)
}

/// `k of n succeeded` and, when some failed, the first errors.
fn successes(k: usize, n: usize, errors: &[String]) -> String {
    let mut s = format!("{k}/{n} succeeded");
    if !errors.is_empty() {
        let first: Vec<&str> = errors.iter().take(3).map(String::as_str).collect();
        s.push_str(&format!(" (first errors: {})", first.join("; ")));
    }
    s
}

/// Create (RUNNING) then exec `true` through the public API: the sandbox id.
async fn create_then_exec(api: &Api, body: Value) -> anyhow::Result<String> {
    let id = api.create(body).await?;
    let (code, _) = api.exec(&id, &["true"]).await?;
    if code != 0 {
        bail!("first exec in {id}: exit {code}");
    }
    Ok(id)
}

/// Docker's create and start of the same container, then `docker exec true`.
async fn raw_create_then_exec(raw: &Raw) -> anyhow::Result<RawSandbox> {
    let made = raw.create().await?;
    let (code, _) = raw.exec(&made.name, &["true"]).await?;
    if code != 0 {
        bail!("raw first exec in {}: exit {code}", made.name);
    }
    Ok(made)
}

/// This process's CPU time (user and system), in ms.
fn cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces) in `)`.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Clock ticks, 100 a second on Linux.
    Some((utime + stime) * 10.0)
}

/// The summed resident memory (MiB) and count of the processes whose
/// command name starts with `prefix`.
fn processes_rss(prefix: &str) -> (f64, usize) {
    let (mut mib, mut n) = (0.0, 0);
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return (0.0, 0);
    };
    for entry in dir.flatten() {
        let path = entry.path();
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
            continue;
        };
        if !comm.trim().starts_with(prefix) {
            continue;
        }
        if let Some(rss) = std::fs::read_to_string(path.join("status"))
            .ok()
            .and_then(|s| super::vmrss_mib(&s))
        {
            mib += rss;
            n += 1;
        }
    }
    (mib, n)
}

/// `MemAvailable` of the host, in MiB.
fn host_available_mib() -> Option<f64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: f64 = super::status_field(&meminfo, "MemAvailable")?
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

impl Bench {
    /// A raw baseline whose containers are as small as the fleets' sandboxes.
    async fn small_raw(&mut self) -> anyhow::Result<Raw> {
        let raw = Raw::connect(
            &self.docker_host,
            &self.cli_image,
            SMALL_CPU,
            (SMALL_MEMORY_GB * 1024.0 * 1024.0 * 1024.0) as i64,
        )
        .await?;
        self.instances.push(raw.instance.to_string());
        Ok(raw)
    }

    /// `fleet_burst` creates at once through the public API, each timed
    /// to its first command's answer, against as many Docker creates,
    /// starts and execs at once; then the same from a warm pool of as many
    /// members, against as many `GET /me` at once on that server.
    pub(super) async fn fleet_bursts(&mut self) -> anyhow::Result<()> {
        let n = self.plan.fleet_burst;
        let raw = self.small_raw().await?;
        let body = small_body(json!(["bench-burst"]));

        let api = &self.api;
        let (cold, cold_made, cold_errors) =
            all_at_once(n, |_| create_then_exec(api, body.clone())).await;
        let (raw_samples, raw_made, raw_errors) =
            all_at_once(n, |_| raw_create_then_exec(&raw)).await;
        let deleted = self.api.bulk_delete_labels(json!(["bench-burst"])).await;
        for made in &raw_made {
            let _ = raw.destroy(made).await;
        }
        deleted?;
        self.rows.push(
            Row::new(
                "burst_cold",
                &format!("{n} creates at once → first command, cold"),
                "ms",
                Better::Lower,
                &cold,
                Some(&raw_samples),
                Target::RatioAtMost(1.10),
            )
            .note(format!(
                "each create's own time from the common start to its first exec's answer \
                 (0.1 CPU, 64 MB); Stockade {}; raw (Docker create, start, exec at once) {}",
                successes(cold_made.len(), n, &cold_errors),
                successes(raw_made.len(), n, &raw_errors)
            )),
        );
        if cold_made.len() < n {
            bail!(
                "cold burst: {}",
                successes(cold_made.len(), n, &cold_errors)
            );
        }
        self.warm_burst(n).await
    }

    /// The warm half of [`Self::fleet_bursts`].
    pub(super) async fn warm_burst(&mut self, n: usize) -> anyhow::Result<()> {
        use stockade_service::pool::{PoolClassConfig, PoolConfig};
        let (_dir, app, api) = self
            .configured_server("burst", move |c| {
                c.service.pool = PoolConfig {
                    classes: vec![PoolClassConfig {
                        cpu_cores: Some(SMALL_CPU),
                        memory_gb: Some(SMALL_MEMORY_GB),
                        ..PoolClassConfig::default_class(n)
                    }],
                    check_interval: Duration::from_millis(500),
                    drain_on_shutdown: true,
                    max_concurrent_fills: 8,
                };
            })
            .await?;
        let result = async {
            let fill = Instant::now();
            while app.state.svc.pool().ready_total() < n {
                if fill.elapsed() > Duration::from_secs(600) {
                    bail!(
                        "the warm pool did not fill to {n} within 10 minutes ({} ready)",
                        app.state.svc.pool().ready_total()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let fill_secs = fill.elapsed().as_secs_f64();
            // Let the members' agents connect, as they would long before a
            // burst in a server that has been running.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let members = app.state.svc.pool().members();
            let (floor, _, floor_errors) = all_at_once(n, |_| api.me()).await;
            if !floor_errors.is_empty() {
                bail!(
                    "GET /me at once: {}",
                    successes(floor.len(), n, &floor_errors)
                );
            }
            let body = small_body(json!(["bench-burst-warm"]));
            let (warm, made, errors) =
                all_at_once(n, |_| create_then_exec(&api, body.clone())).await;
            let hits = made
                .iter()
                .filter(|id| members.iter().any(|m| m.as_str() == id.as_str()))
                .count();
            api.bulk_delete_labels(json!(["bench-burst-warm"])).await?;
            Ok::<_, anyhow::Error>((warm, made.len(), errors, floor, hits, fill_secs))
        }
        .await;
        app.stop().await;
        let (warm, ok, errors, floor, hits, fill_secs) = result?;
        self.rows.push(
            Row::new(
                "burst_warm",
                &format!("{n} creates at once → first command, warm pool of {n}"),
                "ms",
                Better::Lower,
                &warm,
                Some(&floor),
                Target::P50AboveBaselineAtMost(WARM_BURST_ABOVE_FLOOR_MS),
            )
            .baseline(format!("{n} × GET /me at once"))
            .note(format!(
                "{}; {hits} from the pool; the pool of {n} filled in {fill_secs:.1} s",
                successes(ok, n, &errors)
            )),
        );
        if ok < n {
            bail!("warm burst: {}", successes(ok, n, &errors));
        }
        Ok(())
    }

    /// `density` small idle sandboxes: the server's memory, list and exec
    /// at one sandbox and at all of them, the server's CPU while idle, what
    /// each costs the host, and a bulk delete of them all.
    pub(super) async fn density(&mut self) -> anyhow::Result<()> {
        let n = self.plan.density;
        let idle = if self.plan.quick {
            Duration::from_secs(5)
        } else {
            Duration::from_secs(30)
        };
        let (_dir, app, api) = self.configured_server("density", |_| {}).await?;
        let labels = json!(["bench-density"]);
        let result = async {
            let first = api.create(small_body(labels.clone())).await?;
            let one = self.density_figures(&api, &first, idle).await?;
            let (before_shims, _) = processes_rss("containerd-shim");
            let host_before = host_available_mib();
            let fill = Instant::now();
            let mut made = 1;
            // Lists of a full page, once the first page is full: what a
            // page costs whatever the sandboxes behind it.
            let mut full_page = None;
            while made < n {
                let wave = DENSITY_WAVE.min(n - made);
                let (_, ids, errors) =
                    all_at_once(wave, |_| api.create(small_body(labels.clone()))).await;
                if !errors.is_empty() {
                    bail!(
                        "density: create {} of {n}: {}",
                        made + 1,
                        successes(ids.len(), wave, &errors)
                    );
                }
                made += wave;
                if made >= DENSITY_PAGE && full_page.is_none() {
                    full_page = Some((made, self.lists(&api).await?));
                }
            }
            let fill_secs = fill.elapsed().as_secs_f64();
            // Settle: the creates' background work (agents connecting,
            // events) done before idle figures.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let full = self.density_figures(&api, &first, idle).await?;
            let (shims, shim_count) = processes_rss("containerd-shim");
            let (agents, agent_count) = processes_rss("stockade-agent");
            let host_after = host_available_mib();
            let t = Instant::now();
            let deleted = api.bulk_delete_labels(labels.clone()).await?;
            let delete_secs = t.elapsed().as_secs_f64();
            if deleted != n {
                bail!("density: the bulk delete removed {deleted} of {n}");
            }
            let left = self.raw.left_of(&app.instance_id()).await?;
            let raw_delete_secs = self.raw_removal(n).await?;
            Ok::<_, anyhow::Error>(DensityRun {
                full_page,
                raw_delete_secs,
                one,
                full,
                fill_secs,
                delete_secs,
                left,
                shim_mib_each: (shims - before_shims) / (n - 1).max(1) as f64,
                shim_count,
                agent_mib_each: agents / agent_count.max(1) as f64,
                agent_count,
                host_mib_each: host_before
                    .zip(host_after)
                    .map(|(b, a)| (b - a) / (n - 1).max(1) as f64),
            })
        }
        .await;
        app.stop().await;
        let run = result?;
        self.density_rows(n, &run)
    }

    /// Lists, execs, resident memory and idle CPU of the server with its
    /// sandboxes as they are; `id` is the one the execs run in.
    async fn density_figures(
        &self,
        api: &Api,
        id: &str,
        idle: Duration,
    ) -> anyhow::Result<DensityFigures> {
        let lists = self.lists(api).await?;
        let mut execs = Vec::new();
        for _ in 0..DENSITY_SAMPLES {
            let t = Instant::now();
            let (code, _) = api.exec(id, &["true"]).await?;
            if code != 0 {
                bail!("density: exec in {id}: exit {code}");
            }
            execs.push(ms(t.elapsed()));
        }
        let cpu_before = cpu_ms();
        tokio::time::sleep(idle).await;
        let idle_cpu = cpu_ms()
            .zip(cpu_before)
            .map(|(a, b)| (a - b) / idle.as_secs_f64());
        Ok(DensityFigures {
            lists,
            execs,
            rss: rss_mib(),
            idle_cpu_ms_per_s: idle_cpu,
        })
    }

    /// `DENSITY_SAMPLES` lists of the first page, one after another.
    async fn lists(&self, api: &Api) -> anyhow::Result<Vec<f64>> {
        let mut lists = Vec::new();
        for _ in 0..DENSITY_SAMPLES {
            let t = Instant::now();
            api.list(&format!("per_page={DENSITY_PAGE}")).await?;
            lists.push(ms(t.elapsed()));
        }
        Ok(lists)
    }

    /// The bulk delete's baseline: `n` small containers made straight
    /// through Docker, then removed with their volumes,
    /// `RAW_REMOVALS_AT_ONCE` at a time; seconds the removal took.
    async fn raw_removal(&mut self, n: usize) -> anyhow::Result<f64> {
        let raw = self.small_raw().await?;
        let mut made: Vec<RawSandbox> = Vec::with_capacity(n);
        let filled = async {
            while made.len() < n {
                let wave = DENSITY_WAVE.min(n - made.len());
                let (_, sbs, errors) = all_at_once(wave, |_| raw.create()).await;
                made.extend(sbs);
                if !errors.is_empty() {
                    bail!(
                        "density: raw create: {}",
                        successes(wave - errors.len(), wave, &errors)
                    );
                }
            }
            Ok(())
        }
        .await;
        let t = Instant::now();
        let removed: Vec<anyhow::Result<()>> = futures_util::stream::iter(made.iter())
            .map(|sb| raw.destroy(sb))
            .buffer_unordered(RAW_REMOVALS_AT_ONCE)
            .collect()
            .await;
        let secs = t.elapsed().as_secs_f64();
        filled?;
        removed.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        Ok(secs)
    }

    fn density_rows(&mut self, n: usize, run: &DensityRun) -> anyhow::Result<()> {
        let (one, full) = (&run.one, &run.full);
        let base = "1 sandbox";
        if let Some((at, page)) = &run.full_page {
            self.rows.push(
                Row::new(
                    "density_list",
                    &format!("List, page of {DENSITY_PAGE}, with {n} sandboxes"),
                    "ms",
                    Better::Lower,
                    &full.lists,
                    Some(page),
                    Target::RatioAtMost(1.5),
                )
                .baseline(format!("the same full page with {at} sandboxes"))
                .note("the same answer size on both sides: what the sandboxes behind a page cost"),
            );
        }
        let latencies = [
            (
                "density_list_one",
                format!("List, page of {DENSITY_PAGE}, with {n} sandboxes, against one"),
                &full.lists,
                &one.lists,
                Target::None,
                Some(format!(
                    "the page holds {DENSITY_PAGE} sandboxes against one: each costs its \
                     record's decoding and its JSON"
                )),
            ),
            (
                "density_exec",
                format!("Exec `true` with {n} sandboxes"),
                &full.execs,
                &one.execs,
                Target::RatioAtMost(1.5),
                None,
            ),
        ];
        for (id, title, at_n, at_one, target, note) in latencies {
            let row = Row::new(id, &title, "ms", Better::Lower, at_n, Some(at_one), target)
                .baseline(base);
            self.rows.push(match note {
                Some(note) => row.note(note),
                None => row,
            });
        }
        if let (Some(a), Some(b)) = (full.rss, one.rss) {
            self.rows.push(
                Row::new(
                    "density_rss",
                    &format!("Server resident memory with {n} sandboxes"),
                    "MiB",
                    Better::Lower,
                    &[a],
                    Some(&[b]),
                    Target::P50AtMost(100.0),
                )
                .baseline(base)
                .note(format!(
                    "this process's VmRSS (two servers and the benchmark's clients); \
                     {:.1} KiB more per sandbox",
                    (a - b) * 1024.0 / (n - 1).max(1) as f64
                )),
            );
        }
        if let (Some(a), Some(b)) = (full.idle_cpu_ms_per_s, one.idle_cpu_ms_per_s) {
            self.rows.push(
                Row::new(
                    "density_idle_cpu",
                    &format!("Server CPU while idle with {n} sandboxes"),
                    "ms/s",
                    Better::Lower,
                    &[a],
                    Some(&[b]),
                    Target::None,
                )
                .baseline(base)
                .note(
                    "CPU time of this process per second of an idle window: \
                     reconciliation, health checks, the pool and timers",
                ),
            );
        }
        self.rows.push(
            Row::new(
                "density_delete",
                &format!("Bulk delete of {n} sandboxes"),
                "s",
                Better::Lower,
                &[run.delete_secs],
                Some(&[run.raw_delete_secs]),
                Target::P50AtMost(30.0),
            )
            .baseline(format!(
                "Docker removing {n} such containers and their volumes, \
                 {RAW_REMOVALS_AT_ONCE} at a time"
            ))
            .note(format!(
                "one DELETE /api/v1/sandbox/bulk by label; {} containers and {} volumes left after it",
                run.left.0, run.left.1
            )),
        );
        let host = run
            .host_mib_each
            .map_or("unknown".to_owned(), |m| format!("{m:.1} MiB"));
        self.notes.push(format!(
            "Density: {n} sandboxes (0.1 CPU, 64 MB) made {DENSITY_WAVE} at once in \
             {:.1} s. Per sandbox the host's available memory fell by {host}; a \
             containerd shim holds {:.1} MiB ({} shims running at the peak) and an agent \
             {:.1} MiB ({} agents). Those two processes and the kernel's share of each \
             container (cgroup, namespaces, overlay mount) are what bounds density on a host.",
            run.fill_secs, run.shim_mib_each, run.shim_count, run.agent_mib_each, run.agent_count
        ));
        if run.left != (0, 0) {
            bail!(
                "density: {} containers and {} volumes were left after the bulk delete",
                run.left.0,
                run.left.1
            );
        }
        Ok(())
    }
}

/// What density measures at one moment.
struct DensityFigures {
    lists: Vec<f64>,
    execs: Vec<f64>,
    rss: Option<f64>,
    idle_cpu_ms_per_s: Option<f64>,
}

struct DensityRun {
    one: DensityFigures,
    /// Lists of a full first page, and how many sandboxes there were.
    full_page: Option<(usize, Vec<f64>)>,
    raw_delete_secs: f64,
    full: DensityFigures,
    fill_secs: f64,
    delete_secs: f64,
    /// Containers and volumes of the server left after the bulk delete.
    left: (usize, usize),
    shim_mib_each: f64,
    shim_count: usize,
    agent_mib_each: f64,
    agent_count: usize,
    host_mib_each: Option<f64>,
}
