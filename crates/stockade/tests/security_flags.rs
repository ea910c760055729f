//! The server's own security settings: bad image
//! patterns and address ranges stop the start with a message naming them,
//! and the data directory is private (0700, files 0600) — also one that an
//! earlier version left readable by others, which is tightened with a
//! warning.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{refused_start, spawn_piped, KillOnDrop};

fn server_cmd(data_dir: &std::path::Path, extra: &[&str]) -> Command {
    support::server_cmd(
        data_dir,
        "stk_security_flags_admin_token",
        &[
            "STOCKADE_ALLOWED_IMAGES",
            "STOCKADE_ALLOW_INTERNAL_ADDRESSES",
        ],
        extra,
    )
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn bad_image_patterns_and_address_ranges_stop_the_start_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    for (args, names) in [
        (
            &["--allowed-images", "node,Bad Pattern"][..],
            ["--allowed-images", "Bad Pattern"],
        ),
        (
            &["--allowed-images", "/abs"][..],
            ["--allowed-images", "/abs"],
        ),
        (
            &["--allow-internal-addresses", "10.0.0.0/33"][..],
            ["--allow-internal-addresses", "10.0.0.0/33"],
        ),
        (
            &["--allow-internal-addresses", "localhost"][..],
            ["--allow-internal-addresses", "localhost"],
        ),
    ] {
        let err = refused_start(&mut server_cmd(dir.path(), args), args);
        for name in names {
            assert!(err.contains(name), "{args:?}: {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn the_data_directory_is_private_and_a_loose_one_is_tightened() {
    let parent = tempfile::tempdir().unwrap();
    // A new directory is made 0700, its database 0600.
    let fresh = parent.path().join("fresh");
    let server = start(&fresh);
    assert_eq!(mode(&fresh), 0o700);
    assert_eq!(mode(&fresh.join("stockade.db")), 0o600);
    drop(server);
    // One left world-readable (as earlier versions made it) is tightened,
    // with a warning.
    let loose = parent.path().join("loose");
    std::fs::create_dir(&loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(loose.join("stockade.db"), b"").unwrap();
    std::fs::set_permissions(
        loose.join("stockade.db"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let out = server_cmd(&loose, &["--help"]).output().unwrap();
    assert!(out.status.success());
    let mut cmd = server_cmd(&loose, &[]);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut server = KillOnDrop(child);
    let warned = wait_for_line(BufReader::new(stderr), "readable by other users");
    assert!(warned, "no warning about the loose data directory");
    // The warning comes just before the change.
    let deadline = Instant::now() + Duration::from_secs(10);
    while mode(&loose.join("stockade.db")) != 0o600 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mode(&loose), 0o700);
    assert_eq!(mode(&loose.join("stockade.db")), 0o600);
    let _ = server.0.kill();
}

fn start(dir: &std::path::Path) -> KillOnDrop {
    let (child, stdout) = spawn_piped(&mut server_cmd(dir, &[]));
    let server = KillOnDrop(child);
    assert!(
        wait_for_line(BufReader::new(stdout), "listening on"),
        "the server did not start"
    );
    server
}

/// Reads lines (on a thread of its own, draining the pipe to the end) until
/// one contains `needle`, for at most 60 s.
fn wait_for_line(reader: impl BufRead + Send + 'static, needle: &'static str) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in reader.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if line.contains(needle) {
            return true;
        }
    }
    false
}
