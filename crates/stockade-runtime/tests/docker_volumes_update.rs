//! `DockerRuntime` against the real engine for the "volumes-timeouts" slice:
//! volume listing with owner, in-use flag and exact sizes, limits
//! updated live, and the main process's environment changed for its
//! next start. Needs `stockade-test-base:latest`.

use std::collections::BTreeMap;
use std::time::Duration;

use stockade_core::{SandboxId, VolumeName};
use stockade_runtime::prelude::*;
use stockade_runtime::{container_name, ContainerSpec, DockerConfig, DockerRuntime, RuntimeError};

mod support;
use support::{create_sandbox, created, docker_cli, sh_ok, shell_spec};

const IMAGE: &str = "stockade-test-base:latest";

fn runtime() -> DockerRuntime {
    assert!(
        docker_cli(&["image", "inspect", IMAGE]).status.success(),
        "test image {IMAGE} is missing: run scripts/build-test-image first"
    );
    DockerRuntime::new(DockerConfig::default()).expect("runtime")
}

fn spec(command: &str, env: &[(&str, &str)]) -> ContainerSpec {
    ContainerSpec {
        hostname: "sbx".into(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..shell_spec(IMAGE, command)
    }
}

async fn sh(rt: &DockerRuntime, id: &SandboxId, script: &str) -> String {
    sh_ok(rt, id, script, Some(Duration::from_secs(30)))
        .await
        .trim()
        .to_owned()
}

const KEEP_ALIVE: &str = "trap 'exit 0' TERM INT; while true; do sleep 86400 & wait $!; done";

#[tokio::test]
async fn volumes_carry_owner_in_use_and_exact_size() {
    let s = spec(KEEP_ALIVE, &[]);
    let id = s.sandbox_id.clone();
    let (rt, _cleanup) = created(runtime(), &s).await;
    sh(&rt, &id, "head -c 5000000 /dev/urandom > /workspace/blob").await;
    let name = VolumeName::for_sandbox(&id);

    let listed = rt.list_volumes().await.expect("list");
    let v = listed.iter().find(|v| v.name == name).expect("listed");
    assert_eq!(v.account_id.as_deref(), Some(s.account_id.as_str()));
    assert_eq!(v.instance_id.as_deref(), Some(s.instance_id.as_str()));
    assert!(v.in_use, "a running container mounts it");
    assert_eq!(v.size_bytes, Some(5_000_000), "df counts the file's bytes");
    assert_eq!(
        rt.volume_size(&name, Duration::from_secs(60))
            .await
            .unwrap(),
        Some(5_000_000)
    );

    rt.stop(&id, Duration::from_secs(5)).await.expect("stop");
    let listed = rt.list_volumes().await.expect("list");
    let v = listed.iter().find(|v| v.name == name).expect("listed");
    assert!(!v.in_use, "a stopped container does not count as in use");
}

#[tokio::test]
async fn concurrent_listings_all_get_sizes() {
    let rt = std::sync::Arc::new(runtime());
    let s = spec(KEEP_ALIVE, &[]);
    let id = s.sandbox_id.clone();
    let _cleanup = create_sandbox(&rt, &s).await;
    sh(&rt, &id, "head -c 12345 /dev/zero > /workspace/z").await;
    let name = VolumeName::for_sandbox(&id);
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let rt = rt.clone();
        tasks.push(tokio::spawn(async move { rt.list_volumes().await }));
    }
    for t in tasks {
        let listed = t.await.unwrap().expect("list");
        let v = listed.iter().find(|v| v.name == name).expect("listed");
        assert_eq!(v.size_bytes, Some(12345), "df refused a concurrent caller");
    }
}

fn cgroup_memory(rt_id: &SandboxId) -> String {
    let out = docker_cli(&[
        "exec",
        &container_name(rt_id),
        "cat",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]);
    if out.status.success() {
        return String::from_utf8_lossy(&out.stdout).trim().to_owned();
    }
    // cgroup v2
    let out = docker_cli(&[
        "exec",
        &container_name(rt_id),
        "cat",
        "/sys/fs/cgroup/memory.max",
    ]);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test]
async fn limits_update_live_and_stay_for_later_starts() {
    let s = spec(KEEP_ALIVE, &[]);
    let id = s.sandbox_id.clone();
    let (rt, _cleanup) = created(runtime(), &s).await;
    assert_eq!(cgroup_memory(&id), (256u64 << 20).to_string());

    rt.update_resources(&id, 0.5, 384 << 20)
        .await
        .expect("update");
    assert_eq!(cgroup_memory(&id), (384u64 << 20).to_string(), "live");
    let out = docker_cli(&[
        "inspect",
        "-f",
        "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} {{.HostConfig.MemorySwap}}",
        &container_name(&id),
    ]);
    let expected = format!("500000000 {0} {0}", 384u64 << 20);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expected);

    rt.stop(&id, Duration::from_secs(5)).await.unwrap();
    rt.start(&id).await.unwrap();
    assert_eq!(cgroup_memory(&id), (384u64 << 20).to_string(), "kept");

    assert!(matches!(
        rt.update_resources(&SandboxId::generate(), 1.0, 256 << 20)
            .await,
        Err(RuntimeError::NotFound(_))
    ));
}

#[tokio::test]
async fn the_main_process_sees_a_new_environment_from_its_next_start() {
    let rt = runtime();
    // The main process records its environment in /workspace at each start.
    let s = spec(
        &format!(
            "echo \"A=${{A-unset}} B=${{B-unset}} C=${{C-unset}}\" >> /workspace/env.log; {KEEP_ALIVE}"
        ),
        &[("A", "1"), ("B", "two words")],
    );
    let id = s.sandbox_id.clone();
    let _cleanup = create_sandbox(&rt, &s).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sh(&rt, &id, "cat /workspace/env.log").await,
        "A=1 B=two words C=unset"
    );

    let env: BTreeMap<String, String> = [
        ("A".to_string(), "it's $new".to_string()),
        ("C".to_string(), "3".to_string()),
    ]
    .into();
    rt.set_main_process_env(&id, &env).await.expect("set env");
    // The running process keeps what it started with.
    assert_eq!(
        sh(&rt, &id, "cat /workspace/env.log").await,
        "A=1 B=two words C=unset"
    );
    rt.stop(&id, Duration::from_secs(5)).await.unwrap();
    rt.start(&id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sh(&rt, &id, "cat /workspace/env.log").await,
        "A=1 B=two words C=unset\nA=it's $new B=unset C=3"
    );

    // Also on a stopped container; the main process still gets SIGTERM.
    rt.stop(&id, Duration::from_secs(5)).await.unwrap();
    let env: BTreeMap<String, String> = [("B".to_string(), "back".to_string())].into();
    rt.set_main_process_env(&id, &env).await.expect("set env");
    rt.start(&id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = sh(&rt, &id, "tail -n 1 /workspace/env.log").await;
    assert_eq!(log, "A=unset B=back C=unset");
    let t0 = std::time::Instant::now();
    rt.stop(&id, Duration::from_secs(20)).await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the wrapped process must exit on SIGTERM, took {:?}",
        t0.elapsed()
    );
}
