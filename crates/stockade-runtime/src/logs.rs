//! Container logs as lines: what [`crate::Logs::logs`] takes and
//! yields, and [`LineSplitter`], which turns the engine's timestamped frames
//! into whole lines, independent of how they reach us.

use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;

use crate::RuntimeResult;

/// A line longer than this is cut into pieces of at most this many bytes (at
/// a UTF-8 character boundary), so one endless line cannot grow a buffer
/// without bound.
pub const MAX_LOG_LINE_BYTES: usize = 64 * 1024;

/// Which output of the main process a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogStream {
    Stdout,
    Stderr,
}

impl LogStream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// One line of a sandbox's main-process output, without its line ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub stream: LogStream,
    /// When the engine received the line (of its first byte, for a line that
    /// arrived in pieces).
    pub timestamp: DateTime<Utc>,
    /// The line, decoded as UTF-8 (invalid bytes become U+FFFD).
    pub text: String,
}

/// Which lines [`crate::Logs::logs`] yields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogsOptions {
    /// Only the last this many lines (as the engine counts them); `None` = all.
    pub tail: Option<usize>,
    /// Only lines from this time on, at whole-second resolution (the engine's):
    /// lines of `since`'s second are included.
    pub since: Option<DateTime<Utc>>,
    /// Keep the stream open and yield new lines as they come, until the
    /// container stops.
    pub follow: bool,
}

/// The lines of [`crate::Logs::logs`], in the engine's order. An error ends
/// the stream.
pub type LogLines = BoxStream<'static, RuntimeResult<LogLine>>;

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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

    pub(crate) const T1: &str = "2024-05-01T10:20:30.000000001Z";
    pub(crate) const T2: &str = "2024-05-01T10:20:31.500000000Z";

    pub(crate) fn frame(t: &str, payload: &[u8]) -> Vec<u8> {
        let mut f = format!("{t} ").into_bytes();
        f.extend_from_slice(payload);
        f
    }

    fn ts(t: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc)
    }

    pub(crate) fn texts(lines: &[LogLine]) -> Vec<(&str, &str)> {
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
