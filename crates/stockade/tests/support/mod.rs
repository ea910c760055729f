//! Helpers shared by the binary's test suites: the test image, the
//! `stockade server` command with a clean environment, killing a child
//! process however a test ends, listing and removing what Docker holds
//! for an account.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

/// The repository's root, from the crate directory `cargo test` gives when
/// it runs the test: a test binary that another checkout sharing the
/// target directory built would otherwise look in that checkout.
pub fn repo() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || env!("CARGO_MANIFEST_DIR").into(),
            std::path::PathBuf::from,
        )
        .join("../..")
}

/// The image test sandboxes run (`STOCKADE_TEST_IMAGE`, else the local base
/// image).
pub fn image() -> String {
    std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into())
}

/// `stockade server` on `data_dir` with `extra` arguments, listening on a
/// free port, with `admin_token`, SQLite in the data directory, warnings
/// only, and none of the `unset` variables from the caller's environment
/// (so the flags under test are the only source of those settings).
pub fn server_cmd(data_dir: &Path, admin_token: &str, unset: &[&str], extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stockade"));
    cmd.arg("server")
        .args(extra)
        .env("STOCKADE_LISTEN", "127.0.0.1:0")
        .env("STOCKADE_DATA_DIR", data_dir)
        .env("STOCKADE_DEFAULT_IMAGE", image())
        .env("STOCKADE_ADMIN_TOKEN", admin_token)
        .env_remove("STOCKADE_DATABASE_URL");
    for var in unset {
        cmd.env_remove(var);
    }
    cmd.env("STOCKADE_LOG", "warn");
    cmd
}

/// Starts `cmd` with its stdout piped and its stderr discarded: the child
/// and its stdout.
pub fn spawn_piped(cmd: &mut Command) -> (Child, ChildStdout) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().unwrap();
    (child, stdout)
}

/// Hands the lines of a starting server's banner from `rx` to `seen` until
/// it says the banner is complete; the test fails after 60 s.
pub fn read_banner(rx: &std::sync::mpsc::Receiver<String>, mut seen: impl FnMut(String) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .expect("the server printed no banner within 60 s");
        if seen(line) {
            return;
        }
    }
}

/// Runs `cmd`, a server start that must fail because of `flags`: what it
/// printed on stderr.
pub fn refused_start(cmd: &mut Command, flags: &[&str]) -> String {
    let out = cmd.stdout(Stdio::null()).output().unwrap();
    assert!(!out.status.success(), "{flags:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Ends a test's server: removes the sandboxes `token` (when known) sees,
/// kills the process, then removes what its `instance` (when known) left in
/// Docker, snapshot images too with `images`.
pub fn shut_down(
    child: &mut Child,
    url: &str,
    token: Option<&str>,
    instance: Option<&str>,
    images: bool,
) {
    if let Some(token) = token {
        remove_sandboxes(url, token);
    }
    let _ = child.kill();
    let _ = child.wait();
    if let Some(instance) = instance {
        remove_by_filter(&format!("label=io.stockade.instance-id={instance}"), images);
    }
}

/// Kills the child process when dropped, so also when the test fails.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The non-empty lines `docker args…` prints.
pub fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker").args(args).output().expect("docker");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

/// The instance id of the server that made sandbox `sandbox_id`, from its
/// container's label (none once the container is gone).
pub fn instance_of(sandbox_id: &str) -> Option<String> {
    docker_lines(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=io.stockade.sandbox-id={sandbox_id}"),
        "--format",
        "{{.Label \"io.stockade.instance-id\"}}",
    ])
    .into_iter()
    .next()
}

/// Removes every container and volume of the account (its id), whatever
/// happens.
pub struct AccountCleanup(pub String);

impl Drop for AccountCleanup {
    fn drop(&mut self) {
        remove_by_filter(&format!("label=io.stockade.account-id={}", self.0), false);
    }
}

/// Removes the containers and volumes Docker lists for `filter` and, with
/// `images`, the (snapshot) images and template layers too: again while a
/// pass removes some, since a layer is refused while an image built on it
/// is left.
pub fn remove_by_filter(filter: &str, images: bool) {
    let mut kinds = vec![
        (
            vec!["ps", "-aq", "--filter", filter],
            vec!["rm", "-f", "-v"],
        ),
        (
            vec!["volume", "ls", "-q", "--filter", filter],
            vec!["volume", "rm", "-f"],
        ),
    ];
    if images {
        kinds.push((vec!["images", "-q", "--filter", filter], vec!["rmi", "-f"]));
    }
    for (list, remove) in kinds {
        let mut ids = docker_lines(&list);
        while !ids.is_empty() {
            let mut args = remove.clone();
            args.extend(ids.iter().map(String::as_str));
            let _ = Command::new("docker").args(&args).output();
            let left = docker_lines(&list);
            if left.len() >= ids.len() {
                break;
            }
            ids = left;
        }
    }
}

/// Removes every sandbox `stockade ls` lists on the server at `url` for
/// `token`, ignoring failures.
pub fn remove_sandboxes(url: &str, token: &str) {
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_stockade"))
            .args(args)
            .env("STOCKADE_URL", url)
            .env("STOCKADE_TOKEN", token)
            .output()
    };
    if let Ok(out) = cli(&["ls", "--json", "--per-page", "1000"]) {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
            for sb in v["sandboxes"].as_array().cloned().unwrap_or_default() {
                let _ = cli(&["rm", sb["id"].as_str().unwrap_or_default()]);
            }
        }
    }
}

