//! Quotas and resource sums in the store: quotas round-trip
//! and belong to existing accounts, the resource columns follow every
//! write of a record, the sums count what each status holds, and migration
//! 0007 fills the columns of records made before it; the limits on what an
//! account keeps in the object store round-trip, and its snapshots are
//! counted and summed (user ones not deleted, never another account's);
//! shared volumes are counted and their sizes summed the same way, and a
//! volume's insert refuses one past the limits, also when many race for
//! the last place. Runs on SQLite and,
//! when `STOCKADE_TEST_DATABASE_URL` is set, on a fresh PostgreSQL database.

mod common;

use std::sync::Arc;

use chrono::{SubsecRound, Utc};
use stockade_core::quota::BYTES_PER_GB;
use stockade_core::spec::SpecInput;
use stockade_core::{
    AccountId, Defaults, Quota, QuotaUsage, Resources, Sandbox, SandboxId, SandboxSpec,
    SandboxStatus, SharedVolume, SharedVolumeId, SharedVolumeStatus, SharedVolumeUsage, Snapshot,
    SnapshotKind, SnapshotStatus, StoredQuotaExceeded,
};
use stockade_store::{PgStore, SqliteStore, Store, StoreError};

const GB: u64 = BYTES_PER_GB;

common::store_tests!(file "q.db", 2, sqlite_quotas, postgres_quotas, |store| quotas(store).await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_quotas() {
    quotas(stockade_store::connect("sqlite::memory:").await.unwrap()).await;
}

/// Brings the database of `$pool` to the schema before 0007 and writes the
/// rows an earlier version would have ([`old_rows`]) with `$statements`,
/// the backend's SQL for them; the account written. A macro, as the two
/// backends' pools and queries are of different types.
macro_rules! write_old_rows {
    ($pool:expr, $backend:literal, $statements:expr) => {{
        let (_migrations, migrator) = migrator_before_0007($backend).await;
        migrator.run($pool).await.unwrap();
        let (account, old) = (AccountId::generate(), old_record(SandboxStatus::Running));
        for (sql, values) in $statements.into_iter().zip(old_rows(&account, &old)) {
            let query = values.iter().fold(sqlx::query(sql), |q, v| q.bind(v));
            query.execute($pool).await.unwrap();
        }
        account
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migration_fills_the_resource_columns() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("old.db").display());
    let options = std::str::FromStr::from_str(&url)
        .map(|o: sqlx::sqlite::SqliteConnectOptions| o.create_if_missing(true));
    let pool = sqlx::SqlitePool::connect_with(options.unwrap())
        .await
        .unwrap();
    let account = write_old_rows!(
        &pool,
        "sqlite",
        [
            "INSERT INTO accounts (id, name, is_admin, created_at) VALUES (?, 'old', 0, ?)",
            "INSERT INTO sandboxes (id, account_id, name, status, server, created_at, version, metadata) \
             VALUES (?, ?, ?, 'RUNNING', 'local', ?, 0, ?)",
        ]
    );
    pool.close().await;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.unwrap());
    filled(store.as_ref(), &account).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migration_fills_the_resource_columns() {
    common::on_postgres("postgres_migration", |url| async move {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let account = write_old_rows!(
            &pool,
            "postgres",
            [
                "INSERT INTO accounts (id, name, is_admin, created_at) \
                 VALUES ($1, 'old', FALSE, $2::timestamptz)",
                "INSERT INTO sandboxes (id, account_id, name, status, server, created_at, version, metadata) \
                 VALUES ($1, $2, $3, 'RUNNING', 'local', $4::timestamptz, 0, $5::jsonb)",
            ]
        );
        pool.close().await;
        let store: Arc<dyn Store> = Arc::new(PgStore::connect(&url).await.unwrap());
        filled(store.as_ref(), &account).await;
    })
    .await;
}

/// A migrator of `backend`'s migrations before 0007, read from a directory
/// of their own (returned with it, to be kept while it runs).
async fn migrator_before_0007(backend: &str) -> (tempfile::TempDir, sqlx::migrate::Migrator) {
    let dir = tempfile::tempdir().unwrap();
    let src = manifest_dir().join("migrations").join(backend);
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.as_str() < "0007" {
            std::fs::copy(&path, dir.path().join(name)).unwrap();
        }
    }
    let migrator = sqlx::migrate::Migrator::new(dir.path()).await.unwrap();
    (dir, migrator)
}

/// The values, as text, of the rows an earlier version wrote for `old` of
/// `account`: its account's (id, created_at), then its own (id,
/// account_id, name, created_at, metadata).
fn old_rows(account: &AccountId, old: &Sandbox) -> [Vec<String>; 2] {
    let ts = |t: chrono::DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    [
        vec![account.to_string(), ts(Utc::now())],
        vec![
            old.id.to_string(),
            account.to_string(),
            old.spec.name.as_str().to_owned(),
            ts(old.created_at),
            serde_json::to_string(&old.metadata()).unwrap(),
        ],
    ]
}

/// A record as an earlier version wrote it: 1.5 CPUs, 3 GB, 12 GB disk.
fn old_record(status: SandboxStatus) -> Sandbox {
    let mut sb = record(&AccountId::generate(), "local", status, 1.5, 3.0, 12);
    sb.created_at = Utc::now().trunc_subsecs(6);
    sb
}

/// The migration filled the old record's columns from its metadata.
async fn filled(store: &dyn Store, account: &AccountId) {
    let expect = Resources {
        cpu_millis: 1500,
        memory_bytes: 3 * GB,
    };
    assert_eq!(store.server_reserved("local", &[]).await.unwrap(), expect);
    let usage = store.account_usage(account, &[]).await.unwrap();
    assert_eq!(
        usage,
        QuotaUsage {
            sandboxes: 1,
            running: expect,
            disk_gb: 12,
        }
    );
}

fn record(
    account: &AccountId,
    server: &str,
    status: SandboxStatus,
    cpu: f64,
    memory: f64,
    disk: u32,
) -> Sandbox {
    let id = SandboxId::generate();
    let input = SpecInput {
        cpu_cores: Some(cpu),
        memory_gb: Some(memory),
        disk_size_gb: Some(f64::from(disk)),
        ..SpecInput::default()
    };
    let spec = SandboxSpec::from_input(input, &id, &Defaults::default()).unwrap();
    let mut sb = Sandbox::new(id, account.clone(), None, spec, server.into(), Utc::now());
    sb.status = status;
    sb
}

/// Asserts what `account` uses (nothing excepted).
async fn assert_usage(store: &dyn Store, account: &AccountId, expected: QuotaUsage) {
    let found = store.account_usage(account, &[]).await.unwrap();
    assert_eq!(found, expected, "the usage of {account}");
}

fn usage(sandboxes: u64, cpu_millis: u64, memory_gb: u64, disk_gb: u64) -> QuotaUsage {
    QuotaUsage {
        sandboxes,
        running: Resources {
            cpu_millis,
            memory_bytes: memory_gb * GB,
        },
        disk_gb,
    }
}

async fn quotas(store: Arc<dyn Store>) {
    // Quotas: set at creation, read, replaced, lifted; only for accounts.
    let limited = Quota {
        sandboxes: Some(5),
        cpu_millis: Some(4000),
        memory_bytes: Some(8 * GB),
        disk_gb: None,
        snapshots: Some(3),
        snapshot_bytes: Some(GB / 2),
        uploads: None,
        upload_bytes: Some(10 * GB),
        volumes: Some(4),
        volume_gb: Some(50),
    };
    let alice = store
        .create_account_with_quota("alice", false, &limited)
        .await
        .unwrap();
    assert_eq!(store.get_quota(&alice.id).await.unwrap(), limited);
    let bob = store
        .create_account_with_quota("bob", false, &Quota::unlimited())
        .await
        .unwrap();
    assert!(store.get_quota(&bob.id).await.unwrap().is_unlimited());
    let plain = store.create_account("carol", false).await.unwrap();
    assert!(store.get_quota(&plain.id).await.unwrap().is_unlimited());
    // A taken name leaves neither an account nor a quota behind.
    let err = store
        .create_account_with_quota("alice", true, &limited)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(ref m) if m.contains("alice")),
        "{err:?}"
    );
    assert_eq!(store.count_accounts().await.unwrap(), 3);
    let ghost = AccountId::generate();
    common::assert_not_found(store.get_quota(&ghost).await);
    common::assert_not_found(store.set_quota(&ghost, &limited).await);
    let changed = Quota {
        sandboxes: None,
        disk_gb: Some(100),
        snapshots: None,
        uploads: Some(0),
        volumes: None,
        volume_gb: Some(0),
        ..limited
    };
    store.set_quota(&alice.id, &changed).await.unwrap();
    assert_eq!(store.get_quota(&alice.id).await.unwrap(), changed);
    store.set_quota(&bob.id, &limited).await.unwrap();
    assert_eq!(store.get_quota(&bob.id).await.unwrap(), limited);
    store.set_quota(&bob.id, &Quota::unlimited()).await.unwrap();
    assert!(store.get_quota(&bob.id).await.unwrap().is_unlimited());

    // Nothing yet.
    assert_usage(&*store, &alice.id, usage(0, 0, 0, 0)).await;
    assert_eq!(
        store.server_reserved("local", &[]).await.unwrap(),
        Resources::default()
    );

    // Alice: running, provisioning (through the create's transaction),
    // stopped, in error, and destroyed; one on another server. Bob: one.
    let running = record(&alice.id, "local", SandboxStatus::Running, 1.0, 2.0, 10);
    let provisioning = record(&alice.id, "local", SandboxStatus::Provisioning, 0.5, 1.0, 5);
    let stopped = record(&alice.id, "local", SandboxStatus::Stopped, 2.0, 4.0, 20);
    let broken = record(&alice.id, "local", SandboxStatus::Error, 4.0, 8.0, 1);
    let gone = record(&alice.id, "local", SandboxStatus::Running, 8.0, 16.0, 40);
    let elsewhere = record(&alice.id, "far", SandboxStatus::Running, 3.0, 6.0, 7);
    let bobs = record(&bob.id, "local", SandboxStatus::Running, 0.25, 1.0, 3);
    let op = common::create_op(&provisioning.id, &alice.id);
    store
        .insert_sandbox_with_operation(&provisioning, &op)
        .await
        .unwrap();
    for sb in [&running, &stopped, &broken, &gone, &elsewhere, &bobs] {
        store.insert_sandbox(sb).await.unwrap();
    }
    store
        .soft_delete_sandbox(&gone.id, Utc::now())
        .await
        .unwrap();

    // Sandboxes and disk: everything not terminated; CPU and memory: what
    // runs or is being created, on every server.
    assert_usage(
        &*store,
        &alice.id,
        usage(5, 1000 + 500 + 3000, 2 + 1 + 6, 10 + 5 + 20 + 1 + 7),
    )
    .await;
    assert_usage(&*store, &bob.id, usage(1, 250, 1, 3)).await;
    assert_usage(&*store, &plain.id, usage(0, 0, 0, 0)).await;
    // A host: what runs or is being created there, every account's.
    assert_eq!(
        store.server_reserved("local", &[]).await.unwrap(),
        Resources {
            cpu_millis: 1000 + 500 + 250,
            memory_bytes: (2 + 1) * GB + GB,
        }
    );
    assert_eq!(
        store.server_reserved("far", &[]).await.unwrap(),
        Resources {
            cpu_millis: 3000,
            memory_bytes: 6 * GB,
        }
    );
    assert_eq!(
        store.server_reserved("nowhere", &[]).await.unwrap(),
        Resources::default()
    );
    // Records left out by id (their admission is in flight).
    let except = [running.id.clone(), bobs.id.clone(), SandboxId::generate()];
    assert_eq!(
        store.server_reserved("local", &except).await.unwrap(),
        Resources {
            cpu_millis: 500,
            memory_bytes: GB,
        }
    );
    assert_eq!(
        store.account_usage(&alice.id, &except).await.unwrap(),
        usage(4, 500 + 3000, 1 + 6, 5 + 20 + 1 + 7)
    );

    // The columns follow every write: a resize, a start, a stop, the end
    // of an operation, a purge.
    let alice_scope = stockade_core::Scope::account(alice.id.clone());
    let mut resized = store.get_sandbox(&alice_scope, &running.id).await.unwrap();
    resized.spec.cpu_cores = 3.0;
    resized.spec.memory_gb = 6.0;
    let resized = store.update_sandbox(&resized).await.unwrap();
    let mut started = stopped.clone();
    started.mark_running(Utc::now());
    let started = store.update_sandbox(&started).await.unwrap();
    assert_eq!(
        store.account_usage(&alice.id, &[]).await.unwrap(),
        usage(
            5,
            3000 + 500 + 2000 + 3000,
            6 + 1 + 4 + 6,
            10 + 5 + 20 + 1 + 7
        )
    );
    let mut stopped_again = started.clone();
    stopped_again.mark_stopped(Utc::now(), None);
    store.update_sandbox(&stopped_again).await.unwrap();
    let mut made = store
        .get_sandbox(&alice_scope, &provisioning.id)
        .await
        .unwrap();
    made.mark_running(Utc::now());
    store
        .finish_operation(&op.id, "test", stockade_store::SandboxWrite::Update(&made))
        .await
        .unwrap();
    store.purge_sandbox(&broken.id).await.unwrap();
    store
        .soft_delete_sandbox(&resized.id, Utc::now())
        .await
        .unwrap();
    assert_usage(&*store, &alice.id, usage(3, 500 + 3000, 1 + 6, 5 + 20 + 7)).await;
    assert_eq!(
        store.server_reserved("local", &[]).await.unwrap(),
        Resources {
            cpu_millis: 500 + 250,
            memory_bytes: 2 * GB,
        }
    );
}

