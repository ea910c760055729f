//! Server-Sent Events: encoding one event exactly (an empty line still has a
//! `data:` field) and a response that sends a keep-alive comment when the
//! stream is idle.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{BoxStream, Stream, StreamExt};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

/// The keep-alive comment.
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// One event: `event: <kind>`, an optional `id:`, and `data:` lines (a line
/// break in the data, `\n`, `\r\n` or `\r`, starts a new `data:` line, as
/// the SSE format requires).
pub fn event(kind: &str, id: Option<&str>, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + kind.len() + 32);
    out.push_str("event: ");
    out.push_str(&single_line(kind));
    out.push('\n');
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(&single_line(id));
        out.push('\n');
    }
    let mut rest = data;
    loop {
        out.push_str("data: ");
        match rest.find(['\r', '\n']) {
            Some(i) => {
                out.push_str(&rest[..i]);
                out.push('\n');
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[i + skip..];
            }
            None => {
                out.push_str(rest);
                out.push('\n');
                break;
            }
        }
    }
    out.push('\n');
    Bytes::from(out)
}

/// An event whose data is `value` as JSON (one line).
pub fn json_event(kind: &str, value: &impl serde::Serialize) -> Bytes {
    let data = serde_json::to_string(value).unwrap_or_else(|_| "null".into());
    event(kind, None, &data)
}

fn single_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\r', '\n', '\0']) {
        return std::borrow::Cow::Borrowed(s);
    }
    s.chars()
        .filter(|c| !matches!(c, '\r' | '\n' | '\0'))
        .collect()
}

/// The client asked for an event stream (`Accept: text/event-stream`).
pub fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| {
            v.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}

/// The event that ends every stream when the server shuts down.
pub const SHUTDOWN_EVENT: &str =
    "event: end\ndata: {\"reason\":\"the server is shutting down\"}\n\n";

/// A source of events made a few at a time: each step queues the next
/// ones and says whether they end the stream.
pub trait Steps: Send + 'static {
    fn step(&mut self, queue: &mut VecDeque<Bytes>) -> impl Future<Output = bool> + Send;
}

/// The events of `steps` in order, until a step ends the stream.
pub fn stepped<S: Steps>(steps: S) -> BoxStream<'static, Bytes> {
    let start = (steps, VecDeque::new(), false);
    futures_util::stream::unfold(start, |(mut steps, mut queue, mut done)| async move {
        loop {
            if let Some(bytes) = queue.pop_front() {
                return Some((bytes, (steps, queue, done)));
            }
            if done {
                return None;
            }
            done = steps.step(&mut queue).await;
        }
    })
    .boxed()
}

