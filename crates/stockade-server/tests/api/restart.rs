//! Records survive a server restart, `/workspace` survives it
//! byte for byte, and the restarted server reconciles records with Docker.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn workspace_and_records_survive_a_restart_and_are_reconciled() {
    let mut first = spawn_kept_app().await;
    let t = first.admin_token.clone();
    let kept = first.create(&t, json!({ "name": "kept" })).await;
    let vanished = first.create(&t, json!({ "name": "vanished" })).await;
    let exited = first.create(&t, json!({ "name": "exited" })).await;
    let kept_id = kept["id"].as_str().unwrap().to_owned();
    sh_in(&id_of(&vanished), "echo still-here > /workspace/mine");
    sh_in(&kept_id, "head -c 50000 /dev/urandom > /workspace/data");
    let sum = sh_in(&kept_id, "md5sum /workspace/data");
    first.shutdown().await;
    let dir = first.dir.clone();
    let instance = first.instance_id();
    drop(first);

    // Behind the server's back: one container disappears, one stops.
    docker(&[
        "rm",
        "-f",
        &format!("stockade-{}", vanished["id"].as_str().unwrap()),
    ]);
    docker(&[
        "stop",
        "-t",
        "1",
        &format!("stockade-{}", exited["id"].as_str().unwrap()),
    ]);

    let second = spawn_app_with(AppOptions {
        dir: Some(dir),
        ..Default::default()
    })
    .await;
    assert_eq!(
        second.instance_id(),
        instance,
        "same database, same instance"
    );
    // The admin token of the first start still works (stored hashed).
    let r = second.get_sandbox(&t, &kept_id).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "RUNNING");
    assert_eq!(sh_in(&kept_id, "md5sum /workspace/data"), sum);

    let r = second.get_sandbox(&t, &id_of(&vanished)).await;
    assert_eq!(r.body["status"], "ERROR");
    assert!(r.body["statusReason"]
        .as_str()
        .unwrap()
        .contains("not found"));
    // Start makes its container again from the record, on its volume.
    let r = second.act(&t, &id_of(&vanished), "start").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "RUNNING");
    assert_ne!(
        r.body["metadata"]["container_id"],
        vanished["metadata"]["container_id"]
    );
    assert_eq!(
        sh_in(&id_of(&vanished), "cat /workspace/mine"),
        "still-here"
    );
    assert_eq!(
        inspect(&id_of(&vanished), "{{.Config.Image}}"),
        [vanished["dockerImage"].as_str().unwrap()]
    );
    // Without its volume too, there is nothing to run on: it says so.
    docker(&["rm", "-f", &format!("stockade-{}", id_of(&vanished))]);
    docker(&[
        "volume",
        "rm",
        "-f",
        &format!("agent-sandbox-{}", id_of(&vanished)),
    ]);
    let r = second.act(&t, &id_of(&vanished), "start").await;
    r.assert_error(StatusCode::CONFLICT, "conflict");
    assert!(r.message().contains("volume"), "{}", r.message());
    assert_eq!(
        second.get_sandbox(&t, &id_of(&vanished)).await.body["status"],
        "ERROR"
    );

    let r = second.get_sandbox(&t, &id_of(&exited)).await;
    assert_eq!(r.body["status"], "STOPPED");
    assert!(r.body["statusReason"].as_str().unwrap().contains("exited"));

    // Stop, restart the server again, start: the bytes are still there.
    let r = second.act(&t, &kept_id, "stop").await;
    assert_eq!(r.body["status"], "STOPPED");
    let r = second.act(&t, &kept_id, "start").await;
    assert_eq!(r.body["status"], "RUNNING");
    assert_eq!(sh_in(&kept_id, "md5sum /workspace/data"), sum);
    drop(second);
    cleanup_instance(&instance);
}