common::store_tests!(
    memory,
    2,
    sqlite_snapshot_usage,
    postgres_snapshot_usage,
    |store| snapshot_usage(store).await
);

/// What a snapshot quota counts: user snapshots not deleted (being captured
/// ones too) with their workspace and image archives; fork snapshots,
/// deleted ones and another account's never.
async fn snapshot_usage(store: Arc<dyn Store>) {
    let alice = store.create_account("alice", false).await.unwrap();
    let bob = store.create_account("bob", false).await.unwrap();
    assert_eq!(store.snapshot_usage(&alice.id, None).await.unwrap(), (0, 0));
    let sb = SandboxId::generate();
    let now = Utc::now().trunc_subsecs(6);
    let snap = |account: &AccountId, kind: SnapshotKind, ws: Option<u64>, img: Option<u64>| {
        let mut s = Snapshot::new(account.clone(), sb.clone(), None, kind, now);
        s.workspace_bytes = ws;
        s.image_bytes = img;
        s
    };
    let mut ready = snap(&alice.id, SnapshotKind::User, Some(3 * GB), Some(2 * GB));
    ready.status = SnapshotStatus::Ready;
    let capturing = snap(&alice.id, SnapshotKind::User, None, None);
    let older = snap(&alice.id, SnapshotKind::User, Some(100), None);
    let mut deleted = snap(&alice.id, SnapshotKind::User, Some(GB), Some(GB));
    let fork = snap(&alice.id, SnapshotKind::Fork, Some(7), Some(7));
    let bobs = snap(&bob.id, SnapshotKind::User, Some(GB), Some(GB));
    for s in [&ready, &capturing, &older, &deleted, &fork, &bobs] {
        store.insert_snapshot(s).await.unwrap();
    }
    // Read back with the image's size.
    let scope = stockade_core::Scope::account(alice.id.clone());
    assert_eq!(store.get_snapshot(&scope, &ready.id).await.unwrap(), ready);
    assert_eq!(
        store.snapshot_usage(&alice.id, None).await.unwrap(),
        (4, 5 * GB + 100 + 2 * GB)
    );
    deleted.status = SnapshotStatus::Deleting;
    deleted.deleted_at = Some(now);
    store.update_snapshot(&deleted).await.unwrap();
    assert_eq!(
        store.snapshot_usage(&alice.id, None).await.unwrap(),
        (3, 5 * GB + 100)
    );
    assert_eq!(
        store
            .snapshot_usage(&alice.id, Some(&ready.id))
            .await
            .unwrap(),
        (2, 100)
    );
    // The sizes a capture records as it goes are counted.
    let mut capturing = capturing;
    capturing.workspace_bytes = Some(10);
    capturing.image_bytes = Some(20);
    store.update_snapshot(&capturing).await.unwrap();
    assert_eq!(
        store.snapshot_usage(&alice.id, None).await.unwrap(),
        (3, 5 * GB + 130)
    );
    assert_eq!(
        store.snapshot_usage(&bob.id, None).await.unwrap(),
        (1, 2 * GB)
    );
}

