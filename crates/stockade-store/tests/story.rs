//! The store "story": one walk through everything the `Store` trait promises,
//! run on SQLite (a temporary file, and in memory) and, when
//! `STOCKADE_TEST_DATABASE_URL` is set, on a fresh PostgreSQL database.

mod common;

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::json;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{PgPool, SqlitePool};
use stockade_core::spec::SpecInput;
use stockade_core::{
    AccountId, ApiToken, Defaults, InstanceId, Label, Labels, Operation, OperationId,
    OperationKind, Sandbox, SandboxId, SandboxSpec, SandboxStatus, Scope, TeamId,
};
use stockade_store::{
    PgStore, SandboxFilter, SandboxPage, SandboxWrite, SqliteStore, Store, StoreError,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_story() {
    let dir = tempfile::tempdir().unwrap();
    // A directory that does not exist yet: connect creates it.
    let path = dir.path().join("data").join("stockade.db");
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::connect(&url).await.unwrap();
    assert!(path.exists(), "the database file was not created");
    let raw = SqlitePool::connect_with(
        SqliteConnectOptions::from_str(&url)
            .unwrap()
            .busy_timeout(Duration::from_secs(5)),
    )
    .await
    .unwrap();

    let instance = story(Arc::new(store), Raw::Sqlite(raw)).await;

    // Reopening applies no migration twice and keeps the data.
    let again = stockade_store::connect(&url).await.unwrap();
    assert_eq!(again.backend(), "sqlite");
    assert_eq!(again.instance_id().await.unwrap(), instance);
    assert_eq!(again.count_accounts().await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_memory_story() {
    let store = stockade_store::connect("sqlite::memory:").await.unwrap();
    story(store, Raw::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_story() {
    // A database of its own, so that parallel and repeated runs never meet.
    common::on_postgres("postgres_story", |test_url| async move {
        // Several server instances start at once on one database:
        // the migrations run once, the others wait and find them applied.
        let (a, b, c) = tokio::join!(
            PgStore::connect(&test_url),
            PgStore::connect(&test_url),
            PgStore::connect(&test_url)
        );
        let store = a.unwrap();
        b.unwrap();
        c.unwrap();
        let raw = PgPool::connect(&test_url).await.unwrap();
        story(Arc::new(store), Raw::Postgres(raw)).await;
        let again = stockade_store::connect(&test_url).await.unwrap();
        assert_eq!(again.backend(), "postgres");
        assert_eq!(again.count_accounts().await.unwrap(), 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_inserts_together() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("stockade.db").display());
    inserts_together(stockade_store::connect(&url).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_inserts_together() {
    common::on_postgres("postgres_inserts_together", |test_url| async move {
        inserts_together(stockade_store::connect(&test_url).await.unwrap()).await;
    })
    .await;
}

/// Sixty records inserted at once (a burst of warm-pool claims): the
/// store writes them in groups, and each insert still gets its own answer —
/// a taken name refuses only its own insert, in the middle of a group.
async fn inserts_together(store: Arc<dyn Store>) {
    let account = store.create_account("burst", false).await.unwrap().id;
    let scope = Scope::account(account.clone());
    let at = Utc::now().trunc_subsecs(6);
    let mut records: Vec<Sandbox> = (0..60)
        .map(|i| {
            sandbox(
                &account,
                None,
                &format!("burst-{i}"),
                &["burst"],
                SandboxStatus::Running,
                at,
            )
        })
        .collect();
    // Two take one name, and one reuses another's id.
    records[41] = sandbox(&account, None, "burst-7", &[], SandboxStatus::Running, at);
    records[52].id = records[3].id.clone();
    let answers = futures_join_all(records.iter().cloned().map(|sb| {
        let store = store.clone();
        tokio::spawn(async move { store.insert_sandbox(&sb).await })
    }))
    .await;
    let refused: Vec<usize> = (0..60).filter(|i| answers[*i].is_err()).collect();
    // Of each pair, exactly one was refused, as a conflict.
    assert_eq!(refused.len(), 2, "{answers:?}");
    assert!(refused.contains(&7) != refused.contains(&41), "{refused:?}");
    assert!(refused.contains(&3) != refused.contains(&52), "{refused:?}");
    for i in &refused {
        assert!(
            matches!(answers[*i], Err(StoreError::Conflict(_))),
            "insert {i}: {:?}",
            answers[*i]
        );
    }
    // Every other record is stored whole, with its labels.
    for (i, sb) in records.iter().enumerate() {
        if refused.contains(&i) {
            continue;
        }
        let stored = store.get_sandbox(&scope, &sb.id).await.unwrap();
        assert_eq!(stored.spec.name, sb.spec.name, "insert {i}");
        assert_eq!(stored.spec.labels, sb.spec.labels, "insert {i}");
    }
    let page = store
        .list_sandboxes(
            &scope,
            &SandboxFilter {
                per_page: 100,
                ..filter()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.total, 58);
}

/// Direct access to the database, to look at (and damage) the stored rows. `None` for in-memory SQLite.
enum Raw {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    None,
}

impl Raw {
    fn available(&self) -> bool {
        !matches!(self, Raw::None)
    }

    /// The stored metadata document of a sandbox.
    async fn metadata(&self, id: &SandboxId) -> serde_json::Value {
        let text: String = self
            .scalar(
                "SELECT metadata FROM sandboxes WHERE id = ?",
                "SELECT metadata::text FROM sandboxes WHERE id = $1",
                id,
            )
            .await;
        serde_json::from_str(&text).unwrap()
    }

    async fn label_rows(&self, id: &SandboxId) -> i64 {
        self.scalar(
            "SELECT COUNT(*) FROM sandbox_labels WHERE sandbox_id = ?",
            "SELECT COUNT(*) FROM sandbox_labels WHERE sandbox_id = $1",
            id,
        )
        .await
    }

    /// The one value a query about sandbox `id` reads, each database with
    /// its own SQL.
    async fn scalar<T>(&self, sqlite: &str, postgres: &str, id: &SandboxId) -> T
    where
        T: Send + Unpin,
        T: for<'r> sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        match self {
            Raw::Sqlite(pool) => {
                sqlx::query_scalar(sqlite)
                    .bind(id.as_str())
                    .fetch_one(pool)
                    .await
            }
            Raw::Postgres(pool) => {
                sqlx::query_scalar(postgres)
                    .bind(id.as_str())
                    .fetch_one(pool)
                    .await
            }
            Raw::None => unreachable!("no raw access"),
        }
        .unwrap()
    }

    /// Moves the creation time of an idempotency key to `at`.
    async fn backdate_idempotency_key(&self, account: &AccountId, key: &str, at: DateTime<Utc>) {
        let done = match self {
            Raw::Sqlite(pool) => sqlx::query(
                "UPDATE idempotency_keys SET created_at = ? WHERE account_id = ? AND key = ?",
            )
            .bind(at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
            .bind(account.as_str())
            .bind(key)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected(),
            Raw::Postgres(pool) => sqlx::query(
                "UPDATE idempotency_keys SET created_at = $1 WHERE account_id = $2 AND key = $3",
            )
            .bind(at)
            .bind(account.as_str())
            .bind(key)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected(),
            Raw::None => unreachable!("no raw access"),
        };
        assert_eq!(done, 1, "no idempotency key '{key}' to backdate");
    }

    /// Overwrites a record's metadata with a valid JSON document that is not
    /// a sandbox's metadata.
    async fn corrupt_metadata(&self, id: &SandboxId) {
        match self {
            Raw::Sqlite(pool) => {
                sqlx::query("UPDATE sandboxes SET metadata = '{\"oops\": true}' WHERE id = ?")
                    .bind(id.as_str())
                    .execute(pool)
                    .await
                    .unwrap();
            }
            Raw::Postgres(pool) => {
                sqlx::query(
                    "UPDATE sandboxes SET metadata = '{\"oops\": true}'::jsonb WHERE id = $1",
                )
                .bind(id.as_str())
                .execute(pool)
                .await
                .unwrap();
            }
            Raw::None => unreachable!("no raw access"),
        }
    }
}

fn labels(items: &[&str]) -> Labels {
    let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
    Labels::parse_field(&items, "labels").unwrap()
}

fn label_vec(items: &[&str]) -> Vec<Label> {
    items
        .iter()
        .map(|s| Label::parse_field(s, "labels").unwrap())
        .collect()
}

fn spec(id: &SandboxId, name: &str, with_labels: &[&str]) -> SandboxSpec {
    SandboxSpec::from_input(
        SpecInput {
            name: Some(name.into()),
            labels: Some(with_labels.iter().map(|s| s.to_string()).collect()),
            environment_vars: Some([("GREETING".to_string(), "hello".to_string())].into()),
            tags: Some([("team".to_string(), "infra".to_string())].into()),
            ports: Some(vec![3000, 8080]),
            cpu_cores: Some(1.5),
            ..Default::default()
        },
        id,
        &Defaults::default(),
    )
    .unwrap()
}

/// A new record; `at` has microsecond precision, as both databases keep it.
fn sandbox(
    account: &AccountId,
    team: Option<&TeamId>,
    name: &str,
    with_labels: &[&str],
    status: SandboxStatus,
    at: DateTime<Utc>,
) -> Sandbox {
    let id = SandboxId::generate();
    let mut s = Sandbox::new(
        id.clone(),
        account.clone(),
        team.cloned(),
        spec(&id, name, with_labels),
        "local".into(),
        at,
    );
    s.status = status;
    match status {
        SandboxStatus::Running => s.started_at = Some(at),
        SandboxStatus::Stopped => {
            s.started_at = Some(at);
            s.stopped_at = Some(at + chrono::Duration::seconds(1));
        }
        SandboxStatus::Terminated => s.terminated_at = Some(at + chrono::Duration::seconds(1)),
        SandboxStatus::Error => s.status_reason = Some("image pull failed".into()),
        _ => {}
    }
    s.container_id = Some(format!("container-{id}"));
    s
}

fn names(page: &SandboxPage) -> Vec<&str> {
    page.sandboxes
        .iter()
        .map(|s| s.spec.name.as_str())
        .collect()
}

fn filter() -> SandboxFilter {
    SandboxFilter {
        page: 1,
        per_page: 50,
        ..Default::default()
    }
}

async fn list(store: &dyn Store, scope: &Scope, f: SandboxFilter) -> SandboxPage {
    store.list_sandboxes(scope, &f).await.unwrap()
}

/// Runs the whole story on `store`; returns the instance id.
async fn story(store: Arc<dyn Store>, raw: Raw) -> InstanceId {
    let s: &dyn Store = &*store;

    // --- the instance -------------------------------------------------------
    s.ping().await.unwrap();
    let ids = futures_join_all((0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.instance_id().await.unwrap() })
    }))
    .await;
    let instance = ids[0].clone();
    assert!(
        ids.iter().all(|i| *i == instance),
        "instance ids differ: {ids:?}"
    );
    assert_eq!(s.instance_id().await.unwrap(), instance);

    // --- accounts and tokens ------------------------------------------------
    assert_eq!(s.count_accounts().await.unwrap(), 0);
    assert!(s.list_accounts().await.unwrap().is_empty());
    let alice = s.create_account("alice", true).await.unwrap();
    let bob = s.create_account("bob", false).await.unwrap();
    let carol = s.create_account("carol", false).await.unwrap();
    assert!(alice.is_admin && !bob.is_admin);
    match s.create_account("alice", false).await {
        Err(StoreError::Conflict(m)) => assert!(m.contains("alice"), "{m}"),
        other => panic!("duplicate account name: {other:?}"),
    }
    assert_eq!(s.count_accounts().await.unwrap(), 3);
    assert_eq!(
        s.list_accounts().await.unwrap(),
        vec![alice.clone(), bob.clone(), carol.clone()]
    );

    let alice_token = ApiToken::generate();
    let bob_token = ApiToken::generate();
    s.add_token(&alice.id, &alice_token.hash()).await.unwrap();
    s.add_token(&bob.id, &bob_token.hash()).await.unwrap();
    assert!(matches!(
        s.add_token(&bob.id, &alice_token.hash()).await,
        Err(StoreError::Conflict(_))
    ));
    common::assert_not_found(
        s.add_token(&AccountId::generate(), &ApiToken::generate().hash())
            .await,
    );
    assert!(s
        .account_by_token_hash(&ApiToken::generate().hash())
        .await
        .unwrap()
        .is_none());
    assert!(s
        .account_by_token_hash(alice_token.plaintext())
        .await
        .unwrap()
        .is_none());

    // --- teams ---------------------------------------------------------------
    assert!(s.list_teams().await.unwrap().is_empty());
    let platform = s.create_team("platform").await.unwrap();
    let team = platform.id.clone();
    let data = s.create_team("data").await.unwrap();
    assert_eq!(platform.name, "platform");
    match s.create_team("platform").await {
        Err(StoreError::Conflict(m)) => assert!(m.contains("platform"), "{m}"),
        other => panic!("duplicate team name: {other:?}"),
    }
    assert_eq!(
        s.list_teams().await.unwrap(),
        vec![platform.clone(), data.clone()]
    );
    assert_eq!(s.get_team(&team).await.unwrap(), platform);
    common::assert_not_found(s.get_team(&TeamId::generate()).await);
    s.add_team_member(&team, &alice.id).await.unwrap();
    s.add_team_member(&team, &bob.id).await.unwrap();
    // Adding a member twice is fine.
    s.add_team_member(&team, &bob.id).await.unwrap();
    s.add_team_member(&data.id, &carol.id).await.unwrap();
    s.add_team_member(&data.id, &alice.id).await.unwrap();
    common::assert_not_found(s.add_team_member(&TeamId::generate(), &alice.id).await);
    common::assert_not_found(s.add_team_member(&team, &AccountId::generate()).await);
    assert_eq!(
        s.list_team_members(&team).await.unwrap(),
        vec![alice.clone(), bob.clone()]
    );
    assert_eq!(
        s.list_team_members(&data.id).await.unwrap(),
        vec![alice.clone(), carol.clone()]
    );
    assert!(s
        .list_team_members(&TeamId::generate())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        s.teams_of_account(&alice.id).await.unwrap(),
        vec![platform.clone(), data.clone()]
    );
    // Leaving a team: gone from the members and from the account's teams;
    // leaving twice is NotFound.
    s.remove_team_member(&data.id, &alice.id).await.unwrap();
    common::assert_not_found(s.remove_team_member(&data.id, &alice.id).await);
    assert_eq!(
        s.list_team_members(&data.id).await.unwrap(),
        vec![carol.clone()]
    );
    assert_eq!(
        s.teams_of_account(&alice.id).await.unwrap(),
        vec![platform.clone()]
    );
    assert_eq!(
        s.teams_of_account(&carol.id).await.unwrap(),
        vec![data.clone()]
    );
    assert!(s
        .teams_of_account(&AccountId::generate())
        .await
        .unwrap()
        .is_empty());
    let expected_teams = vec![team.clone()];
    let (found, alice_teams) = s
        .account_by_token_hash(&alice_token.hash())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found, alice);
    assert_eq!(alice_teams, expected_teams);
    let (found, bob_teams) = s
        .account_by_token_hash(&bob_token.hash())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found, bob);
    // Several teams come back sorted, from the one lookup a request makes.
    let carol_token = ApiToken::generate();
    s.add_token(&carol.id, &carol_token.hash()).await.unwrap();
    s.add_team_member(&platform.id, &carol.id).await.unwrap();
    let (_, carol_teams) = s
        .account_by_token_hash(&carol_token.hash())
        .await
        .unwrap()
        .unwrap();
    let mut both = vec![platform.id.clone(), data.id.clone()];
    both.sort();
    assert_eq!(carol_teams, both);
    s.remove_team_member(&platform.id, &carol.id).await.unwrap();

    let alice_scope = Scope {
        account_id: alice.id.clone(),
        team_ids: alice_teams,
    };
    let bob_scope = Scope {
        account_id: bob.id.clone(),
        team_ids: bob_teams,
    };
    let carol_scope = Scope::account(carol.id.clone());

    // --- sandboxes ----------------------------------------------------------
    let t0 = Utc::now().trunc_subsecs(6) - chrono::Duration::hours(1);
    let at = |secs: i64| t0 + chrono::Duration::seconds(secs);
    let team_ref = Some(&team);
    use SandboxStatus::*;
    let web = sandbox(
        &alice.id,
        None,
        "web",
        &["env=prod", "tier=web"],
        Running,
        at(1),
    );
    let db = sandbox(
        &alice.id,
        None,
        "db",
        &["env=prod", "tier=db"],
        Stopped,
        at(2),
    );
    let job = sandbox(&alice.id, None, "job", &["env=dev"], Error, at(3));
    let old = sandbox(&alice.id, None, "old", &[], Terminated, at(4));
    let mut shared = sandbox(&alice.id, team_ref, "shared", &["env=prod"], Running, at(5));
    shared.s3_config = Some(
        json!({"bucket": "workspaces", "prefix": "alice/", "endpoint": "http://127.0.0.1:9000"}),
    );
    shared.s3_sync = Some(
        json!({"key": "alice/shared.tar.gz", "bytes": 123456789, "completed_at": "2025-01-02T03:04:05Z"}),
    );
    let bob_web = sandbox(&bob.id, None, "web", &["env=prod"], Running, at(6));
    let bob_private = sandbox(&bob.id, None, "private", &[], Pending, at(7));
    // Two records with one creation time: the id decides the order.
    let tie_a = sandbox(&carol.id, None, "tie-a", &[], Running, at(8));
    let mut tie_b = sandbox(&carol.id, None, "tie-b", &[], Running, at(8));
    tie_b.started_at = None;
    for sb in [
        &web,
        &db,
        &job,
        &old,
        &shared,
        &bob_web,
        &bob_private,
        &tie_a,
        &tie_b,
    ] {
        s.insert_sandbox(sb).await.unwrap();
    }
    // Metrics count the records by status.
    assert_eq!(
        counts(s).await,
        [
            (Running, 5),
            (Stopped, 1),
            (Error, 1),
            (Terminated, 1),
            (Pending, 1)
        ]
        .into_iter()
        .collect()
    );

    // Records come back exactly as written, metadata included.
    for sb in [&web, &db, &job, &old, &shared] {
        assert_eq!(&s.get_sandbox(&alice_scope, &sb.id).await.unwrap(), sb);
    }
    assert_eq!(
        s.get_sandbox(&bob_scope, &bob_web.id).await.unwrap(),
        bob_web
    );
    if raw.available() {
        let doc = raw.metadata(&shared.id).await;
        assert_eq!(doc["sandbox_id"], shared.id.as_str());
        assert_eq!(doc["status"], "RUNNING");
        assert!(doc["created_at"].is_string());
        assert_eq!(doc["config"]["docker_image"], "node:20-bookworm");
        assert_eq!(doc["config"]["cpu_cores"], 1.5);
        assert_eq!(doc["config"]["environment_vars"]["GREETING"], "hello");
        assert_eq!(doc["s3_config"]["bucket"], "workspaces");
        assert_eq!(doc["s3_sync"]["bytes"], 123456789);
        assert_eq!(raw.label_rows(&web.id).await, 2);
    }

    // Another account's sandbox is forbidden, an unknown id not found.
    common::assert_forbidden(s.get_sandbox(&bob_scope, &web.id).await);
    common::assert_forbidden(s.get_sandbox(&carol_scope, &shared.id).await);
    common::assert_not_found(s.get_sandbox(&alice_scope, &SandboxId::generate()).await);
    // A team member sees the team's sandbox.
    assert_eq!(s.get_sandbox(&bob_scope, &shared.id).await.unwrap(), shared);

    // By name: the caller's own active sandboxes only.
    assert_eq!(
        s.get_sandbox_by_name(&alice_scope, "web").await.unwrap(),
        web
    );
    assert_eq!(
        s.get_sandbox_by_name(&bob_scope, "web").await.unwrap(),
        bob_web
    );
    common::assert_not_found(s.get_sandbox_by_name(&bob_scope, "shared").await);
    common::assert_not_found(s.get_sandbox_by_name(&alice_scope, "nope").await);

    // One active name per account.
    let dup = sandbox(&alice.id, None, "web", &[], Running, at(9));
    match s.insert_sandbox(&dup).await {
        Err(StoreError::Conflict(m)) => {
            assert_eq!(m, "a sandbox named 'web' already exists")
        }
        other => panic!("duplicate name: {other:?}"),
    }
    assert!(!s.sandbox_record_exists(&dup.id).await.unwrap());
    let mut same_id = sandbox(&carol.id, None, "other", &[], Running, at(9));
    same_id.id = web.id.clone();
    assert!(matches!(
        s.insert_sandbox(&same_id).await,
        Err(StoreError::Conflict(_))
    ));

    // --- listing ------------------------------------------------------------
    let page = list(s, &alice_scope, filter()).await;
    assert_eq!(names(&page), ["shared", "job", "db", "web"]);
    assert_eq!(page.total, 4);
    assert_eq!(page.sandboxes[0], shared);
    let f = |statuses: Vec<SandboxStatus>| SandboxFilter {
        statuses,
        ..filter()
    };
    assert_eq!(
        names(&list(s, &alice_scope, f(vec![Running])).await),
        ["shared", "web"]
    );
    assert_eq!(
        names(&list(s, &alice_scope, f(vec![Running, Stopped])).await),
        ["shared", "db", "web"]
    );
    assert_eq!(
        names(&list(s, &alice_scope, f(vec![Terminated])).await),
        ["old"]
    );
    assert_eq!(
        names(&list(s, &alice_scope, f(vec![Running, Terminated])).await),
        ["shared", "old", "web"]
    );
    assert!(list(s, &alice_scope, f(vec![Pending]))
        .await
        .sandboxes
        .is_empty());

    let by_labels = |l: &[&str]| SandboxFilter {
        labels: label_vec(l),
        ..filter()
    };
    assert_eq!(
        names(&list(s, &alice_scope, by_labels(&["env=prod"])).await),
        ["shared", "db", "web"]
    );
    assert_eq!(
        names(&list(s, &alice_scope, by_labels(&["tier=web", "env=prod"])).await),
        ["web"]
    );
    assert_eq!(
        names(
            &list(
                s,
                &alice_scope,
                by_labels(&["env=prod", "tier=web", "env=prod"])
            )
            .await
        ),
        ["web"]
    );
    let none = list(s, &alice_scope, by_labels(&["env=prod", "missing"])).await;
    assert!(none.sandboxes.is_empty());
    assert_eq!(none.total, 0);

    let by_name = |n: &str| SandboxFilter {
        name: Some(n.into()),
        ..filter()
    };
    assert_eq!(names(&list(s, &alice_scope, by_name("db")).await), ["db"]);
    assert!(list(s, &alice_scope, by_name("nope"))
        .await
        .sandboxes
        .is_empty());

    let active = |a: bool| SandboxFilter {
        is_active: Some(a),
        ..filter()
    };
    assert_eq!(
        names(&list(s, &alice_scope, active(true)).await),
        ["shared", "job", "db", "web"]
    );
    assert_eq!(names(&list(s, &alice_scope, active(false)).await), ["old"]);

    let by_team = SandboxFilter {
        team_id: Some(team.clone()),
        ..filter()
    };
    assert_eq!(
        names(&list(s, &alice_scope, by_team.clone()).await),
        ["shared"]
    );
    assert_eq!(names(&list(s, &bob_scope, by_team).await), ["shared"]);
    // Bob sees his own sandboxes and his team's, newest first.
    assert_eq!(
        names(&list(s, &bob_scope, filter()).await),
        ["private", "web", "shared"]
    );
    assert_eq!(
        names(&list(s, &bob_scope, by_labels(&["env=prod"])).await),
        ["web", "shared"]
    );
    assert!(list(s, &Scope::account(AccountId::generate()), filter())
        .await
        .sandboxes
        .is_empty());

    // Pages: newest first, `total` counts every match, so that
    // has_next = page × per_page < total.
    let paged = |page: u32| SandboxFilter {
        page,
        per_page: 3,
        ..filter()
    };
    let p1 = list(s, &alice_scope, paged(1)).await;
    assert_eq!((names(&p1), p1.total), (vec!["shared", "job", "db"], 4));
    assert!(3 < p1.total);
    let p2 = list(s, &alice_scope, paged(2)).await;
    assert_eq!((names(&p2), p2.total), (vec!["web"], 4));
    assert!(2 * 3 >= p2.total);
    let p3 = list(s, &alice_scope, paged(3)).await;
    assert!(p3.sandboxes.is_empty());
    assert_eq!(p3.total, 4);
    assert_eq!(names(&list(s, &alice_scope, paged(0)).await), names(&p1));
    // Equal creation times: the larger id first, stable across pages.
    let ties = list(s, &carol_scope, filter()).await;
    let mut tie_ids = vec![tie_a.id.clone(), tie_b.id.clone()];
    tie_ids.sort();
    tie_ids.reverse();
    assert_eq!(
        ties.sandboxes
            .iter()
            .map(|s| s.id.clone())
            .collect::<Vec<_>>(),
        tie_ids
    );
    let one = |page| SandboxFilter {
        page,
        per_page: 1,
        ..filter()
    };
    assert_eq!(
        list(s, &carol_scope, one(1)).await.sandboxes[0].id,
        tie_ids[0]
    );
    assert_eq!(
        list(s, &carol_scope, one(2)).await.sandboxes[0].id,
        tie_ids[1]
    );

    // --- updates with row versions -----------------------------------
    let mut changed = s.get_sandbox(&alice_scope, &web.id).await.unwrap();
    assert_eq!(changed.version, 0);
    changed.status = Stopped;
    changed.stopped_at = Some(at(20));
    changed.status_reason = Some("stopped by the user".into());
    changed.container_id = None;
    changed.spec.labels = labels(&["env=prod", "tier=web", "extra"]);
    changed.s3_sync = Some(json!({"key": "alice/web.tar.gz", "bytes": 42}));
    let saved = s.update_sandbox(&changed).await.unwrap();
    assert_eq!(saved.version, 1);
    assert_eq!(s.get_sandbox(&alice_scope, &web.id).await.unwrap(), saved);
    // The version the writer read is stale now.
    match s.update_sandbox(&changed).await {
        Err(StoreError::Conflict(m)) => assert!(m.contains("concurrently"), "{m}"),
        other => panic!("stale update: {other:?}"),
    }
    assert_eq!(s.get_sandbox(&alice_scope, &web.id).await.unwrap(), saved);
    assert_eq!(
        names(&list(s, &alice_scope, by_labels(&["extra"])).await),
        ["web"]
    );
    assert_eq!(
        names(&list(s, &alice_scope, f(vec![Stopped])).await),
        ["db", "web"]
    );
    // Labels removed by an update are gone from the filter too.
    let mut fewer = saved.clone();
    fewer.spec.labels = labels(&["extra"]);
    let fewer = s.update_sandbox(&fewer).await.unwrap();
    assert_eq!(fewer.version, 2);
    assert!(list(s, &alice_scope, by_labels(&["tier=web"]))
        .await
        .sandboxes
        .is_empty());
    // An unknown record, and a rename onto an active name.
    let mut ghost = sandbox(&alice.id, None, "ghost", &[], Running, at(21));
    ghost.version = 3;
    common::assert_not_found(s.update_sandbox(&ghost).await);
    let mut rename = s.get_sandbox(&alice_scope, &job.id).await.unwrap();
    rename.spec.name = stockade_core::SandboxName::parse("db").unwrap();
    match s.update_sandbox(&rename).await {
        Err(StoreError::Conflict(m)) => assert_eq!(m, "a sandbox named 'db' already exists"),
        other => panic!("rename onto a taken name: {other:?}"),
    }
    assert_eq!(s.get_sandbox(&alice_scope, &job.id).await.unwrap(), job);

    // Ten writers append one label each to one record, retrying on conflict:
    // no write is lost, and every success bumps the version exactly once.
    let before = s.get_sandbox(&alice_scope, &db.id).await.unwrap();
    let writers = (0..10).map(|i| {
        let store = store.clone();
        let scope = alice_scope.clone();
        let id = db.id.clone();
        tokio::spawn(async move {
            for _attempt in 0..1000 {
                let mut sb = store.get_sandbox(&scope, &id).await.unwrap();
                let mut l = sb.spec.labels.to_strings();
                l.push(format!("writer-{i}"));
                sb.spec.labels = Labels::parse_field(&l, "labels").unwrap();
                sb.status_reason = Some(format!("writer {i}"));
                match store.update_sandbox(&sb).await {
                    Ok(_) => return,
                    Err(StoreError::Conflict(_)) => tokio::task::yield_now().await,
                    Err(e) => panic!("writer {i}: {e}"),
                }
            }
            panic!("writer {i} never got its update in");
        })
    });
    futures_join_all(writers).await;
    let after = s.get_sandbox(&alice_scope, &db.id).await.unwrap();
    assert_eq!(after.version, before.version + 10);
    let got: BTreeSet<String> = after.spec.labels.to_strings().into_iter().collect();
    for i in 0..10 {
        assert!(
            got.contains(&format!("writer-{i}")),
            "writer-{i} lost: {got:?}"
        );
    }
    assert!(got.contains("env=prod") && got.contains("tier=db"));
    let all_writers: Vec<String> = (0..10).map(|i| format!("writer-{i}")).collect();
    let all_writers: Vec<&str> = all_writers.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        names(&list(s, &alice_scope, by_labels(&all_writers)).await),
        ["db"]
    );

    // Two creates with one name at once: exactly one wins.
    for round in 0..5 {
        let name = format!("race-{round}");
        let a = sandbox(&alice.id, None, &name, &["race"], Running, at(30 + round));
        let b = sandbox(&alice.id, None, &name, &["race"], Running, at(30 + round));
        let (ra, rb) = {
            let (sa, sb) = (store.clone(), store.clone());
            let (a2, b2) = (a.clone(), b.clone());
            let ta = tokio::spawn(async move { sa.insert_sandbox(&a2).await });
            let tb = tokio::spawn(async move { sb.insert_sandbox(&b2).await });
            (ta.await.unwrap(), tb.await.unwrap())
        };
        let winner = match (ra, rb) {
            (Ok(()), Err(StoreError::Conflict(m))) | (Err(StoreError::Conflict(m)), Ok(())) => {
                assert!(m.contains(&name), "{m}");
                if s.sandbox_record_exists(&a.id).await.unwrap() {
                    a
                } else {
                    b
                }
            }
            other => panic!("round {round}: {other:?}"),
        };
        assert_eq!(
            s.get_sandbox_by_name(&alice_scope, &name).await.unwrap(),
            winner
        );
    }
    let races = list(s, &alice_scope, by_labels(&["race"])).await;
    assert_eq!(races.total, 5);

    // --- soft delete --------------------------------------------------------
    let deleted_at = at(40);
    s.soft_delete_sandbox(&db.id, deleted_at).await.unwrap();
    let gone = s.get_sandbox(&alice_scope, &db.id).await.unwrap();
    assert_eq!(gone.status, Terminated);
    assert_eq!(gone.deleted_at, Some(deleted_at));
    assert_eq!(gone.terminated_at, Some(deleted_at));
    assert_eq!(gone.version, after.version + 1);
    assert_eq!(gone.spec, after.spec);
    if raw.available() {
        assert_eq!(raw.metadata(&db.id).await["status"], "TERMINATED");
    }
    // Still forbidden to others, no longer found by name, not listed as active.
    common::assert_forbidden(s.get_sandbox(&bob_scope, &db.id).await);
    common::assert_not_found(s.get_sandbox_by_name(&alice_scope, "db").await);
    let names_now = names(&list(s, &alice_scope, filter()).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    assert!(!names_now.contains(&"db".to_string()), "{names_now:?}");
    assert!(list(s, &alice_scope, by_name("db"))
        .await
        .sandboxes
        .is_empty());
    assert_eq!(
        names(&list(s, &alice_scope, active(false)).await),
        ["old", "db"]
    );
    assert_eq!(
        names(&list(s, &alice_scope, f(vec![Terminated])).await),
        ["old", "db"]
    );
    // A second delete keeps the first time; a sandbox terminated earlier keeps
    // its termination time.
    s.soft_delete_sandbox(&db.id, at(50)).await.unwrap();
    assert_eq!(
        s.get_sandbox(&alice_scope, &db.id)
            .await
            .unwrap()
            .deleted_at,
        Some(deleted_at)
    );
    s.soft_delete_sandbox(&old.id, at(41)).await.unwrap();
    let old_gone = s.get_sandbox(&alice_scope, &old.id).await.unwrap();
    assert_eq!(old_gone.terminated_at, old.terminated_at);
    assert_eq!(old_gone.deleted_at, Some(at(41)));
    common::assert_not_found(s.soft_delete_sandbox(&SandboxId::generate(), at(42)).await);
    // The name is free again.
    let db2 = sandbox(&alice.id, None, "db", &["env=prod"], Running, at(43));
    s.insert_sandbox(&db2).await.unwrap();
    assert_eq!(
        s.get_sandbox_by_name(&alice_scope, "db").await.unwrap(),
        db2
    );
    assert_eq!(names(&list(s, &alice_scope, by_name("db")).await), ["db"]);

    // --- reconciliation views -----------------------------------------------
    let active_ids: BTreeSet<SandboxId> = s
        .list_active_sandboxes()
        .await
        .unwrap()
        .into_iter()
        .map(|sb| sb.id)
        .collect();
    for sb in [
        &web,
        &job,
        &shared,
        &bob_web,
        &bob_private,
        &tie_a,
        &tie_b,
        &db2,
    ] {
        assert!(active_ids.contains(&sb.id), "{} not active", sb.spec.name);
    }
    assert!(!active_ids.contains(&db.id) && !active_ids.contains(&old.id));
    // Page by page, in id order, the same records.
    let mut paged = Vec::new();
    let mut after: Option<SandboxId> = None;
    loop {
        let page = s
            .list_active_sandboxes_page(after.as_ref(), 3)
            .await
            .unwrap();
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        paged.extend(page.into_iter().map(|sb| sb.id));
    }
    assert_eq!(paged, active_ids.iter().cloned().collect::<Vec<_>>());
    // Deleted records are not counted; the count agrees with the records.
    let mut tally = std::collections::HashMap::new();
    for sb in s.list_active_sandboxes().await.unwrap() {
        *tally.entry(sb.status).or_insert(0u64) += 1;
    }
    assert_eq!(counts(s).await, tally);
    assert!(!tally.contains_key(&Terminated));
    assert_eq!(active_ids.len(), 8 + 5);
    assert!(s.sandbox_record_exists(&db.id).await.unwrap());
    assert!(!s
        .sandbox_record_exists(&SandboxId::generate())
        .await
        .unwrap());
    // Owners across accounts (warm-pool members carry no owner label).
    let owner = s.sandbox_owner(&db.id).await.unwrap().unwrap();
    assert_eq!((owner.account_id, owner.deleted), (alice.id.clone(), true));
    let owner = s.sandbox_owner(&shared.id).await.unwrap().unwrap();
    assert_eq!(owner.team_id, shared.team_id);
    assert!(!owner.deleted);
    assert_eq!(s.sandbox_owner(&SandboxId::generate()).await.unwrap(), None);

    // --- purge --------------------------------------------------------------
    s.purge_sandbox(&job.id).await.unwrap();
    common::assert_not_found(s.get_sandbox(&alice_scope, &job.id).await);
    assert!(!s.sandbox_record_exists(&job.id).await.unwrap());
    assert!(list(s, &alice_scope, by_labels(&["env=dev"]))
        .await
        .sandboxes
        .is_empty());
    if raw.available() {
        assert_eq!(raw.label_rows(&job.id).await, 0);
    }
    common::assert_not_found(s.purge_sandbox(&job.id).await);

    // --- bad data is an error, never a panic -----------------------------------
    if raw.available() {
        raw.corrupt_metadata(&bob_private.id).await;
        assert!(matches!(
            s.get_sandbox(&bob_scope, &bob_private.id).await,
            Err(StoreError::Other(_))
        ));
        assert!(matches!(
            s.list_sandboxes(&bob_scope, &filter()).await,
            Err(StoreError::Other(_))
        ));
        // Other records are unaffected.
        assert_eq!(
            s.get_sandbox(&bob_scope, &bob_web.id).await.unwrap(),
            bob_web
        );
        s.purge_sandbox(&bob_private.id).await.unwrap();
    }

    // --- idempotency keys ---------------------------------------------
    let key_sb = SandboxId::generate();
    let fresh = stockade_store::idempotency_expired_before(Utc::now());
    assert_eq!(
        s.get_idempotency_key(&alice.id, "k-1", fresh)
            .await
            .unwrap(),
        None
    );
    s.insert_idempotency_key(&alice.id, "k-1", "hash-a", &key_sb, fresh)
        .await
        .unwrap();
    assert!(matches!(
        s.insert_idempotency_key(&alice.id, "k-1", "hash-b", &SandboxId::generate(), fresh)
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        s.get_idempotency_key(&alice.id, "k-1", fresh)
            .await
            .unwrap(),
        Some(("hash-a".to_owned(), key_sb.clone()))
    );
    // Keys are per account.
    assert_eq!(
        s.get_idempotency_key(&bob.id, "k-1", fresh).await.unwrap(),
        None
    );
    s.insert_idempotency_key(&bob.id, "k-1", "hash-c", &SandboxId::generate(), fresh)
        .await
        .unwrap();
    s.delete_idempotency_key(&alice.id, "k-1").await.unwrap();
    assert_eq!(
        s.get_idempotency_key(&alice.id, "k-1", fresh)
            .await
            .unwrap(),
        None
    );
    assert!(s
        .get_idempotency_key(&bob.id, "k-1", fresh)
        .await
        .unwrap()
        .is_some());
    idempotency_expiry(s, &raw, &alice.id).await;

    operations(&store, &alice_scope, at(60)).await;

    instance
}

/// A key expires 24 h after it was recorded; an expired key is
/// ignored, may be used anew, and is purged.
async fn idempotency_expiry(s: &dyn Store, raw: &Raw, account: &AccountId) {
    let lookup = |key: &'static str, cutoff| async move {
        s.get_idempotency_key(account, key, cutoff).await.unwrap()
    };
    let record = |key: &'static str, hash: &'static str, id: SandboxId, cutoff| async move {
        s.insert_idempotency_key(account, key, hash, &id, cutoff)
            .await
    };
    let now = Utc::now();
    let fresh = stockade_store::idempotency_expired_before(now);
    assert_eq!(fresh, now - chrono::Duration::hours(24));
    let first = SandboxId::generate();
    record("k-exp", "hash-1", first.clone(), fresh)
        .await
        .unwrap();
    // Seen as expired by a lookup whose cutoff lies after its creation...
    let later = now + chrono::Duration::seconds(5);
    assert_eq!(lookup("k-exp", later).await, None);
    // ...but not by one whose cutoff lies before it; a second use conflicts.
    assert_eq!(lookup("k-exp", fresh).await, Some(("hash-1".into(), first)));
    assert!(matches!(
        record("k-exp", "hash-2", SandboxId::generate(), fresh).await,
        Err(StoreError::Conflict(_))
    ));
    // An expired key is taken over by the next use.
    let take_over = |key: &'static str, hash: &'static str, cutoff| async move {
        let id = SandboxId::generate();
        record(key, hash, id.clone(), cutoff).await.unwrap();
        assert_eq!(lookup(key, fresh).await, Some((hash.to_owned(), id)));
    };
    take_over("k-exp", "hash-2", later).await;

    // With the real 24 h: a key recorded 25 h ago is gone for lookups and
    // for the purge, a key recorded now stays.
    if raw.available() {
        record("k-old", "hash-old", SandboxId::generate(), fresh)
            .await
            .unwrap();
        raw.backdate_idempotency_key(account, "k-old", now - chrono::Duration::hours(25))
            .await;
        assert_eq!(lookup("k-old", fresh).await, None);
        assert_eq!(s.purge_idempotency_keys(fresh).await.unwrap(), 1);
        assert_eq!(s.purge_idempotency_keys(fresh).await.unwrap(), 0);
        assert!(lookup("k-exp", fresh).await.is_some());
        take_over("k-old", "hash-new", fresh).await;
    }
    // Purging up to a moment after now removes every key recorded so far.
    assert!(s.purge_idempotency_keys(later).await.unwrap() >= 2);
    assert_eq!(
        lookup("k-exp", fresh - chrono::Duration::days(1)).await,
        None
    );
}

/// Durable operations, the per-target lock, leases and claims,
/// and the atomic writes that begin and end them. Time is passed in, so
/// leases end without waiting.
async fn operations(store: &Arc<dyn Store>, scope: &Scope, t0: DateTime<Utc>) {
    use OperationKind::*;
    let s: &dyn Store = &**store;
    let secs = |n: i64| t0 + chrono::Duration::seconds(n);
    let alice = &scope.account_id;
    let new_sb = |name: &str, at: i64| {
        sandbox(
            alice,
            None,
            name,
            &["ops"],
            SandboxStatus::Running,
            secs(at),
        )
    };
    // An operation on `sb` begun at `at` seconds, its lease 30 s long.
    let new_op = |sb: &Sandbox, kind: OperationKind, holder: &str, at: i64| {
        Operation::new(
            sb.id.as_str(),
            kind,
            alice.clone(),
            holder,
            secs(at),
            secs(at + 30),
        )
    };
    let target = new_sb("op-target", 0);
    s.insert_sandbox(&target).await.unwrap();
    let tid = target.id.as_str();

    // Begin: one operation per target, whatever its lease.
    let stop = new_op(&target, Stop, "holder-a", 0)
        .with_params(json!({"preserve_volume": true, "timeout": 10}));
    s.begin_operation(&stop).await.unwrap();
    assert_eq!(s.get_operation(tid).await.unwrap(), Some(stop.clone()));
    assert_eq!(s.get_operation("nothing-here").await.unwrap(), None);
    let second = new_op(&target, Delete, "holder-b", 1);
    match s.begin_operation(&second).await {
        Err(StoreError::Conflict(m)) => {
            assert!(
                m.contains(tid) && m.contains("stop operation in progress"),
                "{m}"
            )
        }
        other => panic!("a second operation on one target: {other:?}"),
    }
    assert_eq!(s.get_operation(tid).await.unwrap(), Some(stop.clone()));

    // Renew: one heartbeat extends every lease of a holder.
    let other_target = new_sb("op-other", 0);
    s.insert_sandbox(&other_target).await.unwrap();
    let start = new_op(&other_target, Start, "holder-a", 0);
    s.begin_operation(&start).await.unwrap();
    assert_eq!(s.renew_operations("holder-a", secs(60)).await.unwrap(), 2);
    assert_eq!(s.renew_operations("nobody", secs(60)).await.unwrap(), 0);
    let renewed = s.get_operation(tid).await.unwrap().unwrap();
    assert_eq!(renewed.lease_until, secs(60));
    assert_eq!(
        renewed.params,
        json!({"preserve_volume": true, "timeout": 10})
    );

    // Another holder claims only after the lease ended.
    assert!(s
        .claim_expired_operations("holder-b", secs(59), secs(90), 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        s.claim_operation(&stop.id, "holder-b", secs(59), secs(90))
            .await
            .unwrap(),
        None
    );
    assert!(matches!(
        s.claim_operation(&stop.id, "holder-b", secs(60), secs(60)).await,
        Err(StoreError::Other(m)) if m.contains("lease_until")
    ));
    let claimed = s
        .claim_operation(&stop.id, "holder-b", secs(60), secs(90))
        .await
        .unwrap()
        .expect("the lease ended: the claim wins");
    assert_eq!(
        claimed,
        Operation {
            holder: "holder-b".into(),
            lease_until: secs(90),
            ..stop.clone()
        }
    );
    assert_eq!(s.get_operation(tid).await.unwrap(), Some(claimed.clone()));
    // The old holder's heartbeat no longer touches it, and it cannot end it.
    assert_eq!(s.renew_operations("holder-a", secs(120)).await.unwrap(), 1);
    assert_eq!(
        s.get_operation(tid).await.unwrap().unwrap().lease_until,
        secs(90)
    );
    match s
        .finish_operation(&stop.id, "holder-a", SandboxWrite::None)
        .await
    {
        Err(StoreError::Conflict(m)) => assert!(m.contains("holder-b"), "{m}"),
        other => panic!("a finish by a holder that lost the operation: {other:?}"),
    }
    let mut stale_write = target.clone();
    stale_write.status = SandboxStatus::Stopped;
    assert!(matches!(
        s.finish_operation(&stop.id, "holder-a", SandboxWrite::Update(&stale_write))
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(s.get_sandbox(scope, &target.id).await.unwrap(), target);
    assert_eq!(s.get_operation(tid).await.unwrap(), Some(claimed.clone()));

    // Two instances claim one expired operation at once: exactly one wins.
    for round in 0..5i64 {
        let now = secs(100 + 100 * round);
        let claims = ["holder-c", "holder-d"].map(|holder| {
            let store = store.clone();
            let id = stop.id.clone();
            tokio::spawn(async move {
                store
                    .claim_operation(&id, holder, now, now + chrono::Duration::seconds(30))
                    .await
                    .unwrap()
            })
        });
        let won: Vec<Operation> = futures_join_all(claims)
            .await
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(won.len(), 1, "round {round}: {won:?}");
        assert_eq!(s.get_operation(tid).await.unwrap().as_ref(), won.first());
    }
    let holder_now = s.get_operation(tid).await.unwrap().unwrap().holder;

    // Finish with an optimistic update: the record and the end in one go.
    let mut stopped = target.clone();
    stopped.status = SandboxStatus::Stopped;
    stopped.stopped_at = Some(secs(500));
    let saved = s
        .finish_operation(&stop.id, &holder_now, SandboxWrite::Update(&stopped))
        .await
        .unwrap()
        .expect("the updated record");
    assert_eq!(saved.version, target.version + 1);
    assert_eq!(s.get_sandbox(scope, &target.id).await.unwrap(), saved);
    assert_eq!(s.get_operation(tid).await.unwrap(), None);
    // Ended already: a second finish is refused and writes nothing.
    match s
        .finish_operation(&stop.id, &holder_now, SandboxWrite::Update(&saved))
        .await
    {
        Err(StoreError::Conflict(m)) => assert!(m.contains("no longer in progress"), "{m}"),
        other => panic!("finishing an ended operation: {other:?}"),
    }
    assert_eq!(s.get_sandbox(scope, &target.id).await.unwrap(), saved);

    // A stale update keeps the operation: its holder may read and retry.
    let update = new_op(&target, Update, "holder-a", 600);
    s.begin_operation(&update).await.unwrap();
    assert!(matches!(
        s.finish_operation(&update.id, "holder-a", SandboxWrite::Update(&stopped))
            .await,
        Err(StoreError::Conflict(m)) if m.contains("concurrently")
    ));
    assert_eq!(s.get_operation(tid).await.unwrap(), Some(update.clone()));
    assert_eq!(s.get_sandbox(scope, &target.id).await.unwrap(), saved);
    // No write at all: the operation just ends.
    assert_eq!(
        s.finish_operation(&update.id, "holder-a", SandboxWrite::None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(s.get_operation(tid).await.unwrap(), None);
    // Ending an operation that is gone is fine.
    s.end_operation(&update.id).await.unwrap();

    // Soft delete: the record comes back terminated.
    let delete = new_op(&target, Delete, "holder-a", 700);
    s.begin_operation(&delete).await.unwrap();
    let gone = s
        .finish_operation(
            &delete.id,
            "holder-a",
            SandboxWrite::SoftDelete {
                id: &target.id,
                at: secs(701),
            },
        )
        .await
        .unwrap()
        .expect("the deleted record");
    assert_eq!(gone.status, SandboxStatus::Terminated);
    assert_eq!(gone.deleted_at, Some(secs(701)));
    assert_eq!(gone.version, saved.version + 1);
    assert_eq!(s.get_sandbox(scope, &target.id).await.unwrap(), gone);
    assert_eq!(s.get_operation(tid).await.unwrap(), None);

    // Purge: the record is gone for good.
    let purge = new_op(&other_target, Create, "holder-a", 800);
    s.end_operation(&start.id).await.unwrap();
    s.begin_operation(&purge).await.unwrap();
    assert_eq!(
        s.finish_operation(
            &purge.id,
            "holder-a",
            SandboxWrite::Purge {
                id: &other_target.id
            }
        )
        .await
        .unwrap(),
        None
    );
    assert!(!s.sandbox_record_exists(&other_target.id).await.unwrap());
    assert_eq!(
        s.get_operation(other_target.id.as_str()).await.unwrap(),
        None
    );
    // Recovery may find the record gone already: the operation still ends.
    for (i, write) in [
        SandboxWrite::Purge {
            id: &other_target.id,
        },
        SandboxWrite::SoftDelete {
            id: &other_target.id,
            at: secs(801),
        },
    ]
    .into_iter()
    .enumerate()
    {
        let again = new_op(&other_target, Delete, "holder-a", 810 + i as i64);
        s.begin_operation(&again).await.unwrap();
        let stored = s.finish_operation(&again.id, "holder-a", write).await;
        assert_eq!(stored.unwrap(), None, "{write:?}");
        assert_eq!(
            s.get_operation(other_target.id.as_str()).await.unwrap(),
            None
        );
    }
    assert!(!s.sandbox_record_exists(&other_target.id).await.unwrap());

    // A create: the record and its operation together, or neither.
    let created = new_sb("op-created", 900);
    let create = new_op(&created, Create, "holder-a", 900);
    s.insert_sandbox_with_operation(&created, &create)
        .await
        .unwrap();
    assert_eq!(s.get_sandbox(scope, &created.id).await.unwrap(), created);
    assert_eq!(
        s.get_operation(created.id.as_str()).await.unwrap(),
        Some(create.clone())
    );
    // A taken name: no record, and no operation left behind.
    let same_name = new_sb("op-created", 901);
    let create2 = new_op(&same_name, Create, "holder-a", 901);
    match s.insert_sandbox_with_operation(&same_name, &create2).await {
        Err(StoreError::Conflict(m)) => {
            assert_eq!(m, "a sandbox named 'op-created' already exists")
        }
        other => panic!("a create with a taken name: {other:?}"),
    }
    assert_eq!(s.get_operation(same_name.id.as_str()).await.unwrap(), None);
    assert!(!s.sandbox_record_exists(&same_name.id).await.unwrap());
    // An operation already on the id: no record, the other operation intact.
    let fresh_sb = new_sb("op-fresh", 902);
    let blocker = new_op(&fresh_sb, Delete, "holder-z", 902);
    s.begin_operation(&blocker).await.unwrap();
    let create3 = new_op(&fresh_sb, Create, "holder-a", 903);
    match s.insert_sandbox_with_operation(&fresh_sb, &create3).await {
        Err(StoreError::Conflict(m)) => {
            assert!(m.contains("delete operation in progress"), "{m}");
            assert!(!m.contains("named"), "{m}");
        }
        other => panic!("a create onto a locked id: {other:?}"),
    }
    assert!(!s.sandbox_record_exists(&fresh_sb.id).await.unwrap());
    assert_eq!(
        s.get_operation(fresh_sb.id.as_str()).await.unwrap(),
        Some(blocker.clone())
    );

    // Recovery: instances claim the expired operations, oldest first, each
    // one once.
    let listed = s.list_operations(100).await.unwrap();
    assert_eq!(listed, vec![create.clone(), blocker.clone()]);
    assert_eq!(s.list_operations(1).await.unwrap(), vec![create.clone()]);
    let mut expired = Vec::new();
    for i in 0..6 {
        let sb = new_sb(&format!("op-exp-{i}"), 1000 + i);
        let o = new_op(&sb, Snapshot, "holder-dead", 1000 + i);
        s.insert_sandbox_with_operation(&sb, &o).await.unwrap();
        expired.push(o);
    }
    let oldest_two = s
        .claim_expired_operations("holder-e", secs(940), secs(970), 2)
        .await
        .unwrap();
    assert_eq!(
        oldest_two.iter().map(|o| &o.id).collect::<Vec<_>>(),
        [&create.id, &blocker.id]
    );
    let now = secs(2000);
    let claimers = ["holder-x", "holder-y"].map(|holder| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .claim_expired_operations(holder, now, now + chrono::Duration::seconds(30), 100)
                .await
                .unwrap()
        })
    });
    let results = futures_join_all(claimers).await;
    let mut ids: Vec<&OperationId> = results.iter().flatten().map(|o| &o.id).collect();
    ids.sort();
    let mut all: Vec<&OperationId> = expired
        .iter()
        .chain([&create, &blocker])
        .map(|o| &o.id)
        .collect();
    all.sort();
    assert_eq!(ids, all, "every expired operation claimed exactly once");
    for (holder, claimed) in ["holder-x", "holder-y"].iter().zip(&results) {
        for o in claimed {
            assert_eq!(&o.holder, holder);
            assert_eq!(o.lease_until, now + chrono::Duration::seconds(30));
            assert_eq!(s.get_operation(&o.target).await.unwrap().as_ref(), Some(o));
        }
    }
    for o in s.list_operations(100).await.unwrap() {
        s.end_operation(&o.id).await.unwrap();
    }
    assert!(s.list_operations(100).await.unwrap().is_empty());
}

/// `count_sandboxes_by_status` as a map.
async fn counts(s: &dyn Store) -> std::collections::HashMap<SandboxStatus, u64> {
    s.count_sandboxes_by_status()
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// Awaits spawned tasks in order, propagating their panics.
async fn futures_join_all<T>(
    handles: impl IntoIterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let handles: Vec<_> = handles.into_iter().collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        match h.await {
            Ok(v) => out.push(v),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    out
}
