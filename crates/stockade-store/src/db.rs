//! [`SqlStore`]: the store over one sqlx pool, whatever the backend, and the
//! one place that handles connections. A connection leaves a
//! transaction only through a COMMIT that succeeded or a ROLLBACK; a
//! connection whose statement, COMMIT or ROLLBACK failed in a way that leaves
//! doubt is closed, never returned to the pool, so no later write can land in
//! a transaction that will never commit. Every write also tells the store's
//! health: degraded after a failure, healthy again after a write that changed
//! something.

use std::fmt::{self, Display};
use std::sync::{Arc, Mutex};

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};

use crate::sql::{Backend, DbRow, Q};
use crate::{StoreError, StoreHealth, StoreResult, Unavailable, UnavailableKind};

/// The Stockade store in a SQL database: [`crate::SqliteStore`] or [`crate::PgStore`].
pub struct SqlStore<B: Database> {
    pub(crate) pool: Pool<B>,
    /// Where the database is, for messages: a file path, or `user@host:port/db`.
    pub(crate) location: Arc<str>,
    /// Close connections that failed. Never for an in-memory database: it
    /// lives only as long as its one connection.
    pub(crate) discard_failed: bool,
    pub(crate) health: Arc<HealthState>,
    /// Counts the commits that wrote events: readers wait for a change.
    pub(crate) events: Arc<tokio::sync::watch::Sender<u64>>,
    /// New sandbox records waiting to be written together.
    pub(crate) inserts: Arc<crate::group::InsertQueue>,
}

impl<B: Database> Clone for SqlStore<B> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            location: self.location.clone(),
            discard_failed: self.discard_failed,
            health: self.health.clone(),
            events: self.events.clone(),
            inserts: self.inserts.clone(),
        }
    }
}

