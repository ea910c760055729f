//! Create sources against real Docker: a git repository served by
//! `git daemon` on 127.0.0.1, tarballs from a local HTTP server, uploaded
//! archives. Contents arrive byte for byte before create returns; a bad
//! URL, unreachable host, failing clone or corrupt archive is a clear error
//! that leaves no container, volume or record.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;
use crate::snapshots::nothing_left_beyond;

fn git(dir: &Path, args: &[&str]) -> String {
    let stdout = run_ok(
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir),
        &format!("git {args:?}"),
    );
    String::from_utf8_lossy(&stdout).trim().to_owned()
}

fn md5_of(path: &Path) -> String {
    let out = Command::new("md5sum").arg(path).output().expect("md5sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// `git daemon` serving one repository on 127.0.0.1; stopped on drop.
struct GitServer {
    _daemon: KillOnDrop,
    url: String,
    repo: std::path::PathBuf,
    first_commit: String,
    _dir: tempfile::TempDir,
}

/// An empty repository `name` on branch `main` in a new temporary
/// directory: the directory and the repository's path.
fn new_repo(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join(name);
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    git(&repo, &["config", "user.name", "t"]);
    (dir, repo)
}

async fn git_server() -> GitServer {
    let (dir, repo) = new_repo("project");
    std::fs::write(repo.join("README.md"), "hello from git\n").unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(repo.join("data.bin"), &data).unwrap();
    std::fs::create_dir_all(repo.join("scripts/sub")).unwrap();
    std::fs::write(repo.join("scripts/run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::write(repo.join("scripts/sub/nested.txt"), "nested\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            repo.join("scripts/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "one"]);
    let first_commit = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["tag", "v1"]);
    std::fs::write(repo.join("README.md"), "second version\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "two"]);
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(repo.join("feature.txt"), "on the branch\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "feature"]);
    git(&repo, &["checkout", "-q", "main"]);
    git_daemon(dir, repo, first_commit).await
}

/// Serves the repositories in `dir` with `git daemon`; `repo` is the one
/// the server's URL names.
async fn git_daemon(
    dir: tempfile::TempDir,
    repo: std::path::PathBuf,
    first_commit: String,
) -> GitServer {
    let port = free_port();
    let child = Command::new("git")
        .args([
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--informative-errors",
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
    let name = repo.file_name().unwrap().to_string_lossy().into_owned();
    GitServer {
        _daemon: KillOnDrop(child),
        url: format!("git://127.0.0.1:{port}/{name}"),
        repo,
        first_commit,
        _dir: dir,
    }
}

/// A tiny HTTP server on 127.0.0.1 serving fixed files (404 otherwise).
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

fn tar_gz(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data, mode) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_cksum();
        b.append_data(&mut h, path, *data).unwrap();
    }
    let tar = b.into_inner().unwrap();
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(&tar).unwrap();
    e.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn git_sources_are_cloned_before_create_returns() {
    let server = git_server().await;
    let app = spawn_app().await;
    let token = app.new_account("git").await;

    // Default branch, latest commit; the main process sees the clone at its start.
    let id = app.create_id(&token,
            json!({
                "name": "cloned",
                "source": {"type": "git", "url": server.url},
                "startCommand": "cp /workspace/README.md /tmp/at-start; trap 'exit 0' TERM; while true; do sleep 1; done",
            })).await;
    assert_eq!(sh_in(&id, "cat /tmp/at-start"), "second version");
    let in_box = sh_in(&id, "md5sum /workspace/data.bin");
    assert!(
        in_box.starts_with(&md5_of(&server.repo.join("data.bin"))),
        "{in_box}"
    );
    assert_eq!(
        sh_in(
            &id,
            "stat -c %a /workspace/scripts/run.sh; /workspace/scripts/run.sh"
        ),
        "755\nran"
    );
    assert_eq!(
        sh_in(&id, "cat /workspace/scripts/sub/nested.txt"),
        "nested"
    );
    assert_eq!(sh_in(&id, "test -d /workspace/.git && echo repo"), "repo");
    assert_eq!(
        sh_in(&id, "ls /workspace/feature.txt 2>/dev/null | wc -l"),
        "0"
    );

    // A tag, a branch, a commit.
    for (git_ref, check, want) in [
        ("v1", "cat /workspace/README.md", "hello from git"),
        ("feature", "cat /workspace/feature.txt", "on the branch"),
        (
            server.first_commit.as_str(),
            "cat /workspace/README.md",
            "hello from git",
        ),
    ] {
        let sb = app
            .create(
                &token,
                json!({"source": {"type": "git", "url": server.url, "ref": git_ref}}),
            )
            .await;
        assert_eq!(
            sh_in(sb["id"].as_str().unwrap(), check),
            want,
            "ref {git_ref}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_git_sources_leave_nothing() {
    let server = git_server().await;
    let app = spawn_app().await;
    let token = app.new_account("gitfail").await;
    let closed = free_port();
    let cases = [
        (
            json!({"type": "git", "url": "file:///etc"}),
            StatusCode::BAD_REQUEST,
            "source.url",
        ),
        (
            json!({"type": "git", "url": "/srv/repo"}),
            StatusCode::BAD_REQUEST,
            "source.url",
        ),
        (
            json!({"type": "git", "url": "ssh://git@127.0.0.1/r"}),
            StatusCode::BAD_REQUEST,
            "source.url",
        ),
        (
            json!({"type": "git", "url": server.url, "ref": "--upload-pack=touch /tmp/x"}),
            StatusCode::BAD_REQUEST,
            "source.ref",
        ),
        (
            json!({"type": "git", "url": format!("git://127.0.0.1:{closed}/project")}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "",
        ),
        (
            json!({"type": "git", "url": server.url.replace("project", "missing")}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "",
        ),
        (
            json!({"type": "git", "url": server.url, "ref": "no-such-branch"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "",
        ),
        (
            json!({"type": "git", "url": server.url, "ref": "0123456789abcdef0123456789abcdef01234567"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "",
        ),
    ];
    for (source, status, field) in cases {
        let r = app.try_create(&token, json!({"source": source})).await;
        assert_eq!(r.status, status, "{source}: {:?}", r.body);
        if field.is_empty() {
            assert_eq!(r.code(), "source_failed", "{:?}", r.body);
            let message = r.body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("git clone of git://127.0.0.1"),
                "{message}"
            );
        } else {
            assert_eq!(r.error_fields(), [field], "{source}");
        }
    }
    nothing_left_beyond(&app, &token, 0, 0).await;
    assert!(app.volumes().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn tarball_sources_and_their_failures() {
    let blob: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    let good = tar_gz(&[
        ("app/main.js", b"console.log(1)\n", 0o644),
        ("app/blob.bin", &blob, 0o600),
    ]);
    let mut corrupt = good.clone();
    corrupt.truncate(good.len() / 2);
    let base = file_server(HashMap::from([
        ("good.tar.gz", good),
        ("corrupt.tar.gz", corrupt),
        ("notatar.tar", b"just some text, not an archive".repeat(30)),
    ]))
    .await;
    let (app, token, id) = spawn_with_owned_sandbox(
        "tar",
        json!({"source": {"type": "tarball", "url": format!("{base}/good.tar.gz")}}),
    )
    .await;
    assert_eq!(
        sh_in(
            &id,
            "cat /workspace/app/main.js; stat -c %a /workspace/app/blob.bin"
        ),
        "console.log(1)\n600"
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("blob.bin"), &blob).unwrap();
    assert!(sh_in(&id, "md5sum /workspace/app/blob.bin")
        .starts_with(&md5_of(&tmp.path().join("blob.bin"))));

    let closed = free_port();
    for (url, status) in [
        (
            format!("{base}/corrupt.tar.gz"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            format!("{base}/notatar.tar"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            format!("{base}/missing.tar"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            format!("http://127.0.0.1:{closed}/x.tar"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("ftp://127.0.0.1/x.tar".to_owned(), StatusCode::BAD_REQUEST),
        ("not a url".to_owned(), StatusCode::BAD_REQUEST),
    ] {
        let r = app
            .try_create(&token, json!({"source": {"type": "tarball", "url": url}}))
            .await;
        assert_eq!(r.status, status, "{url}: {:?}", r.body);
        if status == StatusCode::BAD_REQUEST {
            assert_eq!(r.error_fields(), ["source.url"]);
        } else {
            assert_eq!(r.code(), "source_failed", "{url}");
        }
    }
    nothing_left_beyond(&app, &token, 1, 1).await;
    assert_eq!(app.volumes().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn uploaded_archives_are_used_once_by_their_owner() {
    let (app, [alice, bob]) = spawn_with_accounts(["up-a", "up-b"]).await;
    let upload = |token: &str, body: Vec<u8>| app.upload(token, body);
    let archive = tar_gz(&[("notes/readme.txt", b"uploaded!\n", 0o644)]);
    let r = upload(&alice, archive).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let body: serde_json::Value = r.json().await.unwrap();
    let upload_id = body["uploadId"].as_str().unwrap().to_owned();
    assert!(body["bytes"].as_u64().unwrap() > 0);

    // Another account cannot use it.
    let r = app
        .try_create(
            &bob,
            json!({"source": {"type": "upload", "uploadId": upload_id}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    let sb = app
        .create(
            &alice,
            json!({"source": {"type": "upload", "uploadId": upload_id}}),
        )
        .await;
    assert_eq!(
        sh_in(
            sb["id"].as_str().unwrap(),
            "cat /workspace/notes/readme.txt"
        ),
        "uploaded!"
    );
    // Used once.
    let r = app
        .try_create(
            &alice,
            json!({"source": {"type": "upload", "uploadId": upload_id}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    // Not an archive: 400 naming the body; no auth: 401; bad id: 400.
    let r = upload(&alice, b"definitely not a tarball".to_vec())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(e["error"]["details"]["fields"][0]["field"], "body");
    let r = app
        .http
        .post(format!("{}/api/v1/uploads", app.base))
        .body(vec![0u8; 10])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = app
        .try_create(
            &alice,
            json!({"source": {"type": "upload", "uploadId": "x"}}),
        )
        .await;
    assert_eq!(r.error_fields(), ["source.uploadId"]);
    nothing_left_beyond(&app, &bob, 1, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn uploads_over_the_limit_are_refused() {
    let mut app = spawn_app().await;
    app.shutdown().await;
    // A second server on the same database with a small limit.
    let server = app
        .second_server(|c| {
            c.service.sources.max_archive_bytes = 4096;
            c.service.max_unpacked_bytes = 50_000;
            c.listen = "127.0.0.1:0".parse().unwrap();
        })
        .await;
    let post = |body: Vec<u8>| {
        app.http
            .post(format!("http://{}/api/v1/uploads", server.addr))
            .bearer_auth(&app.admin_token)
            .body(body)
            .send()
    };
    // More than 4096 bytes sent: 413.
    let noise: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    assert_eq!(
        post(noise).await.unwrap().status(),
        StatusCode::PAYLOAD_TOO_LARGE
    );
    // Small, but unpacks to more than 50 000 bytes (a "zip bomb"): 413,
    // the limit in the message.
    let bomb = tar_gz(&[("big.bin", &vec![1u8; 100_000], 0o644)]);
    assert!(bomb.len() < 4096);
    let r = post(bomb).await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let e: serde_json::Value = r.json().await.unwrap();
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unpacked size exceeds the limit of 50000 bytes"),
        "{e}"
    );
    server.shutdown.cancel();
}

/// A tar.gz of a few KiB whose one file unpacks to `bytes` zeros, built as
/// it is compressed (never held unpacked).
fn zeros_bomb(bytes: u64) -> Vec<u8> {
    use std::io::Read;
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut b = tar::Builder::new(gz);
    let mut h = tar::Header::new_gnu();
    h.set_size(bytes);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "zeros.bin", std::io::repeat(0).take(bytes))
        .unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

/// The unpack ceiling on every create source and on snapshots: under a 1 MiB ceiling
/// a tarball, a git repository, an upload and a snapshot that unpack to
/// more are refused with 413 and the limit, and leave nothing behind.
/// The upload and the snapshot are made under the default ceiling and used
/// after a restart under the small one, as after an operator lowers it.
#[tokio::test(flavor = "multi_thread")]
async fn every_source_and_snapshot_stops_at_the_unpack_ceiling() {
    const CEILING: u64 = 1024 * 1024;
    let bomb = zeros_bomb(64 * CEILING);
    assert!(bomb.len() < 128 * 1024, "{} bytes", bomb.len());
    let base = file_server(HashMap::from([("bomb.tar.gz", bomb.clone())])).await;
    // A repository whose one commit holds 8 MiB of zeros (a few KiB packed).
    let (dir, repo) = new_repo("zeros");
    std::fs::write(repo.join("zeros.bin"), vec![0u8; 8 * CEILING as usize]).unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "zeros"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    let git_server = git_daemon(dir, repo, commit).await;

    // Under the default ceiling: an upload of the bomb, a snapshot of a
    // /workspace of 3 MiB.
    let mut app = spawn_app().await;
    let token = app.new_account("ceiling").await;
    let r = app
        .http
        .post(format!("{}/api/v1/uploads", app.base))
        .bearer_auth(&token)
        .body(bomb)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let upload_id = r.json::<serde_json::Value>().await.unwrap()["uploadId"]
        .as_str()
        .unwrap()
        .to_owned();
    let sb_id = app
        .create_id(&token, json!({"name": "big-workspace"}))
        .await;
    sh_in(&sb_id, "head -c 3145728 /dev/zero > /workspace/zeros.bin");
    let snapshot_id = app.snapshot_id(&token, &sb_id, "big").await;

    // The same database and Docker under a 1 MiB ceiling.
    app.shutdown().await;
    let server = app
        .second_server(|c| {
            c.service.max_unpacked_bytes = CEILING;
            c.listen = "127.0.0.1:0".parse().unwrap();
        })
        .await;
    app.base = format!("http://{}", server.addr);

    let refused = |r: &Resp, what: &str| {
        r.assert_status(StatusCode::PAYLOAD_TOO_LARGE, what);
        let message = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("unpacked size exceeds the limit of 1 MiB"),
            "{what}: {message}"
        );
    };
    for (what, source) in [
        (
            "tarball",
            json!({"type": "tarball", "url": format!("{base}/bomb.tar.gz")}),
        ),
        ("git", json!({"type": "git", "url": git_server.url})),
        ("upload", json!({"type": "upload", "uploadId": upload_id})),
        ("snapshot", snapshot_source(&snapshot_id)),
    ] {
        let started = Instant::now();
        let r = app.try_create(&token, json!({ "source": source })).await;
        refused(&r, what);
        assert!(started.elapsed() < Duration::from_secs(60), "{what}");
    }
    // A snapshot of a /workspace over the ceiling could never be restored.
    let r = app
        .sandbox_post(&token, &sb_id, "snapshots", json!({"name": "too-big"}))
        .await;
    refused(&r, "snapshot capture");
    // Nothing is left but the first sandbox (and its snapshot).
    nothing_left_beyond(&app, &token, 1, 1).await;
    assert_eq!(app.volumes().len(), 1);
    let snapshots = app.get("/api/v1/snapshots", &token).await;
    let ready: Vec<&str> = snapshots.body["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "READY")
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ready, [snapshot_id.as_str()], "{:?}", snapshots.body);
    server.shutdown.cancel();
}
