//! Teams and the metrics count on SQLite (the `Store` impl delegates here).

use chrono::{SubsecRound, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::SqlitePool;
use stockade_core::{Account, AccountId, SandboxStatus, Team, TeamId};

use super::{
    account_from_row, get, get_ts, is_foreign_key_violation, is_unique_violation, map_err, other,
    ts,
};
use crate::{StoreError, StoreResult};

fn team_from_row(row: &SqliteRow) -> StoreResult<Team> {
    let id: String = get(row, "id")?;
    Ok(Team {
        id: TeamId::parse(&id)
            .map_err(|e| StoreError::Other(format!("corrupt team record '{id}': {}", e.message)))?,
        name: get(row, "name")?,
        created_at: get_ts(row, "created_at")?,
    })
}

pub(super) async fn create(pool: &SqlitePool, name: &str) -> StoreResult<Team> {
    let team = Team {
        id: TeamId::generate(),
        name: name.to_owned(),
        created_at: Utc::now().trunc_subsecs(6),
    };
    sqlx::query("INSERT INTO teams (id, name, created_at) VALUES (?, ?, ?)")
        .bind(team.id.as_str())
        .bind(&team.name)
        .bind(ts(team.created_at))
        .execute(pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::Conflict(format!("a team named '{name}' already exists"))
            } else {
                other(format_args!("create team '{name}'"), e)
            }
        })?;
    Ok(team)
}

pub(super) async fn list(pool: &SqlitePool) -> StoreResult<Vec<Team>> {
    sqlx::query("SELECT id, name, created_at FROM teams ORDER BY created_at, id")
        .fetch_all(pool)
        .await
        .map_err(map_err("list teams"))?
        .iter()
        .map(team_from_row)
        .collect()
}

pub(super) async fn get_one(pool: &SqlitePool, id: &TeamId) -> StoreResult<Team> {
    let row = sqlx::query("SELECT id, name, created_at FROM teams WHERE id = ?")
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(map_err(format_args!("get team {id}")))?
        .ok_or(StoreError::NotFound)?;
    team_from_row(&row)
}

pub(super) async fn of_account(pool: &SqlitePool, account: &AccountId) -> StoreResult<Vec<Team>> {
    sqlx::query(
        "SELECT t.id, t.name, t.created_at FROM team_members m JOIN teams t ON t.id = m.team_id \
         WHERE m.account_id = ? ORDER BY t.created_at, t.id",
    )
    .bind(account.as_str())
    .fetch_all(pool)
    .await
    .map_err(map_err(format_args!("list teams of account {account}")))?
    .iter()
    .map(team_from_row)
    .collect()
}

pub(super) async fn add_member(
    pool: &SqlitePool,
    team: &TeamId,
    account: &AccountId,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO team_members (team_id, account_id) VALUES (?, ?) \
         ON CONFLICT (team_id, account_id) DO NOTHING",
    )
    .bind(team.as_str())
    .bind(account.as_str())
    .execute(pool)
    .await
    .map_err(|e| {
        if is_foreign_key_violation(&e) {
            StoreError::NotFound
        } else {
            other(format_args!("add account {account} to team {team}"), e)
        }
    })?;
    Ok(())
}

pub(super) async fn remove_member(
    pool: &SqlitePool,
    team: &TeamId,
    account: &AccountId,
) -> StoreResult<()> {
    let deleted = sqlx::query("DELETE FROM team_members WHERE team_id = ? AND account_id = ?")
        .bind(team.as_str())
        .bind(account.as_str())
        .execute(pool)
        .await
        .map_err(map_err(format_args!(
            "remove account {account} from team {team}"
        )))?
        .rows_affected();
    if deleted == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

pub(super) async fn members(pool: &SqlitePool, team: &TeamId) -> StoreResult<Vec<Account>> {
    sqlx::query(
        "SELECT a.id, a.name, a.is_admin, a.created_at FROM team_members m \
         JOIN accounts a ON a.id = m.account_id WHERE m.team_id = ? ORDER BY a.created_at, a.id",
    )
    .bind(team.as_str())
    .fetch_all(pool)
    .await
    .map_err(map_err(format_args!("list members of team {team}")))?
    .iter()
    .map(account_from_row)
    .collect()
}

pub(super) async fn count_by_status(pool: &SqlitePool) -> StoreResult<Vec<(SandboxStatus, u64)>> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, COUNT(*) FROM sandboxes WHERE deleted_at IS NULL GROUP BY status",
    )
    .fetch_all(pool)
    .await
    .map_err(map_err("count sandboxes by status"))?;
    rows.into_iter()
        .map(|(status, n)| {
            let status = SandboxStatus::parse(&status)
                .map_err(|e| other("corrupt sandbox status", e.message))?;
            Ok((status, n.max(0) as u64))
        })
        .collect()
}
