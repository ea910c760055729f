//! Teams (`/api/v1/teams`): administrators group accounts into teams; a
//! sandbox created with a `teamId` is visible to every member.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /api/v1/teams` (admin only).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateTeamRequest {
    /// 1 to 63 characters from letters, digits and `_ . -`; unique.
    pub name: String,
}

/// `POST /api/v1/teams/{id}/members` (admin only).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddTeamMemberRequest {
    pub account_id: String,
}

/// One member of a team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamMember {
    pub id: String,
    pub name: String,
}

/// A team and its members.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamResponse {
    pub id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub members: Vec<TeamMember>,
}

impl TeamResponse {
    pub fn new(team: &stockade_core::Team, members: &[stockade_core::Account]) -> Self {
        Self {
            id: team.id.to_string(),
            name: team.name.clone(),
            created_at: team.created_at,
            members: members
                .iter()
                .map(|a| TeamMember {
                    id: a.id.to_string(),
                    name: a.name.clone(),
                })
                .collect(),
        }
    }
}

/// `GET /api/v1/teams`: every team for an administrator, the caller's own
/// teams for anyone else.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ListTeamsResponse {
    pub teams: Vec<TeamResponse>,
}
