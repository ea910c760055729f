//! The benchmark in its quick mode, as CI runs it: every scenario runs,
//! results.json and results.md are written, and nothing it made is left in
//! Docker. Ratios are reported, never asserted (timings here are noisy).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn quick_run_measures_every_scenario_and_cleans_up() {
    let out = tempfile::tempdir().unwrap();
    let image =
        std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into());
    let mut child = Command::new(env!("CARGO_BIN_EXE_stockade-bench"))
        .args(["--quick", "--out"])
        .arg(out.path())
        .env("STOCKADE_BENCH_IMAGE", &image)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stockade-bench");
    let deadline = Instant::now() + Duration::from_secs(600);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("stockade-bench --quick did not finish within 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        status.success(),
        "stockade-bench failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("| scenario |"), "{stdout}");

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let ids: Vec<&str> = rows.iter().filter_map(|r| r["id"].as_str()).collect();
    let mut expected = vec![
        "api",
        "list_sqlite",
        "list_sqlite_labels",
        "rss_idle",
        "rss_records",
        "create",
        "exec",
        "burst",
        "burst_rate",
        "stop",
        "destroy",
        "stop_destroy",
        "logs",
        "create_warm",
        "create_warm_env",
    ];
    if std::env::var("STOCKADE_TEST_DATABASE_URL").is_ok_and(|u| !u.is_empty()) {
        expected.extend(["list_postgres", "list_postgres_labels"]);
    }
    for id in expected {
        let row = rows
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no row {id} in {ids:?}"));
        let p50 = row["stockade"]["p50"].as_f64().unwrap_or(-1.0);
        assert!(p50 > 0.0, "{id}: {row}");
        if row["raw"].is_object() {
            assert!(
                row["ratio"].as_f64().is_some_and(|r| r > 0.0),
                "{id}: {row}"
            );
        }
    }
    let md = std::fs::read_to_string(out.path().join("results.md")).unwrap();
    assert!(md.contains("Create → RUNNING from the warm pool"), "{md}");

    // Everything the run made is gone.
    let instances = report["environment"]["instances"].as_array().unwrap();
    assert!(instances.len() >= 3, "{instances:?}");
    for instance in instances {
        let label = format!(
            "label=io.stockade.instance-id={}",
            instance.as_str().unwrap()
        );
        for args in [
            vec!["ps", "-aq", "--filter", &label],
            vec!["volume", "ls", "-q", "--filter", &label],
        ] {
            let left = Command::new("docker").args(&args).output().unwrap();
            assert!(
                String::from_utf8_lossy(&left.stdout).trim().is_empty(),
                "left behind ({args:?}): {}",
                String::from_utf8_lossy(&left.stdout)
            );
        }
    }
}
