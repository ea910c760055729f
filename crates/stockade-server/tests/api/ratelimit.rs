//! API-12: 1000 requests per 60 s per client IP and per token, independently;
//! 429 with `Retry-After` and `RateLimit-*` headers past either limit.

use std::time::Duration;

use futures_util::{stream, StreamExt};
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::Value;
use stockade_server::ratelimit::{IpNet, Limit, RateLimitConfig};

use crate::helpers::*;

fn limit(requests: u32) -> Option<Limit> {
    Some(Limit {
        requests,
        window: Duration::from_secs(60),
    })
}

/// `GET path` with an optional token and extra headers: status, headers, body.
async fn get(
    app: &TestApp,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Value) {
    let mut req = app.http.get(format!("{}{path}", app.base));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn header(h: &HeaderMap, name: &str) -> u64 {
    h.get(name)
        .unwrap_or_else(|| panic!("no {name} header in {h:?}"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number: {h:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_1001st_request_in_a_minute_is_refused() {
    let app = spawn_app().await;
    let token = app.admin_token.clone();
    let started = std::time::Instant::now();
    let results: Vec<(StatusCode, HeaderMap, Value)> = stream::iter(0..1000)
        .map(|_| get(&app, "/api/v1/me", Some(&token), &[]))
        .buffer_unordered(16)
        .collect()
        .await;
    eprintln!("1000 requests took {:?}", started.elapsed());
    assert!(results.iter().all(|(s, _, _)| *s == StatusCode::OK));
    let mut remaining: Vec<u64> = results
        .iter()
        .map(|(_, h, _)| {
            assert_eq!(header(h, "ratelimit-limit"), 1000);
            assert!(header(h, "ratelimit-reset") <= 60);
            header(h, "ratelimit-remaining")
        })
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..1000).collect::<Vec<u64>>());

    let (status, h, body) = get(&app, "/api/v1/me", Some(&token), &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["error"]["code"], "rate_limited");
    let retry = header(&h, "retry-after");
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(header(&h, "ratelimit-limit"), 1000);
    assert_eq!(header(&h, "ratelimit-remaining"), 0);
    assert!(header(&h, "ratelimit-reset") <= 60);
    assert_eq!(
        h.get("ratelimit-policy").unwrap().to_str().unwrap(),
        "1000;w=60"
    );

    // Health checks and metrics scrapes are not limited.
    let (status, h, _) = get(&app, "/api/v1/health", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(h.get("ratelimit-limit").is_none());
    let (status, _, _) = get(&app, "/metrics", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn ip_and_token_buckets_are_independent() {
    let app = spawn_app_with(AppOptions {
        configure: Some(Box::new(|c| {
            c.rate_limit = Some(RateLimitConfig {
                per_ip: limit(30),
                per_token: limit(20),
                ..RateLimitConfig::default()
            });
        })),
        ..Default::default()
    })
    .await;
    let a = app.admin_token.clone();
    // 1 request of token A (and of this IP).
    let b = app.new_account("bob").await;

    // Token A: 19 more, the last one leaves A nothing (the IP has 10 left).
    for i in 2..=20 {
        let (status, h, _) = get(&app, "/api/v1/me", Some(&a), &[]).await;
        assert_eq!(status, StatusCode::OK, "request {i}");
        assert_eq!(header(&h, "ratelimit-limit"), 20);
        assert_eq!(header(&h, "ratelimit-remaining"), 20 - i);
    }
    let (status, h, body) = get(&app, "/api/v1/me", Some(&a), &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("per-token"));
    assert_eq!(header(&h, "ratelimit-limit"), 20);
    assert!(header(&h, "retry-after") >= 1);

    // Token B from the same IP goes on until the IP's 30 are used up; A's
    // refused request did not count against the IP.
    for i in 21..=30 {
        let (status, h, _) = get(&app, "/api/v1/me", Some(&b), &[]).await;
        assert_eq!(status, StatusCode::OK, "request {i}");
        assert_eq!(header(&h, "ratelimit-limit"), 30);
        assert_eq!(header(&h, "ratelimit-remaining"), 30 - i);
    }
    let (status, h, body) = get(&app, "/api/v1/me", Some(&b), &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("per-client"));
    assert_eq!(header(&h, "ratelimit-limit"), 30);
    // The IP bucket holds before authentication, and X-Forwarded-For from
    // an untrusted peer changes nothing.
    let (status, _, _) = get(&app, "/api/v1/sandbox", None, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, _) = get(
        &app,
        "/api/v1/me",
        Some(&b),
        &[("x-forwarded-for", "203.0.113.9")],
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, _) = get(&app, "/api/v1/health", None, &[]).await;
    assert_eq!(status, StatusCode::OK);

    // The refusals are counted by bucket.
    let (_, _, metrics) = get(&app, "/metrics", None, &[]).await;
    let metrics = metrics.as_str().unwrap().to_owned();
    assert!(
        metrics.contains("stockade_rate_limited_total{bucket=\"token\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("stockade_rate_limited_total{bucket=\"ip\"} 3\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "stockade_http_requests_total{method=\"GET\",route=\"/api/v1/me\",status=\"429\"} 3\n"
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_a_trusted_proxy_the_forwarded_client_counts() {
    let app = spawn_app_with(AppOptions {
        configure: Some(Box::new(|c| {
            c.rate_limit = Some(RateLimitConfig {
                per_ip: limit(3),
                per_token: None,
                trusted_proxies: vec![IpNet::parse("127.0.0.0/8").unwrap()],
                ..RateLimitConfig::default()
            });
        })),
        ..Default::default()
    })
    .await;
    let t = app.admin_token.clone();
    let first = [("x-forwarded-for", "203.0.113.1")];
    for _ in 0..3 {
        let (status, _, _) = get(&app, "/api/v1/me", Some(&t), &first).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, _, _) = get(&app, "/api/v1/me", Some(&t), &first).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // Another client behind the same proxy, and one that prepends a spoofed
    // address (the proxy appends the real one last).
    let (status, _, _) = get(
        &app,
        "/api/v1/me",
        Some(&t),
        &[("x-forwarded-for", "203.0.113.2")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = get(
        &app,
        "/api/v1/me",
        Some(&t),
        &[("x-forwarded-for", "203.0.113.2, 203.0.113.1")],
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}
