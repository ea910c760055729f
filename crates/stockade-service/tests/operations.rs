//! The fast tier of the lifecycle's crash safety: the service
//! on the fake runtime and SQLite, with the process "dying" between every
//! two steps of every operation, then a second instance recovering after
//! the lease. Runs in seconds, without Docker.

use std::sync::Arc;
use std::time::Duration;

use stockade_api::CreateSandboxRequest;
use stockade_core::update::SpecPatch;
use stockade_core::{Account, Sandbox, SandboxStatus, Scope};
use stockade_runtime::prelude::*;
use stockade_runtime::FakeRuntime;
use stockade_service::{lifecycle, pause, recovery, Service, ServiceConfig, ServiceError};
use stockade_store::Store;

mod support;

const LEASE: Duration = Duration::from_millis(150);

struct World {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    rt: FakeRuntime,
    account: Account,
}

impl World {
    async fn new() -> Self {
        let support::Base {
            dir,
            store,
            account,
        } = support::base().await;
        Self {
            _dir: dir,
            store,
            rt: FakeRuntime::new(),
            account,
        }
    }

    /// A world with a live instance and its sandbox `name`.
    async fn with_sandbox(name: &str) -> (Self, Service, Sandbox) {
        let w = Self::new().await;
        let live = w.instance().await;
        let sb = w.create(&live, name).await.unwrap();
        (w, live, sb)
    }

    /// A service instance (a server process) on the shared store and runtime.
    async fn instance(&self) -> Service {
        let config = ServiceConfig {
            operation_lease: LEASE,
            ..support::config(self._dir.path(), Duration::from_secs(5))
        };
        support::start(&self.store, Arc::new(self.rt.clone()), config).await
    }

    /// An instance that dies at `point` of its next operation.
    async fn dying(&self, point: &str) -> Service {
        let dead = self.instance().await;
        dead.ops().faults().crash_at(point);
        dead
    }

    async fn fresh(&self, sb: &Sandbox) -> Sandbox {
        self.store.get_sandbox(&self.scope(), &sb.id).await.unwrap()
    }

    fn scope(&self) -> Scope {
        Scope::account(self.account.id.clone())
    }

    async fn create(&self, svc: &Service, name: &str) -> Result<Sandbox, ServiceError> {
        let req = CreateSandboxRequest {
            name: Some(name.into()),
            ..Default::default()
        };
        svc.create_sandbox(&self.scope(), (&req).into(), None)
            .await
            .map(|c| c.sandbox)
    }

    /// Another instance recovers what the dead one left, once its leases ended.
    async fn recover(&self) -> Service {
        tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
        let other = self.instance().await;
        let report = recovery::recover_expired(&other, false).await;
        assert_eq!(report.failed, 0, "recovery failed: {report:?}");
        other
    }

    /// What must hold once recovery ran: no operation left, no record in a
    /// transitional state, every container has a live record, and every
    /// live record says what its container does.
    async fn assert_converged(&self) {
        let ops = self.store.list_operations(100).await.unwrap();
        assert!(ops.is_empty(), "operations left: {ops:?}");
        let live = self.store.list_active_sandboxes().await.unwrap();
        for sb in &live {
            assert!(!sb.is_being_created(), "{} left in {}", sb.id, sb.status);
            let container = self.rt.inspect(&sb.id).await.unwrap();
            match sb.status {
                SandboxStatus::Running => assert!(
                    container.as_ref().is_some_and(|c| c.running && !c.paused),
                    "{} RUNNING but its container is not (or is frozen)",
                    sb.id
                ),
                SandboxStatus::Paused => assert!(
                    container.as_ref().is_some_and(|c| c.running && c.paused),
                    "{} PAUSED but its container is not frozen",
                    sb.id
                ),
                SandboxStatus::Stopped => assert!(
                    container.as_ref().is_some_and(|c| !c.running),
                    "{} STOPPED but its container runs or is gone",
                    sb.id
                ),
                SandboxStatus::Error => assert!(container.is_none()),
                other => panic!("{} is {other}", sb.id),
            }
        }
        for c in self.rt.containers() {
            assert!(
                live.iter().any(|sb| sb.id == c.spec.sandbox_id),
                "container of {} has no live record",
                c.spec.sandbox_id
            );
        }
    }
}

