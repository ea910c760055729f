//! The volume list (sizes in bytes as Docker counts them,
//! `inUse`, `orphaned`), 409 on a live sandbox's volume, the confirmed
//! orphan cleanup with the real freed bytes, and account isolation. Volumes
//! of other Stockade instances or other programs are never shown or removed.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

fn vol(id: &str) -> String {
    format!("agent-sandbox-{id}")
}

/// The entry of volume `name` in a listing.
fn entry<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
}

fn names(list: &Value) -> Vec<String> {
    let mut out: Vec<String> = list["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

/// A volume named like Stockade's but not this instance's: another
/// Stockade's (its instance label) or another program's (no labels).
struct ForeignVolume(String);

impl ForeignVolume {
    fn new(labels: &[&str]) -> Self {
        let name = vol(stockade_core::SandboxId::generate().as_str());
        let mut args = vec!["volume", "create"];
        for l in labels {
            args.push("--label");
            args.push(l);
        }
        args.push(&name);
        assert!(docker(&args).status.success());
        Self(name)
    }

    fn exists(&self) -> bool {
        docker(&["volume", "inspect", &self.0]).status.success()
    }
}

impl Drop for ForeignVolume {
    fn drop(&mut self) {
        docker(&["volume", "rm", "-f", &self.0]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn volumes_are_listed_with_sizes_and_orphans_are_cleaned_up() {
    let app = spawn_app().await;
    let t = app.admin_token.clone();
    let other_instance = ForeignVolume::new(&[
        "io.stockade.managed=true",
        "io.stockade.instance-id=someoneelse",
    ]);
    let unlabelled = ForeignVolume::new(&[]);

    let running = app.create(&t, json!({ "name": "running" })).await;
    let running_id = running["id"].as_str().unwrap();
    let stopped_id = app.create_id(&t, json!({ "name": "stopped" })).await;
    let gone_id = app.create_id(&t, json!({ "name": "gone" })).await;

    // The list shows a volume's bytes as Docker counts them: 5 MB written.
    let before = app.get("/api/v1/volumes", &t).await;
    assert_eq!(before.status, StatusCode::OK, "{:?}", before.body);
    let size0 = entry(&before.body, &vol(running_id)).unwrap()["sizeBytes"]
        .as_u64()
        .unwrap();
    sh_in(running_id, "head -c 5000000 /dev/urandom > /workspace/blob");
    sh_in(&gone_id, "head -c 3000000 /dev/urandom > /workspace/keep");
    let r = app.act(&t, &stopped_id, "stop?timeout=5").await;
    assert_eq!(r.body["status"], "STOPPED");
    let r = app
        .delete_sandbox(&t, &gone_id, "preserveVolume=true")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    let t0 = std::time::Instant::now();
    let list = app.get("/api/v1/volumes", &t).await;
    eprintln!("GET /volumes took {:?}", t0.elapsed());
    assert_eq!(list.status, StatusCode::OK, "{:?}", list.body);
    assert_eq!(
        names(&list.body),
        {
            let mut v = vec![vol(running_id), vol(&stopped_id), vol(&gone_id)];
            v.sort();
            v
        },
        "only this instance's volumes"
    );
    assert_eq!(list.body["total"], 3);
    let r = entry(&list.body, &vol(running_id)).unwrap();
    assert_eq!(r["sizeBytes"].as_u64().unwrap(), size0 + 5_000_000);
    assert_eq!(r["size"], "5.0 MB");
    assert_eq!(r["sandboxId"], running_id);
    assert_eq!(r["accountId"], running["accountId"]);
    assert_eq!(r["inUse"], true);
    assert_eq!(r["orphaned"], false);
    assert_eq!(r["sandboxStatus"], "RUNNING");
    assert!(r["createdAt"].is_string());
    assert!(r.get("warning").is_none(), "no warning below 10 GB");
    let s = entry(&list.body, &vol(&stopped_id)).unwrap();
    assert_eq!(s["inUse"], false);
    assert_eq!(s["orphaned"], false);
    assert_eq!(s["sandboxStatus"], "STOPPED");
    let g = entry(&list.body, &vol(&gone_id)).unwrap();
    assert_eq!(
        g["orphaned"], true,
        "a preserved volume of a destroyed sandbox"
    );
    assert_eq!(g["inUse"], false);
    assert_eq!(g["sandboxStatus"], "TERMINATED");
    assert_eq!(g["sizeBytes"], 3_000_000);
    assert_eq!(
        list.body["totalBytes"].as_u64().unwrap(),
        [r, s, g]
            .iter()
            .map(|v| v["sizeBytes"].as_u64().unwrap())
            .sum::<u64>()
    );

    // The sandbox's details show its volume's size.
    let d = app.get(&format!("/api/v1/sandbox/{running_id}"), &t).await;
    assert_eq!(d.body["volume"]["sizeBytes"], r["sizeBytes"]);
    assert_eq!(d.body["volume"]["size"], "5.0 MB");

    // A live sandbox's volume is not deleted.
    let r = app
        .delete(&format!("/api/v1/volumes/{}", vol(running_id)), &t)
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(
        r.body["error"]["message"],
        "Volume is in use by running sandbox"
    );
    let r = app
        .delete(&format!("/api/v1/volumes/{}", vol(&stopped_id)), &t)
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("STOPPED") && msg.contains("Destroy the sandbox"),
        "{msg}"
    );
    assert!(volume_exists(running_id) && volume_exists(&stopped_id));

    // Bad names and foreign volumes.
    let r = app.delete("/api/v1/volumes/not-a-volume", &t).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["name"]);
    let r = app
        .delete(&format!("/api/v1/volumes/{}", other_instance.0), &t)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let r = app.get("/api/v1/volumes?orphaned=yes", &t).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), vec!["orphaned"]);

    // The orphan list, then the confirmed cleanup.
    let orphans = app.get("/api/v1/volumes/orphaned", &t).await;
    assert_eq!(names(&orphans.body), vec![vol(&gone_id)]);
    assert_eq!(orphans.body["totalBytes"], 3_000_000);
    for q in ["", "?confirm=false", "?confirm=maybe"] {
        let r = app
            .delete(&format!("/api/v1/volumes/orphaned{q}"), &t)
            .await;
        r.assert_status(StatusCode::BAD_REQUEST, q);
        assert_eq!(r.error_fields(), vec!["confirm"]);
    }
    assert!(volume_exists(&gone_id));
    let r = app
        .delete("/api/v1/volumes/orphaned?confirm=true", &t)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body["removed"],
        json!([{ "name": vol(&gone_id), "sandboxId": gone_id, "sizeBytes": 3_000_000, "size": "3.0 MB" }])
    );
    assert_eq!(r.body["freedBytes"], 3_000_000);
    assert_eq!(r.body["freed"], "3.0 MB");
    assert_eq!(r.body["failed"], json!([]));
    assert!(!volume_exists(&gone_id));
    assert!(volume_exists(running_id) && volume_exists(&stopped_id));
    assert!(other_instance.exists() && unlabelled.exists());
    let orphans = app.get("/api/v1/volumes/orphaned", &t).await;
    assert_eq!(orphans.body["total"], 0);
    let r = app
        .delete("/api/v1/volumes/orphaned?confirm=true", &t)
        .await;
    assert_eq!(r.body["freedBytes"], 0);

    // One orphan at a time: its size is reported, a second delete is 404.
    let r = app
        .delete_sandbox(&t, &stopped_id, "preserveVolume=true")
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let one = app
        .get(&format!("/api/v1/volumes/{}", vol(&stopped_id)), &t)
        .await;
    assert_eq!(one.body["orphaned"], true);
    let r = app
        .delete(&format!("/api/v1/volumes/{}", vol(&stopped_id)), &t)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["name"], vol(&stopped_id));
    assert_eq!(r.body["sizeBytes"], one.body["sizeBytes"]);
    assert!(!volume_exists(&stopped_id));
    let r = app
        .delete(&format!("/api/v1/volumes/{}", vol(&stopped_id)), &t)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread")]
