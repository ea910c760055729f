//! [`Store`] on PostgreSQL: for several server instances on one database (SCALE-2).

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder, Row};
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

/// The Stockade store in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
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
        let target = format!(
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
                    format_args!("cannot connect to PostgreSQL at {target} (is it running, and are the user, password and database right?)"),
                    e,
                )
            })?;
        sqlx::migrate!("./migrations/postgres")
            .run(&pool)
            .await
            .map_err(|e| {
                other(
                    format_args!("cannot migrate PostgreSQL database {target}"),
                    e,
                )
            })?;
        Ok(Self { pool })
    }
}

fn get<'r, T>(row: &'r PgRow, column: &str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    row.try_get(column)
        .map_err(|e| other(format_args!("read column {column}"), e))
}

fn sandbox_from_row(row: &PgRow) -> StoreResult<Sandbox> {
    SandboxRow {
        id: get(row, "id")?,
        account_id: get(row, "account_id")?,
        team_id: get(row, "team_id")?,
        status: get(row, "status")?,
        status_reason: get(row, "status_reason")?,
        server: get(row, "server")?,
        container_id: get(row, "container_id")?,
        created_at: get(row, "created_at")?,
        started_at: get(row, "started_at")?,
        stopped_at: get(row, "stopped_at")?,
        terminated_at: get(row, "terminated_at")?,
        deleted_at: get(row, "deleted_at")?,
        version: get(row, "version")?,
        metadata: get(row, "metadata")?,
        session_expires_at: get(row, "session_expires_at")?,
    }
    .into_sandbox()
}

fn account_from_row(row: &PgRow) -> StoreResult<Account> {
    let id: String = get(row, "id")?;
    Ok(Account {
        id: AccountId::parse(&id).map_err(|e| {
            StoreError::Other(format!("corrupt account record '{id}': {}", e.message))
        })?,
        name: get(row, "name")?,
        is_admin: get(row, "is_admin")?,
        created_at: get(row, "created_at")?,
    })
}

fn select_sandboxes() -> String {
    format!(
        "SELECT {} FROM sandboxes s",
        sandbox_columns("s.metadata::text")
    )
}

/// Inserts the label rows of a sandbox (its spec's labels).
async fn insert_labels(conn: &mut PgConnection, sandbox: &Sandbox) -> Result<(), sqlx::Error> {
    if sandbox.spec.labels.is_empty() {
        return Ok(());
    }
    let mut qb = QueryBuilder::<Postgres>::new("INSERT INTO sandbox_labels (sandbox_id, label) ");
    qb.push_values(sandbox.spec.labels.iter(), |mut b, label| {
        b.push_bind(sandbox.id.as_str()).push_bind(label.as_str());
    });
    qb.build().execute(conn).await?;
    Ok(())
}

