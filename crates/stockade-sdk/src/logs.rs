//! Logs of a sandbox's main process: recent lines, or a live stream
//! that resumes after the last line it saw when its connection drops.

use std::sync::{Arc, Mutex};

use chrono::DateTime;
use futures_util::stream::{self, BoxStream, StreamExt};
use reqwest::Method;
use stockade_api::{LogLineResponse, LogsEndEvent, LogsResponse};

use crate::client::Client;
use crate::error::Error;
use crate::sandbox::Sandbox;
use crate::sse::{Resuming, SseReader};

/// Where a log stream starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowLogs {
    /// Lines of history first (default 100, at most 10000).
    pub tail: Option<usize>,
    /// Start after this line id instead (a [`LogLineResponse::id`]).
    pub after: Option<String>,
}

impl FollowLogs {
    new_and_setters! {
        tail(lines: usize) => tail = lines;
        after(last_event_id: impl Into<String>) => after = last_event_id.into();
    }
}

#[derive(Debug, Default)]
struct Progress {
    last_event_id: Option<String>,
    end_reason: Option<String>,
}

/// Live log lines: a [`Stream`] of [`LogLineResponse`]s that ends when the
/// sandbox stops. A dropped connection is resumed after the last line seen,
/// without duplicates.
pub struct LogStream {
    inner: BoxStream<'static, Result<LogLineResponse, Error>>,
    progress: Arc<Mutex<Progress>>,
}

impl std::fmt::Debug for LogStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStream")
            .field("last_event_id", &self.last_event_id())
            .finish()
    }
}

stream_of_inner!(LogStream, LogLineResponse);

impl LogStream {
    /// The id of the last line delivered: pass it to [`FollowLogs::after`]
    /// to continue later.
    pub fn last_event_id(&self) -> Option<String> {
        self.progress
            .lock()
            .ok()
            .and_then(|p| p.last_event_id.clone())
    }

    /// Why the stream ended (e.g. `sandbox stopped`), once it has.
    pub fn end_reason(&self) -> Option<String> {
        self.progress.lock().ok().and_then(|p| p.end_reason.clone())
    }
}

/// A line's time, from its id (`<Docker timestamp in ns>-<n>`).
fn timestamp_of(id: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let ns: i64 = id.split('-').next()?.parse().ok()?;
    Some(DateTime::from_timestamp_nanos(ns))
}

struct Follower {
    client: Client,
    sandbox_id: String,
    tail: Option<usize>,
    progress: Arc<Mutex<Progress>>,
    stream: Resuming,
}

/// Opens the log stream: after the last line seen, else with the history
/// asked for.
async fn connect(
    client: &Client,
    sandbox_id: &str,
    tail: Option<usize>,
    progress: &Mutex<Progress>,
) -> Result<SseReader, Error> {
    let mut req = client
        .request(Method::GET, &format!("/api/v1/sandbox/{sandbox_id}/logs"))
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .query(&[("follow", "true")]);
    match progress.lock().ok().and_then(|p| p.last_event_id.clone()) {
        Some(id) => req = req.header("Last-Event-ID", id),
        None => {
            if let Some(t) = tail {
                req = req.query(&[("tail", t.to_string())]);
            }
        }
    }
    Ok(SseReader::new(client.send_raw(req).await?))
}

impl Follower {
    fn end(&mut self, reason: String) {
        if let Ok(mut p) = self.progress.lock() {
            p.end_reason = Some(reason);
        }
        self.stream.done = true;
    }

    async fn next(&mut self) -> Option<Result<LogLineResponse, Error>> {
        loop {
            let (client, id, tail, progress) =
                (&self.client, &self.sandbox_id, self.tail, &self.progress);
            let event = match self
                .stream
                .next(client.base_url(), || connect(client, id, tail, progress))
                .await?
            {
                Ok(event) => event,
                Err(e) => return Some(Err(e)),
            };
            match event.event.as_str() {
                "stdout" | "stderr" => {
                    self.stream.progressed();
                    let id = event.id.unwrap_or_default();
                    if let Ok(mut p) = self.progress.lock() {
                        p.last_event_id = Some(id.clone());
                    }
                    let timestamp = timestamp_of(&id).unwrap_or_default();
                    return Some(Ok(LogLineResponse {
                        id,
                        stream: event.event,
                        text: event.data,
                        timestamp,
                    }));
                }
                "end" => {
                    let reason = serde_json::from_str::<LogsEndEvent>(&event.data)
                        .map(|e| e.reason)
                        .unwrap_or(event.data);
                    // The server's stream ended while the sandbox runs on:
                    // go on after the last line (backing off if that keeps
                    // happening without a line between).
                    if reason.contains("reconnect") && self.stream.reconnect().await {
                        continue;
                    }
                    self.end(reason);
                    return None;
                }
                "error" => {
                    self.stream.done = true;
                    return Some(Err(Error::Decode(format!(
                        "the log stream failed: {}",
                        event.data
                    ))));
                }
                _ => {}
            }
        }
    }
}

impl Sandbox {
    /// The main process's last `tail` lines (0–10000), oldest first.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// for line in sb.logs(50).await?.lines {
    ///     println!("[{}] {}", line.stream, line.text);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn logs(&self, tail: usize) -> Result<LogsResponse, Error> {
        let req = self
            .client()
            .request(Method::GET, &format!("/api/v1/sandbox/{}/logs", self.id()))
            .query(&[("tail", tail.to_string())]);
        self.client().send(req).await
    }

    /// Follows the main process's output: the history asked for, then new
    /// lines as they come, until the sandbox stops. Dropping the stream
    /// closes the connection.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{FollowLogs, StreamExt};
    /// let mut logs = sb.follow_logs(FollowLogs::new().tail(10)).await?;
    /// while let Some(line) = logs.next().await {
    ///     println!("{}", line?.text);
    /// }
    /// println!("ended: {:?}; resume after {:?}", logs.end_reason(), logs.last_event_id());
    /// # Ok(()) }
    /// ```
    pub async fn follow_logs(&self, from: FollowLogs) -> Result<LogStream, Error> {
        let progress = Arc::new(Mutex::new(Progress {
            last_event_id: from.after.clone(),
            end_reason: None,
        }));
        // The first connection's errors (404, 409 …) belong to this call.
        let first = connect(self.client(), self.id(), from.tail, &progress).await?;
        let follower = Follower {
            client: self.client().clone(),
            sandbox_id: self.id().to_owned(),
            tail: from.tail,
            progress: progress.clone(),
            stream: Resuming::new(first, "log stream"),
        };
        let inner = stream::unfold(follower, |mut f| async move {
            f.next().await.map(|item| (item, f))
        })
        .boxed();
        Ok(LogStream { inner, progress })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_ids_carry_their_time() {
        let t = timestamp_of("1700000000123456789-2").unwrap();
        assert_eq!(t.timestamp(), 1_700_000_000);
        assert_eq!(t.timestamp_subsec_nanos(), 123_456_789);
        assert!(timestamp_of("x-1").is_none());
    }
}
