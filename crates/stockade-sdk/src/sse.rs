//! A Server-Sent Events reader over a streaming HTTP response: the event
//! type, id and data of each event, comments (keep-alives) skipped.

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};

/// One event as the SSE format defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// `message` when the event names no type.
    pub event: String,
    pub id: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Reads events from a response body.
pub(crate) struct SseReader {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    buf: Vec<u8>,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> Self {
        Self {
            body: resp.bytes_stream().boxed(),
            buf: Vec::new(),
        }
    }

    /// The next event; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Result<SseEvent, reqwest::Error>> {
        loop {
            if let Some(event) = self.parse_one() {
                return Some(Ok(event));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    // A last event without its blank line still counts.
                    if self.buf.iter().any(|b| !b.is_ascii_whitespace()) {
                        self.buf.extend_from_slice(b"\n\n");
                        if let Some(event) = self.parse_one() {
                            return Some(Ok(event));
                        }
                    }
                    return None;
                }
            }
        }
    }

    /// Takes one complete event off the buffer, skipping blocks that hold
    /// only comments.
    fn parse_one(&mut self) -> Option<SseEvent> {
        loop {
            let (end, sep) = find_blank_line(&self.buf)?;
            let block: Vec<u8> = self.buf.drain(..end + sep).take(end).collect();
            if let Some(event) = parse_block(&String::from_utf8_lossy(&block)) {
                return Some(event);
            }
        }
    }
}

/// Where the first blank line is: the end of the block and the length of
/// the separator.
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < buf.len() {
        for sep in [&b"\n\n"[..], b"\r\n\r\n", b"\r\r"] {
            if buf[i..].starts_with(sep) {
                return Some((i, sep.len()));
            }
        }
        i += 1;
    }
    None
}

fn parse_block(block: &str) -> Option<SseEvent> {
    let mut event = None;
    let mut id = None;
    let mut data: Option<String> = None;
    for line in block.split(['\n', '\r']).filter(|l| !l.is_empty()) {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => event = Some(value.to_owned()),
            "id" => id = Some(value.to_owned()),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    if event.is_none() && data.is_none() {
        return None;
    }
    Some(SseEvent {
        event: event.unwrap_or_else(|| "message".into()),
        id,
        data: data.unwrap_or_default(),
    })
}

/// How many times in a row a resuming stream reconnects before it gives up.
pub(crate) const MAX_RECONNECTS: u32 = 5;

/// The connection of a stream that resumes where it stopped (logs, the
/// event feed): it connects again when the connection drops, backing off a
/// little more each time; a request the server refused ends the stream, and
/// so do `MAX_RECONNECTS` failures in a row.
pub(crate) struct Resuming {
    reader: Option<SseReader>,
    failures: u32,
    /// The stream is over: nothing more comes.
    pub done: bool,
    /// What the errors call the stream (`log stream`).
    what: &'static str,
}

impl Resuming {
    /// A stream already connected through `reader`.
    pub fn new(reader: SseReader, what: &'static str) -> Self {
        Self {
            reader: Some(reader),
            failures: 0,
            done: false,
            what,
        }
    }

    /// An event arrived: the failures in a row start again.
    pub fn progressed(&mut self) {
        self.failures = 0;
    }

    /// Leaves the connection to make a new one after a pause; `false`
    /// when that has happened too often in a row.
    pub async fn reconnect(&mut self) -> bool {
        if self.failures >= MAX_RECONNECTS {
            return false;
        }
        self.reader = None;
        self.failures += 1;
        tokio::time::sleep(std::time::Duration::from_millis(
            100 * u64::from(self.failures),
        ))
        .await;
        true
    }

    /// The next event, connecting again through `connect` when there is no
    /// connection; `None` once the stream is over, an error when it ends
    /// with one (`url` names the server in it).
    pub async fn next<F, Fut>(
        &mut self,
        url: &str,
        mut connect: F,
    ) -> Option<Result<SseEvent, crate::Error>>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<SseReader, crate::Error>>,
    {
        loop {
            if self.done {
                return None;
            }
            let reader = match self.reader.as_mut() {
                Some(reader) => reader,
                None => match connect().await {
                    Ok(reader) => self.reader.insert(reader),
                    // A request the server refused will not get better.
                    Err(e)
                        if matches!(e, crate::Error::Api { .. })
                            || self.failures >= MAX_RECONNECTS =>
                    {
                        self.done = true;
                        return Some(Err(e));
                    }
                    Err(_) => {
                        self.failures += 1;
                        let wait = 200 * u64::from(self.failures);
                        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                        continue;
                    }
                },
            };
            match reader.next().await {
                Some(Ok(event)) => return Some(Ok(event)),
                Some(Err(_)) | None => {
                    if !self.reconnect().await {
                        self.done = true;
                        return Some(Err(crate::Error::Transport {
                            url: url.to_owned(),
                            reason: format!("the {} kept dropping", self.what),
                        }));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_parse_as_the_format_says() {
        let e = parse_block("event: stdout\nid: 12-0\ndata: a\ndata: b").unwrap();
        assert_eq!(e.event, "stdout");
        assert_eq!(e.id.as_deref(), Some("12-0"));
        assert_eq!(e.data, "a\nb");
        assert_eq!(parse_block(": keep-alive"), None);
        let e = parse_block("data:x").unwrap();
        assert_eq!((e.event.as_str(), e.data.as_str()), ("message", "x"));
        let e = parse_block("event: stdout\ndata: ").unwrap();
        assert_eq!(e.data, "", "an empty line is still a line");
    }

    #[test]
    fn blank_lines_in_any_line_ending() {
        assert_eq!(find_blank_line(b"a\n\nb"), Some((1, 2)));
        assert_eq!(find_blank_line(b"a\r\n\r\nb"), Some((1, 4)));
        assert_eq!(find_blank_line(b"a\nb\n"), None);
    }
}
