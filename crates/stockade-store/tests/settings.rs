//! `Store::setting_get_or_insert` (the proxy token key lives there): the first
//! value stored wins, also under concurrent first calls and across
//! reconnects; on SQLite and, when `STOCKADE_TEST_DATABASE_URL` is set, on
//! PostgreSQL.

use std::sync::Arc;

use sqlx::{Connection, Executor, PgConnection};
use stockade_core::SandboxId;
use stockade_store::Store;

async fn settings_story(url: &str) {
    let store: Arc<dyn Store> = stockade_store::connect(url).await.unwrap();
    // Several callers at once with different candidates: all see one value.
    let calls = (0..8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .setting_get_or_insert("test_key", &format!("candidate-{i}"))
                .await
                .unwrap()
        })
    });
    let mut seen = Vec::new();
    for c in calls {
        seen.push(c.await.unwrap());
    }
    let first = seen[0].clone();
    assert!(first.starts_with("candidate-"), "{first}");
    assert!(seen.iter().all(|v| *v == first), "{seen:?}");

    // A later call with another value keeps the stored one.
    assert_eq!(
        store
            .setting_get_or_insert("test_key", "other")
            .await
            .unwrap(),
        first
    );
    // Keys are independent; the instance id is untouched.
    let instance = store.instance_id().await.unwrap();
    assert_eq!(
        store
            .setting_get_or_insert("second_key", "v2")
            .await
            .unwrap(),
        "v2"
    );
    assert_eq!(store.instance_id().await.unwrap(), instance);

    // A new connection (a restarted server) reads the same value.
    let again = stockade_store::connect(url).await.unwrap();
    assert_eq!(
        again
            .setting_get_or_insert("test_key", "third")
            .await
            .unwrap(),
        first
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_settings() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    settings_story(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_settings() {
    let Ok(url) = std::env::var("STOCKADE_TEST_DATABASE_URL") else {
        eprintln!("postgres_settings skipped: set STOCKADE_TEST_DATABASE_URL");
        return;
    };
    let database = format!("stockade_test_{}", SandboxId::generate());
    let mut admin = PgConnection::connect(&url)
        .await
        .expect("cannot connect to STOCKADE_TEST_DATABASE_URL");
    admin
        .execute(format!("CREATE DATABASE {database}").as_str())
        .await
        .expect("CREATE DATABASE");
    let test_url = with_database(&url, &database);
    let outcome = tokio::spawn(async move { settings_story(&test_url).await }).await;
    admin
        .execute(format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)").as_str())
        .await
        .expect("DROP DATABASE");
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// `url` with its database replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    let mut out = format!("{}/{}", &base[..path], database);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}
