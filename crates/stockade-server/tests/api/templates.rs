//! Templates against real Docker: a build from the test image with every
//! step kind, its log, a sandbox made from it that sees each step's effect
//! (its workdir, environment, files in `/workspace`, started start
//! command), a rebuild that takes its unchanged steps from the cache, a
//! failing step named with its exit code and output, a Dockerfile whose
//! unsupported lines are refused naming the line, and another account kept
//! out everywhere.

use std::io::Write;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::helpers::*;

/// A gzip'd tar of `files` (path, content).
fn context(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, body) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, path, body.as_bytes()).unwrap();
    }
    let tar = b.into_inner().unwrap();
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(&tar).unwrap();
    z.finish().unwrap()
}

/// `PUT`s `bytes` as files of `template` under their SHA-256: the hash,
/// and the answer's status and body.
async fn put_files(
    app: &TestApp,
    token: &str,
    template: &str,
    bytes: Vec<u8>,
) -> (String, StatusCode, String) {
    let hash = hex::encode(Sha256::digest(&bytes));
    let r = app
        .http
        .put(format!(
            "{}/api/v1/templates/{template}/files/{hash}",
            app.base
        ))
        .bearer_auth(token)
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = r.status();
    (hash, status, r.text().await.unwrap())
}

async fn upload(app: &TestApp, token: &str, template: &str, bytes: Vec<u8>) -> String {
    let (hash, status, body) = put_files(app, token, template, bytes).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    hash
}

