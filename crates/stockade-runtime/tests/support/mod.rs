//! Helpers shared by the runtime's Docker test suites: the docker CLI,
//! removing what a test made (also when it fails), a shell container spec,
//! a static test program that calls `io_uring_setup`, and packing one file
//! as a tar archive for `write_archive`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use std::collections::BTreeMap;
use std::process::Output;

use bytes::Bytes;
use std::time::Duration;
use stockade_core::{AccountId, InstanceId, SandboxId, VolumeName};

use stockade_runtime::prelude::*;
use stockade_runtime::{
    container_name, ArchiveUpload, ContainerSpec, DockerRuntime, ExecOutput, ExecSpec,
};

/// Runs the docker CLI, for checks the runtime's own answers cannot prove
/// and for cleanup.
pub fn docker_cli(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI runs")
}

/// Removes a sandbox's container and its volume; what is already gone is
/// no error.
pub fn remove_sandbox(id: &SandboxId) {
    let _ = docker_cli(&["rm", "-f", "-v", &container_name(id)]);
    let _ = docker_cli(&["volume", "rm", "-f", VolumeName::for_sandbox(id).as_str()]);
}

/// Removes the sandbox's container and volume when dropped, so also when
/// the test fails.
pub struct Cleanup(pub SandboxId);

impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_sandbox(&self.0);
    }
}

/// Creates the sandbox of `spec` on `rt`, with the guard that removes it
/// (made first, so a create that fails halfway is cleaned up too).
pub async fn create_sandbox(rt: &DockerRuntime, spec: &ContainerSpec) -> Cleanup {
    let cleanup = Cleanup(spec.sandbox_id.clone());
    rt.create(spec).await.expect("create");
    cleanup
}

/// `rt` with the sandbox of `spec` created on it, and the sandbox's guard.
pub async fn created(rt: DockerRuntime, spec: &ContainerSpec) -> (DockerRuntime, Cleanup) {
    let cleanup = create_sandbox(&rt, spec).await;
    (rt, cleanup)
}

/// Sandboxes (container and volume), images and agent volumes made by a
/// test, removed on drop in that order, so also when the test fails.
#[derive(Default)]
pub struct Made {
    pub sandboxes: Vec<SandboxId>,
    pub images: Vec<String>,
    /// Agent volumes, each with the `<volume>-fill` container that may be
    /// filling it.
    pub volumes: Vec<String>,
}

impl Made {
    /// Creates the sandbox of `spec` on `rt`, noted first so that it is
    /// removed with the rest even when the create fails halfway.
    pub async fn create(
        &mut self,
        rt: &DockerRuntime,
        spec: &ContainerSpec,
    ) -> stockade_runtime::RuntimeResult<String> {
        self.sandboxes.push(spec.sandbox_id.clone());
        rt.create(spec).await
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for id in &self.sandboxes {
            remove_sandbox(id);
        }
        for image in &self.images {
            let _ = docker_cli(&["rmi", "-f", image]);
        }
        for volume in &self.volumes {
            let _ = docker_cli(&["rm", "-f", &format!("{volume}-fill")]);
            let _ = docker_cli(&["volume", "rm", "-f", volume]);
        }
    }
}

/// A spec of a fresh sandbox (new sandbox, account and instance ids,
/// hostname `sbx-<id>`) whose main process is `/bin/sh -c command` in
/// `image`: one core, 256 MiB, no network access, no agent, no disk limit.
/// Tests change the fields they are about with `..shell_spec(…)`.
pub fn shell_spec(image: &str, command: &str) -> ContainerSpec {
    let sandbox_id = SandboxId::generate();
    ContainerSpec {
        hostname: format!("sbx-{sandbox_id}"),
        sandbox_id,
        account_id: AccountId::generate(),
        instance_id: InstanceId::generate(),
        image: image.into(),
        command: vec!["/bin/sh".into(), "-c".into(), command.into()],
        env: BTreeMap::new(),
        cpu_cores: 1.0,
        memory_bytes: 256 << 20,
        network_access: false,
        agent_token: None,
        disk_bytes: None,
        mounts: Vec::new(),
        workspace_volume: true,
    }
}

/// A C program that calls `io_uring_setup` and `getpid` and prints what
/// happened: `getpid ok`, then `io_uring_setup allowed`, `… EPERM`,
/// `… ENOSYS` or another error.
const IO_URING_PROBE: &str = r#"#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    unsigned char params[120];
    memset(params, 0, sizeof params);
    long fd = syscall(425 /* io_uring_setup */, 8, params);
    int err = errno;
    printf("getpid %s\n", getpid() > 0 ? "ok" : "failed");
    if (fd >= 0) {
        printf("io_uring_setup allowed\n");
        return 0;
    }
    printf("io_uring_setup %s\n",
           err == EPERM ? "EPERM" : err == ENOSYS ? "ENOSYS" : strerror(err));
    return 0;
}
"#;

