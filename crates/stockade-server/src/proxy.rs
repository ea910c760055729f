//! The authenticated reverse proxy to sandbox ports: path form
//! `/proxy/{id}/{port}/…` and host form `{port}-{id}.{proxy domain}`, HTTP
//! and upgraded connections (WebSocket), straight to the container's address
//! on its Docker network — nothing is published on the host, so exposing or
//! unexposing a port takes effect with the next request.
//!
//! Every request needs a sandbox token ([`token`]) for this very sandbox:
//! the `X-Stockade-Token` header, the `stockade_token` query parameter
//! (answered with a cookie, for browsers) or that cookie. An E2B traffic
//! token (`e2b-traffic-access-token`) opens every port of its
//! sandbox, exposed or not; the host forms of ports 49983 and 49999 reach
//! the sandbox's agent (its own calls and its code interpreter's) through
//! the envd front-end, never through here. The token never
//! reaches the sandbox: header, parameter and cookie are removed. Neither
//! do Stockade's own credentials: an `Authorization` or `X-API-Key` that
//! carries any secret the server knows (whatever its form: a bearer, a bare
//! value, a `Basic` password) and the dashboard's session cookie are
//! stripped, and the session is never accepted here. Path-form answers come with
//! `Content-Security-Policy: sandbox` (without `allow-same-origin`), so a
//! sandbox's page runs in an opaque origin and cannot read or use
//! Stockade's; the host form gives each port an origin of its own.
//! An upgraded connection counts against the sandbox owner's open streams
//! ([`crate::streams`]) for as long as it lives.

pub use stockade_service::access::tokens as token;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{StatusCode, Uri, Version};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use chrono::Utc;
use hyper_util::rt::TokioIo;
use stockade_api::{ErrorBody, ExposedPort};
use stockade_core::{SandboxId, SandboxStatus};
use tracing::{debug, instrument};

use crate::error::{ApiError, ApiResult};
use crate::{AppState, ServerConfig};
use stockade_service::ServiceError;

/// The header that carries a sandbox token.
pub const TOKEN_HEADER: &str = "x-stockade-token";
/// The query parameter that carries a sandbox token (once; then the cookie).
pub const TOKEN_PARAM: &str = "stockade_token";
/// The cookie the proxy sets from [`TOKEN_PARAM`].
pub const TOKEN_COOKIE: &str = "stockade_token";
/// How long connecting to a sandbox port may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The path-form routes (the host form is [`by_host`], reached through
/// the host routing ahead of every route).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/proxy/{id}/{port}", any(by_path))
        .route("/proxy/{id}/{port}/", any(by_path))
        .route("/proxy/{id}/{port}/{*path}", any(by_path))
}

/// What a proxied request goes to.
struct Target {
    sandbox_id: SandboxId,
    port: u16,
    /// The path the sandbox's server sees, still percent-encoded as sent.
    upstream_path: String,
    /// Path form: `/proxy/{id}/{port}`; `None` for the host form.
    prefix: Option<String>,
}

impl Target {
    fn cookie_path(&self) -> String {
        match &self.prefix {
            Some(_) => format!("/proxy/{}/", self.sandbox_id),
            None => "/".to_owned(),
        }
    }
}

/// Parses the sandbox id and port of a proxy address (400 naming the part).
fn parse_target(id: &str, port: &str) -> ApiResult<(SandboxId, u16)> {
    let sandbox_id = SandboxId::parse_field(id, "sandbox_id")?;
    let port = parse_port_segment(port)?;
    Ok((sandbox_id, port))
}

/// A port written in a path or host name: 1–65535, digits only.
pub fn parse_port_segment(port: &str) -> ApiResult<u16> {
    port.parse::<u16>()
        .ok()
        .filter(|p| *p > 0 && port.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            let shown: String = port.chars().take(20).collect();
            ApiError::field(
                "port",
                format!("'{shown}' is not a port number from 1 to 65535"),
            )
        })
}

/// Proxy to a sandbox port, path form. Any method; the rest of the path
/// and the query go to the sandbox's server (without `stockade_token`).
#[utoipa::path(get, path = "/proxy/{id}/{port}/{path}", tag = "ports",
    params(
        ("id" = String, Path, description = "sandbox id"),
        ("port" = u16, Path, description = "an exposed port"),
        ("path" = String, Path, description = "forwarded to the sandbox's server"),
        ("stockade_token" = Option<String>, Query, description = "sandbox token; answered with a cookie scoped to /proxy/{id}/"),
        ("X-Stockade-Token" = Option<String>, Header, description = "sandbox token"),
    ),
    responses(
        (status = 200, description = "Whatever the sandbox's server answers (any status; WebSocket upgrades too)"),
        (status = 401, description = "No token, or an invalid or expired one", body = ErrorBody),
        (status = 403, description = "A token of another sandbox", body = ErrorBody),
        (status = 404, description = "Unknown sandbox, or the port is not exposed", body = ErrorBody),
        (status = 409, description = "The sandbox has no network (networkAccess: false)", body = ErrorBody),
        (status = 429, description = "A WebSocket (an upgrade) while the sandbox's account holds as many terminals, event streams and proxied WebSockets as it may", body = ErrorBody),
        (status = 502, description = "Nothing answers on that port in the sandbox", body = ErrorBody),
        (status = 503, description = "The sandbox is not running", body = ErrorBody),
    ))]
