//! Resource usage of a running sandbox, as one sample of the engine's
//! counters, and the arithmetic that turns raw counters into percentages.

/// One sample of a running container's resource usage.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerStats {
    /// CPU use since the previous sample, in percent of one core (200 = two
    /// cores busy); `None` when the engine gave no previous sample.
    pub cpu_percent: Option<f64>,
    /// Memory in use, page cache that can be reclaimed left out (as
    /// `docker stats` shows it).
    pub memory_bytes: u64,
    /// The memory limit the kernel enforces.
    pub memory_limit_bytes: u64,
    /// Bytes received and sent over every network interface.
    pub network_rx_bytes: u64,
    pub network_tx_bytes: u64,
    /// Processes and threads in the container.
    pub pids: u64,
}

/// CPU percent between two samples of cumulative counters: the container's
/// CPU time and the host's, both in nanoseconds, over `online_cpus` cores.
/// `None` when there is no interval to measure.
pub fn cpu_percent(
    container: (u64, u64),
    system: (Option<u64>, Option<u64>),
    online_cpus: u64,
) -> Option<f64> {
    let (pre_total, total) = container;
    let (Some(pre_system), Some(system)) = system else {
        return None;
    };
    if pre_system == 0 || system <= pre_system || total < pre_total {
        return None;
    }
    let cpu_delta = (total - pre_total) as f64;
    let system_delta = (system - pre_system) as f64;
    let percent = cpu_delta / system_delta * online_cpus.max(1) as f64 * 100.0;
    // Two decimals are all anyone reads.
    Some((percent * 100.0).round() / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_percent_of_one_core() {
        // Half of one core on a two-core host: 0.5 s of CPU in 2 s of host time (1 s × 2 cores).
        let p = cpu_percent((1_000, 500_001_000), (Some(10), Some(2_000_000_010)), 2);
        assert_eq!(p, Some(50.0));
        assert_eq!(cpu_percent((0, 10), (None, Some(5)), 2), None);
        assert_eq!(cpu_percent((0, 10), (Some(0), Some(5)), 2), None);
        assert_eq!(cpu_percent((0, 10), (Some(5), Some(5)), 2), None);
        assert_eq!(cpu_percent((10, 5), (Some(1), Some(5)), 2), None);
    }
}
