//! The agent as the parent of a main process: its env file, its exit
//! status as the agent's, and forwarded signals.

use crate::helpers::{signal, Agent};
use std::time::Duration;

#[tokio::test]
async fn main_process_gets_the_env_file_and_its_status_is_ours() {
    let mut agent = Agent::start_with(|cmd, dir| {
        let env = dir.join("main.env");
        std::fs::write(
            &env,
            "# Written by Stockade\nexport GREETING='it'\\''s here'\nexport MULTI='a\nb'\nunset DROPME\n",
        )
        .unwrap();
        let out = dir.join("main.out");
        cmd.env("DROPME", "x")
            .arg("--main-env")
            .arg(&env)
            .arg("--")
            .arg("/bin/sh")
            .arg("-c")
            .arg(format!(
                "env > {out}.env; printf '%s|%s|%s' \"$GREETING\" \"$MULTI\" \"${{DROPME-unset}}\" > {out}; sleep 0.5; exit 5",
                out = out.display()
            ));
    })
    .await;
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("the agent exits");
    assert_eq!(status.code(), Some(5));
    let out = std::fs::read_to_string(agent.dir.path().join("main.out")).unwrap();
    assert_eq!(out, "it's here|a\nb|unset");
    let env = std::fs::read_to_string(agent.dir.path().join("main.out.env")).unwrap();
    assert!(!env.contains("STOCKADE_AGENT_TOKEN"), "{env}");
}

#[tokio::test]
async fn signals_reach_the_main_process() {
    // A main process that handles SIGTERM finishes its own way.
    let mut agent = Agent::start_with(|cmd, dir| {
        let ready = dir.join("ready");
        cmd.args(["--", "/bin/sh", "-c"]).arg(format!(
            "trap 'exit 42' TERM; touch {}; while :; do sleep 0.05; done",
            ready.display()
        ));
    })
    .await;
    let ready = agent.dir.path().join("ready");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ready.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the main process never got ready"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    signal(agent.pid(), rustix::process::Signal::TERM);
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("the agent exits");
    assert_eq!(status.code(), Some(42));

    // One killed by a signal: 128 + the signal.
    let mut agent = Agent::start_with(|cmd, _| {
        cmd.args(["--", "/bin/sh", "-c", "sleep 0.3; kill -9 $$"]);
    })
    .await;
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("the agent exits");
    assert_eq!(status.code(), Some(137));
}
