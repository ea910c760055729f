//! Several Docker hosts in the service, on fake runtimes
//! and SQLite, in seconds: placement on the freest host that fits and
//! matches, refusals naming what is full, every operation on the sandbox's
//! own host, a failing host cordoned and recovered, a drain moving a
//! stopped sandbox and its workspace, a snapshot taken on one host started
//! on another. The three-engine test with real Docker is
//! `crates/stockade/tests/instances.rs`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use stockade_api::CreateSandboxRequest;
use stockade_core::quota::BYTES_PER_GB;
use stockade_core::{Account, Host, HostState, Sandbox, SandboxStatus, Scope};
use stockade_runtime::{FakeRuntime, Runtime};
use stockade_service::admission::AdmissionConfig;
use stockade_service::hosts::{HostsConfig, RuntimeFactory};
use stockade_service::tasks::hosts::check_hosts_once;
use stockade_service::{lifecycle, Service, ServiceConfig, ServiceError};
use stockade_store::Store;

mod support;

/// Connects registered hosts to fake runtimes by name.
struct Fakes(BTreeMap<String, FakeRuntime>);

impl RuntimeFactory for Fakes {
    fn connect(&self, host: &Host) -> Result<Arc<dyn Runtime>, String> {
        self.0
            .get(&host.name)
            .map(|rt| Arc::new(rt.clone()) as Arc<dyn Runtime>)
            .ok_or_else(|| format!("no engine {}", host.name))
    }
}

struct World {
    dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    hosts: BTreeMap<String, FakeRuntime>,
    account: Account,
    svc: Service,
    config: ServiceConfig,
}

fn host(name: &str, labels: &[(&str, &str)]) -> Host {
    Host {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Host::new(name, format!("unix:///run/{name}.sock"), Utc::now())
    }
}

impl World {
    /// The own host `local` and `a`, `b` (zone b), each of 2 CPUs / 4 GB.
    async fn new() -> Self {
        Self::with(|_| {}).await
    }

    /// [`World::new`] with more settings.
    async fn with(change: impl FnOnce(&mut ServiceConfig)) -> Self {
        let base = support::base().await;
        let mut hosts = BTreeMap::new();
        for name in ["local", "a", "b"] {
            let rt = FakeRuntime::with_server_name(name);
            rt.set_host_size(2, 4 * BYTES_PER_GB);
            hosts.insert(name.to_owned(), rt);
        }
        let mut config = ServiceConfig {
            admission: AdmissionConfig {
                cpu_overcommit: Some(1.0),
                memory_overcommit: Some(1.0),
                ..AdmissionConfig::default()
            },
            hosts: HostsConfig {
                factory: Some(Arc::new(Fakes(hosts.clone()))),
                ..HostsConfig::default()
            },
            ..support::config(base.dir.path(), Duration::from_secs(10))
        };
        change(&mut config);
        let support::Base {
            dir,
            store,
            account,
        } = base;
        let svc = support::start(&store, Arc::new(hosts["local"].clone()), config.clone()).await;
        store
            .insert_host(&host("a", &[("zone", "a")]))
            .await
            .unwrap();
        store
            .insert_host(&host("b", &[("zone", "b")]))
            .await
            .unwrap();
        Self {
            dir,
            store,
            hosts,
            account,
            svc,
            config,
        }
    }

    /// Another server instance over the same database and engines.
    async fn instance(&self) -> Service {
        let local = Arc::new(self.hosts["local"].clone());
        support::start(&self.store, local, self.config.clone()).await
    }

    fn scope(&self) -> Scope {
        Scope::account(self.account.id.clone())
    }

    async fn create(&self, req: CreateSandboxRequest) -> Result<Sandbox, ServiceError> {
        self.svc
            .create_sandbox(&self.scope(), (&req).into(), None)
            .await
            .map(|c| c.sandbox)
    }

    /// A sandbox of the default size on host `server`.
    async fn on(&self, server: &str) -> Result<Sandbox, ServiceError> {
        self.create(CreateSandboxRequest {
            server: Some(server.into()),
            ..Default::default()
        })
        .await
    }

    async fn one_cpu(&self) -> Result<Sandbox, ServiceError> {
        self.create(CreateSandboxRequest {
            cpu_cores: Some(1.0),
            memory_gb: Some(1.0),
            ..Default::default()
        })
        .await
    }

