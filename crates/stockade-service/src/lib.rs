//! Stockade's sandbox service: everything the platform does with sandboxes,
//! over a [`Store`] and a [`Runtime`], without any knowledge of HTTP.
//!
//! Front-ends (the HTTP API, a compatibility API) are thin adapters: they
//! authenticate a caller into a [`Scope`](stockade_core::Scope), turn their
//! input into the service's types, call it, and map [`ServiceError`] to their
//! own error shape.
#![forbid(unsafe_code)]

use std::sync::Arc;

use stockade_blob::{BlobStore, ObjectBlobStore};
use stockade_core::InstanceId;
use stockade_runtime::Runtime;
use stockade_store::{Store, StoreError};
use tokio_util::sync::CancellationToken;

pub mod access;
pub mod accounts;
pub mod config;
pub mod content;
pub mod credentials;
pub mod error;
pub mod events;
mod every;
pub mod fleet;
pub mod interact;
pub mod net;
pub mod observe;
pub mod ops;
pub mod sandbox;
pub mod tasks;
pub mod templates;
#[cfg(test)]
mod test_support;

pub use config::ServiceConfig;
pub use content::{files, images, snapshots, sources, workspace_sync};
pub use error::{ServiceError, ServiceResult};
pub use fleet::{admission, host_admin, hosts, placement};
pub use interact::{agent, code, exec, log_cursor, output, processes, terminal};
pub use net::{egress, outbound};
pub use observe::{metrics, usage};
pub use ops::operations;
pub use sandbox::{
    compat, create, drain, idempotency, lifecycle, pause, pool, recovery, sessions, update,
};
pub use sources::SourceLimits;
pub use tasks::{disk_watch, leader, reconcile};

/// The service: the store, the runtime, the object store and what this
/// process keeps of its own (metrics, the warm pool, live usage, background
/// processes). Cheap to clone.
#[derive(Clone)]
pub struct Service {
    store: Arc<dyn Store>,
    runtime: Arc<dyn Runtime>,
    config: Arc<ServiceConfig>,
    /// This installation's id (kept in the database): the label on every
    /// container and volume it makes.
    instance_id: InstanceId,
    /// Background processes started by exec.
    processes: Arc<processes::ProcessRegistry>,
    /// Prometheus metrics of this process.
    metrics: Arc<metrics::Metrics>,
    /// Live usage and volume sizes for sandbox details.
    usage: Arc<usage::Usage>,
    /// Object store of snapshots, syncs and uploads.
    blobs: Arc<dyn BlobStore>,
    /// The warm pool of pre-created sandboxes.
    pool: Arc<pool::Pool>,
    /// This process as the holder of durable operations.
    ops: Arc<operations::Operations>,
    /// Cancelled when the service shuts down: no new operation begins.
    shutdown: CancellationToken,
    /// Containers without a record, and since when (reconciliation).
    strays: Arc<reconcile::Strays>,
    /// The sandboxes' agents: their tokens and clients.
    agents: Arc<agent::Agents>,
    /// The shared volumes' files helpers this process uses.
    volume_helpers: Arc<content::shared_volumes::Helpers>,
    /// The last check of the sandboxes' network isolation.
    isolation: Arc<std::sync::Mutex<Option<stockade_runtime::IsolationReport>>>,
    /// The egress filter and the sandboxes' policies.
    egress: Arc<egress::Egress>,
    /// Admissions in flight.
    admission: Arc<admission::Admission>,
    /// The leader lease of the deployment-wide background work.
    leader: Arc<leader::Leader>,
    /// The Docker hosts' runtimes: `runtime` is the server's own.
    hosts: Arc<hosts::Hosts>,
    /// The audit log's queue.
    audit: events::audit::AuditLog,
    /// Where this server listens: never a webhook's target.
    own_addresses: Arc<std::sync::RwLock<Vec<std::net::SocketAddr>>>,
}

