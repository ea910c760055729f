//! Accounts and teams as an administrator manages them and a member sees
//! them. Who may do what is checked here: an administrator everything, an
//! account its own teams.

use chrono::Utc;
use stockade_core::{Account, AccountId, ApiToken, Team, TeamId};
use stockade_store::StoreError;

use crate::credentials::account_not_found;
use crate::error::{ServiceError, ServiceResult};
use crate::Service;

fn team_not_found() -> ServiceError {
    ServiceError::NotFound("Team not found".into())
}

impl Service {
    /// Creates an account with the configured default quota and its first
    /// API token; returns both (the token's secret is shown once).
    pub async fn create_account(
        &self,
        name: &str,
        is_admin: bool,
    ) -> ServiceResult<(Account, ApiToken)> {
        let quota = &self.config.admission.default_quota;
        let account = self
            .store
            .create_account_with_quota(name, is_admin, quota)
            .await
            .map_err(|e| match e {
                StoreError::Conflict(_) => {
                    ServiceError::Conflict(format!("An account named '{name}' already exists"))
                }
                other => other.into(),
            })?;
        let token = ApiToken::generate();
        self.store.add_token(&account.id, &token.hash()).await?;
        Ok((account, token))
    }

    /// Every account.
    pub async fn list_accounts(&self) -> ServiceResult<Vec<Account>> {
        Ok(self.store.list_accounts().await?)
    }

    /// Disables (`true`) or enables an account as the administrator
    /// `admin`, who cannot disable their own.
    pub async fn set_account_disabled(
        &self,
        admin: &Account,
        id: &AccountId,
        disable: bool,
    ) -> ServiceResult<Account> {
        if disable && *id == admin.id {
            return Err(ServiceError::Conflict(
                "An administrator cannot disable their own account: another administrator can"
                    .into(),
            ));
        }
        self.store
            .set_account_disabled(id, disable.then(Utc::now))
            .await
            .map_err(account_not_found)
    }

    /// Creates a team (no members yet).
    pub async fn create_team(&self, name: &str) -> ServiceResult<Team> {
        self.store.create_team(name).await.map_err(|e| match e {
            StoreError::Conflict(_) => {
                ServiceError::Conflict(format!("A team named '{name}' already exists"))
            }
            other => other.into(),
        })
    }

    /// The teams `caller` sees: every team for an administrator, its own
    /// otherwise.
    pub async fn teams_for(&self, caller: &Account) -> ServiceResult<Vec<Team>> {
        Ok(if caller.is_admin {
            self.store.list_teams().await?
        } else {
            self.store.teams_of_account(&caller.id).await?
        })
    }

    /// A team by id: 404 when unknown.
    pub async fn team(&self, id: &str) -> ServiceResult<Team> {
        let id = TeamId::parse_field(id, "team_id")?;
        self.store.get_team(&id).await.map_err(|e| match e {
            StoreError::NotFound => team_not_found(),
            other => other.into(),
        })
    }

    /// A team as `caller` may see it: administrators and members only
    /// (`caller_teams` are the caller's teams as its request's scope has them).
    pub async fn team_for(
        &self,
        caller: &Account,
        caller_teams: &[TeamId],
        id: &str,
    ) -> ServiceResult<Team> {
        let team = self.team(id).await?;
        if !caller.is_admin && !caller_teams.contains(&team.id) {
            return Err(ServiceError::Forbidden(
                "Forbidden: you are not a member of this team".into(),
            ));
        }
        Ok(team)
    }

    /// The members of a team.
    pub async fn team_members(&self, team: &TeamId) -> ServiceResult<Vec<Account>> {
        Ok(self.store.list_team_members(team).await?)
    }

    /// Adds an account to a team (already a member is fine).
    pub async fn add_team_member(&self, team: &TeamId, account: &AccountId) -> ServiceResult<()> {
        self.store
            .add_team_member(team, account)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => ServiceError::NotFound("Account not found".into()),
                other => other.into(),
            })
    }

    /// Removes an account from a team (404 when it is not a member).
    pub async fn remove_team_member(
        &self,
        team: &TeamId,
        account: &AccountId,
    ) -> ServiceResult<()> {
        self.store
            .remove_team_member(team, account)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => ServiceError::NotFound(format!(
                    "Account {account} is not a member of this team"
                )),
                other => other.into(),
            })
    }
}

/// What [`bootstrap`] did on this start.
#[derive(Debug)]
pub enum Bootstrap {
    /// The first start: an admin account was made; its token is shown once.
    CreatedAdmin {
        token: String,
        generated: bool,
    },
    /// `STOCKADE_ADMIN_TOKEN` was registered for the existing admin.
    RegisteredAdminToken,
    Nothing,
}

/// On the very first start, creates the admin account and its token
/// (`admin_token`, or a generated one). With accounts present, an
/// `admin_token` that is not yet known is added to the first admin.
pub async fn bootstrap(
    store: &dyn stockade_store::Store,
    admin_token: Option<&str>,
) -> Result<Bootstrap, stockade_store::StoreError> {
    let hash_of = |t: &str| stockade_core::account::hash_token(t);
    if store.count_accounts().await? == 0 {
        let token = match admin_token {
            Some(t) => ApiToken::from_plaintext(t),
            None => ApiToken::generate(),
        };
        let account = match store.create_account("admin", true).await {
            Ok(a) => a,
            // Another instance made it first.
            Err(stockade_store::StoreError::Conflict(_)) => return Ok(Bootstrap::Nothing),
            Err(e) => return Err(e),
        };
        store.add_token(&account.id, &token.hash()).await?;
        return Ok(Bootstrap::CreatedAdmin {
            token: token.plaintext().to_owned(),
            generated: admin_token.is_none(),
        });
    }
    if let Some(t) = admin_token {
        if store.account_by_token_hash(&hash_of(t)).await?.is_none() {
            let admin = store
                .list_accounts()
                .await?
                .into_iter()
                .find(|a| a.is_admin);
            if let Some(admin) = admin {
                store.add_token(&admin.id, &hash_of(t)).await?;
                return Ok(Bootstrap::RegisteredAdminToken);
            }
        }
    }
    Ok(Bootstrap::Nothing)
}