    async fn fresh(&self, sb: &Sandbox) -> Sandbox {
        self.store.get_sandbox(&self.scope(), &sb.id).await.unwrap()
    }

    async fn check(&self) -> Vec<Host> {
        check_hosts_once(&self.svc, &mut HashSet::new()).await
    }

    /// Puts host `name` in `state` as an administrator would; the host as
    /// stored.
    async fn set_state(&self, name: &str, state: HostState, reason: Option<&str>) -> Host {
        let mut host = self.store.get_host(name).await.unwrap();
        host.state = state;
        if let Some(reason) = reason {
            host.state_reason = Some(reason.into());
        }
        self.store.update_host(&host).await.unwrap();
        host
    }
}

#[tokio::test]
async fn creates_go_to_the_freest_host_and_a_full_deployment_says_so() {
    let w = World::new().await;
    let mut placed = BTreeMap::<String, usize>::new();
    for _ in 0..6 {
        let sb = w.one_cpu().await.unwrap();
        // The container is on the host the record names, and only there.
        for (name, rt) in &w.hosts {
            assert_eq!(rt.container(&sb.id).is_some(), *name == sb.server, "{name}");
        }
        *placed.entry(sb.server).or_default() += 1;
    }
    assert_eq!(
        placed,
        BTreeMap::from([("a".into(), 2), ("b".into(), 2), ("local".into(), 2)])
    );
    let full = w.one_cpu().await.unwrap_err();
    let ServiceError::InsufficientCapacity(message) = full else {
        panic!("{full:?}");
    };
    for part in [
        "server a: 2 of 2 CPUs reserved",
        "server b: 2 of 2 CPUs reserved",
        "server local: 2 of 2 CPUs reserved",
    ] {
        assert!(message.contains(part), "{message}");
    }
}

