//! The wire itself: Connect unary and streaming calls written by hand, in
//! JSON (`application/json`, `application/connect+json`) and binary
//! protobuf (`application/proto`, `application/connect+proto`).

use crate::helpers::{envelope, envelopes, http, Agent, TOKEN};
use base64::Engine as _;
use prost::Message as _;
use stockade_agent::proto::filesystem as fs;
use stockade_agent::proto::process::*;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn post(agent: &Agent, path: &str, ct: &str, body: Vec<u8>) -> reqwest::Response {
    http()
        .post(agent.url(path))
        .header("content-type", ct)
        .header("connect-protocol-version", "1")
        .header("x-access-token", TOKEN)
        .body(body)
        .send()
        .await
        .unwrap()
}

/// A POST of `body` as JSON to `path`.
async fn post_json(agent: &Agent, path: &str, body: &serde_json::Value) -> reqwest::Response {
    post(
        agent,
        path,
        "application/json",
        body.to_string().into_bytes(),
    )
    .await
}

/// A unary POST of `msg` as binary protobuf to `path`.
async fn post_proto(agent: &Agent, path: &str, msg: &impl prost::Message) -> reqwest::Response {
    post(agent, path, "application/proto", msg.encode_to_vec()).await
}

/// A streaming POST of `msg`, one binary protobuf envelope, to `path`.
async fn post_stream_proto(
    agent: &Agent,
    path: &str,
    msg: &impl prost::Message,
) -> reqwest::Response {
    let body = envelope(0, &msg.encode_to_vec());
    post(agent, path, "application/connect+proto", body).await
}

#[tokio::test]
async fn streams_in_json() {
    let agent = Agent::start().await;
    let req = serde_json::json!({
        "process": {
            "cmd": "/bin/sh",
            "args": ["-c", "printf 'a\\nb'; printf oops >&2; read line; echo \"got $line\"; exit 4"],
            "envs": { "X": "1" }
        },
        "stdin": true,
        "tag": "json-proc"
    });
    let body = envelope(0, req.to_string().as_bytes());
    // Start the stream, then feed stdin through a unary JSON call.
    let start = tokio::spawn({
        let url = agent.url("/process.Process/Start");
        async move {
            let res = http()
                .post(url)
                .header("content-type", "application/connect+json")
                .header("x-access-token", TOKEN)
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(res.headers()["content-type"], "application/connect+json");
            res.bytes().await.unwrap()
        }
    });
    // Wait until List shows it, by tag, in JSON.
    let pid = loop {
        let res = post_json(&agent, "/process.Process/List", &serde_json::json!({})).await;
        let list: serde_json::Value = res.json().await.unwrap();
        if let Some(p) = list["processes"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["tag"] == "json-proc"))
        {
            assert_eq!(p["config"]["cmd"], "/bin/sh");
            assert_eq!(p["config"]["envs"]["X"], "1");
            break p["pid"].as_u64().unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let input = serde_json::json!({
        "process": { "tag": "json-proc" },
        "input": { "stdin": b64("hi\n") }
    });
    let res = post_json(&agent, "/process.Process/SendInput", &input).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "{}");

    let frames = envelopes(&start.await.unwrap());
    let msgs: Vec<serde_json::Value> = frames
        .iter()
        .map(|(_, p)| serde_json::from_slice(p).unwrap())
        .collect();
    assert_eq!(msgs[0]["event"]["start"]["pid"].as_u64(), Some(pid));
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    for m in &msgs[1..msgs.len() - 2] {
        let data = &m["event"]["data"];
        let dec = |v: &serde_json::Value| {
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap()
        };
        if !data["stdout"].is_null() {
            stdout.extend(dec(&data["stdout"]));
        } else {
            stderr.extend(dec(&data["stderr"]));
        }
    }
    assert_eq!(stdout, b"a\nbgot hi\n");
    assert_eq!(stderr, b"oops");
    let end = &msgs[msgs.len() - 2]["event"]["end"];
    assert_eq!(end["exitCode"], 4);
    assert_eq!(end["exited"], true);
    assert_eq!(end["status"], "exit status 4");
    assert_eq!(end["error"], "exit status 4");
    let (flags, last) = frames.last().unwrap();
    assert_eq!(*flags, 2);
    assert_eq!(last.as_slice(), b"{}");
}

