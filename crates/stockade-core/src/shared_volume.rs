//! Shared volumes: named volumes of an account that any number of its
//! sandboxes mount at create, read-write or read-only, and whose files the
//! API reads and writes without a sandbox. Distinct from a sandbox's own
//! `/workspace` volume ([`crate::VolumeName`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{FieldError, ValidationErrors};
use crate::ids::{AccountId, SharedVolumeId};
use crate::spec::VolumeName;

/// Where a shared volume is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SharedVolumeStatus {
    /// Recorded; its Docker volume may not exist yet. Recovery finishes or
    /// removes it.
    Creating,
    /// Usable: mountable, its files readable and writable.
    Ready,
    /// Being removed; nothing may mount it again.
    Deleting,
    /// Being copied to another host (`moving_to`); nothing may mount it
    /// until it is READY again, there or where it was.
    Moving,
}

impl SharedVolumeStatus {
    pub const ALL: [Self; 4] = [Self::Creating, Self::Ready, Self::Deleting, Self::Moving];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "CREATING",
            Self::Ready => "READY",
            Self::Deleting => "DELETING",
            Self::Moving => "MOVING",
        }
    }

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        crate::status::parse_status(Self::ALL, Self::as_str, s, || {
            format!("unknown volume status '{s}': expected CREATING, READY, DELETING or MOVING")
        })
    }
}

impl std::fmt::Display for SharedVolumeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A shared volume's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedVolume {
    pub id: SharedVolumeId,
    pub account_id: AccountId,
    /// Unique among the account's volumes not deleted.
    pub name: String,
    /// The Docker host the volume lives on; its sandboxes are placed there.
    pub server: String,
    /// The size limit in GB, where the host can enforce one.
    pub size_gb: Option<u32>,
    pub labels: BTreeMap<String, String>,
    pub status: SharedVolumeStatus,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
    /// While MOVING: the host it is being copied to, and since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving_to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving_since: Option<DateTime<Utc>>,
    /// After a move: the host whose copy is still to be removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
}

impl SharedVolume {
    /// The prefix of every shared volume's Docker volume name.
    pub const DOCKER_PREFIX: &'static str = "stockade-shared-";

    /// The Docker volume that holds its files.
    pub fn docker_name(&self) -> String {
        Self::docker_name_of(&self.id)
    }

    pub fn docker_name_of(id: &SharedVolumeId) -> String {
        format!("{}{id}", Self::DOCKER_PREFIX)
    }
}

/// Longest volume name.
pub const MAX_VOLUME_NAME_LEN: usize = 63;
/// Most labels on a volume.
pub const MAX_VOLUME_LABELS: usize = 32;
/// Most shared volumes one sandbox mounts.
pub const MAX_MOUNTS: usize = 16;

/// Checks a volume's name: 1 to 63 letters, digits and hyphens, not
/// starting or ending with a hyphen.
pub fn parse_volume_name(s: &str, field: &str) -> Result<String, FieldError> {
    let ok = (1..=MAX_VOLUME_NAME_LEN).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(FieldError::new(
            field,
            format!(
                "invalid volume name '{}': 1 to {MAX_VOLUME_NAME_LEN} letters, digits and \
                 hyphens, not starting or ending with a hyphen",
                s.chars().take(80).collect::<String>()
            ),
        ))
    }
}

/// Checks a volume's labels: as a host's (keys of letters, digits and
/// `_ . - /`, printable values), at most [`MAX_VOLUME_LABELS`].
pub fn parse_volume_labels(
    labels: &BTreeMap<String, String>,
    field: &str,
) -> Result<BTreeMap<String, String>, FieldError> {
    crate::spec::parse_host_labels(labels, field)
}

/// One shared volume mounted into a sandbox, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMount {
    /// The volume's id once the create resolved it; as sent (a name or an
    /// id) before.
    pub volume: String,
    /// The volume's name when it was mounted.
    pub name: String,
    /// Where it appears in the sandbox.
    pub path: String,
    #[serde(default)]
    pub read_only: bool,
}

/// A mount as a create sends it.
#[derive(Debug, Clone, Default)]
pub struct MountInput {
    /// A volume's name or id.
    pub volume: String,
    pub path: String,
    pub read_only: Option<bool>,
}

/// Directories a shared volume may not be mounted at or beneath: the
/// system's own, and what Stockade puts in every sandbox.
const RESERVED_MOUNT_PATHS: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/run",
    "/var/run",
    "/.stockade",
];

