//! The code interpreter: cells collected and streamed, their state kept
//! between calls, and contexts made, listed, restarted, interrupted and
//! removed — in the code-interpreter image.

use std::time::{Duration, Instant};

use stockade_sdk::{CodeEvent, CreateParams, Error, RunCode, Sandbox, StreamExt};

use crate::helpers::{server, TestServer};

/// The code-interpreter image (`STOCKADE_TEST_IMAGE_CODE`, else the local
/// `stockade-code-interpreter:latest`); `None` (the test is skipped) when
/// the variable is unset and the image is not built.
pub fn code_image() -> Option<String> {
    if let Ok(image) = std::env::var("STOCKADE_TEST_IMAGE_CODE") {
        return Some(image);
    }
    let image = "stockade-code-interpreter:latest";
    let present = std::process::Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        eprintln!(
            "skipped: no {image} (build it with `scripts/build-image code-interpreter`, \
             or set STOCKADE_TEST_IMAGE_CODE)"
        );
    }
    present.then(|| image.to_owned())
}

/// A server and a running sandbox of the code-interpreter image named
/// `name`; `None` when the image is missing (see [`code_image`]).
async fn notebook(name: &str) -> Option<(TestServer, Sandbox)> {
    let image = code_image()?;
    let s = server().await;
    let sb = s.create(CreateParams::new().name(name).image(image)).await;
    Some((s, sb))
}

