//! Extractors: the authenticated caller (so no handler can forget auth), a
//! JSON body whose errors are 400s naming the offending field, and a
//! WebSocket handshake refused in Stockade's error shape. A caller
//! authenticates with `Authorization: Bearer <token>` or, in the dashboard,
//! with the `HttpOnly` session cookie plus the CSRF header.

use axum::body::Bytes;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use stockade_core::{Account, Scope, TokenId, TokenKind};

use crate::error::{ApiError, ApiResult};
use crate::AppState;
use stockade_service::ServiceError;

/// The account behind the request's `Authorization: Bearer` token.
#[derive(Debug, Clone)]
pub struct Caller {
    pub account: Account,
    pub scope: Scope,
    /// The bearer header or the dashboard's session cookie.
    pub credential: Credential,
    /// The API token or session that authenticated the request.
    pub token_id: TokenId,
}

/// The dashboard's session cookie: a session's secret (never the API
/// token it was opened with), `HttpOnly` (no script reads it),
/// `SameSite=Strict` and scoped to `/api/`.
pub const SESSION_COOKIE: &str = "stockade_session";
/// Its name over HTTPS: `__Host-` makes the browser refuse it unless it is
/// `Secure`, for the whole host (`Path=/`) and without `Domain`, so that no
/// other host of the domain (a sandbox port on the proxy's host form) can
/// plant or shadow it.
pub const SECURE_SESSION_COOKIE: &str = "__Host-stockade_session";

/// Both names of the session cookie.
pub const SESSION_COOKIES: [&str; 2] = [SESSION_COOKIE, SECURE_SESSION_COOKIE];
/// The header every state-changing request authenticated by the session
/// cookie must carry: a cross-site form or image cannot send it, and no
/// cross-origin script may (the API grants no CORS), so it defeats CSRF.
pub const CSRF_HEADER: &str = "x-stockade-csrf";

/// How a request authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    Bearer,
    SessionCookie,
}

fn bearer(parts: &Parts) -> Result<Option<&str>, ApiError> {
    let Some(header) = parts.headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = header
        .to_str()
        .map_err(|_| ApiError::Unauthorized("Malformed Authorization header".into()))?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::Unauthorized(
                "Malformed Authorization header: expected `Bearer <token>`".into(),
            )
        })?;
    Ok(Some(token))
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case),
/// as sent.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    value
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("bearer "))
        .map(|_| &value[7..])
}

/// The `Idempotency-Key` header of a create, if it has one.
pub fn idempotency_key(headers: &axum::http::HeaderMap) -> Result<Option<&str>, ApiError> {
    headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str().map_err(|_| {
                ApiError::field(
                    "Idempotency-Key",
                    "must be 1 to 255 visible ASCII characters",
                )
            })
        })
        .transpose()
}

/// The values of the cookie `name` in a request (several: somebody tried
/// to plant one next to the real one).
pub fn cookie_values<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k.trim() == name).then_some(v.trim())
        })
        .collect()
}

