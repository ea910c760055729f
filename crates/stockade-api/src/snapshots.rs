//! Request and response types of snapshots, fork, create sources and
//! uploads.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use stockade_core::{human_bytes, Snapshot};
use utoipa::ToSchema;

/// What a new sandbox's `/workspace` (and, for snapshots and sandboxes, its
/// root filesystem) starts from: the `source` of `POST /sandbox`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(
    tag = "type",
    rename_all = "lowercase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum SandboxSource {
    /// Cloned into `/workspace` by the server (the image needs no git):
    /// `https://`, `http://` or `git://` URLs.
    Git {
        url: String,
        /// Branch, tag or commit; default: the remote's default branch.
        #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
        git_ref: Option<String>,
    },
    /// A tar archive (plain, gzip, bzip2 or xz) downloaded by the server and
    /// unpacked into `/workspace`.
    Tarball { url: String },
    /// An archive uploaded with `POST /uploads`; used once.
    Upload { upload_id: String },
    /// A snapshot of the caller's: its root filesystem and `/workspace`.
    Snapshot { snapshot_id: String },
    /// A fork of one of the caller's sandboxes (as `POST /sandbox/{id}/fork`).
    Sandbox { sandbox_id: String },
}

/// Where a sandbox's filesystem came from (`origin` in its details).
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxOrigin {
    /// `snapshot`: made from one of the account's snapshots; `fork`: a copy
    /// of another sandbox (through the fork's own internal snapshot).
    pub kind: String,
    /// The snapshot whose image it runs.
    pub snapshot_id: String,
    /// The snapshot's name (`snapshot` only: a fork's snapshot has none).
    pub snapshot_name: Option<String>,
    /// The sandbox the snapshot was taken from.
    pub sandbox_id: String,
    /// That sandbox's name, when it can still be read.
    pub sandbox_name: Option<String>,
}

/// `POST /api/v1/sandbox/{id}/snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSnapshotRequest {
    /// Defaults to the snapshot's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `POST /api/v1/sandbox/{id}/fork`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkSandboxRequest {
    /// Name of the new sandbox; defaults to its id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A snapshot as the API shows it.
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotResponse {
    pub id: String,
    pub name: String,
    pub account_id: String,
    /// The sandbox it was taken from.
    pub source_sandbox_id: String,
    /// CREATING, READY, DELETING or DELETED.
    pub status: String,
    /// The image holding the root-filesystem changes.
    pub image: String,
    /// Size of the `/workspace` archive in bytes.
    pub workspace_bytes: Option<u64>,
    /// The same, human-readable.
    pub workspace_size: Option<String>,
    /// Key of the `/workspace` archive in the object store.
    pub workspace_key: Option<String>,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

impl From<&Snapshot> for SnapshotResponse {
    fn from(s: &Snapshot) -> Self {
        Self {
            id: s.id.to_string(),
            name: s.name.clone(),
            account_id: s.account_id.to_string(),
            source_sandbox_id: s.source_sandbox_id.to_string(),
            status: s.status.as_str().to_owned(),
            image: s.image_ref.clone(),
            workspace_bytes: s.workspace_bytes,
            workspace_size: s.workspace_bytes.map(human_bytes),
            workspace_key: s.blob_key.clone(),
            created_at: s.created_at,
            deleted_at: s.deleted_at,
        }
    }
}

/// `GET /api/v1/snapshots`, `GET /api/v1/sandbox/{id}/snapshots`: newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ListSnapshotsResponse {
    pub snapshots: Vec<SnapshotResponse>,
}

/// `POST /api/v1/uploads`: an archive stored for one later create.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UploadResponse {
    /// Use as `source: {"type":"upload","uploadId":…}`.
    pub upload_id: String,
    pub bytes: u64,
    /// After this the upload is discarded.
    pub expires_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_from_the_documented_json() {
        let git: SandboxSource =
            serde_json::from_str(r#"{"type":"git","url":"https://h/r.git","ref":"main"}"#).unwrap();
        assert_eq!(
            git,
            SandboxSource::Git {
                url: "https://h/r.git".into(),
                git_ref: Some("main".into())
            }
        );
        let snap: SandboxSource =
            serde_json::from_str(r#"{"type":"snapshot","snapshotId":"abc"}"#).unwrap();
        assert_eq!(
            snap,
            SandboxSource::Snapshot {
                snapshot_id: "abc".into()
            }
        );
        let up: SandboxSource =
            serde_json::from_str(r#"{"type":"upload","uploadId":"u"}"#).unwrap();
        assert!(matches!(up, SandboxSource::Upload { .. }));
        let sb: SandboxSource =
            serde_json::from_str(r#"{"type":"sandbox","sandboxId":"s"}"#).unwrap();
        assert!(matches!(sb, SandboxSource::Sandbox { .. }));
        // Round trip keeps the wire names.
        let back = serde_json::to_value(&git).unwrap();
        assert_eq!(back["ref"], "main");
        assert_eq!(back["type"], "git");
        for bad in [
            r#"{"type":"git"}"#,
            r#"{"type":"ftp","url":"x"}"#,
            r#"{"type":"tarball","url":"x","extra":1}"#,
            r#"{"url":"x"}"#,
        ] {
            assert!(serde_json::from_str::<SandboxSource>(bad).is_err(), "{bad}");
        }
    }
}
