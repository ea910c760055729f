//! The test app: the real router over the fake runtime and SQLite in
//! memory, driven one request at a time with `tower::ServiceExt::oneshot`
//! (no listener, no Docker), and the helpers the feature modules share.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use stockade_runtime::FakeRuntime;
use stockade_server::{AppState, ServerConfig};
use stockade_store::{SqliteStore, Store};
use tower::ServiceExt;

/// The image sandboxes get when a create names none.
pub const DEFAULT_IMAGE: &str = "stockade-test-base:latest";

/// One server: its router, the bootstrap admin's token and the fake runtime
/// (to look at what was made, or to make the next step fail).
pub struct App {
    router: Router,
    pub admin: String,
    pub rt: FakeRuntime,
    /// The object store's directory, removed with the app.
    _dir: tempfile::TempDir,
}

/// A response: status, headers and the body as JSON (a string when it is
/// not JSON).
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Resp {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }

    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or_default()
    }

    /// The fields a validation error names.
    pub fn error_fields(&self) -> Vec<String> {
        crate::error_body::fields(&self.body)
    }

    /// Asserts the status and that the body is Stockade's error shape,
    /// `{"error": {"code", "message", "details"?}}` with nothing else, with
    /// this code and a message.
    #[track_caller]
    pub fn assert_error(&self, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        let obj = self.body.as_object().expect("an error body is an object");
        assert_eq!(obj.len(), 1, "only `error` at the top: {}", self.body);
        let err = self.body["error"].as_object().expect("`error` object");
        assert!(
            err.keys()
                .all(|k| ["code", "message", "details"].contains(&k.as_str())),
            "unexpected keys in {}",
            self.body
        );
        assert_eq!(self.code(), code, "{}", self.body);
        assert!(!self.message().is_empty(), "empty message: {}", self.body);
    }

    /// Asserts a 400 `validation_failed` that names `field`.
    #[track_caller]
    pub fn assert_invalid(&self, field: &str) {
        self.assert_error(StatusCode::BAD_REQUEST, "validation_failed");
        assert!(
            self.error_fields().iter().any(|f| f == field),
            "expected the field {field} to be named: {}",
            self.body
        );
    }

    /// The `id` of a sandbox in the body.
    pub fn id(&self) -> String {
        self.body["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id in {}", self.body))
            .to_owned()
    }
}

impl App {
    pub async fn new() -> Self {
        Self::with(|_| {}).await
    }

