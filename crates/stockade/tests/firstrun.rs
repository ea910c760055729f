//! The first five minutes as a newcomer lives them: the README's
//! quick-start lines, run unchanged against a server that `scripts/run`
//! starts; `scripts/run` refusing clearly where it cannot set up Docker; the
//! banner and `/health` naming an absent default image with the ways out;
//! and the README's SDK program being exactly the example that compiles.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{image, lines_of, repo};

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// The fenced block right after the HTML comment `<!-- marker -->`.
fn block_after(text: &str, marker: &str) -> String {
    let comment = format!("<!-- {marker} -->");
    let at = text
        .find(&comment)
        .unwrap_or_else(|| panic!("README.md has no {comment}"));
    let rest = &text[at + comment.len()..];
    let open = rest.find("```").expect("a fenced block after the marker");
    let body = &rest[open..];
    let body = &body[body.find('\n').expect("fence line") + 1..];
    let close = body.find("\n```").expect("the block's closing fence");
    body[..close + 1].to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn dockerd_pids() -> String {
    let out = Command::new("pgrep").args(["-x", "dockerd"]).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The README's quick start, line for line, in bash, from a scratch
/// directory that looks like a checkout (`scripts` and `target/release`
/// link to the real ones, the latter to the debug build this test has):
/// the server on a free port (`STOCKADE_LISTEN`, `STOCKADE_URL`) with a
/// scratch data directory and the local test image as its default image.
#[test]
fn readme_quick_start_runs_as_written() {
    let text = readme();
    let lines = block_after(&text, "quickstart");
    let expected = block_after(&text, "quickstart-output");
    assert!(
        lines.contains("scripts/run"),
        "the quick start runs scripts/run"
    );

    let bin = PathBuf::from(env!("CARGO_BIN_EXE_stockade"));
    let debug_dir = bin.parent().unwrap().to_owned();
    let target_dir = debug_dir.parent().unwrap().to_owned();
    let scratch = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("scripts"), scratch.path().join("scripts")).unwrap();
    std::fs::create_dir(scratch.path().join("target")).unwrap();
    std::os::unix::fs::symlink(&debug_dir, scratch.path().join("target/release")).unwrap();
    let data = scratch.path().join("data");

    // Run as pasted, stopping at the first failing line; whatever happens,
    // the sandbox is removed and the server stopped.
    let script = format!(
        "set -e\n\
         trap 'exit 143' TERM\n\
         trap 'stockade rm hello >/dev/null 2>&1 || true; [ -n \"$!\" ] && kill \"$!\" 2>/dev/null; wait' EXIT\n\
         {lines}"
    );
    std::fs::write(scratch.path().join("quickstart.sh"), &script).unwrap();
    let port = free_port();
    let started = Instant::now();
    let out = Command::new("timeout")
        .args(["-s", "TERM", "1200", "bash", "quickstart.sh"])
        .current_dir(scratch.path())
        .env("STOCKADE_LISTEN", format!("127.0.0.1:{port}"))
        .env("STOCKADE_URL", format!("http://127.0.0.1:{port}"))
        .env("STOCKADE_DATA_DIR", &data)
        .env("STOCKADE_DEFAULT_IMAGE", image())
        .env("STOCKADE_RUN_PROFILE", "debug")
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("STOCKADE_LOG", "warn")
        .env_remove("STOCKADE_TOKEN")
        .env_remove("STOCKADE_ADMIN_TOKEN")
        .env_remove("STOCKADE_DATABASE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run bash");
    let log = std::fs::read_to_string(scratch.path().join("stockade.log")).unwrap_or_default();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the quick start failed ({:?}):\nstdout:\n{stdout}\nstderr:\n{}\nstockade.log:\n{log}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.ends_with(&expected),
        "the last command printed something else than the README shows:\nexpected the end:\n{expected}\ngot:\n{stdout}"
    );
    // The run script said what it would do, built nothing new, and the
    // server's banner shows the default image as present.
    assert!(log.contains("scripts/run: on "), "{log}");
    assert!(
        log.contains(&format!(
            "image:     {} (the default image) is present",
            image()
        )),
        "{log}"
    );
    assert!(
        log.contains("runtimes:  code-interpreter-v1 = stockade-code-interpreter:latest (")
            && log.contains("node20 = node:20-bookworm"),
        "{log}"
    );
    assert!(
        data.join("stockade.db").exists(),
        "SQLite in the data directory"
    );
    eprintln!("quick start ran in {:?}", started.elapsed());
}

