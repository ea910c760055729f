//! Shared volumes against real Docker: mounted by several sandboxes at
//! once (read-only where asked), their files read and written through the
//! API without a sandbox, never leaving the volume whatever a sandbox
//! planted in it, other accounts kept out, deletes refused while mounted,
//! and a crash in the middle of a create or delete finished by recovery.

use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use stockade_core::{AccountId, SharedVolume, SharedVolumeId, SharedVolumeStatus};

use crate::helpers::*;

/// A raw answer: status and bytes.
struct Raw {
    status: StatusCode,
    bytes: Vec<u8>,
}

impl Raw {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }
}

/// `METHOD /api/v1/shared-volumes/{volume}/files{rest}?query` with a body.
async fn files_call(
    app: &TestApp,
    token: &str,
    method: Method,
    volume: &str,
    rest: &str,
    query: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Raw {
    let mut req = app
        .http
        .request(
            method,
            format!("{}/api/v1/shared-volumes/{volume}/files{rest}", app.base),
        )
        .bearer_auth(token)
        .query(query);
    if let Some(b) = body {
        req = req.body(b);
    }
    let resp = req.send().await.expect("request");
    Raw {
        status: resp.status(),
        bytes: resp.bytes().await.expect("body").to_vec(),
    }
}

async fn write(app: &TestApp, token: &str, volume: &str, path: &str, bytes: &[u8]) -> Raw {
    files_call(
        app,
        token,
        Method::PUT,
        volume,
        "/content",
        &[("path", path), ("parents", "true")],
        Some(bytes.to_vec()),
    )
    .await
}

async fn read(app: &TestApp, token: &str, volume: &str, path: &str) -> Raw {
    files_call(
        app,
        token,
        Method::GET,
        volume,
        "/content",
        &[("path", path)],
        None,
    )
    .await
}

async fn create_volume(app: &TestApp, token: &str, name: &str) -> Value {
    app.post("/api/v1/shared-volumes", token, json!({ "name": name }))
        .await
        .expect(StatusCode::CREATED)
}

/// The Docker volume of a shared volume exists.
fn docker_volume_exists(id: &str) -> bool {
    docker(&["volume", "inspect", &format!("stockade-shared-{id}")])
        .status
        .success()
}

#[tokio::test(flavor = "multi_thread")]
async fn volumes_are_shared_between_sandboxes_read_only_where_asked() {
    let app = spawn_app().await;
    let token = app.new_account("vol-owner").await;
    let vol = create_volume(&app, &token, "data").await;
    let vol_id = vol["id"].as_str().unwrap().to_owned();
    assert_eq!(vol["status"], "READY");
    assert_eq!(vol["mounts"], json!([]));
    assert!(docker_volume_exists(&vol_id));

    // A name is unique per account; another account may use it.
    let dup = app
        .post("/api/v1/shared-volumes", &token, json!({"name": "data"}))
        .await;
    dup.assert_status(StatusCode::CONFLICT, "a duplicate name");
    let other = app.new_account("vol-other").await;
    create_volume(&app, &other, "data").await;

    // Files written through the API, before any sandbox.
    let w = write(&app, &token, "data", "/in/seed.txt", b"seeded\n").await;
    assert_eq!(w.status, StatusCode::CREATED, "{:?}", w.json());
    assert_eq!(w.json()["type"], "file");
    assert_eq!(w.json()["size"], 7);

    let a = app
        .create(
            &token,
            json!({"name": "writer", "volumeMounts": [{"volume": "data", "path": "/data"}]}),
        )
        .await;
    let b = app
        .create(
            &token,
            json!({"name": "reader", "volumeMounts": [{"volume": vol_id, "path": "/mnt/ro", "readOnly": true}]}),
        )
        .await;
    let (a, b) = (id_of(&a), id_of(&b));
    assert_eq!(sh_in(&a, "cat /data/in/seed.txt"), "seeded");
    sh_in(&a, "echo from-a > /data/a.txt");
    assert_eq!(sh_in(&b, "cat /mnt/ro/a.txt"), "from-a");
    let denied = sh_in(&b, "echo x > /mnt/ro/b.txt 2>&1 || echo refused");
    assert_contains(&denied, "refused");
    assert_eq!(
        read(&app, &token, "data", "/a.txt").await.bytes,
        b"from-a\n"
    );

    // The sandbox's details show its mounts; the volume shows its users.
    let details = app.get_sandbox(&token, &b).await.expect(StatusCode::OK);
    assert_eq!(details["volumeMounts"][0]["volumeId"], vol_id.as_str());
    assert_eq!(details["volumeMounts"][0]["readOnly"], true);
    let got = app
        .get(&format!("/api/v1/shared-volumes/{vol_id}"), &token)
        .await
        .expect(StatusCode::OK);
    assert_eq!(got["mounts"].as_array().unwrap().len(), 2, "{got}");

    // A mounted volume cannot be deleted; the refusal names its users.
    let refused = app.delete("/api/v1/shared-volumes/data", &token).await;
    refused.assert_status(StatusCode::CONFLICT, "delete while mounted");
    assert_contains(refused.message(), &a);
    assert_contains(refused.message(), &b);

    app.delete_sandbox(&token, &a, "").await;
    app.delete_sandbox(&token, &b, "").await;
    let gone = app.delete("/api/v1/shared-volumes/data", &token).await;
    gone.assert_status(StatusCode::NO_CONTENT, "delete once unmounted");
    assert!(!docker_volume_exists(&vol_id));

    // Everything about it is 404; its name is free again, and empty.
    for path in [
        format!("/api/v1/shared-volumes/{vol_id}"),
        "/api/v1/shared-volumes/data".to_owned(),
        format!("/api/v1/shared-volumes/{vol_id}/files"),
    ] {
        app.get(&path, &token)
            .await
            .assert_status(StatusCode::NOT_FOUND, &path);
    }
    let again = create_volume(&app, &token, "data").await;
    assert_ne!(again["id"], vol_id.as_str());
    let listing = files_call(&app, &token, Method::GET, "data", "", &[], None).await;
    assert_eq!(listing.json()["entries"], json!([]), "{:?}", listing.json());
}

#[tokio::test(flavor = "multi_thread")]
async fn another_account_gets_404_everywhere() {
    let app = spawn_app().await;
    let owner = app.new_account("vol-a").await;
    let thief = app.new_account("vol-b").await;
    let vol = create_volume(&app, &owner, "secret").await;
    let id = vol["id"].as_str().unwrap().to_owned();
    write(&app, &owner, &id, "/key", b"s3cr3t").await;

    for reference in [id.as_str(), "secret"] {
        let base = format!("/api/v1/shared-volumes/{reference}");
        app.get(&base, &thief)
            .await
            .assert_status(StatusCode::NOT_FOUND, "get");
        let r = read(&app, &thief, reference, "/key").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        let w = write(&app, &thief, reference, "/planted", b"x").await;
        assert_eq!(w.status, StatusCode::NOT_FOUND);
        app.delete(&base, &thief)
            .await
            .assert_status(StatusCode::NOT_FOUND, "delete");
        let mounted = app
            .try_create(
                &thief,
                json!({"volumeMounts": [{"volume": reference, "path": "/steal"}]}),
            )
            .await;
        mounted.assert_status(StatusCode::NOT_FOUND, "mount another's volume");
        assert_contains(mounted.message(), "volumeMounts[0].volume");
    }
    // The E2B content token of one volume opens no other.
    let e2b = |token: &str, path: String| {
        app.http
            .get(format!("{}/e2b{path}", app.base))
            .header("x-api-key", token.to_owned())
            .send()
    };
    let mine = create_volume(&app, &thief, "mine").await;
    let mine_id = mine["id"].as_str().unwrap();
    let info: Value = e2b(&thief, format!("/volumes/{mine_id}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let thief_token = info["token"].as_str().unwrap().to_owned();
    let stolen = app
        .http
        .get(format!("{}/e2b/volumecontent/{id}/file", app.base))
        .query(&[("path", "/key")])
        .bearer_auth(&thief_token)
        .send()
        .await
        .unwrap();
    assert_eq!(stolen.status(), StatusCode::FORBIDDEN);
    let e2b_get = e2b(&thief, format!("/volumes/{id}")).await.unwrap();
    assert_eq!(e2b_get.status(), StatusCode::NOT_FOUND);
    let listed = app.get("/api/v1/sandbox", &thief).await;
    assert_eq!(listed.body["total"], 0, "no sandbox was made");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_volumes_and_mounts_are_400_naming_the_field() {
    let app = spawn_app().await;
    let token = app.new_account("vol-bad").await;
    for (body, field) in [
        (json!({"name": "bad_name"}), "name"),
        (json!({"name": "-x"}), "name"),
        (json!({"name": "ok", "sizeGB": 0.5}), "sizeGB"),
        (
            json!({"name": "ok", "labels": {"bad key": "v"}}),
            "labels.bad key",
        ),
        (json!({"name": "ok", "server": "no-such-host"}), "server"),
        (json!({"name": "ok", "extra": 1}), "extra"),
    ] {
        let r = app
            .post("/api/v1/shared-volumes", &token, body.clone())
            .await;
        r.assert_status(StatusCode::BAD_REQUEST, &body);
        assert!(
            r.error_fields().iter().any(|f| f == field) || r.message().contains(field),
            "{body}: {:?}",
            r.body
        );
    }
    create_volume(&app, &token, "v").await;
    for (mounts, field) in [
        (
            json!([{"volume": "v", "path": "/proc"}]),
            "volumeMounts[0].path",
        ),
        (
            json!([{"volume": "v", "path": "data"}]),
            "volumeMounts[0].path",
        ),
        (
            json!([{"volume": "v", "path": "/workspace/x"}]),
            "volumeMounts[0].path",
        ),
        (
            json!([{"volume": "v", "path": "/a/../etc"}]),
            "volumeMounts[0].path",
        ),
        (
            json!([{"volume": "v", "path": "/d"}, {"volume": "v", "path": "/d"}]),
            "volumeMounts[1].path",
        ),
        (
            json!([{"volume": "", "path": "/d"}]),
            "volumeMounts[0].volume",
        ),
    ] {
        let r = app
            .try_create(&token, json!({ "volumeMounts": mounts.clone() }))
            .await;
        r.assert_status(StatusCode::BAD_REQUEST, &mounts);
        assert!(
            r.error_fields().iter().any(|f| f == field),
            "{mounts}: {:?}",
            r.body
        );
    }
    // Bad paths of the files API.
    for path in ["", "/../x", "/a/../../etc/passwd", "/a\u{0}b"] {
        let r = read(&app, &token, "v", path).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{path:?}: {:?}",
            r.json()
        );
    }
    let listed = app.get("/api/v1/sandbox", &token).await;
    assert_eq!(listed.body["total"], 0, "no sandbox was made");
}

#[tokio::test(flavor = "multi_thread")]
async fn files_never_leave_the_volume_through_planted_links() {
    let app = spawn_app().await;
    let token = app.new_account("vol-links").await;
    create_volume(&app, &token, "links").await;
    let sb = app
        .create_id(
            &token,
            json!({"volumeMounts": [{"volume": "links", "path": "/data"}]}),
        )
        .await;
    // Planted from inside: links to the root, to /etc and to a file outside.
    sh_in(
        &sb,
        "ln -s / /data/root && ln -s /etc /data/etc && ln -s /etc/passwd /data/passwd \
         && mkdir /data/dir && echo inside > /data/dir/file",
    );
    for path in [
        "/root/etc/passwd",
        "/etc/passwd",
        "/passwd",
        "/etc/hostname",
    ] {
        let r = read(&app, &token, "links", path).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{path}: {:?}",
            String::from_utf8_lossy(&r.bytes)
        );
    }
    for path in ["/etc/planted", "/root/tmp/planted", "/passwd"] {
        let w = write(&app, &token, "links", path, b"x").await;
        assert_eq!(w.status, StatusCode::BAD_REQUEST, "{path}: {:?}", w.json());
    }
    // A link is reported as a link, never followed.
    let st = files_call(
        &app,
        &token,
        Method::GET,
        "links",
        "/stat",
        &[("path", "/root")],
        None,
    )
    .await;
    assert_eq!(st.json()["type"], "symlink", "{:?}", st.json());
    assert_eq!(st.json()["target"], "/");
    let listing = files_call(
        &app,
        &token,
        Method::GET,
        "links",
        "",
        &[("path", "/"), ("depth", "3")],
        None,
    )
    .await;
    let paths: Vec<String> = listing.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect();
    assert!(paths.contains(&"/dir/file".to_owned()), "{paths:?}");
    assert!(!paths.iter().any(|p| p.starts_with("/root/")), "{paths:?}");
    // Removing a link removes the link, not what it points to.
    let rm = files_call(
        &app,
        &token,
        Method::DELETE,
        "links",
        "",
        &[("path", "/etc")],
        None,
    )
    .await;
    assert_eq!(rm.status, StatusCode::NO_CONTENT);
    assert_contains(&sh_in(&sb, "cat /etc/passwd | head -1"), "root");
    // The volume's own files still work, and the sandbox sees API writes.
    write(&app, &token, "links", "/dir/api.txt", b"api").await;
    assert_eq!(sh_in(&sb, "cat /data/dir/api.txt"), "api");
    let mv = app
        .post(
            "/api/v1/shared-volumes/links/files/rename",
            &token,
            json!({"from": "/dir/api.txt", "to": "/moved.txt"}),
        )
        .await;
    mv.assert_status(StatusCode::OK, "rename");
    assert_eq!(sh_in(&sb, "cat /data/moved.txt"), "api");
}

#[tokio::test(flavor = "multi_thread")]
async fn volumes_and_their_tokens_survive_a_restart_and_a_crash_is_finished() {
    let app = spawn_kept_app().await;
    let (account, token) = app.new_account_with_id("vol-restart").await;
    let account = AccountId::parse(&account).unwrap();
    let vol = create_volume(&app, &token, "keep").await;
    let id = vol["id"].as_str().unwrap().to_owned();
    write(&app, &token, "keep", "/a/b.bin", &[7u8; 4096]).await;
    let content_token = |app: &TestApp| {
        let url = format!("{}/e2b/volumes/{id}", app.base);
        let http = app.http.clone();
        let token = token.clone();
        async move {
            let v: Value = http
                .get(url)
                .header("x-api-key", token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["token"].as_str().unwrap().to_owned()
        }
    };
    let before = content_token(&app).await;

    // A create and a delete that died half-way: one recorded CREATING whose
    // Docker volume was made, one DELETING whose Docker volume is still
    // there. The account is the caller's.
    let store = app.state.svc.store().clone();
    let half = |name: &str, status| SharedVolume {
        id: SharedVolumeId::generate(),
        account_id: account.clone(),
        name: name.to_owned(),
        server: vol["server"].as_str().unwrap().to_owned(),
        size_gb: None,
        labels: Default::default(),
        status,
        created_at: Utc::now(),
        deleted_at: None,
        moving_to: None,
        moving_since: None,
        moved_from: None,
    };
    let creating = half("half-made", SharedVolumeStatus::Creating);
    let deleting = half("half-gone", SharedVolumeStatus::Deleting);
    for v in [&creating, &deleting] {
        store
            .insert_shared_volume(v, &stockade_core::Quota::unlimited())
            .await
            .unwrap()
            .unwrap();
        docker(&[
            "volume",
            "create",
            "--label",
            &format!("io.stockade.instance-id={}", app.instance_id()),
            &v.docker_name(),
        ]);
    }

    let app = app.restart().await;
    // The finished volume and its file are there; its token is the same.
    let r = read(&app, &token, "keep", "/a/b.bin").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.bytes, vec![7u8; 4096]);
    assert_eq!(content_token(&app).await, before);
    // The half-made one was rolled back and the half-deleted one finished:
    // neither is listed, neither Docker volume is left, their names are free.
    let listed = app.get("/api/v1/shared-volumes", &token).await.body;
    let names: Vec<&str> = listed["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["keep"], "{listed}");
    for v in [&creating, &deleting] {
        assert!(!docker_volume_exists(v.id.as_str()), "{} left", v.name);
    }
    create_volume(&app, &token, "half-made").await;
    app.delete("/api/v1/shared-volumes/keep", &token)
        .await
        .assert_status(StatusCode::NO_CONTENT, "delete");
    app.delete("/api/v1/shared-volumes/half-made", &token)
        .await
        .assert_status(StatusCode::NO_CONTENT, "delete");
    cleanup_instance(&app.instance_id());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sized_volume_is_held_to_its_size_where_the_host_can() {
    let app = spawn_app().await;
    let token = app.new_account("vol-size").await;
    let vol = app
        .post(
            "/api/v1/shared-volumes",
            &token,
            json!({"name": "capped", "sizeGB": 1}),
        )
        .await
        .expect(StatusCode::CREATED);
    assert_eq!(vol["sizeGB"], 1);
    let usage = app
        .get("/api/v1/shared-volumes/capped/usage", &token)
        .await
        .expect(StatusCode::OK);
    let enforcement = usage["enforcement"].as_str().unwrap().to_owned();
    let sb = app
        .create_id(
            &token,
            json!({"volumeMounts": [{"volume": "capped", "path": "/data"}]}),
        )
        .await;
    let wrote = sh_in(
        &sb,
        "dd if=/dev/zero of=/data/big bs=1M count=1300 2>&1 | tail -1; ls -l /data/big | awk '{print $5}'",
    );
    let size: u64 = wrote.lines().last().unwrap().trim().parse().unwrap();
    eprintln!("volume size: {enforcement}; a 1300 MB write kept {size} bytes");
    if usage["sizeEnforced"] == true {
        assert!(
            size < 1100 << 20,
            "{size} bytes written past 1 GB ({enforcement})"
        );
    } else {
        // Where the host cannot cap a volume, the API says why.
        assert!(enforcement.contains("not enforced"), "{enforcement}");
        assert_eq!(size, 1300 << 20);
    }
    let usage = app
        .get("/api/v1/shared-volumes/capped/usage", &token)
        .await
        .expect(StatusCode::OK);
    assert!(usage["usedBytes"].as_u64().unwrap() >= size / 2, "{usage}");
    app.delete_sandbox(&token, &sb, "").await;
    app.delete("/api/v1/shared-volumes/capped", &token)
        .await
        .assert_status(StatusCode::NO_CONTENT, "delete");
    assert!(app.volumes().is_empty(), "{:?}", app.volumes());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unmounted_volume_moves_to_another_host_with_its_files() {
    let Ok(h2) = std::env::var("STOCKADE_TEST_HOST2") else {
        eprintln!("skipped: STOCKADE_TEST_HOST2 (the second engine of scripts/test) is not set");
        return;
    };
    let app = spawn_app().await;
    stockade_service::host_admin::ensure_own(&app.state.svc, "unix:///var/run/docker.sock")
        .await
        .expect("register the own host");
    let admin = app.admin_token.clone();
    app.post(
        "/api/v1/hosts",
        &admin,
        json!({"name": "h2", "dockerHost": h2, "address": "127.0.0.1"}),
    )
    .await
    .assert_status(StatusCode::CREATED, "register h2");
    // The own engine under a second name: a move there would remove the
    // only copy, so it is refused.
    app.post(
        "/api/v1/hosts",
        &admin,
        json!({"name": "same", "dockerHost": "unix:///var/run/docker.sock"}),
    )
    .await
    .assert_status(StatusCode::CREATED, "register the own engine twice");
    let token = app.new_account("vol-move").await;
    let vol = create_volume(&app, &token, "travel").await;
    let id = vol["id"].as_str().unwrap().to_owned();
    let own = vol["server"].as_str().unwrap().to_owned();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    for (path, bytes) in [("/deep/dir/blob.bin", &data[..]), ("/top.txt", b"top")] {
        let w = write(&app, &token, "travel", path, bytes).await;
        assert_eq!(w.status, StatusCode::CREATED, "{path}: {:?}", w.json());
    }
    let h2_volume = |present: bool| {
        let out = docker(&[
            "-H",
            &h2,
            "volume",
            "inspect",
            &format!("stockade-shared-{id}"),
        ]);
        assert_eq!(out.status.success(), present, "on h2: {out:?}");
    };

    let same = app
        .post(
            "/api/v1/shared-volumes/travel/move?server=same",
            &token,
            json!({}),
        )
        .await;
    same.assert_status(StatusCode::BAD_REQUEST, "a move onto the same engine");
    // Mounted: refused, naming the sandbox.
    let sb = app
        .create_id(
            &token,
            json!({"volumeMounts": [{"volume": "travel", "path": "/data"}]}),
        )
        .await;
    let refused = app
        .post(
            "/api/v1/shared-volumes/travel/move?server=h2",
            &token,
            json!({}),
        )
        .await;
    refused.assert_status(StatusCode::CONFLICT, "move while mounted");
    assert_contains(refused.message(), &sb);
    app.delete_sandbox(&token, &sb, "").await;

    let moved = app
        .post(
            "/api/v1/shared-volumes/travel/move?server=h2",
            &token,
            json!({}),
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(moved["server"], "h2", "{moved}");
    assert_eq!(moved["status"], "READY");
    h2_volume(true);
    assert!(!docker_volume_exists(&id), "the old copy is left on {own}");
    // Its files came along, byte for byte, and are served from h2.
    let blob = read(&app, &token, "travel", "/deep/dir/blob.bin").await;
    assert_eq!(blob.status, StatusCode::OK, "{:?}", blob.json());
    assert!(blob.bytes == data, "the file changed on the way");
    let top = read(&app, &token, "travel", "/top.txt").await;
    assert!(top.bytes == b"top", "{:?}", top.json());
    // A sandbox that mounts it is placed on h2 and sees the files.
    let on_h2 = app
        .create(
            &token,
            json!({"volumeMounts": [{"volume": "travel", "path": "/data", "readOnly": true}]}),
        )
        .await;
    assert_eq!(on_h2["server"], "h2", "{on_h2}");
    let on_h2 = id_of(&on_h2);
    let seen = app
        .sandbox_post(
            &token,
            &on_h2,
            "exec",
            json!({"cmd": ["cat", "/data/top.txt"]}),
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(seen["stdout"], "top", "{seen}");
    // Asking for another host than the volume's is refused.
    let elsewhere = app
        .try_create(
            &token,
            json!({"server": own, "volumeMounts": [{"volume": "travel", "path": "/data"}]}),
        )
        .await;
    elsewhere.assert_status(StatusCode::BAD_REQUEST, "a create on another host");
    app.delete_sandbox(&token, &on_h2, "").await;
    app.delete("/api/v1/shared-volumes/travel", &token)
        .await
        .assert_status(StatusCode::NO_CONTENT, "delete on h2");
    h2_volume(false);
    cleanup_on(&h2, &app.instance_id());
}

/// Removes what an app of `instance` left on the engine at `host`.
fn cleanup_on(host: &str, instance: &str) {
    let filter = format!("label=io.stockade.instance-id={instance}");
    for (list, remove) in [
        (
            vec!["ps", "-aq", "--filter", &filter],
            vec!["rm", "-f", "-v"],
        ),
        (
            vec!["volume", "ls", "-q", "--filter", &filter],
            vec!["volume", "rm", "-f"],
        ),
    ] {
        let mut args = vec!["-H", host];
        args.extend(list);
        let ids = docker_lines(&args);
        if !ids.is_empty() {
            let mut args = vec!["-H", host];
            args.extend(remove);
            args.extend(ids.iter().map(String::as_str));
            docker(&args);
        }
    }
}
