//! Snapshots: a saved filesystem state of a sandbox — its
//! container's root-filesystem changes as an image, its `/workspace` as a tar
//! in the object store — owned by one account.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::FieldError;
use crate::ids::{AccountId, SandboxId, SnapshotId};
use crate::names::check_text_name;

/// Where a snapshot is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SnapshotStatus {
    /// Being captured; not usable yet.
    Creating,
    /// Usable as a create source.
    Ready,
    /// Deleted by its owner; its image is removed once no container uses it.
    Deleting,
    /// Gone: image and workspace archive removed.
    Deleted,
}

impl SnapshotStatus {
    pub const ALL: [SnapshotStatus; 4] =
        [Self::Creating, Self::Ready, Self::Deleting, Self::Deleted];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "CREATING",
            Self::Ready => "READY",
            Self::Deleting => "DELETING",
            Self::Deleted => "DELETED",
        }
    }

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        crate::status::parse_status(Self::ALL, Self::as_str, s, || {
            format!("unknown snapshot status '{s}': expected CREATING, READY, DELETING or DELETED")
        })
    }
}

impl std::fmt::Display for SnapshotStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a snapshot exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotKind {
    /// Made by `POST /sandbox/{id}/snapshots`; listed, restorable, deletable.
    User,
    /// The internal, ephemeral snapshot of a fork: never listed, deleted as
    /// soon as the fork exists (its image lives on while the fork uses it).
    Fork,
}

impl SnapshotKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Fork => "fork",
        }
    }

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        match s {
            "user" => Ok(Self::User),
            "fork" => Ok(Self::Fork),
            other => Err(FieldError::new(
                "kind",
                format!("unknown snapshot kind '{other}'"),
            )),
        }
    }
}

/// One snapshot as the database knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub id: SnapshotId,
    pub account_id: AccountId,
    /// The sandbox it was taken from.
    pub source_sandbox_id: SandboxId,
    pub name: String,
    pub kind: SnapshotKind,
    pub status: SnapshotStatus,
    /// The committed image (`stockade-snapshot:{id}`).
    pub image_ref: String,
    /// Key of the `/workspace` tar in the object store, once uploaded.
    pub blob_key: Option<String>,
    /// Size of that tar.
    pub workspace_bytes: Option<u64>,
    /// Size of the image's archive in the object store, once stored.
    pub image_bytes: Option<u64>,
    /// The source sandbox's environment variables when it was captured: its
    /// image has them blanked, and a sandbox made from it gets them from
    /// here. `None` on older snapshots, whose images still carry them.
    pub environment_vars: Option<BTreeMap<String, String>>,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

impl Snapshot {
    /// The repository of every snapshot image.
    pub const IMAGE_REPO: &'static str = "stockade-snapshot";
    pub const MAX_NAME_LEN: usize = 128;

    /// A new snapshot in `CREATING`, not yet saved.
    pub fn new(
        account_id: AccountId,
        source_sandbox_id: SandboxId,
        name: Option<String>,
        kind: SnapshotKind,
        now: DateTime<Utc>,
    ) -> Self {
        let id = SnapshotId::generate();
        Self {
            name: name.unwrap_or_else(|| id.to_string()),
            image_ref: Self::image_ref_for(&id),
            id,
            account_id,
            source_sandbox_id,
            kind,
            status: SnapshotStatus::Creating,
            blob_key: None,
            workspace_bytes: None,
            image_bytes: None,
            environment_vars: None,
            created_at: now,
            deleted_at: None,
        }
    }

    /// `stockade-snapshot:{id}`.
    pub fn image_ref_for(id: &SnapshotId) -> String {
        format!("{}:{id}", Self::IMAGE_REPO)
    }

    /// `snapshots/{id}/image.tar`: the image with its layers, so that any
    /// Docker host can load it.
    pub fn image_blob_key_for(id: &SnapshotId) -> String {
        format!("snapshots/{id}/image.tar")
    }

    /// The snapshot id of a snapshot image reference
    /// (`stockade-snapshot:{id}`).
    pub fn id_of_image(image_ref: &str) -> Option<SnapshotId> {
        let tag = image_ref
            .strip_prefix(Self::IMAGE_REPO)?
            .strip_prefix(':')?;
        SnapshotId::parse(tag).ok()
    }

    /// `snapshots/{id}/workspace.tar`.
    pub fn blob_key_for(id: &SnapshotId) -> String {
        format!("snapshots/{id}/workspace.tar")
    }

    /// Checks a snapshot name: 1–128 printable characters, no control characters.
    pub fn parse_name(s: &str, field: &str) -> Result<String, FieldError> {
        check_text_name(s, field, Self::MAX_NAME_LEN)
    }

    /// Whether it can be restored from.
    pub fn is_usable(&self) -> bool {
        self.status == SnapshotStatus::Ready && self.deleted_at.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_snapshots_name_their_image_and_blob() {
        let s = Snapshot::new(
            AccountId::generate(),
            SandboxId::generate(),
            None,
            SnapshotKind::User,
            Utc::now(),
        );
        assert_eq!(s.name, s.id.as_str());
        assert_eq!(s.image_ref, format!("stockade-snapshot:{}", s.id));
        assert_eq!(
            Snapshot::blob_key_for(&s.id),
            format!("snapshots/{}/workspace.tar", s.id)
        );
        assert_eq!(s.status, SnapshotStatus::Creating);
        assert!(!s.is_usable());
    }

    #[test]
    fn names_and_statuses_parse() {
        assert_eq!(Snapshot::parse_name(" v1 ", "name").unwrap(), "v1");
        assert_eq!(Snapshot::parse_name("", "name").unwrap_err().field, "name");
        assert!(Snapshot::parse_name(&"x".repeat(129), "name").is_err());
        assert!(Snapshot::parse_name("a\nb", "name").is_err());
        for st in SnapshotStatus::ALL {
            assert_eq!(SnapshotStatus::parse(st.as_str()).unwrap(), st);
        }
        assert_eq!(
            SnapshotStatus::parse("ready").unwrap(),
            SnapshotStatus::Ready
        );
        assert!(SnapshotStatus::parse("nope").is_err());
        assert_eq!(SnapshotKind::parse("fork").unwrap(), SnapshotKind::Fork);
        assert!(SnapshotKind::parse("x").is_err());
    }
}