/// Copies `scripts/run` and the library it sources into a directory
/// everyone may read, so that an unprivileged user can run them; none
/// (the test is skipped) when not root, which the test needs `why`.
fn run_script_copy_as_root(why: &str) -> Option<tempfile::TempDir> {
    if !is_root() {
        eprintln!("skipped: needs root {why}");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("scripts/lib")).unwrap();
    for file in ["scripts/run", "scripts/lib/docker.sh"] {
        std::fs::copy(repo().join(file), dir.path().join(file)).unwrap();
    }
    let chmod = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(chmod.success());
    Some(dir)
}

/// Not root and not allowed to use Docker (the user `nobody`, as on a
/// machine where the user is not in the `docker` group): `scripts/run`
/// changes nothing and prints the commands that would fix it.
#[test]
fn run_script_refuses_clearly_without_docker_access() {
    let Some(copy) = run_script_copy_as_root("to run scripts/run as the user nobody") else {
        return;
    };
    let before = dockerd_pids();
    let script = copy.path().join("scripts/run");
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--", "env", "-i"])
        .arg("HOME=/nonexistent")
        .arg("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .arg(&script)
        .args(["--listen", "127.0.0.1:1"])
        .stdin(Stdio::null())
        .output()
        .expect("runuser");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout: {out:?}");
    let as_root = format!("sudo {} --listen 127.0.0.1:1", script.display());
    for (said, why) in [
        ("nothing was changed", "changes nothing"),
        ("user nobody may not use it", "names the problem"),
        (
            "sudo usermod -aG docker nobody",
            "how to join the docker group",
        ),
        (&as_root, "how to run it as root, with the same arguments"),
        ("rustup", "nobody has no cargo either"),
    ] {
        assert!(stderr.contains(said), "{why}: {stderr}");
    }
    assert_eq!(dockerd_pids(), before, "the running engine was not touched");
}

/// Root, but no `docker` command and no `apt-get` (another distribution):
/// `scripts/run` says to install Docker Engine and run it again, and the
/// engine that is running is left alone.
#[test]
fn run_script_refuses_clearly_without_apt_get() {
    let Some(copy) = run_script_copy_as_root("to keep docker and apt-get off the PATH") else {
        return;
    };
    // A PATH with the basic tools only: no docker, no apt-get.
    let bin = tempfile::tempdir().unwrap();
    for tool in [
        "bash", "env", "id", "sed", "grep", "cat", "dirname", "readlink", "printf", "getent",
        "cut", "sleep",
    ] {
        let found = Command::new("bash")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let path = String::from_utf8_lossy(&found.stdout).trim().to_owned();
        if path.starts_with('/') {
            std::os::unix::fs::symlink(&path, bin.path().join(tool)).unwrap();
        }
    }
    let before = dockerd_pids();
    let script = copy.path().join("scripts/run");
    let out = Command::new(&script)
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("PATH", bin.path())
        .stdin(Stdio::null())
        .output()
        .expect("scripts/run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for said in [
        "nothing was changed",
        "Docker Engine is not installed, and without apt-get",
        "https://docs.docker.com/engine/install/",
        &format!("then run {} again", script.display()),
    ] {
        assert!(stderr.contains(said), "{said:?} in {stderr}");
    }
    assert_eq!(dockerd_pids(), before, "the running engine was not touched");
    let info = Command::new("docker").args(["info"]).output().unwrap();
    assert!(info.status.success(), "Docker still answers");
}

/// `stockade server` on `port` and `data` with `image` as the default
/// image, SQLite, no admin token given, warnings only.
fn server_on(port: u16, data: &Path, image: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stockade"));
    cmd.arg("server")
        .env("STOCKADE_LISTEN", format!("127.0.0.1:{port}"))
        .env("STOCKADE_DATA_DIR", data)
        .env("STOCKADE_DEFAULT_IMAGE", image)
        .env("STOCKADE_LOG", "warn")
        .env_remove("STOCKADE_DATABASE_URL")
        .env_remove("STOCKADE_ADMIN_TOKEN");
    cmd
}

/// `stockade health --json` against the server at `url`, without a token.
fn health_of(url: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["health", "--json"])
        .env("STOCKADE_URL", url)
        .env_remove("STOCKADE_TOKEN")
        .output()
        .expect("stockade health")
}