pub async fn by_path(State(state): State<AppState>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let Some((id, port, rest)) = split_proxy_path(&path) else {
        return ApiError::from(ServiceError::NotFound(format!("No route for {path}")))
            .into_response();
    };
    let (sandbox_id, port) = match parse_target(id, port) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let prefix = format!("/proxy/{sandbox_id}/{port}");
    let target = Target {
        sandbox_id,
        port,
        upstream_path: if rest.is_empty() {
            "/".into()
        } else {
            rest.into()
        },
        prefix: Some(prefix),
    };
    forward(&state, req, target)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `/proxy/{id}/{port}{rest}` → `(id, port, rest)`; `rest` is empty or starts with `/`.
fn split_proxy_path(path: &str) -> Option<(&str, &str, &str)> {
    let after = path.strip_prefix("/proxy/")?;
    let (id, after) = after.split_once('/')?;
    Some(match after.find('/') {
        Some(i) => (id, &after[..i], &after[i..]),
        None => (id, after, ""),
    })
}

/// The sandbox port a request's host names in the host form
/// `{port}-{id}.{proxy domain}`: `None` for any other host (or without a
/// proxy domain), an error for a host under the proxy domain that names no
/// sandbox port.
pub(crate) fn host_target(
    config: &ServerConfig,
    req: &Request,
) -> Option<ApiResult<(SandboxId, u16)>> {
    let domain = config.proxy_domain.as_deref()?;
    let host = request_host(req.headers(), req.uri())?;
    let label = sandbox_label(&host, domain)?;
    let Some((port, id)) = label.split_once('-') else {
        return Some(Err(ServiceError::NotFound(format!(
            "No sandbox port at '{label}.{domain}': sandbox ports are at {{port}}-{{sandbox id}}.{domain}"
        )).into()));
    };
    Some(parse_target(id, port))
}

/// Proxy to a sandbox port, host form (a request [`host_target`] found a
/// port in): whatever its path, the request goes to that port.
pub async fn by_host(state: &AppState, req: Request, sandbox_id: SandboxId, port: u16) -> Response {
    let target = Target {
        sandbox_id,
        port,
        upstream_path: req.uri().path().to_owned(),
        prefix: None,
    };
    forward(state, req, target)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The host a request was sent to: its `Host` header, or the authority of
/// its URI (HTTP/2).
pub(crate) fn request_host(headers: &HeaderMap, uri: &Uri) -> Option<String> {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()))
}

/// `host` without a `:port` (IPv6 literals keep their brackets).
fn hostname(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

/// The port of `host` (`example.com:8443` → `8443`), if it names one.
fn host_port(host: &str) -> Option<&str> {
    let rest = if host.starts_with('[') {
        host.split_once(']')?.1
    } else {
        host
    };
    rest.rsplit_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// For a host under the proxy domain, the label left of it
/// (`8080-abc.sandboxes.test` → `8080-abc`); `None` for any other host.
pub(crate) fn sandbox_label(host: &str, domain: &str) -> Option<String> {
    let host = hostname(host).trim_end_matches('.').to_ascii_lowercase();
    let domain = hostname(domain);
    let label = host.strip_suffix(domain)?.strip_suffix('.')?;
    if label.is_empty() || label.contains('.') {
        return None;
    }
    Some(label.to_owned())
}

/// A configured proxy domain that is not a host name; holds the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a domain for sandbox ports: expected a host name such as \
     sandboxes.example.com (optionally with :port), no scheme or path"
)]
pub struct InvalidProxyDomain(pub String);

/// Checks a configured proxy domain: a host name (lower-cased, no scheme
/// or path), optionally with `:port`.
pub fn parse_proxy_domain(s: &str) -> Result<String, InvalidProxyDomain> {
    let d = s.trim().trim_end_matches('.').to_ascii_lowercase();
    let (name, port) = match d.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (d.as_str(), None),
    };
    let labels_ok = !name.is_empty()
        && name.len() <= 200
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    let port_ok = port.is_none_or(|p| parse_port_segment(p).is_ok());
    if !labels_ok || !port_ok {
        return Err(InvalidProxyDomain(s.to_owned()));
    }
    Ok(d)
}

/// How clients reach this server: scheme and host, for the URLs it hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicBase {
    pub scheme: &'static str,
    pub host: String,
}

/// The scheme a client used: `https` when a front proxy says so.
fn request_scheme(headers: &HeaderMap) -> &'static str {
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(|v| v.trim().to_ascii_lowercase());
    match forwarded.as_deref() {
        Some("https") => "https",
        _ => "http",
    }
}

impl PublicBase {
    /// From the request's `Host` (and `X-Forwarded-Proto`); the listen
    /// address when the host is missing or odd.
    pub fn from_request(headers: &HeaderMap, config: &ServerConfig) -> Self {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| {
                !h.is_empty()
                    && h.len() <= 255
                    && h.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
            })
            .map(str::to_owned)
            .unwrap_or_else(|| config.listen.to_string());
        Self {
            scheme: request_scheme(headers),
            host,
        }
    }

    /// Where the proxy serves `port` of sandbox `id`.
    pub fn exposed_port(&self, config: &ServerConfig, id: &SandboxId, port: u16) -> ExposedPort {
        let host_url = config.proxy_domain.as_deref().map(|domain| {
            // A domain without a port is served on the port this request came to.
            let suffix = match (host_port(domain), host_port(&self.host)) {
                (None, Some(p)) => format!(":{p}"),
                _ => String::new(),
            };
            format!("{}://{port}-{id}.{domain}{suffix}/", self.scheme)
        });
        ExposedPort {
            sandbox_id: id.to_string(),
            port,
            url: format!("{}://{}/proxy/{id}/{port}/", self.scheme, self.host),
            host_url,
        }
    }
}

