//! Lifecycle events and webhooks: what the outbox costs a create and a
//! delete (each writes its events, and a delivery per webhook, in the
//! transaction of the change) with three webhooks registered for every
//! event type against none, and how long a delivery takes from the event's
//! timestamp to a receiver on loopback.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::{ms, Bench};
use crate::client::Api;
use crate::report::{Better, Row, Target};

/// Webhooks registered in the "with" condition, each for every event type.
const WEBHOOKS: usize = 3;
/// The goal: a create or a delete with webhooks takes at most this many
/// times as long as without.
const OUTBOX_GOAL_RATIO: f64 = 1.05;
/// Cycles of each condition per turn: each turn runs this many cycles
/// without webhooks and as many with them, in alternating order. Short
/// turns keep the machine's drift (other work on it) out of the ratio.
const CYCLES_PER_TURN: usize = 3;
/// How long the deliveries of a turn may take to arrive, and its deletes'
/// events to be written, before the scenario fails.
const SETTLE: Duration = Duration::from_secs(30);
/// The deliveries' signing secret (never checked here: the API tests do).
const SECRET: &str = "stockade-bench-webhooks";

/// One delivery the receiver got.
struct Arrival {
    webhook: String,
    event: String,
    /// When the receiver had it.
    at: DateTime<Utc>,
    /// The event's own `timestamp`.
    stamped: DateTime<Utc>,
}

