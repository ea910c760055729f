//! Docker hosts and placement in the store: hosts
//! round-trip, registering the server's own host twice keeps the first, a
//! host is removed only once it holds nothing but terminated sandboxes, a
//! placement goes to the freest candidate within its limits (records and
//! `extra` counted) or to none; and of many placements racing from two
//! "server instances" (two separate connection pools) no more fit than the
//! host's room. Runs on SQLite and, when `STOCKADE_TEST_DATABASE_URL` is
//! set, on a fresh PostgreSQL database.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{Duration, SubsecRound, Utc};
use stockade_core::quota::BYTES_PER_GB;
use stockade_core::spec::SpecInput;
use stockade_core::{
    AccountId, Defaults, Host, HostHealth, HostState, HostTls, Operation, Resources, Sandbox,
    SandboxId, SandboxSpec, SandboxStatus, Scope,
};
use stockade_store::{CandidateLoad, Placed, PlacementCandidate, Store, StoreError};

const GB: u64 = BYTES_PER_GB;

common::store_tests!(file "h.db", 2, sqlite_hosts, postgres_hosts, |store| {
    hosts(store.clone()).await;
    placement(store).await
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_hosts() {
    let store = stockade_store::connect("sqlite::memory:").await.unwrap();
    hosts(store.clone()).await;
    placement(store).await;
}

common::store_tests!(
    pair "race.db", 4, sqlite_placements_race, postgres_placements_race,
    |a, b| race(a, b).await
);

fn host(name: &str) -> Host {
    let now = Utc::now().trunc_subsecs(6);
    Host::new(name, format!("tcp://{name}.example:2376"), now)
}

fn record(account: &AccountId, name: &str, server: &str, cpu: f64, memory_gb: f64) -> Sandbox {
    let id = SandboxId::generate();
    let input = SpecInput {
        name: Some(name.into()),
        cpu_cores: Some(cpu),
        memory_gb: Some(memory_gb),
        ..SpecInput::default()
    };
    let spec = SandboxSpec::from_input(input, &id, &Defaults::default()).unwrap();
    Sandbox::new(
        id,
        account.clone(),
        None,
        spec,
        server.into(),
        Utc::now().trunc_subsecs(6),
    )
}

async fn host_names(store: &dyn Store) -> Vec<String> {
    let hosts = store.list_hosts().await.unwrap();
    hosts.into_iter().map(|h| h.name).collect()
}

/// Where `sb` was placed among `candidates` (with `op`, if any).
async fn place(
    store: &dyn Store,
    sb: &mut Sandbox,
    op: Option<&Operation>,
    candidates: &[PlacementCandidate],
) -> Placed {
    store
        .insert_sandbox_placed(sb, op, candidates)
        .await
        .unwrap()
}

fn candidate(server: &str, cpus: Option<u64>, memory_gb: Option<u64>) -> PlacementCandidate {
    PlacementCandidate {
        server: server.into(),
        cpu_limit_millis: cpus.map(|c| c * 1000),
        memory_limit_bytes: memory_gb.map(|m| m * GB),
        extra: Resources::default(),
    }
}

async fn hosts(store: Arc<dyn Store>) {
    assert!(store.list_hosts().await.unwrap().is_empty());
    common::assert_not_found(store.get_host("nope").await);

    // Every field round-trips.
    let mut full = host("edge-1");
    full.docker_host = "tcp://10.0.0.5:2376".into();
    full.tls = Some(HostTls {
        ca: "/etc/stockade/ca.pem".into(),
        cert: "/etc/stockade/cert.pem".into(),
        key: "/etc/stockade/key.pem".into(),
    });
    full.address = Some("10.0.0.5".into());
    full.labels = BTreeMap::from([
        ("zone".to_owned(), "eu-1".to_owned()),
        ("gpu".to_owned(), "a100".to_owned()),
    ]);
    full.cpus = Some(64);
    full.memory_bytes = Some(256 * GB);
    store.insert_host(&full).await.unwrap();
    assert_eq!(store.get_host("edge-1").await.unwrap(), full);
    let plain = host("alpha");
    store.insert_host(&plain).await.unwrap();
    assert_eq!(host_names(store.as_ref()).await, ["alpha", "edge-1"]);

    // A taken name.
    let err = store.insert_host(&host("alpha")).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(ref m) if m.contains("host 'alpha' exists")),
        "{err:?}"
    );

    // The server's own host: registered once, then what is stored is kept.
    let own = host("local");
    assert_eq!(store.ensure_host(&own).await.unwrap(), own);
    let mut again = host("local");
    again.docker_host = "unix:///elsewhere.sock".into();
    assert_eq!(store.ensure_host(&again).await.unwrap(), own);
    assert_eq!(store.list_hosts().await.unwrap().len(), 3);

    // An administrator's changes; the name, address and creation time stay.
    let mut cordoned = full.clone();
    cordoned.state = HostState::Cordoned;
    cordoned.state_reason = Some("kernel upgrade".into());
    cordoned.auto_cordoned = true;
    cordoned.labels.remove("gpu");
    cordoned.cpus = None;
    cordoned.memory_bytes = Some(128 * GB);
    cordoned.address = None;
    cordoned.tls = None;
    cordoned.updated_at = full.updated_at + Duration::seconds(5);
    store.update_host(&cordoned).await.unwrap();
    assert_eq!(store.get_host("edge-1").await.unwrap(), cordoned);
    common::assert_not_found(store.update_host(&host("ghost")).await);

    // Health: written, read back, untouched by an update.
    let checked = Utc::now().trunc_subsecs(6);
    let failing = HostHealth {
        healthy: Some(false),
        reason: Some("cannot connect to the Docker daemon".into()),
        checked_at: Some(checked),
        failing_since: Some(checked - Duration::seconds(9)),
        cpus: Some(16),
        memory_bytes: Some(62 * GB),
        disk_free_bytes: Some(5 << 30),
    };
    store.record_host_health("edge-1", &failing).await.unwrap();
    let read = store.get_host("edge-1").await.unwrap();
    assert_eq!(read.health, failing);
    assert!(!read.schedulable());
    store.update_host(&cordoned).await.unwrap();
    assert_eq!(store.get_host("edge-1").await.unwrap().health, failing);
    let healthy = HostHealth {
        healthy: Some(true),
        checked_at: Some(checked + Duration::seconds(3)),
        ..HostHealth::default()
    };
    store.record_host_health("edge-1", &healthy).await.unwrap();
    assert_eq!(store.get_host("edge-1").await.unwrap().health, healthy);
    common::assert_not_found(store.record_host_health("ghost", &healthy).await);

    // Removal: refused while a sandbox that is not terminated is there
    // (stopped ones count), allowed once they are.
    let account = AccountId::generate();
    let mut stopped = record(&account, "held-1", "alpha", 1.0, 1.0);
    stopped.status = SandboxStatus::Stopped;
    store.insert_sandbox(&stopped).await.unwrap();
    let running = record(&account, "held-2", "alpha", 1.0, 1.0);
    store.insert_sandbox(&running).await.unwrap();
    let mut dead = record(&account, "held-3", "edge-1", 1.0, 1.0);
    dead.status = SandboxStatus::Terminated;
    store.insert_sandbox(&dead).await.unwrap();
    let per_server = store.sandboxes_per_server().await.unwrap();
    assert_eq!(per_server.get("alpha"), Some(&2));
    assert_eq!(per_server.get("edge-1"), None);
    let err = store.delete_host("alpha").await.unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(ref m) if m.contains("host 'alpha' holds 2 sandboxes")),
        "{err:?}"
    );
    assert!(store.get_host("alpha").await.is_ok());
    store
        .soft_delete_sandbox(&stopped.id, Utc::now())
        .await
        .unwrap();
    let err = store.delete_host("alpha").await.unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(ref m) if m.contains("holds 1 sandbox ")),
        "{err:?}"
    );
    let mut ended = store
        .get_sandbox(&Scope::account(account.clone()), &running.id)
        .await
        .unwrap();
    ended.status = SandboxStatus::Terminated;
    ended.terminated_at = Some(Utc::now());
    store.update_sandbox(&ended).await.unwrap();
    assert_eq!(
        store.sandboxes_per_server().await.unwrap().get("alpha"),
        None
    );
    store.delete_host("alpha").await.unwrap();
    store.delete_host("edge-1").await.unwrap();
    common::assert_not_found(store.get_host("alpha").await);
    common::assert_not_found(store.delete_host("alpha").await);
    common::assert_not_found(store.delete_host("ghost").await);
    assert_eq!(host_names(store.as_ref()).await, ["local"]);
}