async fn accounts_see_and_delete_only_their_own_volumes() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice", "bob"]).await;
    let a = app.create(&alice, json!({ "name": "a" })).await;
    let a_id = a["id"].as_str().unwrap();
    let a_orphan_id = app.create_id(&alice, json!({ "name": "a-orphan" })).await;
    let b_id = app.create_id(&bob, json!({ "name": "b" })).await;
    let r = app
        .delete_sandbox(&alice, &a_orphan_id, "preserveVolume=true")
        .await;
    assert_eq!(r.status, StatusCode::OK);

    let r = app.get("/api/v1/volumes", &bob).await;
    assert_eq!(names(&r.body), vec![vol(&b_id)]);
    let r = app.get("/api/v1/volumes/orphaned", &bob).await;
    assert_eq!(r.body["total"], 0);
    let r = app.get("/api/v1/volumes", &alice).await;
    let mut mine = vec![vol(a_id), vol(&a_orphan_id)];
    mine.sort();
    assert_eq!(names(&r.body), mine);
    // The admin sees every volume of the instance.
    let r = app.get("/api/v1/volumes", &app.admin_token).await;
    assert_eq!(r.body["total"], 3);

    for path in [
        format!("/api/v1/volumes/{}", vol(&a_orphan_id)),
        format!("/api/v1/volumes/{}", vol(a_id)),
    ] {
        let r = app.get(&path, &bob).await;
        r.assert_status(StatusCode::FORBIDDEN, &path);
        let r = app.delete(&path, &bob).await;
        r.assert_status(StatusCode::FORBIDDEN, &path);
        assert_eq!(r.code(), "forbidden");
    }
    let r = app
        .delete("/api/v1/volumes/orphaned?confirm=true", &bob)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["removed"], json!([]));
    assert!(
        volume_exists(&a_orphan_id),
        "bob's cleanup removed alice's orphan"
    );

    let r = app
        .delete("/api/v1/volumes/orphaned?confirm=true", &alice)
        .await;
    assert_eq!(r.body["removed"][0]["name"], vol(&a_orphan_id));
    assert!(!volume_exists(&a_orphan_id));
    assert!(volume_exists(a_id) && volume_exists(&b_id));

    let r = app
        .call(reqwest::Method::GET, "/api/v1/volumes", None, None)
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}