impl Service {
    // Read access for front-ends and tests: the parts of the service they
    // hand to other components or inspect; every change goes through a
    // method of the service.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    pub fn config(&self) -> &Arc<ServiceConfig> {
        &self.config
    }

    pub fn instance_id(&self) -> &InstanceId {
        &self.instance_id
    }

    pub fn processes(&self) -> &Arc<processes::ProcessRegistry> {
        &self.processes
    }

    pub fn metrics(&self) -> &Arc<metrics::Metrics> {
        &self.metrics
    }

    pub fn usage(&self) -> &Arc<usage::Usage> {
        &self.usage
    }

    pub fn blobs(&self) -> &Arc<dyn BlobStore> {
        &self.blobs
    }

    pub fn pool(&self) -> &Arc<pool::Pool> {
        &self.pool
    }

    pub fn ops(&self) -> &Arc<operations::Operations> {
        &self.ops
    }

    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub fn agents(&self) -> &Arc<agent::Agents> {
        &self.agents
    }

    pub fn egress(&self) -> &Arc<egress::Egress> {
        &self.egress
    }

    pub fn admission(&self) -> &Arc<admission::Admission> {
        &self.admission
    }

    pub fn leader(&self) -> &Arc<leader::Leader> {
        &self.leader
    }

    pub fn hosts(&self) -> &Arc<hosts::Hosts> {
        &self.hosts
    }

    pub fn audit_log(&self) -> &events::audit::AuditLog {
        &self.audit
    }

    pub async fn new(
        store: Arc<dyn Store>,
        runtime: Arc<dyn Runtime>,
        config: ServiceConfig,
    ) -> Result<Self, StoreError> {
        let instance_id = store.instance_id().await?;
        let config_lease = config.operation_lease;
        let agents = agent::Agents::load(store.as_ref()).await?;
        let metrics = Arc::new(metrics::Metrics::new());
        let usage = Arc::new(usage::Usage::new(
            runtime.clone(),
            metrics.clone(),
            config.usage.clone(),
        ));
        let blobs = ObjectBlobStore::open(&config.blob_store)
            .map_err(|e| StoreError::Other(e.to_string()))?
            .keep_free(config.blob_keep_free_bytes);
        let pool =
            pool::Pool::new(&config.pool, &config.defaults).map_err(|e| StoreError::Other(e.0))?;
        let ops = operations::Operations::new(
            config_lease,
            operations::Recovery {
                claim_and_recover: |svc, op| Box::pin(recovery::claim_and_recover(svc, op)),
                recover_held: |svc, op| Box::pin(recovery::recover_held(svc, op)),
            },
        );
        let leader = leader::Leader::new(ops.holder());
        let hosts = Arc::new(hosts::Hosts::new(runtime.clone(), config.hosts.clone()));
        let audit = events::audit::AuditLog::start(store.clone());
        Ok(Self {
            store,
            runtime,
            processes: Arc::new(processes::ProcessRegistry::new(
                config.max_processes_per_sandbox,
            )),
            config: Arc::new(config),
            instance_id,
            metrics,
            usage,
            blobs: Arc::new(blobs),
            pool: Arc::new(pool),
            ops: Arc::new(ops),
            leader: Arc::new(leader),
            shutdown: CancellationToken::new(),
            strays: Arc::default(),
            isolation: Arc::default(),
            egress: Arc::default(),
            admission: Arc::default(),
            agents: Arc::new(agents),
            volume_helpers: Arc::default(),
            hosts,
            audit,
            own_addresses: Arc::default(),
        })
    }

    /// Recovers what earlier runs left half-done, then starts the
    /// background tasks until `shutdown`, which also stops new operations
    /// from beginning. Every instance runs its own part (the heartbeat of
    /// its operations, the isolation check, its egress filter, its warm
    /// pool); the deployment-wide part (recovery of dead operations,
    /// reconciliation, session timeouts, snapshot collection) runs only
    /// while this instance holds the leader lease (`leader.rs`),
    /// and the leader reconciles once before this returns. The returned
    /// handle ends when the tasks that must finish their work (the warm
    /// pool's fills and drain, handing the lease on) have.
    pub async fn start_background(&self, shutdown: CancellationToken) -> Background {
        {
            let stop = self.shutdown.clone();
            let outer = shutdown.clone();
            tokio::spawn(async move {
                outer.cancelled().await;
                stop.cancel();
            });
        }
        tokio::spawn(self.clone().renew_leases(shutdown.clone()));
        // The server's own Docker host is a registered host too.
        let own_docker_host = self.hosts.config().own_docker_host.clone();
        match host_admin::ensure_own(self, &own_docker_host).await {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not register this server's own Docker host")
            }
        }
        if let Ok(hosts) = placement::all_hosts(self).await {
            self.hosts.observe(&hosts);
        }
        tokio::spawn(tasks::hosts::observe_periodically(
            self.clone(),
            shutdown.clone(),
        ));
        // Sandboxes are isolated before the first one is created.
        self.check_isolation().await;
        // The egress filter, and the entries of running sandboxes.
        self.start_egress().await;
        // On SQLite (one instance) every recorded operation was left by
        // this installation's previous process: recover them all now.
        let sqlite = self.store.backend() == "sqlite";
        let first = recovery::recover_expired(self, sqlite).await;
        if let Err(e) = self.recover_shared_volumes(sqlite).await {
            tracing::warn!(error = %e, "recovery of volumes failed; retried later");
        }
        if first.recovered + first.failed > 0 {
            tracing::info!(
                ?first,
                "recovered operations a previous run left unfinished"
            );
        }
        let held = leader::take_at_start(self).await;
        if held.is_some() {
            match reconcile::reconcile_once(self).await {
                Ok(r) => tracing::info!(?r, "startup reconciliation done"),
                Err(e) => {
                    tracing::warn!(error = %e, "startup reconciliation skipped: Docker unavailable")
                }
            }
        } else {
            tracing::info!(
                leader = ?self.leader.status().holder,
                "another instance leads the background work; this one serves requests"
            );
        }
        let leader = tokio::spawn(leader::run(self.clone(), held, shutdown.clone()));
        tokio::spawn(leader::run_local(self.clone(), shutdown.clone()));
        // Every instance delivers webhooks, each delivery claimed by one.
        tokio::spawn(tasks::webhooks::run(self.clone(), shutdown.clone()));
        tokio::spawn(tasks::recovery::stop_idle_helpers(
            self.clone(),
            shutdown.clone(),
        ));
        let pool = tokio::spawn(pool::run(self.clone(), shutdown));
        Background { pool, leader }
    }
}