async fn placement(store: Arc<dyn Store>) {
    let account = AccountId::generate();
    let scope = Scope::account(account.clone());

    // What is there: p1 holds 3 of 8 CPUs and 2 of 16 GB; p2 1 of 8 CPUs
    // and 12 of 16 GB; a stopped record holds nothing.
    store
        .insert_sandbox(&record(&account, "on-p1", "p1", 3.0, 2.0))
        .await
        .unwrap();
    store
        .insert_sandbox(&record(&account, "on-p2", "p2", 1.0, 12.0))
        .await
        .unwrap();
    let mut stopped = record(&account, "stopped-p2", "p2", 8.0, 16.0);
    stopped.status = SandboxStatus::Stopped;
    store.insert_sandbox(&stopped).await.unwrap();
    let candidates = [
        candidate("p1", Some(8), Some(16)),
        candidate("p2", Some(8), Some(16)),
    ];

    // The freest: p1 (4/8 after) against p2 (13/16 after). The record and
    // its operation are inserted with its server set.
    let mut sb = record(&account, "placed-1", "unset", 1.0, 1.0);
    let op = common::create_op(&sb.id, &account);
    assert_eq!(
        place(store.as_ref(), &mut sb, Some(&op), &candidates).await,
        Placed::On("p1".into())
    );
    assert_eq!(sb.server, "p1");
    let stored = store.get_sandbox(&scope, &sb.id).await.unwrap();
    assert_eq!(stored.server, "p1");
    assert_eq!(
        store
            .get_operation(sb.id.as_ref())
            .await
            .unwrap()
            .unwrap()
            .id,
        op.id
    );

    // `extra` counts: what this process holds on p1 makes p2 the freer for
    // a CPU-heavy sandbox.
    let mut busy = candidates.clone();
    busy[0].extra = Resources {
        cpu_millis: 3000,
        memory_bytes: 0,
    };
    let mut sb = record(&account, "placed-2", "unset", 1.0, 0.5);
    assert_eq!(
        place(store.as_ref(), &mut sb, None, &busy).await,
        Placed::On("p2".into())
    );
    // p1: 4 CPUs + 3 extra + 2 > 8: only p2 fits, and not for 4 GB.
    let mut sb = record(&account, "too-big", "unset", 2.0, 4.0);
    let Placed::Full(loads) = place(store.as_ref(), &mut sb, None, &busy).await else {
        panic!("nothing fits");
    };
    assert_eq!(
        loads,
        [
            CandidateLoad {
                server: "p1".into(),
                reserved: Resources {
                    cpu_millis: 7000,
                    memory_bytes: 3 * GB,
                },
                cpu_limit_millis: Some(8000),
                memory_limit_bytes: Some(16 * GB),
            },
            CandidateLoad {
                server: "p2".into(),
                reserved: Resources {
                    cpu_millis: 2000,
                    memory_bytes: 12 * GB + GB / 2,
                },
                cpu_limit_millis: Some(8000),
                memory_limit_bytes: Some(16 * GB),
            },
        ]
    );
    assert_eq!(sb.server, "unset");
    common::assert_not_found(store.get_sandbox(&scope, &sb.id).await);
    // An unlimited candidate always fits; no candidate, nothing.
    let open = [
        candidate("p1", Some(8), Some(16)),
        candidate("wide", None, None),
    ];
    assert_eq!(
        place(store.as_ref(), &mut sb, None, &open).await,
        Placed::On("wide".into())
    );
    let mut nowhere = record(&account, "nowhere", "unset", 0.5, 0.5);
    assert_eq!(
        place(store.as_ref(), &mut nowhere, None, &[]).await,
        Placed::Full(Vec::new())
    );

    // A taken name is a conflict, and nothing is written (nor its operation).
    let mut twin = record(&account, "placed-1", "unset", 0.5, 0.5);
    let twin_op = common::create_op(&twin.id, &account);
    let err = store
        .insert_sandbox_placed(&mut twin, Some(&twin_op), &candidates)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(ref m) if m.contains("a sandbox named 'placed-1'")),
        "{err:?}"
    );
    assert_eq!(twin.server, "unset");
    assert_eq!(store.get_operation(twin.id.as_ref()).await.unwrap(), None);
    assert_eq!(
        store.server_reserved("p1", &[]).await.unwrap(),
        Resources {
            cpu_millis: 4000,
            memory_bytes: 3 * GB,
        }
    );
}

