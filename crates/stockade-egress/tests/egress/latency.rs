//! What the proxy adds to an HTTP request on loopback: a new connection,
//! a GET and the whole answer, directly and through the proxy, in turns.
//! A measurement, run on demand:
//! `cargo test -p stockade-egress --release --test egress latency -- --ignored --nocapture`.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

const SANDBOX: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 30);
const REQUESTS: usize = 500;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn latency_added_per_http_request() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    let (web, _w) = http_upstream(ALLOWED_IP).await;
    let mut direct = Vec::with_capacity(REQUESTS);
    let mut proxied = Vec::with_capacity(REQUESTS);
    // Warm up both paths (and the resolver's answer for allowed.test).
    for _ in 0..20 {
        let conn = tokio::net::TcpStream::connect(web).await.unwrap();
        assert_eq!(http_get(conn, "allowed.test").await.unwrap().0, 200);
        assert_eq!(
            http_get(h.dial(SANDBOX, web).await, "allowed.test")
                .await
                .unwrap()
                .0,
            200
        );
    }
    for _ in 0..REQUESTS {
        let start = Instant::now();
        let conn = tokio::net::TcpStream::connect(web).await.unwrap();
        assert_eq!(http_get(conn, "allowed.test").await.unwrap().0, 200);
        direct.push(start.elapsed());
        let start = Instant::now();
        let conn = h.dial(SANDBOX, web).await;
        assert_eq!(http_get(conn, "allowed.test").await.unwrap().0, 200);
        proxied.push(start.elapsed());
    }
    direct.sort();
    proxied.sort();
    let show = |d: Duration| format!("{:.0} µs", d.as_secs_f64() * 1e6);
    println!(
        "{REQUESTS} requests, new connection each: direct p50 {} p90 {} | through the proxy p50 {} p90 {} | added p50 {}",
        show(percentile(&direct, 0.5)),
        show(percentile(&direct, 0.9)),
        show(percentile(&proxied, 0.5)),
        show(percentile(&proxied, 0.9)),
        show(percentile(&proxied, 0.5).saturating_sub(percentile(&direct, 0.5))),
    );
}
