//! A real server on a free port with a fresh SQLite database and the real
//! Docker engine; everything it made is removed on drop.

use std::sync::Arc;

use stockade_runtime::{DockerConfig, DockerRuntime, Runtime};
use stockade_sdk::Client;
use stockade_server::{AppState, RunningServer, ServerConfig};
use stockade_store::{SqliteStore, Store};

pub struct TestServer {
    pub client: Client,
    pub instance: String,
    server: RunningServer,
    _dir: tempfile::TempDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.server.shutdown.cancel();
        let filter = format!("label=io.stockade.instance-id={}", self.instance);
        for args in [
            vec!["ps", "-aq", "--filter", &filter],
            vec!["volume", "ls", "-q", "--filter", &filter],
            // Snapshot images carry the instance label too.
            vec!["images", "-q", "--filter", &filter],
        ] {
            let out = std::process::Command::new("docker")
                .args(&args)
                .output()
                .unwrap();
            let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned)
                .collect();
            if ids.is_empty() {
                continue;
            }
            let mut rm: Vec<&str> = match args[0] {
                "ps" => vec!["rm", "-f", "-v"],
                "volume" => vec!["volume", "rm", "-f"],
                _ => vec!["rmi", "-f"],
            };
            rm.extend(ids.iter().map(String::as_str));
            let _ = std::process::Command::new("docker").args(&rm).output();
        }
    }
}

impl TestServer {
    /// Creates a sandbox with `params`, failing the test if that fails.
    pub async fn create(&self, params: stockade_sdk::CreateParams) -> stockade_sdk::Sandbox {
        stockade_sdk::Sandbox::create(&self.client, params)
            .await
            .unwrap()
    }

    pub fn containers(&self) -> usize {
        self.count_containers("-aq")
    }

    pub fn running_containers(&self) -> usize {
        self.count_containers("-q")
    }

    /// The containers of this server that `docker ps FLAGS` lists.
    fn count_containers(&self, flags: &str) -> usize {
        let out = std::process::Command::new("docker")
            .args([
                "ps",
                flags,
                "--filter",
                &format!("label=io.stockade.instance-id={}", self.instance),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    }
}

/// Asks `check` up to `tries` times, 100 ms apart, until it answers yes;
/// whether it did.
pub async fn eventually<F, Fut>(tries: usize, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..tries {
        if check().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

pub async fn server() -> TestServer {
    server_with(|_| {}).await
}

/// A server whose configuration `configure` adjusts.
pub async fn server_with(configure: impl FnOnce(&mut ServerConfig)) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.unwrap());
    let runtime: Arc<dyn Runtime> = Arc::new(DockerRuntime::new(DockerConfig::default()).unwrap());
    let mut config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..ServerConfig::default()
    };
    config.service.defaults.image =
        std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into());
    config.service.blob_store = stockade_blob::BlobConfig::Local {
        dir: dir.path().join("blobs"),
    };
    // The tests serve git and tarball sources on loopback.
    config.service.sources.addresses = stockade_core::net::AddressPolicy {
        allow: vec![stockade_core::net::IpNet::parse("127.0.0.0/8").unwrap()],
    };
    configure(&mut config);
    let token = format!("stk_sdk_{}", stockade_core::SandboxId::generate());
    stockade_server::bootstrap(store.as_ref(), Some(&token))
        .await
        .unwrap();
    let state = AppState::new(store, runtime, config).await.unwrap();
    let instance = state.svc.instance_id().to_string();
    let server = stockade_server::spawn(state).await.unwrap();
    let client = Client::new(format!("http://{}", server.addr), token).unwrap();
    TestServer {
        client,
        instance,
        server,
        _dir: dir,
    }
}

impl TestServer {
    /// The volumes of this server's instance.
    pub fn volumes(&self) -> Vec<String> {
        let out = std::process::Command::new("docker")
            .args([
                "volume",
                "ls",
                "-q",
                "--filter",
                &format!("label=io.stockade.instance-id={}", self.instance),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// A tar.gz of `(path, content, mode)` entries.
pub fn tar_gz(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    use std::io::Write;
    let mut b = tar::Builder::new(Vec::new());
    for (path, data, mode) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_cksum();
        b.append_data(&mut h, path, *data).unwrap();
    }
    let tar = b.into_inner().unwrap();
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(&tar).unwrap();
    e.finish().unwrap()
}

/// `(path, content)` of every regular file in a tar, in order.
pub fn tar_files(tar: &[u8]) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let mut out = Vec::new();
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().is_file() {
            let path = entry.path().unwrap().display().to_string();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            out.push((path, data));
        }
    }
    out
}
