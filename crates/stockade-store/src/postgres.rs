//! PostgreSQL, for several server instances on one database:
//! connect, migrate, and its dialect.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgQueryResult};
use sqlx::Postgres;

use crate::db::{other, SqlStore};
use crate::sql::Backend;
use crate::{StoreError, StoreResult, UnavailableKind};

/// The Stockade store in a PostgreSQL database.
pub type PgStore = SqlStore<Postgres>;

impl SqlStore<Postgres> {
    /// Connects to `url` (`postgres://USER:PASSWORD@HOST:PORT/DB`) and applies
    /// the migrations. Safe to run from several instances at once: the
    /// migrator holds an advisory lock while it works.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = PgConnectOptions::from_str(url).map_err(|e| {
            StoreError::Other(format!(
                "invalid PostgreSQL URL: {e} (expected postgres://USER:PASSWORD@HOST:PORT/DB)"
            ))
        })?;
        // Never print the password.
        let location = format!(
            "{}@{}:{}/{}",
            options.get_username(),
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or(options.get_username())
        );
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map_err(|e| {
                other(
                    format_args!("cannot connect to PostgreSQL at {location} (is it running, and are the user, password and database right?)"),
                    e,
                )
            })?;
        sqlx::migrate!("./migrations/postgres")
            .run(&pool)
            .await
            .map_err(|e| {
                other(
                    format_args!("cannot migrate PostgreSQL database {location}"),
                    e,
                )
            })?;
        Ok(Self::new(pool, &location, true))
    }
}

impl Backend for Postgres {
    type Ts = DateTime<Utc>;
    type OptTs = Option<DateTime<Utc>>;

    const BACKEND: &'static str = "postgres";
    const BEGIN: &'static str = "BEGIN";
    const GROUP_CONCAT: &'static str = "string_agg";
    const METADATA_TERMINATED: &'static str = "jsonb_set(metadata, '{status}', '\"TERMINATED\"')";
    /// The key follows the placement lock's.
    const EVENTS_LOCK: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock(8319392507950756980)");
    /// The key is "stkhosts" in ASCII.
    const PLACEMENT_LOCK: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock(8319392507950756979)");
    /// The two-key form, whose keys never meet the one-key locks above:
    /// "stka" in ASCII, and the hash of the account's id.
    const ACCOUNT_LOCK: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock(1937009505, hashtext(");
    const ROW_SHARE: &'static str = " FOR SHARE";
    const ROW_UPDATE: &'static str = " FOR UPDATE";

    fn ts(t: DateTime<Utc>) -> DateTime<Utc> {
        t
    }

    fn opt_ts(t: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
        t
    }

    fn from_ts(stored: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
        Ok(stored)
    }

    fn from_opt_ts(stored: Option<DateTime<Utc>>) -> Result<Option<DateTime<Utc>>, String> {
        Ok(stored)
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn unavailable(err: &sqlx::Error, location: &str) -> Option<(UnavailableKind, String)> {
        let state = match err {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed => {
                return Some((
                    UnavailableKind::Unreachable,
                    format!(
                        "cannot reach PostgreSQL at {location} ({err}): is the server running \
                         and reachable?"
                    ),
                ))
            }
            sqlx::Error::Database(db) => db.code()?.into_owned(),
            _ => return None,
        };
        if state == "53100" {
            return Some((
                UnavailableKind::Full,
                format!(
                    "PostgreSQL at {location} is out of disk space ({err}): free space on the \
                     database server's data directory"
                ),
            ));
        }
        // Insufficient resources, system errors, shutdowns, lost connections,
        // and a server that only reads (a standby).
        let unavailable = ["53", "58", "57P", "08"]
            .iter()
            .any(|class| state.starts_with(class))
            || state == "25006";
        let kind = match state.as_str() {
            "25006" => UnavailableKind::ReadOnly,
            s if s.starts_with("08") => UnavailableKind::Unreachable,
            _ => UnavailableKind::Failing,
        };
        unavailable.then(|| {
            (
                kind,
                format!(
                    "PostgreSQL at {location} cannot serve this now ({err}): check the server's \
                     health, disk and logs"
                ),
            )
        })
    }
}
