//! Create, find, list, stop, resume, delete; get_or_create under races;
//! scoped use; idempotency keys; cancelled creates.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stockade_sdk::{CreateParams, Error, ListParams, Sandbox};

use crate::helpers::{eventually, server, TestServer};

#[tokio::test(flavor = "multi_thread")]
async fn create_find_list_stop_resume_delete() {
    let s = server().await;
    let c = &s.client;
    let sb = Sandbox::create(
        c,
        CreateParams::new()
            .name("sdk-demo")
            .vcpus(1.0)
            .env("A", "1")
            .tag("team", "core")
            .label("sdk")
            .port(8080)
            .timeout(Duration::from_secs(600)),
    )
    .await
    .unwrap();
    assert_eq!(sb.status(), "RUNNING");
    assert_eq!(sb.info().cpu_cores, 1.0);
    assert_eq!(sb.info().memory_gb, 2.0, "2048 MB per vCPU");
    assert_eq!(sb.info().timeout_minutes, 10.0);
    assert_eq!(sb.info().ports, vec![8080]);
    assert_eq!(sb.info().tags.get("team").map(String::as_str), Some("core"));

    // By id and by name.
    assert_eq!(Sandbox::find(c, sb.id()).await.unwrap().name(), "sdk-demo");
    assert_eq!(Sandbox::find(c, "sdk-demo").await.unwrap().id(), sb.id());
    let err = Sandbox::find(c, "nope").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");

    let page = Sandbox::list(
        c,
        ListParams {
            labels: vec!["sdk".into()],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(page.total, 1);
    assert_eq!(page.sandboxes[0].id(), sb.id());

    // get resumes a stopped sandbox.
    let stopped = sb.stop_with(Some(Duration::from_secs(1))).await.unwrap();
    assert_eq!(stopped.status(), "STOPPED");
    let resumed = Sandbox::get(c, "sdk-demo").await.unwrap();
    assert_eq!(resumed.status(), "RUNNING");

    resumed.delete().await.unwrap();
    let mut gone = Sandbox::find(c, sb.id()).await.unwrap();
    gone.refresh().await.unwrap();
    assert_eq!(gone.status(), "TERMINATED");
    assert_eq!(s.containers(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_are_checked_before_any_request() {
    let s = server().await;
    let mut p = CreateParams::new();
    for port in 1..=5 {
        p = p.port(port);
    }
    let err = Sandbox::create(&s.client, p).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidParams { field, .. } if field == "ports"),
        "{err}"
    );
    let mut p = CreateParams::new();
    for i in 0..6 {
        p = p.tag(format!("k{i}"), "v");
    }
    let err = Sandbox::create(&s.client, p).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidParams { field, .. } if field == "tags"),
        "{err}"
    );
    // The server checks too, and its message comes through.
    let err = Sandbox::create(&s.client, CreateParams::new().name("bad name"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert_eq!(err.code(), Some("validation_failed"));
    assert_eq!(s.containers(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn get_or_create_runs_on_create_once_under_20_concurrent_callers() {
    let s = server().await;
    let ran = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let c = s.client.clone();
        let ran = ran.clone();
        tasks.push(tokio::spawn(async move {
            Sandbox::get_or_create(&c, CreateParams::new().name("shared"), |_sb| async move {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        let sb = t.await.unwrap().unwrap();
        assert_eq!(sb.status(), "RUNNING");
        ids.push(sb.id().to_owned());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every caller got the same sandbox");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "on_create ran exactly once");
    assert_eq!(s.containers(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn scoped_use_stops_the_sandbox_on_return_error_and_panic() {
    let s = server().await;
    let c = s.client.clone();

    let id = Sandbox::scoped(&c, CreateParams::new().name("ok"), |sb| async move {
        assert_eq!(sb.status(), "RUNNING");
        Ok::<_, Error>(sb.id().to_owned())
    })
    .await
    .unwrap();
    assert_eq!(Sandbox::find(&c, &id).await.unwrap().status(), "STOPPED");

    let err = Sandbox::scoped(&c, CreateParams::new().name("err"), |_sb| async move {
        Err::<(), _>(Error::Config("the work failed".into()))
    })
    .await
    .unwrap_err();
    assert!(err.to_string().contains("the work failed"));
    assert_eq!(Sandbox::find(&c, "err").await.unwrap().status(), "STOPPED");

    let c2 = c.clone();
    let panicked = tokio::spawn(async move {
        Sandbox::scoped(&c2, CreateParams::new().name("boom"), |_sb| async move {
            if true {
                panic!("work panicked");
            }
            Ok::<(), Error>(())
        })
        .await
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    assert_eq!(Sandbox::find(&c, "boom").await.unwrap().status(), "STOPPED");
    assert_eq!(s.running_containers(), 0);

    // The guard: close() stops now; drop stops in the background.
    let guard = Sandbox::create(&c, CreateParams::new().name("guarded"))
        .await
        .unwrap()
        .into_guard();
    assert_eq!(guard.status(), "RUNNING");
    guard.close().await.unwrap();
    assert_eq!(
        Sandbox::find(&c, "guarded").await.unwrap().status(),
        "STOPPED"
    );
    {
        let _guard = Sandbox::create(&c, CreateParams::new().name("dropped"))
            .await
            .unwrap()
            .into_guard();
    }
    let c = &c;
    let stopped = eventually(100, || async move {
        Sandbox::find(c, "dropped").await.unwrap().status() == "STOPPED"
    })
    .await;
    assert!(stopped, "a dropped guard stops its sandbox");
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotency_key_returns_the_first_result() {
    let s = server().await;
    let c = &s.client;
    let params = CreateParams::new().name("once").idempotency_key("req-123");
    let first = Sandbox::create(c, params.clone()).await.unwrap();
    let again = Sandbox::create(c, params).await.unwrap();
    assert_eq!(first.id(), again.id());
    assert_eq!(s.containers(), 1);
    let err = Sandbox::create(
        c,
        CreateParams::new().name("other").idempotency_key("req-123"),
    )
    .await
    .unwrap_err();
    assert_eq!(err.status(), Some(422), "{err}");
    assert_eq!(err.code(), Some("idempotency_key_reused"));
    // Concurrent retries with one key: one sandbox.
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            Sandbox::create(
                &c,
                CreateParams::new()
                    .name("racer")
                    .idempotency_key("req-race"),
            )
            .await
            .map(|sb| sb.id().to_owned())
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap().unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1);
    assert_eq!(s.containers(), 2);
}

/// Waits until the server has nothing left of abandoned creates.
async fn settle(s: &TestServer, expect_containers: usize) {
    for _ in 0..300 {
        let page = Sandbox::list(
            &s.client,
            ListParams {
                per_page: Some(1000),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let provisioning = page
            .sandboxes
            .iter()
            .any(|sb| sb.status() == "PROVISIONING");
        if !provisioning
            && s.containers() == expect_containers
            && page.total as usize == expect_containers
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "abandoned creates were not rolled back: {} containers",
        s.containers()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_create_leaves_nothing_behind() {
    let s = server().await;
    let c = &s.client;
    let mut kept = 0;
    for (i, delay_ms) in [0u64, 5, 20, 50, 100, 150, 200, 300, 450, 700, 1000, 2000]
        .into_iter()
        .enumerate()
    {
        // Cancellation token.
        let token = stockade_sdk::CancellationToken::new();
        // Small, so that the creates that finish never fill the host's
        // memory (up to 24 of them may be running at once).
        let params = CreateParams::new()
            .name(format!("cancel-{i}"))
            .memory_gb(0.25)
            .cancel_token(token.clone());
        let t2 = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            t2.cancel();
        });
        match Sandbox::create(c, params).await {
            Ok(_) => kept += 1, // finished before the cancel: a real sandbox
            Err(Error::Cancelled) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
        // Dropping the future.
        match tokio::time::timeout(
            Duration::from_millis(delay_ms),
            Sandbox::create(
                c,
                CreateParams::new()
                    .name(format!("drop-{i}"))
                    .memory_gb(0.25),
            ),
        )
        .await
        {
            Ok(Ok(_)) => kept += 1,
            Ok(Err(e)) => panic!("unexpected error: {e}"),
            Err(_) => {}
        }
    }
    eprintln!("{kept} of 24 creates finished before their cancellation");
    settle(&s, kept).await;
    let page = Sandbox::list(
        &s.client,
        ListParams {
            is_active: Some(false),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(page.total, 0, "no terminated leftovers either");
    let volumes = std::process::Command::new("docker")
        .args([
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=io.stockade.instance-id={}", s.instance),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&volumes.stdout).lines().count(),
        kept,
        "one volume per kept sandbox"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_with_sync_uploads_the_workspace_first() {
    let s = server().await;
    let sb = s.create(CreateParams::new().name("synced")).await;
    sb.write_file("keep.bin", vec![1u8; 50_000]).await.unwrap();
    sb.delete_with(stockade_sdk::DeleteOptions {
        sync: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut gone = Sandbox::find(&s.client, sb.id()).await.unwrap();
    gone.refresh().await.unwrap();
    assert_eq!(gone.status(), "TERMINATED");
    let sync = &gone.info().metadata["s3_sync"];
    assert!(
        sync["bytes"].as_u64().unwrap_or(0) > 50_000,
        "the workspace archive was recorded: {sync}"
    );
    assert_eq!(s.containers(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_keeps_a_process_and_auto_resume_wakes_on_a_command() {
    let s = server().await;
    let c = &s.client;
    let mut sb = Sandbox::create(
        c,
        CreateParams::new()
            .name("sdk-nap")
            .on_timeout("pause")
            .auto_resume(true)
            .idle_timeout(Duration::from_secs(600)),
    )
    .await
    .unwrap();
    let lifecycle = &sb.info().lifecycle;
    assert_eq!(lifecycle.on_timeout, "pause");
    assert!(lifecycle.auto_resume);
    assert_eq!(lifecycle.idle_timeout_minutes, 10.0);
    let pid = sb
        .run_command("sleep 1000 >/dev/null 2>&1 & echo $!")
        .await
        .unwrap()
        .stdout
        .trim()
        .to_owned();
    sb.pause().await.unwrap();
    assert_eq!(sb.status(), "PAUSED");
    assert!(sb.info().paused_at.is_some());
    // Paused twice: the server's conflict, as an error.
    let err = sb.pause().await.unwrap_err();
    assert!(err.to_string().contains("already paused"), "{err}");
    // A command wakes it (auto-resume), and the process is still there.
    let out = sb
        .run_command(format!("kill -0 {pid} && echo same").as_str())
        .await
        .unwrap();
    assert_eq!(out.stdout.trim(), "same");
    sb.refresh().await.unwrap();
    assert_eq!(sb.status(), "RUNNING");
    sb.pause().await.unwrap();
    sb.resume().await.unwrap();
    assert_eq!(sb.status(), "RUNNING");
    sb.delete().await.unwrap();
}
