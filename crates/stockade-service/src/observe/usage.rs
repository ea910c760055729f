//! Live figures in sandbox details: resource usage of the running
//! container and the size of its volume. Neither may make the details fail
//! or hang: what cannot be measured in time is left out (and logged).
//!
//! - **Usage.** One Docker stats sample takes a second or two (the engine
//!   samples twice to measure CPU). The first request for a sandbox starts a
//!   *watcher* that samples it back to back and waits (up to `stats_wait`)
//!   for the first sample; later requests answer at once with the latest
//!   one. A watcher stops when nobody asked for `stats_idle`, or when the
//!   sandbox stops. At most `max_watched` watchers run; beyond that a request
//!   samples directly.
//! - **Volume size.** Docker knows volume sizes only from `GET /system/df`,
//!   which walks every volume (and container layer) of the host. One df
//!   serves every sandbox: the sizes are cached for `volume_size_ttl`; a
//!   request after that gets the cached figure and triggers one refresh in
//!   the background. Only a volume not measured yet waits (up to
//!   `volume_size_wait`) for a refresh.
//! - **Disk use against its limits**. The engine measures a
//!   container's own layer by walking its files: each sandbox's figures are
//!   cached for `volume_size_ttl` and refreshed in the background like the
//!   volume sizes; only a sandbox not measured yet waits (up to
//!   `volume_size_wait`).
//! - **Usage history.** Every sample taken is also kept in a small ring per
//!   sandbox ([`HISTORY_WINDOW`] of them, at most [`HISTORY_LEN`]), so that
//!   a chart opened now can show the last minutes at once. A ring whose
//!   newest sample is older than the window is dropped, and at most
//!   twice `max_watched` rings are kept.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use stockade_api::{DiskUsageSummary, ResourceUsage, SandboxResponse, UsageSample, VolumeSummary};
use stockade_core::{human_bytes, Sandbox, SandboxId, SandboxStatus, VolumeName};
use stockade_runtime::{ContainerStats, DiskUsage, Runtime};
use tokio::sync::watch;

use crate::observe::metrics::Metrics;

/// How live figures are measured.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageConfig {
    /// How long a details request waits for the first stats sample.
    pub stats_wait: Duration,
    /// A watcher nobody asked for this long stops.
    pub stats_idle: Duration,
    /// Most sandboxes watched at once.
    pub max_watched: usize,
    /// How long measured volume sizes are served before a refresh.
    pub volume_size_ttl: Duration,
    /// How long a request waits for the size of a volume not measured yet.
    pub volume_size_wait: Duration,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            stats_wait: Duration::from_secs(3),
            stats_idle: Duration::from_secs(60),
            max_watched: 512,
            volume_size_ttl: Duration::from_secs(30),
            volume_size_wait: Duration::from_secs(3),
        }
    }
}

/// The longest one stats sample may take before it counts as failed.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(15);
/// Samples are at least this far apart.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// A watcher gives up after this many failed samples in a row.
const MAX_FAILURES: u32 = 3;
/// The longest a df may take before its result is thrown away.
const DF_TIMEOUT: Duration = Duration::from_secs(120);
/// Above this many sandboxes' cached disk figures, old ones are dropped.
const MAX_DISK_ENTRIES: usize = 256;
/// A volume not in the cached sizes triggers no new df within this long.
const MIN_DF_INTERVAL: Duration = Duration::from_secs(2);

/// How far back the usage history reaches.
pub const HISTORY_WINDOW: Duration = Duration::from_secs(5 * 60);
/// Most samples kept per sandbox: one a second over the window.
pub const HISTORY_LEN: usize = 300;

/// One stats sample and when it was taken.
#[derive(Debug, Clone)]
struct Sample {
    stats: ContainerStats,
    at: DateTime<Utc>,
}

/// Samples one sandbox while someone asks.
struct Watcher {
    samples: watch::Sender<Option<Sample>>,
    wanted: Mutex<Instant>,
    closed: AtomicBool,
}

