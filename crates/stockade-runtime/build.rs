//! Builds the in-sandbox agent (`stockade-agent`) as a fully static release
//! executable and hands it to the crate, which embeds it (`AGENT_BINARY`) so
//! that Stockade ships as one binary.
//!
//! The agent is built by a nested `cargo build` into a directory of its own
//! beside the outer build's profiles (`<target dir>/agent-static`): it is
//! cached across builds and profiles, and never waits for the lock the outer
//! build holds on its own profile directory. The nested cargo gets none of
//! the outer build's settings (`CARGO_*` variables, `RUSTFLAGS`, wrappers
//! such as clippy's), only the jobserver, the registry configuration and the
//! flags of a static build. The first 12 hex digits of the binary's SHA-256
//! become `STOCKADE_AGENT_VERSION`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

/// Flags of the static build (the `--target` flag keeps them off build
/// scripts and proc macros).
const STATIC_RUSTFLAGS: &str = "-C target-feature=+crt-static -C strip=symbols";
/// The target the agent is built for when the crate itself is not built for
/// a `*-unknown-linux-gnu` target (e.g. a server built for macOS still
/// drives Linux engines).
const DEFAULT_AGENT_TARGET: &str = "x86_64-unknown-linux-gnu";

fn main() {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .parent()
        .and_then(Path::parent)
        .expect("crates/stockade-runtime sits two levels below the workspace root")
        .to_path_buf();
    let agent_crate = workspace.join("crates").join("stockade-agent");
    for watched in [
        agent_crate.join("src"),
        agent_crate.join("Cargo.toml"),
        workspace.join("Cargo.toml"),
        workspace.join("Cargo.lock"),
    ] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }

    let out_dir = PathBuf::from(env("OUT_DIR"));
    let target = agent_target();
    let agent_target_dir = outer_target_dir(&out_dir).join("agent-static");
    let built = build_agent(&workspace, &agent_target_dir, &target);

    let bytes = std::fs::read(&built)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", built.display())));
    if let Err(why) = check_static_elf(&bytes) {
        fail(&format!(
            "{} is not a static executable: {why}",
            built.display()
        ));
    }
    let embedded = out_dir.join("stockade-agent");
    std::fs::write(&embedded, &bytes)
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", embedded.display())));
    let digest = Sha256::digest(&bytes);
    let version: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=STOCKADE_AGENT_VERSION={version}");
    println!("cargo:rustc-env=STOCKADE_AGENT_TARGET={target}");
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fail(&format!("{name} is not set")))
}

fn fail(message: &str) -> ! {
    eprintln!("stockade-runtime build script: {message}");
    std::process::exit(1);
}

/// The crate's own target when it is a GNU/Linux one (the agent then runs
/// on the same architecture), else x86-64.
fn agent_target() -> String {
    match std::env::var("TARGET") {
        Ok(t) if t.ends_with("-unknown-linux-gnu") => t,
        _ => DEFAULT_AGENT_TARGET.to_owned(),
    }
}

/// The outer build's target directory, from `OUT_DIR`
/// (`<target dir>[/<triple>]/<profile>/build/<pkg>-<hash>/out`).
fn outer_target_dir(out_dir: &Path) -> PathBuf {
    let build = out_dir
        .ancestors()
        .find(|p| p.file_name() == Some(OsStr::new("build")))
        .unwrap_or_else(|| fail(&format!("unexpected OUT_DIR {}", out_dir.display())));
    let profile = build.parent().expect("a profile directory");
    let mut root = profile.parent().expect("a target directory");
    if let Ok(triple) = std::env::var("TARGET") {
        if root.file_name() == Some(OsStr::new(&triple)) {
            root = root.parent().expect("a target directory");
        }
    }
    root.to_path_buf()
}

/// Whether the outer build's setting `key` must not reach the nested cargo.
fn is_outer_setting(key: &str) -> bool {
    const KEEP: [&str; 2] = ["CARGO_HOME", "CARGO_MAKEFLAGS"];
    const KEEP_PREFIXES: [&str; 5] = [
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
        "CARGO_TERM_",
    ];
    const DROP: [&str; 15] = [
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_LINKER",
        "CLIPPY_ARGS",
        "CLIPPY_CONF_DIR",
        "OUT_DIR",
        "TARGET",
        "HOST",
        "NUM_JOBS",
        "OPT_LEVEL",
        "DEBUG",
        "PROFILE",
        "DOCS_RS",
    ];
    if KEEP.contains(&key) || KEEP_PREFIXES.iter().any(|p| key.starts_with(p)) {
        return false;
    }
    key.starts_with("CARGO_") || key.starts_with("__CARGO") || DROP.contains(&key)
}

/// Runs the nested `cargo build` and returns the binary's path.
fn build_agent(workspace: &Path, target_dir: &Path, target: &str) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let run = |offline: bool| {
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(workspace)
            .args(["build", "--release", "--locked", "--quiet"])
            .args(["-p", "stockade-agent", "--bin", "stockade-agent"])
            .args(["--target", target])
            .arg("--target-dir")
            .arg(target_dir);
        if offline {
            cmd.arg("--offline");
        }
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(is_outer_setting) {
                cmd.env_remove(&key);
            }
        }
        cmd.env("RUSTFLAGS", STATIC_RUSTFLAGS)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.output()
            .unwrap_or_else(|e| fail(&format!("cannot run {cargo:?}: {e}")))
    };
    // Offline first: every dependency is usually in the local registry
    // already, and a build without network access must work. Only when
    // something is missing is the registry asked.
    let mut out = run(true);
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("offline") {
        out = run(false);
    }
    if !out.status.success() {
        fail(&format!(
            "building stockade-agent ({target}, static) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let bin = target_dir
        .join(target)
        .join("release")
        .join("stockade-agent");
    if !bin.is_file() {
        fail(&format!("{} was not built", bin.display()));
    }
    bin
}

/// An ELF executable without an interpreter (static or static-pie).
fn check_static_elf(bytes: &[u8]) -> Result<(), String> {
    const PT_INTERP: u32 = 3;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err("no ELF header".into());
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err("not a 64-bit little-endian ELF".into());
    }
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let e_type = u16_at(16);
    if e_type != 2 && e_type != 3 {
        return Err(format!("ELF type {e_type} is not an executable"));
    }
    let phoff = usize::try_from(u64_at(32)).map_err(|_| "bad program header offset")?;
    let phentsize = usize::from(u16_at(54));
    let phnum = usize::from(u16_at(56));
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        if at + 4 > bytes.len() {
            return Err("truncated program headers".into());
        }
        if u32_at(at) == PT_INTERP {
            return Err("it names a dynamic loader (PT_INTERP)".into());
        }
    }
    Ok(())
}
