//! Results: percentiles of samples, the machine-readable JSON document and
//! the Markdown table a person reads.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

/// Percentiles and spread of one set of samples.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

/// Nearest-rank percentiles (p99 of fewer than 100 samples is the largest
/// but one, or the largest: a small run says little about the tail).
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let idx = (p * s.len() as f64).ceil() as usize;
        s[idx.clamp(1, s.len()) - 1]
    };
    Some(Summary {
        n: s.len(),
        p50: rank(0.50),
        p95: rank(0.95),
        p99: rank(0.99),
        mean: s.iter().sum::<f64>() / s.len() as f64,
        min: s[0],
        max: s[s.len() - 1],
    })
}

/// Whether a larger or a smaller figure is better.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Better {
    Lower,
    Higher,
}

/// One line of the results.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// Stable key for scripts (`create`, `exec`, `list_sqlite_labels`, …).
    pub id: String,
    pub title: String,
    /// `ms`, `MB/s`, `MiB`, `sandboxes/s`.
    pub unit: String,
    pub better: Better,
    pub stockade: Option<Summary>,
    /// The baseline: the same work through the Docker Engine API directly,
    /// unless [`Row::baseline`] names another.
    pub raw: Option<Summary>,
    /// What `raw` measured (`raw Docker`, or e.g. `Stockade under runc`).
    pub baseline: String,
    /// Stockade p50 / raw p50.
    pub ratio: Option<f64>,
    /// The targets, e.g. `ratio ≤ 1.10` (several joined by `; `).
    pub target: Option<String>,
    /// Whether this run met every target (`None`: no target).
    pub met: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// How a row's target is judged.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    None,
    /// Stockade p50 / raw p50 at most this.
    RatioAtMost(f64),
    /// Stockade p50 / raw p50 at least this (throughput).
    RatioAtLeast(f64),
    /// Stockade p50 at most this many units.
    P50AtMost(f64),
    /// raw p50 / Stockade p50 at least this: Stockade this many times faster.
    SpeedupAtLeast(f64),
    /// Stockade p50 at most this many units above the baseline's p50.
    P50AboveBaselineAtMost(f64),
}

impl Target {
    /// The target in words and whether the figures meet it.
    fn judge(
        self,
        unit: &str,
        stockade: Option<&Summary>,
        raw: Option<&Summary>,
        ratio: Option<f64>,
    ) -> Option<(String, Option<bool>)> {
        match self {
            Target::None => None,
            Target::RatioAtMost(x) => Some((format!("ratio ≤ {x:.2}"), ratio.map(|r| r <= x))),
            Target::RatioAtLeast(x) => Some((format!("ratio ≥ {x:.2}"), ratio.map(|r| r >= x))),
            Target::P50AtMost(x) => {
                Some((format!("p50 ≤ {x} {unit}"), stockade.map(|s| s.p50 <= x)))
            }
            Target::SpeedupAtLeast(x) => Some((
                format!("≥ {x}× faster (ratio ≤ {:.3})", 1.0 / x),
                match (stockade, raw) {
                    (Some(s), Some(r)) if s.p50 > 0.0 => Some(r.p50 / s.p50 >= x),
                    _ => None,
                },
            )),
            Target::P50AboveBaselineAtMost(x) => Some((
                format!("p50 ≤ baseline p50 + {x} {unit}"),
                stockade.zip(raw).map(|(s, r)| s.p50 - r.p50 <= x),
            )),
        }
    }
}

impl Row {
    pub fn new(
        id: &str,
        title: &str,
        unit: &str,
        better: Better,
        stockade: &[f64],
        raw: Option<&[f64]>,
        target: Target,
    ) -> Self {
        let stockade = summarize(stockade);
        let raw = raw.and_then(summarize);
        let ratio = match (&stockade, &raw) {
            (Some(s), Some(r)) if r.p50 > 0.0 => Some(s.p50 / r.p50),
            _ => None,
        };
        let (target, met) = target
            .judge(unit, stockade.as_ref(), raw.as_ref(), ratio)
            .map_or((None, None), |(t, m)| (Some(t), m));
        Self {
            id: id.to_owned(),
            title: title.to_owned(),
            unit: unit.to_owned(),
            better,
            stockade,
            raw,
            baseline: "raw Docker".to_owned(),
            ratio,
            target,
            met,
            note: None,
        }
    }

