//! A sandbox's `/workspace` capped by a file system of its own, for engines
//! whose volumes cannot be capped otherwise (the common ext4 host): an ext4
//! file system in a sparse file of the cap's size, mounted on Stockade's
//! host, which the sandbox's volume binds (the `local` driver's
//! `type=none,o=bind,device=…` options). A write beyond fails inside the
//! sandbox with `ENOSPC`; the engine's disk only holds what was written.
//!
//! Each volume's file system lives in `<engine data root>/stockade-disks/
//! <volume>/` (`disk.ext4` and its mount point `fs/`), beside the engine's
//! own volumes, on the same disk. Docker mounts and unmounts the bind as
//! containers come and go and removes the volume like any other; Stockade
//! mounts the file system before the sandbox's container starts (the mount
//! does not survive a reboot of the host), takes it down after the volume
//! is removed, and collects the ones whose volume was removed behind its
//! back (`docker volume rm`).
//!
//! Taking a file system down (an unmount, which writes its journal out,
//! and the file's deletion) takes about ten milliseconds, so a removal
//! only renames its folder to `<volume>.removed-<ms since 1970>` (a volume
//! of the same name made next finds none) and leaves the rest to a task of
//! its own (an `umount(2)` call, no process); the runtime's
//! `finish_disk_removals` waits for those tasks, and what a crash leaves is
//! collected at the next start.
//!
//! Only a local engine (one whose data root is on Stockade's host, in the
//! same mount namespace) and a Stockade running as root can do this.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use tokio::sync::OnceCell;

use super::host_command::{check_local_dir, host_command};
use super::{error_chain, status_code, DockerRuntime};
use crate::{RuntimeError, RuntimeResult};

/// The folder of the volumes' file systems in the engine's data root.
const DISKS_DIR: &str = "stockade-disks";
/// The file system's image and its mount point in a volume's folder.
const IMAGE_NAME: &str = "disk.ext4";
const MOUNT_NAME: &str = "fs";

/// The journal of file systems of 256 MiB and more (mke2fs's `-J`): 16 MiB,
/// where ext4's default (32 MiB at 1 GiB, up to 1 GiB) would take a
/// noticeable share of a small cap.
const JOURNAL: &str = "size=16";

/// A file system whose volume is gone is collected once it is this old: a
/// create makes the file system a moment before its volume.
const ORPHAN_AGE: Duration = Duration::from_secs(600);

/// What a removed volume's folder is renamed to end with, before the time.
const RETIRED: &str = ".removed-";

/// A retired file system left by another process is collected once it was
/// retired this long ago (its own task is done with it by then).
const RETIRED_AGE: Duration = Duration::from_secs(60);

/// Where this engine keeps the volumes' file systems, once asked, and the
/// tasks taking removed ones down.
#[derive(Debug, Default)]
pub(super) struct LoopDisks {
    dir: OnceCell<PathBuf>,
    retiring: tokio_util::task::TaskTracker,
}

/// One volume's file system on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct VolumeDisk {
    dir: PathBuf,
}

impl VolumeDisk {
    fn image(&self) -> PathBuf {
        self.dir.join(IMAGE_NAME)
    }

    fn mount_point(&self) -> PathBuf {
        self.dir.join(MOUNT_NAME)
    }

    /// The volume driver's options that bind the file system.
    pub(super) fn volume_options(&self) -> HashMap<String, String> {
        HashMap::from([
            ("type".to_owned(), "none".to_owned()),
            ("o".to_owned(), "bind".to_owned()),
            (
                "device".to_owned(),
                self.mount_point().display().to_string(),
            ),
        ])
    }

    /// Whether this volume has a file system of its own.
    async fn exists(&self) -> bool {
        tokio::fs::try_exists(self.image()).await.unwrap_or(false)
    }

    /// Makes a new file system of `bytes` bytes and mounts it. Says why
    /// when it cannot; nothing is left behind then.
    pub(super) async fn create(&self, bytes: u64) -> Result<(), String> {
        let made = self.create_inner(bytes).await;
        if made.is_err() {
            let _ = self.destroy().await;
        }
        made
    }

