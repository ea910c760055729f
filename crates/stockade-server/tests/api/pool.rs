//! The warm pool. Fitting creates claim a pre-made sandbox and the
//! pool refills; other creates are made cold; members are nobody's (never
//! listed, never shared: each has a fresh volume); a restart adopts or
//! removes them; a claimed sandbox is destroyed like any other.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use stockade_service::pool::{PoolClassConfig, PoolConfig};

use crate::helpers::*;

fn with_pool(size: usize, drain: bool) -> AppOptions {
    with_pool_checked(size, drain, Duration::from_millis(200))
}

/// A pool whose members are checked every `check_interval`.
fn with_pool_checked(size: usize, drain: bool, check_interval: Duration) -> AppOptions {
    AppOptions {
        configure: Some(Box::new(move |c| {
            c.service.pool = PoolConfig {
                classes: vec![PoolClassConfig::default_class(size)],
                check_interval,
                drain_on_shutdown: drain,
                max_concurrent_fills: 2,
            };
        })),
        ..Default::default()
    }
}

/// Waits until the pool holds `n` ready members; returns their ids.
async fn full_pool(app: &TestApp, n: usize) -> BTreeSet<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if app.state.svc.pool().ready_total() >= n {
            return members(app);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the warm pool did not fill to {n}: {:?}",
            app.state.svc.pool()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The pool members of this app's instance, as Docker lists them.
fn members(app: &TestApp) -> BTreeSet<String> {
    docker_lines(&[
        "ps",
        "--filter",
        &format!("label=io.stockade.instance-id={}", app.instance_id()),
        "--filter",
        "label=io.stockade.pool-member",
        "--format",
        "{{.Label \"io.stockade.sandbox-id\"}}",
    ])
    .into_iter()
    // Still a member: ready in the pool, claimed by no record.
    .filter(|id| {
        stockade_core::SandboxId::parse(id).is_ok_and(|id| app.state.svc.pool().holds(&id))
    })
    .collect()
}

/// Waits up to 30 s for `done`.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The output of `script` run in sandbox `id` through the API (200 asserted).
async fn shell(app: &TestApp, t: &str, id: &str, script: &str) -> String {
    let r = app
        .sandbox_post(t, id, "exec", json!({ "shell": script }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["stdout"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn fitting_creates_claim_a_member_and_the_pool_refills() {
    let mut app = spawn_app_with(with_pool(2, false)).await;
    let t = app.admin_token.clone();
    let ready = full_pool(&app, 2).await;
    assert_eq!(ready.len(), 2, "{ready:?}");
    for id in &ready {
        // Made ahead: running, labelled as a member, owned by no account.
        let labels = inspect(id, "{{json .Config.Labels}}");
        let labels: serde_json::Value = serde_json::from_str(&labels[0]).unwrap();
        assert_eq!(labels["io.stockade.pool-member"], id.as_str());
        assert!(labels.get("io.stockade.account-id").is_none(), "{labels}");
        assert!(volume_exists(id));
        let r = app.get(&format!("/api/v1/sandbox/{id}"), &t).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    }

    // A create with a name, labels and environment fits the default class.
    let sb = app
        .create(
            &t,
            json!({ "name": "warm", "labels": ["fast"], "environmentVars": { "GREETING": "hi there" } }),
        )
        .await;
    let id = sb["id"].as_str().unwrap().to_owned();
    assert!(ready.contains(&id), "{id} is not one of {ready:?}");
    assert_eq!(sb["name"], "warm");
    assert_eq!(sb["labels"], json!(["fast"]));
    assert_eq!(sb["volume"]["name"], format!("agent-sandbox-{id}"));
    let out = shell(
        &app,
        &t,
        &id,
        "echo \"$GREETING\"; hostname; pwd; ls -A /workspace | wc -l",
    )
    .await;
    assert_eq!(out, format!("hi there\n{id}\n/workspace\n0\n"));
    let listed = app.get("/api/v1/sandbox?labels=fast", &t).await;
    assert_eq!(listed.body["total"], 1);
    assert_eq!(listed.body["sandboxes"][0]["id"], id.as_str());

    // The environment also reaches the main process after a restart of the
    // sandbox (it was written for its next start).
    let r = app.act(&t, &id, "stop?timeout=5").await;
    assert_eq!(r.body["status"], "STOPPED", "{:?}", r.body);
    let r = app.act(&t, &id, "start").await;
    assert_eq!(r.body["status"], "RUNNING", "{:?}", r.body);
    assert_eq!(
        sh_in(
            &id,
            "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -m1 '^GREETING='"
        ),
        "GREETING=hi there"
    );

    // The pool makes a new member for the one taken.
    let refilled = full_pool(&app, 2).await;
    assert!(!refilled.contains(&id));
    assert_eq!(refilled.len(), 2);
    let metrics = app.get_raw("/metrics").await.text().await.unwrap();
    let class = &app.state.svc.pool().classes()[0].key;
    assert_contains(
        &metrics,
        &format!("stockade_pool_ready{{class=\"{class}\"}} 2\n"),
    );
    assert_contains(&metrics, "stockade_pool_claims_total{result=\"hit\"} 1\n");
    assert_contains(&metrics, "stockade_pool_claims_total{result=\"miss\"} 0\n");

    // A claimed sandbox is destroyed like any other: container and volume go.
    let r = app.delete(&format!("/api/v1/sandbox/{id}"), &t).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "TERMINATED");
    assert!(!container_exists(&id));
    assert!(!volume_exists(&id));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_that_died_while_ready_is_never_handed_out() {
    // Checked rarely, so the claims meet the dead members before the check.
    let mut app = spawn_app_with(with_pool_checked(2, false, Duration::from_secs(600))).await;
    let t = app.admin_token.clone();
    let dead = full_pool(&app, 2).await;
    // Docker says they do not run: the claims discard them and the
    // creates are made cold instead.
    for id in &dead {
        docker_lines(&["kill", &format!("stockade-{id}")]);
    }
    for name in ["after-a", "after-b"] {
        let sb = app.create(&t, json!({ "name": name })).await;
        let id = sb["id"].as_str().unwrap().to_owned();
        assert!(!dead.contains(&id), "a dead member was handed out: {id}");
        assert_eq!(sb["status"], "RUNNING", "{sb}");
        assert_eq!(shell(&app, &t, &id, "echo alive").await, "alive\n");
    }
    // The dead members are removed, not left behind.
    eventually("the dead members removed", || {
        dead.iter().all(|id| !container_exists(id))
    })
    .await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn creates_that_do_not_fit_are_made_cold_and_leave_the_pool_alone() {
    let mut app = spawn_app_with(with_pool(1, false)).await;
    let t = app.admin_token.clone();
    let ready = full_pool(&app, 1).await;
    for (body, key) in [
        (json!({ "cpuCores": 2 }), None),
        (json!({ "memoryGB": 1 }), None),
        (json!({ "startCommand": "sleep 1000" }), None),
        (json!({ "networkAccess": false }), None),
        (json!({}), Some("pool-test-key")),
    ] {
        let mut req = app
            .http
            .post(format!("{}/api/v1/sandbox", app.base))
            .bearer_auth(&t)
            .json(&body);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::CREATED, "{body}");
        let sb: serde_json::Value = r.json().await.unwrap();
        let id = sb["id"].as_str().unwrap();
        assert!(!ready.contains(id), "{body} was served from the pool");
        assert_eq!(sb["status"], "RUNNING");
    }
    assert_eq!(members(&app), ready, "the member is still there, unclaimed");
    // A name already taken is a 409, and the member stays in the pool.
    app.create(&t, json!({ "name": "taken", "cpuCores": 2 }))
        .await;
    let r = app.try_create(&t, json!({ "name": "taken" })).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(members(&app), ready);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn members_are_nobodys_and_never_carry_one_accounts_data_to_another() {
    let mut app = spawn_app_with(with_pool(2, false)).await;
    let admin = app.admin_token.clone();
    let alice = app.new_account("alice").await;
    let bob = app.new_account("bob").await;
    let ready = full_pool(&app, 2).await;

    // Not listed anywhere: sandboxes, volumes (admin sees all), orphans.
    for token in [&admin, &alice, &bob] {
        let r = app.get("/api/v1/sandbox?is_active=false", token).await;
        assert_eq!(r.body["total"], 0, "{:?}", r.body);
        let r = app.get("/api/v1/sandbox", token).await;
        assert_eq!(r.body["total"], 0, "{:?}", r.body);
    }
    let r = app.get("/api/v1/volumes", &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["volumes"], json!([]), "{:?}", r.body);
    let r = app.get("/api/v1/volumes/orphaned", &admin).await;
    assert_eq!(r.body["volumes"], json!([]));
    for id in &ready {
        let r = app
            .get(&format!("/api/v1/volumes/agent-sandbox-{id}"), &admin)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    }
    let r = app
        .call(
            reqwest::Method::DELETE,
            "/api/v1/volumes/orphaned?confirm=true",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.body["removed"], json!([]), "{:?}", r.body);

    // Alice takes a member and leaves a secret in it.
    let a = app
        .create(
            &alice,
            json!({ "environmentVars": { "SECRET": "alice-only" } }),
        )
        .await;
    let a_id = a["id"].as_str().unwrap().to_owned();
    assert!(ready.contains(&a_id));
    sh_in(
        &a_id,
        "echo alice-data > /workspace/secret.txt; echo root-data > /tmp/secret",
    );
    // Bob takes the other: nothing of Alice's is in it.
    let b_id = app.create_id(&bob, json!({})).await;
    assert!(ready.contains(&b_id) && b_id != a_id);
    let out = shell(
        &app,
        &bob,
        &b_id,
        "ls -A /workspace; ls /tmp; env | grep -c SECRET",
    )
    .await;
    assert_eq!(out, "0\n");
    // Each sees only their own.
    let r = app.get(&format!("/api/v1/sandbox/{a_id}"), &bob).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = app.get("/api/v1/sandbox", &bob).await;
    assert_eq!(r.body["total"], 1);
    assert_eq!(r.body["sandboxes"][0]["id"], b_id.as_str());
    // Their volumes are theirs (the owner comes from the record: a member's
    // volume has no account label).
    let r = app.get("/api/v1/volumes", &alice).await;
    let vols = r.body["volumes"].as_array().unwrap();
    assert_eq!(vols.len(), 1, "{:?}", r.body);
    assert_eq!(vols[0]["sandboxId"], a_id.as_str());
    assert_eq!(vols[0]["accountId"], a["accountId"]);
    assert_eq!(vols[0]["orphaned"], false);

    // Alice's sandbox, destroyed with its volume kept: an orphan she (and
    // only she) sees; it never goes back to the pool.
    let r = app
        .delete_sandbox(&alice, &a_id, "preserveVolume=true")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = app.get("/api/v1/volumes/orphaned", &alice).await;
    let vols = r.body["volumes"].as_array().unwrap();
    assert_eq!(vols.len(), 1, "{:?}", r.body);
    assert_eq!(vols[0]["sandboxId"], a_id.as_str());
    assert_eq!(vols[0]["accountId"], a["accountId"]);
    let r = app.get("/api/v1/volumes/orphaned", &bob).await;
    assert_eq!(r.body["volumes"], json!([]));
    let refilled = full_pool(&app, 2).await;
    assert!(!refilled.contains(&a_id) && !refilled.contains(&b_id));
    let r = app
        .delete(&format!("/api/v1/volumes/agent-sandbox-{a_id}"), &alice)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_adopts_members_removes_the_surplus_and_leaves_claimed_sandboxes_alone() {
    let mut first = spawn_app_with(with_pool(3, false)).await;
    first.cleanup_on_drop = false;
    // Removes what this instance made when the test ends, however it ends.
    let _cleanup = InstanceCleanup(first.instance_id());
    let t = first.admin_token.clone();
    let ready = full_pool(&first, 3).await;
    let claimed = first.create(&t, json!({ "name": "kept" })).await;
    let claimed_id = claimed["id"].as_str().unwrap().to_owned();
    assert!(ready.contains(&claimed_id));
    sh_in(&claimed_id, "echo mine > /workspace/f");
    full_pool(&first, 3).await;
    first.shutdown().await;
    let dir = first.dir.clone();
    let instance = first.instance_id();
    drop(first);
    let before = docker_lines(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=io.stockade.instance-id={instance}"),
        "--filter",
        "label=io.stockade.pool-member",
    ]);
    assert_eq!(
        before.len(),
        4,
        "three members and the claimed sandbox stay running"
    );

    // Restarted with a smaller pool: two members adopted, one removed; the
    // claimed sandbox is a sandbox like any other and keeps its data.
    let mut opts = with_pool(2, true);
    opts.dir = Some(dir);
    let mut second = spawn_app_with(opts).await;
    assert_eq!(second.instance_id(), instance);
    let adopted = full_pool(&second, 2).await;
    assert_eq!(adopted.len(), 2);
    assert!(!adopted.contains(&claimed_id));
    let r = second
        .get(&format!("/api/v1/sandbox/{claimed_id}"), &t)
        .await;
    assert_eq!(r.body["status"], "RUNNING", "{:?}", r.body);
    assert_eq!(sh_in(&claimed_id, "cat /workspace/f"), "mine");
    let report = stockade_service::reconcile::reconcile_once(&second.state.svc)
        .await
        .unwrap();
    assert_eq!(report.unknown_containers, 0, "{report:?}");
    assert_eq!(report.corrected, 0, "{report:?}");
    let r = second
        .get(&format!("/api/v1/sandbox/{claimed_id}"), &t)
        .await;
    assert_eq!(r.body["status"], "RUNNING", "{:?}", r.body);
    let running = || {
        docker_lines(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=io.stockade.instance-id={instance}"),
            "--filter",
            "label=io.stockade.pool-member",
        ])
        .len()
    };
    eventually("the surplus member is removed", || running() == 3).await;

    // Shut down with drain: the members go, the claimed sandbox stays.
    second.shutdown().await;
    for id in &adopted {
        assert!(!container_exists(id), "member {id} was not drained");
        assert!(!volume_exists(id));
    }
    assert!(container_exists(&claimed_id));

    // A server without a pool removes members an earlier run left behind.
    let mut third = spawn_app_with(with_pool(1, false)).await;
    let _cleanup_third = InstanceCleanup(third.instance_id());
    let leftover = full_pool(&third, 1).await;
    third.shutdown().await;
    let dir = third.dir.clone();
    third.cleanup_on_drop = false;
    drop(third);
    let fourth = spawn_app_with(AppOptions {
        dir: Some(dir),
        ..Default::default()
    })
    .await;
    eventually("the leftover member is removed", || {
        leftover
            .iter()
            .all(|id| !container_exists(id) && !volume_exists(id))
    })
    .await;
    drop(fourth);
}

struct InstanceCleanup(String);

impl Drop for InstanceCleanup {
    fn drop(&mut self) {
        cleanup_instance(&self.0);
    }
}

/// A member that died leaves its address to the next container. One that
/// took it and answers at the agent's port (health, and an identity proof
/// it cannot know) is never handed out as the member: the claim asks the
/// member's agent to prove that it holds the member's token, the impostor
/// fails, and the member is discarded and the create made cold.
#[tokio::test(flavor = "multi_thread")]
async fn an_impostor_at_a_dead_members_address_is_never_handed_out() {
    let mut app = spawn_app_with(with_pool_checked(1, false, Duration::from_secs(600))).await;
    let t = app.admin_token.clone();
    let member = full_pool(&app, 1).await.into_iter().next().unwrap();
    let member_id = stockade_core::SandboxId::parse(&member).unwrap();
    eventually("the member's agent reached", || {
        app.state.svc.member_reached(&member_id)
    })
    .await;
    let name = stockade_runtime::container_name(&member_id);
    let net = docker_lines(&[
        "inspect",
        "-f",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{$v.IPAddress}}{{end}}",
        &name,
    ]);
    let (network, ip) = net[0].split_once(' ').unwrap();
    docker_lines(&["kill", &name]);

    // The impostor, at the member's address, on its network.
    let impostor = format!("stockade-impostor-{member}");
    let script = format!(
        "mkdir -p /w && echo ok > /w/health && echo '{{\"proof\":\"{}\"}}' > /w/identity \
         && exec httpd -f -p {} -h /w",
        "0".repeat(64),
        stockade_runtime::AGENT_PORT
    );
    let label = format!("io.stockade.instance-id={}", app.instance_id());
    let out = docker(&[
        "run",
        "-d",
        "--name",
        &impostor,
        "--label",
        &label,
        "--network",
        network,
        "--ip",
        ip,
        &test_image(),
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = format!("http://{ip}:{}/health", stockade_runtime::AGENT_PORT);
    let answers = crate::helpers::eventually(Duration::from_secs(20), || {
        let url = url.clone();
        async move {
            reqwest::get(&url)
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    })
    .await;
    assert!(answers.is_some(), "the impostor does not answer at {url}");

    let sb = app.create(&t, json!({ "name": "after-impostor" })).await;
    let id = sb["id"].as_str().unwrap().to_owned();
    assert_ne!(id, member, "the dead member was handed out");
    assert_eq!(sb["status"], "RUNNING", "{sb}");
    let out = shell(&app, &t, &id, "cat /w/identity 2>&1 || echo real").await;
    assert!(out.ends_with("real\n"), "{out}");
    eventually("the dead member removed", || !container_exists(&member)).await;
    docker_lines(&["rm", "-f", &impostor]);
    app.shutdown().await;
}
