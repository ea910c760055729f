//! The hosts' health checks, every `check_interval`: the leader checks
//! every host, cordons one that fails and uncordons it when it answers
//! again (its isolation checked, its sandboxes started again), drains the
//! hosts marked draining; the other instances only look at the hosts'
//! states.

use stockade_core::{Host, HostState};
use stockade_runtime::Runtime;

use crate::Service;

/// What one check of a host found.
struct Checked {
    healthy: bool,
    reason: Option<String>,
    cpus: Option<u32>,
    memory_bytes: Option<u64>,
    disk_free_bytes: Option<u64>,
}

/// Free bytes of `path` on this machine (a local engine's data root).
fn free_bytes(path: &str) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Checks one host: its engine answers within the timeout and, where its
/// data root is on this machine (a `unix://` engine), has free space.
async fn check_host(svc: &Service, host: &Host) -> Checked {
    let failed = |reason: String| Checked {
        healthy: false,
        reason: Some(reason),
        cpus: None,
        memory_bytes: None,
        disk_free_bytes: None,
    };
    let rt = match svc.hosts.runtime(host) {
        Ok(rt) => rt,
        Err(e) => return failed(e.to_string()),
    };
    let timeout = svc.hosts.config().check_timeout;
    let info = match tokio::time::timeout(timeout, rt.info()).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => return failed(format!("the Docker Engine does not answer: {e}")),
        Err(_) => {
            return failed(format!(
                "the Docker Engine did not answer within {} s",
                timeout.as_secs()
            ))
        }
    };
    let local = host.docker_host.starts_with("unix://") || host.docker_host.starts_with('/');
    let disk_free_bytes = match (&info.data_root, local) {
        (Some(root), true) => free_bytes(root),
        _ => None,
    };
    let min = svc.hosts.config().min_free_disk_bytes;
    let (healthy, reason) = match disk_free_bytes {
        Some(free) if free < min => (
            false,
            Some(format!(
                "its data root has {} free, under the minimum of {}",
                stockade_core::human_bytes(free),
                stockade_core::human_bytes(min)
            )),
        ),
        _ => (true, None),
    };
    Checked {
        healthy,
        reason,
        cpus: Some(info.cpus).filter(|c| *c > 0),
        memory_bytes: Some(info.memory_bytes).filter(|m| *m > 0),
        disk_free_bytes,
    }
}

/// How often an unchanged health is written again (its `checkedAt`).
const HEALTH_REWRITE_SECS: i64 = 300;

/// The reason an automatic cordon records.
fn auto_reason(why: &str) -> String {
    format!("cordoned automatically: {why}")
}

/// Checks every host once and acts on what changed: a host that
/// fails is cordoned automatically (no new placements; its sandboxes show
/// it); one that answers again is uncordoned — an administrator's cordon
/// stays — its isolation is checked, and its sandboxes whose records say
/// RUNNING but whose containers stopped while it was away are started
/// again. Returns the hosts as they are now.
pub async fn check_hosts_once(
    svc: &Service,
    prepared: &mut std::collections::HashSet<String>,
) -> Vec<Host> {
    let hosts = match crate::fleet::placement::all_hosts(svc).await {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(error = %e, "host checks: could not list the hosts");
            return Vec::new();
        }
    };
    let checks = futures_util::future::join_all(hosts.iter().map(|h| check_host(svc, h))).await;
    let now = chrono::Utc::now();
    let mut after = Vec::with_capacity(hosts.len());
    for (mut host, checked) in hosts.into_iter().zip(checks) {
        let was_failing = host.health.healthy == Some(false);
        let before = host.health.clone();
        host.health = stockade_core::HostHealth {
            healthy: Some(checked.healthy),
            reason: checked.reason.clone(),
            checked_at: Some(now),
            failing_since: match checked.healthy {
                true => None,
                false => host.health.failing_since.or(Some(now)),
            },
            cpus: checked.cpus.or(host.health.cpus),
            memory_bytes: checked.memory_bytes.or(host.health.memory_bytes),
            disk_free_bytes: checked.disk_free_bytes,
        };
        // Written when it changed, else once in a while: a write every few
        // seconds would also tell a database that refuses bigger writes
        // (a full disk) that it is healthy again.
        let changed_health = (
            before.healthy,
            &before.reason,
            before.cpus,
            before.memory_bytes,
        ) != (
            host.health.healthy,
            &host.health.reason,
            host.health.cpus,
            host.health.memory_bytes,
        );
        let stale = before
            .checked_at
            .is_none_or(|t| now - t > chrono::Duration::seconds(HEALTH_REWRITE_SECS));
        if changed_health || stale {
            if let Err(e) = svc.store.record_host_health(&host.name, &host.health).await {
                // The own host may have no row (a store without hosts support).
                tracing::debug!(host = %host.name, error = %e, "host checks: health not recorded");
            }
        }
        // Back (or first seen): isolated and its sandboxes running again
        // before it takes new ones.
        if checked.healthy && (was_failing || !prepared.contains(&host.name)) {
            if let Ok(rt) = svc.hosts.runtime(&host) {
                if host.name != svc.hosts.own_name() {
                    // The own host's isolation is the service's own check.
                    let report = rt.ensure_isolation().await;
                    if report.status() == stockade_runtime::IsolationStatus::Degraded {
                        tracing::error!(host = %host.name, report = %report.summary(), "sandboxes on this host are not fully isolated");
                    }
                }
                prepared.insert(host.name.clone());
                if was_failing {
                    recover_host(svc, &host.name, rt.as_ref()).await;
                }
            }
        }
        let mut changed = false;
        if !checked.healthy && host.state == HostState::Active {
            let why = checked.reason.clone().unwrap_or_default();
            tracing::warn!(host = %host.name, reason = %why, "host fails its checks: cordoned, no new sandboxes go there");
            host.state = HostState::Cordoned;
            host.auto_cordoned = true;
            host.state_reason = Some(auto_reason(&why));
            changed = true;
        } else if checked.healthy && host.auto_cordoned && host.state == HostState::Cordoned {
            tracing::info!(host = %host.name, "host answers again: uncordoned");
            host.state = HostState::Active;
            host.auto_cordoned = false;
            host.state_reason = None;
            changed = true;
        } else if !checked.healthy && host.auto_cordoned {
            // Still failing: keep the latest reason.
            let why = auto_reason(checked.reason.as_deref().unwrap_or_default());
            if host.state_reason.as_deref() != Some(why.as_str()) {
                host.state_reason = Some(why);
                changed = true;
            }
        }
        if changed {
            host.updated_at = now;
            if let Err(e) = svc.store.update_host(&host).await {
                tracing::warn!(host = %host.name, error = %e, "host checks: state not recorded");
            }
        }
        if checked.healthy && host.state == HostState::Draining {
            start_drain(svc, &host);
        }
        after.push(host);
    }
    svc.hosts.observe(&after);
    after
}

