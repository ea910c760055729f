//! Credentials in the store: API tokens and sessions as records that can be
//! listed, expire and be revoked (a session with the token it was opened
//! with), and accounts that can be disabled. Runs on SQLite and, when
//! `STOCKADE_TEST_DATABASE_URL` is set, on a fresh PostgreSQL database.

mod common;

use std::sync::Arc;

use chrono::{Duration, SubsecRound, Utc};
use stockade_core::{ApiToken, TokenId, TokenKind, TokenRecord};
use stockade_store::{Store, StoreError};

common::store_tests!(memory, 2, sqlite_tokens, postgres_tokens, |store| tokens(
    store
)
.await);

/// The database file holds every token hash and sandbox environment: only
/// its owner reads it, a new one and an older, wider one alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_files_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("db").join("stockade.db");
    let url = format!("sqlite://{}", file.display());
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    {
        let s = stockade_store::connect(&url).await.unwrap();
        s.create_account("private", false).await.unwrap();
        assert_eq!(mode(&file), 0o600);
        let wal = file.with_extension("db-wal");
        assert!(!wal.exists() || mode(&wal) == 0o600, "{:o}", mode(&wal));
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _s = stockade_store::connect(&url).await.unwrap();
    assert_eq!(mode(&file), 0o600);
}

async fn tokens(s: Arc<dyn Store>) {
    let alice = s.create_account("alice", false).await.unwrap();
    let bob = s.create_account("bob", false).await.unwrap();
    let now = Utc::now().trunc_subsecs(6);

    // The first token, as account creation stores it: an API token.
    let first = ApiToken::generate();
    s.add_token(&alice.id, &first.hash()).await.unwrap();
    let found = s.authenticate(&first.hash()).await.unwrap().unwrap();
    assert_eq!(found.account.id, alice.id);
    assert_eq!(found.token.kind, TokenKind::Api);
    assert_eq!(found.token.expires_at, None);

    // A named token with an expiry, and a session opened with it.
    let ci = TokenRecord::new(
        alice.id.clone(),
        "ci".into(),
        TokenKind::Api,
        now,
        Some(now + Duration::hours(1)),
    );
    let ci_secret = ApiToken::generate();
    s.insert_token(&ci, &ci_secret.hash()).await.unwrap();
    let mut session = TokenRecord::new(
        alice.id.clone(),
        "dashboard".into(),
        TokenKind::Session,
        now + Duration::seconds(1),
        Some(now + Duration::hours(12)),
    );
    session.parent_id = Some(ci.id.clone());
    let session_secret = ApiToken::generate_session();
    s.insert_token(&session, &session_secret.hash())
        .await
        .unwrap();
    let got = s
        .authenticate(&session_secret.hash())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.token, session);
    // `account_by_token_hash` is for API tokens only.
    assert!(s
        .account_by_token_hash(&session_secret.hash())
        .await
        .unwrap()
        .is_none());
    assert!(s
        .account_by_token_hash(&ci_secret.hash())
        .await
        .unwrap()
        .is_some());

    // Listed newest first, never another account's.
    let listed = s.list_tokens(&alice.id).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["dashboard", "token", "ci"]);
    assert!(s.list_tokens(&bob.id).await.unwrap().is_empty());
    assert_eq!(s.get_token(&ci.id).await.unwrap(), ci);

    // A use is recorded.
    let used = now + Duration::minutes(5);
    s.touch_token(&ci.id, used).await.unwrap();
    assert_eq!(s.get_token(&ci.id).await.unwrap().last_used_at, Some(used));

    // Revoking the token ends its session; the other token stays.
    s.delete_token(&ci.id).await.unwrap();
    assert!(s.authenticate(&ci_secret.hash()).await.unwrap().is_none());
    assert!(s
        .authenticate(&session_secret.hash())
        .await
        .unwrap()
        .is_none());
    assert!(s.authenticate(&first.hash()).await.unwrap().is_some());
    common::assert_not_found(s.delete_token(&ci.id).await);
    common::assert_not_found(s.get_token(&TokenId::generate()).await);

    // An expired token authenticates nothing, is not listed, and goes with
    // the account's next new token.
    let old = TokenRecord::new(
        alice.id.clone(),
        "old".into(),
        TokenKind::Api,
        now - Duration::hours(2),
        Some(now - Duration::hours(1)),
    );
    let old_secret = ApiToken::generate();
    s.insert_token(&old, &old_secret.hash()).await.unwrap();
    assert!(s.authenticate(&old_secret.hash()).await.unwrap().is_none());
    assert!(s
        .list_tokens(&alice.id)
        .await
        .unwrap()
        .iter()
        .all(|t| t.id != old.id));
    s.add_token(&alice.id, &ApiToken::generate().hash())
        .await
        .unwrap();
    common::assert_not_found(s.get_token(&old.id).await);

    // Tokens of unknown accounts and taken hashes are refused.
    let stray = TokenRecord::new(
        stockade_core::AccountId::generate(),
        "x".into(),
        TokenKind::Api,
        now,
        None,
    );
    common::assert_not_found(s.insert_token(&stray, &ApiToken::generate().hash()).await);
    assert!(matches!(
        s.add_token(&bob.id, &first.hash()).await,
        Err(StoreError::Conflict(_))
    ));

    // Disabling: the account reads as disabled (authentication still finds
    // it, so the caller can say why), and enabling clears it.
    let at = now + Duration::minutes(1);
    let disabled = s.set_account_disabled(&alice.id, Some(at)).await.unwrap();
    assert_eq!(disabled.disabled_at, Some(at));
    let found = s.authenticate(&first.hash()).await.unwrap().unwrap();
    assert!(found.account.is_disabled());
    let (again, teams) = s.get_account(&alice.id).await.unwrap();
    assert!(again.is_disabled());
    assert!(teams.is_empty());
    let enabled = s.set_account_disabled(&alice.id, None).await.unwrap();
    assert!(!enabled.is_disabled());
    common::assert_not_found(
        s.set_account_disabled(&stockade_core::AccountId::generate(), None)
            .await,
    );
}
