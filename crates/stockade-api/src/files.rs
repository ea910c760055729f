//! Files inside a sandbox: directory listings, path metadata and
//! the results of writes and archive uploads.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use utoipa::ToSchema;

/// What a path is (a symlink is reported as a symlink, not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileType {
    File,
    Dir,
    Symlink,
    /// A device, FIFO or socket.
    Other,
}

/// One file, directory or link inside a sandbox.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    /// The last component (`/` for the root).
    pub name: String,
    /// Absolute path inside the sandbox.
    pub path: String,
    #[serde(rename = "type")]
    pub file_type: FileType,
    /// Bytes (for a directory, what the filesystem reports or 0).
    pub size: u64,
    /// Permission bits in octal, e.g. `0644`, `4755`.
    #[schema(example = "0644")]
    pub mode: String,
    pub modified_at: Option<DateTime<Utc>>,
    /// For a symlink: its target as stored (what `readlink` prints).
    pub link_target: Option<String>,
}

/// `GET /sandbox/{id}/files?path=<a directory>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryListing {
    /// The directory, absolute.
    pub path: String,
    /// Its entries (not recursive), sorted by name.
    pub entries: Vec<FileEntry>,
    /// More entries exist than a listing returns.
    pub truncated: bool,
}

/// `PUT|POST /sandbox/{id}/files/archive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveUploadResponse {
    /// The directory the archive was unpacked into, absolute.
    pub path: String,
    /// Files, directories and links unpacked.
    pub entries: u64,
    /// Bytes of file content unpacked.
    pub bytes: u64,
}

/// Raw bytes (a file's content, a tar archive), as the OpenAPI document
/// describes request and response bodies that are not JSON.
#[derive(Debug, Clone, ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct Binary(pub Vec<u8>);

/// `POST /sandbox/{id}/files/move`: move or rename inside the sandbox
/// (relative paths are under `/workspace`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MoveRequest {
    #[schema(example = "notes.txt")]
    pub from: String,
    #[schema(example = "archive/notes.txt")]
    pub to: String,
}

/// Formats permission bits as `0644` / `4755`.
pub fn format_mode(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_serialise_as_documented() {
        let e = FileEntry {
            name: "a".into(),
            path: "/workspace/a".into(),
            file_type: FileType::Symlink,
            size: 3,
            mode: format_mode(0o777),
            modified_at: None,
            link_target: Some("b".into()),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "symlink");
        assert_eq!(v["mode"], "0777");
        assert_eq!(v["linkTarget"], "b");
        assert!(v.get("modifiedAt").is_none());
        assert_eq!(format_mode(0o4755), "4755");
        assert_eq!(format_mode(0o644), "0644");
    }
}
