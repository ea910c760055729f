//! Local files sent up to the server: a path packed as a tar archive in a
//! temporary file, streamed with a progress bar. `cp` uploads into a
//! sandbox with these; `create --upload` sends its source with
//! [`upload_source`].

use std::path::Path;

use anyhow::Context;
use indicatif::ProgressBar;
use stockade_sdk::api::UploadResponse;
use stockade_sdk::bytes::Bytes;
use stockade_sdk::{Client, Stream, StreamExt};

use crate::output;

/// Adds `path` (a file, a symlink or a whole directory) to the archive as `name`.
fn add_tree(b: &mut tar::Builder<std::fs::File>, name: &Path, path: &Path) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if meta.is_dir() {
        b.append_dir_all(name, path)
    } else {
        b.append_path_with_name(path, name)
    }
    .with_context(|| format!("cannot archive {}", path.display()))
}

/// Packs `src` into a temporary tar file: as `name`, or (for `DIR/.`)
/// its entries at the top. Returns the file and its length.
pub fn pack(src: &Path, name: Option<&Path>) -> anyhow::Result<(tempfile::NamedTempFile, u64)> {
    let tmp = tempfile::NamedTempFile::new().context("cannot create a temporary file")?;
    let mut b = tar::Builder::new(tmp.reopen().context("cannot open a temporary file")?);
    b.follow_symlinks(false);
    match name {
        Some(name) => add_tree(&mut b, name, src)?,
        None => {
            let mut children: Vec<_> = std::fs::read_dir(src)
                .with_context(|| format!("cannot read {}", src.display()))?
                .collect::<Result<_, _>>()?;
            children.sort_by_key(|e| e.file_name());
            for child in children {
                add_tree(&mut b, Path::new(&child.file_name()), &child.path())?;
            }
        }
    }
    b.into_inner()?.sync_all()?;
    let len = tmp.as_file().metadata()?.len();
    Ok((tmp, len))
}

/// A file's chunks, counted on a progress bar as they go.
pub async fn file_stream(
    path: &Path,
    pb: ProgressBar,
) -> anyhow::Result<impl Stream<Item = std::io::Result<Bytes>> + Send + 'static> {
    let file = tokio::fs::File::open(path)
        .await
        .with_context(|| format!("cannot open {}", path.display()))?;
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
    Ok(stream.map(move |chunk| {
        if let Ok(c) = &chunk {
            pb.inc(c.len() as u64);
            if pb.position() >= pb.length().unwrap_or(u64::MAX) {
                pb.finish_and_clear();
            }
        }
        chunk
    }))
}

/// Uploads a directory (packed as tar) or an archive file for a create's
/// `--upload` source.
pub async fn upload_source(
    client: &Client,
    path: &Path,
    quiet: bool,
) -> anyhow::Result<UploadResponse> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (file, len, _tmp) = if meta.is_dir() {
        let (tmp, len) = tokio::task::spawn_blocking({
            let path = path.to_owned();
            move || pack(&path, None)
        })
        .await??;
        (tmp.path().to_owned(), len, Some(tmp))
    } else {
        (path.to_owned(), meta.len(), None)
    };
    let pb = output::bytes_bar(len, "Uploading the source", quiet);
    let body = file_stream(&file, pb.clone()).await?;
    let done = client.upload_stream(body, Some(len)).await;
    pb.finish_and_clear();
    Ok(done?)
}
