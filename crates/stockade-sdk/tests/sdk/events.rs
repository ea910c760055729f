//! Lifecycle events, webhooks and the audit log through the SDK: a create
//! is in the feed (paged with its cursor, filtered, followed live, unseen
//! by another account), a webhook on a loopback receiver gets it signed as
//! documented, its deliveries are listed and redelivered, and the audit
//! log holds the create.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use sha2::{Digest, Sha256};
use stockade_sdk::api::{CreateWebhookRequest, Event, UpdateWebhookRequest};
use stockade_sdk::{AuditParams, Client, CreateParams, Error, EventParams, StreamExt};
use tokio::sync::mpsc;

use crate::helpers::server;

const CREATED: &str = "sandbox.lifecycle.created";
const PAUSED: &str = "sandbox.lifecycle.paused";

/// One POST a receiver got: its headers and its raw body.
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    fn event(&self) -> Event {
        serde_json::from_slice(&self.body).expect("the body is an event")
    }
}

/// A webhook receiver on 127.0.0.1: `/ok` answers 200, `/fail` 500; what
/// each got comes out of the channel.
async fn receiver() -> (String, mpsc::UnboundedReceiver<(String, Received)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let answer = |path: &'static str, status: StatusCode| {
        let tx = tx.clone();
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let _ = tx.send((path.to_owned(), Received { headers, body }));
            async move { status }
        })
    };
    let app = axum::Router::new()
        .route("/ok", answer("/ok", StatusCode::OK))
        .route("/fail", answer("/fail", StatusCode::INTERNAL_SERVER_ERROR));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), rx)
}

