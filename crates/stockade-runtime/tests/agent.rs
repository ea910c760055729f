//! The in-sandbox agent injected into sandboxes on the real engine:
//! PID 1 in the busybox and the Debian test images, reached
//! from the host with the sandbox's token only, the token kept from every
//! process it starts, its volume read-only, Docker's stop keeping its
//! meaning, environment updates applied at start; warm-pool members and
//! containers made from snapshots; a container without a token as before;
//! the agent volume made again when removed or emptied, and made by racing
//! runtimes. Every container, volume and image a test makes is removed, also
//! when it fails (the shared `stockade-agent-<version>` volume is kept, like
//! Stockade's networks).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use stockade_agent::client::{AgentClient, RunOptions, RunOutput};
use stockade_agent::connect::Code;
use stockade_core::{InstanceId, SandboxId};
use stockade_runtime::prelude::*;
use stockade_runtime::{
    agent_version, container_name, labels, ContainerSpec, DockerConfig, DockerRuntime, ExecSpec,
    IsolationConfig, PoolMemberSpec, AGENT_PORT, AGENT_TOKEN_ENV,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;
use support::{
    agent, agent_round_trip, compile_static, docker_cli, exec_of, shell_spec, stop_on_sigterm, Made,
};

const KEEP_ALIVE: &str = "trap 'exit 0' TERM; while true; do sleep 86400 & wait $!; done";

fn busybox() -> String {
    std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into())
}

fn debian() -> String {
    std::env::var("STOCKADE_TEST_IMAGE_DEBIAN")
        .unwrap_or_else(|_| "stockade-test-debian:latest".into())
}

