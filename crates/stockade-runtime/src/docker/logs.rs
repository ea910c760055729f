//! Container logs from Docker as lines (API-5): frames with timestamps in,
//! whole lines out, however the engine cut them.

use std::collections::VecDeque;

use std::time::Duration;

use bollard::container::InspectContainerOptions;
use chrono::{DateTime, Utc};
use futures_util::stream::{self, StreamExt};
use stockade_core::SandboxId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::docker::{container_name, status_code, Endpoint};
use crate::{
    DockerRuntime, LogLine, LogLines, LogStream, LogsOptions, RuntimeError, RuntimeResult,
    MAX_LOG_LINE_BYTES,
};

/// A line being assembled from frames.
#[derive(Debug, Default)]
struct Pending {
    /// When its first byte arrived.
    timestamp: Option<DateTime<Utc>>,
    buf: Vec<u8>,
}

/// Turns Docker log frames (`timestamps=true`: `2024-05-01T10:20:30.123456789Z
/// payload`) into lines, per stream: a line is complete at its newline, which
/// may come frames later (the engine cuts long lines into 16 KiB messages),
/// and multi-byte characters split between frames are joined before
/// decoding. A line longer than `max_line` bytes is cut at a character
/// boundary. [`finish`](Self::finish) flushes lines without a final newline.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    max_line: usize,
    stdout: Pending,
    stderr: Pending,
    last_timestamp: Option<DateTime<Utc>>,
}

impl LineSplitter {
    pub(crate) fn new(max_line: usize) -> Self {
        Self {
            max_line: max_line.max(4),
            stdout: Pending::default(),
            stderr: Pending::default(),
            last_timestamp: None,
        }
    }

    /// Takes one frame of `stream`; complete lines are appended to `out`.
    pub(crate) fn push(&mut self, stream: LogStream, frame: &[u8], out: &mut impl Extend<LogLine>) {
        let (timestamp, mut rest) = match split_timestamp(frame) {
            Some((t, payload)) => (t, payload),
            // No timestamp (not asked for, or a raw daemon message): the
            // last one seen is the best guess.
            None => (self.last_timestamp.unwrap_or_else(Utc::now), frame),
        };
        self.last_timestamp = Some(timestamp);
        let max_line = self.max_line;
        let pending = match stream {
            LogStream::Stdout => &mut self.stdout,
            LogStream::Stderr => &mut self.stderr,
        };
        loop {
            let newline = rest.iter().position(|b| *b == b'\n');
            let segment = match newline {
                Some(i) => &rest[..i],
                None => rest,
            };
            if pending.buf.is_empty() {
                pending.timestamp = Some(timestamp);
            }
            pending.buf.extend_from_slice(segment);
            while pending.buf.len() > max_line {
                let cut = cut_point(&pending.buf, max_line);
                let tail = pending.buf.split_off(cut);
                let head = std::mem::replace(&mut pending.buf, tail);
                out.extend([line(stream, pending.timestamp, timestamp, &head)]);
                pending.timestamp = Some(timestamp);
            }
            match newline {
                Some(i) => {
                    let bytes = std::mem::take(&mut pending.buf);
                    out.extend([line(stream, pending.timestamp, timestamp, &bytes)]);
                    pending.timestamp = None;
                    rest = &rest[i + 1..];
                    if rest.is_empty() {
                        break;
                    }
                }
                None => break,
            }
        }
    }

    /// The lines still waiting for a newline (the stream ended), oldest first.
    pub(crate) fn finish(&mut self, out: &mut impl Extend<LogLine>) {
        let now = self.last_timestamp.unwrap_or_else(Utc::now);
        let mut left: Vec<LogLine> = Vec::new();
        for (stream, pending) in [
            (LogStream::Stdout, &mut self.stdout),
            (LogStream::Stderr, &mut self.stderr),
        ] {
            if !pending.buf.is_empty() {
                let bytes = std::mem::take(&mut pending.buf);
                left.push(line(stream, pending.timestamp.take(), now, &bytes));
            }
        }
        left.sort_by_key(|l| l.timestamp);
        out.extend(left);
    }
}

