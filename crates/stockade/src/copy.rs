//! `stockade cp` (files and directories to and from a sandbox, as tar
//! archives, like `docker cp`) and `stockade files ls|cat|rm|mkdir|mv|watch`
//! (listings, contents, removals, directories, moves and changes inside a
//! sandbox).

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::{Args, Subcommand};
use stockade_sdk::api::FileEntry;
use stockade_sdk::api::FileType;
use stockade_sdk::{ByteStream, Sandbox, StreamExt, WatchEvent};

use crate::cli::{self, on, Batch, Ctx};
use crate::output::{self, CliError};
use crate::upload::{file_stream, pack};

#[derive(Args)]
#[command(after_help = "Examples:
  stockade cp ./src demo:/workspace/src      # a directory up (made if missing)
  stockade cp ./app.py demo:app.py           # relative paths are under /workspace
  stockade cp demo:/workspace/dist ./dist    # and back down
  stockade cp ./site/. demo:/srv/www         # `DIR/.` copies what is inside DIR
  stockade cp demo:/etc/os-release -         # `-`: a file's bytes on stdout (a directory: its tar)

Like `docker cp`: a directory copied onto an existing directory lands inside
it; onto a missing path it becomes that path. Modes and symlinks are kept.")]
pub struct CpArgs {
    /// LOCAL_PATH or SANDBOX:PATH.
    #[arg(value_name = "SRC")]
    src: String,
    /// SANDBOX:PATH or LOCAL_PATH (`-`: stdout, a file as its bytes, a
    /// directory as a tar).
    #[arg(value_name = "DEST")]
    dest: String,
}

/// A `SANDBOX:PATH` argument; anything else is local.
fn remote(arg: &str) -> Option<(&str, &str)> {
    let (sb, path) = arg.split_once(':')?;
    (!sb.is_empty() && !sb.contains('/') && !sb.starts_with('.')).then_some((sb, path))
}

/// `DIR/.`: copy what is inside, not the directory itself.
fn contents_only(path: &str) -> bool {
    path.ends_with("/.") || path == "."
}

