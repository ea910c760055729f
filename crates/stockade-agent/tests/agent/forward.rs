//! The agent's TCP forward (`/stockade/forward`): a connection to a port
//! inside the sandbox through the agent, with the token only.

use crate::helpers::{Agent, TOKEN};
use stockade_agent::client::open_forward;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_forward_reaches_a_port_both_ways_and_only_with_the_token() {
    let agent = Agent::start().await;
    // A service "inside the sandbox": it greets first, then echoes.
    let service = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = service.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = service.accept().await {
            tokio::spawn(async move {
                conn.write_all(b"hello\n").await.unwrap();
                let mut buf = [0u8; 64];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 || conn.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });

    let mut stream = open_forward(&agent.addr, TOKEN, port).await.unwrap();
    let mut greeting = [0u8; 6];
    stream.read_exact(&mut greeting).await.unwrap();
    assert_eq!(
        &greeting, b"hello\n",
        "the greeting sent right after the upgrade"
    );
    stream.write_all(b"ping").await.unwrap();
    let mut echo = [0u8; 4];
    stream.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"ping");

    let refused = open_forward(&agent.addr, "wrong", port)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("401"), "{refused}");
    // A port nothing listens on: an answer, not a connection that closes.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let nothing = open_forward(&agent.addr, TOKEN, closed).await.unwrap_err();
    assert!(
        matches!(
            nothing,
            stockade_agent::client::ForwardError::NothingListening(_)
        ),
        "{nothing}"
    );
    assert!(nothing.to_string().contains("502"), "{nothing}");
    let bad = agent.get("/stockade/forward?port=0").await;
    assert_eq!(bad.status(), 400);
}