/// Where a request's token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenSource {
    Header,
    Query,
    Cookie,
}

/// The header E2B's SDK users send a sandbox's `trafficAccessToken` in.
pub const E2B_TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// The request's sandbox token: header (Stockade's, else E2B's traffic
/// token header), else query parameter, else cookie.
fn find_token(headers: &HeaderMap, query: Option<&str>) -> Option<(String, TokenSource)> {
    if let Some(v) = headers
        .get(TOKEN_HEADER)
        .or_else(|| headers.get(E2B_TRAFFIC_TOKEN_HEADER))
    {
        return Some((
            v.to_str().unwrap_or_default().trim().to_owned(),
            TokenSource::Header,
        ));
    }
    if let Some(t) = query_token(query) {
        return Some((t, TokenSource::Query));
    }
    cookie_token(headers).map(|t| (t, TokenSource::Cookie))
}

/// The sandbox token a proxied request presents, wherever it came from.
pub(crate) fn presented_token(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    find_token(headers, query).map(|(token, _)| token)
}

fn query_token(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == TOKEN_PARAM)
        .map(|(_, v)| v.into_owned())
}

/// The query without `stockade_token`; the other parameters exactly as sent.
fn strip_query_token(query: &str) -> String {
    query
        .split('&')
        .filter(|seg| {
            let key = seg.split('=').next().unwrap_or_default();
            !form_urlencoded::parse(key.as_bytes()).any(|(k, _)| k == TOKEN_PARAM)
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn cookie_pairs(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| !c.is_empty())
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    cookie_pairs(headers)
        .filter_map(|c| c.split_once('='))
        .find(|(name, _)| name.trim() == TOKEN_COOKIE)
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
}

/// Removes the token cookie and keeps every other cookie.
fn strip_cookie_token(headers: &mut HeaderMap) {
    remove_cookie(headers, TOKEN_COOKIE);
}

/// Removes the cookie `name` and keeps every other cookie.
fn remove_cookie(headers: &mut HeaderMap, name: &str) {
    if !headers.contains_key(header::COOKIE) {
        return;
    }
    let kept: Vec<String> = cookie_pairs(headers)
        .filter(|c| c.split('=').next().map(str::trim) != Some(name))
        .map(str::to_owned)
        .collect();
    headers.remove(header::COOKIE);
    if !kept.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&kept.join("; ")) {
            headers.insert(header::COOKIE, v);
        }
    }
}

/// The policy of every path-form answer: a sandbox of its own, whose
/// scripts run in an opaque origin (no `allow-same-origin`).
pub const PATH_FORM_CSP: &str = "sandbox allow-scripts allow-forms allow-popups \
     allow-popups-to-escape-sandbox allow-modals allow-downloads";

/// The prefixes of every kind of secret Stockade hands out: API tokens,
/// dashboard sessions and the sandbox tokens.
const OWN_PREFIXES: [&str; 6] = ["stk_", "stks_", "stkp_", "stkt_", "stke_", "stkg_"];

/// The secrets a credential header may carry: a bearer's token, both halves
/// of a `Basic` pair, or the whole value.
fn carried_secrets(value: &str) -> Vec<String> {
    let v = value.trim();
    let scheme = |name: &str| {
        v.get(..name.len())
            .filter(|p| p.eq_ignore_ascii_case(name))
            .map(|_| v[name.len()..].trim())
    };
    if let Some(token) = scheme("bearer ") {
        return vec![token.to_owned()];
    }
    if let Some(pair) = scheme("basic ") {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(pair)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_default();
        return decoded.split(':').map(str::to_owned).collect();
    }
    vec![v.to_owned()]
}

/// Whether `secret` is one of Stockade's: by its prefix, or because the
/// database knows it (an operator's token may have any form). When the
/// database cannot say, it counts as one.
async fn is_stockade_secret(svc: &stockade_service::Service, secret: &str) -> bool {
    if secret.is_empty() || secret.len() > 1024 {
        return false;
    }
    if OWN_PREFIXES.iter().any(|p| secret.starts_with(p)) {
        return true;
    }
    svc.knows_secret(secret).await
}

/// Removes Stockade's own credentials from a request to a sandbox: any
/// `Authorization` or `X-API-Key` that carries a secret the server knows,
/// whatever its form (a sandbox's own schemes and keys pass), and the
/// dashboard's session cookie.
async fn strip_stockade_credentials(svc: &stockade_service::Service, headers: &mut HeaderMap) {
    for name in [header::AUTHORIZATION, HeaderName::from_static("x-api-key")] {
        let mut ours = false;
        for value in headers.get_all(&name) {
            for secret in carried_secrets(value.to_str().unwrap_or_default()) {
                ours = ours || is_stockade_secret(svc, &secret).await;
            }
        }
        if ours {
            headers.remove(&name);
        }
    }
    for name in crate::extract::SESSION_COOKIES {
        remove_cookie(headers, name);
    }
}

/// Hop-by-hop headers (RFC 9110 §7.6.1): for one connection, never forwarded.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The protocol a request asks to switch to (`Connection: upgrade` + `Upgrade`).
fn requested_upgrade(headers: &HeaderMap) -> Option<HeaderValue> {
    let asks = headers
        .get_all(header::CONNECTION)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| headers.get(header::UPGRADE).cloned())
        .flatten()
}

