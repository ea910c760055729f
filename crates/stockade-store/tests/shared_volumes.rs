//! Shared volumes in the store: names unique per account and free again
//! after a delete, mounts written with a sandbox's record and refused on a
//! volume being deleted, a delete refused while a live sandbox mounts the
//! volume; and of creates that mount a volume racing its delete from two
//! pools, never both win. Runs on SQLite and, when
//! `STOCKADE_TEST_DATABASE_URL` is set, on a fresh PostgreSQL database.

mod common;

use std::sync::Arc;

use chrono::{SubsecRound, Utc};
use stockade_core::spec::SpecInput;
use stockade_core::{
    AccountId, Defaults, MountInput, Quota, Sandbox, SandboxId, SandboxSpec, Scope, SharedVolume,
    SharedVolumeId, SharedVolumeStatus,
};
use stockade_store::{Store, StoreError};

common::store_tests!(file "v.db", 2, sqlite_volumes, postgres_volumes, |store| {
    story(store).await
});

common::store_tests!(
    pair "vrace.db", 4, sqlite_volume_delete_races_mount, postgres_volume_delete_races_mount,
    |a, b| race(a, b).await
);

/// No limits on an account's volumes.
fn unlimited() -> Quota {
    Quota::unlimited()
}

fn volume(account: &AccountId, name: &str) -> SharedVolume {
    SharedVolume {
        id: SharedVolumeId::generate(),
        account_id: account.clone(),
        name: name.to_owned(),
        server: "local".to_owned(),
        size_gb: Some(5),
        labels: [("team".to_owned(), "ml".to_owned())].into(),
        status: SharedVolumeStatus::Ready,
        created_at: Utc::now().trunc_subsecs(6),
        deleted_at: None,
        moving_to: None,
        moving_since: None,
        moved_from: None,
    }
}

/// A sandbox record of `account` mounting `volume` at `/data`.
fn mounting(account: &AccountId, volume: &SharedVolume, read_only: bool) -> Sandbox {
    let id = SandboxId::generate();
    let input = SpecInput {
        volume_mounts: Some(vec![MountInput {
            volume: volume.id.to_string(),
            path: "/data".to_owned(),
            read_only: Some(read_only),
        }]),
        ..SpecInput::default()
    };
    let mut spec = SandboxSpec::from_input(input, &id, &Defaults::default()).unwrap();
    spec.mounts[0].name = volume.name.clone();
    Sandbox::new(
        id,
        account.clone(),
        None,
        spec,
        "local".into(),
        Utc::now().trunc_subsecs(6),
    )
}