impl<B: Backend> fmt::Debug for SqlStore<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStore")
            .field("backend", &B::BACKEND)
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> SqlStore<B> {
    pub(crate) fn new(pool: Pool<B>, location: &str, discard_failed: bool) -> Self {
        Self::with_health(pool, location, discard_failed, HealthState::default())
    }

    pub(crate) fn with_health(
        pool: Pool<B>,
        location: &str,
        discard_failed: bool,
        health: HealthState,
    ) -> Self {
        Self {
            pool,
            location: location.into(),
            discard_failed,
            health: Arc::new(health),
            events: Arc::new(tokio::sync::watch::channel(0).0),
            inserts: Arc::default(),
        }
    }

    /// Closes every connection; the store answers no more queries. Once it
    /// returns, no file of the database is open any more.
    pub async fn close(&self) {
        self.pool.close().await;
        // A connection on its way back to the pool as the close began can
        // still land among the idle ones after the close has looked there
        // for the last time; such a connection stays open until a later
        // close takes it. Close again until none is left (a connection
        // still in use is closed when it comes back).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.pool.size() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            self.pool.close().await;
        }
    }

    /// A connection of the pool.
    pub(crate) async fn conn(&self, context: &str) -> StoreResult<Conn<B>> {
        let conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| db_error::<B>(&self.location, context, e))?;
        Ok(Conn {
            conn,
            doubtful: false,
            in_tx: false,
            tx_wrote: false,
            wrote_events: false,
            discard_failed: self.discard_failed,
            health: self.health.clone(),
            events: self.events.clone(),
            location: self.location.clone(),
        })
    }

    /// A connection with a write transaction begun; end it with
    /// [`SqlStore::finish`].
    pub(crate) async fn begin(&self, context: &str) -> StoreResult<Conn<B>> {
        let mut conn = self.conn(context).await?;
        conn.begin(context).await?;
        Ok(conn)
    }

    /// Commits `conn`'s transaction when `result` is a success, rolls it
    /// back otherwise; a failed COMMIT is the error then.
    pub(crate) async fn finish<T>(
        &self,
        mut conn: Conn<B>,
        result: StoreResult<T>,
        context: &str,
    ) -> StoreResult<T> {
        match result {
            Ok(value) => {
                conn.commit(context).await?;
                Ok(value)
            }
            Err(err) => {
                conn.rollback(context).await;
                Err(err)
            }
        }
    }

    /// Runs one read.
    pub(crate) async fn fetch_all(&self, q: Q<B>, context: &str) -> StoreResult<Vec<DbRow<B>>> {
        self.conn(context).await?.fetch_all(q, context).await
    }

    /// Runs one read of at most one row.
    pub(crate) async fn fetch_optional(
        &self,
        q: Q<B>,
        context: &str,
    ) -> StoreResult<Option<DbRow<B>>> {
        self.conn(context).await?.fetch_optional(q, context).await
    }

    /// Runs one aggregate read (which always answers with one row).
    pub(crate) async fn fetch_aggregate(&self, q: Q<B>, context: &str) -> StoreResult<DbRow<B>> {
        self.conn(context).await?.fetch_aggregate(q, context).await
    }

    /// Runs one read and rebuilds each row with `from_row`.
    pub(crate) async fn list<T>(
        &self,
        q: Q<B>,
        context: &str,
        from_row: fn(&DbRow<B>) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        self.fetch_all(q, context)
            .await?
            .iter()
            .map(from_row)
            .collect()
    }

    /// Runs one read of one row, rebuilt with `from_row`; `NotFound` when
    /// there is none.
    pub(crate) async fn one<T>(
        &self,
        q: Q<B>,
        context: &str,
        from_row: fn(&DbRow<B>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        match self.fetch_optional(q, context).await? {
            Some(row) => from_row(&row),
            None => Err(StoreError::NotFound),
        }
    }

    /// Runs one write on its own (autocommit); the rows it changed.
    pub(crate) async fn execute(&self, q: Q<B>, context: &str) -> StoreResult<u64> {
        self.conn(context).await?.execute(q, context).await
    }

    /// [`SqlStore::execute`] for a write that must change a row: `NotFound`
    /// when it changed none.
    pub(crate) async fn execute_one(&self, q: Q<B>, context: &str) -> StoreResult<()> {
        match self.execute(q, context).await? {
            0 => Err(StoreError::NotFound),
            _ => Ok(()),
        }
    }

    /// [`SqlStore::execute`] where `refine` names what a constraint's refusal
    /// means (`None`: the usual mapping).
    pub(crate) async fn execute_refined(
        &self,
        q: Q<B>,
        context: &str,
        refine: impl FnOnce(&sqlx::Error) -> Option<StoreError> + Send,
    ) -> StoreResult<u64> {
        let mut conn = self.conn(context).await?;
        conn.execute_refined(q, context, refine).await
    }

    /// Claims rows one at a time: `due` finds the candidates,
    /// `claim` makes the conditional update (`… RETURNING`) that takes one
    /// only if nobody else did in between. The rows this call won.
    pub(crate) async fn claim_each<T: Send>(
        &self,
        due: Q<B>,
        claim: impl Fn(&DbRow<B>) -> StoreResult<Q<B>> + Send,
        from_row: fn(&DbRow<B>) -> StoreResult<T>,
        context: &str,
    ) -> StoreResult<Vec<T>> {
        let mut conn = self.conn(context).await?;
        let mut won = Vec::new();
        for row in conn.fetch_all(due, context).await? {
            if let Some(row) = conn.returning_optional(claim(&row)?, context).await? {
                won.push(from_row(&row)?);
            }
        }
        Ok(won)
    }

    /// What the writes so far say about the database.
    pub(crate) fn health_now(&self) -> StoreHealth {
        self.health.get()
    }
}

