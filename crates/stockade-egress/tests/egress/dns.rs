//! The DNS forwarder on loopback: allowed names answered and recorded,
//! everything else refused before it reaches the upstream server.

use std::net::{IpAddr, Ipv4Addr};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use serde_json::json;
use stockade_egress::Transport;

use crate::support::*;

const SANDBOX: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 20);
const NEIGHBOUR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 21);

#[tokio::test]
async fn an_allowed_name_is_answered_and_recorded() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    let answer = h.ask(SANDBOX, "allowed.test", RecordType::A).await;
    assert_eq!(answer.response_code(), ResponseCode::NoError);
    assert_eq!(a_records(&answer), [ALLOWED_IP]);
    let recorded = h.names.addresses(IpAddr::V4(SANDBOX), "allowed.test");
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].ip, IpAddr::V4(ALLOWED_IP));
    // Only for the sandbox that asked.
    assert!(h.names.names_of(IpAddr::V4(NEIGHBOUR)).is_empty());
    // Over TCP too.
    let answer = h.ask_tcp(SANDBOX, "allowed.test", RecordType::A).await;
    assert_eq!(a_records(&answer), [ALLOWED_IP]);
}

#[tokio::test]
async fn a_cname_chain_is_answered_and_recorded_under_the_name_asked() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["www.allowed.test"]})).await;
    let answer = h.ask(SANDBOX, "www.allowed.test", RecordType::A).await;
    let cname = answer
        .answers()
        .iter()
        .find_map(|r| match r.data() {
            RData::CNAME(c) => Some(c.0.to_ascii()),
            _ => None,
        })
        .expect("the CNAME is passed on");
    assert_eq!(cname, "edge.cdn.test.");
    assert_eq!(a_records(&answer), [ALLOWED_IP]);
    let names = h.names.names_of(IpAddr::V4(SANDBOX));
    assert_eq!(names.len(), 1);
    assert_eq!(names[0].name, "www.allowed.test");
    assert_eq!(names[0].addresses[0].ip, IpAddr::V4(ALLOWED_IP));
    // The CNAME's target is not a name the sandbox may ask about itself.
    h.assert_refused(SANDBOX, "edge.cdn.test").await;
}

#[tokio::test]
async fn an_unlisted_name_is_refused_before_the_upstream() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    for kind in [
        RecordType::A,
        RecordType::AAAA,
        RecordType::TXT,
        RecordType::MX,
    ] {
        let answer = h.ask(SANDBOX, "other.test", kind).await;
        assert_eq!(answer.response_code(), ResponseCode::Refused, "{kind}");
        assert!(answer.answers().is_empty());
        // The question is echoed, as resolvers expect.
        assert_eq!(answer.queries()[0].query_type(), kind);
    }
    assert_eq!(h.dns.asked("other.test"), 0);
    assert!(h.names.is_empty());
}

#[tokio::test]
async fn txt_goes_through_only_for_allowed_names() {
    let h = Harness::start().await;
    h.set_policy(
        SANDBOX,
        json!({"allow": ["allowed.test"], "deny": ["*.evil.test"]}),
    );
    let answer = h.ask(SANDBOX, "allowed.test", RecordType::TXT).await;
    let txt = answer
        .answers()
        .iter()
        .find_map(|r| match r.data() {
            RData::TXT(t) => Some(t.to_string()),
            _ => None,
        })
        .expect("TXT of an allowed name");
    assert!(txt.contains("txt of allowed.test"), "{txt}");
    // Data smuggled in the labels of a denied domain never leaves.
    let tunnel = h
        .ask(SANDBOX, "c2VjcmV0.tunnel.evil.test", RecordType::TXT)
        .await;
    assert_eq!(tunnel.response_code(), ResponseCode::Refused);
    assert_eq!(h.dns.asked("c2vjcmv0.tunnel.evil.test"), 0);
}

#[tokio::test]
async fn deny_all_and_unknown_sandboxes_get_no_answers() {
    let h = Harness::with_policy(SANDBOX, json!("deny-all")).await;
    for name in ["allowed.test", "other.test", "localhost"] {
        h.assert_refused(SANDBOX, name).await;
        h.assert_refused(NEIGHBOUR, name).await;
    }
    let answer = h.ask_tcp(SANDBOX, "allowed.test", RecordType::A).await;
    assert_eq!(answer.response_code(), ResponseCode::Refused);
    assert_eq!(
        h.dns.asked_total(),
        0,
        "a question reached the upstream server"
    );
}

