//! Stable ids of log lines and resuming after one (`Last-Event-ID`).
//!
//! A line's id is `<Docker timestamp in ns since the epoch>-<n>`, where `n`
//! counts earlier lines with the very same timestamp (almost always 0). Ids
//! are the same in every request that sees the line, so a client can resume
//! after the last one it got.
//!
//! Docker copies stdout and stderr apart, so its log is ordered by arrival,
//! not strictly by timestamp: a stderr line may follow a slightly younger
//! stdout line. Resuming therefore reads from a little before the cursor
//! and skips up to the line with the cursor's id itself (by position, not
//! by comparing times), which yields neither duplicates nor gaps. Only if
//! that line is gone (a bogus id) does it fall back to "every line younger
//! than the cursor".

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use stockade_core::FieldError;
use stockade_runtime::LogLine;

/// How far out of timestamp order Docker's log may be (in practice
/// microseconds); lines further past the cursor than this prove its line is
/// not in the log.
pub const REORDER_WINDOW: Duration = Duration::from_secs(2);

/// At most this many lines are held while looking for the cursor's line.
const MAX_HELD: usize = 10_000;

/// The id of one log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogEventId {
    pub nanos: i64,
    pub seq: u32,
}

impl LogEventId {
    /// Parses `<ns>-<n>`; `field` names the input in the error.
    pub fn parse_field(s: &str, field: &str) -> Result<Self, FieldError> {
        let bad = || {
            FieldError::new(
                field,
                "expected a log event id as sent in `id:` (e.g. 1714558830123456789-0)",
            )
        };
        let (nanos, seq) = s.trim().split_once('-').ok_or_else(bad)?;
        let all_digits =
            |p: &str| !p.is_empty() && p.len() <= 19 && p.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(nanos) || !all_digits(seq) {
            return Err(bad());
        }
        Ok(Self {
            nanos: nanos.parse().map_err(|_| bad())?,
            seq: seq.parse().map_err(|_| bad())?,
        })
    }

    /// The time of the line.
    pub fn time(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_nanos(self.nanos)
    }
}

impl fmt::Display for LogEventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.nanos, self.seq)
    }
}

/// Gives the lines of one stream their ids, in stream order.
#[derive(Debug, Default)]
pub struct IdAssigner {
    /// Recent timestamps and how many lines had each.
    recent: VecDeque<(i64, u32)>,
}

impl IdAssigner {
    /// Lines with timestamps this far apart in the stream cannot share one.
    const REMEMBERED: usize = 256;

    pub fn assign(&mut self, timestamp: DateTime<Utc>) -> LogEventId {
        let nanos = timestamp.timestamp_nanos_opt().unwrap_or(i64::MAX);
        if let Some(entry) = self.recent.iter_mut().rev().find(|(n, _)| *n == nanos) {
            entry.1 += 1;
            return LogEventId {
                nanos,
                seq: entry.1,
            };
        }
        if self.recent.len() == Self::REMEMBERED {
            self.recent.pop_front();
        }
        self.recent.push_back((nanos, 0));
        LogEventId { nanos, seq: 0 }
    }
}

/// A line with its id.
pub type IdLine = (LogEventId, LogLine);

#[derive(Debug)]
enum Phase {
    /// Looking for the cursor's line; lines younger than the cursor are held
    /// in case it never comes.
    Seeking(Vec<IdLine>),
    Live,
}

/// Passes the lines after the cursor, in stream order (see the module docs).
#[derive(Debug)]
pub struct ResumeFilter {
    after: LogEventId,
    phase: Phase,
}

impl ResumeFilter {
    pub fn new(after: LogEventId) -> Self {
        Self {
            after,
            phase: Phase::Seeking(Vec::new()),
        }
    }

    /// Where the stream to filter must start: a little before the cursor.
    pub fn since(&self) -> DateTime<Utc> {
        let window = chrono::Duration::from_std(REORDER_WINDOW).unwrap_or_default();
        self.after.time() - window
    }

    /// Still looking for the cursor's line.
    pub fn seeking(&self) -> bool {
        matches!(self.phase, Phase::Seeking(_))
    }

    /// Takes the next line of the stream; returns those to pass on.
    pub fn push(&mut self, line: IdLine) -> Vec<IdLine> {
        let Phase::Seeking(held) = &mut self.phase else {
            return vec![line];
        };
        let id = line.0;
        if id == self.after {
            // Everything before it in the stream was sent already.
            self.phase = Phase::Live;
            return Vec::new();
        }
        if id < self.after {
            return Vec::new();
        }
        let window = i64::try_from(REORDER_WINDOW.as_nanos()).unwrap_or(i64::MAX);
        if id.nanos.saturating_sub(self.after.nanos) > window || held.len() >= MAX_HELD {
            let mut out = self.give_up();
            out.push(line);
            return out;
        }
        held.push(line);
        Vec::new()
    }

