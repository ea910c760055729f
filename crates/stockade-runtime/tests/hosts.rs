//! Docker hosts beyond the local socket, against real engines:
//! engine h3 on `tcp://127.0.0.1:PORT` with TLS client certificates and the
//! main engine over ssh (through the tests' own sshd), both started by
//! `scripts/test` (`STOCKADE_TEST_HOST3`, `STOCKADE_TEST_HOST3_TLS`,
//! `STOCKADE_TEST_SSH_HOST`, `STOCKADE_SSH_OPTS`). On each: the engine's
//! info, Stockade's networks under the host's own names (none of them on
//! another engine), a sandbox with an agent token created, started, its
//! agent answering, an exec, stop and remove. A wrong client certificate, a
//! missing file and a refused ssh come back as errors that say so, within
//! seconds.
//!
//! Every test uses isolation names of its own (`IsolationConfig::for_host`
//! of a name with a random part) and removes what it made, also on panic.
//! Without the variables the tests are skipped, unless
//! `STOCKADE_TEST_HOSTS_REQUIRED` is set (as `scripts/test` does): then
//! they fail with the reason the engine or sshd did not start.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use stockade_core::{SandboxId, VolumeName};
use stockade_runtime::prelude::*;
use stockade_runtime::{
    container_name, ContainerSpec, DockerConfig, DockerRuntime, ExecSpec, IsolationConfig, TlsFiles,
};

mod support;
use support::{agent, image, iptables, remove_isolation_chain, shell_spec};

const KEEP_ALIVE: &str = "trap 'exit 0' TERM; while true; do sleep 86400 & wait $!; done";
/// How long a failure may take to be reported.
const ERROR_WITHIN: Duration = Duration::from_secs(20);

/// The variable's value; `None` (skip) when it is unset and the hosts are
/// not required, a failure with the reason when they are.
fn setting(var: &str, error_var: &str) -> Option<String> {
    if let Ok(v) = std::env::var(var) {
        if !v.trim().is_empty() {
            return Some(v);
        }
    }
    let why = std::env::var(error_var)
        .unwrap_or_else(|_| format!("{var} is not set (scripts/test sets it)"));
    if std::env::var_os("STOCKADE_TEST_HOSTS_REQUIRED").is_some() {
        panic!("{why}");
    }
    eprintln!("skipped: {why}");
    None
}

/// The `docker` CLI's arguments that reach an engine.
#[derive(Clone)]
struct Cli {
    args: Vec<String>,
}

impl Cli {
    fn main() -> Self {
        Self { args: vec![] }
    }

    fn tls(host: &str, dir: &Path) -> Self {
        let file = |f: &str| dir.join(f).to_string_lossy().into_owned();
        Self {
            args: vec![
                "-H".into(),
                host.into(),
                "--tlsverify".into(),
                "--tlscacert".into(),
                file("ca.pem"),
                "--tlscert".into(),
                file("cert.pem"),
                "--tlskey".into(),
                file("key.pem"),
            ],
        }
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .args(&self.args)
            .args(args)
            .output()
            .expect("docker CLI")
    }

    fn network_exists(&self, name: &str) -> bool {
        self.run(&["network", "inspect", name]).status.success()
    }
}

/// What a test made on one engine, removed on drop (also on panic): its
/// sandboxes, then its networks and packet filter chain.
struct Cleanup {
    cli: Cli,
    iso: IsolationConfig,
    sandboxes: Vec<SandboxId>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for id in &self.sandboxes {
            self.cli.run(&["rm", "-f", "-v", &container_name(id)]);
            self.cli
                .run(&["volume", "rm", "-f", VolumeName::for_sandbox(id).as_str()]);
        }
        remove_isolation_chain(&self.iso);
        // The egress chain ensure_isolation made in both tables, and the
        // rules jumping to it.
        let egress = stockade_runtime::EgressChains::for_isolation_chain(&self.iso.chain).main();
        for (table, chain) in [("filter", "DOCKER-USER"), ("nat", "PREROUTING")] {
            let listed = Command::new("iptables")
                .args(["-w", "10", "-t", table, "-S", chain])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            for rule in listed.lines() {
                if rule.ends_with(&format!("-j {egress}")) {
                    if let Some(spec) = rule.strip_prefix("-A ") {
                        let args: Vec<&str> = spec.split_whitespace().collect();
                        iptables(&[&["-t", table, "-D"][..], &args].concat());
                    }
                }
            }
            iptables(&["-t", table, "-F", &egress]);
            iptables(&["-t", table, "-X", &egress]);
        }
        self.cli.run(&[
            "network",
            "rm",
            &self.iso.network,
            &self.iso.internal_network,
        ]);
    }
}

