//! Sandbox lifecycle as durable operations: each create, start, stop and
//! delete is recorded before it touches Docker, waits for any other
//! operation on the same sandbox, and ends together with its write to the
//! record (see [`crate::ops::operations`]). The database stays the single source
//! of truth.

use std::time::Duration;

use chrono::Utc;
use futures_util::StreamExt;
use stockade_core::{
    AccountId, OperationKind, Sandbox, SandboxId, SandboxSpec, SandboxStatus, Scope, TeamId,
};
use stockade_runtime::{ContainerSpec, RuntimeError};
use stockade_store::{Placed, SandboxWrite, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::content::sources::PreparedSource;
use crate::error::{ServiceError, ServiceResult};
use crate::fleet::admission::Admitted;
use crate::fleet::placement::Candidate;
use crate::ops::operations::OpGuard;
use crate::sandbox::request::NewSandbox;
use crate::Service;

pub use crate::access::load;

/// Checks every setting of a create once and makes the sandbox's record:
/// a fresh id, the caller's account, its team (the caller must be a
/// member) and the checked metadata.
pub fn prepare(svc: &Service, scope: &Scope, new: &NewSandbox) -> ServiceResult<Sandbox> {
    let metadata = stockade_core::spec::parse_metadata(&new.metadata, "metadata")?;
    let id = SandboxId::generate();
    let mut spec = SandboxSpec::from_input(new.spec.clone(), &id, &svc.config.defaults)?;
    spec.metadata = metadata;
    svc.check_private_entries(&spec.network)?;
    let team_id = match &new.team_id {
        None => None,
        Some(t) => {
            let team = TeamId::parse_field(t, "teamId")?;
            if !scope.team_ids.contains(&team) {
                return Err(ServiceError::field(
                    "teamId",
                    format!("you are not a member of team '{team}'"),
                ));
            }
            Some(team)
        }
    };
    Ok(Sandbox::new(
        id,
        scope.account_id.clone(),
        team_id,
        spec,
        svc.hosts.own_name().to_owned(),
        Utc::now(),
    ))
}

/// Refuses resources the Docker host `server` cannot give at all: more
/// CPUs than it has, more memory than it has (a 400 naming the field, not
/// Docker's error later). Hosts whose size the engine does not report are
/// not checked. (Creates: [`crate::fleet::placement::candidates`] checks every host.)
pub async fn check_host_fits(svc: &Service, server: &str, spec: &SandboxSpec) -> ServiceResult<()> {
    let Ok(rt) = svc.runtime_on(server).await else {
        return Ok(()); // the operation's own error comes later
    };
    let Ok(info) = rt.info().await else {
        return Ok(()); // Docker's own error comes at create
    };
    if let Some(cpus) = Some(info.cpus).filter(|c| *c > 0) {
        if spec.cpu_cores > f64::from(cpus) {
            return Err(ServiceError::field(
                "cpuCores",
                format!(
                    "{} CPUs asked, but server '{}' has {cpus}",
                    spec.cpu_cores, server
                ),
            ));
        }
    }
    if let Some(total) = Some(info.memory_bytes).filter(|m| *m > 0) {
        if spec.memory_bytes() as u64 > total {
            return Err(ServiceError::field(
                "memoryGB",
                format!(
                    "{} GB asked, but server '{}' has {}",
                    spec.memory_gb,
                    server,
                    stockade_core::human_bytes(total)
                ),
            ));
        }
    }
    Ok(())
}

/// A runtime error for a request whose `field` Docker refused as input
/// (limits out of range) becomes a 400 naming the field; other errors stay.
pub(crate) fn docker_refused(e: RuntimeError, field: &str) -> ServiceError {
    match e {
        RuntimeError::LimitRefused(m) => ServiceError::field(field, m),
        other => other.into(),
    }
}

/// The container's environment: the sandbox's variables, and for a
/// template's sandbox the working directory and user its agent gives
/// commands by default (never seen by the commands themselves).
fn container_env(sb: &Sandbox) -> std::collections::BTreeMap<String, String> {
    use stockade_agent::config::{USER_ENV, WORKDIR_ENV};
    let mut env = sb.spec.environment_vars.clone();
    if let Some(t) = &sb.spec.template {
        for (key, value) in [(WORKDIR_ENV, &t.workdir), (USER_ENV, &t.user)] {
            if let Some(value) = value {
                env.insert(key.to_owned(), value.clone());
            }
        }
    }
    env
}

pub(crate) fn container_spec(svc: &Service, sb: &Sandbox) -> ContainerSpec {
    ContainerSpec {
        sandbox_id: sb.id.clone(),
        account_id: sb.account_id.clone(),
        instance_id: svc.instance_id.clone(),
        image: sb.spec.docker_image.clone(),
        command: sb.spec.command_argv(),
        env: container_env(sb),
        cpu_cores: sb.spec.cpu_cores,
        memory_bytes: sb.spec.memory_bytes(),
        network_access: sb.spec.network.allows_egress(),
        hostname: sb.spec.name.to_string().to_lowercase(),
        agent_token: Some(svc.agents.token(&sb.id)),
        disk_bytes: Some(u64::from(sb.spec.disk_size_gb) << 30),
        mounts: crate::content::shared_volumes::container_mounts(&sb.spec),
        workspace_volume: sb.spec.template.as_ref().is_none_or(|t| !t.building),
    }
}

/// An `Idempotency-Key` a create was recorded under.
#[derive(Debug, Clone)]
pub struct IdempotencyKey {
    pub account: AccountId,
    pub key: String,
}

/// What a create answered.
#[derive(Debug, Clone)]
pub struct Created {
    pub sandbox: Sandbox,
    /// An earlier create with the same `Idempotency-Key` made it.
    pub replayed: bool,
}

/// What provisioning is handed once a create was checked, placed, admitted
/// and its source resolved.
pub struct Provision {
    /// The hosts that may take it; the store picks the freest one with
    /// room as it inserts the record.
    pub candidates: Vec<Candidate>,
    /// Its quota and host room, held until the record shows the sandbox.
    pub admitted: Admitted,
    pub source: Option<PreparedSource>,
    /// With an `Idempotency-Key`: the create's operation (recorded before
    /// the key) and the key, forgotten if the create fails.
    pub guard: Option<OpGuard>,
    pub key: Option<IdempotencyKey>,
}

/// Creates `sandbox` (validated, PROVISIONING) and returns it RUNNING.
///
/// The record and the create operation are inserted together before any
/// container exists, so the unique name is claimed first and a crash
/// at any later point is rolled back by recovery. If the runtime
/// fails, the create is rolled back here at once: no container,
/// volume, record or idempotency key stays.
///
/// A `source` archive is unpacked into `/workspace` before the container
/// starts. The work runs in its own task: if the caller goes
/// away before it ends (the client disconnected, so this future was
/// dropped), the task rolls the create back when it finishes.
pub async fn create_from(
    svc: &Service,
    sandbox: Sandbox,
    provision: Provision,
) -> ServiceResult<Sandbox> {
    let abandoned = CancellationToken::new();
    let guard = abandoned.clone().drop_guard();
    let svc = svc.clone();
    let result = tokio::spawn(async move {
        let Provision {
            candidates,
            admitted,
            source,
            guard: held,
            key,
        } = provision;
        let (archive, after) = match source {
            Some(s) => (Some(s.archive), Some(s.after)),
            None => (None, None),
        };
        let mut result = create_inner(
            &svc,
            sandbox,
            &abandoned,
            archive,
            Placement {
                candidates,
                admitted,
            },
            key.clone(),
            held,
        )
        .await;
        if abandoned.is_cancelled() && !svc.crashed() {
            if let Ok(made) = &result {
                // Nobody will ever see it: it goes like any sandbox.
                warn!(sandbox.id = %made.id, "the client went away during create; rolling it back");
                if let Err(e) = destroy(&svc, made.clone(), false).await {
                    warn!(sandbox.id = %made.id, error = %e, "could not remove an abandoned create");
                }
                result = Err(cancelled());
            }
        }
        if let (Err(_), Some(key), false) = (&result, &key, svc.crashed()) {
            // The create failed: a retry with the key may create anew.
            if let Err(e) = svc.store.delete_idempotency_key(&key.account, &key.key).await {
                warn!(error = %e, "could not forget the idempotency key of a failed create");
            }
        }
        if let Some(after) = after {
            crate::content::sources::finish(&svc, after, result.is_ok()).await;
        }
        result
    })
    .await;
    guard.disarm();
    result.map_err(|e| ServiceError::Internal(format!("create task failed: {e}")))?
}

/// Where a create may go and the room it holds.
struct Placement {
    candidates: Vec<Candidate>,
    admitted: Admitted,
}

fn cancelled() -> ServiceError {
    ServiceError::Conflict("the create was cancelled".into())
}

async fn create_inner(
    svc: &Service,
    mut sb: Sandbox,
    abandoned: &CancellationToken,
    archive: Option<stockade_runtime::ByteStream>,
    placement: Placement,
    idempotency: Option<IdempotencyKey>,
    held: Option<OpGuard>,
) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("create");
    let Placement {
        candidates,
        admitted,
    } = placement;
    // A create without a source or key may be served by a warm-pool member
    // on a host it may go to (a key names the sandbox id up front).
    if archive.is_none() && idempotency.is_none() && held.is_none() {
        match crate::sandbox::pool::claim(svc, &sb).await {
            None => {}
            Some(crate::sandbox::pool::Claim::Served(sandbox)) => return Ok(sandbox),
            Some(crate::sandbox::pool::Claim::Failed(e)) => return Err(e),
            Some(crate::sandbox::pool::Claim::Unusable(member, e)) => {
                let _ = destroy(svc, member, false).await;
                return Err(e);
            }
        }
    }
    let offered: Vec<stockade_store::PlacementCandidate> =
        candidates.iter().map(|c| c.placement.clone()).collect();
    let name = sb.spec.name.clone();
    let name_taken = |e: StoreError| match e {
        StoreError::Conflict(_) => ServiceError::Conflict(format!(
            "A sandbox named '{name}' already exists in this account"
        )),
        other => other.into(),
    };
    let full = |loads: Vec<stockade_store::CandidateLoad>, sb: &Sandbox| {
        ServiceError::InsufficientCapacity(crate::fleet::placement::full_message(
            &loads,
            &candidates,
            sb,
        ))
    };
    let guard = match held {
        // The operation was recorded before the idempotency key: only the
        // record is new.
        Some(guard) => match svc
            .store
            .insert_sandbox_placed(&mut sb, None, &offered)
            .await
        {
            Ok(Placed::On(_)) => guard,
            Ok(Placed::Full(loads)) => {
                guard.release().await;
                return Err(full(loads, &sb));
            }
            Err(e) => {
                guard.release().await;
                return Err(name_taken(e));
            }
        },
        None => {
            let params = match &idempotency {
                Some(k) => serde_json::json!({ "idempotency_key": k.key }),
                None => serde_json::json!({}),
            };
            let op = svc.new_operation(OperationKind::Create, &sb.id, &sb.account_id, params);
            match svc
                .store
                .insert_sandbox_placed(&mut sb, Some(&op), &offered)
                .await
                .map_err(name_taken)?
            {
                Placed::On(_) => svc.hold_operation(op),
                Placed::Full(loads) => return Err(full(loads, &sb)),
            }
        }
    };
    drop(admitted); // the PROVISIONING record counts from now on
    svc.hosts.remember(&sb.id, &sb.server);
    let Some(rt) = candidates
        .into_iter()
        .find(|c| c.host.name == sb.server)
        .map(|c| c.runtime)
    else {
        guard.abandon().await;
        return Err(ServiceError::Internal(format!(
            "placed on '{}', which was not offered",
            sb.server
        )));
    };
    svc.crash_point("create.recorded")?;
    if abandoned.is_cancelled() {
        guard.abandon().await;
        return Err(cancelled());
    }
    // A snapshot's image comes from the object store to a host
    // that lacks it.
    if let Err(e) =
        crate::content::snapshots::ensure_image_on(svc, rt.as_ref(), &sb.spec.docker_image).await
    {
        warn!(sandbox.id = %sb.id, error = %e, "snapshot image not loaded; rolling the create back");
        guard.abandon().await;
        return Err(e);
    }
    let spec = container_spec(svc, &sb);
    let created = match archive {
        Some(archive) => rt.create_with_workspace(&spec, archive).await,
        None => rt.create(&spec).await,
    };
    let container_id = match created {
        Ok(cid) => cid,
        Err(e) => {
            svc.metrics.docker_error("create", &e);
            warn!(sandbox.id = %sb.id, error = %e, "runtime create failed; rolling the create back");
            guard.abandon().await;
            return Err(docker_refused(e, "cpuCores"));
        }
    };
    svc.crash_point("create.container_made")?;
    // Until its entry is written the sandbox reaches nothing outside.
    if let Err(e) = svc.apply_egress(&sb).await {
        warn!(sandbox.id = %sb.id, error = %e, "egress policy not written; rolling the create back");
        guard.abandon().await;
        return Err(e);
    }
    if abandoned.is_cancelled() {
        warn!(sandbox.id = %sb.id, "the client went away during create; rolling it back");
        guard.abandon().await;
        return Err(cancelled());
    }
    sb.container_id = Some(container_id);
    sb.mark_running(Utc::now()); // the first session starts
    match guard.try_finish_with_status(sb.clone()).await {
        Ok(saved) => {
            info!(sandbox.id = %saved.id, account.id = %saved.account_id, image = %saved.spec.docker_image, "sandbox created");
            Ok(saved)
        }
        Err((e, guard)) => {
            // Nothing of a create that could not be saved stays.
            tracing::error!(sandbox.id = %sb.id, error = %e, "saving the new sandbox failed; removing its container and volume");
            guard.abandon().await;
            Err(match e {
                e @ (ServiceError::StorageFull(_) | ServiceError::DatabaseUnavailable(_)) => e,
                e => ServiceError::Database(format!(
                    "The sandbox could not be saved, so it was removed again: {e}"
                )),
            })
        }
    }
}

