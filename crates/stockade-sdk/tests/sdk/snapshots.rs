//! Snapshots, forks, and creates from a snapshot, an upload, a tarball or a
//! git repository.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_sdk::{CreateParams, Error, Sandbox, Snapshot, Source};

use crate::helpers::{server, tar_gz};

#[tokio::test(flavor = "multi_thread")]
async fn snapshots_and_forks_carry_the_filesystem() {
    let s = server().await;
    let c = &s.client;
    let sb = Sandbox::create(c, CreateParams::new().name("origin").env("E", "1"))
        .await
        .unwrap();
    sb.write_file("state.txt", "v1\n").await.unwrap();
    sb.run_command("echo rootfs > /etc/marker").await.unwrap();

    let snap = sb.snapshot(Some("first")).await.unwrap();
    assert_eq!(snap.name(), "first");
    assert_eq!(snap.info().status, "READY");
    assert_eq!(snap.info().source_sandbox_id, sb.id());
    assert_eq!(sb.snapshots().await.unwrap()[0].id(), snap.id());
    let listed: Vec<String> = Snapshot::list(c)
        .await
        .unwrap()
        .iter()
        .map(|s| s.id().to_owned())
        .collect();
    assert_eq!(listed, [snap.id()]);
    assert_eq!(Snapshot::get(c, snap.id()).await.unwrap().name(), "first");
    let unnamed = sb.snapshot(None).await.unwrap();
    assert_eq!(unnamed.name(), unnamed.id());

    // A fork: same files and settings, a life of its own.
    let fork = sb.fork(Some("forked")).await.unwrap();
    assert_eq!(fork.status(), "RUNNING");
    assert_eq!(fork.name(), "forked");
    assert_eq!(
        fork.info().environment_vars.get("E").map(String::as_str),
        Some("1")
    );
    assert_eq!(fork.read_file("state.txt").await.unwrap(), b"v1\n");
    assert_eq!(
        fork.run_command("cat /etc/marker").await.unwrap().stdout,
        "rootfs\n"
    );
    fork.write_file("state.txt", "fork\n").await.unwrap();
    assert_eq!(sb.read_file("state.txt").await.unwrap(), b"v1\n");
    assert_eq!(sb.status(), "RUNNING");

    // Later changes are not in the snapshot.
    sb.write_file("state.txt", "v2\n").await.unwrap();
    let restored = snap
        .create_sandbox(CreateParams::new().name("restored"))
        .await
        .unwrap();
    assert_eq!(restored.read_file("state.txt").await.unwrap(), b"v1\n");
    let by_source = Sandbox::create(
        c,
        CreateParams::new()
            .name("by-source")
            .source(Source::Snapshot {
                id: snap.id().to_owned(),
            }),
    )
    .await
    .unwrap();
    assert_eq!(
        by_source
            .run_command("cat /etc/marker")
            .await
            .unwrap()
            .stdout,
        "rootfs\n"
    );

    let deleted = snap.delete().await.unwrap();
    assert!(
        ["DELETING", "DELETED"].contains(&deleted.status.as_str()),
        "{}",
        deleted.status
    );
    let err = Snapshot::get(c, snap.id()).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = Sandbox::create(
        c,
        CreateParams::new().source(Source::Snapshot {
            id: snap.id().to_owned(),
        }),
    )
    .await
    .unwrap_err();
    assert!(err.status().is_some_and(|s| s >= 400), "{err}");
    let err = sb.fork(Some("forked")).await.unwrap_err();
    assert!(err.is_conflict(), "the name is taken: {err}");
}

/// A tiny HTTP server on 127.0.0.1 serving fixed files.
async fn file_server(files: HashMap<&'static str, Vec<u8>>) -> String {
    use axum::extract::Path as AxPath;
    let files = Arc::new(files);
    let app = axum::Router::new().route(
        "/{name}",
        axum::routing::get(move |AxPath(name): AxPath<String>| {
            let files = files.clone();
            async move {
                match files.get(name.as_str()) {
                    Some(b) => (axum::http::StatusCode::OK, b.clone()),
                    None => (axum::http::StatusCode::NOT_FOUND, b"no such file".to_vec()),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// `git daemon` serving one repository with a `main` branch and a tag `v1`.
struct GitDaemon {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn git_daemon() -> GitDaemon {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("project");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    git(&repo, &["config", "user.name", "t"]);
    std::fs::write(repo.join("README.md"), "tagged\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "one"]);
    git(&repo, &["tag", "v1"]);
    std::fs::write(repo.join("README.md"), "main\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "two"]);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new("git")
        .args([
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
            &format!("--base-path={}", dir.path().display()),
            &dir.path().display().to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("git daemon");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "git daemon did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    GitDaemon {
        child,
        url: format!("git://127.0.0.1:{port}/project"),
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sources_fill_the_workspace_before_create_returns() {
    let s = server().await;
    let c = &s.client;

    let archive = tar_gz(&[("src/app.txt", b"uploaded\n", 0o644)]);
    let up = c.upload(archive.clone()).await.unwrap();
    assert_eq!(up.bytes, archive.len() as u64);
    let sb = Sandbox::create(
        c,
        CreateParams::new().name("uploaded").source(Source::Upload {
            id: up.upload_id.clone(),
        }),
    )
    .await
    .unwrap();
    assert_eq!(sb.read_file("src/app.txt").await.unwrap(), b"uploaded\n");
    let err = Sandbox::create(
        c,
        CreateParams::new().source(Source::Upload { id: up.upload_id }),
    )
    .await
    .unwrap_err();
    assert!(
        err.status().is_some_and(|s| s >= 400),
        "an upload is used once: {err}"
    );

    let base = file_server(HashMap::from([(
        "site.tar.gz",
        tar_gz(&[("index.html", b"<h1>hi</h1>", 0o644)]),
    )]))
    .await;
    let sb = Sandbox::create(
        c,
        CreateParams::new().name("tarball").source(Source::Tarball {
            url: format!("{base}/site.tar.gz"),
        }),
    )
    .await
    .unwrap();
    assert_eq!(sb.read_file("index.html").await.unwrap(), b"<h1>hi</h1>");
    let err = Sandbox::create(
        c,
        CreateParams::new().name("missing").source(Source::Tarball {
            url: format!("{base}/missing.tar.gz"),
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Some("source_failed"), "{err}");

    let daemon = git_daemon().await;
    let sb = Sandbox::create(
        c,
        CreateParams::new().name("git-main").source(Source::Git {
            url: daemon.url.clone(),
            git_ref: None,
        }),
    )
    .await
    .unwrap();
    assert_eq!(sb.read_file("README.md").await.unwrap(), b"main\n");
    let sb = Sandbox::create(
        c,
        CreateParams::new().name("git-tag").source(Source::Git {
            url: daemon.url.clone(),
            git_ref: Some("v1".into()),
        }),
    )
    .await
    .unwrap();
    assert_eq!(sb.read_file("README.md").await.unwrap(), b"tagged\n");
    let err = Sandbox::create(
        c,
        CreateParams::new().source(Source::Git {
            url: "ftp://example.com/x".into(),
            git_ref: None,
        }),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Api { status: 400, .. }), "{err}");
    assert_eq!(s.containers(), 4, "failed creates left nothing behind");
}
