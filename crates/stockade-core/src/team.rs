//! Teams: groups of accounts that share sandboxes. Administrators manage
//! them; a sandbox may name one team of its owner, and every member may then
//! see and act on it (access is scoped by account and teams).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::FieldError;
use crate::ids::TeamId;
use crate::names::check_name;

/// A team of accounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Team {
    pub id: TeamId,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// The longest team name.
pub const MAX_TEAM_NAME: usize = 63;

/// Checks a team name: 1 to 63 characters from letters, digits and `_ . -`.
pub fn parse_team_name(name: &str, field: &str) -> Result<String, FieldError> {
    check_name(
        name,
        field,
        MAX_TEAM_NAME,
        |bytes| {
            bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        },
        || format!("must be 1 to {MAX_TEAM_NAME} characters from letters, digits and _ . -"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn team_names() {
        assert_eq!(
            parse_team_name("platform-1.x_y", "name").unwrap(),
            "platform-1.x_y"
        );
        for bad in ["", "a b", "../x", "é", &"x".repeat(64), "a\0b"] {
            assert_eq!(
                parse_team_name(bad, "name").unwrap_err().field,
                "name",
                "{bad:?}"
            );
        }
        assert!(parse_team_name(&"x".repeat(63), "name").is_ok());
    }
}
