//! Snapshots and workspace archives on the real engine:
//! commit keeps root-filesystem changes, `/workspace` streams out as a tar,
//! and an archive is unpacked before the main process starts. Every test
//! removes what it made, also when it fails.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::{stream, StreamExt};
use stockade_core::{SandboxId, VolumeName};
use stockade_runtime::prelude::*;
use stockade_runtime::{
    container_name, ByteStream, ContainerSpec, DockerConfig, DockerRuntime, RuntimeError,
};

mod support;
use support::{docker_cli, sh_ok, shell_spec, Made};

const IMAGE: &str = "stockade-test-base:latest";

fn spec(image: &str, command: &str) -> ContainerSpec {
    ContainerSpec {
        hostname: "sbx".into(),
        ..shell_spec(image, command)
    }
}

const KEEP_ALIVE: &str = "trap 'exit 0' TERM; while true; do sleep 86400 & wait $!; done";

async fn sh(rt: &DockerRuntime, id: &SandboxId, script: &str) -> String {
    sh_ok(rt, id, script, None).await
}

fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o640);
        h.set_cksum();
        b.append_data(&mut h, path, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn once(bytes: Vec<u8>) -> ByteStream {
    Box::pin(stream::once(async move { Ok(Bytes::from(bytes)) }))
}

async fn collect(mut s: ByteStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.unwrap());
    }
    out
}

fn runtime() -> DockerRuntime {
    DockerRuntime::new(DockerConfig::default()).unwrap()
}

#[tokio::test]
async fn archive_is_in_place_before_the_main_process_starts() {
    let rt = runtime();
    let mut cleanup = Made::default();
    // The main process copies what it finds at its very start.
    let s = spec(
        IMAGE,
        &format!("cp /workspace/app/hello /tmp/seen-at-start; {KEEP_ALIVE}"),
    );
    cleanup.sandboxes.push(s.sandbox_id.clone());
    let archive = tar_of(&[
        ("app/hello", b"hi from the archive\n"),
        ("top.bin", &[0, 1, 2, 255]),
    ]);
    rt.create_with_workspace(&s, once(archive)).await.unwrap();
    let id = &s.sandbox_id;
    assert_eq!(
        sh(&rt, id, "cat /tmp/seen-at-start").await,
        "hi from the archive\n"
    );
    assert_eq!(
        sh(&rt, id, "od -An -tu1 /workspace/top.bin")
            .await
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["0", "1", "2", "255"]
    );
    assert_eq!(
        sh(&rt, id, "stat -c %a /workspace/app/hello").await.trim(),
        "640"
    );
}

#[tokio::test]
async fn commit_and_export_capture_the_filesystem() {
    let rt = runtime();
    let mut cleanup = Made::default();
    let src = spec(IMAGE, KEEP_ALIVE);
    cleanup.create(&rt, &src).await.unwrap();
    let id = &src.sandbox_id;
    sh(&rt, id, "echo root-change > /etc/stockade-marker; mkdir -p /workspace/d; printf 'x%.0s' $(seq 1 5000) > /workspace/d/big; echo w > /workspace/w").await;

    // A snapshot image answers only to its own name: the tag is its label.
    let snapshot_id = SandboxId::generate().to_string();
    let image = format!("stockade-snapshot:{snapshot_id}");
    cleanup.images.push(image.clone());
    let labels = BTreeMap::from([("io.stockade.snapshot-id".to_string(), snapshot_id.clone())]);
    rt.commit_snapshot(id, &image, &labels).await.unwrap();
    let inspected = docker_cli(&[
        "image",
        "inspect",
        "-f",
        "{{index .Config.Labels \"io.stockade.snapshot-id\"}}",
        &image,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&inspected.stdout).trim(),
        snapshot_id
    );
    // The container keeps running after the (pausing) commit.
    assert!(rt.inspect(id).await.unwrap().unwrap().running);

    let tar_bytes = collect(rt.export_workspace(id).await.unwrap()).await;
    let mut names: Vec<String> = tar::Archive::new(tar_bytes.as_slice())
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["./", "./d/", "./d/big", "./w"]);

    // A new sandbox from the image and the archive has both.
    let copy = spec(&image, KEEP_ALIVE);
    cleanup.sandboxes.push(copy.sandbox_id.clone());
    rt.create_with_workspace(&copy, once(tar_bytes))
        .await
        .unwrap();
    assert_eq!(
        sh(
            &rt,
            &copy.sandbox_id,
            "cat /etc/stockade-marker /workspace/w; wc -c < /workspace/d/big"
        )
        .await,
        "root-change\nw\n5000\n"
    );

    // The image is in use: refused; once the copy is gone: removed.
    assert!(matches!(
        rt.remove_image(&image).await,
        Err(RuntimeError::Conflict(_))
    ));
    rt.remove(&copy.sandbox_id, false).await.unwrap();
    rt.remove_image(&image).await.unwrap();
    rt.remove_image(&image).await.unwrap(); // gone already: fine
    assert!(!docker_cli(&["image", "inspect", &image]).status.success());
}

#[tokio::test]
async fn bad_archives_leave_nothing() {
    let rt = runtime();
    let mut cleanup = Made::default();

    // Not a tar at all.
    let s = spec(IMAGE, KEEP_ALIVE);
    cleanup.sandboxes.push(s.sandbox_id.clone());
    let err = rt
        .create_with_workspace(
            &s,
            once(b"this is not a tar archive, not even close".repeat(40)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Other(_)), "{err}");
    assert!(!docker_cli(&["inspect", &container_name(&s.sandbox_id)])
        .status
        .success());
    assert!(!docker_cli(&[
        "volume",
        "inspect",
        VolumeName::for_sandbox(&s.sandbox_id).as_str()
    ])
    .status
    .success());

    // A source that breaks midway, on a tar boundary.
    let s = spec(IMAGE, KEEP_ALIVE);
    cleanup.sandboxes.push(s.sandbox_id.clone());
    let mut whole = tar_of(&[("a", b"aaaa")]);
    whole.truncate(1024);
    let broken: ByteStream = Box::pin(stream::iter(vec![
        Ok(Bytes::from(whole)),
        Err(std::io::Error::other("download interrupted")),
    ]));
    let err = rt.create_with_workspace(&s, broken).await.unwrap_err();
    assert!(err.to_string().contains("download interrupted"), "{err}");
    assert!(!docker_cli(&["inspect", &container_name(&s.sandbox_id)])
        .status
        .success());

    // Export and commit of a sandbox without a container.
    let ghost = SandboxId::generate();
    assert!(matches!(
        rt.export_workspace(&ghost).await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(matches!(
        rt.commit_snapshot(&ghost, "stockade-snapshot:nope", &BTreeMap::new())
            .await,
        Err(RuntimeError::NotFound(_))
    ));
}