/// Keeps a sandbox's cookies to itself: no `Domain` (so host-form cookies
/// stay on their own host), a `Path` outside the path-form prefix is moved
/// under it, and the sandbox cannot set the proxy's token cookie.
fn rewrite_set_cookie(value: &str, prefix: Option<&str>) -> Option<String> {
    let mut parts = value.split(';');
    let pair = parts.next()?.trim();
    let name = pair.split('=').next().map(str::trim);
    if name.is_some_and(|n| n == TOKEN_COOKIE || crate::extract::SESSION_COOKIES.contains(&n)) {
        return None;
    }
    let mut out = vec![pair.to_owned()];
    for attr in parts {
        let attr = attr.trim();
        let (name, val) = attr.split_once('=').unwrap_or((attr, ""));
        if name.trim().eq_ignore_ascii_case("domain") {
            continue;
        }
        if name.trim().eq_ignore_ascii_case("path") {
            if let Some(prefix) = prefix {
                let val = val.trim();
                if val != prefix && !val.starts_with(&format!("{prefix}/")) {
                    let under = if val.starts_with('/') { val } else { "/" };
                    out.push(format!("Path={prefix}{under}"));
                    continue;
                }
            }
        }
        out.push(attr.to_owned());
    }
    Some(out.join("; "))
}

/// A redirect to `/x` from a sandbox means `/proxy/{id}/{port}/x` here.
fn rewrite_location(headers: &mut HeaderMap, prefix: &str) {
    let Some(loc) = headers.get(header::LOCATION).and_then(|v| v.to_str().ok()) else {
        return;
    };
    if loc.starts_with('/')
        && !loc.starts_with("//")
        && loc != prefix
        && !loc.starts_with(&format!("{prefix}/"))
        && !loc.starts_with(&format!("{prefix}?"))
    {
        if let Ok(v) = HeaderValue::from_str(&format!("{prefix}{loc}")) {
            headers.insert(header::LOCATION, v);
        }
    }
}

fn token_cookie(token: &str, path: &str, max_age: i64, secure: bool) -> Option<HeaderValue> {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{TOKEN_COOKIE}={token}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}"
    ))
    .ok()
}

/// What [`authorise`] found: where to send the request, the sandbox's
/// owner, and the token to set as a cookie.
struct Authorised {
    upstream: stockade_runtime::Upstream,
    account: stockade_core::AccountId,
    cookie: Option<(String, i64)>,
}

/// The answer to a sandbox token that was refused.
pub fn refused(e: token::Refused, id: &SandboxId) -> ApiError {
    match e {
        token::Refused::Invalid => ApiError::Unauthorized("Invalid sandbox token".into()),
        token::Refused::Expired(at) => ApiError::Unauthorized(format!(
            "The sandbox token expired at {}: get a new one with POST /api/v1/sandbox/{id}/auth-token",
            at.to_rfc3339()
        )),
        token::Refused::OtherSandbox(other) => ServiceError::Forbidden(format!(
            "Forbidden: this token is for sandbox {other}, not {id}"
        ))
        .into(),
        token::Refused::Disabled(name) => ServiceError::Forbidden(format!(
            "The account '{name}' is disabled: an administrator can enable it again"
        ))
        .into(),
        token::Refused::NoAccess => ServiceError::Forbidden(
            "Forbidden: this token's holder no longer has access to this sandbox".into(),
        )
        .into(),
        token::Refused::Store(e) => e.into(),
    }
}

/// Whether a request that the browser authenticated with the proxy's
/// cookie may go on. The cookie is `SameSite=Lax`, so a browser sends it
/// with requests from any page of the same site — and on the host form every
/// sandbox port is a subdomain of one site. So a page of another sandbox
/// could make the visitor's browser call this one with the visitor's
/// cookie. Refused: sub-requests (anything but a navigation) that the
/// browser marks as coming from another origin (`Sec-Fetch-Site` other than
/// `same-origin` or `none`), and upgrades (WebSockets) whose `Origin` is not
/// the port's own (on the path form a sandbox's page has the opaque origin
/// `null`, since it runs in a CSP sandbox).
fn cookie_request_allowed(headers: &HeaderMap, target: &Target) -> ApiResult<()> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase())
    };
    let site = header("sec-fetch-site");
    let navigation = header("sec-fetch-mode").as_deref() == Some("navigate");
    if matches!(site.as_deref(), Some("cross-site" | "same-site")) && !navigation {
        return Err(ServiceError::Forbidden(format!(
            "A request from another site may not use the sandbox cookie of {}: send a sandbox \
             token ({TOKEN_HEADER}) instead",
            target.sandbox_id
        ))
        .into());
    }
    if requested_upgrade(headers).is_some() {
        if let Some(origin) = header("origin") {
            let own = match &target.prefix {
                // The path form's pages run in an opaque origin.
                Some(_) => origin == "null",
                None => header("host").is_some_and(|host| {
                    origin
                        .split_once("://")
                        .is_some_and(|(_, authority)| authority == host)
                }),
            };
            if !own {
                return Err(ServiceError::Forbidden(format!(
                    "A WebSocket from origin '{origin}' may not use the sandbox cookie of {}: \
                     send a sandbox token ({TOKEN_HEADER}) instead",
                    target.sandbox_id
                ))
                .into());
            }
        }
    }
    Ok(())
}

