//! The hosts registry over HTTP: an administrator registers the real local
//! Docker Engine under a second name (the server connects to it first),
//! sees it with its health, capacity and load, cordons, uncordons and
//! drains it, and removes it once no sandbox is recorded on it; every bad
//! field is a 400 naming it, a tenant gets 403, a taken name 409, and the
//! server's own host is never removed.

use std::collections::BTreeMap;

use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use stockade_core::spec::SpecInput;
use stockade_core::{AccountId, Defaults, Sandbox, SandboxId, SandboxSpec};

use crate::helpers::*;

const ENGINE: &str = "unix:///var/run/docker.sock";

/// A server whose own host is registered (as the server binary does at start).
async fn app() -> TestApp {
    let app = spawn_app().await;
    stockade_service::host_admin::ensure_own(&app.state.svc, ENGINE)
        .await
        .expect("register the own host");
    app
}

async fn patch(app: &TestApp, name: &str, token: &str, body: Value) -> Resp {
    app.call(
        Method::PATCH,
        &format!("/api/v1/hosts/{name}"),
        Some(token),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn hosts_are_registered_listed_cordoned_and_removed() {
    let app = app().await;
    let admin = app.admin_token.clone();

    // The real engine under a second name, with labels and a CPU override.
    let r = app
        .post(
            "/api/v1/hosts",
            &admin,
            json!({"name": "second", "dockerHost": ENGINE, "labels": {"zone": "eu-1"},
                   "capacity": {"cpus": 2}, "address": "127.0.0.1"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let h = &r.body;
    assert_eq!(h["name"], "second");
    assert_eq!(h["dockerHost"], ENGINE);
    assert_eq!(h["state"], "active");
    assert_eq!(h["own"], false);
    assert_eq!(h["labels"], json!({"zone": "eu-1"}));
    assert_eq!(h["address"], "127.0.0.1");
    // The override's CPUs; the engine's own memory, as its check found it.
    assert_eq!(h["capacity"]["cpus"], 2);
    assert!(h["capacity"]["memoryGB"].as_f64().unwrap() > 0.1, "{h}");
    assert_eq!(h["health"]["healthy"], true);
    assert!(h["health"]["cpus"].as_u64().unwrap() >= 1, "{h}");
    assert!(h["health"]["checkedAt"].is_string());
    assert_eq!(h["sandboxes"], 0);

    // Listed by name with the server's own host; read one by one.
    let r = app.get("/api/v1/hosts", &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let hosts = r.body["hosts"].as_array().unwrap();
    let names: Vec<(&str, bool)> = hosts
        .iter()
        .map(|h| (h["name"].as_str().unwrap(), h["own"].as_bool().unwrap()))
        .collect();
    assert_eq!(names, [("local", true), ("second", false)]);
    let r = app.get("/api/v1/hosts/second", &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["health"]["healthy"], true);
    assert_eq!(r.body["capacity"]["cpus"], 2);
    let r = app.get("/api/v1/hosts/nowhere", &admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    // Taken names: a registered host, and the server's own.
    for name in ["second", "local"] {
        let r = app
            .post(
                "/api/v1/hosts",
                &admin,
                json!({"name": name, "dockerHost": ENGINE}),
            )
            .await;
        r.assert_status(StatusCode::CONFLICT, name);
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("host '{name}' exists")),
            "{:?}",
            r.body
        );
    }

    // Cordon (the default reason), drain (a reason given), uncordon.
    let r = patch(&app, "second", &admin, json!({"state": "cordoned"})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["state"], "cordoned");
    assert_eq!(r.body["stateReason"], "cordoned by an administrator");
    assert_eq!(r.body["autoCordoned"], false);
    let r = patch(
        &app,
        "second",
        &admin,
        json!({"state": "draining", "reason": "disk swap"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (&r.body["state"], &r.body["stateReason"]),
        (&json!("draining"), &json!("disk swap"))
    );
    let r = app.get("/api/v1/hosts/second", &admin).await;
    assert_eq!(r.body["state"], "draining");
    let r = patch(
        &app,
        "second",
        &admin,
        json!({"state": "active", "labels": {}, "capacity": null, "address": null}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["state"], "active");
    assert_eq!(r.body["stateReason"], Value::Null);
    assert_eq!(r.body["labels"], json!({}));
    assert_eq!(r.body["address"], Value::Null);
    // Without the override, the capacity is the engine's.
    assert_eq!(r.body["capacity"]["cpus"], r.body["health"]["cpus"]);
    for (body, field) in [
        (json!({"state": "sleeping"}), "state"),
        (json!({"state": "active", "reason": "x"}), "reason"),
        (json!({"capacity": {"cpus": 0}}), "capacity.cpus"),
        (json!({"capacity": {"memoryGB": -1}}), "capacity.memoryGB"),
        (json!({"address": "not an address"}), "address"),
        (json!({"labels": {"bad key": "v"}}), "labels"),
    ] {
        let r = patch(&app, "second", &admin, body.clone()).await;
        r.assert_status(StatusCode::BAD_REQUEST, &body);
        assert_eq!(r.error_fields(), [field], "{body}: {:?}", r.body);
    }
    let r = patch(&app, "nowhere", &admin, json!({"state": "cordoned"})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    // Removal is refused while a record names the host, allowed after.
    let account = AccountId::generate();
    let id = SandboxId::generate();
    let spec = SandboxSpec::from_input(SpecInput::default(), &id, &Defaults::default()).unwrap();
    let sb = Sandbox::new(id, account, None, spec, "second".into(), Utc::now());
    app.state.svc.store().insert_sandbox(&sb).await.unwrap();
    let r = app.get("/api/v1/hosts/second", &admin).await;
    assert_eq!(r.body["sandboxes"], 1);
    assert!(r.body["reserved"]["cpuCores"].as_f64().unwrap() > 0.0);
    let r = app.delete("/api/v1/hosts/second", &admin).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("holds 1 sandbox"), "{message}");
    app.state
        .svc
        .store()
        .soft_delete_sandbox(&sb.id, Utc::now())
        .await
        .unwrap();
    let r = app.delete("/api/v1/hosts/second", &admin).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = app.get("/api/v1/hosts/second", &admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let r = app.delete("/api/v1/hosts/second", &admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    // The server's own host stays.
    let r = app.delete("/api/v1/hosts/local", &admin).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("own Docker host"));
    let r = app.get("/api/v1/hosts/local", &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["own"], true);
}

#[tokio::test]
async fn every_bad_field_is_named() {
    let app = app().await;
    let admin = app.admin_token.clone();
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(&pem, "not really a certificate").unwrap();
    let pem = pem.display().to_string();
    let missing = dir.path().join("missing.pem").display().to_string();
    let ok = |extra: Value| {
        let mut body = json!({"name": "edge", "dockerHost": ENGINE});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let many: BTreeMap<String, String> = (0..33).map(|i| (format!("k{i}"), "v".into())).collect();
    let mut cases = vec![
        (ok(json!({"name": "Bad_Name"})), vec!["name"]),
        (ok(json!({"name": ""})), vec!["name"]),
        (
            ok(json!({"tls": {"ca": pem, "cert": pem, "key": pem}})),
            vec!["tls"],
        ),
        (
            ok(json!({"dockerHost": "tcp://127.0.0.1:2376",
                      "tls": {"ca": pem, "cert": missing, "key": "relative.pem"}})),
            vec!["tls.cert", "tls.key"],
        ),
        (ok(json!({"address": "a b"})), vec!["address"]),
        (ok(json!({"labels": {"": "v"}})), vec!["labels"]),
        (ok(json!({"labels": many})), vec!["labels"]),
        (
            ok(json!({"labels": {"k": "x".repeat(256)}})),
            vec!["labels"],
        ),
        (
            ok(json!({"capacity": {"cpus": 5000}})),
            vec!["capacity.cpus"],
        ),
        (
            ok(json!({"capacity": {"memoryGB": 0}})),
            vec!["capacity.memoryGB"],
        ),
        (
            ok(json!({"capacity": {"memoryGB": 70000}})),
            vec!["capacity.memoryGB"],
        ),
    ];
    // Docker hosts that are malformed, and engines that cannot be reached:
    // no socket, nothing listening.
    let bad_hosts = [
        "/var/run/docker.sock",
        "unix://relative",
        "tcp://127.0.0.1",
        "tcp://127.0.0.1:0",
        "ssh://-x@host",
        "http://127.0.0.1:2375",
        "unix:///nonexistent/docker.sock",
        "tcp://127.0.0.1:1",
    ];
    cases.extend(bad_hosts.map(|host| (ok(json!({ "dockerHost": host })), vec!["dockerHost"])));
    for (body, fields) in cases {
        let r = app.post("/api/v1/hosts", &admin, body.clone()).await;
        r.assert_status(StatusCode::BAD_REQUEST, &body);
        assert_eq!(r.error_fields(), fields, "{body}: {:?}", r.body);
    }
    let r = app
        .post(
            "/api/v1/hosts",
            &admin,
            ok(json!({"dockerHost": "unix:///nonexistent/docker.sock"})),
        )
        .await;
    let message = r.body["error"]["message"].to_string();
    assert!(
        message.contains("could not reach the Docker Engine at unix:///nonexistent/docker.sock"),
        "{message}"
    );
    // Unknown fields and a body that is not JSON are refused too.
    let r = app
        .post("/api/v1/hosts", &admin, ok(json!({"gpu": true})))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    // Nothing was registered.
    let r = app.get("/api/v1/hosts", &admin).await;
    let names = str_list(&r.body["hosts"], "name");
    assert_eq!(names, ["local"]);
}

#[tokio::test]
async fn tenants_are_refused() {
    let app = app().await;
    let tenant = app.new_account("tenant").await;
    let register = json!({"name": "edge", "dockerHost": ENGINE});
    for (method, path, body) in [
        (Method::POST, "/api/v1/hosts", Some(register)),
        (Method::GET, "/api/v1/hosts", None),
        (Method::GET, "/api/v1/hosts/local", None),
        (
            Method::PATCH,
            "/api/v1/hosts/local",
            Some(json!({"state": "cordoned"})),
        ),
        (Method::DELETE, "/api/v1/hosts/local", None),
    ] {
        let r = app.call(method.clone(), path, Some(&tenant), body).await;
        r.assert_status(StatusCode::FORBIDDEN, format!("{method} {path}"));
        let r = app.call(method.clone(), path, None, None).await;
        r.assert_status(StatusCode::UNAUTHORIZED, format!("{method} {path}"));
    }
    let r = app.get("/api/v1/hosts/local", &app.admin_token).await;
    assert_eq!(r.body["state"], "active");
}

/// A real sandbox on the server's own host counts in its load.
#[tokio::test]
async fn the_own_host_shows_what_runs_there() {
    let app = app().await;
    let admin = app.admin_token.clone();
    let sb = app
        .create(&admin, json!({"cpuCores": 0.5, "memoryGB": 0.25}))
        .await;
    assert_eq!(sb["server"], "local");
    let r = app.get("/api/v1/hosts/local", &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["sandboxes"], 1);
    assert_eq!(
        r.body["reserved"],
        json!({"cpuCores": 0.5, "memoryGB": 0.25})
    );
    let r = app
        .delete(
            &format!("/api/v1/sandbox/{}", sb["id"].as_str().unwrap()),
            &admin,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = app.get("/api/v1/hosts/local", &admin).await;
    assert_eq!(r.body["sandboxes"], 0);
}
