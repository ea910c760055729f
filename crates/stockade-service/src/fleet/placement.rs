//! Placement of new sandboxes on Docker hosts: which hosts may
//! take a create (active, healthy, matching the request's `server` and
//! `hostSelector`, big enough, holding the image of a snapshot source, the
//! server's own host for policies that need its egress filter), and the
//! limits and in-flight holdings the store's placement transaction weighs.
//! The choice itself — the freest candidate with room — is made by
//! [`HostStore::insert_sandbox_placed`](stockade_store::HostStore::insert_sandbox_placed)
//! in one transaction, so instances never overfill a host together.

use std::sync::Arc;

use stockade_core::{Host, HostState, Sandbox, Snapshot};
use stockade_runtime::Runtime;
use stockade_store::{CandidateLoad, PlacementCandidate};

use crate::error::{ServiceError, ServiceResult};
use crate::fleet::admission::HostCapacity;
use crate::Service;

/// A host that may take the create, with its runtime.
pub struct Candidate {
    pub host: Host,
    pub runtime: Arc<dyn Runtime>,
    pub placement: PlacementCandidate,
    /// Its size and overcommit, for the refusal's words.
    pub capacity: HostCapacity,
}

/// The server's own host as a record, when the database has none yet.
pub(crate) fn own_host_record(svc: &Service) -> Host {
    let now = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 6);
    Host::new(
        svc.hosts.own_name(),
        svc.hosts.config().own_docker_host.clone(),
        now,
    )
}

/// Every host, the server's own included.
pub(crate) async fn all_hosts(svc: &Service) -> ServiceResult<Vec<Host>> {
    let mut hosts = svc.store.list_hosts().await?;
    if !hosts.iter().any(|h| h.name == svc.hosts.own_name()) {
        hosts.insert(0, own_host_record(svc));
    }
    Ok(hosts)
}

