//! Accounts and API tokens: [`AccountStore`].

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use stockade_core::{Account, AccountId, TeamId, TokenId, TokenKind, TokenRecord};

use super::corrupt;
use crate::db::{is_foreign_key_violation, is_unique_violation, other, Conn, SqlStore};
use crate::sql::{Backend, DbRow, Q};
use crate::{AccountStore, Authenticated, StoreError, StoreResult};

pub(super) const ACCOUNT_COLUMNS: &str = "a.id, a.name, a.is_admin, a.created_at, a.disabled_at";

/// The columns every credential read selects (`t.` is `api_tokens`).
const TOKEN_COLUMNS: &str = "t.id AS token_id, t.account_id AS token_account_id, \
     t.name AS token_name, t.kind AS token_kind, t.created_at AS token_created_at, \
     t.expires_at AS token_expires_at, t.last_used_at AS token_last_used_at, \
     t.parent_id AS token_parent_id";

fn token_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<TokenRecord> {
    let id: String = row.get("token_id")?;
    let bad = |problem: String| corrupt("token", &id, problem);
    let account: String = row.get("token_account_id")?;
    let kind: String = row.get("token_kind")?;
    let parent: Option<String> = row.get("token_parent_id")?;
    Ok(TokenRecord {
        id: TokenId::parse(&id).map_err(|e| bad(e.message))?,
        account_id: AccountId::parse(&account).map_err(|e| bad(e.message))?,
        kind: TokenKind::parse(&kind).map_err(|e| bad(e.message))?,
        parent_id: parent
            .map(|p| TokenId::parse(&p))
            .transpose()
            .map_err(|e| bad(e.message))?,
        name: row.get("token_name")?,
        created_at: row.ts("token_created_at")?,
        expires_at: row.opt_ts("token_expires_at")?,
        last_used_at: row.opt_ts("token_last_used_at")?,
    })
}

/// The teams column of a read (`GROUP_CONCAT` of ids), parsed and sorted.
fn teams_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Vec<TeamId>> {
    let teams: Option<String> = row.get("teams")?;
    let mut teams = teams
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| TeamId::parse(t).map_err(|e| other("corrupt team membership", e.message)))
        .collect::<StoreResult<Vec<_>>>()?;
    teams.sort();
    Ok(teams)
}

/// The select list of an account with its teams (`a.` is `accounts`).
fn account_with_teams<B: Backend>() -> String {
    format!(
        "{ACCOUNT_COLUMNS}, (SELECT {}(m.team_id, ',') FROM team_members m \
         WHERE m.account_id = a.id) AS teams",
        B::GROUP_CONCAT
    )
}