common::store_tests!(
    memory,
    2,
    sqlite_shared_volume_usage,
    postgres_shared_volume_usage,
    |store| shared_volume_usage(store).await
);

common::store_tests!(
    pair "vq.db", 4, sqlite_volume_creates_race_for_the_last_place,
    postgres_volume_creates_race_for_the_last_place,
    |a, b| volume_race(a, b).await
);

/// A READY volume of `account` named `name` of `size_gb`.
fn shared_volume(account: &AccountId, name: &str, size_gb: Option<u32>) -> SharedVolume {
    SharedVolume {
        id: SharedVolumeId::generate(),
        account_id: account.clone(),
        name: name.to_owned(),
        server: "local".to_owned(),
        size_gb,
        labels: Default::default(),
        status: SharedVolumeStatus::Ready,
        created_at: Utc::now().trunc_subsecs(6),
        deleted_at: None,
        moving_to: None,
        moving_since: None,
        moved_from: None,
    }
}

fn volumes_used(volumes: u64, volume_gb: u64) -> SharedVolumeUsage {
    SharedVolumeUsage { volumes, volume_gb }
}

/// What a volume quota counts: volumes not deleted (being created or
/// deleted ones too) with their declared sizes, never another account's;
/// an insert past a limit is refused with nothing written.
async fn shared_volume_usage(store: Arc<dyn Store>) {
    let alice = store.create_account("alice", false).await.unwrap();
    let bob = store.create_account("bob", false).await.unwrap();
    let unlimited = Quota::unlimited();
    assert_eq!(
        store.shared_volume_usage(&alice.id).await.unwrap(),
        volumes_used(0, 0)
    );
    let sized = shared_volume(&alice.id, "sized", Some(5));
    let no_size = shared_volume(&alice.id, "unsized", None);
    let mut creating = shared_volume(&alice.id, "creating", Some(2));
    creating.status = SharedVolumeStatus::Creating;
    let doomed = shared_volume(&alice.id, "doomed", Some(7));
    let bobs = shared_volume(&bob.id, "bobs", Some(11));
    for v in [&sized, &no_size, &creating, &doomed, &bobs] {
        store
            .insert_shared_volume(v, &unlimited)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        store.shared_volume_usage(&alice.id).await.unwrap(),
        volumes_used(4, 14)
    );
    // Being deleted counts; deleted does not.
    store.begin_shared_volume_delete(&doomed.id).await.unwrap();
    assert_eq!(
        store.shared_volume_usage(&alice.id).await.unwrap(),
        volumes_used(4, 14)
    );
    store.finish_shared_volume_delete(&doomed.id).await.unwrap();
    assert_eq!(
        store.shared_volume_usage(&alice.id).await.unwrap(),
        volumes_used(3, 7)
    );
    assert_eq!(
        store.shared_volume_usage(&bob.id).await.unwrap(),
        volumes_used(1, 11)
    );

    // The limits: 4 volumes of 10 GB together.
    let quota = Quota {
        volumes: Some(4),
        volume_gb: Some(10),
        ..Quota::unlimited()
    };
    let too_big = shared_volume(&alice.id, "too-big", Some(4));
    let refused = store
        .insert_shared_volume(&too_big, &quota)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "account quota exceeded: 7 of 10 GB in volumes, 4 GB more requested"
    );
    common::assert_not_found(store.get_shared_volume(&too_big.id).await);
    let fits = shared_volume(&alice.id, "fits", Some(3));
    store
        .insert_shared_volume(&fits, &quota)
        .await
        .unwrap()
        .unwrap();
    let fifth = shared_volume(&alice.id, "fifth", Some(1));
    let refused = store
        .insert_shared_volume(&fifth, &quota)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        refused,
        StoredQuotaExceeded::Count {
            what: "volumes",
            used: 4,
            limit: 4
        }
    );
    common::assert_not_found(store.get_shared_volume(&fifth.id).await);
    // Bob's volumes are his own.
    store
        .insert_shared_volume(&shared_volume(&bob.id, "more", Some(10)), &quota)
        .await
        .unwrap()
        .unwrap_err();
    store
        .insert_shared_volume(
            &shared_volume(&bob.id, "fits", Some(10)),
            &Quota {
                volume_gb: Some(21),
                ..quota
            },
        )
        .await
        .unwrap()
        .unwrap();
    // A taken name is still a conflict, and writes nothing.
    let err = store
        .insert_shared_volume(&shared_volume(&bob.id, "fits", Some(1)), &unlimited)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(
        store.shared_volume_usage(&bob.id).await.unwrap(),
        volumes_used(2, 21)
    );
}

