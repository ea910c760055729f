//! `DockerRuntime::container_address` against the real engine: a
//! server in the container is reachable at that address with no port
//! published, also in a sandbox without network access (on Stockade's
//! internal network); a stopped container has none.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use stockade_core::{AccountId, InstanceId, SandboxId, VolumeName};
use stockade_runtime::prelude::*;
use stockade_runtime::{container_name, ContainerSpec, DockerConfig, DockerRuntime, RuntimeError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn image() -> String {
    std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into())
}

/// Removes the sandbox's container and volume when dropped.
struct Cleanup(SandboxId);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", &container_name(&self.0)])
            .output();
        let _ = Command::new("docker")
            .args([
                "volume",
                "rm",
                "-f",
                VolumeName::for_sandbox(&self.0).as_str(),
            ])
            .output();
    }
}

fn spec(script: &str, network_access: bool) -> ContainerSpec {
    let sandbox_id = SandboxId::generate();
    ContainerSpec {
        hostname: format!("sbx-{sandbox_id}"),
        sandbox_id,
        account_id: AccountId::generate(),
        instance_id: InstanceId::generate(),
        image: image(),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: BTreeMap::new(),
        cpu_cores: 1.0,
        memory_bytes: 256 * 1024 * 1024,
        network_access,
        agent_token: None,
        disk_bytes: None,
    }
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
    let s = spec(
        "mkdir -p /tmp/w && echo reached > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w",
        true,
    );
    let id = s.sandbox_id.clone();
    let _cleanup = Cleanup(id.clone());
    rt.create(&s).await.unwrap();

    let ip = rt
        .container_address(&id)
        .await
        .unwrap()
        .expect("an address");
    let mut body = String::new();
    for _ in 0..50 {
        match http_get((ip, 8080).into()).await {
            Ok(b) => {
                body = b;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
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
    let s = spec(
        "mkdir -p /tmp/w && echo offline > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w",
        false,
    );
    let id = s.sandbox_id.clone();
    let _cleanup = Cleanup(id.clone());
    rt.create(&s).await.unwrap();
    let ip = rt
        .container_address(&id)
        .await
        .unwrap()
        .expect("an address on the internal network");
    let mut body = String::new();
    for _ in 0..50 {
        match http_get((ip, 8080).into()).await {
            Ok(b) => {
                body = b;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(body.ends_with("offline\n"), "{body}");
}
