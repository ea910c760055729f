//! Network isolation against the real engine and packet filter,
//! hostile by design: sandboxes of two accounts, and of one account, try to
//! reach each other, the bridge gateway, a listener of the host on 0.0.0.0
//! and a container on another Docker network; the host (the proxy's path)
//! must still reach them. Then a rule deleted by hand is repaired.
//!
//! Every test uses networks, bridges and a chain of its own
//! (`IsolationConfig::with_prefix`), removed at the end, so parallel runs
//! and real deployments on the same host are never touched.

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::Command;
use std::time::Duration;

use stockade_core::{AccountId, InstanceId, SandboxId, VolumeName};
use stockade_runtime::prelude::*;
use stockade_runtime::{
    container_name, ContainerSpec, DockerConfig, DockerRuntime, IsolationConfig, IsolationStatus,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;
use support::{docker_cli, image, iptables, remove_isolation_chain, sh_exec, shell_spec};

const TEST_LABEL: &str = "io.stockade.test";

/// An httpd in the sandbox on port 8080 answering `secret`.
fn serve(secret: &str) -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "mkdir -p /tmp/w && echo {secret} > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w"
        ),
    ]
}

fn spec(account: &AccountId, command: Vec<String>, network_access: bool) -> ContainerSpec {
    let spec = shell_spec(&image(), "");
    ContainerSpec {
        hostname: spec.sandbox_id.to_string(),
        account_id: account.clone(),
        command,
        cpu_cores: 0.5,
        memory_bytes: 128 * 1024 * 1024,
        network_access,
        ..spec
    }
}

/// Everything one test made, removed when dropped (also on panic): the
/// sandboxes, extra containers, the chain, its jumps and the networks.
struct Cleanup {
    iso: IsolationConfig,
    sandboxes: Vec<SandboxId>,
    containers: Vec<String>,
}

impl Cleanup {
    fn new(iso: &IsolationConfig) -> Self {
        Self {
            iso: iso.clone(),
            sandboxes: Vec::new(),
            containers: Vec::new(),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let docker = |args: &[&str]| {
            let _ = Command::new("docker").args(args).output();
        };
        for id in &self.sandboxes {
            docker(&["rm", "-f", "-v", &container_name(id)]);
            docker(&["volume", "rm", "-f", VolumeName::for_sandbox(id).as_str()]);
        }
        for c in &self.containers {
            docker(&["rm", "-f", c]);
        }
        remove_isolation_chain(&self.iso);
        docker(&[
            "network",
            "rm",
            &self.iso.network,
            &self.iso.internal_network,
        ]);
    }
}

/// Names of this test's own, what it makes removed on drop, and a runtime
/// on the local engine using them.
fn isolated() -> (IsolationConfig, Cleanup, DockerRuntime) {
    let iso = test_isolation();
    (iso.clone(), Cleanup::new(&iso), runtime_for(&iso))
}

/// A runtime on the local engine with isolation `iso`.
fn runtime_for(iso: &IsolationConfig) -> DockerRuntime {
    DockerRuntime::new(DockerConfig {
        isolation: iso.clone(),
        ..DockerConfig::default()
    })
    .unwrap()
}

/// `docker inspect -f format name`, trimmed.
fn docker_inspect(format: &str, name: &str) -> String {
    let out = docker_cli(&["inspect", "-f", format, name]);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The names of the networks sandbox `id`'s container is on.
fn networks_of(id: &SandboxId) -> String {
    docker_inspect(
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}",
        &container_name(id),
    )
}

/// A configuration with names no other test or deployment uses.
fn test_isolation() -> IsolationConfig {
    let suffix: String = SandboxId::generate().as_str().chars().take(6).collect();
    IsolationConfig::with_prefix(&format!("stkt{suffix}"))
}

async fn sh(rt: &DockerRuntime, id: &SandboxId, script: &str) -> String {
    let out = sh_exec(rt, id, script, Some(Duration::from_secs(30))).await;
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// From inside sandbox `id`, an HTTP GET to each target at once, each
/// bounded by 2 s; the first 1000 bytes of each answer (empty when the
/// connection was refused or timed out).
async fn probe_from(
    rt: &DockerRuntime,
    id: &SandboxId,
    targets: &[SocketAddr],
) -> HashMap<SocketAddr, String> {
    let mut script = String::new();
    for (i, t) in targets.iter().enumerate() {
        script.push_str(&format!(
            "(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 4 nc -w 2 {} {} 2>/dev/null | head -c 1000 | tr '\\n' ' ' > /tmp/probe{i}) &\n",
            t.ip(),
            t.port()
        ));
    }
    script.push_str("wait\n");
    for i in 0..targets.len() {
        script.push_str(&format!("echo \"$(cat /tmp/probe{i})\"\n"));
    }
    let started = std::time::Instant::now();
    let out = sh(rt, id, &script).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "probes were not bounded"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), targets.len(), "probe output: {out:?}");
    targets
        .iter()
        .zip(lines)
        .map(|(t, l)| (*t, l.to_owned()))
        .collect()
}