/// The next POST to `path` within 30 s.
async fn next_to(rx: &mut mpsc::UnboundedReceiver<(String, Received)>, path: &str) -> Received {
    let wait = async {
        loop {
            let (p, r) = rx.recv().await.expect("the receiver runs");
            if p == path {
                return r;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .unwrap_or_else(|_| panic!("no delivery to {path} within 30 s"))
}

/// The signature the documentation promises: base64url without padding of
/// SHA-256 over the secret and then the raw body.
fn signature(secret: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(secret.as_bytes());
    h.update(body);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(h.finalize())
}

/// Asks `check` every 100 ms for up to 30 s until it finds something.
async fn poll<T, F, Fut>(mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..300 {
        if let Some(found) = check().await {
            return Some(found);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn field_of(e: &Error) -> String {
    match e {
        Error::Api { details, .. } => details
            .as_ref()
            .and_then(|d| d["fields"][0]["field"].as_str())
            .unwrap_or_default()
            .to_owned(),
        Error::InvalidParams { field, .. } => field.clone(),
        other => panic!("not a parameter error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_feed_pages_filters_streams_and_keeps_accounts_apart() {
    let s = server().await;
    let me = s.client.whoami().await.unwrap().account.id;
    let sb = s.create(CreateParams::new().name("ev-feed")).await;

    // The create is in the feed, about this sandbox, in E2B's shape.
    let page = s
        .client
        .events(&EventParams::new().event_type(CREATED).sandbox(sb.id()))
        .await
        .unwrap();
    assert_eq!(page.events.len(), 1, "{:?}", page.events);
    let created = &page.events[0];
    assert_eq!(created.kind, CREATED);
    assert_eq!(created.version, "v1");
    assert_eq!(created.sandbox_id.as_deref(), Some(sb.id()));
    assert_eq!(created.resource_type, "sandbox");
    assert_eq!(created.resource_id, sb.id());
    assert_eq!(created.sandbox_team_id, me);
    assert_eq!(created.sandbox_build_id, None);
    assert_eq!(page.next_cursor, created.cursor);
    // By the sandbox's name too.
    let by_name = s
        .client
        .events(&EventParams::new().event_type(CREATED).sandbox("ev-feed"))
        .await
        .unwrap();
    assert_eq!(by_name.events, page.events);

    // A second sandbox makes a second created event; one a page, oldest
    // first, each page reading on from the last.
    let other = s.create(CreateParams::new().name("ev-feed-2")).await;
    let mut seen: Vec<Event> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut params = EventParams::new().event_type(CREATED).limit(1);
        if let Some(c) = &cursor {
            params = params.since(c.clone());
        }
        let page = s.client.events(&params).await.unwrap();
        assert!(page.events.len() <= 1);
        if page.events.is_empty() {
            assert_eq!(
                Some(&page.next_cursor),
                cursor.as_ref(),
                "nothing newer: the cursor given comes back"
            );
            break;
        }
        seen.extend(page.events);
        cursor = Some(page.next_cursor);
        assert!(seen.len() <= 10, "the pages never end: {seen:?}");
    }
    let ids: Vec<&str> = seen.iter().map(|e| e.resource_id.as_str()).collect();
    assert_eq!(ids, [sb.id(), other.id()]);
    assert!(seen[0].timestamp <= seen[1].timestamp);

    // Followed live from the end of the feed: a pause shows up.
    let end = s.client.events(&EventParams::new()).await.unwrap();
    let mut stream = s
        .client
        .event_stream(&EventParams::new().since(end.next_cursor.clone()))
        .await
        .unwrap();
    let mut paused = sb.clone();
    paused.pause().await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let e = stream.next().await.expect("the stream goes on").unwrap();
            if e.kind == PAUSED {
                return e;
            }
        }
    })
    .await
    .expect("the pause within 30 s");
    assert_eq!(event.sandbox_id.as_deref(), Some(sb.id()));
    assert_eq!(stream.cursor().as_deref(), Some(event.cursor.as_str()));
    // The feed agrees: after the stream's cursor, nothing is left unread
    // of what came before the pause.
    let after = s
        .client
        .events(&EventParams::new().since(end.next_cursor))
        .await
        .unwrap();
    assert!(after.events.iter().any(|e| e.id == event.id));
    drop(stream);

    // Another account sees none of it, by filter or not.
    let eve = s.client.create_account("eve", false).await.unwrap();
    let eve = Client::new(s.client.base_url(), &eve.token).unwrap();
    let theirs = eve.events(&EventParams::new()).await.unwrap();
    assert!(theirs.events.is_empty(), "{:?}", theirs.events);
    match eve.events(&EventParams::new().sandbox(sb.id())).await {
        Ok(page) => assert!(page.events.is_empty(), "{:?}", page.events),
        Err(e) => assert!(e.is_not_found(), "{e}"),
    }

    // Bad parameters are 4xx naming the field, before or at the server.
    let e = s
        .client
        .events(&EventParams::new().limit(0))
        .await
        .unwrap_err();
    assert_eq!(field_of(&e), "limit");
    let e = s
        .client
        .events(&EventParams::new().event_type("sandbox.lifecycle.exploded"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    assert_eq!(field_of(&e), "type");
    let e = s
        .client
        .events(&EventParams::new().since("not a cursor"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    assert_eq!(field_of(&e), "since");
    let e = s
        .client
        .event_stream(&EventParams::new().event_type("nope"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    let anonymous = Client::new(s.client.base_url(), "stk_not_a_token").unwrap();
    let e = anonymous.events(&EventParams::new()).await.unwrap_err();
    assert_eq!(e.status(), Some(401), "{e}");

    // The audit log holds the create, as this account's call; another
    // account's entries are not the caller's to read.
    let audit = s.client.audit(&AuditParams::new()).await.unwrap();
    let create = audit
        .entries
        .iter()
        .find(|e| e.action == "POST /api/v1/sandbox" && e.status == 201)
        .unwrap_or_else(|| panic!("no create in {:?}", audit.entries));
    assert_eq!(create.account_id.as_deref(), Some(me.as_str()));
    assert_eq!(create.front_end, "api");
    let mine = eve.audit(&AuditParams::new()).await.unwrap();
    assert!(
        mine.entries
            .iter()
            .all(|e| e.account_id.as_deref() != Some(me.as_str())),
        "{:?}",
        mine.entries
    );
    let e = eve
        .audit(&AuditParams::new().account_id(me.clone()))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");
    // An administrator narrows to one resource, and pages on.
    let about = s
        .client
        .audit(&AuditParams::new().resource_id(sb.id()).limit(1))
        .await
        .unwrap();
    assert!(about.entries.len() <= 1);
    assert!(about
        .entries
        .iter()
        .all(|e| e.resource_id.as_deref() == Some(sb.id())));
    let later = s
        .client
        .audit(&AuditParams::new().since(audit.next_cursor.clone()))
        .await
        .unwrap();
    assert!(later
        .entries
        .iter()
        .all(|e| audit.entries.iter().all(|old| old.id != e.id)));
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_get_signed_deliveries_that_can_be_listed_and_redelivered() {
    let s = server().await;
    let (base, mut rx) = receiver().await;
    let secret = "a-secret-of-the-test";

    // Registered with a secret of its own: none comes back.
    let hook = s
        .client
        .create_webhook(&CreateWebhookRequest {
            name: Some("receiver".into()),
            url: format!("{base}/ok"),
            events: Some(vec![CREATED.into()]),
            signature_secret: Some(secret.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(hook.name, "receiver");
    assert!(hook.enabled);
    assert_eq!(hook.events, [CREATED]);
    assert_eq!(hook.signature_secret, None);
    // One without a secret gets one made, shown in this answer only; it
    // wants every type and fails at its receiver.
    let failing = s
        .client
        .create_webhook(&CreateWebhookRequest {
            url: format!("{base}/fail"),
            ..Default::default()
        })
        .await
        .unwrap();
    let made = failing.signature_secret.clone().expect("a secret was made");
    assert!(made.len() >= 8, "{made}");
    let listed = s.client.webhooks().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|h| h.signature_secret.is_none()));
    let read = s.client.webhook(&hook.id).await.unwrap();
    assert_eq!(
        (&read.id, &read.team_id, &read.name, &read.url, &read.events),
        (&hook.id, &hook.team_id, &hook.name, &hook.url, &hook.events)
    );
    assert!((read.created_at - hook.created_at).num_milliseconds().abs() < 1);

    // A create is delivered, signed as documented.
    let sb = s.create(CreateParams::new().name("ev-hook")).await;
    let got = next_to(&mut rx, "/ok").await;
    let event = got.event();
    assert_eq!(event.kind, CREATED);
    assert_eq!(event.sandbox_id.as_deref(), Some(sb.id()));
    assert_eq!(got.header("e2b-webhook-id"), hook.id);
    assert_eq!(got.header("e2b-signature-version"), "v1");
    assert_eq!(got.header("stockade-event-type"), CREATED);
    assert_eq!(got.header("e2b-signature"), signature(secret, &got.body));
    assert_ne!(got.header("e2b-signature"), signature("another", &got.body));
    let first_attempt = got.header("e2b-delivery-id").to_owned();
    assert!(!first_attempt.is_empty());
    // The failing receiver got it too, signed with the made secret.
    let failed = next_to(&mut rx, "/fail").await;
    assert_eq!(
        failed.header("e2b-signature"),
        signature(&made, &failed.body)
    );

    // Listed: delivered, the attempt with the receiver's answer.
    let delivered = poll(|| async {
        let list = s
            .client
            .webhook_deliveries(&hook.id, None, None)
            .await
            .unwrap();
        list.deliveries
            .into_iter()
            .find(|d| d.status == "delivered")
    })
    .await;
    let d = delivered.expect("no delivered delivery");
    assert_eq!(d.webhook_id, hook.id);
    assert_eq!(d.event_id, event.id);
    assert_eq!(d.event_type, CREATED);
    assert_eq!(d.sandbox_id.as_deref(), Some(sb.id()));
    assert!(d.delivered_at.is_some());
    assert_eq!(d.attempt_log[0].id, first_attempt);
    assert_eq!(d.attempt_log[0].status_code, Some(200));
    // Filtered by status: none of this webhook's failed (yet); the failing
    // one's waits for another attempt with the 500 it got.
    let none = s
        .client
        .webhook_deliveries(&hook.id, Some(10), Some("failed"))
        .await
        .unwrap();
    assert!(none.deliveries.is_empty(), "{:?}", none.deliveries);
    let tried = poll(|| async {
        let list = s
            .client
            .webhook_deliveries(&failing.id, Some(100), Some("pending"))
            .await
            .unwrap();
        list.deliveries
            .into_iter()
            .find(|d| !d.attempt_log.is_empty())
    })
    .await
    .expect("no attempted pending delivery");
    assert_eq!(tried.attempt_log[0].status_code, Some(500));
    assert!(tried.next_attempt_at.is_some());

    // Redelivered: the same event again, under a new attempt id.
    let again = s.client.redeliver(&hook.id, &d.id).await.unwrap();
    assert_eq!(again.event_id, event.id);
    let got = next_to(&mut rx, "/ok").await;
    assert_eq!(got.event().id, event.id);
    assert_ne!(got.header("e2b-delivery-id"), first_attempt);
    assert_eq!(got.header("e2b-signature"), signature(secret, &got.body));

    // Changed field by field: a disabled webhook gets nothing.
    let off = s
        .client
        .update_webhook(
            &hook.id,
            &UpdateWebhookRequest {
                enabled: Some(false),
                name: Some("paused receiver".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!off.enabled);
    assert_eq!(off.name, "paused receiver");
    assert_eq!(off.url, hook.url, "what was not given stays");
    assert_eq!(off.events, hook.events);
    let quiet = s.create(CreateParams::new().name("ev-hook-2")).await;
    // The failing webhook (enabled, every type) hears of it; the disabled
    // one does not.
    loop {
        let got = next_to(&mut rx, "/fail").await;
        if got.event().sandbox_id.as_deref() == Some(quiet.id()) {
            break;
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    while let Ok((path, r)) = rx.try_recv() {
        assert!(
            path != "/ok" || r.event().sandbox_id.as_deref() != Some(quiet.id()),
            "a disabled webhook got a delivery"
        );
    }

    // Another account cannot see, change, remove or redeliver it.
    let mallory = s.client.create_account("mallory", false).await.unwrap();
    let mallory = Client::new(s.client.base_url(), &mallory.token).unwrap();
    assert!(mallory.webhooks().await.unwrap().is_empty());
    for e in [
        mallory.webhook(&hook.id).await.unwrap_err(),
        mallory
            .update_webhook(&hook.id, &UpdateWebhookRequest::default())
            .await
            .unwrap_err(),
        mallory.delete_webhook(&hook.id).await.unwrap_err(),
        mallory
            .webhook_deliveries(&hook.id, None, None)
            .await
            .unwrap_err(),
        mallory.redeliver(&hook.id, &d.id).await.unwrap_err(),
    ] {
        assert!(e.is_not_found(), "{e}");
    }

    // Bad input is a 400 naming the field.
    for (req, field) in [
        (
            CreateWebhookRequest {
                url: "ftp://example.com/hook".into(),
                ..Default::default()
            },
            "url",
        ),
        (
            CreateWebhookRequest {
                url: "not a url".into(),
                ..Default::default()
            },
            "url",
        ),
        (
            CreateWebhookRequest {
                url: format!("{base}/ok"),
                events: Some(vec!["sandbox.lifecycle.exploded".into()]),
                ..Default::default()
            },
            "events",
        ),
        (
            CreateWebhookRequest {
                url: format!("{base}/ok"),
                signature_secret: Some("short".into()),
                ..Default::default()
            },
            "signatureSecret",
        ),
    ] {
        let e = s.client.create_webhook(&req).await.unwrap_err();
        assert_eq!(e.status(), Some(400), "{req:?}: {e}");
        assert!(field_of(&e).starts_with(field), "{req:?}: {e:?}");
    }
    let e = s
        .client
        .webhook_deliveries(&hook.id, None, Some("lost"))
        .await
        .unwrap_err();
    assert_eq!(field_of(&e), "status");
    let e = s.client.webhook("../audit").await.unwrap_err();
    assert_eq!(field_of(&e), "id");

    // Removed: gone for good.
    s.client.delete_webhook(&hook.id).await.unwrap();
    assert!(s.client.webhook(&hook.id).await.unwrap_err().is_not_found());
    assert!(s
        .client
        .delete_webhook(&hook.id)
        .await
        .unwrap_err()
        .is_not_found());
    s.client.delete_webhook(&failing.id).await.unwrap();
    assert!(s.client.webhooks().await.unwrap().is_empty());
}
