//! Kernelspec discovery: the `kernel.json` files Jupyter installs (argv,
//! language, interrupt mode, env) in the directories Jupyter searches, and
//! which of them serves a language a request names.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How a kernel wants to be interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptMode {
    /// SIGINT to its process group (Jupyter's default).
    Signal,
    /// An `interrupt_request` on the control channel.
    Message,
}

/// One installed kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSpec {
    /// The directory's name (`python3`, `deno`, `bash`).
    pub name: String,
    /// The command, with `{connection_file}` and `{resource_dir}` to fill in.
    pub argv: Vec<String>,
    /// The language, lower-cased (`python`, `typescript`, `bash`).
    pub language: String,
    pub interrupt_mode: InterruptMode,
    /// Variables the kernel gets on top of the sandbox's.
    pub env: BTreeMap<String, String>,
    /// Where the spec lives (`{resource_dir}`).
    pub dir: PathBuf,
}

#[derive(Deserialize)]
struct KernelJson {
    argv: Vec<String>,
    language: Option<String>,
    interrupt_mode: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

impl KernelSpec {
    /// Whether this is a JavaScript or TypeScript kernel (Deno's, or a
    /// Node one).
    fn is_javascript(&self) -> bool {
        matches!(self.language.as_str(), "javascript" | "typescript")
    }

    /// Whether the kernel colours plain-text results unless `NO_COLOR` is
    /// set (Deno's does).
    pub fn colours_results(&self) -> bool {
        self.is_javascript()
    }

    /// Whether the kernel may publish a cell's output after its idle
    /// status (Deno's forwards stdout from a pipe of its own).
    pub fn publishes_late(&self) -> bool {
        self.is_javascript()
    }

    /// The command line for a connection file.
    pub fn command(&self, connection_file: &Path) -> Vec<String> {
        let dir = self.dir.to_string_lossy();
        let file = connection_file.to_string_lossy();
        self.argv
            .iter()
            .map(|a| {
                a.replace("{connection_file}", &file)
                    .replace("{resource_dir}", &dir)
            })
            .collect()
    }

    /// The kernel ipykernel provides when no kernelspec is installed: try
    /// `python3 -m ipykernel_launcher` (a failure to start says why),
    /// without IPython's history database, which would write every cell to
    /// a SQLite file (half of a small cell's round trip).
    pub fn python_fallback() -> Self {
        Self {
            name: "python3".into(),
            argv: [
                "python3",
                "-m",
                "ipykernel_launcher",
                "--HistoryManager.enabled=False",
                "-f",
                "{connection_file}",
            ]
            .map(String::from)
            .to_vec(),
            language: "python".into(),
            interrupt_mode: InterruptMode::Signal,
            env: BTreeMap::new(),
            dir: PathBuf::from("/"),
        }
    }

    fn read(dir: &Path) -> Option<Self> {
        let text = std::fs::read(dir.join("kernel.json")).ok()?;
        let json: KernelJson = serde_json::from_slice(&text).ok()?;
        if json.argv.is_empty() {
            return None;
        }
        Some(Self {
            name: dir.file_name()?.to_string_lossy().into_owned(),
            argv: json.argv,
            language: json.language.unwrap_or_default().trim().to_lowercase(),
            interrupt_mode: match json.interrupt_mode.as_deref() {
                Some("message") => InterruptMode::Message,
                _ => InterruptMode::Signal,
            },
            env: json.env,
            dir: dir.to_owned(),
        })
    }
}

/// The `kernels` directories Jupyter searches, most specific first: the
/// user's, `$JUPYTER_PATH`'s, then the system's (and `/opt/*`'s, where
/// tools installed in a prefix of their own put theirs).
pub fn search_dirs(jupyter_path: Option<&str>, home: &str) -> Vec<PathBuf> {
    let mut dirs = vec![Path::new(home).join(".local/share/jupyter/kernels")];
    for d in jupyter_path
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
    {
        dirs.push(Path::new(d).join("kernels"));
    }
    dirs.push("/usr/local/share/jupyter/kernels".into());
    dirs.push("/usr/share/jupyter/kernels".into());
    if let Ok(entries) = std::fs::read_dir("/opt") {
        let mut opt: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("share/jupyter/kernels"))
            .collect();
        opt.sort();
        dirs.extend(opt);
    }
    dirs
}

