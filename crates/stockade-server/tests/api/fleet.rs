//! Fleets, small enough for every run: a burst of creates at once, each to
//! its first command, cold and from a warm pool as large as the burst; and
//! fifty idle sandboxes on the host, listed, reached and removed by one bulk
//! delete that leaves nothing behind. (`stockade-bench --only burst,density`
//! measures the same at a hundred and five hundred.)

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use stockade_service::pool::{PoolClassConfig, PoolConfig};

use crate::helpers::*;

const BURST: usize = 20;
const DENSITY: usize = 50;

fn small(label: &str) -> Value {
    json!({ "cpuCores": 0.1, "memoryGB": 0.0625, "labels": [label] })
}

/// `n` creates of `body` at once, each followed by its first command:
/// every one must be RUNNING and answer. Returns their ids.
async fn burst(app: &TestApp, token: &str, n: usize, body: Value) -> Vec<String> {
    let done = futures_util::future::join_all((0..n).map(|_| async {
        let r = app.try_create(token, body.clone()).await;
        r.assert_status(StatusCode::CREATED, "a create in the burst");
        assert_eq!(r.body["status"], "RUNNING", "{:?}", r.body);
        let id = r.body["id"].as_str().unwrap().to_owned();
        let r = app
            .sandbox_post(token, &id, "exec", json!({ "cmd": ["echo", "first"] }))
            .await;
        r.assert_status(StatusCode::OK, "the first command");
        assert_eq!(r.body["stdout"], "first\n", "{:?}", r.body);
        id
    }))
    .await;
    let unique: BTreeSet<&String> = done.iter().collect();
    assert_eq!(unique.len(), n, "every create made a sandbox of its own");
    done
}

/// Deletes every sandbox labelled `label` in one request; all must go.
async fn bulk_delete(app: &TestApp, token: &str, label: &str, n: usize) {
    let r = app
        .call(
            reqwest::Method::DELETE,
            "/api/v1/sandbox/bulk",
            Some(token),
            Some(json!({ "labels": [label] })),
        )
        .await;
    r.assert_status(StatusCode::OK, "bulk delete");
    let results = r.body["results"].as_array().unwrap();
    assert_eq!(results.len(), n, "{:?}", r.body);
    assert!(results.iter().all(|x| x["deleted"] == true), "{:?}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cold_burst_reaches_every_first_command() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();
    let ids = burst(&app, &t, BURST, small("burst-cold")).await;
    let listed = app.get("/api/v1/sandbox?labels=burst-cold", &t).await;
    assert_eq!(listed.body["total"], BURST as u64, "{:?}", listed.body);
    bulk_delete(&app, &t, "burst-cold", BURST).await;
    for id in &ids {
        assert!(!container_exists(id), "{id}'s container is left");
        assert!(!volume_exists(id), "{id}'s volume is left");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warm_burst_is_served_by_the_pool() {
    let app = spawn_app_with(AppOptions {
        configure: Some(Box::new(|c| {
            c.service.pool = PoolConfig {
                classes: vec![PoolClassConfig {
                    cpu_cores: Some(0.1),
                    memory_gb: Some(0.0625),
                    ..PoolClassConfig::default_class(BURST)
                }],
                check_interval: Duration::from_millis(200),
                drain_on_shutdown: true,
                max_concurrent_fills: 4,
            };
        })),
        ..Default::default()
    })
    .await;
    let t = app.admin_token.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    while app.state.svc.pool().ready_total() < BURST {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pool did not fill to {BURST}: {:?}",
            app.state.svc.pool()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let members: BTreeSet<String> = app
        .state
        .svc
        .pool()
        .members()
        .iter()
        .map(|m| m.to_string())
        .collect();
    // One more than the pool holds: the last is made cold, without waiting
    // for a refill.
    let ids = burst(&app, &t, BURST + 1, small("burst-warm")).await;
    let served = ids.iter().filter(|id| members.contains(*id)).count();
    assert!(
        served * 100 >= BURST * 95,
        "{served} of {} creates came from the pool of {BURST}",
        ids.len()
    );
    bulk_delete(&app, &t, "burst-warm", BURST + 1).await;
    for id in &ids {
        assert!(!container_exists(id), "{id}'s container is left");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_idle_sandboxes_stay_reachable_and_go_in_one_bulk_delete() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();
    let mut ids = Vec::new();
    while ids.len() < DENSITY {
        let wave = 10.min(DENSITY - ids.len());
        let made =
            futures_util::future::join_all((0..wave).map(|_| app.create_id(&t, small("density"))))
                .await;
        ids.extend(made);
    }
    // Listed, paged and counted.
    let page = app
        .get("/api/v1/sandbox?labels=density&per_page=20", &t)
        .await;
    assert_eq!(page.body["total"], DENSITY as u64, "{:?}", page.body);
    assert_eq!(page.body["sandboxes"].as_array().unwrap().len(), 20);
    // The first and the last still answer.
    for id in [&ids[0], &ids[DENSITY - 1]] {
        let r = app
            .sandbox_post(&t, id, "exec", json!({ "cmd": ["true"] }))
            .await;
        r.assert_status(StatusCode::OK, "exec at density");
        assert_eq!(r.body["exitCode"], 0, "{:?}", r.body);
    }
    // Each has its egress entry; one bulk delete removes all of them.
    let before = egress_listing();
    for id in &ids {
        assert!(before.contains(&format!("stockade:{id}")), "{id}: {before}");
    }
    bulk_delete(&app, &t, "density", DENSITY).await;
    let after = egress_entries_gone(&ids.iter().map(String::as_str).collect::<Vec<_>>()).await;
    for id in &ids {
        assert!(
            !after.contains(id.as_str()),
            "{id}'s egress entry is left: {after}"
        );
    }
    assert!(app.containers().is_empty(), "{:?}", app.containers());
    assert!(app.volumes().is_empty(), "{:?}", app.volumes());
    let listed = app.get("/api/v1/sandbox?labels=density", &t).await;
    assert_eq!(listed.body["total"], 0, "{:?}", listed.body);
}
