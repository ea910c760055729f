//! What the details of a sandbox add for a chart and a reader on real
//! Docker: the CPU and memory the server measured over the last minutes
//! (`GET …/usage/history`), read by the owner alone, and where the
//! filesystem of a fork or of a sandbox made from a snapshot came from
//! (`origin`).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

fn history_path(id: &str) -> String {
    format!("/api/v1/sandbox/{id}/usage/history")
}

fn at(sample: &Value) -> DateTime<Utc> {
    sample["at"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn details_keep_a_few_minutes_of_usage_that_only_the_owner_reads() {
    let (app, [(_, other)]) = spawn_with_account_ids(["usage-other"]).await;
    let (owner, id) = app
        .owned_sandbox("usage-owner", json!({"cpuCores": 0.5, "memoryGB": 0.5}))
        .await;

    // Nobody asked for its usage yet: nothing measured.
    let none = app
        .get(&history_path(&id), &owner)
        .await
        .expect(StatusCode::OK);
    assert_eq!(none, json!({"samples": []}));

    // Reading the details starts the measuring; the history then grows
    // about once a second while they are read.
    let began = Instant::now();
    let (details, samples) = loop {
        let details = app.get_sandbox(&owner, &id).await.expect(StatusCode::OK);
        let history = app
            .get(&history_path(&id), &owner)
            .await
            .expect(StatusCode::OK);
        let samples = history["samples"].as_array().unwrap().clone();
        if samples.len() >= 3 {
            break (details, samples);
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the history did not grow: {history}"
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
    };
    let now = Utc::now();
    for pair in samples.windows(2) {
        assert!(at(&pair[0]) < at(&pair[1]), "not oldest first: {samples:?}");
    }
    for s in &samples {
        assert!(now - at(s) <= chrono::Duration::minutes(5), "{s}");
        assert!(at(s) <= now, "{s}");
        assert_eq!(s["memoryLimitBytes"], json!(512u64 << 20), "{s}");
        assert!(s["memoryBytes"].as_u64().unwrap() > 0, "{s}");
        assert!(
            s.get("cpuPercent")
                .is_none_or(|c| c.as_f64().unwrap() >= 0.0),
            "{s}"
        );
    }
    // The details' figures are among the measured ones.
    let shown = details["usage"]["sampledAt"].as_str().unwrap();
    assert!(
        samples.iter().any(|s| s["at"] == json!(shown)),
        "{shown} not in {samples:?}"
    );

    // Another account: refused, and nothing of the figures in the answer.
    let refused = app.get(&history_path(&id), &other).await;
    assert!(
        matches!(
            refused.status,
            StatusCode::FORBIDDEN | StatusCode::NOT_FOUND
        ),
        "{:?}",
        refused.body
    );
    assert!(refused.body.get("samples").is_none());
    // No token; an unknown sandbox.
    let anonymous = app
        .http
        .get(format!("{}{}", app.base, history_path(&id)))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let unknown = app.get(&history_path("zzzzzzzzzzzz"), &owner).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{:?}", unknown.body);

    // Stopped, it is measured no more: what was kept stays readable.
    let kept = samples.len();
    app.act(&owner, &id, "stop").await.expect(StatusCode::OK);
    let after = app
        .get(&history_path(&id), &owner)
        .await
        .expect(StatusCode::OK);
    assert!(
        after["samples"].as_array().unwrap().len() >= kept,
        "{after}"
    );
}

#[tokio::test]
async fn details_say_where_a_fork_and_a_restored_sandbox_came_from() {
    let (app, source) = spawn_with_sandbox_id(json!({"name": "origin-source"})).await;
    let t = app.admin_token.clone();
    let plain = app.get_sandbox(&t, &source).await.expect(StatusCode::OK);
    assert!(plain.get("origin").is_none(), "{plain}");

    let fork = app
        .sandbox_post(&t, &source, "fork", json!({"name": "origin-fork"}))
        .await
        .expect(StatusCode::CREATED);
    let fork_id = fork["id"].as_str().unwrap();
    let image = fork["dockerImage"].as_str().unwrap();
    let snapshot_of_fork = image.strip_prefix("stockade-snapshot:").unwrap();
    let details = app.get_sandbox(&t, fork_id).await.expect(StatusCode::OK);
    assert_eq!(
        details["origin"],
        json!({"kind": "fork", "snapshotId": snapshot_of_fork,
               "sandboxId": source, "sandboxName": "origin-source"})
    );

    let snapshot = app.snapshot_id(&t, &source, "origin-snap").await;
    let restored = app
        .create_id(
            &t,
            json!({"name": "origin-restored", "source": {"type": "snapshot", "snapshotId": snapshot}}),
        )
        .await;
    let details = app.get_sandbox(&t, &restored).await.expect(StatusCode::OK);
    assert_eq!(
        details["origin"],
        json!({"kind": "snapshot", "snapshotId": snapshot, "snapshotName": "origin-snap",
               "sandboxId": source, "sandboxName": "origin-source"})
    );

    // The source gone, the origin still names the snapshot and the source's id.
    app.delete_sandbox(&t, &source, "")
        .await
        .expect(StatusCode::OK);
    let details = app.get_sandbox(&t, &restored).await.expect(StatusCode::OK);
    assert_eq!(details["origin"]["snapshotName"], "origin-snap");
    assert_eq!(details["origin"]["sandboxId"], json!(source));
}