fn line(
    stream: LogStream,
    started: Option<DateTime<Utc>>,
    fallback: DateTime<Utc>,
    bytes: &[u8],
) -> LogLine {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    LogLine {
        stream,
        timestamp: started.unwrap_or(fallback),
        text: String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// Where to cut `buf` so that the first part has at most `max` bytes and no
/// character is split (when `buf` is UTF-8).
fn cut_point(buf: &[u8], max: usize) -> usize {
    let mut i = max;
    while i > 0 && max - i < 3 && buf.get(i).is_some_and(|b| b & 0xC0 == 0x80) {
        i -= 1;
    }
    if i == 0 || buf.get(i).is_some_and(|b| b & 0xC0 == 0x80) {
        max
    } else {
        i
    }
}

/// Splits `2024-05-01T10:20:30.123456789Z payload` into the time and the payload.
fn split_timestamp(frame: &[u8]) -> Option<(DateTime<Utc>, &[u8])> {
    let space = frame.iter().take(40).position(|b| *b == b' ')?;
    let stamp = &frame[..space];
    let t = match docker_utc_time(stamp) {
        Some(t) => t,
        None => DateTime::parse_from_rfc3339(std::str::from_utf8(stamp).ok()?)
            .ok()?
            .with_timezone(&Utc),
    };
    Some((t, &frame[space + 1..]))
}

/// Docker's own form, `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (RFC 3339 in UTC,
/// up to nine fractional digits), read without a general parser: it comes
/// once per log line. Anything else is `None` (the caller falls back).
fn docker_utc_time(s: &[u8]) -> Option<DateTime<Utc>> {
    fn num(b: &[u8]) -> Option<u32> {
        b.iter().try_fold(0u32, |n, d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    }
    if s.len() < 20
        || s[4] != b'-'
        || s[7] != b'-'
        || s[10] != b'T'
        || s[13] != b':'
        || s[16] != b':'
    {
        return None;
    }
    let (rest, last) = s[19..].split_at(s.len() - 20);
    if last != b"Z" {
        return None;
    }
    let nanos = match rest {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            num(digits)? * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let date =
        chrono::NaiveDate::from_ymd_opt(num(&s[..4])? as i32, num(&s[5..7])?, num(&s[8..10])?)?;
    let time = chrono::NaiveTime::from_hms_nano_opt(
        num(&s[11..13])?,
        num(&s[14..16])?,
        num(&s[17..19])?,
        nanos,
    )?;
    Some(date.and_time(time).and_utc())
}

/// The engine's answer to a logs request: the HTTP/1.0 body, a sequence of
/// frames (stream byte, three zero bytes, payload length as u32 BE).
trait LogConn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> LogConn for T {}

/// Bytes read from the engine at a time.
const READ_CHUNK: usize = 64 * 1024;
/// A frame longer than this is not Docker's (it cuts messages at 16 KiB).
const MAX_FRAME: usize = 1 << 20;
/// How long the engine may take to answer a logs request.
const HEAD_TIMEOUT: Duration = Duration::from_secs(120);

struct LinesState {
    conn: Box<dyn LogConn>,
    /// Bytes read and not yet taken apart, from `pos` on.
    buf: Vec<u8>,
    pos: usize,
    splitter: LineSplitter,
    ready: VecDeque<LogLine>,
    done: bool,
}

impl LinesState {
    /// Takes every complete frame out of the buffer.
    fn split_frames(&mut self) -> Result<(), RuntimeError> {
        while self.buf.len() - self.pos >= 8 {
            let head = &self.buf[self.pos..self.pos + 8];
            let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
            if len > MAX_FRAME {
                return Err(RuntimeError::Other(format!(
                    "read logs: a frame of {len} bytes: the engine's stream is corrupt"
                )));
            }
            if self.buf.len() - self.pos < 8 + len {
                break;
            }
            let stream = match head[0] {
                1 => Some(LogStream::Stdout),
                2 => Some(LogStream::Stderr),
                _ => None, // stdin: never in a log
            };
            let payload = &self.buf[self.pos + 8..self.pos + 8 + len];
            if let Some(stream) = stream {
                self.splitter.push(stream, payload, &mut self.ready);
            }
            self.pos += 8 + len;
        }
        if self.pos > 0 && (self.pos == self.buf.len() || self.pos >= READ_CHUNK) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        Ok(())
    }
}

impl DockerRuntime {
    /// Sends one GET over a connection of its own (HTTP/1.0: the body is
    /// not chunked and ends when the connection does) and reads the head.
    /// Returns the connection and the body bytes read with the head, or
    /// the engine's error.
    async fn open_logs(
        &self,
        id: &SandboxId,
        uri: &str,
    ) -> RuntimeResult<(Box<dyn LogConn>, Vec<u8>)> {
        let unreachable = |e: std::io::Error| {
            self.unavailable(
                &e.to_string(),
                e.kind() == std::io::ErrorKind::PermissionDenied,
            )
        };
        let mut conn: Box<dyn LogConn> = match &self.endpoint {
            Endpoint::Unix(socket) => Box::new(
                tokio::net::UnixStream::connect(socket)
                    .await
                    .map_err(unreachable)?,
            ),
            Endpoint::Tcp(addr) => Box::new(
                tokio::net::TcpStream::connect(addr)
                    .await
                    .map_err(unreachable)?,
            ),
        };
        let request = format!("GET {uri} HTTP/1.0\r\nHost: docker\r\n\r\n");
        conn.write_all(request.as_bytes())
            .await
            .map_err(|e| RuntimeError::Other(format!("read logs: {e}")))?;
        let mut buf = vec![0u8; READ_CHUNK];
        let mut have = 0;
        let head_end = loop {
            let n = tokio::time::timeout(HEAD_TIMEOUT, conn.read(&mut buf[have..]))
                .await
                .map_err(|_| {
                    RuntimeError::Other(format!(
                        "read logs: the engine did not answer within {} s",
                        HEAD_TIMEOUT.as_secs()
                    ))
                })?
                .map_err(|e| RuntimeError::Other(format!("read logs: {e}")))?;
            if n == 0 {
                return Err(RuntimeError::Other(
                    "read logs: the engine closed the connection without an answer".into(),
                ));
            }
            have += n;
            if let Some(i) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if have == buf.len() {
                return Err(RuntimeError::Other(
                    "read logs: the engine's answer has no end of headers".into(),
                ));
            }
        };
        let status = std::str::from_utf8(&buf[..head_end])
            .ok()
            .and_then(|h| h.split_whitespace().nth(1))
            .and_then(|code| code.parse::<u16>().ok())
            .unwrap_or(0);
        if status != 200 {
            // The error body is a small JSON document: read it whole.
            let mut body = buf[head_end..have].to_vec();
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                (&mut conn).take(64 * 1024).read_to_end(&mut body),
            )
            .await;
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_owned());
            return Err(match status {
                404 => RuntimeError::NotFound(format!("no container for sandbox {id}: {message}")),
                _ => RuntimeError::Other(format!(
                    "read logs: the engine answered {status}: {message}"
                )),
            });
        }
        buf.truncate(have);
        buf.drain(..head_end);
        Ok((conn, buf))
    }

    /// [`crate::Runtime::logs`] for Docker.
    ///
    /// The logs request is read straight off its own connection, 64 KiB at
    /// a time, in the task that consumes the lines: through the HTTP client
    /// every few frames crossed to another task and thread, which capped a
    /// log read at a third of what the engine delivers (stockade-bench).
    pub(crate) async fn logs_lines(
        &self,
        id: &SandboxId,
        options: LogsOptions,
    ) -> RuntimeResult<LogLines> {
        let docker = self.client().await?;
        let name = container_name(id);
        // The log stream reports a missing container only as its first item,
        // which may never come when following: ask first.
        docker
            .inspect_container(&name, None::<InspectContainerOptions>)
            .await
            .map_err(|e| match status_code(&e) {
                Some(404) => RuntimeError::NotFound(format!("no container for sandbox {id}")),
                _ => self.map_err(e, "inspect container"),
            })?;
        let version = docker.client_version();
        let uri = format!(
            "/v{}.{}/containers/{name}/logs?stdout=1&stderr=1&timestamps=1&follow={}&since={}&tail={}",
            version.major_version,
            version.minor_version,
            u8::from(options.follow),
            options.since.map_or(0, |t| t.timestamp().max(0)),
            options
                .tail
                .map_or_else(|| "all".to_owned(), |n| n.to_string()),
        );
        let (conn, buf) = self.open_logs(id, &uri).await?;
        let state = LinesState {
            conn,
            buf,
            pos: 0,
            splitter: LineSplitter::new(MAX_LOG_LINE_BYTES),
            ready: VecDeque::new(),
            done: false,
        };
        Ok(stream::unfold(state, |mut st| async move {
            loop {
                if let Some(line) = st.ready.pop_front() {
                    return Some((Ok(line), st));
                }
                if st.done {
                    return None;
                }
                if let Err(e) = st.split_frames() {
                    st.done = true;
                    return Some((Err(e), st));
                }
                if !st.ready.is_empty() {
                    continue;
                }
                // Into the spare capacity: nothing is zeroed per read.
                st.buf.reserve(READ_CHUNK);
                match st.conn.read_buf(&mut st.buf).await {
                    Ok(0) => {
                        st.done = true;
                        if st.buf.len() > st.pos {
                            return Some((
                                Err(RuntimeError::Other(
                                    "read logs: the engine's stream ended inside a frame".into(),
                                )),
                                st,
                            ));
                        }
                        st.splitter.finish(&mut st.ready);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        st.done = true;
                        return Some((Err(RuntimeError::Other(format!("read logs: {e}"))), st));
                    }
                }
            }
        })
        .boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_frame(stream: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![stream, 0, 0, 0];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn lines_state() -> LinesState {
        let (conn, _) = tokio::io::duplex(64);
        LinesState {
            conn: Box::new(conn),
            buf: Vec::new(),
            pos: 0,
            splitter: LineSplitter::new(1024),
            ready: VecDeque::new(),
            done: false,
        }
    }

    #[test]
    fn dockers_timestamps_are_read_exactly_and_others_fall_back() {
        for t in [
            "2024-05-01T10:20:30.123456789Z",
            "2024-05-01T10:20:30.1Z",
            "2024-05-01T10:20:30Z",
            "2024-12-31T23:59:59.000000001Z",
        ] {
            assert_eq!(docker_utc_time(t.as_bytes()), Some(ts(t)), "{t}");
        }
        for bad in [
            "2024-05-01T10:20:30.1234567891Z",
            "2024-05-01T10:20:30+02:00",
            "2024-13-01T10:20:30Z",
            "2024-05-01 10:20:30Z",
            "2024-05-01T10:20:3aZ",
            "short",
        ] {
            assert_eq!(docker_utc_time(bad.as_bytes()), None, "{bad}");
        }
        // An offset is still understood, by the general parser.
        let (t, rest) = split_timestamp(b"2024-05-01T12:20:30+02:00 hi").unwrap();
        assert_eq!((t, rest), (ts("2024-05-01T10:20:30Z"), &b"hi"[..]));
    }

    #[tokio::test]
    async fn engine_frames_are_taken_apart_however_the_reads_cut_them() {
        let mut body = Vec::new();
        body.extend(engine_frame(1, &frame(T1, b"one\n")));
        body.extend(engine_frame(0, b"stdin is ignored"));
        body.extend(engine_frame(2, &frame(T2, b"two\nthr")));
        body.extend(engine_frame(1, &frame(T2, b"out\n")));
        body.extend(engine_frame(2, &frame(T2, b"ee\n")));
        for step in [1, 3, 7, 8, 9, 64, body.len()] {
            let mut st = lines_state();
            for chunk in body.chunks(step) {
                st.buf.extend_from_slice(chunk);
                st.split_frames().unwrap();
            }
            assert_eq!(st.buf.len(), st.pos, "step {step}: a frame was left over");
            let got: Vec<_> = st.ready.drain(..).collect();
            assert_eq!(
                texts(&got),
                [
                    ("stdout", "one"),
                    ("stderr", "two"),
                    ("stdout", "out"),
                    ("stderr", "three")
                ],
                "step {step}"
            );
        }
        let mut st = lines_state();
        st.buf.extend_from_slice(&[1, 0, 0, 0, 0xff, 0, 0, 0]);
        assert!(st
            .split_frames()
            .unwrap_err()
            .to_string()
            .contains("corrupt"));
    }

    const T1: &str = "2024-05-01T10:20:30.000000001Z";
    const T2: &str = "2024-05-01T10:20:31.500000000Z";

    fn frame(t: &str, payload: &[u8]) -> Vec<u8> {
        let mut f = format!("{t} ").into_bytes();
        f.extend_from_slice(payload);
        f
    }

    fn ts(t: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc)
    }

    fn texts(lines: &[LogLine]) -> Vec<(&str, &str)> {
        lines
            .iter()
            .map(|l| (l.stream.as_str(), l.text.as_str()))
            .collect()
    }

    #[test]
    fn one_line_per_frame_loses_its_timestamp_and_newline() {
        let mut s = LineSplitter::new(1024);
        let mut out = Vec::new();
        s.push(LogStream::Stdout, &frame(T1, b"hello\n"), &mut out);
        s.push(LogStream::Stderr, &frame(T2, b"oops\r\n"), &mut out);
        assert_eq!(texts(&out), [("stdout", "hello"), ("stderr", "oops")]);
        assert_eq!(out[0].timestamp, ts(T1));
        assert_eq!(out[1].timestamp, ts(T2));
    }

    #[test]
    fn partial_lines_wait_for_their_newline_and_keep_the_first_timestamp() {
        let mut s = LineSplitter::new(1024);
        let mut out = Vec::new();
        s.push(LogStream::Stdout, &frame(T1, b"par"), &mut out);
        s.push(LogStream::Stderr, &frame(T1, b"other\n"), &mut out);
        assert_eq!(texts(&out), [("stderr", "other")]);
        s.push(LogStream::Stdout, &frame(T2, b"tial\nnext\n\n"), &mut out);
        assert_eq!(
            texts(&out),
            [
                ("stderr", "other"),
                ("stdout", "partial"),
                ("stdout", "next"),
                ("stdout", "")
            ]
        );
        assert_eq!(
            out[1].timestamp,
            ts(T1),
            "a line is as old as its first byte"
        );
        assert_eq!(out[2].timestamp, ts(T2));
    }

    #[test]
    fn multibyte_characters_split_between_frames_are_joined() {
        let text = "grüße 🦀 ok";
        let bytes = text.as_bytes();
        // Cut inside 'ü' (2 bytes) and inside the crab (4 bytes).
        let crab = text.find('🦀').unwrap();
        let cuts = [3, crab + 1, crab + 3];
        let mut s = LineSplitter::new(1024);
        let mut out = Vec::new();
        let mut from = 0;
        for cut in cuts {
            s.push(LogStream::Stdout, &frame(T1, &bytes[from..cut]), &mut out);
            from = cut;
        }
        s.push(LogStream::Stdout, &frame(T2, &bytes[from..]), &mut out);
        assert!(out.is_empty());
        s.push(LogStream::Stdout, &frame(T2, b"\n"), &mut out);
        assert_eq!(texts(&out), [("stdout", text)]);
    }

    #[test]
    fn the_final_partial_line_is_flushed_at_the_end() {
        let mut s = LineSplitter::new(1024);
        let mut out = Vec::new();
        s.push(LogStream::Stderr, &frame(T2, b"late"), &mut out);
        s.push(LogStream::Stdout, &frame(T1, b"no newline"), &mut out);
        assert!(out.is_empty());
        s.finish(&mut out);
        // Oldest first.
        assert_eq!(texts(&out), [("stdout", "no newline"), ("stderr", "late")]);
        s.finish(&mut out);
        assert_eq!(out.len(), 2, "flushed once");
    }

    #[test]
    fn long_lines_are_cut_at_character_boundaries() {
        let mut s = LineSplitter::new(8);
        let mut out = Vec::new();
        // 7 ASCII bytes then 'é' (2 bytes) straddles the 8-byte limit.
        s.push(
            LogStream::Stdout,
            &frame(T1, "abcdefgé-xyz\n".as_bytes()),
            &mut out,
        );
        assert_eq!(texts(&out), [("stdout", "abcdefg"), ("stdout", "é-xyz")]);
        let joined: String = out.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(joined, "abcdefgé-xyz");
    }

    #[test]
    fn frames_without_a_timestamp_reuse_the_last_one() {
        let mut s = LineSplitter::new(1024);
        let mut out = Vec::new();
        s.push(LogStream::Stdout, &frame(T1, b"a\n"), &mut out);
        s.push(LogStream::Stdout, b"raw message\n", &mut out);
        assert_eq!(texts(&out), [("stdout", "a"), ("stdout", "raw message")]);
        assert_eq!(out[1].timestamp, ts(T1));
    }

    #[test]
    fn cut_points() {
        assert_eq!(cut_point(b"abcdefgh", 4), 4);
        let s = "aé".as_bytes(); // a, 0xC3, 0xA9
        assert_eq!(cut_point(s, 2), 1);
        // Invalid UTF-8 (continuation bytes only): cut where asked.
        assert_eq!(cut_point(&[0x80; 10], 5), 5);
    }
}