/// Maps a database failure: no row → `NotFound`, a database that cannot
/// serve → `Unavailable`, a unique violation → `Conflict`, anything else →
/// `Other` with `context`. Failures are logged with their context.
fn db_error<B: Backend>(location: &str, context: &str, err: sqlx::Error) -> StoreError {
    if let Some((kind, message)) = B::unavailable(&err, location) {
        tracing::error!(error = %err, context = %context, "{message}");
        return StoreError::Unavailable(Unavailable {
            kind,
            message,
            cause: Some(Box::new(err)),
        });
    }
    match err {
        sqlx::Error::RowNotFound => StoreError::NotFound,
        err if is_unique_violation(&err) => StoreError::Conflict(format!("{context}: {err}")),
        err => other(context, err),
    }
}

/// A pooled connection on loan to one store call. Its statements map their
/// failures with the call's context.
pub(crate) struct Conn<B: Backend> {
    conn: PoolConnection<B>,
    /// A statement, COMMIT or ROLLBACK failed other than cleanly.
    doubtful: bool,
    /// A transaction is open.
    in_tx: bool,
    /// The open transaction changed rows: its COMMIT proves the database writes.
    tx_wrote: bool,
    /// The open transaction (or the last statement outside one) wrote
    /// events: their readers are woken once it commits.
    pub(crate) wrote_events: bool,
    discard_failed: bool,
    health: Arc<HealthState>,
    events: Arc<tokio::sync::watch::Sender<u64>>,
    location: Arc<str>,
}

impl<B: Backend> Conn<B> {
    fn error(&self, context: &str, err: sqlx::Error) -> StoreError {
        db_error::<B>(&self.location, context, err)
    }

    /// A statement's failure: the connection is in doubt unless a
    /// constraint refused the statement cleanly.
    fn failed(&mut self, err: &sqlx::Error) {
        if !is_clean_failure(err) {
            self.doubtful = true;
        }
    }

    /// A write's outcome: `changed` rows prove the database writes (once the
    /// transaction, if any, commits); a failure degrades health.
    fn wrote(&mut self, outcome: Result<u64, &sqlx::Error>) {
        match outcome {
            Ok(0) => {}
            Ok(_) if self.in_tx => self.tx_wrote = true,
            Ok(_) => self.health.recover(),
            Err(err) => {
                self.failed(err);
                if !is_clean_failure(err) {
                    let (reason, full) = B::unavailable(err, &self.location).map_or_else(
                        || {
                            let reason =
                                format!("a write to the {} database failed: {err}", B::BACKEND);
                            (reason, false)
                        },
                        |(kind, reason)| (reason, kind == UnavailableKind::Full),
                    );
                    self.health.degrade(reason, full);
                }
            }
        }
    }

    /// Runs a write; the rows it changed.
    pub async fn execute(&mut self, q: Q<B>, context: &str) -> StoreResult<u64> {
        self.execute_refined(q, context, |_| None).await
    }

    /// [`Conn::execute`] where `refine` names what a constraint's refusal means.
    pub async fn execute_refined(
        &mut self,
        q: Q<B>,
        context: &str,
        refine: impl FnOnce(&sqlx::Error) -> Option<StoreError>,
    ) -> StoreResult<u64> {
        let result = B::execute(&mut self.conn, q)
            .await
            .map(|r| B::rows_affected(&r));
        self.wrote(result.as_ref().copied());
        result.map_err(|e| refine(&e).unwrap_or_else(|| self.error(context, e)))
    }

    /// A write that returns the row it changed, if any (`… RETURNING`).
    pub async fn returning_optional(
        &mut self,
        q: Q<B>,
        context: &str,
    ) -> StoreResult<Option<DbRow<B>>> {
        let result = B::fetch_optional(&mut self.conn, q).await;
        self.wrote(result.as_ref().map(|row| u64::from(row.is_some())));
        Ok(result.map_err(|e| self.error(context, e))?.map(DbRow))
    }

    pub async fn fetch_all(&mut self, q: Q<B>, context: &str) -> StoreResult<Vec<DbRow<B>>> {
        match B::fetch_all(&mut self.conn, q).await {
            Ok(rows) => Ok(rows.into_iter().map(DbRow).collect()),
            Err(e) => {
                self.read_failed(&e);
                Err(self.error(context, e))
            }
        }
    }

