//! The volume routes (`/volume/…`) of an agent started with
//! `STOCKADE_AGENT_VOLUME_ROOT`, through the client library and raw HTTP:
//! a round trip of every operation, the error codes callers match on, and
//! an agent without a volume answering no such routes.

use crate::helpers::{http, Agent, TOKEN};
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stockade_agent::client::{ClientError, VolumeAttrs, VolumeEntryType, VolumeErrorKind};
use tokio::sync::mpsc;

/// An agent serving `<its dir>/vol` as the volume, beside `<its
/// dir>/outside` holding a secret.
async fn volume_agent() -> (Agent, PathBuf) {
    let agent = Agent::start_with(|cmd, dir: &Path| {
        std::fs::create_dir_all(dir.join("vol")).unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        std::fs::write(dir.join("outside/secret"), "outside").unwrap();
        cmd.env("STOCKADE_AGENT_VOLUME_ROOT", dir.join("vol"));
    })
    .await;
    let root = agent.dir.path().join("vol");
    (agent, root)
}

/// A channel carrying `chunks`, then closed.
fn chunks(
    parts: Vec<Result<Bytes, std::io::Error>>,
) -> mpsc::Receiver<Result<Bytes, std::io::Error>> {
    let (tx, rx) = mpsc::channel(parts.len().max(1));
    for p in parts {
        tx.try_send(p).unwrap();
    }
    rx
}

fn volume_error(e: &ClientError) -> (u16, Option<VolumeErrorKind>) {
    match e {
        ClientError::Volume { status, .. } => (*status, e.volume_error()),
        other => panic!("expected a volume error, got {other}"),
    }
}

#[tokio::test]
async fn every_operation_round_trips_through_the_client() {
    let (agent, root) = volume_agent().await;
    let c = agent.client();
    let attrs = VolumeAttrs {
        mode: Some(0o600),
        ..Default::default()
    };
    let written = c
        .volume_write(
            "/a/b.txt",
            true,
            &attrs,
            chunks(vec![Ok(Bytes::from("hello, ")), Ok(Bytes::from("volume"))]),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            written.path.as_str(),
            written.kind,
            written.size,
            written.mode
        ),
        ("/a/b.txt", VolumeEntryType::File, 13, 0o600)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a/b.txt")).unwrap(),
        "hello, volume"
    );
    let download = c.volume_read("/a/b.txt").await.unwrap();
    assert_eq!(download.size, Some(13));
    assert_eq!(download.bytes().await.unwrap(), b"hello, volume");

    let st = c.volume_stat("/a").await.unwrap();
    assert_eq!(
        (st.name.as_str(), st.kind),
        ("a", VolumeEntryType::Directory)
    );
    let root_entry = c.volume_stat("/").await.unwrap();
    assert_eq!(
        (root_entry.name.as_str(), root_entry.path.as_str()),
        ("", "/")
    );

    let made = c
        .volume_mkdir("/m/n", true, &VolumeAttrs::default())
        .await
        .unwrap();
    assert_eq!((made.path.as_str(), made.mode), ("/m/n", 0o755));
    let exists = c
        .volume_mkdir("/m/n", false, &VolumeAttrs::default())
        .await
        .unwrap_err();
    assert_eq!(volume_error(&exists), (409, Some(VolumeErrorKind::Exists)));
    let listed = c.volume_list("/", 2).await.unwrap();
    let paths: Vec<_> = listed.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["/a", "/a/b.txt", "/m", "/m/n"]);

    let moved = c.volume_rename("/a/b.txt", "/m/n/c.txt").await.unwrap();
    assert_eq!((moved.name.as_str(), moved.size), ("c.txt", 13));
    let changed = c
        .volume_set_attrs(
            "/m/n/c.txt",
            &VolumeAttrs {
                mode: Some(0o644),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(changed.mode, 0o644);
    let usage = c.volume_usage().await.unwrap();
    assert_eq!(usage.files, 4);
    assert!(usage.bytes > 0);

    c.volume_remove("/m").await.unwrap();
    let gone = c.volume_stat("/m").await.unwrap_err();
    assert_eq!(volume_error(&gone), (404, Some(VolumeErrorKind::NotFound)));
    assert!(!root.join("m").exists());
}

#[tokio::test]
async fn hostile_paths_are_refused_with_their_codes() {
    let (agent, root) = volume_agent().await;
    let c = agent.client();
    let outside = agent.dir.path().join("outside");
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), root.join("file-link")).unwrap();

    let cases = [
        (
            c.volume_read("/link/secret").await.err(),
            400,
            VolumeErrorKind::Symlink,
        ),
        (
            c.volume_read("/file-link").await.err(),
            400,
            VolumeErrorKind::Symlink,
        ),
        (
            c.volume_write(
                "/file-link",
                false,
                &VolumeAttrs::default(),
                chunks(vec![Ok(Bytes::from("x"))]),
            )
            .await
            .err(),
            400,
            VolumeErrorKind::Symlink,
        ),
        (
            c.volume_stat("/../outside").await.err(),
            400,
            VolumeErrorKind::BadPath,
        ),
        (
            c.volume_stat("relative").await.err(),
            400,
            VolumeErrorKind::BadPath,
        ),
        (
            c.volume_read("/nope").await.err(),
            404,
            VolumeErrorKind::NotFound,
        ),
        (
            c.volume_list("/link", 1).await.err(),
            400,
            VolumeErrorKind::Symlink,
        ),
        (
            c.volume_remove("/").await.err(),
            400,
            VolumeErrorKind::BadPath,
        ),
    ];
    for (i, (err, status, kind)) in cases.into_iter().enumerate() {
        let err = err.unwrap_or_else(|| panic!("case {i} succeeded"));
        assert_eq!(volume_error(&err), (status, Some(kind)), "case {i}: {err}");
    }
    // The link itself goes; what it points to stays.
    c.volume_remove("/link").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(outside.join("secret")).unwrap(),
        "outside"
    );

    // A write that breaks off leaves the old file and no temporary file.
    std::fs::write(root.join("kept"), "old").unwrap();
    let aborted = c
        .volume_write(
            "/kept",
            false,
            &VolumeAttrs::default(),
            chunks(vec![
                Ok(Bytes::from("new")),
                Err(std::io::Error::other("the source failed")),
            ]),
        )
        .await;
    assert!(aborted.is_err());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let names: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        if names.iter().all(|n| !n.starts_with(".stockade-tmp-")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a temporary file stayed: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(std::fs::read_to_string(root.join("kept")).unwrap(), "old");
}

