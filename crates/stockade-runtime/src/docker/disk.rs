//! Disk quotas on Docker: `diskSizeGB` caps a sandbox's
//! `/workspace` and, apart, its writable root filesystem, each enforced by
//! the kernel (a write beyond fails inside the sandbox with `ENOSPC` on XFS,
//! `EDQUOT` on btrfs; nothing outside fills up).
//!
//! What the engine can do is probed once through its API (remote engines
//! too) and cached:
//! - the root filesystem: a never-started container of a tiny probe image
//!   (`stockade-disk-probe:1`, imported from an empty archive and kept)
//!   created with the storage option `size`. overlay2 accepts it only on
//!   XFS mounted with `pquota`; btrfs (qgroups), zfs and devicemapper
//!   accept it too.
//! - `/workspace`: a volume created with the `local` driver's `size`
//!   option, which Docker 20.10 accepts on an XFS data root mounted with
//!   `pquota` ("quota size requested but no quota support" elsewhere).
//!   Failing that, on a local engine (a unix socket) whose volumes live on
//!   btrfs, Stockade replaces the new volume's empty `_data` directory by a
//!   btrfs subvolume with a qgroup limit (`btrfs subvolume create`,
//!   `btrfs qgroup limit`; quotas are switched on for the filesystem when
//!   they are off, as Docker's btrfs driver does for `size`). Docker removes
//!   such a volume like any other.
//!
//! The probe's leftovers are removed at once; only the probe image stays.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::{Config, CreateContainerOptions, InspectContainerOptions};
use bollard::image::CreateImageOptions;
use bollard::models::HostConfig;
use bollard::volume::CreateVolumeOptions;
use bollard::Docker;
use futures_util::StreamExt;
use stockade_core::{SandboxId, VolumeName};

use super::containers::remove_container;
use super::host_command::{check_local_dir, host_command, host_command_output};
use super::loop_disk::VolumeDisk;
use super::{container_name, error_chain, status_code, DockerRuntime};
use crate::disk::parse_qgroup_show;
use crate::{
    labels, parse_size, Disk, DiskEnforcement, DiskUsage, Enforcement, QuotaMethod, RuntimeError,
    RuntimeResult,
};

/// The probe's image: one empty layer, no command (its containers are never
/// started).
const PROBE_IMAGE_REPO: &str = "stockade-disk-probe";
const PROBE_IMAGE_TAG: &str = "1";
/// The size the probe asks for.
const PROBE_BYTES: u64 = 64 << 20;
/// The inode number of every btrfs subvolume's root directory.
const BTRFS_SUBVOLUME_ROOT_INODE: u64 = 256;
/// How long measuring one sandbox's use may take before it is left out.
const USAGE_TIMEOUT: Duration = Duration::from_secs(20);

/// The cached result of the probe; `None` until one completed.
#[derive(Debug, Default)]
pub(super) struct DiskState {
    probed: tokio::sync::Mutex<Option<DiskEnforcement>>,
}

impl DockerRuntime {
    /// What this engine enforces: the cached probe, or a new one.
    pub(super) async fn disk_quotas(&self, docker: &Docker) -> DiskEnforcement {
        if !self.config.disk_quotas {
            let why = "turned off in Stockade's configuration".to_owned();
            return DiskEnforcement {
                workspace: Enforcement::NotEnforced(why.clone()),
                root_fs: Enforcement::NotEnforced(why),
            };
        }
        let mut probed = self.disk.probed.lock().await;
        if let Some(known) = probed.as_ref() {
            return known.clone();
        }
        match self.probe_disk(docker).await {
            Ok(found) => {
                if let Some(warning) = found.warning() {
                    tracing::warn!(host = %self.host(), "{warning}");
                } else {
                    tracing::info!(
                        host = %self.host(),
                        workspace = ?found.workspace, root_fs = ?found.root_fs,
                        "diskSizeGB is enforced"
                    );
                }
                *probed = Some(found.clone());
                found
            }
            Err(e) => {
                let why = format!("could not probe the engine: {e}");
                DiskEnforcement {
                    workspace: Enforcement::NotEnforced(why.clone()),
                    root_fs: Enforcement::NotEnforced(why),
                }
            }
        }
    }

