//! A shared volume's files, every operation confined beneath the volume's
//! root. Its files may have been planted by hostile sandboxes (symbolic
//! links to `/`, fifos, device nodes), so a path is walked one component
//! at a time from a descriptor of the root with `openat(O_NOFOLLOW)`: no
//! symbolic link is followed in any component, `..` is refused before any
//! lookup, and only regular files are ever read or written. The HTTP routes
//! over it are in `server/volume.rs`; the types here are also the client's.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Dir, FileType, Gid, Mode, OFlags, Stat, Uid};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Longest request path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Deepest listing.
pub const MAX_LIST_DEPTH: u32 = 32;
/// Most entries one listing returns.
pub const MAX_LIST_ENTRIES: usize = 100_000;
/// The mode of a created directory (and of the parents created with it).
pub const DEFAULT_DIR_MODE: u32 = 0o755;
/// The mode of a written file.
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// The highest mode a caller may set: permission bits and the sticky bit.
/// Set-user-ID and set-group-ID are refused, so a file a sandbox planted
/// cannot be made a set-user-ID program through the agent.
pub const MAX_MODE: u32 = 0o1777;
/// The name prefix of a file being written, renamed over its target once
/// complete.
pub const TEMP_PREFIX: &str = ".stockade-tmp-";

/// Most directory descriptors a tree walk (usage, removal) keeps open;
/// deeper walks close the shallowest ones and reopen them by name.
const MAX_OPEN_DIRS: usize = 48;
/// Deepest tree a walk enters.
const MAX_WALK_DEPTH: usize = 1 << 16;
/// How often a removal reads a directory again when entries keep appearing
/// in it (a sandbox writing into it meanwhile) before it gives up.
const MAX_PASSES: u32 = 8;

/// How every directory is opened: for reading its entries and as the base
/// of the next lookup, never through a symbolic link.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// What a volume operation fails with; each kind has a stable code
/// ([`VolumeErrorKind::as_str`]) the HTTP layer sends.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The path is malformed (empty, NUL, `..`, too long) or names what the
    /// operation cannot act on (the root for a removal).
    #[error("{0}")]
    BadPath(String),
    /// A parameter other than the path is invalid.
    #[error("{0}")]
    BadRequest(String),
    /// A component of the path is a symbolic link.
    #[error("{0}")]
    Symlink(String),
    /// The entry is not a regular file (a directory, fifo, socket, device).
    #[error("{0}")]
    NotAFile(String),
    /// A component that must be a directory is not one.
    #[error("{0}")]
    NotADirectory(String),
    /// The path or one of its parents does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The entry exists already.
    #[error("{0}")]
    Exists(String),
    /// A listing has more entries than it may return.
    #[error("{0}")]
    TooMany(String),
    /// Any other failure of the filesystem.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// The kinds of [`VolumeError`], as their codes travel over HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VolumeErrorKind {
    BadPath,
    BadRequest,
    Symlink,
    NotAFile,
    NotADirectory,
    NotFound,
    Exists,
    TooMany,
    Io,
}

impl VolumeErrorKind {
    const ALL: [VolumeErrorKind; 9] = [
        VolumeErrorKind::BadPath,
        VolumeErrorKind::BadRequest,
        VolumeErrorKind::Symlink,
        VolumeErrorKind::NotAFile,
        VolumeErrorKind::NotADirectory,
        VolumeErrorKind::NotFound,
        VolumeErrorKind::Exists,
        VolumeErrorKind::TooMany,
        VolumeErrorKind::Io,
    ];

    /// The code of the kind in an error body.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeErrorKind::BadPath => "bad_path",
            VolumeErrorKind::BadRequest => "bad_request",
            VolumeErrorKind::Symlink => "symlink",
            VolumeErrorKind::NotAFile => "not_a_file",
            VolumeErrorKind::NotADirectory => "not_a_directory",
            VolumeErrorKind::NotFound => "not_found",
            VolumeErrorKind::Exists => "exists",
            VolumeErrorKind::TooMany => "too_many",
            VolumeErrorKind::Io => "io",
        }
    }

    /// The kind of a code; `None` for a code this version does not know.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == code)
    }
}

impl VolumeError {
    pub fn kind(&self) -> VolumeErrorKind {
        match self {
            VolumeError::BadPath(_) => VolumeErrorKind::BadPath,
            VolumeError::BadRequest(_) => VolumeErrorKind::BadRequest,
            VolumeError::Symlink(_) => VolumeErrorKind::Symlink,
            VolumeError::NotAFile(_) => VolumeErrorKind::NotAFile,
            VolumeError::NotADirectory(_) => VolumeErrorKind::NotADirectory,
            VolumeError::NotFound(_) => VolumeErrorKind::NotFound,
            VolumeError::Exists(_) => VolumeErrorKind::Exists,
            VolumeError::TooMany(_) => VolumeErrorKind::TooMany,
            VolumeError::Io { .. } => VolumeErrorKind::Io,
        }
    }

    /// A failure of the filesystem while doing `what`.
    pub fn io(what: impl Into<String>, source: impl Into<std::io::Error>) -> Self {
        VolumeError::Io {
            what: what.into(),
            source: source.into(),
        }
    }

    fn symlink(at: &str) -> Self {
        VolumeError::Symlink(format!(
            "{at} is a symbolic link: paths in the volume never follow symbolic links"
        ))
    }

    fn not_found(at: &str) -> Self {
        VolumeError::NotFound(format!("{at} does not exist in the volume"))
    }

    fn not_a_directory(at: &str) -> Self {
        VolumeError::NotADirectory(format!("{at} is not a directory"))
    }
}

/// A path inside the volume, written as an absolute path (`/a/b.txt`, `/`
/// for the root): its components, none of them empty, `.` or `..`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolPath {
    parts: Vec<String>,
}

impl VolPath {
    /// The volume's root.
    pub fn root() -> Self {
        VolPath { parts: Vec::new() }
    }

    /// Checks a request's path: it starts with `/`, holds no NUL byte and
    /// no `..` component, and is at most [`MAX_PATH_BYTES`] long; empty and
    /// `.` components are dropped.
    pub fn parse(raw: &str) -> Result<Self, VolumeError> {
        if raw.is_empty() {
            return Err(VolumeError::BadPath(
                "the path is empty: give an absolute path in the volume, e.g. /a/b.txt (/ is its root)"
                    .into(),
            ));
        }
        if raw.len() > MAX_PATH_BYTES {
            return Err(VolumeError::BadPath(format!(
                "the path is {} bytes long; at most {MAX_PATH_BYTES} are allowed",
                raw.len()
            )));
        }
        if raw.contains('\0') {
            return Err(VolumeError::BadPath(format!(
                "the path {raw:?} contains a NUL byte"
            )));
        }
        if !raw.starts_with('/') {
            return Err(VolumeError::BadPath(format!(
                "the path {raw:?} must be absolute within the volume, e.g. /{raw}"
            )));
        }
        let mut parts = Vec::new();
        for part in raw.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    return Err(VolumeError::BadPath(format!(
                        "the path {raw:?} contains `..`: name the entry without it"
                    )))
                }
                p => parts.push(p.to_owned()),
            }
        }
        Ok(VolPath { parts })
    }

    pub fn is_root(&self) -> bool {
        self.parts.is_empty()
    }

    /// The last component (`""` for the root).
    pub fn name(&self) -> &str {
        self.parts.last().map_or("", String::as_str)
    }

    /// The components of the parent directory.
    fn parent(&self) -> &[String] {
        &self.parts[..self.parts.len().saturating_sub(1)]
    }
}

