//! Terminals and the agent's file verbs through the SDK: a
//! PTY whose `cd` sticks, whose size follows resizes and whose Ctrl-C
//! reaches the foreground program, the exit code at the end, a writer used
//! from another task, bad options refused, a dropped terminal's process
//! gone; `make_dir`, `move_path` and typed watch events.

use std::time::{Duration, Instant};

use stockade_sdk::api::FileType;
use stockade_sdk::{CreateParams, Error, StreamExt, Terminal, TerminalOptions, WatchEventKind};

use crate::helpers::server;

/// Reads the terminal until its output contains `needle` (15 s at most).
async fn read_until(term: &mut Terminal, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, term.next()).await {
            Ok(Some(Ok(bytes))) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            other => panic!("waiting for {needle:?}: {other:?}; seen so far:\n{seen}"),
        }
    }
}

/// Reads the rest of the output (15 s at most).
async fn read_to_end(term: &mut Terminal, seen: &mut String) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, term.next()).await {
            Ok(Some(Ok(bytes))) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            Ok(None) => return,
            other => panic!("the terminal did not end: {other:?}; seen so far:\n{seen}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_is_a_pty_that_resizes_takes_ctrl_c_and_exits_with_its_code() {
    let s = server().await;
    let sb = s
        .create(CreateParams::new().name("tty").env("WHO", "sdk"))
        .await;
    let mut term = sb
        .terminal(TerminalOptions::new().size(100, 30))
        .await
        .unwrap();
    assert!(!term.has_exited());
    let mut seen = String::new();
    term.write(b"cd /tmp && echo marker-$((6*7)) $WHO\n")
        .await
        .unwrap();
    read_until(&mut term, &mut seen, "marker-42 sdk").await;
    assert!(
        seen.contains("echo marker-"),
        "the PTY echoes what is typed:\n{seen}"
    );
    term.write(b"echo \"dir=$(pwd)\"; stty size\n")
        .await
        .unwrap();
    read_until(&mut term, &mut seen, "30 100").await;
    assert!(seen.contains("dir=/tmp"), "cd did not stick:\n{seen}");

    term.resize(120, 40).await.unwrap();
    term.write(b"stty size\n").await.unwrap();
    read_until(&mut term, &mut seen, "40 120").await;

    // Keys from another task while this one reads; Ctrl-C stops the
    // foreground program, not the shell.
    let keys = term.writer();
    tokio::spawn(async move {
        keys.write(b"sleep 100\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        keys.write(b"\x03").await.unwrap();
        keys.write(b"echo still-$((1+1))\n").await.unwrap();
    });
    let started = Instant::now();
    read_until(&mut term, &mut seen, "still-2").await;
    assert!(started.elapsed() < Duration::from_secs(15));

    term.write(b"exit 3\n").await.unwrap();
    read_to_end(&mut term, &mut seen).await;
    assert!(term.has_exited());
    assert_eq!(term.exit_code(), Some(3));
    let err = term.write(b"more\n").await.unwrap_err();
    assert!(matches!(err, Error::Closed(_)), "{err}");

    // Keystroke to echo, one key at a time (the aim is 5 ms).
    let mut term_cat = sb
        .terminal(TerminalOptions::new().command("cat"))
        .await
        .unwrap();
    let mut rtts = Vec::new();
    for key in b"abcdefghijklmnopqrst" {
        let started = Instant::now();
        term_cat.write(&[*key]).await.unwrap();
        let mut echoed = String::new();
        read_until(&mut term_cat, &mut echoed, &char::from(*key).to_string()).await;
        rtts.push(started.elapsed());
    }
    rtts.sort();
    eprintln!(
        "terminal echo through the server: median {:?}, max {:?}",
        rtts[rtts.len() / 2],
        rtts[rtts.len() - 1]
    );
    drop(term_cat);

    // A command instead of a shell, in a directory of its own; `wait`
    // skips the output.
    let term = sb
        .terminal(
            TerminalOptions::new()
                .command("test -t 0 && pwd; exit 4")
                .cwd("/tmp"),
        )
        .await
        .unwrap();
    assert_eq!(term.wait().await.unwrap(), Some(4));
    let mut term = sb
        .terminal(
            TerminalOptions::new()
                .command("test -t 0 && pwd")
                .cwd("/tmp"),
        )
        .await
        .unwrap();
    let mut seen = String::new();
    read_to_end(&mut term, &mut seen).await;
    assert!(seen.contains("/tmp"), "a terminal, in /tmp:\n{seen}");
    assert_eq!(term.exit_code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_terminals_are_refused_and_a_dropped_one_ends_its_process() {
    let s = server().await;
    let sb = s.create(CreateParams::new().name("tty-errors")).await;
    // Refused before any request, naming the option.
    for (options, field) in [
        (TerminalOptions::new().size(0, 24), "cols"),
        (TerminalOptions::new().size(80, 1001), "rows"),
        (TerminalOptions::new().command(""), "command"),
    ] {
        match sb.terminal(options).await.unwrap_err() {
            Error::InvalidParams { field: f, .. } => assert_eq!(f, field),
            other => panic!("{other}"),
        }
    }
    // The server's refusals come back as API errors.
    let err = sb
        .terminal(TerminalOptions::new().cwd("/no/such/dir"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    let err = sb
        .terminal(TerminalOptions::new().cwd("../../etc"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");

    // Dropping the terminal ends its process.
    let term = sb
        .terminal(TerminalOptions::new().command("sleep 777"))
        .await
        .unwrap();
    let list = "for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sb
        .run_command(list)
        .await
        .unwrap()
        .stdout
        .contains("sleep 777")
    {
        assert!(
            Instant::now() < deadline,
            "the terminal's process never ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(term);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ps = sb.run_command(list).await.unwrap().stdout;
        if !ps.contains("sleep 777") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dropped terminal's process lives on:\n{ps}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A stopped sandbox has no terminal.
    sb.stop().await.unwrap();
    let err = sb.terminal(TerminalOptions::new()).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn directories_are_made_paths_moved_and_changes_watched() {
    let s = server().await;
    let sb = s.create(CreateParams::new().name("fs-verbs")).await;
    let dir = sb.make_dir("a/b/c").await.unwrap();
    assert_eq!(dir.path, "/workspace/a/b/c");
    assert_eq!(dir.file_type, FileType::Dir);
    assert_eq!(
        sb.make_dir("a/b/c").await.unwrap().path,
        "/workspace/a/b/c",
        "one that exists is fine"
    );
    sb.write_file("a/file", "x").await.unwrap();
    // A file in the way is an error (which status is the server's business).
    assert!(sb.make_dir("a/file/sub").await.is_err());

    let mut watch = sb.watch("/workspace", true).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    sb.write_file("a/notes.txt", "hello").await.unwrap();
    let moved = sb
        .move_path("a/notes.txt", "a/b/renamed.txt")
        .await
        .unwrap();
    assert_eq!(moved.path, "/workspace/a/b/renamed.txt");
    assert_eq!(moved.file_type, FileType::File);
    assert_eq!(sb.read_file("a/b/renamed.txt").await.unwrap(), b"hello");
    sb.remove("a/b/renamed.txt").await.unwrap();

    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let wanted = [
        WatchEventKind::Create,
        WatchEventKind::Rename,
        WatchEventKind::Remove,
    ];
    while !wanted
        .iter()
        .all(|k| seen.iter().any(|(kind, _, _)| kind == k))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, watch.next()).await {
            Ok(Some(Ok(ev))) => seen.push((ev.kind, ev.path, ev.file_type)),
            other => panic!("watch events missing ({other:?}): {seen:?}"),
        }
    }
    assert!(
        seen.iter()
            .any(|(kind, path, _)| *kind == WatchEventKind::Create
                && path == "/workspace/a/notes.txt"),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(kind, path, _)| *kind == WatchEventKind::Remove
                && path == "/workspace/a/b/renamed.txt"),
        "{seen:?}"
    );

    // Missing and bad paths.
    let err = sb.move_path("nope", "x").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = sb.move_path("../../etc", "x").await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    match sb.move_path("", "x").await.unwrap_err() {
        Error::InvalidParams { field, .. } => assert_eq!(field, "from"),
        other => panic!("{other}"),
    }
    let err = sb.watch("missing-dir", false).await.unwrap_err();
    assert!(err.is_not_found() || err.status() == Some(400), "{err}");

    // Stopping the sandbox ends the watch, with the server's reason.
    let mut watch = sb.watch("/workspace", false).await.unwrap();
    sb.stop().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = watch.next().await {
            if ev.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the watch outlived its sandbox");
}
