//! Acceptance tests of `DockerRuntime` against the real engine, with the local
//! image `stockade-test-base:latest` (build it with `scripts/build-test-image`).
//! Every test makes its own sandbox ids and removes what it made, also when it
//! fails.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use stockade_core::{SandboxId, VolumeName};
use stockade_runtime::prelude::*;
use stockade_runtime::{
    container_name, labels, ContainerSpec, DockerConfig, DockerRuntime, ExecOutput, ExecSpec,
    RuntimeError,
};

mod support;
use support::{created, docker_cli, exec_of, sh_exec, shell_spec, Cleanup};

const IMAGE: &str = "stockade-test-base:latest";
const MISSING_IMAGE: &str = "stockade-test-nonexistent/never-there:0.0.1";
const KEEP_ALIVE: &str = "trap 'exit 0' TERM INT; while true; do sleep 86400 & wait $!; done";
const CAPS: [&str; 8] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
];

/// A runtime for the local engine; fails the test clearly without the image.
fn runtime() -> DockerRuntime {
    let out = docker_cli(&["image", "inspect", IMAGE]);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.to_ascii_lowercase().contains("no such image") {
            panic!("test image {IMAGE} is missing: run scripts/build-test-image first");
        }
        panic!(
            "Docker is not usable ({}): start it (scripts/lib/docker.sh: ensure_docker), \
             then run scripts/build-test-image",
            err.trim()
        );
    }
    DockerRuntime::new(DockerConfig {
        pull_timeout: Duration::from_secs(30),
        ..Default::default()
    })
    .expect("runtime")
}

fn spec(command: Option<&str>) -> ContainerSpec {
    ContainerSpec {
        env: BTreeMap::from([("SANDBOX_GREETING".to_string(), "hello there".to_string())]),
        network_access: true,
        ..shell_spec(IMAGE, command.unwrap_or(KEEP_ALIVE))
    }
}

fn inspect_json(args: &[&str]) -> Option<Value> {
    let out = docker_cli(args);
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v.as_array()?.first().cloned()
}

fn container_json(id: &SandboxId) -> Option<Value> {
    inspect_json(&["container", "inspect", &container_name(id)])
}