impl std::fmt::Display for VolPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&display(&self.parts))
    }
}

/// The path of some components, as a request writes it.
fn display(parts: &[String]) -> String {
    if parts.is_empty() {
        "/".to_owned()
    } else {
        parts.iter().fold(String::new(), |mut s, p| {
            s.push('/');
            s.push_str(p);
            s
        })
    }
}

/// The kind of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeEntryType {
    File,
    Directory,
    Symlink,
    /// A fifo, socket or device (or a kind a newer agent reports).
    #[serde(other)]
    Unknown,
}

/// One entry of the volume, as stat (without following it) sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEntry {
    /// Its name (`""` for the root).
    pub name: String,
    /// Its path in the volume (`/` for the root).
    pub path: String,
    #[serde(rename = "type")]
    pub kind: VolumeEntryType,
    pub size: u64,
    /// Its permission bits with set-user-ID, set-group-ID and sticky
    /// (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Access, modification and status change times, RFC 3339 in UTC with
    /// nanoseconds.
    pub atime: String,
    pub mtime: String,
    pub ctime: String,
    /// A symbolic link's target, as written in the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// Ownership and mode to give an entry; what is `None` stays as it is
/// (or takes the default on creation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeAttrs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

impl VolumeAttrs {
    /// Refuses ids chown would read as "unchanged" and modes above
    /// [`MAX_MODE`].
    pub fn check(&self) -> Result<(), VolumeError> {
        for (name, id) in [("uid", self.uid), ("gid", self.gid)] {
            if id == Some(u32::MAX) {
                return Err(VolumeError::BadRequest(format!(
                    "{name} {} is not a valid id",
                    u32::MAX
                )));
            }
        }
        if let Some(mode) = self.mode {
            if mode > MAX_MODE {
                return Err(VolumeError::BadRequest(format!(
                    "mode {mode:#o} is not allowed: give permission bits and at most the sticky bit \
                     (up to {MAX_MODE:#o}, e.g. 420 for 0o644); set-user-ID and set-group-ID are refused"
                )));
            }
        }
        Ok(())
    }

    fn owner(&self) -> (Option<Uid>, Option<Gid>) {
        (self.uid.map(Uid::from_raw), self.gid.map(Gid::from_raw))
    }

    fn has_owner(&self) -> bool {
        self.uid.is_some() || self.gid.is_some()
    }
}

/// How much the volume holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeUsage {
    /// Bytes allocated on disk (`st_blocks * 512`) to the root and
    /// everything beneath it, a file with several links counted once.
    pub bytes: u64,
    /// Entries of every kind beneath the root (files, directories,
    /// symbolic links, special files), the root itself not counted.
    pub files: u64,
}

/// A volume mounted at a directory; every operation opens the directory
/// afresh and stays beneath it.
#[derive(Clone, Debug)]
pub struct Volume {
    root: Arc<Path>,
}

/// A file being written: a temporary file beside its target, renamed over
/// it by [`NewFile::commit`] and removed when dropped uncommitted.
pub struct NewFile {
    dir: OwnedFd,
    temp: String,
    path: VolPath,
    file: std::fs::File,
    committed: bool,
}

impl NewFile {
    /// Appends bytes.
    pub fn write(&mut self, data: &[u8]) -> Result<(), VolumeError> {
        self.file
            .write_all(data)
            .map_err(|e| VolumeError::io(format!("writing {}", self.path), e))
    }

    /// Puts the complete file in place of its target, atomically: a reader
    /// sees the old file or the new one, never part of it.
    pub fn commit(mut self) -> Result<VolumeEntry, VolumeError> {
        self.file
            .sync_data()
            .map_err(|e| VolumeError::io(format!("writing {}", self.path), e))?;
        let name = self.path.name();
        match rustix::fs::renameat(&self.dir, self.temp.as_str(), &self.dir, name) {
            Ok(()) => {}
            Err(Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST) => {
                return Err(VolumeError::NotAFile(format!(
                    "{} is a directory; a file cannot replace it",
                    self.path
                )))
            }
            Err(e) => return Err(VolumeError::io(format!("writing {}", self.path), e)),
        }
        self.committed = true;
        let st = rustix::fs::fstat(&self.file)
            .map_err(|e| VolumeError::io(format!("reading the status of {}", self.path), e))?;
        Ok(entry_of(&st, name.to_owned(), self.path.to_string(), None))
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = rustix::fs::unlinkat(&self.dir, self.temp.as_str(), AtFlags::empty());
        }
    }
}

impl Volume {
    /// The volume at `root` (an absolute directory of the container).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Volume {
            root: Arc::from(root.into()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn open_root(&self) -> Result<OwnedFd, VolumeError> {
        rustix::fs::open(
            &*self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            VolumeError::io(
                format!("opening the volume's root {}", self.root.display()),
                e,
            )
        })
    }

    /// The entry at a path, not following it.
    pub fn stat(&self, path: &VolPath) -> Result<VolumeEntry, VolumeError> {
        let root = self.open_root()?;
        if path.is_root() {
            return root_entry(&root);
        }
        let dir = open_dir(&root, path.parent())?;
        entry_at(&dir, path)
    }

    /// The entries beneath a directory to `depth` levels (1: its own
    /// entries), sorted by name within each directory, never descending
    /// into a symbolic link.
    pub fn list(&self, path: &VolPath, depth: u32) -> Result<Vec<VolumeEntry>, VolumeError> {
        if !(1..=MAX_LIST_DEPTH).contains(&depth) {
            return Err(VolumeError::BadRequest(format!(
                "depth {depth} is out of range: give 1 to {MAX_LIST_DEPTH}"
            )));
        }
        let root = self.open_root()?;
        let dir = open_dir(&root, &path.parts)?;
        let mut out = Vec::new();
        list_into(dir, &path.to_string(), 1, depth, &mut out)?;
        Ok(out)
    }