/// Host names of this run: isolation names no other run uses.
fn host_name(kind: &str) -> String {
    let suffix: String = SandboxId::generate().as_str().chars().take(8).collect();
    format!("test-{kind}-{}", suffix.to_ascii_lowercase())
}

fn spec(token: &str) -> ContainerSpec {
    let spec = shell_spec(&image(), KEEP_ALIVE);
    ContainerSpec {
        hostname: spec.sandbox_id.to_string(),
        cpu_cores: 0.5,
        memory_bytes: 128 << 20,
        network_access: true,
        agent_token: Some(token.to_owned()),
        ..spec
    }
}

/// Everything the runtime does with one sandbox on `rt`'s engine, checked
/// against the engine with `cli` (and that `other` never sees it).
async fn a_sandbox_lives_and_dies(
    rt: &DockerRuntime,
    cli: &Cli,
    other: &Cli,
    cleanup: &mut Cleanup,
) {
    let started = Instant::now();
    let info = rt.info().await.expect("info");
    assert!(!info.version.is_empty(), "{info:?}");
    assert!(info.cpus > 0 && info.memory_bytes > 0, "{info:?}");
    eprintln!("info in {:?}: Docker {}", started.elapsed(), info.version);

    let report = rt.ensure_isolation().await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let iso = &cleanup.iso;
    for net in [&iso.network, &iso.internal_network] {
        assert!(
            cli.network_exists(net),
            "network {net} on the host's engine"
        );
        assert!(
            !other.network_exists(net),
            "network {net} only on its own engine"
        );
    }
    let defaults = IsolationConfig::default();
    assert_ne!(iso.bridge, defaults.bridge);
    assert_ne!(iso.network, defaults.network);

    let token = format!("tok-{}", SandboxId::generate());
    let s = spec(&token);
    cleanup.sandboxes.push(s.sandbox_id.clone());
    let t = Instant::now();
    rt.create(&s).await.expect("create");
    rt.start(&s.sandbox_id).await.expect("start");
    eprintln!("create + start in {:?}", t.elapsed());
    let name = container_name(&s.sandbox_id);
    let out = cli.run(&[
        "inspect",
        "-f",
        "{{.State.Running}} {{json .NetworkSettings.Networks}}",
        &name,
    ]);
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(
        seen.starts_with("true "),
        "{seen} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        seen.contains(&iso.network),
        "joined the host's own network: {seen}"
    );
    assert!(
        !other.run(&["inspect", &name]).status.success(),
        "not on the other engine"
    );

    // Its agent answers with the token (the agent volume was made there).
    agent(rt, &s.sandbox_id, Some(token.as_str())).await;

    let t = Instant::now();
    let out = rt
        .exec(
            &s.sandbox_id,
            ExecSpec {
                argv: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "echo hello from $(hostname)".into(),
                ],
                timeout: Some(Duration::from_secs(30)),
                ..Default::default()
            },
        )
        .await
        .expect("exec");
    eprintln!("exec in {:?}", t.elapsed());
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("hello from {}", s.sandbox_id)
    );

    rt.stop(&s.sandbox_id, Duration::from_secs(10))
        .await
        .expect("stop");
    let state = rt
        .inspect(&s.sandbox_id)
        .await
        .expect("inspect")
        .expect("exists");
    assert!(!state.running, "{state:?}");
    rt.remove(&s.sandbox_id, false).await.expect("remove");
    assert!(rt.inspect(&s.sandbox_id).await.expect("inspect").is_none());
    assert!(!cli.run(&["inspect", &name]).status.success(), "removed");
    rt.remove_isolation()
        .await
        .expect("remove the host's networks");
    assert!(!cli.network_exists(&iso.network));
}

