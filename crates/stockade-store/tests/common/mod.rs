//! What the store's test files share: a fresh PostgreSQL database per test.

use sqlx::{Connection, Executor, PgConnection};
use stockade_core::SandboxId;

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
