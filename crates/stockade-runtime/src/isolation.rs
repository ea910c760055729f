//! The outcome of [`crate::Isolation::ensure_isolation`]: whether
//! sandboxes are cut off from each other and from the host, what had to be
//! repaired, and why anything could not be applied.

use chrono::{DateTime, Utc};

/// How isolation stands after a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationStatus {
    /// Everything was in place.
    Ok,
    /// Something was missing or wrong and has been put right.
    Repaired,
    /// Something could not be applied: sandboxes are less isolated than
    /// they should be (see [`IsolationReport::problems`]).
    Degraded,
}

impl IsolationStatus {
    /// `ok`, `repaired` or `degraded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Repaired => "repaired",
            Self::Degraded => "degraded",
        }
    }
}

/// One check of network isolation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolationReport {
    /// When the check ran.
    pub checked_at: DateTime<Utc>,
    /// What was missing or wrong and is fixed now, one sentence each.
    pub repaired: Vec<String>,
    /// What could not be applied, with the reason, one sentence each (e.g.
    /// "iptables not found: sandboxes can reach services on the host").
    pub problems: Vec<String>,
}

impl IsolationReport {
    /// An empty report of a check starting now.
    pub fn new() -> Self {
        Self {
            checked_at: Utc::now(),
            repaired: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Degraded when anything could not be applied, else repaired when
    /// anything was put right, else ok.
    pub fn status(&self) -> IsolationStatus {
        if !self.problems.is_empty() {
            IsolationStatus::Degraded
        } else if !self.repaired.is_empty() {
            IsolationStatus::Repaired
        } else {
            IsolationStatus::Ok
        }
    }

    /// One line for logs and `/health`: the status, then the problems and
    /// repairs.
    pub fn summary(&self) -> String {
        let mut parts = vec![self.status().as_str().to_owned()];
        parts.extend(self.problems.iter().cloned());
        parts.extend(self.repaired.iter().map(|r| format!("repaired: {r}")));
        parts.join("; ")
    }
}

impl Default for IsolationReport {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_problems_then_repairs() {
        let mut r = IsolationReport::new();
        assert_eq!(r.status(), IsolationStatus::Ok);
        assert_eq!(r.summary(), "ok");
        r.repaired.push("rule added".into());
        assert_eq!(r.status(), IsolationStatus::Repaired);
        r.problems.push("iptables not found".into());
        assert_eq!(r.status(), IsolationStatus::Degraded);
        assert_eq!(
            r.summary(),
            "degraded; iptables not found; repaired: rule added"
        );
    }
}
