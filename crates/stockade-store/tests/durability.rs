//! A real full disk: SQLite on a small tmpfs that fills up. Writes
//! then fail with `Unavailable` naming the database file and what to do,
//! health turns degraded, reads and lists agree with what was acknowledged;
//! once space is freed, writes work again, health recovers, and every
//! acknowledged write is there, also after reopening the database. Opening
//! it on a read-only filesystem is refused the same way. Mounting needs
//! root: without it the test says so and does nothing.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use chrono::{SubsecRound, Utc};
use stockade_core::spec::SpecInput;
use stockade_core::{
    AccountId, Defaults, Operation, OperationKind, Sandbox, SandboxId, SandboxSpec, SandboxStatus,
    Scope,
};
use stockade_store::{
    AccountStore, HealthStore, SandboxFilter, SqliteStore, Store, StoreError, StoreHealth,
};

/// A tmpfs of its own, unmounted (and its directory removed) on drop, also
/// when the test fails.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "stockade-test",
            ])
            .arg(dir.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Self { dir }),
            Ok(out) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs (run as root): {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Remounts with `mode`. A closed pool's connections close their files
    /// on their own threads a moment later: until then a remount read-only
    /// is refused as busy, so it is tried again for a few seconds.
    fn remount(&self, mode: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let out = Command::new("mount")
                .args(["-o", &format!("remount,{mode}")])
                .arg(self.path())
                .output()
                .unwrap();
            if out.status.success() {
                return;
            }
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(
                said.contains("busy") && std::time::Instant::now() < deadline,
                "remount {mode} failed: {said}; files open there: {:?}",
                open_files_under(self.path())
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// Which processes hold which files under `dir` open (from `/proc`), for a
/// remount refused as busy.
fn open_files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.flatten() {
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                if target.starts_with(dir) {
                    found.push(format!(
                        "pid {}: {}",
                        p.file_name().to_string_lossy(),
                        target.display()
                    ));
                }
            }
        }
    }
    found
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(self.path())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // Still busy (a failed test left the database open): detach now,
            // the kernel frees it when the last file closes.
            let _ = Command::new("umount").arg("-l").arg(self.path()).status();
        }
    }
}

/// Fills the filesystem at `dir` up, then gives back `room` bytes.
fn fill(dir: &Path, room: u64) -> PathBuf {
    let path = dir.join("filler");
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let chunk = vec![0x5a_u8; 16 * 1024];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    let _ = file.flush();
    let len = file.metadata().unwrap().len();
    file.set_len(len.saturating_sub(room)).unwrap();
    path
}

/// A record with a large environment, so that each write needs new pages.
fn sandbox(account: &AccountId, name: &str) -> Sandbox {
    let id = SandboxId::generate();
    let spec = SandboxSpec::from_input(
        SpecInput {
            name: Some(name.into()),
            labels: Some(vec!["durability".into(), format!("n={name}")]),
            environment_vars: Some([("PAYLOAD".to_string(), "x".repeat(6000))].into()),
            ..Default::default()
        },
        &id,
        &Defaults::default(),
    )
    .unwrap();
    let mut sb = Sandbox::new(
        id,
        account.clone(),
        None,
        spec,
        "local".into(),
        Utc::now().trunc_subsecs(6),
    );
    sb.status = SandboxStatus::Running;
    sb
}

/// What the store acknowledged, and what it refused.
#[derive(Default)]
struct Expected {
    sandboxes: BTreeMap<SandboxId, Sandbox>,
    refused_sandboxes: Vec<SandboxId>,
    operations: Vec<Operation>,
    refused_operations: Vec<Operation>,
}

/// Whether the filesystem at `dir` has room again as the store counts it
/// (a megabyte): until then a write that fits in pages the database already
/// has does not clear a full disk's degraded health.
fn has_room(dir: &Path) -> bool {
    let fs = rustix::fs::statvfs(dir).unwrap();
    fs.f_bavail * fs.f_frsize >= 1024 * 1024
}

