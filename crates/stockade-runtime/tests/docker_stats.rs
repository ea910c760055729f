//! `Runtime::stats` against the real engine: a busy sandbox shows CPU
//! use, its memory limit is the configured one, a stopped one has no stats.
//! Needs the local image `stockade-test-base:latest`.

use std::time::{Duration, Instant};

use stockade_runtime::prelude::*;
use stockade_runtime::{ContainerSpec, DockerConfig, DockerRuntime};

mod support;
use support::{shell_spec, Cleanup};

const IMAGE: &str = "stockade-test-base:latest";

#[tokio::test(flavor = "multi_thread")]
async fn stats_of_a_busy_sandbox() {
    let rt = DockerRuntime::new(DockerConfig::default()).expect("runtime");
    let memory: i64 = 256 * 1024 * 1024;
    let spec = ContainerSpec {
        memory_bytes: memory,
        network_access: true,
        // One core busy, and a few more processes.
        ..shell_spec(IMAGE, "sleep 600 & sleep 600 & while :; do :; done")
    };
    let id = spec.sandbox_id.clone();
    let _cleanup = Cleanup(id.clone());
    rt.create(&spec).await.expect("create");

    let started = Instant::now();
    let stats = rt.stats(&id).await.expect("stats").expect("running");
    let took = started.elapsed();
    eprintln!("one stats sample took {took:?}: {stats:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(stats.memory_limit_bytes, memory as u64);
    assert!(stats.memory_bytes > 0 && stats.memory_bytes < memory as u64);
    assert!(stats.pids >= 3, "{stats:?}");
    let cpu = stats.cpu_percent.expect("a CPU figure");
    // A busy loop limited to one core: well above idle, at most about one core.
    assert!((20.0..=110.0).contains(&cpu), "{cpu}");

    rt.stop(&id, Duration::from_secs(1)).await.expect("stop");
    assert_eq!(
        rt.stats(&id).await.expect("stats of a stopped sandbox"),
        None
    );
    rt.remove(&id, false).await.expect("remove");
    assert_eq!(rt.stats(&id).await.expect("stats of no container"), None);
}