/// Authorises a proxied request and returns the address to send it to.
async fn authorise(
    state: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    target: &Target,
) -> ApiResult<Authorised> {
    let id = &target.sandbox_id;
    let port = target.port;
    let Some((raw, source)) = find_token(headers, query) else {
        return Err(ApiError::Unauthorized(format!(
            "Sandbox ports need a sandbox token: get one with POST /api/v1/sandbox/{id}/auth-token \
             and send it as the {TOKEN_HEADER} header or the {TOKEN_PARAM} query parameter"
        )));
    };
    if source == TokenSource::Cookie {
        cookie_request_allowed(headers, target)?;
    }
    let now = Utc::now();
    // An E2B traffic token (`stkt_`) opens every port of its sandbox, as
    // E2B's do; a port token only the exposed ones.
    let traffic = raw.starts_with(token::Purpose::Traffic.prefix());
    let purpose = if traffic {
        token::Purpose::Traffic
    } else {
        token::Purpose::Ports
    };
    let (sb, claims) = state
        .svc
        .sandbox_of_token(&state.proxy_keys, purpose, &raw, Some(id), now)
        .await
        .map_err(|e| refused(e, id))?;
    if sb.is_terminated() {
        return Err(ApiError::sandbox_not_found());
    }
    if !traffic && !sb.spec.ports.contains(&port) {
        return Err(ServiceError::NotFound(format!(
            "Port {port} is not exposed on sandbox {id}: expose it with POST /api/v1/sandbox/{id}/ports"
        )).into());
    }
    if !sb.spec.network.allows_egress() {
        return Err(ServiceError::Conflict(format!(
            "Sandbox {id} was created with networkAccess: false, so it has no network the proxy \
             could reach its ports on; create it with network access to use ports"
        ))
        .into());
    }
    // A paused sandbox is resumed first when its lifecycle says so.
    let sb = stockade_service::pause::awake(&state.svc, sb).await?;
    if sb.status != SandboxStatus::Running {
        return Err(ServiceError::SandboxUnavailable(format!(
            "Sandbox {id} is {}: start it (POST /api/v1/sandbox/{id}/start) to reach its ports",
            sb.status
        ))
        .into());
    }
    let upstream = state
        .svc
        .runtime_for(&sb)
        .await?
        .port_upstream(id, port)
        .await?
        .ok_or_else(|| {
            ServiceError::SandboxUnavailable(format!(
                "Sandbox {id} is not running on its Docker host: start it (POST /api/v1/sandbox/{id}/start)"
            ))
        })?;
    let cookie = (source == TokenSource::Query)
        .then(|| (raw, (claims.expires_at - now).num_seconds().max(1)));
    Ok(Authorised {
        upstream,
        account: sb.account_id.clone(),
        cookie,
    })
}

