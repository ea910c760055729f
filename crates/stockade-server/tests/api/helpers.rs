//! `spawn_app()`: a real server on port 0 with a fresh SQLite database and the
//! real Docker engine; everything it creates is removed when the app drops.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use stockade_runtime::{DockerConfig, DockerRuntime, Runtime};
use stockade_server::{AppState, Bootstrap, RunningServer, ServerConfig};
use stockade_store::{SqliteStore, Store};

pub fn test_image() -> String {
    std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into())
}

/// The host-form proxy domain of test apps: `{port}-{id}.sandboxes.test`.
pub const PROXY_DOMAIN: &str = "sandboxes.test";

pub struct TestApp {
    pub base: String,
    pub admin_token: String,
    pub http: reqwest::Client,
    pub state: AppState,
    pub server: Option<RunningServer>,
    pub dir: Arc<tempfile::TempDir>,
    /// Remove this instance's containers and volumes on drop.
    pub cleanup_on_drop: bool,
}

#[derive(Default)]
pub struct AppOptions {
    pub docker_host: Option<String>,
    pub store: Option<Arc<dyn Store>>,
    pub dir: Option<Arc<tempfile::TempDir>>,
    /// Changes to the server configuration (e.g. small limits).
    pub configure: Option<Configure>,
    /// The object store; default: `blobs/` in the app's temporary directory.
    pub blob_store: Option<stockade_blob::BlobConfig>,
}

/// A change to the server configuration of a test app.
pub type Configure = Box<dyn FnOnce(&mut ServerConfig) + Send>;

pub async fn spawn_app() -> TestApp {
    spawn_app_with(AppOptions::default()).await
}

/// A new app whose server configuration `configure` changed first.
pub async fn spawn_configured(
    configure: impl FnOnce(&mut ServerConfig) + Send + 'static,
) -> TestApp {
    spawn_app_with(AppOptions {
        configure: Some(Box::new(configure)),
        ..Default::default()
    })
    .await
}

/// A new app with one account of each name: the app and the accounts'
/// tokens, in the order of `names`.
pub async fn spawn_with_accounts<const N: usize>(names: [&str; N]) -> (TestApp, [String; N]) {
    let (app, accounts) = spawn_with_account_ids(names).await;
    (app, accounts.map(|(_, token)| token))
}

/// [`spawn_with_accounts`] with each account's id: `(id, token)` a name.
pub async fn spawn_with_account_ids<const N: usize>(
    names: [&str; N],
) -> (TestApp, [(String, String); N]) {
    let app = spawn_app().await;
    let mut accounts = Vec::with_capacity(N);
    for name in names {
        accounts.push(app.new_account_with_id(name).await);
    }
    let accounts = accounts.try_into().expect("one account a name");
    (app, accounts)
}

/// A new app with one running sandbox of the administrator's, made of
/// `body`: the app and the sandbox.
pub async fn spawn_with_sandbox(body: Value) -> (TestApp, Value) {
    let app = spawn_app().await;
    let sandbox = app.create(&app.admin_token, body).await;
    (app, sandbox)
}

/// A new app with an account named `account` and one running sandbox of
/// its, made of `body`: the app, the account's token and the sandbox's id.
pub async fn spawn_with_owned_sandbox(account: &str, body: Value) -> (TestApp, String, String) {
    let app = spawn_app().await;
    let (token, id) = app.owned_sandbox(account, body).await;
    (app, token, id)
}

/// [`spawn_with_sandbox`] with the sandbox's id.
pub async fn spawn_with_sandbox_id(body: Value) -> (TestApp, String) {
    let (app, sandbox) = spawn_with_sandbox(body).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    (app, id)
}

/// A new app whose containers, volumes and images outlive it, for a test
/// that starts another server on them: the test removes them itself.
pub async fn spawn_kept_app() -> TestApp {
    let mut app = spawn_app().await;
    app.cleanup_on_drop = false;
    app
}

