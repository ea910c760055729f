//! Sandbox records: [`SandboxStore`], and the record writes that other roles
//! make inside their own transactions (an operation's start and end).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use stockade_core::events::{sandbox_events, Event};
use stockade_core::{
    AccountId, Resources, Sandbox, SandboxId, SandboxMetadata, SandboxStatus, Scope, TeamId,
};

use super::corrupt;
use crate::db::{other, Conn, SqlStore};
use crate::sql::{json_text, Backend, DbRow, Q};
use crate::{RecordOwner, SandboxFilter, SandboxPage, SandboxStore, StoreError, StoreResult};

/// The partial unique index that keeps active sandbox names unique per account.
const NAME_INDEX: &str = "sandboxes_account_name_active";

/// The columns every read of a record selects.
const COLUMNS: [&str; 17] = [
    "id",
    "account_id",
    "team_id",
    "status",
    "status_reason",
    "server",
    "container_id",
    "created_at",
    "started_at",
    "stopped_at",
    "terminated_at",
    "deleted_at",
    "version",
    "metadata",
    "session_expires_at",
    "paused_at",
    "resumed_at",
];

/// [`COLUMNS`], each after `prefix` (`"s."` in a query over `sandboxes s`;
/// `""` in `RETURNING`, where SQLite takes no table names).
fn columns(prefix: &str) -> String {
    COLUMNS
        .iter()
        .map(|c| format!("{prefix}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn select<B: Backend>() -> Q<B> {
    Q::new(format!("SELECT {} FROM sandboxes s", columns("s.")))
}

/// The record: identity and lifecycle from the columns, the spec and S3
/// facts from the metadata document.
fn sandbox_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Sandbox> {
    let id: String = row.get("id")?;
    let bad = |problem: String| corrupt("sandbox", &id, problem);
    let metadata: SandboxMetadata =
        serde_json::from_str(&row.json("metadata")?).map_err(|e| bad(format!("metadata: {e}")))?;
    let account_id: String = row.get("account_id")?;
    let team_id: Option<String> = row.get("team_id")?;
    let status: String = row.get("status")?;
    Ok(Sandbox {
        id: SandboxId::parse(&id).map_err(|e| bad(e.message))?,
        account_id: AccountId::parse(&account_id).map_err(|e| bad(e.message))?,
        team_id: team_id
            .as_deref()
            .map(TeamId::parse)
            .transpose()
            .map_err(|e| bad(e.message))?,
        spec: metadata.config,
        status: SandboxStatus::parse(&status).map_err(|e| bad(e.message))?,
        status_reason: row.get("status_reason")?,
        server: row.get("server")?,
        container_id: row.get("container_id")?,
        created_at: row.ts("created_at")?,
        started_at: row.opt_ts("started_at")?,
        stopped_at: row.opt_ts("stopped_at")?,
        terminated_at: row.opt_ts("terminated_at")?,
        deleted_at: row.opt_ts("deleted_at")?,
        version: row.get("version")?,
        s3_config: metadata.s3_config,
        s3_sync: metadata.s3_sync,
        session_expires_at: row.opt_ts("session_expires_at")?,
        paused_at: row.opt_ts("paused_at")?,
        resumed_at: row.opt_ts("resumed_at")?,
    })
}

fn sandboxes_from_rows<B: Backend>(rows: Vec<DbRow<B>>) -> StoreResult<Vec<Sandbox>> {
    rows.iter().map(sandbox_from_row).collect()
}

/// The metadata column of a record.
fn metadata<B: Backend>(sandbox: &Sandbox) -> StoreResult<crate::sql::JsonText> {
    serde_json::to_string(&sandbox.metadata())
        .map_err(|e| {
            other(
                format_args!("serialize metadata of sandbox {}", sandbox.id),
                e,
            )
        })
        .and_then(json_text)
}

/// The resource columns of a record: CPU in thousandths
/// of a core, memory in bytes, disk in GB, from its spec.
fn resources(sandbox: &Sandbox) -> (i64, i64, i64) {
    let r = Resources::of(&sandbox.spec);
    let whole = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    (
        whole(r.cpu_millis),
        whole(r.memory_bytes),
        i64::from(sandbox.spec.disk_size_gb),
    )
}

/// The error of writing `sandbox` when a unique constraint failed: the name
/// or, far less likely, the id.
fn sandbox_conflict(err: &sqlx::Error, sandbox: &Sandbox) -> Option<StoreError> {
    let db = err
        .as_database_error()
        .filter(|e| e.is_unique_violation())?;
    // PostgreSQL names the index; SQLite names the columns.
    let on_name = db.constraint() == Some(NAME_INDEX) || db.message().contains("sandboxes.name");
    Some(if on_name {
        StoreError::Conflict(format!(
            "a sandbox named '{}' already exists",
            sandbox.spec.name
        ))
    } else {
        StoreError::Conflict(format!("a sandbox with id '{}' already exists", sandbox.id))
    })
}

/// Appends the `WHERE` clause of a list query: what `scope` may see, then
/// every filter.
fn list_filter<B: Backend>(mut q: Q<B>, scope: &Scope, filter: &SandboxFilter) -> Q<B> {
    q = q
        .sql(" WHERE (s.account_id = ")
        .bind(scope.account_id.to_string());
    for (i, team) in scope.team_ids.iter().enumerate() {
        q = q.sql(if i == 0 { " OR s.team_id IN (" } else { ", " });
        q = q.bind(team.to_string());
    }
    q = q.sql(if scope.team_ids.is_empty() { ")" } else { "))" });

    for (i, status) in filter.statuses.iter().enumerate() {
        q = q.sql(if i == 0 { " AND s.status IN (" } else { ", " });
        q = q.bind(status.as_str().to_owned());
    }
    if !filter.statuses.is_empty() {
        q = q.sql(")");
    }

    const ACTIVE: &str = " AND s.status <> 'TERMINATED' AND s.deleted_at IS NULL";
    q = match filter.is_active {
        Some(false) => q.sql(" AND (s.status = 'TERMINATED' OR s.deleted_at IS NOT NULL)"),
        Some(true) => q.sql(ACTIVE),
        None if !filter.include_terminated() => q.sql(ACTIVE),
        None => q,
    };

    // ALL labels: one semi-join each, which the planner can drive from the
    // sandbox (primary-key probe) or from the label index, whichever is cheaper.
    let mut labels: Vec<&str> = filter.labels.iter().map(|l| l.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    for label in labels {
        q = q
            .sql(" AND EXISTS (SELECT 1 FROM sandbox_labels l WHERE l.sandbox_id = s.id AND l.label = ")
            .bind(label.to_owned())
            .sql(")");
    }
    if let Some(team) = &filter.team_id {
        q = q.sql(" AND s.team_id = ").bind(team.to_string());
    }
    if let Some(name) = &filter.name {
        q = q.sql(" AND s.name = ").bind(name.clone());
    }
    q
}

/// Appends the `WHERE` clause that selects one page of the list, newest
/// first. The page's ids are found first (an index-only scan of the listing
/// index, however deep the page), then only those rows are read whole.
fn list_page<B: Backend>(q: Q<B>, scope: &Scope, filter: &SandboxFilter) -> Q<B> {
    const ORDER: &str = " ORDER BY s.created_at DESC, s.id DESC";
    let page = u64::from(filter.page.max(1));
    let per_page = u64::from(filter.per_page);
    let q = q.sql(" WHERE s.id IN (SELECT s.id FROM sandboxes s");
    list_filter(q, scope, filter)
        .sql(ORDER)
        .sql(format_args!(
            " LIMIT {per_page} OFFSET {})",
            (page - 1) * per_page
        ))
        .sql(ORDER)
}

/// The total of a list query when its page already tells: a short page that
/// is not past the end. `None` means counting is needed.
fn known_total(filter: &SandboxFilter, rows: usize) -> Option<u64> {
    let page = u64::from(filter.page.max(1));
    let per_page = u64::from(filter.per_page);
    let rows = rows as u64;
    (rows < per_page && (rows > 0 || page == 1)).then(|| (page - 1) * per_page + rows)
}

/// Record writes inside a caller's transaction.
impl<B: Backend> SqlStore<B> {
    pub(crate) async fn insert_sandbox_in(
        &self,
        conn: &mut Conn<B>,
        sandbox: &Sandbox,
        context: &str,
    ) -> StoreResult<()> {
        let (cpu, memory, disk) = resources(sandbox);
        let q = Q::<B>::new(format!(
            "INSERT INTO sandboxes (name, cpu_millis, memory_bytes, disk_gb, {}) VALUES (",
            columns("")
        ))
        .bind(sandbox.spec.name.as_str().to_owned())
        .next(cpu)
        .next(memory)
        .next(disk)
        .next(sandbox.id.to_string())
        .next(sandbox.account_id.to_string())
        .next(sandbox.team_id.as_ref().map(|t| t.to_string()))
        .next(sandbox.status.as_str().to_owned())
        .next(sandbox.status_reason.clone())
        .next(sandbox.server.clone())
        .next(sandbox.container_id.clone())
        .next_ts(sandbox.created_at)
        .next_opt_ts(sandbox.started_at)
        .next_opt_ts(sandbox.stopped_at)
        .next_opt_ts(sandbox.terminated_at)
        .next_opt_ts(sandbox.deleted_at)
        .next(sandbox.version)
        .next(metadata::<B>(sandbox)?)
        .next_opt_ts(sandbox.session_expires_at)
        .next_opt_ts(sandbox.paused_at)
        .next_opt_ts(sandbox.resumed_at)
        .sql(")");
        conn.execute_refined(q, context, |e| sandbox_conflict(e, sandbox))
            .await?;
        self.insert_labels_in(conn, sandbox, context).await?;
        self.insert_mounts_in(conn, sandbox, context).await?;
        let events = sandbox_events(None, sandbox, Utc::now());
        self.write_events_in(conn, &events, context).await
    }

    /// The record as stored now, inside the caller's transaction: what a
    /// write's events are measured against.
    async fn stored_in(
        &self,
        conn: &mut Conn<B>,
        id: &SandboxId,
        context: &str,
    ) -> StoreResult<Option<Sandbox>> {
        let q = select::<B>().sql(" WHERE s.id = ").bind(id.to_string());
        let row = conn.fetch_optional(q, context).await?;
        row.as_ref().map(sandbox_from_row).transpose()
    }

    /// Inserts the label rows of a sandbox (its spec's labels).
    async fn insert_labels_in(
        &self,
        conn: &mut Conn<B>,
        sandbox: &Sandbox,
        context: &str,
    ) -> StoreResult<()> {
        if sandbox.spec.labels.is_empty() {
            return Ok(());
        }
        let mut q = Q::<B>::new("INSERT INTO sandbox_labels (sandbox_id, label) VALUES ");
        for (i, label) in sandbox.spec.labels.iter().enumerate() {
            q = q
                .sql(if i == 0 { "(" } else { ", (" })
                .bind(sandbox.id.to_string())
                .next(label.as_str().to_owned())
                .sql(")");
        }
        conn.execute(q, context).await?;
        Ok(())
    }

    /// The optimistic update: the record with its new version.
    pub(super) async fn update_sandbox_in(
        &self,
        conn: &mut Conn<B>,
        sandbox: &Sandbox,
        context: &str,
    ) -> StoreResult<Sandbox> {
        let before = self.stored_in(conn, &sandbox.id, context).await?;
        let (cpu, memory, disk) = resources(sandbox);
        let q = Q::<B>::new("UPDATE sandboxes SET account_id = ")
            .bind(sandbox.account_id.to_string())
            .set("cpu_millis", cpu)
            .set("memory_bytes", memory)
            .set("disk_gb", disk)
            .set("team_id", sandbox.team_id.as_ref().map(|t| t.to_string()))
            .set("name", sandbox.spec.name.as_str().to_owned())
            .set("status", sandbox.status.as_str().to_owned())
            .set("status_reason", sandbox.status_reason.clone())
            .set("server", sandbox.server.clone())
            .set("container_id", sandbox.container_id.clone())
            .set_ts("created_at", sandbox.created_at)
            .set_opt_ts("started_at", sandbox.started_at)
            .set_opt_ts("stopped_at", sandbox.stopped_at)
            .set_opt_ts("terminated_at", sandbox.terminated_at)
            .set_opt_ts("deleted_at", sandbox.deleted_at)
            .set("metadata", metadata::<B>(sandbox)?)
            .set_opt_ts("session_expires_at", sandbox.session_expires_at)
            .set_opt_ts("paused_at", sandbox.paused_at)
            .set_opt_ts("resumed_at", sandbox.resumed_at)
            .sql(", version = version + 1 WHERE id = ")
            .bind(sandbox.id.to_string())
            .sql(" AND version = ")
            .bind(sandbox.version);
        let updated = conn
            .execute_refined(q, context, |e| sandbox_conflict(e, sandbox))
            .await?;
        if updated == 0 {
            let exists = Q::<B>::new("SELECT 1 AS found FROM sandboxes WHERE id = ")
                .bind(sandbox.id.to_string());
            let exists = conn.fetch_optional(exists, context).await?;
            return Err(match exists {
                Some(_) => StoreError::Conflict("sandbox was modified concurrently".into()),
                None => StoreError::NotFound,
            });
        }

        let stored = Q::<B>::new("SELECT label FROM sandbox_labels WHERE sandbox_id = ")
            .bind(sandbox.id.to_string());
        let mut stored = conn
            .fetch_all(stored, context)
            .await?
            .iter()
            .map(|row| row.get::<String>("label"))
            .collect::<StoreResult<Vec<_>>>()?;
        let mut wanted = sandbox.spec.labels.to_strings();
        stored.sort_unstable();
        wanted.sort_unstable();
        if stored != wanted {
            let q = Q::<B>::new("DELETE FROM sandbox_labels WHERE sandbox_id = ")
                .bind(sandbox.id.to_string());
            conn.execute(q, context).await?;
            self.insert_labels_in(conn, sandbox, context).await?;
        }
        let events = sandbox_events(before.as_ref(), sandbox, Utc::now());
        self.write_events_in(conn, &events, context).await?;
        Ok(Sandbox {
            version: sandbox.version + 1,
            ..sandbox.clone()
        })
    }

    /// Marks the record TERMINATED and soft-deleted at `at` (a second delete
    /// keeps the first times); the record as now stored, `None` when there
    /// is none.
    pub(super) async fn soft_delete_in(
        &self,
        conn: &mut Conn<B>,
        id: &SandboxId,
        at: DateTime<Utc>,
        context: &str,
    ) -> StoreResult<Option<Sandbox>> {
        let before = self.stored_in(conn, id, context).await?;
        let q = Q::<B>::new(
            "UPDATE sandboxes SET status = 'TERMINATED', terminated_at = COALESCE(terminated_at, ",
        )
        .ts(at)
        .sql("), deleted_at = COALESCE(deleted_at, ")
        .ts(at)
        .sql(format_args!(
            "), metadata = {}, session_expires_at = NULL, version = version + 1 WHERE id = ",
            B::METADATA_TERMINATED
        ))
        .bind(id.to_string())
        .sql(format_args!(" RETURNING {}", columns("")));
        let row = conn.returning_optional(q, context).await?;
        let after = row.as_ref().map(sandbox_from_row).transpose()?;
        if let Some(after) = &after {
            let events = sandbox_events(before.as_ref(), after, at);
            self.write_events_in(conn, &events, context).await?;
        }
        Ok(after)
    }

    /// Removes a record for good; whether there was one. Its labels go with
    /// it (ON DELETE CASCADE).
    pub(super) async fn purge_in(
        &self,
        conn: &mut Conn<B>,
        id: &SandboxId,
        context: &str,
    ) -> StoreResult<bool> {
        let q = Q::<B>::new("DELETE FROM sandboxes WHERE id = ").bind(id.to_string());
        let deleted = conn.execute(q, context).await?;
        Ok(deleted > 0)
    }
}

#[async_trait]
impl<B: Backend> SandboxStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(sandbox.id = %sandbox.id, account.id = %sandbox.account_id), err(level = "debug"))]
    async fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()> {
        self.insert_grouped(sandbox).await
    }

    #[tracing::instrument(skip_all, fields(account.id = %scope.account_id, sandbox.id = %id), err(level = "debug"))]
    async fn get_sandbox(&self, scope: &Scope, id: &SandboxId) -> StoreResult<Sandbox> {
        let q = select::<B>().sql(" WHERE s.id = ").bind(id.to_string());
        let sandbox = self
            .one(q, &format!("get sandbox {id}"), sandbox_from_row)
            .await?;
        if scope.allows(&sandbox.account_id, sandbox.team_id.as_ref()) {
            Ok(sandbox)
        } else {
            Err(StoreError::Forbidden)
        }
    }

    #[tracing::instrument(skip_all, fields(account.id = %scope.account_id, sandbox.name = %name), err(level = "debug"))]
    async fn get_sandbox_by_name(&self, scope: &Scope, name: &str) -> StoreResult<Sandbox> {
        let q = select::<B>()
            .sql(" WHERE s.account_id = ")
            .bind(scope.account_id.to_string())
            .sql(" AND s.name = ")
            .bind(name.to_owned())
            .sql(" AND s.deleted_at IS NULL");
        self.one(q, &format!("get sandbox named '{name}'"), sandbox_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(account.id = %scope.account_id), err(level = "debug"))]
    async fn list_sandboxes(
        &self,
        scope: &Scope,
        filter: &SandboxFilter,
    ) -> StoreResult<SandboxPage> {
        let context = format!("list sandboxes of account {}", scope.account_id);
        let rows = self
            .fetch_all(list_page(select::<B>(), scope, filter), &context)
            .await?;
        let sandboxes = sandboxes_from_rows(rows)?;
        let total = match known_total(filter, sandboxes.len()) {
            Some(total) => total,
            None => {
                let count = Q::<B>::new("SELECT COUNT(*) AS n FROM sandboxes s");
                let row = self
                    .fetch_optional(list_filter(count, scope, filter), &context)
                    .await?;
                let n: i64 = row.map_or(Ok(0), |r| r.get("n"))?;
                n.max(0) as u64
            }
        };
        Ok(SandboxPage { sandboxes, total })
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %sandbox.id, version = sandbox.version), err(level = "debug"))]
    async fn update_sandbox(&self, sandbox: &Sandbox) -> StoreResult<Sandbox> {
        let context = format!("update sandbox {}", sandbox.id);
        let mut conn = self.begin(&context).await?;
        let result = self.update_sandbox_in(&mut conn, sandbox, &context).await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id), err(level = "debug"))]
    async fn soft_delete_sandbox(&self, id: &SandboxId, at: DateTime<Utc>) -> StoreResult<()> {
        let context = format!("soft-delete sandbox {id}");
        let mut conn = self.begin(&context).await?;
        let result = match self.soft_delete_in(&mut conn, id, at, &context).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(StoreError::NotFound),
            Err(e) => Err(e),
        };
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id), err(level = "debug"))]
    async fn purge_sandbox(&self, id: &SandboxId) -> StoreResult<()> {
        let context = format!("purge sandbox {id}");
        let mut conn = self.conn(&context).await?;
        match self.purge_in(&mut conn, id, &context).await? {
            true => Ok(()),
            false => Err(StoreError::NotFound),
        }
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn list_active_sandboxes(&self) -> StoreResult<Vec<Sandbox>> {
        let q = select::<B>().sql(" WHERE s.deleted_at IS NULL ORDER BY s.created_at, s.id");
        self.list(q, "list active sandboxes", sandbox_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(limit), err(level = "debug"))]
    async fn list_active_sandboxes_page(
        &self,
        after: Option<&SandboxId>,
        limit: u32,
    ) -> StoreResult<Vec<Sandbox>> {
        let q = select::<B>()
            .sql(" WHERE s.deleted_at IS NULL AND s.id > ")
            .bind(after.map_or(String::new(), |id| id.to_string()))
            .sql(" ORDER BY s.id LIMIT ")
            .bind(i64::from(limit));
        self.list(q, "list a page of active sandboxes", sandbox_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id), err(level = "debug"))]
    async fn sandbox_record_exists(&self, id: &SandboxId) -> StoreResult<bool> {
        let q = Q::<B>::new("SELECT 1 AS found FROM sandboxes WHERE id = ").bind(id.to_string());
        let row = self
            .fetch_optional(q, &format!("look up sandbox {id}"))
            .await?;
        Ok(row.is_some())
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id), err(level = "debug"))]
    async fn sandbox_owner(&self, id: &SandboxId) -> StoreResult<Option<RecordOwner>> {
        let context = format!("look up the owner of sandbox {id}");
        let q = Q::<B>::new(
            "SELECT account_id, team_id, deleted_at IS NOT NULL AS deleted FROM sandboxes WHERE id = ",
        )
        .bind(id.to_string());
        let Some(row) = self.fetch_optional(q, &context).await? else {
            return Ok(None);
        };
        let account: String = row.get("account_id")?;
        let team: Option<String> = row.get("team_id")?;
        let bad = |problem: String| corrupt("sandbox", id.as_str(), problem);
        Ok(Some(RecordOwner {
            account_id: AccountId::parse(&account).map_err(|e| bad(e.message))?,
            team_id: team
                .map(|t| TeamId::parse(&t).map_err(|e| bad(e.message)))
                .transpose()?,
            deleted: row.get("deleted")?,
        }))
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn count_sandboxes_by_status(&self) -> StoreResult<Vec<(SandboxStatus, u64)>> {
        let q = Q::<B>::new(
            "SELECT status, COUNT(*) AS n FROM sandboxes WHERE deleted_at IS NULL GROUP BY status",
        );
        self.fetch_all(q, "count sandboxes by status")
            .await?
            .iter()
            .map(|row| {
                let status: String = row.get("status")?;
                let n: i64 = row.get("n")?;
                let status = SandboxStatus::parse(&status)
                    .map_err(|e| other("corrupt sandbox status", e.message))?;
                Ok((status, n.max(0) as u64))
            })
            .collect()
    }

    #[tracing::instrument(skip_all, fields(server), err(level = "debug"))]
    async fn claim_expired_sessions(
        &self,
        server: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<Sandbox>> {
        let due = Q::<B>::new(
            "SELECT id, version FROM sandboxes WHERE session_expires_at IS NOT NULL \
             AND session_expires_at <= ",
        )
        .ts(now)
        .sql(" AND deleted_at IS NULL AND server = ")
        .bind(server.to_owned())
        .sql(" ORDER BY session_expires_at LIMIT ")
        .bind(i64::from(limit));
        // Only the writer that still sees the version it read wins; on
        // PostgreSQL the row lock makes a concurrent claimer re-check and miss.
        let claim = |row: &DbRow<B>| -> StoreResult<Q<B>> {
            Ok(Q::new("UPDATE sandboxes SET session_expires_at = ")
                .ts(lease_until)
                .sql(", version = version + 1 WHERE id = ")
                .bind(row.get::<String>("id")?)
                .sql(" AND version = ")
                .bind(row.get::<i64>("version")?)
                .sql(" AND deleted_at IS NULL RETURNING ")
                .sql(columns("")))
        };
        let context = "claim expired sessions";
        let rows = self.fetch_all(due, context).await?;
        let mut won = Vec::new();
        for row in rows {
            let mut conn = self.begin(context).await?;
            let result = async {
                let Some(row) = conn.returning_optional(claim(&row)?, context).await? else {
                    return Ok(None);
                };
                let sandbox = sandbox_from_row(&row)?;
                let action = sandbox.spec.timeout_action().as_str();
                let event = Event::timed_out(&sandbox, action, now);
                self.write_events_in(&mut conn, &[event], context).await?;
                Ok(Some(sandbox))
            }
            .await;
            if let Some(sandbox) = self.finish(conn, result, context).await? {
                won.push(sandbox);
            }
        }
        Ok(won)
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id), err(level = "debug"))]
    async fn extend_session(&self, id: &SandboxId, until: DateTime<Utc>) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE sandboxes SET session_expires_at = ")
            .ts(until)
            .sql(" WHERE id = ")
            .bind(id.to_string())
            .sql(" AND status = 'RUNNING' AND deleted_at IS NULL AND session_expires_at IS NOT NULL AND session_expires_at < ")
            .ts(until);
        self.execute(q, "extend a session").await?;
        Ok(())
    }
}