async fn story(s: Arc<dyn Store>) {
    let owner = AccountId::generate();
    let other = AccountId::generate();
    let scope = Scope::account(owner.clone());
    let v = volume(&owner, "data");
    s.insert_shared_volume(&v, &unlimited())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.get_shared_volume(&v.id).await.unwrap(), v);
    assert_eq!(s.shared_volume_by_name(&scope, "data").await.unwrap(), v);
    // The name is the account's: taken for it, free for another.
    match s
        .insert_shared_volume(&volume(&owner, "data"), &unlimited())
        .await
    {
        Err(StoreError::Conflict(m)) => assert!(m.contains("'data'"), "{m}"),
        other => panic!("a duplicate name: {other:?}"),
    }
    s.insert_shared_volume(&volume(&other, "data"), &unlimited())
        .await
        .unwrap()
        .unwrap();
    let listed = s.list_shared_volumes(&scope).await.unwrap();
    assert_eq!(listed, vec![v.clone()]);

    // A mount is written with its sandbox; only the owner's READY volume.
    let a = mounting(&owner, &v, false);
    let b = mounting(&owner, &v, true);
    s.insert_sandbox(&a).await.unwrap();
    s.insert_sandbox(&b).await.unwrap();
    let thief = mounting(&other, &v, false);
    assert!(matches!(
        s.insert_sandbox(&thief).await,
        Err(StoreError::Conflict(_))
    ));
    let mounts = s
        .mounts_of_volumes(std::slice::from_ref(&v.id))
        .await
        .unwrap();
    assert_eq!(mounts.len(), 2);
    assert!(mounts.iter().any(|m| m.sandbox_id == b.id && m.read_only));

    // Mounted: the delete changes nothing and names the users.
    let mut users = s.begin_shared_volume_delete(&v.id).await.unwrap();
    users.sort();
    let mut want = vec![a.id.clone(), b.id.clone()];
    want.sort();
    assert_eq!(users, want);
    assert_eq!(
        s.get_shared_volume(&v.id).await.unwrap().status,
        SharedVolumeStatus::Ready
    );
    // A deleted sandbox mounts nothing.
    for sb in [&a, &b] {
        s.soft_delete_sandbox(&sb.id, Utc::now()).await.unwrap();
    }
    assert!(s
        .mounts_of_volumes(std::slice::from_ref(&v.id))
        .await
        .unwrap()
        .is_empty());
    assert!(s
        .begin_shared_volume_delete(&v.id)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        s.get_shared_volume(&v.id).await.unwrap().status,
        SharedVolumeStatus::Deleting
    );
    assert_eq!(s.pending_shared_volumes().await.unwrap(), {
        let mut d = v.clone();
        d.status = SharedVolumeStatus::Deleting;
        vec![d]
    });
    // Nothing mounts a volume being deleted.
    assert!(matches!(
        s.insert_sandbox(&mounting(&owner, &v, false)).await,
        Err(StoreError::Conflict(_))
    ));
    s.finish_shared_volume_delete(&v.id).await.unwrap();
    assert!(s
        .get_shared_volume(&v.id)
        .await
        .unwrap()
        .deleted_at
        .is_some());
    common::assert_not_found(s.shared_volume_by_name(&scope, "data").await);
    common::assert_not_found(s.begin_shared_volume_delete(&v.id).await);
    assert!(s.pending_shared_volumes().await.unwrap().is_empty());
    // The name is free again.
    s.insert_shared_volume(&volume(&owner, "data"), &unlimited())
        .await
        .unwrap()
        .unwrap();

    // A move: MOVING (refused while mounted, nothing mounts it meanwhile),
    // then READY on the new host with the old one remembered until its
    // copy is gone; or given up, READY where it was.
    let m = volume(&owner, "moving");
    s.insert_shared_volume(&m, &unlimited())
        .await
        .unwrap()
        .unwrap();
    let user = mounting(&owner, &m, false);
    s.insert_sandbox(&user).await.unwrap();
    assert_eq!(
        s.begin_shared_volume_move(&m.id, "h2").await.unwrap(),
        vec![user.id.clone()]
    );
    s.soft_delete_sandbox(&user.id, Utc::now()).await.unwrap();
    assert!(s
        .begin_shared_volume_move(&m.id, "h2")
        .await
        .unwrap()
        .is_empty());
    let moving = s.get_shared_volume(&m.id).await.unwrap();
    assert_eq!(moving.status, SharedVolumeStatus::Moving);
    assert_eq!(moving.moving_to.as_deref(), Some("h2"));
    assert!(moving.moving_since.is_some());
    assert!(matches!(
        s.insert_sandbox(&mounting(&owner, &m, false)).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.begin_shared_volume_delete(&m.id).await,
        Err(StoreError::Conflict(_))
    ));
    s.finish_shared_volume_move(&m.id).await.unwrap();
    let moved = s.get_shared_volume(&m.id).await.unwrap();
    assert_eq!(
        (
            moved.status,
            moved.server.as_str(),
            moved.moved_from.as_deref(),
            moved.moving_to
        ),
        (SharedVolumeStatus::Ready, "h2", Some("local"), None)
    );
    assert!(s
        .pending_shared_volumes()
        .await
        .unwrap()
        .iter()
        .any(|v| v.id == m.id));
    s.forget_moved_from(&m.id).await.unwrap();
    assert!(s.pending_shared_volumes().await.unwrap().is_empty());
    assert!(s
        .begin_shared_volume_move(&m.id, "h3")
        .await
        .unwrap()
        .is_empty());
    s.abort_shared_volume_move(&m.id).await.unwrap();
    let back = s.get_shared_volume(&m.id).await.unwrap();
    assert_eq!(
        (back.status, back.server.as_str()),
        (SharedVolumeStatus::Ready, "h2")
    );
    assert!(back.moving_to.is_none() && back.moving_since.is_none());
}

/// A create mounting a volume and the volume's delete, from two pools at
/// once, many times: either the sandbox holds a mount of a READY volume
/// (and the delete named it), or the delete won and the create was
/// refused; never a mount of a volume being deleted.
async fn race(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let owner = AccountId::generate();
    for _ in 0..16 {
        let v = volume(&owner, &format!("r-{}", SharedVolumeId::generate()));
        a.insert_shared_volume(&v, &unlimited())
            .await
            .unwrap()
            .unwrap();
        let sb = mounting(&owner, &v, false);
        let (created, deleted) = tokio::join!(
            {
                let a = a.clone();
                let sb = sb.clone();
                async move { a.insert_sandbox(&sb).await }
            },
            {
                let b = b.clone();
                let id = v.id.clone();
                async move { b.begin_shared_volume_delete(&id).await }
            }
        );
        let status = a.get_shared_volume(&v.id).await.unwrap().status;
        match (created, deleted) {
            (Ok(()), Ok(users)) => {
                assert_eq!(users, vec![sb.id.clone()], "the delete saw the mount");
                assert_eq!(status, SharedVolumeStatus::Ready);
            }
            (Err(StoreError::Conflict(_)), Ok(users)) => {
                assert!(users.is_empty());
                assert_eq!(status, SharedVolumeStatus::Deleting);
            }
            (c, d) => panic!("create {c:?}, delete {d:?}"),
        }
    }
}
