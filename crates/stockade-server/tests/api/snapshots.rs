//! Snapshots and forks against real Docker: root-filesystem
//! changes and `/workspace` survive byte for byte, forks are isolated, other
//! accounts get 403, failures leave nothing, deleted snapshots' images go.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// Writes root-filesystem changes and binary `/workspace` content; returns
/// the checksums a copy must show.
fn fill(id: &str) -> String {
    sh_in(
        id,
        "echo etc-change > /etc/stockade-marker && mkdir -p /opt/tool && printf 'opt\\001\\377' > /opt/tool/bin \
         && mkdir -p /workspace/src/deep && head -c 300000 /dev/urandom > /workspace/rand.bin \
         && echo hello > /workspace/src/deep/hello.txt && chmod 751 /workspace/src/deep/hello.txt \
         && ln -s src/deep/hello.txt /workspace/link",
    );
    checksums(id)
}

fn checksums(id: &str) -> String {
    sh_in(
        id,
        "cd / && md5sum etc/stockade-marker opt/tool/bin workspace/rand.bin workspace/src/deep/hello.txt \
         && stat -c '%a %N' workspace/src/deep/hello.txt workspace/link",
    )
}

/// The app has `containers` containers; `token`'s account has `active`
/// active records and no terminated ones.
pub async fn nothing_left_beyond(app: &TestApp, token: &str, containers: usize, active: u64) {
    assert_eq!(app.containers().len(), containers, "containers left behind");
    let all = app.get("/api/v1/sandbox?is_active=false", token).await;
    assert_eq!(all.body["total"], 0, "terminated records: {:?}", all.body);
    let listed = app.get("/api/v1/sandbox", token).await;
    assert_eq!(
        listed.body["total"], active,
        "active records: {:?}",
        listed.body
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_restore_and_delete() {
    let app = spawn_app().await;
    let token = app.new_account("snap").await;
    let src = app.create(&token, json!({"name": "src"})).await;
    let src_id = src["id"].as_str().unwrap();
    let want = fill(src_id);

    // Capture: READY, with the archive's size; the source keeps running.
    let snap = app.snapshot(&token, src_id, "v1").await;
    let snap_id = snap["id"].as_str().unwrap().to_owned();
    assert_eq!(snap["status"], "READY");
    assert_eq!(snap["name"], "v1");
    assert_eq!(snap["sourceSandboxId"], src_id);
    assert!(snap["workspaceBytes"].as_u64().unwrap() > 300_000, "{snap}");
    let key = snap["workspaceKey"].as_str().unwrap();
    assert!(app.dir.path().join("blobs").join(key).is_file());
    assert_eq!(sh_in(src_id, "echo alive"), "alive");

    // Listed for the account and for the sandbox; readable by id.
    let list = app.get("/api/v1/snapshots", &token).await;
    assert_eq!(list.body["snapshots"][0]["id"], snap_id.as_str());
    let list = app
        .get(&format!("/api/v1/sandbox/{src_id}/snapshots"), &token)
        .await;
    assert_eq!(list.body["snapshots"].as_array().unwrap().len(), 1);
    let got = app
        .get(&format!("/api/v1/snapshots/{snap_id}"), &token)
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body["image"], format!("stockade-snapshot:{snap_id}"));

    // Later changes in the source are not in the snapshot.
    sh_in(src_id, "echo later > /workspace/later.txt");

    // Restore: root changes and /workspace byte for byte, before the main
    // process starts (it copies a restored file at its start).
    let restored = app
        .create(
            &token,
            json!({
                "name": "restored",
                "source": snapshot_source(&snap_id),
                "startCommand": "cp /workspace/src/deep/hello.txt /tmp/at-start; trap 'exit 0' TERM; while true; do sleep 1; done",
            }),
        )
        .await;
    let rid = restored["id"].as_str().unwrap();
    assert_eq!(
        restored["dockerImage"],
        format!("stockade-snapshot:{snap_id}")
    );
    assert_eq!(checksums(rid), want);
    assert_eq!(sh_in(rid, "cat /tmp/at-start"), "hello");
    assert_eq!(
        sh_in(rid, "ls /workspace/later.txt 2>/dev/null | wc -l"),
        "0"
    );

    // A snapshot's image cannot be combined with another image.
    let r = app
        .try_create(
            &token,
            json!({"source": snapshot_source(&snap_id), "dockerImage": "busybox:1"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), ["dockerImage"]);

    // Delete: archive gone at once, image kept while `restored` uses it.
    let del = app
        .delete(&format!("/api/v1/snapshots/{snap_id}"), &token)
        .await;
    assert_eq!(del.status, StatusCode::OK, "{:?}", del.body);
    assert_eq!(del.body["status"], "DELETING");
    assert!(!app.dir.path().join("blobs").join(key).exists());
    assert_eq!(app.snapshot_images().len(), 1);
    let gone = app
        .get(&format!("/api/v1/snapshots/{snap_id}"), &token)
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(
        app.get("/api/v1/snapshots", &token).await.body["snapshots"],
        json!([])
    );
    let r = app
        .try_create(&token, json!({"source": snapshot_source(&snap_id)}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Once no sandbox uses it, the image goes too.
    let r = app.delete(&format!("/api/v1/sandbox/{rid}"), &token).await;
    assert_eq!(r.status, StatusCode::OK);
    let report = stockade_service::snapshots::collect_garbage(&app.state.svc).await;
    assert!(app.snapshot_images().is_empty(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshots_belong_to_their_account_and_failures_leave_nothing() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice", "bob"]).await;
    let id = app.create_id(&alice, json!({"name": "a"})).await;
    let snap = app.act(&alice, &id, "snapshots").await;
    assert_eq!(snap.status, StatusCode::CREATED, "{:?}", snap.body);
    let snap_id = snap.body["id"].as_str().unwrap();
    assert_eq!(snap.body["name"], snap_id);

    // Every verb on another account's snapshot or sandbox: 403.
    for r in [
        app.get(&format!("/api/v1/snapshots/{snap_id}"), &bob).await,
        app.delete(&format!("/api/v1/snapshots/{snap_id}"), &bob)
            .await,
        app.act(&bob, &id, "snapshots").await,
        app.get(&format!("/api/v1/sandbox/{id}/snapshots"), &bob)
            .await,
        app.act(&bob, &id, "fork").await,
        app.try_create(&bob, json!({"source": snapshot_source(snap_id)}))
            .await,
        app.try_create(
            &bob,
            json!({"source": {"type": "sandbox", "sandboxId": id}}),
        )
        .await,
    ] {
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    }
    assert_eq!(
        app.get("/api/v1/snapshots", &bob).await.body["snapshots"],
        json!([])
    );

    // Unknown and malformed ids: 404 and 400 naming the field.
    let r = app
        .try_create(&bob, json!({"source": snapshot_source("zzzzzzzzzzzz")}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["error"]["message"], "Snapshot not found");
    let r = app
        .try_create(&bob, json!({"source": snapshot_source("../../x")}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), ["source.snapshotId"]);
    let r = app
        .try_create(&bob, json!({"source": {"type": "floppy"}}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = app
        .sandbox_post(&alice, &id, "snapshots", json!({"name": ""}))
        .await;
    assert_eq!(r.error_fields(), ["name"]);
    let r = app
        .sandbox_post(&alice, &id, "snapshots", json!({"nope": 1}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        app.get("/api/v1/snapshots/nope", &alice).await.status,
        StatusCode::BAD_REQUEST
    );

    // Bob made nothing; Alice has her one sandbox.
    nothing_left_beyond(&app, &bob, 1, 0).await;
    nothing_left_beyond(&app, &alice, 1, 1).await;

    // A terminated sandbox cannot be snapshotted or forked.
    assert_eq!(
        app.delete(&format!("/api/v1/sandbox/{id}"), &alice)
            .await
            .status,
        StatusCode::OK
    );
    let r = app.act(&alice, &id, "snapshots").await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let r = app.act(&alice, &id, "fork").await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(app.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_copies_the_filesystem_and_stays_isolated() {
    let app = spawn_app().await;
    let token = app.new_account("forker").await;
    let src = app
        .create(
            &token,
            json!({"name": "origin", "environmentVars": {"GREETING": "hi"}, "labels": ["team-a"], "cpuCores": 0.5}),
        )
        .await;
    let src_id = src["id"].as_str().unwrap();
    let want = fill(src_id);

    let r = app
        .sandbox_post(&token, src_id, "fork", json!({"name": "copy"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let fork: Value = r.body;
    let fid = fork["id"].as_str().unwrap();
    assert_eq!(fork["status"], "RUNNING");
    assert_eq!(fork["name"], "copy");
    // Settings come from the source.
    assert_eq!(fork["environmentVars"]["GREETING"], "hi");
    assert_eq!(fork["labels"], json!(["team-a"]));
    assert_eq!(fork["cpuCores"], 0.5);
    assert_eq!(sh_in(fid, "echo $GREETING"), "hi");

    // Same root changes and /workspace, byte for byte.
    assert_eq!(checksums(fid), want);
    // The source keeps running, unchanged.
    let again = app.get(&format!("/api/v1/sandbox/{src_id}"), &token).await;
    assert_eq!(again.body["status"], "RUNNING");
    assert_eq!(checksums(src_id), want);

    // Later writes in either do not show in the other.
    sh_in(
        src_id,
        "echo from-source > /workspace/s.txt; echo src > /etc/only-src",
    );
    sh_in(
        fid,
        "echo from-fork > /workspace/f.txt; echo fork > /etc/only-fork; rm /workspace/rand.bin",
    );
    assert_eq!(
        sh_in(
            src_id,
            "ls /workspace/f.txt /etc/only-fork 2>/dev/null | wc -l"
        ),
        "0"
    );
    assert_eq!(
        sh_in(fid, "ls /workspace/s.txt /etc/only-src 2>/dev/null | wc -l"),
        "0"
    );
    assert_eq!(sh_in(src_id, "md5sum < /workspace/rand.bin").len(), 35);

    // The fork's internal snapshot is not listed.
    assert_eq!(
        app.get("/api/v1/snapshots", &token).await.body["snapshots"],
        json!([])
    );

    // `source: {type: sandbox}` on create is the same fork, with overrides.
    let sid = app.create_id(&token,
            json!({"name": "copy2", "source": {"type": "sandbox", "sandboxId": src_id}, "environmentVars": {"GREETING": "yo"}})).await;
    assert_eq!(
        sh_in(&sid, "echo $GREETING; cat /workspace/s.txt /etc/only-src"),
        "yo\nfrom-source\nsrc"
    );

    // A name in use: 409, and nothing new is left behind.
    let r = app
        .sandbox_post(&token, src_id, "fork", json!({"name": "copy"}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(app.containers().len(), 3);

    // The forks' images go once the forks are gone.
    for id in [fid, &sid] {
        assert_eq!(
            app.delete(&format!("/api/v1/sandbox/{id}"), &token)
                .await
                .status,
            StatusCode::OK
        );
    }
    stockade_service::snapshots::collect_garbage(&app.state.svc).await;
    assert!(app.snapshot_images().is_empty());
    assert_eq!(checksums(src_id).lines().count(), 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_sandbox_can_be_snapshotted_and_forked() {
    let (app, token, id) = spawn_with_owned_sandbox("stopped", json!({"name": "s"})).await;
    let want = fill(&id);
    let r = app.act(&token, &id, "stop?timeout=1").await;
    assert_eq!(r.body["status"], "STOPPED");
    let snap = app.act(&token, &id, "snapshots").await;
    assert_eq!(snap.status, StatusCode::CREATED, "{:?}", snap.body);
    let fork = app.act(&token, &id, "fork").await;
    assert_eq!(fork.status, StatusCode::CREATED, "{:?}", fork.body);
    let fid = fork.body["id"].as_str().unwrap();
    assert_eq!(fork.body["name"], fid);
    assert_eq!(checksums(fid), want);
    let still = app.get(&format!("/api/v1/sandbox/{id}"), &token).await;
    assert_eq!(still.body["status"], "STOPPED");
}
