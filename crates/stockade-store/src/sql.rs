//! The seam between the queries (written once) and the two sqlx backends:
//! the [`Backend`] dialect each one supplies, the query builder [`Q`] whose
//! placeholders (`?` or `$n`) the backend's arguments write, the way
//! `QueryBuilder::push_bind` has them write, and typed row access. Queries
//! never name SQLite or PostgreSQL.

use std::future::Future;

use chrono::{DateTime, Utc};

use serde_json::value::RawValue;
use sqlx::error::BoxDynError;
use sqlx::{Arguments, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};

use crate::{StoreError, UnavailableKind};

/// A JSON document as both backends bind and read it (TEXT on SQLite, JSONB
/// on PostgreSQL); the text is carried as is, never re-serialized.
pub(crate) type JsonText = sqlx::types::Json<Box<RawValue>>;

/// `value` may be bound into a query on this backend.
pub trait Bind<T>: Database {
    fn add<'q>(args: &mut Self::Arguments<'q>, value: T) -> Result<(), BoxDynError>;
}

impl<DB, T> Bind<T> for DB
where
    DB: Database,
    T: for<'q> Encode<'q, DB> + Type<DB> + Send + 'static,
{
    fn add<'q>(args: &mut Self::Arguments<'q>, value: T) -> Result<(), BoxDynError> {
        args.add(value)
    }
}

/// Rows of this backend are read by column name.
pub trait Rows: Database {
    fn column<T>(row: &Self::Row, column: &str) -> Result<T, sqlx::Error>
    where
        T: for<'r> Decode<'r, Self> + Type<Self>;
}

impl<DB> Rows for DB
where
    DB: Database,
    for<'c> &'c str: ColumnIndex<DB::Row>,
{
    fn column<T>(row: &Self::Row, column: &str) -> Result<T, sqlx::Error>
    where
        T: for<'r> Decode<'r, Self> + Type<Self>,
    {
        sqlx::Row::try_get(row, column)
    }
}

/// A column of this backend's rows may be read as a `T`.
pub trait Read<T>: Rows {
    fn read(row: &Self::Row, column: &str) -> Result<T, sqlx::Error>;
}

impl<DB, T> Read<T> for DB
where
    DB: Rows,
    T: for<'r> Decode<'r, DB> + Type<DB>,
{
    fn read(row: &Self::Row, column: &str) -> Result<T, sqlx::Error> {
        DB::column(row, column)
    }
}

/// Runs a query on one connection of this backend.
pub trait Run: Database {
    fn execute(
        conn: &mut Self::Connection,
        q: Q<Self>,
    ) -> impl Future<Output = Result<Self::QueryResult, sqlx::Error>> + Send + '_;

    fn fetch_all(
        conn: &mut Self::Connection,
        q: Q<Self>,
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + '_;

    fn fetch_optional(
        conn: &mut Self::Connection,
        q: Q<Self>,
    ) -> impl Future<Output = Result<Option<Self::Row>, sqlx::Error>> + Send + '_;
}

impl<DB> Run for DB
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    async fn execute(
        conn: &mut Self::Connection,
        q: Q<Self>,
    ) -> Result<Self::QueryResult, sqlx::Error> {
        let (sql, args) = q.finish()?;
        sqlx::query_with(&sql, args).execute(conn).await
    }

    async fn fetch_all(
        conn: &mut Self::Connection,
        q: Q<Self>,
    ) -> Result<Vec<Self::Row>, sqlx::Error> {
        let (sql, args) = q.finish()?;
        sqlx::query_with(&sql, args).fetch_all(conn).await
    }

    async fn fetch_optional(
        conn: &mut Self::Connection,
        q: Q<Self>,
    ) -> Result<Option<Self::Row>, sqlx::Error> {
        let (sql, args) = q.finish()?;
        sqlx::query_with(&sql, args).fetch_optional(conn).await
    }
}