#[tokio::test]
async fn raw_requests_are_authorised_and_checked() {
    let (agent, _root) = volume_agent().await;
    let no_token = http()
        .get(agent.url("/volume/stat?path=/"))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 401);

    let typo = agent.get("/volume/stat?path=/&pth=/x").await;
    assert_eq!(typo.status(), 400);
    let body: serde_json::Value = typo.json().await.unwrap();
    assert_eq!(body["code"], "bad_request");

    let deep = agent.get("/volume/list?path=/&depth=33").await;
    assert_eq!(deep.status(), 400);

    let put = http()
        .put(agent.url("/volume/file?path=/raw.bin&mode=384"))
        .header("x-access-token", TOKEN)
        .body(vec![0u8; 300_000])
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let entry: serde_json::Value = put.json().await.unwrap();
    assert_eq!(entry["size"], 300_000);
    assert_eq!(entry["mode"], 384);
    assert_eq!(entry["type"], "file");
    assert!(entry.get("target").is_none());
    assert!(entry["ctime"].as_str().unwrap().ends_with('Z'));

    let wrong_method = agent.post("/volume/stat?path=/", "").await;
    assert_eq!(wrong_method.status(), 405);
    assert_eq!(agent.get("/volume/nope").await.status(), 404);
}

#[tokio::test]
async fn without_a_volume_there_are_no_volume_routes() {
    let agent = Agent::start().await;
    match agent.client().volume_stat("/").await {
        Err(ClientError::Http {
            status: 404,
            message,
        }) => {
            assert!(message.contains("no route"), "{message}")
        }
        other => panic!("expected no route, got {other:?}"),
    }
}