pub async fn cp(ctx: &Ctx, a: CpArgs) -> anyhow::Result<ExitCode> {
    match (remote(&a.src), remote(&a.dest)) {
        (Some(_), Some(_)) => {
            return Err(CliError::invalid(
                "copy between two sandboxes is not supported; copy to a local directory first",
            )
            .into())
        }
        (None, None) => {
            return Err(CliError::invalid(
                "one side must be a sandbox path: SANDBOX:PATH (e.g. demo:/workspace)",
            )
            .into())
        }
        (None, Some((name, path))) => {
            let client = ctx.client()?;
            let sb = cli::live_sandbox(&client, name).await?;
            let done = upload(&sb, Path::new(&a.src), path, ctx.json)
                .await
                .map_err(|e| in_words(e, name))?;
            if ctx.json {
                output::json(&done)?;
            } else {
                errln!(
                    "Copied {} ({}, {}) to {}:{}",
                    a.src,
                    output::count(done.entries, "entry", "entries"),
                    human(done.bytes),
                    sb.name(),
                    done.path
                );
            }
        }
        (Some((name, path)), None) => {
            let client = ctx.client()?;
            let sb = cli::live_sandbox(&client, name).await?;
            let (files, bytes) = download(&sb, path, &a.dest, ctx.json)
                .await
                .map_err(|e| in_words(e, name))?;
            if ctx.json {
                output::json(
                    &serde_json::json!({ "path": a.dest, "entries": files, "bytes": bytes }),
                )?;
            } else if a.dest != "-" {
                errln!(
                    "Copied {}:{} ({}, {}) to {}",
                    sb.name(),
                    path,
                    output::count(files, "entry", "entries"),
                    human(bytes),
                    a.dest
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An SDK error of a copy in CLI words (other errors as they are).
fn in_words(e: anyhow::Error, sandbox: &str) -> anyhow::Error {
    match e.downcast::<stockade_sdk::Error>() {
        Ok(sdk) => on(sandbox)(sdk),
        Err(other) => other,
    }
}

fn human(bytes: u64) -> String {
    indicatif::HumanBytes(bytes).to_string()
}

fn base_name(path: &Path) -> anyhow::Result<PathBuf> {
    path.file_name()
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("{} has no file name to copy as", path.display()))
}

async fn upload(
    sb: &Sandbox,
    src: &Path,
    dest: &str,
    quiet: bool,
) -> anyhow::Result<stockade_sdk::api::ArchiveUploadResponse> {
    let meta = std::fs::metadata(src).with_context(|| format!("cannot read {}", src.display()))?;
    let dest = if dest.is_empty() { "/workspace" } else { dest };
    let dest_kind = match sb.stat(dest).await {
        Ok(e) => Some(e.file_type),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    let dest_path = Path::new(dest);
    let trailing_slash = dest.ends_with('/');
    // (directory to unpack into, name of the top entry or None for contents)
    let (dir, name): (String, Option<PathBuf>) = if meta.is_dir() {
        match dest_kind {
            Some(FileType::Dir) if contents_only(&src.to_string_lossy()) => (dest.to_owned(), None),
            Some(FileType::Dir) => (dest.to_owned(), Some(base_name(&src.canonicalize()?)?)),
            Some(_) => bail!("cannot copy a directory onto {dest}, which is not a directory"),
            None => (dest.to_owned(), None),
        }
    } else {
        match dest_kind {
            Some(FileType::Dir) => (dest.to_owned(), Some(base_name(src)?)),
            None if trailing_slash => (dest.to_owned(), Some(base_name(src)?)),
            _ => {
                let parent = dest_path
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "/workspace".into());
                (parent, Some(base_name(dest_path)?))
            }
        }
    };
    let (tmp, len) = tokio::task::spawn_blocking({
        let src = src.to_owned();
        move || pack(&src, name.as_deref())
    })
    .await??;
    let pb = output::bytes_bar(len, "Uploading", quiet);
    let body = file_stream(tmp.path(), pb.clone()).await?;
    let done = sb.upload_archive_stream(&dir, body, Some(len)).await;
    pb.finish_and_clear();
    Ok(done?)
}

/// The path an archive entry goes to: its first component `top` replaced
/// by `rename` (or dropped when `rename` is None); None for the top itself
/// when it is dropped. Refuses anything that could leave the destination.
fn target_of(entry: &Path, top: &Path, rename: Option<&Path>) -> anyhow::Result<Option<PathBuf>> {
    let mut parts = entry.components();
    match parts.next() {
        Some(Component::Normal(first)) if Path::new(first) == top => {}
        _ => bail!("the archive holds an unexpected entry {}", entry.display()),
    }
    let mut out = rename.map(Path::to_path_buf).unwrap_or_default();
    for part in parts {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => bail!("the archive holds an unsafe entry {}", entry.display()),
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// No directory between `base` and `target` may be a symlink (an archive
/// must not write through one it made).
fn check_no_symlink_parents(base: &Path, rel: &Path) -> anyhow::Result<()> {
    let mut cur = base.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        cur.push(part);
        if std::fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!("refusing to write below the symlink {}", cur.display());
        }
    }
    Ok(())
}

/// Unpacks the tar at `archive` into `base`, its top entry renamed.
fn unpack(archive: &Path, base: &Path, rename: Option<&Path>) -> anyhow::Result<(u64, u64)> {
    let top = top_name(archive)?;
    let mut a = tar::Archive::new(std::fs::File::open(archive)?);
    a.set_preserve_permissions(true);
    a.set_preserve_mtime(true);
    let (mut files, mut bytes) = (0u64, 0u64);
    for entry in a.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let Some(rel) = target_of(&path, &top, rename)? else {
            continue;
        };
        check_no_symlink_parents(base, &rel)?;
        let target = base.join(&rel);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let kind = entry.header().entry_type();
        if kind.is_hard_link() {
            let link = entry
                .link_name()?
                .ok_or_else(|| anyhow!("a hard link without a target in the archive"))?
                .into_owned();
            let Some(link_rel) = target_of(&link, &top, rename)? else {
                bail!("a hard link to the top directory in the archive");
            };
            let _ = std::fs::remove_file(&target);
            std::fs::hard_link(base.join(link_rel), &target)
                .with_context(|| format!("cannot link {}", target.display()))?;
        } else {
            if kind.is_file() || kind.is_symlink() {
                // Replace what is there, like cp does (never through a link).
                if std::fs::symlink_metadata(&target).is_ok_and(|m| !m.is_dir()) {
                    std::fs::remove_file(&target)?;
                }
            }
            if kind.is_file() {
                bytes += entry.header().size()?;
            }
            entry
                .unpack(&target)
                .with_context(|| format!("cannot write {}", target.display()))?;
        }
        files += 1;
    }
    Ok((files, bytes))
}

/// Writes `body` to stdout as it arrives; the bytes written.
async fn to_stdout(mut body: ByteStream) -> anyhow::Result<u64> {
    let mut out = std::io::stdout();
    let mut total = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        total += chunk.len() as u64;
        out.write_all(&chunk)?;
    }
    out.flush()?;
    Ok(total)
}

async fn download(sb: &Sandbox, src: &str, dest: &str, quiet: bool) -> anyhow::Result<(u64, u64)> {
    let src_path = if src.is_empty() { "/workspace" } else { src };
    if dest == "-" {
        // A file goes to stdout as its bytes; a directory as a tar.
        match sb.read_file_stream(src_path).await {
            Ok(body) => return Ok((1, to_stdout(body).await?)),
            Err(stockade_sdk::Error::InvalidParams { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut stream = sb.download_archive_stream(src_path).await?;
    let tmp = tempfile::NamedTempFile::new().context("cannot create a temporary file")?;
    let mut file = tmp.reopen()?;
    let pb = output::bytes_bar(0, "Downloading", quiet || dest == "-");
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        total += chunk.len() as u64;
        pb.inc(chunk.len() as u64);
        file.write_all(&chunk)?;
    }
    file.sync_all()?;
    pb.finish_and_clear();
    if dest == "-" {
        let mut out = std::io::stdout();
        std::io::copy(&mut std::fs::File::open(tmp.path())?, &mut out)?;
        out.flush()?;
        return Ok((0, total));
    }
    let dest_path = PathBuf::from(dest);
    let (base, rename): (PathBuf, Option<PathBuf>) = match std::fs::metadata(&dest_path) {
        Ok(m) if m.is_dir() && contents_only(src_path) => (dest_path, None),
        Ok(m) if m.is_dir() => {
            // Lands inside it under its own name (the archive's top entry).
            let top = tokio::task::spawn_blocking({
                let p = tmp.path().to_owned();
                move || top_name(&p)
            })
            .await??;
            (dest_path, Some(top))
        }
        _ => {
            if dest.ends_with('/') {
                bail!("{dest} does not exist; make the directory first or drop the trailing /");
            }
            let parent = dest_path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            if !parent.is_dir() {
                bail!("{} does not exist; make it first", parent.display());
            }
            (parent, Some(base_name(&dest_path)?))
        }
    };
    let archive = tmp.path().to_owned();
    let done =
        tokio::task::spawn_blocking(move || unpack(&archive, &base, rename.as_deref())).await??;
    Ok(done)
}

fn top_name(archive: &Path) -> anyhow::Result<PathBuf> {
    let mut a = tar::Archive::new(std::fs::File::open(archive)?);
    let first = a
        .entries()?
        .next()
        .ok_or_else(|| anyhow!("the sandbox sent an empty archive"))??;
    let path = first.path()?.into_owned();
    match path.components().next() {
        Some(Component::Normal(c)) => Ok(PathBuf::from(c)),
        _ => bail!("the archive holds an unexpected entry {}", path.display()),
    }
}

#[derive(Subcommand)]
pub enum FilesCommand {
    /// List a directory (one line per entry: type, mode, size, time, name),
    /// or show one file. Works on a stopped sandbox too.
    #[command(
        alias = "list",
        after_help = "Examples:
  stockade files ls demo                     # /workspace
  stockade files ls demo src                 # relative paths are under /workspace
  stockade files ls demo /etc/hosts --json"
    )]
    Ls {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// The directory or file (default /workspace).
        #[arg(value_name = "PATH", default_value = "/workspace")]
        path: String,
    },
    /// Print files' bytes to stdout, one after the other (like `cat`).
    /// Works on a stopped sandbox too.
    #[command(after_help = "Examples:
  stockade files cat demo package.json
  stockade files cat demo /var/log/app.log | tail -20
  stockade files cat demo logo.png > logo.png")]
    Cat {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// Files to print.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<String>,
    },
    /// Remove files, links and empty directories (with -r: directories and
    /// everything in them).
    #[command(
        alias = "remove",
        alias = "delete",
        after_help = "Examples:
  stockade files rm demo notes.txt /tmp/scratch.log
  stockade files rm -r demo build"
    )]
    Rm {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// Paths to remove.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<String>,
        /// Directories with everything in them.
        #[arg(long, short = 'r')]
        recursive: bool,
    },
    /// Make directories and their missing parents (like `mkdir -p`).
    #[command(after_help = "Examples:
  stockade files mkdir demo build/out        # relative paths are under /workspace
  stockade files mkdir demo /srv/www /srv/logs")]
    Mkdir {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// Directories to make.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<String>,
    },
    /// Move or rename a file or directory inside a sandbox.
    #[command(
        alias = "move",
        after_help = "Examples:
  stockade files mv demo notes.txt archive/notes.txt
  stockade files mv demo /workspace/build /workspace/build.old"
    )]
    Mv {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// The path to move.
        #[arg(value_name = "FROM")]
        from: String,
        /// Where it goes (its new name, not a directory to put it in).
        #[arg(value_name = "TO")]
        to: String,
    },
    /// Print one line per change in a directory until Ctrl-C (or until the
    /// sandbox stops).
    #[command(after_help = "Examples:
  stockade files watch demo                  # /workspace, not its subdirectories
  stockade files watch demo src -r           # src and everything below it
  stockade files watch demo -r --json | jq -r 'select(.event == \"write\") | .path'