#[tokio::test]
async fn a_create_killed_at_any_step_is_rolled_back_and_frees_its_name() {
    for point in ["create.recorded", "create.container_made"] {
        let w = World::new().await;
        let dead = w.dying(point).await;
        let err = w.create(&dead, "web").await.unwrap_err();
        assert!(matches!(err, ServiceError::Internal(_)), "{point}: {err}");
        // Until recovery, the name is taken and the sandbox is in the works.
        let other = w.recover().await;
        w.assert_converged().await;
        assert!(w.rt.containers().is_empty(), "{point}: container left");
        assert!(w.rt.volume_names().is_empty(), "{point}: volume left");
        let again = w.create(&other, "web").await.unwrap();
        assert_eq!(again.status, SandboxStatus::Running, "{point}");
    }
}

#[tokio::test]
async fn a_delete_killed_at_any_step_is_carried_on() {
    for (point, preserve, sync) in [
        ("delete.removed", false, false),
        ("delete.removed", true, false),
        ("delete.synced", false, true),
    ] {
        let (w, _live, sb) = World::with_sandbox("doomed").await;
        let dead = w.dying(point).await;
        lifecycle::destroy_with(&dead, sb.clone(), preserve, sync)
            .await
            .unwrap_err();
        w.recover().await;
        w.assert_converged().await;
        let after = w.fresh(&sb).await;
        assert_eq!(after.status, SandboxStatus::Terminated, "{point}");
        assert!(after.deleted_at.is_some());
        assert!(w.rt.container(&sb.id).is_none());
        assert_eq!(w.rt.has_volume(&sb.volume_name()), preserve);
    }
}

#[tokio::test]
async fn an_interrupted_delete_is_finished_by_the_next_operation_on_the_sandbox() {
    let (w, live, sb) = World::with_sandbox("doomed").await;
    let dead = w.dying("delete.removed").await;
    lifecycle::destroy(&dead, sb.clone(), false)
        .await
        .unwrap_err();
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    // No recovery pass ran: a stop claims the dead operation and finishes it.
    let err = lifecycle::stop(&live, sb.clone(), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(&err, ServiceError::Terminated(_)), "{err}");
    w.assert_converged().await;
}

#[tokio::test]
async fn stops_and_starts_killed_midway_converge_to_what_docker_shows() {
    for point in ["stop.stopped", "start.started"] {
        let (w, live, mut sb) = World::with_sandbox("s").await;
        if point == "start.started" {
            sb = lifecycle::stop(&live, sb, Duration::ZERO).await.unwrap();
        }
        let dead = w.dying(point).await;
        let result = if point == "stop.stopped" {
            lifecycle::stop(&dead, sb.clone(), Duration::ZERO).await
        } else {
            lifecycle::start(&dead, sb.clone()).await
        };
        result.unwrap_err();
        w.recover().await;
        w.assert_converged().await;
        let after = w.fresh(&sb).await;
        let want = if point == "stop.stopped" {
            SandboxStatus::Stopped
        } else {
            SandboxStatus::Running
        };
        assert_eq!(after.status, want, "{point}");
    }
}

#[tokio::test]
async fn pauses_and_resumes_killed_at_every_step_converge_to_what_docker_shows() {
    // (where the process dies, whether the sandbox was paused before, the
    // status recovery must leave)
    let trials = [
        ("pause.paused", false, SandboxStatus::Paused),
        ("resume.resumed", true, SandboxStatus::Running),
    ];
    for (point, paused_before, want) in trials {
        let (w, live, mut sb) = World::with_sandbox("p").await;
        if paused_before {
            sb = pause::pause(&live, sb).await.unwrap();
            assert_eq!(sb.status, SandboxStatus::Paused);
        }
        let run_started = w.fresh(&sb).await.started_at;
        let dead = w.dying(point).await;
        let result = if paused_before {
            pause::resume(&dead, sb.clone()).await
        } else {
            pause::pause(&dead, sb.clone()).await
        };
        result.unwrap_err();
        // Nobody may act on the sandbox until the operation is recovered:
        // another instance waits for its lease, then finishes it.
        let other = w.recover().await;
        w.assert_converged().await;
        let after = w.fresh(&sb).await;
        assert_eq!(after.status, want, "{point}");
        assert_eq!(after.paused_at.is_some(), want == SandboxStatus::Paused);
        // The same run goes on: its start time (and the tokens signed over
        // it) did not change.
        assert_eq!(after.started_at, run_started, "{point}");
        // And what is left works on the recovered instance.
        let back = if want == SandboxStatus::Paused {
            pause::resume(&other, after).await.unwrap()
        } else {
            pause::pause(&other, after).await.unwrap()
        };
        assert_ne!(back.status, want);
        w.assert_converged().await;
    }
}