    /// The cursor's line is not coming (the stream ended, or waited long
    /// enough): pass the held lines younger than the cursor and everything after.
    pub fn give_up(&mut self) -> Vec<IdLine> {
        match std::mem::replace(&mut self.phase, Phase::Live) {
            Phase::Seeking(held) => held,
            Phase::Live => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use stockade_runtime::LogStream;

    use super::*;

    fn line(nanos: i64, text: &str) -> LogLine {
        LogLine {
            stream: LogStream::Stdout,
            timestamp: DateTime::from_timestamp_nanos(nanos),
            text: text.into(),
        }
    }

    /// Ids for lines at these times (ns), in this order.
    fn stream(times: &[i64]) -> Vec<IdLine> {
        let mut ids = IdAssigner::default();
        times
            .iter()
            .map(|t| {
                (
                    ids.assign(DateTime::from_timestamp_nanos(*t)),
                    line(*t, &t.to_string()),
                )
            })
            .collect()
    }

    fn texts(lines: &[IdLine]) -> Vec<String> {
        lines.iter().map(|(_, l)| l.text.clone()).collect()
    }

    const S: i64 = 1_000_000_000;

    #[test]
    fn ids_round_trip_and_count_equal_timestamps() {
        let lines = stream(&[5, 7, 7, 6, 7]);
        let ids: Vec<String> = lines.iter().map(|(id, _)| id.to_string()).collect();
        assert_eq!(ids, ["5-0", "7-0", "7-1", "6-0", "7-2"]);
        for (id, _) in &lines {
            assert_eq!(LogEventId::parse_field(&id.to_string(), "x").unwrap(), *id);
        }
        for bad in [
            "",
            "5",
            "-1-0",
            "a-0",
            "5-",
            "5-x",
            "1-2-3",
            "99999999999999999999-0",
        ] {
            assert!(
                LogEventId::parse_field(bad, "Last-Event-ID").is_err(),
                "{bad}"
            );
        }
        let id = LogEventId::parse_field("1714558830123456789-3", "x").unwrap();
        assert_eq!(
            id.time().to_rfc3339(),
            "2024-05-01T10:20:30.123456789+00:00"
        );
    }

    #[test]
    fn resumes_after_the_cursor_by_position_even_out_of_time_order() {
        // In the log, a line at 10 s is followed by an older one at 9.9 s.
        let times = [8 * S, 9 * S, 10 * S, 10 * S - S / 10, 11 * S, 12 * S];
        let all = stream(&times);
        let cursor = all[2].0; // the 10 s line
        let mut f = ResumeFilter::new(cursor);
        assert_eq!(f.since(), DateTime::from_timestamp_nanos(8 * S));
        let mut out = Vec::new();
        for l in all.clone() {
            out.extend(f.push(l));
        }
        out.extend(f.give_up());
        assert_eq!(texts(&out), texts(&all[3..]), "no duplicates, no gaps");
    }

    #[test]
    fn lines_seen_before_the_cursor_are_not_repeated() {
        // 9.5 s was logged before the 9 s cursor line: sent already.
        let all = stream(&[8 * S, 9 * S + S / 2, 9 * S, 10 * S]);
        let mut f = ResumeFilter::new(all[2].0);
        let out: Vec<IdLine> = all.iter().cloned().flat_map(|l| f.push(l)).collect();
        assert_eq!(texts(&out), texts(&all[3..]));
    }

    #[test]
    fn a_missing_cursor_line_falls_back_to_time() {
        let all = stream(&[8 * S, 9 * S, 10 * S, 20 * S, 21 * S]);
        // An id between the lines that no line has.
        let cursor = LogEventId {
            nanos: 9 * S + 1,
            seq: 0,
        };
        let mut f = ResumeFilter::new(cursor);
        let mut out = Vec::new();
        for l in all.clone() {
            out.extend(f.push(l));
        }
        // The 20 s line is past the window: the cursor's line is not coming.
        assert!(!f.seeking());
        assert_eq!(texts(&out), texts(&all[2..]));

        // The stream ends while still seeking: held lines are released.
        let mut f = ResumeFilter::new(cursor);
        let mut out: Vec<IdLine> = all[..3].iter().cloned().flat_map(|l| f.push(l)).collect();
        assert!(out.is_empty() && f.seeking());
        out.extend(f.give_up());
        assert_eq!(texts(&out), texts(&all[2..3]));
    }

    #[test]
    fn equal_timestamps_resume_at_the_right_one() {
        let all = stream(&[S, 2 * S, 2 * S, 2 * S, 3 * S]);
        let mut f = ResumeFilter::new(all[2].0); // "2s-1"
        let out: Vec<IdLine> = all.iter().cloned().flat_map(|l| f.push(l)).collect();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].0.to_string(), format!("{}-2", 2 * S));
    }
}