fn volume_exists(id: &SandboxId) -> bool {
    inspect_json(&["volume", "inspect", VolumeName::for_sandbox(id).as_str()]).is_some()
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

async fn sh(rt: &DockerRuntime, id: &SandboxId, script: &str) -> ExecOutput {
    sh_exec(rt, id, script, Some(Duration::from_secs(30))).await
}

/// The strings of a JSON array.
fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn create_runs_a_hardened_labelled_container() {
    let rt = runtime();
    let mut s = spec(None);
    s.cpu_cores = 1.5;
    let _cleanup = Cleanup(s.sandbox_id.clone());

    let t0 = Instant::now();
    let container_id = rt.create(&s).await.expect("create");
    eprintln!("create latency: {:?}", t0.elapsed());

    let state = rt.inspect(&s.sandbox_id).await.unwrap().expect("container");
    assert!(state.running);
    assert_eq!(state.container_id, container_id);
    assert!(state.started_at.is_some());
    assert_eq!(state.finished_at, None);
    assert_eq!(state.exit_code, None);

    let c = container_json(&s.sandbox_id).expect("docker inspect");
    assert_eq!(c["Name"], format!("/stockade-{}", s.sandbox_id));
    let l = &c["Config"]["Labels"];
    assert_eq!(l[labels::MANAGED], "true");
    assert_eq!(l[labels::SANDBOX_ID], s.sandbox_id.as_str());
    assert_eq!(l[labels::ACCOUNT_ID], s.account_id.as_str());
    assert_eq!(l[labels::INSTANCE_ID], s.instance_id.as_str());
    assert_eq!(c["Config"]["WorkingDir"], "/workspace");
    assert_eq!(c["Config"]["Hostname"], s.hostname.as_str());
    assert_eq!(c["Config"]["Tty"], false);
    assert_eq!(c["Config"]["OpenStdin"], false);
    let env = strings(&c["Config"]["Env"]);
    assert!(env.contains(&"SANDBOX_GREETING=hello there"), "{env:?}");

    let h = &c["HostConfig"];
    assert_eq!(h["CapDrop"], serde_json::json!(["ALL"]));
    let cap_add = strings(&h["CapAdd"]);
    for cap in CAPS {
        assert!(
            cap_add.iter().any(|c| c.trim_start_matches("CAP_") == cap),
            "{cap} missing from {cap_add:?}"
        );
    }
    assert_eq!(cap_add.len(), CAPS.len(), "{cap_add:?}");
    let sec = strings(&h["SecurityOpt"]);
    assert!(sec.contains(&"no-new-privileges:true"), "{sec:?}");
    assert!(!sec.iter().any(|o| o.contains("unconfined")), "{sec:?}");
    assert_eq!(h["Privileged"], false);
    assert_eq!(h["PidsLimit"], 512);
    assert_eq!(h["Memory"], s.memory_bytes);
    assert_eq!(h["MemorySwap"], s.memory_bytes);
    assert_eq!(h["NanoCpus"], 1_500_000_000_i64);
    assert_eq!(h["Init"], true);
    assert_eq!(h["ReadonlyRootfs"], false);
    assert_eq!(h["RestartPolicy"]["Name"], "no");
    assert!(h["Binds"].is_null() || h["Binds"].as_array().is_some_and(|b| b.is_empty()));

    let mounts = c["Mounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 1, "only the workspace volume: {mounts:?}");
    assert_eq!(mounts[0]["Type"], "volume");
    assert_eq!(
        mounts[0]["Name"],
        VolumeName::for_sandbox(&s.sandbox_id).as_str()
    );
    assert_eq!(mounts[0]["Destination"], "/workspace");
    assert_eq!(mounts[0]["RW"], true);

    let vol = inspect_json(&[
        "volume",
        "inspect",
        VolumeName::for_sandbox(&s.sandbox_id).as_str(),
    ])
    .expect("volume");
    assert_eq!(vol["Labels"][labels::SANDBOX_ID], s.sandbox_id.as_str());
    assert_eq!(vol["Labels"][labels::INSTANCE_ID], s.instance_id.as_str());

    // Inside: no capabilities beyond the set, NoNewPrivs on, seccomp filtering.
    let out = sh(
        &rt,
        &s.sandbox_id,
        "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status",
    )
    .await;
    let status = text(&out.stdout);
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    let out = sh(&rt, &s.sandbox_id, "hostname; pwd; echo $SANDBOX_GREETING").await;
    assert_eq!(
        text(&out.stdout),
        format!("{}\n/workspace\nhello there\n", s.hostname)
    );

    let managed = rt.list_managed().await.unwrap();
    let mine = managed
        .iter()
        .find(|m| m.sandbox_id.as_ref() == Some(&s.sandbox_id))
        .expect("listed as managed");
    assert_eq!(mine.container_id, container_id);
    assert_eq!(mine.instance_id.as_deref(), Some(s.instance_id.as_str()));
    assert!(mine.running);
}

#[tokio::test]
async fn limits_are_enforced_by_the_kernel() {
    let mut s = spec(None);
    s.cpu_cores = 0.5;
    s.memory_bytes = 192 * 1024 * 1024;
    let (rt, _cleanup) = created(runtime(), &s).await;

    let out = sh(
        &rt,
        &s.sandbox_id,
        "if [ -f /sys/fs/cgroup/memory.max ]; then \
           cat /sys/fs/cgroup/memory.max; cat /sys/fs/cgroup/cpu.max; cat /sys/fs/cgroup/pids.max; \
         else \
           cat /sys/fs/cgroup/memory/memory.limit_in_bytes; \
           echo \"$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)\"; \
           cat /sys/fs/cgroup/pids/pids.max; \
         fi",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert_eq!(lines[0], (192 * 1024 * 1024).to_string());
    let cpu: Vec<i64> = lines[1]
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(cpu[0] * 2, cpu[1], "half a core: {}", lines[1]);
    assert_eq!(lines[2], "512");
}

#[tokio::test]
async fn workspace_survives_stop_and_start() {
    let s = spec(None);
    let id = &s.sandbox_id;
    let (rt, _cleanup) = created(runtime(), &s).await;

    let payload: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let out = rt
        .exec(
            id,
            ExecSpec {
                argv: argv(&["/bin/sh", "-c", "cat > /workspace/data.bin"]),
                stdin: Some(payload.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", text(&out.stderr));

    // The default keep-alive exits at once on SIGTERM.
    let t0 = Instant::now();
    rt.stop(id, Duration::from_secs(30)).await.expect("stop");
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(5), "stop took {took:?}");
    let st = rt.inspect(id).await.unwrap().unwrap();
    assert!(!st.running);
    assert!(st.finished_at.is_some());
    assert_eq!(st.exit_code, Some(0));
    // Stopping again is fine; exec in a stopped sandbox is a conflict.
    rt.stop(id, Duration::from_secs(30))
        .await
        .expect("stop again");
    match rt.exec(id, exec_of(&["true"])).await {
        Err(RuntimeError::Conflict(m)) => assert_eq!(m, "sandbox is not running"),
        other => panic!("expected Conflict, got {other:?}"),
    }

    rt.start(id).await.expect("start");
    rt.start(id).await.expect("start while running is fine");
    assert!(rt.inspect(id).await.unwrap().unwrap().running);
    let out = rt
        .exec(id, exec_of(&["cat", "/workspace/data.bin"]))
        .await
        .unwrap();
    assert_eq!(out.stdout.len(), payload.len());
    assert!(out.stdout == payload, "workspace content changed");
}

#[tokio::test]
async fn stop_kills_a_process_that_ignores_sigterm_after_the_grace() {
    let s = spec(Some("trap '' TERM; while true; do sleep 1; done"));
    let id = &s.sandbox_id;
    let (rt, _cleanup) = created(runtime(), &s).await;

    let t0 = Instant::now();
    rt.stop(id, Duration::from_secs(2)).await.expect("stop");
    let took = t0.elapsed();
    assert!(took >= Duration::from_secs(2), "stopped after {took:?}");
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
    let st = rt.inspect(id).await.unwrap().unwrap();
    assert!(!st.running);
    assert_eq!(st.exit_code, Some(137), "SIGKILLed");
}

#[tokio::test]
async fn remove_keeps_or_deletes_the_volume() {
    let rt = runtime();

    let kept = spec(None);
    let _c1 = Cleanup(kept.sandbox_id.clone());
    rt.create(&kept).await.expect("create");
    rt.remove(&kept.sandbox_id, true).await.expect("remove");
    assert!(rt.inspect(&kept.sandbox_id).await.unwrap().is_none());
    assert!(container_json(&kept.sandbox_id).is_none());
    assert!(volume_exists(&kept.sandbox_id), "preserved volume");
    // Removing again (container gone) is fine, and now takes the volume.
    rt.remove(&kept.sandbox_id, false)
        .await
        .expect("remove again");
    assert!(!volume_exists(&kept.sandbox_id));

    let dropped = spec(None);
    let _c2 = Cleanup(dropped.sandbox_id.clone());
    rt.create(&dropped).await.expect("create");
    rt.remove(&dropped.sandbox_id, false).await.expect("remove");
    assert!(container_json(&dropped.sandbox_id).is_none());
    assert!(!volume_exists(&dropped.sandbox_id));
}

#[tokio::test]
async fn a_preserved_volume_is_reused_by_a_new_container() {
    let s = spec(None);
    let id = &s.sandbox_id;
    let (rt, _cleanup) = created(runtime(), &s).await;
    sh(&rt, id, "echo kept > /workspace/f").await;
    rt.remove(id, true).await.unwrap();
    rt.create(&s).await.expect("create on the preserved volume");
    assert_eq!(
        text(&sh(&rt, id, "cat /workspace/f").await.stdout),
        "kept\n"
    );
}

#[tokio::test]
async fn missing_containers_are_not_found() {
    let rt = runtime();
    let id = SandboxId::generate();
    assert!(rt.inspect(&id).await.unwrap().is_none());
    assert!(matches!(
        rt.start(&id).await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(matches!(
        rt.stop(&id, Duration::from_secs(1)).await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(matches!(
        rt.exec(&id, exec_of(&["true"])).await,
        Err(RuntimeError::NotFound(_))
    ));
    rt.remove(&id, false)
        .await
        .expect("removing nothing is fine");
    assert!(matches!(
        rt.remove_volume(&VolumeName::for_sandbox(&id)).await,
        Err(RuntimeError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_missing_image_fails_fast_and_leaves_nothing() {
    let rt = runtime();
    let t0 = Instant::now();
    let err = rt.ensure_image(MISSING_IMAGE).await.unwrap_err();
    let took = t0.elapsed();
    eprintln!("failing pull took {took:?}: {err}");
    match &err {
        RuntimeError::ImageUnavailable { image, reason } => {
            assert_eq!(image, MISSING_IMAGE);
            assert!(!reason.is_empty() && reason.len() < 400, "{reason}");
        }
        other => panic!("expected ImageUnavailable, got {other:?}"),
    }
    assert!(took < Duration::from_secs(35), "pull failed after {took:?}");

    let mut s = spec(None);
    s.image = MISSING_IMAGE.into();
    let _cleanup = Cleanup(s.sandbox_id.clone());
    assert!(matches!(
        rt.create(&s).await,
        Err(RuntimeError::ImageUnavailable { .. })
    ));
    assert!(container_json(&s.sandbox_id).is_none());
    assert!(!volume_exists(&s.sandbox_id));
}

#[tokio::test]
async fn a_failed_start_leaves_nothing() {
    let rt = runtime();
    let mut s = spec(None);
    // Accepted by create, refused by the kernel at start (sethostname).
    s.hostname = "h".repeat(100);
    let _cleanup = Cleanup(s.sandbox_id.clone());
    let err = rt.create(&s).await.unwrap_err();
    assert!(matches!(err, RuntimeError::Other(_)), "{err:?}");
    assert!(container_json(&s.sandbox_id).is_none(), "container left");
    assert!(!volume_exists(&s.sandbox_id), "volume left");
}

#[tokio::test]
async fn a_failed_container_create_removes_the_new_volume() {
    let rt = DockerRuntime::new(DockerConfig {
        oci_runtime: Some("stockade-no-such-runtime".into()),
        ..Default::default()
    })
    .unwrap();
    let _ = runtime();
    let s = spec(None);
    let _cleanup = Cleanup(s.sandbox_id.clone());
    let err = rt.create(&s).await.unwrap_err();
    assert!(
        err.to_string().contains("stockade-no-such-runtime"),
        "{err}"
    );
    assert!(container_json(&s.sandbox_id).is_none(), "container left");
    assert!(!volume_exists(&s.sandbox_id), "volume left");
}

#[tokio::test]
async fn a_cancelled_create_leaves_nothing() {
    let rt = runtime();
    let mut ids = Vec::new();
    let mut cleanups = Vec::new();
    let mut cancelled = 0;
    for cut_ms in [5u64, 40, 120, 250] {
        let s = spec(None);
        cleanups.push(Cleanup(s.sandbox_id.clone()));
        ids.push(s.sandbox_id.clone());
        match tokio::time::timeout(Duration::from_millis(cut_ms), rt.create(&s)).await {
            Err(_) => cancelled += 1,
            // Finished before the cut (fast machine): not what we test here.
            Ok(Ok(_)) => rt.remove(&s.sandbox_id, false).await.unwrap(),
            Ok(Err(e)) => panic!("create failed: {e}"),
        }
    }
    assert!(cancelled >= 2, "only {cancelled} creates were cut short");
    // The cleanup runs in the background: give it its retries.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for id in &ids {
        assert!(container_json(id).is_none(), "container of {id} left");
        assert!(!volume_exists(id), "volume of {id} left");
    }
}

#[tokio::test]
async fn exec_reports_exit_codes_streams_stdin_cwd_and_env() {
    let s = spec(None);
    let id = &s.sandbox_id;
    let (rt, _cleanup) = created(runtime(), &s).await;

    let out = sh(&rt, id, "echo out; echo err >&2; exit 3").await;
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");
    assert!(!out.timed_out && !out.truncated);

    let out = rt
        .exec(
            id,
            ExecSpec {
                argv: argv(&["wc", "-c"]),
                stdin: Some(vec![b'x'; 100_000]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "100000");

    let out = rt
        .exec(
            id,
            ExecSpec {
                argv: argv(&["cat"]),
                stdin: Some(Vec::new()),
                timeout: Some(Duration::from_secs(10)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!out.timed_out, "empty stdin must close it");
    assert_eq!(out.exit_code, Some(0));

    let out = rt
        .exec(
            id,
            ExecSpec {
                argv: argv(&["/bin/sh", "-c", "pwd; echo \"$FOO|$SANDBOX_GREETING\""]),
                cwd: Some("/tmp".into()),
                env: BTreeMap::from([("FOO".to_string(), "a b=c".to_string())]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(text(&out.stdout), "/tmp\na b=c|hello there\n");

    let out = rt.exec(id, exec_of(&["/no/such/command"])).await.unwrap();
    assert!(
        matches!(out.exit_code, Some(126) | Some(127)),
        "{:?}",
        out.exit_code
    );
}

#[tokio::test]
async fn exec_truncates_and_times_out() {
    let s = spec(None);
    let id = &s.sandbox_id;
    let (rt, _cleanup) = created(runtime(), &s).await;

    let out = rt
        .exec(
            id,
            ExecSpec {
                argv: argv(&[
                    "/bin/sh",
                    "-c",
                    "head -c 300000 /dev/zero; head -c 10 /dev/zero >&2",
                ]),
                max_output_bytes: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout.len(), 1000);
    assert_eq!(out.stderr.len(), 10);
    assert!(out.truncated);

    let t0 = Instant::now();
    let script = "echo started; sleep 300 & sleep 301; echo never";
    let out = sh_exec(&rt, id, script, Some(Duration::from_secs(1))).await;
    let took = t0.elapsed();
    assert!(out.timed_out);
    assert_eq!(out.exit_code, None);
    assert_eq!(text(&out.stdout), "started\n");
    assert!(took < Duration::from_secs(6), "timeout took {took:?}");

    // The command and its children are gone.
    let out = sh(
        &rt,
        id,
        "for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done",
    )
    .await;
    let procs = text(&out.stdout);
    assert!(!procs.contains("sleep 300"), "{procs}");
    assert!(!procs.contains("sleep 301"), "{procs}");
}

/// Without network access a sandbox joins Stockade's internal network (the
/// host can reach it, it reaches nothing: tests/isolation.rs), with it
/// Stockade's network with a way out.
#[tokio::test]
async fn sandboxes_join_stockades_networks() {
    let rt = runtime();
    let iso = stockade_runtime::IsolationConfig::default();
    let mut isolated = spec(None);
    isolated.network_access = false;
    let _c1 = Cleanup(isolated.sandbox_id.clone());
    rt.create(&isolated).await.expect("create");
    let c = container_json(&isolated.sandbox_id).unwrap();
    assert_eq!(
        c["HostConfig"]["NetworkMode"],
        iso.internal_network.as_str()
    );
    let internal = Command::new("docker")
        .args([
            "network",
            "inspect",
            "-f",
            "{{.Internal}}",
            &iso.internal_network,
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&internal.stdout).trim(), "true");

    let online = spec(None);
    let _c2 = Cleanup(online.sandbox_id.clone());
    rt.create(&online).await.expect("create");
    let c = container_json(&online.sandbox_id).unwrap();
    assert_eq!(c["HostConfig"]["NetworkMode"], iso.network.as_str());
    let out = sh(&rt, &online.sandbox_id, "ls /sys/class/net").await;
    let ifaces = text(&out.stdout);
    assert!(ifaces.split_whitespace().any(|i| i != "lo"), "{ifaces}");
}

#[tokio::test]
async fn volumes_are_listed_and_in_use_ones_are_kept() {
    let s = spec(None);
    let id = &s.sandbox_id;
    let (rt, _cleanup) = created(runtime(), &s).await;
    sh(&rt, id, "head -c 50000 /dev/zero > /workspace/zeros").await;
    let name = VolumeName::for_sandbox(id);

    let volumes = rt.list_volumes().await.expect("list volumes");
    let mine = volumes
        .iter()
        .find(|v| v.name == name)
        .expect("volume listed");
    assert_eq!(mine.instance_id.as_deref(), Some(s.instance_id.as_str()));
    let created = mine.created_at.expect("created_at");
    assert!((chrono::Utc::now() - created).num_minutes().abs() < 10);
    if let Some(size) = mine.size_bytes {
        assert!(size >= 50_000, "size {size}");
    } else {
        eprintln!("volume size not reported (docker df busy or slow)");
    }
    assert!(volumes
        .iter()
        .all(|v| v.name.as_str().starts_with(VolumeName::PREFIX)));

    match rt.remove_volume(&name).await {
        Err(RuntimeError::Conflict(m)) => assert_eq!(m, "Volume is in use by running sandbox"),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert!(volume_exists(id));
    rt.remove(id, true).await.unwrap();
    rt.remove_volume(&name).await.expect("remove volume");
    assert!(!volume_exists(id));
    assert!(matches!(
        rt.remove_volume(&name).await,
        Err(RuntimeError::NotFound(_))
    ));
}

#[tokio::test]
async fn info_reports_the_engine() {
    let rt = runtime();
    let info = rt.info().await.expect("info");
    assert!(!info.version.is_empty());
    assert!(info.api_version.starts_with("1."), "{info:?}");
    assert!(info.runtimes.iter().any(|r| r == "runc"), "{info:?}");
    assert_eq!(rt.server_name(), "local");

    // The host's size, as `docker info` reports it.
    let host = Command::new("docker")
        .args(["info", "-f", "{{.NCPU}} {{.MemTotal}}"])
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&host.stdout);
    let mut parts = host.split_whitespace();
    let cpus: u32 = parts.next().unwrap().parse().unwrap();
    let memory: u64 = parts.next().unwrap().parse().unwrap();
    assert!(cpus >= 1 && memory > 0, "{host}");
    assert_eq!((info.cpus, info.memory_bytes), (cpus, memory));
    // Asked again: the same (cached) answer, still with the engine's version.
    let again = rt.info().await.expect("info");
    assert_eq!(again, info);
}

fn assert_guidance(err: &RuntimeError, socket: &str) {
    let RuntimeError::Unavailable(msg) = err else {
        panic!("expected Unavailable, got {err:?}");
    };
    assert!(msg.contains(socket), "{msg}");
    assert!(msg.contains("sudo systemctl start docker"), "{msg}");
    assert!(msg.contains("dockerd &"), "{msg}");
    assert!(msg.contains("`docker` group"), "{msg}");
    assert!(msg.contains("DOCKER_HOST"), "{msg}");
}

#[tokio::test]
async fn a_dead_socket_is_unavailable_with_guidance() {
    let rt = DockerRuntime::new(DockerConfig {
        host: Some("unix:///tmp/nonexistent-stockade.sock".into()),
        ..Default::default()
    })
    .expect("new must not need the daemon");
    let t0 = Instant::now();
    let err = rt.info().await.unwrap_err();
    eprintln!("dead socket after {:?}: {err}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert_guidance(&err, "/tmp/nonexistent-stockade.sock");
    let err = rt.create(&spec(None)).await.unwrap_err();
    assert_guidance(&err, "/tmp/nonexistent-stockade.sock");
    assert!(matches!(
        rt.list_volumes().await,
        Err(RuntimeError::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_silent_daemon_times_out_quickly() {
    let dir = tempdir();
    let path = format!("{dir}/silent.sock");
    // Accepts connections (backlog) but never answers.
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let rt = DockerRuntime::new(DockerConfig {
        host: Some(format!("unix://{path}")),
        ..Default::default()
    })
    .unwrap();
    let t0 = Instant::now();
    let err = rt.info().await.unwrap_err();
    let took = t0.elapsed();
    eprintln!("silent daemon after {took:?}: {err}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_guidance(&err, &path);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_runtime_recovers_when_the_daemon_comes_back() {
    let dir = tempdir();
    let path = format!("{dir}/proxy.sock");
    let rt = DockerRuntime::new(DockerConfig {
        host: Some(format!("unix://{path}")),
        ..Default::default()
    })
    .unwrap();
    assert!(matches!(rt.info().await, Err(RuntimeError::Unavailable(_))));

    // "Start the daemon": a socket at that path forwarding to the real one.
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let proxy = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut upstream) = tokio::net::UnixStream::connect(real_socket()).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    let info = rt.info().await.expect("recovered");
    assert!(!info.version.is_empty());

    // "Stop the daemon" again: unavailable, and back once more.
    proxy.abort();
    let _ = proxy.await;
    // The socket file stays behind, nobody listens: connection refused.
    let err = rt.info().await.unwrap_err();
    eprintln!("refused: {err}");
    assert_guidance(&err, &path);
    let _ = std::fs::remove_file(&path);
    assert!(matches!(rt.info().await, Err(RuntimeError::Unavailable(_))));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The socket of the engine the tests use.
fn real_socket() -> String {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if h.starts_with("unix://") => h["unix://".len()..].to_owned(),
        _ => "/var/run/docker.sock".to_owned(),
    }
}

/// A fake engine that, like Docker 29, refuses API versions below 1.44.
async fn serve_modern_engine(listener: tokio::net::UnixListener) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while let Ok((mut conn, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&req);
            let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
            let (status, body) = if path.starts_with("/v1.41/") {
                (
                    "400 Bad Request",
                    r#"{"message":"client version 1.41 is too old. Minimum supported API version is 1.44, please upgrade your client to a newer version"}"#,
                )
            } else if path.ends_with("/version") {
                (
                    "200 OK",
                    r#"{"Version":"29.0.0","ApiVersion":"1.52","MinAPIVersion":"1.44","Os":"linux","Arch":"amd64"}"#,
                )
            } else if path.ends_with("/info") {
                (
                    "200 OK",
                    r#"{"Runtimes":{"runc":{"path":"runc"},"runsc":{"path":"runsc"}}}"#,
                )
            } else {
                ("404 Not Found", r#"{"message":"page not found"}"#)
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(resp.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

#[tokio::test]
async fn an_engine_that_dropped_api_1_41_is_negotiated_with() {
    let dir = tempdir();
    let path = format!("{dir}/modern.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let server = tokio::spawn(serve_modern_engine(listener));
    let rt = DockerRuntime::new(DockerConfig {
        host: Some(format!("unix://{path}")),
        ..Default::default()
    })
    .unwrap();
    let info = rt.info().await.expect("negotiated");
    assert_eq!(info.version, "29.0.0");
    assert_eq!(info.api_version, "1.52");
    assert_eq!(info.runtimes, ["runc", "runsc"]);
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir() -> String {
    let dir = std::env::temp_dir().join(format!("stockade-rt-test-{}", SandboxId::generate()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.to_string_lossy().into_owned()
}
