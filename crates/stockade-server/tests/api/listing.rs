//! List filters, ordering and pagination.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

fn names(r: &Resp) -> Vec<String> {
    r.body["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn list_filters_order_and_pages() {
    let (app, one) = spawn_with_sandbox(json!({ "name": "one", "labels": ["web", "prod"] })).await;
    let t = &app.admin_token;
    app.create(t, json!({ "name": "two", "labels": ["web"] }))
        .await;
    let three = app
        .create(t, json!({ "name": "three", "labels": ["prod"] }))
        .await;
    let r = app.act(t, &id_of(&three), "stop?timeout=1").await;
    assert_eq!(r.body["status"], "STOPPED");
    app.delete(
        &format!("/api/v1/sandbox/{}", one["id"].as_str().unwrap()),
        t,
    )
    .await;

    // Newest first; terminated excluded by default.
    let r = app.get("/api/v1/sandbox", t).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(names(&r), vec!["three", "two"]);
    assert_eq!(r.body["total"], 2);
    assert_eq!(r.body["page"], 1);
    assert_eq!(r.body["per_page"], 50);
    assert_eq!(r.body["has_next"], false);

    // Status in any case, repeatable; labels: ALL must match; the name.
    for (query, want) in [
        ("status=running", vec!["two"]),
        ("status=Stopped", vec!["three"]),
        ("status=running&status=STOPPED", vec!["three", "two"]),
        ("status=terminated", vec!["one"]),
        ("is_active=false", vec!["one"]),
        ("is_active=true", vec!["three", "two"]),
        ("labels=web", vec!["two"]),
        ("labels=prod", vec!["three"]),
        ("labels=web&labels=prod", vec![]),
        ("labels=web,prod&is_active=false", vec!["one"]),
        ("name=two", vec!["two"]),
    ] {
        let r = app.get(&format!("/api/v1/sandbox?{query}"), t).await;
        assert_eq!(names(&r), want, "{query}");
    }

    // Pagination.
    let p1 = app.get("/api/v1/sandbox?per_page=1&page=1", t).await;
    assert_eq!(names(&p1), vec!["three"]);
    assert_eq!(p1.body["has_next"], true);
    assert_eq!(p1.body["total"], 2);
    // The camelCase spellings say the same.
    assert_eq!(p1.body["hasNext"], true);
    assert_eq!(p1.body["perPage"], p1.body["per_page"]);
    let p2 = app.get("/api/v1/sandbox?per_page=1&page=2", t).await;
    assert_eq!(names(&p2), vec!["two"]);
    assert_eq!(p2.body["has_next"], false);
    let p3 = app.get("/api/v1/sandbox?per_page=1&page=3", t).await;
    assert!(names(&p3).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn duplicate_names_conflict_even_when_racing() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let http = app.http.clone();
        let url = format!("{}/api/v1/sandbox", app.base);
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            http.post(url)
                .bearer_auth(t)
                .json(&json!({ "name": "same" }))
                .send()
                .await
                .unwrap()
                .status()
        }));
    }
    let mut codes = Vec::new();
    for task in tasks {
        codes.push(task.await.unwrap());
    }
    assert_eq!(
        codes.iter().filter(|c| **c == StatusCode::CREATED).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == StatusCode::CONFLICT).count(),
        3,
        "{codes:?}"
    );
    assert_eq!(app.containers().len(), 1);
}