/// The warnings a `/health` document lists that mention `text`.
fn warnings_about<'a>(health: &'a serde_json::Value, text: &str) -> Vec<&'a str> {
    let warnings = health["warnings"].as_array().into_iter().flatten();
    warnings
        .filter_map(|w| w.as_str())
        .filter(|w| w.contains(text))
        .collect()
}

/// A default image the Docker host does not have and cannot pull
/// (`.invalid` never resolves): the start is not held up, the banner says
/// so with the ways out, the background pull's failure is printed, and
/// `/health` carries it as a warning next to the presets' presence.
#[test]
fn absent_default_image_is_named_in_the_banner_and_health() {
    let image = "stockade-absent.invalid/x:1";
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let mut child = server_on(port, data.path(), image)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("stockade server");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _child = Kill(child);
    let rx = lines_of(stdout);
    let mut lines = Vec::new();
    let mut listening = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                if line.contains(" listening on ") && listening.is_none() {
                    listening = Some(started.elapsed());
                }
                let done = line.contains("could not be pulled");
                lines.push(line);
                if done {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(_) => break,
        }
    }
    let banner = lines.join("\n");
    assert!(listening.is_some(), "server did not start:\n{banner}");
    assert!(
        banner.contains(&format!(
            "WARNING: the default image {image} is absent; pulling it in the background"
        )),
        "{banner}"
    );
    assert!(
        banner.contains("--default-image IMAGE or STOCKADE_DEFAULT_IMAGE"),
        "{banner}"
    );
    assert!(
        banner.contains(&format!("`docker pull {image}`")),
        "{banner}"
    );
    assert!(
        banner.contains("runtimes:  code-interpreter-v1 = stockade-code-interpreter:latest (")
            && banner.contains("node20 = node:20-bookworm ("),
        "presets listed with their presence:\n{banner}"
    );
    assert!(
        banner.contains(&format!(
            "WARNING: the default image {image} could not be pulled"
        )),
        "the background pull's outcome:\n{banner}"
    );
    // The token lines came before the pull's outcome: the pull never held
    // up the start.
    let token_at = lines.iter().position(|l| l.starts_with("Use it as:"));
    let pull_at = lines.iter().position(|l| l.contains("could not be pulled"));
    assert!(token_at < pull_at, "{banner}");

    let out = health_of(&url);
    let health: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(health["images"]["default"]["image"], image, "{health}");
    assert_eq!(health["images"]["default"]["present"], false, "{health}");
    let presets = health["images"]["presets"].as_array().expect("presets");
    assert!(
        presets
            .iter()
            .any(|p| p["name"] == "python3.13" && p["image"] == "python:3.13-bookworm"),
        "{health}"
    );
    let warning = *warnings_about(&health, image)
        .first()
        .unwrap_or_else(|| panic!("no warning names the image: {health}"));
    assert!(warning.contains("STOCKADE_DEFAULT_IMAGE"), "{warning}");
    // Absent presets are information, not warnings.
    assert!(
        warnings_about(&health, "python:3.13").is_empty(),
        "{health}"
    );
}

