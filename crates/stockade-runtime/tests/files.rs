//! The file contract of `DockerRuntime` against the real engine:
//! stat kinds and errors, tar in and out, delete, and what works on a
//! stopped container.

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use stockade_core::{SandboxId, SandboxPath};
use stockade_runtime::prelude::*;
use stockade_runtime::{
    container_name, ArchiveUpload, ContainerSpec, DockerConfig, DockerRuntime, FileKind, FsError,
    RuntimeError,
};

mod support;
use support::{docker_cli, shell_spec, Cleanup};

const IMAGE: &str = "stockade-test-base:latest";

fn path(p: &str) -> SandboxPath {
    SandboxPath::parse_field(p, "path").unwrap()
}

async fn running_sandbox(rt: &DockerRuntime) -> (SandboxId, Cleanup) {
    let spec = ContainerSpec {
        hostname: "files".into(),
        ..shell_spec(IMAGE, "trap 'exit 0' TERM; while true; do sleep 1; done")
    };
    let id = spec.sandbox_id.clone();
    let cleanup = Cleanup(id.clone());
    rt.create(&spec).await.expect("create");
    (id, cleanup)
}

fn sh(id: &SandboxId, script: &str) -> String {
    let out = docker_cli(&["exec", &container_name(id), "/bin/sh", "-c", script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn one_file_tar(name: &str, data: &[u8]) -> ArchiveUpload {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o640);
    b.append_data(&mut h, name, data).unwrap();
    let bytes = Bytes::from(b.into_inner().unwrap());
    Box::pin(futures_util::stream::once(async move { bytes }))
}

async fn read_all(rt: &DockerRuntime, id: &SandboxId, p: &str) -> Vec<(String, Vec<u8>)> {
    let mut stream = rt.read_archive(id, &path(p)).await.expect("read archive");
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        tar.extend_from_slice(&chunk.expect("chunk"));
    }
    let mut out = Vec::new();
    for e in tar::Archive::new(&tar[..]).entries().unwrap() {
        let mut e = e.unwrap();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        out.push((e.path().unwrap().display().to_string(), data));
    }
    out
}

#[tokio::test]
async fn stat_read_write_and_delete() {
    let rt = DockerRuntime::new(DockerConfig::default()).expect("runtime");
    let (id, _cleanup) = running_sandbox(&rt).await;
    sh(
        &id,
        "mkdir -p /workspace/d/e && printf abc > /workspace/d/f && ln -s d/f /workspace/l \
         && ln -s / /workspace/root && mkfifo /workspace/p && chmod 1777 /workspace/d/e",
    );

    let s = rt.stat_path(&id, &path("d/f")).await.unwrap();
    assert_eq!(
        (s.name.as_str(), s.kind, s.size, s.mode),
        ("f", FileKind::File, 3, 0o644)
    );
    assert!(s.modified_at.is_some());
    let s = rt.stat_path(&id, &path("d/e")).await.unwrap();
    assert_eq!((s.kind, s.mode), (FileKind::Dir, 0o1777));
    let s = rt.stat_path(&id, &path("l")).await.unwrap();
    assert_eq!(s.kind, FileKind::Symlink);
    assert_eq!(s.resolved_target.as_deref(), Some("/workspace/d/f"));
    assert_eq!(
        rt.stat_path(&id, &path("p")).await.unwrap().kind,
        FileKind::Other
    );
    // Through a symlink to /: the container's own root.
    let s = rt.stat_path(&id, &path("root/etc/hostname")).await.unwrap();
    assert_eq!(s.kind, FileKind::File);

    assert!(matches!(
        rt.stat_path(&id, &path("nope")).await,
        Err(FsError::NotFound(p)) if p == "/workspace/nope"
    ));
    assert!(matches!(
        rt.stat_path(&id, &path("d/f/below")).await,
        Err(FsError::NotADirectory(_))
    ));
    assert!(matches!(
        rt.stat_path(&SandboxId::generate(), &path("x")).await,
        Err(FsError::Runtime(RuntimeError::NotFound(_)))
    ));
    assert!(matches!(
        rt.read_archive(&id, &path("nope")).await.err(),
        Some(FsError::NotFound(_))
    ));

    // A tar in, the same bytes out.
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    rt.write_archive(&id, &path("d/e"), one_file_tar("new.bin", &data))
        .await
        .expect("write");
    let files = read_all(&rt, &id, "d/e/new.bin").await;
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].0, "new.bin");
    assert!(files[0].1 == data);
    let files = read_all(&rt, &id, "d").await;
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["d/", "d/e/", "d/e/new.bin", "d/f"]);
    assert!(matches!(
        rt.write_archive(&id, &path("missing"), one_file_tar("x", b"x"))
            .await,
        Err(FsError::NotFound(_))
    ));
    assert!(matches!(
        rt.write_archive(&id, &path("d/f"), one_file_tar("x", b"x"))
            .await,
        Err(FsError::NotADirectory(_))
    ));

    // Delete: a link itself, a directory only when empty unless recursive.
    rt.delete_path(&id, &path("root"), false)
        .await
        .expect("delete link");
    assert_eq!(sh(&id, "ls /etc/hostname"), "/etc/hostname");
    assert!(matches!(
        rt.delete_path(&id, &path("d"), false).await,
        Err(FsError::NotEmpty(_))
    ));
    rt.delete_path(&id, &path("d"), true)
        .await
        .expect("delete tree");
    assert!(matches!(
        rt.stat_path(&id, &path("d")).await,
        Err(FsError::NotFound(_))
    ));

    // Stopped: stat, read and write work; delete needs the sandbox running.
    rt.stop(&id, Duration::from_secs(1)).await.unwrap();
    rt.write_archive(&id, &path("/workspace"), one_file_tar("cold.txt", b"cold"))
        .await
        .expect("write while stopped");
    assert_eq!(rt.stat_path(&id, &path("cold.txt")).await.unwrap().size, 4);
    assert_eq!(read_all(&rt, &id, "cold.txt").await[0].1, b"cold");
    assert!(matches!(
        rt.delete_path(&id, &path("cold.txt"), false).await,
        Err(FsError::NotRunning)
    ));
}
