//! [`Store`] on SQLite: the embedded default, one database file in WAL mode.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection, SqlitePool};
use stockade_core::{
    Account, AccountId, InstanceId, Sandbox, SandboxId, SandboxStatus, Scope, Snapshot, SnapshotId,
    Team, TeamId,
};

use crate::common::{
    is_foreign_key_violation, is_unique_violation, known_total, map_err, metadata_json, other,
    push_list_filter, push_list_page, sandbox_columns, sandbox_conflict, SandboxRow,
};
use crate::{SandboxFilter, SandboxPage, Store, StoreError, StoreResult};

mod snapshots;
mod teams;

/// The Stockade store in a SQLite database.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` — `sqlite://PATH` or
    /// `sqlite::memory:` — and applies the migrations.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Other(format!("invalid SQLite URL '{url}': {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let pool_options = if in_memory {
            // An in-memory database lives as long as a connection to it, and
            // shared-cache connections lock each other out: keep one, forever.
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            create_parent_dir(options.get_filename())?;
            SqlitePoolOptions::new().max_connections(8)
        };
        let pool = pool_options
            .connect_with(options)
            .await
            .map_err(|e| other(format_args!("cannot open SQLite database '{url}'"), e))?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|e| other(format_args!("cannot migrate SQLite database '{url}'"), e))?;
        Ok(Self { pool })
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

/// Timestamps are stored as RFC 3339 text with exactly six fractional
/// digits, so that text order is time order.
fn ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn opt_ts(t: Option<DateTime<Utc>>) -> Option<String> {
    t.map(ts)
}

fn parse_ts(column: &str, s: &str) -> StoreResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Other(format!("corrupt timestamp '{s}' in column {column}: {e}")))
}

fn get<'r, T>(row: &'r SqliteRow, column: &str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite>,
{
    row.try_get(column)
        .map_err(|e| other(format_args!("read column {column}"), e))
}

fn get_ts(row: &SqliteRow, column: &str) -> StoreResult<DateTime<Utc>> {
    parse_ts(column, &get::<String>(row, column)?)
}

fn get_opt_ts(row: &SqliteRow, column: &str) -> StoreResult<Option<DateTime<Utc>>> {
    get::<Option<String>>(row, column)?
        .map(|s| parse_ts(column, &s))
        .transpose()
}

fn sandbox_from_row(row: &SqliteRow) -> StoreResult<Sandbox> {
    SandboxRow {
        id: get(row, "id")?,
        account_id: get(row, "account_id")?,
        team_id: get(row, "team_id")?,
        status: get(row, "status")?,
        status_reason: get(row, "status_reason")?,
        server: get(row, "server")?,
        container_id: get(row, "container_id")?,
        created_at: get_ts(row, "created_at")?,
        started_at: get_opt_ts(row, "started_at")?,
        stopped_at: get_opt_ts(row, "stopped_at")?,
        terminated_at: get_opt_ts(row, "terminated_at")?,
        deleted_at: get_opt_ts(row, "deleted_at")?,
        version: get(row, "version")?,
        metadata: get(row, "metadata")?,
        session_expires_at: get_opt_ts(row, "session_expires_at")?,
    }
    .into_sandbox()
}

fn account_from_row(row: &SqliteRow) -> StoreResult<Account> {
    let id: String = get(row, "id")?;
    Ok(Account {
        id: AccountId::parse(&id).map_err(|e| {
            StoreError::Other(format!("corrupt account record '{id}': {}", e.message))
        })?,
        name: get(row, "name")?,
        is_admin: get(row, "is_admin")?,
        created_at: get_ts(row, "created_at")?,
    })
}

fn select_sandboxes() -> String {
    format!("SELECT {} FROM sandboxes s", sandbox_columns("s.metadata"))
}