/// The token of the session cookie, checked: one cookie only, and the CSRF
/// header on anything but a read.
fn session_token(parts: &Parts) -> Result<Option<&str>, ApiError> {
    let values: Vec<&str> = SESSION_COOKIES
        .iter()
        .flat_map(|name| cookie_values(&parts.headers, name))
        .collect();
    let token = match values.as_slice() {
        [] => return Ok(None),
        [one] if !one.is_empty() => *one,
        [_] => return Ok(None),
        _ => {
            return Err(ApiError::Unauthorized(format!(
                "Several {SESSION_COOKIE} cookies were sent; sign in again"
            )))
        }
    };
    let safe = matches!(
        parts.method,
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    if !safe && !parts.headers.contains_key(CSRF_HEADER) {
        return Err(ServiceError::Forbidden(format!(
            "Requests that change something and authenticate with the session cookie must send \
             the {CSRF_HEADER} header (scripts use `Authorization: Bearer` instead)"
        ))
        .into());
    }
    Ok(Some(token))
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        let (token, credential) = match bearer(parts)? {
            Some(t) => (t, Credential::Bearer),
            None => match session_token(parts)? {
                Some(t) => (t, Credential::SessionCookie),
                None => {
                    return Err(ApiError::Unauthorized(
                        "Missing API token: send the header `Authorization: Bearer <token>`".into(),
                    ))
                }
            },
        };
        let caller = authenticate(state, token, credential).await?;
        crate::audit::note_caller(&parts.extensions, &caller);
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

/// How long a token's `lastUsedAt` may lag behind its use: each instance
/// writes it at most this often per token, so a busy token costs no write
/// per request.
const TOKEN_USE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// When each token's use was last written by this instance.
#[derive(Debug, Default)]
pub struct TokenUse(std::sync::Mutex<std::collections::HashMap<TokenId, std::time::Instant>>);

impl TokenUse {
    /// Whether a use of `id` now should be written.
    fn due(&self, id: &TokenId) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        match seen.get(id) {
            Some(at) if now.duration_since(*at) < TOKEN_USE_INTERVAL => false,
            _ => {
                if seen.len() >= 100_000 {
                    seen.clear();
                }
                seen.insert(id.clone(), now);
                true
            }
        }
    }
}

/// The caller a secret authenticates: an API token as a bearer (or API
/// key), a session's secret only as the session cookie. Unknown, revoked
/// and expired secrets are 401; a disabled account's are 403.
pub async fn authenticate(
    state: &AppState,
    secret: &str,
    credential: Credential,
) -> Result<Caller, ApiError> {
    let (unknown, wanted) = match credential {
        Credential::Bearer => ("Invalid API token", TokenKind::Api),
        Credential::SessionCookie => (
            "The dashboard session has ended: sign in again",
            TokenKind::Session,
        ),
    };
    let found = state
        .svc
        .authenticate(secret, wanted)
        .await?
        .ok_or_else(|| ApiError::Unauthorized(unknown.into()))?;
    refuse_disabled(&found.account)?;
    if state.token_use.due(&found.token.id) {
        state.svc.record_token_use(found.token.id.clone());
    }
    Ok(Caller {
        scope: Scope {
            account_id: found.account.id.clone(),
            team_ids: found.team_ids,
        },
        account: found.account,
        credential,
        token_id: found.token.id,
    })
}

/// A disabled account's credentials are refused everywhere.
pub fn refuse_disabled(account: &Account) -> Result<(), ApiError> {
    if account.is_disabled() {
        return Err(ServiceError::Forbidden(format!(
            "The account '{}' is disabled: an administrator can enable it again",
            account.name
        ))
        .into());
    }
    Ok(())
}

/// A caller whose account is an administrator.
#[derive(Debug, Clone)]
pub struct AdminCaller(pub Caller);

impl FromRequestParts<AppState> for AdminCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        if !caller.account.is_admin {
            return Err(ServiceError::Forbidden(
                "Forbidden: this needs an administrator's token".into(),
            )
            .into());
        }
        Ok(Self(caller))
    }
}

/// What nearly every handler takes: the server's state and the
/// authenticated caller (`Authed<AdminCaller>`: an administrator; the
/// compatible APIs have callers of their own).
pub struct Authed<C = Caller> {
    pub state: AppState,
    pub caller: C,
}

impl<C: FromRequestParts<AppState>> FromRequestParts<AppState> for Authed<C> {
    type Rejection = C::Rejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let caller = C::from_request_parts(parts, state).await?;
        Ok(Self {
            state: state.clone(),
            caller,
        })
    }
}

/// [`Authed`] and the one parameter of the path (a sandbox's id, a
/// snapshot's) as it was sent: the handler checks the rest of its input
/// before it loads what the id names. The caller is authenticated first,
/// so that a request without a credential is refused whatever its path; a
/// path that cannot be read is axum's own 400.
pub struct AuthedId<C = Caller> {
    pub state: AppState,
    pub caller: C,
    pub id: String,
}

impl<C> FromRequestParts<AppState> for AuthedId<C>
where
    C: FromRequestParts<AppState> + Send,
    C::Rejection: IntoResponse,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let Authed { state, caller } = Authed::<C>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Path(id) = Path::<String>::from_request_parts(parts, &state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self { state, caller, id })
    }
}

/// A JSON object body. Malformed JSON, wrong types and unknown fields are
/// 400s that name the field (`details.fields[].field`); a body that is not
/// an object names `body`.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            ApiError::field("body", format!("could not read the request body: {e}"))
        })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses a body that must be a JSON object, reporting the path of the
