//! Logs: the last lines, a live stream, and resuming after a line.

use std::time::Duration;

use stockade_sdk::{CreateParams, FollowLogs, Sandbox, StreamExt};

use crate::helpers::server;

#[tokio::test(flavor = "multi_thread")]
async fn logs_tail_follow_resume_and_end_when_the_sandbox_stops() {
    let s = server().await;
    let sb = Sandbox::create(
        &s.client,
        CreateParams::new().name("logs").start_command(
            "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; i=0; while true; do i=$((i+1)); echo tick$i; sleep 0.3; done",
        ),
    )
    .await
    .unwrap();

    // The first lines, once they are there.
    let mut first = Vec::new();
    for _ in 0..50 {
        first = sb.logs(10_000).await.unwrap().lines;
        if first.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let texts: Vec<(&str, &str)> = first
        .iter()
        .take(3)
        .map(|l| (l.stream.as_str(), l.text.as_str()))
        .collect();
    assert_eq!(
        texts,
        [("stdout", "one"), ("stderr", "two"), ("stdout", "three")]
    );
    let tail = sb.logs(2).await.unwrap();
    assert_eq!(tail.lines.len(), 2);
    assert!(tail.lines[1].text.starts_with("tick"), "{:?}", tail.lines);

    // Follow: the history asked for, then live lines.
    let mut live = sb.follow_logs(FollowLogs::new().tail(1)).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let line = tokio::time::timeout(Duration::from_secs(10), live.next())
            .await
            .expect("a line within 10 s")
            .expect("the stream goes on")
            .unwrap();
        assert!(
            line.timestamp.timestamp() > 1_600_000_000,
            "lines carry their time"
        );
        seen.push(line);
    }
    let numbers: Vec<u32> = seen
        .iter()
        .map(|l| l.text.trim_start_matches("tick").parse().unwrap())
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "consecutive lines: {numbers:?}"
    );
    let resume_from = live.last_event_id().unwrap();
    assert_eq!(resume_from, seen[3].id);
    drop(live);

    // Resuming after a line: no duplicates, no gap.
    let mut resumed = sb
        .follow_logs(FollowLogs::new().after(seen[1].id.clone()))
        .await
        .unwrap();
    let next = resumed.next().await.unwrap().unwrap();
    assert_eq!(next.id, seen[2].id);
    assert_eq!(next.text, seen[2].text);

    // The stream ends when the sandbox stops, and says why.
    sb.stop_with(Some(Duration::from_secs(1))).await.unwrap();
    let rest = tokio::time::timeout(Duration::from_secs(20), async {
        let mut n = 0;
        while let Some(line) = resumed.next().await {
            line.unwrap();
            n += 1;
        }
        n
    })
    .await
    .expect("the stream ends after the stop");
    assert!(rest > 0);
    assert_eq!(resumed.end_reason().as_deref(), Some("sandbox stopped"));

    // Logs of a stopped sandbox are still there.
    let after = sb.logs(10_000).await.unwrap();
    assert_eq!(after.lines[0].text, "one");
    let err = sb.logs(10_001).await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
}
