//! `stockade volume …`: shared volumes, named volumes of an account that
//! sandboxes mount (`stockade create --mount NAME:/path[:ro]`). Make, list
//! and delete them, and list, copy in and out, make and remove their files
//! without a sandbox. A sandbox's own `/workspace` volume is
//! `stockade volumes`.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use stockade_sdk::{
    Client, CreateSharedVolumeRequest, SharedVolumeResponse, StreamExt, VolumeEntryResponse,
    VolumeMountRequest, VolumeWrite,
};

use crate::cli::{key_values, Batch, Ctx};
use crate::output::{self, CliError};
use crate::upload::file_stream;

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Make a shared volume (on the server's own Docker host unless
    /// --server names another; sandboxes that mount it are placed there).
    #[command(after_help = "Examples:
  stockade volume create datasets
  stockade volume create cache --size-gb 20 --label team=ml
  stockade volume create scratch --server docker-2 --json")]
    Create(CreateArgs),
    /// List your shared volumes and the sandboxes that mount them.
    #[command(
        alias = "list",
        after_help = "Examples:
  stockade volume ls
  stockade volume ls --json | jq -r '.volumes[].name'"
    )]
    Ls,
    /// Delete shared volumes with their files (refused while a sandbox
    /// mounts one: delete the sandbox first).
    #[command(
        alias = "delete",
        after_help = "Example:
  stockade volume rm datasets cache"
    )]
    Rm {
        /// Volume names or ids.
        #[arg(required = true, value_name = "VOLUME")]
        volumes: Vec<String>,
    },
    /// Move a volume no sandbox mounts to another Docker host, with its
    /// files; sandboxes that mount it run there from then on.
    #[command(after_help = "Example:
  stockade volume mv datasets docker-2")]
    Mv {
        /// The volume's name or id.
        #[arg(value_name = "VOLUME")]
        volume: String,
        /// The Docker host to move it to (`stockade host ls` lists them).
        #[arg(value_name = "HOST")]
        server: String,
    },
    /// List the files of a volume (one line per entry: type, size, mode,
    /// path).
    #[command(after_help = "Examples:
  stockade volume ls-files datasets              # its root
  stockade volume ls-files datasets /raw --depth 3
  stockade volume ls-files datasets:/raw --json")]
    LsFiles {
        /// The volume (name or id), or VOLUME:PATH.
        #[arg(value_name = "VOLUME")]
        volume: String,
        /// A directory of the volume (default /, its root).
        #[arg(value_name = "PATH")]
        path: Option<String>,
        /// Levels to list (1 to 32).
        #[arg(long, short = 'd', default_value_t = 1)]
        depth: u32,
    },
    /// Copy a file into or out of a volume: one side VOLUME:PATH, the
    /// other a local path.
    #[command(after_help = "Examples:
  stockade volume cp ./train.csv datasets:/raw/      # into /raw (made if missing)
  stockade volume cp ./run.sh tools:/bin/run         # as /bin/run, its mode kept
  stockade volume cp datasets:/raw/train.csv .       # out, into the current directory
  stockade volume cp datasets:/config.json -         # `-`: its bytes on stdout
  cat notes.txt | stockade volume cp - datasets:/notes.txt

Paths in a volume are its own (`/` is its root). One file at a time: a
directory is refused. A local path with a colon in it is written ./name:x.")]
    Cp {
        /// LOCAL_PATH (`-`: stdin) or VOLUME:PATH.
        #[arg(value_name = "SOURCE")]
        src: String,
        /// VOLUME:PATH or LOCAL_PATH (`-`: stdout).
        #[arg(value_name = "TARGET")]
        dest: String,
    },
    /// Make directories in volumes (-p: with their missing parents, and no
    /// error when one exists).
    #[command(after_help = "Examples:
  stockade volume mkdir datasets:/raw
  stockade volume mkdir -p datasets:/raw/2024/01 cache:/pip")]
    Mkdir {
        /// VOLUME:PATH of each directory.
        #[arg(required = true, value_name = "VOLUME:PATH")]
        paths: Vec<String>,
        /// Make missing parents; an existing directory is fine.
        #[arg(long, short = 'p')]
        parents: bool,
    },
    /// Remove files from volumes (a directory with everything in it).
    #[command(after_help = "Example:
  stockade volume rm-file datasets:/raw/old.csv datasets:/tmp")]
    RmFile {
        /// VOLUME:PATH of each file or directory.
        #[arg(required = true, value_name = "VOLUME:PATH")]
        paths: Vec<String>,
    },
}

