//! The in-sandbox agent from the API: commands run through
//! it (its children have the agent, PID 1, for a parent), a sandbox made
//! without one still works through `docker exec`, and background processes
//! live in the agent — a restarted server (or another instance) finds them
//! again and follows them to their end.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use stockade_core::{Defaults, Sandbox, SandboxId, SandboxSpec, SandboxStatus};
use stockade_runtime::prelude::*;
use stockade_runtime::{ContainerSpec, DockerConfig, DockerRuntime};

use crate::helpers::*;

async fn exec(app: &TestApp, t: &str, id: &str, body: serde_json::Value) -> Resp {
    app.post(&format!("/api/v1/sandbox/{id}/exec"), t, body)
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_run_through_the_agent_and_old_sandboxes_through_docker() {
    let (app, t, id) =
        spawn_with_owned_sandbox("agent-user", json!({ "name": "with-agent" })).await;
    let r = exec(
        &app,
        &t,
        &id,
        json!({ "shell": "echo $PPID; cat /proc/1/cmdline | tr '\\000' ' '" }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let out = r.body["stdout"].as_str().unwrap();
    assert!(out.starts_with("1\n"), "not a child of the agent: {out}");
    assert!(out.contains("stockade-agent"), "{out}");
    // The agent's token is nowhere in what a command sees.
    let r = exec(&app, &t, &id, json!({ "shell": "env" })).await;
    let token = app
        .state
        .svc
        .agents()
        .token(&SandboxId::parse(&id).unwrap());
    assert!(
        !r.body["stdout"].as_str().unwrap().contains(&token),
        "the agent's token reached a command"
    );

    // A sandbox made before agents existed: the container has none.
    let old_id = SandboxId::generate();
    let spec = SandboxSpec::from_input(
        Default::default(),
        &old_id,
        &Defaults {
            image: test_image(),
            ..Defaults::default()
        },
    )
    .unwrap();
    let runtime = DockerRuntime::new(DockerConfig::default()).unwrap();
    let account = app
        .state
        .svc
        .store()
        .account_by_token_hash(&stockade_core::account::hash_token(&t))
        .await
        .unwrap()
        .unwrap()
        .0;
    let container = runtime
        .create(&ContainerSpec {
            sandbox_id: old_id.clone(),
            account_id: account.id.clone(),
            instance_id: app.state.svc.instance_id().clone(),
            image: test_image(),
            command: spec.command_argv(),
            env: Default::default(),
            cpu_cores: 1.0,
            memory_bytes: 1 << 30,
            network_access: true,
            hostname: "old".into(),
            agent_token: None,
            disk_bytes: None,
            mounts: Vec::new(),
            workspace_volume: true,
        })
        .await
        .unwrap();
    let mut old = Sandbox::new(
        old_id.clone(),
        account.id.clone(),
        None,
        spec,
        runtime.server_name(),
        chrono::Utc::now(),
    );
    old.container_id = Some(container);
    old.status = SandboxStatus::Running;
    old.started_at = Some(chrono::Utc::now());
    app.state.svc.store().insert_sandbox(&old).await.unwrap();
    let r = exec(
        &app,
        &t,
        old_id.as_str(),
        json!({ "shell": "echo $PPID; echo hi >&2; exit 3" }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body["stdout"], "0\n",
        "docker exec's processes have no parent in the container"
    );
    assert_eq!(r.body["stderr"], "hi\n");
    assert_eq!(r.body["exitCode"], 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn background_processes_outlive_a_server_restart() {
    let first = spawn_kept_app().await;
    let t = first.admin_token.clone();
    let id = first.create_id(&t, json!({ "name": "long-runner" })).await;
    let ticks = "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo tick $i; sleep 0.25; done; exit 7";
    let pid = first
        .background_id(&t, &id, json!({ "shell": ticks }))
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = first.restart().await;
    // The new server finds the process in the agent and follows it.
    let list = second
        .get(&format!("/api/v1/sandbox/{id}/processes"), &t)
        .await;
    assert_eq!(list.status, StatusCode::OK, "{:?}", list.body);
    let found: Vec<&str> = list.body["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["processId"].as_str())
        .collect();
    assert!(found.contains(&pid.as_str()), "{:?}", list.body);
    let waited = second
        .post(
            &format!("/api/v1/sandbox/{id}/processes/{pid}/wait?timeout=20"),
            &t,
            json!({}),
        )
        .await;
    assert_eq!(waited.body["status"], "exited", "{:?}", waited.body);
    assert_eq!(waited.body["exitCode"], 7);
    let stdout = waited.body["stdout"].as_str().unwrap_or_default();
    assert!(
        stdout.contains("tick 12"),
        "output after the restart was not captured: {stdout}"
    );
}

/// A container whose address goes away without a reset (what a stop does
/// to its network): a call on a connection the server already holds to its
/// agent answers within seconds instead of waiting out TCP's retransmissions.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_vanishes_without_a_reset_does_not_hang_calls() {
    let (app, t, id) = spawn_with_owned_sandbox("agent-vanish", json!({})).await;
    // E2B's health call goes to the agent as it is, on a pooled connection.
    let health = || {
        app.http
            .get(format!("{}/e2b/health", app.base))
            .header("x-api-key", &t)
            .header("e2b-sandbox-id", &id)
            .send()
    };
    for _ in 0..3 {
        assert_eq!(health().await.unwrap().status(), StatusCode::NO_CONTENT);
    }
    let container = format!("stockade-{id}");
    let networks = docker_lines(&[
        "inspect",
        "--format",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}}\n{{end}}",
        &container,
    ]);
    assert!(!networks.is_empty(), "{container} is on no network");
    for net in &networks {
        let out = docker(&["network", "disconnect", "-f", net, &container]);
        assert!(out.status.success(), "{out:?}");
    }
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(40), health())
        .await
        .expect("a call to an agent that vanished was still waiting after 40 s")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    // What E2B's SDKs read as "not running".
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    let r = app.delete(&format!("/api/v1/sandbox/{id}"), &t).await;
    assert!(r.status.is_success(), "{:?}", r.body);
}
