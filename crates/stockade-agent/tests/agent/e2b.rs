//! The real `e2b` Python SDK against the agent, when a virtualenv with
//! `e2b==2.63.0` is named by `STOCKADE_E2B_VENV` (skipped otherwise).

use crate::helpers::{Agent, TOKEN};

fn venv_python() -> Option<std::path::PathBuf> {
    let venv = std::env::var_os("STOCKADE_E2B_VENV")?;
    Some(std::path::Path::new(&venv).join("bin/python"))
}

async fn conformance(http_version: &str) {
    let Some(python) = venv_python() else {
        eprintln!("STOCKADE_E2B_VENV is not set: skipping the e2b SDK conformance check");
        return;
    };
    let agent = Agent::start().await;
    let script = crate::manifest_dir().join("tests/e2b_conformance.py");
    let script = script.to_string_lossy().into_owned();
    let workdir = agent.dir.path().to_string_lossy().into_owned();
    let url = format!("http://{}", agent.addr);
    let out = tokio::process::Command::new(python)
        .args([&script, &url, TOKEN, &workdir, http_version])
        .output()
        .await
        .expect("the venv's python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "e2b conformance ({http_version}) failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("5 passed, 0 failed"), "{stdout}");
}

#[tokio::test]
async fn e2b_python_sdk_over_http1() {
    conformance("1.1").await;
}

#[tokio::test]
async fn e2b_python_sdk_over_h2c() {
    conformance("2").await;
}