/// Connects a registered host as the server binary does: a Docker runtime
/// over its `dockerHost`, named after it.
pub struct DockerFactory;

impl stockade_service::hosts::RuntimeFactory for DockerFactory {
    fn connect(&self, host: &stockade_core::Host) -> Result<Arc<dyn Runtime>, String> {
        // Networks and bridges named after the host, as the binary's
        // factory names them: engines on one machine must not share a
        // bridge name.
        let rt = DockerRuntime::new(DockerConfig {
            host: Some(host.docker_host.clone()),
            server_name: host.name.clone(),
            isolation: stockade_runtime::IsolationConfig::for_host(&host.name),
            ..DockerConfig::default()
        })
        .map_err(|e| e.to_string())?;
        Ok(Arc::new(rt))
    }
}

pub async fn spawn_app_with(opts: AppOptions) -> TestApp {
    let dir = opts
        .dir
        .unwrap_or_else(|| Arc::new(tempfile::tempdir().expect("tempdir")));
    let db_path: PathBuf = dir.path().join("stockade.db");
    let db_url = format!("sqlite://{}", db_path.display());
    let store: Arc<dyn Store> = match opts.store {
        Some(s) => s,
        None => Arc::new(SqliteStore::connect(&db_url).await.expect("open sqlite")),
    };
    let docker_host = opts
        .docker_host
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let mut config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        docker_host,
        ..ServerConfig::default()
    };
    config.service.defaults.image = test_image();
    config.proxy_domain = Some(PROXY_DOMAIN.into());
    // The tests serve git and tarball sources on loopback; the hostile
    // tests take this allowance away again.
    config.service.sources.addresses = loopback_allowed();
    // Registered hosts are connected as the server binary does.
    config.service.hosts.factory = Some(Arc::new(DockerFactory));
    if let Some(configure) = opts.configure {
        configure(&mut config);
    }
    // The packet filter takes the egress filter's opt-in of private
    // blocks, as the server binary gives both `--egress-allow-private`.
    let runtime = DockerRuntime::new(DockerConfig {
        host: Some(config.docker_host.clone()),
        isolation: stockade_runtime::IsolationConfig {
            private: config.service.egress.private.clone(),
            ..Default::default()
        },
        ..DockerConfig::default()
    })
    .expect("docker client");
    let runtime: Arc<dyn Runtime> = Arc::new(runtime);
    config.service.blob_store =
        opts.blob_store
            .unwrap_or_else(|| stockade_blob::BlobConfig::Local {
                dir: dir.path().join("blobs"),
            });
    let admin_token = format!("stk_test_admin_{}", stockade_core::SandboxId::generate());
    match stockade_server::bootstrap(store.as_ref(), Some(&admin_token))
        .await
        .expect("bootstrap")
    {
        Bootstrap::CreatedAdmin { .. } | Bootstrap::RegisteredAdminToken => {}
        Bootstrap::Nothing => {}
    }
    let state = AppState::new(store, runtime, config).await.expect("state");
    let server = stockade_server::spawn(state.clone()).await.expect("spawn");
    TestApp {
        base: format!("http://{}", server.addr),
        admin_token,
        http: reqwest::Client::new(),
        state,
        server: Some(server),

        dir,
        cleanup_on_drop: true,
    }
}

pub struct Resp {
    pub status: StatusCode,
    pub body: Value,
}

impl Resp {
    /// The field names of a validation error.
    pub fn error_fields(&self) -> Vec<String> {
        crate::error_body::fields(&self.body)
    }

    /// Asserts the status (showing the body if it differs); the body.
    #[track_caller]
    pub fn expect(self, status: StatusCode) -> Value {
        assert_eq!(self.status, status, "{:?}", self.body);
        self.body
    }

    /// Asserts the status, naming `what` was asked and showing the body if
    /// it differs.
    #[track_caller]
    pub fn assert_status(&self, status: StatusCode, what: impl std::fmt::Display) {
        assert_eq!(self.status, status, "{what}: {:?}", self.body);
    }

