//! `stockade server --proxy-domain/--sandbox-token-ttl`: bad
//! values stop the start with a message naming the flag; good ones show in
//! the URLs and tokens the server hands out.

use std::io::{BufRead, BufReader};
use std::process::Command;

use serde_json::json;

mod support;
use support::{get_json, post_json, refused_start, spawn_piped, KillOnDrop};

fn server_cmd(data_dir: &std::path::Path, extra: &[&str]) -> Command {
    support::server_cmd(
        data_dir,
        "stk_proxy_flags_admin_token",
        &["STOCKADE_PROXY_DOMAIN", "STOCKADE_SANDBOX_TOKEN_TTL"],
        extra,
    )
}

#[test]
fn bad_proxy_flags_stop_the_start_and_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (args, flag) in [
        (
            &["--proxy-domain", "https://sandboxes.test/"][..],
            "--proxy-domain",
        ),
        (&["--proxy-domain", "bad_name.test"][..], "--proxy-domain"),
        (&["--sandbox-token-ttl", "0"][..], "--sandbox-token-ttl"),
        (&["--sandbox-token-ttl", "86401"][..], "--sandbox-token-ttl"),
    ] {
        let err = refused_start(&mut server_cmd(dir.path(), args), args);
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_proxy_domain_and_token_lifetime_are_used() {
    let dir = tempfile::tempdir().unwrap();
    let (child, stdout) = spawn_piped(&mut server_cmd(
        dir.path(),
        &[
            "--proxy-domain",
            "Sandboxes.Test",
            "--sandbox-token-ttl",
            "120",
        ],
    ));
    let _server = KillOnDrop(child);
    // Keep reading stdout for the server's whole life: it prints more later.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(u) = line.split(" listening on ").nth(1) {
                let _ = tx.send(u.trim().to_owned());
            }
        }
    });
    let url =
        tokio::task::spawn_blocking(move || rx.recv_timeout(std::time::Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("the server starts");
    let http = reqwest::Client::new();
    let token = "stk_proxy_flags_admin_token";

    let sb = post_json(
        &http,
        format!("{url}/api/v1/sandbox"),
        token,
        Some(&json!({ "name": "flags", "ports": [8080] })),
    )
    .await;
    let id = sb["id"].as_str().expect("created").to_owned();
    let _cleanup = Guard(id.clone());

    let ports = get_json(&http, format!("{url}/api/v1/sandbox/{id}/ports"), token).await;
    let port = url.rsplit(':').next().unwrap();
    assert_eq!(
        ports["ports"][0]["hostUrl"],
        format!("http://8080-{id}.sandboxes.test:{port}/")
    );

    let t = post_json(
        &http,
        format!("{url}/api/v1/sandbox/{id}/auth-token"),
        token,
        None,
    )
    .await;
    let expires: chrono::DateTime<chrono::Utc> = t["expiresAt"].as_str().unwrap().parse().unwrap();
    let left = (expires - chrono::Utc::now()).num_seconds();
    assert!((110..=120).contains(&left), "{left}");

    let r = http
        .delete(format!("{url}/api/v1/sandbox/{id}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

/// Removes the sandbox's container and volume even when the test fails.
struct Guard(String);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", &format!("stockade-{}", self.0)])
            .output();
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &format!("agent-sandbox-{}", self.0)])
            .output();
    }
}
