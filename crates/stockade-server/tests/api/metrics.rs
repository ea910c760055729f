//! `GET /metrics` in the Prometheus text format: requests by route
//! template and status, sandboxes by status, operation latencies, Docker errors.

use std::collections::HashMap;

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::*;

/// Scrapes `/metrics` and parses every sample line into `name{labels}` → value.
async fn scrape(app: &TestApp) -> HashMap<String, f64> {
    let resp = app.get_raw("/metrics").await;
    assert_eq!(resp.status(), StatusCode::OK);
    let ctype = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let text = resp.text().await.unwrap();
    let mut samples = HashMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (key, value) = line.rsplit_once(' ').expect("`series value`");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
        assert!(
            samples.insert(key.to_owned(), value).is_none(),
            "duplicate series {key}"
        );
    }
    samples
}

fn get(samples: &HashMap<String, f64>, key: &str) -> f64 {
    *samples
        .get(key)
        .unwrap_or_else(|| panic!("no series {key} in {samples:#?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_requests_sandboxes_operations_and_docker_errors() {
    let (app, a) = spawn_with_sandbox(json!({ "name": "a" })).await;
    let t = &app.admin_token;
    let b = app.create(t, json!({ "name": "b" })).await;
    let (a, b) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
    app.bodiless(
        Method::POST,
        &format!("/api/v1/sandbox/{b}/stop?timeout=1"),
        t,
    )
    .await;
    assert_eq!(
        app.get(&format!("/api/v1/sandbox/{a}"), t).await.status,
        StatusCode::OK
    );
    let r = app.get("/api/v1/sandbox/abcdefghijkl", t).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = app.get("/no/such/route", t).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let image = format!(
        "stockade-test/missing-{}:nope",
        stockade_core::SandboxId::generate()
    );
    let r = app
        .try_create(t, json!({ "name": "ghost", "dockerImage": image }))
        .await;
    assert_eq!(r.code(), "image_unavailable");

    let m = scrape(&app).await;
    let requests = |method: &str, route: &str, status: u16| {
        get(
            &m,
            &format!(
                "stockade_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}}"
            ),
        )
    };
    // Routes are templates, not raw paths.
    assert_eq!(requests("POST", "/api/v1/sandbox", 201), 2.0);
    assert_eq!(requests("POST", "/api/v1/sandbox", 422), 1.0);
    assert_eq!(requests("GET", "/api/v1/sandbox/{id}", 200), 1.0);
    assert_eq!(requests("GET", "/api/v1/sandbox/{id}", 404), 1.0);
    assert_eq!(requests("POST", "/api/v1/sandbox/{id}/stop", 200), 1.0);
    assert_eq!(requests("GET", "unmatched", 404), 1.0);
    assert!(m.keys().all(|k| !k.contains(a) && !k.contains("no/such")));
    // Latency histograms: cumulative buckets ending in +Inf = count.
    let series = "method=\"POST\",route=\"/api/v1/sandbox\"";
    let count = get(
        &m,
        &format!("stockade_http_request_duration_seconds_count{{{series}}}"),
    );
    assert_eq!(count, 3.0);
    assert_eq!(
        get(
            &m,
            &format!("stockade_http_request_duration_seconds_bucket{{{series},le=\"+Inf\"}}")
        ),
        count
    );
    assert!(
        get(
            &m,
            &format!("stockade_http_request_duration_seconds_sum{{{series}}}")
        ) > 0.0
    );

    // Sandboxes by status, from the database.
    assert_eq!(get(&m, "stockade_sandboxes{status=\"RUNNING\"}"), 1.0);
    assert_eq!(get(&m, "stockade_sandboxes{status=\"STOPPED\"}"), 1.0);
    assert_eq!(get(&m, "stockade_sandboxes{status=\"ERROR\"}"), 0.0);
    assert_eq!(get(&m, "stockade_database_up"), 1.0);

    // Operation latencies and the Docker error of the missing image.
    let ops = |op: &str| {
        get(
            &m,
            &format!("stockade_sandbox_operation_duration_seconds_count{{operation=\"{op}\"}}"),
        )
    };
    assert_eq!(ops("create"), 3.0);
    assert_eq!(ops("stop"), 1.0);
    assert!(
        !m.contains_key("stockade_sandbox_operation_duration_seconds_count{operation=\"destroy\"}")
    );
    assert_eq!(
        get(
            &m,
            "stockade_docker_errors_total{operation=\"create\",kind=\"image_unavailable\"}"
        ),
        1.0
    );

    // Deleting and starting move the gauge and fill their histograms.
    app.delete(&format!("/api/v1/sandbox/{a}"), t).await;
    app.bodiless(Method::POST, &format!("/api/v1/sandbox/{b}/start"), t)
        .await;
    let m = scrape(&app).await;
    assert_eq!(get(&m, "stockade_sandboxes{status=\"RUNNING\"}"), 1.0);
    assert_eq!(get(&m, "stockade_sandboxes{status=\"STOPPED\"}"), 0.0);
    assert_eq!(
        get(
            &m,
            "stockade_sandbox_operation_duration_seconds_count{operation=\"destroy\"}"
        ),
        1.0
    );
    assert_eq!(
        get(
            &m,
            "stockade_sandbox_operation_duration_seconds_count{operation=\"start\"}"
        ),
        1.0
    );
    // The first scrape is counted too.
    assert_eq!(
        get(
            &m,
            "stockade_http_requests_total{method=\"GET\",route=\"/metrics\",status=\"200\"}"
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_metrics_token_protects_the_scrape() {
    let app = spawn_configured(|c| c.metrics_token = Some("scrape-secret".into())).await;
    let url = format!("{}/metrics", app.base);
    let r = app.http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A wrong token and an API token (not the metrics token) are refused.
    for (bearer, status) in [
        ("wrong", StatusCode::UNAUTHORIZED),
        (app.admin_token.as_str(), StatusCode::UNAUTHORIZED),
        ("scrape-secret", StatusCode::OK),
    ] {
        let r = app.http.get(&url).bearer_auth(bearer).send().await.unwrap();
        assert_eq!(r.status(), status, "{bearer}");
        if status == StatusCode::OK {
            assert!(r.text().await.unwrap().contains("stockade_build_info"));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openapi_document_has_metrics_teams_and_usage() {
    let app = spawn_app().await;
    let doc = app.get("/api/v1/openapi.json", &app.admin_token).await.body;
    for path in [
        "/metrics",
        "/api/v1/teams",
        "/api/v1/teams/{team_id}",
        "/api/v1/teams/{team_id}/members",
        "/api/v1/teams/{team_id}/members/{account_id}",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} is not documented");
    }
    for schema in ["ResourceUsage", "TeamResponse", "CreateTeamRequest"] {
        assert!(
            doc["components"]["schemas"].get(schema).is_some(),
            "{schema} is not documented"
        );
    }
    let usage = &doc["components"]["schemas"]["SandboxResponse"]["properties"]["usage"];
    assert!(!usage.is_null(), "SandboxResponse.usage is not documented");
}
