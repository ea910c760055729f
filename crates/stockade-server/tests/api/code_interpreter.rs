//! The code interpreter end to end: cells run in Jupyter kernels of real
//! sandboxes of the code-interpreter image (`STOCKADE_TEST_IMAGE_CODE`,
//! built by `scripts/build-image code-interpreter`), through Stockade's
//! own routes (JSON and SSE) and through E2B's port 49999.

use std::time::{Duration, Instant};

use base64::Engine as _;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::*;
use crate::sse_client::SseStream;

/// The image with Python, JavaScript and bash kernels.
pub fn code_image() -> String {
    std::env::var("STOCKADE_TEST_IMAGE_CODE")
        .unwrap_or_else(|_| "stockade-code-interpreter:latest".into())
}

/// A new app with an account and a running sandbox of the code image
/// (with `A=sandbox` in its environment): the app, the token, the id.
async fn code_sandbox(account: &str) -> (TestApp, String, String) {
    spawn_with_owned_sandbox(
        account,
        json!({"dockerImage": code_image(), "environmentVars": {"A": "sandbox"}}),
    )
    .await
}

/// Runs a cell (asserting a 200): the execution.
async fn run(app: &TestApp, token: &str, id: &str, body: Value) -> Value {
    let r = app.sandbox_post(token, id, "code", body.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{body}: {:?}", r.body);
    r.body
}

/// Runs `code` in the default Python context (asserting a 200): the
/// execution.
async fn cell(app: &TestApp, token: &str, id: &str, code: &str) -> Value {
    run(app, token, id, json!({ "code": code })).await
}

/// The main result's text of an execution.
fn text(exec: &Value) -> Option<&str> {
    exec["results"]
        .as_array()?
        .iter()
        .find(|r| r["isMainResult"] == true)?["text"]
        .as_str()
}

/// The execution count of an execution.
fn count(exec: &Value) -> u64 {
    exec["executionCount"]
        .as_u64()
        .unwrap_or_else(|| panic!("no executionCount in {exec}"))
}

/// Reads a cell's events until it wrote `text` (the cell runs).
async fn until_stdout(s: &mut SseStream, text: &str) {
    loop {
        let e = s
            .next_within(Duration::from_secs(60))
            .await
            .unwrap_or_else(|| panic!("the stream ended before the cell wrote {text}"));
        if e.event == "stdout" && e.data.contains(text) {
            return;
        }
    }
}

/// The stream's chunks joined.
fn joined(exec: &Value, stream: &str) -> String {
    exec["logs"][stream]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn cells_keep_state_and_show_output_results_errors_charts_and_tables() {
    let (app, alice, id) = code_sandbox("alice-code").await;

    // State across cells.
    let first = cell(&app, &alice, &id, "x = 21").await;
    assert!(first["error"].is_null(), "{first}");
    assert_eq!(first["results"], json!([]), "{first}");
    let second = cell(&app, &alice, &id, "x * 2").await;
    assert_eq!(text(&second), Some("42"), "{second}");

    // stdout and stderr.
    let out = cell(
        &app,
        &alice,
        &id,
        "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)",
    )
    .await;
    assert_eq!(joined(&out, "stdout"), "to stdout\n", "{out}");
    assert_eq!(joined(&out, "stderr"), "to stderr\n", "{out}");
    assert!(text(&out).is_none(), "{out}");

    // An error with its traceback; the cell's output before it is kept.
    let err = cell(&app, &alice, &id, "print('before')\n1 / 0").await;
    assert_eq!(err["error"]["name"], "ZeroDivisionError", "{err}");
    assert_eq!(err["error"]["value"], "division by zero", "{err}");
    assert_contains(
        err["error"]["traceback"].as_str().unwrap(),
        "ZeroDivisionError",
    );
    assert_eq!(joined(&err, "stdout"), "before\n", "{err}");

    // A matplotlib figure: a PNG and its chart.
    let fig = cell(
        &app,
        &alice,
        &id,
        "import matplotlib.pyplot as plt\n\
         plt.plot([1, 2, 3], [1, 4, 9])\n\
         plt.title('squares')\n\
         plt.show()",
    )
    .await;
    assert!(fig["error"].is_null(), "{fig}");
    let shown = fig["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["png"].is_string())
        .unwrap_or_else(|| panic!("no PNG in {fig}"));
    assert_eq!(shown["isMainResult"], false, "displayed, not returned");
    let png = base64::engine::general_purpose::STANDARD
        .decode(shown["png"].as_str().unwrap())
        .expect("base64");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(shown["chart"]["type"], "line", "{}", shown["chart"]);
    assert_eq!(shown["chart"]["title"], "squares", "{}", shown["chart"]);

    // A pandas DataFrame: HTML and its data.
    let df = cell(
        &app,
        &alice,
        &id,
        "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})",
    )
    .await;
    let main = df["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["isMainResult"] == true)
        .unwrap_or_else(|| panic!("no main result in {df}"));
    assert_contains(main["html"].as_str().unwrap_or_default(), "<table");
    assert!(
        main["data"]["a"].is_array() || main["data"].is_object(),
        "{main}"
    );
    assert_contains(&main["data"].to_string(), "\"a\"");
    assert!(main["text"].is_string(), "{main}");

    // Variables for one cell, back to the sandbox's afterwards.
    let env_code = "import os\nos.environ.get('A'), os.environ.get('B')";
    let with = run(
        &app,
        &alice,
        &id,
        json!({"code": env_code, "envVars": {"A": "cell", "B": "it's \"quoted\"\n"}}),
    )
    .await;
    assert_eq!(
        text(&with),
        Some(r#"('cell', 'it\'s "quoted"\n')"#),
        "{with}"
    );
    let after = cell(&app, &alice, &id, env_code).await;
    assert_eq!(text(&after), Some("('sandbox', None)"), "{after}");

    // A timeout interrupts the cell; the context keeps its state.
    let started = Instant::now();
    let slow = run(
        &app,
        &alice,
        &id,
        json!({"code": "kept = 'yes'\nimport time\ntime.sleep(60)", "timeoutSeconds": 2}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(20), "{slow}");
    assert_eq!(slow["error"]["name"], "TimeoutError", "{slow}");
    let kept = cell(&app, &alice, &id, "kept").await;
    assert_eq!(text(&kept), Some("yes"), "{kept}");

    // An image without a kernel for a language names the language.
    let r = app
        .sandbox_post(
            &alice,
            &id,
            "code",
            json!({"code": "1", "language": "cobol"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.error_fields(), ["language"], "{:?}", r.body);
    assert_contains(r.message(), "scripts/build-image code-interpreter");

    // Stopped: 409.
    app.act(&alice, &id, "stop?timeout=0")
        .await
        .expect(StatusCode::OK);
    let r = app
        .sandbox_post(&alice, &id, "code", json!({"code": "1"}))
        .await;
    r.assert_error(StatusCode::CONFLICT, "sandbox_not_running");
}

#[tokio::test]
async fn javascript_and_bash_cells_run_in_their_own_kernels() {
    let (app, alice, id) = code_sandbox("alice-languages").await;
    let js = run(
        &app,
        &alice,
        &id,
        json!({"code": "console.log('hi from js'); 40 + 2", "language": "javascript"}),
    )
    .await;
    assert_eq!(joined(&js, "stdout"), "hi from js\n", "{js}");
    assert_eq!(text(&js), Some("42"), "{js}");
    let sh = run(
        &app,
        &alice,
        &id,
        json!({"code": "echo $((6 * 7))", "language": "bash"}),
    )
    .await;
    assert_eq!(joined(&sh, "stdout").trim(), "42", "{sh}");

    // Each language keeps its own state.
    run(
        &app,
        &alice,
        &id,
        json!({"code": "var jsValue = 40", "language": "js"}),
    )
    .await;
    let js = run(
        &app,
        &alice,
        &id,
        json!({"code": "jsValue + 2", "language": "javascript"}),
    )
    .await;
    assert_eq!(text(&js), Some("42"), "{js}");
    let py = cell(&app, &alice, &id, "'jsValue' in globals()").await;
    assert_eq!(text(&py), Some("False"), "{py}");
}

#[tokio::test]
async fn contexts_are_made_listed_interrupted_restarted_and_deleted() {
    let (app, alice, id) = code_sandbox("alice-contexts").await;
    let contexts = format!("/api/v1/sandbox/{id}/code/contexts");
    let made = app
        .post(
            &contexts,
            &alice,
            json!({"language": "python", "cwd": "/tmp"}),
        )
        .await
        .expect(StatusCode::CREATED);
    let ctx = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["language"], "python", "{made}");
    assert_eq!(made["cwd"], "/tmp", "{made}");
    let in_ctx = |code: &str| json!({"code": code, "contextId": ctx});

    let cwd = run(&app, &alice, &id, in_ctx("import os\nz = 1\nos.getcwd()")).await;
    assert_eq!(text(&cwd), Some("/tmp"), "{cwd}");
    // Its state is its own: the default context has no `z`.
    let other = cell(&app, &alice, &id, "z").await;
    assert_eq!(other["error"]["name"], "NameError", "{other}");

    let listed = app.get(&contexts, &alice).await.expect(StatusCode::OK);
    let ids = str_list(&listed["contexts"], "id");
    assert!(ids.contains(&ctx.as_str()), "{listed}");
    assert!(
        ids.len() >= 2,
        "the default context is listed too: {listed}"
    );

    // Interrupt a running cell: it ends with an error, the state stays.
    let url = format!("{}/api/v1/sandbox/{id}/code", app.base);
    let mut s = SseStream::open(app.http.post(&url).bearer_auth(&alice).json(&in_ctx(
        "import time\nprint('sleeping', flush=True)\ntime.sleep(60)",
    )))
    .await;
    assert_eq!(s.status, StatusCode::OK);
    until_stdout(&mut s, "sleeping").await;
    let started = Instant::now();
    app.call(
        Method::POST,
        &format!("{contexts}/{ctx}/interrupt"),
        Some(&alice),
        None,
    )
    .await
    .expect(StatusCode::NO_CONTENT);
    let rest = s.rest(Duration::from_secs(20)).await;
    assert!(started.elapsed() < Duration::from_secs(15));
    let error = rest
        .iter()
        .find(|e| e.event == "error")
        .unwrap_or_else(|| panic!("no error event in {rest:?}"));
    assert_contains(&error.data, "KeyboardInterrupt");
    assert_eq!(rest.last().unwrap().event, "end", "{rest:?}");
    let z = run(&app, &alice, &id, in_ctx("z")).await;
    assert_eq!(text(&z), Some("1"), "{z}");

    // Restart: the same context, its state gone.
    app.call(
        Method::POST,
        &format!("{contexts}/{ctx}/restart"),
        Some(&alice),
        None,
    )
    .await
    .expect(StatusCode::NO_CONTENT);
    let gone = run(&app, &alice, &id, in_ctx("z")).await;
    assert_eq!(gone["error"]["name"], "NameError", "{gone}");

    // Delete: no longer listed, no longer runs code.
    app.delete(&format!("{contexts}/{ctx}"), &alice)
        .await
        .expect(StatusCode::NO_CONTENT);
    let listed = app.get(&contexts, &alice).await.expect(StatusCode::OK);
    assert!(!str_list(&listed["contexts"], "id").contains(&ctx.as_str()));
    let r = app.sandbox_post(&alice, &id, "code", in_ctx("1")).await;
    r.assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_contains(r.message(), "contextId");
    let r = app
        .call(
            Method::POST,
            &format!("{contexts}/{ctx}/restart"),
            Some(&alice),
            None,
        )
        .await;
    r.assert_error(StatusCode::NOT_FOUND, "not_found");
    // A cwd that is no directory names the field.
    let r = app
        .post(&contexts, &alice, json!({"cwd": "/no/such/dir"}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.error_fields(), ["cwd"], "{:?}", r.body);

    // Another account sees none of it.
    let bob = app.new_account("bob-contexts").await;
    let r = app.get(&contexts, &bob).await;
    r.assert_error(StatusCode::FORBIDDEN, "forbidden");
    let r = app
        .sandbox_post(&bob, &id, "code", json!({"code": "1"}))
        .await;
    r.assert_error(StatusCode::FORBIDDEN, "forbidden");
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/sandbox/{id}/code"),
            None,
            Some(json!({"code": "1"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:?}", r.body);
}

#[tokio::test]
async fn events_stream_in_order_with_the_execution_count_first() {
    let (app, alice, id) = code_sandbox("alice-code-sse").await;
    let url = format!("{}/api/v1/sandbox/{id}/code", app.base);
    let mut s = SseStream::open(
        app.http
            .post(&url)
            .bearer_auth(&alice)
            .json(&json!({"code": "print('a')\n1 + 1"})),
    )
    .await;
    assert_eq!(s.status, StatusCode::OK);
    let events = s.rest(Duration::from_secs(60)).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        kinds,
        ["executionCount", "stdout", "result", "end"],
        "{events:?}"
    );
    let data = |i: usize| serde_json::from_str::<Value>(&events[i].data).unwrap();
    assert!(data(0)["executionCount"].as_u64().is_some(), "{events:?}");
    assert_eq!(data(1)["text"], "a\n");
    assert!(data(1)["timestamp"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(data(2)["isMainResult"], true);
    assert_eq!(data(2)["text"], "2");
    assert_eq!(data(3), json!({"unexpected": false}));

    // The count grows cell by cell, in JSON answers too.
    let first = cell(&app, &alice, &id, "x = 1").await;
    let second = cell(&app, &alice, &id, "x + 1").await;
    assert!(count(&second) > count(&first), "{first} {second}");
    assert!(count(&first) > data(0)["executionCount"].as_u64().unwrap());

    // E2B's SDKs read it from the first line of the agent's answer.
    let r = e2b_code(&app, Method::POST, &id, "/execute")
        .header("X-API-Key", &alice)
        .json(&json!({"code": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.text().await.unwrap();
    let first_line: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    assert_eq!(first_line["type"], "number_of_executions", "{body}");
    assert!(
        first_line["execution_count"].as_u64() > Some(count(&second)),
        "{body}"
    );
}

#[tokio::test]
async fn leaving_a_stream_interrupts_the_cell() {
    let (app, alice, id) = code_sandbox("alice-code-leave").await;
    let url = format!("{}/api/v1/sandbox/{id}/code", app.base);
    // A cell left behind is interrupted: the next cell of the context
    // runs at once and sees the state from before the interruption.
    let mut s = SseStream::open(app.http.post(&url).bearer_auth(&alice).json(&json!({
        "code": "marker = 'started'\nimport time\nprint('sleeping', flush=True)\ntime.sleep(60)\nmarker = 'finished'"
    })))
    .await;
    until_stdout(&mut s, "sleeping").await;
    drop(s);
    let started = Instant::now();
    let next = cell(&app, &alice, &id, "marker").await;
    assert_eq!(text(&next), Some("started"), "{next}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the next cell waited {:?}: the one left behind was not interrupted",
        started.elapsed()
    );
}

/// An E2B call to the code interpreter of `sandbox` (port 49999).
fn e2b_code(app: &TestApp, method: Method, sandbox: &str, path: &str) -> reqwest::RequestBuilder {
    app.http
        .request(method, format!("{}/e2b{path}", app.base))
        .header("E2b-Sandbox-Id", sandbox)
        .header("E2b-Sandbox-Port", "49999")
}

/// E2B's create with the code interpreter's template: the sandbox's answer.
async fn e2b_create(app: &TestApp, key: &str) -> Value {
    let r = app
        .http
        .post(format!("{}/e2b/sandboxes", app.base))
        .header("X-API-Key", key)
        .json(&json!({"templateID": "code-interpreter-v1", "timeout": 600}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

#[tokio::test]
async fn e2b_sdks_reach_the_code_interpreter_on_port_49999() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice-e2b-code", "bob-e2b-code"]).await;
    let sb = e2b_create(&app, &alice).await;
    assert_eq!(sb["templateID"], "code-interpreter-v1", "{sb}");
    let id = sb["sandboxID"].as_str().unwrap();
    let traffic = sb["trafficAccessToken"].as_str().unwrap();
    let envd = sb["envdAccessToken"].as_str().unwrap();
    assert!(traffic.starts_with("stkt_"), "{sb}");

    // /execute with the traffic token: the agent's NDJSON as it is.
    let r = e2b_code(&app, Method::POST, id, "/execute")
        .header("E2B-Traffic-Access-Token", traffic)
        .json(&json!({"code": "print('hi')\n6 * 7"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.text().await.unwrap();
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    assert_eq!(kinds.last(), Some(&"end_of_execution"), "{body}");
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "stdout" && l["text"] == "hi\n"),
        "{body}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "result" && l["text"] == "42" && l["is_main_result"] == true),
        "{body}"
    );

    // /contexts with the envd token, and with an API key of the account.
    let r = e2b_code(&app, Method::GET, id, "/contexts")
        .header("X-Access-Token", envd)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let listed: Value = r.json().await.unwrap();
    assert!(listed.as_array().is_some_and(|a| !a.is_empty()), "{listed}");
    let r = e2b_code(&app, Method::POST, id, "/contexts")
        .header("X-API-Key", &alice)
        .json(&json!({"language": "python"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let made: Value = r.json().await.unwrap();
    assert_eq!(made["language"], "python", "{made}");
    // The host form goes to the same place.
    let r = app
        .http
        .get(format!("{}/contexts", app.base))
        .header("host", format!("49999-{id}.{PROXY_DOMAIN}"))
        .header("E2B-Traffic-Access-Token", traffic)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let via_host: Value = r.json().await.unwrap();
    assert_contains(&via_host.to_string(), made["id"].as_str().unwrap());

    // Another sandbox's traffic token: 401; another account's key: 403.
    let other = e2b_create(&app, &alice).await;
    let r = e2b_code(&app, Method::GET, id, "/contexts")
        .header(
            "E2B-Traffic-Access-Token",
            other["trafficAccessToken"].as_str().unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = e2b_code(&app, Method::GET, id, "/contexts")
        .header("X-API-Key", &bob)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // The agent's own port is as it was: envd's health with the envd token.
    let r = app
        .http
        .get(format!("{}/e2b/health", app.base))
        .header("E2b-Sandbox-Id", id)
        .header("E2b-Sandbox-Port", "49983")
        .header("X-Access-Token", envd)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = app
        .http
        .get(format!("{}/e2b/files?path=/etc/hostname", app.base))
        .header("E2b-Sandbox-Id", id)
        .header("E2b-Sandbox-Port", "49983")
        .header("X-Access-Token", envd)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn health_lists_the_code_interpreter_preset_and_how_to_build_it() {
    let app = spawn_configured(|c| {
        c.service.defaults.runtimes.insert(
            "code-interpreter-v1".into(),
            "stockade-code-interpreter:absent-in-this-test".into(),
        );
    })
    .await;
    let preset = |health: &Value| {
        health["images"]["presets"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == "code-interpreter-v1"))
            .cloned()
            .unwrap_or_else(|| panic!("no code-interpreter-v1 preset in {health}"))
    };
    let health = app
        .get_raw("/api/v1/health")
        .await
        .json::<Value>()
        .await
        .unwrap();
    let absent = preset(&health);
    assert_eq!(absent["present"], false, "{absent}");
    assert_eq!(
        absent["hint"], "build it with scripts/build-image code-interpreter",
        "{absent}"
    );

    let app = spawn_app().await;
    let health = app
        .get_raw("/api/v1/health")
        .await
        .json::<Value>()
        .await
        .unwrap();
    let present = preset(&health);
    assert_eq!(
        present["image"], "stockade-code-interpreter:latest",
        "{present}"
    );
    assert_eq!(present["present"], true, "{present}");
    assert!(present.get("hint").is_none(), "{present}");
}

#[tokio::test]
async fn an_image_without_kernels_says_where_to_run_code() {
    let (app, token, id) = spawn_with_owned_sandbox("alice-no-kernels", json!({})).await;
    let r = app
        .sandbox_post(&token, &id, "code", json!({"code": "1 + 1"}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.error_fields(), ["language"], "{:?}", r.body);
    assert_contains(
        r.message(),
        "run code in the code-interpreter-v1 image (scripts/build-image code-interpreter)",
    );
}

/// The agent's (PID 1's) resident memory at its peak, in KiB.
fn agent_peak_kib(id: &str) -> u64 {
    sh_in(id, "grep VmHWM /proc/1/status")
        .split_whitespace()
        .nth(1)
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM for the agent of {id}"))
}

#[tokio::test]
async fn a_dying_kernel_a_flood_of_output_and_too_many_contexts_leave_the_sandbox_usable() {
    let (app, alice, id) = code_sandbox("alice-bad-day").await;
    let contexts = format!("/api/v1/sandbox/{id}/code/contexts");

    // A kernel that exits mid-cell: the cell says so, the next one too,
    // and a restart of its context makes it answer again.
    cell(&app, &alice, &id, "kept = 1").await;
    let died = cell(&app, &alice, &id, "import os\nos._exit(3)").await;
    assert_eq!(died["error"]["name"], "KernelDied", "{died}");
    let value = died["error"]["value"].as_str().unwrap();
    assert!(value.contains("exited (status 3)"), "{died}");
    assert!(value.contains("restart the context"), "{died}");
    let after = cell(&app, &alice, &id, "1").await;
    assert_eq!(after["error"]["name"], "KernelDied", "{after}");
    let listed = app.get(&contexts, &alice).await.expect(StatusCode::OK);
    let default = listed["contexts"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["language"] == "python"))
        .and_then(|c| c["id"].as_str())
        .unwrap_or_else(|| panic!("the default context is still listed: {listed}"))
        .to_owned();
    app.bodiless(
        Method::POST,
        &format!("{contexts}/{default}/restart"),
        &alice,
    )
    .await
    .expect(StatusCode::NO_CONTENT);
    let fresh = cell(&app, &alice, &id, "'kept' in dir()").await;
    assert_eq!(text(&fresh), Some("False"), "{fresh}");

    // A cell that prints 100 MiB: cut at 16 MiB with a note, the agent's
    // memory stays far below what it printed, the context answers after.
    let flood = cell(
        &app,
        &alice,
        &id,
        "import sys\n\
         for _ in range(100): sys.stdout.write('x' * (1 << 20)); sys.stdout.flush()\n\
         'done'",
    )
    .await;
    let stdout = joined(&flood, "stdout");
    assert!(stdout.len() <= 16 << 20, "{} bytes kept", stdout.len());
    assert!(stdout.len() >= 15 << 20, "{} bytes kept", stdout.len());
    assert!(
        joined(&flood, "stderr").contains("[output cut: this cell wrote more than 16 MiB"),
        "{:?}",
        flood["logs"]["stderr"]
    );
    let peak = agent_peak_kib(&id);
    assert!(peak < 64 * 1024, "the agent's peak RSS was {peak} KiB");
    let next = cell(&app, &alice, &id, "6 * 7").await;
    assert_eq!(text(&next), Some("42"), "{next}");

    // Contexts up to the limit, then a 409 that says so; deleting one
    // makes room again.
    let mut made = Vec::new();
    loop {
        let r = app
            .post(&contexts, &alice, json!({"language": "python"}))
            .await;
        if r.status == StatusCode::CONFLICT {
            assert!(r.message().contains("16 code contexts"), "{:?}", r.body);
            break;
        }
        made.push(
            r.expect(StatusCode::CREATED)["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
        assert!(made.len() <= 16, "more than 16 contexts were made");
    }
    let listed = app.get(&contexts, &alice).await.expect(StatusCode::OK);
    assert_eq!(
        listed["contexts"].as_array().map(Vec::len),
        Some(16),
        "{listed}"
    );
    app.delete(&format!("{contexts}/{}", made[0]), &alice)
        .await
        .expect(StatusCode::NO_CONTENT);
    app.post(&contexts, &alice, json!({"language": "python"}))
        .await
        .expect(StatusCode::CREATED);
}

#[tokio::test]
async fn kernels_keep_their_state_across_a_restart_of_the_server() {
    let (app, alice, id) = code_sandbox("alice-restart").await;
    cell(&app, &alice, &id, "survivor = 41").await;
    let app = app.restart().await;
    let after = cell(&app, &alice, &id, "survivor + 1").await;
    assert_eq!(text(&after), Some("42"), "{after}");
}

#[tokio::test]
async fn a_restarted_sandbox_starts_its_kernels_anew_and_names_a_lost_context() {
    let (app, alice, id) = code_sandbox("alice-code-restart").await;
    let contexts = format!("/api/v1/sandbox/{id}/code/contexts");
    let ctx = app
        .post(&contexts, &alice, json!({"language": "python"}))
        .await
        .expect(StatusCode::CREATED)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    cell(&app, &alice, &id, "before = 1").await;

    // Stopped: no cell runs, the record says why.
    app.act(&alice, &id, "stop")
        .await
        .assert_status(StatusCode::OK, "stop");
    let r = app
        .sandbox_post(&alice, &id, "code", json!({"code": "1"}))
        .await;
    r.assert_status(StatusCode::CONFLICT, "a cell in a stopped sandbox");

    // Started again: the processes (kernels) are gone with the container's
    // run; the default context is made anew, the old one is a 404 naming it.
    app.act(&alice, &id, "start")
        .await
        .assert_status(StatusCode::OK, "start");
    let fresh = cell(&app, &alice, &id, "'before' in dir()").await;
    assert_eq!(text(&fresh), Some("False"), "{fresh}");
    let lost = app
        .sandbox_post(&alice, &id, "code", json!({"code": "1", "contextId": ctx}))
        .await;
    lost.assert_status(StatusCode::NOT_FOUND, "a context of the previous run");
    assert!(lost.message().starts_with("contextId: "), "{:?}", lost.body);
}
