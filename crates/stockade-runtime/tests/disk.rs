//! Disk quotas against real engines, played as a hostile tenant:
//! a sandbox with `diskSizeGB: 1` writes 2 GiB into `/workspace` and 2 GiB
//! into its root filesystem and is stopped by the kernel near 1 GiB each,
//! while a neighbour keeps writing and the engine's disk keeps its space.
//!
//! The quota tests run on the engine `scripts/test` starts for them
//! (`scripts/lib/engine.sh`: a data root on XFS with pquota, or on btrfs
//! where the kernel lacks XFS quotas), named by
//! `STOCKADE_TEST_DOCKER_QUOTA`; without it they say so and pass (set
//! `STOCKADE_TEST_DOCKER_QUOTA_REQUIRED=1` to make that a failure). The
//! last tests run on the default engine (ext4 here), whose storage driver
//! caps nothing: `/workspace` gets a file system of its own in a loop file,
//! the root filesystem is left to the service's watch, creates work and the
//! capability says why.
//!
//! Everything a test makes is labelled and removed, also when it fails.

use std::process::Command;
use std::time::Duration;

use stockade_core::{InstanceId, SandboxId, VolumeName};
use stockade_runtime::prelude::*;
use stockade_runtime::{
    container_name, ContainerSpec, DockerConfig, DockerRuntime, Enforcement, ExecSpec,
    IsolationConfig, PoolMemberSpec, QuotaMethod,
};

mod support;
use support::shell_spec;

const IMAGE: &str = "stockade-test-base:latest";
const KEEP_ALIVE: &str = "trap 'exit 0' TERM INT; while true; do sleep 86400 & wait $!; done";
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The quota engine's address, or `None` (after saying why) to skip.
fn quota_engine() -> Option<String> {
    match std::env::var("STOCKADE_TEST_DOCKER_QUOTA") {
        Ok(host) if !host.is_empty() => Some(host),
        _ => {
            assert!(
                std::env::var("STOCKADE_TEST_DOCKER_QUOTA_REQUIRED").as_deref() != Ok("1"),
                "STOCKADE_TEST_DOCKER_QUOTA is not set but required: run scripts/test, \
                 which starts the quota engine (scripts/lib/engine.sh)"
            );
            eprintln!(
                "skipped: STOCKADE_TEST_DOCKER_QUOTA is not set (scripts/test starts an engine \
                 whose data root enforces quotas, scripts/lib/engine.sh)"
            );
            None
        }
    }
}

fn docker_cli(host: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new("docker");
    if let Some(host) = host {
        cmd.args(["-H", host]);
    }
    cmd.args(args).output().expect("the docker CLI runs")
}

