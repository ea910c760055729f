//! Durable operations: [`OperationStore`]. The `operations`
//! table holds at most one row per target, so inserting one is taking the
//! target's lock; leases are claimed with a conditional update, so of two
//! instances claiming at once exactly one wins.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use stockade_core::{AccountId, Operation, OperationId, OperationKind, Sandbox};

use super::corrupt;
use crate::db::{Conn, SqlStore};
use crate::sql::{json_text, Backend, DbRow, Q};
use crate::{OperationStore, SandboxWrite, StoreError, StoreResult};

const COLUMNS: &str = "id, target, kind, account_id, holder, lease_until, params, created_at";

fn operation_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Operation> {
    let id: String = row.get("id")?;
    let bad = |problem: String| corrupt("operation", &id, problem);
    let kind: String = row.get("kind")?;
    let account_id: String = row.get("account_id")?;
    Ok(Operation {
        id: OperationId::parse(&id).map_err(|e| bad(e.message))?,
        target: row.get("target")?,
        kind: OperationKind::parse(&kind).map_err(|e| bad(e.message))?,
        account_id: AccountId::parse(&account_id).map_err(|e| bad(e.message))?,
        holder: row.get("holder")?,
        lease_until: row.ts("lease_until")?,
        params: serde_json::from_str(&row.json("params")?)
            .map_err(|e| bad(format!("params: {e}")))?,
        created_at: row.ts("created_at")?,
    })
}

/// The update that takes operation `id` over if its lease ended at or
/// before `now` (and, when given, it is still `holder_was`'s): of two
/// claimers, the second finds the new lease and misses.
fn claim<B: Backend>(
    id: String,
    holder_was: Option<String>,
    holder: &str,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
) -> Q<B> {
    let mut q = Q::<B>::new("UPDATE operations SET holder = ")
        .bind(holder.to_owned())
        .set_ts("lease_until", lease_until)
        .sql(" WHERE id = ")
        .bind(id)
        .sql(" AND lease_until <= ")
        .ts(now);
    if let Some(was) = holder_was {
        q = q.sql(" AND holder = ").bind(was);
    }
    q.sql(format!(" RETURNING {COLUMNS}"))
}

/// A claim must end in the future, or a second claimer could win too.
fn check_lease(now: DateTime<Utc>, lease_until: DateTime<Utc>) -> StoreResult<()> {
    if lease_until > now {
        Ok(())
    } else {
        Err(StoreError::Other(format!(
            "lease_until ({lease_until}) must be after now ({now})"
        )))
    }
}

impl<B: Backend> SqlStore<B> {
    /// Begins `op` (when given) and inserts `sandbox`, inside the caller's
    /// transaction: what a create writes (`insert_sandbox_with_operation`,
    /// a placement).
    pub(super) async fn insert_sandbox_with_operation_in(
        &self,
        conn: &mut Conn<B>,
        sandbox: &Sandbox,
        op: Option<&Operation>,
        context: &str,
    ) -> StoreResult<()> {
        if let Some(op) = op {
            self.begin_operation_in(conn, op, context).await?;
        }
        self.insert_sandbox_in(conn, sandbox, context).await
    }

    /// Inserts `op` unless its target already has an operation (`Conflict`).
    async fn begin_operation_in(
        &self,
        conn: &mut Conn<B>,
        op: &Operation,
        context: &str,
    ) -> StoreResult<()> {
        let q = Q::<B>::new(format!("INSERT INTO operations ({COLUMNS}) VALUES ("))
            .bind(op.id.to_string())
            .next(op.target.clone())
            .next(op.kind.as_str().to_owned())
            .next(op.account_id.to_string())
            .next(op.holder.clone())
            .next_ts(op.lease_until)
            .next(json_text(op.params.to_string())?)
            .next_ts(op.created_at)
            .sql(") ON CONFLICT (target) DO NOTHING");
        if conn.execute(q, context).await? > 0 {
            return Ok(());
        }
        let existing =
            Q::<B>::new("SELECT kind FROM operations WHERE target = ").bind(op.target.clone());
        let kind = match conn.fetch_optional(existing, context).await? {
            Some(row) => row.get::<String>("kind")?,
            None => "another".to_owned(),
        };
        Err(StoreError::Conflict(format!(
            "{} already has a {kind} operation in progress",
            op.target
        )))
    }

    /// Ends operation `id` if `holder` still holds it; `Conflict` otherwise.
    async fn end_held_in(
        &self,
        conn: &mut Conn<B>,
        id: &OperationId,
        holder: &str,
        context: &str,
    ) -> StoreResult<()> {
        let q = Q::<B>::new("DELETE FROM operations WHERE id = ")
            .bind(id.to_string())
            .sql(" AND holder = ")
            .bind(holder.to_owned());
        if conn.execute(q, context).await? > 0 {
            return Ok(());
        }
        let now_held =
            Q::<B>::new("SELECT holder FROM operations WHERE id = ").bind(id.to_string());
        let row = conn.fetch_optional(now_held, context).await?;
        Err(StoreError::Conflict(match row {
            Some(row) => format!(
                "operation {id} is held by {} now, not by {holder}: it was claimed after its \
                 lease ended",
                row.get::<String>("holder")?
            ),
            None => format!("operation {id} is no longer in progress: another server ended it"),
        }))
    }

