//! The sandbox record the store keeps, and its snake_case metadata.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::ids::{AccountId, SandboxId, TeamId};
use crate::spec::{SandboxSpec, VolumeName};
use crate::status::SandboxStatus;

/// One sandbox as the database knows it: the single source of truth.
#[derive(Debug, Clone, PartialEq)]
pub struct Sandbox {
    pub id: SandboxId,
    pub account_id: AccountId,
    pub team_id: Option<TeamId>,
    pub spec: SandboxSpec,
    pub status: SandboxStatus,
    /// Why the sandbox is in its status, when that is not obvious (errors, reconciliation).
    pub status_reason: Option<String>,
    /// The Docker host ("server location") it runs on.
    pub server: String,
    pub container_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
    pub terminated_at: Option<DateTime<Utc>>,
    /// Set when the record is soft-deleted.
    pub deleted_at: Option<DateTime<Utc>>,
    /// Row version, bumped by every update.
    pub version: i64,
    /// Where a workspace sync goes, never with secrets.
    pub s3_config: Option<serde_json::Value>,
    /// The last completed workspace sync.
    pub s3_sync: Option<serde_json::Value>,
    /// When the current session ends; `None`: no session open, or no timeout.
    pub session_expires_at: Option<DateTime<Utc>>,
    /// When it was frozen; set only while it is PAUSED.
    pub paused_at: Option<DateTime<Utc>>,
    /// When it was last resumed in its current run: its session counts
    /// from there. `None` until a resume.
    pub resumed_at: Option<DateTime<Utc>>,
}