/// Starts a drain pass over `host` unless one runs.
fn start_drain(svc: &Service, host: &Host) {
    if !svc.hosts.begin_drain(&host.name) {
        return;
    }
    let (svc, host) = (svc.clone(), host.clone());
    tokio::spawn(async move {
        crate::sandbox::drain::drain_once(&svc, &host).await;
        svc.hosts.end_drain(&host.name);
    });
}
/// Starts again the sandboxes of `server` that were running when it went
/// away (their records still say RUNNING: reconciliation leaves an
/// unhealthy host alone) and whose containers stopped with its engine.
/// Paused ones whose containers stopped lost their processes: they are
/// recorded STOPPED with the reason (their files are kept), not started.
async fn recover_host(svc: &Service, server: &str, rt: &dyn Runtime) {
    let mut restarted = 0usize;
    let mut ended = 0usize;
    let mut pages = crate::access::ActivePages::new(svc, 500);
    while let Some(page) = pages.next().await {
        let page = match page {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(host = %server, error = %e, "host recovery: records not read");
                return;
            }
        };
        for sb in page
            .iter()
            .filter(|sb| sb.server == server && sb.is_paused())
        {
            if let Ok(Some(c)) = rt.inspect(&sb.id).await {
                if !c.running {
                    let mut stopped = sb.clone();
                    crate::sandbox::recovery::converge_record(
                        &mut stopped,
                        Some(&c),
                        chrono::Utc::now(),
                    );
                    match svc.store.update_sandbox(&stopped).await {
                        Ok(_) => ended += 1,
                        Err(e) => {
                            tracing::warn!(sandbox.id = %sb.id, error = %e, "host recovery: a paused sandbox's end not recorded")
                        }
                    }
                }
            }
        }
        for sb in page
            .iter()
            .filter(|sb| sb.server == server && sb.status == stockade_core::SandboxStatus::Running)
        {
            match rt.inspect(&sb.id).await {
                Ok(Some(c)) if !c.running => {
                    svc.agents.forget(&sb.id);
                    match crate::sandbox::lifecycle::start(svc, sb.clone()).await {
                        Ok(_) => restarted += 1,
                        Err(e) => {
                            tracing::warn!(sandbox.id = %sb.id, error = %e, "host recovery: not started again")
                        }
                    }
                }
                _ => {}
            }
        }
    }
    tracing::info!(host = %server, restarted, paused_ended = ended, "host is back: its sandboxes are running again");
}

/// The leader's host checks, every `check_interval` until `term` ends.
pub async fn check_periodically(svc: Service, term: tokio_util::sync::CancellationToken) {
    let mut prepared = std::collections::HashSet::new();
    let mut every = crate::every::Every::new(svc.hosts.config().check_interval, term);
    while every.next().await {
        check_hosts_once(&svc, &mut prepared).await;
    }
}

/// What every instance that does not lead looks at: the hosts' states (the
/// warm pool serves only while the own host takes sandboxes; removed hosts'
/// runtimes are dropped).
pub async fn observe_periodically(svc: Service, shutdown: tokio_util::sync::CancellationToken) {
    let mut every = crate::every::Every::new(svc.hosts.config().check_interval, shutdown);
    while every.next().await {
        if svc.leader.is_leader() {
            continue;
        }
        if let Ok(hosts) = crate::fleet::placement::all_hosts(&svc).await {
            svc.hosts.observe(&hosts);
        }
    }
}
