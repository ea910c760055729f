//! Server-level calls: health, accounts (admin), who am I.

use reqwest::Method;
use stockade_api::{
    CreateAccountRequest, CreateAccountResponse, HealthResponse, ListAccountsResponse,
    WhoAmIResponse,
};

use crate::client::{api_error, Client};
use crate::error::Error;

impl Client {
    /// The server's health. An unhealthy server answers 503 with the same
    /// document, which is returned as `Ok` too: look at `status`.
    pub async fn health(&self) -> Result<HealthResponse, Error> {
        let resp = self
            .request(Method::GET, "/api/v1/health")
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        match serde_json::from_slice::<HealthResponse>(&bytes) {
            Ok(h) => Ok(h),
            Err(_) => Err(api_error(status, &bytes)),
        }
    }

    /// The image the server gives a sandbox created without one, when the
    /// server says (`defaults.image` in its health document); `None` from a
    /// server that does not report it.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// match client.default_image().await? {
    ///     Some(image) => println!("sandboxes default to {image}"),
    ///     None => println!("the server does not say which image it defaults to"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn default_image(&self) -> Result<Option<String>, Error> {
        let resp = self
            .request(Method::GET, "/api/v1/health")
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        let doc: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|_| api_error(status, &bytes))?;
        Ok(doc["defaults"]["image"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned))
    }

    /// The account this client's token belongs to.
    pub async fn whoami(&self) -> Result<WhoAmIResponse, Error> {
        self.send(self.request(Method::GET, "/api/v1/me")).await
    }

    /// Creates an account (admin only); the response holds its token, shown once.
    pub async fn create_account(
        &self,
        name: &str,
        is_admin: bool,
    ) -> Result<CreateAccountResponse, Error> {
        let body = CreateAccountRequest {
            name: name.to_owned(),
            is_admin,
        };
        self.send(self.request(Method::POST, "/api/v1/accounts").json(&body))
            .await
    }

    /// Every account (admin only).
    pub async fn list_accounts(&self) -> Result<ListAccountsResponse, Error> {
        self.send(self.request(Method::GET, "/api/v1/accounts"))
            .await
    }
}
