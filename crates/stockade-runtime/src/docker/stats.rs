//! [`Runtime::stats`](crate::Runtime::stats) on Docker: one `docker stats`
//! sample with the previous one (`stream=false` without `one-shot`), so that
//! the CPU percent can be computed. Docker 20.10 answers after its collector
//! ran twice (about 1–2 s); with `one-shot` it still waits for one run
//! (about 0.9 s) and gives no CPU figure, so that is not used.

use bollard::container::{MemoryStatsStats, Stats, StatsOptions};
use futures_util::StreamExt;
use stockade_core::SandboxId;

use super::{container_name, status_code, DockerRuntime};
use crate::stats::{cpu_percent, ContainerStats};
use crate::RuntimeResult;

impl DockerRuntime {
    pub(crate) async fn stats_sample(
        &self,
        id: &SandboxId,
    ) -> RuntimeResult<Option<ContainerStats>> {
        let docker = self.client().await?;
        let mut samples = docker.stats(
            &container_name(id),
            Some(StatsOptions {
                stream: false,
                one_shot: false,
            }),
        );
        match samples.next().await {
            None => Ok(None),
            Some(Err(e)) if status_code(&e) == Some(404) => Ok(None),
            Some(Err(e)) => Err(self.map_err(e, "container stats")),
            Some(Ok(s)) => Ok(usage(&s)),
        }
    }
}

/// The usage in a stats sample; `None` for a container that is not running
/// (Docker then reports no memory figures).
fn usage(s: &Stats) -> Option<ContainerStats> {
    let usage = s.memory_stats.usage?;
    // What `docker stats` shows: usage minus the inactive page cache.
    let inactive_file = match s.memory_stats.stats {
        Some(MemoryStatsStats::V1(v1)) => v1.total_inactive_file,
        Some(MemoryStatsStats::V2(v2)) => v2.inactive_file,
        None => 0,
    };
    let memory_bytes = if inactive_file < usage {
        usage - inactive_file
    } else {
        usage
    };
    let online_cpus = s.cpu_stats.online_cpus.unwrap_or_else(|| {
        s.cpu_stats
            .cpu_usage
            .percpu_usage
            .as_ref()
            .map_or(1, |v| v.len() as u64)
    });
    let (rx, tx) = s
        .networks
        .iter()
        .flat_map(|n| n.values())
        .fold((0u64, 0u64), |(rx, tx), n| {
            (rx.saturating_add(n.rx_bytes), tx.saturating_add(n.tx_bytes))
        });
    Some(ContainerStats {
        cpu_percent: cpu_percent(
            (
                s.precpu_stats.cpu_usage.total_usage,
                s.cpu_stats.cpu_usage.total_usage,
            ),
            (
                s.precpu_stats.system_cpu_usage,
                s.cpu_stats.system_cpu_usage,
            ),
            online_cpus,
        ),
        memory_bytes,
        memory_limit_bytes: s.memory_stats.limit.unwrap_or_default(),
        network_rx_bytes: rx,
        network_tx_bytes: tx,
        pids: s.pids_stats.current.unwrap_or_default(),
    })
}
