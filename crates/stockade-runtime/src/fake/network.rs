//! Network isolation in the fake runtime (SEC-5): there is no network to
//! isolate, so a check reports what a test set (nothing by default, or a
//! problem such as "iptables not found") and counts the checks.

use async_trait::async_trait;

use super::FakeRuntime;
use crate::{Isolation, IsolationReport};

impl FakeRuntime {
    /// What `ensure_isolation` reports as not applied from now on (`None`:
    /// everything in place).
    pub fn set_isolation_problem(&self, problem: Option<String>) {
        self.state().isolation_problem = problem;
    }

    /// How many times `ensure_isolation` ran.
    pub fn isolation_checks(&self) -> u32 {
        self.state().isolation_checks
    }
}

#[async_trait]
impl Isolation for FakeRuntime {
    async fn ensure_isolation(&self) -> IsolationReport {
        let mut report = IsolationReport::new();
        let unavailable = self.check_available().err();
        let mut st = self.state();
        st.isolation_checks += 1;
        if let Some(e) = unavailable {
            report.problems.push(format!(
                "Stockade's sandbox networks could not be checked: {e}"
            ));
        }
        report.problems.extend(st.isolation_problem.clone());
        report
    }
}