/// Sends one request to a sandbox port and streams the answer back; for an
/// accepted upgrade, copies bytes both ways until either side closes.
/// Rejections are logged by `ApiError` (5xx as errors); the span records them
/// only at debug level, since the proxy faces browsers and anonymous traffic.
#[instrument(skip_all, fields(sandbox.id = %target.sandbox_id, port = target.port), err(level = "debug", Display))]
async fn forward(state: &AppState, mut req: Request, target: Target) -> ApiResult<Response> {
    let Authorised {
        upstream: addr,
        account,
        cookie: set_cookie,
    } = authorise(state, req.headers(), req.uri().query(), &target).await?;
    let id = &target.sandbox_id;
    let port = target.port;

    let upgrade = requested_upgrade(req.headers());
    // A tunnel (a WebSocket) counts against the sandbox owner's open
    // streams for as long as it lives.
    let permit = match &upgrade {
        Some(_) => Some(state.streams.acquire(&account)?),
        None => None,
    };
    let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let client_addr = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let (mut parts, body) = req.into_parts();
    let original_host = request_host(&parts.headers, &parts.uri);
    let scheme = request_scheme(&parts.headers);

    // The request line: the sandbox sees its own paths, minus the token.
    let query = parts.uri.query().map(strip_query_token);
    let path_and_query = match query.as_deref() {
        Some(q) if !q.is_empty() => format!("{}?{q}", target.upstream_path),
        _ => target.upstream_path.clone(),
    };
    parts.uri = Uri::try_from(path_and_query)
        .map_err(|e| ApiError::field("path", format!("cannot forward this path: {e}")))?;
    parts.version = Version::HTTP_11;

    // Headers: no hop-by-hop, no token; where the request came from.
    let h = &mut parts.headers;
    remove_hop_by_hop(h);
    h.remove(TOKEN_HEADER);
    h.remove(E2B_TRAFFIC_TOKEN_HEADER);
    strip_cookie_token(h);
    strip_stockade_credentials(&state.svc, h).await;
    if let Some(proto) = &upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, proto.clone());
    }
    let host = original_host.unwrap_or_else(|| match &addr {
        stockade_runtime::Upstream::Direct(a) => a.to_string(),
        stockade_runtime::Upstream::ViaAgent(_) => format!("localhost:{port}"),
    });
    if let Ok(v) = HeaderValue::from_str(&host) {
        h.insert(header::HOST, v.clone());
        h.insert("x-forwarded-host", v);
    }
    h.insert("x-forwarded-proto", HeaderValue::from_static(scheme));
    if let Some(prefix) = &target.prefix {
        if let Ok(v) = HeaderValue::from_str(prefix) {
            h.insert("x-forwarded-prefix", v);
        }
    }
    if let Some(ip) = client_addr {
        let chain = match h.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
            Some(prev) => format!("{prev}, {ip}"),
            None => ip.to_string(),
        };
        if let Ok(v) = HeaderValue::from_str(&chain) {
            h.insert("x-forwarded-for", v);
        }
    }

    let connect = async {
        match &addr {
            stockade_runtime::Upstream::Direct(a) => tokio::net::TcpStream::connect(a).await,
            // A host whose sandbox network this server cannot reach: through
            // the agent's published port.
            stockade_runtime::Upstream::ViaAgent(at) => {
                let token = state.svc.agents().token(id);
                stockade_agent::client::open_forward(at, &token, port)
                    .await
                    .map_err(|e| {
                        let kind = match e {
                            stockade_agent::client::ForwardError::NothingListening(_) => {
                                std::io::ErrorKind::ConnectionRefused
                            }
                            stockade_agent::client::ForwardError::Failed(_) => {
                                std::io::ErrorKind::Other
                            }
                        };
                        std::io::Error::new(kind, e.to_string())
                    })
            }
        }
    };
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Err(_) => {
            return Err(ApiError::UpstreamUnavailable(format!(
                "Port {port} of sandbox {id} did not accept a connection within {} s",
                CONNECT_TIMEOUT.as_secs()
            )))
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(ApiError::UpstreamUnavailable(format!(
                "Nothing is listening on port {port} in sandbox {id} (connection refused): start a \
                 server there that listens on 0.0.0.0:{port} (not only 127.0.0.1)"
            )))
        }
        Ok(Err(e)) => {
            return Err(ApiError::UpstreamUnavailable(format!(
                "Could not connect to port {port} of sandbox {id}: {e}"
            )))
        }
        Ok(Ok(s)) => s,
    };
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ApiError::UpstreamUnavailable(format!("Port {port} of sandbox {id}: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(error = %e, "proxy connection to a sandbox ended with an error");
        }
    });
    let mut resp = sender
        .send_request(axum::http::Request::from_parts(parts, body))
        .await
        .map_err(|e| {
            ApiError::UpstreamUnavailable(format!(
                "Port {port} of sandbox {id} did not answer with HTTP: {e}"
            ))
        })?;

    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_upgrade) = client_upgrade else {
            return Err(ApiError::UpstreamUnavailable(format!(
                "Port {port} of sandbox {id} switched protocols without being asked to"
            )));
        };
        let upstream_upgrade = hyper::upgrade::on(&mut resp);
        let span = tracing::Span::current();
        tokio::spawn(async move {
            let _enter = span.enter();
            let _permit = permit;
            match tokio::try_join!(client_upgrade, upstream_upgrade) {
                Ok((client, upstream)) => {
                    let mut client = TokioIo::new(client);
                    let mut upstream = TokioIo::new(upstream);
                    match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                        Ok((up, down)) => debug!(up, down, "proxied upgraded connection closed"),
                        Err(e) => debug!(error = %e, "proxied upgraded connection failed"),
                    }
                }
                Err(e) => debug!(error = %e, "upgrade through the proxy failed"),
            }
        });
        return Ok(resp.map(Body::new));
    }

    let headers = resp.headers_mut();
    remove_hop_by_hop(headers);
    let cookies: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| rewrite_set_cookie(v, target.prefix.as_deref()))
        .filter_map(|v| HeaderValue::from_str(&v).ok())
        .collect();
    headers.remove(header::SET_COOKIE);
    for c in cookies {
        headers.append(header::SET_COOKIE, c);
    }
    if let Some(prefix) = &target.prefix {
        rewrite_location(headers, prefix);
        // Stockade's origin: the page may run script, but only in an
        // opaque origin of its own.
        headers.append(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(PATH_FORM_CSP),
        );
    }
    if let Some((token, max_age)) = set_cookie {
        if let Some(c) = token_cookie(&token, &target.cookie_path(), max_age, scheme == "https") {
            headers.append(header::SET_COOKIE, c);
        }
    }
    Ok(resp.map(Body::new))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_paths_split() {
        assert_eq!(
            split_proxy_path("/proxy/abc/8080/a/b%2F?x"),
            Some(("abc", "8080", "/a/b%2F?x"))
        );
        assert_eq!(
            split_proxy_path("/proxy/abc/8080/"),
            Some(("abc", "8080", "/"))
        );
        assert_eq!(
            split_proxy_path("/proxy/abc/8080"),
            Some(("abc", "8080", ""))
        );
        assert_eq!(split_proxy_path("/other"), None);
    }

    #[test]
    fn ports_in_paths() {
        assert_eq!(parse_port_segment("8080").unwrap(), 8080);
        for bad in ["0", "65536", "+80", "-1", "80a", "", "99999999999999999999"] {
            assert!(parse_port_segment(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_under_the_domain() {
        let d = "sandboxes.test";
        assert_eq!(
            sandbox_label("8080-abcdefghijkl.sandboxes.test", d).as_deref(),
            Some("8080-abcdefghijkl")
        );
        assert_eq!(
            sandbox_label("8080-ABCDEFGHIJKL.Sandboxes.Test.:7433", d).as_deref(),
            Some("8080-abcdefghijkl")
        );
        assert_eq!(
            sandbox_label("8080-abc.sandboxes.test:7433", "sandboxes.test:7433").as_deref(),
            Some("8080-abc")
        );
        assert_eq!(sandbox_label("sandboxes.test", d), None);
        assert_eq!(sandbox_label("a.b.sandboxes.test", d), None);
        assert_eq!(sandbox_label("evilsandboxes.test", d), None);
        assert_eq!(sandbox_label("127.0.0.1:7433", d), None);
        assert_eq!(sandbox_label("[::1]:7433", d), None);
    }

    #[test]
    fn host_parts() {
        assert_eq!(hostname("a.b:80"), "a.b");
        assert_eq!(hostname("[::1]:80"), "[::1]");
        assert_eq!(hostname("a.b"), "a.b");
        assert_eq!(host_port("a.b:80"), Some("80"));
        assert_eq!(host_port("[::1]:80"), Some("80"));
        assert_eq!(host_port("[::1]"), None);
        assert_eq!(host_port("a.b"), None);
    }

    #[test]
    fn proxy_domains() {
        assert_eq!(
            parse_proxy_domain("Sandboxes.Example.com.").unwrap(),
            "sandboxes.example.com"
        );
        assert_eq!(
            parse_proxy_domain("localhost:7433").unwrap(),
            "localhost:7433"
        );
        for bad in [
            "",
            "http://x.com",
            "x.com/path",
            "x..com",
            "-x.com",
            "x.com:0",
            "x_y.com",
            "*.x.com",
        ] {
            assert!(parse_proxy_domain(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_proxy_domain("x.com/path").unwrap_err().to_string(),
            "'x.com/path' is not a domain for sandbox ports: expected a host name such as \
             sandboxes.example.com (optionally with :port), no scheme or path"
        );
    }

    #[test]
    fn urls_handed_out() {
        let mut config = ServerConfig::default();
        let id = SandboxId::parse("abcdefghijkl").unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7433"));
        let base = PublicBase::from_request(&headers, &config);
        let p = base.exposed_port(&config, &id, 8080);
        assert_eq!(p.url, "http://127.0.0.1:7433/proxy/abcdefghijkl/8080/");
        assert_eq!(p.host_url, None);

        config.proxy_domain = Some("sandboxes.localhost".into());
        let p = base.exposed_port(&config, &id, 8080);
        assert_eq!(
            p.host_url.as_deref(),
            Some("http://8080-abcdefghijkl.sandboxes.localhost:7433/")
        );

        // Behind a TLS front proxy on the default port.
        headers.insert(
            header::HOST,
            HeaderValue::from_static("stockade.example.com"),
        );
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        config.proxy_domain = Some("sb.example.com".into());
        let base = PublicBase::from_request(&headers, &config);
        let p = base.exposed_port(&config, &id, 3000);
        assert_eq!(
            p.url,
            "https://stockade.example.com/proxy/abcdefghijkl/3000/"
        );
        assert_eq!(
            p.host_url.as_deref(),
            Some("https://3000-abcdefghijkl.sb.example.com/")
        );

        // A strange Host header is not echoed into URLs.
        headers.insert(header::HOST, HeaderValue::from_static("evil.com/<script>"));
        let base = PublicBase::from_request(&headers, &config);
        assert_eq!(base.host, config.listen.to_string());
    }

    #[test]
    fn tokens_are_found_and_stripped() {
        let mut h = HeaderMap::new();
        assert_eq!(find_token(&h, Some("a=1")), None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; stockade_token=ck; b=2"),
        );
        assert_eq!(
            find_token(&h, None),
            Some(("ck".into(), TokenSource::Cookie))
        );
        assert_eq!(
            find_token(&h, Some("stockade_token=q&x=1")),
            Some(("q".into(), TokenSource::Query))
        );
        h.insert(TOKEN_HEADER, HeaderValue::from_static(" hd "));
        assert_eq!(
            find_token(&h, Some("stockade_token=q")),
            Some(("hd".into(), TokenSource::Header))
        );
        strip_cookie_token(&mut h);
        assert_eq!(h.get(header::COOKIE).unwrap(), "a=1; b=2");
        let mut only = HeaderMap::new();
        only.insert(header::COOKIE, HeaderValue::from_static("stockade_token=x"));
        strip_cookie_token(&mut only);
        assert!(only.get(header::COOKIE).is_none());

        assert_eq!(strip_query_token("a=1&stockade_token=x&b=%20"), "a=1&b=%20");
        assert_eq!(strip_query_token("stockade%5Ftoken=x&b"), "b");
    }

    #[test]
    fn the_cookie_serves_only_the_ports_own_pages_and_navigations() {
        let target = |prefix: Option<&str>| Target {
            sandbox_id: SandboxId::parse("abcdefghijkl").unwrap(),
            port: 8080,
            upstream_path: "/".into(),
            prefix: prefix.map(str::to_owned),
        };
        let host_form = target(None);
        let path_form = target(Some("/proxy/abcdefghijkl/8080"));
        let req = |pairs: &[(&str, &str)]| {
            let mut h = HeaderMap::new();
            h.insert(
                "host",
                HeaderValue::from_static("8080-abcdefghijkl.sb.test"),
            );
            for (k, v) in pairs {
                h.insert(
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            h
        };
        let ws = [("connection", "upgrade"), ("upgrade", "websocket")];
        for ok in [
            req(&[]),
            req(&[
                ("sec-fetch-site", "same-origin"),
                ("sec-fetch-mode", "cors"),
            ]),
            req(&[("sec-fetch-site", "none"), ("sec-fetch-mode", "navigate")]),
            req(&[
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "navigate"),
            ]),
            req(&[
                ws[0],
                ws[1],
                ("origin", "https://8080-abcdefghijkl.sb.test"),
            ]),
        ] {
            assert!(cookie_request_allowed(&ok, &host_form).is_ok(), "{ok:?}");
        }
        for refused in [
            req(&[("sec-fetch-site", "same-site"), ("sec-fetch-mode", "cors")]),
            req(&[
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "no-cors"),
            ]),
            req(&[
                ws[0],
                ws[1],
                ("origin", "https://8080-zzzzzzzzzzzz.sb.test"),
            ]),
            req(&[ws[0], ws[1], ("origin", "null")]),
        ] {
            assert!(
                cookie_request_allowed(&refused, &host_form).is_err(),
                "{refused:?}"
            );
        }
        // The path form: its pages are opaque (`null`).
        assert!(
            cookie_request_allowed(&req(&[ws[0], ws[1], ("origin", "null")]), &path_form).is_ok()
        );
        assert!(cookie_request_allowed(
            &req(&[ws[0], ws[1], ("origin", "https://evil.test")]),
            &path_form
        )
        .is_err());
    }

    #[tokio::test]
    async fn stockade_credentials_never_reach_a_sandbox() {
        let store = stockade_store::connect("sqlite::memory:").await.unwrap();
        let account = store.create_account("op", true).await.unwrap();
        // An operator's token of any form is known to the database.
        store
            .add_token(
                &account.id,
                &stockade_core::account::hash_token("opsecret-42"),
            )
            .await
            .unwrap();
        let blobs = tempfile::tempdir().unwrap();
        let config = stockade_service::ServiceConfig {
            blob_store: stockade_blob::BlobConfig::Local {
                dir: blobs.path().to_owned(),
            },
            ..Default::default()
        };
        let svc = stockade_service::Service::new(
            store,
            std::sync::Arc::new(stockade_runtime::FakeRuntime::new()),
            config,
        )
        .await
        .unwrap();
        let store = &svc;
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer stk_secretsecretsecret"),
        );
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("app=1; stockade_session=stk_secret; z=2"),
        );
        h.insert(
            "x-api-key",
            HeaderValue::from_static("stk_secretsecretsecret"),
        );
        strip_stockade_credentials(store, &mut h).await;
        assert!(h.get(header::AUTHORIZATION).is_none());
        assert!(h.get("x-api-key").is_none());
        assert_eq!(h.get(header::COOKIE).unwrap(), "app=1; z=2");
        // Whatever its form: the operator's token as a bearer, a bare
        // value, an API key or a Basic password; a sandbox token.
        use base64::Engine;
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("user:opsecret-42")
        );
        for (name, value) in [
            ("authorization", "bearer opsecret-42".to_owned()),
            ("authorization", "opsecret-42".to_owned()),
            ("authorization", basic),
            ("authorization", "Bearer stkt_abc.def.1.x".to_owned()),
            ("x-api-key", " opsecret-42 ".to_owned()),
            ("x-api-key", "stks_session".to_owned()),
        ] {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_str(&value).unwrap());
            strip_stockade_credentials(store, &mut h).await;
            assert!(h.get(name).is_none(), "{name}: {value}");
        }
        // A sandbox's own API key passes.
        let mut own = HeaderMap::new();
        own.insert("x-api-key", HeaderValue::from_static("app-key-123"));
        strip_stockade_credentials(store, &mut own).await;
        assert_eq!(own.get("x-api-key").unwrap(), "app-key-123");
        // The sandbox's own schemes pass.
        for own in ["Bearer appjwt.abc.def", "Basic dXNlcjpwYXNz"] {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(own));
            strip_stockade_credentials(store, &mut h).await;
            assert_eq!(h.get(header::AUTHORIZATION).unwrap(), own);
        }
        assert_eq!(
            rewrite_set_cookie("stockade_session=planted; Path=/api/", None),
            None
        );
        assert_eq!(strip_query_token("stockade%5Ftoken=x&b"), "b");
        assert_eq!(strip_query_token("stockade_token=x"), "");
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("x-kept", HeaderValue::from_static("1"));
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("x-kept"));

        let mut up = HeaderMap::new();
        up.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        up.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(requested_upgrade(&up).unwrap(), "websocket");
        up.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        assert_eq!(requested_upgrade(&up), None);
    }

    #[test]
    fn sandbox_cookies_stay_with_the_sandbox() {
        let p = Some("/proxy/abcdefghijkl/8080");
        for (prefix, cookie, rewritten) in [
            (
                p,
                "s=1; Path=/; Domain=sandboxes.test; HttpOnly",
                Some("s=1; Path=/proxy/abcdefghijkl/8080/; HttpOnly"),
            ),
            (
                p,
                "s=1; path=/app",
                Some("s=1; Path=/proxy/abcdefghijkl/8080/app"),
            ),
            (
                p,
                "s=1; Path=/proxy/abcdefghijkl/8080/x",
                Some("s=1; Path=/proxy/abcdefghijkl/8080/x"),
            ),
            (
                None,
                "s=1; Path=/; domain=.sandboxes.test",
                Some("s=1; Path=/"),
            ),
            (None, "stockade_token=forged; Path=/", None),
        ] {
            assert_eq!(
                rewrite_set_cookie(cookie, prefix).as_deref(),
                rewritten,
                "{cookie}"
            );
        }
    }

    #[test]
    fn redirects_stay_under_the_prefix() {
        let prefix = "/proxy/abcdefghijkl/8080";
        for (loc, want) in [
            ("/dir/", "/proxy/abcdefghijkl/8080/dir/"),
            ("/proxy/abcdefghijkl/8080/x", "/proxy/abcdefghijkl/8080/x"),
            ("//other.host/x", "//other.host/x"),
            ("http://elsewhere/", "http://elsewhere/"),
            ("relative", "relative"),
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::LOCATION, HeaderValue::from_str(loc).unwrap());
            rewrite_location(&mut h, prefix);
            assert_eq!(h.get(header::LOCATION).unwrap(), want, "{loc}");
        }
    }
}