    /// Asserts an error answer: its status and its `error.code`.
    #[track_caller]
    pub fn assert_error(&self, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "{:?}", self.body);
        assert_eq!(self.code(), code, "{:?}", self.body);
    }

    /// The error's message.
    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or_default()
    }

    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }
}

impl TestApp {
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Resp { status, body }
    }

    pub async fn get(&self, path: &str, token: &str) -> Resp {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    /// `METHOD path` with a token and no body at all.
    pub async fn bodiless(&self, method: Method, path: &str, token: &str) -> Resp {
        self.call(method, path, Some(token), None).await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Resp {
        self.call(Method::DELETE, path, Some(token), None).await
    }

    /// POSTs `body` to the sandbox route `/api/v1/sandbox/{id}/{action}`
    /// (`action` may carry a query: `stop?timeout=0`).
    pub async fn sandbox_post(&self, token: &str, id: &str, action: &str, body: Value) -> Resp {
        self.post(&format!("/api/v1/sandbox/{id}/{action}"), token, body)
            .await
    }

    /// POSTs an empty object to a sandbox route: `start`, `stop?timeout=0`,
    /// `fork`, `auth-token`.
    pub async fn act(&self, token: &str, id: &str, action: &str) -> Resp {
        self.sandbox_post(token, id, action, json!({})).await
    }

    /// A port token of sandbox `id` for its owner.
    pub async fn port_token(&self, owner: &str, id: &str) -> String {
        let body = self
            .act(owner, id, "auth-token")
            .await
            .expect(StatusCode::OK);
        body["token"].as_str().unwrap().to_owned()
    }

    /// The OpenAPI document, read without credentials (asserting a 200).
    pub async fn openapi(&self) -> Value {
        let r = self
            .call(Method::GET, "/api/v1/openapi.json", None, None)
            .await;
        r.expect(StatusCode::OK)
    }

    /// `GET /api/v1/sandbox/{id}`.
    pub async fn get_sandbox(&self, token: &str, id: &str) -> Resp {
        self.get(&format!("/api/v1/sandbox/{id}"), token).await
    }

    /// `DELETE /api/v1/sandbox/{id}?{query}` (`query` may be empty).
    pub async fn delete_sandbox(&self, token: &str, id: &str, query: &str) -> Resp {
        let path = match query {
            "" => format!("/api/v1/sandbox/{id}"),
            query => format!("/api/v1/sandbox/{id}?{query}"),
        };
        self.delete(&path, token).await
    }

    /// Runs `command` (an exec body) in sandbox `id` in the background,
    /// asserting a 202: the process as the answer describes it.
    pub async fn background(&self, token: &str, id: &str, mut command: Value) -> Value {
        command["background"] = json!(true);
        let r = self.sandbox_post(token, id, "exec", command).await;
        r.expect(StatusCode::ACCEPTED)
    }

    /// [`TestApp::background`]: the process's id.
    pub async fn background_id(&self, token: &str, id: &str, command: Value) -> String {
        let process = self.background(token, id, command).await;
        process["processId"].as_str().unwrap().to_owned()
    }

    /// Snapshots sandbox `id` as `name` (asserting a 201): the snapshot.
    pub async fn snapshot(&self, token: &str, id: &str, name: &str) -> Value {
        let body = json!({ "name": name });
        let r = self.sandbox_post(token, id, "snapshots", body).await;
        r.expect(StatusCode::CREATED)
    }

    /// [`TestApp::snapshot`]: the snapshot's id.
    pub async fn snapshot_id(&self, token: &str, id: &str, name: &str) -> String {
        let snapshot = self.snapshot(token, id, name).await;
        snapshot["id"].as_str().unwrap().to_owned()
    }

    /// PATCHes sandbox `id` (an update of its limits, name or labels).
    pub async fn patch_sandbox(&self, token: &str, id: &str, body: Value) -> Resp {
        let path = format!("/api/v1/sandbox/{id}");
        self.call(Method::PATCH, &path, Some(token), Some(body))
            .await
    }

    /// Posts a gzipped tar archive to `/api/v1/uploads` as `token`.
    pub fn upload(
        &self,
        token: &str,
        body: impl Into<reqwest::Body>,
    ) -> impl std::future::Future<Output = reqwest::Result<reqwest::Response>> {
        self.http
            .post(format!("{}/api/v1/uploads", self.base))
            .bearer_auth(token)
            .header("content-type", "application/gzip")
            .body(body)
            .send()
    }

    /// Stops this server and starts another on the same directory (its
    /// database and object store) and the same Docker engine.
    pub async fn restart(mut self) -> TestApp {
        self.cleanup_on_drop = false;
        self.shutdown().await;
        let dir = self.dir.clone();
        drop(self);
        spawn_app_with(AppOptions {
            dir: Some(dir),
            ..Default::default()
        })
        .await
    }

    /// A second server on this one's store and runtime with the configuration
    /// changed by `configure`.
    pub async fn second_server(&self, configure: impl FnOnce(&mut ServerConfig)) -> RunningServer {
        let mut config = (*self.state.config).clone();
        configure(&mut config);
        let state = AppState::new(
            self.state.svc.store().clone(),
            self.state.svc.runtime().clone(),
            config,
        )
        .await
        .unwrap();
        stockade_server::spawn(state).await.unwrap()
    }

    /// The snapshot images of this app's instance.
    pub fn snapshot_images(&self) -> Vec<String> {
        docker_lines(&[
            "images",
            "-q",
            "--filter",
            &format!("label=io.stockade.instance-id={}", self.instance_id()),
            "stockade-snapshot",
        ])
    }

    /// Creates a team as the administrator: its id.
    pub async fn new_team(&self, name: &str) -> String {
        let body = json!({ "name": name });
        let r = self.post("/api/v1/teams", &self.admin_token, body).await;
        r.expect(StatusCode::CREATED)["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Adds `account` (an id) to `team` as the administrator.
    pub async fn add_member(&self, team: &str, account: &str) -> Resp {
        let path = format!("/api/v1/teams/{team}/members");
        let body = json!({ "accountId": account });
        self.post(&path, &self.admin_token, body).await
    }

    /// POSTs an empty object to an account route: `disable`, `enable`.
    pub async fn account_act(&self, token: &str, account: &str, action: &str) -> Resp {
        let path = format!("/api/v1/accounts/{account}/{action}");
        self.post(&path, token, json!({})).await
    }

    /// Creates an account and returns its token.
    pub async fn new_account(&self, name: &str) -> String {
        self.new_account_with_id(name).await.1
    }

    /// Creates an account: its id and its token.
    pub async fn new_account_with_id(&self, name: &str) -> (String, String) {
        let r = self
            .post(
                "/api/v1/accounts",
                &self.admin_token,
                json!({ "name": name }),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        (
            r.body["account"]["id"].as_str().unwrap().to_owned(),
            r.body["token"].as_str().unwrap().to_owned(),
        )
    }

    /// Asks to create a sandbox: the answer as it is (a refusal included).
    pub async fn try_create(&self, token: &str, body: Value) -> Resp {
        self.post("/api/v1/sandbox", token, body).await
    }

    /// Creates a sandbox and asserts it is RUNNING.
    pub async fn create(&self, token: &str, body: Value) -> Value {
        let r = self.try_create(token, body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        assert_eq!(r.body["status"], "RUNNING");
        r.body
    }

    /// Creates a sandbox (asserting it is RUNNING) and returns its id.
    pub async fn create_id(&self, token: &str, body: Value) -> String {
        self.create(token, body).await["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// A new account named `account` with one running sandbox made of
    /// `body`: the account's token and the sandbox's id.
    pub async fn owned_sandbox(&self, account: &str, body: Value) -> (String, String) {
        let token = self.new_account(account).await;
        let id = self.create_id(&token, body).await;
        (token, id)
    }

    /// GETs `{base}{path}` with no credentials, as a browser or scraper would.
    pub async fn get_raw(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request")
    }

    pub fn instance_id(&self) -> String {
        self.state.svc.instance_id().to_string()
    }

    /// Containers of this app's instance, as Docker lists them.
    pub fn containers(&self) -> Vec<String> {
        docker_lines(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=io.stockade.instance-id={}", self.instance_id()),
        ])
    }

    /// Volumes of this app's instance.
    pub fn volumes(&self) -> Vec<String> {
        docker_lines(&[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=io.stockade.instance-id={}", self.instance_id()),
        ])
    }

    /// Stops the HTTP server (the records and containers stay).
    pub async fn shutdown(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown.cancel();
            let _ = s.task.await;
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(s) = &self.server {
            s.shutdown.cancel();
        }
        // A warm-pool member being made when the test ended would outlive
        // the cleanup below: give the fills in flight a moment to finish.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.state.svc.pool().filling() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        if self.cleanup_on_drop {
            cleanup_instance(&self.instance_id());
            remove_retired_disks();
        }
    }
}

/// Removes every container and volume labelled with this instance id.
pub fn cleanup_instance(instance: &str) {
    let filter = format!("label=io.stockade.instance-id={instance}");
    let ids = docker_lines(&["ps", "-aq", "--filter", &filter]);
    if !ids.is_empty() {
        let mut args = vec!["rm", "-f", "-v"];
        args.extend(ids.iter().map(String::as_str));
        let _ = Command::new("docker").args(&args).output();
    }
    let vols = docker_lines(&["volume", "ls", "-q", "--filter", &filter]);
    if !vols.is_empty() {
        let mut args = vec!["volume", "rm", "-f"];
        args.extend(vols.iter().map(String::as_str));
        let _ = Command::new("docker").args(&args).output();
        remove_volume_disks(&vols);
    }
    // Snapshot images and template layers carry the instance label too. A
    // layer is refused while an image built on it is left, and one removal
    // may take them in any order: again while that removes some.
    let mut images = docker_lines(&["images", "-q", "--filter", &filter]);
    while !images.is_empty() {
        let mut args = vec!["rmi", "-f"];
        args.extend(images.iter().map(String::as_str));
        let _ = Command::new("docker").args(&args).output();
        let left = docker_lines(&["images", "-q", "--filter", &filter]);
        if left.len() >= images.len() {
            break;
        }
        images = left;
    }
}

/// The file systems of their own that removed volumes bound (where the
/// engine's storage cannot cap `/workspace`): the engine's removal leaves
/// them, as the server's own removal does not (it renames a volume's to
/// `<volume>.removed-<time>` and takes it down behind its answer, which a
/// test's end may cut short).
pub fn remove_volume_disks(volumes: &[String]) {
    remove_disks_where(|name| {
        let volume = name.split(".removed-").next().unwrap_or_default();
        volumes.iter().any(|v| v == volume)
    });
}

/// The removed volumes' file systems of any test whose removal was retired
/// more than five seconds ago and left (its test ended before the task
/// taking it down did).
pub fn remove_retired_disks() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    remove_disks_where(|name| {
        name.rsplit_once(".removed-")
            .and_then(|(_, ms)| ms.parse::<u128>().ok())
            .is_some_and(|ms| now.saturating_sub(ms) > 5_000)
    });
}

/// Unmounts and deletes the folders in the engine's `stockade-disks` whose
/// names `wanted` picks.
fn remove_disks_where(wanted: impl Fn(&str) -> bool) {
    let root = docker_lines(&["info", "-f", "{{.DockerRootDir}}"]);
    let Some(root) = root.first() else { return };
    let disks = PathBuf::from(root).join("stockade-disks");
    let names: Vec<String> = std::fs::read_dir(&disks)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for name in names.into_iter().filter(|n| wanted(n)) {
        let dir = disks.join(&name);
        let _ = Command::new("umount").arg(dir.join("fs")).output();
        let _ = std::fs::remove_dir_all(dir);
    }
}

pub fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI")
}

pub fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = docker(args);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs a shell command inside a sandbox's container; returns stdout.
pub fn sh_in(sandbox_id: &str, script: &str) -> String {
    let container = format!("stockade-{sandbox_id}");
    let out = docker(&["exec", &container, "/bin/sh", "-c", script]);
    let stdout = succeeded(out, "exec failed");
    String::from_utf8_lossy(&stdout).trim().to_owned()
}

/// `docker inspect -f FORMAT` of a sandbox's container, as lines.
pub fn inspect(sandbox_id: &str, format: &str) -> Vec<String> {
    docker_lines(&["inspect", "-f", format, &format!("stockade-{sandbox_id}")])
}

pub fn volume_exists(sandbox_id: &str) -> bool {
    docker(&["volume", "inspect", &format!("agent-sandbox-{sandbox_id}")])
        .status
        .success()
}

pub fn container_exists(sandbox_id: &str) -> bool {
    docker(&["inspect", &format!("stockade-{sandbox_id}")])
        .status
        .success()
}

/// The source of a sandbox made from snapshot `id`.
pub fn snapshot_source(id: &str) -> Value {
    json!({ "type": "snapshot", "snapshotId": id })
}

/// An address policy that lets sources reach this machine's loopback.
pub fn loopback_allowed() -> stockade_core::net::AddressPolicy {
    stockade_core::net::AddressPolicy {
        allow: vec![stockade_core::net::IpNet::parse("127.0.0.0/8").unwrap()],
    }
}

/// A static x86-64 program that calls `io_uring_setup` and prints whether
/// it worked (`io_uring_setup worked` / `io_uring_setup failed: errno N`),
/// built once with the host's C compiler.
pub fn io_uring_probe() -> Vec<u8> {
    static PROBE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    PROBE
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let src = dir.path().join("probe.c");
            std::fs::write(
                &src,
                r#"#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    unsigned char params[120];
    memset(params, 0, sizeof params);
    long fd = syscall(425 /* io_uring_setup */, 8, params);
    if (fd < 0) { printf("io_uring_setup failed: errno %d\n", errno); return 0; }
    printf("io_uring_setup worked\n");
    return 0;
}
"#,
            )
            .unwrap();
            let bin = dir.path().join("probe");
            run_ok(
                Command::new("cc")
                    .args(["-static", "-O1", "-o"])
                    .arg(&bin)
                    .arg(&src),
                "building the io_uring probe with a C compiler (cc)",
            );
            std::fs::read(&bin).unwrap()
        })
        .clone()
}

