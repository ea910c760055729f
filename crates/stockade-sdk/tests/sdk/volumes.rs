//! Volumes: listing, orphans, removal and the confirmed cleanup.

use std::time::Duration;

use stockade_sdk::{CreateParams, DeleteOptions, Error};

use crate::helpers::server;

#[tokio::test(flavor = "multi_thread")]
async fn volumes_are_listed_and_orphans_removed_on_confirmation() {
    let s = server().await;
    let c = &s.client;
    let live = s.create(CreateParams::new().name("live")).await;
    let kept = s.create(CreateParams::new().name("kept")).await;
    kept.write_file("data.bin", vec![7u8; 2_000_000])
        .await
        .unwrap();
    kept.delete_with(DeleteOptions {
        preserve_volume: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let live_volume = format!("agent-sandbox-{}", live.id());
    let kept_volume = format!("agent-sandbox-{}", kept.id());

    let all = c.volumes().await.unwrap();
    let mut names: Vec<&str> = all.volumes.iter().map(|v| v.name.as_str()).collect();
    names.sort();
    let mut expected = [live_volume.as_str(), kept_volume.as_str()];
    expected.sort();
    assert_eq!(names, expected);
    assert_eq!(all.total, 2);
    let one = c.volume(&live_volume).await.unwrap();
    assert!(one.in_use && !one.orphaned);
    let orphans = c.orphaned_volumes().await.unwrap();
    assert_eq!(orphans.volumes.len(), 1);
    assert_eq!(orphans.volumes[0].name, kept_volume);
    assert_eq!(orphans.volumes[0].sandbox_id, kept.id());

    let err = c.remove_volume(&live_volume).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(err.to_string().contains("in use"), "{err}");
    let err = c.prune_volumes(false).await.unwrap_err();
    assert!(matches!(err, Error::InvalidParams { .. }), "{err}");
    assert_eq!(s.volumes().len(), 2, "nothing removed without confirmation");

    let done = c.prune_volumes(true).await.unwrap();
    assert_eq!(done.removed.len(), 1);
    assert_eq!(done.removed[0].name, kept_volume);
    assert!(done.failed.is_empty());
    assert!(
        done.freed_bytes >= 2_000_000,
        "the size is measured before removal: {}",
        done.freed_bytes
    );
    assert_eq!(s.volumes(), std::slice::from_ref(&live_volume));

    // One orphan at a time, too.
    live.stop_with(Some(Duration::from_secs(1))).await.unwrap();
    live.delete_with(DeleteOptions {
        preserve_volume: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let removed = c.remove_volume(&live_volume).await.unwrap();
    assert_eq!(removed.sandbox_id, live.id());
    assert!(s.volumes().is_empty());
    let err = c.volume(&live_volume).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
}