/// The engine that takes TLS clients and the directory of its client
/// files, when the run has one.
fn tls_host() -> Option<(String, PathBuf)> {
    let host = setting("STOCKADE_TEST_HOST3", "STOCKADE_TEST_HOST3_ERROR")?;
    let dir = setting("STOCKADE_TEST_HOST3_TLS", "STOCKADE_TEST_HOST3_ERROR")?;
    Some((host, PathBuf::from(dir)))
}

fn tls_files(dir: &Path) -> TlsFiles {
    TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    }
}

#[tokio::test]
async fn a_tls_host_runs_sandboxes() {
    let Some((host, dir)) = tls_host() else {
        return;
    };
    let name = host_name("tls");
    let iso = IsolationConfig::for_host(&name);
    let rt = DockerRuntime::new(DockerConfig {
        host: Some(host.clone()),
        tls: Some(tls_files(&dir)),
        server_name: name,
        isolation: iso.clone(),
        ..Default::default()
    })
    .expect("runtime");
    let cli = Cli::tls(&host, &dir);
    let mut cleanup = Cleanup {
        cli: cli.clone(),
        iso,
        sandboxes: vec![],
    };
    a_sandbox_lives_and_dies(&rt, &cli, &Cli::main(), &mut cleanup).await;
}

/// Runs openssl; panics with what it said.
fn openssl(dir: &Path, args: &[&str]) {
    run_ok(Command::new("openssl").current_dir(dir).args(args));
}

