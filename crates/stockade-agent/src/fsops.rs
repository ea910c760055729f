//! Filesystem operations as envd performs them: path resolution against the
//! user's home, entry information (Go's mode strings, owner names from
//! `/etc/passwd`), listing to a depth, mkdir, move and remove.

use crate::connect::{Code, ConnectError};
use crate::proto::filesystem::{EntryInfo, FileType, Timestamp};
use crate::users::{Accounts, NameCache, User};
use std::fs::Metadata;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Resolves a request path as envd does: empty → the default workdir (or
/// home), `~` and `~/x` → home, relative → below home; `.` and `..` folded.
pub fn resolve(path: &str, user: &User, workdir: Option<&str>) -> Result<PathBuf, ConnectError> {
    if path.contains('\0') {
        return Err(ConnectError::invalid("path contains a NUL byte"));
    }
    let path = if path.is_empty() {
        workdir.unwrap_or(&user.home)
    } else {
        path
    };
    let expanded: PathBuf = if let Some(rest) = path.strip_prefix('~') {
        if !rest.is_empty() && !rest.starts_with('/') {
            return Err(ConnectError::invalid(format!(
                "failed to expand path '{path}' for user '{}': cannot expand user-specific home dir",
                user.name
            )));
        }
        Path::new(&user.home).join(rest.trim_start_matches('/'))
    } else if path.starts_with('/') {
        PathBuf::from(path)
    } else {
        Path::new(&user.home).join(path)
    };
    Ok(normalize(&expanded))
}

/// Folds `.` and `..` lexically (like Go's `filepath.Clean`).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Go's `FileMode.String()` of a mode: `-rw-r--r--`, `drwxr-xr-x`,
/// `Lrwxrwxrwx`, `dtrwxrwxrwx`.
pub fn mode_string(mode: u32) -> String {
    let fmt = mode & 0o170_000;
    let mut out = String::new();
    match fmt {
        0o040_000 => out.push('d'),
        0o120_000 => out.push('L'),
        0o060_000 => out.push('D'),
        0o010_000 => out.push('p'),
        0o140_000 => out.push('S'),
        _ => {}
    }
    if mode & 0o4000 != 0 {
        out.push('u');
    }
    if mode & 0o2000 != 0 {
        out.push('g');
    }
    if fmt == 0o020_000 {
        out.push_str("Dc");
    }
    if mode & 0o1000 != 0 {
        out.push('t');
    }
    if out.is_empty() {
        out.push('-');
    }
    for (i, ch) in "rwxrwxrwx".chars().enumerate() {
        out.push(if mode & (1 << (8 - i)) != 0 { ch } else { '-' });
    }
    out
}

fn timestamp(meta: &Metadata) -> Timestamp {
    Timestamp {
        seconds: meta.mtime(),
        nanos: meta.mtime_nsec() as i32,
    }
}

fn file_type(meta: &Metadata) -> FileType {
    if meta.is_dir() {
        FileType::Directory
    } else if meta.is_file() {
        FileType::File
    } else if meta.file_type().is_symlink() {
        FileType::Symlink
    } else {
        FileType::Unspecified
    }
}

/// Entry information of a path, without following a final symlink for
/// its own fields (a symlink reports its target and the target's type).
pub fn entry_info(path: &Path, names: &NameCache) -> Result<EntryInfo, ConnectError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| not_found_or(e, path))?;
    Ok(entry_from_meta(path, &meta, names))
}

fn entry_from_meta(path: &Path, meta: &Metadata, names: &NameCache) -> EntryInfo {
    let is_symlink = meta.file_type().is_symlink();
    let (kind, symlink_target) = if is_symlink {
        let target = std::fs::read_link(path)
            .ok()
            .map(|t| t.to_string_lossy().into_owned());
        let kind = std::fs::metadata(path)
            .map(|m| file_type(&m))
            .unwrap_or(FileType::Symlink);
        (kind, target)
    } else {
        (file_type(meta), None)
    };
    EntryInfo {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".into()),
        r#type: kind as i32,
        path: path.to_string_lossy().into_owned(),
        size: meta.len() as i64,
        mode: meta.permissions().mode() & 0o777,
        permissions: mode_string(meta.mode()),
        owner: names.user(meta.uid()),
        group: names.group(meta.gid()),
        modified_time: Some(timestamp(meta)),
        symlink_target,
        metadata: Default::default(),
        is_symlink,
    }
}

fn not_found_or(e: std::io::Error, path: &Path) -> ConnectError {
    not_found_or_internal(
        &e,
        format!("file not found: {}", path.display()),
        format!("error getting file info of {}: {e}", path.display()),
    )
}

