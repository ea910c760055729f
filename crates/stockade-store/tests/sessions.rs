//! Session deadlines in the store: they round-trip, soft delete clears
//! them, and due sessions are claimed exactly once even when several server
//! instances claim at the same moment. Runs on SQLite and, when
//! `STOCKADE_TEST_DATABASE_URL` is set, on a fresh PostgreSQL database.

mod common;

use std::sync::Arc;

use chrono::{DateTime, Duration, SubsecRound, Utc};

use stockade_core::spec::SpecInput;
use stockade_core::{AccountId, Defaults, Sandbox, SandboxId, SandboxSpec, SandboxStatus, Scope};
use stockade_store::Store;

common::store_tests!(
    pair "s.db", 4, sqlite_sessions, postgres_sessions,
    |a, b| sessions(a, b).await
);

fn now() -> DateTime<Utc> {
    // What the database keeps: microseconds.
    Utc::now().trunc_subsecs(6)
}

fn record(account: &AccountId, server: &str, expires: Option<DateTime<Utc>>) -> Sandbox {
    let id = SandboxId::generate();
    let spec = SandboxSpec::from_input(SpecInput::default(), &id, &Defaults::default()).unwrap();
    let mut sb = Sandbox::new(id, account.clone(), None, spec, server.into(), now());
    sb.status = SandboxStatus::Running;
    sb.started_at = Some(now());
    sb.session_expires_at = expires;
    sb
}

async fn sessions(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let account = a.create_account("owner", false).await.unwrap().id;
    let scope = Scope::account(account.clone());
    let t0 = now();

    // Round trip through insert, get and update.
    let due = record(&account, "local", Some(t0 - Duration::seconds(5)));
    a.insert_sandbox(&due).await.unwrap();
    let got = a.get_sandbox(&scope, &due.id).await.unwrap();
    assert_eq!(got.session_expires_at, due.session_expires_at);
    let mut changed = got.clone();
    changed.session_expires_at = Some(t0 - Duration::seconds(1));
    let saved = a.update_sandbox(&changed).await.unwrap();
    assert_eq!(
        a.get_sandbox(&scope, &due.id)
            .await
            .unwrap()
            .session_expires_at,
        changed.session_expires_at
    );

    let later = record(&account, "local", Some(t0 + Duration::hours(1)));
    let never = record(&account, "local", None);
    let elsewhere = record(&account, "other-host", Some(t0 - Duration::seconds(5)));
    let deleted = record(&account, "local", Some(t0 - Duration::seconds(5)));
    for sb in [&later, &never, &elsewhere, &deleted] {
        a.insert_sandbox(sb).await.unwrap();
    }
    a.soft_delete_sandbox(&deleted.id, t0).await.unwrap();
    let gone = a.get_sandbox(&scope, &deleted.id).await.unwrap();
    assert_eq!(
        gone.session_expires_at, None,
        "soft delete closes the session"
    );

    // Two instances claim at once: the due session goes to exactly one.
    let lease = t0 + Duration::seconds(60);
    let (ca, cb) = tokio::join!(
        a.claim_expired_sessions("local", t0, lease, 10),
        b.claim_expired_sessions("local", t0, lease, 10)
    );
    let (ca, cb) = (ca.unwrap(), cb.unwrap());
    let claimed: Vec<&Sandbox> = ca.iter().chain(cb.iter()).collect();
    assert_eq!(claimed.len(), 1, "claimed by A {ca:?} and by B {cb:?}");
    let c = claimed[0];
    assert_eq!(c.id, due.id);
    assert_eq!(
        c.session_expires_at,
        Some(lease),
        "the lease is the new deadline"
    );
    assert_eq!(
        c.version,
        saved.version + 1,
        "the claim is an optimistic update"
    );
    assert_eq!(c.status, SandboxStatus::Running);

    // Nothing else is due until the lease passes; then it is claimed again.
    assert!(a
        .claim_expired_sessions("local", t0, lease, 10)
        .await
        .unwrap()
        .is_empty());
    let again = b
        .claim_expired_sessions("local", lease, lease + Duration::seconds(60), 10)
        .await
        .unwrap();
    assert_eq!(
        again.iter().map(|s| &s.id).collect::<Vec<_>>(),
        vec![&due.id]
    );

    // The other host's session is its own server's business.
    let other = a
        .claim_expired_sessions("other-host", t0, lease, 10)
        .await
        .unwrap();
    assert_eq!(
        other.iter().map(|s| &s.id).collect::<Vec<_>>(),
        vec![&elsewhere.id]
    );

    // A writer holding the pre-claim version loses: no lost update.
    assert!(a.update_sandbox(&saved).await.is_err());

    // Many due sessions, many claimers: each is claimed once.
    let mut many = Vec::new();
    for i in 0..20 {
        let sb = record(&account, "busy", Some(t0 - Duration::seconds(i)));
        a.insert_sandbox(&sb).await.unwrap();
        many.push(sb.id);
    }
    let mut claims = Vec::new();
    for i in 0..6 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        claims.push(tokio::spawn(async move {
            store
                .claim_expired_sessions("busy", t0, lease, 7)
                .await
                .unwrap()
        }));
    }
    let mut seen = Vec::new();
    for c in claims {
        seen.extend(c.await.unwrap().into_iter().map(|s| s.id));
    }
    // Leftovers (each claimer takes at most 7) are claimed by a last pass.
    seen.extend(
        a.claim_expired_sessions("busy", t0, lease, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id),
    );
    let mut sorted = seen.clone();
    sorted.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "a session was claimed twice");
    assert_eq!(sorted.len(), many.len(), "a due session was never claimed");
}
