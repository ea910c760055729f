//! Leases in the store: taken, renewed by their holder, never
//! taken from a holder whose term runs, taken over once it ended, released;
//! of many instances contending at the same moment exactly one wins. Runs
//! on SQLite and, when `STOCKADE_TEST_DATABASE_URL` is set, on a fresh
//! PostgreSQL database with two separate connection pools (two "server
//! instances") whose writes run as concurrent transactions.

mod common;

use std::sync::Arc;

use chrono::{DateTime, Duration, SubsecRound, Utc};

use stockade_store::{Store, StoreError, BACKGROUND_LEASE};

common::store_tests!(pair "l.db", 4, sqlite_leases, postgres_leases, |a, b| leases(a, b).await);

fn now() -> DateTime<Utc> {
    // What the database keeps: microseconds.
    Utc::now().trunc_subsecs(6)
}

async fn leases(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let t0 = now();
    let ttl = Duration::seconds(15);
    assert_eq!(a.get_lease(BACKGROUND_LEASE).await.unwrap(), None);

    // Nobody holds it: the first taker gets it.
    let got = a
        .acquire_lease(BACKGROUND_LEASE, "alpha", t0, t0 + ttl)
        .await
        .unwrap()
        .expect("a free lease is taken");
    assert_eq!(
        (got.name.as_str(), got.holder.as_str(), got.expires_at),
        (BACKGROUND_LEASE, "alpha", t0 + ttl)
    );
    assert_eq!(b.get_lease(BACKGROUND_LEASE).await.unwrap(), Some(got));

    // Another instance cannot take it while the term runs, not even a
    // microsecond before its end; the stored lease is untouched.
    for at in [
        t0,
        t0 + Duration::seconds(5),
        t0 + ttl - Duration::microseconds(1),
    ] {
        assert_eq!(
            b.acquire_lease(BACKGROUND_LEASE, "beta", at, at + ttl)
                .await
                .unwrap(),
            None,
            "stolen at {at}"
        );
    }
    assert_eq!(
        b.get_lease(BACKGROUND_LEASE).await.unwrap().unwrap().holder,
        "alpha"
    );

    // The holder renews, before and even after its term ended (nobody
    // took it in between).
    let t1 = t0 + Duration::seconds(5);
    let renewed = a
        .acquire_lease(BACKGROUND_LEASE, "alpha", t1, t1 + ttl)
        .await
        .unwrap()
        .expect("the holder renews");
    assert_eq!(renewed.expires_at, t1 + ttl);
    // The old end no longer counts: at t0 + ttl the renewed term still runs.
    assert_eq!(
        b.acquire_lease(BACKGROUND_LEASE, "beta", t0 + ttl, t0 + ttl + ttl)
            .await
            .unwrap(),
        None
    );

    // At the end of the term another instance takes it over…
    let t2 = t1 + ttl;
    let stolen = b
        .acquire_lease(BACKGROUND_LEASE, "beta", t2, t2 + ttl)
        .await
        .unwrap()
        .expect("an expired lease is taken over");
    assert_eq!(stolen.holder, "beta");
    // …and the old holder's renewal fails from then on.
    assert_eq!(
        a.acquire_lease(BACKGROUND_LEASE, "alpha", t2, t2 + ttl)
            .await
            .unwrap(),
        None
    );

    // Leases are independent of each other.
    assert!(a
        .acquire_lease("other", "alpha", t2, t2 + ttl)
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        a.get_lease(BACKGROUND_LEASE).await.unwrap().unwrap().holder,
        "beta"
    );

    // Only the holder releases it; then anyone takes it at once.
    assert!(!a.release_lease(BACKGROUND_LEASE, "alpha").await.unwrap());
    assert!(b.release_lease(BACKGROUND_LEASE, "beta").await.unwrap());
    assert_eq!(a.get_lease(BACKGROUND_LEASE).await.unwrap(), None);
    assert!(!b.release_lease(BACKGROUND_LEASE, "beta").await.unwrap());
    assert!(a
        .acquire_lease(BACKGROUND_LEASE, "alpha", t2, t2 + ttl)
        .await
        .unwrap()
        .is_some());

    // Bad input is an error naming what is wrong, never a panic.
    for (name, holder, says) in [
        ("", "alpha", "lease name"),
        (BACKGROUND_LEASE, "", "lease holder"),
        (BACKGROUND_LEASE, "bad\nholder", "lease holder"),
    ] {
        match a.acquire_lease(name, holder, t2, t2 + ttl).await {
            Err(StoreError::Other(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("{name:?}/{holder:?}: {other:?}"),
        }
    }
    match a.acquire_lease(BACKGROUND_LEASE, "alpha", t2, t2).await {
        Err(StoreError::Other(m)) => assert!(m.contains("expires_at"), "{m}"),
        other => panic!("{other:?}"),
    }

    contenders(a, b).await;
}

/// Rounds of 16 instances (half on each store) trying at the same moment
/// to take an expired lease, or one nobody holds: exactly one wins each
/// round, and the stored holder is the winner.
async fn contenders(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let ttl = Duration::seconds(15);
    let base = now() + Duration::hours(1);
    for round in 0..20i64 {
        let name = format!("race-{}", round % 2);
        // Two leases taken in turns: nobody holds one the first time and
        // after a release, else its last winner's term has ended.
        let at = base + Duration::seconds(round * 60);
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let store = if i % 2 == 0 { a.clone() } else { b.clone() };
                let (barrier, name) = (barrier.clone(), name.clone());
                tokio::spawn(async move {
                    let holder = format!("r{round}-c{i}");
                    barrier.wait().await;
                    store
                        .acquire_lease(&name, &holder, at, at + ttl)
                        .await
                        .unwrap()
                        .map(|l| l.holder)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            if let Some(w) = t.await.unwrap() {
                winners.push(w);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let stored = a.get_lease(&name).await.unwrap().unwrap();
        assert_eq!(stored.holder, winners[0], "round {round}");
        assert_eq!(stored.expires_at, at + ttl);
        if round % 4 == 2 {
            assert!(a.release_lease(&name, &winners[0]).await.unwrap());
        }
    }
}
