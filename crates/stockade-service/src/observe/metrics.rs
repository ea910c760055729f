//! Prometheus metrics: request counts and latencies by route
//! template, sandbox operation latencies, Docker errors, rate-limit
//! rejections, and the number of sandboxes by status (read from the store at
//! scrape time), in the text exposition format. The HTTP adapter feeds
//! the request figures and serves the text.
//!
//! Hand-rolled: a handful of counters and fixed-bucket histograms behind one
//! mutex each. Every label value comes from a bounded set (route templates,
//! not raw paths; known methods; status codes; fixed operation names), so the
//! memory they take is bounded too.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stockade_core::SandboxStatus;
use stockade_runtime::RuntimeError;

/// Upper bounds (seconds) of the HTTP latency buckets.
const HTTP_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds (seconds) of the sandbox operation buckets: a create pulls
/// images, a stop waits up to its grace period.
const OPERATION_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
/// Label of requests that matched no route.
pub const UNMATCHED: &str = "unmatched";

/// A cumulative histogram with fixed buckets.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative); the last one is `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, seconds: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += seconds;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, n) in self.counts.iter().enumerate() {
            cumulative += n;
            let le = match self.bounds.get(i) {
                Some(b) => format!("{b}"),
                None => "+Inf".to_owned(),
            };
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
struct Http {
    /// (method, route, status) → requests.
    requests: BTreeMap<(&'static str, String, u16), u64>,
    /// (method, route) → latency to the response head.
    durations: BTreeMap<(&'static str, String), Histogram>,
}

/// The server's metrics. One per [`Service`].
#[derive(Default)]
pub struct Metrics {
    http: Mutex<Http>,
    /// operation → latency.
    operations: Mutex<BTreeMap<&'static str, Histogram>>,
    /// (operation, kind) → errors the Docker engine returned.
    docker_errors: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// bucket (`ip` or `token`) → requests refused with 429.
    rate_limited: Mutex<BTreeMap<&'static str, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The method as a bounded label.
fn method_label(m: &str) -> &'static str {
    const KNOWN: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
    KNOWN.into_iter().find(|k| *k == m).unwrap_or("OTHER")
}

/// Escapes a label value for the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Records the duration of a sandbox operation when dropped.
#[must_use = "the operation is timed until this guard is dropped"]
pub struct OperationTimer<'a> {
    metrics: &'a Metrics,
    operation: &'static str,
    started: Instant,
}

impl Drop for OperationTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .observe_operation(self.operation, self.started.elapsed());
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// One HTTP request answered.
    pub fn observe_request(&self, method: &str, route: &str, status: u16, took: Duration) {
        let method = method_label(method);
        let mut http = lock(&self.http);
        *http
            .requests
            .entry((method, route.to_owned(), status))
            .or_insert(0) += 1;
        http.durations
            .entry((method, route.to_owned()))
            .or_insert_with(|| Histogram::new(HTTP_BUCKETS))
            .observe(took.as_secs_f64());
    }

    /// The duration of a sandbox operation: `create`, `start`, `stop`, `destroy`.
    pub fn observe_operation(&self, operation: &'static str, took: Duration) {
        lock(&self.operations)
            .entry(operation)
            .or_insert_with(|| Histogram::new(OPERATION_BUCKETS))
            .observe(took.as_secs_f64());
    }