/// The io_uring probe compiled as a static x86-64/arm64 executable (so it
/// runs in any image, the busybox test image included), built once per test
/// binary with the host's C compiler (`cc`, which Rust's linker needs too).
pub fn io_uring_probe() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            // In the build's own scratch directory (no files left in /tmp);
            // built under a name of this process, then renamed into place,
            // so parallel test binaries never see a half-written one.
            let building = compile_static("io_uring_probe", IO_URING_PROBE);
            let binary = building.with_file_name("io_uring_probe");
            std::fs::rename(&building, &binary).expect("move the probe into place");
            binary
        })
        .clone()
}

/// C `source` compiled as a static executable in the build's scratch
/// directory, under a name of `stem` and this process; returns its path.
pub fn compile_static(stem: &str, source: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let pid = std::process::id();
    let source_file = dir.join(format!("{stem}-{pid}.c"));
    let binary = dir.join(format!("{stem}-{pid}"));
    std::fs::write(&source_file, source).expect("write the C source");
    let out = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&binary)
        .arg(&source_file)
        .output()
        .expect("run cc (install gcc and libc6-dev)");
    let _ = std::fs::remove_file(&source_file);
    assert!(
        out.status.success(),
        "cc -static failed (is libc6-dev installed?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    binary
}

/// A tar archive of one executable file `name` with `data`.
pub fn executable_tar(name: &str, data: &[u8]) -> ArchiveUpload {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o755);
    b.append_data(&mut h, name, data).expect("tar");
    let bytes = Bytes::from(b.into_inner().expect("tar"));
    Box::pin(futures_util::stream::once(async move { bytes }))
}

pub fn image() -> String {
    std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into())
}

/// `docker version`'s server version, e.g. `20.10.24+dfsg1`.
pub fn engine_version() -> String {
    let out = Command::new("docker")
        .args(["version", "-f", "{{.Server.Version}}"])
        .output()
        .expect("docker version");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Runs `/bin/sh -c script` in the sandbox through the runtime (within
/// `timeout`, if any); what it answered, whatever the exit code.
pub async fn sh_exec(
    rt: &DockerRuntime,
    id: &SandboxId,
    script: &str,
    timeout: Option<Duration>,
) -> ExecOutput {
    rt.exec(
        id,
        ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout,
            ..Default::default()
        },
    )
    .await
    .expect("exec")
}

/// `sh_exec` that must exit 0 (the failure names the script and shows its
/// stderr); its stdout.
pub async fn sh_ok(
    rt: &DockerRuntime,
    id: &SandboxId,
    script: &str,
    timeout: Option<Duration>,
) -> String {
    let out = sh_exec(rt, id, script, timeout).await;
    assert_eq!(
        out.exit_code,
        Some(0),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `iptables -w 10 args…`; whether it succeeded.
pub fn iptables(args: &[&str]) -> bool {
    Command::new("iptables")
        .args(["-w", "10"])
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Removes the packet filter chain of `iso` and the rules jumping to it
/// from its bridges.
pub fn remove_isolation_chain(iso: &stockade_runtime::IsolationConfig) {
    for bridge in [&iso.bridge, &iso.internal_bridge] {
        let jump = ["-i", bridge.as_str(), "-j", iso.chain.as_str()];
        while iptables(&[&["-C", "INPUT"][..], &jump].concat()) {
            iptables(&[&["-D", "INPUT"][..], &jump].concat());
        }
    }
    iptables(&["-F", &iso.chain]);
    iptables(&["-X", &iso.chain]);
}

/// The sandbox's agent at its container address, once it answers.
pub async fn agent(
    rt: &stockade_runtime::DockerRuntime,
    id: &SandboxId,
    token: Option<&str>,
) -> stockade_agent::client::AgentClient {
    let ip = rt
        .container_address(id)
        .await
        .expect("address")
        .expect("a running sandbox has an address");
    let c = stockade_agent::client::AgentClient::new(
        stockade_agent::client::Endpoint::Tcp(format!("{ip}:{}", stockade_runtime::AGENT_PORT)),
        token.map(str::to_owned),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while let Err(e) = c.health().await {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent of {id} at {ip} never answered: {e}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c
}

/// An exec of `argv`, every other setting at its default.
pub fn exec_of(argv: &[&str]) -> ExecSpec {
    ExecSpec {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    }
}

/// Writes `text` to `path` through the agent and reads it back.
pub async fn agent_round_trip(
    c: &stockade_agent::client::AgentClient,
    path: &str,
    text: &'static str,
) -> Vec<u8> {
    c.upload_bytes(path, text).await.unwrap();
    c.download(path).await.unwrap().bytes().await.unwrap()
}

/// Stops sandbox `id` with 20 s of grace: its main process must end on the
/// SIGTERM, well within the grace, with exit code 0.
pub async fn stop_on_sigterm(rt: &stockade_runtime::DockerRuntime, id: &SandboxId) {
    let started = std::time::Instant::now();
    rt.stop(id, Duration::from_secs(20)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(rt.inspect(id).await.unwrap().unwrap().exit_code, Some(0));
}
