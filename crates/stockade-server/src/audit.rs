//! The audit log's front door: every routed call that changes something
//! (any method but GET, HEAD and OPTIONS) and every read refused as
//! unauthenticated, forbidden, not found or rate limited is handed to the
//! service's audit log when its answer is ready: who (the account and
//! credential the extractors accepted, the client's address), what (the
//! method and route template — never the path as sent, its query or its
//! body), which resource (the path's id), the status and the time taken.
//! The in-sandbox data plane (E2B's envd, the port proxy) is not audited.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, RawPathParams, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::Response;
use stockade_core::{AccountId, TokenId};
use stockade_store::AuditRecord;

use crate::extract::{Caller, Credential};
use crate::AppState;

/// The client's address as the rate limiter decided it (the peer, or the
/// trusted proxy's `X-Forwarded-For`).
#[derive(Debug, Clone, Copy)]
pub struct ClientIp(pub IpAddr);

/// The resource a call made, put on its answer by the handler (a create's
/// id: its path names none).
#[derive(Debug, Clone)]
pub struct Made(pub String);

/// Who a call turned out to be, filled in by the extractors when a
/// credential is accepted.
#[derive(Debug, Clone, Default)]
pub struct AuditSlot(Arc<Mutex<Seen>>);

type Seen = Option<(AccountId, TokenId, Credential)>;

impl AuditSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes the caller a request authenticated as.
    pub fn caller(&self, caller: &Caller) {
        *self.lock() = Some((
            caller.account.id.clone(),
            caller.token_id.clone(),
            caller.credential,
        ));
    }
}

/// Notes `caller` in the request's audit slot, when it has one.
pub fn note_caller(extensions: &axum::http::Extensions, caller: &Caller) {
    if let Some(slot) = extensions.get::<AuditSlot>() {
        slot.caller(caller);
    }
}

/// Whether a call with this method and answer is audited.
fn audited(method: &Method, status: u16) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        || matches!(status, 401 | 403 | 404 | 429)
}

/// The front-end a call came through.
fn front_end(route: &str, credential: Option<Credential>, agent: &str) -> Option<&'static str> {
    if route.starts_with("/proxy/") || route == "/metrics" || route == "/api/v1/health" {
        return None;
    }
    if route.starts_with("/e2b/") {
        return Some("e2b");
    }
    if route.starts_with("/gateway/") || agent.starts_with("prime-sandboxes") {
        return Some("prime");
    }
    if credential == Some(Credential::SessionCookie) {
        return Some("dashboard");
    }
    if agent.starts_with("stockade-cli") {
        return Some("cli");
    }
    route.starts_with("/api/").then_some("api")
}

/// The resource a path names: its `id` parameter, else the first that is
/// an id or a name (never a token or a file path).
fn resource_of(params: &RawPathParams) -> Option<String> {
    let mut fallback = None;
    for (name, value) in params {
        if name == "id" {
            return Some(value.to_owned());
        }
        if fallback.is_none() && (name.ends_with("id") || name == "name") {
            fallback = Some(value.to_owned());
        }
    }
    fallback
}

/// Middleware: hands each audited call to the service's audit log.
pub async fn record(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let Some(route) = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
    else {
        return next.run(req).await;
    };
    let method = req.method().clone();
    let client_ip = req.extensions().get::<ClientIp>().map(|c| c.0).or_else(|| {
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    });
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let resource = {
        let (mut parts, body) = req.into_parts();
        let params =
            <RawPathParams as axum::extract::FromRequestParts<AppState>>::from_request_parts(
                &mut parts, &state,
            )
            .await
            .ok();
        req = Request::from_parts(parts, body);
        params.as_ref().and_then(resource_of)
    };
    let slot = AuditSlot::default();
    req.extensions_mut().insert(slot.clone());
    let started = Instant::now();
    let response = next.run(req).await;
    let status = response.status().as_u16();
    if !audited(&method, status) {
        return response;
    }
    let who = slot.lock().take();
    let credential = who.as_ref().map(|w| w.2);
    let made = response.extensions().get::<Made>().map(|m| m.0.clone());
    let Some(front) = front_end(&route, credential, &agent) else {
        return response;
    };
    let (account_id, token_id) = match who {
        Some((account, token, _)) => (Some(account), Some(token.to_string())),
        None => (None, None),
    };
    state
        .svc
        .audit(AuditRecord {
            seq: 0,
            id: stockade_core::EventId::generate().to_string(),
            at: chrono::Utc::now(),
            account_id,
            token_id,
            client_ip: client_ip.map(|ip| ip.to_string()),
            action: format!("{method} {route}"),
            front_end: front.to_owned(),
            resource_id: resource.or(made),
            status,
            duration_ms: started.elapsed().as_millis().min(u128::from(u64::MAX)) as u64,
        })
        .await;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_audited_and_through_which_front_end() {
        assert!(audited(&Method::POST, 201));
        assert!(audited(&Method::DELETE, 500));
        assert!(audited(&Method::GET, 404) && audited(&Method::GET, 403));
        assert!(!audited(&Method::GET, 200));
        assert_eq!(front_end("/e2b/sandboxes", None, ""), Some("e2b"));
        assert_eq!(
            front_end("/api/v1/sandbox", Some(Credential::SessionCookie), ""),
            Some("dashboard")
        );
        assert_eq!(
            front_end(
                "/api/v1/sandbox",
                Some(Credential::Bearer),
                "stockade-cli/0.1"
            ),
            Some("cli")
        );
        assert_eq!(front_end("/api/v1/sandbox", None, ""), Some("api"));
        assert_eq!(front_end("/proxy/{id}/{port}", None, ""), None);
        assert_eq!(
            front_end("/gateway/{ns}/{job}/upload", None, ""),
            Some("prime")
        );
    }
}
