//! Fetches the dashboard's browser libraries (xterm.js and its fit addon) from
//! npm at build time, so that `src/routes/dashboard.rs` can embed them: runs
//! `npm ci` in `assets/vendor/` when its `node_modules` is missing or does not
//! match `package-lock.json`. Nothing is fetched at run time and nothing
//! vendored is committed.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files `dashboard.rs` embeds, below `assets/vendor/node_modules/`.
const EMBEDDED: &[&str] = &[
    "@xterm/xterm/lib/xterm.mjs",
    "@xterm/xterm/css/xterm.css",
    "@xterm/addon-fit/lib/addon-fit.mjs",
    "marked/lib/marked.umd.js",
    "dompurify/dist/purify.min.js",
    "dompurify/dist/purify.es.mjs",
    "marked/lib/marked.esm.js",
];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let vendor = manifest.join("assets/vendor");
    println!("cargo:rerun-if-changed=assets/vendor/package.json");
    println!("cargo:rerun-if-changed=assets/vendor/package-lock.json");
    println!("cargo:rerun-if-env-changed=STOCKADE_NPM");
    for file in EMBEDDED {
        println!("cargo:rerun-if-changed=assets/vendor/node_modules/{file}");
    }
    if let Some(why) = stale(&vendor) {
        install(&vendor, &why);
    }
    if let Some(why) = stale(&vendor) {
        fail(&format!(
            "`npm ci` in {} finished, but {why}",
            vendor.display()
        ));
    }
}

/// Why `node_modules` needs an install, or `None` when it is complete and
/// holds the versions the lock file names.
fn stale(vendor: &Path) -> Option<String> {
    let modules = vendor.join("node_modules");
    for file in EMBEDDED {
        if !modules.join(file).is_file() {
            return Some(format!("node_modules/{file} is missing"));
        }
    }
    let lock = read_json(&vendor.join("package-lock.json"));
    let packages = lock["packages"].as_object().cloned().unwrap_or_default();
    for (key, entry) in packages.iter().filter(|(k, _)| !k.is_empty()) {
        let wanted = entry["version"].as_str().unwrap_or_default();
        let installed = vendor.join(key).join("package.json");
        if !installed.is_file() {
            return Some(format!("{key} is not installed"));
        }
        let have = read_json(&installed);
        let have = have["version"].as_str().unwrap_or_default();
        if have != wanted {
            return Some(format!(
                "{key} is version {have}, package-lock.json wants {wanted}"
            ));
        }
    }
    None
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", path.display())));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| fail(&format!("{} is not valid JSON: {e}", path.display())))
}

/// Installs into a directory of this build's own, then moves the result in
/// place, so that two builds at once never see a half-made `node_modules`.
fn install(vendor: &Path, why: &str) {
    let npm = std::env::var("STOCKADE_NPM").unwrap_or_else(|_| "npm".to_owned());
    let scratch = vendor.join(format!(".install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)
        .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", scratch.display())));
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(vendor.join(file), scratch.join(file))
            .unwrap_or_else(|e| fail(&format!("cannot copy {file}: {e}")));
    }
    println!("cargo:warning=installing the dashboard's npm packages ({why})");
    let status = Command::new(&npm)
        .args([
            "ci",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .current_dir(&scratch)
        .status();
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&scratch);
            fail(&format!(
                "the dashboard embeds xterm.js from npm, but `{npm}` could not be run ({e}). \
                 Install Node.js and npm (Debian: `apt-get install npm`), or set STOCKADE_NPM \
                 to npm's path, then build again; or run `npm ci` in {} yourself.",
                vendor.display()
            ))
        }
    };
    if !status.success() {
        let _ = std::fs::remove_dir_all(&scratch);
        fail(&format!(
            "`{npm} ci` in {} failed ({status}): is the npm registry reachable? \
             Its output is above.",
            vendor.display()
        ));
    }
    let target = vendor.join("node_modules");
    if stale(vendor).is_some() {
        let _ = std::fs::remove_dir_all(&target);
    }
    // Another build may have finished first; then its copy stays.
    if std::fs::rename(scratch.join("node_modules"), &target).is_err() && stale(vendor).is_some() {
        let _ = std::fs::remove_dir_all(&scratch);
        fail(&format!(
            "cannot move the installed packages to {}",
            target.display()
        ));
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

fn fail(message: &str) -> ! {
    eprintln!("error: building the dashboard's assets failed: {message}");
    std::process::exit(1);
}