/// Polls a build until it ends; its status answer and every log line.
async fn finished(app: &TestApp, token: &str, template: &str, build: &str) -> (Value, Vec<Value>) {
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut lines: Vec<Value> = Vec::new();
    loop {
        let r = app
            .get(
                &format!(
                    "/api/v1/templates/{template}/builds/{build}?logsOffset={}",
                    lines.len()
                ),
                token,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        let page = r.body["logEntries"].as_array().unwrap().clone();
        let done = matches!(r.body["build"]["status"].as_str(), Some("ready" | "error"));
        if done && page.is_empty() {
            return (r.body["build"].clone(), lines);
        }
        lines.extend(page);
        assert!(
            Instant::now() < deadline,
            "build still {:?}",
            r.body["build"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn messages(lines: &[Value]) -> String {
    lines
        .iter()
        .map(|l| l["message"].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Makes `name` with a waiting build; its id and the build's.
async fn new_template(app: &TestApp, token: &str, name: &str) -> (String, String) {
    let r = app
        .post("/api/v1/templates", token, json!({ "name": name }))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    assert_eq!(r.body["builds"][0]["status"], "waiting", "{:?}", r.body);
    (
        r.body["templateId"].as_str().unwrap().to_owned(),
        r.body["builds"][0]["buildId"].as_str().unwrap().to_owned(),
    )
}

/// Makes a template with `body` (whose build starts at once); its id and
/// the build's.
async fn make_started(app: &TestApp, token: &str, body: Value) -> (String, String) {
    let r = app.post("/api/v1/templates", token, body).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    (
        r.body["templateId"].as_str().unwrap().to_owned(),
        r.body["builds"][0]["buildId"].as_str().unwrap().to_owned(),
    )
}

fn steps(hash: &str, last: &str) -> Value {
    json!([
        {"type": "WORKDIR", "path": "/app"},
        {"type": "COPY", "src": "src", "dest": "./", "filesHash": hash, "mode": 0o640},
        {"type": "ENV", "vars": [["GREETING", "hello from the template"]]},
        {"type": "ARG", "name": "FLAVOUR", "value": "vanilla"},
        {"type": "RUN", "command": "echo \"built with $FLAVOUR\" > built.txt && mkdir -p /workspace && echo kept > /workspace/seed.txt"},
        {"type": "RUN", "command": last},
    ])
}

async fn shell(app: &TestApp, token: &str, id: &str, script: &str) -> String {
    let r = app
        .sandbox_post(token, id, "exec", json!({ "shell": script }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["exitCode"], 0, "{:?}", r.body);
    r.body["stdout"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_template_is_built_step_by_step_cached_and_run() {
    let (app, [t, other]) = spawn_with_accounts(["builder", "outsider"]).await;
    let (id, build) = new_template(&app, &t, "web-app").await;
    let hash = upload(
        &app,
        &t,
        &id,
        context(&[
            ("src/main.sh", "echo main\n"),
            ("src/lib/util.sh", "echo util\n"),
            ("README", "x"),
        ]),
    )
    .await;

    // The build, every step kind.
    let started = Instant::now();
    let r = app
        .post(
            &format!("/api/v1/templates/{id}/builds/{build}"),
            &t,
            json!({
                "fromImage": test_image(),
                "steps": steps(&hash, "echo step six"),
                "startCmd": "echo started > /tmp/started && sleep 3600",
                "readyCmd": "test -f /tmp/started",
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    assert_eq!(r.body["status"], "building");
    let (done, log) = finished(&app, &t, &id, &build).await;
    let first_build = started.elapsed();
    assert_eq!(done["status"], "ready", "{done}\n{}", messages(&log));
    let text = messages(&log);
    for expected in [
        "[1/6] WORKDIR /app",
        "[2/6] COPY src ./",
        "step six",
        "Build finished",
    ] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
    assert_eq!(done["config"]["workdir"], "/app");
    assert_eq!(done["config"]["env"]["GREETING"], "hello from the template");
    assert!(done["config"]["env"].get("FLAVOUR").is_none(), "{done}");
    // A template's image is not a name anyone may use.
    let image = done["image"].as_str().unwrap().to_owned();
    let r = app.try_create(&t, json!({ "dockerImage": image })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);

    // A sandbox of the template sees every step.
    let sb = app.create_id(&t, json!({ "template": "web-app" })).await;
    let said = shell(
        &app,
        &t,
        &sb,
        "pwd; cat built.txt; echo \"$GREETING\"; cat main.sh lib/util.sh; stat -c %a main.sh; \
         cat /workspace/seed.txt; cat /tmp/started; test -e README || echo no-readme",
    )
    .await;
    assert_eq!(
        said,
        "/app\nbuilt with vanilla\nhello from the template\necho main\necho util\n640\nkept\nstarted\nno-readme\n"
    );
    app.delete_sandbox(&t, &sb, "").await;

    // A rebuild that changes only the last step takes the others from the
    // cache, and is faster.
    let r = app
        .post(
            "/api/v1/templates",
            &t,
            json!({ "name": "web-app:v2", "fromImage": test_image(), "steps": steps(&hash, "echo changed > changed.txt") }),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    assert_eq!(r.body["templateId"], id.as_str(), "the same template");
    let rebuild = r.body["builds"][0]["buildId"].as_str().unwrap().to_owned();
    let again = Instant::now();
    let (done, log) = finished(&app, &t, &id, &rebuild).await;
    assert_eq!(done["status"], "ready", "{done}");
    let text = messages(&log);
    assert_eq!(text.matches("CACHED").count(), 5, "{text}");
    assert!(
        again.elapsed() < first_build,
        "{:?} vs {first_build:?}",
        again.elapsed()
    );
    // The tag picks that build; the name the newest.
    let sb = app.create_id(&t, json!({ "template": "web-app:v2" })).await;
    assert_eq!(shell(&app, &t, &sb, "cat changed.txt").await, "changed\n");
    app.delete_sandbox(&t, &sb, "").await;
    // `dockerImage` names the caller's templates too (prime's SDK has only
    // it), by name and by `name:tag`.
    for reference in ["web-app", "web-app:v2"] {
        let sb = app.create_id(&t, json!({ "dockerImage": reference })).await;
        assert_eq!(
            shell(&app, &t, &sb, "pwd; cat changed.txt; echo \"$GREETING\"").await,
            "/app\nchanged\nhello from the template\n"
        );
        app.delete_sandbox(&t, &sb, "").await;
    }
    let r = app
        .try_create(&t, json!({ "dockerImage": "web-app:no-such-tag" }))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    // A failing step: its exit code, its last output, its number.
    let (broken, b) = make_started(
        &app,
        &t,
        json!({ "name": "broken", "fromImage": test_image(), "steps": [
            {"type": "RUN", "command": "echo about to fail; echo on stderr >&2; exit 3"}
        ]}),
    )
    .await;
    let (done, _) = finished(&app, &t, &broken, &b).await;
    assert_eq!(done["status"], "error");
    assert_eq!(done["failedStep"], 1);
    let reason = done["reason"].as_str().unwrap();
    assert!(
        reason.contains("exit code 3") && reason.contains("on stderr"),
        "{reason}"
    );
    let r = app.try_create(&t, json!({ "template": "broken" })).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);

    // Another account sees none of it.
    for path in [
        format!("/api/v1/templates/{id}"),
        "/api/v1/templates/web-app".to_owned(),
        format!("/api/v1/templates/{id}/builds/{build}"),
    ] {
        let r = app.get(&path, &other).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}: {:?}", r.body);
    }
    let r = app.try_create(&other, json!({ "template": id })).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    // For it the name and the id are only image references, which no host
    // has.
    for reference in ["web-app", id.as_str()] {
        let r = app
            .try_create(&other, json!({ "dockerImage": reference }))
            .await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.body);
    }
    let r = app.delete(&format!("/api/v1/templates/{id}"), &other).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let listed = app.get("/api/v1/templates", &other).await;
    assert_eq!(listed.body["templates"], json!([]), "{:?}", listed.body);
    // Its own template of the same name is its own.
    let (theirs, _) = new_template(&app, &other, "web-app").await;
    assert_ne!(theirs, id);

    // Deleted: the name is free, the template gone.
    let r = app.delete(&format!("/api/v1/templates/{id}"), &t).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = app.try_create(&t, json!({ "template": "web-app" })).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    app.delete(&format!("/api/v1/templates/{broken}"), &t).await;
}

#[tokio::test]
async fn bad_templates_are_400s_naming_the_field() {
    let (app, [t]) = spawn_with_accounts(["builder"]).await;
    let cases = [
        (json!({ "name": "Bad Name" }), "name"),
        (json!({ "name": "ok", "cpuCount": 0 }), "cpuCount"),
        (json!({ "name": "ok", "diskSizeGB": 0 }), "diskSizeGB"),
        (json!({ "name": "ok", "surprise": 1 }), "surprise"),
        (
            json!({ "name": "ok", "fromImage": "busybox", "steps": [{"type": "RUN"}] }),
            "steps[0]",
        ),
        (
            json!({ "name": "ok", "fromImage": "busybox", "steps": [{"type": "COPY", "src": "../etc", "dest": "/x", "filesHash": "a".repeat(64)}] }),
            "steps[0].src",
        ),
        (
            json!({ "name": "ok", "dockerfile": "FROM busybox\nCOPY --from=builder /a /b\n" }),
            "dockerfile",
        ),
        (
            json!({ "name": "ok", "fromImage": "stockade-snapshot:abcdefghijkl" }),
            "fromImage",
        ),
        (
            json!({ "name": "ok", "dockerfile": "FROM busybox\nCOPY a /a\n" }),
            "contextHash",
        ),
        (
            json!({ "name": "ok", "fromImage": "busybox", "steps": [{"type": "COPY", "src": "a", "dest": "/a", "filesHash": "b".repeat(64)}] }),
            "steps[0].filesHash",
        ),
    ];
    for (body, field) in cases {
        let r = app.post("/api/v1/templates", &t, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {:?}", r.body);
        let text = r.body.to_string();
        assert!(text.contains(field), "{body}: {text}");
    }
    // The Dockerfile's line is named.
    let r = app
        .post(
            "/api/v1/templates",
            &t,
            json!({ "name": "ok", "dockerfile": "FROM busybox\nRUN true\nRUN --mount=type=cache,target=/x true\n" }),
        )
        .await;
    assert!(r.body.to_string().contains("line 3"), "{:?}", r.body);
    // A template and a dockerImage together are refused.
    let r = app
        .try_create(&t, json!({ "template": "ok", "dockerImage": "busybox" }))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
}

/// `docker` on the test engine; its output.
fn docker_out(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_build_whose_server_dies_is_failed_and_leaves_nothing() {
    let app = spawn_kept_app().await;
    let t = app.admin_token.clone();
    // The server "dies" once the first step is done.
    app.state.svc.ops().faults().crash_at("template.step");
    let (id, build) = make_started(
        &app,
        &t,
        json!({ "name": "doomed", "fromImage": test_image(), "steps": [
            {"type": "RUN", "command": "echo one > /one"},
            {"type": "RUN", "command": "echo two > /two"}
        ]}),
    )
    .await;
    let crashed = eventually(Duration::from_secs(60), || async {
        app.state.svc.ops().faults().crashed()
    })
    .await;
    assert!(crashed.is_some(), "the build never reached its first step");
    let running = docker_out(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=io.stockade.instance-id={}", app.instance_id()),
    ]);
    assert!(
        !running.trim().is_empty(),
        "the build sandbox died with the server"
    );

    // The next start fails it and removes its sandbox; no image is kept.
    let app = app.restart().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let r = app
            .get(&format!("/api/v1/templates/{id}/builds/{build}"), &t)
            .await;
        if r.body["build"]["status"] == "error" {
            break r.body["build"].clone();
        }
        assert!(Instant::now() < deadline, "{:?}", r.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        done["reason"].as_str().unwrap().contains("server stopped"),
        "{done}"
    );
    let left = docker_out(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=io.stockade.instance-id={}", app.instance_id()),
    ]);
    assert!(left.trim().is_empty(), "containers left: {left}");
    let image = docker_out(&["images", "-q", &format!("stockade-template:{build}")]);
    assert!(image.trim().is_empty(), "a half-built image was kept");
    let r = app.try_create(&t, json!({ "template": "doomed" })).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
}

#[tokio::test]
async fn build_steps_reach_no_other_sandbox_no_host_service_and_no_metadata() {
    let (app, [alice, mallory]) = spawn_with_accounts(["alice-tpl", "mallory-tpl"]).await;
    let (_, victim_ip) = victim(&app, &alice).await;
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let host_port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let probe = format!(
        "for t in 'wget -q -T 3 -O - http://{victim_ip}:8080/' \
                  'wget -q -T 3 -O - http://169.254.169.254/latest/meta-data/' \
                  \"nc -w 2 $(ip route | awk '/default/ {{print $3}}') {host_port}\"; do \
           if sh -c \"$t\" </dev/null >/tmp/out 2>&1; then echo \"REACHED $t: $(cat /tmp/out)\"; \
           else echo \"refused $t\"; fi; done"
    );
    let (id, build) = make_started(
        &app,
        &mallory,
        json!({ "name": "snoop", "fromImage": test_image(), "steps": [
            {"type": "RUN", "command": probe}
        ]}),
    )
    .await;
    let (done, log) = finished(&app, &mallory, &id, &build).await;
    assert_eq!(done["status"], "ready", "{done}");
    let text = messages(&log);
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("refused ") || l.starts_with("REACHED "))
        .collect();
    assert_eq!(said.len(), 3, "{text}");
    assert!(said.iter().all(|l| l.starts_with("refused ")), "{text}");
    assert!(
        listener.accept().is_err(),
        "a host service got a connection from a build step"
    );
    app.delete(&format!("/api/v1/templates/{id}"), &mallory)
        .await;
}

#[tokio::test]
async fn template_files_count_against_the_upload_quota() {
    let (app, [(account, t)]) = spawn_with_account_ids(["uploader"]).await;
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/api/v1/accounts/{account}/quota"),
            Some(&app.admin_token),
            Some(json!({ "uploads": 1 })),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let (id, _) = new_template(&app, &t, "quota-tpl").await;
    upload(&app, &t, &id, context(&[("a.txt", "a\n")])).await;
    // A second set of files is past the account's count of uploads.
    let (hash, status, body) = put_files(&app, &t, &id, context(&[("b.txt", "b\n")])).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("quota_exceeded"), "{body}");
    let r = app
        .get(&format!("/api/v1/templates/{id}/files/{hash}"), &t)
        .await;
    assert_eq!(r.body["present"], false, "{:?}", r.body);
}

/// A build's log followed as Server-Sent Events: a `log` event per line as
/// it is written, then the `build` event that ends the stream; a base
/// image no host has fails the build at once, naming it; a step that runs
/// past the build timeout fails the build and leaves no build sandbox.
#[tokio::test]
async fn build_logs_follow_as_events_and_bad_bases_and_endless_steps_fail() {
    let app = spawn_configured(|c| {
        c.service.template_build_timeout = Duration::from_secs(8);
    })
    .await;
    let (account, t) = app.new_account_with_id("follower").await;
    let (id, build) = make_started(
        &app,
        &t,
        json!({ "name": "followed", "cpuCount": 1, "memoryMB": 256, "diskSizeGB": 3, "dockerfile": format!(
            "FROM {}\nRUN echo first-line\nRUN sleep 1 && echo second-line\n", test_image()
        )}),
    )
    .await;
    let mut events = crate::sse_client::SseStream::open(
        app.http
            .get(format!("{}/api/v1/templates/{id}/builds/{build}", app.base))
            .bearer_auth(&t),
    )
    .await;
    assert_eq!(events.status, StatusCode::OK);
    let all = events.rest(Duration::from_secs(120)).await;
    let (last, logs) = all.split_last().expect("events");
    assert_eq!(last.event, "build", "{all:?}");
    let done: Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(done["status"], "ready", "{done}");
    let lines: Vec<Value> = logs
        .iter()
        .map(|e| {
            assert_eq!(e.event, "log", "{e:?}");
            serde_json::from_str(&e.data).unwrap()
        })
        .collect();
    let text = messages(&lines);
    let first = text.find("first-line").expect(&text);
    assert!(text[first..].contains("second-line"), "{text}");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["offset"], i as u64, "{l}");
    }

    // Tags: given to the build, listed, used on create, taken back.
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/api/v1/templates/{id}/builds/{build}/tags"),
            Some(&t),
            Some(json!({ "tags": ["stable"] })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = app.get(&format!("/api/v1/templates/{id}/tags"), &t).await;
    assert_eq!(r.body["tags"][0]["tag"], "stable", "{:?}", r.body);
    assert_eq!(r.body["tags"][0]["buildId"], build.as_str(), "{:?}", r.body);
    let sb = app
        .create(&t, json!({ "template": "followed:stable" }))
        .await;
    // The template's resources are the sandbox's defaults.
    assert_eq!(
        (&sb["cpuCores"], &sb["memoryGB"], &sb["diskSizeGB"]),
        (&json!(1.0), &json!(0.25), &json!(3)),
        "{sb}"
    );
    app.delete(
        &format!("/api/v1/sandbox/{}", sb["id"].as_str().unwrap()),
        &t,
    )
    .await;
    let r = app
        .delete(&format!("/api/v1/templates/{id}/tags/stable"), &t)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = app
        .try_create(&t, json!({ "template": "followed:stable" }))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/api/v1/templates/{id}/builds/{build}/tags"),
            Some(&t),
            Some(json!({ "tags": ["no spaces"] })),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert!(r.body.to_string().contains("tags[0]"), "{:?}", r.body);

    // A base no host has (and no registry gives): the build fails at
    // once, naming it.
    let r = app
        .post(
            "/api/v1/templates",
            &t,
            json!({ "name": "no-base", "fromImage": "stockade-no-such-image:1", "steps": [
                {"type": "RUN", "command": "true"}
            ]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    let started = Instant::now();
    let (done, _) = finished(
        &app,
        &t,
        r.body["templateId"].as_str().unwrap(),
        r.body["builds"][0]["buildId"].as_str().unwrap(),
    )
    .await;
    assert_eq!(done["status"], "error", "{done}");
    let reason = done["reason"].as_str().unwrap();
    assert!(reason.contains("stockade-no-such-image:1"), "{done}");
    assert!(started.elapsed() < Duration::from_secs(30), "{done}");

    // A step that never ends: the build fails at its timeout, and its
    // build sandbox is gone.
    let started = Instant::now();
    let (id, build) = make_started(
        &app,
        &t,
        json!({ "name": "endless", "fromImage": test_image(), "steps": [
            {"type": "RUN", "command": "sleep 100000"}
        ]}),
    )
    .await;
    let (done, _) = finished(&app, &t, &id, &build).await;
    assert_eq!(done["status"], "error", "{done}");
    assert!(
        done["reason"].as_str().unwrap().contains("longer than"),
        "{done}"
    );
    assert!(started.elapsed() < Duration::from_secs(60), "{done}");
    let left = docker_out(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=io.stockade.account-id={account}"),
    ]);
    assert!(left.trim().is_empty(), "build sandboxes left: {left}");
}

/// Builds `dockerfile` as template `name`; the ready build's id.
async fn build_ready(app: &TestApp, t: &str, name: &str, dockerfile: String) -> String {
    let (id, build) = make_started(app, t, json!({ "name": name, "dockerfile": dockerfile })).await;
    let (done, _) = finished(app, t, &id, &build).await;
    assert_eq!(done["status"], "ready", "{done}");
    build
}

fn image_exists(image: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .unwrap()
        .status
        .success()
}

/// A build no create can reach any more (an older untagged one, once a
/// newer is ready) loses its image, but only once no sandbox runs it; a
/// tagged one keeps it; cache layers no build used for the cache's time
/// go with the collection.
#[tokio::test]
async fn builds_out_of_reach_and_unused_cache_layers_are_collected() {
    let app = spawn_configured(|c| {
        c.service.template_cache_ttl = Duration::ZERO;
    })
    .await;
    let (account, t) = app.new_account_with_id("collector").await;
    let file = |line: &str| format!("FROM {}\nRUN echo {line} > /made.txt\n", test_image());
    let first = build_ready(&app, &t, "kept", file("one")).await;
    let sb = app.create(&t, json!({ "template": "kept" })).await;
    let sb = sb["id"].as_str().unwrap().to_owned();
    let second = build_ready(&app, &t, "kept", file("two")).await;
    // The first build's sandbox runs: its image stays.
    assert!(image_exists(&format!("stockade-template:{first}")));
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/api/v1/templates/kept/builds/{second}/tags"),
            Some(&t),
            Some(json!({ "tags": ["pinned"] })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let third = build_ready(&app, &t, "kept", file("three")).await;
    app.delete(&format!("/api/v1/sandbox/{sb}"), &t).await;
    let collected = stockade_service::templates::collect::collect(&app.state.svc).await;
    assert!(collected.builds >= 1, "{collected:?}");
    assert!(!image_exists(&format!("stockade-template:{first}")));
    // Tagged, and the newest: kept.
    assert!(image_exists(&format!("stockade-template:{second}")));
    assert!(image_exists(&format!("stockade-template:{third}")));
    let r = app.get("/api/v1/templates/kept", &t).await;
    let builds = r.body["builds"].as_array().unwrap();
    let of = |id: &str| builds.iter().find(|b| b["buildId"] == id).unwrap().clone();
    assert!(of(&first)["image"].is_null(), "{:?}", r.body);
    assert!(of(&second)["image"].is_string(), "{:?}", r.body);
    // A build whose image went cannot be tagged.
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/api/v1/templates/kept/builds/{first}/tags"),
            Some(&t),
            Some(json!({ "tags": ["back"] })),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    // `kept:pinned` still runs the second build.
    let sb = app.create(&t, json!({ "template": "kept:pinned" })).await;
    assert_eq!(
        shell(&app, &t, sb["id"].as_str().unwrap(), "cat /made.txt").await,
        "two\n"
    );
    app.delete(
        &format!("/api/v1/sandbox/{}", sb["id"].as_str().unwrap()),
        &t,
    )
    .await;
    // With no time to keep them, the cache's layers are gone.
    assert!(collected.layers >= 1, "{collected:?}");
    let layers = docker_out(&[
        "images",
        "-q",
        "--filter",
        &format!("label=io.stockade.account-id={account}"),
        "--filter",
        "reference=stockade-template-layer",
    ]);
    assert!(layers.trim().is_empty(), "layers left: {layers}");
    app.delete("/api/v1/templates/kept", &t).await;
    assert!(!image_exists(&format!("stockade-template:{third}")));
}

/// An administrator makes a template public: every account creates from it
/// (by its name or id) while its owner alone builds, tags and deletes it;
/// a non-administrator cannot publish, and private again means 404 again.
#[tokio::test]
async fn an_administrator_makes_a_template_public_for_every_account() {
    let (app, [owner, other]) = spawn_with_accounts(["publisher", "public-user"]).await;
    let file = format!("FROM {}\nRUN echo shared > /shared.txt\n", test_image());
    let build = build_ready(&app, &owner, "shared-base", file).await;
    let id = app.get("/api/v1/templates/shared-base", &owner).await.body["templateId"]
        .as_str()
        .unwrap()
        .to_owned();
    let publish = |token: String, public: bool| {
        let app = &app;
        let path = format!("/api/v1/templates/{id}");
        async move {
            app.call(
                reqwest::Method::PATCH,
                &path,
                Some(&token),
                Some(json!({ "public": public })),
            )
            .await
        }
    };
    let r = publish(owner.clone(), true).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = app
        .try_create(&other, json!({ "template": "shared-base" }))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    let r = publish(app.admin_token.clone(), true).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["public"], true, "{:?}", r.body);
    for reference in ["shared-base", id.as_str()] {
        let sb = app.create(&other, json!({ "template": reference })).await;
        let sid = sb["id"].as_str().unwrap().to_owned();
        assert_eq!(
            shell(&app, &other, &sid, "cat /shared.txt").await,
            "shared\n"
        );
        app.delete(&format!("/api/v1/sandbox/{sid}"), &other).await;
    }
    // Through `dockerImage`, by its id only: its name stays an image
    // reference in other accounts, which no host has.
    let sid = app.create_id(&other, json!({ "dockerImage": id })).await;
    assert_eq!(
        shell(&app, &other, &sid, "cat /shared.txt").await,
        "shared\n"
    );
    app.delete_sandbox(&other, &sid, "").await;
    let r = app
        .try_create(&other, json!({ "dockerImage": "shared-base" }))
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.body);
    let listed = app.get("/api/v1/templates", &other).await;
    let seen = listed.body["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["templateId"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{:?}", listed.body));
    assert_eq!(seen["shared"], true, "{seen}");
    // Its owner's alone to change.
    assert_eq!(
        app.delete(&format!("/api/v1/templates/{id}"), &other)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/api/v1/templates/{id}/builds/{build}/tags"),
            Some(&other),
            Some(json!({ "tags": ["mine"] })),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    let r = publish(app.admin_token.clone(), false).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = app
        .try_create(&other, json!({ "template": "shared-base" }))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    app.delete(&format!("/api/v1/templates/{id}"), &owner).await;
}

/// Template files larger than the upload limit are a 413, and nothing is
/// kept of them.
#[tokio::test]
async fn template_files_over_the_upload_limit_are_413() {
    let app = spawn_configured(|c| {
        c.service.max_file_bytes = 64 * 1024;
    })
    .await;
    let t = app.new_account("big-context").await;
    let (id, _) = new_template(&app, &t, "big").await;
    let (hash, status, body) = put_files(&app, &t, &id, vec![7u8; 200 * 1024]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let r = app
        .get(&format!("/api/v1/templates/{id}/files/{hash}"), &t)
        .await;
    assert_eq!(r.body["present"], false, "{:?}", r.body);
}
