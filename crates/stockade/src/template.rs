//! `stockade template …`: templates, an account's own sandbox images built
//! by the server. `build` sends a Dockerfile and its build context (packed
//! here as a tar.gz) and follows the build's log; `ls`, `rm` and `logs`
//! show and delete templates and read their builds' logs; `tag` and
//! `untag` name builds. A sandbox is
//! made from one with `stockade create --template NAME`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand, ValueHint};
use stockade_sdk::{
    BuildLogEntry, BuildResponse, BuildStatusResponse, Client, CreateTemplateRequest,
    TemplateResponse, MAX_BUILD_LOG_PAGE,
};

use crate::cli::{Batch, Ctx};
use crate::output::{self, CliError};

#[derive(Subcommand)]
pub enum TemplateCommand {
    /// Build a template from a Dockerfile: the build context is packed and
    /// uploaded, the build runs on the server and its log streams to
    /// stderr; the template's id is printed on stdout.
    #[command(after_help = "Examples:
  stockade template build --name web-app                    # ./Dockerfile, context .
  stockade template build -f docker/Dockerfile . --name api --cpu 2 --memory-mb 2048
  stockade create --name demo --template web-app

The context skips .git and what .dockerignore lists (`*`, `?` and `**`
patterns; `!` exceptions are not supported). Building a name that exists
makes a new build of that template.")]
    Build(BuildArgs),
    /// List your templates (and public ones) with their newest build's
    /// status.
    #[command(
        alias = "list",
        after_help = "Examples:
  stockade template ls
  stockade template ls --json | jq -r '.templates[].templateId'"
    )]
    Ls,
    /// Delete templates: their names are free at once; sandboxes made from
    /// them keep running.
    #[command(
        alias = "delete",
        after_help = "Example:
  stockade template rm web-app old-api"
    )]
    Rm {
        /// Template names or ids.
        #[arg(required = true, value_name = "TEMPLATE")]
        templates: Vec<String>,
    },
    /// Print the log of a template's build (the newest unless --build).
    #[command(after_help = "Examples:
  stockade template logs web-app
  stockade template logs web-app --build b1c2d3e4f5a6 --json")]
    Logs {
        /// Template name or id.
        #[arg(value_name = "TEMPLATE")]
        template: String,
        /// The build to show (`stockade template logs` of another build id).
        #[arg(long, value_name = "BUILD_ID")]
        build: Option<String>,
    },
    /// Tag a build of a template (its newest ready build unless --build):
    /// `stockade create --template NAME:TAG` then runs it. A tag points at
    /// one build; the template's other builds lose it.
    #[command(after_help = "Examples:
  stockade template tag web-app stable
  stockade template tag web-app v2 --build 0b6c5a43-7c1e-4d2a-9f3e-2b8d1c0a9e11
  stockade create --template web-app:stable")]
    Tag {
        /// Template name or id.
        #[arg(value_name = "TEMPLATE")]
        template: String,
        /// The tags to give.
        #[arg(required = true, value_name = "TAG")]
        tags: Vec<String>,
        /// The build to tag [default: the newest ready one].
        #[arg(long, value_name = "BUILD_ID")]
        build: Option<String>,
    },
    /// Take tags from a template's builds.
    #[command(after_help = "Example:
  stockade template untag web-app stable")]
    Untag {
        /// Template name or id.
        #[arg(value_name = "TEMPLATE")]
        template: String,
        #[arg(required = true, value_name = "TAG")]
        tags: Vec<String>,
    },
}

#[derive(Args)]
pub struct BuildArgs {
    /// The Dockerfile [default: CONTEXT_DIR/Dockerfile].
    #[arg(long = "file", short = 'f', value_name = "DOCKERFILE", value_hint = ValueHint::FilePath)]
    file: Option<PathBuf>,
    /// The build context [default: the Dockerfile's directory].
    #[arg(value_name = "CONTEXT_DIR", value_hint = ValueHint::DirPath)]
    context: Option<PathBuf>,
    /// The template's name (`name:tag` tags the build).
    #[arg(long, value_name = "NAME")]
    name: String,
    /// CPU cores of its builds and sandboxes.
    #[arg(long, value_name = "N")]
    cpu: Option<u32>,
    /// Memory of its builds and sandboxes, in MiB.
    #[arg(long, value_name = "MB")]
    memory_mb: Option<u32>,
    /// Disk of its builds and sandboxes, in GB.
    #[arg(long, value_name = "GB")]
    disk_gb: Option<u32>,
}