/// GET `url` with `token`: the answer's JSON body (the test fails if the
/// request does or the body is no JSON).
pub async fn get_json(http: &reqwest::Client, url: String, token: &str) -> serde_json::Value {
    http.get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// POST `body` (if any) to `url` with `token`: the answer's JSON body.
pub async fn post_json(
    http: &reqwest::Client,
    url: String,
    token: &str,
    body: Option<&serde_json::Value>,
) -> serde_json::Value {
    let mut req = http.post(url).bearer_auth(token);
    if let Some(body) = body {
        req = req.json(body);
    }
    req.send().await.unwrap().json().await.unwrap()
}

/// The lines a child prints on `stdout`, read on a thread of its own that
/// drains the pipe to its end (so the child never blocks on a full pipe,
/// also after the receiver is gone).
pub fn lines_of(stdout: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    rx
}

/// The code-interpreter image (`STOCKADE_TEST_IMAGE_CODE`, else the local
/// `stockade-code-interpreter:latest`); `None`, with a line saying the test
/// is skipped, when the variable is unset and the image is not built.
pub fn code_image() -> Option<String> {
    if let Ok(image) = std::env::var("STOCKADE_TEST_IMAGE_CODE") {
        return Some(image);
    }
    let image = "stockade-code-interpreter:latest";
    let present = Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        eprintln!(
            "skipped: no {image} (build it with `scripts/build-image code-interpreter`, \
             or set STOCKADE_TEST_IMAGE_CODE)"
        );
    }
    present.then(|| image.to_owned())
}

/// Webhook requests a receiver got: each one's `e2b-signature` and body.
pub type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// A webhook receiver on `listener`: records each request's
/// `e2b-signature` header and body, answers 204. Plain HTTP/1.1 over
/// tokio, keep-alive included.
pub fn receive_webhooks(listener: tokio::net::TcpListener) -> Received {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let got: Received = Default::default();
    let recorded = got.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let recorded = recorded.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let header = |name: &str| {
                        head.lines()
                            .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_owned))
                            .unwrap_or_default()
                    };
                    let length: usize = header("content-length").parse().unwrap_or(0);
                    let signature = String::from_utf8_lossy(&buf[..end])
                        .lines()
                        .find_map(|l| {
                            l.split_once(':')
                                .filter(|(k, _)| k.eq_ignore_ascii_case("e2b-signature"))
                                .map(|(_, v)| v.trim().to_owned())
                        })
                        .unwrap_or_default();
                    while buf.len() < end + 4 + length {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = buf[end + 4..end + 4 + length].to_vec();
                    buf.drain(..end + 4 + length);
                    recorded.lock().unwrap().push((signature, body));
                    let _ = conn
                        .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                        .await;
                }
            });
        }
    });
    got
}

/// `stockade server` on a data directory of its own, and the client binary
/// run against it with its admin token: what the CLI suites share. Each
/// suite wraps it with the clean-up it needs when dropped.
pub struct CliServer {
    pub child: Child,
    pub url: String,
    pub token: &'static str,
    /// The installation's instance id, once known, for clean-up.
    pub instance: Option<String>,
    _dir: tempfile::TempDir,
}

impl CliServer {
    /// Starts a server with admin token `token`, the variables `unset` left
    /// out of its environment and `extra` flags.
    pub fn start(token: &'static str, unset: &[&str], extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = server_cmd(dir.path(), token, unset, extra);
        let (child, stdout) = spawn_piped(&mut cmd);
        let mut server = Self {
            child,
            url: String::new(),
            token,
            instance: None,
            _dir: dir,
        };
        let rx = lines_of(stdout);
        read_banner(&rx, |line| match line.split("listening on ").nth(1) {
            Some(rest) => {
                server.url = rest.trim().to_owned();
                true
            }
            None => false,
        });
        server
    }

    /// The binary with `args`, this server and its admin token in its
    /// environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stockade"));
        cmd.args(args)
            .env("STOCKADE_URL", &self.url)
            .env("STOCKADE_TOKEN", self.token);
        cmd
    }

    /// What the command printed and how it exited; a command still
    /// running after `limit` is killed (a call that never comes back fails
    /// the test instead of holding it).
    pub fn run_within(&self, args: &[&str], limit: std::time::Duration) -> std::process::Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run stockade");
        let read = |mut pipe: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.read_to_end(&mut buf);
                buf
            })
        };
        let stdout = read(Box::new(child.stdout.take().unwrap()));
        let stderr = read(Box::new(child.stderr.take().unwrap()));
        let status = wait_for(&mut child, limit);
        std::process::Output {
            status,
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
        }
    }

    /// [`Self::run_within`] a minute.
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.run_within(args, std::time::Duration::from_secs(60))
    }

    /// The command's stdout as bytes; the test fails if the command does.
    pub fn ok_bytes(&self, args: &[&str]) -> Vec<u8> {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// The command's stdout; the test fails if the command does.
    pub fn ok(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.ok_bytes(args)).into_owned()
    }

    /// The JSON a successful command printed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let text = self.ok(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {text}"))
    }

    /// The command's stderr; the test fails if the command succeeds or
    /// panics.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        err
    }

    /// Stops the server and removes what its instance left in Docker
    /// (with `token`, its sandboxes through the API first).
    pub fn stop(&mut self, token: Option<&str>) {
        shut_down(
            &mut self.child,
            &self.url,
            token,
            self.instance.as_deref(),
            false,
        );
    }
}

/// Waits for `child` at most `limit`, then kills it; its exit status.
pub fn wait_for(child: &mut Child, limit: std::time::Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return child.wait().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