    /// An app whose server configuration `configure` changed first.
    pub async fn with(configure: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::connect("sqlite::memory:")
                .await
                .expect("in-memory SQLite"),
        );
        let rt = FakeRuntime::new();
        let mut config = ServerConfig::default();
        config.service.defaults.image = DEFAULT_IMAGE.into();
        config.service.operation_wait = Duration::from_secs(10);
        config.service.blob_store = stockade_blob::BlobConfig::Local {
            dir: dir.path().join("blobs"),
        };
        configure(&mut config);
        let admin = format!("stk_test_admin_{}", stockade_core::SandboxId::generate());
        stockade_server::bootstrap(store.as_ref(), Some(&admin))
            .await
            .expect("bootstrap");
        let state = AppState::new(store, Arc::new(rt.clone()), config)
            .await
            .expect("app state");
        // Operations hold leases; keep them renewed as the server does.
        let svc = state.svc.clone();
        tokio::spawn(svc.clone().renew_leases(svc.shutdown().clone()));
        Self {
            router: stockade_server::router(state),
            admin,
            rt,
            _dir: dir,
        }
    }

    /// An app with one account of each name: the app and the accounts'
    /// tokens, in the order of `names`.
    pub async fn with_tenants<const N: usize>(names: [&str; N]) -> (Self, [String; N]) {
        let app = Self::new().await;
        let mut tokens = Vec::with_capacity(N);
        for name in names {
            tokens.push(app.tenant(name).await);
        }
        let tokens = tokens.try_into().expect("one token a name");
        (app, tokens)
    }

    /// An app with one account: the app and the account's id and token.
    pub async fn with_account(name: &str) -> (Self, (String, String)) {
        let app = Self::new().await;
        let account = app.account(name).await;
        (app, account)
    }

    /// Sends one request through the router.
    pub async fn send(&self, req: Request<Body>) -> Resp {
        let resp = self
            .router
            .clone()
            .oneshot(req)
            .await
            .expect("the router is infallible");
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .expect("response body")
            .to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Resp {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str, token: &str) -> Resp {
        self.send(request(Method::GET, path, Some(token), None))
            .await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.send(request(Method::POST, path, Some(token), Some(body)))
            .await
    }

    /// POSTs an empty object to an account route: `disable`, `enable`.
    pub async fn account_act(&self, token: &str, account: &str, action: &str) -> Resp {
        let path = format!("/api/v1/accounts/{account}/{action}");
        self.post(&path, token, json!({})).await
    }

    pub async fn put(&self, path: &str, token: &str, body: Value) -> Resp {
        self.send(request(Method::PUT, path, Some(token), Some(body)))
            .await
    }

    pub async fn patch(&self, path: &str, token: &str, body: Value) -> Resp {
        self.send(request(Method::PATCH, path, Some(token), Some(body)))
            .await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Resp {
        self.send(request(Method::DELETE, path, Some(token), None))
            .await
    }

    /// A request to the E2B API with `X-API-Key: key`.
    pub async fn e2b(&self, method: Method, path: &str, key: &str, body: Option<Value>) -> Resp {
        let req = with_header(request(method, path, None, body), "x-api-key", key);
        self.send(req).await
    }

    /// A request with no credential but this one header.
    pub async fn get_with(&self, path: &str, name: &'static str, value: &str) -> Resp {
        let req = with_header(request(Method::GET, path, None, None), name, value);
        self.send(req).await
    }

    /// Creates an account: its id and token.
    pub async fn account(&self, name: &str) -> (String, String) {
        let r = self
            .post("/api/v1/accounts", &self.admin, json!({ "name": name }))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        (
            r.body["account"]["id"].as_str().unwrap().to_owned(),
            r.body["token"].as_str().unwrap().to_owned(),
        )
    }

    /// The token of a new account.
    pub async fn tenant(&self, name: &str) -> String {
        self.account(name).await.1
    }

    /// Asks to create a sandbox: the answer as it is (a refusal included).
    pub async fn try_create(&self, token: &str, body: Value) -> Resp {
        self.post("/api/v1/sandbox", token, body).await
    }

    /// Creates a sandbox (asserting a 201, RUNNING) and returns its body.
    pub async fn create(&self, token: &str, body: Value) -> Value {
        let r = self.try_create(token, body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        assert_eq!(r.body["status"], "RUNNING", "{}", r.body);
        r.body
    }

    /// Creates a sandbox and returns its id.
    pub async fn create_id(&self, token: &str, body: Value) -> String {
        id_of(&self.create(token, body).await)
    }

    /// Total of the caller's list with this query.
    pub async fn total(&self, token: &str, query: &str) -> u64 {
        let r = self.get(&format!("/api/v1/sandbox?{query}"), token).await;
        assert_eq!(r.status, StatusCode::OK, "{query}: {}", r.body);
        r.body["total"].as_u64().expect("total")
    }

    /// Names of the sandboxes the caller's list shows with this query.
    pub async fn names(&self, token: &str, query: &str) -> Vec<String> {
        let r = self.get(&format!("/api/v1/sandbox?{query}"), token).await;
        assert_eq!(r.status, StatusCode::OK, "{query}: {}", r.body);
        r.body["sandboxes"]
            .as_array()
            .expect("sandboxes")
            .iter()
            .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

pub fn id_of(sb: &Value) -> String {
    sb["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {sb}"))
        .to_owned()
}

/// A request with a bearer token (if any) and a JSON body (if any).
pub fn request(
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    match body {
        Some(v) => b
            .header("content-type", "application/json")
            .body(Body::from(v.to_string())),
        None => b.body(Body::empty()),
    }
    .expect("request")
}

/// `req` with one more header.
pub fn with_header(mut req: Request<Body>, name: &'static str, value: &str) -> Request<Body> {
    req.headers_mut()
        .insert(name, value.parse().expect("a header value"));
    req
}

/// One test per bad body: each test, named as given, calls `$check` (an
/// async fn of the body and the field the 400 must name).
macro_rules! bad_bodies {
    ($check:ident; $($name:ident: $body:expr => $field:expr;)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                $check($body, $field).await;
            }
        )*
    };
}
pub(crate) use bad_bodies;