/// `missing` as NotFound when `e` says the path does not exist, else
/// `failed` as an internal error.
pub(crate) fn not_found_or_internal(
    e: &std::io::Error,
    missing: String,
    failed: String,
) -> ConnectError {
    if e.kind() == std::io::ErrorKind::NotFound {
        ConnectError::not_found(missing)
    } else {
        ConnectError::internal(failed)
    }
}

/// Lists a directory to `depth` levels (0 means 1), not following symlinks
/// below it; the directory itself may be a symlink.
pub fn list_dir(
    dir: &Path,
    depth: u32,
    accounts: &Accounts,
) -> Result<Vec<EntryInfo>, ConnectError> {
    let depth = depth.max(1);
    let resolved = std::fs::canonicalize(dir).map_err(|e| {
        not_found_or_internal(
            &e,
            format!("path not found: {}", dir.display()),
            format!("error resolving {}: {e}", dir.display()),
        )
    })?;
    let meta = std::fs::metadata(&resolved).map_err(|e| not_found_or(e, &resolved))?;
    if !meta.is_dir() {
        return Err(ConnectError::invalid(format!(
            "path is not a directory: {}",
            dir.display()
        )));
    }
    let names = NameCache::load(accounts);
    let mut entries = Vec::new();
    walk(&resolved, 1, depth, &names, &mut entries)?;
    Ok(entries)
}

fn walk(
    dir: &Path,
    level: u32,
    depth: u32,
    names: &NameCache,
    out: &mut Vec<EntryInfo>,
) -> Result<(), ConnectError> {
    let mut items: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| {
            ConnectError::internal(format!("error reading directory {}: {e}", dir.display()))
        })?
        .filter_map(Result::ok)
        .collect();
    items.sort_by_key(|e| e.file_name());
    for item in items {
        let path = item.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue; // vanished meanwhile
        };
        out.push(entry_from_meta(&path, &meta, names));
        if meta.is_dir() && level < depth {
            walk(&path, level + 1, depth, names, out)?;
        }
    }
    Ok(())
}

/// Creates a directory and its missing parents, owned by `ids`.
/// An existing directory is `already_exists`.
pub fn make_dir(path: &Path, ids: Option<(u32, u32)>) -> Result<EntryInfo, ConnectError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(ConnectError::new(
                Code::AlreadyExists,
                format!("directory already exists: {}", path.display()),
            ))
        }
        Ok(_) => {
            return Err(ConnectError::invalid(format!(
                "path already exists but it is not a directory: {}",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(ConnectError::internal(format!(
                "error getting file info: {e}"
            )))
        }
    }
    ensure_dirs(path, ids)?;
    Ok(EntryInfo {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        r#type: FileType::Directory as i32,
        path: path.to_string_lossy().into_owned(),
        ..Default::default()
    })
}

/// Creates every missing directory of `path` (mode 0755), chowning the
/// ones it creates.
pub fn ensure_dirs(path: &Path, ids: Option<(u32, u32)>) -> Result<(), ConnectError> {
    let mut missing = Vec::new();
    let mut cur = Some(path);
    while let Some(p) = cur {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(ConnectError::invalid(format!(
                    "path is a file: {}",
                    p.display()
                )))
            }
            Err(_) => missing.push(p.to_path_buf()),
        }
        cur = p.parent();
    }
    for dir in missing.iter().rev() {
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(ConnectError::from(e)
                    .with_context(&format!("failed to create directory {}", dir.display())))
            }
        }
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
        chown(dir, ids)?;
    }
    Ok(())
}

/// Gives a path to the user (when the agent runs as someone else).
pub fn chown(path: &Path, ids: Option<(u32, u32)>) -> Result<(), ConnectError> {
    if let Some((uid, gid)) = ids {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(|e| {
            ConnectError::internal(format!("failed to chown {}: {e}", path.display()))
        })?;
    }
    Ok(())
}

/// Moves (renames) a path, creating the destination's parents.
pub fn move_path(
    src: &Path,
    dst: &Path,
    ids: Option<(u32, u32)>,
    names: &NameCache,
) -> Result<EntryInfo, ConnectError> {
    std::fs::symlink_metadata(src).map_err(|e| not_found_or(e, src))?;
    if let Some(parent) = dst.parent() {
        ensure_dirs(parent, ids)?;
    }
    std::fs::rename(src, dst).map_err(|e| {
        ConnectError::from(e).with_context(&format!(
            "error moving {} to {}",
            src.display(),
            dst.display()
        ))
    })?;
    entry_info(dst, names)
}