    /// A read's failure: the connection is in doubt, and a database that
    /// cannot serve (a full disk: in WAL mode a read inside a write
    /// transaction may need room too) is degraded as a failed write makes it.
    fn read_failed(&mut self, err: &sqlx::Error) {
        self.failed(err);
        if let Some((kind, reason)) = B::unavailable(err, &self.location) {
            self.health.degrade(reason, kind == UnavailableKind::Full);
        }
    }

    pub async fn fetch_optional(
        &mut self,
        q: Q<B>,
        context: &str,
    ) -> StoreResult<Option<DbRow<B>>> {
        match B::fetch_optional(&mut self.conn, q).await {
            Ok(row) => Ok(row.map(DbRow)),
            Err(e) => {
                self.read_failed(&e);
                Err(self.error(context, e))
            }
        }
    }

    /// Runs one aggregate read (which always answers with one row).
    pub async fn fetch_aggregate(&mut self, q: Q<B>, context: &str) -> StoreResult<DbRow<B>> {
        self.fetch_optional(q, context)
            .await?
            .ok_or_else(|| StoreError::Other("an aggregate returned no row".into()))
    }

    /// Whether a failure left the connection in doubt: its transaction
    /// cannot go on.
    pub(crate) fn is_doubtful(&self) -> bool {
        self.doubtful
    }

    async fn begin(&mut self, context: &str) -> StoreResult<()> {
        // Counted as open at once: a BEGIN that fails halfway is doubtful too.
        self.in_tx = true;
        self.execute(Q::new(B::BEGIN), context).await.map(drop)
    }

    async fn commit(&mut self, context: &str) -> StoreResult<()> {
        let wrote = std::mem::take(&mut self.tx_wrote);
        match B::execute(&mut self.conn, Q::new("COMMIT")).await {
            Ok(_) => {
                self.in_tx = false;
                if wrote {
                    self.health.recover();
                }
                if std::mem::take(&mut self.wrote_events) {
                    self.events.send_modify(|n| *n = n.wrapping_add(1));
                }
                Ok(())
            }
            Err(e) => {
                // A failed COMMIT leaves the transaction in doubt, whatever the error.
                self.doubtful = true;
                self.wrote(Err(&e));
                Err(self.error(context, e))
            }
        }
    }

    pub(crate) async fn rollback(&mut self, context: &str) {
        self.tx_wrote = false;
        self.wrote_events = false;
        match B::execute(&mut self.conn, Q::new("ROLLBACK")).await {
            Ok(_) => self.in_tx = false,
            Err(e) => {
                self.doubtful = true;
                tracing::warn!(error = %e, context = %context, "rollback failed; the connection is closed");
            }
        }
    }
}

impl<B: Backend> Drop for Conn<B> {
    fn drop(&mut self) {
        // Closing rolls back whatever is open; the pool opens a new one. An
        // in-memory database keeps its one connection: its pool rolls back
        // what is left open when the connection comes back.
        if (self.doubtful || self.in_tx) && self.discard_failed {
            self.conn.close_on_drop();
        }
    }
}

/// The failures after which a connection is known to be fine: a constraint
/// refused one statement, which changed nothing.
fn is_clean_failure(err: &sqlx::Error) -> bool {
    use sqlx::error::ErrorKind;
    matches!(
        err.as_database_error().map(|e| e.kind()),
        Some(
            ErrorKind::UniqueViolation
                | ErrorKind::ForeignKeyViolation
                | ErrorKind::NotNullViolation
                | ErrorKind::CheckViolation
        )
    )
}

/// Whether `err` is a unique-constraint violation.
pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.is_unique_violation())
}

/// Whether `err` is a foreign-key violation.
pub(crate) fn is_foreign_key_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.is_foreign_key_violation())
}

/// An unexpected failure, logged with its context.
pub(crate) fn other(context: impl Display, err: impl Display) -> StoreError {
    let message = format!("{context}: {err}");
    tracing::error!(error = %message, "database operation failed");
    StoreError::Other(message)
}