/// `stockade template …`.
pub async fn template(ctx: &Ctx, cmd: TemplateCommand) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd {
        TemplateCommand::Build(a) => build(ctx, &client, a).await,
        TemplateCommand::Ls => list(ctx, &client).await,
        TemplateCommand::Rm { templates } => remove(ctx, &client, &templates).await,
        TemplateCommand::Logs { template, build } => {
            logs(ctx, &client, &template, build.as_deref()).await
        }
        TemplateCommand::Tag {
            template,
            tags,
            build,
        } => tag(ctx, &client, &template, &tags, build.as_deref()).await,
        TemplateCommand::Untag { template, tags } => {
            let mut batch = Batch::new(ctx.json);
            for t in &tags {
                match client.remove_template_tag(&template, t).await {
                    Ok(()) => batch.ok(
                        serde_json::json!({ "tag": t }),
                        &format!("untagged {template}:{t}"),
                    )?,
                    Err(e) => batch.failed(t, in_words(e))?,
                }
            }
            batch.finish()
        }
    }
}

/// The newest build of `template` with `status` (any status when `None`).
async fn newest_build(
    client: &Client,
    template: &str,
    status: Option<&str>,
) -> anyhow::Result<String> {
    let t = client.template(template).await.map_err(in_words)?;
    let found = t
        .builds
        .as_deref()
        .and_then(|b| b.iter().find(|b| status.is_none_or(|s| b.status == s)))
        .map(|b| b.build_id.clone());
    found.ok_or_else(|| {
        CliError::new(
            "not_found",
            match status {
                Some(s) => format!("template `{template}` has no {s} build"),
                None => format!("template `{template}` has no builds you can see"),
            },
        )
        .into()
    })
}

