//! The access token: everything but `/health` and `/identity` needs it,
//! and `/identity` proves the agent holds it without it being sent.

use crate::helpers::{http, Agent, TOKEN};
use stockade_agent::client::{AgentClient, Endpoint};
use stockade_agent::connect::Code;

#[tokio::test]
async fn every_route_but_health_needs_the_token() {
    let agent = Agent::start().await;
    let h = http();
    let health = h.get(agent.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), 204);

    for token in [None, Some("wrong"), Some("test-token-5f1")] {
        let mut req = h
            .post(agent.url("/process.Process/List"))
            .header("content-type", "application/json")
            .body("{}");
        if let Some(t) = token {
            req = req.header("x-access-token", t);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 401, "token {token:?}");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["code"], "unauthenticated");

        let mut req = h.get(agent.url("/files?path=/etc/hostname"));
        if let Some(t) = token {
            req = req.header("x-access-token", t);
        }
        assert_eq!(req.send().await.unwrap().status(), 401);
    }

    let res = h
        .post(agent.url("/process.Process/List"))
        .header("content-type", "application/json")
        .header("x-access-token", TOKEN)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    let wrong = AgentClient::new(Endpoint::Tcp(agent.addr.clone()), Some("nope".into()));
    assert_eq!(
        wrong.list().await.unwrap_err().code(),
        Some(Code::Unauthenticated)
    );
    // An unknown user is refused the same way.
    let ghost = agent.client().with_user("no-such-user-here");
    assert_eq!(
        ghost.list().await.unwrap_err().code(),
        Some(Code::Unauthenticated)
    );
}

#[tokio::test]
async fn the_agent_refuses_to_start_without_a_token() {
    let out = std::process::Command::new(crate::helpers::agent_binary())
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("STOCKADE_AGENT_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("STOCKADE_AGENT_TOKEN"), "{err}");
}

#[tokio::test]
async fn unix_socket_and_init_defaults() {
    let agent = Agent::start_with(|cmd, dir| {
        cmd.arg("--unix").arg(dir.join("agent.sock"));
    })
    .await;
    let c = AgentClient::new(
        Endpoint::Unix(agent.dir.path().join("agent.sock")),
        Some(TOKEN.into()),
    );
    c.health().await.unwrap();

    // POST /init sets the default environment; GET /envs shows it.
    let h = http();
    let res = h
        .post(agent.url("/init"))
        .header("x-access-token", TOKEN)
        .json(&serde_json::json!({ "envVars": { "FROM_INIT": "yes" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    let envs: serde_json::Value = h
        .get(agent.url("/envs"))
        .header("x-access-token", TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(envs["FROM_INIT"], "yes");
    let out = c
        .run(
            "sh",
            &stockade_agent::client::RunOptions {
                args: vec!["-c".into(), "echo $FROM_INIT".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, b"yes\n");
    let res = h
        .post(agent.url("/init"))
        .header("x-access-token", TOKEN)
        .json(&serde_json::json!({ "defaultUser": "no-such-user-here" }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
}

/// The agent's port may be published on a Docker host's address: a client
/// that sends half a request head and waits is closed, and the agent keeps
/// answering everyone else meanwhile.
#[tokio::test]
async fn a_half_sent_request_head_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let agent = Agent::start().await;
    let mut idle = tokio::net::TcpStream::connect(&agent.addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    assert!(agent.client().health().await.is_ok());
    let mut buf = [0u8; 256];
    let closed = tokio::time::timeout(
        stockade_agent::server::HEADER_TIMEOUT + std::time::Duration::from_secs(5),
        async {
            loop {
                match idle.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        },
    )
    .await;
    assert!(closed.is_ok(), "still open after {:?}", started.elapsed());
    assert!(started.elapsed() >= stockade_agent::server::HEADER_TIMEOUT / 2);
}

#[tokio::test]
async fn the_agent_proves_it_holds_its_token_without_being_sent_it() {
    let agent = Agent::start().await;
    let anonymous = AgentClient::new(Endpoint::Tcp(agent.addr.clone()), None);
    let proof = anonymous.identity("c0ffee").await.unwrap();
    assert!(stockade_agent::identity::verify(
        TOKEN.as_bytes(),
        "c0ffee",
        &proof
    ));
    // Not another agent's, nor another challenge's.
    assert!(!stockade_agent::identity::verify(b"nope", "c0ffee", &proof));
    assert_ne!(anonymous.identity("c0ffef").await.unwrap(), proof);
    // A challenge is required, and bounded.
    let h = http();
    for query in [
        "",
        "?challenge=",
        &format!("?challenge={}", "a".repeat(129)),
    ] {
        let res = h
            .get(agent.url(&format!("/identity{query}")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{query}");
    }
}
