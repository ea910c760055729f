//! One server per SQLite database: an exclusive advisory lock
//! (`flock`) on a file next to the database, taken before the database is
//! opened and held for the life of the process. The kernel drops it when
//! the process ends however it ends (`kill -9` included), so a stale lock
//! never keeps a server from starting; the process id written into the
//! file only makes the refusal's message more helpful.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rustix::fs::{flock, FlockOperation};
use sqlx::sqlite::SqliteConnectOptions;

use crate::{StoreError, StoreResult};

/// The lock of a SQLite database: held until dropped (or the process ends).
#[derive(Debug)]
pub struct DatabaseLock {
    path: PathBuf,
    _file: File,
}

impl DatabaseLock {
    /// Takes the lock of the SQLite database a URL names (`sqlite://PATH`):
    /// `PATH.lock`, created (mode `0600`) when missing. `None` for an
    /// in-memory database, which no other process can open, and for a
    /// PostgreSQL URL, which several instances share by design. Another
    /// process holding it is a [`StoreError::Conflict`] that says which
    /// database, which process and what to do.
    pub fn for_url(url: &str) -> StoreResult<Option<Self>> {
        if !url.starts_with("sqlite:") || url.contains(":memory:") || url.contains("mode=memory") {
            return Ok(None);
        }
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Other(format!("invalid SQLite URL '{url}': {e}")))?;
        Self::take(options.get_filename()).map(Some)
    }

    /// Takes the lock of the SQLite database file `database`.
    pub fn take(database: &Path) -> StoreResult<Self> {
        let mut name = database.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Other(format!(
                    "cannot create the directory {}: {e}",
                    dir.display()
                ))
            })?;
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| {
                StoreError::Other(format!("cannot open the lock file {}: {e}", path.display()))
            })?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    pid if !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()) => {
                        format!(" (process {pid})")
                    }
                    _ => String::new(),
                };
                return Err(StoreError::Conflict(format!(
                    "another Stockade server{holder} already uses the SQLite database {}: \
                     SQLite serves one server at a time. Stop the other server, give this \
                     one another --data-dir, or run several servers on one PostgreSQL \
                     database (--database postgres://…)",
                    database.display()
                )));
            }
            Err(e) => {
                return Err(StoreError::Other(format!(
                    "cannot lock {}: {e}",
                    path.display()
                )))
            }
        }
        // Who holds it, for the message another server prints.
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        if let Err(e) = written {
            tracing::debug!(error = %e, path = %path.display(), "could not write the process id into the lock file");
        }
        Ok(Self { path, _file: file })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_free_again_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let url = format!("sqlite://{}", db.display());
        let first = DatabaseLock::for_url(&url)
            .unwrap()
            .expect("a file database");
        assert_eq!(first.path(), dir.path().join("s.db.lock"));
        // A second open file description is refused, as another process is.
        match DatabaseLock::for_url(&url) {
            Err(StoreError::Conflict(m)) => {
                assert!(m.contains("already uses the SQLite database"), "{m}");
                assert!(m.contains(&db.display().to_string()), "{m}");
                assert!(
                    m.contains(&format!("(process {})", std::process::id())),
                    "{m}"
                );
                assert!(m.contains("PostgreSQL"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        drop(first);
        let again = DatabaseLock::take(&db).unwrap();
        drop(again);
        // Nothing to lock for databases no other process can open, or that
        // several share by design.
        assert!(DatabaseLock::for_url("sqlite::memory:").unwrap().is_none());
        assert!(DatabaseLock::for_url("postgres://u@h/db")
            .unwrap()
            .is_none());
    }
}
