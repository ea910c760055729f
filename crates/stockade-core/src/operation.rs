//! Durable operations: the record of a state-changing operation
//! on one sandbox (or snapshot), written before it touches Docker. It is also
//! the per-target lock: the store keeps at most one per target, held by one
//! server process under a lease, and a live instance finishes or rolls back
//! an operation whose lease ended.

use std::fmt;

use chrono::{DateTime, Utc};

use crate::error::FieldError;
use crate::ids::{is_id, random_id, AccountId};

/// An operation's id: 16 characters from `[a-z0-9]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(String);

impl OperationId {
    pub const LEN: usize = 16;

    pub fn generate() -> Self {
        Self(random_id(Self::LEN))
    }

    /// Parses an id; `field` names the input in the error.
    pub fn parse_field(s: &str, field: &str) -> Result<Self, FieldError> {
        if !is_id(s, Self::LEN) {
            let shown: String = s.chars().take(40).collect();
            return Err(FieldError::new(
                field,
                format!(
                    "invalid operation id '{shown}': expected {} characters from [a-z0-9]",
                    Self::LEN
                ),
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        Self::parse_field(s, "operation_id")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for OperationId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// What an operation does. Lower-case as text (`"create"`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    Create,
    Start,
    Stop,
    Update,
    Delete,
    /// Captures a snapshot; its target is the snapshot's id.
    Snapshot,
    /// Uploads the workspace before a delete.
    Sync,
    /// Moves a stopped sandbox to another Docker host (a drain).
    Move,
    /// Freezes a running sandbox.
    Pause,
    /// Thaws a paused sandbox.
    Resume,
    /// Builds a template; its target is the build's id, its params name
    /// the build sandbox once there is one.
    Build,
}

impl OperationKind {
    pub const ALL: [OperationKind; 11] = [
        Self::Create,
        Self::Start,
        Self::Stop,
        Self::Update,
        Self::Delete,
        Self::Snapshot,
        Self::Sync,
        Self::Move,
        Self::Pause,
        Self::Resume,
        Self::Build,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Start => "start",
            Self::Stop => "stop",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Snapshot => "snapshot",
            Self::Sync => "sync",
            Self::Move => "move",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Build => "build",
        }
    }

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                FieldError::new(
                    "kind",
                    format!(
                        "unknown operation kind '{s}': expected create, start, stop, update, \
                         delete, snapshot, sync, move, pause, resume or build"
                    ),
                )
            })
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One operation in progress, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    pub id: OperationId,
    /// The sandbox id (the snapshot id for [`OperationKind::Snapshot`]).
    pub target: String,
    pub kind: OperationKind,
    pub account_id: AccountId,
    /// The server process holding it (a random id per process start).
    pub holder: String,
    /// Until when the holder may act on it; after that, any instance may
    /// claim it and finish or roll it back.
    pub lease_until: DateTime<Utc>,
    /// What recovery needs, e.g. `{"preserve_volume": true}`.
    pub params: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

impl Operation {
    /// A new operation with a fresh id, held by `holder` until `lease_until`.
    /// Timestamps are kept to the microsecond, as the databases store them.
    pub fn new(
        target: impl Into<String>,
        kind: OperationKind,
        account_id: AccountId,
        holder: impl Into<String>,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Self {
        use chrono::SubsecRound;
        Self {
            id: OperationId::generate(),
            target: target.into(),
            kind,
            account_id,
            holder: holder.into(),
            lease_until: lease_until.trunc_subsecs(6),
            params: serde_json::Value::Object(Default::default()),
            created_at: now.trunc_subsecs(6),
        }
    }

    /// The same operation with `params` recorded for recovery.
    pub fn with_params(self, params: serde_json::Value) -> Self {
        Self { params, ..self }
    }

    /// Whether the lease ended at or before `now`, so another instance may take over.
    pub fn lease_ended(&self, now: DateTime<Utc>) -> bool {
        self.lease_until <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_generate_and_parse() {
        // Generation and the character check are the other ids' (tested there).
        let id = OperationId::generate();
        assert_eq!(OperationId::parse(id.as_str()).unwrap(), id);
        for bad in [
            "",
            "abc",
            "ABCDEFGHIJKLMNOP",
            "abcdefghijklmno!",
            "abcdefghijklmnopq",
        ] {
            let err = OperationId::parse_field(bad, "operation").unwrap_err();
            assert_eq!(err.field, "operation", "{bad:?}");
        }
    }

    #[test]
    fn kinds_round_trip_as_text() {
        for kind in OperationKind::ALL {
            assert_eq!(OperationKind::parse(kind.as_str()).unwrap(), kind);
        }
        assert_eq!(OperationKind::Snapshot.to_string(), "snapshot");
        assert_eq!(OperationKind::parse("CREATE").unwrap_err().field, "kind");
        assert!(OperationKind::parse("reboot").is_err());
    }

    #[test]
    fn leases_end_at_their_time() {
        let now = Utc::now();
        let op = Operation::new(
            "abcdefghijkl",
            OperationKind::Stop,
            AccountId::generate(),
            "holder",
            now,
            now + chrono::Duration::seconds(30),
        )
        .with_params(serde_json::json!({"preserve_volume": true}));
        assert!(!op.lease_ended(now));
        assert!(op.lease_ended(op.lease_until));
        assert_eq!(op.params["preserve_volume"], true);
        assert_eq!(op.id.as_str().len(), OperationId::LEN);
    }
}
