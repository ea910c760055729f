//! PATCH through `sandbox.update`.

use std::time::Duration;

use stockade_sdk::{CreateParams, Error, Sandbox, UpdateParams};

use crate::helpers::server;

#[tokio::test(flavor = "multi_thread")]
async fn updates_say_what_applies_now_and_what_next_start() {
    let s = server().await;
    let mut sb = Sandbox::create(
        &s.client,
        CreateParams::new()
            .name("upd")
            .label("old")
            .env("A", "1")
            .cpu_cores(1.0)
            .memory_gb(1.0),
    )
    .await
    .unwrap();

    let done = sb
        .update(
            UpdateParams::new()
                .timeout(Duration::from_secs(1800))
                .labels(["new", "more"])
                .tag("owner", "sdk")
                .env("A", "2")
                .cpu_cores(0.5)
                .memory_gb(0.5),
        )
        .await
        .unwrap();
    for field in ["labels", "tags", "timeoutMinutes", "cpuCores", "memoryGB"] {
        assert!(
            done.applied.now.iter().any(|f| f == field),
            "{field} applies now: {:?}",
            done.applied
        );
    }
    assert!(
        done.applied
            .next_start
            .iter()
            .any(|f| f == "environmentVars"),
        "{:?}",
        done.applied
    );
    assert!(!done.notes.is_empty());
    // The handle is refreshed.
    assert_eq!(sb.info().labels, ["new", "more"]);
    assert_eq!(sb.info().timeout_minutes, 30.0);
    assert_eq!(sb.info().cpu_cores, 0.5);
    // Commands see the new environment at once; the cgroup has the new limit.
    assert_eq!(sb.run_command("echo $A").await.unwrap().stdout, "2\n");
    let limit = sb
        .run_command("cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
        .await
        .unwrap()
        .stdout;
    assert_eq!(limit.trim(), (512u64 * 1024 * 1024).to_string());

    // A stopped sandbox takes limits from its next start.
    let mut stopped = sb.stop_with(Some(Duration::from_secs(1))).await.unwrap();
    let done = stopped
        .update(UpdateParams::new().vcpus(1.0).name("renamed"))
        .await
        .unwrap();
    assert!(done.applied.next_start.iter().any(|f| f == "cpuCores"));
    assert!(done.applied.now.iter().any(|f| f == "name"));
    assert_eq!(stopped.name(), "renamed");
    assert_eq!(stopped.info().memory_gb, 2.0);

    let err = stopped.update(UpdateParams::new()).await.unwrap_err();
    assert!(matches!(err, Error::InvalidParams { .. }), "{err}");
    let err = stopped
        .update(UpdateParams::new().cpu_cores(-1.0))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
}