/// Re-reads a sandbox after its operation began (another one may have
/// changed it while this one waited).
async fn reload(svc: &Service, sb: &Sandbox) -> ServiceResult<Sandbox> {
    Ok(svc
        .store
        .get_sandbox(&Scope::account(sb.account_id.clone()), &sb.id)
        .await?)
}

fn terminated(sb: &Sandbox, what: &str) -> ServiceError {
    ServiceError::Terminated(format!("Sandbox {} is terminated; {what}", sb.id))
}

/// Refuses a destroyed sandbox; `what` tells the caller what to do instead.
pub(crate) fn ensure_live(sb: &Sandbox, what: &str) -> ServiceResult<()> {
    if sb.is_terminated() {
        return Err(terminated(sb, what));
    }
    Ok(())
}

/// Begins an operation of `kind` on `sb` and returns the guard with the
/// record as it is now (after any operation ahead of this one).
pub(crate) async fn begin(
    svc: &Service,
    kind: OperationKind,
    sb: &Sandbox,
    params: serde_json::Value,
) -> ServiceResult<(OpGuard, Sandbox)> {
    let op = svc.new_operation(kind, &sb.id, &sb.account_id, params);
    let mut guard = svc.begin_operation(op).await?;
    let fresh = guard.check(reload(svc, sb).await).await?;
    Ok((guard, fresh))
}