/// What one database supplies to the shared queries: its timestamp encoding,
/// a few SQL fragments, and how its failures read to an operator.
pub trait Backend:
    Database
    + Run
    + Rows
    + Bind<String>
    + Bind<Option<String>>
    + Bind<i64>
    + Bind<Option<i64>>
    + Bind<bool>
    + Bind<Option<bool>>
    + Bind<JsonText>
    + Read<String>
    + Read<Option<String>>
    + Read<i64>
    + Read<Option<i64>>
    + Read<bool>
    + Read<Option<bool>>
    + Read<JsonText>
{
    /// How a timestamp is stored: RFC 3339 text on SQLite, `TIMESTAMPTZ` on
    /// PostgreSQL. Either way microseconds, and column order is time order.
    type Ts: for<'q> Encode<'q, Self> + for<'r> Decode<'r, Self> + Type<Self> + Send + 'static;
    /// A timestamp that may be absent (`NULL`).
    type OptTs: for<'q> Encode<'q, Self> + for<'r> Decode<'r, Self> + Type<Self> + Send + 'static;

    /// `"sqlite"` or `"postgres"`.
    const BACKEND: &'static str;
    /// Starts a transaction that writes (SQLite takes the write lock at once,
    /// so a transaction never fails halfway for want of it).
    const BEGIN: &'static str;
    /// The aggregate that joins text values with a separator.
    const GROUP_CONCAT: &'static str;
    /// The `metadata` column with its `status` set to TERMINATED.
    const METADATA_TERMINATED: &'static str;
    /// The statement that makes a write transaction wait for every other
    /// placement and host removal, from whichever instance:
    /// PostgreSQL's transaction-scoped advisory lock on one fixed key.
    /// `None` where [`Backend::BEGIN`] already takes the database's one
    /// write lock (SQLite).
    const PLACEMENT_LOCK: Option<&'static str>;
    /// Makes writers of events take turns until they commit (`None` where
    /// a write transaction holds the database's write lock already).
    const EVENTS_LOCK: Option<&'static str>;
    /// The start of a statement that makes a write transaction wait, until
    /// it commits, for every other one that took the same account's lock;
    /// the account's id is bound after it and `))` closes it. PostgreSQL's
    /// transaction-scoped advisory lock on a key from the id; `None` where
    /// a write transaction holds the database's write lock already.
    const ACCOUNT_LOCK: Option<&'static str>;
    /// What a `SELECT` of one row appends to keep writers of that row out
    /// until the commit (`FOR SHARE`); empty where a write transaction
    /// holds the database's one write lock already.
    const ROW_SHARE: &'static str;
    /// The same for a reader that will write the row (`FOR UPDATE`).
    const ROW_UPDATE: &'static str;

    fn ts(t: DateTime<Utc>) -> Self::Ts;
    fn opt_ts(t: Option<DateTime<Utc>>) -> Self::OptTs;
    fn from_ts(stored: Self::Ts) -> Result<DateTime<Utc>, String>;
    fn from_opt_ts(stored: Self::OptTs) -> Result<Option<DateTime<Utc>>, String>;
    fn rows_affected(result: &Self::QueryResult) -> u64;

    /// When `err` means the database cannot serve now (disk full, read-only,
    /// I/O failure, unreachable): which kind, and what happened at
    /// `location` and what to do.
    fn unavailable(err: &sqlx::Error, location: &str) -> Option<(UnavailableKind, String)>;
}

/// A query being written: SQL text and the values bound in place. Its
/// arguments are made only where it runs, so that their lifetime is the
/// run's (what SQLite's borrowed arguments need).
pub struct Q<B: Database> {
    parts: Vec<Part<B>>,
}

type AddArg<B> =
    Box<dyn for<'q> FnOnce(&mut <B as Database>::Arguments<'q>) -> Result<(), BoxDynError> + Send>;

enum Part<B: Database> {
    Sql(String),
    Bind(AddArg<B>),
}

impl<B: Backend> Q<B> {
    pub fn new(sql: impl Into<String>) -> Self {
        Self {
            parts: vec![Part::Sql(sql.into())],
        }
    }

    /// Appends SQL text.
    pub fn sql(mut self, sql: impl std::fmt::Display) -> Self {
        self.parts.push(Part::Sql(sql.to_string()));
        self
    }