impl Sandbox {
    /// A new record in `PROVISIONING`, not yet saved.
    pub fn new(
        id: SandboxId,
        account_id: AccountId,
        team_id: Option<TeamId>,
        spec: SandboxSpec,
        server: String,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id,
            account_id,
            team_id,
            spec,
            status: SandboxStatus::Provisioning,
            status_reason: None,
            server,
            container_id: None,
            created_at: now,
            started_at: None,
            stopped_at: None,
            terminated_at: None,
            deleted_at: None,
            version: 0,
            s3_config: None,
            s3_sync: None,
            session_expires_at: None,
            paused_at: None,
            resumed_at: None,
        }
    }

    /// The end of a session that started at `start` under the current
    /// timeout, or sooner under its idle timeout when nothing uses it;
    /// `None` when neither applies (0: never).
    pub fn session_deadline(&self, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let hard = session_deadline(self.spec.timeout_minutes, start);
        let idle = session_deadline(self.spec.lifecycle.idle_timeout_minutes, start);
        match (hard, idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the current session began: the start of the run, or its last
    /// resume.
    pub fn session_start(&self) -> Option<DateTime<Utc>> {
        match (self.started_at, self.resumed_at) {
            (Some(s), Some(r)) => Some(s.max(r)),
            (s, r) => s.or(r),
        }
    }

    /// Where a running session's deadline moves when the sandbox is used
    /// at `now`: its idle timeout counts from `now`, never past the end its
    /// timeout sets. `None` when it has no idle timeout or is not running.
    pub fn deadline_after_use(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.status != SandboxStatus::Running || self.spec.lifecycle.idle_timeout_minutes <= 0.0
        {
            return None;
        }
        let idle = session_deadline(self.spec.lifecycle.idle_timeout_minutes, now)?;
        let hard = self
            .session_start()
            .and_then(|s| session_deadline(self.spec.timeout_minutes, s));
        Some(hard.map_or(idle, |h| h.min(idle)))
    }

    /// Whether the session ended by its idle timeout rather than its
    /// timeout at `now`.
    pub fn ended_idle(&self, now: DateTime<Utc>) -> bool {
        self.spec.lifecycle.idle_timeout_minutes > 0.0
            && self
                .session_start()
                .and_then(|s| session_deadline(self.spec.timeout_minutes, s))
                .is_none_or(|hard| hard > now)
    }

    /// Whether the sandbox is destroyed (TERMINATED or soft-deleted):
    /// nothing but reading its record applies to it any more.
    pub fn is_terminated(&self) -> bool {
        self.status == SandboxStatus::Terminated || self.deleted_at.is_some()
    }

    /// Whether a start applies: not destroyed, and its status may be
    /// started (a running sandbox starts as a no-op).
    pub fn can_start(&self) -> bool {
        !self.is_terminated() && self.status.can_start()
    }

    /// Whether a stop applies: not destroyed, and its container made.
    pub fn can_stop(&self) -> bool {
        !self.is_terminated() && !self.is_being_created()
    }

    /// Whether processes can run in it now (commands, the agent, the
    /// proxy's ports): only a running sandbox has a running container.
    pub fn can_exec(&self) -> bool {
        !self.is_terminated() && self.status == SandboxStatus::Running
    }

    /// Whether it is frozen (and not destroyed).
    pub fn is_paused(&self) -> bool {
        !self.is_terminated() && self.status == SandboxStatus::Paused
    }

    /// Whether a create is still making it (its container may not exist yet).
    pub fn is_being_created(&self) -> bool {
        matches!(
            self.status,
            SandboxStatus::Provisioning | SandboxStatus::Pending
        )
    }

    /// Which run of the sandbox this is: changes at every start and resume.
    /// Tokens handed out for one run (E2B's traffic and envd tokens) are
    /// signed over it, so they end when the sandbox starts again.
    pub fn session_epoch(&self) -> i64 {
        // Microseconds: what the database keeps of the start time.
        self.started_at.map_or(0, |t| t.timestamp_micros())
    }

    /// Its container runs from `now` on: RUNNING, a new session.
    pub fn mark_running(&mut self, now: DateTime<Utc>) {
        self.status = SandboxStatus::Running;
        self.status_reason = None;
        self.started_at = Some(now);
        self.stopped_at = None;
        self.paused_at = None;
        self.resumed_at = None;
        self.session_expires_at = self.session_deadline(now);
    }

    /// Frozen at `at` (`reason` says why, when it was not asked for): PAUSED.
    /// Its run goes on, its session is over until it resumes.
    pub fn mark_paused(&mut self, at: DateTime<Utc>, reason: Option<String>) {
        self.status = SandboxStatus::Paused;
        self.status_reason = reason;
        self.paused_at = Some(at);
        self.session_expires_at = None;
    }

    /// Thawed at `now`: RUNNING again in the same run (its processes and
    /// the tokens of the run are the same), with a new session.
    pub fn mark_resumed(&mut self, now: DateTime<Utc>) {
        self.status = SandboxStatus::Running;
        self.status_reason = None;
        self.paused_at = None;
        self.resumed_at = Some(now);
        self.session_expires_at = self.session_deadline(now);
    }

    /// Its container stopped at `at` (`reason` says why, when it was not
    /// asked for): STOPPED, and the session ends with it.
    pub fn mark_stopped(&mut self, at: DateTime<Utc>, reason: Option<String>) {
        self.status = SandboxStatus::Stopped;
        self.status_reason = reason;
        self.stopped_at = Some(at);
        self.paused_at = None;
        self.session_expires_at = None;
    }

    /// Its container is gone or broken: ERROR with the reason.
    pub fn mark_error(&mut self, reason: String) {
        self.status = SandboxStatus::Error;
        self.status_reason = Some(reason);
        self.paused_at = None;
        self.session_expires_at = None;
    }

    /// Destroyed at `at`: TERMINATED and soft-deleted.
    pub fn mark_terminated(&mut self, at: DateTime<Utc>) {
        self.status = SandboxStatus::Terminated;
        self.terminated_at = Some(at);
        self.deleted_at = Some(at);
        self.session_expires_at = None;
    }

    /// Copies the status fields of `other` (a transition made on an older
    /// copy of this record) onto this one, keeping everything else.
    pub fn take_status_of(&mut self, other: &Sandbox) {
        self.status = other.status;
        self.status_reason = other.status_reason.clone();
        self.container_id = other.container_id.clone();
        self.started_at = other.started_at;
        self.stopped_at = other.stopped_at;
        self.terminated_at = other.terminated_at;
        self.deleted_at = other.deleted_at;
        self.paused_at = other.paused_at;
        self.resumed_at = other.resumed_at;
        self.session_expires_at = match (other.status, other.session_start()) {
            // A session opened there runs under this record's timeout.
            (SandboxStatus::Running, Some(t)) => self.session_deadline(t),
            _ => other.session_expires_at,
        };
    }

    pub fn volume_name(&self) -> VolumeName {
        VolumeName::for_sandbox(&self.id)
    }

    /// The persisted metadata document.
    pub fn metadata(&self) -> SandboxMetadata {
        SandboxMetadata {
            sandbox_id: self.id.clone(),
            status: self.status,
            status_reason: self.status_reason.clone(),
            created_at: self.created_at,
            container_id: self.container_id.clone(),
            volume_name: self.volume_name().as_str().to_owned(),
            server: self.server.clone(),
            config: self.spec.clone(),
            s3_config: self.s3_config.clone(),
            s3_sync: self.s3_sync.clone(),
        }
    }
}

/// The end of a session of `timeout_minutes` (fractions allowed, 0 = never)
/// that started at `start`, to the millisecond.
pub fn session_deadline(timeout_minutes: f64, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if !timeout_minutes.is_finite() || timeout_minutes <= 0.0 {
        return None;
    }
    let millis = (timeout_minutes * 60_000.0).round() as i64;
    Some(start + chrono::Duration::milliseconds(millis))
}

/// The `metadata` column: snake_case JSON with the sandbox id, status,
/// creation time and full config, plus S3 facts where used.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxMetadata {
    pub sandbox_id: SandboxId,
    pub status: SandboxStatus,
    pub status_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub container_id: Option<String>,
    pub volume_name: String,
    pub server: String,
    pub config: SandboxSpec,
    pub s3_config: Option<serde_json::Value>,
    pub s3_sync: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_deadlines() {
        let start = DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(session_deadline(0.0, start), None);
        assert_eq!(
            session_deadline(0.5, start),
            Some(start + chrono::Duration::seconds(30))
        );
        assert_eq!(
            session_deadline(0.05, start),
            Some(start + chrono::Duration::seconds(3))
        );
        assert_eq!(
            session_deadline(90.0, start),
            Some(start + chrono::Duration::minutes(90))
        );
    }

    #[test]
    fn state_rules_follow_the_status_and_deletion() {
        let now = Utc::now();
        let id = SandboxId::generate();
        let spec = SandboxSpec::from_input(
            crate::spec::SpecInput::default(),
            &id,
            &crate::spec::Defaults::default(),
        )
        .unwrap();
        let mut sb = Sandbox::new(id, AccountId::generate(), None, spec, "local".into(), now);
        assert!(!sb.can_start() && !sb.can_stop() && !sb.can_exec());
        sb.mark_running(now);
        assert!(sb.can_start() && sb.can_stop() && sb.can_exec());
        sb.mark_stopped(now, None);
        assert!(sb.can_start() && sb.can_stop() && !sb.can_exec());
        sb.mark_error("gone".into());
        assert!(sb.can_start() && sb.can_stop() && !sb.can_exec());
        sb.mark_terminated(now);
        assert!(sb.is_terminated());
        assert!(!sb.can_start() && !sb.can_stop() && !sb.can_exec());
        // A soft-deleted record is terminated whatever its status says.
        let mut deleted = sb.clone();
        deleted.status = SandboxStatus::Running;
        assert!(deleted.is_terminated() && !deleted.can_exec());
    }

    #[test]
    fn metadata_leaves_absent_fields_out_and_reads_them_back_absent() {
        let id = SandboxId::parse("abcdefghijkl").unwrap();
        let spec = SandboxSpec::from_input(
            crate::spec::SpecInput::default(),
            &id,
            &crate::spec::Defaults::default(),
        )
        .unwrap();
        let created = DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let sb = Sandbox::new(
            id,
            AccountId::generate(),
            None,
            spec,
            "local".into(),
            created,
        );
        let json = serde_json::to_value(sb.metadata()).unwrap();
        for absent in ["status_reason", "container_id", "s3_config", "s3_sync"] {
            assert!(json.get(absent).is_none(), "{absent}: {json}");
        }
        for absent in [
            "runtime",
            "start_command",
            "removed_env",
            "metadata",
            "placement",
        ] {
            assert!(json["config"].get(absent).is_none(), "{absent}: {json}");
        }
        let back: SandboxMetadata = serde_json::from_value(json).unwrap();
        assert_eq!(back, sb.metadata());
        let mut with_reason = sb.metadata();
        with_reason.status_reason = Some("why".into());
        with_reason.config.runtime = Some("node22".into());
        let json = serde_json::to_value(&with_reason).unwrap();
        assert_eq!(json["status_reason"], "why");
        assert_eq!(json["config"]["runtime"], "node22");
        assert_eq!(
            serde_json::from_value::<SandboxMetadata>(json).unwrap(),
            with_reason
        );
    }
}