#[async_trait]
impl Store for PgStore {
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
                    "INSERT INTO settings (key, value) VALUES ('instance_id', $1) \
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
            .map_err(map_err("ping PostgreSQL"))?;
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "postgres"
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
        sqlx::query(
            "INSERT INTO accounts (id, name, is_admin, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(account.id.as_str())
        .bind(&account.name)
        .bind(account.is_admin)
        .bind(account.created_at)
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
        sqlx::query(
            "INSERT INTO api_tokens (token_hash, account_id, created_at) VALUES ($1, $2, $3)",
        )
        .bind(token_hash)
        .bind(account.as_str())
        .bind(Utc::now())
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
             (SELECT string_agg(m.team_id, ',') FROM team_members m WHERE m.account_id = a.id) AS teams \
             FROM api_tokens t JOIN accounts a ON a.id = t.account_id \
             WHERE t.token_hash = $1",
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
             metadata, session_expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15::jsonb, $16)",
        )
        .bind(sandbox.id.as_str())
        .bind(sandbox.account_id.as_str())
        .bind(sandbox.team_id.as_ref().map(|t| t.as_str()))
        .bind(sandbox.spec.name.as_str())
        .bind(sandbox.status.as_str())
        .bind(sandbox.status_reason.as_deref())
        .bind(&sandbox.server)
        .bind(sandbox.container_id.as_deref())
        .bind(sandbox.created_at)
        .bind(sandbox.started_at)
        .bind(sandbox.stopped_at)
        .bind(sandbox.terminated_at)
        .bind(sandbox.deleted_at)
        .bind(sandbox.version)
        .bind(&metadata)
        .bind(sandbox.session_expires_at)
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
        let row = sqlx::query(&format!("{} WHERE s.id = $1", select_sandboxes()))
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
            "{} WHERE s.account_id = $1 AND s.name = $2 AND s.deleted_at IS NULL",
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
        let mut query = QueryBuilder::<Postgres>::new(select_sandboxes());
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
                let mut count = QueryBuilder::<Postgres>::new("SELECT COUNT(*) FROM sandboxes s");
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
        // The row lock taken here serializes concurrent writers; the loser
        // re-checks `version` after the winner commits and updates nothing.
        let updated = sqlx::query(
            "UPDATE sandboxes SET account_id = $1, team_id = $2, name = $3, status = $4, \
             status_reason = $5, server = $6, container_id = $7, created_at = $8, \
             started_at = $9, stopped_at = $10, terminated_at = $11, deleted_at = $12, \
             metadata = $13::jsonb, session_expires_at = $14, version = version + 1 \
             WHERE id = $15 AND version = $16",
        )
        .bind(sandbox.account_id.as_str())
        .bind(sandbox.team_id.as_ref().map(|t| t.as_str()))
        .bind(sandbox.spec.name.as_str())
        .bind(sandbox.status.as_str())
        .bind(sandbox.status_reason.as_deref())
        .bind(&sandbox.server)
        .bind(sandbox.container_id.as_deref())
        .bind(sandbox.created_at)
        .bind(sandbox.started_at)
        .bind(sandbox.stopped_at)
        .bind(sandbox.terminated_at)
        .bind(sandbox.deleted_at)
        .bind(&metadata)
        .bind(sandbox.session_expires_at)
        .bind(sandbox.id.as_str())
        .bind(sandbox.version)
        .execute(&mut *tx)
        .await
        .map_err(|e| sandbox_conflict(&e, sandbox).unwrap_or_else(|| other(&context, e)))?
        .rows_affected();
        if updated == 0 {
            let exists = sqlx::query("SELECT 1 FROM sandboxes WHERE id = $1")
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
            sqlx::query_scalar("SELECT label FROM sandbox_labels WHERE sandbox_id = $1")
                .bind(sandbox.id.as_str())
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err(&context))?;
        let mut wanted = sandbox.spec.labels.to_strings();
        stored.sort_unstable();
        wanted.sort_unstable();
        if stored != wanted {
            sqlx::query("DELETE FROM sandbox_labels WHERE sandbox_id = $1")
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
        let updated = sqlx::query(
            "UPDATE sandboxes SET status = 'TERMINATED', \
             terminated_at = COALESCE(terminated_at, $1), deleted_at = COALESCE(deleted_at, $1), \
             metadata = jsonb_set(metadata, '{status}', '\"TERMINATED\"'), \
             session_expires_at = NULL, version = version + 1 WHERE id = $2",
        )
        .bind(at)
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
        let deleted = sqlx::query("DELETE FROM sandboxes WHERE id = $1")
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
            "{} WHERE s.deleted_at IS NULL AND s.id > $1 ORDER BY s.id LIMIT $2",
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
        let found = sqlx::query("SELECT 1 FROM sandboxes WHERE id = $1")
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
            "SELECT account_id, team_id, deleted_at IS NOT NULL AS deleted FROM sandboxes WHERE id = $1",
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
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(account.as_str())
        .bind(key)
        .bind(request_hash)
        .bind(sandbox.as_str())
        .bind(Utc::now())
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
            "SELECT request_hash, sandbox_id FROM idempotency_keys WHERE account_id = $1 AND key = $2",
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
        sqlx::query("DELETE FROM idempotency_keys WHERE account_id = $1 AND key = $2")
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
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(value)
        .execute(&self.pool)
        .await
        .map_err(map_err("write setting"))?;
        sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
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
             AND session_expires_at <= $1 AND deleted_at IS NULL AND server = $2 \
             ORDER BY session_expires_at LIMIT $3",
        )
        .bind(now)
        .bind(server)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err(context))?;
        let mut claimed = Vec::with_capacity(due.len());
        for (id, version) in due {
            // Only the writer that still sees this version wins the claim:
            // the row lock makes a concurrent claimer re-check and miss.
            let row = sqlx::query(&format!(
                "UPDATE sandboxes s SET session_expires_at = $1, version = s.version + 1 \
                 WHERE s.id = $2 AND s.version = $3 AND s.deleted_at IS NULL RETURNING {}",
                sandbox_columns("s.metadata::text")
            ))
            .bind(lease_until)
            .bind(&id)
            .bind(version)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err(context))?;
            if let Some(row) = row {
                claimed.push(sandbox_from_row(&row)?);
            }
        }
        Ok(claimed)
    }

    // --- snapshots (issue 4): see postgres/snapshots.rs ---

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
