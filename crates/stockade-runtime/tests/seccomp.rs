//! The seccomp profile of sandboxes: the embedded profile is
//! Docker's default (of the packaged Docker version) minus io_uring, and
//! in a sandbox `io_uring_setup` fails while ordinary system calls work —
//! where a container with Docker's own default profile may use it.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use stockade_core::{SandboxId, SandboxPath};
use stockade_runtime::prelude::*;
use stockade_runtime::{ContainerSpec, DockerConfig, DockerRuntime, ExecSpec, SECCOMP_PROFILE};

const IO_URING: [&str; 3] = ["io_uring_setup", "io_uring_enter", "io_uring_register"];

/// Where Debian's golang-github-docker-docker-dev puts Docker's default
/// profile (scripts/lib/seccomp.sh installs it and exports the variable).
fn packaged_default() -> String {
    std::env::var("STOCKADE_DOCKER_SECCOMP_DEFAULT").unwrap_or_else(|_| {
        "/usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json".into()
    })
}

/// Docker's default minus io_uring, the way scripts/gen-seccomp-profile
/// makes it: the three names out of every rule, rules left empty dropped.
fn without_io_uring(mut profile: Value) -> Value {
    let rules = profile["syscalls"].as_array_mut().expect("syscalls");
    for rule in rules.iter_mut() {
        let names = rule["names"].as_array_mut().expect("names");
        names.retain(|n| !IO_URING.contains(&n.as_str().unwrap_or_default()));
    }
    rules.retain(|r| !r["names"].as_array().is_some_and(Vec::is_empty));
    profile
}

#[test]
fn the_embedded_profile_is_dockers_default_minus_io_uring() {
    let path = packaged_default();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "Docker's default seccomp profile is not at {path} ({e}): install \
             golang-github-docker-docker-dev (scripts/test does) or set \
             STOCKADE_DOCKER_SECCOMP_DEFAULT"
        )
    });
    let default: Value = serde_json::from_str(&text).expect("the packaged profile is JSON");
    assert!(
        IO_URING.iter().all(|n| text.contains(n)),
        "this Docker default already leaves io_uring out: regenerate with scripts/gen-seccomp-profile"
    );
    let embedded: Value = serde_json::from_str(SECCOMP_PROFILE).expect("embedded JSON");
    assert!(
        embedded == without_io_uring(default),
        "the embedded profile is not {path} minus io_uring: run scripts/gen-seccomp-profile"
    );
}

/// The packaged profile belongs to the Docker version the tests run on, so
/// that the embedded one follows the engine in use.
#[test]
fn the_packaged_profile_is_the_engines_version() {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "golang-github-docker-docker-dev"])
        .output()
        .expect("dpkg-query");
    let package = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        !package.is_empty(),
        "golang-github-docker-docker-dev is not installed"
    );
    let engine = support::engine_version();
    let upstream = |v: &str| {
        v.split(['+', '-', '~'])
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let major: u32 = engine
        .split('.')
        .next()
        .unwrap_or_default()
        .parse()
        .unwrap_or(0);
    if major >= 25 {
        // Stockade keeps the engine's own default there (it blocks io_uring).
        return;
    }
    assert_eq!(
        upstream(&package),
        upstream(&engine),
        "Docker {engine} runs, the profile comes from Docker {package}: install the matching \
         package and run scripts/gen-seccomp-profile"
    );
}

fn spec() -> ContainerSpec {
    let spec = support::shell_spec(&support::image(), "");
    ContainerSpec {
        hostname: spec.sandbox_id.to_string(),
        command: stockade_core::StartCommand::keep_alive_argv(),
        cpu_cores: 0.5,
        memory_bytes: 128 * 1024 * 1024,
        ..spec
    }
}

struct Cleanup(SandboxId, Option<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        support::remove_sandbox(&self.0);
        if let Some(c) = &self.1 {
            let _ = Command::new("docker").args(["rm", "-f", c]).output();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn io_uring_setup_fails_in_a_sandbox_and_other_calls_work() {
    let probe = support::io_uring_probe();
    let rt = DockerRuntime::new(DockerConfig::default()).unwrap();
    let s = spec();
    let id = s.sandbox_id.clone();
    let control = format!("stockade-seccomp-control-{id}");
    let _cleanup = Cleanup(id.clone(), Some(control.clone()));
    rt.create(&s).await.expect("create");
    let binary = std::fs::read(&probe).unwrap();
    rt.write_archive(
        &id,
        &SandboxPath::parse_field("/tmp", "path").unwrap(),
        support::executable_tar("io_uring_probe", &binary),
    )
    .await
    .expect("copy the probe in");
    let out = rt
        .exec(
            &id,
            ExecSpec {
                argv: vec!["/tmp/io_uring_probe".into()],
                timeout: Some(Duration::from_secs(30)),
                ..Default::default()
            },
        )
        .await
        .expect("exec");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.exit_code,
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("getpid ok"), "{stdout}");
    assert!(
        stdout.contains("io_uring_setup EPERM") || stdout.contains("io_uring_setup ENOSYS"),
        "io_uring_setup must fail in a sandbox: {stdout}"
    );

    // Control: the same program in a plain container with Docker's own
    // default profile. On Docker < 25 it may use io_uring, so the sandbox's
    // refusal is Stockade's profile at work.
    let major: u32 = support::engine_version()
        .split('.')
        .next()
        .unwrap_or_default()
        .parse()
        .unwrap_or(0);
    if major < 25 {
        let run = Command::new("docker")
            .args([
                "run",
                "--name",
                &control,
                "--label",
                "io.stockade.test=seccomp",
                "-v",
            ])
            .arg(format!("{}:/probe:ro", probe.display()))
            .args([&support::image(), "/probe"])
            .output()
            .expect("docker run");
        let control_out = String::from_utf8_lossy(&run.stdout);
        assert!(
            control_out.contains("io_uring_setup allowed"),
            "with Docker's default profile io_uring works on this kernel: {control_out} {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    rt.remove(&id, false).await.unwrap();
}
