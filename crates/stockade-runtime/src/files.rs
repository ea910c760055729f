//! Files inside a sandbox: what the runtime reports about a path,
//! the byte streams of tar archives in and out, and how file operations fail.

use std::pin::Pin;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::Stream;

use crate::RuntimeError;

/// What kind of filesystem object a path is (`lstat`: a symlink is a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    /// A device, FIFO or socket.
    Other,
}

/// `lstat` of a path inside a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathStat {
    /// The last component (`/` for the root).
    pub name: String,
    pub size: u64,
    /// Permission bits with setuid, setgid and sticky (`0o7777` at most).
    pub mode: u32,
    pub kind: FileKind,
    pub modified_at: Option<DateTime<Utc>>,
    /// For a symlink: the absolute path it finally resolves to, resolved
    /// inside the sandbox (chains followed; it may not exist).
    pub resolved_target: Option<String>,
}

/// A tar archive coming out of a sandbox.
pub type ArchiveStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// A tar archive going into a sandbox. The producer ends it early to abort
/// (the engine then sees a truncated archive) and reports its own error.
pub type ArchiveUpload = Pin<Box<dyn Stream<Item = Bytes> + Send>>;

/// Why a file operation failed. Paths in messages are sandbox paths, never
/// the engine host's.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The path does not exist in the sandbox.
    #[error("no such file or directory in the sandbox: {0}")]
    NotFound(String),
    /// A directory was needed (as a parent, or as an upload target).
    #[error("not a directory: {0}")]
    NotADirectory(String),
    /// A non-recursive delete of a directory that has entries.
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    /// The sandbox's filesystem refused (read-only, permissions).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The operation needs a running sandbox (delete runs `rm` inside it).
    #[error("the sandbox is not running")]
    NotRunning,
    /// The engine refused an archive's own content (a hard link to
    /// nothing, a path it cannot make): why, in its words.
    #[error("the archive cannot be unpacked in the sandbox: {0}")]
    ArchiveRefused(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

pub type FsResult<T> = Result<T, FsError>;

/// Go's `os.FileMode` bits, as Docker's `X-Docker-Container-Path-Stat` has them.
pub(crate) mod go_mode {
    pub const DIR: u32 = 1 << 31;
    pub const SYMLINK: u32 = 1 << 27;
    pub const DEVICE: u32 = 1 << 26;
    pub const NAMED_PIPE: u32 = 1 << 25;
    pub const SOCKET: u32 = 1 << 24;
    pub const SETUID: u32 = 1 << 23;
    pub const SETGID: u32 = 1 << 22;
    pub const CHAR_DEVICE: u32 = 1 << 21;
    pub const STICKY: u32 = 1 << 20;
    pub const IRREGULAR: u32 = 1 << 19;
}

/// Splits a Go `os.FileMode` into the kind and Unix permission bits.
pub(crate) fn from_go_mode(mode: u32) -> (FileKind, u32) {
    use go_mode::*;
    let kind = if mode & DIR != 0 {
        FileKind::Dir
    } else if mode & SYMLINK != 0 {
        FileKind::Symlink
    } else if mode & (DEVICE | NAMED_PIPE | SOCKET | CHAR_DEVICE | IRREGULAR) != 0 {
        FileKind::Other
    } else {
        FileKind::File
    };
    let mut perm = mode & 0o777;
    if mode & SETUID != 0 {
        perm |= 0o4000;
    }
    if mode & SETGID != 0 {
        perm |= 0o2000;
    }
    if mode & STICKY != 0 {
        perm |= 0o1000;
    }
    (kind, perm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_modes_split() {
        // Values as Docker 20.10 reports them.
        assert_eq!(from_go_mode(2147484141), (FileKind::Dir, 0o755));
        assert_eq!(from_go_mode(134218239), (FileKind::Symlink, 0o777));
        assert_eq!(from_go_mode(420), (FileKind::File, 0o644));
        assert_eq!(from_go_mode(33554852), (FileKind::Other, 0o644));
        assert_eq!(
            from_go_mode(go_mode::DIR | go_mode::STICKY | 0o777),
            (FileKind::Dir, 0o1777)
        );
        assert_eq!(
            from_go_mode(go_mode::SETUID | 0o755),
            (FileKind::File, 0o4755)
        );
    }
}