    /// Appends a placeholder (`?` or `$n`) with its value.
    pub fn bind<T>(mut self, value: T) -> Self
    where
        B: Bind<T>,
        T: Send + 'static,
    {
        self.parts
            .push(Part::Bind(Box::new(move |args| B::add(args, value))));
        self
    }

    /// Appends `, ` and a placeholder with its value (the next in a list).
    pub fn next<T>(self, value: T) -> Self
    where
        B: Bind<T>,
        T: Send + 'static,
    {
        self.sql(", ").bind(value)
    }

    /// Appends a timestamp.
    pub fn ts(self, t: DateTime<Utc>) -> Self {
        self.bind(B::ts(t))
    }

    /// Appends a timestamp that may be absent.
    pub fn opt_ts(self, t: Option<DateTime<Utc>>) -> Self {
        self.bind(B::opt_ts(t))
    }

    /// Appends `, ` and a timestamp.
    pub fn next_ts(self, t: DateTime<Utc>) -> Self {
        self.sql(", ").ts(t)
    }

    /// Appends `, ` and a timestamp that may be absent.
    pub fn next_opt_ts(self, t: Option<DateTime<Utc>>) -> Self {
        self.sql(", ").opt_ts(t)
    }

    /// Appends `, column = ` and a placeholder with its value (the next
    /// assignment of an UPDATE).
    pub fn set<T>(self, column: &str, value: T) -> Self
    where
        B: Bind<T>,
        T: Send + 'static,
    {
        self.sql(format_args!(", {column} = ")).bind(value)
    }

    /// Appends `, column = ` and a timestamp.
    pub fn set_ts(self, column: &str, t: DateTime<Utc>) -> Self {
        self.sql(format_args!(", {column} = ")).ts(t)
    }

    /// Appends `, column = ` and a timestamp that may be absent.
    pub fn set_opt_ts(self, column: &str, t: Option<DateTime<Utc>>) -> Self {
        self.sql(format_args!(", {column} = ")).opt_ts(t)
    }
}

impl<B: Database> Q<B> {
    /// The SQL with this backend's placeholders (`?` or `$n`, as
    /// `QueryBuilder::push_bind` writes them) and the arguments.
    fn finish<'q>(self) -> Result<(String, B::Arguments<'q>), sqlx::Error> {
        let mut sql = String::new();
        let mut args = B::Arguments::default();
        for part in self.parts {
            match part {
                Part::Sql(text) => sql.push_str(&text),
                Part::Bind(add) => {
                    add(&mut args).map_err(sqlx::Error::Encode)?;
                    args.format_placeholder(&mut sql)
                        .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
                }
            }
        }
        Ok((sql, args))
    }
}

/// One result row, read by column name; bad data is an error, never a panic.
pub struct DbRow<B: Database>(pub B::Row);

impl<B: Backend> DbRow<B> {
    pub fn get<T>(&self, column: &str) -> Result<T, StoreError>
    where
        B: Read<T>,
    {
        B::read(&self.0, column).map_err(|e| corrupt(column, e))
    }

    pub fn ts(&self, column: &str) -> Result<DateTime<Utc>, StoreError> {
        let stored = B::read(&self.0, column).map_err(|e| corrupt(column, e))?;
        B::from_ts(stored).map_err(|e| corrupt(column, e))
    }

    pub fn opt_ts(&self, column: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        let stored = B::read(&self.0, column).map_err(|e| corrupt(column, e))?;
        B::from_opt_ts(stored).map_err(|e| corrupt(column, e))
    }

    /// A JSON column's text.
    pub fn json(&self, column: &str) -> Result<String, StoreError> {
        let doc: JsonText = self.get(column)?;
        Ok(doc.0.get().to_owned())
    }
}

fn corrupt(column: &str, err: impl std::fmt::Display) -> StoreError {
    let message = format!("cannot read column {column}: {err}");
    tracing::error!(error = %message, "corrupt record");
    StoreError::Other(message)
}

/// A JSON document to bind, from its text.
pub(crate) fn json_text(text: String) -> Result<JsonText, StoreError> {
    RawValue::from_string(text)
        .map(sqlx::types::Json)
        .map_err(|e| StoreError::Other(format!("not a JSON document: {e}")))
}