/// Replaces the label rows of a sandbox with its spec's labels.
async fn insert_labels(conn: &mut SqliteConnection, sandbox: &Sandbox) -> Result<(), sqlx::Error> {
    if sandbox.spec.labels.is_empty() {
        return Ok(());
    }
    let mut qb = QueryBuilder::<Sqlite>::new("INSERT INTO sandbox_labels (sandbox_id, label) ");
    qb.push_values(sandbox.spec.labels.iter(), |mut b, label| {
        b.push_bind(sandbox.id.as_str()).push_bind(label.as_str());
    });
    qb.build().execute(conn).await?;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn instance_id(&self) -> StoreResult<InstanceId> {
        const SELECT: &str = "SELECT value FROM settings WHERE key = 'instance_id'";
        let existing: Option<String> = sqlx::query_scalar(SELECT)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err("read instance id"))?;
        let value = match existing {
            Some(v) => v,
            None => {
                // Two first calls at once: one INSERT wins, both read its value.
                sqlx::query(
                    "INSERT INTO settings (key, value) VALUES ('instance_id', ?) \
                     ON CONFLICT (key) DO NOTHING",
                )
                .bind(InstanceId::generate().as_str())
                .execute(&self.pool)
                .await
                .map_err(map_err("create instance id"))?;
                sqlx::query_scalar(SELECT)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(map_err("read instance id"))?
            }
        };
        InstanceId::parse(&value).map_err(|e| other("corrupt instance id in settings", e.message))
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(map_err("ping SQLite"))?;
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }

    #[tracing::instrument(skip_all, fields(account.name = %name), err(level = "debug"))]
    async fn create_account(&self, name: &str, is_admin: bool) -> StoreResult<Account> {
        let account = Account {
            id: AccountId::generate(),
            name: name.to_owned(),
            is_admin,
            // What a later read returns: microsecond precision.
            created_at: Utc::now().trunc_subsecs(6),
        };
        sqlx::query("INSERT INTO accounts (id, name, is_admin, created_at) VALUES (?, ?, ?, ?)")
            .bind(account.id.as_str())
            .bind(&account.name)
            .bind(account.is_admin)
            .bind(ts(account.created_at))
            .execute(&self.pool)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict(format!("an account named '{name}' already exists"))
                } else {
                    other(format_args!("create account '{name}'"), e)
                }
            })?;
        Ok(account)
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn list_accounts(&self) -> StoreResult<Vec<Account>> {
        sqlx::query("SELECT id, name, is_admin, created_at FROM accounts ORDER BY created_at, id")
            .fetch_all(&self.pool)
            .await
            .map_err(map_err("list accounts"))?
            .iter()
            .map(account_from_row)
            .collect()
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn count_accounts(&self) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
            .fetch_one(&self.pool)
            .await
            .map_err(map_err("count accounts"))?;
        Ok(n.max(0) as u64)
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn add_token(&self, account: &AccountId, token_hash: &str) -> StoreResult<()> {
        sqlx::query("INSERT INTO api_tokens (token_hash, account_id, created_at) VALUES (?, ?, ?)")
            .bind(token_hash)
            .bind(account.as_str())
            .bind(ts(Utc::now()))
            .execute(&self.pool)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict("this token is already registered".into())
                } else if is_foreign_key_violation(&e) {
                    StoreError::NotFound
                } else {
                    other(format_args!("add token for account {account}"), e)
                }
            })?;
        Ok(())
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn account_by_token_hash(
        &self,
        token_hash: &str,
    ) -> StoreResult<Option<(Account, Vec<TeamId>)>> {
        // One round trip: this runs on every request.
        let row = sqlx::query(
            "SELECT a.id, a.name, a.is_admin, a.created_at, \
             (SELECT group_concat(m.team_id, ',') FROM team_members m WHERE m.account_id = a.id) AS teams \
             FROM api_tokens t JOIN accounts a ON a.id = t.account_id \
             WHERE t.token_hash = ?",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err("look up token"))?;
        let Some(row) = row else { return Ok(None) };
        let account = account_from_row(&row)?;
        let teams: Option<String> = row.try_get("teams").map_err(map_err(format_args!(
            "list teams of account {}",
            account.id
        )))?;
        let mut teams = teams
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .filter(|t| !t.is_empty())
            .map(|t| TeamId::parse(t).map_err(|e| other("corrupt team membership", e.message)))
            .collect::<StoreResult<Vec<_>>>()?;
        teams.sort();
        Ok(Some((account, teams)))
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %sandbox.id, account.id = %sandbox.account_id), err(level = "debug"))]
    async fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()> {
        let metadata = metadata_json(sandbox)?;
        let context = format!("insert sandbox {}", sandbox.id);
        let mut tx = self.pool.begin().await.map_err(map_err(&context))?;
        sqlx::query(
            "INSERT INTO sandboxes (id, account_id, team_id, name, status, status_reason, server, \
             container_id, created_at, started_at, stopped_at, terminated_at, deleted_at, version, \
             metadata, session_expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(sandbox.id.as_str())
        .bind(sandbox.account_id.as_str())
        .bind(sandbox.team_id.as_ref().map(|t| t.as_str()))
        .bind(sandbox.spec.name.as_str())
        .bind(sandbox.status.as_str())
        .bind(sandbox.status_reason.as_deref())
        .bind(&sandbox.server)
        .bind(sandbox.container_id.as_deref())
        .bind(ts(sandbox.created_at))
        .bind(opt_ts(sandbox.started_at))
        .bind(opt_ts(sandbox.stopped_at))
        .bind(opt_ts(sandbox.terminated_at))
        .bind(opt_ts(sandbox.deleted_at))
        .bind(sandbox.version)
        .bind(&metadata)
        .bind(opt_ts(sandbox.session_expires_at))
        .execute(&mut *tx)
        .await
        .map_err(|e| sandbox_conflict(&e, sandbox).unwrap_or_else(|| other(&context, e)))?;
        insert_labels(&mut tx, sandbox)
            .await
            .map_err(map_err(&context))?;
        tx.commit().await.map_err(map_err(&context))
    }

    #[tracing::instrument(skip_all, fields(account.id = %scope.account_id, sandbox.id = %id), err(level = "debug"))]
    async fn get_sandbox(&self, scope: &Scope, id: &SandboxId) -> StoreResult<Sandbox> {
        let row = sqlx::query(&format!("{} WHERE s.id = ?", select_sandboxes()))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err(format_args!("get sandbox {id}")))?
            .ok_or(StoreError::NotFound)?;
        let sandbox = sandbox_from_row(&row)?;
        if scope.allows(&sandbox.account_id, sandbox.team_id.as_ref()) {
            Ok(sandbox)
        } else {
            Err(StoreError::Forbidden)
        }
    }

    #[tracing::instrument(skip_all, fields(account.id = %scope.account_id, sandbox.name = %name), err(level = "debug"))]
    async fn get_sandbox_by_name(&self, scope: &Scope, name: &str) -> StoreResult<Sandbox> {
        let row = sqlx::query(&format!(
            "{} WHERE s.account_id = ? AND s.name = ? AND s.deleted_at IS NULL",
            select_sandboxes()
        ))
        .bind(scope.account_id.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err(format_args!("get sandbox named '{name}'")))?
        .ok_or(StoreError::NotFound)?;
        sandbox_from_row(&row)
    }

    #[tracing::instrument(skip_all, fields(account.id = %scope.account_id), err(level = "debug"))]
    async fn list_sandboxes(
        &self,
        scope: &Scope,
        filter: &SandboxFilter,
    ) -> StoreResult<SandboxPage> {
        let context = format!("list sandboxes of account {}", scope.account_id);
        let mut query = QueryBuilder::<Sqlite>::new(select_sandboxes());
        push_list_page(&mut query, scope, filter);
        let rows = query
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(map_err(&context))?;
        let sandboxes = rows
            .iter()
            .map(sandbox_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        let total = match known_total(filter, sandboxes.len()) {
            Some(total) => total,
            None => {
                let mut count = QueryBuilder::<Sqlite>::new("SELECT COUNT(*) FROM sandboxes s");
                push_list_filter(&mut count, scope, filter);
                let n: i64 = count
                    .build_query_scalar()
                    .fetch_one(&self.pool)
                    .await
                    .map_err(map_err(&context))?;
                n.max(0) as u64
            }
        };
        Ok(SandboxPage { sandboxes, total })
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %sandbox.id, version = sandbox.version), err(level = "debug"))]
    async fn update_sandbox(&self, sandbox: &Sandbox) -> StoreResult<Sandbox> {
        let metadata = metadata_json(sandbox)?;
        let context = format!("update sandbox {}", sandbox.id);
        let mut tx = self.pool.begin().await.map_err(map_err(&context))?;
        // The write comes first so that SQLite takes the write lock (waiting
        // for other writers) before this transaction reads anything.
        let updated = sqlx::query(
            "UPDATE sandboxes SET account_id = ?, team_id = ?, name = ?, status = ?, \
             status_reason = ?, server = ?, container_id = ?, created_at = ?, started_at = ?, \
             stopped_at = ?, terminated_at = ?, deleted_at = ?, metadata = ?, \
             session_expires_at = ?, version = version + 1 WHERE id = ? AND version = ?",
        )
        .bind(sandbox.account_id.as_str())
        .bind(sandbox.team_id.as_ref().map(|t| t.as_str()))
        .bind(sandbox.spec.name.as_str())
        .bind(sandbox.status.as_str())
        .bind(sandbox.status_reason.as_deref())
        .bind(&sandbox.server)
        .bind(sandbox.container_id.as_deref())
        .bind(ts(sandbox.created_at))
        .bind(opt_ts(sandbox.started_at))
        .bind(opt_ts(sandbox.stopped_at))
        .bind(opt_ts(sandbox.terminated_at))
        .bind(opt_ts(sandbox.deleted_at))
        .bind(&metadata)
        .bind(opt_ts(sandbox.session_expires_at))
        .bind(sandbox.id.as_str())
        .bind(sandbox.version)
        .execute(&mut *tx)
        .await
        .map_err(|e| sandbox_conflict(&e, sandbox).unwrap_or_else(|| other(&context, e)))?
        .rows_affected();
        if updated == 0 {
            let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM sandboxes WHERE id = ?")
                .bind(sandbox.id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err(&context))?;
            return Err(match exists {
                Some(_) => StoreError::Conflict("sandbox was modified concurrently".into()),
                None => StoreError::NotFound,
            });
        }

        let mut stored: Vec<String> =
            sqlx::query_scalar("SELECT label FROM sandbox_labels WHERE sandbox_id = ?")
                .bind(sandbox.id.as_str())
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err(&context))?;
        let mut wanted = sandbox.spec.labels.to_strings();
        stored.sort_unstable();
        wanted.sort_unstable();
        if stored != wanted {
            sqlx::query("DELETE FROM sandbox_labels WHERE sandbox_id = ?")
                .bind(sandbox.id.as_str())
                .execute(&mut *tx)
                .await
                .map_err(map_err(&context))?;
            insert_labels(&mut tx, sandbox)
                .await
                .map_err(map_err(&context))?;
        }
        tx.commit().await.map_err(map_err(&context))?;
        Ok(Sandbox {
            version: sandbox.version + 1,
            ..sandbox.clone()
        })
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id), err(level = "debug"))]
    async fn soft_delete_sandbox(&self, id: &SandboxId, at: DateTime<Utc>) -> StoreResult<()> {
        let at = ts(at);
        let updated = sqlx::query(
            "UPDATE sandboxes SET status = 'TERMINATED', \
             terminated_at = COALESCE(terminated_at, ?), deleted_at = COALESCE(deleted_at, ?), \
             metadata = json_set(metadata, '$.status', 'TERMINATED'), \
             session_expires_at = NULL, version = version + 1 WHERE id = ?",
        )
        .bind(&at)
        .bind(&at)
        .bind(id.as_str())
        .execute(&self.pool)
        .await
        .map_err(map_err(format_args!("soft-delete sandbox {id}")))?
        .rows_affected();
        if updated == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id), err(level = "debug"))]
    async fn purge_sandbox(&self, id: &SandboxId) -> StoreResult<()> {
        // sandbox_labels rows go with it (ON DELETE CASCADE).
        let deleted = sqlx::query("DELETE FROM sandboxes WHERE id = ?")
            .bind(id.as_str())
            .execute(&self.pool)
            .await
            .map_err(map_err(format_args!("purge sandbox {id}")))?
            .rows_affected();
        if deleted == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(limit), err(level = "debug"))]
    async fn list_active_sandboxes_page(
        &self,
        after: Option<&SandboxId>,
        limit: u32,
    ) -> StoreResult<Vec<Sandbox>> {
        sqlx::query(&format!(
            "{} WHERE s.deleted_at IS NULL AND s.id > ? ORDER BY s.id LIMIT ?",
            select_sandboxes()
        ))
        .bind(after.map_or("", |id| id.as_str()))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err("list a page of active sandboxes"))?
        .iter()
        .map(sandbox_from_row)
        .collect()
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn list_active_sandboxes(&self) -> StoreResult<Vec<Sandbox>> {
        sqlx::query(&format!(
            "{} WHERE s.deleted_at IS NULL ORDER BY s.created_at, s.id",
            select_sandboxes()
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err("list active sandboxes"))?
        .iter()
        .map(sandbox_from_row)
        .collect()
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id), err(level = "debug"))]
    async fn sandbox_record_exists(&self, id: &SandboxId) -> StoreResult<bool> {
        let found: Option<i64> = sqlx::query_scalar("SELECT 1 FROM sandboxes WHERE id = ?")
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err(format_args!("look up sandbox {id}")))?;
        Ok(found.is_some())
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id), err(level = "debug"))]
    async fn sandbox_owner(&self, id: &SandboxId) -> StoreResult<Option<crate::RecordOwner>> {
        let context = format!("look up the owner of sandbox {id}");
        let row = sqlx::query(
            "SELECT account_id, team_id, deleted_at IS NOT NULL AS deleted FROM sandboxes WHERE id = ?",
        )
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err(&context))?;
        let Some(row) = row else { return Ok(None) };
        let account: String = row.try_get("account_id").map_err(map_err(&context))?;
        let team: Option<String> = row.try_get("team_id").map_err(map_err(&context))?;
        let deleted: bool = row.try_get("deleted").map_err(map_err(&context))?;
        Ok(Some(crate::RecordOwner {
            account_id: AccountId::parse(&account).map_err(|e| other(&context, e.message))?,
            team_id: team
                .map(|t| TeamId::parse(&t).map_err(|e| other(&context, e.message)))
                .transpose()?,
            deleted,
        }))
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn insert_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        request_hash: &str,
        sandbox: &SandboxId,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO idempotency_keys (account_id, key, request_hash, sandbox_id, created_at) \
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(account.as_str())
        .bind(key)
        .bind(request_hash)
        .bind(sandbox.as_str())
        .bind(ts(Utc::now()))
        .execute(&self.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::Conflict("idempotency key already used".into())
            } else {
                map_err("record idempotency key")(e)
            }
        })?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn get_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
    ) -> StoreResult<Option<(String, SandboxId)>> {
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT request_hash, sandbox_id FROM idempotency_keys WHERE account_id = ? AND key = ?",
        )
        .bind(account.as_str())
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err("read idempotency key"))?;
        match row {
            None => Ok(None),
            Some((hash, id)) => {
                let id = SandboxId::parse(&id)
                    .map_err(|e| other("corrupt sandbox id in idempotency_keys", e.message))?;
                Ok(Some((hash, id)))
            }
        }
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn delete_idempotency_key(&self, account: &AccountId, key: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM idempotency_keys WHERE account_id = ? AND key = ?")
            .bind(account.as_str())
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(map_err("delete idempotency key"))?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(setting.key = %key), err(level = "debug"))]
    async fn setting_get_or_insert(&self, key: &str, value: &str) -> StoreResult<String> {
        // One INSERT wins; everyone reads the value it left.
        sqlx::query("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING")
            .bind(key)
            .bind(value)
            .execute(&self.pool)
            .await
            .map_err(map_err("write setting"))?;
        sqlx::query_scalar("SELECT value FROM settings WHERE key = ?")
            .bind(key)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err("read setting"))
    }

    #[tracing::instrument(skip_all, fields(team.name = %name), err(level = "debug"))]
    async fn create_team(&self, name: &str) -> StoreResult<Team> {
        teams::create(&self.pool, name).await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn list_teams(&self) -> StoreResult<Vec<Team>> {
        teams::list(&self.pool).await
    }

    #[tracing::instrument(skip_all, fields(team.id = %id), err(level = "debug"))]
    async fn get_team(&self, id: &TeamId) -> StoreResult<Team> {
        teams::get_one(&self.pool, id).await
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn teams_of_account(&self, account: &AccountId) -> StoreResult<Vec<Team>> {
        teams::of_account(&self.pool, account).await
    }

    #[tracing::instrument(skip_all, fields(team.id = %team, account.id = %account), err(level = "debug"))]
    async fn add_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()> {
        teams::add_member(&self.pool, team, account).await
    }

    #[tracing::instrument(skip_all, fields(team.id = %team, account.id = %account), err(level = "debug"))]
    async fn remove_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()> {
        teams::remove_member(&self.pool, team, account).await
    }

    #[tracing::instrument(skip_all, fields(team.id = %team), err(level = "debug"))]
    async fn list_team_members(&self, team: &TeamId) -> StoreResult<Vec<Account>> {
        teams::members(&self.pool, team).await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn count_sandboxes_by_status(&self) -> StoreResult<Vec<(SandboxStatus, u64)>> {
        teams::count_by_status(&self.pool).await
    }

    #[tracing::instrument(skip_all, fields(server), err(level = "debug"))]
    async fn claim_expired_sessions(
        &self,
        server: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<Sandbox>> {
        let context = "claim expired sessions";
        let due: Vec<(String, i64)> = sqlx::query_as(
            "SELECT id, version FROM sandboxes WHERE session_expires_at IS NOT NULL \
             AND session_expires_at <= ? AND deleted_at IS NULL AND server = ? \
             ORDER BY session_expires_at LIMIT ?",
        )
        .bind(ts(now))
        .bind(server)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err(context))?;
        let mut claimed = Vec::with_capacity(due.len());
        for (id, version) in due {
            // Only the writer that still sees this version wins the claim.
            let won = sqlx::query(
                "UPDATE sandboxes SET session_expires_at = ?, version = version + 1 \
                 WHERE id = ? AND version = ? AND deleted_at IS NULL",
            )
            .bind(ts(lease_until))
            .bind(&id)
            .bind(version)
            .execute(&self.pool)
            .await
            .map_err(map_err(context))?
            .rows_affected()
                == 1;
            if !won {
                continue;
            }
            let row = sqlx::query(&format!("{} WHERE s.id = ?", select_sandboxes()))
                .bind(&id)
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err(context))?;
            if let Some(row) = row {
                claimed.push(sandbox_from_row(&row)?);
            }
        }
        Ok(claimed)
    }

    // --- snapshots (issue 4): see sqlite/snapshots.rs ---

    async fn insert_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()> {
        self.insert_snapshot_impl(snapshot).await
    }

    async fn get_snapshot(&self, scope: &Scope, id: &SnapshotId) -> StoreResult<Snapshot> {
        self.get_snapshot_impl(scope, id).await
    }

    async fn list_snapshots(
        &self,
        scope: &Scope,
        source: Option<&SandboxId>,
    ) -> StoreResult<Vec<Snapshot>> {
        self.list_snapshots_impl(scope, source).await
    }

    async fn update_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()> {
        self.update_snapshot_impl(snapshot).await
    }

    async fn purge_snapshot(&self, id: &SnapshotId) -> StoreResult<()> {
        self.purge_snapshot_impl(id).await
    }

    async fn pending_snapshots(
        &self,
        creating_before: DateTime<Utc>,
    ) -> StoreResult<Vec<Snapshot>> {
        self.pending_snapshots_impl(creating_before).await
    }
}