#[tokio::test]
async fn a_start_that_remakes_a_lost_container_converges_when_killed_midway() {
    let (w, _live, sb) = World::with_sandbox("lost").await;
    // Its container disappears behind the server's back; the volume stays.
    w.rt.remove(&sb.id, true).await.unwrap();
    let dead = w.dying("start.recreated").await;
    lifecycle::start(&dead, sb.clone()).await.unwrap_err();
    w.recover().await;
    w.assert_converged().await;
    let after = w.fresh(&sb).await;
    assert_eq!(after.status, SandboxStatus::Running);
    let made = w.rt.container(&sb.id).expect("made again");
    assert_eq!(
        after.container_id.as_deref(),
        Some(made.container_id.as_str())
    );
    assert_ne!(after.container_id, sb.container_id);
}

#[tokio::test]
async fn stop_start_snapshot_and_delete_take_a_paused_sandbox() {
    let (w, live, sb) = World::with_sandbox("q").await;
    let sb = pause::pause(&live, sb).await.unwrap();
    // A second pause and a resume of a running one are refused.
    let again = pause::pause(&live, sb.clone()).await.unwrap_err();
    assert!(matches!(again, ServiceError::Conflict(_)), "{again}");
    // Start resumes it: the same run.
    let started = lifecycle::start(&live, sb.clone()).await.unwrap();
    assert_eq!(started.status, SandboxStatus::Running);
    assert_eq!(started.started_at, sb.started_at);
    assert!(started.resumed_at.is_some());
    let not_paused = pause::resume(&live, started.clone()).await.unwrap_err();
    assert!(
        matches!(not_paused, ServiceError::Conflict(_)),
        "{not_paused}"
    );
    // Stop of a paused one thaws and stops it.
    let sb = pause::pause(&live, started).await.unwrap();
    let stopped = lifecycle::stop(&live, sb, Duration::ZERO).await.unwrap();
    assert_eq!(stopped.status, SandboxStatus::Stopped);
    assert!(stopped.paused_at.is_none());
    let c = w.rt.container(&stopped.id).unwrap();
    assert!(!c.running && !c.paused);
    // A stopped one cannot be paused; a started one can, and a paused one
    // is deleted like any other.
    let err = pause::pause(&live, stopped.clone()).await.unwrap_err();
    assert!(matches!(err, ServiceError::NotRunning(_)), "{err}");
    let sb = lifecycle::start(&live, stopped).await.unwrap();
    let sb = pause::pause(&live, sb).await.unwrap();
    lifecycle::destroy(&live, sb.clone(), false).await.unwrap();
    assert!(w.rt.container(&sb.id).is_none());
    w.assert_converged().await;
}

#[tokio::test]
async fn a_paused_sandbox_refuses_use_unless_it_auto_resumes() {
    let w = World::new().await;
    let live = w.instance().await;
    let plain = w.create(&live, "plain").await.unwrap();
    let plain = pause::pause(&live, plain).await.unwrap();
    let err = pause::awake(&live, plain.clone()).await.unwrap_err();
    assert!(
        matches!(&err, ServiceError::Paused(m) if m.contains("resume")),
        "{err}"
    );
    assert_eq!(w.fresh(&plain).await.status, SandboxStatus::Paused);

    let req = CreateSandboxRequest {
        name: Some("waking".into()),
        lifecycle: Some(stockade_api::LifecycleRequest {
            on_timeout: Some("pause".into()),
            auto_resume: Some(true),
            idle_timeout_minutes: None,
        }),
        ..Default::default()
    };
    let waking = live
        .create_sandbox(&w.scope(), (&req).into(), None)
        .await
        .unwrap()
        .sandbox;
    let waking = pause::pause(&live, waking).await.unwrap();
    // Two uses at once: one resumes, the other finds it running.
    let (a, b) = tokio::join!(
        pause::awake(&live, waking.clone()),
        pause::awake(&live, waking.clone())
    );
    assert_eq!(a.unwrap().status, SandboxStatus::Running);
    assert_eq!(b.unwrap().status, SandboxStatus::Running);
    assert!(!w.rt.container(&waking.id).unwrap().paused);
    w.assert_converged().await;
}