fn runtime(host: Option<&str>) -> DockerRuntime {
    let out = docker_cli(host, &["image", "inspect", IMAGE]);
    assert!(
        out.status.success(),
        "test image {IMAGE} is missing on {}: run scripts/test (or scripts/build-test-image and \
         test_engine_load of scripts/lib/engine.sh) ({})",
        host.unwrap_or("the default engine"),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    DockerRuntime::new(DockerConfig {
        host: host.map(str::to_owned),
        // Bridges of their own: the quota engine shares the host's network
        // namespace with the default engine and its stk0/stk1.
        isolation: IsolationConfig {
            packet_filter: false,
            ..IsolationConfig::with_prefix("stkdisk")
        },
        ..Default::default()
    })
    .expect("runtime")
}

/// Removes a sandbox's container and volume on its engine when dropped.
struct Cleanup(Option<String>, SandboxId);

impl Cleanup {
    /// A new sandbox id on `host`'s engine (the default one for `None`),
    /// with the guard that removes what is made for it.
    fn fresh(host: Option<&str>) -> (SandboxId, Self) {
        let id = SandboxId::generate();
        (id.clone(), Self(host.map(str::to_owned), id))
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let host = self.0.as_deref();
        let _ = docker_cli(host, &["rm", "-f", "-v", &container_name(&self.1)]);
        let _ = docker_cli(
            host,
            &[
                "volume",
                "rm",
                "-f",
                VolumeName::for_sandbox(&self.1).as_str(),
            ],
        );
        // A volume's own file system, which the engine's removal leaves.
        if host.is_none() {
            let disk = disk_dir(&VolumeName::for_sandbox(&self.1));
            let mut left = retired_of(&disk);
            left.push(disk);
            for dir in left {
                let _ = Command::new("umount").arg(dir.join("fs")).output();
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

fn spec(id: &SandboxId, disk_bytes: Option<u64>) -> ContainerSpec {
    ContainerSpec {
        hostname: format!("sbx-{id}"),
        sandbox_id: id.clone(),
        disk_bytes,
        ..shell_spec(IMAGE, KEEP_ALIVE)
    }
}

async fn sh(rt: &DockerRuntime, id: &SandboxId, script: &str) -> (i64, String) {
    let out = rt
        .exec(
            id,
            ExecSpec {
                argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
                timeout: Some(Duration::from_secs(300)),
                ..Default::default()
            },
        )
        .await
        .expect("exec");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.exit_code.unwrap_or(-1), text)
}

/// Writes up to `mib` MiB of zeros to `path` in the sandbox; returns the
/// bytes that landed and what `dd` said.
async fn flood(rt: &DockerRuntime, id: &SandboxId, path: &str, mib: u64) -> (u64, String) {
    let (_, said) = sh(
        rt,
        id,
        &format!(
            "dd if=/dev/zero of={path} bs=1048576 count={mib} 2>&1; sync; echo; wc -c < {path}"
        ),
    )
    .await;
    let written = said
        .lines()
        .rev()
        .find_map(|l| l.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no size in: {said}"));
    (written, said)
}

/// Space left on the filesystem of the engine's data root (the engine runs
/// on this host).
fn data_root_avail(host: &str) -> u64 {
    let root = docker_cli(Some(host), &["info", "-f", "{{.DockerRootDir}}"]);
    let root = String::from_utf8_lossy(&root.stdout).trim().to_owned();
    let out = Command::new("df")
        .args(["-B1", "--output=avail", &root])
        .output()
        .expect("df runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("df of {root}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Floods `path` with `mib` MiB and checks the kernel stopped the write
/// near 1 GiB; the bytes that landed.
async fn flood_capped_at_a_gib(rt: &DockerRuntime, id: &SandboxId, path: &str, mib: u64) -> u64 {
    let (written, said) = flood(rt, id, path, mib).await;
    assert!(
        refused_for_space(&said),
        "the write to {path} was not refused: {said}"
    );
    assert!(
        (GIB - 64 * MIB..=GIB + 16 * MIB).contains(&written),
        "{written} bytes landed in {path}: {said}"
    );
    written
}

fn refused_for_space(said: &str) -> bool {
    said.contains("No space left on device") || said.contains("Disk quota exceeded")
}

#[tokio::test]
async fn the_quota_engine_enforces_both_areas() {
    let Some(host) = quota_engine() else { return };
    let rt = runtime(Some(&host));
    let found = rt.disk_enforcement().await;
    assert!(found.is_enforced(), "{found:?}");
    assert_eq!(found.warning(), None);
    assert_eq!(
        found.root_fs,
        Enforcement::Enforced(QuotaMethod::StorageDriver)
    );
    assert!(
        matches!(
            found.workspace,
            Enforcement::Enforced(QuotaMethod::VolumeDriver | QuotaMethod::BtrfsSubvolume)
        ),
        "{found:?}"
    );
    // Cached: a second answer needs no probe and says the same.
    assert_eq!(rt.disk_enforcement().await, found);
    // The probe leaves no container or volume behind.
    let label = format!("label={}", stockade_runtime::labels::DISK_PROBE);
    for what in [
        &["ps", "-aq", "--filter", &label][..],
        &["volume", "ls", "-q", "--filter", &label],
    ] {
        let out = docker_cli(Some(&host), what);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "", "{what:?}");
    }
}

#[tokio::test]
async fn a_hostile_sandbox_is_stopped_near_its_disk_size() {
    let Some(host) = quota_engine() else { return };
    let rt = runtime(Some(&host));
    let (id, _cleanup) = Cleanup::fresh(Some(&host));
    let (neighbour, _cleanup_neighbour) = Cleanup::fresh(Some(&host));
    rt.create(&spec(&id, Some(GIB))).await.expect("create");
    rt.create(&spec(&neighbour, Some(GIB)))
        .await
        .expect("create the neighbour");
    let avail_before = data_root_avail(&host);

    // /workspace: 2 GiB asked, about 1 GiB granted, the rest refused.
    flood_capped_at_a_gib(&rt, &id, "/workspace/big", 2048).await;
    // The root filesystem, apart: the same.
    flood_capped_at_a_gib(&rt, &id, "/var/tmp/big", 2048).await;

    // The neighbour keeps writing, in both areas.
    for path in ["/workspace/n", "/tmp/n"] {
        let (n, said) = flood(&rt, &neighbour, path, 64).await;
        assert_eq!(n, 64 * MIB, "the neighbour could not write {path}: {said}");
    }
    // The engine's disk lost what was granted, not what was asked.
    let used = avail_before.saturating_sub(data_root_avail(&host));
    assert!(
        used < 2 * GIB + 768 * MIB,
        "the engine's filesystem lost {used} bytes"
    );

    // Usage against the limits.
    let usage = rt
        .disk_usage(&id, Duration::ZERO)
        .await
        .expect("usage")
        .expect("a container");
    assert_eq!(usage.workspace_limit_bytes, Some(GIB), "{usage:?}");
    assert_eq!(usage.root_fs_limit_bytes, Some(GIB), "{usage:?}");
    let near = |b: Option<u64>| b.is_some_and(|b| (GIB - 64 * MIB..=GIB + 64 * MIB).contains(&b));
    assert!(near(usage.workspace_bytes), "{usage:?}");
    assert!(near(usage.root_fs_bytes), "{usage:?}");

    // Space comes back when the files go: the sandbox writes again.
    let (code, said) = sh(
        &rt,
        &id,
        "rm /workspace/big /var/tmp/big && echo ok > /workspace/after",
    )
    .await;
    assert_eq!(code, 0, "{said}");
    assert!(rt.disk_usage(&id, Duration::ZERO).await.unwrap().is_some());
}

#[tokio::test]
async fn pool_members_get_the_quota_too() {
    let Some(host) = quota_engine() else { return };
    let rt = runtime(Some(&host));
    let (id, _cleanup) = Cleanup::fresh(Some(&host));
    rt.create_pool_member(&PoolMemberSpec {
        sandbox_id: id.clone(),
        instance_id: InstanceId::generate(),
        class: "disk-test".into(),
        image: IMAGE.into(),
        cpu_cores: 1.0,
        memory_bytes: 256 * 1024 * 1024,
        network_access: false,
        agent_token: None,
        disk_bytes: Some(256 * MIB),
    })
    .await
    .expect("create a pool member");
    let usage = rt.disk_usage(&id, Duration::ZERO).await.unwrap().unwrap();
    assert_eq!(usage.workspace_limit_bytes, Some(256 * MIB), "{usage:?}");
    assert_eq!(usage.root_fs_limit_bytes, Some(256 * MIB), "{usage:?}");
    let (written, said) = flood(&rt, &id, "/workspace/big", 400).await;
    assert!(refused_for_space(&said), "{said}");
    assert!(written <= 256 * MIB + 16 * MIB, "{written}: {said}");
}

/// The default engine (ext4 here), for the tests of what Stockade does
/// where the storage driver cannot cap: `None` (after saying why) when the
/// default engine caps both areas itself.
async fn uncapped_default_engine() -> Option<DockerRuntime> {
    let rt = runtime(None);
    let found = rt.disk_enforcement().await;
    if found.root_fs.is_enforced() && found.workspace.method() != Some(QuotaMethod::LoopFile) {
        let backing = docker_cli(None, &["info", "-f", "{{.Driver}} {{.DriverStatus}}"]);
        eprintln!(
            "skipped: the default engine caps disks itself ({})",
            String::from_utf8_lossy(&backing.stdout).trim()
        );
        return None;
    }
    Some(rt)
}

/// The folder of a volume's own file system on the default engine.
fn disk_dir(volume: &VolumeName) -> std::path::PathBuf {
    let root = docker_cli(None, &["info", "-f", "{{.DockerRootDir}}"]);
    std::path::Path::new(String::from_utf8_lossy(&root.stdout).trim())
        .join("stockade-disks")
        .join(volume.as_str())
}

/// The folders a removal of `disk`'s volume renamed it to and left.
fn retired_of(disk: &std::path::Path) -> Vec<std::path::PathBuf> {
    let name = disk.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_dir(disk.parent().unwrap())
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{name}.removed-"))
        })
        .map(|e| e.path())
        .collect()
}

fn is_mounted(dir: &std::path::Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

/// A sandbox capped at 1 GiB on the default engine, its volume and the
/// folder of the volume's file system.
async fn sandbox_with_a_disk_of_its_own(
    rt: &DockerRuntime,
) -> (SandboxId, Cleanup, VolumeName, std::path::PathBuf) {
    let (id, cleanup) = Cleanup::fresh(None);
    rt.create(&spec(&id, Some(GIB))).await.expect("create");
    let volume = VolumeName::for_sandbox(&id);
    let disk = disk_dir(&volume);
    (id, cleanup, volume, disk)
}

#[tokio::test]
async fn the_default_engine_says_why_not_and_creates_still_work() {
    let Some(rt) = uncapped_default_engine().await else {
        return;
    };
    let found = rt.disk_enforcement().await;
    let warning = found.warning().expect("a warning");
    eprintln!("the default engine: {warning}");
    assert!(
        warning.starts_with("diskSizeGB is only partly enforced on this host")
            || warning.starts_with("diskSizeGB is not enforced on this host"),
        "{warning}"
    );
    if let Enforcement::NotEnforced(why) = &found.root_fs {
        // The engine's own words, e.g. "--storage-opt is supported only for
        // overlay over xfs with 'pquota' mount option".
        assert!(!why.is_empty() && !why.contains("could not probe"), "{why}");
    }
    // Stockade runs as root beside a local engine here: /workspace gets a
    // file system of its own whatever the engine's disk.
    assert_eq!(
        found.workspace,
        Enforcement::Enforced(QuotaMethod::LoopFile),
        "{found:?}"
    );
    let (id, _cleanup) = Cleanup::fresh(None);
    rt.create(&spec(&id, Some(GIB)))
        .await
        .expect("create works");
    let (code, said) = sh(&rt, &id, "echo hi > /workspace/x && cat /workspace/x").await;
    assert_eq!((code, said.trim()), (0, "hi"));
    let usage = rt.disk_usage(&id, Duration::ZERO).await.unwrap().unwrap();
    assert_eq!(usage.root_fs_limit_bytes, None, "{usage:?}");
    assert_eq!(usage.workspace_limit_bytes, Some(GIB), "{usage:?}");
    assert!(usage.root_fs_bytes.is_some(), "{usage:?}");
}

/// A hostile tenant on an ordinary ext4 host: 1.5 GiB written into a
/// `/workspace` capped at 1 GiB is refused near 1 GiB; the file system
/// comes back after a reboot of the host (its mount gone) with the files,
/// and leaves nothing behind when the sandbox goes.
#[tokio::test]
async fn a_loop_file_caps_the_workspace_on_an_ordinary_host() {
    let Some(rt) = uncapped_default_engine().await else {
        return;
    };
    let (id, _cleanup, volume, disk) = sandbox_with_a_disk_of_its_own(&rt).await;
    let (image, dir) = (disk.join("disk.ext4"), disk.join("fs"));
    assert!(is_mounted(&dir), "{} is not a mount point", dir.display());

    flood_capped_at_a_gib(&rt, &id, "/workspace/big", 1536).await;
    // The engine's disk holds what was written, not the cap's size.
    let allocated =
        std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&image).unwrap()) * 512;
    assert!(allocated < GIB + 64 * MIB, "{allocated}");
    let (code, said) = sh(&rt, &id, "rm /workspace/big && echo kept > /workspace/kept").await;
    assert_eq!(code, 0, "{said}");

    // A reboot of the host: the container stopped, the mount gone.
    rt.stop(&id, Duration::from_secs(1)).await.expect("stop");
    let out = Command::new("umount").arg(&dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&dir));
    rt.start(&id).await.expect("start");
    assert!(is_mounted(&dir), "start did not mount the workspace again");
    let (code, said) = sh(&rt, &id, "cat /workspace/kept").await;
    assert_eq!((code, said.trim()), (0, "kept"));

    assert!(
        !loop_devices_backed_by(volume.as_str()).is_empty(),
        "no loop device backs the volume's file system"
    );
    rt.remove(&id, false).await.expect("remove");
    // Out of the volume's name at once, taken down behind the answer.
    assert!(!disk.exists(), "{} stayed", disk.display());
    rt.finish_disk_removals().await;
    assert!(!is_mounted(&dir), "the file system is still mounted");
    let retired = retired_of(&disk);
    assert!(retired.is_empty(), "{retired:?} stayed");
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(volume.as_str()),
        "a mount of the volume's file system stayed"
    );
    let held = loop_devices_backed_by(volume.as_str());
    assert!(held.is_empty(), "loop devices stayed attached: {held:?}");
    let out = docker_cli(None, &["volume", "inspect", volume.as_str()]);
    assert!(!out.status.success(), "the volume stayed");
}

/// The loop devices whose backing file's path contains `needle`.
fn loop_devices_backed_by(needle: &str) -> Vec<String> {
    let Ok(devices) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    devices
        .flatten()
        .filter_map(|d| {
            let backing = std::fs::read_to_string(d.path().join("loop/backing_file")).ok()?;
            backing
                .contains(needle)
                .then(|| format!("{}: {}", d.file_name().to_string_lossy(), backing.trim()))
        })
        .collect()
}

/// A volume removed with the engine's own tools leaves its file system
/// behind: the next runtime on the engine collects it once it is old
/// enough not to belong to a create under way.
#[tokio::test]
async fn file_systems_of_volumes_removed_behind_stockades_back_are_collected() {
    let Some(rt) = uncapped_default_engine().await else {
        return;
    };
    let (_cleanup, disk) = a_disk_docker_left(&rt).await;
    assert!(disk.join("disk.ext4").exists());

    // Young: left alone (a create may be making its volume).
    runtime(None).disk_enforcement().await;
    assert!(disk.exists(), "a young file system was collected");
    let out = Command::new("touch")
        .args(["-d", "20 minutes ago"])
        .arg(&disk)
        .output()
        .unwrap();
    assert!(out.status.success());
    runtime(None).disk_enforcement().await;
    assert!(!disk.exists(), "{} stayed", disk.display());
    assert!(!is_mounted(&disk.join("fs")));
}

/// The folder of a sandbox's own file system after its container and volume
/// were removed with Docker's CLI, which leaves the file system behind.
async fn a_disk_docker_left(rt: &DockerRuntime) -> (Cleanup, std::path::PathBuf) {
    let (id, cleanup, volume, disk) = sandbox_with_a_disk_of_its_own(rt).await;
    docker_cli(None, &["rm", "-f", &container_name(&id)]);
    let out = docker_cli(None, &["volume", "rm", volume.as_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cleanup, disk)
}

/// A process killed while it took a removed volume's file system down
/// leaves the folder it renamed it to, still mounted: the next runtime
/// collects it once it was retired a minute ago, and not before.
#[tokio::test]
async fn file_systems_a_killed_removal_left_are_collected() {
    let Some(rt) = uncapped_default_engine().await else {
        return;
    };
    let (_cleanup, disk) = a_disk_docker_left(&rt).await;
    let millis = |ago: u64| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        (now - Duration::from_secs(ago)).as_millis()
    };
    let name = disk.file_name().unwrap().to_string_lossy().into_owned();
    let young = disk.with_file_name(format!("{name}.removed-{}", millis(5)));
    std::fs::rename(&disk, &young).unwrap();
    assert!(is_mounted(&young.join("fs")));
    runtime(None).disk_enforcement().await;
    assert!(
        young.exists(),
        "a file system retired a moment ago was collected"
    );

    let old = disk.with_file_name(format!("{name}.removed-{}", millis(120)));
    std::fs::rename(&young, &old).unwrap();
    runtime(None).disk_enforcement().await;
    assert!(!old.exists(), "{} stayed", old.display());
    assert!(!is_mounted(&old.join("fs")));
}
