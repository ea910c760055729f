//! `DockerRuntime::container_address` against the real engine: a
//! server in the container is reachable at that address with no port
//! published, also in a sandbox without network access (on Stockade's
//! internal network); a stopped container has none.

use std::net::IpAddr;
use std::time::Duration;

use stockade_core::SandboxId;
use stockade_runtime::prelude::*;
use stockade_runtime::{ContainerSpec, DockerConfig, DockerRuntime, RuntimeError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;
use support::{image, shell_spec, Cleanup};

/// A sandbox serving `text` over HTTP on port 8080, with or without
/// network access; its id, its cleanup and its address (`expect` says what
/// a missing address means).
async fn serving(
    rt: &DockerRuntime,
    text: &str,
    network_access: bool,
    expect: &str,
) -> (SandboxId, Cleanup, IpAddr) {
    let s = ContainerSpec {
        network_access,
        ..shell_spec(
            &image(),
            &format!(
                "mkdir -p /tmp/w && echo {text} > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w"
            ),
        )
    };
    let id = s.sandbox_id.clone();
    let cleanup = Cleanup(id.clone());
    rt.create(&s).await.unwrap();
    let ip = rt.container_address(&id).await.unwrap().expect(expect);
    (id, cleanup, ip)
}

/// The HTTP answer of port 8080 at `ip`, once the server is up (within
/// five seconds; empty if it never answers).
async fn get_once_up(ip: IpAddr) -> String {
    for _ in 0..50 {
        match http_get((ip, 8080).into()).await {
            Ok(b) => return b,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    String::new()
}

async fn http_get(addr: std::net::SocketAddr) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_container_is_reachable_at_its_address() {
    let rt = DockerRuntime::new(DockerConfig::default()).unwrap();
    let (id, _cleanup, ip) = serving(&rt, "reached", true, "an address").await;
    let body = get_once_up(ip).await;
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.ends_with("reached\n"), "{body}");

    rt.stop(&id, Duration::from_secs(1)).await.unwrap();
    assert_eq!(rt.container_address(&id).await.unwrap(), None);

    rt.remove(&id, false).await.unwrap();
    assert!(matches!(
        rt.container_address(&id).await,
        Err(RuntimeError::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_without_network_is_reachable_from_the_host() {
    let rt = DockerRuntime::new(DockerConfig::default()).unwrap();
    let (_id, _cleanup, ip) =
        serving(&rt, "offline", false, "an address on the internal network").await;
    let body = get_once_up(ip).await;
    assert!(body.ends_with("offline\n"), "{body}");
}