/// first bad field. Anything but an object, and text that is not JSON at
/// all, is refused naming `body`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let Some(first) = bytes.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Err(ApiError::field("body", "a JSON body is required"));
    };
    // serde's derive reads a struct from a JSON array too (its fields in
    // order), so `[]` would pass as an object with every field left out.
    if *first != b'{' {
        return Err(ApiError::field("body", not_an_object(bytes)));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|err| {
        // Malformed JSON is the body's fault wherever the parser stopped
        // (serde_path_to_error would name the key being read, or `?`);
        // the line and column say where.
        if err.inner().is_syntax() || err.inner().is_eof() {
            return ApiError::field("body", format!("not valid JSON: {}", err.inner()));
        }
        let path = err.path().to_string();
        let inner = err.into_inner();
        let message = inner.to_string();
        // serde reports an unknown field at its parent's path; name the field itself.
        let field = match message.strip_prefix("unknown field `") {
            Some(rest) => {
                let name = rest.split('`').next().unwrap_or_default();
                if path == "." || path.is_empty() {
                    name.to_owned()
                } else if path == name || path.ends_with(&format!(".{name}")) {
                    path
                } else {
                    format!("{path}.{name}")
                }
            }
            // A missing field is reported at its parent's path too.
            None => match message.strip_prefix("missing field `") {
                Some(rest) => {
                    let name = rest.split('`').next().unwrap_or_default();
                    if path == "." || path.is_empty() {
                        name.to_owned()
                    } else {
                        format!("{path}.{name}")
                    }
                }
                None if path == "." || path.is_empty() => "body".to_owned(),
                None => path,
            },
        };
        let message = match message.find(" at line ") {
            Some(i) => message[..i].to_owned(),
            None => message,
        };
        ApiError::field(field, message)
    })
}

/// Why a body that does not start with `{` is refused: what JSON value it
/// is instead, or why it is not JSON.
fn not_an_object(bytes: &[u8]) -> String {
    use serde_json::Value;
    let found = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Array(_)) => "an array",
        Ok(Value::String(_)) => "a string",
        Ok(Value::Number(_)) => "a number",
        Ok(Value::Bool(_)) => "a boolean",
        Ok(Value::Null) => "null",
        Ok(Value::Object(_)) => "an object",
        Err(e) => return format!("not valid JSON: {e}; expected a JSON object"),
    };
    format!("expected a JSON object, found {found}")
}

/// The WebSocket handshake of a WebSocket route, taken by the handler as
/// `Result<WebSocketUpgrade, WebSocketUpgradeRejection>` so that it can
/// check ownership first and refuse a request that is no handshake in
/// Stockade's shape (axum's own rejection is plain text): a wrong method
/// is a 405, a missing or wrong header a 400 naming that header.
pub fn websocket(
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<WebSocketUpgrade, ApiError> {
    use WebSocketUpgradeRejection as R;
    let rejection = match upgrade {
        Ok(upgrade) => return Ok(upgrade),
        Err(rejection) => rejection,
    };
    let header = match &rejection {
        R::MethodNotGet(_) | R::MethodNotConnect(_) => {
            return Err(ApiError::MethodNotAllowed(format!(
                "{}: this route is a WebSocket, opened with a GET upgrade \
                 (HTTP/2: CONNECT)",
                rejection.body_text()
            )))
        }
        R::InvalidConnectionHeader(_) => "Connection",
        R::InvalidWebSocketVersionHeader(_) => "Sec-WebSocket-Version",
        R::WebSocketKeyHeaderMissing(_) => "Sec-WebSocket-Key",
        R::InvalidProtocolPseudoheader(_) => ":protocol",
        // A wrong `Upgrade` header, or a connection that cannot be
        // upgraded (HTTP/1.0).
        _ => "Upgrade",
    };
    Err(ApiError::field(
        header,
        format!(
            "{}: this route is a WebSocket; connect with a WebSocket client \
             (`Connection: upgrade`, `Upgrade: websocket`)",
            rejection.body_text()
        ),
    ))
}

/// Query parameters as (key, value) pairs, repeated keys kept.
pub fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A request body read whole up to `max` bytes: beyond it a 413 with the
/// route's own words (`too_large`), any other failure a 400 naming `body`.
pub async fn read_capped(
    body: axum::body::Body,
    max: usize,
    too_large: impl FnOnce() -> String,
) -> ApiResult<Bytes> {
    axum::body::to_bytes(body, max).await.map_err(|e| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(err) = source {
            if err.to_string().contains("length limit exceeded") {
                return ServiceError::PayloadTooLarge(too_large()).into();
            }
            source = err.source();
        }
        ApiError::field("body", format!("could not read the request body: {e}"))
    })
}
