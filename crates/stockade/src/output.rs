//! How the CLI shows things: tables for people, JSON for scripts, a spinner
//! on slow calls, and errors as sentences with a hint.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use stockade_sdk::api::SandboxResponse;
use stockade_sdk::Error;

/// Prints `value` as pretty JSON.
pub fn json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// A spinner on stderr while `message` is in progress; invisible when
/// stderr is not a terminal or JSON output was asked for.
pub fn spinner(message: &str, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(message.to_owned());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// A progress bar of bytes on stderr (a byte counter when `total` is 0,
/// i.e. unknown); hidden for JSON output, for known totals under 1 MiB, and
/// when stderr is not a terminal.
pub fn bytes_bar(total: u64, message: &str, quiet: bool) -> ProgressBar {
    if quiet || (total > 0 && total < 1024 * 1024) {
        return ProgressBar::hidden();
    }
    let (pb, template) = if total == 0 {
        (
            ProgressBar::new_spinner(),
            "{spinner} {msg} {bytes} ({binary_bytes_per_sec})",
        )
    } else {
        (
            ProgressBar::new(total),
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({binary_bytes_per_sec}, {eta})",
        )
    };
    pb.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(message.to_owned());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// Prints rows under a header, columns padded to fit.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

pub fn sandbox_row(s: &SandboxResponse) -> Vec<String> {
    vec![
        s.id.clone(),
        s.name.clone(),
        s.status.to_string(),
        s.docker_image.clone(),
        format!(
            "{} CPU / {} GB",
            trim_num(s.cpu_cores),
            trim_num(s.memory_gb)
        ),
        s.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
    ]
}

pub const SANDBOX_HEADER: [&str; 6] = ["ID", "NAME", "STATUS", "IMAGE", "RESOURCES", "CREATED"];

/// Details of one sandbox, one fact a line.
pub fn sandbox_details(s: &SandboxResponse) {
    let mut facts: Vec<(&str, String)> = vec![
        ("id", s.id.clone()),
        ("name", s.name.clone()),
        ("status", s.status.to_string()),
        ("image", s.docker_image.clone()),
        ("cpu", format!("{} cores", trim_num(s.cpu_cores))),
        ("memory", format!("{} GB", trim_num(s.memory_gb))),
        ("disk", format!("{} GB", s.disk_size_gb)),
        ("network", s.network_policy.clone()),
        ("server", s.server.clone()),
        ("created", s.created_at.to_rfc3339()),
    ];
    if let Some(r) = &s.status_reason {
        facts.push(("reason", r.clone()));
    }
    if let Some(u) = s.uptime_seconds {
        facts.push(("uptime", human_duration(u)));
    }
    if s.timeout_minutes > 0.0 {
        facts.push(("timeout", format!("{} min", trim_num(s.timeout_minutes))));
    }
    if !s.labels.is_empty() {
        facts.push(("labels", s.labels.join(", ")));
    }
    if !s.tags.is_empty() {
        let tags: Vec<String> = s.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        facts.push(("tags", tags.join(", ")));
    }
    if !s.ports.is_empty() {
        let ports: Vec<String> = s.ports.iter().map(u16::to_string).collect();
        facts.push(("ports", ports.join(", ")));
    }
    let vol = match &s.volume.size {
        Some(size) => format!("{} at {} ({size})", s.volume.name, s.volume.mount_path),
        None => format!("{} at {}", s.volume.name, s.volume.mount_path),
    };
    facts.push(("volume", vol));
    if let Some(w) = &s.volume.warning {
        facts.push(("warning", w.clone()));
    }
    for (k, v) in facts {
        println!("{k:<9} {v}");
    }
}

fn trim_num(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn human_duration(secs: i64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h}h {m}m")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// An error as a sentence, with what to do about it.
pub fn describe(e: &anyhow::Error) -> String {
    let Some(sdk) = e.downcast_ref::<Error>() else {
        return format!("{e:#}");
    };
    match sdk {
        Error::Api {
            status: 401,
            message,
            ..
        } => format!("{message}\nhint: pass --token or set STOCKADE_TOKEN to a valid API token"),
        Error::Api {
            status: 400,
            message,
            details,
            ..
        } => {
            let mut out = message.clone();
            if let Some(fields) = details.as_ref().and_then(|d| d["fields"].as_array()) {
                for f in fields {
                    out.push_str(&format!(
                        "\n  {}: {}",
                        f["field"].as_str().unwrap_or("?"),
                        f["message"].as_str().unwrap_or("?")
                    ));
                }
            }
            out
        }
        Error::Api {
            status: 409,
            message,
            ..
        } if message.contains("not running") => format!(
            "{message}\nhint: start it with `stockade start SANDBOX` (or `Sandbox::get`, which resumes it)"
        ),
        Error::Api { message, .. } => message.clone(),
        Error::Transport { url, reason } => format!(
            "could not reach the Stockade server at {url} ({reason})\nhint: is it running? start it with `stockade server`, or set STOCKADE_URL"
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations() {
        assert_eq!(trim_num(2.0), "2");
        assert_eq!(trim_num(0.5), "0.5");
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(3725), "1h 2m");
        assert_eq!(human_duration(90061), "1d 1h 1m");
    }
}