/// Starts a sandbox; one that is already running is returned as it is.
pub async fn start(svc: &Service, sb: Sandbox) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("start");
    ensure_live(&sb, "create a new one")?;
    svc.check_policy_enforceable(&sb.spec.network, &sb.server)?;
    let (mut guard, mut sb) = begin(svc, OperationKind::Start, &sb, serde_json::json!({})).await?;
    guard.check(ensure_live(&sb, "create a new one")).await?;
    let rt = guard.check(svc.runtime_for(&sb).await).await?;
    let container = match rt.inspect(&sb.id).await {
        Ok(c) => c,
        Err(e) => {
            svc.metrics.docker_error("inspect", &e);
            guard.release().await;
            return Err(e.into());
        }
    };
    let Some(container) = container else {
        // Its container is gone (an ERROR record): made again from the
        // record, on its volume.
        return recreate(svc, guard, sb, rt.as_ref()).await;
    };
    if container.running && sb.status == SandboxStatus::Running && !container.paused {
        guard.release().await;
        return Ok(sb);
    }
    if container.paused {
        // A start of a paused sandbox resumes it: its processes go on.
        if let Err(e) = rt.unpause(&sb.id).await {
            svc.metrics.docker_error("unpause", &e);
            guard.abandon().await;
            return Err(e.into());
        }
        sb.mark_resumed(Utc::now());
        return record_status(guard, sb).await;
    }
    let mut admitted = None;
    if !container.running {
        // The admission (quota, host room) is held until the RUNNING status
        // is written.
        admitted = Some(
            guard
                .check(crate::fleet::admission::admit_start(svc, &sb).await)
                .await?,
        );
        // The environment as updated since create, for the main process.
        let started = async {
            rt.set_main_process_env(&sb.id, &sb.spec.environment_vars)
                .await?;
            let shared = crate::content::shared_volumes::container_mounts(&sb.spec);
            rt.prepare_shared_volumes(&shared).await?;
            rt.start(&sb.id).await
        }
        .await;
        if let Err(e) = started {
            svc.metrics.docker_error("start", &e);
            guard.abandon().await; // the record converges to Docker's state
            return Err(e.into());
        }
    }
    svc.crash_point("start.started")?;
    // Its egress entry: a new address, maybe; reconciliation retries a
    // failure (the
    // sandbox reaches nothing outside meanwhile).
    if let Err(e) = svc.apply_egress(&sb).await {
        warn!(sandbox.id = %sb.id, error = %e, "egress policy not written at start; reconciliation retries");
    }
    sb.mark_running(Utc::now()); // a new session
    let saved = record_status(guard, sb).await;
    drop(admitted);
    saved
}