#[tokio::test(flavor = "multi_thread")]
async fn collected_cells_keep_state_and_report_results_errors_and_timeouts() {
    let Some((_s, sb)) = notebook("cells").await else {
        return;
    };

    let first = sb.run_code("x = 6").await.unwrap();
    assert!(
        first.results.is_empty() && first.error.is_none(),
        "{first:?}"
    );
    let ex = sb.run_code("print('hello'); x * 7").await.unwrap();
    assert_eq!(ex.text(), Some("42"), "{ex:?}");
    assert_eq!(ex.logs.stdout.concat(), "hello\n");
    assert!(ex.results[0].is_main_result);

    let ex = sb
        .run_code("import sys; print('warn', file=sys.stderr); 'a' + 'b'")
        .await
        .unwrap();
    assert_eq!(ex.logs.stderr.concat(), "warn\n");
    assert_eq!(ex.text(), Some("ab"), "one pair of quotes is stripped");

    let ex = sb.run_code(RunCode::new("1 / 0")).await.unwrap();
    let err = ex.error.expect("the cell raised");
    assert_eq!(err.name, "ZeroDivisionError");
    assert!(err.value.contains("division by zero"), "{err:?}");
    assert!(err.traceback.contains("ZeroDivisionError"), "{err:?}");

    // Environment variables hold for one cell only.
    let read = "import os; os.environ.get('MODE', 'unset')";
    let ex = sb
        .run_code(RunCode::new(read).env("MODE", "test"))
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("test"));
    assert_eq!(sb.run_code(read).await.unwrap().text(), Some("unset"));

    // A timeout interrupts the cell; the context keeps its state.
    let started = Instant::now();
    let ex = sb
        .run_code(RunCode::new("import time; time.sleep(60)").timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(ex.error.map(|e| e.name).as_deref(), Some("TimeoutError"));
    assert_eq!(sb.run_code("x").await.unwrap().text(), Some("6"));

    // Another language has its own default context.
    let ex = sb
        .run_code(RunCode::new("echo $((6 * 7))").language("bash"))
        .await
        .unwrap();
    assert_eq!(ex.logs.stdout.concat(), "42\n", "{ex:?}");

    // Bad input is refused before any request.
    let both = RunCode::new("1").language("python").context("abc");
    assert!(matches!(
        sb.run_code(both).await,
        Err(Error::InvalidParams { .. })
    ));
    let zero = RunCode::new("1").timeout(Duration::ZERO);
    assert!(matches!(
        sb.run_code(zero).await,
        Err(Error::InvalidParams { .. })
    ));
    let err = sb
        .run_code(RunCode::new("1").language("cobol"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");

    let stopped = sb.stop_with(Some(Duration::from_secs(1))).await.unwrap();
    let err = stopped.run_code("1").await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cells_are_numbered_by_the_kernel_first_thing_when_streamed() {
    let Some((_s, sb)) = notebook("counts").await else {
        return;
    };
    let first = sb.run_code("1").await.unwrap();
    let second = sb.run_code("2").await.unwrap();
    let (Some(a), Some(b)) = (first.execution_count, second.execution_count) else {
        panic!("no execution counts: {first:?} {second:?}");
    };
    assert!(b > a, "{a} then {b}");
    let mut events = sb.run_code_stream("3").await.unwrap();
    let event = events.next().await.unwrap().unwrap();
    assert_eq!(event, CodeEvent::ExecutionCount(b + 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_cells_deliver_events_as_they_come_and_a_dropped_stream_interrupts() {
    let Some((_s, sb)) = notebook("stream").await else {
        return;
    };

    let code = "import time\nprint('one', flush=True)\ntime.sleep(1.5)\nprint('two')\n6 * 7";
    let mut events = sb.run_code_stream(code).await.unwrap();
    let mut seen = Vec::new();
    let mut one_at = None;
    while let Some(event) = events.next().await {
        let event = event.unwrap();
        if matches!(&event, CodeEvent::Stdout(o) if o.text == "one\n") {
            one_at = Some(Instant::now());
        }
        let last = matches!(event, CodeEvent::End(_));
        seen.push(event);
        if last {
            break;
        }
    }
    let one_at = one_at.unwrap_or_else(|| panic!("no `one` in {seen:?}"));
    assert!(
        one_at.elapsed() > Duration::from_secs(1),
        "the first line came with the end, not as it was printed"
    );
    let texts: Vec<String> = seen
        .iter()
        .filter_map(|e| match e {
            CodeEvent::Stdout(o) => Some(o.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts.concat(), "one\ntwo\n");
    let result = seen.iter().find_map(|e| match e {
        CodeEvent::Result(r) => Some(r),
        _ => None,
    });
    assert_eq!(result.and_then(|r| r.text.as_deref()), Some("42"));
    assert!(matches!(seen.last(), Some(CodeEvent::End(end)) if !end.unexpected));

    let ex = sb
        .run_code_stream("print('collected'); 1 + 1")
        .await
        .unwrap()
        .collect_execution()
        .await
        .unwrap();
    assert_eq!(
        (ex.logs.stdout.concat().as_str(), ex.text()),
        ("collected\n", Some("2"))
    );

    // Dropping the stream interrupts the cell: the next one runs at once,
    // and the interrupted cell never finished.
    let mut events = sb
        .run_code_stream(
            "import time\nprint('started', flush=True)\ntime.sleep(60)\nfinished = True",
        )
        .await
        .unwrap();
    loop {
        match events.next().await.unwrap().unwrap() {
            CodeEvent::Stdout(o) if o.text.contains("started") => break,
            CodeEvent::End(_) => panic!("the cell ended early"),
            _ => {}
        }
    }
    drop(events);
    let started = Instant::now();
    let ex = sb.run_code("'finished' in globals()").await.unwrap();
    assert_eq!(ex.text(), Some("False"), "{ex:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the next cell waited {:?} for the dropped one",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn contexts_are_made_listed_restarted_interrupted_and_removed() {
    let Some((_s, sb)) = notebook("contexts").await else {
        return;
    };

    let ctx = sb
        .create_code_context(Some("python"), Some("/tmp"))
        .await
        .unwrap();
    assert_eq!(
        (ctx.language.as_str(), ctx.cwd.as_str()),
        ("python", "/tmp")
    );
    let in_ctx = |code: &str| RunCode::new(code).context(&ctx.id);
    let ex = sb
        .run_code(in_ctx("import os; y = 1; os.getcwd()"))
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("/tmp"));
    // Each context has state of its own.
    let ex = sb.run_code("'y' in globals()").await.unwrap();
    assert_eq!(ex.text(), Some("False"));
    assert_eq!(
        sb.run_code(in_ctx("y + 1")).await.unwrap().text(),
        Some("2")
    );

    let listed = sb.code_contexts().await.unwrap();
    assert!(listed.iter().any(|c| c.id == ctx.id), "{listed:?}");
    assert!(
        listed
            .iter()
            .any(|c| c.id != ctx.id && c.language == "python"),
        "the default context is listed: {listed:?}"
    );

    sb.restart_code_context(&ctx.id).await.unwrap();
    let ex = sb.run_code(in_ctx("y")).await.unwrap();
    assert_eq!(ex.error.map(|e| e.name).as_deref(), Some("NameError"));
    let ex = sb.run_code(in_ctx("import os; os.getcwd()")).await.unwrap();
    assert_eq!(ex.text(), Some("/tmp"), "a restart keeps the directory");

    // An interrupt stops the running cell; the context answers the next.
    let mut events = sb
        .run_code_stream(in_ctx(
            "import time\nprint('go', flush=True)\ntime.sleep(60)",
        ))
        .await
        .unwrap();
    loop {
        if let CodeEvent::Stdout(_) = events.next().await.unwrap().unwrap() {
            break;
        }
    }
    sb.interrupt_code_context(&ctx.id).await.unwrap();
    let ex = events.collect_execution().await.unwrap();
    assert_eq!(
        ex.error.map(|e| e.name).as_deref(),
        Some("KeyboardInterrupt")
    );

    sb.remove_code_context(&ctx.id).await.unwrap();
    assert!(!sb
        .code_contexts()
        .await
        .unwrap()
        .iter()
        .any(|c| c.id == ctx.id));
    let err = sb.run_code(in_ctx("1")).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = sb.restart_code_context(&ctx.id).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = sb
        .create_code_context(None, Some("/no/such/dir"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    let err = sb.remove_code_context("../../exec").await.unwrap_err();
    assert!(matches!(err, Error::InvalidParams { .. }), "{err}");
}