impl Watcher {
    fn new() -> Self {
        Self {
            samples: watch::Sender::new(None),
            wanted: Mutex::new(Instant::now()),
            closed: AtomicBool::new(false),
        }
    }

    fn touch(&self) {
        *lock(&self.wanted) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        lock(&self.wanted).elapsed()
    }
}

#[derive(Default)]
struct VolumeSizes {
    sizes: Arc<HashMap<String, u64>>,
    measured_at: Option<Instant>,
    refreshing: bool,
}

/// Live figures of sandboxes; one per server.
pub struct Usage {
    runtime: Arc<dyn Runtime>,
    metrics: Arc<Metrics>,
    config: UsageConfig,
    watchers: Mutex<HashMap<SandboxId, Arc<Watcher>>>,
    volumes: Mutex<VolumeSizes>,
    /// Bumped after every df.
    volumes_measured: watch::Sender<u64>,
    disks: Mutex<HashMap<SandboxId, DiskEntry>>,
    /// The recent samples of each sandbox, oldest first.
    history: Mutex<HashMap<SandboxId, VecDeque<UsageSample>>>,
}

/// The latest disk figures of one sandbox, and whether a measurement runs.
struct DiskEntry {
    usage: Option<DiskUsage>,
    measured_at: Option<Instant>,
    measured: watch::Sender<u64>,
    measuring: bool,
}

