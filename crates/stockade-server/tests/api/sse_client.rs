//! A minimal Server-Sent Events client for the tests: reads events (type,
//! id, data) from a streaming response as the SSE format defines them.

use std::time::Duration;

use futures_util::stream::{BoxStream, StreamExt};
use reqwest::header::HeaderMap;

/// One event as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

pub struct SseStream {
    pub status: reqwest::StatusCode,
    pub headers: HeaderMap,
    body: BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    buf: Vec<u8>,
    /// Comments (keep-alives) seen so far.
    pub comments: usize,
}

impl SseStream {
    /// GETs or POSTs `url` with `Accept: text/event-stream`.
    pub async fn open(req: reqwest::RequestBuilder) -> SseStream {
        let resp = req
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("request");
        SseStream {
            status: resp.status(),
            headers: resp.headers().clone(),
            body: resp.bytes_stream().boxed(),
            buf: Vec::new(),
            comments: 0,
        }
    }

    /// The next event, or `None` when the stream ended. Panics after `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<SseEvent> {
        tokio::time::timeout(wait, self.next())
            .await
            .unwrap_or_else(|_| panic!("no SSE event within {wait:?}"))
    }

    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.parse_one() {
                return Some(event);
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => panic!("SSE body failed: {e}"),
                None => return None,
            }
        }
    }

    /// Reads until `n` comments (keep-alives) came; returns the events seen
    /// meanwhile. Panics after `wait`.
    pub async fn until_comments(&mut self, n: usize, wait: Duration) -> Vec<SseEvent> {
        tokio::time::timeout(wait, async {
            let mut events = Vec::new();
            loop {
                while let Some(e) = self.parse_one() {
                    events.push(e);
                }
                if self.comments >= n {
                    return events;
                }
                match self.body.next().await {
                    Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                    other => panic!("the stream ended or failed: {other:?}"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("fewer than {n} comments within {wait:?}"))
    }

    /// Every remaining event until the stream ends (panics after `wait`).
    pub async fn rest(&mut self, wait: Duration) -> Vec<SseEvent> {
        tokio::time::timeout(wait, async {
            let mut all = Vec::new();
            while let Some(e) = self.next().await {
                all.push(e);
            }
            all
        })
        .await
        .unwrap_or_else(|_| panic!("the SSE stream did not end within {wait:?}"))
    }

    /// Takes one complete event (blank-line terminated) out of the buffer.
    fn parse_one(&mut self) -> Option<SseEvent> {
        loop {
            let end = self.buf.windows(2).position(|w| w == b"\n\n")?;
            let block = String::from_utf8(self.buf[..end].to_vec()).expect("SSE is UTF-8");
            self.buf.drain(..end + 2);
            let mut event = SseEvent {
                event: "message".into(),
                id: None,
                data: String::new(),
            };
            let mut data_lines: Vec<String> = Vec::new();
            let mut only_comments = true;
            for line in block.split('\n') {
                if line.starts_with(':') {
                    self.comments += 1;
                    continue;
                }
                only_comments = false;
                let (field, value) = match line.split_once(':') {
                    Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                    None => (line, ""),
                };
                match field {
                    "event" => event.event = value.to_owned(),
                    "id" => event.id = Some(value.to_owned()),
                    "data" => data_lines.push(value.to_owned()),
                    _ => {}
                }
            }
            if only_comments {
                continue;
            }
            event.data = data_lines.join("\n");
            return Some(event);
        }
    }
}
