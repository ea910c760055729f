//! Admission control per Docker host and account quotas
//! in the service, on the fake runtime and SQLite: refusals at create,
//! start and resize, stopped sandboxes freeing room, warm-pool members
//! holding room, and concurrent creates that never both pass the last room
//! or the last sandbox of a quota. Runs in seconds, without Docker.

use std::sync::Arc;
use std::time::Duration;

use stockade_api::CreateSandboxRequest;
use stockade_core::quota::BYTES_PER_GB;
use stockade_core::update::SpecPatch;
use stockade_core::{Account, Quota, Sandbox, SandboxStatus, Scope};
use stockade_runtime::FakeRuntime;
use stockade_service::admission::AdmissionConfig;
use stockade_service::pool::{PoolClassConfig, PoolConfig};
use stockade_service::{lifecycle, update, Service, ServiceConfig, ServiceError};
use stockade_store::Store;
use tokio_util::sync::CancellationToken;

mod support;

const GB: u64 = BYTES_PER_GB;

struct World {
    dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    rt: FakeRuntime,
    account: Account,
}

impl World {
    /// A host of `cpus` CPUs and `memory_gb` GB, no overcommit.
    async fn new(cpus: u32, memory_gb: u64) -> Self {
        let support::Base {
            dir,
            store,
            account,
        } = support::base().await;
        let rt = FakeRuntime::new();
        rt.set_host_size(cpus, memory_gb * GB);
        Self {
            dir,
            store,
            rt,
            account,
        }
    }

    async fn service_with(&self, change: impl FnOnce(&mut ServiceConfig)) -> Service {
        let mut config = ServiceConfig {
            admission: AdmissionConfig {
                cpu_overcommit: Some(1.0),
                memory_overcommit: Some(1.0),
                ..AdmissionConfig::default()
            },
            ..support::config(self.dir.path(), Duration::from_secs(10))
        };
        change(&mut config);
        support::start(&self.store, Arc::new(self.rt.clone()), config).await
    }

    /// A service keeping `members` warm-pool members of the default class,
    /// checked every `check_ms` ms and filled `fills` at a time, with the
    /// pool running.
    async fn pooled(&self, members: usize, check_ms: u64, fills: usize) -> (Service, Pool) {
        let svc = self
            .service_with(|c| {
                c.pool = PoolConfig {
                    classes: vec![PoolClassConfig::default_class(members)],
                    check_interval: Duration::from_millis(check_ms),
                    max_concurrent_fills: fills,
                    ..PoolConfig::default()
                };
            })
            .await;
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(stockade_service::pool::run(svc.clone(), shutdown.clone()));
        (svc, Pool { shutdown, task })
    }

    async fn service(&self) -> Service {
        self.service_with(|_| {}).await
    }

    fn scope(&self) -> Scope {
        Scope::account(self.account.id.clone())
    }

    async fn create(
        &self,
        svc: &Service,
        name: &str,
        cpu: f64,
        memory: f64,
    ) -> Result<Sandbox, ServiceError> {
        let req = CreateSandboxRequest {
            name: Some(name.into()),
            cpu_cores: Some(cpu),
            memory_gb: Some(memory),
            ..Default::default()
        };
        svc.create_sandbox(&self.scope(), (&req).into(), None)
            .await
            .map(|c| c.sandbox)
    }

    /// `sb` resized to `cpu` cores.
    async fn resize(
        &self,
        svc: &Service,
        sb: &Sandbox,
        cpu: f64,
    ) -> Result<update::Updated, ServiceError> {
        let patch = SpecPatch {
            cpu_cores: Some(cpu),
            ..Default::default()
        };
        update::update(svc, &self.scope(), sb.id.as_str(), &patch).await
    }

    /// `count` creates named `prefix0`, `prefix1`, … all at once.
    async fn race(
        &self,
        svc: &Service,
        prefix: &str,
        count: usize,
        cpu: f64,
        memory: f64,
    ) -> Vec<Result<Sandbox, ServiceError>> {
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
        futures_util::future::join_all(names.iter().map(|n| self.create(svc, n, cpu, memory))).await
    }

    async fn quota(&self, quota: Quota) {
        self.store
            .set_quota(&self.account.id, &quota)
            .await
            .unwrap();
    }

    async fn fresh(&self, sb: &Sandbox) -> Sandbox {
        self.store.get_sandbox(&self.scope(), &sb.id).await.unwrap()
    }
}

