//! The snapshot records on both backends: SQLite always, PostgreSQL
//! when `STOCKADE_TEST_DATABASE_URL` is set (a fresh database per run).

mod common;

use std::sync::Arc;

use chrono::{Duration, SubsecRound, Utc};

use stockade_core::{
    AccountId, SandboxId, Scope, Snapshot, SnapshotId, SnapshotKind, SnapshotStatus,
};
use stockade_store::Store;

#[tokio::test]
async fn sqlite_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let store = stockade_store::connect(&url).await.unwrap();
    snapshot_story(store).await;
}

#[tokio::test]
async fn postgres_snapshots() {
    common::on_postgres("postgres_snapshots", |test_url| async move {
        let store = stockade_store::connect(&test_url).await.unwrap();
        snapshot_story(store).await;
    })
    .await;
}

fn snap(
    account: &AccountId,
    source: &SandboxId,
    name: &str,
    kind: SnapshotKind,
    age_secs: i64,
) -> Snapshot {
    let at = (Utc::now() - Duration::seconds(age_secs)).trunc_subsecs(6);
    Snapshot::new(account.clone(), source.clone(), Some(name.into()), kind, at)
}

async fn snapshot_story(store: Arc<dyn Store>) {
    let alice = Scope::account(AccountId::generate());
    let bob = Scope::account(AccountId::generate());
    let sb1 = SandboxId::generate();
    let sb2 = SandboxId::generate();

    // Insert and read back exactly.
    let mut a1 = snap(&alice.account_id, &sb1, "first", SnapshotKind::User, 30);
    store.insert_snapshot(&a1).await.unwrap();
    assert_eq!(store.get_snapshot(&alice, &a1.id).await.unwrap(), a1);

    // Owned by the account: another account is Forbidden, unknown NotFound.
    common::assert_forbidden(store.get_snapshot(&bob, &a1.id).await);
    common::assert_not_found(store.get_snapshot(&alice, &SnapshotId::generate()).await);

    // Ready: blob key and size written; huge sizes survive.
    a1.status = SnapshotStatus::Ready;
    a1.blob_key = Some(Snapshot::blob_key_for(&a1.id));
    a1.workspace_bytes = Some(5_000_000_000);
    store.update_snapshot(&a1).await.unwrap();
    assert_eq!(store.get_snapshot(&alice, &a1.id).await.unwrap(), a1);

    let mut a2 = snap(&alice.account_id, &sb2, "second", SnapshotKind::User, 20);
    a2.status = SnapshotStatus::Ready;
    store.insert_snapshot(&a2).await.unwrap();
    let fork = snap(&alice.account_id, &sb1, "fork", SnapshotKind::Fork, 10);
    store.insert_snapshot(&fork).await.unwrap();
    let b1 = snap(&bob.account_id, &sb1, "bobs", SnapshotKind::User, 5);
    store.insert_snapshot(&b1).await.unwrap();

    // Lists: own user snapshots only, newest first; by source sandbox.
    let ids = |v: Vec<Snapshot>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_snapshots(&alice, None).await.unwrap()),
        vec![a2.id.clone(), a1.id.clone()]
    );
    assert_eq!(
        ids(store.list_snapshots(&alice, Some(&sb1)).await.unwrap()),
        vec![a1.id.clone()]
    );
    assert_eq!(
        ids(store.list_snapshots(&bob, None).await.unwrap()),
        vec![b1.id.clone()]
    );

    // Deleting: gone from lists, still readable, pending for collection.
    a1.status = SnapshotStatus::Deleting;
    a1.deleted_at = Some(Utc::now().trunc_subsecs(6));
    store.update_snapshot(&a1).await.unwrap();
    assert_eq!(
        ids(store.list_snapshots(&alice, None).await.unwrap()),
        vec![a2.id.clone()]
    );
    assert_eq!(store.get_snapshot(&alice, &a1.id).await.unwrap(), a1);

    // Pending: DELETING ones and CREATING ones older than the cut-off.
    let pending = ids(store
        .pending_snapshots(Utc::now() - Duration::seconds(8))
        .await
        .unwrap());
    assert!(pending.contains(&a1.id), "{pending:?}");
    assert!(pending.contains(&fork.id), "{pending:?}"); // CREATING, 10 s old
    assert!(!pending.contains(&b1.id), "{pending:?}"); // CREATING, 5 s old
    assert!(!pending.contains(&a2.id), "{pending:?}"); // READY

    // Purge removes the record for good.
    store.purge_snapshot(&fork.id).await.unwrap();
    common::assert_not_found(store.get_snapshot(&alice, &fork.id).await);
    common::assert_not_found(store.purge_snapshot(&fork.id).await);
    common::assert_not_found(
        store
            .update_snapshot(&snap(
                &alice.account_id,
                &sb1,
                "never saved",
                SnapshotKind::User,
                0,
            ))
            .await,
    );
}