/// Many creates of one account race from two pools for the last places
/// of its quota: exactly as many win as fit, by count and by size, and the
/// sums show exactly the winners.
async fn volume_race(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let account = a.create_account("racer", false).await.unwrap().id;
    let quota = Quota {
        volumes: Some(5),
        volume_gb: Some(100),
        ..Quota::unlimited()
    };
    // One is there already: four places by count.
    a.insert_shared_volume(&shared_volume(&account, "first", Some(1)), &quota)
        .await
        .unwrap()
        .unwrap();
    let wins = race_inserts(&a, &b, &account, &quota, "n", 1, 12).await;
    assert_eq!(wins, 4, "by count");
    assert_eq!(
        a.shared_volume_usage(&account).await.unwrap(),
        volumes_used(5, 5)
    );

    // By size: 10 GB left for creates of 3 GB each, so three win.
    let other = b.create_account("sizer", false).await.unwrap().id;
    let quota = Quota {
        volumes: None,
        volume_gb: Some(10),
        ..Quota::unlimited()
    };
    let wins = race_inserts(&a, &b, &other, &quota, "s", 3, 10).await;
    assert_eq!(wins, 3, "by size");
    assert_eq!(
        b.shared_volume_usage(&other).await.unwrap(),
        volumes_used(3, 9)
    );
}

/// Inserts `n` volumes of `size_gb` for `account` at once, alternating
/// between the two stores; how many went in. Every refusal is the quota's.
async fn race_inserts(
    a: &Arc<dyn Store>,
    b: &Arc<dyn Store>,
    account: &AccountId,
    quota: &Quota,
    prefix: &str,
    size_gb: u32,
    n: usize,
) -> usize {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let v = shared_volume(account, &format!("{prefix}{i}"), Some(size_gb));
            let quota = *quota;
            tokio::spawn(async move { store.insert_shared_volume(&v, &quota).await })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(Ok(())) => wins += 1,
            Ok(Err(_refused)) => {}
            Err(e) => panic!("an insert failed: {e:?}"),
        }
    }
    wins
}

/// This crate's directory as `cargo test` says when it runs the test: a
/// test binary that another checkout sharing the target directory built
/// would otherwise look in that checkout.
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    )
}