#[tokio::test]
async fn server_and_labels_choose_the_host_and_bad_choices_are_refused() {
    let w = World::new().await;
    let on_b = w.on("b").await.unwrap();
    assert_eq!(on_b.server, "b");
    let zone_a = w
        .create(CreateSandboxRequest {
            host_selector: Some(BTreeMap::from([("zone".into(), "a".into())])),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(zone_a.server, "a");
    for (server, field) in [("nowhere", "server"), ("Not A Name", "server")] {
        match w.on(server).await {
            Err(ServiceError::Validation(e)) => assert!(e.to_string().contains(field), "{e}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        w.create(CreateSandboxRequest {
            host_selector: Some(BTreeMap::from([("zone".into(), "z".into())])),
            ..Default::default()
        })
        .await,
        Err(ServiceError::InsufficientCapacity(_))
    ));
    // Bigger than every host: a 400 naming the field.
    match w
        .create(CreateSandboxRequest {
            cpu_cores: Some(3.0),
            ..Default::default()
        })
        .await
    {
        Err(ServiceError::Validation(e)) => assert!(e.to_string().contains("cpuCores"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn every_operation_reaches_the_sandbox_on_its_own_host() {
    let w = World::new().await;
    let sb = w.on("a").await.unwrap();
    // By its id alone too (files, logs and the proxy go that way).
    assert_eq!(w.svc.runtime_of(&sb.id).await.unwrap().server_name(), "a");
    let patched = stockade_service::update::update(
        &w.svc,
        &w.scope(),
        sb.id.as_str(),
        &stockade_core::update::SpecPatch {
            cpu_cores: Some(0.5),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(patched.sandbox.spec.cpu_cores, 0.5);
    assert_eq!(w.hosts["a"].container(&sb.id).unwrap().spec.cpu_cores, 0.5);
    let stopped = lifecycle::stop(&w.svc, sb, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(stopped.status, SandboxStatus::Stopped);
    assert!(!w.hosts["a"].container(&stopped.id).unwrap().running);
    let started = lifecycle::start(&w.svc, stopped).await.unwrap();
    assert!(w.hosts["a"].container(&started.id).unwrap().running);
    lifecycle::destroy(&w.svc, started.clone(), false)
        .await
        .unwrap();
    assert!(w.hosts["a"].container(&started.id).is_none());
}

#[tokio::test]
async fn a_failing_host_is_cordoned_and_recovers_with_its_sandboxes() {
    let w = World::new().await;
    let sb = w.on("a").await.unwrap();
    w.check().await;
    w.hosts["a"].set_unavailable(true);
    let hosts = w.check().await;
    let a = hosts.iter().find(|h| h.name == "a").unwrap();
    assert_eq!(a.state, HostState::Cordoned);
    assert!(a.auto_cordoned);
    assert_eq!(a.health.healthy, Some(false));
    assert!(
        a.state_reason.as_deref().unwrap().contains("automatically"),
        "{a:?}"
    );
    // Nothing new goes there; the rest still takes creates.
    for _ in 0..3 {
        assert_ne!(w.one_cpu().await.unwrap().server, "a");
    }
    let refused = w.on("a").await.unwrap_err();
    assert!(
        matches!(&refused, ServiceError::DockerUnavailable(m) if m.contains("a is cordoned")),
        "{refused:?}"
    );
    let mut details = stockade_api::SandboxResponse::from_record(&sb, Utc::now());
    w.svc.fill_usage(&sb, &mut details).await;
    assert_eq!(details.host.as_ref().unwrap().state, "cordoned");

    // The engine comes back without its running containers.
    w.hosts["a"].set_unavailable(false);
    w.hosts["a"].exit_container(&sb.id, 137);
    let hosts = w.check().await;
    let a = hosts.iter().find(|h| h.name == "a").unwrap();
    assert_eq!(a.state, HostState::Active, "{a:?}");
    assert!(!a.auto_cordoned);
    assert_eq!(w.fresh(&sb).await.status, SandboxStatus::Running);
    assert!(w.hosts["a"].container(&sb.id).unwrap().running);

    // An administrator's cordon is never lifted by a check.
    w.set_state("b", HostState::Cordoned, Some("maintenance"))
        .await;
    let hosts = w.check().await;
    assert_eq!(
        hosts.iter().find(|h| h.name == "b").unwrap().state,
        HostState::Cordoned
    );
}

#[tokio::test]
async fn a_drain_stops_what_runs_and_moves_what_is_stopped() {
    let w = World::new().await;
    let kept = w.on("a").await.unwrap();
    let ephemeral = w
        .create(CreateSandboxRequest {
            server: Some("a".into()),
            persistent: Some(false),
            ..Default::default()
        })
        .await
        .unwrap();
    let a = w.set_state("a", HostState::Draining, None).await;
    // First pass: the persistent one stops, the other goes.
    stockade_service::drain::drain_once(&w.svc, &a).await;
    assert_eq!(w.fresh(&kept).await.status, SandboxStatus::Stopped);
    assert!(w
        .store
        .get_sandbox(&w.scope(), &ephemeral.id)
        .await
        .map_or(true, |s| s.status == SandboxStatus::Terminated));
    // Second pass: the stopped one moves, with its workspace.
    stockade_service::drain::drain_once(&w.svc, &a).await;
    let moved = w.fresh(&kept).await;
    assert_ne!(moved.server, "a", "{moved:?}");
    assert_eq!(moved.status, SandboxStatus::Stopped);
    assert!(w.hosts["a"].container(&kept.id).is_none());
    assert!(w.hosts[&moved.server].container(&kept.id).is_some());
    assert!(w.hosts[&moved.server].workspace_archive(&kept.id).is_some());
    // It starts where it is now.
    let started = lifecycle::start(&w.svc, moved.clone()).await.unwrap();
    assert!(
        w.hosts[&moved.server]
            .container(&started.id)
            .unwrap()
            .running
    );
    let _ = &w.dir;
}

#[tokio::test]
async fn a_snapshot_taken_on_one_host_starts_on_another() {
    let w = World::new().await;
    let source = w.on("a").await.unwrap();
    let snapshot = stockade_service::snapshots::capture(
        &w.svc,
        &w.scope(),
        &source,
        Some("travel".into()),
        stockade_core::SnapshotKind::User,
    )
    .await
    .unwrap();
    assert!(w.hosts["b"].images().is_empty());
    let restored = w
        .create(CreateSandboxRequest {
            server: Some("b".into()),
            source: Some(stockade_api::SandboxSource::Snapshot {
                snapshot_id: snapshot.id.to_string(),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(restored.server, "b");
    assert!(w.hosts["b"].images().contains(&snapshot.image_ref));
    assert_eq!(
        w.hosts["b"].container(&restored.id).unwrap().spec.image,
        snapshot.image_ref
    );
}

#[tokio::test]
async fn every_host_keeps_a_warm_pool_and_a_create_takes_a_member_where_it_may_go() {
    let w = World::with(|c| {
        c.pool = stockade_service::pool::PoolConfig {
            classes: vec![stockade_service::pool::PoolClassConfig::default_class(1)],
            check_interval: Duration::from_millis(100),
            ..Default::default()
        };
    })
    .await;
    // The hosts as the checks see them, then the pool fills on each.
    w.check().await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let pool = tokio::spawn(stockade_service::pool::run(w.svc.clone(), shutdown.clone()));
    support::wait_for("the pools did not fill", || {
        ["local", "a", "b"]
            .iter()
            .all(|h| w.svc.pool().ready_on(h) >= 1)
    })
    .await;
    for (name, rt) in &w.hosts {
        let members = rt
            .containers()
            .into_iter()
            .filter(|c| c.pool_class.is_some())
            .count();
        assert_eq!(members, 1, "{name}");
    }
    // Asked for host b: b's member serves it, on b.
    let on_b = w.on("b").await.unwrap();
    assert_eq!(on_b.server, "b");
    assert!(w.hosts["b"]
        .container(&on_b.id)
        .unwrap()
        .pool_class
        .is_some());
    // A cordoned host's members go, and it gets none until it is back.
    w.set_state("a", HostState::Cordoned, None).await;
    w.check().await;
    support::wait_for("a's member stayed", || {
        w.svc.pool().ready_on("a") == 0
            && !w.hosts["a"]
                .containers()
                .iter()
                .any(|c| c.pool_class.is_some())
    })
    .await;
    shutdown.cancel();
    pool.await.unwrap();
}

#[tokio::test]
async fn a_move_killed_between_its_steps_leaves_one_copy_and_the_next_drain_finishes_it() {
    for point in ["move.exported", "move.created"] {
        let w = World::new().await;
        let sb = w.on("a").await.unwrap();
        let sb = lifecycle::stop(&w.svc, sb, Duration::from_secs(1))
            .await
            .unwrap();
        // An instance that dies in the middle of the move.
        let dead = w.instance().await;
        dead.ops().faults().crash_at(point);
        stockade_service::drain::move_sandbox(&dead, sb.clone())
            .await
            .unwrap_err();
        // Another instance recovers it: the record still names host a, and
        // only a holds the sandbox.
        let other = w.instance().await;
        stockade_service::recovery::recover_expired(&other, true).await;
        let after = w.fresh(&sb).await;
        assert_eq!(after.server, "a", "{point}");
        let holders: Vec<&str> = w
            .hosts
            .iter()
            .filter(|(_, rt)| rt.container(&sb.id).is_some())
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(holders, ["a"], "{point}");
        // The next drain pass moves it for good.
        let a = w.set_state("a", HostState::Draining, None).await;
        stockade_service::drain::drain_once(&other, &a).await;
        let moved = w.fresh(&sb).await;
        assert_ne!(moved.server, "a", "{point}");
        let holders = w
            .hosts
            .values()
            .filter(|rt| rt.container(&sb.id).is_some())
            .count();
        assert_eq!(holders, 1, "{point}");
    }
}

#[tokio::test]
async fn another_accounts_sandbox_on_another_host_stays_out_of_reach() {
    let w = World::new().await;
    let theirs = w.on("b").await.unwrap();
    let intruder = w.store.create_account("intruder", false).await.unwrap();
    let scope = Scope::account(intruder.id.clone());
    // Every lookup a front-end makes is scoped: the host changes nothing.
    assert!(lifecycle::load(&w.svc, &scope, theirs.id.as_str())
        .await
        .is_err());
    assert!(stockade_service::update::update(
        &w.svc,
        &scope,
        theirs.id.as_str(),
        &stockade_core::update::SpecPatch {
            cpu_cores: Some(0.5),
            ..Default::default()
        },
    )
    .await
    .is_err());
    assert_eq!(
        w.hosts["b"].container(&theirs.id).unwrap().spec.cpu_cores,
        1.0
    );
}