/// Asserts `text` contains `needle`, showing `text` if not.
#[track_caller]
pub fn assert_contains(text: &str, needle: &str) {
    assert!(text.contains(needle), "{needle:?} not in:\n{text}");
}

/// The `id` of a sandbox (or anything else with one).
pub fn id_of(sb: &Value) -> String {
    sb["id"].as_str().unwrap().to_owned()
}

/// The string `field` of each item of the array `list`.
#[track_caller]
pub fn str_list<'a>(list: &'a Value, field: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .map(|item| item[field].as_str().unwrap())
        .collect()
}

/// Polls `check` for up to `within`; how long it took.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < within {
        if check().await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Both tables' egress chains as `iptables -S` lists them.
pub fn egress_listing() -> String {
    let listing = |args: &[&str]| {
        let out = Command::new("iptables").args(args).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    listing(&["-S", "STOCKADE-EGRESS"]) + &listing(&["-t", "nat", "-S", "STOCKADE-EGRESS"])
}

/// Waits (up to ten seconds) until no egress entry names any of `ids`: a
/// stop or destroy removes its entry right after it answers. The listing
/// last seen.
pub async fn egress_entries_gone(ids: &[&str]) -> String {
    let mut last = String::new();
    eventually(Duration::from_secs(10), || {
        last = egress_listing();
        let gone = !ids.iter().any(|id| last.contains(id));
        async move { gone }
    })
    .await;
    last
}

/// The command lines of the processes running in a sandbox.
pub fn processes(id: &str) -> String {
    sh_in(
        id,
        "for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done",
    )
}

/// Asserts a finished command succeeded, naming `what` ran and showing its
/// stderr if not: its stdout.
#[track_caller]
pub fn succeeded(out: std::process::Output, what: impl std::fmt::Display) -> Vec<u8> {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs `cmd` and asserts it succeeded (see [`succeeded`]): its stdout.
#[track_caller]
pub fn run_ok(cmd: &mut Command, what: &str) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    succeeded(out, what)
}

/// Runs `ip ARGS` and asserts it succeeded.
#[track_caller]
pub fn ip_ok(args: &[&str]) {
    run_ok(
        Command::new("ip").args(args),
        &format!("ip {}", args.join(" ")),
    );
}

/// Makes the bridge `name` with the host at `10.251.{subnet}.1/24`, first
/// removing what a killed earlier run left of it.
pub fn add_bridge(name: &str, subnet: u8) {
    let _ = ip(&["link", "del", name]);
    ip_ok(&["link", "add", name, "type", "bridge"]);
    ip_ok(&["addr", "add", &format!("10.251.{subnet}.1/24"), "dev", name]);
    ip_ok(&["link", "set", name, "up"]);
}

/// Makes the network namespace `{bridge}-{n}` on the bridge, its `eth0` at
/// `10.251.{subnet}.{n}/24`, first removing what a killed earlier run left
/// of it: the namespace's name.
pub fn add_namespace(bridge: &str, subnet: u8, n: u8) -> String {
    let ns = format!("{bridge}-{n}");
    let veth = format!("{bridge}v{n}");
    let _ = ip(&["netns", "del", &ns]);
    ip_ok(&["netns", "add", &ns]);
    ip_ok(&[
        "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
    ]);
    ip_ok(&["link", "set", &veth, "master", bridge, "up"]);
    let addr = format!("10.251.{subnet}.{n}/24");
    ip_ok(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
    ip_ok(&["-n", &ns, "link", "set", "eth0", "up"]);
    ip_ok(&["-n", &ns, "link", "set", "lo", "up"]);
    ns
}

/// A child process, killed and reaped when this drops.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a server that prints `ready` once it listens, and waits for
/// that line (`what` names it if it does not come).
pub fn spawn_ready(cmd: &mut Command, what: &str) -> std::process::Child {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "{what} did not start");
    child
}

/// Runs `ip ARGS` quietly: whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether this machine can build network namespaces for a test (root,
/// `ip` and `python3`); if not, says that `what` is skipped.
pub fn netns_available(what: &str) -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let tools = ip(&["-V"])
        && Command::new("python3")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
    if !(root && tools) {
        eprintln!("skipped ({what}): this needs root, `ip` and `python3`");
    }
    root && tools
}

/// A TCP port nothing listens on at the moment.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A sandbox of the account `token` serving `private` over HTTP on port
/// 8080 (what an attacker aims at); its id and address.
pub async fn victim(app: &TestApp, token: &str) -> (String, String) {
    let victim = app
        .create(
            token,
            serde_json::json!({ "name": "victim", "startCommand": "mkdir -p /w && echo private > /w/index.html && exec httpd -f -p 8080 -h /w" }),
        )
        .await;
    let id = victim["id"].as_str().unwrap().to_owned();
    let ip = sh_in(&id, "hostname -i")
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    (id, ip)
}
