//! What the store's test files share: a fresh PostgreSQL database per test,
//! stores on SQLite and PostgreSQL, and one story run as a test on each.

#![allow(dead_code, unused_macros, unused_imports)]

use std::sync::Arc;

use sqlx::{Connection, Executor, PgConnection};
use stockade_core::{AccountId, Operation, OperationKind, SandboxId};
use stockade_store::{PgStore, SqliteStore, Store, StoreError, StoreResult};

/// Runs `body` on a fresh PostgreSQL database, dropped afterwards; skipped
/// without `STOCKADE_TEST_DATABASE_URL`.
pub async fn on_postgres<F, Fut>(name: &str, body: F)
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let Ok(url) = std::env::var("STOCKADE_TEST_DATABASE_URL") else {
        eprintln!("{name} skipped: set STOCKADE_TEST_DATABASE_URL");
        return;
    };
    let database = format!("stockade_test_{}", SandboxId::generate());
    let mut admin = PgConnection::connect(&url).await.expect("connect");
    admin
        .execute(format!("CREATE DATABASE {database}").as_str())
        .await
        .expect("CREATE DATABASE");
    let test_url = stockade_store::with_database(&url, &database);
    let outcome = tokio::spawn(body(test_url)).await;
    admin
        .execute(format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)").as_str())
        .await
        .expect("DROP DATABASE");
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// A create of `target` by `account`, begun now by holder `test` with a
/// lease of a minute.
pub fn create_op(target: &SandboxId, account: &AccountId) -> Operation {
    let now = chrono::Utc::now();
    Operation::new(
        target.as_str(),
        OperationKind::Create,
        account.clone(),
        "test",
        now,
        now + chrono::Duration::seconds(60),
    )
}

/// A store on a SQLite file `file` in a new temporary directory (kept as
/// long as the returned directory lives).
pub async fn sqlite_store(file: &str) -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join(file).display());
    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.unwrap());
    (dir, store)
}

/// Two stores on one SQLite file, as two server instances on the same
/// database would have.
pub async fn sqlite_pair(file: &str) -> (tempfile::TempDir, Arc<dyn Store>, Arc<dyn Store>) {
    let (dir, a) = sqlite_store(file).await;
    let url = format!("sqlite://{}", dir.path().join(file).display());
    let b: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.unwrap());
    (dir, a, b)
}

/// A store on the PostgreSQL database at `url`.
pub async fn pg_store(url: &str) -> Arc<dyn Store> {
    Arc::new(PgStore::connect(url).await.unwrap())
}

/// Two stores (separate connection pools) on the PostgreSQL database at
/// `url`, as two server instances would have.
pub async fn pg_pair(url: &str) -> (Arc<dyn Store>, Arc<dyn Store>) {
    (pg_store(url).await, pg_store(url).await)
}

/// Two tests of one story: `$sqlite` on SQLite and `$postgres` on a fresh
/// PostgreSQL database (skipped without `STOCKADE_TEST_DATABASE_URL`).
/// `memory` gives the story an in-memory SQLite store, `file "x.db"` one on
/// a file, `pair "x.db"` two stores on one database (on PostgreSQL too).
macro_rules! store_tests {
    (@test $threads:literal, $name:ident, $body:block) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
        async fn $name() $body
    };
    (@postgres $threads:literal, $name:ident, |$url:ident| $body:block) => {
        $crate::common::store_tests!(@test $threads, $name, {
            $crate::common::on_postgres(stringify!($name), |$url| async move $body).await;
        });
    };
    (memory, $threads:literal, $sqlite:ident, $postgres:ident, |$s:ident| $story:expr) => {
        $crate::common::store_tests!(@test $threads, $sqlite, {
            let $s = stockade_store::connect("sqlite::memory:").await.unwrap();
            $story;
        });
        $crate::common::store_tests!(@postgres $threads, $postgres, |url| {
            let $s = $crate::common::pg_store(&url).await;
            $story;
        });
    };
    (file $file:literal, $threads:literal, $sqlite:ident, $postgres:ident, |$s:ident| $story:expr) => {
        $crate::common::store_tests!(@test $threads, $sqlite, {
            let (_dir, $s) = $crate::common::sqlite_store($file).await;
            $story;
        });
        $crate::common::store_tests!(@postgres $threads, $postgres, |url| {
            let $s = $crate::common::pg_store(&url).await;
            $story;
        });
    };
    (pair $file:literal, $threads:literal, $sqlite:ident, $postgres:ident, |$a:ident, $b:ident| $story:expr) => {
        $crate::common::store_tests!(@test $threads, $sqlite, {
            let (_dir, $a, $b) = $crate::common::sqlite_pair($file).await;
            $story;
        });
        $crate::common::store_tests!(@postgres $threads, $postgres, |url| {
            let ($a, $b) = $crate::common::pg_pair(&url).await;
            $story;
        });
    };
}
pub(crate) use store_tests;

/// Asserts that a store call found nothing (NotFound).
pub fn assert_not_found<T>(result: StoreResult<T>) {
    assert!(
        matches!(result, Err(StoreError::NotFound)),
        "expected NotFound, got {:?}",
        result.err()
    );
}

/// Asserts that a store call was refused as another account's (Forbidden).
pub fn assert_forbidden<T>(result: StoreResult<T>) {
    assert!(
        matches!(result, Err(StoreError::Forbidden)),
        "expected Forbidden, got {:?}",
        result.err()
    );
}
