//! What the service's fast tests share: a SQLite store with one account in
//! a temporary directory, the settings every test starts from, service
//! instances that renew their leases like a live server, and a wait for a
//! condition with a deadline.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use stockade_core::Account;
use stockade_runtime::Runtime;
use stockade_service::{Service, ServiceConfig};
use stockade_store::{SqliteStore, Store};

/// A store in its own directory, with the account `tenant`.
pub struct Base {
    pub dir: tempfile::TempDir,
    pub store: Arc<dyn Store>,
    pub account: Account,
}

pub async fn base() -> Base {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.unwrap());
    let account = store.create_account("tenant", false).await.unwrap();
    Base {
        dir,
        store,
        account,
    }
}

/// Settings with blobs in `dir` and operations that wait `wait` for one
/// another.
pub fn config(dir: &Path, wait: Duration) -> ServiceConfig {
    ServiceConfig {
        operation_wait: wait,
        blob_store: stockade_blob::BlobConfig::Local {
            dir: dir.join("blobs"),
        },
        ..ServiceConfig::default()
    }
}

/// A service instance (a server process) on `store` and `runtime` that
/// renews the leases of what it holds (a "dead" one stops at its crash
/// point).
pub async fn start(
    store: &Arc<dyn Store>,
    runtime: Arc<dyn Runtime>,
    config: ServiceConfig,
) -> Service {
    let svc = Service::new(store.clone(), runtime, config).await.unwrap();
    tokio::spawn(svc.clone().renew_leases(svc.shutdown().clone()));
    svc
}

/// Polls `done` every 50 ms for at most 10 s; `what` names what did not
/// happen in time.
pub async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
