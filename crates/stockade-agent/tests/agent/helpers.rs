//! Starting the agent binary for a test: a free loopback port, a temporary
//! directory as working directory, a token; stopped (with its processes)
//! when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use stockade_agent::client::{AgentClient, Endpoint};

pub const TOKEN: &str = "test-token-5f1c";

pub struct Agent {
    child: Option<Child>,
    pub addr: String,
    pub dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn agent_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_stockade-agent"))
}

impl Agent {
    /// An agent without a main process.
    pub async fn start() -> Agent {
        Self::start_with(|_, _| {}).await
    }

    /// An agent whose command line the caller may extend.
    pub async fn start_with(extra: impl Fn(&mut Command, &Path)) -> Agent {
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let addr = format!("127.0.0.1:{}", free_port());
            let mut cmd = Command::new(agent_binary());
            cmd.arg("--listen")
                .arg(&addr)
                .arg("--workdir")
                .arg(dir.path())
                .env("STOCKADE_AGENT_TOKEN", TOKEN)
                .env_remove("STOCKADE_AGENT_LISTEN")
                .stdin(Stdio::null());
            extra(&mut cmd, dir.path());
            let child = cmd.spawn().expect("agent binary starts");
            let mut agent = Agent {
                child: Some(child),
                addr,
                dir,
            };
            if agent.wait_healthy().await {
                return agent;
            }
            agent.stop();
        }
        panic!("the agent did not become healthy");
    }

    async fn wait_healthy(&mut self) -> bool {
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if client.health().await.is_ok() {
                return true;
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    pub fn client(&self) -> AgentClient {
        AgentClient::new(Endpoint::Tcp(self.addr.clone()), Some(TOKEN.into()))
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// A GET of `path` with the access token.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        http()
            .get(self.url(path))
            .header("x-access-token", TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// A POST of `body` to `path` with the access token.
    pub async fn post(&self, path: &str, body: &'static str) -> reqwest::Response {
        http()
            .post(self.url(path))
            .header("x-access-token", TOKEN)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    pub fn path(&self, rel: &str) -> String {
        self.dir.path().join(rel).to_string_lossy().into_owned()
    }

    /// Waits for the agent to exit on its own.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM: the agent kills what it started, then exits.
            signal(child.id(), rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A reqwest client for raw requests.
pub fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// One Connect envelope.
pub fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![flags];
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Splits a streamed body into (flags, payload) envelopes.
pub fn envelopes(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        out.push((body[0], body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    assert!(body.is_empty(), "trailing bytes in a stream");
    out
}
