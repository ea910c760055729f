//! `DELETE /sandbox/{id}?sync=true` uploads `/workspace` to the
//! object store before anything is deleted — the local directory store and a
//! real S3-protocol server (`moto_server` on a loopback port). The synced
//! object is downloaded and compared byte for byte; a failing store deletes
//! nothing.

use std::process::{Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use stockade_blob::{BlobConfig, BlobStore, ObjectBlobStore, S3Config};

use crate::helpers::*;

/// moto's S3 server on 127.0.0.1 with one bucket; killed on drop.
struct Moto {
    _server: KillOnDrop,
    endpoint: String,
}

async fn start_moto(bucket: &str) -> Option<Moto> {
    let bin = std::env::var("STOCKADE_TEST_MOTO_SERVER").ok().or_else(|| {
        let out = Command::new("sh")
            .args(["-c", "command -v moto_server"])
            .output()
            .ok()?;
        let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (!p.is_empty()).then_some(p)
    });
    let Some(bin) = bin else {
        eprintln!("S3 sync test skipped: moto_server not found (scripts/lib/s3.sh installs it)");
        return None;
    };
    let port = free_port();
    let server = Command::new(bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    let moto = Moto {
        _server: KillOnDrop(server),
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    // The bucket is made by the first request that reaches the server.
    let http = reqwest::Client::new();
    let bucket_url = format!("{}/{bucket}", moto.endpoint);
    let made = eventually(Duration::from_secs(60), || async {
        let Ok(r) = http.put(&bucket_url).send().await else {
            return false;
        };
        assert!(r.status().is_success(), "create bucket: {}", r.status());
        true
    })
    .await;
    assert!(made.is_some(), "moto_server did not start");
    Some(moto)
}

fn s3(endpoint: &str, bucket: &str) -> BlobConfig {
    BlobConfig::S3(S3Config {
        endpoint: Some(endpoint.to_owned()),
        bucket: bucket.to_owned(),
        region: "us-east-1".into(),
        access_key_id: Some("AKIDTEST".into()),
        secret_access_key: Some("s3cr3t-never-shown".into()),
    })
}

/// Files of a tar archive, `./`-relative names → contents (regular files).
fn files_of(tar_bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut archive = tar::Archive::new(tar_bytes);
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().is_file() {
            let name = entry.path().unwrap().display().to_string();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
            out.push((name, data));
        }
    }
    out.sort();
    out
}

async fn download(store: &dyn BlobStore, key: &str) -> Vec<u8> {
    let (_, mut s) = store.get_stream(key).await.unwrap();
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.unwrap());
    }
    out
}

/// Writes known content into `/workspace`: text and 200 kB of random bytes
/// (whose checksum the sandbox reports).
fn write_workspace(id: &str) -> String {
    sh_in(
        id,
        "mkdir -p /workspace/out && echo result > /workspace/out/result.txt \
         && head -c 200000 /dev/urandom > /workspace/out/data.bin && md5sum < /workspace/out/data.bin",
    )
}

fn md5(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, bytes).unwrap();
    let out = Command::new("md5sum").arg(&p).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// Deletes with sync=true and checks the record and the stored object.