/// A running warm pool.
struct Pool {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Pool {
    /// Stops the pool; no grant outlives it.
    async fn stop(self, svc: &Service) {
        self.shutdown.cancel();
        self.task.await.unwrap();
        // Ready members count through the pool, no longer through grants.
        assert_eq!(svc.admission().in_flight(), 0);
    }
}

fn capacity(e: ServiceError) -> String {
    match e {
        ServiceError::InsufficientCapacity(m) => m,
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
}

fn quota_exceeded(e: ServiceError) -> String {
    match e {
        ServiceError::QuotaExceeded(m) => m,
        other => panic!("expected quota exceeded, got {other:?}"),
    }
}

#[tokio::test]
async fn a_full_host_refuses_and_stopped_sandboxes_free_room() {
    let w = World::new(2, 8).await;
    let svc = w.service().await;
    let a = w.create(&svc, "a", 1.0, 2.0).await.unwrap();
    w.create(&svc, "b", 0.5, 2.0).await.unwrap();
    let err = capacity(w.create(&svc, "c", 1.0, 1.0).await.unwrap_err());
    assert!(
        err.starts_with(
            "insufficient capacity on server local: 1.5 of 2 CPUs reserved, 1 requested"
        ),
        "{err}"
    );
    let err = capacity(w.create(&svc, "d", 0.25, 5.0).await.unwrap_err());
    assert!(
        err.starts_with(
            "insufficient capacity on server local: 4 of 8 GB memory reserved, 5 GB requested"
        ),
        "{err}"
    );
    // Nothing of a refused create exists.
    assert_eq!(w.rt.containers().len(), 2);
    assert_eq!(w.store.list_active_sandboxes().await.unwrap().len(), 2);

    // A stopped sandbox holds no room: another fits, and the stopped one
    // cannot start again until room is freed.
    lifecycle::stop(&svc, a.clone(), Duration::ZERO)
        .await
        .unwrap();
    let c = w.create(&svc, "c", 1.0, 1.0).await.unwrap();
    let err = capacity(lifecycle::start(&svc, w.fresh(&a).await).await.unwrap_err());
    assert!(err.contains("1.5 of 2 CPUs reserved, 1 requested"), "{err}");
    assert!(
        !w.rt.container(&a.id).unwrap().running,
        "a refused start started it"
    );
    assert_eq!(w.fresh(&a).await.status, SandboxStatus::Stopped);
    lifecycle::destroy(&svc, c, false).await.unwrap();
    let started = lifecycle::start(&svc, w.fresh(&a).await).await.unwrap();
    assert_eq!(started.status, SandboxStatus::Running);
    assert_eq!(
        svc.admission().in_flight(),
        0,
        "a grant outlived its operation"
    );
}

#[tokio::test]
async fn resizes_of_running_sandboxes_are_checked() {
    let w = World::new(4, 16).await;
    let svc = w.service().await;
    let a = w.create(&svc, "a", 1.0, 2.0).await.unwrap();
    let b = w.create(&svc, "b", 2.0, 2.0).await.unwrap();
    // 2 + 1 reserved: a may grow to 2 but not to 2.5.
    w.resize(&svc, &a, 2.0).await.unwrap();
    let err = capacity(w.resize(&svc, &a, 2.5).await.unwrap_err());
    assert!(err.contains("4 of 4 CPUs reserved, 0.5 requested"), "{err}");
    assert_eq!(w.fresh(&a).await.spec.cpu_cores, 2.0);
    assert_eq!(w.rt.container(&a.id).unwrap().spec.cpu_cores, 2.0);
    // Shrinking always passes; a stopped sandbox is checked when it starts.
    w.resize(&svc, &a, 0.5).await.unwrap();
    lifecycle::stop(&svc, w.fresh(&b).await, Duration::ZERO)
        .await
        .unwrap();
    w.resize(&svc, &b, 4.0).await.unwrap();
    let err = capacity(lifecycle::start(&svc, w.fresh(&b).await).await.unwrap_err());
    assert!(err.contains("0.5 of 4 CPUs reserved, 4 requested"), "{err}");
    w.resize(&svc, &b, 3.5).await.unwrap();
    lifecycle::start(&svc, w.fresh(&b).await).await.unwrap();
    assert_eq!(svc.admission().in_flight(), 0);
}

#[tokio::test]
async fn quotas_refuse_creates_starts_and_resizes() {
    let w = World::new(64, 256).await;
    let svc = w.service().await;
    w.quota(Quota {
        sandboxes: Some(2),
        cpu_millis: Some(2000),
        memory_bytes: Some(6 * GB),
        disk_gb: Some(25),
        ..Quota::default()
    })
    .await;
    let a = w.create(&svc, "a", 1.0, 2.0).await.unwrap();
    let b = w.create(&svc, "b", 1.0, 2.0).await.unwrap();
    let err = quota_exceeded(w.create(&svc, "c", 0.1, 0.5).await.unwrap_err());
    assert_eq!(err, "account quota exceeded: 2 of 2 sandboxes");
    assert_eq!(w.rt.containers().len(), 2);

    // A stopped sandbox still counts as a sandbox, but not for CPU.
    lifecycle::stop(&svc, b.clone(), Duration::ZERO)
        .await
        .unwrap();
    assert!(w.create(&svc, "c", 0.1, 0.5).await.is_err());
    w.resize(&svc, &a, 2.0).await.unwrap();
    let err = quota_exceeded(lifecycle::start(&svc, w.fresh(&b).await).await.unwrap_err());
    assert_eq!(
        err,
        "account quota exceeded: 2 of 2 CPUs in use by running sandboxes, 1 more requested"
    );
    let err = quota_exceeded(w.resize(&svc, &a, 2.5).await.unwrap_err());
    assert!(err.contains("2 of 2 CPUs"), "{err}");
    assert_eq!(w.rt.container(&a.id).unwrap().spec.cpu_cores, 2.0);
    let mem = SpecPatch {
        memory_gb: Some(7.0),
        ..Default::default()
    };
    let err = quota_exceeded(
        update::update(&svc, &w.scope(), a.id.as_str(), &mem)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err,
        "account quota exceeded: 2 of 6 GB memory in use by running sandboxes, 5 GB more requested"
    );
    w.resize(&svc, &a, 1.0).await.unwrap();
    lifecycle::start(&svc, w.fresh(&b).await).await.unwrap();

    // Disk counts every sandbox not terminated (10 GB each by default).
    w.quota(Quota {
        disk_gb: Some(25),
        ..Quota::unlimited()
    })
    .await;
    let err = quota_exceeded(w.create(&svc, "c", 0.1, 0.5).await.unwrap_err());
    assert_eq!(
        err,
        "account quota exceeded: 20 of 25 GB disk in use, 10 GB more requested"
    );
    // Deleting frees the quota; lifting it allows anything.
    lifecycle::destroy(&svc, w.fresh(&b).await, false)
        .await
        .unwrap();
    w.create(&svc, "c", 0.1, 0.5).await.unwrap();
    w.quota(Quota::unlimited()).await;
    w.create(&svc, "d", 0.1, 0.5).await.unwrap();
    // A quota lowered below the use stops nothing and blocks no shrink.
    w.quota(Quota {
        sandboxes: Some(1),
        cpu_millis: Some(100),
        ..Quota::unlimited()
    })
    .await;
    w.resize(&svc, &a, 0.5).await.unwrap();
    lifecycle::stop(&svc, w.fresh(&a).await, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(svc.admission().in_flight(), 0);
}

#[tokio::test]
async fn concurrent_creates_never_both_take_the_last_place() {
    let w = World::new(2, 64).await;
    let svc = w.service().await;
    // The runtime is slow, so every create is in flight at once.
    w.rt.set_create_delay(Duration::from_millis(200));
    w.quota(Quota {
        sandboxes: Some(1),
        ..Quota::unlimited()
    })
    .await;
    let results = w.race(&svc, "q", 8, 0.1, 0.5).await;
    let made = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(made, 1, "{results:?}");
    for r in results.into_iter().filter_map(Result::err) {
        assert_eq!(
            quota_exceeded(r),
            "account quota exceeded: 1 of 1 sandboxes"
        );
    }

    // The same for the host's room: 2 CPUs fit two 1-CPU sandboxes.
    w.quota(Quota::unlimited()).await;
    let results = w.race(&svc, "h", 6, 0.9, 1.0).await;
    let made = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(made, 2, "{results:?}");
    for r in results.into_iter().filter_map(Result::err) {
        capacity(r);
    }
    assert_eq!(w.rt.containers().len(), 3);
    assert_eq!(svc.admission().in_flight(), 0);
}

#[tokio::test]
async fn warm_pool_members_hold_room_and_claims_need_none() {
    let w = World::new(4, 64).await;
    let fills = PoolConfig::default().max_concurrent_fills;
    let (svc, pool) = w.pooled(2, 100, fills).await;
    let ready = |n: usize| {
        let svc = svc.clone();
        async move {
            for _ in 0..100 {
                if svc.pool().ready_total() == n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!(
                "the pool never had {n} ready (has {})",
                svc.pool().ready_total()
            );
        }
    };
    ready(2).await;
    // Two members of 1 CPU hold 2 of the 4 CPUs.
    w.create(&svc, "cold", 1.5, 1.0).await.unwrap();
    let err = capacity(w.create(&svc, "big", 1.0, 1.0).await.unwrap_err());
    assert!(err.contains("3.5 of 4 CPUs reserved, 1 requested"), "{err}");
    // A create that fits the class takes a member: it needs no more room.
    let req = CreateSandboxRequest {
        name: Some("warm".into()),
        ..Default::default()
    };
    let warm = svc
        .create_sandbox(&w.scope(), (&req).into(), None)
        .await
        .unwrap()
        .sandbox;
    assert!(w.rt.container(&warm.id).unwrap().pool_class.is_some());
    // The refill would pass the host's size: the pool stays short.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(svc.pool().ready_total(), 1);
    assert_eq!(svc.pool().filling(), 0);
    assert_eq!(
        w.rt.containers().len(),
        3,
        "a member was made on a full host"
    );
    // Room again: the pool refills (after its backoff).
    lifecycle::destroy(&svc, w.fresh(&warm).await, false)
        .await
        .unwrap();
    support::wait_for("the pool did not refill once room was freed", || {
        svc.pool().ready_total() >= 2
    })
    .await;
    pool.stop(&svc).await;
}

#[tokio::test]
async fn a_pool_never_fills_a_host_past_its_size() {
    let w = World::new(2, 64).await;
    let (svc, pool) = w.pooled(5, 50, 5).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(svc.pool().ready_total(), 2, "5 one-CPU members on 2 CPUs");
    assert_eq!(w.rt.containers().len(), 2);
    pool.stop(&svc).await;
}