/// An HTTP GET from the host (the reverse proxy's path), retried while the
/// server starts.
async fn get_from_host(addr: SocketAddr) -> String {
    let mut last = String::new();
    for _ in 0..50 {
        let attempt = async {
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").await?;
            let mut out = Vec::new();
            s.read_to_end(&mut out).await?;
            Ok::<_, std::io::Error>(String::from_utf8_lossy(&out).into_owned())
        };
        match tokio::time::timeout(Duration::from_secs(2), attempt).await {
            Ok(Ok(body)) => return body,
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "timed out".into(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{addr} not reachable from the host: {last}");
}

/// A listener of the host on 0.0.0.0 (like Stockade's own API) that
/// answers every connection with `host-secret`.
fn host_listener() -> u16 {
    let listener = TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\n\r\nhost-secret\n");
        }
    });
    port
}

/// The host's IPv4 addresses but loopback (its main address, Docker's
/// bridges' gateways, …).
fn host_addresses() -> Vec<IpAddr> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let cidr = l.split_whitespace().skip_while(|w| *w != "inet").nth(1)?;
            cidr.split('/').next()?.parse().ok()
        })
        .collect()
}

/// The default gateway inside the sandbox: its bridge's address on the host.
async fn gateway(rt: &DockerRuntime, id: &SandboxId) -> IpAddr {
    let out = sh(rt, id, "ip route | awk '/^default/ {print $3}'").await;
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("no gateway in {out:?}"))
}

async fn address(rt: &DockerRuntime, id: &SandboxId) -> IpAddr {
    rt.container_address(id)
        .await
        .unwrap()
        .expect("a running sandbox has an address")
}