impl Service {
    /// Makes sure sandboxes are isolated (networks, packet filter),
    /// repairing what changed, and keeps the report for `/health`.
    pub async fn check_isolation(&self) -> stockade_runtime::IsolationReport {
        let report = self.runtime.ensure_isolation().await;
        match report.status() {
            stockade_runtime::IsolationStatus::Ok => {}
            stockade_runtime::IsolationStatus::Repaired => {
                tracing::warn!(report = %report.summary(), "sandbox isolation was repaired")
            }
            stockade_runtime::IsolationStatus::Degraded => {
                tracing::error!(report = %report.summary(), "sandboxes are not fully isolated")
            }
        }
        *self.isolation.lock().unwrap_or_else(|p| p.into_inner()) = Some(report.clone());
        report
    }

    /// The last isolation report, if a check ran.
    pub fn isolation_report(&self) -> Option<stockade_runtime::IsolationReport> {
        self.isolation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The background tasks of a running service.
pub struct Background {
    pool: tokio::task::JoinHandle<()>,
    leader: tokio::task::JoinHandle<()>,
}

impl Background {
    /// Waits for the tasks that finish work after shutdown (warm-pool fills
    /// and, if configured, its drain; giving the leader lease up).
    pub async fn finished(self) {
        let _ = tokio::join!(self.pool, self.leader);
    }
}