#[tokio::test]
async fn allow_all_and_deny_lists_forward_the_rest() {
    let h = Harness::with_policy(SANDBOX, json!("allow-all")).await;
    assert_eq!(h.ask_a(SANDBOX, "other.test").await, [OTHER_IP]);
    // The upstream's own "no such name" is passed on.
    let answer = h.ask(SANDBOX, "missing.test", RecordType::A).await;
    assert_eq!(answer.response_code(), ResponseCode::NXDomain);
    h.set_policy(NEIGHBOUR, json!({"deny": ["other.test"]}));
    assert_eq!(h.ask_a(NEIGHBOUR, "allowed.test").await, [ALLOWED_IP]);
    h.assert_refused(NEIGHBOUR, "other.test").await;
}

#[tokio::test]
async fn a_policy_change_applies_to_the_next_question() {
    let h = Harness::with_policy(SANDBOX, json!({"allow": ["allowed.test"]})).await;
    h.assert_refused(SANDBOX, "other.test").await;
    h.set_policy(SANDBOX, json!({"allow": ["other.test"]}));
    assert_eq!(h.ask_a(SANDBOX, "other.test").await, [OTHER_IP]);
    h.assert_refused(SANDBOX, "allowed.test").await;
}

#[tokio::test]
async fn malformed_and_odd_messages() {
    let h = Harness::with_policy(SANDBOX, json!("allow-all")).await;
    let forwarder = stockade_egress::DnsForwarder::new(
        Default::default(),
        std::sync::Arc::clone(&h.policies) as _,
        std::sync::Arc::new(stockade_egress::Resolver::new(vec![h.dns.addr]).unwrap()),
        std::sync::Arc::clone(&h.names),
    );
    let client = IpAddr::V4(SANDBOX);
    // Too short to answer: dropped.
    assert!(forwarder
        .answer(client, &[1, 2, 3], Transport::Udp)
        .await
        .is_none());
    // Garbage with a header: FORMERR with its id.
    let mut garbage = vec![0xab, 0xcd, 0x01, 0x00, 0x00, 0x05, 0, 0, 0, 0, 0, 0];
    garbage.extend_from_slice(&[0xff; 20]);
    let answer = forwarder
        .answer(client, &garbage, Transport::Udp)
        .await
        .unwrap();
    let answer = hickory_proto::op::Message::from_vec(&answer).unwrap();
    assert_eq!(answer.id(), 0xabcd);
    assert_eq!(answer.response_code(), ResponseCode::FormErr);
    // A response is never answered (no loops between forwarders).
    let mut response = question("allowed.test", RecordType::A, 9);
    response[2] |= 0x80;
    assert!(forwarder
        .answer(client, &response, Transport::Udp)
        .await
        .is_none());
    // Another opcode (NOTIFY): not implemented.
    let mut notify = question("allowed.test", RecordType::A, 9);
    notify[2] = (notify[2] & !0x78) | (4 << 3);
    let answer = forwarder
        .answer(client, &notify, Transport::Udp)
        .await
        .unwrap();
    let answer = hickory_proto::op::Message::from_vec(&answer).unwrap();
    assert_eq!(answer.response_code(), ResponseCode::NotImp);
    // An upstream that does not answer: SERVFAIL.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let lost = stockade_egress::DnsForwarder::new(
        Default::default(),
        std::sync::Arc::clone(&h.policies) as _,
        std::sync::Arc::new(
            stockade_egress::Resolver::new(vec![silent.local_addr().unwrap()])
                .unwrap()
                .with_timeout(std::time::Duration::from_millis(200)),
        ),
        std::sync::Arc::clone(&h.names),
    );
    let q = question("allowed.test", RecordType::A, 5);
    let answer = lost.answer(client, &q, Transport::Udp).await.unwrap();
    let answer = hickory_proto::op::Message::from_vec(&answer).unwrap();
    assert_eq!(answer.response_code(), ResponseCode::ServFail);
}