/// Every kernelspec in the directories, by name; a name found twice is
/// the first directory's (as Jupyter resolves it).
pub fn discover(dirs: &[PathBuf]) -> Vec<KernelSpec> {
    let mut found: BTreeMap<String, KernelSpec> = BTreeMap::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut subdirs: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        subdirs.sort();
        for sub in subdirs {
            if let Some(spec) = KernelSpec::read(&sub) {
                found.entry(spec.name.to_lowercase()).or_insert(spec);
            }
        }
    }
    found.into_values().collect()
}

/// A request's language, canonical: trimmed, lower-cased, `js` and `ts`
/// spelled out.
pub fn normalize(language: &str) -> String {
    let l = language.trim().to_lowercase();
    match l.as_str() {
        "js" => "javascript".into(),
        "ts" => "typescript".into(),
        "python3" | "py" => "python".into(),
        _ => l,
    }
}

/// The kernel serving a (normalized) language, if one is installed.
pub fn pick<'a>(specs: &'a [KernelSpec], language: &str) -> Option<&'a KernelSpec> {
    let by_name = |n: &str| specs.iter().find(|s| s.name.eq_ignore_ascii_case(n));
    let by_language = |l: &str| specs.iter().find(|s| s.language == l);
    match language {
        "python" => by_name("python3").or_else(|| by_language("python")),
        // Deno's kernel says typescript and runs both; a JavaScript-only
        // kernel (ijavascript) serves typescript never.
        "javascript" => by_language("javascript")
            .or_else(|| by_language("typescript"))
            .or_else(|| by_name("deno")),
        "typescript" => by_language("typescript").or_else(|| by_name("deno")),
        other => by_name(other).or_else(|| by_language(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, json: &str) {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("kernel.json"), json).unwrap();
    }

    #[test]
    fn specs_are_found_and_languages_map_to_them() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        write(
            a.path(),
            "deno",
            r#"{"argv":["deno","jupyter","--kernel","--conn","{connection_file}"],
                "display_name":"Deno","language":"typescript"}"#,
        );
        write(
            a.path(),
            "python3",
            r#"{"argv":["python3","-m","ipykernel_launcher","-f","{connection_file}"],
                "language":"python","env":{"X":"1"}}"#,
        );
        write(
            b.path(),
            "python3",
            r#"{"argv":["other"],"language":"python"}"#,
        );
        write(
            b.path(),
            "bash",
            r#"{"argv":["py","-m","bash_kernel","-f","{connection_file}"],"language":"bash",
                "interrupt_mode":"message"}"#,
        );
        write(b.path(), "broken", "{not json");
        let specs = discover(&[a.path().into(), b.path().into(), "/nonexistent".into()]);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["bash", "deno", "python3"]);

        let py = pick(&specs, &normalize(" Python ")).unwrap();
        assert_eq!(py.argv[0], "python3", "the first directory wins");
        assert_eq!(py.env["X"], "1");
        assert_eq!(
            py.command(Path::new("/k/c.json")),
            ["python3", "-m", "ipykernel_launcher", "-f", "/k/c.json"]
        );
        assert_eq!(pick(&specs, &normalize("JS")).unwrap().name, "deno");
        assert_eq!(pick(&specs, &normalize("ts")).unwrap().name, "deno");
        let bash = pick(&specs, "bash").unwrap();
        assert_eq!(bash.interrupt_mode, InterruptMode::Message);
        assert!(pick(&specs, "r").is_none());
    }

    #[test]
    fn search_dirs_put_the_user_first() {
        let dirs = search_dirs(Some("/a:/b"), "/home/u");
        assert_eq!(dirs[0], Path::new("/home/u/.local/share/jupyter/kernels"));
        assert_eq!(dirs[1], Path::new("/a/kernels"));
        assert_eq!(dirs[2], Path::new("/b/kernels"));
        assert!(dirs.contains(&PathBuf::from("/usr/share/jupyter/kernels")));
    }
}
