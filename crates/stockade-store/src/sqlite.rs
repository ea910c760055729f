//! SQLite, the embedded default: connect (one database file in WAL mode with
//! durable commits), migrate, and its dialect.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult,
    SqliteSynchronous,
};
use sqlx::Sqlite;

use crate::db::{other, SqlStore};
use crate::sql::Backend;
use crate::{StoreError, StoreResult, Unavailable, UnavailableKind};

/// The Stockade store in a SQLite database.
pub type SqliteStore = SqlStore<Sqlite>;

impl SqlStore<Sqlite> {
    /// Opens (creating if missing) the database at `url` — `sqlite://PATH` or
    /// `sqlite::memory:` — and applies the migrations.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Other(format!("invalid SQLite URL '{url}': {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // A commit is on disk when it is acknowledged.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let location = if in_memory {
            ":memory:".to_owned()
        } else {
            options.get_filename().display().to_string()
        };
        let pool_options = if in_memory {
            // An in-memory database lives as long as a connection to it, and
            // shared-cache connections lock each other out: keep one, forever.
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                // It cannot be closed when a call failed or was dropped
                // mid-transaction: roll back whatever is open instead.
                // "No transaction is active" is the usual answer.
                .after_release(|conn, _| {
                    Box::pin(async move {
                        let _ = sqlx::Executor::execute(&mut *conn, "ROLLBACK").await;
                        Ok(true)
                    })
                })
        } else {
            create_parent_dir(options.get_filename())?;
            owner_only(options.get_filename())?;
            SqlitePoolOptions::new().max_connections(8)
        };
        let failed = |what: &str, e: sqlx::Error| match Sqlite::unavailable(&e, &location) {
            Some((kind, message)) => StoreError::Unavailable(Unavailable {
                kind,
                message,
                cause: Some(Box::new(e)),
            }),
            None => other(format_args!("cannot {what} SQLite database '{url}'"), e),
        };
        let pool = pool_options
            .connect_with(options)
            .await
            .map_err(|e| failed("open", e))?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|e| match e {
                sqlx::migrate::MigrateError::Execute(e) => failed("migrate", e),
                e => other(format_args!("cannot migrate SQLite database '{url}'"), e),
            })?;
        if !in_memory {
            // The write-ahead log and its index exist now: SQLite gives them
            // the database's mode, but an older install's may be wider.
            for suffix in ["-wal", "-shm"] {
                let side = format!("{location}{suffix}");
                if Path::new(&side).exists() {
                    owner_only(Path::new(&side))?;
                }
            }
        }
        if in_memory {
            return Ok(Self::new(pool, &location, false));
        }
        let dir = Path::new(&location)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        Ok(Self::with_health(
            pool,
            &location,
            true,
            crate::db::HealthState::in_dir(dir),
        ))
    }
}

/// Makes `file` readable and writable by its owner only (created empty when
/// absent, which SQLite takes as a new database): it holds every account's
/// token hashes and every sandbox's environment. An existing file that
/// cannot be changed (a read-only mount) is left as it is, with a warning.
fn owner_only(file: &Path) -> StoreResult<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::metadata(file) {
        Ok(meta) if meta.permissions().mode() & 0o077 == 0 => Ok(()),
        Ok(_) => {
            if let Err(e) = std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)) {
                tracing::warn!(file = %file.display(), error = %e, "the SQLite database is readable by others and could not be made private");
            }
            Ok(())
        }
        Err(_) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(file)
            .map(drop)
            .map_err(|e| {
                StoreError::Other(format!(
                    "cannot create the SQLite database '{}': {e}",
                    file.display()
                ))
            }),
    }
}

fn create_parent_dir(file: &Path) -> StoreResult<()> {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.exists() => std::fs::create_dir_all(dir)
            .map_err(|e| {
                StoreError::Other(format!(
                    "cannot create directory '{}' for the SQLite database: {e}",
                    dir.display()
                ))
            }),
        _ => Ok(()),
    }
}

impl Backend for Sqlite {
    /// RFC 3339 text with exactly six fractional digits, so that text order
    /// is time order.
    type Ts = String;
    type OptTs = Option<String>;

    const BACKEND: &'static str = "sqlite";
    const BEGIN: &'static str = "BEGIN IMMEDIATE";
    const GROUP_CONCAT: &'static str = "group_concat";
    const METADATA_TERMINATED: &'static str = "json_set(metadata, '$.status', 'TERMINATED')";
    /// Taken before events are written, held to the commit.
    const EVENTS_LOCK: Option<&'static str> = None;
    const ACCOUNT_LOCK: Option<&'static str> = None;
    const PLACEMENT_LOCK: Option<&'static str> = None;
    const ROW_SHARE: &'static str = "";
    const ROW_UPDATE: &'static str = "";

    fn ts(t: DateTime<Utc>) -> String {
        t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    }

    fn opt_ts(t: Option<DateTime<Utc>>) -> Option<String> {
        t.map(Self::ts)
    }

    fn from_opt_ts(stored: Option<String>) -> Result<Option<DateTime<Utc>>, String> {
        stored.map(Self::from_ts).transpose()
    }

    fn from_ts(stored: String) -> Result<DateTime<Utc>, String> {
        DateTime::parse_from_rfc3339(&stored)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| format!("corrupt timestamp '{stored}': {e}"))
    }

    fn rows_affected(result: &SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    fn unavailable(err: &sqlx::Error, location: &str) -> Option<(UnavailableKind, String)> {
        const READONLY: i64 = 8;
        const IOERR: i64 = 10;
        const FULL: i64 = 13;
        const CANTOPEN: i64 = 14;
        let code = match err {
            sqlx::Error::Io(_) => IOERR,
            sqlx::Error::Database(db) => db.code()?.parse::<i64>().ok()? & 0xff,
            _ => return None,
        };
        Some(match code {
            FULL => (
                UnavailableKind::Full,
                format!(
                "the disk holding the SQLite database {location} is full ({err}): free space on \
                 that filesystem; writes work again as soon as there is room"
            ),
            ),
            READONLY => (
                UnavailableKind::ReadOnly,
                format!(
                    "the SQLite database {location} is read-only ({err}): make the file, its \
                 directory and its -wal and -shm files writable by the server"
                ),
            ),
            IOERR => (
                UnavailableKind::Failing,
                format!(
                    "I/O error on the SQLite database {location} ({err}): check the disk it is on \
                 (full or failing?) and free space on it"
                ),
            ),
            CANTOPEN => (
                UnavailableKind::Unreachable,
                format!(
                    "cannot open the SQLite database {location} ({err}): check that its directory \
                 exists, is writable and has free space"
                ),
            ),
            _ => return None,
        })
    }
}