/// A `text/event-stream` response over already encoded events; a comment
/// goes out whenever nothing was sent for `keep_alive`. When `shutdown` is
/// cancelled the stream sends a final `end` event and closes, so that a
/// graceful shutdown does not wait for followers.
pub fn response(
    events: BoxStream<'static, Bytes>,
    keep_alive: Duration,
    shutdown: &CancellationToken,
) -> Response {
    let stopping = shutdown.clone();
    let ended_by_shutdown = shutdown.clone();
    let events = events
        .take_until(stopping.cancelled_owned())
        .chain(futures_util::stream::iter(
            std::iter::once(Bytes::from_static(SHUTDOWN_EVENT.as_bytes()))
                .filter(move |_| ended_by_shutdown.is_cancelled()),
        ))
        .boxed();
    let body = Body::from_stream(KeepAlive::new(events, keep_alive).map(Ok::<_, Infallible>));
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Reverse proxies (nginx) must not buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// The most bytes of ready events sent as one chunk of the response body.
const MAX_BATCH: usize = 64 * 1024;

/// Interleaves keep-alive comments into an idle stream, and sends the
/// events that are ready at the same moment as one chunk: a log of a
/// million lines is not a million body chunks (each with its own framing,
/// write and client-side decode), and nothing waits for a batch to fill.
struct KeepAlive {
    inner: BoxStream<'static, Bytes>,
    interval: Duration,
    sleep: Pin<Box<Sleep>>,
    /// When the last chunk went out; the timer is moved on lazily.
    last_sent: Instant,
    ended: bool,
}

impl KeepAlive {
    fn new(inner: BoxStream<'static, Bytes>, interval: Duration) -> Self {
        let interval = interval.max(Duration::from_millis(10));
        Self {
            inner,
            interval,
            sleep: Box::pin(tokio::time::sleep(interval)),
            last_sent: Instant::now(),
            ended: false,
        }
    }
}

impl Stream for KeepAlive {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        let mut batch: Option<Vec<u8>> = None;
        let mut first: Option<Bytes> = None;
        loop {
            match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(bytes)) => match (&mut first, &mut batch) {
                    (None, None) => first = Some(bytes),
                    (Some(f), None) => {
                        let mut b = Vec::with_capacity(MAX_BATCH.max(f.len() + bytes.len()));
                        b.extend_from_slice(f);
                        b.extend_from_slice(&bytes);
                        first = None;
                        batch = Some(b);
                    }
                    (_, Some(b)) => b.extend_from_slice(&bytes),
                },
                Poll::Ready(None) => {
                    this.ended = true;
                    break;
                }
                Poll::Pending => break,
            }
            let size = batch
                .as_ref()
                .map_or_else(|| first.as_ref().map_or(0, Bytes::len), Vec::len);
            if size >= MAX_BATCH {
                break;
            }
        }
        if let Some(out) = batch.map(Bytes::from).or(first) {
            this.last_sent = Instant::now();
            return Poll::Ready(Some(out));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        // Idle: a comment once nothing went out for the interval.
        loop {
            match this.sleep.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) => {
                    let due = this.last_sent + this.interval;
                    if Instant::now() >= due {
                        this.last_sent = Instant::now();
                        this.sleep.as_mut().reset(this.last_sent + this.interval);
                        return Poll::Ready(Some(Bytes::from_static(KEEP_ALIVE)));
                    }
                    this.sleep.as_mut().reset(due);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_encoded_exactly() {
        assert_eq!(
            event("stdout", Some("12-0"), "hello"),
            "event: stdout\nid: 12-0\ndata: hello\n\n"
        );
        assert_eq!(event("stdout", None, ""), "event: stdout\ndata: \n\n");
        assert_eq!(
            event("stderr", None, "a\r\nb\rc\nd"),
            "event: stderr\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
        );
        assert_eq!(
            event("x\ny", Some("1\r2"), "z"),
            "event: xy\nid: 12\ndata: z\n\n"
        );
        assert_eq!(
            json_event("exit", &serde_json::json!({"exitCode": 0, "s": "a\nb"})),
            "event: exit\ndata: {\"exitCode\":0,\"s\":\"a\\nb\"}\n\n"
        );
    }

    #[test]
    fn accept_headers() {
        let mut h = HeaderMap::new();
        assert!(!wants_event_stream(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, Text/Event-Stream;q=0.9"),
        );
        assert!(wants_event_stream(&h));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(!wants_event_stream(&h));
    }

    #[tokio::test]
    async fn events_ready_together_go_out_as_one_chunk_and_nothing_waits() {
        let events: Vec<Bytes> = (0..10_000)
            .map(|i| event("stdout", Some(&format!("{i}-0")), "line"))
            .collect();
        let total: usize = events.iter().map(Bytes::len).sum();
        let expected: Vec<u8> = events.iter().flat_map(|b| b.to_vec()).collect();
        let mut s = KeepAlive::new(
            futures_util::stream::iter(events).boxed(),
            Duration::from_secs(60),
        );
        let mut chunks = Vec::new();
        while let Some(c) = s.next().await {
            assert!(c.len() <= MAX_BATCH + 64, "{}", c.len());
            chunks.push(c);
        }
        assert!(
            chunks.len() <= total / MAX_BATCH + 1,
            "{} chunks",
            chunks.len()
        );
        assert_eq!(chunks.concat(), expected, "every byte, in order");

        // One event ready: it goes at once, alone.
        let (tx, inner) = channel_stream();
        let mut s = KeepAlive::new(inner, Duration::from_secs(60));
        tx.send(Bytes::from_static(b"one")).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(1), s.next()).await;
        assert_eq!(got.unwrap().unwrap(), "one");
    }

    /// A stream of what is sent on the returned sender, ending when it is
    /// dropped.
    fn channel_stream() -> (
        tokio::sync::mpsc::Sender<Bytes>,
        futures_util::stream::BoxStream<'static, Bytes>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|b| (b, rx)) },
            );
        (tx, stream.boxed())
    }

    #[tokio::test]
    async fn idle_streams_get_keep_alives_and_end_with_their_source() {
        let (tx, inner) = channel_stream();
        let mut s = KeepAlive::new(inner, Duration::from_millis(50));
        tx.send(Bytes::from_static(b"one")).await.unwrap();
        assert_eq!(s.next().await.unwrap(), "one");
        // Nothing for the interval: a comment.
        assert_eq!(s.next().await.unwrap(), KEEP_ALIVE);
        tx.send(Bytes::from_static(b"two")).await.unwrap();
        assert_eq!(s.next().await.unwrap(), "two");
        drop(tx);
        assert!(s.next().await.is_none());
    }
}