    /// Creates a directory with `attrs` (mode default 0o755). Without
    /// `parents` a missing parent is `NotFound` and an existing entry
    /// `Exists`; with it the missing parents are created (mode 0o755, the
    /// owner of `attrs`) and an existing directory is answered as it is.
    pub fn mkdir(
        &self,
        path: &VolPath,
        parents: bool,
        attrs: &VolumeAttrs,
    ) -> Result<VolumeEntry, VolumeError> {
        attrs.check()?;
        let root = self.open_root()?;
        if path.is_root() {
            return if parents {
                root_entry(&root)
            } else {
                Err(VolumeError::Exists("/ (the volume's root) exists".into()))
            };
        }
        let dir = if parents {
            make_parents(&root, path.parent(), attrs)?
        } else {
            open_dir(&root, path.parent())?
        };
        let mode = attrs.mode.unwrap_or(DEFAULT_DIR_MODE);
        if let Some(fd) = make_dir(&dir, &path.parts, mode, attrs)? {
            let st = rustix::fs::fstat(&fd)
                .map_err(|e| VolumeError::io(format!("reading the status of {path}"), e))?;
            return Ok(entry_of(
                &st,
                path.name().to_owned(),
                path.to_string(),
                None,
            ));
        }
        let at = path.to_string();
        let st = lstat(&dir, path.name(), &at)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory if parents => entry_at(&dir, path),
            FileType::Directory => Err(VolumeError::Exists(format!("{at} exists already"))),
            FileType::Symlink => Err(VolumeError::symlink(&at)),
            _ => Err(VolumeError::Exists(format!(
                "{at} exists and is not a directory"
            ))),
        }
    }

    /// Opens a regular file for reading: the file and its size. Anything
    /// else (a symbolic link, directory, fifo, socket or device) is refused
    /// before it is opened, so opening never blocks or touches a device.
    pub fn open_file(&self, path: &VolPath) -> Result<(std::fs::File, u64), VolumeError> {
        if path.is_root() {
            return Err(VolumeError::NotAFile(
                "/ is the volume's root directory, not a file".into(),
            ));
        }
        let root = self.open_root()?;
        let dir = open_dir(&root, path.parent())?;
        let at = path.to_string();
        let st = lstat(&dir, path.name(), &at)?;
        require_regular(&st, &at)?;
        let fd = rustix::fs::openat(
            &dir,
            path.name(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::LOOP => VolumeError::symlink(&at),
            Errno::NOENT => VolumeError::not_found(&at),
            e => VolumeError::io(format!("opening {at}"), e),
        })?;
        // It may have been replaced between the look and the open.
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| VolumeError::io(format!("reading the status of {at}"), e))?;
        require_regular(&st, &at)?;
        rustix::fs::fcntl_setfl(&fd, OFlags::empty())
            .map_err(|e| VolumeError::io(format!("opening {at}"), e))?;
        Ok((std::fs::File::from(fd), size_of(&st)))
    }

    /// Starts writing a regular file (mode default 0o644, the owner of
    /// `attrs`): the bytes go to a temporary file in the same directory,
    /// which [`NewFile::commit`] renames over the target. An existing
    /// symbolic link or non-regular entry at the path is refused; missing
    /// parents are `NotFound` unless `parents`.
    pub fn create_file(
        &self,
        path: &VolPath,
        parents: bool,
        attrs: &VolumeAttrs,
    ) -> Result<NewFile, VolumeError> {
        attrs.check()?;
        if path.is_root() {
            return Err(VolumeError::NotAFile(
                "/ is the volume's root directory; a file cannot replace it".into(),
            ));
        }
        let root = self.open_root()?;
        let dir = if parents {
            make_parents(&root, path.parent(), attrs)?
        } else {
            open_dir(&root, path.parent())?
        };
        let at = path.to_string();
        match rustix::fs::statat(&dir, path.name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => require_regular(&st, &at)?,
            Err(Errno::NOENT) => {}
            Err(Errno::NAMETOOLONG) => return Err(name_too_long(&at)),
            Err(e) => return Err(VolumeError::io(format!("reading the status of {at}"), e)),
        }
        let temp = format!(
            "{TEMP_PREFIX}{}",
            crate::kernel::wire::hex(&crate::kernel::random_bytes(12))
        );
        let fd = rustix::fs::openat(
            &dir,
            temp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| VolumeError::io(format!("creating a file beside {at}"), e))?;
        let file = NewFile {
            dir,
            temp,
            path: path.clone(),
            file: std::fs::File::from(fd),
            committed: false,
        };
        if attrs.has_owner() {
            let (uid, gid) = attrs.owner();
            rustix::fs::fchown(&file.file, uid, gid)
                .map_err(|e| VolumeError::io(format!("giving {at} its owner"), e))?;
        }
        rustix::fs::fchmod(
            &file.file,
            Mode::from_raw_mode(attrs.mode.unwrap_or(DEFAULT_FILE_MODE)),
        )
        .map_err(|e| VolumeError::io(format!("setting the mode of {at}"), e))?;
        Ok(file)
    }

    /// Removes an entry; a directory with everything beneath it. A
    /// symbolic link is removed itself, never followed, at any depth.
    pub fn remove(&self, path: &VolPath) -> Result<(), VolumeError> {
        if path.is_root() {
            return Err(VolumeError::BadPath(
                "the volume's root cannot be removed; remove the entries in it".into(),
            ));
        }
        let root = self.open_root()?;
        let dir = open_dir(&root, path.parent())?;
        let at = path.to_string();
        let st = lstat(&dir, path.name(), &at)?;
        let name = CString::new(path.name()).expect("no NUL in a parsed path");
        let removed = if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            remove_tree(dir.as_fd(), &name)
        } else {
            match rustix::fs::unlinkat(&dir, name.as_c_str(), AtFlags::empty()) {
                // It became a directory since it was looked at.
                Err(Errno::ISDIR) => remove_tree(dir.as_fd(), &name),
                r => r.map_err(Into::into),
            }
        };
        match removed {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(VolumeError::not_found(&at)),
            Err(e) => Err(VolumeError::io(format!("removing {at}"), e)),
        }
    }

    /// Renames an entry (itself, never what a symbolic link points to);
    /// an existing entry at `to` is replaced as rename(2) does.
    pub fn rename(&self, from: &VolPath, to: &VolPath) -> Result<VolumeEntry, VolumeError> {
        if from.is_root() || to.is_root() {
            return Err(VolumeError::BadPath(
                "the volume's root cannot be renamed or replaced".into(),
            ));
        }
        let root = self.open_root()?;
        let from_dir = open_dir(&root, from.parent())?;
        let to_dir = open_dir(&root, to.parent())?;
        lstat(&from_dir, from.name(), &from.to_string())?;
        rustix::fs::renameat(&from_dir, from.name(), &to_dir, to.name()).map_err(|e| match e {
            Errno::NOENT => VolumeError::not_found(&from.to_string()),
            Errno::NOTEMPTY | Errno::EXIST => {
                VolumeError::Exists(format!("{to} is a directory that is not empty"))
            }
            Errno::ISDIR => VolumeError::NotAFile(format!(
                "{to} is a directory and {from} is not; it cannot replace it"
            )),
            Errno::NOTDIR => VolumeError::NotADirectory(format!(
                "{from} is a directory and {to} is not; it cannot replace it"
            )),
            Errno::INVAL => VolumeError::BadPath(format!("{to} is inside {from}")),
            Errno::NAMETOOLONG => name_too_long(&to.to_string()),
            e => VolumeError::io(format!("renaming {from} to {to}"), e),
        })?;
        entry_at(&to_dir, to)
    }

    /// Changes an entry's owner (of a symbolic link: the link's own) and
    /// mode (not of a symbolic link, which has none of its own).
    pub fn set_attrs(
        &self,
        path: &VolPath,
        attrs: &VolumeAttrs,
    ) -> Result<VolumeEntry, VolumeError> {
        attrs.check()?;
        let root = self.open_root()?;
        let at = path.to_string();
        if path.is_root() {
            if attrs.has_owner() {
                let (uid, gid) = attrs.owner();
                rustix::fs::fchown(&root, uid, gid)
                    .map_err(|e| VolumeError::io(format!("giving {at} its owner"), e))?;
            }
            if let Some(mode) = attrs.mode {
                rustix::fs::fchmod(&root, Mode::from_raw_mode(mode))
                    .map_err(|e| VolumeError::io(format!("setting the mode of {at}"), e))?;
            }
            return root_entry(&root);
        }
        let dir = open_dir(&root, path.parent())?;
        let st = lstat(&dir, path.name(), &at)?;
        if attrs.has_owner() {
            let (uid, gid) = attrs.owner();
            rustix::fs::chownat(&dir, path.name(), uid, gid, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| VolumeError::io(format!("giving {at} its owner"), e))?;
        }
        if let Some(mode) = attrs.mode {
            if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                chmod_nofollow(&dir, path.name(), mode, &at)?;
            }
        }
        entry_at(&dir, path)
    }

    /// The space the volume's entries take and how many there are.
    pub fn usage(&self) -> Result<VolumeUsage, VolumeError> {
        let root = self.open_root()?;
        let what = |e: std::io::Error| VolumeError::io("measuring the volume", e);
        let st = rustix::fs::fstat(&root).map_err(|e| what(e.into()))?;
        let mut usage = VolumeUsage {
            bytes: allocated(&st),
            files: 0,
        };
        let mut linked = HashSet::new();
        let mut walk = Walk::new(root).map_err(what)?;
        loop {
            let Some((name, st)) = walk.next().map_err(what)? else {
                if walk.leave().is_none() {
                    return Ok(usage);
                }
                continue;
            };
            usage.files += 1;
            let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            #[allow(clippy::unnecessary_cast)] // the field's width differs between architectures
            let nlink = st.st_nlink as u64;
            if is_dir || nlink < 2 || linked.insert((st.st_dev, st.st_ino)) {
                usage.bytes += allocated(&st);
            }
            if is_dir {
                walk.enter(&name).map_err(what)?;
            }
        }
    }
}

