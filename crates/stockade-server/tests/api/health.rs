//! Health with and without Docker, OpenAPI and docs.

use std::time::Duration;

use reqwest::{Method, StatusCode};

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn healthy_with_docker_and_database() {
    let app = spawn_app().await;
    let r = app.call(Method::GET, "/api/v1/health", None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "healthy");
    assert_eq!(r.body["docker"]["status"], "healthy");
    assert!(r.body["docker"]["version"].as_str().unwrap().len() > 1);
    assert!(r.body["docker"]["apiVersion"]
        .as_str()
        .unwrap()
        .starts_with("1."));
    assert_eq!(r.body["database"]["status"], "healthy");
    assert_eq!(r.body["database"]["backend"], "sqlite");
    // Whether diskSizeGB is enforced, area by area, and a warning
    // when it is not.
    let disk = &r.body["disk"];
    for area in ["workspace", "rootFs"] {
        let enforced = disk[area]["enforced"].as_bool().expect("enforced");
        let said = if enforced { "method" } else { "reason" };
        assert!(
            disk[area][said].as_str().is_some_and(|s| !s.is_empty()),
            "{disk}"
        );
    }
    let warned = r.body["warnings"].as_array().is_some_and(|w| {
        w.iter()
            .any(|w| w.as_str().unwrap_or("").contains("diskSizeGB"))
    });
    assert_eq!(warned, disk["enforced"] == false, "{:?}", r.body);
}

/// A unix socket at `path` that forwards to the real Docker socket, like a
/// daemon coming back.
async fn proxy_docker(path: std::path::PathBuf) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(&path).expect("bind proxy socket");
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                if let Ok(mut outbound) =
                    tokio::net::UnixStream::connect("/var/run/docker.sock").await
                {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn unhealthy_without_docker_then_recovers() {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let sock = dir.path().join("docker.sock");
    let app = spawn_app_with(AppOptions {
        docker_host: Some(format!("unix://{}", sock.display())),
        dir: Some(dir.clone()),
        ..Default::default()
    })
    .await;
    let started = std::time::Instant::now();
    let r = app.call(Method::GET, "/api/v1/health", None, None).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
    assert_eq!(r.body["status"], "unhealthy");
    assert_eq!(r.body["docker"]["status"], "unhealthy");
    assert_eq!(r.body["database"]["status"], "healthy");
    // Anyone sees that Docker is down, never where the engine is.
    let shown = r.body.to_string();
    assert!(!shown.contains(&sock.display().to_string()), "{shown}");
    assert!(!shown.contains("docker.sock"), "{shown}");
    assert!(!shown.contains("/tmp/"), "{shown}");
    // An administrator sees where and what to do.
    let r = app.get("/api/v1/health", &app.admin_token).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
    let guidance = r.body["docker"]["troubleshooting"].to_string();
    assert!(guidance.contains(&sock.display().to_string()), "{guidance}");
    assert!(guidance.contains("systemctl start docker"), "{guidance}");
    assert!(guidance.contains("DOCKER_HOST"), "{guidance}");
    // A tenant sees no more than anyone.
    let tenant = app.new_account("tenant-health").await;
    let r = app.get("/api/v1/health", &tenant).await;
    assert!(!r.body.to_string().contains("docker.sock"), "{:?}", r.body);

    // The server keeps serving; a create says Docker is unavailable.
    let r = app
        .try_create(&app.admin_token, serde_json::json!({"name": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
    assert_eq!(r.code(), "docker_unavailable");
    assert_eq!(
        app.get("/api/v1/sandbox?is_active=false", &app.admin_token)
            .await
            .body["total"],
        0
    );

    // Docker comes back: healthy again, without a restart.
    let proxy = proxy_docker(sock).await;
    let mut healthy = false;
    for _ in 0..50 {
        let r = app.call(Method::GET, "/api/v1/health", None, None).await;
        if r.status == StatusCode::OK {
            assert_eq!(r.body["docker"]["status"], "healthy");
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proxy.abort();
    assert!(healthy, "health did not recover when Docker came back");
}

#[tokio::test(flavor = "multi_thread")]
async fn openapi_document_and_browsable_docs() {
    let app = spawn_app().await;
    let doc = app.openapi().await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/sandbox",
        "/api/v1/sandbox/{id}",
        "/api/v1/sandbox/{id}/stop",
        "/api/v1/health",
        "/api/v1/accounts",
    ] {
        assert!(
            paths.contains_key(p),
            "{p} missing from the OpenAPI document"
        );
    }
    assert!(
        doc["components"]["schemas"]["CreateSandboxRequest"]["properties"]["memoryGB"].is_object()
    );
    let html = app.get_raw("/api/v1/docs").await;
    assert_eq!(html.status(), StatusCode::OK);
    assert!(html.text().await.unwrap().contains("/api/v1/openapi.json"));
    let r = app.call(Method::GET, "/api/v1/nope", None, None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.code(), "not_found");
}