/// [`HISTORY_WINDOW`] as a span of wall-clock time.
fn window() -> chrono::Duration {
    chrono::Duration::from_std(HISTORY_WINDOW).unwrap_or(chrono::Duration::minutes(5))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Usage {
    pub fn new(runtime: Arc<dyn Runtime>, metrics: Arc<Metrics>, config: UsageConfig) -> Self {
        Self {
            runtime,
            metrics,
            config,
            watchers: Mutex::new(HashMap::new()),
            volumes: Mutex::new(VolumeSizes::default()),
            volumes_measured: watch::Sender::new(0),
            disks: Mutex::new(HashMap::new()),
            history: Mutex::new(HashMap::new()),
        }
    }

    /// The samples of `id` over the last [`HISTORY_WINDOW`], oldest first;
    /// empty when nobody asked for its usage lately.
    pub fn history(&self, id: &SandboxId) -> Vec<UsageSample> {
        let since = Utc::now() - window();
        lock(&self.history)
            .get(id)
            .map(|ring| ring.iter().filter(|s| s.at >= since).cloned().collect())
            .unwrap_or_default()
    }

    /// Keeps `sample` in the history of `id`.
    fn remember(&self, id: &SandboxId, sample: &Sample) {
        let point = UsageSample {
            at: sample.at,
            cpu_percent: sample.stats.cpu_percent,
            memory_bytes: sample.stats.memory_bytes,
            memory_limit_bytes: sample.stats.memory_limit_bytes,
        };
        let since = sample.at - window();
        let mut history = lock(&self.history);
        if !history.contains_key(id) {
            // A new ring: the ones that went quiet go first, and if too
            // many are still recent, those that went quiet longest.
            history.retain(|_, ring| ring.back().is_some_and(|s| s.at >= since));
            let most = self.config.max_watched.saturating_mul(2).max(1);
            while history.len() >= most {
                let quietest = history
                    .iter()
                    .min_by_key(|(_, ring)| ring.back().map(|s| s.at))
                    .map(|(id, _)| id.clone());
                match quietest {
                    Some(q) => history.remove(&q),
                    None => break,
                };
            }
        }
        let ring = history.entry(id.clone()).or_default();
        while ring.front().is_some_and(|s| s.at < since) || ring.len() >= HISTORY_LEN {
            ring.pop_front();
        }
        ring.push_back(point);
    }

    /// Fills the live figures of `resp`, the details of `sb`: usage when it
    /// is running, the volume size unless it is terminated. On the server's
    /// own host.
    pub async fn fill(self: &Arc<Self>, sb: &Sandbox, resp: &mut SandboxResponse) {
        let rt = self.runtime.clone();
        self.fill_on(rt, sb, resp).await
    }

    /// [`Usage::fill`] for a sandbox on the host of `rt`.
    pub async fn fill_on(
        self: &Arc<Self>,
        rt: Arc<dyn Runtime>,
        sb: &Sandbox,
        resp: &mut SandboxResponse,
    ) {
        let own = rt.server_name() == self.runtime.server_name();
        let running = sb.status == SandboxStatus::Running;
        let gone = sb.is_terminated();
        let volume = VolumeName::for_sandbox(&sb.id);
        let (sample, size, disk) = tokio::join!(
            async {
                match running {
                    true => self.sample(&rt, &sb.id).await,
                    false => None,
                }
            },
            async {
                match (gone, own) {
                    (true, _) => None,
                    (false, true) => self.volume_size(&volume).await,
                    // Another host: its volume measured on its own.
                    (false, false) => rt
                        .volume_size(&volume, self.config.volume_size_ttl)
                        .await
                        .ok()
                        .flatten(),
                }
            },
            async {
                match gone {
                    true => None,
                    false => self.disk_usage(&rt, &sb.id).await,
                }
            },
        );
        if gone {
            lock(&self.disks).remove(&sb.id);
        }
        resp.disk = disk.map(|d| DiskUsageSummary {
            // The volume's size, measured alongside, when the disk figures
            // came before it.
            workspace_bytes: d.workspace_bytes.or(size),
            workspace_limit_bytes: d.workspace_limit_bytes,
            root_fs_bytes: d.root_fs_bytes,
            root_fs_limit_bytes: d.root_fs_limit_bytes,
        });
        if let Some(bytes) = size {
            resp.volume = VolumeSummary::new(resp.volume.name.clone(), Some(bytes));
        }
        resp.usage = sample.map(|s| ResourceUsage {
            cpu_percent: s.stats.cpu_percent,
            memory_bytes: s.stats.memory_bytes,
            memory_limit_bytes: s.stats.memory_limit_bytes,
            memory: format!(
                "{} / {}",
                human_bytes(s.stats.memory_bytes),
                human_bytes(s.stats.memory_limit_bytes)
            ),
            network_rx_bytes: s.stats.network_rx_bytes,
            network_tx_bytes: s.stats.network_tx_bytes,
            pids: s.stats.pids,
            sampled_at: s.at,
        });
    }

    /// The latest usage sample of a running sandbox, waiting up to
    /// `stats_wait` for the first one.
    async fn sample(self: &Arc<Self>, rt: &Arc<dyn Runtime>, id: &SandboxId) -> Option<Sample> {
        let found = {
            let mut watchers = lock(&self.watchers);
            match watchers.get(id) {
                Some(w) => Some((w.clone(), false)),
                None if watchers.len() >= self.config.max_watched => None,
                None => {
                    let w = Arc::new(Watcher::new());
                    watchers.insert(id.clone(), w.clone());
                    Some((w, true))
                }
            }
        };
        let Some((watcher, started)) = found else {
            return self.sample_once(rt.as_ref(), id).await;
        };
        watcher.touch();
        if started {
            tokio::spawn(self.clone().watch(rt.clone(), id.clone(), watcher.clone()));
        }
        let mut rx = watcher.samples.subscribe();
        if let Some(sample) = rx.borrow_and_update().clone() {
            return Some(sample);
        }
        if watcher.closed.load(Ordering::SeqCst) {
            return None;
        }
        match tokio::time::timeout(self.config.stats_wait, rx.changed()).await {
            Ok(Ok(())) => rx.borrow().clone(),
            _ => {
                tracing::debug!(sandbox.id = %id, "no usage sample in time; details go without");
                None
            }
        }
    }

    /// One sample without a watcher (when too many sandboxes are watched).
    async fn sample_once(&self, rt: &dyn Runtime, id: &SandboxId) -> Option<Sample> {
        match tokio::time::timeout(self.config.stats_wait, rt.stats(id)).await {
            Ok(Ok(stats)) => stats.map(|stats| {
                let sample = Sample {
                    stats,
                    at: Utc::now(),
                };
                self.remember(id, &sample);
                sample
            }),
            Ok(Err(e)) => {
                self.metrics.docker_error("stats", &e);
                tracing::warn!(sandbox.id = %id, error = %e, "could not sample usage");
                None
            }
            Err(_) => None,
        }
    }

    /// Samples `id` back to back until nobody wants it or it stops running.
    async fn watch(self: Arc<Self>, rt: Arc<dyn Runtime>, id: SandboxId, w: Arc<Watcher>) {
        let mut failures = 0;
        while w.idle_for() < self.config.stats_idle && failures < MAX_FAILURES {
            let began = Instant::now();
            match tokio::time::timeout(SAMPLE_TIMEOUT, rt.stats(&id)).await {
                Ok(Ok(Some(stats))) => {
                    failures = 0;
                    let sample = Sample {
                        stats,
                        at: Utc::now(),
                    };
                    self.remember(&id, &sample);
                    w.samples.send_replace(Some(sample));
                }
                // Not running (any more).
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    failures += 1;
                    self.metrics.docker_error("stats", &e);
                    tracing::warn!(sandbox.id = %id, error = %e, "could not sample usage");
                }
                Err(_) => {
                    failures += 1;
                    tracing::warn!(sandbox.id = %id, "usage sample timed out");
                }
            }
            tokio::time::sleep(SAMPLE_INTERVAL.saturating_sub(began.elapsed())).await;
        }
        {
            let mut watchers = lock(&self.watchers);
            if watchers.get(&id).is_some_and(|cur| Arc::ptr_eq(cur, &w)) {
                watchers.remove(&id);
            }
        }
        // Let anyone still waiting go.
        w.closed.store(true, Ordering::SeqCst);
        w.samples.send_replace(None);
    }

    /// The size of a volume: cached, refreshed in the background when old;
    /// a volume not measured yet waits for a refresh (bounded).
    async fn volume_size(self: &Arc<Self>, name: &VolumeName) -> Option<u64> {
        let (known, fresh, recent) = {
            let v = lock(&self.volumes);
            let age = v.measured_at.map(|t| t.elapsed());
            (
                v.sizes.get(name.as_str()).copied(),
                age.is_some_and(|a| a < self.config.volume_size_ttl),
                age.is_some_and(|a| a < MIN_DF_INTERVAL) && !v.refreshing,
            )
        };
        if let Some(bytes) = known {
            if !fresh {
                self.refresh_volume_sizes();
            }
            return Some(bytes);
        }
        if recent {
            // Measured a moment ago and not there: it has no size yet.
            return None;
        }
        let mut measured = self.refresh_volume_sizes();
        match tokio::time::timeout(self.config.volume_size_wait, measured.changed()).await {
            Ok(Ok(())) => lock(&self.volumes).sizes.get(name.as_str()).copied(),
            _ => None,
        }
    }

    /// The disk figures of a sandbox: cached, refreshed in the background
    /// when old; a sandbox not measured yet waits for one (bounded).
    async fn disk_usage(
        self: &Arc<Self>,
        rt: &Arc<dyn Runtime>,
        id: &SandboxId,
    ) -> Option<DiskUsage> {
        let (known, fresh, mut measured) = {
            let mut disks = lock(&self.disks);
            if disks.len() > MAX_DISK_ENTRIES {
                // Sandboxes nobody asked about for a while.
                let stale = self.config.volume_size_ttl * 10;
                disks.retain(|_, e| {
                    e.measuring || e.measured_at.is_none_or(|t| t.elapsed() < stale)
                });
            }
            let e = disks.entry(id.clone()).or_insert_with(|| DiskEntry {
                usage: None,
                measured_at: None,
                measured: watch::Sender::new(0),
                measuring: false,
            });
            let fresh = e
                .measured_at
                .is_some_and(|t| t.elapsed() < self.config.volume_size_ttl);
            (
                e.measured_at.map(|_| e.usage.clone()),
                fresh,
                e.measured.subscribe(),
            )
        };
        if !fresh {
            self.refresh_disk_usage(rt.clone(), id);
        }
        if let Some(usage) = known {
            return usage;
        }
        match tokio::time::timeout(self.config.volume_size_wait, measured.changed()).await {
            Ok(Ok(())) => lock(&self.disks).get(id).and_then(|e| e.usage.clone()),
            _ => None,
        }
    }

    /// Measures one sandbox's disk in the background unless that runs.
    fn refresh_disk_usage(self: &Arc<Self>, rt: Arc<dyn Runtime>, id: &SandboxId) {
        {
            let mut disks = lock(&self.disks);
            match disks.get_mut(id) {
                Some(e) if !e.measuring => e.measuring = true,
                _ => return,
            }
        }
        let this = self.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let ttl = this.config.volume_size_ttl;
            let result = tokio::time::timeout(DF_TIMEOUT, rt.disk_usage(&id, ttl)).await;
            let usage = match result {
                Ok(Ok(usage)) => usage,
                Ok(Err(e)) => {
                    this.metrics.docker_error("disk_usage", &e);
                    tracing::warn!(sandbox.id = %id, error = %e, "could not measure disk use");
                    None
                }
                Err(_) => {
                    tracing::warn!(sandbox.id = %id, "measuring disk use timed out");
                    None
                }
            };
            let mut disks = lock(&this.disks);
            if let Some(e) = disks.get_mut(&id) {
                e.usage = usage;
                e.measured_at = Some(Instant::now());
                e.measuring = false;
                e.measured.send_modify(|n| *n += 1);
            }
        });
    }

    /// Starts one df unless one is running; the receiver sees it finish.
    fn refresh_volume_sizes(self: &Arc<Self>) -> watch::Receiver<u64> {
        let rx = self.volumes_measured.subscribe();
        {
            let mut v = lock(&self.volumes);
            if v.refreshing {
                return rx;
            }
            v.refreshing = true;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let began = Instant::now();
            let result = tokio::time::timeout(DF_TIMEOUT, this.runtime.list_volumes()).await;
            let sizes = match result {
                Ok(Ok(volumes)) => Some(
                    volumes
                        .into_iter()
                        .filter_map(|v| Some((v.name.as_str().to_owned(), v.size_bytes?)))
                        .collect::<HashMap<_, _>>(),
                ),
                Ok(Err(e)) => {
                    this.metrics.docker_error("volume_sizes", &e);
                    tracing::warn!(error = %e, "could not measure volume sizes");
                    None
                }
                Err(_) => {
                    tracing::warn!("measuring volume sizes timed out");
                    None
                }
            };
            tracing::debug!(
                took_ms = began.elapsed().as_millis() as u64,
                "volume sizes measured"
            );
            {
                let mut v = lock(&this.volumes);
                if let Some(sizes) = sizes {
                    v.sizes = Arc::new(sizes);
                }
                v.measured_at = Some(Instant::now());
                v.refreshing = false;
            }
            this.volumes_measured.send_modify(|n| *n += 1);
        });
        rx
    }

    /// How many sandboxes are being watched (for tests).
    pub fn watched(&self) -> usize {
        lock(&self.watchers).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockade_core::InstanceId;
    use stockade_runtime::prelude::*;
    use stockade_runtime::FakeRuntime;

    async fn running(rt: &FakeRuntime) -> Sandbox {
        let mut sb = crate::test_support::sandbox(|_| {});
        sb.status = SandboxStatus::Running;
        let container = crate::test_support::spec(&sb, &InstanceId::generate());
        rt.create(&container).await.unwrap();
        sb
    }

    fn usage(rt: &FakeRuntime, config: UsageConfig) -> Arc<Usage> {
        Arc::new(Usage::new(
            Arc::new(rt.clone()),
            Arc::new(Metrics::new()),
            config,
        ))
    }

    #[tokio::test]
    async fn details_get_usage_and_volume_size() {
        let rt = FakeRuntime::new();
        let u = usage(&rt, UsageConfig::default());
        let sb = running(&rt).await;
        rt.set_volume_size(&VolumeName::for_sandbox(&sb.id), 12_000_000_000);
        let mut resp = SandboxResponse::from_record(&sb, Utc::now());
        u.fill(&sb, &mut resp).await;
        let usage = resp.usage.expect("usage");
        assert_eq!(usage.memory_limit_bytes, 1 << 30);
        assert_eq!(usage.pids, 1);
        assert_eq!(resp.volume.size_bytes, Some(12_000_000_000));
        assert_eq!(resp.volume.size.as_deref(), Some("12.0 GB"));
        assert!(resp.volume.warning.is_some());
        assert_eq!(u.watched(), 1);
    }

    fn stats() -> ContainerStats {
        ContainerStats {
            cpu_percent: Some(12.5),
            memory_bytes: 1 << 20,
            memory_limit_bytes: 1 << 30,
            network_rx_bytes: 0,
            network_tx_bytes: 0,
            pids: 1,
        }
    }

    #[tokio::test]
    async fn samples_are_kept_as_a_bounded_history() {
        let rt = FakeRuntime::new();
        let u = usage(&rt, UsageConfig::default());
        let sb = running(&rt).await;
        assert!(u.history(&sb.id).is_empty());
        let mut resp = SandboxResponse::from_record(&sb, Utc::now());
        u.fill(&sb, &mut resp).await;
        // The watcher samples about once a second.
        for _ in 0..50 {
            if u.history(&sb.id).len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let history = u.history(&sb.id);
        assert!(history.len() >= 2, "{history:?}");
        assert!(history.windows(2).all(|w| w[0].at <= w[1].at));
        assert_eq!(history[0].memory_limit_bytes, 1 << 30);

        // Old samples fall out of the window, and a ring holds at most
        // HISTORY_LEN of them.
        let old = Sample {
            stats: stats(),
            at: Utc::now() - chrono::Duration::minutes(10),
        };
        let other = SandboxId::generate();
        u.remember(&other, &old);
        assert!(u.history(&other).is_empty());
        for i in 0..HISTORY_LEN + 10 {
            let s = Sample {
                stats: stats(),
                at: Utc::now() + chrono::Duration::milliseconds(i as i64),
            };
            u.remember(&other, &s);
        }
        assert_eq!(lock(&u.history)[&other].len(), HISTORY_LEN);
    }

    #[tokio::test]
    async fn failures_leave_the_figures_out() {
        let rt = FakeRuntime::new();
        let u = usage(
            &rt,
            UsageConfig {
                stats_wait: Duration::from_millis(300),
                volume_size_wait: Duration::from_millis(300),
                ..Default::default()
            },
        );
        let sb = running(&rt).await;
        rt.set_unavailable(true);
        let mut resp = SandboxResponse::from_record(&sb, Utc::now());
        let began = Instant::now();
        u.fill(&sb, &mut resp).await;
        assert!(began.elapsed() < Duration::from_secs(2));
        assert!(resp.usage.is_none());
        assert!(resp.volume.size_bytes.is_none());
    }

    #[tokio::test]
    async fn a_stopped_sandbox_has_no_usage_and_watchers_end() {
        let rt = FakeRuntime::new();
        let u = usage(&rt, UsageConfig::default());
        let mut sb = running(&rt).await;
        let mut resp = SandboxResponse::from_record(&sb, Utc::now());
        u.fill(&sb, &mut resp).await;
        assert!(resp.usage.is_some());
        rt.stop(&sb.id, Duration::from_secs(1)).await.unwrap();
        sb.status = SandboxStatus::Stopped;
        let mut resp = SandboxResponse::from_record(&sb, Utc::now());
        u.fill(&sb, &mut resp).await;
        assert!(resp.usage.is_none());
        // The watcher notices within a sample interval or two.
        for _ in 0..50 {
            if u.watched() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(u.watched(), 0);
    }
}