/// Makes the container of `sb` (whose container is gone) again from its
/// record, on its `/workspace` volume, and runs it: the same id, image,
/// settings and files. Without the volume there are no files to run on:
/// the record stays ERROR and the caller is told to create a new sandbox.
async fn recreate(
    svc: &Service,
    mut guard: OpGuard,
    mut sb: Sandbox,
    rt: &dyn stockade_runtime::Runtime,
) -> ServiceResult<Sandbox> {
    let volumes = guard.check(rt.list_volumes().await).await?;
    if !volumes.iter().any(|v| v.name == sb.volume_name()) {
        sb.mark_error(format!(
            "container and /workspace volume not found on server '{}'",
            sb.server
        ));
        let saved = guard.finish_with_status(sb).await?;
        return Err(ServiceError::Conflict(format!(
            "The container of sandbox {} and its /workspace volume no longer exist on its Docker \
             host: its files are gone; create a new sandbox",
            saved.id
        )));
    }
    let admitted = guard
        .check(crate::fleet::admission::admit_start(svc, &sb).await)
        .await?;
    guard
        .check(crate::content::snapshots::ensure_image_on(svc, rt, &sb.spec.docker_image).await)
        .await?;
    svc.agents.forget(&sb.id);
    let container_id = match rt.create(&container_spec(svc, &sb)).await {
        Ok(cid) => cid,
        Err(e) => {
            svc.metrics.docker_error("create", &e);
            guard.abandon().await; // the record converges to Docker's state
            return Err(docker_refused(e, "cpuCores"));
        }
    };
    svc.crash_point("start.recreated")?;
    if let Err(e) = svc.apply_egress(&sb).await {
        warn!(sandbox.id = %sb.id, error = %e, "egress policy not written at start; reconciliation retries");
    }
    info!(sandbox.id = %sb.id, "container made again from the record, on its volume");
    sb.container_id = Some(container_id);
    sb.mark_running(Utc::now());
    let saved = record_status(guard, sb).await;
    drop(admitted);
    saved
}

