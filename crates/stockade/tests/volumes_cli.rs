//! `stockade volume` as a user runs it against `stockade server`: a shared
//! volume is made, a file copied in, listed and copied back out byte for
//! byte; a sandbox created with `--mount` reads it (and writes through a
//! read-write mount, not a read-only one); the volume cannot be deleted
//! while the sandbox mounts it, and can once the sandbox is gone.

mod support;
use support::{docker_lines, instance_of, CliServer};

const TOKEN: &str = "stk_volumesclitestvolumesclitestvolumes01";

/// The shared volume the test makes.
const VOLUME: &str = "vcli-data";

/// `stockade server` on a data directory of its own; the sandboxes and the
/// volume it made are removed when dropped, then whatever its instance left
/// in Docker.
struct Server(CliServer);

impl std::ops::Deref for Server {
    type Target = CliServer;
    fn deref(&self) -> &CliServer {
        &self.0
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut CliServer {
        &mut self.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        support::remove_sandboxes(&self.url, TOKEN);
        let _ = self.command(&["volume", "rm", VOLUME]).output();
        self.stop(None);
    }
}

fn start() -> Server {
    Server(CliServer::start(TOKEN, &[], &[]))
}

impl Server {
    /// Learns the instance id from the Docker volume of the shared volume
    /// `id`, so that drop removes what this server left even when no
    /// sandbox was made.
    fn remember_volume(&mut self, id: &str) {
        self.instance = docker_lines(&[
            "volume",
            "ls",
            "--filter",
            &format!("label=io.stockade.shared-volume={id}"),
            "--format",
            "{{.Label \"io.stockade.instance-id\"}}",
        ])
        .into_iter()
        .find(|l| !l.is_empty())
        .or_else(|| self.instance.take());
    }
}

#[test]
fn a_shared_volume_is_filled_mounted_read_and_deleted_once_unmounted() {
    let mut s = start();
    let local = tempfile::tempdir().unwrap();

    // Made, and listed with nothing mounting it.
    let made = s.json(&["volume", "create", VOLUME, "--label", "test=cli", "--json"]);
    let id = made["id"].as_str().unwrap().to_owned();
    s.remember_volume(&id);
    assert_eq!(made["name"], VOLUME);
    assert_eq!(made["labels"]["test"], "cli");
    let err = s.fails(&["volume", "create", VOLUME]);
    assert!(err.contains(VOLUME), "a duplicate name is refused: {err}");

    // A file copied in (its parent made), listed, and copied back out.
    let content: Vec<u8> = b"hello from the volume\n"
        .iter()
        .copied()
        .chain([0u8, 1, 2, 255])
        .collect();
    let file = local.path().join("hello.bin");
    std::fs::write(&file, &content).unwrap();
    let file_arg = file.to_str().unwrap();
    s.ok(&["volume", "cp", file_arg, &format!("{VOLUME}:/in/")]);
    let table = s.ok(&["volume", "ls-files", VOLUME, "/in"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["TYPE", "SIZE", "MODE", "PATH"]);
    assert!(
        lines.any(|l| l.starts_with("file") && l.ends_with("/in/hello.bin")),
        "{table}"
    );
    let listing = s.json(&["volume", "ls-files", VOLUME, "--depth", "2", "--json"]);
    let entry = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "/in/hello.bin")
        .unwrap_or_else(|| panic!("{listing}"))
        .clone();
    assert_eq!(entry["size"], content.len());
    let back = local.path().join("back.bin");
    s.ok(&[
        "volume",
        "cp",
        &format!("{VOLUME}:/in/hello.bin"),
        back.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read(&back).unwrap(), content);
    let out = s.ok_bytes(&["volume", "cp", &format!("{VOLUME}:/in/hello.bin"), "-"]);
    assert_eq!(out, content, "`-` writes the bytes to stdout");

    // What cannot be copied is refused in words.
    let err = s.fails(&[
        "volume",
        "cp",
        local.path().to_str().unwrap(),
        &format!("{VOLUME}:/"),
    ]);
    assert!(err.contains("one file at a time"), "{err}");
    let err = s.fails(&["volume", "cp", &format!("{VOLUME}:/in"), "-"]);
    assert!(err.contains("is a directory"), "{err}");
    let err = s.fails(&["volume", "cp", &format!("{VOLUME}:/missing"), "-"]);
    assert!(err.contains("/missing"), "{err}");

    // Directories are made and files removed without a sandbox.
    s.ok(&["volume", "mkdir", "-p", &format!("{VOLUME}:/made/deep")]);
    let err = s.fails(&["volume", "mkdir", &format!("{VOLUME}:/made")]);
    assert!(err.contains("-p"), "{err}");
    s.ok(&["volume", "rm-file", &format!("{VOLUME}:/made")]);
    let listing = s.json(&["volume", "ls-files", VOLUME, "--json"]);
    assert!(
        listing["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["path"] != "/made"),
        "{listing}"
    );

    // A bad --mount is refused before any request.
    let err = s.fails(&["create", "--name", "vcli-bad", "--mount", "vcli-data"]);
    assert!(
        err.contains("--mount expects NAME:/absolute/path[:ro]"),
        "{err}"
    );

    // A sandbox mounting it read-write and read-only reads the file.
    let sb = s.json(&[
        "create",
        "--name",
        "vcli-sb",
        "--mount",
        &format!("{VOLUME}:/data"),
        "--mount",
        &format!("{VOLUME}:/ro:ro"),
        "--json",
    ]);
    let sb_id = sb["id"].as_str().unwrap().to_owned();
    if s.instance.is_none() {
        s.instance = instance_of(&sb_id);
    }
    let mounts = sb["volumeMounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 2, "{sb}");
    // (The first line only: a command's output travels as text.)
    let out = s.ok(&[
        "exec",
        "vcli-sb",
        "--",
        "head",
        "-n",
        "1",
        "/data/in/hello.bin",
    ]);
    assert_eq!(out, "hello from the volume\n");
    let out = s.ok(&[
        "exec",
        "vcli-sb",
        "--",
        "head",
        "-n",
        "1",
        "/ro/in/hello.bin",
    ]);
    assert_eq!(out, "hello from the volume\n");
    let out = s.ok(&["exec", "vcli-sb", "--", "wc", "-c", "/data/in/hello.bin"]);
    assert!(
        out.trim_start().starts_with(&content.len().to_string()),
        "{out}"
    );

    // The read-write mount writes into the volume; the read-only one
    // refuses.
    s.ok(&[
        "exec",
        "vcli-sb",
        "--shell",
        "echo from-sandbox > /data/made.txt",
    ]);
    let out = s.ok(&["volume", "cp", &format!("{VOLUME}:/made.txt"), "-"]);
    assert_eq!(out, "from-sandbox\n");
    let out = s.run(&["exec", "vcli-sb", "--shell", "echo x > /ro/x"]);
    assert!(
        !out.status.success(),
        "a write to the read-only mount failed"
    );
    let listing = s.json(&["volume", "ls-files", VOLUME, "--json"]);
    assert!(
        listing["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["path"] != "/x"),
        "{listing}"
    );

    // Listed with the sandbox that mounts it, and not deletable meanwhile.
    let table = s.ok(&["volume", "ls"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(header, ["NAME", "ID", "HOST", "MOUNTED BY", "CREATED"]);
    let row = table
        .lines()
        .find(|l| l.starts_with(VOLUME))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        row.contains(&id)
            && row.contains(&format!("{sb_id}:/data"))
            && row.contains(&format!("{sb_id}:/ro:ro")),
        "{row}"
    );
    let err = s.fails(&["volume", "rm", VOLUME]);
    assert!(err.contains(&sb_id), "the refusal names the sandbox: {err}");

    // Once the sandbox is gone, the volume goes.
    s.ok(&["rm", "vcli-sb"]);
    s.ok(&["volume", "rm", VOLUME]);
    let list = s.json(&["volume", "ls", "--json"]);
    assert!(
        list["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["name"] != VOLUME),
        "{list}"
    );
    let table = s.ok(&["volume", "ls"]);
    assert!(!table.contains(VOLUME), "{table}");
    let err = s.fails(&["volume", "ls-files", VOLUME]);
    assert!(err.contains("stockade volume ls"), "{err}");
}