/// `docker inspect` of one object, as JSON.
fn inspect_json(kind: &str, name: &str) -> Value {
    let out = docker_cli(&[kind, "inspect", name]);
    assert!(
        out.status.success(),
        "docker {kind} inspect {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: Value = serde_json::from_slice(&out.stdout).expect("inspect JSON");
    all[0].clone()
}

fn runtime() -> DockerRuntime {
    DockerRuntime::new(DockerConfig::default()).expect("runtime")
}

/// A runtime with an agent volume of the test's own.
fn runtime_with_volume(volume: &str) -> DockerRuntime {
    DockerRuntime::new(DockerConfig {
        agent_volume: volume.to_owned(),
        ..Default::default()
    })
    .expect("runtime")
}

/// A fresh name for an agent volume, and the guard that removes it (and
/// whatever else the test adds to it).
fn fresh_agent_volume() -> (String, Made) {
    let volume = format!("stockade-test-agent-{}", SandboxId::generate());
    let mut cleanup = Made::default();
    cleanup.volumes.push(volume.clone());
    (volume, cleanup)
}

fn new_token() -> String {
    format!("tok-{}", SandboxId::generate())
}

fn spec(image: &str, script: &str, token: Option<&str>) -> ContainerSpec {
    let spec = shell_spec(image, script);
    ContainerSpec {
        hostname: spec.sandbox_id.to_string(),
        network_access: true,
        agent_token: token.map(str::to_owned),
        ..spec
    }
}

async fn sh(c: &AgentClient, script: &str) -> RunOutput {
    c.run(
        "/bin/sh",
        &RunOptions {
            args: vec!["-c".into(), script.into()],
            timeout: Some(Duration::from_secs(30)),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// Stdout of a script that must succeed.
async fn sh_ok(c: &AgentClient, script: &str) -> String {
    let out = sh(c, script).await;
    assert_eq!(
        out.exit_code,
        0,
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The HTTP status of a raw `process.Process/List` with `token`.
async fn raw_status(rt: &DockerRuntime, id: &SandboxId, token: Option<&str>) -> u16 {
    let ip = rt.container_address(id).await.unwrap().unwrap();
    let mut s = tokio::net::TcpStream::connect((ip, AGENT_PORT))
        .await
        .unwrap();
    let header = token
        .map(|t| format!("X-Access-Token: {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /process.Process/List HTTP/1.1\r\nHost: sandbox\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\nConnection: close\r\n{header}\r\n{{}}"
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {answer:?}"))
}

/// The first line of the main process's command line (`/proc/1/cmdline`).
async fn pid1(c: &AgentClient) -> String {
    sh_ok(c, "tr '\\0' ' ' < /proc/1/cmdline").await
}

/// What every image must show: the agent as PID 1, the token required,
/// commands, the token kept from processes, the read-only agent, reaped
/// zombies, environment updates at start, and Docker's stop.
async fn agent_story(image: &str) {
    let rt = runtime();
    let mut cleanup = Made::default();
    let token = new_token();
    let mut s = spec(
        image,
        &format!("env > /tmp/main-env; echo \"greeting=$GREETING\" > /tmp/greeting; {KEEP_ALIVE}"),
        Some(&token),
    );
    s.env = BTreeMap::from([
        ("GREETING".to_owned(), "hello".to_owned()),
        ("DROPPED".to_owned(), "soon".to_owned()),
    ]);
    let id = s.sandbox_id.clone();
    cleanup.sandboxes.push(id.clone());
    rt.create(&s).await.expect("create with an agent");

    let state = rt.inspect(&id).await.unwrap().unwrap();
    assert_eq!(state.agent.as_deref(), Some(agent_version()));
    let listed = rt.list_managed().await.unwrap();
    let me = listed
        .iter()
        .find(|c| c.sandbox_id.as_ref() == Some(&id))
        .expect("listed");
    assert_eq!(me.agent.as_deref(), Some(agent_version()));

    let c = agent(&rt, &id, Some(&token)).await;
    // The agent is PID 1, with the main process after `--`.
    let cmdline = pid1(&c).await;
    assert!(
        cmdline
            .starts_with("/.stockade/agent/stockade-agent --listen 0.0.0.0:49983 -- /bin/sh -c "),
        "{cmdline}"
    );

    // Only the sandbox's own token opens it.
    let other = new_token();
    for wrong in [None, Some(other.as_str())] {
        assert_eq!(raw_status(&rt, &id, wrong).await, 401, "token {wrong:?}");
        let refused = agent(&rt, &id, wrong).await;
        assert_eq!(
            refused.list().await.unwrap_err().code(),
            Some(Code::Unauthenticated)
        );
    }
    assert_eq!(raw_status(&rt, &id, Some(&token)).await, 200);

    // Commands: exit codes and output.
    let t = c.run("true", &RunOptions::default()).await.unwrap();
    assert_eq!((t.exit_code, t.exited), (0, true));
    assert_eq!(sh(&c, "exit 3").await.exit_code, 3);
    assert_eq!(sh_ok(&c, "echo $((6*7)); echo err >&2").await, "42\n");
    let out = sh(&c, "echo out; echo err >&2; exit 1").await;
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );

    // The token is in no process the agent started, nor in a docker exec.
    let main_env = sh_ok(&c, "cat /tmp/main-env").await;
    assert!(main_env.contains("GREETING=hello"), "{main_env}");
    assert!(!main_env.contains(&token), "main process: {main_env}");
    assert!(
        !main_env.contains(AGENT_TOKEN_ENV),
        "main process: {main_env}"
    );
    let exec_env = sh_ok(&c, "env").await;
    assert!(!exec_env.contains(&token), "agent exec: {exec_env}");
    assert!(
        !exec_env.contains(AGENT_TOKEN_ENV),
        "agent exec: {exec_env}"
    );
    let docker_env = rt.exec(&id, exec_of(&["env"])).await.unwrap();
    let docker_env = String::from_utf8_lossy(&docker_env.stdout);
    assert!(!docker_env.contains(&token), "docker exec: {docker_env}");

    // The agent's directory is read-only inside.
    let touch = sh(&c, "touch /.stockade/agent/x").await;
    assert_ne!(touch.exit_code, 0, "writing next to the agent worked");
    let mount = sh_ok(&c, "grep ' /.stockade/agent ' /proc/mounts").await;
    assert!(mount.contains(" ro,") || mount.contains(" ro "), "{mount}");

    // Orphans are reaped by the agent: no zombie is left.
    sh_ok(&c, "sleep 0.2 & sleep 0.1 & exit 0").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let zombies = sh_ok(&c, "grep -l '^State:.*Z' /proc/[0-9]*/status | wc -l").await;
    assert_eq!(zombies.trim(), "0", "zombies left");

    // A changed environment reaches the main process at its next start;
    // a main process that handles SIGTERM ends within the grace.
    rt.set_main_process_env(
        &id,
        &BTreeMap::from([
            ("GREETING".to_owned(), "changed 'quoted' $x".to_owned()),
            ("NEW".to_owned(), "x".to_owned()),
        ]),
    )
    .await
    .unwrap();
    let started = Instant::now();
    rt.stop(&id, Duration::from_secs(20)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a polite stop took {:?}",
        started.elapsed()
    );
    let state = rt.inspect(&id).await.unwrap().unwrap();
    assert!(!state.running);
    assert_eq!(state.exit_code, Some(0), "the main process's own status");
    rt.start(&id).await.unwrap();
    let c = agent(&rt, &id, Some(&token)).await;
    let mut greeting = String::new();
    for _ in 0..100 {
        greeting = sh_ok(&c, "cat /tmp/greeting 2>/dev/null || true").await;
        if greeting.contains("changed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(greeting, "greeting=changed 'quoted' $x\n");
    let main_env = sh_ok(&c, "cat /tmp/main-env").await;
    assert!(main_env.contains("NEW=x"), "{main_env}");
    assert!(!main_env.contains("DROPPED="), "{main_env}");
    assert!(!main_env.contains(&token), "{main_env}");
    assert!(pid1(&c)
        .await
        .starts_with("/.stockade/agent/stockade-agent "));

    // A main process that ignores SIGTERM is SIGKILLed after the grace.
    let stubborn = spec(
        image,
        "trap '' TERM; while true; do sleep 1; done",
        Some(&token),
    );
    cleanup.create(&rt, &stubborn).await.unwrap();
    agent(&rt, &stubborn.sandbox_id, Some(&token)).await;
    let started = Instant::now();
    rt.stop(&stubborn.sandbox_id, Duration::from_secs(2))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2), "stopped after {took:?}");
    assert!(took < Duration::from_secs(15), "stopped after {took:?}");
    let state = rt.inspect(&stubborn.sandbox_id).await.unwrap().unwrap();
    assert_eq!(state.exit_code, Some(137));
}

#[tokio::test]
async fn the_agent_is_pid_1_in_busybox() {
    agent_story(&busybox()).await;
}

#[tokio::test]
async fn the_agent_is_pid_1_in_debian() {
    let image = debian();
    assert!(
        docker_cli(&["image", "inspect", &image]).status.success(),
        "{image} is missing: run scripts/build-test-image"
    );
    agent_story(&image).await;
    // Bash is there for SDKs that insist on it.
    let rt = runtime();
    let mut cleanup = Made::default();
    let token = new_token();
    let s = spec(&image, KEEP_ALIVE, Some(&token));
    cleanup.create(&rt, &s).await.unwrap();
    let c = agent(&rt, &s.sandbox_id, Some(&token)).await;
    let out = c
        .run(
            "/bin/bash",
            &RunOptions {
                args: vec!["-c".into(), "echo ${BASH_VERSION%%.*}".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u32>()
            .unwrap()
            >= 4
    );
}

#[tokio::test]
async fn pool_members_and_snapshots_have_the_agent_offline_sandboxes_too() {
    let rt = runtime();
    let mut cleanup = Made::default();

    // A warm-pool member (Debian) with its own token.
    let member_token = new_token();
    let member = PoolMemberSpec {
        sandbox_id: SandboxId::generate(),
        instance_id: InstanceId::generate(),
        class: "agent-test".into(),
        image: debian(),
        cpu_cores: 1.0,
        memory_bytes: 256 << 20,
        network_access: true,
        agent_token: Some(member_token.clone()),
        disk_bytes: None,
    };
    cleanup.sandboxes.push(member.sandbox_id.clone());
    rt.create_pool_member(&member).await.expect("pool member");
    let listed = rt.list_managed().await.unwrap();
    let m = listed
        .iter()
        .find(|c| c.sandbox_id.as_ref() == Some(&member.sandbox_id))
        .expect("member listed");
    assert_eq!(m.pool_class.as_deref(), Some("agent-test"));
    assert_eq!(m.agent.as_deref(), Some(agent_version()));
    let c = agent(&rt, &member.sandbox_id, Some(&member_token)).await;
    assert!(pid1(&c)
        .await
        .starts_with("/.stockade/agent/stockade-agent "));
    let labels_of =
        inspect_json("container", &container_name(&member.sandbox_id))["Config"]["Labels"].clone();
    assert_eq!(labels_of[labels::POOL_MEMBER], member.sandbox_id.as_str());
    assert_eq!(labels_of[labels::AGENT], agent_version());

    // A sandbox without network access: reachable on the offline network.
    let first_token = new_token();
    let mut first = spec(&busybox(), KEEP_ALIVE, Some(&first_token));
    first.network_access = false;
    cleanup.create(&rt, &first).await.unwrap();
    let networks = inspect_json("container", &container_name(&first.sandbox_id))["NetworkSettings"]
        ["Networks"]
        .clone();
    let offline = IsolationConfig::default().internal_network;
    assert!(networks.get(&offline).is_some(), "{networks}");
    let c = agent(&rt, &first.sandbox_id, Some(&first_token)).await;
    sh_ok(&c, "echo from-the-snapshot > /etc/marker").await;

    // Its snapshot: the image carries neither the agent nor the token.
    let image = format!("stockade-test-agent-snap:{}", first.sandbox_id);
    cleanup.images.push(image.clone());
    rt.commit_snapshot(
        &first.sandbox_id,
        &image,
        &BTreeMap::from([("io.stockade.test".to_owned(), "agent".to_owned())]),
    )
    .await
    .unwrap();
    let config = inspect_json("image", &image)["Config"].clone();
    let entrypoint = config["Entrypoint"].as_array().cloned().unwrap_or_default();
    assert!(entrypoint.is_empty(), "{config}");
    assert_eq!(config["Labels"][labels::AGENT], "", "{config}");
    let env = config["Env"].to_string();
    assert!(!env.contains(&first_token), "{env}");
    assert!(env.contains(&format!("\"{AGENT_TOKEN_ENV}=\"")), "{env}");
    assert!(
        config["Cmd"].to_string().contains("sleep 86400"),
        "{config}"
    );

    // A fork with an agent: its own token, the snapshot's files.
    let fork_token = new_token();
    let mut fork = spec(&image, KEEP_ALIVE, Some(&fork_token));
    fork.network_access = false;
    cleanup
        .create(&rt, &fork)
        .await
        .expect("create from the snapshot");
    assert_eq!(
        rt.inspect(&fork.sandbox_id)
            .await
            .unwrap()
            .unwrap()
            .agent
            .as_deref(),
        Some(agent_version())
    );
    let c = agent(&rt, &fork.sandbox_id, Some(&fork_token)).await;
    assert_eq!(sh_ok(&c, "cat /etc/marker").await, "from-the-snapshot\n");
    assert!(pid1(&c)
        .await
        .starts_with("/.stockade/agent/stockade-agent "));
    assert_eq!(
        raw_status(&rt, &fork.sandbox_id, Some(&first_token)).await,
        401,
        "the parent's token opens the fork"
    );
    assert!(!sh_ok(&c, "env").await.contains(&first_token));

    // A fork without one: today's container, the token variable blank.
    let plain = spec(&image, KEEP_ALIVE, None);
    cleanup
        .create(&rt, &plain)
        .await
        .expect("create from the snapshot, no agent");
    assert_eq!(
        rt.inspect(&plain.sandbox_id).await.unwrap().unwrap().agent,
        None
    );
    let c = inspect_json("container", &container_name(&plain.sandbox_id));
    assert_eq!(c["HostConfig"]["Init"], true);
    let out = rt
        .exec(
            &plain.sandbox_id,
            ExecSpec {
                argv: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    format!("cat /etc/marker; echo \"[${AGENT_TOKEN_ENV}]\"; tr '\\0' ' ' < /proc/1/cmdline"),
                ],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.starts_with("from-the-snapshot\n[]\n"), "{out}");
    assert!(!out.contains("stockade-agent"), "{out}");
}

#[tokio::test]
async fn without_a_token_the_container_is_as_before() {
    let rt = runtime();
    let mut cleanup = Made::default();
    let plain = spec(&busybox(), KEEP_ALIVE, None);
    let token = new_token();
    let mut with = spec(&busybox(), KEEP_ALIVE, Some(&token));
    // Same account and instance: the labels differ only by the agent's.
    with.account_id = plain.account_id.clone();
    with.instance_id = plain.instance_id.clone();
    cleanup.sandboxes.push(plain.sandbox_id.clone());
    cleanup.sandboxes.push(with.sandbox_id.clone());
    rt.create(&plain).await.unwrap();
    rt.create(&with).await.unwrap();
    assert_eq!(
        rt.inspect(&plain.sandbox_id).await.unwrap().unwrap().agent,
        None
    );

    let p = inspect_json("container", &container_name(&plain.sandbox_id));
    let a = inspect_json("container", &container_name(&with.sandbox_id));
    // No agent: Docker's init, the shell wrapper, one mount, no token.
    assert_eq!(p["HostConfig"]["Init"], true);
    assert!(p["Config"]["Entrypoint"].is_null(), "{}", p["Config"]);
    assert_eq!(p["Config"]["Cmd"][0], "/bin/sh");
    assert_eq!(p["Config"]["Cmd"][3], "stockade-main");
    assert!(p["Config"]["Labels"].get(labels::AGENT).is_none());
    assert_eq!(p["Mounts"].as_array().unwrap().len(), 1);
    assert!(!p["Config"]["Env"].to_string().contains(AGENT_TOKEN_ENV));
    // The agent: its entrypoint, no init, the read-only mount, the token.
    assert_eq!(a["HostConfig"]["Init"], false);
    assert_eq!(
        a["Config"]["Entrypoint"][0],
        "/.stockade/agent/stockade-agent"
    );
    assert_eq!(a["Config"]["Cmd"][2], KEEP_ALIVE);
    assert_eq!(a["Config"]["Labels"][labels::AGENT], agent_version());
    let mounts = a["Mounts"].as_array().unwrap();
    let agent_mount = mounts
        .iter()
        .find(|m| m["Destination"] == "/.stockade/agent")
        .expect("agent mount");
    assert_eq!(agent_mount["RW"], false);
    assert_eq!(agent_mount["Name"], DockerConfig::default().agent_volume);
    assert!(a["Config"]["Env"]
        .to_string()
        .contains(&format!("{AGENT_TOKEN_ENV}={token}")));
    // Everything else is the same.
    for key in [
        "CapAdd",
        "CapDrop",
        "SecurityOpt",
        "PidsLimit",
        "Memory",
        "MemorySwap",
        "NanoCpus",
        "NetworkMode",
        "Privileged",
        "ReadonlyRootfs",
        "RestartPolicy",
        "Runtime",
    ] {
        assert_eq!(p["HostConfig"][key], a["HostConfig"][key], "{key}");
    }
    for key in [labels::MANAGED, labels::ACCOUNT_ID, labels::INSTANCE_ID] {
        assert_eq!(
            p["Config"]["Labels"][key], a["Config"]["Labels"][key],
            "{key}"
        );
    }
    assert_eq!(p["Config"]["WorkingDir"], a["Config"]["WorkingDir"]);

    // A bad token is refused before anything is made.
    let bad = spec(&busybox(), KEEP_ALIVE, Some("two words"));
    let err = cleanup.create(&rt, &bad).await.unwrap_err();
    assert!(err.to_string().contains("agent_token"), "{err}");
    assert!(rt.inspect(&bad.sandbox_id).await.unwrap().is_none());
}

#[tokio::test]
async fn the_agent_volume_is_made_again_when_removed_or_emptied() {
    let (volume, mut cleanup) = fresh_agent_volume();
    let rt = runtime_with_volume(&volume);
    let token = new_token();

    let first = spec(&busybox(), KEEP_ALIVE, Some(&token));
    cleanup.sandboxes.push(first.sandbox_id.clone());
    let t = Instant::now();
    rt.create(&first).await.unwrap();
    let filling = t.elapsed();
    let again = spec(&busybox(), KEEP_ALIVE, Some(&token));
    cleanup.sandboxes.push(again.sandbox_id.clone());
    let t = Instant::now();
    rt.create(&again).await.unwrap();
    println!(
        "create with the agent volume made and filled: {} ms; with it ready: {} ms",
        filling.as_millis(),
        t.elapsed().as_millis()
    );
    rt.remove(&again.sandbox_id, false).await.unwrap();
    let v = inspect_json("volume", &volume);
    assert_eq!(v["Labels"][labels::MANAGED], "true");
    assert_eq!(v["Labels"][labels::AGENT_VERSION], agent_version());
    agent(&rt, &first.sandbox_id, Some(&token)).await;
    assert!(
        !docker_cli(&["container", "inspect", &format!("{volume}-fill")])
            .status
            .success(),
        "the fill container is left"
    );

    // Removed by hand: made again at the next create.
    rt.remove(&first.sandbox_id, false).await.unwrap();
    let out = docker_cli(&["volume", "rm", &volume]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second = spec(&busybox(), KEEP_ALIVE, Some(&token));
    cleanup
        .create(&rt, &second)
        .await
        .expect("create after the volume went");
    let c = agent(&rt, &second.sandbox_id, Some(&token)).await;
    assert!(pid1(&c)
        .await
        .starts_with("/.stockade/agent/stockade-agent "));
    assert_eq!(
        inspect_json("volume", &volume)["Labels"][labels::AGENT_VERSION],
        agent_version()
    );

    // Replaced by an empty one behind the runtime's back: the start fails,
    // the runtime fills it and starts again.
    rt.remove(&second.sandbox_id, false).await.unwrap();
    assert!(docker_cli(&["volume", "rm", &volume]).status.success());
    assert!(docker_cli(&["volume", "create", &volume]).status.success());
    let third = spec(&busybox(), KEEP_ALIVE, Some(&token));
    cleanup
        .create(&rt, &third)
        .await
        .expect("create with an emptied volume");
    let c = agent(&rt, &third.sandbox_id, Some(&token)).await;
    assert_eq!(sh_ok(&c, "echo ok").await, "ok\n");
}

#[tokio::test]
async fn racing_runtimes_all_get_the_agent() {
    let (volume, mut cleanup) = fresh_agent_volume();
    // Two servers (runtimes) on one engine, three creates at once.
    let one = runtime_with_volume(&volume);
    let two = runtime_with_volume(&volume);
    let specs: Vec<(ContainerSpec, String)> = (0..3)
        .map(|i| {
            let token = new_token();
            let image = if i == 1 { debian() } else { busybox() };
            (spec(&image, KEEP_ALIVE, Some(&token)), token)
        })
        .collect();
    for (s, _) in &specs {
        cleanup.sandboxes.push(s.sandbox_id.clone());
    }
    let (a, b, c) = tokio::join!(
        one.create(&specs[0].0),
        one.create(&specs[1].0),
        two.create(&specs[2].0)
    );
    a.expect("first create");
    b.expect("second create");
    c.expect("third create");
    for (i, (s, token)) in specs.iter().enumerate() {
        let rt = if i == 2 { &two } else { &one };
        let c = agent(rt, &s.sandbox_id, Some(token)).await;
        assert_eq!(sh_ok(&c, "echo ok").await, "ok\n");
    }
    assert!(
        !docker_cli(&["container", "inspect", &format!("{volume}-fill")])
            .status
            .success()
    );
}

/// A main process for an image without a shell or libc: prints its first
/// argument and exits, or waits for SIGTERM and exits 0.
const TINY_MAIN: &str = r#"#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static volatile sig_atomic_t done;
static void on_term(int sig) { (void)sig; done = 1; }
int main(int argc, char **argv) {
    if (argc > 1) { printf("%s\n", argv[1]); return 0; }
    signal(SIGTERM, on_term);
    while (!done) pause();
    return 0;
}
"#;

/// Imports an image holding nothing but a static `/tiny` (TINY_MAIN), in
/// the manner of a distroless image: no shell, no libc, no /etc.
fn import_shell_less_image(tag: &str) {
    let binary = compile_static("tiny-main", TINY_MAIN);
    let data = std::fs::read(&binary).unwrap();
    let _ = std::fs::remove_file(&binary);
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o755);
    h.set_cksum();
    tar.append_data(&mut h, "tiny", data.as_slice()).unwrap();
    let tar = tar.into_inner().unwrap();
    let mut child = Command::new("docker")
        .args([
            "import",
            "--change",
            "LABEL io.stockade.test=agent",
            "--change",
            "CMD [\"/tiny\"]",
            "-",
            tag,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("docker import");
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(&tar).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "docker import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn an_image_without_shell_or_libc_gets_the_agent_too() {
    let rt = runtime();
    let mut cleanup = Made::default();
    let image = format!("stockade-test-agent-tiny:{}", SandboxId::generate());
    cleanup.images.push(image.clone());
    import_shell_less_image(&image);
    let token = new_token();
    let mut s = spec(&image, "", Some(&token));
    // No start command: the image's own (`/tiny`) is the main process.
    s.command = Vec::new();
    cleanup
        .create(&rt, &s)
        .await
        .expect("create from a shell-less image");
    let c = agent(&rt, &s.sandbox_id, Some(&token)).await;
    let out = c
        .run(
            "/tiny",
            &RunOptions {
                args: vec!["hello from tiny".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.stdout, b"hello from tiny\n");
    // Files and directories through the agent alone.
    let back = agent_round_trip(&c, "/workspace/note.txt", "no shell needed").await;
    assert_eq!(back, b"no shell needed");
    let listed = c.list_dir("/", 1).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|e| e.name.as_str()).collect();
    assert!(names.contains(&"tiny"), "{names:?}");
    // The main process (the image's command) gets SIGTERM from the agent.
    stop_on_sigterm(&rt, &s.sandbox_id).await;
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.99))
}

/// Exec round trips from the host into one container: through the agent
/// and through `docker exec` (the runtime's exec), 200 each in one run.
#[tokio::test]
async fn agent_exec_round_trip_beats_docker_exec() {
    const N: usize = 200;
    let rt = runtime();
    let mut cleanup = Made::default();
    let token = new_token();
    let s = spec(&busybox(), KEEP_ALIVE, Some(&token));
    cleanup.create(&rt, &s).await.unwrap();
    let c = agent(&rt, &s.sandbox_id, Some(&token)).await;
    let run_true = ExecSpec {
        argv: vec!["true".into()],
        ..Default::default()
    };
    for _ in 0..20 {
        c.run("true", &RunOptions::default()).await.unwrap();
        rt.exec(&s.sandbox_id, run_true.clone()).await.unwrap();
    }
    let mut agent_times = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        let out = c.run("true", &RunOptions::default()).await.unwrap();
        agent_times.push(t.elapsed());
        assert_eq!(out.exit_code, 0);
    }
    let mut docker_times = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        let out = rt.exec(&s.sandbox_id, run_true.clone()).await.unwrap();
        docker_times.push(t.elapsed());
        assert_eq!(out.exit_code, Some(0));
    }
    let (agent_p50, agent_p99) = percentiles(agent_times);
    let (docker_p50, docker_p99) = percentiles(docker_times);
    println!(
        "exec `true` round trip over {N}: agent p50 {agent_p50:.2} ms p99 {agent_p99:.2} ms; \
         docker exec p50 {docker_p50:.2} ms p99 {docker_p99:.2} ms"
    );
    assert!(
        agent_p50 < docker_p50,
        "agent p50 {agent_p50:.2} ms, docker exec p50 {docker_p50:.2} ms"
    );
}
