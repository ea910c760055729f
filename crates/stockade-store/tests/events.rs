//! Events, webhooks and the audit log in the store: a record's writes leave
//! the events their changes imply in the same transaction, fanned out to the
//! webhooks that want them; deliveries of one sandbox are claimed one at a
//! time in order, by one of two instances; attempts, retries, give-ups and
//! re-sends are recorded; audit entries round-trip. Runs on SQLite and, when
//! `STOCKADE_TEST_DATABASE_URL` is set, on a fresh PostgreSQL database with
//! two connection pools.

mod common;

use std::sync::Arc;

use chrono::{Duration, SubsecRound, Utc};

use stockade_core::events::EventKind;
use stockade_core::spec::SpecInput;
use stockade_core::{AccountId, Defaults, DeliveryId, Sandbox, SandboxId, SandboxSpec, WebhookId};
use stockade_store::{
    AttemptOutcome, AttemptRecord, AuditFilter, AuditRecord, DeliveryStatus, EventFilter, Store,
    WebhookRecord,
};

common::store_tests!(
    pair "e.db", 4, sqlite_events, postgres_events,
    |a, b| events(a, b).await
);

fn record(account: &AccountId) -> Sandbox {
    let id = SandboxId::generate();
    let spec = SandboxSpec::from_input(SpecInput::default(), &id, &Defaults::default()).unwrap();
    Sandbox::new(id, account.clone(), None, spec, "local".into(), Utc::now())
}

fn webhook(account: &AccountId, kinds: &[EventKind]) -> WebhookRecord {
    let now = Utc::now().trunc_subsecs(6);
    WebhookRecord {
        id: WebhookId::generate(),
        account_id: account.clone(),
        name: "hook".into(),
        url: "http://127.0.0.1:9/hook".into(),
        events: kinds.iter().map(|k| k.as_str().to_owned()).collect(),
        secret: "a-secret-of-some-length".into(),
        enabled: true,
        created_at: now,
        updated_at: now,
    }
}

fn attempt(code: Option<u16>) -> AttemptRecord {
    AttemptRecord {
        id: DeliveryId::generate(),
        at: Utc::now(),
        status_code: code,
        error: code.is_none().then(|| "connection refused".into()),
        duration_ms: 3,
    }
}