    async fn create_inner(&self, bytes: u64) -> Result<(), String> {
        let shown = self.dir.display();
        tokio::fs::create_dir(&self.dir)
            .await
            .map_err(|e| format!("could not create {shown}: {e}"))?;
        tokio::fs::create_dir(self.mount_point())
            .await
            .map_err(|e| format!("could not create {shown}/{MOUNT_NAME}: {e}"))?;
        create_image(&self.image(), bytes).await?;
        self.mount().await?;
        // An empty directory, as a new volume has: Docker copies the
        // image's `/workspace` into a volume only when it is empty.
        let _ = tokio::fs::remove_dir(self.mount_point().join("lost+found")).await;
        Ok(())
    }

    async fn mount(&self) -> Result<(), String> {
        let image = self.image().display().to_string();
        let point = self.mount_point().display().to_string();
        host_command(
            "mount",
            &[
                "-t",
                "ext4",
                "-o",
                "loop,nosuid,nodev,noatime",
                &image,
                &point,
            ],
        )
        .await
        .map(|_| ())
    }

    /// Mounts the file system when it is not (after a reboot of the host).
    pub(super) async fn ensure_mounted(&self) -> Result<(), String> {
        if !self.exists().await || is_mount_point(&self.mount_point()).await? {
            return Ok(());
        }
        self.mount().await
    }

    /// Moves the file system out of its volume's name (the mount moves
    /// with its folder): what [`destroy`](Self::destroy) then takes down.
    async fn retire(&self) -> Result<VolumeDisk, String> {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let mut name = self.dir.file_name().unwrap_or_default().to_owned();
        name.push(format!("{RETIRED}{since}"));
        let to = self.dir.with_file_name(name);
        tokio::fs::rename(&self.dir, &to)
            .await
            .map_err(|e| format!("could not rename {}: {e}", self.dir.display()))?;
        Ok(VolumeDisk { dir: to })
    }

    /// Unmounts the file system and deletes it. A mount still held (a
    /// container going away) is detached lazily: the kernel frees it with
    /// its last user.
    pub(super) async fn destroy(&self) -> Result<(), String> {
        let point = self.mount_point();
        if is_mount_point(&point).await.unwrap_or(false) {
            // The system call, not `umount(8)`: no process to start. The
            // loop device was set up to clear itself when the file system
            // lets go of it.
            tokio::task::spawn_blocking(move || {
                use rustix::mount::{unmount, UnmountFlags};
                unmount(&point, UnmountFlags::empty())
                    .or_else(|_| unmount(&point, UnmountFlags::DETACH))
                    .map_err(|e| format!("could not unmount {}: {e}", point.display()))
            })
            .await
            .map_err(|e| format!("the unmount's task failed: {e}"))??;
        }
        match tokio::fs::remove_dir_all(&self.dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("could not remove {}: {e}", self.dir.display())),
        }
    }

    /// The size of the files in the file system, as the engine measures
    /// its other volumes (each file's length, a hard-linked file once); it
    /// is unmounted (`None`) while its sandbox is off after a reboot.
    async fn files_bytes(&self) -> Option<u64> {
        let point = self.mount_point();
        if !is_mount_point(&point).await.ok()? {
            return None;
        }
        tokio::task::spawn_blocking(move || tree_bytes(&point))
            .await
            .ok()
    }

    /// Bytes in use and the cap, as the file system counts them.
    pub(super) async fn usage(&self) -> Option<(u64, u64)> {
        let limit = tokio::fs::metadata(self.image()).await.ok()?.len();
        let point = self.mount_point();
        if !is_mount_point(&point).await.ok()? {
            return None;
        }
        let fs = rustix::fs::statvfs(&point).ok()?;
        let used = fs
            .f_blocks
            .saturating_sub(fs.f_bfree)
            .saturating_mul(fs.f_frsize);
        Some((used, limit))
    }
}

