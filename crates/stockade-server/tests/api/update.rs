//! `PATCH /api/v1/sandbox/{id}`. Labels, tags, name and the timeout
//! apply at once (the live session's deadline moves), memory and CPU reach
//! the container's cgroup at once, the environment reaches the main process
//! at its next start; the response says which is which. Every field is
//! validated, another account's sandbox is 403, and concurrent updates are
//! never lost.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::*;

fn time(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}")))
        .unwrap()
        .with_timezone(&Utc)
}

fn memory_limit(id: &str) -> String {
    sh_in(
        id,
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
    )
}

fn host_config(id: &str, field: &str) -> String {
    let out = docker(&[
        "inspect",
        "-f",
        &format!("{{{{.HostConfig.{field}}}}}"),
        &format!("stockade-{id}"),
    ]);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn labels_tags_name_and_timeout_apply_at_once() {
    let (app, sb) =
        spawn_with_sandbox(json!({ "name": "before", "labels": ["old"], "timeoutMinutes": 0.05 }))
            .await;
    let t = &app.admin_token;
    let id = sb["id"].as_str().unwrap();
    let started = time(&sb["startedAt"]);

    // Extend the live session: 3 s → 1 min from the session's start.
    let r = app.patch_sandbox(t,
        id,
        json!({ "timeoutMinutes": 1, "labels": ["new", "team-a"], "tags": { "owner": "ops" }, "name": "after" }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body["applied"],
        json!({ "now": ["name", "timeoutMinutes", "labels", "tags"], "nextStart": [] })
    );
    let s = &r.body["sandbox"];
    assert_eq!(s["name"], "after");
    assert_eq!(s["labels"], json!(["new", "team-a"]));
    assert_eq!(s["tags"], json!({ "owner": "ops" }));
    assert_eq!(s["timeoutMinutes"], 1.0);
    // The record keeps microseconds; the create response had nanoseconds.
    let session = (time(&s["sessionExpiresAt"]) - started).num_milliseconds();
    assert!((session - 60_000).abs() <= 1, "{session} ms");
    // The old deadline passes: still running.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let got = app.get(&format!("/api/v1/sandbox/{id}"), t).await;
    assert_eq!(got.body["status"], "RUNNING");
    assert_eq!(got.body["name"], "after");
    let by_label = app.get("/api/v1/sandbox?labels=team-a", t).await;
    assert_eq!(by_label.body["total"], 1);
    assert_eq!(
        app.get("/api/v1/sandbox?labels=old", t).await.body["total"],
        0
    );
    let by_name = app.get("/api/v1/sandbox?name=after", t).await;
    assert_eq!(by_name.body["total"], 1);

    // Shorten it: 3 s from the session's start has passed, so it ends now.
    let r = app
        .patch_sandbox(t, id, json!({ "timeoutMinutes": 0.05 }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["applied"]["now"], json!(["timeoutMinutes"]));
    let mut status = Value::Null;
    for _ in 0..50 {
        let got = app.get(&format!("/api/v1/sandbox/{id}"), t).await;
        status = got.body["status"].clone();
        if status == "STOPPED" {
            assert_eq!(got.body["statusReason"], "session timed out");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status, "STOPPED");

    // On a stopped sandbox the timeout is for the next session.
    let r = app
        .patch_sandbox(t, id, json!({ "timeoutMinutes": 0 }))
        .await;
    assert_eq!(
        r.body["applied"],
        json!({ "now": [], "nextStart": ["timeoutMinutes"] })
    );
    let r = app.act(t, id, "start").await;
    assert_eq!(r.body["status"], "RUNNING");
    assert!(r.body.get("sessionExpiresAt").is_none(), "0 = never");
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_and_cpu_reach_the_cgroup_at_once() {
    let (app, id) =
        spawn_with_sandbox_id(json!({ "name": "limits", "memoryGB": 0.25, "cpuCores": 1 })).await;
    let t = &app.admin_token;
    assert_eq!(memory_limit(&id), (256u64 << 20).to_string());

    let r = app
        .patch_sandbox(t, &id, json!({ "memoryGB": 0.5, "cpuCores": 0.5 }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body["applied"],
        json!({ "now": ["cpuCores", "memoryGB"], "nextStart": [] })
    );
    assert_eq!(memory_limit(&id), (512u64 << 20).to_string(), "live");
    assert_eq!(host_config(&id, "NanoCpus"), "500000000");
    assert_eq!(host_config(&id, "MemorySwap"), (512u64 << 20).to_string());
    assert_eq!(r.body["sandbox"]["memoryGB"], 0.5);
    assert_eq!(r.body["sandbox"]["cpuCores"], 0.5);

    // On a stopped sandbox: recorded, in effect from the next start.
    let r = app.act(t, &id, "stop?timeout=5").await;
    assert_eq!(r.body["status"], "STOPPED");
    let r = app
        .patch_sandbox(t, &id, json!({ "memoryGB": 0.375 }))
        .await;
    assert_eq!(
        r.body["applied"],
        json!({ "now": [], "nextStart": ["memoryGB"] })
    );
    let r = app.act(t, &id, "start").await;
    assert_eq!(r.body["status"], "RUNNING");
    assert_eq!(memory_limit(&id), (384u64 << 20).to_string());
    assert_eq!(host_config(&id, "NanoCpus"), "500000000");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_environment_reaches_the_main_process_at_its_next_start() {
    let (app, id) = spawn_with_sandbox_id(json!({
                "name": "env",
                "environmentVars": { "GREETING": "hello", "DROPPED": "x" },
                "startCommand": "echo \"GREETING=${GREETING-unset} DROPPED=${DROPPED-unset} ADDED=${ADDED-unset}\" >> /workspace/env.log; trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"
            })).await;
    let t = &app.admin_token;
    let first = "GREETING=hello DROPPED=x ADDED=unset";
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sh_in(&id, "cat /workspace/env.log"), first);

    let r = app
        .patch_sandbox(
            t,
            &id,
            json!({ "environmentVars": { "GREETING": "bonjour 'à tous'", "ADDED": "$HOME" } }),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body["applied"],
        json!({ "now": [], "nextStart": ["environmentVars"] })
    );
    let notes = r.body["notes"].to_string();
    assert!(
        notes.contains("next start") && notes.contains("exec"),
        "{notes}"
    );
    assert_eq!(
        r.body["sandbox"]["environmentVars"],
        json!({ "GREETING": "bonjour 'à tous'", "ADDED": "$HOME" })
    );
    // Execs see the new environment at once; a removed variable is gone
    // (unless the exec sets it again).
    let r = app
        .sandbox_post(
            t,
            &id,
            "exec",
            json!({ "shell": "echo \"${GREETING-unset}|${DROPPED-unset}|${ADDED-unset}\"" }),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["stdout"], "bonjour 'à tous'|unset|$HOME\n");
    let r = app
        .sandbox_post(
            t,
            &id,
            "exec",
            json!({ "cmd": ["sh", "-c", "echo ${DROPPED-unset}"], "env": { "DROPPED": "again" } }),
        )
        .await;
    assert_eq!(r.body["stdout"], "again\n", "{:?}", r.body);
    // The running main process keeps its environment…
    assert_eq!(sh_in(&id, "cat /workspace/env.log"), first);
    // …and sees the new one after a restart.
    for verb in ["stop?timeout=5", "start"] {
        let r = app
            .post(&format!("/api/v1/sandbox/{id}/{verb}"), t, json!({}))
            .await;
        r.assert_status(StatusCode::OK, verb);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sh_in(&id, "cat /workspace/env.log"),
        format!("{first}\nGREETING=bonjour 'à tous' DROPPED=unset ADDED=$HOME")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_updates_are_refused_and_name_every_field() {
    let (app, id) = spawn_with_sandbox_id(json!({ "name": "target" })).await;
    let t = &app.admin_token;
    app.create(t, json!({ "name": "taken" })).await;

    for (body, fields) in [
        (json!({}), vec!["body"]),
        (json!({ "status": "RUNNING" }), vec!["status"]),
        (json!({ "privileged": true }), vec!["privileged"]),
        (json!({ "memoryGB": "lots" }), vec!["memoryGB"]),
        (
            json!({ "tags": { "a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6" } }),
            vec!["tags"],
        ),
        (
            json!({ "name": "no spaces", "cpuCores": 0, "timeoutMinutes": -1, "labels": ["ok", "b a d"], "environmentVars": { "1X": "v" }, "memoryGB": 100000 }),
            vec![
                "name",
                "timeoutMinutes",
                "labels[1]",
                "environmentVars.1X",
                "cpuCores",
                "memoryGB",
            ],
        ),
    ] {
        let r = app.patch_sandbox(t, &id, body.clone()).await;
        r.assert_status(StatusCode::BAD_REQUEST, &body);
        assert_eq!(r.error_fields(), fields, "{body}");
    }
    let r = app
        .bodiless(Method::PATCH, &format!("/api/v1/sandbox/{id}"), t)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    let r = app.patch_sandbox(t, &id, json!({ "name": "taken" })).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("taken"));
    let r = app.patch_sandbox(t, &id, json!({ "name": "target" })).await;
    assert_eq!(r.status, StatusCode::OK, "renaming to its own name is fine");

    let bob = app.new_account("bob").await;
    let r = app
        .patch_sandbox(&bob, &id, json!({ "labels": ["mine"] }))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = app
        .patch_sandbox(t, "abcdefghijkl", json!({ "labels": [] }))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = app
        .patch_sandbox(t, "-NOT-AN-ID", json!({ "labels": [] }))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    let r = app.delete(&format!("/api/v1/sandbox/{id}"), t).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = app
        .patch_sandbox(t, &id, json!({ "labels": ["late"] }))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);

    // The OpenAPI document describes the verb.
    let doc = app.get("/api/v1/openapi.json", t).await.body;
    assert!(doc["paths"]["/api/v1/sandbox/{id}"]["patch"].is_object());
    assert!(doc["components"]["schemas"]["UpdateSandboxResponse"].is_object());
    assert!(doc["paths"]["/api/v1/volumes/orphaned"]["delete"].is_object());
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_updates_are_never_lost() {
    let (app, id) = spawn_with_sandbox_id(json!({ "name": "busy", "memoryGB": 0.25 })).await;
    let t = &app.admin_token;
    let bodies = [
        json!({ "labels": ["l1"] }),
        json!({ "tags": { "k": "v" } }),
        json!({ "name": "renamed" }),
        json!({ "timeoutMinutes": 30 }),
        json!({ "cpuCores": 0.5 }),
        json!({ "memoryGB": 0.5 }),
        json!({ "environmentVars": { "E": "1" } }),
    ];
    let mut tasks = Vec::new();
    for body in bodies {
        let (http, base, t, id) = (app.http.clone(), app.base.clone(), t.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            http.patch(format!("{base}/api/v1/sandbox/{id}"))
                .bearer_auth(t)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    let got = app.get(&format!("/api/v1/sandbox/{id}"), t).await.body;
    assert_eq!(got["labels"], json!(["l1"]));
    assert_eq!(got["tags"], json!({ "k": "v" }));
    assert_eq!(got["name"], "renamed");
    assert_eq!(got["timeoutMinutes"], 30.0);
    assert_eq!(got["cpuCores"], 0.5);
    assert_eq!(got["memoryGB"], 0.5);
    assert_eq!(got["environmentVars"], json!({ "E": "1" }));
    // Docker ends up with what the record says, whichever update came last.
    assert_eq!(memory_limit(&id), (512u64 << 20).to_string());
    assert_eq!(host_config(&id, "NanoCpus"), "500000000");
}