/// Checks a mount path: absolute, normalised (no `.`/`..`, empty or
/// trailing components), at most 1024 bytes, not `/`, not over or beneath
/// `/workspace` and not at or beneath a system directory.
pub fn parse_mount_path(s: &str, field: &str) -> Result<String, FieldError> {
    let bad = |why: &str| Err(FieldError::new(field, format!("mount path '{s}' {why}")));
    if !s.starts_with('/') {
        return bad("must be absolute");
    }
    if s.len() > 1024 || s.contains('\0') {
        return bad("must be at most 1024 bytes, without NUL");
    }
    if s == "/" {
        return bad("cannot be the root directory");
    }
    let parts: Vec<&str> = s[1..].split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return bad("must be normalised (no '.', '..', '//' or trailing '/')");
    }
    let under = |dir: &str| s == dir || s.starts_with(&format!("{dir}/"));
    if under(VolumeName::MOUNT_PATH) {
        return bad("cannot be /workspace or beneath it: that is the sandbox's own volume");
    }
    if let Some(dir) = RESERVED_MOUNT_PATHS.iter().find(|d| under(d)) {
        return bad(&format!(
            "cannot be at or beneath the system directory {dir}"
        ));
    }
    Ok(s.to_owned())
}

/// Checks a create's mounts: at most [`MAX_MOUNTS`], each path valid, no
/// two at the same path, no volume reference empty. Errors name
/// `volumeMounts[i].path` / `.volume`.
pub fn parse_mounts(input: &[MountInput], errs: &mut ValidationErrors) -> Option<Vec<VolumeMount>> {
    if input.len() > MAX_MOUNTS {
        errs.push(
            "volumeMounts",
            format!(
                "at most {MAX_MOUNTS} volumes can be mounted (got {})",
                input.len()
            ),
        );
        return None;
    }
    let mut out: Vec<VolumeMount> = Vec::with_capacity(input.len());
    let mut ok = true;
    for (i, m) in input.iter().enumerate() {
        let volume = m.volume.trim();
        if volume.is_empty() || volume.len() > 128 {
            errs.push(
                format!("volumeMounts[{i}].volume"),
                "a volume's name or id is required (at most 128 bytes)",
            );
            ok = false;
        }
        match parse_mount_path(&m.path, &format!("volumeMounts[{i}].path")) {
            Ok(path) => {
                if out.iter().any(|o| o.path == path) {
                    errs.push(
                        format!("volumeMounts[{i}].path"),
                        format!("two volumes are mounted at {path}"),
                    );
                    ok = false;
                } else {
                    out.push(VolumeMount {
                        volume: volume.to_owned(),
                        name: volume.to_owned(),
                        path,
                        read_only: m.read_only.unwrap_or(false),
                    });
                }
            }
            Err(e) => {
                errs.push(e.field, e.message);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_letters_digits_and_inner_hyphens() {
        for good in ["a", "data-set-1", "A9", &"x".repeat(63)] {
            assert!(parse_volume_name(good, "name").is_ok(), "{good}");
        }
        for bad in ["", "-a", "a-", "a_b", "a b", "ä", "a/b", &"x".repeat(64)] {
            let e = parse_volume_name(bad, "name").unwrap_err();
            assert_eq!(e.field, "name");
        }
    }

    #[test]
    fn mount_paths_stay_out_of_the_system_and_the_workspace() {
        for good in [
            "/data",
            "/mnt/shared",
            "/home/user/cache",
            "/opt/x",
            "/var/lib/x",
        ] {
            assert_eq!(parse_mount_path(good, "p").unwrap(), good);
        }
        for bad in [
            "data",
            "/",
            "/workspace",
            "/workspace/x",
            "/proc",
            "/proc/1",
            "/etc",
            "/usr/lib",
            "/.stockade",
            "/.stockade/agent",
            "/a/../etc",
            "/a/./b",
            "/a//b",
            "/a/",
            "/dev/shm",
            "/var/run/docker.sock",
        ] {
            assert!(parse_mount_path(bad, "p").is_err(), "{bad}");
        }
        assert!(parse_mount_path("/workspaces", "p").is_ok());
        assert!(parse_mount_path("/etcetera", "p").is_ok());
    }

    #[test]
    fn mounts_name_the_entry_that_is_wrong() {
        let mut errs = ValidationErrors::default();
        let input = vec![
            MountInput {
                volume: "a".into(),
                path: "/data".into(),
                read_only: None,
            },
            MountInput {
                volume: "b".into(),
                path: "/data".into(),
                read_only: Some(true),
            },
            MountInput {
                volume: "".into(),
                path: "/proc".into(),
                read_only: None,
            },
        ];
        assert!(parse_mounts(&input, &mut errs).is_none());
        let fields: Vec<String> = errs.0.iter().map(|e| e.field.clone()).collect();
        assert!(
            fields.contains(&"volumeMounts[1].path".to_owned()),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"volumeMounts[2].volume".to_owned()),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"volumeMounts[2].path".to_owned()),
            "{fields:?}"
        );
        let many: Vec<MountInput> = (0..17)
            .map(|i| MountInput {
                volume: "v".into(),
                path: format!("/m{i}"),
                read_only: None,
            })
            .collect();
        let mut errs = ValidationErrors::default();
        assert!(parse_mounts(&many, &mut errs).is_none());
        assert_eq!(errs.0[0].field, "volumeMounts");
    }
}