async fn events(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let owner = a.create_account("owner", false).await.unwrap().id;
    let other = a.create_account("other", false).await.unwrap().id;
    let hook = webhook(
        &owner,
        &[
            EventKind::SandboxCreated,
            EventKind::SandboxStopped,
            EventKind::SandboxKilled,
        ],
    );
    a.insert_webhook(&hook).await.unwrap();
    let foreign = webhook(&other, EventKind::ALL);
    a.insert_webhook(&foreign).await.unwrap();
    let mut signal = b.subscribe_events();
    let signal_a = a.subscribe_events();
    let seen = *signal_a.borrow();

    // A life: inserted while creating (no event), running, stopped, deleted.
    let mut sb = record(&owner);
    a.insert_sandbox(&sb).await.unwrap();
    sb.mark_running(Utc::now());
    let sb = a.update_sandbox(&sb).await.unwrap();
    assert_ne!(
        *signal_a.borrow(),
        seen,
        "a commit with events is signalled"
    );
    let mut stopped = sb.clone();
    stopped.mark_stopped(Utc::now(), Some("asked".into()));
    let stopped = a.update_sandbox(&stopped).await.unwrap();
    // A write that fails its version check leaves no event.
    let mut stale = sb.clone();
    stale.mark_stopped(Utc::now(), None);
    a.update_sandbox(&stale).await.unwrap_err();
    a.soft_delete_sandbox(&stopped.id, Utc::now())
        .await
        .unwrap();
    a.soft_delete_sandbox(&stopped.id, Utc::now())
        .await
        .unwrap();

    let all = b
        .list_events(&EventFilter {
            account: Some(owner.clone()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let kinds: Vec<_> = all.iter().map(|e| e.event.kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::SandboxCreated,
            EventKind::SandboxStopped,
            EventKind::SandboxKilled
        ]
    );
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(all[1].event.data.as_ref().unwrap()["reason"], "asked");
    // Cursors, kinds, sandbox and order.
    let after = b
        .list_events(&EventFilter {
            account: Some(owner.clone()),
            after: Some(all[0].seq),
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].seq, all[1].seq);
    let newest = b
        .list_events(&EventFilter {
            sandbox: Some(sb.id.clone()),
            newest_first: true,
            kinds: vec![EventKind::SandboxKilled, EventKind::SandboxCreated],
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        newest.iter().map(|e| e.event.kind).collect::<Vec<_>>(),
        [EventKind::SandboxKilled, EventKind::SandboxCreated]
    );
    assert!(b
        .list_events(&EventFilter {
            account: Some(other.clone()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .is_empty());
    assert!(a.latest_event_seq().await.unwrap() >= all[2].seq);
    tokio::time::timeout(std::time::Duration::from_millis(10), signal.changed())
        .await
        .ok();

    // Deliveries: one per wanted event, to the owner's webhook only, claimed
    // one at a time in order (the sandbox's later ones wait), by one of two
    // instances.
    let now = Utc::now();
    let lease = now + Duration::seconds(30);
    let (first, second) = tokio::join!(
        a.claim_deliveries("alpha", now, lease, 10),
        b.claim_deliveries("beta", now, lease, 10)
    );
    let claimed: Vec<_> = first.unwrap().into_iter().chain(second.unwrap()).collect();
    assert_eq!(
        claimed.len(),
        1,
        "only the oldest of the sandbox: {claimed:?}"
    );
    let due = &claimed[0];
    assert_eq!(due.event.event.kind, EventKind::SandboxCreated);
    assert_eq!(due.webhook.id, hook.id);
    assert!(
        a.claim_deliveries("gamma", now, lease, 10)
            .await
            .unwrap()
            .is_empty(),
        "held"
    );

    // A failed attempt: retried later, still first in line.
    let failed = attempt(Some(500));
    a.record_attempt(
        &due.id,
        &failed,
        AttemptOutcome::RetryAt(now + Duration::seconds(60)),
    )
    .await
    .unwrap();
    assert!(a
        .claim_deliveries("alpha", now, lease, 10)
        .await
        .unwrap()
        .is_empty());
    let later = now + Duration::seconds(61);
    let again = a
        .claim_deliveries("alpha", later, later + Duration::seconds(30), 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0].event.event.id, due.event.event.id,
        "the same event again"
    );
    assert_eq!(again[0].attempts, 1);
    a.record_attempt(&due.id, &attempt(Some(204)), AttemptOutcome::Delivered)
        .await
        .unwrap();
    // Then the next of the sandbox; give it up.
    let next = a
        .claim_deliveries("alpha", later, later + Duration::seconds(30), 10)
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].event.event.kind, EventKind::SandboxStopped);
    a.record_attempt(&next[0].id, &attempt(None), AttemptOutcome::GiveUp)
        .await
        .unwrap();

    let listed = b.list_deliveries(&hook.id, None, 10).await.unwrap();
    assert_eq!(listed.len(), 3);
    let statuses: Vec<_> = listed.iter().map(|d| d.status).collect();
    assert_eq!(
        statuses,
        [
            DeliveryStatus::Pending,
            DeliveryStatus::Failed,
            DeliveryStatus::Delivered
        ]
    );
    assert_eq!(listed[2].attempt_log.len(), 2);
    assert_eq!(listed[2].attempt_log[0].status_code, Some(204));
    assert_eq!(
        listed[1].attempt_log[0].error.as_deref(),
        Some("connection refused")
    );
    let failed_only = b
        .list_deliveries(&hook.id, Some(DeliveryStatus::Failed), 10)
        .await
        .unwrap();
    assert_eq!(failed_only.len(), 1);

    // A re-send queues it again; another webhook's id does not reach it.
    a.redeliver(
        &foreign.id,
        &listed[1].id,
        later,
        later + Duration::hours(25),
    )
    .await
    .unwrap_err();
    let again = a
        .redeliver(&hook.id, &listed[1].id, later, later + Duration::hours(25))
        .await
        .unwrap();
    assert_eq!(again.status, DeliveryStatus::Pending);

    // Disabled: nothing is claimed; deleted: its deliveries go with it.
    let mut off = hook.clone();
    off.enabled = false;
    a.update_webhook(&off).await.unwrap();
    assert!(a
        .claim_deliveries("alpha", later, later + Duration::seconds(30), 10)
        .await
        .unwrap()
        .is_empty());
    assert!(!a.get_webhook(&hook.id).await.unwrap().enabled);
    // Enabled again with three sandboxes' deliveries due: one at a time per
    // webhook, whoever asks.
    a.update_webhook(&hook).await.unwrap();
    for _ in 0..2 {
        let mut more = record(&owner);
        a.insert_sandbox(&more).await.unwrap();
        more.mark_running(Utc::now());
        a.update_sandbox(&more).await.unwrap();
    }
    let soon = Utc::now() + Duration::seconds(1);
    let one = a
        .claim_deliveries("alpha", soon, soon + Duration::seconds(30), 10)
        .await
        .unwrap();
    assert_eq!(one.len(), 1, "one delivery in flight per webhook: {one:?}");
    assert!(b
        .claim_deliveries("beta", soon, soon + Duration::seconds(30), 10)
        .await
        .unwrap()
        .is_empty());
    a.record_attempt(&one[0].id, &attempt(Some(200)), AttemptOutcome::Delivered)
        .await
        .unwrap();
    assert_eq!(
        b.claim_deliveries("beta", soon, soon + Duration::seconds(30), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    a.update_webhook(&off).await.unwrap();
    assert_eq!(a.list_webhooks(&owner).await.unwrap().len(), 1);
    a.delete_webhook(&hook.id).await.unwrap();
    a.delete_webhook(&hook.id).await.unwrap_err();
    assert!(a
        .list_deliveries(&hook.id, None, 10)
        .await
        .unwrap()
        .is_empty());

    // Audit entries.
    let entry = |account: Option<AccountId>, action: &str| AuditRecord {
        seq: 0,
        id: DeliveryId::generate().to_string(),
        account_id: account,
        token_id: Some("tok".into()),
        client_ip: Some("127.0.0.1".into()),
        action: action.into(),
        front_end: "api".into(),
        resource_id: Some(sb.id.to_string()),
        status: 204,
        duration_ms: 5,
        at: Utc::now().trunc_subsecs(6),
    };
    a.insert_audit(&[
        entry(Some(owner.clone()), "DELETE /api/v1/sandbox/{id}"),
        entry(Some(other.clone()), "POST /api/v1/sandbox"),
        entry(None, "POST /api/v1/sandbox"),
    ])
    .await
    .unwrap();
    let mine = b
        .list_audit(&AuditFilter {
            account: Some(owner.clone()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].action, "DELETE /api/v1/sandbox/{id}");
    let everyone = b
        .list_audit(&AuditFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(everyone.len(), 3);
    let rest = b
        .list_audit(&AuditFilter {
            after: Some(everyone[0].seq),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(rest.len(), 2);
    assert_eq!(
        a.purge_audit(Utc::now() + Duration::seconds(1))
            .await
            .unwrap(),
        3
    );
    assert!(
        a.purge_events(Utc::now() + Duration::seconds(1))
            .await
            .unwrap()
            >= 3
    );
}
