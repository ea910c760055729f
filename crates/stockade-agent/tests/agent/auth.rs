//! The access token: everything but `/health` needs it.

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
