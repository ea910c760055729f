//! `Store::setting_get_or_insert` (the proxy token key lives there): the first
//! value stored wins, also under concurrent first calls and across
//! reconnects; on SQLite and, when `STOCKADE_TEST_DATABASE_URL` is set, on
//! PostgreSQL.

mod common;

use std::sync::Arc;

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
    common::on_postgres("postgres_settings", |test_url| async move {
        settings_story(&test_url).await
    })
    .await;
}