/// Removes a file or a directory tree.
pub fn remove(path: &Path) -> Result<(), ConnectError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| not_found_or(e, path))?;
    let r = if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    r.map_err(|e| ConnectError::from(e).with_context(&format!("error removing {}", path.display())))
}

impl ConnectError {
    /// Prefixes the message with what was being done.
    pub fn with_context(mut self, what: &str) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

/// Whether a path lies on a network filesystem (NFS, CIFS/SMB, FUSE),
/// which inotify cannot watch reliably.
pub fn is_network_mount(path: &Path) -> bool {
    const MAGICS: [u64; 5] = [0x6969, 0xFF53_4D42, 0x517B, 0xFE53_4D42, 0x6573_5546];
    rustix::fs::statfs(path)
        .map(|s| MAGICS.contains(&(s.f_type as u64)))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> User {
        User {
            name: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
        }
    }

    #[test]
    fn paths_resolve_like_envd() {
        let u = user();
        let r = |p: &str| resolve(p, &u, None).unwrap();
        assert_eq!(r(""), PathBuf::from("/home/user"));
        assert_eq!(r("~"), PathBuf::from("/home/user"));
        assert_eq!(r("~/a/b"), PathBuf::from("/home/user/a/b"));
        assert_eq!(r("a/../b"), PathBuf::from("/home/user/b"));
        assert_eq!(r("/x/./y/../z"), PathBuf::from("/x/z"));
        assert_eq!(r("/../.."), PathBuf::from("/"));
        assert_eq!(
            resolve("", &u, Some("/work")).unwrap(),
            PathBuf::from("/work")
        );
        assert_eq!(
            resolve("~bob/x", &u, None).unwrap_err().code,
            Code::InvalidArgument
        );
        assert!(resolve("a\0b", &u, None).is_err());
    }

    #[test]
    fn mode_strings_match_go() {
        assert_eq!(mode_string(0o100_644), "-rw-r--r--");
        assert_eq!(mode_string(0o040_755), "drwxr-xr-x");
        assert_eq!(mode_string(0o120_777), "Lrwxrwxrwx");
        assert_eq!(mode_string(0o041_777), "dtrwxrwxrwx");
        assert_eq!(mode_string(0o104_755), "urwxr-xr-x");
        assert_eq!(mode_string(0o020_666), "Dcrw-rw-rw-");
    }

    #[test]
    fn mkdir_list_move_remove() {
        let dir = tempfile::tempdir().unwrap();
        let acc = Accounts::default();
        let names = NameCache::load(&acc);
        let a = dir.path().join("a/b/c");
        let e = make_dir(&a, None).unwrap();
        assert_eq!(
            (e.name.as_str(), e.r#type),
            ("c", FileType::Directory as i32)
        );
        assert_eq!(make_dir(&a, None).unwrap_err().code, Code::AlreadyExists);
        std::fs::write(dir.path().join("a/f.txt"), "hello").unwrap();
        std::os::unix::fs::symlink("f.txt", dir.path().join("a/link")).unwrap();

        let one = list_dir(&dir.path().join("a"), 0, &acc).unwrap();
        let names_of = |v: &[EntryInfo]| v.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
        assert_eq!(names_of(&one), ["b", "f.txt", "link"]);
        let link = &one[2];
        assert!(link.is_symlink);
        assert_eq!(link.symlink_target.as_deref(), Some("f.txt"));
        assert_eq!(link.r#type, FileType::File as i32);
        assert_eq!(one[1].size, 5);
        let deep = list_dir(&dir.path().join("a"), 3, &acc).unwrap();
        assert_eq!(names_of(&deep), ["b", "c", "f.txt", "link"]);
        assert_eq!(
            list_dir(&dir.path().join("a/f.txt"), 1, &acc)
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
        assert_eq!(
            list_dir(&dir.path().join("nope"), 1, &acc)
                .unwrap_err()
                .code,
            Code::NotFound
        );

        let moved = move_path(
            &dir.path().join("a/f.txt"),
            &dir.path().join("x/y/g.txt"),
            None,
            &names,
        )
        .unwrap();
        assert_eq!(moved.name, "g.txt");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("x/y/g.txt")).unwrap(),
            "hello"
        );
        remove(&dir.path().join("a")).unwrap();
        assert!(!dir.path().join("a").exists());
        assert_eq!(
            remove(&dir.path().join("a")).unwrap_err().code,
            Code::NotFound
        );
    }
}