/// A sparse file of `bytes` bytes holding a new ext4 file system with no
/// blocks reserved for root (the sandbox's user gets all of its cap).
async fn create_image(image: &Path, bytes: u64) -> Result<(), String> {
    let shown = image.display().to_string();
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(image)
        .await
        .map_err(|e| format!("could not create {shown}: {e}"))?;
    file.set_len(bytes)
        .await
        .map_err(|e| format!("could not size {shown}: {e}"))?;
    drop(file);
    let mut args = vec!["-q", "-F", "-m", "0", "-L", "workspace"];
    if bytes >= 256 << 20 {
        args.extend(["-J", JOURNAL]);
    }
    // A new sparse file reads as zeros: nothing needs zeroing, now or by
    // the kernel later (which would allocate the inode tables' blocks).
    // Older mke2fs lack that option; they initialise lazily instead.
    let mut prezeroed = args.clone();
    prezeroed.extend(["-E", "assume_storage_prezeroed=1,nodiscard", &shown]);
    if host_command("mkfs.ext4", &prezeroed).await.is_ok() {
        return Ok(());
    }
    args.extend([
        "-E",
        "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
        &shown,
    ]);
    host_command("mkfs.ext4", &args).await.map(|_| ())
}

/// The lengths of the files under `root` summed, without following
/// links, each inode once; what cannot be read is left out.
fn tree_bytes(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() && seen.insert(meta.ino()) {
                total = total.saturating_add(meta.len());
            }
        }
    }
    total
}

/// Whether `dir` is a mount point now: its file system is not its
/// parent's. Two `stat`s, whatever the number of mounts on the host (the
/// mount table grows with every container, and this is asked per volume).
/// A loop disk's file system is a device of its own, so it always differs.
async fn is_mount_point(dir: &Path) -> Result<bool, String> {
    use std::os::unix::fs::MetadataExt;
    let dir = match tokio::fs::canonicalize(dir).await {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let Some(parent) = dir.parent() else {
        return Ok(true); // the root
    };
    let device = |p: &Path| {
        let p = p.to_path_buf();
        async move {
            tokio::fs::metadata(&p)
                .await
                .map(|m| m.dev())
                .map_err(|e| format!("{}: {e}", p.display()))
        }
    };
    Ok(device(&dir).await? != device(parent).await?)
}

impl DockerRuntime {
    /// Where the volumes' file systems live: in the engine's data root.
    /// Says why not when the engine is not on this host.
    async fn disks_dir(&self, docker: &Docker) -> Result<PathBuf, String> {
        if let Some(engine) = self.remote_engine() {
            return Err(format!("the engine {engine} is remote"));
        }
        self.loop_disks
            .dir
            .get_or_try_init(|| async {
                let info = docker
                    .info()
                    .await
                    .map_err(|e| format!("could not ask the engine: {}", error_chain(&e)))?;
                let root = info
                    .docker_root_dir
                    .ok_or_else(|| "the engine did not say where its data root is".to_owned())?;
                let root = PathBuf::from(root);
                check_local_dir(&root, "a local engine").await?;
                let dir = root.join(DISKS_DIR);
                match tokio::fs::create_dir(&dir).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(format!("could not create {}: {e}", dir.display())),
                }
                Ok(dir)
            })
            .await
            .cloned()
    }

    /// The file system a volume has or would have on this host.
    pub(super) async fn volume_disk(
        &self,
        docker: &Docker,
        volume: &str,
    ) -> Result<VolumeDisk, String> {
        Ok(VolumeDisk {
            dir: self.disks_dir(docker).await?.join(volume),
        })
    }

    /// The file system of a volume when it has one on this host.
    pub(super) async fn existing_volume_disk(
        &self,
        docker: &Docker,
        volume: &str,
    ) -> Option<VolumeDisk> {
        let disk = self.volume_disk(docker, volume).await.ok()?;
        disk.exists().await.then_some(disk)
    }

    /// What each volume's own file system takes on the engine's disk, by
    /// volume name.
    pub(super) async fn volume_disk_sizes(&self, docker: &Docker) -> Vec<(String, u64)> {
        let Ok(dir) = self.disks_dir(docker).await else {
            return Vec::new();
        };
        let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
            return Vec::new();
        };
        let mut sizes = Vec::new();
        while let Ok(Some(entry)) = entries.next_entry().await {
            let disk = VolumeDisk { dir: entry.path() };
            if let Some(bytes) = disk.files_bytes().await {
                sizes.push((entry.file_name().to_string_lossy().into_owned(), bytes));
            }
        }
        sizes
    }

    /// Puts a volume's own file system back in place before its container
    /// starts: started without it, the sandbox would see an empty
    /// `/workspace`, uncapped.
    pub(super) async fn mount_volume_disk(
        &self,
        docker: &Docker,
        volume: &str,
    ) -> RuntimeResult<()> {
        match self.existing_volume_disk(docker, volume).await {
            Some(disk) => volume_disk_result(volume, "mount", disk.ensure_mounted().await),
            None => Ok(()),
        }
    }

    /// Deletes a removed volume's own file system, if it had one: retired
    /// at once, taken down by a task of its own.
    #[tracing::instrument(skip_all, fields(volume))]
    pub(super) async fn remove_volume_disk(
        &self,
        docker: &Docker,
        volume: &str,
    ) -> RuntimeResult<()> {
        let Some(disk) = self.existing_volume_disk(docker, volume).await else {
            return Ok(());
        };
        let retired = disk.retire().await;
        let retired = retired.map_err(|why| volume_disk_error(volume, "remove", why))?;
        let volume = volume.to_owned();
        self.loop_disks.retiring.spawn(async move {
            if let Err(why) = retired.destroy().await {
                tracing::warn!(volume = %volume, %why, "could not take down the file system of a removed volume");
            }
        });
        Ok(())
    }

    /// Waits for the file systems of removed volumes still being taken
    /// down.
    pub(super) async fn retired_disks_gone(&self) {
        self.loop_disks.retiring.close();
        self.loop_disks.retiring.wait().await;
        self.loop_disks.retiring.reopen();
    }

    /// Deletes the file systems whose volume is gone (removed with the
    /// engine's own tools), once they are old enough not to belong to a
    /// create under way. Returns how many went.
    pub(super) async fn collect_orphan_disks(&self, docker: &Docker) -> usize {
        let Ok(dir) = self.disks_dir(docker).await else {
            return 0;
        };
        let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
            return 0;
        };
        let mut collected = 0;
        while let Ok(Some(entry)) = entries.next_entry().await {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some((_, since)) = name.rsplit_once(RETIRED) {
                let since = std::time::UNIX_EPOCH
                    + Duration::from_millis(since.parse().unwrap_or_default());
                let left = since.elapsed().is_ok_and(|age| age > RETIRED_AGE);
                if left && (VolumeDisk { dir: entry.path() }).destroy().await.is_ok() {
                    collected += 1;
                }
                continue;
            }
            let old = entry
                .metadata()
                .await
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > ORPHAN_AGE);
            if !old {
                continue;
            }
            match docker.inspect_volume(&name).await {
                Err(e) if status_code(&e) == Some(404) => {}
                _ => continue,
            }
            let disk = VolumeDisk { dir: entry.path() };
            match disk.destroy().await {
                Ok(()) => collected += 1,
                Err(why) => {
                    tracing::warn!(volume = %name, %why, "could not remove the file system of a removed volume")
                }
            }
        }
        collected
    }
}