/// Opens the directory at `parts` below `root`, refusing a symbolic link
/// or a non-directory in any component.
fn open_dir(root: &OwnedFd, parts: &[String]) -> Result<OwnedFd, VolumeError> {
    let mut cur = rustix::fs::openat(root, c".", DIR_FLAGS, Mode::empty())
        .map_err(|e| VolumeError::io("opening the volume's root", e))?;
    for (i, part) in parts.iter().enumerate() {
        cur = match rustix::fs::openat(&cur, part.as_str(), DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => return Err(lookup_error(&cur, part, &display(&parts[..=i]), e)),
        };
    }
    Ok(cur)
}

/// Why opening `name` in `dir` as a directory failed, in the volume's terms.
fn lookup_error(dir: &OwnedFd, name: &str, at: &str, e: Errno) -> VolumeError {
    match e {
        Errno::NOENT => VolumeError::not_found(at),
        Errno::NAMETOOLONG => name_too_long(at),
        Errno::LOOP | Errno::NOTDIR => {
            match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                    FileType::Symlink => VolumeError::symlink(at),
                    FileType::Directory => VolumeError::io(format!("opening {at}"), e),
                    _ => VolumeError::not_a_directory(at),
                },
                Err(Errno::NOENT) => VolumeError::not_found(at),
                Err(e) => VolumeError::io(format!("reading the status of {at}"), e),
            }
        }
        e => VolumeError::io(format!("opening {at}"), e),
    }
}

fn name_too_long(at: &str) -> VolumeError {
    VolumeError::BadPath(format!(
        "{at}: a component is longer than the filesystem allows"
    ))
}

/// The status of `name` in `dir` itself (a symbolic link's own).
fn lstat(dir: &OwnedFd, name: &str, at: &str) -> Result<Stat, VolumeError> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| match e {
        Errno::NOENT => VolumeError::not_found(at),
        Errno::NAMETOOLONG => name_too_long(at),
        e => VolumeError::io(format!("reading the status of {at}"), e),
    })
}

fn require_regular(st: &Stat, at: &str) -> Result<(), VolumeError> {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(()),
        FileType::Symlink => Err(VolumeError::symlink(at)),
        FileType::Directory => Err(VolumeError::NotAFile(format!(
            "{at} is a directory, not a regular file"
        ))),
        _ => Err(VolumeError::NotAFile(format!(
            "{at} is a special file (fifo, socket or device), not a regular file"
        ))),
    }
}

/// Opens the directories of `parts` below `root`, creating the missing
/// ones (mode 0o755, owned as `attrs` says).
fn make_parents(
    root: &OwnedFd,
    parts: &[String],
    attrs: &VolumeAttrs,
) -> Result<OwnedFd, VolumeError> {
    let mut cur = rustix::fs::openat(root, c".", DIR_FLAGS, Mode::empty())
        .map_err(|e| VolumeError::io("opening the volume's root", e))?;
    for (i, part) in parts.iter().enumerate() {
        let at = &parts[..=i];
        let opened = match rustix::fs::openat(&cur, part.as_str(), DIR_FLAGS, Mode::empty()) {
            Err(Errno::NOENT) => make_dir(&cur, at, DEFAULT_DIR_MODE, attrs)?,
            r => Some(r.map_err(|e| lookup_error(&cur, part, &display(at), e))?),
        };
        cur = match opened {
            Some(fd) => fd,
            // Another writer created it meanwhile.
            None => rustix::fs::openat(&cur, part.as_str(), DIR_FLAGS, Mode::empty())
                .map_err(|e| lookup_error(&cur, part, &display(at), e))?,
        };
    }
    Ok(cur)
}

/// Creates the directory `parts` (its last component, in `dir`) with
/// exactly `mode` and the owner of `attrs`: the new directory, or `None`
/// when an entry exists there already.
fn make_dir(
    dir: &OwnedFd,
    parts: &[String],
    mode: u32,
    attrs: &VolumeAttrs,
) -> Result<Option<OwnedFd>, VolumeError> {
    let name = parts.last().map_or("", String::as_str);
    let at = display(parts);
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode)) {
        Ok(()) => {}
        Err(Errno::EXIST) => return Ok(None),
        Err(Errno::NOENT) => {
            return Err(VolumeError::not_found(&display(&parts[..parts.len() - 1])))
        }
        Err(Errno::NAMETOOLONG) => return Err(name_too_long(&at)),
        Err(e) => return Err(VolumeError::io(format!("creating {at}"), e)),
    }
    let fd = rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty())
        .map_err(|e| lookup_error(dir, name, &at, e))?;
    if attrs.has_owner() {
        let (uid, gid) = attrs.owner();
        rustix::fs::fchown(&fd, uid, gid)
            .map_err(|e| VolumeError::io(format!("giving {at} its owner"), e))?;
    }
    // mkdir applies the umask; the caller asked for this mode exactly.
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
        .map_err(|e| VolumeError::io(format!("setting the mode of {at}"), e))?;
    Ok(Some(fd))
}

/// Sets the mode of `name` in `dir`, which is not a symbolic link, without
/// following one should it be swapped in meanwhile: the entry is opened
/// with `O_NOFOLLOW` and changed through its descriptor. Linux has no
/// `fchmodat(AT_SYMLINK_NOFOLLOW)`; a regular file or directory is opened
/// for reading, any other entry by `O_PATH` and changed through
/// `/proc/self/fd` (as the C library does), so a fifo or device is never
/// opened.
fn chmod_nofollow(dir: &OwnedFd, name: &str, mode: u32, at: &str) -> Result<(), VolumeError> {
    let failed = |e: std::io::Error| VolumeError::io(format!("setting the mode of {at}"), e);
    let open = |flags: OFlags| {
        rustix::fs::openat(
            dir,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::LOOP => VolumeError::symlink(at),
            Errno::NOENT => VolumeError::not_found(at),
            e => failed(e.into()),
        })
    };
    let handle = open(OFlags::PATH)?;
    let st = rustix::fs::fstat(&handle).map_err(|e| failed(e.into()))?;
    let mode = Mode::from_raw_mode(mode);
    let regular_flags = match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => return Ok(()),
        FileType::RegularFile => OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        FileType::Directory => OFlags::RDONLY | OFlags::DIRECTORY,
        _ => {
            let proc_path = format!("/proc/self/fd/{}", rustix::fd::AsRawFd::as_raw_fd(&handle));
            return rustix::fs::chmod(proc_path.as_str(), mode).map_err(|e| failed(e.into()));
        }
    };
    let fd = open(regular_flags)?;
    let now = rustix::fs::fstat(&fd).map_err(|e| failed(e.into()))?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Err(failed(std::io::Error::other(
            "the entry was replaced while its mode was set",
        )));
    }
    rustix::fs::fchmod(&fd, mode).map_err(|e| failed(e.into()))
}