    async fn write_in(
        &self,
        conn: &mut Conn<B>,
        write: SandboxWrite<'_>,
        context: &str,
    ) -> StoreResult<Option<Sandbox>> {
        match write {
            SandboxWrite::Update(sandbox) => self
                .update_sandbox_in(conn, sandbox, context)
                .await
                .map(Some),
            SandboxWrite::SoftDelete { id, at } => self.soft_delete_in(conn, id, at, context).await,
            SandboxWrite::Purge { id } => {
                self.purge_in(conn, id, context).await?;
                Ok(None)
            }
            SandboxWrite::None => Ok(None),
        }
    }
}

#[async_trait]
impl<B: Backend> OperationStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(operation.id = %op.id, operation.target = %op.target, operation.kind = %op.kind), err(level = "debug"))]
    async fn begin_operation(&self, op: &Operation) -> StoreResult<()> {
        let context = format!("begin {} operation on {}", op.kind, op.target);
        let mut conn = self.conn(&context).await?;
        self.begin_operation_in(&mut conn, op, &context).await
    }

    #[tracing::instrument(skip_all, fields(operation.target = %target), err(level = "debug"))]
    async fn get_operation(&self, target: &str) -> StoreResult<Option<Operation>> {
        let q = Q::<B>::new(format!("SELECT {COLUMNS} FROM operations WHERE target = "))
            .bind(target.to_owned());
        let row = self
            .fetch_optional(q, &format!("get the operation on {target}"))
            .await?;
        row.as_ref().map(operation_from_row).transpose()
    }

    #[tracing::instrument(skip_all, fields(holder = %holder), err(level = "debug"))]
    async fn renew_operations(&self, holder: &str, lease_until: DateTime<Utc>) -> StoreResult<u64> {
        let q = Q::<B>::new("UPDATE operations SET lease_until = ")
            .ts(lease_until)
            .sql(" WHERE holder = ")
            .bind(holder.to_owned());
        self.execute(q, &format!("renew the leases of {holder}"))
            .await
    }

    #[tracing::instrument(skip_all, fields(operation.id = %id), err(level = "debug"))]
    async fn end_operation(&self, id: &OperationId) -> StoreResult<()> {
        let q = Q::<B>::new("DELETE FROM operations WHERE id = ").bind(id.to_string());
        self.execute(q, &format!("end operation {id}"))
            .await
            .map(drop)
    }

    #[tracing::instrument(skip_all, fields(holder = %holder, limit), err(level = "debug"))]
    async fn claim_expired_operations(
        &self,
        holder: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<Operation>> {
        check_lease(now, lease_until)?;
        let due = Q::<B>::new("SELECT id, holder FROM operations WHERE lease_until <= ")
            .ts(now)
            .sql(" ORDER BY created_at, id LIMIT ")
            .bind(i64::from(limit));
        let take = |row: &DbRow<B>| -> StoreResult<Q<B>> {
            Ok(claim(
                row.get("id")?,
                Some(row.get("holder")?),
                holder,
                now,
                lease_until,
            ))
        };
        self.claim_each(due, take, operation_from_row, "claim expired operations")
            .await
    }

    #[tracing::instrument(skip_all, fields(operation.id = %id, holder = %holder), err(level = "debug"))]
    async fn claim_operation(
        &self,
        id: &OperationId,
        holder: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> StoreResult<Option<Operation>> {
        check_lease(now, lease_until)?;
        let context = format!("claim operation {id}");
        let q = claim(id.to_string(), None, holder, now, lease_until);
        let row = self
            .conn(&context)
            .await?
            .returning_optional(q, &context)
            .await?;
        row.as_ref().map(operation_from_row).transpose()
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %sandbox.id, operation.id = %op.id), err(level = "debug"))]
    async fn insert_sandbox_with_operation(
        &self,
        sandbox: &Sandbox,
        op: &Operation,
    ) -> StoreResult<()> {
        let context = format!(
            "insert sandbox {} with its {} operation",
            sandbox.id, op.kind
        );
        let mut conn = self.begin(&context).await?;
        let result = self
            .insert_sandbox_with_operation_in(&mut conn, sandbox, Some(op), &context)
            .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(operation.id = %id, holder = %holder), err(level = "debug"))]
    async fn finish_operation(
        &self,
        id: &OperationId,
        holder: &str,
        write: SandboxWrite<'_>,
    ) -> StoreResult<Option<Sandbox>> {
        let context = format!("finish operation {id}");
        let mut conn = self.begin(&context).await?;
        let result = async {
            self.end_held_in(&mut conn, id, holder, &context).await?;
            self.write_in(&mut conn, write, &context).await
        }
        .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, fields(limit), err(level = "debug"))]
    async fn list_operations(&self, limit: u32) -> StoreResult<Vec<Operation>> {
        let q = Q::<B>::new(format!(
            "SELECT {COLUMNS} FROM operations ORDER BY created_at, id LIMIT "
        ))
        .bind(i64::from(limit));
        self.list(q, "list operations", operation_from_row).await
    }
}
