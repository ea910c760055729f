//! The sandbox status state machine.

use serde::{Deserialize, Serialize};

use crate::error::FieldError;

/// Where a sandbox is in its life. Upper-case on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SandboxStatus {
    Pending,
    Provisioning,
    Running,
    /// Frozen in place: its processes, memory and connections kept.
    Paused,
    Stopped,
    Error,
    Terminated,
}

impl SandboxStatus {
    pub const ALL: [SandboxStatus; 7] = [
        Self::Pending,
        Self::Provisioning,
        Self::Running,
        Self::Paused,
        Self::Stopped,
        Self::Error,
        Self::Terminated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Provisioning => "PROVISIONING",
            Self::Running => "RUNNING",
            Self::Paused => "PAUSED",
            Self::Stopped => "STOPPED",
            Self::Error => "ERROR",
            Self::Terminated => "TERMINATED",
        }
    }

    /// Parses a status in any case (`running`, `Running`, `RUNNING`).
    pub fn parse(s: &str) -> Result<Self, FieldError> {
        parse_status(Self::ALL, Self::as_str, s, || {
            format!(
                "unknown status '{s}': expected one of PENDING, PROVISIONING, RUNNING, PAUSED, STOPPED, ERROR, TERMINATED"
            )
        })
    }

    /// Whether a sandbox in this status may be started (a paused one is
    /// resumed).
    pub fn can_start(self) -> bool {
        matches!(
            self,
            Self::Running | Self::Paused | Self::Stopped | Self::Error
        )
    }
}

impl std::fmt::Display for SandboxStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status of `all` whose name (`name`) is `s` in any case, around white
/// space; `unknown` says why when none is.
pub(crate) fn parse_status<T: Copy>(
    all: impl IntoIterator<Item = T>,
    name: fn(T) -> &'static str,
    s: &str,
    unknown: impl FnOnce() -> String,
) -> Result<T, FieldError> {
    all.into_iter()
        .find(|st| name(*st).eq_ignore_ascii_case(s.trim()))
        .ok_or_else(|| FieldError::new("status", unknown()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_any_case() {
        assert_eq!(
            SandboxStatus::parse("running").unwrap(),
            SandboxStatus::Running
        );
        assert_eq!(
            SandboxStatus::parse("Stopped").unwrap(),
            SandboxStatus::Stopped
        );
        assert!(SandboxStatus::parse("sleeping").is_err());
    }

    #[test]
    fn wire_form_is_upper_case() {
        assert_eq!(
            serde_json::to_string(&SandboxStatus::Terminated).unwrap(),
            "\"TERMINATED\""
        );
    }
}
