//! Per-account caps on long-lived streams: terminals, event streams (log
//! follows, exec streams, file watches) and WebSockets through the port
//! proxy. Each holds a connection slot for as long as it lives, so one
//! account may hold at most `max_streams_per_account` of them at once; one
//! more is refused with 429 naming the limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use stockade_core::ids::AccountId;

use crate::error::ApiError;
use crate::extract::Caller;
use crate::AppState;

/// How long a refused client is told to wait before it tries again.
const RETRY_AFTER_SECS: u64 = 5;

/// The open streams of every account.
#[derive(Debug)]
pub struct StreamLimiter {
    max_per_account: usize,
    open: Mutex<HashMap<AccountId, usize>>,
}

/// One open stream, counted until it is dropped.
#[derive(Debug)]
pub struct StreamPermit {
    limiter: Arc<StreamLimiter>,
    account: AccountId,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = self.limiter.lock();
        if let Some(n) = open.get_mut(&self.account) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.account);
            }
        }
    }
}

impl StreamLimiter {
    pub fn new(max_per_account: usize) -> Self {
        Self {
            max_per_account: max_per_account.max(1),
            open: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AccountId, usize>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new stream of `account`, or refuses it (429) when the
    /// account already holds its limit.
    pub fn acquire(self: &Arc<Self>, account: &AccountId) -> Result<StreamPermit, ApiError> {
        let mut open = self.lock();
        let n = open.entry(account.clone()).or_default();
        if *n >= self.max_per_account {
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "Too many open streams: this account holds {} terminals, event streams and \
                     proxied WebSockets, the most it may hold at once (the server's \
                     max-streams-per-account limit is {}); close one and try again",
                    *n, self.max_per_account
                ),
                retry_after_secs: RETRY_AFTER_SECS,
            });
        }
        *n += 1;
        Ok(StreamPermit {
            limiter: self.clone(),
            account: account.clone(),
        })
    }

    /// How many streams `account` holds now.
    pub fn open(&self, account: &AccountId) -> usize {
        self.lock().get(account).copied().unwrap_or(0)
    }
}

/// Whether a request is one of those that may answer with an event stream.
fn may_stream(req: &Request) -> bool {
    let query = req.uri().query().unwrap_or_default();
    crate::sse::wants_event_stream(req.headers())
        || query
            .split('&')
            .any(|p| p.eq_ignore_ascii_case("follow=true"))
        || req.uri().path().ends_with("/watch")
        || req.uri().path().ends_with("/events/stream")
}

fn has_credentials(headers: &HeaderMap) -> bool {
    headers.contains_key(header::AUTHORIZATION) || headers.contains_key(header::COOKIE)
}

/// Middleware: counts the event streams of the API against their account.
/// The caller is resolved ahead of the handler (which then finds it
/// already there); a request that asks for a stream is refused before the
/// handler starts anything when its account is at the limit, and any
/// answer that turns out to be an event stream holds its count until its
/// body is dropped.
pub async fn limit_event_streams(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    let counted = path.starts_with("/api/v1/sandbox/") || path == "/api/v1/events/stream";
    if !counted || !has_credentials(req.headers()) {
        return next.run(req).await;
    }
    let wanted = may_stream(&req);
    let (mut parts, body) = req.into_parts();
    // An authentication failure is the handler's to answer.
    let account = Caller::from_request_parts(&mut parts, &state)
        .await
        .ok()
        .map(|c| c.account.id);
    let req = Request::from_parts(parts, body);
    let Some(account) = account else {
        return next.run(req).await;
    };
    let mut permit = None;
    if wanted {
        match state.streams.acquire(&account) {
            Ok(p) => permit = Some(p),
            Err(e) => return e.into_response(),
        }
    }
    let response = next.run(req).await;
    let is_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_stream {
        return response;
    }
    let permit = match permit {
        Some(p) => p,
        None => match state.streams.acquire(&account) {
            Ok(p) => p,
            Err(e) => return e.into_response(),
        },
    };
    response.map(|body| {
        axum::body::Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
            let _held = &permit;
            frame
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_holds_at_most_its_limit_and_gets_it_back() {
        let l = Arc::new(StreamLimiter::new(2));
        let a = AccountId::generate();
        let b = AccountId::generate();
        let one = l.acquire(&a).unwrap();
        let _two = l.acquire(&a).unwrap();
        let err = l.acquire(&a).unwrap_err();
        assert_eq!(err.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(
            err.to_string()
                .contains("max-streams-per-account limit is 2"),
            "{err}"
        );
        // Another account is not affected.
        let _other = l.acquire(&b).unwrap();
        drop(one);
        assert_eq!(l.open(&a), 1);
        let _three = l.acquire(&a).unwrap();
    }
}