/// Runs `cmd`; panics with what it said when it fails.
fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(kind: &str) -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("hosts-{kind}-{}", SandboxId::generate().as_str()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn tls_errors_name_the_file_and_the_refusal() {
    let Some((host, dir)) = tls_host() else {
        return;
    };
    let runtime = |tls: TlsFiles| {
        DockerRuntime::new(DockerConfig {
            host: Some(host.clone()),
            tls: Some(tls),
            server_name: "h3".into(),
            isolation: IsolationConfig::for_host(&host_name("tls")),
            ..Default::default()
        })
    };

    // A missing file: named when the runtime is made.
    let missing = dir.join("nonexistent-key.pem");
    let err = runtime(TlsFiles {
        key: missing.clone(),
        ..tls_files(&dir)
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains(&*missing.to_string_lossy()), "{err}");

    // A client certificate of another CA: refused by the engine.
    let other = TempDir::new("wrong-ca");
    let key = [
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
    ];
    openssl(&other.0, &[&key[..], &["ca-key.pem"]].concat());
    openssl(
        &other.0,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca-key.pem",
            "-days",
            "2",
            "-subj",
            "/CN=not-the-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-out",
            "ca.pem",
        ],
    );
    openssl(&other.0, &[&key[..], &["key.pem"]].concat());
    openssl(
        &other.0,
        &[
            "req",
            "-new",
            "-key",
            "key.pem",
            "-subj",
            "/CN=intruder",
            "-out",
            "c.csr",
        ],
    );
    std::fs::write(other.0.join("c.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
    openssl(
        &other.0,
        &[
            "x509",
            "-req",
            "-in",
            "c.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "c.ext",
            "-out",
            "cert.pem",
        ],
    );
    let rt = runtime(TlsFiles {
        ca: dir.join("ca.pem"),
        cert: other.0.join("cert.pem"),
        key: other.0.join("key.pem"),
    })
    .expect("the files are valid PEM");
    let t = Instant::now();
    let err = rt.info().await.unwrap_err().to_string();
    assert!(t.elapsed() < ERROR_WITHIN, "took {:?}", t.elapsed());
    assert!(err.contains(&host), "names the host: {err}");
    assert!(
        err.contains("refused the TLS connection") || err.contains("closed the TLS connection"),
        "{err}"
    );
    eprintln!("wrong client certificate: {err}");

    // The engine's certificate from another CA: this client refuses it.
    let rt = runtime(TlsFiles {
        ca: other.0.join("ca.pem"),
        ..tls_files(&dir)
    })
    .expect("the files are valid PEM");
    let err = rt.info().await.unwrap_err().to_string();
    assert!(err.contains("TLS handshake"), "{err}");
    assert!(err.to_ascii_lowercase().contains("certificate"), "{err}");
    eprintln!("unknown engine CA: {err}");
}

#[tokio::test]
async fn an_ssh_host_runs_sandboxes() {
    let Some(host) = setting("STOCKADE_TEST_SSH_HOST", "STOCKADE_TEST_SSH_HOST_ERROR") else {
        return;
    };
    let name = host_name("ssh");
    let iso = IsolationConfig::for_host(&name);
    // The options come from STOCKADE_SSH_OPTS (ssh_options: None).
    let rt = DockerRuntime::new(DockerConfig {
        host: Some(host),
        server_name: name,
        isolation: iso.clone(),
        ..Default::default()
    })
    .expect("runtime");
    // ssh to this machine reaches the main engine; h2 never sees it.
    let other = match std::env::var("STOCKADE_TEST_HOST2") {
        Ok(h2) => Cli {
            args: vec!["-H".into(), h2],
        },
        Err(_) => Cli {
            args: vec!["-H".into(), "unix:///nonexistent/docker.sock".into()],
        },
    };
    let mut cleanup = Cleanup {
        cli: Cli::main(),
        iso,
        sandboxes: vec![],
    };
    a_sandbox_lives_and_dies(&rt, &Cli::main(), &other, &mut cleanup).await;
}

/// A TCP port of this machine where nothing listens.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

#[tokio::test]
async fn a_refused_ssh_says_why_within_seconds() {
    let Some(host) = setting("STOCKADE_TEST_SSH_HOST", "STOCKADE_TEST_SSH_HOST_ERROR") else {
        return;
    };
    let opts: Vec<String> = std::env::var(stockade_runtime::SSH_OPTS_ENV)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let runtime = |host: String, options: Vec<String>| {
        DockerRuntime::new(DockerConfig {
            host: Some(host),
            ssh_options: Some(options),
            server_name: "refused".into(),
            isolation: IsolationConfig::for_host(&host_name("ssh")),
            ..Default::default()
        })
        .expect("runtime")
    };

    // Nothing listens there.
    let rt = runtime(
        format!("ssh://root@127.0.0.1:{}", closed_port()),
        opts.clone(),
    );
    let t = Instant::now();
    let err = rt.info().await.unwrap_err().to_string();
    assert!(t.elapsed() < ERROR_WITHIN, "took {:?}", t.elapsed());
    assert!(err.contains("Connection refused"), "{err}");
    eprintln!("nothing listening: {err}");

    // A key the sshd does not know.
    let keys = TempDir::new("ssh-key");
    let key = keys.0.join("id");
    run_ok(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key),
    );
    let mut wrong = opts.clone();
    match wrong.iter().position(|o| o == "-i") {
        Some(i) => wrong[i + 1] = key.to_string_lossy().into_owned(),
        None => wrong.extend(["-i".into(), key.to_string_lossy().into_owned()]),
    }
    wrong.extend(["-o".into(), "IdentitiesOnly=yes".into()]);
    let rt = runtime(host.clone(), wrong);
    let t = Instant::now();
    let err = rt.info().await.unwrap_err().to_string();
    assert!(t.elapsed() < ERROR_WITHIN, "took {:?}", t.elapsed());
    assert!(err.contains("Permission denied"), "{err}");
    assert!(err.contains(&host), "names the host: {err}");
    eprintln!("unknown key: {err}");

    // The engine's host key unknown (ssh takes the first value of an
    // option: the known hosts file is replaced, not added).
    let mut strict: Vec<String> = opts
        .into_iter()
        .map(|o| {
            if o.starts_with("UserKnownHostsFile=") {
                "UserKnownHostsFile=/dev/null".into()
            } else if o.starts_with("StrictHostKeyChecking=") {
                "StrictHostKeyChecking=yes".into()
            } else {
                o
            }
        })
        .collect();
    strict.extend(["-o".into(), "StrictHostKeyChecking=yes".into()]);
    let rt = runtime(host, strict);
    let err = rt.info().await.unwrap_err().to_string();
    assert!(err.contains("Host key verification failed"), "{err}");
}
