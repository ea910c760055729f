//! A sandbox's exposed ports: its record's `spec.ports`, changed at run
//! time with optimistic updates. The proxy reads them on every request, so
//! a change applies at once.

use stockade_core::{Sandbox, SandboxStatus, Scope};
use stockade_store::{SandboxFilter, StoreError};

use crate::access;
use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// Most ports one sandbox may have exposed at once (4 at create, more later).
pub const MAX_EXPOSED_PORTS: usize = 32;
/// How often a change retries when another writer got there first.
const UPDATE_ATTEMPTS: usize = 8;

/// Refuses a destroyed sandbox: it has no ports left to reach.
fn ensure_not_terminated(sb: &Sandbox) -> ServiceResult<()> {
    crate::sandbox::lifecycle::ensure_live(sb, "create a new one")
}

impl Service {
    /// Exposes `port` on the caller's sandbox `id`. Returns the record and
    /// whether the port was newly exposed (`false`: it already was).
    pub async fn expose_port(
        &self,
        scope: &Scope,
        id: &str,
        port: u16,
    ) -> ServiceResult<(Sandbox, bool)> {
        self.update_ports(scope, id, |sb| {
            ensure_not_terminated(sb)?;
            if sb.spec.ports.contains(&port) {
                return Ok(false);
            }
            if !sb.spec.network.allows_egress() {
                return Err(ServiceError::Conflict(format!(
                    "Sandbox {} was created with networkAccess: false: it has no network the \
                     proxy could reach a port on",
                    sb.id
                )));
            }
            if sb.spec.ports.len() >= MAX_EXPOSED_PORTS {
                return Err(ServiceError::field(
                    "port",
                    format!(
                        "at most {MAX_EXPOSED_PORTS} ports can be exposed at once; unexpose one \
                         first"
                    ),
                ));
            }
            sb.spec.ports.push(port);
            Ok(true)
        })
        .await
    }

    /// Unexposes `port` on the caller's sandbox `id` (404 when it is not
    /// exposed); returns the record with the ports still exposed.
    pub async fn unexpose_port(
        &self,
        scope: &Scope,
        id: &str,
        port: u16,
    ) -> ServiceResult<Sandbox> {
        let (sb, _) = self
            .update_ports(scope, id, |sb| {
                let before = sb.spec.ports.len();
                sb.spec.ports.retain(|p| *p != port);
                if sb.spec.ports.len() == before {
                    return Err(ServiceError::NotFound(format!(
                        "Port {port} is not exposed on sandbox {}",
                        sb.id
                    )));
                }
                Ok(true)
            })
            .await?;
        Ok(sb)
    }

    /// The caller's sandbox `id` for a token that opens its ports: refused
    /// once it is destroyed.
    pub async fn sandbox_for_port_token(&self, scope: &Scope, id: &str) -> ServiceResult<Sandbox> {
        let sb = access::load(self, scope, id).await?;
        ensure_not_terminated(&sb)?;
        Ok(sb)
    }

    /// Every running sandbox the caller may see (what has ports to reach),
    /// read a page of 1000 at a time.
    pub async fn running_sandboxes(&self, scope: &Scope) -> ServiceResult<Vec<Sandbox>> {
        let mut filter = SandboxFilter {
            statuses: vec![SandboxStatus::Running],
            page: 1,
            per_page: 1000,
            ..Default::default()
        };
        let mut all = Vec::new();
        loop {
            let page = self.store.list_sandboxes(scope, &filter).await?;
            let seen = u64::from(filter.page) * u64::from(filter.per_page);
            let last = page.sandboxes.is_empty() || seen >= page.total;
            all.extend(page.sandboxes);
            if last {
                return Ok(all);
            }
            filter.page += 1;
        }
    }

    /// Applies `change` to the sandbox's record and saves it, reloading and
    /// trying again when another writer updated it in between. `change`
    /// returns `Ok(false)` when there is nothing to write.
    async fn update_ports(
        &self,
        scope: &Scope,
        id: &str,
        mut change: impl FnMut(&mut Sandbox) -> ServiceResult<bool>,
    ) -> ServiceResult<(Sandbox, bool)> {
        for _ in 0..UPDATE_ATTEMPTS {
            let mut sb = access::load(self, scope, id).await?;
            if !change(&mut sb)? {
                return Ok((sb, false));
            }
            match self.store.update_sandbox(&sb).await {
                Ok(saved) => return Ok((saved, true)),
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ServiceError::Conflict(
            "The sandbox was changed by others too often meanwhile; try again".into(),
        ))
    }
}
