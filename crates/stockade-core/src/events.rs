//! Lifecycle events: what a change of a record means for the outside world.
//!
//! The store writes a record and the events its change implies in one
//! transaction (an outbox), so an event is never lost nor invented by a
//! crash between the two. Which events a change implies is decided here,
//! from the record before and after, without I/O.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::ids::{AccountId, EventId, SandboxId};
use crate::{Sandbox, SandboxStatus, Snapshot, SnapshotKind, SnapshotStatus};

macro_rules! event_kinds {
    ($($(#[$doc:meta])* $variant:ident => $text:expr,)*) => {
        /// What happened.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum EventKind {
            $($(#[$doc])* $variant,)*
        }

        impl EventKind {
            /// Every kind, in the order the documentation lists them.
            pub const ALL: &'static [EventKind] = &[$(EventKind::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(EventKind::$variant => $text,)*
                }
            }

            /// A kind by its name; `None` for a name no event has.
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($text => Some(EventKind::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

event_kinds! {
    /// Created and started (or created stopped): it exists for its owner.
    SandboxCreated => "sandbox.lifecycle.created",
    /// Started again after a stop or an error.
    SandboxStarted => "sandbox.lifecycle.started",
    /// Its processes stopped; its files kept.
    SandboxStopped => "sandbox.lifecycle.stopped",
    SandboxPaused => "sandbox.lifecycle.paused",
    SandboxResumed => "sandbox.lifecycle.resumed",
    /// Its settings or its timeout changed.
    SandboxUpdated => "sandbox.lifecycle.updated",
    /// A snapshot of it was taken.
    SandboxCheckpointed => "sandbox.lifecycle.checkpointed",
    /// Deleted.
    SandboxKilled => "sandbox.lifecycle.killed",
    SandboxErrored => "sandbox.lifecycle.errored",
    /// Its session ended; what follows (stop, pause, delete) is its own event.
    SandboxTimedOut => "sandbox.lifecycle.timed_out",
    /// Moved to another Docker host.
    SandboxMoved => "sandbox.lifecycle.moved",
    /// Another sandbox was forked from it.
    SandboxForked => "sandbox.lifecycle.forked",
    SnapshotCreated => "snapshot.created",
    SnapshotDeleted => "snapshot.deleted",
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceType {
    Sandbox,
    Snapshot,
}

impl ResourceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceType::Sandbox => "sandbox",
            ResourceType::Snapshot => "snapshot",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "sandbox" => Some(ResourceType::Sandbox),
            "snapshot" => Some(ResourceType::Snapshot),
            _ => None,
        }
    }
}

/// One event, as written beside the change it reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: EventId,
    pub kind: EventKind,
    pub account_id: AccountId,
    pub resource_type: ResourceType,
    pub resource_id: String,
    /// The sandbox it concerns: the resource itself, or a snapshot's source.
    pub sandbox_id: Option<SandboxId>,
    /// One run of the sandbox (its id and when the run began).
    pub execution_id: Option<String>,
    /// The image the sandbox runs.
    pub template_id: Option<String>,
    /// A few facts of the change; never an environment value or a secret.
    pub data: Option<Value>,
    pub at: DateTime<Utc>,
}

/// An event with its place in the feed (the database's sequence).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub event: Event,
}

/// The longest `reason` an event carries.
const MAX_REASON: usize = 500;

impl Event {
    fn about_sandbox(
        kind: EventKind,
        sb: &Sandbox,
        data: Map<String, Value>,
        at: DateTime<Utc>,
    ) -> Self {
        let mut data = data;
        if !sb.spec.metadata.is_empty() {
            data.insert("sandbox_metadata".into(), json!(sb.spec.metadata));
        }
        Event {
            id: EventId::generate(),
            kind,
            account_id: sb.account_id.clone(),
            resource_type: ResourceType::Sandbox,
            resource_id: sb.id.to_string(),
            sandbox_id: Some(sb.id.clone()),
            execution_id: execution_id(sb),
            template_id: Some(sb.spec.docker_image.clone()),
            data: (!data.is_empty()).then_some(Value::Object(data)),
            at,
        }
    }

    /// `sandbox.lifecycle.timed_out`: the session of `sb` ended and its
    /// lifecycle's action (`action`: stop, pause or kill) follows.
    pub fn timed_out(sb: &Sandbox, action: &str, at: DateTime<Utc>) -> Self {
        let mut data = Map::new();
        data.insert("action".into(), json!(action));
        Self::about_sandbox(EventKind::SandboxTimedOut, sb, data, at)
    }
}

/// A run's id: the sandbox and when the run began; `None` before a start.
fn execution_id(sb: &Sandbox) -> Option<String> {
    sb.started_at
        .map(|t| format!("{}-{}", sb.id, t.timestamp_millis()))
}

fn reason(sb: &Sandbox, data: &mut Map<String, Value>) {
    if let Some(r) = sb.status_reason.as_deref().filter(|r| !r.is_empty()) {
        let r: String = r.chars().take(MAX_REASON).collect();
        data.insert("reason".into(), json!(r));
    }
}

/// Whether the record exists for its owner: past its create, not deleted.
fn settled(status: SandboxStatus) -> bool {
    matches!(
        status,
        SandboxStatus::Running | SandboxStatus::Paused | SandboxStatus::Stopped
    )
}

/// The names of the spec's fields that differ (never their values: the
/// environment is a secret).
fn changed_fields(old: &Sandbox, new: &Sandbox) -> Vec<String> {
    let (Ok(Value::Object(a)), Ok(Value::Object(b))) = (
        serde_json::to_value(&old.spec),
        serde_json::to_value(&new.spec),
    ) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| camel_case(k))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// A stored field's name as the API spells it (`cpu_cores` → `cpuCores`).
fn camel_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// The events a write of a sandbox record implies: `old` as stored before
/// (`None` for an insert), `new` as written. A second write of the same
/// state implies nothing, so a retried or recovered step does not repeat
/// its event.
pub fn sandbox_events(old: Option<&Sandbox>, new: &Sandbox, at: DateTime<Utc>) -> Vec<Event> {
    use SandboxStatus as S;
    let mut out = Vec::new();
    let event =
        |kind: EventKind, data: Map<String, Value>| Event::about_sandbox(kind, new, data, at);
    let deleted = |sb: &Sandbox| sb.deleted_at.is_some() || sb.status == S::Terminated;
    let was_deleted = old.is_some_and(deleted);
    if was_deleted {
        return out;
    }
    let before = old.map(|o| o.status);
    if deleted(new) {
        // A create rolled back never existed for its owner: no event.
        if before.is_some_and(|s| settled(s) || s == S::Error) {
            let mut data = Map::new();
            reason(new, &mut data);
            out.push(event(EventKind::SandboxKilled, data));
        }
        return out;
    }
    let after = new.status;
    let existed = before.is_some_and(|s| settled(s) || s == S::Error);
    if before != Some(after) {
        let mut data = Map::new();
        match after {
            _ if !existed && settled(after) => {
                if let Some(origin) = origin(new) {
                    data.insert("source".into(), origin);
                }
                out.push(event(EventKind::SandboxCreated, data));
            }
            S::Running if before == Some(S::Paused) => {
                out.push(event(EventKind::SandboxResumed, data))
            }
            S::Running => out.push(event(EventKind::SandboxStarted, data)),
            S::Paused => {
                reason(new, &mut data);
                out.push(event(EventKind::SandboxPaused, data));
            }
            S::Stopped => {
                reason(new, &mut data);
                out.push(event(EventKind::SandboxStopped, data));
            }
            S::Error => {
                reason(new, &mut data);
                out.push(event(EventKind::SandboxErrored, data));
            }
            S::Pending | S::Provisioning | S::Terminated => {}
        }
    }
    let Some(old) = old.filter(|_| existed) else {
        return out;
    };
    if old.server != new.server {
        let mut data = Map::new();
        data.insert("server".into(), json!(new.server));
        data.insert("from".into(), json!(old.server));
        out.push(event(EventKind::SandboxMoved, data));
    }
    let changed = changed_fields(old, new);
    // A new session's deadline comes with a start or resume, not an update.
    let set_timeout = before == Some(after)
        && old.session_expires_at != new.session_expires_at
        && new.session_expires_at.is_some();
    if !changed.is_empty() || set_timeout {
        let mut data = Map::new();
        if !changed.is_empty() {
            data.insert("changed".into(), json!(changed));
        }
        if let Some(t) = new.session_expires_at.filter(|_| set_timeout) {
            data.insert(
                "set_timeout".into(),
                json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            );
        }
        out.push(event(EventKind::SandboxUpdated, data));
    }
    out
}

/// Where a sandbox came from, when that is a snapshot or fork: read from
/// the image it runs (`stockade-snapshot:{id}`).
fn origin(sb: &Sandbox) -> Option<Value> {
    let id = sb
        .spec
        .docker_image
        .strip_prefix(Snapshot::IMAGE_REPO)?
        .strip_prefix(':')?;
    Some(json!({ "snapshotId": id }))
}

/// The events a write of a snapshot record implies: a user's snapshot
/// becoming usable checkpoints its source; a fork's capture forks it; a
/// deletion is reported once.
pub fn snapshot_events(old: Option<&Snapshot>, new: &Snapshot, at: DateTime<Utc>) -> Vec<Event> {
    let before = old.map(|o| o.status);
    if before == Some(new.status) {
        return Vec::new();
    }
    let base = |kind: EventKind, resource_type: ResourceType, data: Value| Event {
        id: EventId::generate(),
        kind,
        account_id: new.account_id.clone(),
        resource_type,
        resource_id: match resource_type {
            ResourceType::Snapshot => new.id.to_string(),
            ResourceType::Sandbox => new.source_sandbox_id.to_string(),
        },
        sandbox_id: Some(new.source_sandbox_id.clone()),
        execution_id: None,
        template_id: None,
        data: Some(data),
        at,
    };
    let data = json!({ "snapshotId": new.id.to_string(), "name": new.name });
    match (new.status, new.kind) {
        (SnapshotStatus::Ready, SnapshotKind::Fork) => {
            vec![base(EventKind::SandboxForked, ResourceType::Sandbox, data)]
        }
        (SnapshotStatus::Ready, _) => vec![
            base(
                EventKind::SandboxCheckpointed,
                ResourceType::Sandbox,
                data.clone(),
            ),
            base(EventKind::SnapshotCreated, ResourceType::Snapshot, data),
        ],
        (SnapshotStatus::Deleting | SnapshotStatus::Deleted, SnapshotKind::User)
            if before == Some(SnapshotStatus::Ready) =>
        {
            vec![base(
                EventKind::SnapshotDeleted,
                ResourceType::Snapshot,
                data,
            )]
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Defaults, SandboxSpec, SpecInput};

    fn sandbox() -> Sandbox {
        let id = SandboxId::generate();
        let spec =
            SandboxSpec::from_input(SpecInput::default(), &id, &Defaults::default()).unwrap();
        Sandbox::new(
            id,
            AccountId::generate(),
            None,
            spec,
            "local".into(),
            Utc::now(),
        )
    }

    fn kinds(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(|e| e.kind.as_str()).collect()
    }

    #[test]
    fn a_life_reads_as_its_events_and_repeats_add_nothing() {
        let now = Utc::now();
        let mut sb = sandbox();
        assert!(
            sandbox_events(None, &sb, now).is_empty(),
            "a create in progress is no event yet"
        );
        let creating = sb.clone();
        sb.mark_running(now);
        assert_eq!(
            kinds(&sandbox_events(Some(&creating), &sb, now)),
            ["sandbox.lifecycle.created"]
        );
        assert!(sandbox_events(Some(&sb), &sb, now).is_empty());
        let running = sb.clone();
        sb.status = SandboxStatus::Paused;
        assert_eq!(
            kinds(&sandbox_events(Some(&running), &sb, now)),
            ["sandbox.lifecycle.paused"]
        );
        let paused = sb.clone();
        sb.status = SandboxStatus::Running;
        assert_eq!(
            kinds(&sandbox_events(Some(&paused), &sb, now)),
            ["sandbox.lifecycle.resumed"]
        );
        let running = sb.clone();
        sb.mark_stopped(now, Some("disk limit exceeded".into()));
        let stopped = sandbox_events(Some(&running), &sb, now);
        assert_eq!(kinds(&stopped), ["sandbox.lifecycle.stopped"]);
        assert_eq!(
            stopped[0].data.as_ref().unwrap()["reason"],
            "disk limit exceeded"
        );
        let before = sb.clone();
        sb.mark_running(now);
        assert_eq!(
            kinds(&sandbox_events(Some(&before), &sb, now)),
            ["sandbox.lifecycle.started"]
        );
        let before = sb.clone();
        sb.mark_terminated(now);
        sb.deleted_at = Some(now);
        assert_eq!(
            kinds(&sandbox_events(Some(&before), &sb, now)),
            ["sandbox.lifecycle.killed"]
        );
        assert!(
            sandbox_events(Some(&sb), &sb, now).is_empty(),
            "a second delete"
        );
    }

    #[test]
    fn a_rolled_back_create_never_existed_and_a_failed_one_errored() {
        let now = Utc::now();
        let creating = sandbox();
        let mut gone = creating.clone();
        gone.mark_terminated(now);
        gone.deleted_at = Some(now);
        assert!(sandbox_events(Some(&creating), &gone, now).is_empty());
        let mut failed = creating.clone();
        failed.mark_error("image missing".into());
        assert_eq!(
            kinds(&sandbox_events(Some(&creating), &failed, now)),
            ["sandbox.lifecycle.errored"]
        );
    }

    #[test]
    fn updates_name_fields_never_values_and_moves_name_hosts() {
        let now = Utc::now();
        let mut sb = sandbox();
        sb.mark_running(now);
        let before = sb.clone();
        sb.spec
            .environment_vars
            .insert("TOKEN".into(), "s3cret".into());
        sb.spec.cpu_cores = 2.0;
        sb.server = "h2".into();
        let events = sandbox_events(Some(&before), &sb, now);
        assert_eq!(
            kinds(&events),
            ["sandbox.lifecycle.moved", "sandbox.lifecycle.updated"]
        );
        let text = serde_json::to_string(&events[1].data).unwrap();
        assert!(
            text.contains("environmentVars") && text.contains("cpuCores"),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
        let before = sb.clone();
        sb.session_expires_at = Some(now + chrono::Duration::minutes(5));
        let events = sandbox_events(Some(&before), &sb, now);
        assert_eq!(kinds(&events), ["sandbox.lifecycle.updated"]);
        assert!(events[0]
            .data
            .as_ref()
            .unwrap()
            .get("set_timeout")
            .is_some());
    }

    #[test]
    fn every_kind_parses_back() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(*kind));
        }
        assert_eq!(EventKind::parse("sandbox.lifecycle.exploded"), None);
    }
}