Each line is the change (create, write, remove, rename, chmod), then the
path; --json prints one object a line: {\"event\",\"path\",\"type\"}.")]
    Watch {
        /// Sandbox id or name.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
        /// The directory (default /workspace; relative: under /workspace).
        #[arg(value_name = "PATH", default_value = "/workspace")]
        path: String,
        /// Its subdirectories too.
        #[arg(long, short = 'r')]
        recursive: bool,
    },
}

/// One watch event as a line: `create  /workspace/a.txt`.
fn watch_line(ev: &WatchEvent) -> String {
    let kind = match ev.file_type {
        Some(FileType::Dir) => format!("{} dir", ev.kind),
        _ => ev.kind.to_string(),
    };
    format!("{kind:<10} {}", ev.path)
}

/// `path` is not in the sandbox, in CLI words (other errors as they are).
fn path_error(e: stockade_sdk::Error, path: &str, sandbox: &str) -> anyhow::Error {
    if e.is_not_found() {
        CliError::new(
            "not_found",
            format!("`{path}` does not exist in sandbox `{sandbox}`"),
        )
        .into()
    } else {
        on(sandbox)(e)
    }
}

/// One entry as a row: type, mode, size, time, and its name (`dir/`,
/// `link -> target`).
fn entry_row(e: &FileEntry) -> Vec<String> {
    let (kind, name) = match e.file_type {
        FileType::Dir => ("dir", format!("{}/", e.name)),
        FileType::Symlink => (
            "link",
            format!("{} -> {}", e.name, e.link_target.as_deref().unwrap_or("?")),
        ),
        FileType::File => ("file", e.name.clone()),
        FileType::Other => ("other", e.name.clone()),
    };
    vec![
        kind.to_owned(),
        e.mode.clone(),
        match e.file_type {
            FileType::Dir => "-".to_owned(),
            _ => indicatif::HumanBytes(e.size).to_string(),
        },
        e.modified_at
            .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
            .unwrap_or_default(),
        name,
    ]
}