#[derive(Args)]
pub struct CreateArgs {
    /// 1 to 63 letters, digits and hyphens; unique among your volumes.
    #[arg(value_name = "NAME")]
    name: String,
    /// A size limit in whole GB, where the Docker host can enforce one.
    #[arg(long, value_name = "GB")]
    size_gb: Option<u32>,
    /// Label KEY=VALUE (repeatable).
    #[arg(long = "label", short = 'l', value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// The Docker host to keep it on (default: the server's own).
    #[arg(long, value_name = "HOST")]
    server: Option<String>,
}

/// What `create --mount` expects, in its error.
const MOUNT_SYNTAX: &str = "--mount expects NAME:/absolute/path[:ro]";

/// Parses `create --mount NAME:/path[:ro]` (`:rw`, the default, may be
/// written too).
pub fn mount_arg(arg: &str) -> Result<VolumeMountRequest, CliError> {
    let bad = |why: &str| CliError::invalid(format!("{MOUNT_SYNTAX}, got '{arg}' ({why})"));
    let (volume, rest) = arg.split_once(':').ok_or_else(|| bad("no path"))?;
    if volume.is_empty() || volume.contains('/') {
        return Err(bad("no volume name before the colon"));
    }
    let (path, read_only) = match rest.rsplit_once(':') {
        Some((path, "ro")) => (path, true),
        Some((path, "rw")) => (path, false),
        Some((_, mode)) => return Err(bad(&format!("'{mode}' is not ro"))),
        None => (rest, false),
    };
    if !path.starts_with('/') {
        return Err(bad("the path must be absolute"));
    }
    Ok(VolumeMountRequest {
        volume: volume.to_owned(),
        path: path.to_owned(),
        read_only: read_only.then_some(true),
    })
}

/// A create's error about its `i`th mount (`volumeMounts[i]…: …`, as the
/// server names it) told with the `--mount` argument that asked for it.
pub fn mount_error(mut err: CliError, mounts: &[String]) -> CliError {
    let Some(rest) = err.message.strip_prefix("volumeMounts[") else {
        return err;
    };
    let Some((index, tail)) = rest.split_once(']') else {
        return err;
    };
    let (Ok(i), Some((_, message))) = (index.parse::<usize>(), tail.split_once(": ")) else {
        return err;
    };
    let Some(arg) = mounts.get(i) else {
        return err;
    };
    err.message = format!("--mount {arg}: {message}");
    if err.code == "not_found" && err.hint.is_none() {
        err = err.hint("`stockade volume ls` lists your volumes");
    }
    err
}

/// A `VOLUME:PATH` argument: the volume (a name or an id: letters, digits
/// and hyphens) and the path in it, `/` when empty and taken from the
/// volume's root when relative. Anything else is a local path.
fn volume_path(arg: &str) -> Option<(&str, String)> {
    let (volume, path) = arg.split_once(':')?;
    let is_volume = !volume.is_empty()
        && volume
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    is_volume.then(|| (volume, rooted(path)))
}

/// A path of a volume as its API takes it: absolute, `/` for none.
fn rooted(path: &str) -> String {
    if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    }
}

/// A `VOLUME:PATH` argument of `mkdir` and `rm-file`, refused in words
/// otherwise.
fn required_volume_path(arg: &str) -> Result<(&str, String), CliError> {
    volume_path(arg).ok_or_else(|| {
        CliError::invalid(format!(
            "expected VOLUME:PATH (e.g. datasets:/raw), got '{arg}'"
        ))
    })
}

/// An SDK error about a volume in CLI words: a volume that does not exist
/// says how to see the ones that do.
fn in_words(e: stockade_sdk::Error) -> anyhow::Error {
    let missing_volume = e.is_not_found()
        && matches!(&e, stockade_sdk::Error::Api { message, .. }
            if message.starts_with("volume '") && message.ends_with("not found"));
    let err = output::sdk_error(&e, None);
    if missing_volume {
        return err.hint("`stockade volume ls` lists your volumes").into();
    }
    err.into()
}