fn root_entry(root: &OwnedFd) -> Result<VolumeEntry, VolumeError> {
    let st = rustix::fs::fstat(root)
        .map_err(|e| VolumeError::io("reading the status of the volume's root", e))?;
    Ok(entry_of(&st, String::new(), "/".into(), None))
}

/// The entry of `path`, which is in `dir`.
fn entry_at(dir: &OwnedFd, path: &VolPath) -> Result<VolumeEntry, VolumeError> {
    let at = path.to_string();
    let st = lstat(dir, path.name(), &at)?;
    let target = link_target(dir.as_fd(), path.name(), &st);
    Ok(entry_of(&st, path.name().to_owned(), at, target))
}

/// A symbolic link's target; `None` for anything else.
fn link_target<P: rustix::path::Arg>(dir: BorrowedFd<'_>, name: P, st: &Stat) -> Option<String> {
    if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
        return None;
    }
    rustix::fs::readlinkat(dir, name, Vec::new())
        .ok()
        .map(|t| t.to_string_lossy().into_owned())
}

/// The entries of `dir` (at `prefix`) and, below `depth`, of its
/// subdirectories, appended to `out`.
fn list_into(
    dir: OwnedFd,
    prefix: &str,
    level: u32,
    depth: u32,
    out: &mut Vec<VolumeEntry>,
) -> Result<(), VolumeError> {
    let too_many = || {
        VolumeError::TooMany(format!(
            "more than {MAX_LIST_ENTRIES} entries beneath {prefix}: list less deep or a smaller directory"
        ))
    };
    let failed = |e: Errno| VolumeError::io(format!("listing {prefix}"), e);
    let mut reader = Dir::new(dir).map_err(failed)?;
    let mut names = Vec::new();
    while let Some(entry) = reader.read() {
        let entry = entry.map_err(failed)?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if out.len() + names.len() >= MAX_LIST_ENTRIES {
            return Err(too_many());
        }
        names.push(name.to_owned());
    }
    names.sort();
    for name in names {
        let fd = reader.fd().map_err(failed)?;
        let st = match rustix::fs::statat(fd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue, // removed meanwhile
            Err(e) => return Err(failed(e)),
        };
        let shown = name.to_string_lossy();
        let path = if prefix == "/" {
            format!("/{shown}")
        } else {
            format!("{prefix}/{shown}")
        };
        let target = link_target(fd, name.as_c_str(), &st);
        let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        if out.len() >= MAX_LIST_ENTRIES {
            return Err(too_many());
        }
        out.push(entry_of(&st, shown.into_owned(), path.clone(), target));
        if is_dir && level < depth {
            match rustix::fs::openat(fd, name.as_c_str(), DIR_FLAGS, Mode::empty()) {
                Ok(sub) => list_into(sub, &path, level + 1, depth, out)?,
                // Replaced by a symbolic link or removed since it was read.
                Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => {}
                Err(e) => return Err(failed(e)),
            }
        }
    }
    Ok(())
}

