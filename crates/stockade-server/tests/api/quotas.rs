//! Admission control per Docker host and account quotas over HTTP against
//! real Docker and SQLite: the quota
//! routes (who may read and set them, validation naming the field, usage),
//! quota refusals (403 `quota_exceeded`) at create, fork, start and update,
//! concurrent creates at a quota of one, the default quota of new accounts,
//! snapshots and uploads past their count or bytes refused with nothing
//! left in Docker or the object store, shared volumes held to their count
//! and the total of their sizes, and a full Docker host (409 `insufficient_capacity`) whose stopped
//! sandboxes free room for others.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::cases::no_limits;
use crate::helpers::*;

/// Creates an account: its id and token.
pub async fn account(app: &TestApp, name: &str) -> (String, String) {
    app.new_account_with_id(name).await
}

async fn put_quota(app: &TestApp, token: &str, account: &str, body: Value) -> Resp {
    app.call(
        Method::PUT,
        &format!("/api/v1/accounts/{account}/quota"),
        Some(token),
        Some(body),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_routes_check_who_asks_and_what_is_given() {
    let (app, [(alice, alice_token), (bob, bob_token)]) =
        spawn_with_account_ids(["alice", "bob"]).await;
    let path = format!("/api/v1/accounts/{alice}/quota");

    // A new account has no limits and uses nothing.
    let r = app.get(&path, &alice_token).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["accountId"], alice.as_str());
    assert_eq!(r.body["quota"], no_limits());
    assert_eq!(
        r.body["usage"],
        json!({ "sandboxes": 0, "cpuCores": 0.0, "memoryGB": 0.0, "diskGB": 0,
                 "snapshots": 0, "snapshotGB": 0.0, "uploads": 0, "uploadGB": 0.0,
                 "volumes": 0, "volumeGB": 0 })
    );

    // Only an administrator sets a quota; only the account itself (or an
    // administrator) reads it.
    let r = put_quota(&app, &alice_token, &alice, json!({ "sandboxes": 9 })).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = app.get(&path, &bob_token).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert!(r.message().contains("administrators"), "{:?}", r.body);
    let r = app.call(Method::GET, &path, None, None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    let set = json!({ "sandboxes": 3, "cpuCores": 1.5, "memoryGB": 4, "diskGB": 40 });
    let body = put_quota(&app, &app.admin_token, &alice, set)
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        body["quota"],
        json!({ "sandboxes": 3, "cpuCores": 1.5, "memoryGB": 4.0, "diskGB": 40,
                 "snapshots": null, "snapshotGB": null, "uploads": null, "uploadGB": null,
                 "volumes": null, "volumeGB": null })
    );
    let r = app.get(&path, &alice_token).await;
    assert_eq!(r.body["quota"]["cpuCores"], 1.5);
    // Bob is untouched.
    let r = app
        .get(&format!("/api/v1/accounts/{bob}/quota"), &app.admin_token)
        .await;
    assert_eq!(r.body["quota"]["sandboxes"], Value::Null);

    // Bad values are 400s naming the field; nothing changes.
    for (body, field) in [
        (json!({ "sandboxes": -1 }), "sandboxes"),
        (json!({ "sandboxes": 2_000_000 }), "sandboxes"),
        (json!({ "cpuCores": -0.5 }), "cpuCores"),
        (json!({ "memoryGB": "lots" }), "memoryGB"),
        (json!({ "memoryGB": 1e12 }), "memoryGB"),
        (json!({ "diskGB": 1.5 }), "diskGB"),
        (json!({ "snapshots": -1 }), "snapshots"),
        (json!({ "snapshotGB": -0.5 }), "snapshotGB"),
        (json!({ "uploads": 2.5 }), "uploads"),
        (json!({ "uploadGB": "big" }), "uploadGB"),
        (json!({ "volumes": 1.5 }), "volumes"),
        (json!({ "volumeGB": -3 }), "volumeGB"),
        (json!({ "disks": 3 }), "disks"),
    ] {
        let r = put_quota(&app, &app.admin_token, &alice, body.clone()).await;
        r.assert_status(StatusCode::BAD_REQUEST, &body);
        let text = r.body.to_string();
        assert!(text.contains(field), "{body}: {text}");
    }
    let r = app.get(&path, &alice_token).await;
    assert_eq!(r.body["quota"]["sandboxes"], 3);

    // Unknown and malformed accounts.
    let ghost = stockade_core::AccountId::generate();
    let r = put_quota(&app, &app.admin_token, ghost.as_ref(), json!({})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let r = app
        .get(&format!("/api/v1/accounts/{ghost}/quota"), &app.admin_token)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let r = app
        .get("/api/v1/accounts/not-an-id/quota", &app.admin_token)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert!(r.body.to_string().contains("account_id"), "{:?}", r.body);

    // `{}` lifts every limit.
    let r = put_quota(&app, &app.admin_token, &alice, json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["quota"]["sandboxes"], Value::Null);

    // The OpenAPI document lists both operations.
    let doc = app.openapi().await;
    let ops = &doc["paths"]["/api/v1/accounts/{account_id}/quota"];
    assert!(ops["get"].is_object() && ops["put"].is_object(), "{ops}");
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_refuse_creates_forks_starts_and_updates() {
    let app = spawn_app().await;
    let (id, t) = account(&app, "tenant").await;
    let quota_path = format!("/api/v1/accounts/{id}/quota");
    put_quota(
        &app,
        &app.admin_token,
        &id,
        json!({ "sandboxes": 2, "cpuCores": 1, "memoryGB": 2 }),
    )
    .await
    .expect(StatusCode::OK);

    let small = |name: &str| json!({ "name": name, "cpuCores": 0.5, "memoryGB": 0.5 });
    let a = app.create(&t, small("a")).await;
    let b = app.create(&t, small("b")).await;
    let usage = app.get(&quota_path, &t).await.body["usage"].clone();
    assert_eq!(
        usage,
        json!({ "sandboxes": 2, "cpuCores": 1.0, "memoryGB": 1.0, "diskGB": 20,
                 "snapshots": 0, "snapshotGB": 0.0, "uploads": 0, "uploadGB": 0.0,
                 "volumes": 0, "volumeGB": 0 })
    );

    // Create and fork: the third sandbox is refused, nothing is left behind.
    let before = app.containers().len();
    let r = app.try_create(&t, small("c")).await;
    r.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    assert_eq!(r.message(), "account quota exceeded: 2 of 2 sandboxes");
    let r = app.act(&t, &id_of(&a), "fork").await;
    r.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    assert_eq!(app.containers().len(), before);

    // A stopped sandbox counts as a sandbox but not for CPU: another may
    // grow, and then the stopped one may not start.
    let r = app.act(&t, &id_of(&b), "stop?timeout=0").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = app.try_create(&t, small("c")).await;
    assert_eq!(r.code(), "quota_exceeded", "{:?}", r.body);
    app.patch_sandbox(&t, &id_of(&a), json!({ "cpuCores": 1 }))
        .await
        .expect(StatusCode::OK);
    let r = app.act(&t, &id_of(&b), "start").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert_eq!(
        r.message(),
        "account quota exceeded: 1 of 1 CPUs in use by running sandboxes, 0.5 more requested"
    );
    let state = inspect(&id_of(&b), "{{.State.Running}}");
    assert_eq!(state, ["false"], "a refused start started the container");
    let r = app.get_sandbox(&t, &id_of(&b)).await;
    assert_eq!(r.body["status"], "STOPPED");

    // Update: more memory than the quota leaves is refused, the limits stay.
    let r = app
        .patch_sandbox(&t, &id_of(&a), json!({ "memoryGB": 3 }))
        .await;
    r.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    assert_eq!(
        r.message(),
        "account quota exceeded: 0.5 of 2 GB memory in use by running sandboxes, 2.5 GB more requested"
    );
    let memory = inspect(&id_of(&a), "{{.HostConfig.Memory}}");
    assert_eq!(memory, [(512u64 << 20).to_string()]);

    // Shrinking passes; then the stopped one fits again.
    app.patch_sandbox(&t, &id_of(&a), json!({ "cpuCores": 0.5 }))
        .await
        .expect(StatusCode::OK);
    let r = app.act(&t, &id_of(&b), "start").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    // Deleting frees a place.
    let r = app
        .delete(&format!("/api/v1/sandbox/{}", id_of(&b)), &t)
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    app.create(&t, small("c")).await;
    let usage = app.get(&quota_path, &t).await.body["usage"].clone();
    assert_eq!(usage["sandboxes"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_creates_at_a_quota_of_one_make_exactly_one() {
    let app = spawn_app().await;
    let (id, t) = account(&app, "racer").await;
    put_quota(&app, &app.admin_token, &id, json!({ "sandboxes": 1 }))
        .await
        .expect(StatusCode::OK);
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (http, base, t) = (app.http.clone(), app.base.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            let r = http
                .post(format!("{base}/api/v1/sandbox"))
                .bearer_auth(&t)
                .json(&json!({ "name": format!("r{i}"), "cpuCores": 0.25, "memoryGB": 0.25 }))
                .send()
                .await
                .unwrap();
            let status = r.status();
            (status, r.json::<Value>().await.unwrap())
        }));
    }
    let mut created = 0;
    for task in tasks {
        let (status, body) = task.await.unwrap();
        match status {
            StatusCode::CREATED => created += 1,
            StatusCode::FORBIDDEN => {
                assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
                assert_eq!(
                    body["error"]["message"],
                    "account quota exceeded: 1 of 1 sandboxes"
                );
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(app.containers().len(), 1);

    // At the quota, a retry with the key of a create that was made replays
    // it; a new key is refused.
    let r = app.get(&format!("/api/v1/accounts/{id}/quota"), &t).await;
    assert_eq!(r.body["usage"]["sandboxes"], 1);
    replays_at_the_quota(&app, &id, &t).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn new_accounts_start_with_the_default_quota() {
    let app = spawn_configured(|c| {
        c.service.admission.default_quota = stockade_core::Quota {
            sandboxes: Some(1),
            disk_gb: Some(50),
            snapshots: Some(4),
            upload_bytes: Some(stockade_core::quota::BYTES_PER_GB / 2),
            ..stockade_core::Quota::unlimited()
        };
    })
    .await;
    let (id, t) = account(&app, "newcomer").await;
    let r = app.get(&format!("/api/v1/accounts/{id}/quota"), &t).await;
    assert_eq!(
        r.body["quota"],
        json!({ "sandboxes": 1, "cpuCores": null, "memoryGB": null, "diskGB": 50,
                 "snapshots": 4, "snapshotGB": null, "uploads": null, "uploadGB": 0.5,
                 "volumes": null, "volumeGB": null })
    );
    app.create(
        &t,
        json!({ "name": "one", "cpuCores": 0.25, "memoryGB": 0.25 }),
    )
    .await;
    let r = app
        .try_create(
            &t,
            json!({ "name": "two", "cpuCores": 0.25, "memoryGB": 0.25 }),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert_eq!(r.message(), "account quota exceeded: 1 of 1 sandboxes");
}

async fn create_volume(app: &TestApp, token: &str, body: Value) -> Resp {
    app.post("/api/v1/shared-volumes", token, body).await
}

#[tokio::test(flavor = "multi_thread")]
async fn shared_volumes_are_held_to_their_count_and_total_size() {
    let (app, [(id, t), (bob, bob_t)]) = spawn_with_account_ids(["volumes", "neighbour"]).await;
    let quota_path = format!("/api/v1/accounts/{id}/quota");
    let volume = |name: &str, size: Option<u32>| match size {
        Some(gb) => json!({ "name": name, "sizeGB": gb }),
        None => json!({ "name": name }),
    };
    let body = put_quota(
        &app,
        &app.admin_token,
        &id,
        json!({ "volumes": 2, "volumeGB": 3 }),
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(
        (&body["quota"]["volumes"], &body["quota"]["volumeGB"]),
        (&json!(2), &json!(3))
    );

    // Under a size limit every volume declares its size.
    let r = create_volume(&app, &t, volume("unsized", None)).await;
    r.assert_status(StatusCode::BAD_REQUEST, "a volume without sizeGB");
    assert_eq!(r.error_fields(), ["sizeGB"], "{:?}", r.body);
    assert!(
        r.message().contains(
            "this account's volumes must declare sizeGB: its quota caps their total at 3 GB"
        ),
        "{:?}",
        r.body
    );

    // 1 GB and 2 GB fit; the usage shows them.
    create_volume(&app, &t, volume("one", Some(1)))
        .await
        .expect(StatusCode::CREATED);
    create_volume(&app, &t, volume("two", Some(2)))
        .await
        .expect(StatusCode::CREATED);
    let usage = app.get(&quota_path, &t).await.body["usage"].clone();
    assert_eq!(
        (&usage["volumes"], &usage["volumeGB"]),
        (&json!(2), &json!(3))
    );

    // A third is refused by the count, and with room for three by the
    // size; nothing is made in Docker.
    let docker_volumes = app.volumes().len();
    let r = create_volume(&app, &t, volume("three", Some(1))).await;
    r.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    assert_eq!(r.message(), "account quota exceeded: 2 of 2 volumes");
    put_quota(
        &app,
        &app.admin_token,
        &id,
        json!({ "volumes": 3, "volumeGB": 3 }),
    )
    .await
    .expect(StatusCode::OK);
    let r = create_volume(&app, &t, volume("three", Some(1))).await;
    r.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    assert_eq!(
        r.message(),
        "account quota exceeded: 3 of 3 GB in volumes, 1 GB more requested"
    );
    assert_eq!(app.volumes().len(), docker_volumes);
    let listed = app.get("/api/v1/shared-volumes", &t).await.body;
    assert_eq!(listed["volumes"].as_array().unwrap().len(), 2, "{listed}");

    // A delete frees its place and its size.
    app.delete("/api/v1/shared-volumes/one", &t)
        .await
        .assert_status(StatusCode::NO_CONTENT, "delete");
    let usage = app.get(&quota_path, &t).await.body["usage"].clone();
    assert_eq!(
        (&usage["volumes"], &usage["volumeGB"]),
        (&json!(1), &json!(2))
    );
    create_volume(&app, &t, volume("three", Some(1)))
        .await
        .expect(StatusCode::CREATED);
    let usage = app.get(&quota_path, &t).await.body["usage"].clone();
    assert_eq!(
        (&usage["volumes"], &usage["volumeGB"]),
        (&json!(2), &json!(3))
    );

    // Another account is untouched: no limits, and a volume without a
    // size is fine there.
    create_volume(&app, &bob_t, volume("free", None))
        .await
        .expect(StatusCode::CREATED);
    let r = app
        .get(&format!("/api/v1/accounts/{bob}/quota"), &app.admin_token)
        .await;
    assert_eq!(r.body["quota"]["volumeGB"], Value::Null);
    assert_eq!(
        (&r.body["usage"]["volumes"], &r.body["usage"]["volumeGB"]),
        (&json!(1), &json!(0))
    );

    for (token, name) in [(&t, "two"), (&t, "three"), (&bob_t, "free")] {
        app.delete(&format!("/api/v1/shared-volumes/{name}"), token)
            .await
            .assert_status(StatusCode::NO_CONTENT, name);
    }
    assert!(app.volumes().is_empty(), "{:?}", app.volumes());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_host_is_a_409_and_stopped_sandboxes_free_room() {
    // Half of the host's CPUs may be reserved: on 2 CPUs, 1.
    let app = spawn_configured(|c| {
        c.service.admission.cpu_overcommit = Some(0.5);
    })
    .await;
    let info = app.state.svc.runtime().info().await.unwrap();
    let limit = f64::from(info.cpus) * 0.5;
    let server = app.state.svc.runtime().server_name();
    let t = app.new_account("tenant").await;
    let half = limit / 2.0;
    let body = |name: &str| json!({ "name": name, "cpuCores": half, "memoryGB": 0.25 });
    let a = app.create(&t, body("a")).await;
    app.create(&t, body("b")).await;

    let r = app.try_create(&t, body("c")).await;
    r.assert_error(StatusCode::CONFLICT, "insufficient_capacity");
    let show = |v: f64| {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    };
    let want = format!(
        "insufficient capacity on server {server}: {} of {} CPUs reserved ({} CPUs × CPU overcommit 0.5), {} requested",
        show(limit),
        show(limit),
        info.cpus,
        show(half)
    );
    assert!(
        r.message().starts_with(&want),
        "{}\nwant {want}",
        r.message()
    );
    assert_eq!(
        app.containers().len(),
        2,
        "a refused create left a container"
    );

    // A running sandbox may not grow past the room either.
    let r = app
        .patch_sandbox(&t, &id_of(&a), json!({ "cpuCores": limit }))
        .await;
    r.assert_error(StatusCode::CONFLICT, "insufficient_capacity");

    // A request above the host's size stays a 400 naming the field.
    let r = app
        .try_create(&t, json!({ "name": "huge", "memoryGB": 4096 }))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.error_fields(), ["memoryGB"]);

    // A stopped sandbox frees its room: c fits, and a cannot start again.
    let r = app.act(&t, &id_of(&a), "stop?timeout=0").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let c = app.create(&t, body("c")).await;
    let r = app.act(&t, &id_of(&a), "start").await;
    r.assert_error(StatusCode::CONFLICT, "insufficient_capacity");
    // Deleting c lets a start.
    let r = app
        .delete(&format!("/api/v1/sandbox/{}", id_of(&c)), &t)
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let r = app.act(&t, &id_of(&a), "start").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "RUNNING");
}

/// Creates with `Idempotency-Key` at a full quota: a replay is no new sandbox.
async fn replays_at_the_quota(app: &TestApp, account: &str, t: &str) {
    put_quota(app, &app.admin_token, account, json!({ "sandboxes": 2 }))
        .await
        .expect(StatusCode::OK);
    let create = |key: &'static str| {
        app.http
            .post(format!("{}/api/v1/sandbox", app.base))
            .bearer_auth(t)
            .header("Idempotency-Key", key)
            .json(&json!({ "name": format!("keyed-{key}"), "cpuCores": 0.25, "memoryGB": 0.25 }))
            .send()
    };
    let first = create("k1").await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    let again = create("k1").await.unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);
    let other = create("k2").await.unwrap();
    assert_eq!(other.status(), StatusCode::FORBIDDEN);
    let body: Value = other.json().await.unwrap();
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    assert_eq!(app.containers().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn by_default_a_host_takes_no_more_memory_than_it_has() {
    // The default settings: memory is not overcommitted. Sandboxes of a
    // little under a quarter of the host's memory: four fit, a fifth not.
    let app = spawn_app().await;
    let info = app.state.svc.runtime().info().await.unwrap();
    let host_gb = info.memory_bytes as f64 / f64::from(1u32 << 30);
    let each = (host_gb / 4.5 * 100.0).floor() / 100.0;
    let t = app.new_account("greedy").await;
    let body = |i: usize| json!({ "name": format!("m{i}"), "cpuCores": 0.1, "memoryGB": each });
    for i in 0..4 {
        app.create(&t, body(i)).await;
    }
    let r = app.try_create(&t, body(4)).await;
    r.assert_error(StatusCode::CONFLICT, "insufficient_capacity");
    let m = r.message();
    assert!(
        m.contains("GB memory reserved") && m.contains(&format!("{each} GB requested")),
        "{m}"
    );
    assert_eq!(app.containers().len(), 4);
}

/// Every object under `prefix` in the app's object store.
async fn objects(app: &TestApp, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = app
        .state
        .svc
        .blobs()
        .list(prefix)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshots_past_the_quota_are_refused_and_leave_nothing() {
    let (app, [(alice, t), (bob, _)]) = spawn_with_account_ids(["snapper", "bystander"]).await;
    let quota_path = format!("/api/v1/accounts/{alice}/quota");
    put_quota(&app, &app.admin_token, &alice, json!({ "snapshots": 1 }))
        .await
        .expect(StatusCode::OK);
    let sb = app
        .create(
            &t,
            json!({ "name": "src", "cpuCores": 0.25, "memoryGB": 0.25 }),
        )
        .await;
    let id = id_of(&sb);
    sh_in(&id, "head -c 200000 /dev/urandom > /workspace/noise.bin");
    let snap_path = format!("/api/v1/sandbox/{id}/snapshots");
    let snap = |name: &'static str| app.post(&snap_path, &t, json!({ "name": name }));

    // The first fits; its archives are counted.
    let first = snap("first").await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
    let usage = app.get(&quota_path, &t).await.body["usage"].clone();
    assert_eq!(usage["snapshots"], 1, "{usage}");
    let gb = usage["snapshotGB"].as_f64().unwrap();
    assert!(gb * (1u64 << 30) as f64 > 200_000.0, "{usage}");
    let kept = objects(&app, "snapshots").await;
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(app.snapshot_images().len(), 1);

    // Past the count: refused before anything is made.
    let r = snap("second").await;
    r.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    assert_eq!(r.message(), "account quota exceeded: 1 of 1 snapshots");
    assert_eq!(objects(&app, "snapshots").await, kept);
    assert_eq!(app.snapshot_images().len(), 1);

    // Past the bytes (known once the archives are stored): refused, and
    // the image, the archives and the record are removed again.
    put_quota(
        &app,
        &app.admin_token,
        &alice,
        json!({ "snapshotGB": gb * 1.5 }),
    )
    .await
    .expect(StatusCode::OK);
    let r = snap("too-big").await;
    r.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    assert!(
        r.message().starts_with("account quota exceeded: ")
            && r.message().contains("GB in snapshots"),
        "{:?}",
        r.body
    );
    assert_eq!(objects(&app, "snapshots").await, kept);
    assert_eq!(app.snapshot_images().len(), 1);
    let listed = app.get("/api/v1/snapshots", &t).await;
    assert_eq!(listed.body["snapshots"].as_array().unwrap().len(), 1);
    assert_eq!(app.get(&quota_path, &t).await.body["usage"], usage);

    // A deleted snapshot frees its place.
    let first_id = first.body["id"].as_str().unwrap();
    let r = app
        .delete(&format!("/api/v1/snapshots/{first_id}"), &t)
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let usage = app.get(&quota_path, &t).await.body["usage"].clone();
    assert_eq!(
        (usage["snapshots"].clone(), usage["snapshotGB"].clone()),
        (json!(0), json!(0.0))
    );
    let r = snap("again").await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);

    // Another account's quota and use are untouched.
    let r = app
        .get(&format!("/api/v1/accounts/{bob}/quota"), &app.admin_token)
        .await;
    assert_eq!(r.body["quota"]["snapshots"], Value::Null);
    assert_eq!(r.body["usage"]["snapshots"], 0);
}

/// A tar.gz of one file of `len` bytes that do not compress.
pub fn noise_archive(len: usize) -> Vec<u8> {
    use std::io::Write;
    // xorshift: bytes gzip cannot shrink.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "noise.bin", data.as_slice()).unwrap();
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(&b.into_inner().unwrap()).unwrap();
    e.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn uploads_past_the_quota_are_refused_and_nothing_is_stored() {
    let (app, [(alice, t), (bob, bob_t)]) = spawn_with_account_ids(["uploader", "neighbour"]).await;
    let quota_path = format!("/api/v1/accounts/{alice}/quota");
    let upload = |token: &str, body: reqwest::Body| app.upload(token, body);
    let error = |v: &Value| (v["error"]["code"].clone(), v["error"]["message"].clone());
    put_quota(&app, &app.admin_token, &alice, json!({ "uploads": 1 }))
        .await
        .expect(StatusCode::OK);

    // One upload fits; the second is refused up front.
    let small = noise_archive(10_000);
    let r = upload(&t, small.clone().into()).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let kept = objects(&app, &format!("uploads/{alice}")).await;
    assert_eq!(kept.len(), 1);
    let usage = app.get(&quota_path, &t).await.body["usage"].clone();
    assert_eq!(usage["uploads"], 1, "{usage}");
    assert!(usage["uploadGB"].as_f64().unwrap() > 0.0, "{usage}");
    let r = upload(&t, small.clone().into()).await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        error(&body),
        (
            json!("quota_exceeded"),
            json!("account quota exceeded: 1 of 1 uploads")
        )
    );
    assert_eq!(objects(&app, &format!("uploads/{alice}")).await, kept);

    // Past the bytes: 413 like the server's own ceiling, whether the size
    // is declared or only seen while the body streams; nothing is stored.
    put_quota(
        &app,
        &app.admin_token,
        &alice,
        json!({ "uploadGB": 100_000.0 / (1u64 << 30) as f64 }),
    )
    .await
    .expect(StatusCode::OK);
    let big = noise_archive(300_000);
    assert!(big.len() > 250_000, "{} bytes", big.len());
    let r = upload(&t, big.clone().into()).await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("account quota exceeded: "),
        "{body}"
    );
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        big.chunks(16 * 1024).map(|c| Ok(c.to_vec())).collect();
    let streamed = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    // The server answers as soon as the quota is passed and stops reading:
    // the client sees the 413, or the connection cut while it still sends.
    match upload(&t, streamed).await {
        Ok(r) => assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE),
        Err(e) => assert!(e.is_request(), "{e}"),
    }
    assert_eq!(objects(&app, &format!("uploads/{alice}")).await, kept);
    // What still fits goes in.
    let r = upload(&t, small.clone().into()).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(objects(&app, &format!("uploads/{alice}")).await.len(), 2);

    // Another account uploads as before; its use is its own.
    let r = upload(&bob_t, big.into()).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = app
        .get(&format!("/api/v1/accounts/{bob}/quota"), &app.admin_token)
        .await;
    assert_eq!(r.body["quota"]["uploads"], Value::Null);
    assert_eq!(r.body["usage"]["uploads"], 1);
    let usage = app.get(&quota_path, &t).await.body["usage"].clone();
    assert_eq!(usage["uploads"], 2, "{usage}");

    // Eight uploads at once for the last place: at most one stays, and
    // every one refused left nothing.
    put_quota(&app, &app.admin_token, &alice, json!({ "uploads": 3 }))
        .await
        .expect(StatusCode::OK);
    let racing = (0..8).map(|_| upload(&t, small.clone().into()));
    let statuses: Vec<StatusCode> = futures_util::future::join_all(racing)
        .await
        .into_iter()
        .map(|r| r.unwrap().status())
        .collect();
    let made = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    assert!(made <= 1, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::CREATED || *s == StatusCode::FORBIDDEN),
        "{statuses:?}"
    );
    assert_eq!(
        objects(&app, &format!("uploads/{alice}")).await.len(),
        2 + made
    );
}