/// Ends a start or stop with its status. Docker did it, so a failed
/// status write is logged and the caller still gets the new status; the
/// operation stays recorded and recovery writes the status once the
/// database takes writes again.
pub(crate) async fn record_status(guard: OpGuard, sb: Sandbox) -> ServiceResult<Sandbox> {
    match guard.try_finish_with_status(sb.clone()).await {
        Ok(saved) => Ok(saved),
        Err((e @ ServiceError::Conflict(_), _guard)) => Err(e),
        Err((e, _guard)) => {
            tracing::error!(sandbox.id = %sb.id, status = %sb.status, error = %e, "the status write failed; recovery writes it later");
            Ok(sb)
        }
    }
}

/// Stops a sandbox: SIGTERM, up to `grace`, then SIGKILL. A stopped
/// one is returned as it is.
pub async fn stop(svc: &Service, sb: Sandbox, grace: Duration) -> ServiceResult<Sandbox> {
    stop_because(svc, sb, grace, None).await
}

/// [`stop`], recording `reason` as the status reason (e.g. a session that
/// timed out).
pub async fn stop_because(
    svc: &Service,
    sb: Sandbox,
    grace: Duration,
    reason: Option<String>,
) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("stop");
    ensure_live(&sb, "create a new one")?;
    let (mut guard, mut sb) = begin(svc, OperationKind::Stop, &sb, serde_json::json!({})).await?;
    guard.check(ensure_live(&sb, "create a new one")).await?;
    let mut reason = reason;
    let rt = guard.check(svc.runtime_for(&sb).await).await?;
    if sb.status == SandboxStatus::Paused {
        // Thawed first, so that its processes get their SIGTERM and grace.
        if let Err(e) = rt.unpause(&sb.id).await {
            debug!(sandbox.id = %sb.id, error = %e, "stop: could not thaw the paused container first");
        }
    }
    match rt.stop(&sb.id, grace).await {
        Ok(()) => {}
        Err(RuntimeError::NotFound(_)) => {
            reason = Some(format!("container not found on server '{}'", sb.server));
        }
        Err(e) => {
            svc.metrics.docker_error("stop", &e);
            guard.abandon().await; // the record converges to Docker's state
            return Err(e.into());
        }
    }
    svc.crash_point("stop.stopped")?;
    svc.remove_egress(&sb).await;
    if sb.status == SandboxStatus::Stopped && sb.status_reason == reason {
        guard.release().await;
        return Ok(sb);
    }
    sb.mark_stopped(Utc::now(), reason);
    record_status(guard, sb).await
}