pub(super) fn account_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Account> {
    let id: String = row.get("id")?;
    Ok(Account {
        id: AccountId::parse(&id).map_err(|e| corrupt("account", &id, e.message))?,
        name: row.get("name")?,
        is_admin: row.get("is_admin")?,
        created_at: row.ts("created_at")?,
        disabled_at: row.opt_ts("disabled_at")?,
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
        // What a later read returns: microsecond precision.
        let account = Account::new(name, is_admin, Utc::now().trunc_subsecs(6));
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

    #[tracing::instrument(skip_all, fields(account.id = %id), err(level = "debug"))]
    async fn get_account(&self, id: &AccountId) -> StoreResult<(Account, Vec<TeamId>)> {
        let q = Q::<B>::new(format!(
            "SELECT {} FROM accounts a WHERE a.id = ",
            account_with_teams::<B>()
        ))
        .bind(id.to_string());
        let row = self
            .fetch_optional(q, &format!("get account {id}"))
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok((account_from_row(&row)?, teams_from_row(&row)?))
    }

    #[tracing::instrument(skip_all, fields(account.id = %id), err(level = "debug"))]
    async fn set_account_disabled(
        &self,
        id: &AccountId,
        at: Option<DateTime<Utc>>,
    ) -> StoreResult<Account> {
        let q = Q::<B>::new("UPDATE accounts SET disabled_at = ")
            .opt_ts(at.map(|t| t.trunc_subsecs(6)))
            .sql(" WHERE id = ")
            .bind(id.to_string());
        self.execute_one(q, &format!("set account {id} disabled"))
            .await?;
        Ok(self.get_account(id).await?.0)
    }

    #[tracing::instrument(skip_all, fields(account.id = %r.account_id, token.id = %r.id), err(level = "debug"))]
    async fn insert_token(&self, r: &TokenRecord, token_hash: &str) -> StoreResult<()> {
        let context = format!("add token for account {}", r.account_id);
        let mut conn = self.begin(&context).await?;
        let result = async {
            let expired = Q::<B>::new("DELETE FROM api_tokens WHERE account_id = ")
                .bind(r.account_id.to_string())
                .sql(" AND expires_at IS NOT NULL AND expires_at <= ")
                .ts(Utc::now());
            conn.execute(expired, &context).await?;
            let q = Q::<B>::new(
                "INSERT INTO api_tokens (token_hash, account_id, created_at, id, name, kind, \
                 expires_at, last_used_at, parent_id) VALUES (",
            )
            .bind(token_hash.to_owned())
            .next(r.account_id.to_string())
            .next_ts(r.created_at)
            .next(r.id.to_string())
            .next(r.name.clone())
            .next(r.kind.as_str().to_owned())
            .next_opt_ts(r.expires_at)
            .next_opt_ts(r.last_used_at)
            .next(r.parent_id.as_ref().map(ToString::to_string))
            .sql(")");
            conn.execute_refined(q, &context, |e| {
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
        .await;
        self.finish(conn, result, &context).await
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn authenticate(&self, token_hash: &str) -> StoreResult<Option<Authenticated>> {
        // One round trip: this runs on every request.
        let q = Q::<B>::new(format!(
            "SELECT {}, {TOKEN_COLUMNS} \
             FROM api_tokens t JOIN accounts a ON a.id = t.account_id WHERE t.token_hash = ",
            account_with_teams::<B>()
        ))
        .bind(token_hash.to_owned())
        .sql(" AND (t.expires_at IS NULL OR t.expires_at > ")
        .ts(Utc::now())
        .sql(")");
        let Some(row) = self.fetch_optional(q, "look up token").await? else {
            return Ok(None);
        };
        Ok(Some(Authenticated {
            account: account_from_row(&row)?,
            team_ids: teams_from_row(&row)?,
            token: token_from_row(&row)?,
        }))
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn list_tokens(&self, account: &AccountId) -> StoreResult<Vec<TokenRecord>> {
        let q = Q::<B>::new(format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens t WHERE t.account_id = "
        ))
        .bind(account.to_string())
        .sql(" AND (t.expires_at IS NULL OR t.expires_at > ")
        .ts(Utc::now())
        .sql(") ORDER BY t.created_at DESC, t.id DESC");
        self.list(
            q,
            &format!("list tokens of account {account}"),
            token_from_row,
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(token.id = %id), err(level = "debug"))]
    async fn get_token(&self, id: &TokenId) -> StoreResult<TokenRecord> {
        let q = Q::<B>::new(format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens t WHERE t.id = "
        ))
        .bind(id.to_string());
        self.one(q, &format!("get token {id}"), token_from_row)
            .await
    }

    #[tracing::instrument(skip_all, fields(token.id = %id), err(level = "debug"))]
    async fn delete_token(&self, id: &TokenId) -> StoreResult<()> {
        let q = Q::<B>::new("DELETE FROM api_tokens WHERE id = ")
            .bind(id.to_string())
            .sql(" OR parent_id = ")
            .bind(id.to_string());
        self.execute_one(q, &format!("delete token {id}")).await
    }

    #[tracing::instrument(skip_all, fields(token.id = %id), err(level = "debug"))]
    async fn touch_token(&self, id: &TokenId, at: DateTime<Utc>) -> StoreResult<()> {
        let q = Q::<B>::new("UPDATE api_tokens SET last_used_at = ")
            .ts(at.trunc_subsecs(6))
            .sql(" WHERE id = ")
            .bind(id.to_string());
        self.execute(q, &format!("touch token {id}"))
            .await
            .map(drop)
    }
}