async fn tag(
    ctx: &Ctx,
    client: &Client,
    template: &str,
    tags: &[String],
    build: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let build_id = match build {
        Some(b) => b.to_owned(),
        None => newest_build(client, template, Some("ready")).await?,
    };
    let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
    let b = client
        .tag_build(template, &build_id, &tags)
        .await
        .map_err(in_words)?;
    if ctx.json {
        output::json(&b)?;
    } else {
        outln!("build {} of {template}: {}", b.build_id, b.tags.join(", "))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// An SDK error about a template in CLI words: one that does not exist
/// says how to see the ones that do.
fn in_words(e: stockade_sdk::Error) -> anyhow::Error {
    let err = output::sdk_error(&e, None);
    if e.is_not_found() {
        return err
            .hint("`stockade template ls` lists your templates")
            .into();
    }
    err.into()
}

/// The Dockerfile and the context directory `build` uses: `-f` or
/// `CONTEXT_DIR/Dockerfile`; the context given or the Dockerfile's
/// directory.
fn dockerfile_and_context(file: Option<&Path>, context: Option<&Path>) -> (PathBuf, PathBuf) {
    match (file, context) {
        (Some(f), Some(c)) => (f.to_owned(), c.to_owned()),
        (Some(f), None) => {
            let dir = f
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            (f.to_owned(), dir.to_owned())
        }
        (None, Some(c)) => (c.join("Dockerfile"), c.to_owned()),
        (None, None) => (PathBuf::from("Dockerfile"), PathBuf::from(".")),
    }
}

/// A log line as people read it: `[step] message`.
fn log_line(l: &BuildLogEntry) -> String {
    match &l.step {
        Some(step) => format!("[{step}] {}", l.message),
        None => l.message.clone(),
    }
}

async fn build(ctx: &Ctx, client: &Client, a: BuildArgs) -> anyhow::Result<ExitCode> {
    if a.cpu == Some(0) {
        return Err(CliError::invalid("--cpu must be a positive whole number of cores").into());
    }
    if a.memory_mb == Some(0) {
        return Err(CliError::invalid("--memory-mb must be a positive number of MiB").into());
    }
    if a.disk_gb == Some(0) {
        return Err(CliError::invalid("--disk-gb must be a positive number of GB").into());
    }
    let (file, dir) = dockerfile_and_context(a.file.as_deref(), a.context.as_deref());
    let dockerfile = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read the Dockerfile {}", file.display()))?;
    if !dir.is_dir() {
        return Err(CliError::invalid(format!(
            "the build context {} is not a directory",
            dir.display()
        ))
        .into());
    }
    let archive = output::spinning(
        "Packing the build context",
        ctx.json,
        tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || context::pack(&dir)
        }),
    )
    .await??;
    let req = CreateTemplateRequest {
        name: a.name.clone(),
        cpu_count: a.cpu,
        memory_mb: a.memory_mb,
        disk_size_gb: a.disk_gb,
        ..Default::default()
    };
    let started = Instant::now();
    let size = indicatif::HumanBytes(archive.len() as u64);
    let build = output::spinning(
        &format!("Uploading the build context ({size}) and starting the build"),
        ctx.json,
        client.build_template_from_dockerfile_with(&req, &dockerfile, Some(archive)),
    )
    .await
    .map_err(in_words)?;
    if !ctx.json {
        errln!("Building template {} (build {})", a.name, build.build_id);
    }
    let quiet = ctx.json;
    let done = client
        .wait_for_build(&build.template_id, &build.build_id, |l| {
            if !quiet {
                errln!("{}", log_line(l));
            }
        })
        .await
        .map_err(in_words)?;
    if ctx.json {
        output::json(&done)?;
    } else {
        errln!(
            "Built template {} in {}: `stockade create --template {}`",
            a.name,
            output::duration(started.elapsed()),
            a.name
        );
        outln!("{}", done.template_id)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The newest build's status as `ls` shows it (`error at step 3`).
fn build_status_text(b: Option<&BuildResponse>) -> String {
    match b {
        None => "-".to_owned(),
        Some(b) => match (b.status.as_str(), b.failed_step) {
            ("error", Some(step)) => format!("error at step {step}"),
            (status, _) => status.to_owned(),
        },
    }
}

fn template_row(t: &TemplateResponse) -> Vec<String> {
    let names = match t.shared {
        true => format!("{} (public)", t.names.join(", ")),
        false => t.names.join(", "),
    };
    vec![
        t.template_id.clone(),
        names,
        build_status_text(t.builds.as_deref().and_then(|b| b.first())),
        t.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
    ]
}

const TEMPLATE_HEADER: [&str; 4] = ["ID", "NAMES", "LATEST BUILD", "CREATED"];

async fn list(ctx: &Ctx, client: &Client) -> anyhow::Result<ExitCode> {
    let mut list = client.templates().await.map_err(in_words)?;
    // The list has no builds: each of your own is read for its newest one.
    for t in list.templates.iter_mut().filter(|t| !t.shared) {
        match client.template(&t.template_id).await {
            Ok(full) => t.builds = full.builds,
            // Deleted since the list was read.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(in_words(e)),
        }
    }
    if ctx.json {
        output::json(&list)?;
    } else if list.templates.is_empty() {
        outln!("No templates (`stockade template build --name NAME` makes one).")?;
    } else {
        let rows: Vec<Vec<String>> = list.templates.iter().map(template_row).collect();
        output::table(&TEMPLATE_HEADER, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn remove(ctx: &Ctx, client: &Client, templates: &[String]) -> anyhow::Result<ExitCode> {
    let mut batch = Batch::new(ctx.json);
    for name in templates {
        match client.delete_template(name).await {
            Ok(t) => batch.ok(
                serde_json::to_value(&t)?,
                &format!("deleted template {name} ({})", t.template_id),
            )?,
            Err(e) => batch.failed(name, in_words(e))?,
        }
    }
    batch.finish()
}

async fn logs(
    ctx: &Ctx,
    client: &Client,
    template: &str,
    build: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let build_id = match build {
        Some(b) => b.to_owned(),
        None => newest_build(client, template, None).await?,
    };
    let mut offset = 0u64;
    let mut all: Option<BuildStatusResponse> = None;
    loop {
        let page = client
            .build_status(template, &build_id, offset, Some(MAX_BUILD_LOG_PAGE))
            .await
            .map_err(in_words)?;
        let last = page.log_entries.is_empty();
        if let Some(l) = page.log_entries.last() {
            offset = l.offset + 1;
        }
        if !ctx.json {
            for l in &page.log_entries {
                outln!("{}", log_line(l))?;
            }
        }
        match &mut all {
            Some(all) => {
                all.build = page.build;
                all.log_entries.extend(page.log_entries);
            }
            None => all = Some(page),
        }
        if last {
            break;
        }
    }
    if let Some(all) = all {
        if ctx.json {
            output::json(&all)?;
        } else if all.build.status == "error" {
            let reason = all.build.reason.as_deref().unwrap_or("the build failed");
            errln!("build {build_id} failed: {reason}");
        } else if all.build.status != "ready" {
            errln!("build {build_id} is {}", all.build.status);
        }
    }
    Ok(ExitCode::SUCCESS)
}

mod context {
    //! The build context as a tar.gz made in memory: the directory's files
    //! with paths relative to it, without `.git` and what `.dockerignore`
    //! lists. Ownership and times are left out so that the same files give
    //! the same archive, and so the same hash (the server keeps files and
    //! cached layers by it).

    use std::path::Path;

    use anyhow::Context;
    use flate2::write::GzEncoder;
    use flate2::Compression;

    /// The patterns of `dir/.dockerignore` (none when it is missing).
    fn ignore_patterns(dir: &Path) -> anyhow::Result<Vec<String>> {
        let path = dir.join(".dockerignore");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        Ok(parse_ignore(&text))
    }

    /// The usable lines of a `.dockerignore`: no comments, blanks or `!`
    /// exceptions (not supported), without leading `/` or `./` and
    /// trailing `/`.
    pub fn parse_ignore(text: &str) -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
            .map(|l| {
                let l = l.trim_start_matches("./").trim_start_matches('/');
                l.trim_end_matches('/').to_owned()
            })
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// Whether `rel` (a path relative to the context, `/`-separated) is
    /// left out of the archive.
    pub fn ignored(rel: &str, patterns: &[String]) -> bool {
        if rel == ".git" || rel.ends_with("/.git") {
            return true;
        }
        // `*` and `?` stay within a directory level, `**` crosses them.
        patterns.iter().any(|p| {
            globset::GlobBuilder::new(p)
                .literal_separator(true)
                .build()
                .is_ok_and(|g| g.compile_matcher().is_match(rel))
        })
    }

    /// The context `dir` as a tar.gz.
    pub fn pack(dir: &Path) -> anyhow::Result<Vec<u8>> {
        let patterns = ignore_patterns(dir)?;
        let mut b = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
        b.follow_symlinks(false);
        b.mode(tar::HeaderMode::Deterministic);
        add_dir(&mut b, dir, "", &patterns)?;
        Ok(b.into_inner()?.finish()?)
    }

    /// Adds the entries of `dir` (at `rel` in the archive), sorted by name.
    fn add_dir(
        b: &mut tar::Builder<GzEncoder<Vec<u8>>>,
        dir: &Path,
        rel: &str,
        patterns: &[String],
    ) -> anyhow::Result<()> {
        let mut children: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("cannot read {}", dir.display()))?;
        children.sort_by_key(|e| e.file_name());
        for child in children {
            let name = child.file_name();
            let Some(name) = name.to_str() else {
                anyhow::bail!("{}: file names must be UTF-8", child.path().display());
            };
            let child_rel = match rel {
                "" => name.to_owned(),
                _ => format!("{rel}/{name}"),
            };
            if ignored(&child_rel, patterns) {
                continue;
            }
            let path = child.path();
            let meta = std::fs::symlink_metadata(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            if meta.is_dir() {
                b.append_dir(&child_rel, &path)
                    .with_context(|| format!("cannot archive {}", path.display()))?;
                add_dir(b, &path, &child_rel, patterns)?;
            } else {
                b.append_path_with_name(&path, &child_rel)
                    .with_context(|| format!("cannot archive {}", path.display()))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: TemplateCommand,
    }

    fn parse(args: &[&str]) -> Result<TemplateCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("template").chain(args.iter().copied())).map(|c| c.cmd)
    }

    #[test]
    fn build_flags_are_parsed() {
        let TemplateCommand::Build(a) = parse(&[
            "build",
            "-f",
            "d/Dockerfile",
            "ctx",
            "--name",
            "web",
            "--cpu",
            "2",
            "--memory-mb",
            "2048",
            "--disk-gb",
            "5",
        ])
        .unwrap() else {
            panic!("not build");
        };
        assert_eq!(a.file.as_deref(), Some(Path::new("d/Dockerfile")));
        assert_eq!(a.context.as_deref(), Some(Path::new("ctx")));
        assert_eq!(
            (a.name.as_str(), a.cpu, a.memory_mb, a.disk_gb),
            ("web", Some(2), Some(2048), Some(5))
        );
        assert!(
            parse(&["build", "-f", "Dockerfile"]).is_err(),
            "--name is required"
        );
        assert!(parse(&["build", "--name", "x", "--cpu", "two"]).is_err());
    }

    #[test]
    fn ls_rm_and_logs_are_parsed() {
        assert!(matches!(parse(&["ls"]).unwrap(), TemplateCommand::Ls));
        assert!(matches!(parse(&["list"]).unwrap(), TemplateCommand::Ls));
        let TemplateCommand::Rm { templates } = parse(&["rm", "a", "b"]).unwrap() else {
            panic!("not rm");
        };
        assert_eq!(templates, ["a", "b"]);
        assert!(parse(&["rm"]).is_err(), "a template is required");
        let TemplateCommand::Logs { template, build } =
            parse(&["logs", "web", "--build", "b1"]).unwrap()
        else {
            panic!("not logs");
        };
        assert_eq!((template.as_str(), build.as_deref()), ("web", Some("b1")));
        let TemplateCommand::Logs { build, .. } = parse(&["logs", "web"]).unwrap() else {
            panic!("not logs");
        };
        assert_eq!(build, None);
    }

    #[test]
    fn the_context_defaults_to_the_dockerfiles_directory() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            dockerfile_and_context(Some(Path::new("d/Dockerfile")), None),
            (p("d/Dockerfile"), p("d"))
        );
        assert_eq!(
            dockerfile_and_context(Some(Path::new("Dockerfile")), None),
            (p("Dockerfile"), p("."))
        );
        assert_eq!(
            dockerfile_and_context(None, Some(Path::new("app"))),
            (p("app/Dockerfile"), p("app"))
        );
        assert_eq!(
            dockerfile_and_context(None, None),
            (p("Dockerfile"), p("."))
        );
    }

    #[test]
    fn dockerignore_patterns_match_paths() {
        let pats = context::parse_ignore(
            "# comment\n\nnode_modules\n/build/\n*.log\n**/tmp\n!keep.log\ndocs/*.md\n",
        );
        assert_eq!(
            pats,
            ["node_modules", "build", "*.log", "**/tmp", "docs/*.md"]
        );
        for yes in [
            ".git",
            "node_modules",
            "build",
            "a.log",
            "tmp",
            "x/y/tmp",
            "docs/a.md",
            "sub/.git",
        ] {
            assert!(context::ignored(yes, &pats), "{yes}");
        }
        for no in ["src", "src/a.log", "docs", "docs/x/a.md", "builds"] {
            assert!(!context::ignored(no, &pats), "{no}");
        }
    }

    #[test]
    fn the_context_is_packed_without_git_and_ignored_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        std::fs::write(root.join(".git/HEAD"), "ref").unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/main.py"), "print(1)").unwrap();
        std::fs::write(root.join("debug.log"), "x").unwrap();
        std::fs::write(root.join(".dockerignore"), "*.log\n").unwrap();
        std::fs::write(root.join("Dockerfile"), "FROM alpine\n").unwrap();
        let archive = context::pack(root).unwrap();
        assert_eq!(archive, context::pack(root).unwrap(), "the same every time");
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&archive[..])
            .read_to_end(&mut tar)
            .unwrap();
        let mut names: Vec<String> = tar::Archive::new(&tar[..])
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(names, [".dockerignore", "Dockerfile", "src", "src/main.py"]);
    }

    #[test]
    fn log_lines_name_their_step() {
        let mut l: BuildLogEntry = serde_json::from_value(serde_json::json!({
            "offset": 0, "timestamp": "2025-01-01T00:00:00Z", "level": "info",
            "step": "2/6", "message": "COPY src ./"
        }))
        .unwrap();
        assert_eq!(log_line(&l), "[2/6] COPY src ./");
        l.step = None;
        assert_eq!(log_line(&l), "COPY src ./");
    }
}