fn human(bytes: u64) -> String {
    indicatif::HumanBytes(bytes).to_string()
}

/// Where a volume is mounted, as `ls` shows it: `SANDBOX:/path[:ro]`, …
fn mounted_by(v: &SharedVolumeResponse) -> String {
    if v.mounts.is_empty() {
        return "-".to_owned();
    }
    v.mounts
        .iter()
        .map(|m| {
            format!(
                "{}:{}{}",
                m.sandbox_id,
                m.path,
                if m.read_only { ":ro" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn volume_row(v: &SharedVolumeResponse) -> Vec<String> {
    let name = if v.status == "READY" {
        v.name.clone()
    } else {
        format!("{} ({})", v.name, v.status.to_lowercase())
    };
    vec![
        name,
        v.id.clone(),
        v.server.clone(),
        mounted_by(v),
        v.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
    ]
}

const VOLUME_HEADER: [&str; 5] = ["NAME", "ID", "HOST", "MOUNTED BY", "CREATED"];

/// One entry of a volume as a row: type, size, mode, path (`dir/`,
/// `link -> target`).
fn entry_row(e: &VolumeEntryResponse) -> Vec<String> {
    let (kind, path) = match e.kind.as_str() {
        "directory" => ("dir", format!("{}/", e.path.trim_end_matches('/'))),
        "symlink" => (
            "link",
            format!("{} -> {}", e.path, e.target.as_deref().unwrap_or("?")),
        ),
        "file" => ("file", e.path.clone()),
        _ => ("other", e.path.clone()),
    };
    vec![
        kind.to_owned(),
        if e.kind == "directory" {
            "-".to_owned()
        } else {
            human(e.size)
        },
        format!("{:04o}", e.mode & 0o7777),
        path,
    ]
}

/// `stockade volume …`.
pub async fn volume(ctx: &Ctx, cmd: VolumeCommand) -> anyhow::Result<ExitCode> {
    let client = ctx.client()?;
    match cmd {
        VolumeCommand::Create(a) => create(ctx, &client, a).await,
        VolumeCommand::Ls => list(ctx, &client).await,
        VolumeCommand::Rm { volumes } => remove(ctx, &client, &volumes).await,
        VolumeCommand::Mv { volume, server } => move_to(ctx, &client, &volume, &server).await,
        VolumeCommand::LsFiles {
            volume,
            path,
            depth,
        } => {
            let (volume, path) = match (volume_path(&volume), path) {
                (Some((v, p)), None) => (v.to_owned(), p),
                (Some(_), Some(_)) => {
                    return Err(CliError::invalid(
                        "give the path once: VOLUME:PATH, or VOLUME PATH",
                    )
                    .into())
                }
                (None, path) => (volume, rooted(path.as_deref().unwrap_or("/"))),
            };
            list_files(ctx, &client, &volume, &path, depth).await
        }
        VolumeCommand::Cp { src, dest } => cp(ctx, &client, &src, &dest).await,
        VolumeCommand::Mkdir { paths, parents } => {
            let mut batch = Batch::new(ctx.json);
            for arg in &paths {
                let made = match required_volume_path(arg) {
                    Ok((volume, path)) => client
                        .volume_mkdir(volume, &path, parents)
                        .await
                        .map(|entry| (volume, entry))
                        .map_err(|e| match e.is_conflict() && !parents {
                            true => output::sdk_error(&e, None)
                                .hint(
                                    "-p makes missing parents and accepts a directory that exists",
                                )
                                .into(),
                            false => in_words(e),
                        }),
                    Err(e) => Err(e.into()),
                };
                match made {
                    Ok((volume, entry)) => batch.ok(
                        serde_json::to_value(&entry)?,
                        &format!("{volume}:{}", entry.path),
                    )?,
                    Err(e) => batch.failed(arg, e)?,
                }
            }
            batch.finish()
        }
        VolumeCommand::RmFile { paths } => {
            let mut batch = Batch::new(ctx.json);
            for arg in &paths {
                let removed = match required_volume_path(arg) {
                    Ok((volume, path)) => client
                        .volume_remove(volume, &path)
                        .await
                        .map(|()| (volume, path))
                        .map_err(in_words),
                    Err(e) => Err(e.into()),
                };
                match removed {
                    Ok((volume, path)) => batch.ok(
                        serde_json::json!({ "volume": volume, "path": path, "removed": true }),
                        &format!("removed {volume}:{path}"),
                    )?,
                    Err(e) => batch.failed(arg, e)?,
                }
            }
            batch.finish()
        }
    }
}

async fn create(ctx: &Ctx, client: &Client, a: CreateArgs) -> anyhow::Result<ExitCode> {
    if a.size_gb == Some(0) {
        return Err(CliError::invalid("--size-gb must be a positive whole number of GB").into());
    }
    let labels = key_values(&a.labels, "--label")?;
    let req = CreateSharedVolumeRequest {
        name: a.name,
        size_gb: a.size_gb.map(f64::from),
        labels: (!labels.is_empty()).then_some(labels),
        server: a.server,
    };
    let v = output::spinning(
        "Creating volume",
        ctx.json,
        client.create_shared_volume(&req),
    )
    .await
    .map_err(|e| {
        let mut err = output::sdk_error(&e, None);
        // The name is an argument here, not the `--name` of a sandbox.
        if let Some(rest) = err.message.strip_prefix("--name: ") {
            err.message = rest.to_owned();
        }
        match e.is_conflict() {
            true => err.hint("`stockade volume ls` lists your volumes; pick another name"),
            false => err,
        }
    })?;
    output::json_or(ctx.json, &v, || {
        let size = v.size_gb.map(|gb| format!(", {gb} GB")).unwrap_or_default();
        format!(
            "Created volume {} ({}) on {}{size} — mount it with `stockade create --mount {}:/data`",
            v.name, v.id, v.server, v.name
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn move_to(
    ctx: &Ctx,
    client: &Client,
    volume: &str,
    server: &str,
) -> anyhow::Result<ExitCode> {
    let v = output::spinning(
        "Moving volume",
        ctx.json,
        client.move_shared_volume(volume, server),
    )
    .await
    .map_err(|e| match e.is_conflict() {
        true => output::sdk_error(&e, None)
            .hint("`stockade rm SANDBOX` deletes a sandbox that mounts it; then move the volume")
            .into(),
        false => in_words(e),
    })?;
    output::json_or(ctx.json, &v, || {
        format!("Moved volume {} ({}) to {}", v.name, v.id, v.server)
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn list(ctx: &Ctx, client: &Client) -> anyhow::Result<ExitCode> {
    let list = client.shared_volumes().await.map_err(in_words)?;
    if ctx.json {
        output::json(&list)?;
    } else if list.volumes.is_empty() {
        outln!("No shared volumes (`stockade volume create NAME` makes one).")?;
    } else {
        let rows: Vec<Vec<String>> = list.volumes.iter().map(volume_row).collect();
        output::table(&VOLUME_HEADER, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn remove(ctx: &Ctx, client: &Client, volumes: &[String]) -> anyhow::Result<ExitCode> {
    let mut batch = Batch::new(ctx.json);
    for volume in volumes {
        match client.delete_shared_volume(volume).await {
            Ok(()) => batch.ok(
                serde_json::json!({ "volume": volume, "deleted": true }),
                &format!("deleted volume {volume}"),
            )?,
            Err(e) if e.is_conflict() => batch.failed(
                volume,
                output::sdk_error(&e, None)
                    .hint("`stockade rm SANDBOX` deletes a sandbox; then delete the volume")
                    .into(),
            )?,
            Err(e) => batch.failed(volume, in_words(e))?,
        }
    }
    batch.finish()
}

async fn list_files(
    ctx: &Ctx,
    client: &Client,
    volume: &str,
    path: &str,
    depth: u32,
) -> anyhow::Result<ExitCode> {
    if !(1..=32).contains(&depth) {
        return Err(CliError::invalid(format!("--depth must be 1 to 32, got {depth}")).into());
    }
    let listing = match client.volume_list_files(volume, path, Some(depth)).await {
        Ok(l) => l,
        // A file is listed as its one entry.
        Err(e) if matches!(e.status(), Some(400 | 409)) => {
            match client.volume_stat(volume, path).await {
                Ok(entry) if entry.kind != "directory" => stockade_sdk::VolumeListing {
                    path: path.to_owned(),
                    entries: vec![entry],
                },
                _ => return Err(in_words(e)),
            }
        }
        Err(e) => return Err(in_words(e)),
    };
    if ctx.json {
        output::json(&listing)?;
    } else if listing.entries.is_empty() {
        outln!("{volume}:{} is empty.", listing.path)?;
    } else {
        let rows: Vec<Vec<String>> = listing.entries.iter().map(entry_row).collect();
        output::table(&["TYPE", "SIZE", "MODE", "PATH"], &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn cp(ctx: &Ctx, client: &Client, src: &str, dest: &str) -> anyhow::Result<ExitCode> {
    match (volume_path(src), volume_path(dest)) {
        (Some(_), Some(_)) => Err(CliError::invalid(
            "copy between two volume paths is not supported; copy to a local file first",
        )
        .into()),
        (None, None) => Err(CliError::invalid(
            "one side must be a volume path: VOLUME:PATH (e.g. datasets:/raw/train.csv)",
        )
        .into()),
        (None, Some((volume, path))) => {
            let entry = upload(ctx, client, src, volume, &path).await?;
            if ctx.json {
                output::json(&entry)?;
            } else {
                errln!(
                    "Copied {} ({}) to {volume}:{}",
                    if src == "-" { "stdin" } else { src },
                    human(entry.size),
                    entry.path
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        (Some((volume, path)), None) => {
            let (target, bytes) = download(ctx, client, volume, &path, dest).await?;
            if ctx.json {
                output::json(&serde_json::json!({ "path": target, "bytes": bytes }))?;
            } else if dest != "-" {
                errln!("Copied {volume}:{path} ({}) to {target}", human(bytes));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `dir` joined with `name` in a volume.
fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// The last component of a local path, to name a copy by.
fn file_name(path: &Path) -> anyhow::Result<String> {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            CliError::invalid(format!("{} has no file name to copy as", path.display())).into()
        })
}

/// Uploads the local file `src` (`-`: stdin) to `path` of `volume`: into
/// it under the file's name when it is a directory of the volume (or ends
/// in `/`), else as that path. Missing parents are made; a file keeps its
/// permission bits.
async fn upload(
    ctx: &Ctx,
    client: &Client,
    src: &str,
    volume: &str,
    path: &str,
) -> anyhow::Result<VolumeEntryResponse> {
    if src == "-" {
        if path.ends_with('/') {
            return Err(CliError::invalid(format!(
                "name the file to write stdin to: {volume}:{path}NAME"
            ))
            .into());
        }
        let stdin = tokio_util::io::ReaderStream::new(tokio::io::stdin());
        return client
            .volume_write_stream(volume, path, stdin, None, &VolumeWrite::new().parents(true))
            .await
            .map_err(in_words);
    }
    let local = Path::new(src);
    let meta = std::fs::metadata(local).with_context(|| format!("cannot read {src}"))?;
    if meta.is_dir() {
        return Err(CliError::invalid(format!(
            "{src} is a directory: `stockade volume cp` copies one file at a time"
        ))
        .hint(
            "copy its files one by one, or `stockade cp` the directory into a sandbox that mounts the volume",
        )
        .into());
    }
    let target = if path.ends_with('/') {
        join(path, &file_name(local)?)
    } else {
        match client.volume_stat(volume, path).await {
            Ok(e) if e.kind == "directory" => join(path, &file_name(local)?),
            Ok(_) => path.to_owned(),
            Err(e) if e.is_not_found() => path.to_owned(),
            Err(e) => return Err(in_words(e)),
        }
    };
    let len = meta.len();
    let how = VolumeWrite::new()
        .parents(true)
        .mode(meta.permissions().mode() & 0o777);
    let pb = output::bytes_bar(len, "Uploading", ctx.json);
    let body = file_stream(local, pb.clone()).await?;
    let done = client
        .volume_write_stream(volume, &target, body, Some(len), &how)
        .await;
    pb.finish_and_clear();
    done.map_err(in_words)
}

/// Downloads the file `path` of `volume` to `dest` (`-`: stdout): into it
/// under the file's name when it is a local directory, else as that path,
/// written whole or not at all, with the file's permission bits. The local
/// path written and the bytes.
async fn download(
    ctx: &Ctx,
    client: &Client,
    volume: &str,
    path: &str,
    dest: &str,
) -> anyhow::Result<(String, u64)> {
    let entry = client.volume_stat(volume, path).await.map_err(in_words)?;
    match entry.kind.as_str() {
        "file" => {}
        "directory" => {
            return Err(CliError::invalid(format!(
                "{volume}:{path} is a directory: `stockade volume cp` copies one file at a time"
            ))
            .hint(format!(
                "`stockade volume ls-files {volume} {path}` lists what is in it"
            ))
            .into())
        }
        kind => {
            return Err(CliError::invalid(format!(
                "{volume}:{path} is a {kind}, not a file{}",
                entry
                    .target
                    .as_deref()
                    .map(|t| format!(" (it points to {t})"))
                    .unwrap_or_default()
            ))
            .into())
        }
    }
    let mut body = client
        .volume_read_stream(volume, path)
        .await
        .map_err(in_words)?;
    if dest == "-" {
        let mut out = std::io::stdout();
        let mut total = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(in_words)?;
            total += chunk.len() as u64;
            out.write_all(&chunk)?;
        }
        out.flush()?;
        return Ok(("-".to_owned(), total));
    }
    let dest_path = PathBuf::from(dest);
    let name = entry.name.clone();
    let target = if dest_path.is_dir() {
        dest_path.join(&name)
    } else if dest.ends_with('/') {
        return Err(CliError::invalid(format!(
            "{dest} does not exist; make the directory first or drop the trailing /"
        ))
        .into());
    } else {
        dest_path
    };
    let parent = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    if !parent.is_dir() {
        return Err(CliError::invalid(format!(
            "{} does not exist; make it first",
            parent.display()
        ))
        .into());
    }
    // Written beside the target and renamed onto it once complete, so that
    // a failed copy leaves no half file.
    let mut tmp = tempfile::NamedTempFile::new_in(&parent)
        .with_context(|| format!("cannot write in {}", parent.display()))?;
    let pb = output::bytes_bar(entry.size, "Downloading", ctx.json);
    let mut total = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                pb.finish_and_clear();
                return Err(in_words(e));
            }
        };
        total += chunk.len() as u64;
        pb.inc(chunk.len() as u64);
        tmp.write_all(&chunk)?;
    }
    pb.finish_and_clear();
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(entry.mode & 0o777))?;
    tmp.persist(&target)
        .with_context(|| format!("cannot write {}", target.display()))?;
    Ok((target.display().to_string(), total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_parsed_or_refused_in_words() {
        let m = mount_arg("data:/data").unwrap();
        assert_eq!(
            (m.volume.as_str(), m.path.as_str(), m.read_only),
            ("data", "/data", None)
        );
        let m = mount_arg("data:/mnt/ro:ro").unwrap();
        assert_eq!((m.path.as_str(), m.read_only), ("/mnt/ro", Some(true)));
        assert_eq!(mount_arg("data:/x:rw").unwrap().read_only, None);
        for bad in ["data", "data:rel", ":/x", "data:/x:rx", "./a:/x", "data:"] {
            let e = mount_arg(bad).unwrap_err();
            assert!(e.message.starts_with(MOUNT_SYNTAX), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn a_mount_the_server_refused_is_named_as_typed() {
        let mounts = ["data:/d".to_owned(), "nope:/n:ro".to_owned()];
        let err = mount_error(
            CliError::new(
                "not_found",
                "volumeMounts[1].volume: volume 'nope' not found",
            ),
            &mounts,
        );
        assert_eq!(err.message, "--mount nope:/n:ro: volume 'nope' not found");
        assert!(err.hint.is_some());
        let other = CliError::new("conflict", "volumeMounts[7].volume: x");
        assert_eq!(mount_error(other.clone(), &mounts), other);
    }

    #[test]
    fn volume_paths_are_told_apart_from_local_ones() {
        assert_eq!(volume_path("data:/a/b"), Some(("data", "/a/b".into())));
        assert_eq!(volume_path("data:a"), Some(("data", "/a".into())));
        assert_eq!(volume_path("data:"), Some(("data", "/".into())));
        assert_eq!(volume_path("./a:b"), None);
        assert_eq!(volume_path("/tmp/a:b"), None);
        assert_eq!(volume_path("file.txt"), None);
        assert_eq!(volume_path(":x"), None);
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/d/", "a"), "/d/a");
    }
}