/// Destroys a sandbox: optional workspace sync →
/// runtime terminate → TERMINATED and soft-deleted. If the sync or the
/// runtime fails, the record stays as it was. Destroying a destroyed
/// sandbox returns it as it is.
pub async fn destroy(svc: &Service, sb: Sandbox, preserve_volume: bool) -> ServiceResult<Sandbox> {
    destroy_with(svc, sb, preserve_volume, false).await
}

/// [`destroy`], first uploading `/workspace` to the object store when `sync`.
pub async fn destroy_with(
    svc: &Service,
    sb: Sandbox,
    preserve_volume: bool,
    sync: bool,
) -> ServiceResult<Sandbox> {
    let _timer = svc.metrics.time_operation("destroy");
    if sb.deleted_at.is_some() {
        if sync {
            return Err(terminated(&sb, "there is no /workspace left to sync"));
        }
        return Ok(sb);
    }
    let params = serde_json::json!({ "preserve_volume": preserve_volume, "sync": sync });
    let (mut guard, mut sb) = begin(svc, OperationKind::Delete, &sb, params).await?;
    if sb.deleted_at.is_some() {
        guard.release().await;
        return Ok(sb);
    }
    if sync {
        // Nothing is deleted without its sync.
        sb = guard
            .check(crate::content::workspace_sync::sync(svc, sb).await)
            .await?;
        svc.crash_point("delete.synced")?;
    }
    let rt = guard.check(svc.runtime_for(&sb).await).await?;
    if let Err(e) = rt.remove(&sb.id, preserve_volume).await {
        svc.metrics.docker_error("remove", &e);
        guard.release().await; // the record stays as it was
        return Err(e.into());
    }
    svc.crash_point("delete.removed")?;
    svc.remove_egress(&sb).await;
    let now = Utc::now();
    guard
        .finish(SandboxWrite::SoftDelete { id: &sb.id, at: now })
        .await
        .map_err(|e| {
            ServiceError::Database(format!(
                "The container was removed but the record could not be marked TERMINATED yet (it will be): {e}"
            ))
        })?;
    sb.mark_terminated(now);
    info!(sandbox.id = %sb.id, preserve_volume, "sandbox destroyed");
    // Images of deleted snapshots this sandbox was made from may go now.
    let gc = svc.clone();
    tokio::spawn(async move { crate::content::snapshots::collect_garbage(&gc).await });
    Ok(sb)
}

/// One sandbox's outcome in a bulk operation.
#[derive(Debug)]
pub struct BulkOutcome {
    pub id: String,
    pub result: ServiceResult<Sandbox>,
}

/// Destroys several sandboxes, a bounded number at once
/// (`config.bulk_concurrency`). The work runs in its own task: it finishes
/// even if the caller goes away. Results come in the order of `targets`.
pub async fn destroy_many(
    svc: &Service,
    targets: Vec<Result<Sandbox, (String, ServiceError)>>,
    preserve_volume: bool,
) -> Vec<BulkOutcome> {
    let svc = svc.clone();
    let task = tokio::spawn(async move {
        let limit = svc.config.bulk_concurrency.max(1);
        futures_util::stream::iter(targets.into_iter().map(|t| {
            let svc = svc.clone();
            async move {
                match t {
                    Err((id, e)) => BulkOutcome { id, result: Err(e) },
                    Ok(sb) => BulkOutcome {
                        id: sb.id.to_string(),
                        result: destroy(&svc, sb, preserve_volume).await,
                    },
                }
            }
        }))
        .buffered(limit)
        .collect::<Vec<_>>()
        .await
    });
    task.await.unwrap_or_else(|e| {
        vec![BulkOutcome {
            id: String::new(),
            result: Err(ServiceError::Internal(format!("bulk task failed: {e}"))),
        }]
    })
}
