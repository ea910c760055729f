//! Commands: buffered, streamed and in the background.

use std::time::Duration;

use stockade_sdk::api::ProcessStatus;
use stockade_sdk::{Command, CommandEvent, CreateParams, Error, Sandbox, StreamExt};

use crate::helpers::{eventually, server};

#[tokio::test(flavor = "multi_thread")]
async fn buffered_commands_report_output_exit_codes_and_timeouts() {
    let s = server().await;
    let sb = Sandbox::create(
        &s.client,
        CreateParams::new().name("exec").env("WHO", "sandbox"),
    )
    .await
    .unwrap();

    let out = sb
        .run_command(Command::new("echo").arg("a  b").arg("c"))
        .await
        .unwrap();
    assert_eq!(out.stdout, "a  b c\n", "argv is passed without a shell");
    assert_eq!(out.exit_code, Some(0));
    assert!(out.success());

    let out = sb
        .run_command("echo $WHO $EXTRA; pwd; echo oops >&2; exit 7")
        .await
        .unwrap();
    assert_eq!(out.stdout, "sandbox\n/workspace\n");
    assert_eq!(out.stderr, "oops\n");
    assert_eq!(out.exit_code, Some(7));
    assert!(!out.success());

    let out = sb
        .run_command(
            Command::shell("echo $WHO $EXTRA; pwd; cat")
                .env("WHO", "request")
                .env("EXTRA", "x")
                .cwd("/tmp")
                .stdin("from stdin"),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "request x\n/tmp\nfrom stdin");

    let out = sb
        .run_command(Command::shell("sleep 5").timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.exit_code, None);
    assert!(out.duration < Duration::from_secs(4), "{:?}", out.duration);
    assert!(out.message.unwrap_or_default().contains("timeout"));

    // Bad input is refused before any request; the server's errors come through.
    let err = sb.run_command(Command::default()).await.unwrap_err();
    assert!(matches!(err, Error::InvalidParams { .. }), "{err}");
    let err = sb
        .run_command(Command::new("true").cwd("/no/such/dir"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");

    let stopped = sb.stop_with(Some(Duration::from_secs(1))).await.unwrap();
    let err = stopped.run_command("true").await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(err.to_string().contains("not running"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_commands_deliver_output_as_it_comes() {
    let s = server().await;
    let sb = s.create(CreateParams::new().name("stream")).await;

    let script = "echo one; sleep 1; echo two >&2; sleep 1; echo three; exit 4";
    let mut events = sb.run_command_stream(script).await.unwrap();
    let first = events.next().await.unwrap().unwrap();
    let first_at = std::time::Instant::now();
    assert_eq!(first, CommandEvent::Stdout("one\n".into()));
    let mut rest = Vec::new();
    while let Some(e) = events.next().await {
        rest.push(e.unwrap());
    }
    assert!(
        first_at.elapsed() > Duration::from_millis(1500),
        "the first line arrived while the command still ran: {:?} before its end",
        first_at.elapsed()
    );
    assert_eq!(rest[0], CommandEvent::Stderr("two\n".into()));
    assert_eq!(rest[1], CommandEvent::Stdout("three\n".into()));
    match &rest[2] {
        CommandEvent::Exit(exit) => {
            assert_eq!(exit.exit_code, Some(4));
            assert!(!exit.timed_out);
            assert!(exit.duration >= Duration::from_secs(2));
        }
        other => panic!("expected the exit, got {other:?}"),
    }
    assert_eq!(rest.len(), 3);

    let out = sb
        .run_command_stream(Command::new("sh").args(["-c", "printf 'a\\nb'; echo c >&2"]))
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!((out.stdout.as_str(), out.stderr.as_str()), ("a\nb", "c\n"));
    assert_eq!(out.exit_code, Some(0));

    // Dropping the stream kills the command.
    let mut events = sb
        .run_command_stream("echo started; sleep 31")
        .await
        .unwrap();
    assert_eq!(
        events.next().await.unwrap().unwrap(),
        CommandEvent::Stdout("started\n".into())
    );
    drop(events);
    let sb = &sb;
    let gone = eventually(50, || async move {
        let ps = sb.run_command("ps").await.unwrap().stdout;
        !ps.contains("sleep 31")
    })
    .await;
    assert!(gone, "a dropped stream's command is killed");
}

#[tokio::test(flavor = "multi_thread")]
async fn background_processes_can_be_listed_waited_for_and_killed() {
    let s = server().await;
    let sb = s.create(CreateParams::new().name("bg")).await;

    let mut job = sb
        .spawn("echo hi; sleep 1; echo bye >&2; exit 3")
        .await
        .unwrap();
    assert!(job.is_running());
    assert_eq!(job.id().len(), 12);
    let out = job.wait().await.unwrap();
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.stdout, "hi\n");
    assert_eq!(out.stderr, "bye\n");
    assert_eq!(job.info().status, ProcessStatus::Exited);

    let mut sleeper = sb
        .spawn(Command::shell("echo up; sleep 300"))
        .await
        .unwrap();
    assert!(sleeper
        .wait_for(Duration::from_secs(1))
        .await
        .unwrap()
        .is_none());
    assert_eq!(sleeper.output().await.unwrap().stdout, "up\n");
    let listed = sb.processes().await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|p| p.id()).collect();
    assert_eq!(ids, [job.id(), sleeper.id()], "oldest first");
    let mut again = sb.process(sleeper.id()).await.unwrap();
    assert!(again.is_running());
    let killed = again.kill().await.unwrap();
    assert_eq!(
        killed.exit_code,
        Some(137),
        "SIGKILL, as a shell reports it"
    );
    assert_eq!(again.info().status, ProcessStatus::Killed);
    sleeper.output().await.unwrap();
    assert!(!sleeper.is_running());

    let mut timed = sb
        .spawn(Command::shell("sleep 30").timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    let out = timed.wait().await.unwrap();
    assert!(out.timed_out);
    assert_eq!(timed.info().status, ProcessStatus::TimedOut);

    let err = sb.process("zzzzzzzzzzzz").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
}