    /// A second target: the row meets its targets when it meets both.
    pub fn also(mut self, target: Target) -> Self {
        if let Some((text, met)) = target.judge(
            &self.unit,
            self.stockade.as_ref(),
            self.raw.as_ref(),
            self.ratio,
        ) {
            self.met = match (self.target.is_some(), self.met, met) {
                (false, _, m) => m,
                (true, Some(a), Some(b)) => Some(a && b),
                // A target that cannot be judged leaves the row unjudged.
                (true, _, _) => None,
            };
            self.target = Some(match self.target.take() {
                Some(t) => format!("{t}; {text}"),
                None => text,
            });
        }
        self
    }

    /// Names what the baseline columns measured, when it is not the Docker
    /// Engine API directly.
    pub fn baseline(mut self, baseline: impl Into<String>) -> Self {
        self.baseline = baseline.into();
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// Facts about the machine and the run, so results can be compared.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Environment {
    pub stockade_version: String,
    pub docker_version: String,
    pub docker_api_version: String,
    pub kernel: String,
    pub cpus: usize,
    pub image: String,
    pub quick: bool,
    pub build: String,
    pub postgres: bool,
    /// Instance ids of the servers and of the raw baseline: the label
    /// `io.stockade.instance-id` on everything the run made (and removed).
    pub instances: Vec<String>,
    /// The host's 1-minute load average when the run started and when it
    /// ended (`/proc/loadavg`): other work on the machine slows every figure.
    pub load_average: Option<(f64, f64)>,
}

/// The host's 1-minute load average, from `/proc/loadavg`.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The whole result document.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub duration_secs: f64,
    pub environment: Environment,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

fn fmt_value(v: f64, unit: &str) -> String {
    match unit {
        "ms" if v < 10.0 => format!("{v:.2} ms"),
        "ms" => format!("{v:.1} ms"),
        _ if v >= 100.0 => format!("{v:.0} {unit}"),
        _ => format!("{v:.1} {unit}"),
    }
}

impl Report {
    /// The results as a Markdown table with the notes below it.
    pub fn markdown(&self) -> String {
        let e = &self.environment;
        let mut out = String::new();
        let _ = writeln!(out, "# Stockade benchmark\n");
        let _ = writeln!(
            out,
            "Stockade {} · Docker {} (API {}) · kernel {} · {} CPUs · image `{}` · {} build{} · {}\n",
            e.stockade_version,
            e.docker_version,
            e.docker_api_version,
            e.kernel,
            e.cpus,
            e.image,
            e.build,
            if e.quick {
                " · **quick mode: few samples, noisy**"
            } else {
                ""
            },
            self.started_at.format("%Y-%m-%d %H:%M UTC"),
        );
        if let Some((start, end)) = e.load_average {
            let _ = writeln!(
                out,
                "Load average (1 min) {start:.1} at the start, {end:.1} at the end.\n"
            );
        }
        let _ = writeln!(
            out,
            "| scenario | n | Stockade p50 | Stockade p99 | baseline p50 | baseline p99 | ratio | target | met |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---|:-:|");
        for r in &self.rows {
            let cell = |s: &Option<Summary>, p99: bool| {
                s.as_ref().map_or_else(
                    || "–".to_owned(),
                    |s| fmt_value(if p99 { s.p99 } else { s.p50 }, &r.unit),
                )
            };
            let n = r.stockade.as_ref().map_or(0, |s| s.n);
            let title = if r.raw.is_some() && r.baseline != "raw Docker" {
                format!("{} (baseline: {})", r.title, r.baseline)
            } else {
                r.title.clone()
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                title,
                n,
                cell(&r.stockade, false),
                cell(&r.stockade, true),
                cell(&r.raw, false),
                cell(&r.raw, true),
                r.ratio
                    .map_or_else(|| "–".to_owned(), |x| format!("{x:.2}")),
                r.target.as_deref().unwrap_or("–"),
                match r.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "–",
                },
            );
        }
        let notes: Vec<String> = self
            .rows
            .iter()
            .filter_map(|r| r.note.as_ref().map(|n| format!("{}: {n}", r.title)))
            .chain(self.notes.iter().cloned())
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(out);
            for n in notes {
                let _ = writeln!(out, "- {n}");
            }
        }
        let _ = writeln!(
            out,
            "\nBaseline: the same work through the Docker Engine API directly, unless the \
             scenario names another. Ratio: Stockade p50 / baseline p50 (time: lower is \
             better; throughput: higher). Ran in {:.0} s.",
            self.duration_secs
        );
        out
    }

    /// Writes `results.json` and `results.md` into `dir` (made if missing).
    pub fn write(&self, dir: &Path) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf)> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("could not create the output directory {}", dir.display()))?;
        let json = dir.join("results.json");
        let md = dir.join("results.md");
        std::fs::write(&json, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("could not write {}", json.display()))?;
        std::fs::write(&md, self.markdown())
            .with_context(|| format!("could not write {}", md.display()))?;
        Ok((json, md))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row `x` in ms, lower better, of one sample against one baseline
    /// sample, if any.
    fn ms_row(stockade: f64, raw: Option<f64>, target: Target) -> Row {
        let raw = raw.map(|r| [r]);
        let raw = raw.as_ref().map(|r| &r[..]);
        Row::new("x", "x", "ms", Better::Lower, &[stockade], raw, target)
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        let sum = summarize(&s).unwrap();
        assert_eq!(
            (sum.p50, sum.p95, sum.p99, sum.min, sum.max),
            (50.0, 95.0, 99.0, 1.0, 100.0)
        );
        let one = summarize(&[7.0]).unwrap();
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert!(summarize(&[]).is_none());
        let few = summarize(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((few.p50, few.p99), (2.0, 3.0));
    }

    #[test]
    fn targets_are_judged_on_the_p50() {
        let r = ms_row(11.0, Some(10.0), Target::RatioAtMost(1.1));
        assert_eq!(r.met, Some(true));
        let r = Row::new(
            "x",
            "x",
            "MB/s",
            Better::Higher,
            &[70.0],
            Some(&[100.0]),
            Target::RatioAtLeast(0.8),
        );
        assert_eq!(r.met, Some(false));
        let r = ms_row(5.0, None, Target::P50AtMost(10.0));
        assert_eq!((r.ratio, r.met), (None, Some(true)));
    }

    #[test]
    fn a_speedup_target_and_a_second_target_must_both_be_met() {
        let fast = |stockade: f64| {
            ms_row(stockade, Some(45.0), Target::P50AtMost(3.0)).also(Target::SpeedupAtLeast(15.0))
        };
        let r = fast(2.0);
        assert_eq!(r.met, Some(true));
        assert_eq!(
            r.target.as_deref(),
            Some("p50 ≤ 3 ms; ≥ 15× faster (ratio ≤ 0.067)")
        );
        // 3.0 ms meets the p50 and is exactly 15× faster.
        assert_eq!(fast(3.0).met, Some(true));
        // 3.5 ms misses both; 2.9 ms against a 40 ms baseline misses the speedup only.
        assert_eq!(fast(3.5).met, Some(false));
        let r = ms_row(2.9, Some(40.0), Target::P50AtMost(3.0)).also(Target::SpeedupAtLeast(15.0));
        assert_eq!(r.met, Some(false));
        // Without a baseline the speedup cannot be judged: the row is unjudged.
        let r = ms_row(2.0, None, Target::P50AtMost(3.0)).also(Target::SpeedupAtLeast(15.0));
        assert_eq!(r.met, None);
        // `also` on a row without a target is its only target.
        let r = Row::new("x", "x", "ms", Better::Lower, &[2.0], None, Target::None)
            .also(Target::P50AtMost(3.0));
        assert_eq!(
            (r.target.as_deref(), r.met),
            (Some("p50 ≤ 3 ms"), Some(true))
        );
    }

    #[test]
    fn a_named_baseline_shows_in_the_table() {
        let report = Report {
            started_at: chrono::Utc::now(),
            duration_secs: 1.0,
            environment: Environment {
                stockade_version: "0".into(),
                docker_version: "20.10".into(),
                docker_api_version: "1.41".into(),
                kernel: "6".into(),
                cpus: 2,
                image: "i".into(),
                quick: true,
                build: "debug".into(),
                postgres: false,
                instances: Vec::new(),
                load_average: Some((0.5, 1.26)),
            },
            rows: vec![
                Row::new(
                    "a",
                    "Plain",
                    "ms",
                    Better::Lower,
                    &[1.0],
                    Some(&[2.0]),
                    Target::None,
                ),
                Row::new(
                    "b",
                    "Runsc",
                    "ms",
                    Better::Lower,
                    &[4.0],
                    Some(&[2.0]),
                    Target::None,
                )
                .baseline("Stockade under runc"),
            ],
            notes: Vec::new(),
        };
        let md = report.markdown();
        assert!(md.contains("| Plain | 1 |"), "{md}");
        assert!(
            md.contains("| Runsc (baseline: Stockade under runc) | 1 |"),
            "{md}"
        );
        assert!(md.contains("| 2.00 |"), "{md}");
        assert!(
            md.contains("Load average (1 min) 0.5 at the start, 1.3 at the end."),
            "{md}"
        );
    }
}