/// One write of each kind in turn (insert, update, operation), with its
/// outcome checked at once and recorded in `expected`. Returns whether it
/// was acknowledged.
async fn write(
    store: &dyn Store,
    dir: &Path,
    account: &AccountId,
    step: usize,
    expected: &mut Expected,
) -> Result<(), StoreError> {
    let before = store.health();
    let outcome = match step % 4 {
        0 | 1 => {
            let sb = sandbox(account, &format!("sb-{step}"));
            let result = store.insert_sandbox(&sb).await;
            match &result {
                Ok(()) => {
                    expected.sandboxes.insert(sb.id.clone(), sb);
                }
                Err(_) => expected.refused_sandboxes.push(sb.id),
            }
            result
        }
        2 => {
            let mut sb = expected
                .sandboxes
                .values()
                .nth(step % expected.sandboxes.len().max(1))
                .cloned()
                .expect("a record to update");
            sb.status = SandboxStatus::Stopped;
            sb.status_reason = Some(format!("stopped at step {step}"));
            sb.stopped_at = Some(Utc::now().trunc_subsecs(6));
            match store.update_sandbox(&sb).await {
                Ok(saved) => {
                    expected.sandboxes.insert(saved.id.clone(), saved);
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        _ => {
            let now = Utc::now();
            let op = Operation::new(
                SandboxId::generate().as_str(),
                OperationKind::Create,
                account.clone(),
                "durability-test",
                now,
                now + chrono::Duration::seconds(30),
            )
            .with_params(serde_json::json!({"step": step}));
            let result = store.begin_operation(&op).await;
            match &result {
                Ok(()) => expected.operations.push(op),
                Err(_) => expected.refused_operations.push(op),
            }
            result
        }
    };
    match &outcome {
        Ok(()) if before != StoreHealth::Ok && !has_room(dir) => {
            assert_eq!(
                store.health(),
                before,
                "step {step}: healthy on a full disk"
            )
        }
        Ok(()) => assert_eq!(store.health(), StoreHealth::Ok, "step {step}"),
        Err(_) => assert!(
            matches!(store.health(), StoreHealth::Degraded(_)),
            "step {step}: a failed write left the store healthy"
        ),
    }
    outcome
}

/// Reads, lists and the records agree with what was acknowledged.
async fn check(store: &dyn Store, scope: &Scope, expected: &Expected) {
    for sb in expected.sandboxes.values() {
        assert_eq!(&store.get_sandbox(scope, &sb.id).await.unwrap(), sb);
    }
    for id in &expected.refused_sandboxes {
        assert!(
            matches!(
                store.get_sandbox(scope, id).await,
                Err(StoreError::NotFound)
            ),
            "a refused insert is there: {id}"
        );
    }
    let page = store
        .list_sandboxes(
            scope,
            &SandboxFilter {
                page: 1,
                per_page: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let listed: BTreeMap<SandboxId, Sandbox> = page
        .sandboxes
        .into_iter()
        .map(|sb| (sb.id.clone(), sb))
        .collect();
    assert_eq!(&listed, &expected.sandboxes, "the list disagrees");
    assert_eq!(page.total, expected.sandboxes.len() as u64);
    let active = store.list_active_sandboxes().await.unwrap();
    assert_eq!(active.len(), expected.sandboxes.len());

    for op in &expected.operations {
        assert_eq!(
            store.get_operation(&op.target).await.unwrap().as_ref(),
            Some(op)
        );
    }
    for op in &expected.refused_operations {
        assert_eq!(store.get_operation(&op.target).await.unwrap(), None);
    }
    let listed_ops = store.list_operations(1000).await.unwrap();
    assert_eq!(listed_ops.len(), expected.operations.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_loses_no_acknowledged_write() {
    let Some(fs) = Tmpfs::mount("4m") else {
        return;
    };
    let db = fs.path().join("stockade.db");
    let db_name = db.display().to_string();
    let url = format!("sqlite://{db_name}");
    let store = SqliteStore::connect(&url).await.unwrap();
    let account = store.create_account("alice", true).await.unwrap();
    let scope = Scope::account(account.id.clone());
    let mut expected = Expected::default();

    // Room to spare.
    for step in 0..4 {
        write(&store, fs.path(), &account.id, step, &mut expected)
            .await
            .unwrap();
    }
    check(&store, &scope, &expected).await;

    // The disk fills up, with a little room left: the first writes may
    // still fit, then they fail, one after the other on the same pool.
    let filler = fill(fs.path(), 48 * 1024);
    let mut refused = 0;
    for step in 4..44 {
        match write(&store, fs.path(), &account.id, step, &mut expected).await {
            Ok(()) => {}
            Err(StoreError::Unavailable(unavailable)) => {
                let message = &unavailable.message;
                refused += 1;
                assert!(message.contains(&db_name), "{message}");
                assert!(message.contains("free space"), "{message}");
                let StoreHealth::Degraded(reason) = store.health() else {
                    unreachable!("checked in write()")
                };
                assert!(reason.contains(&db_name), "{reason}");
            }
            Err(e) => panic!("step {step}: a full disk must be Unavailable, got {e:?}"),
        }
    }
    eprintln!(
        "{refused} of 40 writes refused on the full disk, {} acknowledged",
        40 - refused
    );
    assert!(refused >= 20, "only {refused} writes failed on a full disk");
    check(&store, &scope, &expected).await;

    // Space is back: the next write works and health recovers.
    std::fs::remove_file(&filler).unwrap();
    store.probe_write().await.unwrap();
    assert_eq!(store.health(), StoreHealth::Ok);
    for step in 44..52 {
        write(&store, fs.path(), &account.id, step, &mut expected)
            .await
            .unwrap();
    }
    check(&store, &scope, &expected).await;

    // Every acknowledged write is on disk.
    store.close().await;
    let store = SqliteStore::connect(&url).await.unwrap();
    check(&store, &scope, &expected).await;

    // A read-only filesystem is refused the same way, and recovered from.
    store.close().await;
    fs.remount("ro");
    match SqliteStore::connect(&url).await {
        Err(StoreError::Unavailable(unavailable)) => {
            let message = &unavailable.message;
            assert!(message.contains(&db_name), "{message}");
            assert!(message.contains("writable"), "{message}");
        }
        other => panic!("opening on a read-only disk: {:?}", other.map(|_| ())),
    }
    fs.remount("rw");
    let store = SqliteStore::connect(&url).await.unwrap();
    store.probe_write().await.unwrap();
    assert_eq!(store.health(), StoreHealth::Ok);
    write(&store, fs.path(), &account.id, 53, &mut expected)
        .await
        .unwrap();
    check(&store, &scope, &expected).await;
    store.close().await;
    let store = SqliteStore::connect(&url).await.unwrap();
    check(&store, &scope, &expected).await;
    store.close().await;
}