#[tokio::test]
async fn streams_and_unary_in_proto() {
    let agent = Agent::start().await;
    let req = StartRequest {
        process: Some(ProcessConfig {
            cmd: "sh".into(),
            args: vec!["-c".into(), "echo proto; exit 2".into()],
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    };
    let res = post_stream_proto(&agent, "/process.Process/Start", &req).await;
    assert_eq!(res.headers()["content-type"], "application/connect+proto");
    let frames = envelopes(&res.bytes().await.unwrap());
    let events: Vec<process_event::Event> = frames[..frames.len() - 1]
        .iter()
        .map(|(_, p)| {
            StartResponse::decode(p.as_slice())
                .unwrap()
                .event
                .unwrap()
                .event
                .unwrap()
        })
        .collect();
    assert!(matches!(events[0], process_event::Event::Start(_)));
    assert_eq!(
        events[1],
        process_event::Event::Data(process_event::DataEvent {
            output: Some(process_event::Output::Stdout("proto\n".into()))
        })
    );
    match &events[2] {
        process_event::Event::End(e) => assert_eq!((e.exit_code, e.exited), (2, true)),
        other => panic!("{other:?}"),
    }
    assert_eq!(frames.last().unwrap().0, 2);

    // Unary proto: Stat and a not-found error (whose body is JSON).
    let stat = fs::StatRequest { path: "/".into() };
    let res = post_proto(&agent, "/filesystem.Filesystem/Stat", &stat).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/proto");
    let entry = fs::StatResponse::decode(res.bytes().await.unwrap())
        .unwrap()
        .entry
        .unwrap();
    assert_eq!(
        (entry.path.as_str(), entry.r#type),
        ("/", fs::FileType::Directory as i32)
    );

    let kill = SendSignalRequest {
        process: Some(ProcessSelector::pid(999_999)),
        signal: Signal::Sigkill as i32,
    };
    let res = post_proto(&agent, "/process.Process/SendSignal", &kill).await;
    assert_eq!(res.status(), 404);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["code"], "not_found");

    // A stream's error travels in its end message.
    let conn = ConnectRequest {
        process: Some(ProcessSelector::tag("nobody")),
    };
    let res = post_stream_proto(&agent, "/process.Process/Connect", &conn).await;
    assert_eq!(res.status(), 200);
    let frames = envelopes(&res.bytes().await.unwrap());
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].0, 2);
    let end: serde_json::Value = serde_json::from_slice(&frames[0].1).unwrap();
    assert_eq!(end["error"]["code"], "not_found");
}

#[tokio::test]
async fn bad_requests_name_what_is_wrong() {
    let agent = Agent::start().await;
    // A content type it does not speak, a body that is no JSON, a method
    // that does not exist.
    for (path, ct, body, status, code) in [
        ("/process.Process/List", "text/plain", "{}", 415, None),
        (
            "/process.Process/List",
            "application/json",
            "{not json",
            400,
            Some("invalid_argument"),
        ),
        ("/process.Process/Nope", "application/json", "{}", 501, None),
    ] {
        let res = post(&agent, path, ct, body.into()).await;
        assert_eq!(res.status(), status, "{path} {ct} {body}");
        if let Some(code) = code {
            let body: serde_json::Value = res.json().await.unwrap();
            assert_eq!(body["code"], code);
        }
    }
    let sig = serde_json::json!({"process": {"pid": 1}, "signal": "SIGNAL_SIGHUP"});
    let res = post_json(&agent, "/process.Process/SendSignal", &sig).await;
    assert_eq!(res.status(), 400);
    let start = serde_json::json!({"process": {"cmd": ""}});
    let res = post(
        &agent,
        "/process.Process/Start",
        "application/connect+json",
        envelope(0, start.to_string().as_bytes()),
    )
    .await;
    let frames = envelopes(&res.bytes().await.unwrap());
    let end: serde_json::Value = serde_json::from_slice(&frames[0].1).unwrap();
    assert_eq!(end["error"]["code"], "invalid_argument");
    assert!(end["error"]["message"]
        .as_str()
        .unwrap()
        .contains("process.cmd"));
    let res = agent.get("/nowhere").await;
    assert_eq!(res.status(), 404);
}
