//! The HTTP side of the CLI: accounts and health.

use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Subcommand;
use serde::de::DeserializeOwned;
use stockade_api::{
    CreateAccountRequest, CreateAccountResponse, ErrorBody, HealthResponse, ListAccountsResponse,
};

#[derive(Subcommand)]
pub enum AccountCommand {
    /// Create an account and print its API token (shown once).
    Create {
        /// Account name (letters, digits, _ . - @).
        name: String,
        /// Make it an administrator.
        #[arg(long)]
        admin: bool,
    },
    /// List accounts.
    Ls,
}

pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(url: &str, token: Option<&str>) -> anyhow::Result<Self> {
        Ok(Self {
            base: url.trim_end_matches('/').to_owned(),
            token: token.map(str::to_owned),
            http: reqwest::Client::builder()
                .build()
                .context("could not build the HTTP client")?,
        })
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> anyhow::Result<reqwest::RequestBuilder> {
        let req = self.http.request(method, format!("{}{path}", self.base));
        Ok(match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        })
    }

    fn need_token(&self) -> anyhow::Result<()> {
        if self.token.is_none() {
            bail!("no API token: pass --token or set STOCKADE_TOKEN");
        }
        Ok(())
    }

    async fn send<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> anyhow::Result<T> {
        let resp = req.send().await.with_context(|| {
            format!(
                "could not reach the Stockade server at {} (is it running? set STOCKADE_URL)",
                self.base
            )
        })?;
        let status = resp.status();
        let bytes = resp.bytes().await.context("could not read the response")?;
        if !status.is_success() {
            if let Ok(err) = serde_json::from_slice::<ErrorBody>(&bytes) {
                bail!("{} ({})", err.error.message, status.as_u16());
            }
            bail!("the server answered {status}");
        }
        serde_json::from_slice(&bytes).context("the server sent an unexpected response")
    }
}

pub async fn account(c: &Client, cmd: AccountCommand, json: bool) -> anyhow::Result<ExitCode> {
    c.need_token()?;
    match cmd {
        AccountCommand::Create { name, admin } => {
            let body = CreateAccountRequest {
                name,
                is_admin: admin,
            };
            let resp: CreateAccountResponse = c
                .send(
                    c.request(reqwest::Method::POST, "/api/v1/accounts")?
                        .json(&body),
                )
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&resp)?);
            } else {
                println!(
                    "Created account {} ({})",
                    resp.account.name, resp.account.id
                );
                println!("API token (shown once): {}", resp.token);
            }
        }
        AccountCommand::Ls => {
            let resp: ListAccountsResponse = c
                .send(c.request(reqwest::Method::GET, "/api/v1/accounts")?)
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&resp)?);
            } else {
                println!("{:<18} {:<24} {:<6} CREATED", "ID", "NAME", "ADMIN");
                for a in resp.accounts {
                    println!(
                        "{:<18} {:<24} {:<6} {}",
                        a.id,
                        a.name,
                        if a.is_admin { "yes" } else { "" },
                        a.created_at.format("%Y-%m-%d %H:%M:%S")
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn health(c: &Client, json: bool) -> anyhow::Result<ExitCode> {
    let resp = c
        .request(reqwest::Method::GET, "/api/v1/health")?
        .send()
        .await
        .with_context(|| format!("could not reach the Stockade server at {}", c.base))?;
    let code = resp.status();
    let h: HealthResponse = resp.json().await.context("unexpected health response")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&h)?);
    } else {
        println!("status:   {}", h.status);
        match (&h.docker.version, &h.docker.api_version) {
            (Some(v), Some(a)) => println!("docker:   {} (Docker {v}, API {a})", h.docker.status),
            _ => println!("docker:   {}", h.docker.status),
        }
        if let Some(e) = &h.docker.error {
            println!("  error:  {e}");
        }
        for t in &h.docker.troubleshooting {
            println!("  - {t}");
        }
        println!("database: {} ({})", h.database.status, h.database.backend);
        if let Some(e) = &h.database.error {
            println!("  error:  {e}");
        }
    }
    Ok(if code.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