async fn delete_with_sync(app: &TestApp, token: &str, store: &dyn BlobStore) -> Value {
    let sb = app.create(token, json!({})).await;
    let id = sb["id"].as_str().unwrap();
    let sum = write_workspace(id);
    let r = app.delete_sandbox(token, id, "sync=true").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "TERMINATED");
    assert!(!container_exists(id));
    let sync = &r.body["metadata"]["s3_sync"];
    let key = sync["key"].as_str().unwrap();
    assert!(
        key.starts_with(&format!(
            "syncs/{}/{id}/",
            sb["accountId"].as_str().unwrap()
        )),
        "{key}"
    );
    assert!(sync["completed_at"].is_string());
    let object = download(store, key).await;
    assert_eq!(sync["bytes"].as_u64().unwrap(), object.len() as u64);
    let files = files_of(&object);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["./out/data.bin", "./out/result.txt"]);
    assert_eq!(files[1].1, b"result\n");
    assert_eq!(format!("{}  -", md5(&files[0].1)), sum);
    // The record keeps it (GET of the terminated sandbox).
    let again = app.get(&format!("/api/v1/sandbox/{id}"), token).await;
    assert_eq!(again.body["metadata"]["s3_sync"], *sync);
    r.body
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_to_the_local_directory_store() {
    let app = spawn_app().await;
    let token = app.new_account("sync-local").await;
    let store = ObjectBlobStore::open(&BlobConfig::Local {
        dir: app.dir.path().join("blobs"),
    })
    .unwrap();
    let body = delete_with_sync(&app, &token, &store).await;
    let cfg = &body["metadata"]["s3_config"];
    assert_eq!(cfg["backend"], "local");
    assert_eq!(
        cfg["path"],
        app.dir.path().join("blobs").display().to_string()
    );

    // Without sync nothing is uploaded; another account's sandbox: 403.
    let other = app.new_account("sync-other").await;
    let id = app.create_id(&token, json!({})).await;
    let r = app.delete_sandbox(&other, &id, "sync=true").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = app.delete_sandbox(&token, &id, "sync=maybe").await;
    assert_eq!(r.error_fields(), ["sync"]);
    let r = app.delete(&format!("/api/v1/sandbox/{id}"), &token).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body["metadata"].get("s3_sync").is_none());
    // Terminated already: nothing left to sync.
    let r = app.delete_sandbox(&token, &id, "sync=true").await;
    assert_eq!(r.status, StatusCode::CONFLICT);
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_to_an_s3_server_and_snapshots_there() {
    let Some(moto) = start_moto("stockade-sync").await else {
        return;
    };
    let config = s3(&moto.endpoint, "stockade-sync");
    let app = spawn_app_with(AppOptions {
        blob_store: Some(config.clone()),
        ..Default::default()
    })
    .await;
    let token = app.new_account("sync-s3").await;
    let store = ObjectBlobStore::open(&config).unwrap();
    let body = delete_with_sync(&app, &token, &store).await;
    let cfg = &body["metadata"]["s3_config"];
    assert_eq!(cfg["backend"], "s3");
    assert_eq!(cfg["bucket"], "stockade-sync");
    assert_eq!(cfg["endpoint"], moto.endpoint.as_str());
    assert!(
        !body.to_string().contains("s3cr3t"),
        "secret leaked: {body}"
    );

    // Snapshots keep their /workspace in the same store, and restore from it.
    let id = app.create_id(&token, json!({})).await;
    let sum = write_workspace(&id);
    let snap = app.act(&token, &id, "snapshots").await;
    assert_eq!(snap.status, StatusCode::CREATED, "{:?}", snap.body);
    let key = snap.body["workspaceKey"].as_str().unwrap();
    assert!(store.head(key).await.unwrap().is_some());
    let restored = app
        .create(
            &token,
            json!({"source": {"type": "snapshot", "snapshotId": snap.body["id"]}}),
        )
        .await;
    assert_eq!(
        sh_in(
            restored["id"].as_str().unwrap(),
            "md5sum < /workspace/out/data.bin"
        ),
        sum
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_sync_deletes_nothing() {
    // An S3 endpoint where nothing listens.
    let app = spawn_app_with(AppOptions {
        blob_store: Some(s3(&format!("http://127.0.0.1:{}", free_port()), "nowhere")),
        ..Default::default()
    })
    .await;
    let (token, id) = app.owned_sandbox("sync-fail", json!({})).await;
    write_workspace(&id);
    let r = app.delete_sandbox(&token, &id, "sync=true").await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{:?}", r.body);
    assert_eq!(r.code(), "object_store_error");
    // Still there, still running, files intact, no sync recorded.
    let again = app.get(&format!("/api/v1/sandbox/{id}"), &token).await;
    assert_eq!(again.body["status"], "RUNNING");
    assert!(again.body["metadata"].get("s3_sync").is_none());
    assert!(container_exists(&id) && volume_exists(&id));
    assert_eq!(sh_in(&id, "cat /workspace/out/result.txt"), "result");
    // A snapshot fails the same way and leaves no image or record.
    let snap = app.act(&token, &id, "snapshots").await;
    assert_eq!(snap.status, StatusCode::BAD_GATEWAY, "{:?}", snap.body);
    assert_eq!(
        app.get("/api/v1/snapshots", &token).await.body["snapshots"],
        json!([])
    );
    let images = docker_lines(&[
        "images",
        "-q",
        "--filter",
        &format!("label=io.stockade.instance-id={}", app.instance_id()),
    ]);
    assert!(images.is_empty(), "{images:?}");
}