/// A present default image: no warning, and `present: true`.
#[test]
fn present_default_image_has_no_warning() {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = server_on(port, data.path(), &image())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("stockade server");
    let deadline = Instant::now() + Duration::from_secs(60);
    let health = loop {
        let out = health_of(&format!("http://127.0.0.1:{port}"));
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
            break v;
        }
        assert!(Instant::now() < deadline, "the server did not answer");
        std::thread::sleep(Duration::from_millis(300));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(health["images"]["default"]["present"], true, "{health}");
    assert_eq!(health["images"]["default"]["image"], image().as_str());
    assert!(
        warnings_about(&health, "default image").is_empty(),
        "{health}"
    );
}

/// The README's SDK program is the example the SDK crate compiles (and
/// clippy checks), byte for byte.
#[test]
fn readme_sdk_program_is_the_compiled_example() {
    let shown = block_after(&readme(), "sdk-quickstart");
    let example =
        std::fs::read_to_string(repo().join("crates/stockade-sdk/examples/quickstart.rs"))
            .expect("crates/stockade-sdk/examples/quickstart.rs");
    assert_eq!(
        shown, example,
        "README.md's SDK program differs from crates/stockade-sdk/examples/quickstart.rs"
    );
}

/// Runs a function of `scripts/lib/docker.sh` in bash; its status and
/// what it printed (stdout, stderr).
fn docker_lib(call: &str, envs: &[(&str, &Path)]) -> (bool, String, String) {
    let lib = repo().join("scripts/lib/docker.sh");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("source '{}' && {call}", lib.display()))
        .envs(envs.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .expect("bash");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    )
}

/// The data root `scripts/run` gives a Docker Engine it installs: an empty
/// one on a file system without quotas becomes a loop file system that
/// enforces them (XFS with project quotas, or btrfs where the kernel lacks
/// XFS quotas), listed for reboots; asked again, nothing changes; a data
/// root that holds data is kept and the reason said.
#[test]
fn a_new_engines_data_root_enforces_disk_quotas() {
    if !is_root() {
        eprintln!("skipped: making and mounting a file system needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (root, image, fstab) = (
        dir.path().join("docker"),
        dir.path().join("docker.img"),
        dir.path().join("fstab"),
    );
    let call = format!(
        "stockade_docker_quota_root '{}' '{}' 1G",
        root.display(),
        image.display()
    );
    let env = [("STOCKADE_FSTAB", fstab.as_path())];
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).output();
        }
    }
    let _unmount = Unmount(&root);
    let (ok, made, said) = docker_lib(&call, &env);
    assert!(ok, "{said}");
    let mounted = Command::new("findmnt")
        .args(["-n", "-o", "FSTYPE,OPTIONS"])
        .arg(&root)
        .output()
        .unwrap();
    let mounted = String::from_utf8_lossy(&mounted.stdout).into_owned();
    match made.as_str() {
        "xfs" => assert!(
            mounted.starts_with("xfs") && mounted.contains("prjquota"),
            "{mounted}"
        ),
        "btrfs" => assert!(mounted.starts_with("btrfs"), "{mounted}"),
        other => panic!("made {other:?}: {said}"),
    }
    let listed = std::fs::read_to_string(&fstab).unwrap();
    assert_eq!(
        listed.trim(),
        format!(
            "{} {} {made} loop,discard{} 0 0",
            image.display(),
            root.display(),
            if made == "xfs" { ",pquota" } else { "" }
        )
    );
    // Again: already on a file system with quotas, nothing changes.
    let (ok, again, said) = docker_lib(&call, &env);
    assert!(ok && again.is_empty(), "{again} {said}");
    assert_eq!(std::fs::read_to_string(&fstab).unwrap(), listed);

    // A data root that holds data (on this host's disk) is kept.
    let used = dir.path().join("used");
    std::fs::create_dir_all(used.join("image")).unwrap();
    let (ok, made, said) = docker_lib(
        &format!(
            "stockade_docker_quota_root '{}' '{}.img' 1G",
            used.display(),
            used.display()
        ),
        &env,
    );
    assert!(ok && made.is_empty(), "{made}");
    assert!(said.contains("holds data already"), "{said}");
    assert!(!used.with_extension("img").exists());
}