/// What the store's writes say: degraded after a failed write until a later
/// write changes something. A transaction's writes count once it commits.
#[derive(Debug, Default)]
pub(crate) struct HealthState {
    degraded: Mutex<Option<Degraded>>,
    /// The directory of a database file: a full disk there is cleared only
    /// once it has room again, since a small update can fit in pages the
    /// file already has while a new record cannot.
    room_at: Option<std::path::PathBuf>,
}

#[derive(Debug)]
struct Degraded {
    reason: String,
    full: bool,
}

/// Free bytes a full disk must have again before writes count as proof
/// that the database writes.
const ROOM_AGAIN: u64 = 1024 * 1024;

impl HealthState {
    /// Health of a database in a file in `dir`.
    pub(crate) fn in_dir(dir: std::path::PathBuf) -> Self {
        Self {
            degraded: Mutex::default(),
            room_at: Some(dir),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Degraded>> {
        self.degraded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn degrade(&self, reason: String, full: bool) {
        let mut degraded = self.lock();
        if degraded.is_none() {
            tracing::error!(reason = %reason, "store degraded: a write failed");
        }
        *degraded = Some(Degraded { reason, full });
    }

    /// Whether the database's disk has room again; unknown counts as yes.
    fn has_room(&self) -> bool {
        let Some(dir) = &self.room_at else {
            return true;
        };
        rustix::fs::statvfs(dir).map_or(true, |fs| {
            fs.f_bavail.saturating_mul(fs.f_frsize) >= ROOM_AGAIN
        })
    }

    fn recover(&self) {
        let mut degraded = self.lock();
        if degraded.as_ref().is_some_and(|d| d.full) && !self.has_room() {
            return;
        }
        if let Some(was) = degraded.take() {
            tracing::info!(was = %was.reason, "store healthy again: a write succeeded");
        }
    }

    pub fn get(&self) -> StoreHealth {
        match &*self.lock() {
            None => StoreHealth::Ok,
            Some(d) => StoreHealth::Degraded(d.reason.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{HealthStore, SettingsStore, SqliteStore};

    /// A store in a file of a new temporary directory, which lives as long
    /// as the directory returned with it.
    async fn file_store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        (dir, store)
    }

    /// A connection of `store`, marked.
    async fn marked_conn(store: &SqliteStore) -> Conn<sqlx::Sqlite> {
        let mut conn = store.conn("test").await.unwrap();
        mark(&mut conn).await;
        conn
    }

    async fn mark(conn: &mut Conn<sqlx::Sqlite>) {
        conn.execute(Q::new("CREATE TEMP TABLE marker (x INTEGER)"), "mark")
            .await
            .unwrap();
    }

    /// How many of the pool's connections carry the marker table: takes
    /// as many connections at once as the pool may hold, so every one is seen.
    async fn marked(store: &SqliteStore) -> usize {
        let mut conns = Vec::new();
        let mut found = 0;
        for _ in 0..store.pool.options().get_max_connections() {
            let mut conn = store.conn("count markers").await.unwrap();
            let q = Q::new("SELECT COUNT(*) AS n FROM sqlite_temp_master WHERE name = 'marker'");
            let row = conn.fetch_optional(q, "count markers").await.unwrap();
            found += row.unwrap().get::<i64>("n").unwrap() as usize;
            conns.push(conn);
        }
        found
    }

    async fn setting(store: &SqliteStore, key: &str) -> Option<String> {
        let q = Q::new("SELECT value FROM settings WHERE key = ").bind(key.to_owned());
        let row = store.fetch_optional(q, "read setting").await.unwrap();
        row.map(|r| r.get("value").unwrap())
    }

    #[tokio::test]
    async fn a_connection_whose_statement_failed_is_never_reused() {
        let (_dir, store) = file_store().await;
        let mut conn = marked_conn(&store).await;
        let err = conn
            .execute(Q::new("UPDATE no_such_table SET x = 1"), "fail")
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Other(ref m) if m.contains("no_such_table")),
            "{err:?}"
        );
        drop(conn);
        assert_eq!(marked(&store).await, 0, "the failed connection came back");
    }

    #[tokio::test]
    async fn a_constraint_refusal_keeps_the_connection() {
        let (_dir, store) = file_store().await;
        let mut conn = marked_conn(&store).await;
        let insert = || Q::new("INSERT INTO settings (key, value) VALUES ('k', 'v')");
        conn.execute(insert(), "insert").await.unwrap();
        let err = conn.execute(insert(), "insert again").await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
        drop(conn);
        assert_eq!(marked(&store).await, 1);
        assert!(store.health().is_ok());
    }

    #[tokio::test]
    async fn a_transaction_left_open_is_closed_with_its_connection() {
        let (_dir, store) = file_store().await;
        let mut conn = store.begin("test").await.unwrap();
        mark(&mut conn).await;
        let q = Q::new("INSERT INTO settings (key, value) VALUES ('open', 'x')");
        conn.execute(q, "write in the transaction").await.unwrap();
        // The call is dropped before it commits or rolls back.
        drop(conn);
        assert_eq!(marked(&store).await, 0, "the open transaction came back");
        assert_eq!(setting(&store, "open").await, None);
        // Nobody holds the write lock: a write gets through at once.
        let write = store.setting_get_or_insert("after", "y");
        let value = tokio::time::timeout(Duration::from_secs(2), write).await;
        assert_eq!(value.unwrap().unwrap(), "y");
        assert_eq!(setting(&store, "after").await.as_deref(), Some("y"));
    }

    #[tokio::test]
    async fn an_in_memory_database_rolls_back_and_keeps_its_connection() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        store.setting_get_or_insert("kept", "1").await.unwrap();
        let mut conn = store.begin("test").await.unwrap();
        let q = Q::new("INSERT INTO settings (key, value) VALUES ('open', 'x')");
        conn.execute(q, "write in the transaction").await.unwrap();
        drop(conn);
        let write = store.setting_get_or_insert("after", "y");
        let value = tokio::time::timeout(Duration::from_secs(2), write).await;
        assert_eq!(value.unwrap().unwrap(), "y");
        assert_eq!(setting(&store, "open").await, None);
        assert_eq!(setting(&store, "kept").await.as_deref(), Some("1"));
        assert_eq!(setting(&store, "after").await.as_deref(), Some("y"));
    }

    #[tokio::test]
    async fn health_follows_the_writes() {
        let (_dir, store) = file_store().await;
        assert_eq!(store.health(), StoreHealth::Ok);
        let err = store
            .execute(Q::new("UPDATE no_such_table SET x = 1"), "a bad write")
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Other(_)));
        let StoreHealth::Degraded(reason) = store.health() else {
            panic!("a failed write left the store healthy");
        };
        assert!(reason.contains("no_such_table"), "{reason}");
        // Reads, and writes that change nothing, prove nothing.
        store.ping().await.unwrap();
        let nothing = Q::new("DELETE FROM settings WHERE key = 'none'");
        assert_eq!(store.execute(nothing, "delete nothing").await.unwrap(), 0);
        assert!(!store.health().is_ok());
        // A rolled-back transaction neither.
        let mut conn = store.begin("test").await.unwrap();
        let q = Q::new("INSERT INTO settings (key, value) VALUES ('rolled', 'back')");
        conn.execute(q, "write").await.unwrap();
        let failed: StoreResult<()> = Err(StoreError::Conflict("the caller gave up".into()));
        assert!(store.finish(conn, failed, "test").await.is_err());
        assert!(!store.health().is_ok());
        assert_eq!(setting(&store, "rolled").await, None);
        // A write that lands does.
        store.probe_write().await.unwrap();
        assert_eq!(store.health(), StoreHealth::Ok);
    }
}
