//! A real full disk: SQLite on a small tmpfs. Writes fail cleanly
//! (507 naming the database, nothing half-made), `/health` says the
//! database is degraded, reads and lists agree, and once space is freed
//! every acknowledged write is there — also after a restart.

use std::process::Command;
use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::json;
use sha2::{Digest, Sha256};
use stockade_store::{SqliteStore, Store};

use crate::helpers::*;

/// A tmpfs of `size` mounted on a fresh directory; unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self { dir })
    }

    fn free_bytes(&self) -> u64 {
        let out = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(self.dir.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_fails_writes_cleanly_and_loses_nothing_acknowledged() {
    let Some(fs) = Tmpfs::mount("8m") else {
        panic!("mounting a tmpfs needs root (the test suite runs as root)");
    };
    let db = fs.dir.path().join("stockade.db");
    let url = format!("sqlite://{}", db.display());
    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.unwrap());
    let app = spawn_app_with(AppOptions {
        store: Some(store.clone()),
        configure: Some(Box::new(|c| {
            c.service.operation_lease = std::time::Duration::from_secs(1);
        })),
        ..Default::default()
    })
    .await;
    let t = app.admin_token.clone();
    // Fill the disk but for a few pages.
    let filler = fs.dir.path().join("filler");
    let free = fs.free_bytes();
    std::fs::write(&filler, vec![7u8; free.saturating_sub(48 * 1024) as usize]).unwrap();
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for i in 0..40 {
        let r = app
            .try_create(&t,
                json!({ "name": format!("full-{i}"), "environmentVars": { "PAD": "x".repeat(2000) } }),
            )
            .await;
        match r.status {
            StatusCode::CREATED => acknowledged.push(r.body["id"].as_str().unwrap().to_owned()),
            status => {
                refused = Some((status, r.body));
                break;
            }
        }
    }
    let (status, body) = refused.expect("the full disk never refused a write");
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
    assert_eq!(body["error"]["code"], "storage_full");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&db.display().to_string()), "{message}");
    // Health says so; reads and lists agree.
    let health = app
        .call(reqwest::Method::GET, "/api/v1/health", None, None)
        .await;
    assert_eq!(
        health.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        health.body
    );
    assert_eq!(health.body["database"]["status"], "degraded");
    let list = app.get("/api/v1/sandbox?per_page=1000", &t).await;
    for sb in list.body["sandboxes"].as_array().unwrap() {
        let id = sb["id"].as_str().unwrap();
        let got = app.get(&format!("/api/v1/sandbox/{id}"), &t).await;
        assert_eq!(
            got.body["status"], sb["status"],
            "GET and list disagree on {id}"
        );
        if !acknowledged.iter().any(|a| a == id) {
            // The refused create's record could not be purged on a full
            // disk: it stays in the works until recovery can write.
            assert_eq!(sb["status"], "PROVISIONING", "{sb}");
        }
    }
    // Only acknowledged sandboxes have containers: the refused one's went.
    assert_eq!(app.containers().len(), acknowledged.len());
    // Room again: health recovers with the next write, recovery removes
    // the refused create's record, writes work.
    std::fs::remove_file(&filler).unwrap();
    let within = std::time::Duration::from_secs(20);
    let rolled_back = eventually(within, || async {
        let list = app.get("/api/v1/sandbox?per_page=1000", &t).await;
        list.body["total"] == acknowledged.len()
    })
    .await;
    let took = rolled_back.expect("the refused create was never rolled back");
    // The health probe (cached for a second) writes again and recovers,
    // within what is left of the same time.
    let recovered = eventually(within.saturating_sub(took), || async {
        let health = app
            .call(reqwest::Method::GET, "/api/v1/health", None, None)
            .await;
        health.status == StatusCode::OK
    })
    .await;
    assert!(recovered.is_some(), "health did not recover");
    let r = app.try_create(&t, json!({ "name": "after" })).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    acknowledged.push(r.body["id"].as_str().unwrap().to_owned());
    // Every acknowledged write survives a reopen of the database.
    let reopened: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.unwrap());
    let scope = stockade_core::Scope::account(
        reopened
            .account_by_token_hash(&stockade_core::account::hash_token(&t))
            .await
            .unwrap()
            .unwrap()
            .0
            .id,
    );
    for id in &acknowledged {
        let id = stockade_core::SandboxId::parse(id).unwrap();
        let sb = reopened.get_sandbox(&scope, &id).await.unwrap();
        assert_eq!(sb.status, stockade_core::SandboxStatus::Running);
    }
    drop(app);
}

/// The object store and the database on one small disk, as by default:
/// uploads stop (507, nothing half-stored) while the database still has
/// room, so every write after them still lands; a template's files too.
#[tokio::test(flavor = "multi_thread")]
async fn uploads_never_take_the_databases_room() {
    let Some(fs) = Tmpfs::mount("48m") else {
        panic!("mounting a tmpfs needs root (the test suite runs as root)");
    };
    let url = format!("sqlite://{}", fs.dir.path().join("stockade.db").display());
    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.unwrap());
    let blobs = fs.dir.path().join("blobs");
    let app = spawn_app_with(AppOptions {
        store: Some(store),
        blob_store: Some(stockade_blob::BlobConfig::Local { dir: blobs }),
        configure: Some(Box::new(|c| {
            c.service.blob_keep_free_bytes = 16 << 20;
        })),
        ..Default::default()
    })
    .await;
    let t = &app.new_account("hoarder").await;
    let archive = crate::quotas::noise_archive(4 << 20);
    let mut refused = None;
    for _ in 0..16 {
        let r = app
            .http
            .post(format!("{}/api/v1/uploads", app.base))
            .bearer_auth(t)
            .header("content-type", "application/gzip")
            .body(archive.clone())
            .send()
            .await
            .unwrap();
        if r.status() != StatusCode::CREATED {
            refused = Some((r.status(), r.json::<serde_json::Value>().await.unwrap()));
            break;
        }
    }
    let (status, body) = refused.expect("the uploads filled the disk");
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
    assert_eq!(body["error"]["code"], "storage_full", "{body}");
    assert!(fs.free_bytes() >= 8 << 20, "{} bytes left", fs.free_bytes());
    // The database still writes (each account is checked to be made).
    for i in 0..20 {
        crate::quotas::account(&app, &format!("after-{i}")).await;
    }
    // A template's files are refused the same way, and nothing of them is
    // kept; the template itself is made.
    let r = app
        .post("/api/v1/templates", t, json!({ "name": "on-a-full-disk" }))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    let id = r.body["templateId"].as_str().unwrap().to_owned();
    let hash = hex::encode(Sha256::digest(&archive));
    let r = app
        .http
        .put(format!("{}/api/v1/templates/{id}/files/{hash}", app.base))
        .bearer_auth(t)
        .body(archive.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::INSUFFICIENT_STORAGE);
    // Refused before its body was read: the connection closes after the
    // answer, and says so, so that the client's next request opens another
    // rather than failing on this one.
    assert_eq!(r.headers()["connection"], "close", "{:?}", r.headers());
    let r = app
        .get(&format!("/api/v1/templates/{id}/files/{hash}"), t)
        .await;
    assert_eq!(r.body["present"], false, "{:?}", r.body);
}