#[tokio::test]
async fn an_update_killed_after_docker_leaves_the_container_at_the_record_limits() {
    let (w, _live, sb) = World::with_sandbox("u").await;
    let dead = w.dying("update.applied").await;
    let patch = SpecPatch {
        cpu_cores: Some(0.5),
        ..Default::default()
    };
    stockade_service::update::update(&dead, &w.scope(), sb.id.as_str(), &patch)
        .await
        .unwrap_err();
    w.recover().await;
    w.assert_converged().await;
    let record = w.fresh(&sb).await;
    let container = w.rt.container(&sb.id).unwrap();
    assert_eq!(
        record.spec.cpu_cores, sb.spec.cpu_cores,
        "never acknowledged"
    );
    assert_eq!(container.spec.cpu_cores, record.spec.cpu_cores);
}

#[tokio::test]
async fn an_idempotent_retry_after_a_crash_answers_at_once() {
    let w = World::new().await;
    let dead = w.dying("create.container_made").await;
    let req = CreateSandboxRequest {
        name: Some("keyed".into()),
        ..Default::default()
    };
    dead.create_sandbox(&w.scope(), (&req).into(), Some("key-1"))
        .await
        .unwrap_err();
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    let live = w.instance().await;
    let started = std::time::Instant::now();
    let created = live
        .create_sandbox(&w.scope(), (&req).into(), Some("key-1"))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(!created.replayed, "the first create was rolled back");
    assert_eq!(created.sandbox.status, SandboxStatus::Running);
    // A second retry replays the sandbox just made.
    let again = live
        .create_sandbox(&w.scope(), (&req).into(), Some("key-1"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.sandbox.id, created.sandbox.id);
    w.assert_converged().await;
}

#[tokio::test]
async fn concurrent_operations_on_one_sandbox_take_turns() {
    let w = World::new().await;
    let a = w.instance().await;
    let b = w.instance().await;
    let sb = w.create(&a, "busy").await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..24 {
        let svc = if i % 2 == 0 { a.clone() } else { b.clone() };
        let sb = sb.clone();
        let scope = w.scope();
        tasks.push(tokio::spawn(async move {
            match i % 4 {
                0 => lifecycle::stop(&svc, sb, Duration::ZERO).await.map(|_| ()),
                1 => lifecycle::start(&svc, sb).await.map(|_| ()),
                2 => {
                    let patch = SpecPatch {
                        cpu_cores: Some(if i % 8 == 2 { 0.5 } else { 0.25 }),
                        ..Default::default()
                    };
                    stockade_service::update::update(&svc, &scope, sb.id.as_str(), &patch)
                        .await
                        .map(|_| ())
                }
                _ => lifecycle::start(&svc, sb).await.map(|_| ()),
            }
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    w.assert_converged().await;
    let record = w.fresh(&sb).await;
    assert_eq!(
        w.rt.container(&sb.id).unwrap().spec.cpu_cores,
        record.spec.cpu_cores
    );
    // A delete racing a stop: one waits for the other, the end is TERMINATED.
    let (stopped, deleted) = tokio::join!(
        lifecycle::stop(&a, record.clone(), Duration::ZERO),
        lifecycle::destroy(&b, record.clone(), false),
    );
    deleted.unwrap();
    if let Err(e) = stopped {
        assert!(matches!(e, ServiceError::Terminated(_)), "{e}");
    }
    w.assert_converged().await;
    assert!(w.rt.container(&sb.id).is_none());
}

#[tokio::test]
async fn a_failing_runtime_create_leaves_nothing_and_frees_the_name() {
    let w = World::new().await;
    let svc = w.instance().await;
    w.rt.fail_next_create("no space left on device");
    w.create(&svc, "x").await.unwrap_err();
    w.assert_converged().await;
    assert!(w.store.list_active_sandboxes().await.unwrap().is_empty());
    assert!(w.rt.volume_names().is_empty());
    w.create(&svc, "x").await.unwrap();
}

#[tokio::test]
async fn bulk_delete_finishes_every_sandbox_even_when_the_caller_goes_away() {
    let w = World::new().await;
    let svc = w.instance().await;
    let mut targets = Vec::new();
    for i in 0..20 {
        targets.push(Ok(w.create(&svc, &format!("b{i}")).await.unwrap()));
    }
    w.rt.set_create_delay(Duration::ZERO);
    let call = lifecycle::destroy_many(&svc, targets, false);
    // The caller gives up almost at once.
    let _ = tokio::time::timeout(Duration::from_millis(1), call).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !w.store.list_active_sandboxes().await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "bulk delete stopped half-way"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.assert_converged().await;
    assert!(w.rt.containers().is_empty());
}