/// Removes the directory `name` in `parent` and everything beneath it,
/// never following a symbolic link. Entries that appear meanwhile are
/// removed by reading a directory again, a few times at most.
fn remove_tree(parent: BorrowedFd<'_>, name: &CStr) -> std::io::Result<()> {
    let top = rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty())?;
    let mut walk = Walk::new(top)?;
    loop {
        if let Some((child, st)) = walk.next()? {
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory && walk.enter(&child)? {
                continue;
            }
            match rustix::fs::unlinkat(walk.fd()?, child.as_c_str(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                // It became a directory since it was read: the next pass
                // over this directory enters it.
                Err(Errno::ISDIR) => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let Some(done) = walk.leave() else {
            // The end of the top directory.
            match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => return Ok(()),
                Err(Errno::NOTEMPTY | Errno::EXIST) if walk.top_passes() < MAX_PASSES => {
                    walk.rewind_top();
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        };
        match rustix::fs::unlinkat(walk.fd()?, done.name.as_c_str(), AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(Errno::NOTEMPTY | Errno::EXIST) if done.passes < MAX_PASSES => {
                if !walk.enter_again(&done.name, done.passes + 1)? {
                    // No longer a directory: remove what is there now.
                    match rustix::fs::unlinkat(walk.fd()?, done.name.as_c_str(), AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// One directory of a [`Walk`].
struct Level {
    /// Its name in the directory above (unused for the top).
    name: CString,
    /// Its entry stream, `None` while closed to save descriptors.
    dir: Option<Dir>,
    /// Where the stream was (the cookie of the last entry read), so a
    /// reopened stream resumes there.
    resume: Option<i64>,
    /// How many times the directory has been read from its start.
    passes: u32,
}

/// A depth-first walk of a directory tree that never follows a symbolic
/// link, with at most [`MAX_OPEN_DIRS`] directories open however deep the
/// tree: levels between the top and the deepest ones are closed and
/// reopened by name (from the top, with `O_NOFOLLOW`) when the walk comes
/// back to them. No recursion, so a deep tree cannot exhaust the stack.
struct Walk {
    /// `levels[0]` is the walked directory and stays open; the others
    /// from `open_from` on are open too.
    levels: Vec<Level>,
    open_from: usize,
}

impl Walk {
    fn new(top: OwnedFd) -> std::io::Result<Self> {
        Ok(Walk {
            levels: vec![Level {
                name: c".".to_owned(),
                dir: Some(Dir::new(top)?),
                resume: None,
                passes: 1,
            }],
            open_from: 1,
        })
    }

    /// Opens the current level if it was closed, with the deepest of its
    /// ancestors.
    fn ensure_open(&mut self) -> std::io::Result<()> {
        let current = self.levels.len() - 1;
        if current == 0 || current >= self.open_from {
            return Ok(());
        }
        let start = (current + 1).saturating_sub(MAX_OPEN_DIRS).max(1);
        let mut transient: Option<OwnedFd> = None;
        for k in 1..=current {
            let fd = {
                let parent = match &transient {
                    Some(fd) => fd.as_fd(),
                    None => self.levels[k - 1]
                        .dir
                        .as_ref()
                        .expect("the level above is open")
                        .fd()?,
                };
                rustix::fs::openat(
                    parent,
                    self.levels[k].name.as_c_str(),
                    DIR_FLAGS,
                    Mode::empty(),
                )?
            };
            if k < start {
                transient = Some(fd);
                continue;
            }
            transient = None;
            let mut dir = Dir::new(fd)?;
            if let Some(at) = self.levels[k].resume {
                dir.seek(at)?;
            }
            self.levels[k].dir = Some(dir);
        }
        self.open_from = start;
        Ok(())
    }

    fn current(&mut self) -> std::io::Result<&mut Level> {
        self.ensure_open()?;
        Ok(self.levels.last_mut().expect("the top level stays"))
    }

    /// The descriptor of the current directory.
    fn fd(&mut self) -> std::io::Result<BorrowedFd<'_>> {
        let level = self.current()?;
        Ok(level.dir.as_ref().expect("open").fd()?)
    }

    /// The next entry of the current directory with its own status (not
    /// followed); `None` at the directory's end.
    fn next(&mut self) -> std::io::Result<Option<(CString, Stat)>> {
        let Level { dir, resume, .. } = self.current()?;
        let dir = dir.as_mut().expect("open");
        loop {
            let entry = match dir.read() {
                None => return Ok(None),
                Some(entry) => entry?,
            };
            *resume = Some(entry.offset());
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            match rustix::fs::statat(dir.fd()?, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => return Ok(Some((name.to_owned(), st))),
                Err(Errno::NOENT) => continue, // removed meanwhile
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Descends into the subdirectory `name` of the current directory;
    /// `false` when it is no directory any more (replaced by a symbolic
    /// link or another entry, or removed).
    fn enter(&mut self, name: &CStr) -> std::io::Result<bool> {
        self.enter_again(name, 1)
    }

    /// [`Walk::enter`] for the `passes`th reading of the directory.
    fn enter_again(&mut self, name: &CStr, passes: u32) -> std::io::Result<bool> {
        if self.levels.len() >= MAX_WALK_DEPTH {
            return Err(std::io::Error::other(format!(
                "the tree is deeper than {MAX_WALK_DEPTH} levels"
            )));
        }
        let fd = match rustix::fs::openat(self.fd()?, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        self.levels.push(Level {
            name: name.to_owned(),
            dir: Some(Dir::new(fd)?),
            resume: None,
            passes,
        });
        if self.levels.len() - self.open_from > MAX_OPEN_DIRS {
            self.levels[self.open_from].dir = None;
            self.open_from += 1;
        }
        Ok(true)
    }

    /// Goes back up from the current directory, returning its level;
    /// `None` (staying) at the top.
    fn leave(&mut self) -> Option<Level> {
        if self.levels.len() == 1 {
            return None;
        }
        let level = self.levels.pop();
        self.open_from = self.open_from.min(self.levels.len());
        level
    }

    fn top_passes(&self) -> u32 {
        self.levels[0].passes
    }

    /// Reads the top directory again from its start.
    fn rewind_top(&mut self) {
        let top = &mut self.levels[0];
        if let Some(dir) = top.dir.as_mut() {
            dir.rewind();
        }
        top.resume = None;
        top.passes += 1;
    }
}

/// The bytes a file takes on disk.
#[allow(clippy::unnecessary_cast)] // the field's width differs between architectures
fn allocated(st: &Stat) -> u64 {
    (st.st_blocks as u64).saturating_mul(512)
}

#[allow(clippy::unnecessary_cast)] // the field's width differs between architectures
fn size_of(st: &Stat) -> u64 {
    st.st_size.max(0) as u64
}

/// The entry of a status.
#[allow(clippy::unnecessary_cast)] // the fields' widths differ between architectures
fn entry_of(st: &Stat, name: String, path: String, target: Option<String>) -> VolumeEntry {
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => VolumeEntryType::File,
        FileType::Directory => VolumeEntryType::Directory,
        FileType::Symlink => VolumeEntryType::Symlink,
        _ => VolumeEntryType::Unknown,
    };
    VolumeEntry {
        name,
        path,
        kind,
        size: size_of(st),
        mode: st.st_mode as u32 & 0o7777,
        uid: st.st_uid as u32,
        gid: st.st_gid as u32,
        atime: rfc3339(st.st_atime as i64, st.st_atime_nsec as u32),
        mtime: rfc3339(st.st_mtime as i64, st.st_mtime_nsec as u32),
        ctime: rfc3339(st.st_ctime as i64, st.st_ctime_nsec as u32),
        target,
    }
}

/// A Unix time as RFC 3339 in UTC with nanoseconds
/// (`2026-11-28T17:00:00.123456789Z`).
pub fn rfc3339(secs: i64, nanos: u32) -> String {
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = crate::proto::json::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        nanos.min(999_999_999)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::Duration;

    /// A volume at `<tmp>/vol`, beside a directory `<tmp>/outside` it must
    /// never reach.
    fn volume() -> (tempfile::TempDir, Volume) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("vol")).unwrap();
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret"), "outside").unwrap();
        let vol = Volume::new(tmp.path().join("vol"));
        (tmp, vol)
    }

    fn p(path: &str) -> VolPath {
        VolPath::parse(path).unwrap()
    }

    fn write(
        vol: &Volume,
        path: &str,
        data: &[u8],
        parents: bool,
    ) -> Result<VolumeEntry, VolumeError> {
        let mut file = vol.create_file(&p(path), parents, &VolumeAttrs::default())?;
        file.write(data)?;
        file.commit()
    }

    fn read(vol: &Volume, path: &str) -> Result<Vec<u8>, VolumeError> {
        use std::io::Read as _;
        let (mut file, size) = vol.open_file(&p(path))?;
        let mut out = Vec::new();
        file.read_to_end(&mut out).unwrap();
        assert_eq!(out.len() as u64, size);
        Ok(out)
    }

    fn names(entries: &[VolumeEntry]) -> Vec<&str> {
        entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn paths_are_checked() {
        assert_eq!(p("/").parts, Vec::<String>::new());
        assert!(p("/").is_root());
        assert_eq!(p("//a/./b/").parts, ["a", "b"]);
        assert_eq!(p("/a/b.txt").to_string(), "/a/b.txt");
        for bad in ["", "a/b", "/a/../b", "/..", "/a\0b"] {
            assert_eq!(
                VolPath::parse(bad).unwrap_err().kind(),
                VolumeErrorKind::BadPath,
                "{bad:?}"
            );
        }
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert_eq!(
            VolPath::parse(&long).unwrap_err().kind(),
            VolumeErrorKind::BadPath
        );
        for kind in VolumeErrorKind::ALL {
            assert_eq!(VolumeErrorKind::parse(kind.as_str()), Some(kind));
        }
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            rfc3339(1_700_000_000, 123_456_789),
            "2023-11-14T22:13:20.123456789Z"
        );
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00.000000000Z");
        assert_eq!(rfc3339(-1, 5), "1969-12-31T23:59:59.000000005Z");
    }

    #[test]
    fn files_are_written_read_listed_renamed_and_removed() {
        let (tmp, vol) = volume();
        let made = write(&vol, "/a/b.txt", b"hello", true).unwrap();
        assert_eq!(
            (made.name.as_str(), made.path.as_str(), made.kind, made.size),
            ("b.txt", "/a/b.txt", VolumeEntryType::File, 5)
        );
        assert_eq!(made.mode, DEFAULT_FILE_MODE);
        assert!(
            made.mtime.ends_with('Z') && made.mtime.len() == 30,
            "{}",
            made.mtime
        );
        assert_eq!(read(&vol, "/a/b.txt").unwrap(), b"hello");
        // A second write replaces the file whole; no temporary file stays.
        write(&vol, "/a/b.txt", b"bye", false).unwrap();
        assert_eq!(read(&vol, "/a/b.txt").unwrap(), b"bye");
        let dir = std::fs::read_dir(tmp.path().join("vol/a")).unwrap();
        assert_eq!(dir.count(), 1);

        // A missing parent without `parents`.
        let e = write(&vol, "/x/y.txt", b"", false).unwrap_err();
        assert_eq!(e.kind(), VolumeErrorKind::NotFound, "{e}");
        // A write broken off leaves nothing behind.
        let mut file = vol
            .create_file(&p("/a/c.txt"), false, &VolumeAttrs::default())
            .unwrap();
        file.write(b"partial").unwrap();
        drop(file);
        assert_eq!(
            std::fs::read_dir(tmp.path().join("vol/a")).unwrap().count(),
            1
        );

        let root = vol.stat(&VolPath::root()).unwrap();
        assert_eq!(
            (root.name.as_str(), root.path.as_str(), root.kind),
            ("", "/", VolumeEntryType::Directory)
        );
        assert_eq!(vol.stat(&p("/a")).unwrap().kind, VolumeEntryType::Directory);
        assert_eq!(
            vol.stat(&p("/nope")).unwrap_err().kind(),
            VolumeErrorKind::NotFound
        );

        vol.mkdir(&p("/a/d/e"), true, &VolumeAttrs::default())
            .unwrap();
        write(&vol, "/a/d/e/f", b"1", false).unwrap();
        assert_eq!(names(&vol.list(&VolPath::root(), 1).unwrap()), ["/a"]);
        assert_eq!(names(&vol.list(&p("/a"), 1).unwrap()), ["/a/b.txt", "/a/d"]);
        assert_eq!(
            names(&vol.list(&VolPath::root(), 3).unwrap()),
            ["/a", "/a/b.txt", "/a/d", "/a/d/e"]
        );
        assert_eq!(
            names(&vol.list(&VolPath::root(), MAX_LIST_DEPTH).unwrap()),
            ["/a", "/a/b.txt", "/a/d", "/a/d/e", "/a/d/e/f"]
        );
        for depth in [0, MAX_LIST_DEPTH + 1] {
            assert_eq!(
                vol.list(&VolPath::root(), depth).unwrap_err().kind(),
                VolumeErrorKind::BadRequest
            );
        }
        assert_eq!(
            vol.list(&p("/a/b.txt"), 1).unwrap_err().kind(),
            VolumeErrorKind::NotADirectory
        );
        assert_eq!(
            vol.list(&p("/a/b.txt/x"), 1).unwrap_err().kind(),
            VolumeErrorKind::NotADirectory
        );

        let moved = vol.rename(&p("/a/b.txt"), &p("/a/d/moved")).unwrap();
        assert_eq!(
            (moved.name.as_str(), moved.path.as_str()),
            ("moved", "/a/d/moved")
        );
        assert_eq!(read(&vol, "/a/d/moved").unwrap(), b"bye");
        assert_eq!(
            vol.rename(&p("/a/b.txt"), &p("/z")).unwrap_err().kind(),
            VolumeErrorKind::NotFound
        );
        assert_eq!(
            vol.rename(&p("/a"), &p("/a/d/inside")).unwrap_err().kind(),
            VolumeErrorKind::BadPath
        );
        assert_eq!(
            vol.rename(&VolPath::root(), &p("/z")).unwrap_err().kind(),
            VolumeErrorKind::BadPath
        );

        vol.remove(&p("/a")).unwrap();
        assert!(!tmp.path().join("vol/a").exists());
        assert_eq!(
            vol.remove(&p("/a")).unwrap_err().kind(),
            VolumeErrorKind::NotFound
        );
        assert_eq!(
            vol.remove(&VolPath::root()).unwrap_err().kind(),
            VolumeErrorKind::BadPath
        );
        assert!(tmp.path().join("vol").is_dir());
    }

    #[test]
    fn mkdir_creates_parents_and_reports_what_exists() {
        let (tmp, vol) = volume();
        let none = VolumeAttrs::default();
        assert_eq!(
            vol.mkdir(&p("/a/b"), false, &none).unwrap_err().kind(),
            VolumeErrorKind::NotFound
        );
        let attrs = VolumeAttrs {
            mode: Some(0o700),
            ..Default::default()
        };
        let made = vol.mkdir(&p("/a/b"), true, &attrs).unwrap();
        assert_eq!(
            (made.name.as_str(), made.kind, made.mode),
            ("b", VolumeEntryType::Directory, 0o700)
        );
        // Parents get the default mode, whatever the umask.
        assert_eq!(vol.stat(&p("/a")).unwrap().mode, DEFAULT_DIR_MODE);
        let again = vol.mkdir(&p("/a/b"), false, &none).unwrap_err();
        assert_eq!(again.kind(), VolumeErrorKind::Exists, "{again}");
        assert_eq!(vol.mkdir(&p("/a/b"), true, &none).unwrap().mode, 0o700);
        assert_eq!(
            vol.mkdir(&VolPath::root(), false, &none)
                .unwrap_err()
                .kind(),
            VolumeErrorKind::Exists
        );
        write(&vol, "/a/f", b"", false).unwrap();
        assert_eq!(
            vol.mkdir(&p("/a/f"), true, &none).unwrap_err().kind(),
            VolumeErrorKind::Exists
        );
        assert_eq!(
            vol.mkdir(&p("/a/f/g"), true, &none).unwrap_err().kind(),
            VolumeErrorKind::NotADirectory
        );
        std::os::unix::fs::symlink(tmp.path().join("outside"), tmp.path().join("vol/link"))
            .unwrap();
        assert_eq!(
            vol.mkdir(&p("/link"), true, &none).unwrap_err().kind(),
            VolumeErrorKind::Symlink
        );
        assert_eq!(
            vol.mkdir(&p("/link/sub"), true, &none).unwrap_err().kind(),
            VolumeErrorKind::Symlink
        );
        assert!(!tmp.path().join("outside/sub").exists());
    }

    #[test]
    fn attributes_are_set_without_following_links() {
        let (tmp, vol) = volume();
        let root = rustix::process::geteuid().is_root();
        let owner = if root {
            1234
        } else {
            rustix::process::geteuid().as_raw()
        };
        let attrs = VolumeAttrs {
            uid: Some(owner),
            gid: Some(owner),
            mode: Some(0o640),
        };
        let mut file = vol.create_file(&p("/d/f"), true, &attrs).unwrap();
        file.write(b"x").unwrap();
        let made = file.commit().unwrap();
        assert_eq!((made.uid, made.gid, made.mode), (owner, owner, 0o640));
        assert_eq!(vol.stat(&p("/d")).unwrap().uid, owner);

        let changed = vol
            .set_attrs(
                &p("/d/f"),
                &VolumeAttrs {
                    mode: Some(0o1600),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!((changed.mode, changed.uid), (0o1600, owner));
        assert_eq!(
            vol.set_attrs(
                &p("/d/f"),
                &VolumeAttrs {
                    mode: Some(0o4755),
                    ..Default::default()
                }
            )
            .unwrap_err()
            .kind(),
            VolumeErrorKind::BadRequest
        );
        assert_eq!(
            vol.set_attrs(
                &p("/d/f"),
                &VolumeAttrs {
                    uid: Some(u32::MAX),
                    ..Default::default()
                }
            )
            .unwrap_err()
            .kind(),
            VolumeErrorKind::BadRequest
        );

        // A link's own owner changes, its target's mode and owner never.
        let secret = tmp.path().join("outside/secret");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let before = std::fs::metadata(&secret).unwrap();
        std::os::unix::fs::symlink(&secret, tmp.path().join("vol/link")).unwrap();
        let link = vol.set_attrs(&p("/link"), &attrs).unwrap();
        assert_eq!(link.kind, VolumeEntryType::Symlink);
        assert_eq!(link.uid, owner);
        assert_eq!(link.target.as_deref(), secret.to_str());
        let after = std::fs::metadata(&secret).unwrap();
        assert_eq!((after.mode(), after.uid()), (before.mode(), before.uid()));

        // A fifo's mode changes without it being opened (which would block).
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            tmp.path().join("vol/fifo").as_path(),
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        let fifo = vol
            .set_attrs(
                &p("/fifo"),
                &VolumeAttrs {
                    mode: Some(0o600),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!((fifo.kind, fifo.mode), (VolumeEntryType::Unknown, 0o600));

        let top = vol
            .set_attrs(
                &VolPath::root(),
                &VolumeAttrs {
                    mode: Some(0o750),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(top.mode, 0o750);
    }

    #[test]
    fn an_intermediate_symlink_is_refused() {
        let (tmp, vol) = volume();
        std::os::unix::fs::symlink("/etc", tmp.path().join("vol/link")).unwrap();
        std::os::unix::fs::symlink("../outside", tmp.path().join("vol/up")).unwrap();
        for e in [
            vol.open_file(&p("/link/passwd")).map(|_| ()).unwrap_err(),
            vol.stat(&p("/link/passwd")).map(|_| ()).unwrap_err(),
            vol.list(&p("/link"), 1).map(|_| ()).unwrap_err(),
            vol.remove(&p("/up/secret")).unwrap_err(),
            write(&vol, "/up/new", b"x", true).map(|_| ()).unwrap_err(),
            vol.rename(&p("/up/secret"), &p("/stolen"))
                .map(|_| ())
                .unwrap_err(),
        ] {
            assert_eq!(e.kind(), VolumeErrorKind::Symlink, "{e}");
        }
        let e = vol.open_file(&p("/link/passwd")).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("/link "), "{e}");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("outside/secret")).unwrap(),
            "outside"
        );
        assert!(!tmp.path().join("outside/new").exists());
        // `..` never reaches a lookup.
        assert_eq!(
            VolPath::parse("/../outside/secret").unwrap_err().kind(),
            VolumeErrorKind::BadPath
        );
    }

    #[test]
    fn a_final_symlink_is_neither_read_nor_written() {
        let (tmp, vol) = volume();
        let secret = tmp.path().join("outside/secret");
        std::os::unix::fs::symlink(&secret, tmp.path().join("vol/link")).unwrap();
        let e = read(&vol, "/link").unwrap_err();
        assert_eq!(e.kind(), VolumeErrorKind::Symlink, "{e}");
        let e = write(&vol, "/link", b"overwritten", false).unwrap_err();
        assert_eq!(e.kind(), VolumeErrorKind::Symlink, "{e}");
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "outside");
        assert!(tmp.path().join("vol/link").is_symlink());
        // Stat, rename and removal act on the link itself.
        let st = vol.stat(&p("/link")).unwrap();
        assert_eq!(st.kind, VolumeEntryType::Symlink);
        assert_eq!(st.target.as_deref(), secret.to_str());
        vol.rename(&p("/link"), &p("/moved")).unwrap();
        vol.remove(&p("/moved")).unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "outside");
    }

    #[test]
    fn removal_never_follows_symlinks() {
        let (tmp, vol) = volume();
        write(&vol, "/tree/a/b/file", b"x", true).unwrap();
        std::os::unix::fs::symlink(
            tmp.path().join("outside"),
            tmp.path().join("vol/tree/a/out"),
        )
        .unwrap();
        std::os::unix::fs::symlink("/", tmp.path().join("vol/tree/a/b/root")).unwrap();
        vol.remove(&p("/tree")).unwrap();
        assert!(!tmp.path().join("vol/tree").exists());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("outside/secret")).unwrap(),
            "outside"
        );
    }

    #[test]
    fn listing_does_not_enter_symlinked_directories() {
        let (tmp, vol) = volume();
        write(&vol, "/d/f", b"x", true).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside"), tmp.path().join("vol/d/out"))
            .unwrap();
        let all = vol.list(&VolPath::root(), MAX_LIST_DEPTH).unwrap();
        assert_eq!(names(&all), ["/d", "/d/f", "/d/out"]);
        let link = &all[2];
        assert_eq!(link.kind, VolumeEntryType::Symlink);
        assert_eq!(link.target.as_deref(), tmp.path().join("outside").to_str());
        assert_eq!(
            vol.list(&p("/d/out"), 1).unwrap_err().kind(),
            VolumeErrorKind::Symlink
        );
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let (tmp, vol) = volume();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            tmp.path().join("vol/fifo").as_path(),
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let v = vol.clone();
        std::thread::spawn(move || {
            let read = v.open_file(&p("/fifo")).map(|_| ()).unwrap_err().kind();
            let written = write(&v, "/fifo", b"x", false)
                .map(|_| ())
                .unwrap_err()
                .kind();
            let _ = tx.send((read, written));
        });
        let (read, written) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a fifo is refused at once, never opened");
        assert_eq!(read, VolumeErrorKind::NotAFile);
        assert_eq!(written, VolumeErrorKind::NotAFile);
        assert_eq!(
            vol.stat(&p("/fifo")).unwrap().kind,
            VolumeEntryType::Unknown
        );
        vol.mkdir(&p("/dir"), false, &VolumeAttrs::default())
            .unwrap();
        for e in [
            read_err(&vol, "/dir"),
            read_err(&vol, "/"),
            write(&vol, "/dir", b"", false).map(|_| ()).unwrap_err(),
        ] {
            assert_eq!(e.kind(), VolumeErrorKind::NotAFile, "{e}");
        }
    }

    fn read_err(vol: &Volume, path: &str) -> VolumeError {
        read(vol, path).map(|_| ()).unwrap_err()
    }

    #[test]
    fn deep_trees_are_measured_and_removed() {
        let (tmp, vol) = volume();
        let levels = MAX_OPEN_DIRS * 3 + 5;
        let mut deep = tmp.path().join("vol/deep");
        for _ in 0..levels {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        // A file at every level, so each reopened level is read on from
        // where it was left.
        let mut at = tmp.path().join("vol/deep");
        for i in 0..levels {
            std::fs::write(at.join(format!("f{i}")), vec![1u8; 10]).unwrap();
            at.push("d");
        }
        std::os::unix::fs::symlink(tmp.path().join("outside"), deep.join("out")).unwrap();
        let usage = vol.usage().unwrap();
        // deep, its levels of `d`, a file per level and the link.
        assert_eq!(usage.files as usize, 1 + levels + levels + 1);
        assert!(usage.bytes > 0);
        vol.remove(&p("/deep")).unwrap();
        assert!(!tmp.path().join("vol/deep").exists());
        assert_eq!(vol.usage().unwrap().files, 0);
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("outside/secret")).unwrap(),
            "outside"
        );
    }

    #[test]
    fn usage_counts_a_linked_file_once() {
        let (tmp, vol) = volume();
        write(&vol, "/a", &vec![7u8; 64 << 10], false).unwrap();
        let one = vol.usage().unwrap();
        std::fs::hard_link(tmp.path().join("vol/a"), tmp.path().join("vol/b")).unwrap();
        let two = vol.usage().unwrap();
        assert_eq!((one.files, two.files), (1, 2));
        assert_eq!(one.bytes, two.bytes);
    }
}