    /// Times a sandbox operation until the returned guard is dropped.
    pub fn time_operation(&self, operation: &'static str) -> OperationTimer<'_> {
        OperationTimer {
            metrics: self,
            operation,
            started: Instant::now(),
        }
    }

    /// Counts an error of the Docker engine in `operation` (e.g. `create`,
    /// `stats`). A missing container is not an engine error and not counted.
    pub fn docker_error(&self, operation: &'static str, err: &RuntimeError) {
        let kind = match err {
            RuntimeError::NotFound(_) => return,
            RuntimeError::Unavailable(_) => "unavailable",
            RuntimeError::ImageUnavailable { .. } => "image_unavailable",
            RuntimeError::Conflict(_) => "conflict",
            RuntimeError::CwdMissing(_) => "cwd_missing",
            RuntimeError::LimitRefused(_) | RuntimeError::Other(_) => "other",
        };
        *lock(&self.docker_errors)
            .entry((operation, kind))
            .or_insert(0) += 1;
    }

    /// A request refused by the rate limit of `bucket` (`ip` or `token`).
    pub fn rate_limited(&self, bucket: &'static str) {
        *lock(&self.rate_limited).entry(bucket).or_insert(0) += 1;
    }

    /// The text exposition of everything, with the sandbox counts of the
    /// store (`None` when the store did not answer).
    pub fn render(&self, sandboxes: Option<&[(SandboxStatus, u64)]>) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let _ = writeln!(
            out,
            "# HELP stockade_build_info The running Stockade version.\n\
             # TYPE stockade_build_info gauge\n\
             stockade_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );

        {
            let http = lock(&self.http);
            out.push_str(
                "# HELP stockade_http_requests_total HTTP requests by method, route template and status.\n\
                 # TYPE stockade_http_requests_total counter\n",
            );
            for ((method, route, status), n) in &http.requests {
                let _ = writeln!(
                    out,
                    "stockade_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {n}",
                    escape(route)
                );
            }
            out.push_str(
                "# HELP stockade_http_request_duration_seconds Time to the response head, by method and route template.\n\
                 # TYPE stockade_http_request_duration_seconds histogram\n",
            );
            for ((method, route), h) in &http.durations {
                h.write(
                    &mut out,
                    "stockade_http_request_duration_seconds",
                    &format!("method=\"{method}\",route=\"{}\"", escape(route)),
                );
            }
        }

        out.push_str(
            "# HELP stockade_sandboxes Sandbox records that are not deleted, by status.\n\
             # TYPE stockade_sandboxes gauge\n",
        );
        if let Some(counts) = sandboxes {
            for status in SandboxStatus::ALL {
                let n = counts
                    .iter()
                    .filter(|(s, _)| *s == status)
                    .map(|(_, n)| n)
                    .sum::<u64>();
                let _ = writeln!(
                    out,
                    "stockade_sandboxes{{status=\"{}\"}} {n}",
                    status.as_str()
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP stockade_database_up Whether the database answered this scrape.\n\
             # TYPE stockade_database_up gauge\n\
             stockade_database_up {}",
            u8::from(sandboxes.is_some())
        );

        out.push_str(
            "# HELP stockade_sandbox_operation_duration_seconds Duration of sandbox operations.\n\
             # TYPE stockade_sandbox_operation_duration_seconds histogram\n",
        );
        for (operation, h) in lock(&self.operations).iter() {
            h.write(
                &mut out,
                "stockade_sandbox_operation_duration_seconds",
                &format!("operation=\"{operation}\""),
            );
        }

        out.push_str(
            "# HELP stockade_docker_errors_total Errors returned by the Docker engine, by operation and kind.\n\
             # TYPE stockade_docker_errors_total counter\n",
        );
        for ((operation, kind), n) in lock(&self.docker_errors).iter() {
            let _ = writeln!(
                out,
                "stockade_docker_errors_total{{operation=\"{operation}\",kind=\"{kind}\"}} {n}"
            );
        }

        out.push_str(
            "# HELP stockade_rate_limited_total Requests refused with 429, by the bucket that was exhausted.\n\
             # TYPE stockade_rate_limited_total counter\n",
        );
        for (bucket, n) in lock(&self.rate_limited).iter() {
            let _ = writeln!(
                out,
                "stockade_rate_limited_total{{bucket=\"{bucket}\"}} {n}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new();
        m.observe_request("GET", "/api/v1/sandbox/{id}", 200, Duration::from_millis(3));
        m.observe_request(
            "GET",
            "/api/v1/sandbox/{id}",
            200,
            Duration::from_millis(30),
        );
        m.observe_request("BREW", UNMATCHED, 404, Duration::ZERO);
        m.observe_operation("create", Duration::from_millis(700));
        m.docker_error("create", &RuntimeError::Other("boom".into()));
        m.docker_error("start", &RuntimeError::NotFound("gone".into()));
        m.rate_limited("ip");
        let text = m.render(Some(&[(SandboxStatus::Running, 2)]));
        for line in [
            "stockade_http_requests_total{method=\"GET\",route=\"/api/v1/sandbox/{id}\",status=\"200\"} 2",
            "stockade_http_requests_total{method=\"OTHER\",route=\"unmatched\",status=\"404\"} 1",
            "stockade_http_request_duration_seconds_bucket{method=\"GET\",route=\"/api/v1/sandbox/{id}\",le=\"0.005\"} 1",
            "stockade_http_request_duration_seconds_bucket{method=\"GET\",route=\"/api/v1/sandbox/{id}\",le=\"0.05\"} 2",
            "stockade_http_request_duration_seconds_bucket{method=\"GET\",route=\"/api/v1/sandbox/{id}\",le=\"+Inf\"} 2",
            "stockade_http_request_duration_seconds_count{method=\"GET\",route=\"/api/v1/sandbox/{id}\"} 2",
            "stockade_sandboxes{status=\"RUNNING\"} 2",
            "stockade_sandboxes{status=\"STOPPED\"} 0",
            "stockade_database_up 1",
            "stockade_sandbox_operation_duration_seconds_bucket{operation=\"create\",le=\"0.5\"} 0",
            "stockade_sandbox_operation_duration_seconds_bucket{operation=\"create\",le=\"1\"} 1",
            "stockade_sandbox_operation_duration_seconds_count{operation=\"create\"} 1",
            "stockade_docker_errors_total{operation=\"create\",kind=\"other\"} 1",
            "stockade_rate_limited_total{bucket=\"ip\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        assert!(!text.contains("operation=\"start\""), "{text}");
        let down = m.render(None);
        assert!(down.contains("stockade_database_up 0"));
        assert!(!down.contains("stockade_sandboxes{"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
