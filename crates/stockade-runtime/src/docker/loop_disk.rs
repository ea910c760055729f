//! A sandbox's `/workspace` capped by a file system of its own, for engines
//! whose volumes cannot be capped otherwise (the common ext4 host): the
//! volume's `_data` directory becomes the mount point of an ext4 file
//! system in a sparse file of the cap's size, kept beside it in the
//! volume's directory (`<volume>/disk.ext4`). A write beyond fails inside
//! the sandbox with `ENOSPC`; the engine's disk only holds what was
//! written.
//!
//! Only a local engine (one whose volume directories are on Stockade's
//! host, in the same mount namespace) and a Stockade running as root can do
//! this. The mount does not survive a reboot of the host: it is put back
//! before the sandbox's container starts, and taken down before the volume
//! is removed (Docker would otherwise empty the mounted file system and
//! then fail to remove its directory).

use std::path::{Path, PathBuf};

use bollard::Docker;
use stockade_core::VolumeName;

use super::host_command::{check_local_dir, host_command};
use super::{error_chain, status_code, DockerRuntime};
use crate::{RuntimeError, RuntimeResult};

/// The file system's image, beside the volume's `_data` directory.
const IMAGE_NAME: &str = "disk.ext4";

/// The journal of file systems of 256 MiB and more (mke2fs's `-J`): 16 MiB,
/// where ext4's default (32 MiB at 1 GiB, up to 1 GiB) would take a
/// noticeable share of a small cap.
const JOURNAL: &str = "size=16";

/// The image file of the volume whose data directory is `dir`.
pub(super) fn image_of(dir: &Path) -> Option<PathBuf> {
    dir.parent().map(|p| p.join(IMAGE_NAME))
}

/// Makes the empty directory `dir` (a new volume's `_data`) the mount point
/// of a new file system of `bytes` bytes. Says why when it cannot; nothing
/// is left behind then.
pub(super) async fn make_loop_quota(dir: &Path, bytes: u64) -> Result<(), String> {
    check_local_dir(dir, "a local engine").await?;
    let shown = dir.display().to_string();
    let image = image_of(dir).ok_or_else(|| format!("{shown} has no parent directory"))?;
    let made = create_image(&image, bytes).await;
    let made = match made {
        Ok(()) => mount(&image, dir).await,
        Err(e) => Err(e),
    };
    if let Err(e) = made {
        let _ = tokio::fs::remove_file(&image).await;
        return Err(e);
    }
    // An empty directory, as a new volume has: Docker copies the image's
    // `/workspace` into a volume only when it is empty.
    let _ = tokio::fs::remove_dir(dir.join("lost+found")).await;
    Ok(())
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

async fn mount(image: &Path, dir: &Path) -> Result<(), String> {
    let image = image.display().to_string();
    let dir = dir.display().to_string();
    host_command(
        "mount",
        &[
            "-t",
            "ext4",
            "-o",
            "loop,nosuid,nodev,noatime",
            &image,
            &dir,
        ],
    )
    .await
    .map(|_| ())
}

/// Whether `dir` is a mount point now (`/proc/self/mountinfo`).
async fn is_mount_point(dir: &Path) -> Result<bool, String> {
    let dir = tokio::fs::canonicalize(dir)
        .await
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let table = tokio::fs::read_to_string("/proc/self/mountinfo")
        .await
        .map_err(|e| format!("could not read the mount table: {e}"))?;
    let mounted = mount_points(&table).any(|p| Path::new(&p) == dir);
    Ok(mounted)
}

/// The mount points of a mountinfo table, unescaped (`\040` is a space).
fn mount_points(table: &str) -> impl Iterator<Item = String> + '_ {
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_octal)
}

fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        if let Some(d) = octal {
            let value = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
            if let Ok(b) = u8::try_from(value) {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Puts the file system of the volume whose data directory is `dir` back
/// in place when it has one and it is not mounted (after a reboot of the
/// host). Volumes without one are left alone.
pub(super) async fn ensure_mounted(dir: &Path) -> Result<(), String> {
    let Some(image) = image_of(dir) else {
        return Ok(());
    };
    if !tokio::fs::try_exists(&image).await.unwrap_or(false) {
        return Ok(());
    }
    if is_mount_point(dir).await? {
        return Ok(());
    }
    mount(&image, dir).await
}

/// Takes down the file system of the volume whose data directory is `dir`,
/// when one is mounted there, so that the volume can be removed. A mount
/// still held (a container that is going away) is detached lazily: the
/// kernel frees it with its last user.
pub(super) async fn unmount(dir: &Path) -> Result<(), String> {
    let Some(image) = image_of(dir) else {
        return Ok(());
    };
    if !tokio::fs::try_exists(&image).await.unwrap_or(false) {
        return Ok(());
    }
    if !is_mount_point(dir).await.unwrap_or(false) {
        return Ok(());
    }
    let shown = dir.display().to_string();
    if host_command("umount", &[&shown]).await.is_ok() {
        return Ok(());
    }
    host_command("umount", &["-l", &shown]).await.map(|_| ())
}

/// The cap of the volume whose data directory is `dir`: its image's size,
/// when it has one.
pub(super) async fn limit_of(dir: &Path) -> Option<u64> {
    let image = image_of(dir)?;
    tokio::fs::metadata(image).await.ok().map(|m| m.len())
}

impl DockerRuntime {
    /// The data directory of a sandbox's volume when the engine is on this
    /// host and the volume exists.
    async fn local_volume_dir(
        &self,
        docker: &Docker,
        volume: &VolumeName,
    ) -> RuntimeResult<Option<PathBuf>> {
        if self.remote_engine().is_some() {
            return Ok(None);
        }
        match docker.inspect_volume(volume.as_str()).await {
            Ok(v) => Ok(Some(PathBuf::from(v.mountpoint))),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(self.map_err(e, "inspect volume")),
        }
    }

    /// Puts a volume's own file system back in place before its container
    /// starts (it is not mounted after a reboot of the host): started
    /// without it, the sandbox would see an empty `/workspace`, uncapped.
    pub(super) async fn mount_volume_disk(
        &self,
        docker: &Docker,
        volume: &VolumeName,
    ) -> RuntimeResult<()> {
        let Some(dir) = self.local_volume_dir(docker, volume).await? else {
            return Ok(());
        };
        ensure_mounted(&dir).await.map_err(|why| {
            RuntimeError::Other(format!(
                "could not mount the file system of the volume {volume}: {why}"
            ))
        })
    }
}

/// Takes a sandbox volume's own file system down so that the engine can
/// remove the volume. Nothing to do for volumes without one (and for those
/// of a remote engine, whose directories are not on this host).
pub(super) async fn unmount_volume_disk(
    docker: &Docker,
    volume: &VolumeName,
) -> Result<(), String> {
    match docker.inspect_volume(volume.as_str()).await {
        Ok(v) => unmount(Path::new(&v.mountpoint)).await.map_err(|why| {
            format!("could not unmount the file system of the volume {volume}: {why}")
        }),
        Err(e) if status_code(&e) == Some(404) => Ok(()),
        Err(e) => Err(format!(
            "could not inspect the volume {volume}: {}",
            error_chain(&e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_read_and_unescaped() {
        let table = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                     95 22 7:0 / /var/lib/docker/volumes/x/_data rw,nosuid - ext4 /dev/loop0 rw\n\
                     96 22 7:1 / /mnt/with\\040space rw - ext4 /dev/loop1 rw\n";
        let points: Vec<String> = mount_points(table).collect();
        assert_eq!(
            points,
            ["/", "/var/lib/docker/volumes/x/_data", "/mnt/with space"]
        );
    }

    #[test]
    fn the_image_lives_beside_the_data_directory() {
        assert_eq!(
            image_of(Path::new("/var/lib/docker/volumes/v/_data")),
            Some(PathBuf::from("/var/lib/docker/volumes/v/disk.ext4"))
        );
    }
}
