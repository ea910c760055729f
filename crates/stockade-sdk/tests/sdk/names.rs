//! Names wherever an id is accepted: a sandbox name finds the live
//! sandbox first, else the latest terminated one; snapshot names find the
//! newest snapshot with them; the server's default image when it says.

use stockade_sdk::{CreateParams, Sandbox, Snapshot};

use crate::helpers::server;

#[tokio::test(flavor = "multi_thread")]
async fn names_reach_live_then_terminated_sandboxes_and_snapshots() {
    let s = server().await;
    let c = &s.client;

    let first = s.create(CreateParams::new().name("nb")).await;
    let snap_a = first.snapshot(Some("clean")).await.unwrap();
    first.delete().await.unwrap();

    // Only a terminated one has the name: find reaches it, the live-only
    // lookups do not (get_or_create must create anew).
    let found = Sandbox::find(c, "nb").await.unwrap();
    assert_eq!(
        (found.id(), found.status().as_str()),
        (first.id(), "TERMINATED")
    );
    assert!(Sandbox::find_live(c, "nb")
        .await
        .unwrap_err()
        .is_not_found());
    assert!(Sandbox::get(c, "nb").await.unwrap_err().is_not_found());
    let second = Sandbox::get_or_create(c, CreateParams::new().name("nb"), |_| async { Ok(()) })
        .await
        .unwrap();
    assert_ne!(
        second.id(),
        first.id(),
        "a new sandbox, not the terminated one"
    );
    assert_eq!(second.status(), "RUNNING");

    // The live one first.
    assert_eq!(Sandbox::find(c, "nb").await.unwrap().id(), second.id());
    // Then, once it is gone too, the most recently terminated one.
    second.delete().await.unwrap();
    let found = Sandbox::find(c, "nb").await.unwrap();
    assert_eq!(
        (found.id(), found.status().as_str()),
        (second.id(), "TERMINATED")
    );
    let err = Sandbox::find(c, "never-was").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");

    // Snapshots by name: the newest of a shared name; `named` has them all.
    let third = Sandbox::create(c, CreateParams::new().name("nb3"))
        .await
        .unwrap();
    let snap_b = third.snapshot(Some("clean")).await.unwrap();
    assert_eq!(Snapshot::find(c, "clean").await.unwrap().id(), snap_b.id());
    assert_eq!(
        Snapshot::find(c, snap_a.id()).await.unwrap().id(),
        snap_a.id()
    );
    let named: Vec<String> = Snapshot::named(c, "clean")
        .await
        .unwrap()
        .iter()
        .map(|s| s.id().to_owned())
        .collect();
    assert_eq!(named, [snap_b.id(), snap_a.id()]);
    assert!(Snapshot::find(c, "dirty").await.unwrap_err().is_not_found());
    assert!(Snapshot::named(c, "dirty").await.unwrap().is_empty());

    // This server does not report its default image (yet): None, not an error.
    assert_eq!(c.default_image().await.unwrap(), None);
    third.delete().await.unwrap();
}
