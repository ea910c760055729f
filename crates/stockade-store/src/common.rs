//! What both backends share: rebuilding a [`Sandbox`] from its row, the SQL of
//! the list filter, and turning sqlx errors into [`StoreError`]s.

use std::fmt::Display;

use chrono::{DateTime, Utc};
use sqlx::{Database, Encode, QueryBuilder, Type};
use stockade_core::{AccountId, Sandbox, SandboxId, SandboxMetadata, SandboxStatus, Scope, TeamId};

use crate::{SandboxFilter, StoreError};

/// The partial unique index that keeps active sandbox names unique per account.
pub(crate) const NAME_INDEX: &str = "sandboxes_account_name_active";

/// The columns of `sandboxes` every read selects, in [`SandboxRow`] order.
/// `{metadata}` is the backend's expression for the metadata text.
pub(crate) fn sandbox_columns(metadata: &str) -> String {
    format!(
        "s.id, s.account_id, s.team_id, s.status, s.status_reason, s.server, s.container_id, \
         s.created_at, s.started_at, s.stopped_at, s.terminated_at, s.deleted_at, s.version, \
         {metadata} AS metadata, s.session_expires_at"
    )
}

/// One `sandboxes` row with timestamps already decoded.
pub(crate) struct SandboxRow {
    pub id: String,
    pub account_id: String,
    pub team_id: Option<String>,
    pub status: String,
    pub status_reason: Option<String>,
    pub server: String,
    pub container_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
    pub terminated_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub version: i64,
    pub metadata: String,
    pub session_expires_at: Option<DateTime<Utc>>,
}

impl SandboxRow {
    /// The record: identity and lifecycle from the columns, the spec and S3
    /// facts from the metadata document. Bad data is an error, never a panic.
    pub fn into_sandbox(self) -> Result<Sandbox, StoreError> {
        let corrupt = |what: String| {
            corrupt_record(format!("sandbox record '{}' is corrupt: {what}", self.id))
        };
        let id = SandboxId::parse(&self.id).map_err(|e| corrupt(e.message))?;
        let account_id = AccountId::parse(&self.account_id).map_err(|e| corrupt(e.message))?;
        let team_id = self
            .team_id
            .as_deref()
            .map(TeamId::parse)
            .transpose()
            .map_err(|e| corrupt(e.message))?;
        let status = SandboxStatus::parse(&self.status).map_err(|e| corrupt(e.message))?;
        let metadata: SandboxMetadata =
            serde_json::from_str(&self.metadata).map_err(|e| corrupt(format!("metadata: {e}")))?;
        Ok(Sandbox {
            id,
            account_id,
            team_id,
            spec: metadata.config,
            status,
            status_reason: self.status_reason,
            server: self.server,
            container_id: self.container_id,
            created_at: self.created_at,
            started_at: self.started_at,
            stopped_at: self.stopped_at,
            terminated_at: self.terminated_at,
            deleted_at: self.deleted_at,
            version: self.version,
            s3_config: metadata.s3_config,
            s3_sync: metadata.s3_sync,
            session_expires_at: self.session_expires_at,
        })
    }
}

/// The metadata column of a record (DB-2).
pub(crate) fn metadata_json(sandbox: &Sandbox) -> Result<String, StoreError> {
    serde_json::to_string(&sandbox.metadata()).map_err(|e| {
        other(
            format_args!("serialize metadata of sandbox {}", sandbox.id),
            e,
        )
    })
}

