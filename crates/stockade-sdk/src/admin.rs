//! Server-level calls: health, accounts (admin), who am I.

use reqwest::Method;
use stockade_api::{
    CreateAccountRequest, CreateAccountResponse, HealthResponse, ListAccountsResponse,
    QuotaResponse, SetQuotaRequest, WhoAmIResponse,
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

    /// The quota of an account and what it uses of it (SEC-16): an
    /// administrator asks about any account, anyone else about their own.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let me = client.whoami().await?;
    /// let q = client.quota(&me.account.id).await?;
    /// if let Some(max) = q.quota.sandboxes {
    ///     println!("{} of {max} sandboxes", q.usage.sandboxes);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn quota(&self, account_id: &str) -> Result<QuotaResponse, Error> {
        let path = format!("/api/v1/accounts/{}/quota", path_segment(account_id)?);
        self.send(self.request(Method::GET, &path)).await
    }

    /// Replaces the quota of an account (admin only): a `None` field is
    /// unlimited, so `SetQuotaRequest::default()` lifts every limit. Values
    /// are checked before the request is sent (`Error::InvalidParams` names
    /// the field). A lower quota stops nothing that runs; it refuses what
    /// would pass it (403 `quota_exceeded`).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client, id: &str) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::api::SetQuotaRequest;
    /// let q = SetQuotaRequest { sandboxes: Some(5), memory_gb: Some(16.0), ..Default::default() };
    /// client.set_quota(id, &q).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_quota(
        &self,
        account_id: &str,
        quota: &SetQuotaRequest,
    ) -> Result<QuotaResponse, Error> {
        if let Err(errs) = quota.check() {
            let first = errs.0.into_iter().next();
            let (field, message) = first.map_or_else(
                || ("quota".to_owned(), "invalid".to_owned()),
                |e| (e.field, e.message),
            );
            return Err(Error::invalid(&field, message));
        }
        let path = format!("/api/v1/accounts/{}/quota", path_segment(account_id)?);
        self.send(self.request(Method::PUT, &path).json(quota))
            .await
    }
}

/// An account id as one path segment: letters and digits only.
fn path_segment(id: &str) -> Result<&str, Error> {
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(Error::invalid(
            "account_id",
            format!("'{id}' is not an account id"),
        ));
    }
    Ok(id)
}
