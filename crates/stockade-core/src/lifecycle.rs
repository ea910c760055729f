//! What happens to a sandbox when its session ends or it sits idle: it is
//! killed (removed with its volume), stopped (its files kept) or paused
//! (frozen in place, processes and memory kept); and whether a paused one
//! wakes up by itself when it is used.

use serde::{Deserialize, Serialize};

use crate::error::FieldError;
use crate::spec::parse_timeout_minutes;

/// The action at the end of a session (its timeout, or its idle timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeoutAction {
    /// Removed with its volume (TERMINATED).
    Kill,
    /// Its container stopped; `/workspace` kept (STOPPED).
    Stop,
    /// Frozen in place (PAUSED): processes, memory and connections kept.
    Pause,
}

impl TimeoutAction {
    pub const ALL: [TimeoutAction; 3] = [Self::Kill, Self::Stop, Self::Pause];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::Stop => "stop",
            Self::Pause => "pause",
        }
    }

    /// Parses `kill`, `stop` or `pause` in any case; `field` names the
    /// input in the error.
    pub fn parse(s: &str, field: &str) -> Result<Self, FieldError> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                let shown: String = s.chars().take(40).collect();
                FieldError::new(
                    field,
                    format!("unknown action '{shown}': expected kill, stop or pause"),
                )
            })
    }
}

/// A sandbox's lifecycle settings, as stored in its spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lifecycle {
    /// What ends a session; `None`: stop a persistent sandbox, kill any
    /// other (see [`crate::SandboxSpec::timeout_action`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<TimeoutAction>,
    /// A paused sandbox that is used (a command, a terminal, a file call,
    /// a code cell, a request to one of its ports) is resumed first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_resume: bool,
    /// Minutes without any use after which the session ends as its timeout
    /// would; 0: never.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_timeout_minutes: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

impl Lifecycle {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The lifecycle as a client sent it, every field optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LifecycleInput {
    pub on_timeout: Option<String>,
    pub auto_resume: Option<bool>,
    pub idle_timeout_minutes: Option<f64>,
}

impl LifecycleInput {
    /// Checks the input over `current` (a create passes the default);
    /// errors name `{field}.onTimeout` and `{field}.idleTimeoutMinutes`.
    pub fn apply(&self, current: &Lifecycle, field: &str) -> Result<Lifecycle, FieldError> {
        let mut out = current.clone();
        if let Some(a) = &self.on_timeout {
            out.on_timeout = Some(TimeoutAction::parse(a, &format!("{field}.onTimeout"))?);
        }
        if let Some(r) = self.auto_resume {
            out.auto_resume = r;
        }
        if let Some(m) = self.idle_timeout_minutes {
            out.idle_timeout_minutes =
                parse_timeout_minutes(m, &format!("{field}.idleTimeoutMinutes"))?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_parse_in_any_case_and_name_the_field() {
        assert_eq!(
            TimeoutAction::parse("Pause", "f").unwrap(),
            TimeoutAction::Pause
        );
        let e = TimeoutAction::parse("hibernate", "lifecycle.onTimeout").unwrap_err();
        assert_eq!(e.field, "lifecycle.onTimeout");
        assert!(e.message.contains("kill, stop or pause"), "{}", e.message);
    }

    #[test]
    fn input_applies_over_the_current_settings() {
        let base = Lifecycle {
            on_timeout: Some(TimeoutAction::Stop),
            auto_resume: true,
            idle_timeout_minutes: 5.0,
        };
        let changed = LifecycleInput {
            on_timeout: Some("pause".into()),
            ..Default::default()
        }
        .apply(&base, "lifecycle")
        .unwrap();
        assert_eq!(changed.on_timeout, Some(TimeoutAction::Pause));
        assert!(changed.auto_resume);
        assert_eq!(changed.idle_timeout_minutes, 5.0);
        let e = LifecycleInput {
            idle_timeout_minutes: Some(-1.0),
            ..Default::default()
        }
        .apply(&base, "lifecycle")
        .unwrap_err();
        assert_eq!(e.field, "lifecycle.idleTimeoutMinutes");
        assert!(Lifecycle::default().is_default());
        // Stored compactly: defaults are left out.
        assert_eq!(serde_json::to_string(&Lifecycle::default()).unwrap(), "{}");
    }
}
