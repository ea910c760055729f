//! Webhook deliveries: every instance claims the deliveries that are due
//! (per row, so two instances never send the same one at once), POSTs each
//! signed event to its webhook and records the attempt: delivered on a 2xx,
//! else retried with a doubling wait until the retry period is over. A
//! slow receiver holds a slot for at most the delivery timeout, and its
//! answer's body is never read.

use std::time::{Duration, Instant};

use base64::Engine;
use chrono::Utc;
use sha2::{Digest, Sha256};
use stockade_core::DeliveryId;
use stockade_store::{AttemptOutcome, AttemptRecord, DueDelivery};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::events::{event_view, WebhookTargetError};
use crate::Service;

/// How long a claim lasts: longer than one attempt can take.
const CLAIM: Duration = Duration::from_secs(60);
/// How often due deliveries are looked for when nothing signals new events
/// (retries, other instances' events).
const POLL: Duration = Duration::from_secs(1);

/// The `e2b-signature` of a body: SHA-256 over the secret followed by the
/// raw body, base64url without padding.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(secret.as_bytes());
    hash.update(body);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.finalize())
}

/// Delivers until `shutdown`.
pub async fn run(svc: Service, shutdown: CancellationToken) {
    let config = svc.config().events.clone();
    let client = match crate::net::outbound::webhook_client(
        &svc.config().sources.addresses,
        config.delivery_timeout,
    ) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "webhook deliveries cannot start: no HTTP client");
            return;
        }
    };
    let holder = svc.ops().holder().to_owned();
    let mut signal = svc.subscribe_events();
    let mut running: JoinSet<()> = JoinSet::new();
    loop {
        while running.try_join_next().is_some() {}
        let room = config.delivery_concurrency.saturating_sub(running.len());
        let mut claimed = 0;
        if room > 0 {
            let now = Utc::now();
            match svc
                .store()
                .claim_deliveries(&holder, now, now + CLAIM, room as u32)
                .await
            {
                Ok(due) => {
                    claimed = due.len();
                    for d in due {
                        running.spawn(deliver(svc.clone(), client.clone(), d));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not claim webhook deliveries"),
            }
        }
        if claimed > 0 && claimed == room {
            // More may be due: look again as soon as a slot frees.
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = running.join_next() => {}
            }
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = signal.changed() => {}
            Some(_) = running.join_next(), if !running.is_empty() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
    // Attempts in flight end within the delivery timeout; their claims
    // lapse for another instance otherwise.
    let _ = tokio::time::timeout(config.delivery_timeout, async {
        while running.join_next().await.is_some() {}
    })
    .await;
}

/// One attempt at one delivery, recorded.
async fn deliver(svc: Service, client: reqwest::Client, due: DueDelivery) {
    let attempt_id = DeliveryId::generate();
    let started = Instant::now();
    let at = Utc::now();
    let result = attempt(&svc, &client, &due, &attempt_id).await;
    let duration_ms = started.elapsed().as_millis().min(u128::from(u64::MAX)) as u64;
    let (status_code, error) = match &result {
        Ok(code) if (200..300).contains(code) => (Some(*code), None),
        Ok(code) => (Some(*code), Some(format!("the receiver answered {code}"))),
        Err(e) => (None, Some(e.clone())),
    };
    let outcome = if error.is_none() {
        AttemptOutcome::Delivered
    } else {
        let config = &svc.config().events;
        let wait = retry_wait(config.retry_base, config.retry_max, due.attempts);
        let next = chrono::Duration::from_std(wait)
            .ok()
            .and_then(|wait| Utc::now().checked_add_signed(wait));
        match next {
            Some(next) if next <= due.give_up_at => AttemptOutcome::RetryAt(next),
            _ => AttemptOutcome::GiveUp,
        }
    };
    if let Some(e) = &error {
        tracing::info!(
            webhook = %due.webhook.id,
            delivery = %due.id,
            attempt = due.attempts + 1,
            error = %e,
            "webhook delivery failed"
        );
    }
    let record = AttemptRecord {
        id: attempt_id,
        at,
        status_code,
        error,
        duration_ms,
    };
    if let Err(e) = svc.store().record_attempt(&due.id, &record, outcome).await {
        // The claim lapses and the delivery is attempted again: at least once.
        tracing::warn!(error = %e, delivery = %due.id, "could not record a webhook attempt");
    }
}

/// The wait before attempt `attempts + 2`: `base` doubled per failure so far,
/// at most `max`.
pub fn retry_wait(base: Duration, max: Duration, attempts: u32) -> Duration {
    base.saturating_mul(2u32.saturating_pow(attempts.min(20)))
        .min(max)
}

/// Sends the event; the receiver's status code, or why there was none.
async fn attempt(
    svc: &Service,
    client: &reqwest::Client,
    due: &DueDelivery,
    attempt_id: &DeliveryId,
) -> Result<u16, String> {
    let url = reqwest::Url::parse(&due.webhook.url).map_err(|e| format!("bad URL: {e}"))?;
    match svc.webhook_target(&url).await {
        Ok(_) => {}
        Err(WebhookTargetError::Unresolvable) => {
            return Err(format!(
                "cannot resolve host '{}'",
                url.host_str().unwrap_or_default()
            ))
        }
        Err(WebhookTargetError::Refused(m)) => return Err(m),
    }
    let body = serde_json::to_vec(&event_view(&due.event)).map_err(|e| e.to_string())?;
    let response = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::USER_AGENT, "Stockade-Webhooks/1")
        .header("e2b-webhook-id", due.webhook.id.as_str())
        .header("e2b-delivery-id", attempt_id.as_str())
        .header("e2b-signature-version", "v1")
        .header("e2b-signature", signature(&due.webhook.secret, &body))
        .header("stockade-event-type", due.event.event.kind.as_str())
        .body(body)
        .send()
        .await
        .map_err(|e| describe(&e))?;
    // The body is never read: dropping the answer closes the connection.
    Ok(response.status().as_u16())
}

/// A failed request in words, without the URL's query.
fn describe(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "the receiver did not answer in time"
    } else if e.is_connect() {
        "could not connect to the receiver"
    } else {
        "the request failed"
    };
    let mut cause: &dyn std::error::Error = e;
    let mut last = String::new();
    while let Some(next) = cause.source() {
        last = next.to_string();
        cause = next;
    }
    if last.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_e2bs_and_waits_double_up_to_the_cap() {
        // SHA-256("s" ‖ "{}"), base64url without padding.
        let expected =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(b"s{}"));
        assert_eq!(signature("s", b"{}"), expected);
        assert!(!expected.contains('=') && !expected.contains('+') && !expected.contains('/'));
        let base = Duration::from_secs(5);
        let max = Duration::from_secs(3600);
        assert_eq!(retry_wait(base, max, 0), Duration::from_secs(5));
        assert_eq!(retry_wait(base, max, 3), Duration::from_secs(40));
        assert_eq!(retry_wait(base, max, 30), max);
    }
}
