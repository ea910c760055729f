//! `filesystem.Filesystem` and `/files` through the client library and raw
//! HTTP: stat, list, mkdir, move, remove, watches, uploads and downloads.

use crate::helpers::{http, Agent, TOKEN};
use std::time::Duration;
use stockade_agent::client::WatchStream;
use stockade_agent::connect::Code;
use stockade_agent::proto::filesystem::{EventType, FileType};

#[tokio::test]
async fn stat_list_mkdir_move_remove() {
    let agent = Agent::start().await;
    let c = agent.client();
    let base = agent.path("tree");

    let made = c.make_dir(&format!("{base}/a/b")).await.unwrap();
    assert_eq!(made.name, "b");
    assert_eq!(made.r#type, FileType::Directory as i32);
    assert_eq!(
        c.make_dir(&format!("{base}/a/b")).await.unwrap_err().code(),
        Some(Code::AlreadyExists)
    );
    std::fs::write(format!("{base}/a/file.txt"), "12345").unwrap();

    let st = c.stat(&format!("{base}/a/file.txt")).await.unwrap();
    assert_eq!(
        (st.name.as_str(), st.size, st.r#type),
        ("file.txt", 5, FileType::File as i32)
    );
    assert_eq!(st.permissions.len(), 10);
    assert!(st.modified_time.is_some());
    // Relative paths are below the user's home (root here: /root), so use
    // an absolute one; `~` expands to home.
    let home = c.stat("~").await.unwrap();
    assert_eq!(home.r#type, FileType::Directory as i32);

    let one = c.list_dir(&format!("{base}/a"), 1).await.unwrap();
    let names: Vec<_> = one.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["b", "file.txt"]);
    let deep = c.list_dir(&base, 3).await.unwrap();
    assert_eq!(deep.len(), 3);

    let moved = c
        .move_path(
            &format!("{base}/a/file.txt"),
            &format!("{base}/c/d/moved.txt"),
        )
        .await
        .unwrap();
    assert_eq!(moved.name, "moved.txt");
    assert_eq!(
        std::fs::read_to_string(format!("{base}/c/d/moved.txt")).unwrap(),
        "12345"
    );

    c.remove(&format!("{base}/a")).await.unwrap();
    assert!(!std::path::Path::new(&format!("{base}/a")).exists());
    for err in [
        c.stat(&format!("{base}/a")).await.unwrap_err(),
        c.remove(&format!("{base}/a")).await.unwrap_err(),
        c.list_dir(&format!("{base}/a"), 1).await.unwrap_err(),
    ] {
        assert_eq!(err.code(), Some(Code::NotFound), "{err}");
    }
}

async fn next_event(w: &mut WatchStream) -> (String, i32) {
    let ev = tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("an event in time")
        .expect("the watch goes on")
        .expect("no error");
    (ev.name, ev.r#type)
}

/// Reads events until one matches, returning it.
async fn expect_event(w: &mut WatchStream, name: &str, kind: EventType) {
    let mut seen = Vec::new();
    for _ in 0..20 {
        let ev = next_event(w).await;
        if ev == (name.to_owned(), kind as i32) {
            return;
        }
        seen.push(ev);
    }
    panic!("no {kind:?} of {name}; saw {seen:?}");
}

#[tokio::test]
async fn watch_reports_create_write_rename_chmod_remove_recursively() {
    let agent = Agent::start().await;
    let c = agent.client();
    let root = agent.path("watched");
    std::fs::create_dir(&root).unwrap();
    let mut w = c.watch_dir(&root, true).await.unwrap();

    std::fs::write(format!("{root}/new.txt"), "").unwrap();
    expect_event(&mut w, "new.txt", EventType::Create).await;
    std::fs::write(format!("{root}/new.txt"), "data").unwrap();
    expect_event(&mut w, "new.txt", EventType::Write).await;
    std::fs::rename(format!("{root}/new.txt"), format!("{root}/renamed.txt")).unwrap();
    expect_event(&mut w, "new.txt", EventType::Rename).await;
    expect_event(&mut w, "renamed.txt", EventType::Create).await;
    std::fs::set_permissions(
        format!("{root}/renamed.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    expect_event(&mut w, "renamed.txt", EventType::Chmod).await;
    std::fs::remove_file(format!("{root}/renamed.txt")).unwrap();
    expect_event(&mut w, "renamed.txt", EventType::Remove).await;

    // A new subdirectory is watched too.
    std::fs::create_dir(format!("{root}/sub")).unwrap();
    expect_event(&mut w, "sub", EventType::Create).await;
    std::fs::write(format!("{root}/sub/inner.txt"), "x").unwrap();
    expect_event(&mut w, "sub/inner.txt", EventType::Create).await;

    // Not a directory / missing → errors at the start.
    for (path, code) in [
        (format!("{root}/sub/inner.txt"), Code::InvalidArgument),
        (format!("{root}/missing"), Code::NotFound),
    ] {
        assert_eq!(
            c.watch_dir(&path, false).await.err().and_then(|e| e.code()),
            Some(code),
            "{path}"
        );
    }
}

#[tokio::test]
async fn polled_watchers_over_raw_json() {
    let agent = Agent::start().await;
    let root = agent.path("polled");
    std::fs::create_dir(&root).unwrap();
    let h = http();
    let call = |method: &str, body: serde_json::Value| {
        h.post(agent.url(&format!("/filesystem.Filesystem/{method}")))
            .header("content-type", "application/json")
            .header("x-access-token", TOKEN)
            .json(&body)
            .send()
    };
    let res = call(
        "CreateWatcher",
        serde_json::json!({ "path": root, "recursive": false }),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    let id = res.json::<serde_json::Value>().await.unwrap()["watcherId"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(format!("{root}/a.txt"), "1").unwrap();
    let mut events = Vec::new();
    for _ in 0..50 {
        let res = call("GetWatcherEvents", serde_json::json!({ "watcherId": id }))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let body: serde_json::Value = res.json().await.unwrap();
        if let Some(list) = body["events"].as_array() {
            events.extend(list.iter().cloned());
        }
        if events.iter().any(|e| e["type"] == "EVENT_TYPE_WRITE") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(events[0]["name"], "a.txt");
    assert_eq!(events[0]["type"], "EVENT_TYPE_CREATE");
    assert!(
        events.iter().any(|e| e["type"] == "EVENT_TYPE_WRITE"),
        "{events:?}"
    );
    let res = call("RemoveWatcher", serde_json::json!({ "watcherId": id }))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = call("GetWatcherEvents", serde_json::json!({ "watcherId": id }))
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["code"], "not_found");
}

#[tokio::test]
async fn files_up_and_down_raw_and_multipart() {
    let agent = Agent::start().await;
    let c = agent.client();
    let target = agent.path("up/deep/file.bin");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let written = c.upload_bytes(&target, data.clone()).await.unwrap();
    assert_eq!(written[0].path, target);
    assert_eq!(written[0].kind, "file");
    let down = c.download(&target).await.unwrap();
    assert_eq!(down.size, Some(data.len() as u64));
    assert_eq!(down.bytes().await.unwrap(), data);

    // Streamed upload.
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let streamed = agent.path("streamed.txt");
    let feeder = tokio::spawn(async move {
        for i in 0..50 {
            tx.send(Ok(bytes::Bytes::from(format!("line {i}\n"))))
                .await
                .unwrap();
        }
    });
    c.upload(&streamed, rx).await.unwrap();
    feeder.await.unwrap();
    let text = std::fs::read_to_string(&streamed).unwrap();
    assert_eq!(text.lines().count(), 50);

    // Multipart as the E2B SDK sends it: the file name is the path.
    let h = http();
    let boundary = "b0undary42";
    let p1 = agent.path("multi/one.txt");
    let p2 = agent.path("multi/two.txt");
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{p1}\"\r\nContent-Type: application/octet-stream\r\n\r\nfirst\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{p2}\"\r\n\r\nsecond\r\n--{boundary}--\r\n"
    );
    let res = h
        .post(agent.url("/files"))
        .header("x-access-token", TOKEN)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let entries: serde_json::Value = res.json().await.unwrap();
    assert_eq!(entries.as_array().unwrap().len(), 2);
    assert_eq!(entries[1]["path"], p2);
    assert_eq!(entries[1]["type"], "file");
    assert_eq!(std::fs::read_to_string(&p1).unwrap(), "first");
    assert_eq!(std::fs::read_to_string(&p2).unwrap(), "second");

    // Raw GET with the SDK's parameters.
    let res = h
        .get(agent.url("/files"))
        .query(&[("path", p2.as_str()), ("username", "root")])
        .header("x-access-token", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.bytes().await.unwrap(), "second");

    // Errors: missing file 404, a directory 400, no path 400.
    for (name, expected) in [("nope", 404), ("multi", 400)] {
        let err = c.download(&agent.path(name)).await.err().unwrap();
        assert!(
            matches!(
                err,
                stockade_agent::client::ClientError::Http { status, .. } if status == expected
            ),
            "{err}"
        );
    }
    let res = agent.post("/files", "x").await;
    assert_eq!(res.status(), 400);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["code"], 400);
}
