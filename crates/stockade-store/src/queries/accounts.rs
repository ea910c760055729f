//! Accounts and API tokens: [`AccountStore`].

use async_trait::async_trait;
use chrono::{SubsecRound, Utc};
use stockade_core::{Account, AccountId, TeamId};

use super::corrupt;
use crate::db::{is_foreign_key_violation, is_unique_violation, other, Conn, SqlStore};
use crate::sql::{Backend, DbRow, Q};
use crate::{AccountStore, StoreError, StoreResult};

pub(super) const ACCOUNT_COLUMNS: &str = "a.id, a.name, a.is_admin, a.created_at";

pub(super) fn account_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Account> {
    let id: String = row.get("id")?;
    Ok(Account {
        id: AccountId::parse(&id).map_err(|e| corrupt("account", &id, e.message))?,
        name: row.get("name")?,
        is_admin: row.get("is_admin")?,
        created_at: row.ts("created_at")?,
    })
}

impl<B: Backend> SqlStore<B> {
    /// Inserts `account`; a taken name is a `Conflict`.
    pub(super) async fn insert_account_in(
        &self,
        conn: &mut Conn<B>,
        account: &Account,
        context: &str,
    ) -> StoreResult<()> {
        let q = Q::<B>::new("INSERT INTO accounts (id, name, is_admin, created_at) VALUES (")
            .bind(account.id.to_string())
            .next(account.name.clone())
            .next(account.is_admin)
            .next_ts(account.created_at)
            .sql(")");
        let name = &account.name;
        conn.execute_refined(q, context, |e| {
            is_unique_violation(e)
                .then(|| StoreError::Conflict(format!("an account named '{name}' already exists")))
        })
        .await
        .map(drop)
    }
}

#[async_trait]
impl<B: Backend> AccountStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(account.name = %name), err(level = "debug"))]
    async fn create_account(&self, name: &str, is_admin: bool) -> StoreResult<Account> {
        let account = Account {
            id: AccountId::generate(),
            name: name.to_owned(),
            is_admin,
            // What a later read returns: microsecond precision.
            created_at: Utc::now().trunc_subsecs(6),
        };
        let context = format!("create account '{name}'");
        let mut conn = self.conn(&context).await?;
        self.insert_account_in(&mut conn, &account, &context)
            .await?;
        Ok(account)
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn list_accounts(&self) -> StoreResult<Vec<Account>> {
        let q = Q::new(format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts a ORDER BY a.created_at, a.id"
        ));
        self.list(q, "list accounts", account_from_row).await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn count_accounts(&self) -> StoreResult<u64> {
        let q = Q::new("SELECT COUNT(*) AS n FROM accounts");
        let row = self.fetch_optional(q, "count accounts").await?;
        let n: i64 = row.map_or(Ok(0), |r| r.get("n"))?;
        Ok(n.max(0) as u64)
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn add_token(&self, account: &AccountId, token_hash: &str) -> StoreResult<()> {
        let q = Q::<B>::new("INSERT INTO api_tokens (token_hash, account_id, created_at) VALUES (")
            .bind(token_hash.to_owned())
            .next(account.to_string())
            .next_ts(Utc::now())
            .sql(")");
        let context = format!("add token for account {account}");
        self.execute_refined(q, &context, |e| {
            if is_unique_violation(e) {
                Some(StoreError::Conflict(
                    "this token is already registered".into(),
                ))
            } else {
                is_foreign_key_violation(e).then_some(StoreError::NotFound)
            }
        })
        .await
        .map(drop)
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn account_by_token_hash(
        &self,
        token_hash: &str,
    ) -> StoreResult<Option<(Account, Vec<TeamId>)>> {
        // One round trip: this runs on every request.
        let q = Q::<B>::new(format!(
            "SELECT {ACCOUNT_COLUMNS}, (SELECT {}(m.team_id, ',') FROM team_members m \
             WHERE m.account_id = a.id) AS teams \
             FROM api_tokens t JOIN accounts a ON a.id = t.account_id WHERE t.token_hash = ",
            B::GROUP_CONCAT
        ))
        .bind(token_hash.to_owned());
        let Some(row) = self.fetch_optional(q, "look up token").await? else {
            return Ok(None);
        };
        let account = account_from_row(&row)?;
        let teams: Option<String> = row.get("teams")?;
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
}