/// A container on Docker's default bridge (another Docker network)
/// serving `secret` on 8080; its address.
fn other_network_container(name: &str) -> IpAddr {
    let run = Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            name,
            "--label",
            &format!("{TEST_LABEL}=isolation"),
            &image(),
            "/bin/sh",
            "-c",
            "mkdir -p /tmp/w && echo other-network-secret > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w",
        ])
        .output()
        .expect("docker run");
    assert!(run.status.success(), "{run:?}");
    docker_inspect(
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        name,
    )
    .parse()
    .expect("an address")
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_reach_neither_each_other_nor_the_host() {
    let (iso, mut cleanup, rt) = isolated();
    let report = rt.ensure_isolation().await;
    assert_eq!(report.status(), IsolationStatus::Repaired, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");
    let again = rt.ensure_isolation().await;
    assert_eq!(again.status(), IsolationStatus::Ok, "{again:?}");

    let alice = AccountId::generate();
    let bob = AccountId::generate();
    let keep_alive = stockade_core::StartCommand::keep_alive_argv();
    // Alice serves on 8080; Bob, and another sandbox of Alice, attack it.
    let a = spec(&alice, serve("alice-secret"), true);
    let b = spec(&bob, keep_alive.clone(), true);
    let c = spec(&alice, keep_alive.clone(), true);
    // A sandbox without network access, serving too.
    let d = spec(&alice, serve("offline-secret"), false);
    for s in [&a, &b, &c, &d] {
        cleanup.sandboxes.push(s.sandbox_id.clone());
        rt.create(s).await.expect("create");
    }
    let other_name = format!("{}-other", iso.network);
    cleanup.containers.push(other_name.clone());
    let other_ip = other_network_container(&other_name);
    let listener = host_listener();

    let (a_ip, b_ip, d_ip) = (
        address(&rt, &a.sandbox_id).await,
        address(&rt, &b.sandbox_id).await,
        address(&rt, &d.sandbox_id).await,
    );
    assert_ne!(a_ip, b_ip);

    // The proxy's path: the host reaches the services of both, also the
    // one without network access.
    assert!(get_from_host((a_ip, 8080).into())
        .await
        .contains("alice-secret"));
    assert!(get_from_host((d_ip, 8080).into())
        .await
        .contains("offline-secret"));
    assert!(get_from_host((other_ip, 8080).into())
        .await
        .contains("other-network-secret"));
    assert!(
        get_from_host(([127, 0, 0, 1], listener).into())
            .await
            .contains("host-secret"),
        "the host listener answers locally"
    );

    let gw = gateway(&rt, &b.sandbox_id).await;
    let mut host_targets: Vec<SocketAddr> = host_addresses()
        .into_iter()
        .map(|ip| (ip, listener).into())
        .collect();
    assert!(
        host_targets.len() >= 2,
        "the host's main address and Docker's bridge gateways: {host_targets:?}"
    );
    for port in [22, 80, 2375, 7433, 8080, listener] {
        host_targets.push((gw, port).into());
    }

    // Another account's sandbox, the same account's, another Docker
    // network, the host by every address and the gateway on several ports:
    // refused or timed out, from a sandbox with network access…
    for attacker in [&b, &c] {
        let mut targets = vec![
            SocketAddr::from((a_ip, 8080)),
            SocketAddr::from((d_ip, 8080)),
            SocketAddr::from((other_ip, 8080)),
        ];
        targets.extend(&host_targets);
        let answers = probe_from(&rt, &attacker.sandbox_id, &targets).await;
        for (target, answer) in &answers {
            assert!(
                answer.is_empty(),
                "{} reached {target}: {answer}",
                attacker.sandbox_id
            );
        }
    }
    // Control: the probe does reach a server when nothing is in the way.
    let own = probe_from(
        &rt,
        &a.sandbox_id,
        &[SocketAddr::from(([127, 0, 0, 1], 8080))],
    )
    .await;
    assert!(
        own.values().all(|a| a.contains("alice-secret")),
        "the probe itself works: {own:?}"
    );

    // …and from the sandbox without network access, which reaches nothing.
    let d_gw = gateway(&rt, &d.sandbox_id).await;
    let mut targets = vec![
        SocketAddr::from((a_ip, 8080)),
        SocketAddr::from((b_ip, 8080)),
        SocketAddr::from((other_ip, 8080)),
        SocketAddr::from((d_gw, listener)),
        SocketAddr::from((d_gw, 8080)),
    ];
    targets.extend(
        host_addresses()
            .into_iter()
            .map(|ip| SocketAddr::from((ip, listener))),
    );
    let answers = probe_from(&rt, &d.sandbox_id, &targets).await;
    for (target, answer) in &answers {
        assert!(
            answer.is_empty(),
            "the offline sandbox reached {target}: {answer}"
        );
    }

    for s in [&a, &b, &c, &d] {
        rt.remove(&s.sandbox_id, false).await.expect("remove");
    }
    rt.remove_isolation().await.expect("remove isolation");
    drop(cleanup);
}

#[tokio::test(flavor = "multi_thread")]
async fn ensure_isolation_repairs_what_was_removed_by_hand() {
    let (iso, cleanup, rt) = isolated();
    let first = rt.ensure_isolation().await;
    assert!(first.problems.is_empty(), "{first:?}");
    assert_eq!(rt.ensure_isolation().await.status(), IsolationStatus::Ok);

    // A jump from INPUT deleted by hand.
    let jump = ["-i", iso.bridge.as_str(), "-j", iso.chain.as_str()];
    assert!(iptables(&[&["-D", "INPUT"][..], &jump].concat()));
    let report = rt.ensure_isolation().await;
    assert_eq!(report.status(), IsolationStatus::Repaired, "{report:?}");
    assert!(
        report.repaired.iter().any(|r| r.contains(&iso.bridge)),
        "{report:?}"
    );
    assert!(iptables(&[&["-C", "INPUT"][..], &jump].concat()));

    // The chain's drop replaced by an accept.
    assert!(iptables(&["-F", &iso.chain]));
    assert!(iptables(&["-A", &iso.chain, "-j", "ACCEPT"]));
    let report = rt.ensure_isolation().await;
    assert_eq!(report.status(), IsolationStatus::Repaired, "{report:?}");
    assert!(iptables(&["-C", &iso.chain, "-j", "DROP"]));
    assert!(!iptables(&["-C", &iso.chain, "-j", "ACCEPT"]));

    // A network removed, and one recreated with inter-container traffic on.
    let rm = Command::new("docker")
        .args(["network", "rm", &iso.internal_network])
        .output()
        .unwrap();
    assert!(rm.status.success(), "{rm:?}");
    let recreated = Command::new("docker")
        .args([
            "network",
            "create",
            "--label",
            "io.stockade.managed=true",
            "-o",
            &format!("com.docker.network.bridge.name={}", iso.internal_bridge),
            &iso.internal_network,
        ])
        .output()
        .unwrap();
    assert!(recreated.status.success(), "{recreated:?}");
    let rm = Command::new("docker")
        .args(["network", "rm", &iso.network])
        .output()
        .unwrap();
    assert!(rm.status.success(), "{rm:?}");
    let report = rt.ensure_isolation().await;
    assert_eq!(report.status(), IsolationStatus::Repaired, "{report:?}");
    let summary = report.summary();
    assert!(
        summary.contains(&format!("created network {}", iso.network)),
        "{summary}"
    );
    assert!(summary.contains("enable_icc"), "{summary}");
    assert!(summary.contains("is not internal"), "{summary}");
    assert_eq!(rt.ensure_isolation().await.status(), IsolationStatus::Ok);

    // A sandbox created now joins the repaired networks.
    let s = spec(
        &AccountId::generate(),
        stockade_core::StartCommand::keep_alive_argv(),
        false,
    );
    let mut cleanup = cleanup;
    cleanup.sandboxes.push(s.sandbox_id.clone());
    rt.create(&s).await.expect("create");
    assert_eq!(networks_of(&s.sandbox_id), iso.internal_network);
    rt.remove(&s.sandbox_id, false).await.unwrap();
    rt.remove_isolation().await.expect("remove isolation");
    assert!(!iptables(&["-S", &iso.chain]), "the chain is gone");
    drop(cleanup);
}

/// The Docker engine's major version (20 for 20.10.24).
fn engine_major() -> u32 {
    let out = Command::new("docker")
        .args(["version", "-f", "{{.Server.Version}}"])
        .output()
        .expect("docker version");
    String::from_utf8_lossy(&out.stdout)
        .split('.')
        .next()
        .and_then(|m| m.trim().parse().ok())
        .expect("a Docker version")
}

/// Warm-pool members join the same networks as sandboxes and get
/// the same seccomp profile.
#[tokio::test(flavor = "multi_thread")]
async fn pool_members_join_the_same_networks() {
    let (iso, mut cleanup, rt) = isolated();
    let report = rt.ensure_isolation().await;
    assert!(report.problems.is_empty(), "{report:?}");
    for (network_access, network) in [(true, &iso.network), (false, &iso.internal_network)] {
        let member = stockade_runtime::PoolMemberSpec {
            sandbox_id: SandboxId::generate(),
            instance_id: InstanceId::generate(),
            class: "test".into(),
            image: image(),
            cpu_cores: 0.5,
            memory_bytes: 128 * 1024 * 1024,
            network_access,
            agent_token: None,
            disk_bytes: None,
        };
        cleanup.sandboxes.push(member.sandbox_id.clone());
        rt.create_pool_member(&member).await.expect("create member");
        let text = docker_inspect(
            "{{.HostConfig.NetworkMode}} {{range .HostConfig.SecurityOpt}}{{.}} {{end}}",
            &container_name(&member.sandbox_id),
        );
        assert!(text.starts_with(&format!("{network} ")), "{text}");
        assert!(text.contains("no-new-privileges:true"), "{text}");
        if engine_major() < 25 {
            // Stockade's profile (Docker 25+ keeps the engine's default).
            assert!(text.contains("seccomp={"), "{text}");
            assert!(!text.contains("io_uring"), "{text}");
        }
        // The host reaches it (the proxy's path to a claimed member).
        assert!(rt
            .container_address(&member.sandbox_id)
            .await
            .unwrap()
            .is_some());
        rt.remove(&member.sandbox_id, false).await.unwrap();
    }
    rt.remove_isolation().await.expect("remove isolation");
    drop(cleanup);
}

/// When Stockade's network cannot be made (here: another network already
/// has its name), a create is refused before anything exists rather than
/// put on Docker's default bridge, where sandboxes reach each other — until
/// the administrator opts in.
#[tokio::test(flavor = "multi_thread")]
async fn no_network_no_sandbox_unless_the_administrator_allows_it() {
    let iso = test_isolation();
    let mut cleanup = Cleanup::new(&iso);
    let squat = Command::new("docker")
        .args(["network", "create", &iso.network])
        .output()
        .expect("docker network create");
    assert!(squat.status.success(), "{squat:?}");
    let rt = runtime_for(&iso);
    let account = AccountId::generate();
    let keep_alive = stockade_core::StartCommand::keep_alive_argv();
    let online = spec(&account, keep_alive.clone(), true);
    cleanup.sandboxes.push(online.sandbox_id.clone());
    let err = rt.create(&online).await.unwrap_err();
    assert!(
        err.to_string().contains("--allow-unisolated-sandboxes"),
        "{err}"
    );
    assert!(rt.inspect(&online.sandbox_id).await.unwrap().is_none());
    let volume = VolumeName::for_sandbox(&online.sandbox_id);
    let volumes = Command::new("docker")
        .args([
            "volume",
            "ls",
            "-q",
            "-f",
            &format!("name={}", volume.as_str()),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&volumes.stdout).trim().is_empty(),
        "a volume was left behind"
    );
    // The offline network is Stockade's: those sandboxes still start.
    let offline = spec(&account, keep_alive.clone(), false);
    cleanup.sandboxes.push(offline.sandbox_id.clone());
    rt.create(&offline).await.expect("an offline sandbox");

    // Opted in: the sandbox joins Docker's default bridge.
    let lax = DockerRuntime::new(DockerConfig {
        isolation: IsolationConfig {
            allow_unisolated: true,
            ..iso.clone()
        },
        ..DockerConfig::default()
    })
    .unwrap();
    let opted = spec(&account, keep_alive, true);
    cleanup.sandboxes.push(opted.sandbox_id.clone());
    lax.create(&opted)
        .await
        .expect("created on the default bridge");
    assert_eq!(networks_of(&opted.sandbox_id), "bridge");
}

/// While the egress entry of a stopped sandbox is still being removed (a
/// removal queued and not done), no container on the host starts: neither
/// a start nor a create gets an address the old entry may still govern.
/// Once the removal is done, both go on.
#[tokio::test(flavor = "multi_thread")]
async fn starts_wait_for_the_egress_removals_queued_before_them() {
    let (_iso, mut cleanup, rt) = isolated();
    let report = rt.ensure_isolation().await;
    assert!(report.problems.is_empty(), "{report:?}");
    let rt = std::sync::Arc::new(rt);
    let account = AccountId::generate();
    let keep_alive = stockade_core::StartCommand::keep_alive_argv();
    let (a, b) = (
        spec(&account, keep_alive.clone(), true),
        spec(&account, keep_alive, true),
    );
    cleanup.sandboxes.push(a.sandbox_id.clone());
    cleanup.sandboxes.push(b.sandbox_id.clone());
    rt.create(&a).await.expect("create");
    rt.stop(&a.sandbox_id, Duration::from_secs(1))
        .await
        .expect("stop");

    let pending = rt
        .pending_removals()
        .expect("the engine's runtime keeps removals");
    let ticket = pending.queue();
    let start = tokio::spawn({
        let (rt, id) = (rt.clone(), a.sandbox_id.clone());
        async move { rt.start(&id).await }
    });
    let create = tokio::spawn({
        let rt = rt.clone();
        async move { rt.create(&b).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!start.is_finished() && !create.is_finished());
    let running = |id: &SandboxId| docker_inspect("{{.State.Running}}", &container_name(id));
    assert_eq!(running(&a.sandbox_id), "false");

    pending.finish(ticket);
    tokio::time::timeout(Duration::from_secs(60), start)
        .await
        .expect("the start went on")
        .unwrap()
        .expect("start");
    tokio::time::timeout(Duration::from_secs(60), create)
        .await
        .expect("the create went on")
        .unwrap()
        .expect("create");
    assert_eq!(running(&a.sandbox_id), "true");
    assert!(pending.settled());
    let ids: Vec<SandboxId> = cleanup.sandboxes.clone();
    for id in &ids {
        rt.remove(id, false).await.expect("remove");
    }
    rt.remove_isolation().await.expect("remove isolation");
}