/// A webhook receiver on loopback: records each delivery and answers 204.
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Arrival>>>,
    /// Deliveries whose body or headers were not an event's.
    malformed: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("the webhook receiver could not listen on loopback")?;
        let addr = listener
            .local_addr()
            .context("the webhook receiver's address")?;
        let got: Arc<Mutex<Vec<Arrival>>> = Arc::default();
        let malformed: Arc<Mutex<Vec<String>>> = Arc::default();
        let (recorded, refused) = (got.clone(), malformed.clone());
        let app = axum::Router::new().route(
            "/hook/{n}",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let at = Utc::now();
                let (recorded, refused) = (recorded.clone(), refused.clone());
                async move {
                    match arrival(&headers, &body, at) {
                        Ok(a) => recorded.lock().unwrap_or_else(|p| p.into_inner()).push(a),
                        Err(why) => refused.lock().unwrap_or_else(|p| p.into_inner()).push(why),
                    }
                    StatusCode::NO_CONTENT
                }
            }),
        );
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "the webhook receiver stopped");
            }
        });
        Ok(Self {
            addr,
            got,
            malformed,
            task,
        })
    }

    fn url(&self, n: usize) -> String {
        format!("http://{}/hook/{n}", self.addr)
    }

    /// The first arrival of each (webhook, event) pair, keyed by it.
    fn arrivals(&self) -> HashMap<(String, String), (DateTime<Utc>, DateTime<Utc>)> {
        let got = self.got.lock().unwrap_or_else(|p| p.into_inner());
        let mut first = HashMap::new();
        for a in got.iter() {
            first
                .entry((a.webhook.clone(), a.event.clone()))
                .or_insert((a.at, a.stamped));
        }
        first
    }

    fn malformed(&self) -> Vec<String> {
        self.malformed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A delivery as the receiver got it at `at`, or why it is not one.
fn arrival(headers: &HeaderMap, body: &[u8], at: DateTime<Utc>) -> Result<Arrival, String> {
    let webhook = headers
        .get("e2b-webhook-id")
        .and_then(|v| v.to_str().ok())
        .ok_or("no e2b-webhook-id header")?
        .to_owned();
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let event = v["id"].as_str().ok_or("the body has no id")?.to_owned();
    let stamped = v["timestamp"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .ok_or_else(|| format!("the body's timestamp is not RFC 3339: {}", v["timestamp"]))?
        .with_timezone(&Utc);
    Ok(Arrival {
        webhook,
        event,
        at,
        stamped,
    })
}

/// The samples of the scenario.
#[derive(Default)]
struct Figures {
    create: Vec<f64>,
    create_bare: Vec<f64>,
    delete: Vec<f64>,
    delete_bare: Vec<f64>,
    /// Event timestamp → receiver, one per delivery.
    delivery: Vec<f64>,
    /// Deliveries expected (events of the turns with webhooks × webhooks).
    expected: usize,
    /// Events written by the turns with webhooks.
    events: usize,
    turns: usize,
}

impl Bench {
    /// The events scenario, on a server of its own that lets webhooks reach
    /// loopback (as `--allow-internal-addresses 127.0.0.1/32` does), so the
    /// receiver can run in this process and the other scenarios' server
    /// keeps no webhooks.
    pub(super) async fn events(&mut self) -> anyhow::Result<()> {
        let receiver = Receiver::start().await?;
        let (_dir, app, api) = self
            .configured_server("events", |c| {
                c.service.sources.addresses = stockade_core::net::AddressPolicy {
                    allow: vec![
                        stockade_core::net::IpNet::parse("127.0.0.1/32").expect("a loopback range")
                    ],
                };
            })
            .await?;
        let mut made = Vec::new();
        let mut hooks = Vec::new();
        let outcome = self
            .events_measure(&api, &receiver, &mut made, &mut hooks)
            .await;
        for id in &hooks {
            let _ = api.delete_webhook(id).await;
        }
        for id in &made {
            let _ = api.delete(id).await;
        }
        app.stop().await;
        let f = outcome?;
        self.events_rows(f);
        Ok(())
    }

    /// Turns of create-and-delete cycles without webhooks and with them;
    /// sandboxes not yet deleted stay in `made`, webhooks in `hooks`.
    async fn events_measure(
        &self,
        api: &Api,
        receiver: &Receiver,
        made: &mut Vec<String>,
        hooks: &mut Vec<String>,
    ) -> anyhow::Result<Figures> {
        let n = self.plan.event_cycles;
        let turns = n.div_ceil(CYCLES_PER_TURN);
        // One untimed cycle: the server's first create finds its networks
        // and the agent volume.
        let id = api.create(json!({})).await?;
        api.delete(&id).await?;
        let (_, mut cursor) = api.events_since(None).await?;

        let mut f = Figures {
            turns,
            ..Figures::default()
        };
        for turn in 0..turns {
            // This turn's share of the cycles: the first `n % turns` turns
            // run one more.
            let cycles = n / turns + usize::from(turn < n % turns);
            // ABBA…: the order of the conditions alternates, so a drift of
            // the machine over the run weighs on both alike.
            let order = if turn % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for with in order {
                if with {
                    for i in 0..WEBHOOKS {
                        let name = format!("bench-{}", i + 1);
                        hooks.push(api.create_webhook(&name, &receiver.url(i), SECRET).await?);
                    }
                }
                let (creates, deletes) = if with {
                    (&mut f.create, &mut f.delete)
                } else {
                    (&mut f.create_bare, &mut f.delete_bare)
                };
                let mut ids = Vec::new();
                for _ in 0..cycles {
                    let t = Instant::now();
                    let id = api.create(json!({})).await?;
                    creates.push(ms(t.elapsed()));
                    made.push(id.clone());
                    let t = Instant::now();
                    api.delete(&id).await?;
                    deletes.push(ms(t.elapsed()));
                    made.retain(|m| m != &id);
                    ids.push(id);
                }
                let (events, next) = settled_events(api, cursor.as_deref(), &ids).await?;
                cursor = next;
                if with {
                    let expected: HashSet<(String, String)> = hooks
                        .iter()
                        .flat_map(|h| events.iter().map(move |e| (h.clone(), e.clone())))
                        .collect();
                    f.events += events.len();
                    f.expected += expected.len();
                    f.delivery.extend(delivered(receiver, &expected).await?);
                    for id in hooks.drain(..) {
                        api.delete_webhook(&id).await?;
                    }
                }
            }
        }
        let malformed = receiver.malformed();
        if !malformed.is_empty() {
            bail!(
                "the receiver got {} deliveries that were not events: {}",
                malformed.len(),
                malformed.join("; ")
            );
        }
        Ok(f)
    }

    fn events_rows(&mut self, f: Figures) {
        let pair = |s: &[f64]| {
            crate::report::summarize(s).map_or_else(
                || "–".to_owned(),
                |s| format!("p50 {:.1} ms, p95 {:.1} ms", s.p50, s.p95),
            )
        };
        let conditions = format!(
            "{} cycles each way (create → RUNNING, then delete, of a default sandbox) in {} \
             turns, the order of the two conditions alternating from turn to turn",
            f.create.len(),
            f.turns
        );
        self.rows.push(
            Row::new(
                "events_create",
                "Create → RUNNING with 3 webhooks for every event vs none (the outbox's cost)",
                "ms",
                Better::Lower,
                &f.create,
                Some(&f.create_bare),
                Target::RatioAtMost(OUTBOX_GOAL_RATIO),
            )
            .baseline("no webhooks registered")
            .note(format!(
                "{conditions}; with webhooks {}, without {}. Each change writes its events, \
                 and with webhooks a delivery row per webhook, in the transaction of the change; the \
                 deliveries run in the background meanwhile",
                pair(&f.create),
                pair(&f.create_bare)
            )),
        );
        self.rows.push(
            Row::new(
                "events_delete",
                "Delete with 3 webhooks for every event vs none (the outbox's cost)",
                "ms",
                Better::Lower,
                &f.delete,
                Some(&f.delete_bare),
                Target::RatioAtMost(OUTBOX_GOAL_RATIO),
            )
            .baseline("no webhooks registered")
            .note(format!(
                "the same cycles; with webhooks {}, without {}",
                pair(&f.delete),
                pair(&f.delete_bare)
            )),
        );
        self.rows.push(
            Row::new(
                "events_delivery",
                "Webhook delivery: event timestamp → receiver on loopback",
                "ms",
                Better::Lower,
                &f.delivery,
                None,
                Target::None,
            )
            .note(format!(
                "{} of {} deliveries arrived ({} events of the cycles with webhooks × \
                 {WEBHOOKS} webhooks), {}; from the event's `timestamp` (taken when the \
                 change is recorded) to the receiver in this process having the POST, \
                 which answers 204",
                f.delivery.len(),
                f.expected,
                f.events,
                pair(&f.delivery)
            )),
        );
    }
}

/// The ids of the events in the feed after `since` once every sandbox of
/// `ids` has its `killed` event there, and the cursor after them.
async fn settled_events(
    api: &Api,
    since: Option<&str>,
    ids: &[String],
) -> anyhow::Result<(Vec<String>, Option<String>)> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let (events, next) = api.events_since(since).await?;
        let killed: HashSet<&str> = events
            .iter()
            .filter(|e| e["type"] == "sandbox.lifecycle.killed")
            .filter_map(|e| e["sandboxId"].as_str())
            .collect();
        if ids.iter().all(|id| killed.contains(id.as_str())) {
            let ids = events
                .iter()
                .filter_map(|e| e["id"].as_str().map(str::to_owned))
                .collect();
            return Ok((ids, next.or_else(|| since.map(str::to_owned))));
        }
        if Instant::now() > deadline {
            let missing: Vec<&String> = ids
                .iter()
                .filter(|id| !killed.contains(id.as_str()))
                .collect();
            bail!(
                "no sandbox.lifecycle.killed event for {missing:?} within {} s of their deletes",
                SETTLE.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The latency (ms) of each delivery in `expected` (webhook id, event id)
/// once the receiver has every one; fails when some do not arrive within
/// [`SETTLE`].
async fn delivered(
    receiver: &Receiver,
    expected: &HashSet<(String, String)>,
) -> anyhow::Result<Vec<f64>> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let got = receiver.arrivals();
        let missing = expected.iter().filter(|k| !got.contains_key(*k)).count();
        if missing == 0 {
            return Ok(expected
                .iter()
                .filter_map(|k| got.get(k))
                .map(|(at, stamped)| (*at - *stamped).to_std().map_or(0.0, ms))
                .collect());
        }
        if Instant::now() > deadline {
            bail!(
                "{missing} of {} webhook deliveries did not arrive within {} s",
                expected.len(),
                SETTLE.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_read_from_its_header_and_body() {
        let mut headers = HeaderMap::new();
        headers.insert("e2b-webhook-id", "w1".parse().unwrap());
        let at = Utc::now();
        let body = br#"{"id":"e1","timestamp":"2026-01-15T09:30:02.123456Z"}"#;
        let a = arrival(&headers, body, at).unwrap();
        assert_eq!((a.webhook.as_str(), a.event.as_str()), ("w1", "e1"));
        assert_eq!(a.stamped.timestamp_subsec_micros(), 123_456);
        assert!(arrival(&HeaderMap::new(), body, at).is_err());
        assert!(arrival(&headers, br#"{"id":"e1","timestamp":"soon"}"#, at).is_err());
        assert!(arrival(&headers, b"not json", at).is_err());
    }
}
