//! The Stockade server under test: started in this process on a free
//! loopback port with a fresh database, the real Docker runtime and the
//! admin token the benchmark chose — the way the API tests start theirs.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use stockade_runtime::{DockerConfig, DockerRuntime, Runtime};
use stockade_server::ratelimit::{Limit, RateLimitConfig};
use stockade_server::{AppState, RunningServer, ServerConfig};
use stockade_service::hosts::DockerHostFactory;
use stockade_store::Store;

/// A change to the server's configuration (e.g. a warm pool).
pub type Configure = Box<dyn FnOnce(&mut ServerConfig) + Send>;

/// How the server under test is set up.
pub struct ServerOptions {
    pub store: Arc<dyn Store>,
    pub docker_host: String,
    pub image: String,
    /// The OCI runtime of its sandboxes (`runsc` for gVisor); `None`: the
    /// engine's default.
    pub oci_runtime: Option<String>,
    pub configure: Option<Configure>,
}

/// A running server and what a client needs to reach it.
pub struct App {
    pub base: String,
    pub token: String,
    pub state: AppState,
    server: Option<RunningServer>,
    _dir: tempfile::TempDir,
}

impl App {
    pub async fn start(opts: ServerOptions) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir().context("could not create a temporary directory")?;
        let mut config = ServerConfig {
            listen: "127.0.0.1:0".parse().context("loopback address")?,
            docker_host: opts.docker_host.clone(),
            service: stockade_service::ServiceConfig {
                blob_store: stockade_blob::BlobConfig::Local {
                    dir: dir.path().join("blobs"),
                },
                ..Default::default()
            },
            ..ServerConfig::default()
        };
        config.service.defaults.image = opts.image.clone();
        config.service.hosts.own_docker_host = opts.docker_host.clone();
        // The limiter stays on (its cost is part of every request) but so
        // high that the benchmark's thousands of requests never reach it.
        config.rate_limit = Some(RateLimitConfig::uniform(Limit {
            requests: 100_000_000,
            window: Duration::from_secs(60),
        }));
        // Admission control stays on too (its check is part of every
        // create), but the benchmark keeps more default sandboxes (2 GB
        // each) than a small machine's memory: the burst alone is 20 at once.
        config.service.admission.memory_overcommit = Some(1000.0);
        config.service.admission.cpu_overcommit = Some(1000.0);
        if let Some(configure) = opts.configure {
            configure(&mut config);
        }
        // The packet filter takes the egress filter's opt-in of private
        // blocks, as the server binary gives both `--egress-allow-private`.
        let mut docker = DockerConfig {
            host: Some(opts.docker_host.clone()),
            oci_runtime: opts.oci_runtime.clone(),
            ..DockerConfig::default()
        };
        docker.isolation.private = config.service.egress.private.clone();
        let runtime =
            DockerRuntime::new(docker.clone()).context("could not set up the Docker client")?;
        let runtime: Arc<dyn Runtime> = Arc::new(runtime);
        config.service.hosts.factory = Some(Arc::new(DockerHostFactory::new(docker)));
        let token = format!("stk_bench_{}", stockade_core::SandboxId::generate());
        stockade_server::bootstrap(opts.store.as_ref(), Some(&token))
            .await
            .context("could not create the admin account")?;
        let state = AppState::new(opts.store, runtime, config)
            .await
            .context("could not read the server settings")?;
        let server = stockade_server::spawn(state.clone())
            .await
            .context("could not start the server")?;
        // Wait for the first answer, so nothing below measures a cold start.
        let base = format!("http://{}", server.addr);
        let http = reqwest::Client::new();
        for _ in 0..100 {
            if let Ok(r) = http.get(format!("{base}/api/v1/health")).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Self {
            base,
            token,
            state,
            server: Some(server),
            _dir: dir,
        })
    }

    /// This server's instance id: the label on everything it creates.
    pub fn instance_id(&self) -> String {
        self.state.svc.instance_id().to_string()
    }

    /// Stops serving and waits for the background work to end.
    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown.cancel();
            let _ = s.task.await;
        }
    }
}
