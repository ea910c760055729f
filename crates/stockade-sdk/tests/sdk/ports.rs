//! Ports, proxy URLs and sandbox tokens.

use std::time::Duration;

use stockade_sdk::{Command, CreateParams, Error};

use crate::helpers::{server, server_with};

#[tokio::test(flavor = "multi_thread")]
async fn exposed_ports_are_served_through_the_proxy_with_a_token() {
    let s = server().await;
    let sb = s.create(CreateParams::new().name("web").port(3000)).await;
    sb.write_file("site/index.html", "hello through the proxy\n")
        .await
        .unwrap();
    let mut httpd = sb
        .spawn(Command::new("httpd").args(["-f", "-p", "8080", "-h", "/workspace/site"]))
        .await
        .unwrap();

    let exposed = sb.expose_port(8080).await.unwrap();
    assert_eq!(exposed.port, 8080);
    assert!(
        exposed.url.ends_with(&format!("/proxy/{}/8080/", sb.id())),
        "{}",
        exposed.url
    );
    assert_eq!(exposed.host_url, None, "no proxy domain configured");
    let again = sb.expose_port(8080).await.unwrap();
    assert_eq!(again, exposed, "exposing twice is fine");
    let ports: Vec<u16> = sb.ports().await.unwrap().iter().map(|p| p.port).collect();
    assert_eq!(ports, [3000, 8080]);
    let all = s.client.all_ports().await.unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|p| p.sandbox_id == sb.id()));

    let url = sb.domain(8080).await.unwrap();
    assert_eq!(url, exposed.url, "the path form without a proxy domain");
    let before = chrono::Utc::now();
    let token = sb.auth_token(Some(Duration::from_secs(120))).await.unwrap();
    assert_eq!(token.sandbox_id, sb.id());
    let ttl = (token.expires_at - before).num_seconds();
    assert!((115..=121).contains(&ttl), "{ttl}");

    let http = reqwest::Client::new();
    let with_token = || async {
        http.get(&url)
            .header("X-Stockade-Token", &token.token)
            .send()
            .await
            .unwrap()
    };
    let mut body = String::new();
    for _ in 0..200 {
        let resp = with_token().await;
        if resp.status() == 200 {
            body = resp.text().await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body, "hello through the proxy\n");
    let anonymous = http.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401, "the proxy wants a token");

    let left = sb.unexpose_port(8080).await.unwrap();
    assert_eq!(left.iter().map(|p| p.port).collect::<Vec<_>>(), [3000]);
    let err = sb.domain(8080).await.unwrap_err();
    assert!(matches!(err, Error::InvalidParams { .. }), "{err}");
    assert!(err.to_string().contains("not exposed"), "{err}");
    let gone = with_token().await;
    assert_eq!(gone.status(), 404, "unexposed at once");
    let err = sb.unexpose_port(8080).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = sb.auth_token(Some(Duration::ZERO)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidParams { .. }), "{err}");
    httpd.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn domain_is_the_host_form_when_the_server_has_a_proxy_domain() {
    let s = server_with(|c| c.proxy_domain = Some("sandboxes.test".into())).await;
    let sb = s.create(CreateParams::new().name("hosted")).await;
    let exposed = sb.expose_port(5173).await.unwrap();
    // A domain without a port is served on the port the API answered on.
    let api_port = s.client.base_url().rsplit(':').next().unwrap().to_owned();
    let host = format!("http://5173-{}.sandboxes.test:{api_port}/", sb.id());
    assert_eq!(exposed.host_url.as_deref(), Some(host.as_str()));
    assert_eq!(sb.domain(5173).await.unwrap(), host);
}
