//! Stockade's side: the public HTTP API, called the way any client calls it
//! (one keep-alive connection pool, JSON bodies, SSE for logs, a WebSocket
//! for terminals).

use anyhow::{bail, Context};
use futures_util::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A terminal's WebSocket.
pub type Terminal =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A client of the server under test.
#[derive(Clone)]
pub struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .context("could not build the HTTP client")?;
        Ok(Self {
            base: base.to_owned(),
            token: token.to_owned(),
            http,
        })
    }

    /// `method` on `path` below the server's base, with the token and the
    /// JSON `body`, sent.
    async fn send(
        &self,
        method: &Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Result<reqwest::Response> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().await
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        expect: StatusCode,
    ) -> anyhow::Result<Value> {
        let (status, text) = self.text(&method, path, body).await?;
        if status != expect {
            bail!("{method} {path}: expected {expect}, got {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("{method} {path}: not JSON: {text}"))
    }

    /// `method` on `path` with `body`: the status and the JSON answer,
    /// whatever the status (for calls that are refused on purpose).
    pub async fn answer(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let (status, text) = self.text(&method, path, body).await?;
        let v = serde_json::from_str(&text)
            .with_context(|| format!("{method} {path}: not JSON ({status}): {text}"))?;
        Ok((status, v))
    }

    /// `method` on `path` with `body`: the status and the body's text.
    async fn text(
        &self,
        method: &Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, String)> {
        let resp = self
            .send(method, path, body)
            .await
            .with_context(|| format!("{method} {path}: no answer"))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .with_context(|| format!("{method} {path}: body"))?;
        Ok((status, text))
    }

    /// The caller's account (the cheapest authenticated request).
    pub async fn me(&self) -> anyhow::Result<()> {
        self.call(Method::GET, "/api/v1/me", None, StatusCode::OK)
            .await
            .map(|_| ())
    }

    /// Creates a sandbox; returns its id once it is RUNNING.
    pub async fn create(&self, body: Value) -> anyhow::Result<String> {
        self.create_placed(body).await.map(|(id, _)| id)
    }

    /// Creates a sandbox; returns its id and the host it was placed on
    /// (`server`) once it is RUNNING.
    pub async fn create_placed(&self, body: Value) -> anyhow::Result<(String, String)> {
        let v = self
            .call(
                Method::POST,
                "/api/v1/sandbox",
                Some(body),
                StatusCode::CREATED,
            )
            .await?;
        if v["status"] != "RUNNING" {
            bail!("create returned status {} instead of RUNNING", v["status"]);
        }
        let id = v["id"]
            .as_str()
            .map(str::to_owned)
            .context("create: the answer has no id")?;
        let server = v["server"]
            .as_str()
            .map(str::to_owned)
            .context("create: the answer has no server")?;
        Ok((id, server))
    }

    /// An administrator's request about Docker hosts (`/api/v1/hosts…`):
    /// `method` on `path` below `/api/v1`, answered with `expect`.
    pub async fn hosts_call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        expect: StatusCode,
    ) -> anyhow::Result<()> {
        if expect == StatusCode::NO_CONTENT {
            let resp = self
                .send(&method, &format!("/api/v1{path}"), body)
                .await
                .with_context(|| format!("{method} {path}: no answer"))?;
            let status = resp.status();
            if status != expect {
                let text = resp.text().await.unwrap_or_default();
                bail!("{method} {path}: expected {expect}, got {status}: {text}");
            }
            return Ok(());
        }
        self.call(method, &format!("/api/v1{path}"), body, expect)
            .await
            .map(drop)
    }

    /// Registers a webhook named `name` that POSTs every event type to
    /// `url`, signed with `secret`; returns its id.
    pub async fn create_webhook(
        &self,
        name: &str,
        url: &str,
        secret: &str,
    ) -> anyhow::Result<String> {
        let v = self
            .call(
                Method::POST,
                "/api/v1/webhooks",
                Some(json!({ "name": name, "url": url, "signatureSecret": secret })),
                StatusCode::CREATED,
            )
            .await?;
        v["id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("webhook create: no id in {v}"))
    }

    /// Removes webhook `id` (and its pending deliveries).
    pub async fn delete_webhook(&self, id: &str) -> anyhow::Result<()> {
        let path = format!("/api/v1/webhooks/{id}");
        let (status, text) = self.text(&Method::DELETE, &path, None).await?;
        if status != StatusCode::NO_CONTENT {
            bail!("DELETE {path}: expected 204, got {status}: {text}");
        }
        Ok(())
    }

    /// Every event of the caller's feed after `since` (all kept ones when
    /// `None`), oldest first, and the cursor to read on from.
    pub async fn events_since(
        &self,
        since: Option<&str>,
    ) -> anyhow::Result<(Vec<Value>, Option<String>)> {
        const PAGE: usize = 100;
        let mut cursor = since.map(str::to_owned);
        let mut events = Vec::new();
        loop {
            let query = match &cursor {
                Some(c) => format!("?since={c}&limit={PAGE}"),
                None => format!("?limit={PAGE}"),
            };
            let v = self
                .call(
                    Method::GET,
                    &format!("/api/v1/events{query}"),
                    None,
                    StatusCode::OK,
                )
                .await?;
            let page = v["events"]
                .as_array()
                .with_context(|| format!("events: no events in {v}"))?;
            let full = page.len() == PAGE;
            events.extend(page.iter().cloned());
            if let Some(next) = v["nextCursor"].as_str().filter(|c| !c.is_empty()) {
                cursor = Some(next.to_owned());
            }
            if !full {
                return Ok((events, cursor));
            }
        }
    }

    /// Runs `argv` (buffered); returns the exit code and stdout.
    pub async fn exec(&self, id: &str, argv: &[&str]) -> anyhow::Result<(i64, String)> {
        let v = self
            .call(
                Method::POST,
                &format!("/api/v1/sandbox/{id}/exec"),
                Some(json!({ "cmd": argv })),
                StatusCode::OK,
            )
            .await?;
        Ok((
            v["exitCode"].as_i64().unwrap_or(-1),
            v["stdout"].as_str().unwrap_or_default().to_owned(),
        ))
    }

    /// Runs the cell `code` in the default Python context (buffered);
    /// returns the execution (`results`, `logs`, `error`, `executionCount`).
    pub async fn run_code(&self, id: &str, code: &str) -> anyhow::Result<Value> {
        self.call(
            Method::POST,
            &format!("/api/v1/sandbox/{id}/code"),
            Some(json!({ "code": code })),
            StatusCode::OK,
        )
        .await
    }

    /// Runs the shell command line `cmd`; returns the exit code, stdout and
    /// stderr together, and the run time the server reports (`durationMs`).
    pub async fn exec_shell(&self, id: &str, cmd: &str) -> anyhow::Result<(i64, String, f64)> {
        let v = self
            .call(
                Method::POST,
                &format!("/api/v1/sandbox/{id}/exec"),
                Some(json!({ "shell": cmd, "timeoutSeconds": 300 })),
                StatusCode::OK,
            )
            .await?;
        let duration = v["durationMs"]
            .as_f64()
            .context("exec: the answer has no durationMs")?;
        Ok((
            v["exitCode"].as_i64().unwrap_or(-1),
            format!(
                "{}{}",
                v["stdout"].as_str().unwrap_or_default(),
                v["stderr"].as_str().unwrap_or_default()
            ),
            duration,
        ))
    }

    /// `GET /api/v1/health` as the admin (any status: a degraded server
    /// answers 503 with the same document).
    pub async fn health(&self) -> anyhow::Result<Value> {
        let resp = self
            .http
            .get(format!("{}/api/v1/health", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .context("health: no answer")?;
        let text = resp.text().await.context("health: body")?;
        serde_json::from_str(&text).with_context(|| format!("health: not JSON: {text}"))
    }

    pub async fn stop(&self, id: &str) -> anyhow::Result<()> {
        let v = self
            .call(
                Method::POST,
                &format!("/api/v1/sandbox/{id}/stop"),
                None,
                StatusCode::OK,
            )
            .await?;
        if v["status"] != "STOPPED" {
            bail!("stop returned status {} instead of STOPPED", v["status"]);
        }
        Ok(())
    }

    pub async fn delete(&self, id: &str) -> anyhow::Result<()> {
        self.call(
            Method::DELETE,
            &format!("/api/v1/sandbox/{id}"),
            None,
            StatusCode::OK,
        )
        .await
        .map(|_| ())
    }

    /// Opens a terminal running the shell command line `cmd` in sandbox
    /// `id` (`GET /api/v1/sandbox/{id}/terminal`, upgraded to a WebSocket).
    /// Nagle's algorithm is off on the client's socket, as in a browser.
    pub async fn terminal(&self, id: &str, cmd: &str) -> anyhow::Result<Terminal> {
        let mut url = reqwest::Url::parse(&format!("{}/api/v1/sandbox/{id}/terminal", self.base))
            .context("terminal: URL")?;
        url.query_pairs_mut().append_pair("cmd", cmd);
        url.set_scheme("ws")
            .map_err(|()| anyhow::anyhow!("terminal: {url} cannot be a WebSocket URL"))?;
        let mut req = url
            .as_str()
            .into_client_request()
            .context("terminal: request")?;
        req.headers_mut().insert(
            "authorization",
            format!("Bearer {}", self.token)
                .parse()
                .context("terminal: the token is not a header value")?,
        );
        let (ws, _) = tokio_tungstenite::connect_async_with_config(req, None, true)
            .await
            .with_context(|| format!("terminal of {id}: could not open the WebSocket"))?;
        Ok(ws)
    }

    /// Deletes every sandbox carrying all of `labels` in one bulk request;
    /// returns how many were deleted, failing when any was not.
    pub async fn bulk_delete_labels(&self, labels: Value) -> anyhow::Result<usize> {
        let v = self
            .call(
                Method::DELETE,
                "/api/v1/sandbox/bulk",
                Some(json!({ "labels": labels })),
                StatusCode::OK,
            )
            .await?;
        let results = v["results"].as_array().cloned().unwrap_or_default();
        if let Some(failed) = results.iter().find(|r| r["deleted"] != true) {
            bail!("bulk delete: {failed}");
        }
        Ok(results.len())
    }

    /// One page of the list; returns how many sandboxes it held and the total.
    pub async fn list(&self, query: &str) -> anyhow::Result<(usize, u64)> {
        let v = self
            .call(
                Method::GET,
                &format!("/api/v1/sandbox?{query}"),
                None,
                StatusCode::OK,
            )
            .await?;
        Ok((
            v["sandboxes"].as_array().map_or(0, Vec::len),
            v["total"].as_u64().unwrap_or(0),
        ))
    }

    /// A sandbox's whole log over Server-Sent Events (resumed after `after`,
    /// a line id older than the log, and not followed). Returns the bytes of
    /// line text and the number of lines received.
    pub async fn read_logs_sse(&self, id: &str, after: &str) -> anyhow::Result<(u64, u64)> {
        let resp = self
            .http
            .get(format!(
                "{}/api/v1/sandbox/{id}/logs?follow=false",
                self.base
            ))
            .bearer_auth(&self.token)
            .header("accept", "text/event-stream")
            .header("last-event-id", after)
            .send()
            .await
            .context("logs: no answer")?;
        if resp.status() != StatusCode::OK {
            bail!(
                "logs: {} {}",
                resp.status(),
                resp.text().await.unwrap_or_default()
            );
        }
        let mut body = resp.bytes_stream();
        let mut partial: Vec<u8> = Vec::new();
        let mut sse = SseCount::default();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.context("logs: reading the stream")?;
            let mut rest: &[u8] = &chunk;
            while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
                if partial.is_empty() {
                    sse.line(&rest[..pos]);
                } else {
                    partial.extend_from_slice(&rest[..pos]);
                    sse.line(&partial);
                    partial.clear();
                }
                rest = &rest[pos + 1..];
            }
            partial.extend_from_slice(rest);
        }
        if !sse.ended {
            bail!("logs: the stream ended without its `end` event");
        }
        Ok((sse.bytes, sse.lines))
    }
}

/// Counts the log lines of an SSE stream: one event per line (`event:
/// stdout`, `id: …`, `data: TEXT`), then a final `end` event.
#[derive(Default)]
struct SseCount {
    /// The current event is a log line (`stdout` or `stderr`).
    in_line: bool,
    bytes: u64,
    lines: u64,
    ended: bool,
}

impl SseCount {
    fn line(&mut self, line: &[u8]) {
        if let Some(event) = line.strip_prefix(b"event: ") {
            self.in_line = event == b"stdout" || event == b"stderr";
            self.ended |= event == b"end";
        } else if let Some(text) = line.strip_prefix(b"data: ") {
            if self.in_line {
                self.bytes += text.len() as u64 + 1; // and the line's newline
                self.lines += 1;
            }
        } else if line.is_empty() {
            self.in_line = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_lines_are_counted_without_the_end_event() {
        let mut c = SseCount::default();
        for l in [
            "event: stdout",
            "id: 1-0",
            "data: hello",
            "",
            ": keep-alive",
            "",
            "event: stderr",
            "id: 2-0",
            "data: oops!",
            "",
            "event: end",
            "data: {\"reason\":\"end of log\"}",
            "",
        ] {
            c.line(l.as_bytes());
        }
        assert_eq!((c.bytes, c.lines, c.ended), (12, 2, true));
    }
}