fn describe(host: &Host) -> String {
    match (&host.state, host.health.healthy) {
        (HostState::Active, Some(false)) => format!(
            "{} is unhealthy ({})",
            host.name,
            host.health.reason.as_deref().unwrap_or("failing checks")
        ),
        (state, _) => format!(
            "{} is {}{}",
            host.name,
            state.as_str(),
            host.state_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
    }
}

/// The hosts that may take `sb` (validated, not saved), each with its
/// limits and what this process holds there. Errors say why none may: an
/// unknown `server` (400), a host too small for the sandbox (400 naming
/// the field), no active host matching (409).
pub async fn candidates(svc: &Service, sb: &Sandbox) -> ServiceResult<Vec<Candidate>> {
    let wanted = &sb.spec.placement;
    let hosts = all_hosts(svc).await?;
    if let Some(name) = &wanted.server {
        if !hosts.iter().any(|h| &h.name == name) {
            let known: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
            return Err(ServiceError::field(
                "server",
                format!(
                    "no Docker host named '{name}' (hosts: {})",
                    known.join(", ")
                ),
            ));
        }
    }
    let matching: Vec<Host> = hosts
        .into_iter()
        .filter(|h| wanted.allows(&h.name, &h.labels))
        .collect();
    if matching.is_empty() {
        return Err(ServiceError::InsufficientCapacity(format!(
            "no Docker host carries the labels of hostSelector {:?}",
            wanted.selector
        )));
    }
    let (schedulable, closed): (Vec<Host>, Vec<Host>) =
        matching.into_iter().partition(Host::schedulable);
    if schedulable.is_empty() {
        let why: Vec<String> = closed.iter().map(describe).collect();
        if closed.iter().all(|h| h.health.healthy == Some(false)) {
            // Not full: unreachable (503, as with one engine that is down).
            return Err(ServiceError::DockerUnavailable(format!(
                "no Docker host answers now: {}",
                why.join("; ")
            )));
        }
        return Err(ServiceError::InsufficientCapacity(format!(
            "no Docker host takes new sandboxes now: {}",
            why.join("; ")
        )));
    }
    // The egress filter of allow/deny lists runs beside the own host only.
    let schedulable = if crate::net::egress::needs_filter(&sb.spec.network) {
        let own: Vec<Host> = schedulable
            .into_iter()
            .filter(|h| h.name == svc.hosts.own_name())
            .collect();
        if own.is_empty() {
            return Err(ServiceError::field(
                "networkPolicy",
                format!(
                    "allow and deny lists are enforced by this server's egress filter, which \
                     runs on its own Docker host '{}' only; that host does not match or takes \
                     no sandboxes now",
                    svc.hosts.own_name()
                ),
            ));
        }
        own
    } else {
        schedulable
    };
    let snapshot_image = sb
        .spec
        .docker_image
        .starts_with(&format!("{}:", Snapshot::IMAGE_REPO));
    let mut out = Vec::new();
    let mut too_small: Option<ServiceError> = None;
    let mut unreachable = Vec::new();
    for host in schedulable {
        let rt = match svc.hosts.runtime(&host) {
            Ok(rt) => rt,
            Err(e) => {
                unreachable.push(format!("{}: {e}", host.name));
                continue;
            }
        };
        if snapshot_image
            && !crate::content::snapshots::image_available_on(
                svc,
                rt.as_ref(),
                &sb.spec.docker_image,
            )
            .await
        {
            continue;
        }
        let (cpus, memory) = crate::fleet::admission::host_size(&host, rt.as_ref()).await;
        if let Some(cpus) = cpus.filter(|c| *c > 0) {
            if sb.spec.cpu_cores > f64::from(cpus) {
                too_small.get_or_insert_with(|| {
                    ServiceError::field(
                        "cpuCores",
                        format!(
                            "{} CPUs asked, but server '{}' has {cpus}",
                            sb.spec.cpu_cores, host.name
                        ),
                    )
                });
                continue;
            }
        }
        if let Some(total) = memory.filter(|m| *m > 0) {
            if sb.spec.memory_bytes() as u64 > total {
                too_small.get_or_insert_with(|| {
                    ServiceError::field(
                        "memoryGB",
                        format!(
                            "{} GB asked, but server '{}' has {}",
                            sb.spec.memory_gb,
                            host.name,
                            stockade_core::human_bytes(total)
                        ),
                    )
                });
                continue;
            }
        }
        let a = &svc.config.admission;
        let cap = HostCapacity {
            cpus: cpus.unwrap_or(0),
            memory_bytes: memory.unwrap_or(0),
            cpu_overcommit: a.cpu_overcommit,
            memory_overcommit: a.memory_overcommit,
        };
        out.push(Candidate {
            placement: PlacementCandidate {
                server: host.name.clone(),
                cpu_limit_millis: cap.cpu_limit(),
                memory_limit_bytes: cap.memory_limit(),
                extra: crate::fleet::admission::held_on(svc, &host.name, &sb.id),
            },
            host,
            runtime: rt,
            capacity: cap,
        });
    }
    if out.is_empty() {
        if let Some(e) = too_small {
            return Err(e);
        }
        if snapshot_image {
            return Err(ServiceError::Conflict(format!(
                "the image {} is on no Docker host that takes new sandboxes now",
                sb.spec.docker_image
            )));
        }
        return Err(ServiceError::DockerUnavailable(format!(
            "no Docker host can be reached: {}",
            unreachable.join("; ")
        )));
    }
    Ok(out)
}

/// The refusal when no candidate had room: each host's load in the words
/// of admission control, one host's alone when there was one.
pub fn full_message(loads: &[CandidateLoad], candidates: &[Candidate], sb: &Sandbox) -> String {
    let ask = stockade_core::Footprint::running(&sb.spec).running;
    let mut said: Vec<String> = loads
        .iter()
        .filter_map(|l| {
            let cap = candidates
                .iter()
                .find(|c| c.host.name == l.server)?
                .capacity;
            cap.check(&l.server, l.reserved, Default::default(), ask)
                .err()
                .map(|refused| refused.0)
        })
        .collect();
    match said.len() {
        0 => format!(
            "insufficient capacity: no Docker host has room for {} CPUs and {} GB",
            sb.spec.cpu_cores, sb.spec.memory_gb
        ),
        1 => said.remove(0),
        _ => format!("no Docker host has room: {}", said.join("; ")),
    }
}
