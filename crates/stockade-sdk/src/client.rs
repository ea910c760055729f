//! `Client`: where the server is and how to authenticate; JSON over HTTP.

use std::sync::{Arc, OnceLock};

use reqwest::header::{
    CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use stockade_api::ErrorBody;
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

use crate::error::Error;

/// A connection to one Stockade server. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    /// An HTTP/1.1-only client for WebSocket upgrades (an upgrade does not
    /// exist in HTTP/2, which TLS may otherwise negotiate), made on first use.
    upgrades: Arc<OnceLock<reqwest::Client>>,
}

/// A WebSocket over an upgraded HTTP connection.
pub(crate) type Socket = WebSocketStream<reqwest::Upgraded>;

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// The `User-Agent` of the SDK's requests.
const SDK_AGENT: &str = concat!("stockade-sdk/", env!("CARGO_PKG_VERSION"));

fn http_client(agent: &str) -> Result<reqwest::Client, Error> {
    reqwest::Client::builder()
        .user_agent(agent)
        .build()
        .map_err(|e| Error::Config(format!("could not build the HTTP client: {e}")))
}

impl Client {
    /// A client for `url` (e.g. `http://127.0.0.1:7433`) with an API token.
    pub fn new(url: impl Into<String>, token: impl Into<String>) -> Result<Self, Error> {
        let token = token.into();
        if token.trim().is_empty() {
            return Err(Error::Config("the API token is empty".into()));
        }
        let mut client = Self::anonymous(url)?;
        client.token = Some(token);
        Ok(client)
    }

    /// A client without a token: only for calls that need none (`health`).
    pub fn anonymous(url: impl Into<String>) -> Result<Self, Error> {
        let base = url.into().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Config(format!(
                "the server URL must start with http:// or https:// (got '{base}')"
            )));
        }
        Ok(Self {
            base,
            token: None,
            http: http_client(SDK_AGENT)?,
            upgrades: Arc::new(OnceLock::new()),
        })
    }

    /// The same client naming itself `agent` in its `User-Agent` (the
    /// server's audit log tells front-ends apart by it).
    pub fn with_user_agent(mut self, agent: &str) -> Result<Self, Error> {
        self.http = http_client(agent)?;
        Ok(self)
    }

    /// A client from `STOCKADE_URL` (default `http://127.0.0.1:7433`) and
    /// `STOCKADE_TOKEN`.
    pub fn from_env() -> Result<Self, Error> {
        let url = std::env::var("STOCKADE_URL")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "http://127.0.0.1:7433".into());
        let token = std::env::var("STOCKADE_TOKEN")
            .map_err(|_| Error::Config("set STOCKADE_TOKEN to an API token".into()))?;
        Self::new(url, token)
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub(crate) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends a request and decodes a JSON answer, or the API error.
    pub(crate) async fn send<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T, Error> {
        let resp = req.send().await.map_err(|e| self.transport(e))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        if !status.is_success() {
            return Err(api_error(status.as_u16(), &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode(e.to_string()))
    }

    /// Sends a request and returns the response when its status is a
    /// success (for bodies that are not JSON: bytes, archives, streams).
    pub(crate) async fn send_raw(&self, req: RequestBuilder) -> Result<reqwest::Response, Error> {
        let resp = req.send().await.map_err(|e| self.transport(e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        Err(api_error(status.as_u16(), &bytes))
    }

    /// Sends a request whose success has no body worth reading (204).
    pub(crate) async fn send_empty(&self, req: RequestBuilder) -> Result<(), Error> {
        let resp = self.send_raw(req).await?;
        resp.bytes().await.map_err(|e| self.transport(e))?;
        Ok(())
    }

    /// Opens a WebSocket at `path` with `query`, authenticated like every
    /// request; an answer other than the upgrade is the API's error.
    pub(crate) async fn websocket(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Socket, Error> {
        let http = match self.upgrades.get() {
            Some(c) => c.clone(),
            None => {
                let c = reqwest::Client::builder()
                    .http1_only()
                    .build()
                    .map_err(|e| Error::Config(format!("could not build the HTTP client: {e}")))?;
                self.upgrades.get_or_init(|| c).clone()
            }
        };
        let key = generate_key();
        let mut req = http
            .get(format!("{}{path}", self.base))
            .query(query)
            .header(CONNECTION, "Upgrade")
            .header(UPGRADE, "websocket")
            .header(SEC_WEBSOCKET_VERSION, "13")
            .header(SEC_WEBSOCKET_KEY, &key);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| self.transport(e))?;
        let status = resp.status();
        if status != StatusCode::SWITCHING_PROTOCOLS {
            let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
            return Err(api_error(status.as_u16(), &bytes));
        }
        let accept = resp
            .headers()
            .get(SEC_WEBSOCKET_ACCEPT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if accept.as_deref() != Some(derive_accept_key(key.as_bytes()).as_str()) {
            return Err(Error::Decode(
                "the server's WebSocket handshake did not answer our key".into(),
            ));
        }
        let upgraded = resp.upgrade().await.map_err(|e| self.transport(e))?;
        Ok(WebSocketStream::from_raw_socket(upgraded, Role::Client, None).await)
    }

    pub(crate) fn transport(&self, e: reqwest::Error) -> Error {
        let mut reason = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            reason = format!("{reason}: {s}");
            src = s.source();
        }
        Error::Transport {
            url: self.base.clone(),
            reason,
        }
    }
}

pub(crate) fn api_error(status: u16, bytes: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => Error::Api {
            status,
            code: body.error.code,
            message: body.error.message,
            details: body.error.details,
        },
        Err(_) => Error::Api {
            status,
            code: "http_error".into(),
            message: String::from_utf8_lossy(bytes).chars().take(500).collect(),
            details: None,
        },
    }
}