    /// Probes both areas; `Err` only when the engine could not be asked.
    async fn probe_disk(&self, docker: &Docker) -> RuntimeResult<DiskEnforcement> {
        let (root_fs, workspace) =
            tokio::join!(self.probe_root_fs(docker), self.probe_workspace(docker));
        Ok(DiskEnforcement {
            workspace: workspace?,
            root_fs: root_fs?,
        })
    }

    async fn probe_root_fs(&self, docker: &Docker) -> RuntimeResult<Enforcement> {
        self.ensure_probe_image(docker).await?;
        let name = format!("stockade-disk-probe-{}", SandboxId::generate());
        let config = Config {
            image: Some(format!("{PROBE_IMAGE_REPO}:{PROBE_IMAGE_TAG}")),
            cmd: Some(vec!["/never-started".to_owned()]),
            labels: Some(HashMap::from([(
                labels::DISK_PROBE.to_owned(),
                "true".to_owned(),
            )])),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                storage_opt: Some(size_option(PROBE_BYTES)),
                network_mode: Some("none".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = docker
            .create_container(
                Some(CreateContainerOptions {
                    name: name.clone(),
                    platform: None,
                }),
                config,
            )
            .await;
        match created {
            Ok(_) => {
                if let Err(e) = remove_container(docker, &name).await {
                    tracing::warn!(container = %name, error = %error_chain(&e), "could not remove the disk probe's container");
                }
                Ok(Enforcement::Enforced(QuotaMethod::StorageDriver))
            }
            Err(e) if status_code(&e).is_some() => {
                // The engine answered: it refuses the option (and made nothing).
                Ok(Enforcement::NotEnforced(engine_message(&e)))
            }
            Err(e) => Err(self.map_err(e, "probe the storage driver's size option")),
        }
    }

    /// The empty image of the probe, which volumes' files helpers run too.
    pub(super) fn probe_image(&self) -> String {
        format!("{PROBE_IMAGE_REPO}:{PROBE_IMAGE_TAG}")
    }

    /// Imports the probe image when the engine lacks it.
    pub(super) async fn ensure_probe_image(&self, docker: &Docker) -> RuntimeResult<()> {
        let reference = format!("{PROBE_IMAGE_REPO}:{PROBE_IMAGE_TAG}");
        match docker.inspect_image(&reference).await {
            Ok(_) => return Ok(()),
            Err(e) if status_code(&e) == Some(404) => {}
            Err(e) => return Err(self.map_err(e, "inspect the disk probe image")),
        }
        let label = format!("LABEL {}=true", labels::DISK_PROBE);
        let options = CreateImageOptions {
            from_src: "-",
            repo: PROBE_IMAGE_REPO,
            tag: PROBE_IMAGE_TAG,
            changes: vec![label.as_str()],
            ..Default::default()
        };
        // An empty tar archive: two zero blocks.
        let archive = bytes::Bytes::from(vec![0u8; 1024]);
        let mut stream = docker.create_image(Some(options), Some(archive), None);
        while let Some(item) = stream.next().await {
            item.map_err(|e| self.map_err(e, "import the disk probe image"))?;
        }
        Ok(())
    }

    async fn probe_workspace(&self, docker: &Docker) -> RuntimeResult<Enforcement> {
        let name = format!("stockade-disk-probe-{}", SandboxId::generate());
        let probe_labels = HashMap::from([(labels::DISK_PROBE.to_owned(), "true".to_owned())]);
        let by_driver = docker
            .create_volume(CreateVolumeOptions {
                name: name.clone(),
                driver: "local".to_owned(),
                driver_opts: size_option(PROBE_BYTES),
                labels: probe_labels.clone(),
            })
            .await;
        let driver_refusal = match by_driver {
            Ok(_) => {
                self.remove_probe_volume(docker, &name).await;
                return Ok(Enforcement::Enforced(QuotaMethod::VolumeDriver));
            }
            Err(e) if status_code(&e).is_some() => engine_message(&e),
            Err(e) => return Err(self.map_err(e, "probe the volume driver's size option")),
        };
        // The engine's own volumes cannot be capped: a btrfs subvolume in
        // the volume's place, when the engine is on this host.
        if self.remote_engine().is_some() {
            return Ok(Enforcement::NotEnforced(format!(
                "the local volume driver refuses a size ({driver_refusal}), and the engine is \
                 remote"
            )));
        }
        let volume = docker
            .create_volume(CreateVolumeOptions {
                name: name.clone(),
                driver: "local".to_owned(),
                driver_opts: HashMap::new(),
                labels: probe_labels.clone(),
            })
            .await
            .map_err(|e| self.map_err(e, "create the disk probe volume"))?;
        let btrfs = make_btrfs_quota(Path::new(&volume.mountpoint), PROBE_BYTES).await;
        self.remove_probe_volume(docker, &name).await;
        let not_btrfs = match btrfs {
            Ok(()) => return Ok(Enforcement::Enforced(QuotaMethod::BtrfsSubvolume)),
            Err(why) => why,
        };
        // Any other file system: one of the volume's own in a loop file.
        Ok(match self.probe_loop_file(docker, probe_labels).await {
            Ok(()) => {
                let collected = self.collect_orphan_disks(docker).await;
                if collected > 0 {
                    tracing::info!(
                        collected,
                        "removed the file systems of volumes removed behind Stockade's back"
                    );
                }
                Enforcement::Enforced(QuotaMethod::LoopFile)
            }
            Err(no_loop) => Enforcement::NotEnforced(format!(
                "the local volume driver refuses a size ({driver_refusal}), {not_btrfs}, and no \
                 loop file: {no_loop}"
            )),
        })
    }

    /// Makes a small file system of a volume's own, binds it in a volume,
    /// and removes both.
    async fn probe_loop_file(
        &self,
        docker: &Docker,
        probe_labels: HashMap<String, String>,
    ) -> Result<(), String> {
        let name = format!("stockade-disk-probe-{}", SandboxId::generate());
        let disk = self.volume_disk(docker, &name).await?;
        disk.create(PROBE_BYTES).await?;
        let bound = docker
            .create_volume(CreateVolumeOptions {
                name: name.clone(),
                driver: "local".to_owned(),
                driver_opts: disk.volume_options(),
                labels: probe_labels,
            })
            .await;
        if bound.is_ok() {
            self.remove_probe_volume(docker, &name).await;
        }
        let destroyed = disk.destroy().await;
        bound.map_err(|e| format!("the engine refused the bind: {}", engine_message(&e)))?;
        destroyed
    }

    async fn remove_probe_volume(&self, docker: &Docker, name: &str) {
        if let Err(e) = docker.remove_volume(name, None).await {
            if status_code(&e) != Some(404) {
                tracing::warn!(volume = %name, error = %error_chain(&e), "could not remove the disk probe's volume");
            }
        }
    }

    /// The volume create options and the container's storage options for
    /// a sandbox capped at `disk_bytes` under `quotas`.
    pub(super) fn disk_options(
        quotas: Option<&DiskEnforcement>,
        disk_bytes: Option<u64>,
    ) -> (HashMap<String, String>, Option<HashMap<String, String>>) {
        let (Some(quotas), Some(bytes)) = (quotas, disk_bytes) else {
            return (HashMap::new(), None);
        };
        let volume = match quotas.workspace.method() {
            Some(QuotaMethod::VolumeDriver) => size_option(bytes),
            _ => HashMap::new(),
        };
        let storage = (quotas.root_fs.method() == Some(QuotaMethod::StorageDriver))
            .then(|| size_option(bytes));
        (volume, storage)
    }

    /// Caps a volume this create just made when the cap is Stockade's own
    /// (a btrfs subvolume); the driver's is set at create.
    pub(super) async fn cap_new_volume(
        &self,
        docker: &Docker,
        quotas: Option<&DiskEnforcement>,
        volume: &str,
        disk_bytes: Option<u64>,
    ) -> RuntimeResult<()> {
        let (Some(quotas), Some(bytes)) = (quotas, disk_bytes) else {
            return Ok(());
        };
        if quotas.workspace.method() != Some(QuotaMethod::BtrfsSubvolume) {
            return Ok(());
        }
        let inspected = docker
            .inspect_volume(volume)
            .await
            .map_err(|e| self.map_err(e, "inspect volume"))?;
        let dir = Path::new(&inspected.mountpoint);
        make_btrfs_quota(dir, bytes).await.map_err(|why| {
            RuntimeError::Other(format!(
                "could not cap the volume {volume} at {bytes} bytes: {why}"
            ))
        })?;
        ensure_qgroups_consistent(dir).await;
        Ok(())
    }

    /// The file system of its own a new volume binds, made now, when that
    /// is how this engine caps `/workspace`.
    pub(super) async fn new_volume_disk(
        &self,
        docker: &Docker,
        quotas: Option<&DiskEnforcement>,
        volume: &str,
        disk_bytes: Option<u64>,
    ) -> RuntimeResult<Option<VolumeDisk>> {
        let (Some(quotas), Some(bytes)) = (quotas, disk_bytes) else {
            return Ok(None);
        };
        if quotas.workspace.method() != Some(QuotaMethod::LoopFile) {
            return Ok(None);
        }
        let made = async {
            let disk = self.volume_disk(docker, volume).await?;
            disk.create(bytes).await.map(|()| disk)
        };
        made.await.map(Some).map_err(|why| {
            RuntimeError::Other(format!(
                "could not cap the volume {volume} at {bytes} bytes: {why}"
            ))
        })
    }

    async fn disk_usage_of(
        &self,
        id: &SandboxId,
        max_age: Duration,
    ) -> RuntimeResult<Option<DiskUsage>> {
        let docker = self.client().await?;
        let inspected = match tokio::time::timeout(
            USAGE_TIMEOUT,
            docker.inspect_container(
                &container_name(id),
                Some(InspectContainerOptions { size: true }),
            ),
        )
        .await
        {
            Ok(Ok(c)) => Some(c),
            Ok(Err(e)) if status_code(&e) == Some(404) => return Ok(None),
            Ok(Err(e)) => return Err(self.map_err(e, "inspect container")),
            Err(_) => {
                tracing::warn!(sandbox.id = %id, "measuring the root filesystem took longer than {} s", USAGE_TIMEOUT.as_secs());
                None
            }
        };
        let mut usage = DiskUsage::default();
        if let Some(c) = &inspected {
            usage.root_fs_bytes = c.size_rw.and_then(|s| u64::try_from(s).ok());
            usage.root_fs_limit_bytes = c
                .host_config
                .as_ref()
                .and_then(|h| h.storage_opt.as_ref())
                .and_then(|o| o.get("size"))
                .and_then(|s| parse_size(s));
        }
        let volume = VolumeName::for_sandbox(id);
        let inspected_volume = match docker.inspect_volume(volume.as_str()).await {
            Ok(v) => Some(v),
            Err(e) if status_code(&e) == Some(404) => None,
            Err(e) => return Err(self.map_err(e, "inspect volume")),
        };
        if let Some(v) = inspected_volume {
            usage.workspace_limit_bytes = v.options.get("size").and_then(|s| parse_size(s));
            let own_quota = self
                .disk
                .probed
                .lock()
                .await
                .as_ref()
                .and_then(|d| d.workspace.method())
                == Some(QuotaMethod::BtrfsSubvolume);
            if usage.workspace_limit_bytes.is_none() {
                if let Some(disk) = self.existing_volume_disk(&docker, volume.as_str()).await {
                    if let Some((used, limit)) = disk.usage().await {
                        usage.workspace_bytes = Some(used);
                        usage.workspace_limit_bytes = Some(limit);
                    }
                }
            }
            if usage.workspace_limit_bytes.is_none() && own_quota {
                if let Ok((used, limit)) = btrfs_qgroup(Path::new(&v.mountpoint)).await {
                    usage.workspace_bytes = Some(used);
                    usage.workspace_limit_bytes = limit;
                }
            }
            if usage.workspace_bytes.is_none() {
                usage.workspace_bytes = self.volume_size_of(&volume, max_age).await?;
            }
        }
        Ok(Some(usage))
    }
}

#[async_trait]
impl Disk for DockerRuntime {
    async fn finish_disk_removals(&self) {
        self.retired_disks_gone().await;
    }

    async fn disk_enforcement(&self) -> DiskEnforcement {
        match self.client().await {
            Ok(docker) => self.disk_quotas(&docker).await,
            Err(e) => {
                let why = format!("could not probe the engine: {e}");
                DiskEnforcement {
                    workspace: Enforcement::NotEnforced(why.clone()),
                    root_fs: Enforcement::NotEnforced(why),
                }
            }
        }
    }

    async fn disk_usage(
        &self,
        id: &SandboxId,
        max_age: Duration,
    ) -> RuntimeResult<Option<DiskUsage>> {
        self.disk_usage_of(id, max_age).await
    }
}

/// `{"size": "<bytes>"}`, as both the storage and the volume driver take it.
fn size_option(bytes: u64) -> HashMap<String, String> {
    HashMap::from([("size".to_owned(), bytes.to_string())])
}

/// The engine's own words from an error answer.
fn engine_message(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => {
            message.trim().to_owned()
        }
        other => error_chain(other),
    }
}

/// Replaces the empty directory `dir` (a new volume's `_data`) by a btrfs
/// subvolume limited to `bytes`. Says why when it cannot.
async fn make_btrfs_quota(dir: &Path, bytes: u64) -> Result<(), String> {
    check_local_dir(dir, "a local engine whose volumes are on btrfs").await?;
    let shown = dir.display().to_string();
    let fs = host_command("stat", &["-f", "-c", "%T", &shown]).await?;
    if fs.trim() != "btrfs" {
        return Err(format!(
            "the engine's volumes are on {}, not btrfs",
            fs.trim()
        ));
    }
    // A fresh volume's directory is empty: nothing is lost.
    tokio::fs::remove_dir(dir)
        .await
        .map_err(|e| format!("could not replace {shown}: {e}"))?;
    if let Err(e) = host_command("btrfs", &["subvolume", "create", &shown]).await {
        // Put the directory back so that the volume stays usable.
        let _ = tokio::fs::create_dir(dir).await;
        return Err(e);
    }
    let limit = bytes.to_string();
    if host_command("btrfs", &["qgroup", "limit", &limit, &shown])
        .await
        .is_err()
    {
        // Quotas are off on this filesystem: switch them on (what Docker's
        // btrfs driver does for a container's size) and try again.
        host_command("btrfs", &["quota", "enable", &shown]).await?;
        host_command("btrfs", &["qgroup", "limit", &limit, &shown]).await?;
    }
    Ok(())
}

/// The bytes a btrfs subvolume refers to and its qgroup limit.
async fn btrfs_qgroup(dir: &Path) -> Result<(u64, Option<u64>), String> {
    use std::os::unix::fs::MetadataExt;
    let shown = dir.display().to_string();
    // Only a subvolume's own root (inode 256) has a qgroup of its own; a
    // plain directory would report the filesystem's.
    let meta = tokio::fs::metadata(dir)
        .await
        .map_err(|e| format!("{shown}: {e}"))?;
    if meta.ino() != BTRFS_SUBVOLUME_ROOT_INODE {
        return Err(format!("{shown} is not a btrfs subvolume"));
    }
    let out = host_command(
        "btrfs",
        &["qgroup", "show", "-r", "-f", "--raw", "--sync", &shown],
    )
    .await?;
    parse_qgroup_show(&out).ok_or_else(|| format!("no qgroup for {shown}"))
}

/// btrfs stops enforcing qgroup limits reliably once its accounting is
/// marked inconsistent (the kernel does so when it deletes a deep subvolume
/// tree, unless `qgroups/drop_subtree_threshold` in sysfs is 8). Starts a
/// rescan when it is, and says so: until it ends, limits may let writes
/// through.
async fn ensure_qgroups_consistent(dir: &Path) {
    let shown = dir.display().to_string();
    let Ok((_, stderr)) = host_command_output("btrfs", &["qgroup", "show", "-f", &shown]).await
    else {
        return;
    };
    if !stderr.contains("inconsistent") {
        return;
    }
    let rescan = host_command("btrfs", &["quota", "rescan", &shown]).await;
    tracing::warn!(
        path = %shown,
        rescan = ?rescan.map(|_| "started"),
        "btrfs qgroup accounting is inconsistent, so disk limits may not hold until a rescan \
         ends; set qgroups/drop_subtree_threshold to 8 in the filesystem's sysfs directory to \
         keep it consistent"
    );
}
