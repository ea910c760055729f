//! `EgressFilter::start`: both services on their addresses with the real
//! `SO_ORIGINAL_DST` lookup, and a clear error for an address it cannot
//! take.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use stockade_egress::{EgressConfig, EgressFilter, EgressPolicy, StartError};
use tokio::net::{TcpSocket, UdpSocket};

use crate::support::*;

const SANDBOX: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 40);

fn config(dns: &FakeDns, proxy_addr: SocketAddr) -> EgressConfig {
    EgressConfig {
        proxy_addr,
        dns_addr: "127.0.0.1:0".parse().unwrap(),
        upstream_dns: vec![dns.addr],
        proxy: Default::default(),
        dns: Default::default(),
    }
}

#[tokio::test]
async fn starts_both_services() {
    let dns = FakeDns::start().await;
    let filter = EgressFilter::start(config(&dns, "127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    assert_ne!(filter.proxy_addr().port(), 0);
    assert_ne!(filter.dns_addr().port(), 0);
    let policy = serde_json::json!({"allow": ["allowed.test"]});
    filter
        .policies
        .set(IpAddr::V4(SANDBOX), EgressPolicy::parse(&policy).unwrap());

    let socket = UdpSocket::bind((SANDBOX, 0)).await.unwrap();
    socket.connect(filter.dns_addr()).await.unwrap();
    socket
        .send(&question("allowed.test", RecordType::A, 1))
        .await
        .unwrap();
    let mut buf = vec![0; 2048];
    let n = socket.recv(&mut buf).await.unwrap();
    assert_eq!(
        a_records(&Message::from_vec(&buf[..n]).unwrap()),
        [ALLOWED_IP]
    );
    assert!(filter
        .names
        .contains(IpAddr::V4(SANDBOX), "allowed.test", IpAddr::V4(ALLOWED_IP)));

    // Without a redirect, SO_ORIGINAL_DST is the proxy's own address: a
    // client that dials the proxy directly reaches nothing.
    let tcp = TcpSocket::new_v4().unwrap();
    tcp.bind((SANDBOX, 0).into()).unwrap();
    let conn = tcp.connect(filter.proxy_addr()).await.unwrap();
    let body = refused_get(conn, "allowed.test").await;
    assert!(body.contains("is the egress proxy itself"), "{body}");
}

#[tokio::test]
async fn an_address_it_cannot_take_is_a_clear_error() {
    let dns = FakeDns::start().await;
    // A documentation address that is none of this host's.
    let err = EgressFilter::start(config(&dns, "192.0.2.1:0".parse().unwrap()))
        .await
        .err()
        .expect("binding a foreign address fails");
    assert!(
        matches!(err, StartError::Bind { what: "proxy", .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("cannot listen for the egress proxy on 192.0.2.1:0"),
        "{err}"
    );
    let mut no_dns = config(&dns, "127.0.0.1:0".parse().unwrap());
    no_dns.upstream_dns = vec![];
    // Empty means the host's resolv.conf, which has servers here or not;
    // either way the answer is a filter or a DNS error, never a panic.
    match EgressFilter::start(no_dns).await {
        Ok(filter) => assert!(!filter.resolver.servers().is_empty()),
        Err(e) => assert!(matches!(e, StartError::Dns(_)), "{e}"),
    }
}
