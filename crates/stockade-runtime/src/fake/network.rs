//! Network isolation in the fake runtime: there is no network to
//! isolate, so a check reports what a test set (nothing by default, or a
//! problem such as "iptables not found") and counts the checks. Egress
//! entries are kept per sandbox, for tests to read back.

use std::net::{IpAddr, Ipv4Addr};

use async_trait::async_trait;
use stockade_core::netpolicy::EgressPolicy;
use stockade_core::SandboxId;
use stockade_egress::iptables::RedirectPorts;

use super::FakeRuntime;
use crate::{
    Egress, EgressEntry, EgressHost, Isolation, IsolationReport, RuntimeError, RuntimeResult,
};

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

/// The fake sandbox network's gateway.
const FAKE_GATEWAY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

#[async_trait]
impl Egress for FakeRuntime {
    async fn egress_host(&self) -> RuntimeResult<EgressHost> {
        self.check_available()?;
        Ok(EgressHost {
            gateway: FAKE_GATEWAY.into(),
            subnets: Vec::new(),
        })
    }

    async fn apply_egress(
        &self,
        id: &SandboxId,
        policy: &EgressPolicy,
        ports: Option<RedirectPorts>,
    ) -> RuntimeResult<Option<IpAddr>> {
        self.check_available()?;
        let mut st = self.state();
        let on_network = st
            .containers
            .get(id)
            .is_some_and(|c| c.running && c.spec.network_access);
        if !on_network {
            st.egress.remove(id);
            return Ok(None);
        }
        if ports.is_none() && !matches!(policy, EgressPolicy::AllowAll | EgressPolicy::DenyAll) {
            return Err(RuntimeError::Other(
                "the egress filter does not run: allow and deny lists cannot be enforced".into(),
            ));
        }
        st.egress.insert(id.clone(), policy.clone());
        Ok(Some(FAKE_GATEWAY.into()))
    }

    async fn remove_egress(&self, ids: &[SandboxId]) -> RuntimeResult<Vec<IpAddr>> {
        self.check_available()?;
        let mut st = self.state();
        Ok(ids
            .iter()
            .filter(|id| st.egress.remove(*id).is_some())
            .map(|_| IpAddr::from(FAKE_GATEWAY))
            .collect())
    }

    async fn egress_entries(&self) -> RuntimeResult<Vec<EgressEntry>> {
        self.check_available()?;
        Ok(self
            .state()
            .egress
            .keys()
            .map(|id| EgressEntry {
                sandbox_id: id.clone(),
                addr: FAKE_GATEWAY.into(),
            })
            .collect())
    }

    async fn prune_egress(&self) -> RuntimeResult<Vec<EgressEntry>> {
        self.check_available()?;
        let mut st = self.state();
        let stale: Vec<SandboxId> = st
            .egress
            .keys()
            .filter(|id| {
                !st.containers
                    .get(*id)
                    .is_some_and(|c| c.running && c.spec.network_access)
            })
            .cloned()
            .collect();
        Ok(stale
            .into_iter()
            .map(|id| {
                st.egress.remove(&id);
                EgressEntry {
                    sandbox_id: id,
                    addr: FAKE_GATEWAY.into(),
                }
            })
            .collect())
    }

    async fn set_network_access(
        &self,
        id: &SandboxId,
        network_access: bool,
    ) -> RuntimeResult<bool> {
        self.check_available()?;
        let mut st = self.state();
        let c = st
            .containers
            .get_mut(id)
            .ok_or_else(|| RuntimeError::NotFound(format!("no container for sandbox {id}")))?;
        if c.spec.network_access == network_access {
            return Ok(false);
        }
        c.spec.network_access = network_access;
        if !network_access {
            st.egress.remove(id);
        }
        Ok(true)
    }
}