/// 16 placements of 1 CPU each from two instances at once onto one host of
/// 5 CPUs: exactly 5 land, and the host never holds more than its room.
async fn race(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let account = AccountId::generate();
    let candidates = vec![candidate("tight", Some(5), None)];
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let (candidates, barrier, account) = (candidates.clone(), barrier.clone(), account.clone());
        tasks.push(tokio::spawn(async move {
            let mut sb = record(&account, &format!("racer-{i}"), "unset", 1.0, 0.5);
            barrier.wait().await;
            let placed = place(store.as_ref(), &mut sb, None, &candidates).await;
            let reserved = store.server_reserved("tight", &[]).await.unwrap();
            assert!(reserved.cpu_millis <= 5000, "{reserved:?}");
            placed
        }));
    }
    let mut on = 0;
    for task in tasks {
        match task.await.unwrap() {
            Placed::On(server) => {
                assert_eq!(server, "tight");
                on += 1;
            }
            Placed::Full(loads) => {
                assert_eq!(loads.len(), 1);
                assert_eq!(loads[0].reserved.cpu_millis, 5000);
            }
        }
    }
    assert_eq!(on, 5);
    assert_eq!(
        a.server_reserved("tight", &[]).await.unwrap().cpu_millis,
        5000
    );
    assert_eq!(
        a.sandboxes_per_server().await.unwrap().get("tight"),
        Some(&5)
    );
}
