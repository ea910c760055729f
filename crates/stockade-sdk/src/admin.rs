//! Server-level calls: health, accounts (admin), who am I, quotas, API
//! tokens and dashboard sessions, disabling accounts (admin), and the
//! Docker hosts sandboxes are placed on (admin).

use std::time::Duration;

use reqwest::Method;
use stockade_api::{
    AccountResponse, CreateAccountRequest, CreateAccountResponse, CreateHostRequest,
    CreateTokenRequest, CreateTokenResponse, EmptyRequest, HealthResponse, HostResponse,
    ListAccountsResponse, ListHostsResponse, ListTokensResponse, QuotaResponse, SetQuotaRequest,
    UpdateHostRequest, WhoAmIResponse,
};

use crate::client::{api_error, Client};
use crate::error::Error;

impl Client {
    /// The server's health. An unhealthy server answers 503 with the same
    /// document, which is returned as `Ok` too: look at `status`.
    pub async fn health(&self) -> Result<HealthResponse, Error> {
        let (status, bytes) = self.health_document().await?;
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
        let (status, bytes) = self.health_document().await?;
        let doc: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|_| api_error(status, &bytes))?;
        Ok(doc["defaults"]["image"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned))
    }

    /// The status and the body of `GET /api/v1/health`, whatever the status:
    /// an unhealthy server answers 503 with the same document.
    async fn health_document(&self) -> Result<(u16, bytes::Bytes), Error> {
        let resp = self
            .request(Method::GET, "/api/v1/health")
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        Ok((status, bytes))
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

    /// The quota of an account and what it uses of it: an
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

    /// Makes an API token of an account (its own, or any for an
    /// administrator) named `name` (1 to 64 characters: what it is for),
    /// valid for `expires_in` (60 s to ten years, whole seconds) or, with
    /// `None`, until it is revoked. The answer's `token` is the secret,
    /// shown this once: only its hash is stored.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use std::time::Duration;
    /// let me = client.whoami().await?;
    /// let ci = client
    ///     .create_token(&me.account.id, "ci", Some(Duration::from_secs(30 * 86_400)))
    ///     .await?;
    /// println!("{} expires at {:?}: {}", ci.id, ci.expires_at, ci.token);
    /// # Ok(()) }
    /// ```
    pub async fn create_token(
        &self,
        account_id: &str,
        name: &str,
        expires_in: Option<Duration>,
    ) -> Result<CreateTokenResponse, Error> {
        let trimmed = name.trim();
        if trimmed.is_empty() || trimmed.chars().count() > MAX_TOKEN_NAME {
            return Err(Error::invalid(
                "name",
                format!("must be 1 to {MAX_TOKEN_NAME} characters"),
            ));
        }
        let expires_in_seconds = match expires_in {
            None => None,
            Some(d) => Some(
                i64::try_from(d.as_secs())
                    .map_err(|_| Error::invalid("expiresInSeconds", "is more than ten years"))?,
            ),
        };
        let body = CreateTokenRequest {
            name: trimmed.to_owned(),
            expires_in_seconds,
        };
        let path = format!("/api/v1/accounts/{}/tokens", path_segment(account_id)?);
        self.send(self.request(Method::POST, &path).json(&body))
            .await
    }

    /// The API tokens and dashboard sessions (`kind` `api` or `session`)
    /// of an account, newest first, never their secrets: for the account
    /// itself and for administrators.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let me = client.whoami().await?;
    /// for t in client.list_tokens(&me.account.id).await?.tokens {
    ///     println!("{} {} {} last used {:?}", t.id, t.name, t.kind, t.last_used_at);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_tokens(&self, account_id: &str) -> Result<ListTokensResponse, Error> {
        let path = format!("/api/v1/accounts/{}/tokens", path_segment(account_id)?);
        self.send(self.request(Method::GET, &path)).await
    }

    /// Revokes an API token by its id (from [`Client::list_tokens`], never
    /// the secret), with the dashboard sessions opened with it, or ends one
    /// session. It is refused from the next request on. A token of another
    /// account is not found unless the caller is an administrator.
    pub async fn revoke_token(&self, token_id: &str) -> Result<(), Error> {
        let path = format!("/api/v1/tokens/{}", token_segment(token_id)?);
        self.send_empty(self.request(Method::DELETE, &path)).await
    }

    /// Disables an account (admin only): its API tokens, dashboard
    /// sessions and sandbox tokens are refused (403) until it is enabled
    /// again; its sandboxes stay as they are. An administrator's own
    /// account is a 409.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client, id: &str) -> Result<(), stockade_sdk::Error> {
    /// let account = client.disable_account(id).await?;
    /// assert!(account.disabled_at.is_some());
    /// client.enable_account(id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn disable_account(&self, account_id: &str) -> Result<AccountResponse, Error> {
        let path = format!("/api/v1/accounts/{}/disable", path_segment(account_id)?);
        self.send(self.request(Method::POST, &path).json(&EmptyRequest {}))
            .await
    }

    /// Enables a disabled account again (admin only): its tokens and
    /// sessions work as before.
    pub async fn enable_account(&self, account_id: &str) -> Result<AccountResponse, Error> {
        let path = format!("/api/v1/accounts/{}/enable", path_segment(account_id)?);
        self.send(self.request(Method::POST, &path).json(&EmptyRequest {}))
            .await
    }

    /// Every Docker host, by name, with its state, health, capacity and
    /// load (admin only).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// for h in client.hosts().await?.hosts {
    ///     println!("{} {} {} sandboxes", h.name, h.state, h.sandboxes);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn hosts(&self) -> Result<ListHostsResponse, Error> {
        self.send(self.request(Method::GET, "/api/v1/hosts")).await
    }

    /// One Docker host (admin only).
    pub async fn host(&self, name: &str) -> Result<HostResponse, Error> {
        let path = format!("/api/v1/hosts/{}", host_segment(name)?);
        self.send(self.request(Method::GET, &path)).await
    }

    /// Registers a Docker host (admin only). The server connects to its
    /// engine first: one it cannot reach is a 400 naming `dockerHost`.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::api::CreateHostRequest;
    /// let host = client
    ///     .add_host(&CreateHostRequest {
    ///         name: "docker-2".into(),
    ///         docker_host: "ssh://root@10.0.0.12".into(),
    ///         ..Default::default()
    ///     })
    ///     .await?;
    /// println!("{} has {:?} CPUs", host.name, host.capacity.cpus);
    /// # Ok(()) }
    /// ```
    pub async fn add_host(&self, params: &CreateHostRequest) -> Result<HostResponse, Error> {
        host_segment(&params.name)?;
        self.send(self.request(Method::POST, "/api/v1/hosts").json(params))
            .await
    }

    /// Changes a Docker host (admin only): `state` `cordoned` (no new
    /// sandboxes), `active` or `draining`, a reason, labels, capacity or
    /// address; what is `None` stays.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::api::UpdateHostRequest;
    /// let cordon = UpdateHostRequest {
    ///     state: Some("cordoned".into()),
    ///     reason: Some("kernel upgrade".into()),
    ///     ..Default::default()
    /// };
    /// client.update_host("docker-2", &cordon).await?;
    /// # Ok(()) }
    /// ```
    pub async fn update_host(
        &self,
        name: &str,
        patch: &UpdateHostRequest,
    ) -> Result<HostResponse, Error> {
        let path = format!("/api/v1/hosts/{}", host_segment(name)?);
        self.send(self.request(Method::PATCH, &path).json(patch))
            .await
    }

    /// Removes a Docker host that holds no sandbox (admin only); the
    /// server's own host and one that holds sandboxes are a 409.
    pub async fn remove_host(&self, name: &str) -> Result<(), Error> {
        let path = format!("/api/v1/hosts/{}", host_segment(name)?);
        self.send_empty(self.request(Method::DELETE, &path)).await
    }
}

/// A host name as one path segment: lowercase letters, digits and `-`.
fn host_segment(name: &str) -> Result<&str, Error> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(Error::invalid(
            "name",
            format!("'{name}' is not a host name"),
        ));
    }
    Ok(name)
}

/// The longest name a token may have.
const MAX_TOKEN_NAME: usize = 64;

/// A token id as one path segment: lowercase letters and digits.
fn token_segment(id: &str) -> Result<&str, Error> {
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(Error::invalid(
            "token_id",
            format!("'{id}' is not a token id (`list_tokens` gives them; never the secret)"),
        ));
    }
    Ok(id)
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