/// What became of `doing` a volume's file system, as the runtime says it.
fn volume_disk_result(volume: &str, doing: &str, done: Result<(), String>) -> RuntimeResult<()> {
    done.map_err(|why| volume_disk_error(volume, doing, why))
}

fn volume_disk_error(volume: &str, doing: &str, why: String) -> RuntimeError {
    RuntimeError::Other(format!(
        "could not {doing} the file system of the volume {volume}: {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn mount_points_are_told_by_their_device() {
        assert!(is_mount_point(Path::new("/")).await.unwrap());
        assert!(is_mount_point(Path::new("/proc")).await.unwrap());
        // A directory inside /proc's file system, and a missing one.
        assert!(!is_mount_point(Path::new("/proc/self")).await.unwrap());
        assert!(!is_mount_point(Path::new("/proc/no-such-dir"))
            .await
            .unwrap());
    }

    #[test]
    fn the_volume_binds_the_mount_point() {
        let disk = VolumeDisk {
            dir: PathBuf::from("/var/lib/docker/stockade-disks/v"),
        };
        assert_eq!(
            disk.image(),
            PathBuf::from("/var/lib/docker/stockade-disks/v/disk.ext4")
        );
        let options = disk.volume_options();
        assert_eq!(options["o"], "bind");
        assert_eq!(options["device"], "/var/lib/docker/stockade-disks/v/fs");
    }
}
