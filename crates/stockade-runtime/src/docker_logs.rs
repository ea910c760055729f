//! Container logs from Docker as lines (API-5): frames with timestamps in,
//! whole lines out, however the engine cut them.

use std::collections::VecDeque;

use bollard::container::{InspectContainerOptions, LogOutput};
use chrono::{DateTime, Utc};
use futures_util::stream::{self, BoxStream, StreamExt};
use stockade_core::SandboxId;

use crate::docker::{container_name, error_chain, status_code};
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
    let text = std::str::from_utf8(&frame[..space]).ok()?;
    let t = DateTime::parse_from_rfc3339(text).ok()?;
    Some((t.with_timezone(&Utc), &frame[space + 1..]))
}

struct LinesState {
    frames: BoxStream<'static, Result<LogOutput, bollard::errors::Error>>,
    splitter: LineSplitter,
    ready: VecDeque<LogLine>,
    done: bool,
}

impl DockerRuntime {
    /// [`crate::Runtime::logs`] for Docker.
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
        let frames = docker
            .logs(
                &name,
                Some(bollard::container::LogsOptions::<String> {
                    follow: options.follow,
                    stdout: true,
                    stderr: true,
                    since: options.since.map_or(0, |t| t.timestamp().max(0)),
                    until: 0,
                    timestamps: true,
                    tail: options
                        .tail
                        .map_or_else(|| "all".to_owned(), |n| n.to_string()),
                }),
            )
            .boxed();
        let state = LinesState {
            frames,
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
                match st.frames.next().await {
                    Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                        st.splitter.push(LogStream::Stdout, &message, &mut st.ready)
                    }
                    Some(Ok(LogOutput::StdErr { message })) => {
                        st.splitter.push(LogStream::Stderr, &message, &mut st.ready)
                    }
                    Some(Ok(LogOutput::StdIn { .. })) => {}
                    Some(Err(e)) => {
                        st.done = true;
                        let err = match status_code(&e) {
                            Some(404) => RuntimeError::NotFound(error_chain(&e)),
                            _ => RuntimeError::Other(format!("read logs: {}", error_chain(&e))),
                        };
                        return Some((Err(err), st));
                    }
                    None => {
                        st.done = true;
                        st.splitter.finish(&mut st.ready);
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
