//! Teams: [`TeamStore`].

use async_trait::async_trait;
use chrono::{SubsecRound, Utc};
use stockade_core::{Account, AccountId, Team, TeamId};

use super::accounts::{account_from_row, ACCOUNT_COLUMNS};
use super::corrupt;
use crate::db::{is_foreign_key_violation, is_unique_violation, SqlStore};
use crate::sql::{Backend, DbRow, Q};
use crate::{StoreError, StoreResult, TeamStore};

const TEAM_COLUMNS: &str = "t.id, t.name, t.created_at";

fn team_from_row<B: Backend>(row: &DbRow<B>) -> StoreResult<Team> {
    let id: String = row.get("id")?;
    Ok(Team {
        id: TeamId::parse(&id).map_err(|e| corrupt("team", &id, e.message))?,
        name: row.get("name")?,
        created_at: row.ts("created_at")?,
    })
}

#[async_trait]
impl<B: Backend> TeamStore for SqlStore<B> {
    #[tracing::instrument(skip_all, fields(team.name = %name), err(level = "debug"))]
    async fn create_team(&self, name: &str) -> StoreResult<Team> {
        let team = Team {
            id: TeamId::generate(),
            name: name.to_owned(),
            created_at: Utc::now().trunc_subsecs(6),
        };
        let q = Q::<B>::new("INSERT INTO teams (id, name, created_at) VALUES (")
            .bind(team.id.to_string())
            .next(team.name.clone())
            .next_ts(team.created_at)
            .sql(")");
        self.execute_refined(q, &format!("create team '{name}'"), |e| {
            is_unique_violation(e)
                .then(|| StoreError::Conflict(format!("a team named '{name}' already exists")))
        })
        .await?;
        Ok(team)
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn list_teams(&self) -> StoreResult<Vec<Team>> {
        let q = Q::new(format!(
            "SELECT {TEAM_COLUMNS} FROM teams t ORDER BY t.created_at, t.id"
        ));
        self.list(q, "list teams", team_from_row).await
    }

    #[tracing::instrument(skip_all, fields(team.id = %id), err(level = "debug"))]
    async fn get_team(&self, id: &TeamId) -> StoreResult<Team> {
        let q = Q::<B>::new(format!("SELECT {TEAM_COLUMNS} FROM teams t WHERE t.id = "))
            .bind(id.to_string());
        self.one(q, &format!("get team {id}"), team_from_row).await
    }

    #[tracing::instrument(skip_all, fields(account.id = %account), err(level = "debug"))]
    async fn teams_of_account(&self, account: &AccountId) -> StoreResult<Vec<Team>> {
        let q = Q::<B>::new(format!(
            "SELECT {TEAM_COLUMNS} FROM team_members m JOIN teams t ON t.id = m.team_id \
             WHERE m.account_id = "
        ))
        .bind(account.to_string())
        .sql(" ORDER BY t.created_at, t.id");
        self.list(
            q,
            &format!("list teams of account {account}"),
            team_from_row,
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(team.id = %team, account.id = %account), err(level = "debug"))]
    async fn add_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()> {
        let q = Q::<B>::new("INSERT INTO team_members (team_id, account_id) VALUES (")
            .bind(team.to_string())
            .next(account.to_string())
            .sql(") ON CONFLICT (team_id, account_id) DO NOTHING");
        let context = format!("add account {account} to team {team}");
        self.execute_refined(q, &context, |e| {
            is_foreign_key_violation(e).then_some(StoreError::NotFound)
        })
        .await
        .map(drop)
    }

    #[tracing::instrument(skip_all, fields(team.id = %team, account.id = %account), err(level = "debug"))]
    async fn remove_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()> {
        let q = Q::<B>::new("DELETE FROM team_members WHERE team_id = ")
            .bind(team.to_string())
            .sql(" AND account_id = ")
            .bind(account.to_string());
        self.execute_one(q, &format!("remove account {account} from team {team}"))
            .await
    }

    #[tracing::instrument(skip_all, fields(team.id = %team), err(level = "debug"))]
    async fn list_team_members(&self, team: &TeamId) -> StoreResult<Vec<Account>> {
        let q = Q::<B>::new(format!(
            "SELECT {ACCOUNT_COLUMNS} FROM team_members m JOIN accounts a ON a.id = m.account_id \
             WHERE m.team_id = "
        ))
        .bind(team.to_string())
        .sql(" ORDER BY a.created_at, a.id");
        self.list(q, &format!("list members of team {team}"), account_from_row)
            .await
    }
}