/// `stockade files ls`: a directory's entries, or the one entry of a file.
async fn list(ctx: &Ctx, sb: &Sandbox, sandbox: &str, path: &str) -> anyhow::Result<()> {
    let listing = match sb.list_dir(path).await {
        Ok(l) => l,
        // A file: its own entry, in a listing's shape.
        Err(stockade_sdk::Error::InvalidParams { .. }) => {
            let entry = sb
                .stat(path)
                .await
                .map_err(|e| path_error(e, path, sandbox))?;
            stockade_sdk::api::DirectoryListing {
                path: entry.path.clone(),
                entries: vec![entry],
                truncated: false,
            }
        }
        Err(e) => return Err(path_error(e, path, sandbox)),
    };
    if ctx.json {
        return output::json(&listing);
    }
    if listing.entries.is_empty() {
        outln!("{} is empty.", listing.path)?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = listing.entries.iter().map(entry_row).collect();
    output::table(&["TYPE", "MODE", "SIZE", "MODIFIED", "NAME"], &rows)?;
    if listing.truncated {
        errln!("(more entries exist than one listing holds)");
    }
    Ok(())
}

/// `stockade files …`.
pub async fn files(ctx: &Ctx, cmd: FilesCommand) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd {
        FilesCommand::Ls { sandbox, path } => {
            let sb = cli::live_sandbox(&client, &sandbox).await?;
            list(ctx, &sb, &sandbox, &path).await?;
            Ok(ExitCode::SUCCESS)
        }
        FilesCommand::Cat { sandbox, paths } => {
            if ctx.json {
                return Err(CliError::invalid(
                    "files cat prints the files' bytes, not JSON: drop --json",
                )
                .into());
            }
            let sb = cli::live_sandbox(&client, &sandbox).await?;
            for path in &paths {
                let body = match sb.read_file_stream(path).await {
                    Ok(body) => body,
                    Err(stockade_sdk::Error::InvalidParams { .. }) => {
                        return Err(CliError::invalid(format!(
                            "`{path}` is a directory — `stockade files ls {sandbox} {path}` lists it"
                        ))
                        .into())
                    }
                    Err(e) => return Err(path_error(e, path, &sandbox)),
                };
                to_stdout(body).await.map_err(|e| in_words(e, &sandbox))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        FilesCommand::Rm {
            sandbox,
            paths,
            recursive,
        } => {
            let sb = cli::running_sandbox(&client, &sandbox).await?;
            let mut batch = Batch::new(ctx.json);
            for path in &paths {
                let done = match recursive {
                    true => sb.remove_all(path).await,
                    false => sb.remove(path).await,
                };
                match done {
                    Ok(()) => batch.ok(
                        serde_json::json!({ "path": path, "removed": true }),
                        &format!("removed {path}"),
                    )?,
                    Err(e) if e.is_conflict() && !recursive => batch.failed(
                        path,
                        CliError::new(
                            "conflict",
                            format!("`{path}` is a directory that is not empty"),
                        )
                        .hint(format!(
                            "`stockade files rm -r {sandbox} {path}` removes it with everything in it"
                        ))
                        .into(),
                    )?,
                    Err(e) => batch.failed(path, path_error(e, path, &sandbox))?,
                }
            }
            batch.finish()
        }
        FilesCommand::Mkdir { sandbox, paths } => {
            let sb = cli::running_sandbox(&client, &sandbox).await?;
            let mut batch = Batch::new(ctx.json);
            for path in &paths {
                match sb.make_dir(path).await {
                    Ok(entry) => batch.ok(serde_json::to_value(&entry)?, &entry.path)?,
                    Err(e) => batch.failed(path, on(&sandbox)(e))?,
                }
            }
            batch.finish()
        }
        FilesCommand::Mv { sandbox, from, to } => {
            let sb = cli::running_sandbox(&client, &sandbox).await?;
            let entry = sb
                .move_path(&from, &to)
                .await
                .map_err(|e| path_error(e, &from, &sandbox))?;
            output::json_or(ctx.json, &entry, || entry.path.clone())?;
            Ok(ExitCode::SUCCESS)
        }
        FilesCommand::Watch {
            sandbox,
            path,
            recursive,
        } => {
            let sb = cli::running_sandbox(&client, &sandbox).await?;
            let mut events = sb.watch(&path, recursive).await.map_err(on(&sandbox))?;
            while let Some(ev) = events.next().await {
                let ev = ev.map_err(on(&sandbox))?;
                if ctx.json {
                    outln!(
                        "{}",
                        serde_json::json!({
                            "event": ev.kind.as_str(),
                            "path": ev.path,
                            "type": ev.file_type,
                        })
                    )?;
                } else {
                    outln!("{}", watch_line(&ev))?;
                }
            }
            if let (Some(reason), false) = (events.end_reason(), ctx.json) {
                errln!("({reason})");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths_are_told_apart_from_local_ones() {
        assert_eq!(remote("demo:/workspace"), Some(("demo", "/workspace")));
        assert_eq!(remote("demo:"), Some(("demo", "")));
        assert_eq!(remote("./a:b"), None);
        assert_eq!(remote("/tmp/a:b"), None);
        assert_eq!(remote("file.txt"), None);
        assert!(contents_only("dir/."));
        assert!(!contents_only("dir"));
    }

    #[test]
    fn entries_are_renamed_and_never_leave_the_destination() {
        let top = Path::new("src");
        assert_eq!(
            target_of(Path::new("src/a/b"), top, Some(Path::new("dst"))).unwrap(),
            Some(PathBuf::from("dst/a/b"))
        );
        assert_eq!(target_of(Path::new("src/"), top, None).unwrap(), None);
        assert_eq!(
            target_of(Path::new("src/a"), top, None).unwrap(),
            Some(PathBuf::from("a"))
        );
        assert!(target_of(Path::new("src/../x"), top, None).is_err());
        assert!(target_of(Path::new("other/x"), top, None).is_err());
        assert!(target_of(Path::new("/etc/passwd"), top, None).is_err());
    }

    #[test]
    fn a_directory_round_trips_through_pack_and_unpack() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("tree");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/x.bin"), [0u8, 255, 7]).unwrap();
        std::fs::write(src.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::symlink("sub/x.bin", src.join("link")).unwrap();
        let (tmp, _) = pack(&src, Some(Path::new("tree"))).unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let (files, bytes) = unpack(tmp.path(), &out, Some(Path::new("copy"))).unwrap();
        assert_eq!((files, bytes), (5, 3 + 10));
        assert_eq!(
            std::fs::read(out.join("copy/sub/x.bin")).unwrap(),
            [0, 255, 7]
        );
        let mode = std::fs::metadata(out.join("copy/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_link(out.join("copy/link")).unwrap(),
            Path::new("sub/x.bin")
        );
    }
}
