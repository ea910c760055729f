//! Exposed ports and the reverse proxy, and the short-lived tokens
//! that open them.

use std::time::Duration;

use reqwest::Method;
use stockade_api::{
    AuthTokenRequest, AuthTokenResponse, ExposePortRequest, ExposedPort, PortsResponse,
};

use crate::client::Client;
use crate::error::Error;
use crate::sandbox::Sandbox;

impl Sandbox {
    fn ports_url(&self) -> String {
        format!("/api/v1/sandbox/{}/ports", self.id())
    }

    /// Exposes a port through Stockade's proxy, at once (a server in the
    /// sandbox must listen on `0.0.0.0:port`). Exposing one that already is
    /// exposed is fine.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let exposed = sb.expose_port(3000).await?;
    /// println!("{}", exposed.url);
    /// # Ok(()) }
    /// ```
    pub async fn expose_port(&self, port: u16) -> Result<ExposedPort, Error> {
        if port == 0 {
            return Err(Error::invalid("port", "port 0 is not a port"));
        }
        let req = self
            .client()
            .request(Method::POST, &self.ports_url())
            .json(&ExposePortRequest {
                port: i64::from(port),
            });
        self.client().send(req).await
    }

    /// Stops exposing a port, at once; returns the ports still exposed.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let left = sb.unexpose_port(3000).await?;
    /// assert!(left.iter().all(|p| p.port != 3000));
    /// # Ok(()) }
    /// ```
    pub async fn unexpose_port(&self, port: u16) -> Result<Vec<ExposedPort>, Error> {
        let req = self
            .client()
            .request(Method::DELETE, &format!("{}/{port}", self.ports_url()));
        Ok(self.client().send::<PortsResponse>(req).await?.ports)
    }

    /// The exposed ports and their proxy URLs.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// for p in sb.ports().await? {
    ///     println!("{} → {}", p.port, p.host_url.as_deref().unwrap_or(&p.url));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn ports(&self) -> Result<Vec<ExposedPort>, Error> {
        let req = self.client().request(Method::GET, &self.ports_url());
        Ok(self.client().send::<PortsResponse>(req).await?.ports)
    }

    /// The URL an exposed port is served at: the host form
    /// (`http://{port}-{id}.{proxy domain}/`) when the server has a proxy
    /// domain, else the path form (`{server}/proxy/{id}/{port}/`). Requests
    /// need a token from [`Sandbox::auth_token`].
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// sb.expose_port(8000).await?;
    /// let url = sb.domain(8000).await?;
    /// let token = sb.auth_token(None).await?.token;
    /// println!("curl -H 'X-Stockade-Token: {token}' {url}");
    /// # Ok(()) }
    /// ```
    pub async fn domain(&self, port: u16) -> Result<String, Error> {
        let ports = self.ports().await?;
        let p = ports.into_iter().find(|p| p.port == port).ok_or_else(|| {
            Error::invalid(
                "port",
                format!(
                    "port {port} is not exposed on sandbox {}; expose it first (expose_port)",
                    self.id()
                ),
            )
        })?;
        Ok(p.host_url.unwrap_or(p.url))
    }

    /// A token that opens this sandbox's exposed ports through the proxy,
    /// and nothing else: send it as the `X-Stockade-Token` header, or once
    /// as the `stockade_token` query parameter. `ttl`: whole seconds, 1 s to
    /// 24 h (default: the server's, one hour).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use std::time::Duration;
    /// let t = sb.auth_token(Some(Duration::from_secs(600))).await?;
    /// println!("{} until {}", t.token, t.expires_at);
    /// # Ok(()) }
    /// ```
    pub async fn auth_token(&self, ttl: Option<Duration>) -> Result<AuthTokenResponse, Error> {
        let ttl_seconds = match ttl {
            Some(t) if t.as_secs() == 0 => {
                return Err(Error::invalid("ttl", "must be at least one second"))
            }
            Some(t) => Some(i64::try_from(t.as_secs()).unwrap_or(i64::MAX)),
            None => None,
        };
        let req = self
            .client()
            .request(
                Method::POST,
                &format!("/api/v1/sandbox/{}/auth-token", self.id()),
            )
            .json(&AuthTokenRequest { ttl_seconds });
        self.client().send(req).await
    }
}

impl Client {
    /// The exposed ports of all your running sandboxes.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// for p in client.all_ports().await? {
    ///     println!("{} {} {}", p.sandbox_id, p.port, p.url);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn all_ports(&self) -> Result<Vec<ExposedPort>, Error> {
        let req = self.request(Method::GET, "/api/v1/sandbox/ports");
        Ok(self.send::<PortsResponse>(req).await?.ports)
    }
}