/// Appends the `WHERE` clause of a list query: what `scope` may see, then
/// every filter. Both backends share it; only the placeholders differ.
pub(crate) fn push_list_filter<'a, DB>(
    qb: &mut QueryBuilder<'a, DB>,
    scope: &Scope,
    filter: &SandboxFilter,
) where
    DB: Database,
    String: Encode<'a, DB> + Type<DB>,
{
    qb.push(" WHERE (s.account_id = ");
    qb.push_bind(scope.account_id.as_str().to_owned());
    if !scope.team_ids.is_empty() {
        qb.push(" OR s.team_id IN (");
        let mut sep = qb.separated(", ");
        for team in &scope.team_ids {
            sep.push_bind(team.as_str().to_owned());
        }
        qb.push(")");
    }
    qb.push(")");

    if !filter.statuses.is_empty() {
        qb.push(" AND s.status IN (");
        let mut sep = qb.separated(", ");
        for status in &filter.statuses {
            sep.push_bind(status.as_str().to_owned());
        }
        qb.push(")");
    }

    match filter.is_active {
        Some(false) => {
            qb.push(" AND (s.status = 'TERMINATED' OR s.deleted_at IS NOT NULL)");
        }
        Some(true) => {
            qb.push(" AND s.status <> 'TERMINATED' AND s.deleted_at IS NULL");
        }
        None if !filter.include_terminated() => {
            qb.push(" AND s.status <> 'TERMINATED' AND s.deleted_at IS NULL");
        }
        None => {}
    }

    // ALL labels: one semi-join each, which the planner can drive from the
    // sandbox (primary-key probe) or from the label index, whichever is cheaper.
    let mut labels: Vec<&str> = filter.labels.iter().map(|l| l.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    for label in labels {
        qb.push(
            " AND EXISTS (SELECT 1 FROM sandbox_labels l WHERE l.sandbox_id = s.id AND l.label = ",
        );
        qb.push_bind(label.to_owned());
        qb.push(")");
    }

    if let Some(team) = &filter.team_id {
        qb.push(" AND s.team_id = ");
        qb.push_bind(team.as_str().to_owned());
    }

    if let Some(name) = &filter.name {
        qb.push(" AND s.name = ");
        qb.push_bind(name.clone());
    }
}

/// Appends the `WHERE` clause that selects one page of the list, newest
/// first. The page's ids are found first (an index-only scan of the listing
/// index, however deep the page), then only those rows are read whole.
pub(crate) fn push_list_page<'a, DB>(
    qb: &mut QueryBuilder<'a, DB>,
    scope: &Scope,
    filter: &SandboxFilter,
) where
    DB: Database,
    String: Encode<'a, DB> + Type<DB>,
{
    const ORDER: &str = " ORDER BY s.created_at DESC, s.id DESC";
    let page = u64::from(filter.page.max(1));
    let per_page = u64::from(filter.per_page);
    qb.push(" WHERE s.id IN (SELECT s.id FROM sandboxes s");
    push_list_filter(qb, scope, filter);
    qb.push(ORDER);
    qb.push(format_args!(
        " LIMIT {per_page} OFFSET {})",
        (page - 1) * per_page
    ));
    qb.push(ORDER);
}

/// The total of a list query when its page already tells: a short page that
/// is not past the end. `None` means counting is needed.
pub(crate) fn known_total(filter: &SandboxFilter, rows: usize) -> Option<u64> {
    let page = u64::from(filter.page.max(1));
    let per_page = u64::from(filter.per_page);
    let rows = rows as u64;
    (rows < per_page && (rows > 0 || page == 1)).then(|| (page - 1) * per_page + rows)
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

/// The error of writing `sandbox` when a unique constraint failed: the name
/// (DB-7) or, far less likely, the id.
pub(crate) fn sandbox_conflict(err: &sqlx::Error, sandbox: &Sandbox) -> Option<StoreError> {
    let db = err
        .as_database_error()
        .filter(|e| e.is_unique_violation())?;
    // Postgres names the index; SQLite names the columns.
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

/// An unexpected database failure, logged with its context (DB-8).
pub(crate) fn other(context: impl Display, err: impl Display) -> StoreError {
    let message = format!("{context}: {err}");
    tracing::error!(error = %message, "database operation failed");
    StoreError::Other(message)
}

fn corrupt_record(message: String) -> StoreError {
    tracing::error!(error = %message, "corrupt record");
    StoreError::Other(message)
}

/// Maps a sqlx error: no row → `NotFound`, a unique violation → `Conflict`,
/// anything else → `Other` with `context`.
pub(crate) fn map_err(context: impl Display) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |err| match err {
        sqlx::Error::RowNotFound => StoreError::NotFound,
        err if is_unique_violation(&err) => StoreError::Conflict(format!("{context}: {err}")),
        err => other(context, err),
    }
}
