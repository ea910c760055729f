//! Files inside a sandbox: read, write, list, stat and remove single
//! paths, and move whole trees as tar archives, buffered or streamed; make
//! directories, move paths and watch a directory's changes.

use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream, StreamExt, TryStreamExt};
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE};
use reqwest::Method;
use stockade_api::files::MoveRequest;
use stockade_api::{ArchiveUploadResponse, DirectoryListing, FileEntry, FileType};

use crate::client::Client;
use crate::error::Error;
use crate::sandbox::Sandbox;
use crate::sse::SseReader;

/// A body that arrives in chunks (a file's content, a tar archive).
/// Dropping it closes the connection.
pub struct ByteStream {
    inner: BoxStream<'static, Result<Bytes, Error>>,
    len: Option<u64>,
}

impl std::fmt::Debug for ByteStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteStream")
            .field("len", &self.len)
            .finish()
    }
}

stream_of_inner!(ByteStream, Bytes);

impl ByteStream {
    pub(crate) fn from_response(client: &Client, resp: reqwest::Response) -> Self {
        let len = resp.content_length();
        let client = client.clone();
        Self {
            inner: resp
                .bytes_stream()
                .map_err(move |e| client.transport(e))
                .boxed(),
            len,
        }
    }

    /// The length the server announced, if it did.
    pub fn content_length(&self) -> Option<u64> {
        self.len
    }

    /// Reads the rest into memory.
    pub async fn collect(mut self) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(self.len.unwrap_or(0).min(64 << 20) as usize);
        while let Some(chunk) = self.inner.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }
}

/// What changed in a watched directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchEventKind {
    Create,
    Write,
    Remove,
    Rename,
    /// Its permissions changed.
    Chmod,
}

impl WatchEventKind {
    /// The event's name on the wire and in messages: `create`, `write`, …
    ///
    /// ```
    /// assert_eq!(stockade_sdk::WatchEventKind::Rename.as_str(), "rename");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Write => "write",
            Self::Remove => "remove",
            Self::Rename => "rename",
            Self::Chmod => "chmod",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "create" => Self::Create,
            "write" => Self::Write,
            "remove" => Self::Remove,
            "rename" => Self::Rename,
            "chmod" => Self::Chmod,
            _ => return None,
        })
    }
}

impl std::fmt::Display for WatchEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change in a watched directory; see [`Sandbox::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: WatchEventKind,
    /// The absolute path that changed (for a rename, its old name).
    pub path: String,
    /// What it is, when the sandbox could still tell (not after a remove).
    pub file_type: Option<FileType>,
}

/// The data of a watch event.
#[derive(serde::Deserialize)]
struct WatchData {
    path: String,
    #[serde(rename = "type", default)]
    file_type: Option<FileType>,
}

/// The changes in a watched directory as they happen: a [`Stream`] of
/// [`WatchEvent`]s. It ends when the sandbox stops (see
/// [`FileWatch::end_reason`]); dropping it ends the watch.
pub struct FileWatch {
    inner: BoxStream<'static, Result<WatchEvent, Error>>,
    end: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl std::fmt::Debug for FileWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileWatch")
    }
}

stream_of_inner!(FileWatch, WatchEvent);

impl FileWatch {
    /// Why the server ended the watch, once it did.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::StreamExt;
    /// let mut changes = sb.watch("src", false).await?;
    /// while let Some(event) = changes.next().await {
    ///     println!("{:?}", event?);
    /// }
    /// println!("ended: {:?}", changes.end_reason()); // e.g. the sandbox stopped
    /// # Ok(()) }
    /// ```
    pub fn end_reason(&self) -> Option<String> {
        self.end.lock().ok().and_then(|g| g.clone())
    }
}

/// What [`Sandbox::read_file`] and friends accept as the path: absolute, or
/// relative to `/workspace`.
fn files_url(sb: &Sandbox, rest: &str) -> String {
    format!("/api/v1/sandbox/{}/files{rest}", sb.id())
}

/// The query naming a path and whether to act on its whole tree.
fn path_query(path: &str, recursive: bool) -> [(&str, &str); 2] {
    [
        ("path", path),
        ("recursive", if recursive { "true" } else { "false" }),
    ]
}

fn is_json(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

impl Sandbox {
    async fn open_path(&self, path: &str) -> Result<reqwest::Response, Error> {
        let req = self
            .client()
            .request(Method::GET, &files_url(self, ""))
            .query(&[("path", path)]);
        self.client().send_raw(req).await
    }

    /// A file's bytes (symlinks followed inside the sandbox). Works on a
    /// stopped sandbox too.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let package = sb.read_file("package.json").await?; // /workspace/package.json
    /// println!("{}", String::from_utf8_lossy(&package));
    /// # Ok(()) }
    /// ```
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>, Error> {
        self.read_file_stream(path).await?.collect().await
    }

    /// A file's bytes as they arrive, for files too big to hold in memory.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::StreamExt;
    /// let mut body = sb.read_file_stream("/var/log/big.log").await?;
    /// while let Some(chunk) = body.next().await {
    ///     let chunk = chunk?;
    ///     println!("{} bytes", chunk.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn read_file_stream(&self, path: &str) -> Result<ByteStream, Error> {
        let resp = self.open_path(path).await?;
        if is_json(&resp) {
            return Err(Error::invalid(
                "path",
                format!("{path} is a directory; use list_dir or download_archive"),
            ));
        }
        Ok(ByteStream::from_response(self.client(), resp))
    }

    /// Writes a file (parents are created; an existing file is replaced,
    /// keeping its mode). New files get mode 0644.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// sb.write_file("src/main.py", "print('hi')\n").await?;
    /// sb.write_file("data.bin", vec![0u8, 1, 2]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_file(
        &self,
        path: &str,
        contents: impl Into<Bytes>,
    ) -> Result<FileEntry, Error> {
        self.write_file_inner(path, contents.into(), None).await
    }

    /// Writes a file with these permission bits (e.g. `0o755`).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// sb.write_file_with_mode("run.sh", "#!/bin/sh\necho ok\n", 0o755).await?;
    /// sb.run_command("./run.sh").await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_file_with_mode(
        &self,
        path: &str,
        contents: impl Into<Bytes>,
        mode: u32,
    ) -> Result<FileEntry, Error> {
        self.write_file_inner(path, contents.into(), Some(mode))
            .await
    }

    async fn write_file_inner(
        &self,
        path: &str,
        contents: Bytes,
        mode: Option<u32>,
    ) -> Result<FileEntry, Error> {
        let mut query = vec![("path", path.to_owned())];
        if let Some(m) = mode {
            query.push(("mode", format!("{:04o}", m & 0o7777)));
        }
        let req = self
            .client()
            .request(Method::PUT, &files_url(self, ""))
            .query(&query)
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(contents);
        self.client().send(req).await
    }

    /// A directory's entries (not recursive), sorted by name.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// for entry in sb.list_dir("/workspace").await?.entries {
    ///     println!("{:?} {} {}", entry.file_type, entry.size, entry.name);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_dir(&self, path: &str) -> Result<DirectoryListing, Error> {
        let resp = self.open_path(path).await?;
        if !is_json(&resp) {
            return Err(Error::invalid(
                "path",
                format!("{path} is a file, not a directory; use read_file"),
            ));
        }
        let bytes = resp.bytes().await.map_err(|e| self.client().transport(e))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode(e.to_string()))
    }

    /// One path's metadata; a symlink is reported as a symlink. A missing
    /// path is an error whose [`Error::is_not_found`] is true.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let st = sb.stat("node_modules").await?;
    /// println!("{:?} {} {}", st.file_type, st.mode, st.size);
    /// # Ok(()) }
    /// ```
    pub async fn stat(&self, path: &str) -> Result<FileEntry, Error> {
        let req = self
            .client()
            .request(Method::GET, &files_url(self, "/stat"))
            .query(&[("path", path)]);
        self.client().send(req).await
    }

    /// Whether a path exists (a dangling symlink exists).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// if !sb.exists("node_modules").await? {
    ///     sb.run_command("npm ci").await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn exists(&self, path: &str) -> Result<bool, Error> {
        match self.stat(path).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes a file, a symlink or an empty directory (the sandbox must be
    /// running).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// sb.remove("tmp.txt").await?;
    /// # Ok(()) }
    /// ```
    pub async fn remove(&self, path: &str) -> Result<(), Error> {
        self.remove_inner(path, false).await
    }

    /// Removes a path and everything below it.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// sb.remove_all("build").await?;
    /// # Ok(()) }
    /// ```
    pub async fn remove_all(&self, path: &str) -> Result<(), Error> {
        self.remove_inner(path, true).await
    }

    async fn remove_inner(&self, path: &str, recursive: bool) -> Result<(), Error> {
        let req = self
            .client()
            .request(Method::DELETE, &files_url(self, ""))
            .query(&path_query(path, recursive));
        self.client().send_empty(req).await
    }

    /// Unpacks a tar (or tar.gz) archive into a directory, made with its
    /// parents when missing.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox, tar_bytes: Vec<u8>) -> Result<(), stockade_sdk::Error> {
    /// let done = sb.upload_archive("/workspace/app", tar_bytes).await?;
    /// println!("{} entries, {} bytes", done.entries, done.bytes);
    /// # Ok(()) }
    /// ```
    pub async fn upload_archive(
        &self,
        dir: &str,
        archive: impl Into<Bytes>,
    ) -> Result<ArchiveUploadResponse, Error> {
        let archive = archive.into();
        let len = archive.len() as u64;
        self.upload_archive_body(dir, reqwest::Body::from(archive), Some(len))
            .await
    }

    /// Unpacks an archive that is streamed in chunks (e.g. from a file);
    /// give its length when known.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{bytes::Bytes, stream};
    /// let chunks = vec![Ok::<_, std::io::Error>(Bytes::from_static(b"..."))];
    /// sb.upload_archive_stream("/workspace", stream::iter(chunks), None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn upload_archive_stream<S>(
        &self,
        dir: &str,
        archive: S,
        len: Option<u64>,
    ) -> Result<ArchiveUploadResponse, Error>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        self.upload_archive_body(dir, reqwest::Body::wrap_stream(archive), len)
            .await
    }

    async fn upload_archive_body(
        &self,
        dir: &str,
        body: reqwest::Body,
        len: Option<u64>,
    ) -> Result<ArchiveUploadResponse, Error> {
        let mut req = self
            .client()
            .request(Method::PUT, &files_url(self, "/archive"))
            .query(&[("path", dir)])
            .header(CONTENT_TYPE, "application/x-tar");
        if let Some(n) = len {
            req = req.header(CONTENT_LENGTH, n);
        }
        self.client().send(req.body(body)).await
    }

    /// A tar archive of a file or directory; its entries start with the
    /// path's last component (`/workspace/src` → `src/…`).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let tar = sb.download_archive("/workspace/dist").await?;
    /// std::fs::write("dist.tar", tar).expect("write dist.tar");
    /// # Ok(()) }
    /// ```
    pub async fn download_archive(&self, path: &str) -> Result<Vec<u8>, Error> {
        self.download_archive_stream(path).await?.collect().await
    }

    /// The same archive as it arrives.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::StreamExt;
    /// let mut tar = sb.download_archive_stream("/workspace").await?;
    /// let mut total = 0;
    /// while let Some(chunk) = tar.next().await {
    ///     total += chunk?.len();
    /// }
    /// println!("{total} bytes");
    /// # Ok(()) }
    /// ```
    pub async fn download_archive_stream(&self, path: &str) -> Result<ByteStream, Error> {
        let req = self
            .client()
            .request(Method::GET, &files_url(self, "/archive"))
            .query(&[("path", path)]);
        let resp = self.client().send_raw(req).await?;
        Ok(ByteStream::from_response(self.client(), resp))
    }

    /// Makes a directory and its missing parents (one that exists already
    /// is fine); the sandbox must be running.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let dir = sb.make_dir("build/out/logs").await?;
    /// assert_eq!(dir.path, "/workspace/build/out/logs");
    /// # Ok(()) }
    /// ```
    pub async fn make_dir(&self, path: &str) -> Result<FileEntry, Error> {
        if path.is_empty() {
            return Err(Error::invalid("path", "name a directory"));
        }
        let req = self
            .client()
            .request(Method::POST, &files_url(self, "/mkdir"))
            .query(&[("path", path)]);
        match self.client().send(req).await {
            // Some agents refuse a directory that exists; that is success here.
            Err(e) if e.is_conflict() && e.to_string().contains("already exists") => {
                match self.stat(path).await {
                    Ok(entry) if entry.file_type == FileType::Dir => Ok(entry),
                    _ => Err(e),
                }
            }
            other => other,
        }
    }

    /// Moves (renames) a file or directory; returns it at its new place.
    /// The sandbox must be running.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let moved = sb.move_path("notes.txt", "archive/2024-notes.txt").await?;
    /// println!("now at {}", moved.path);
    /// # Ok(()) }
    /// ```
    pub async fn move_path(&self, from: &str, to: &str) -> Result<FileEntry, Error> {
        for (field, p) in [("from", from), ("to", to)] {
            if p.is_empty() {
                return Err(Error::invalid(field, "name a path"));
            }
        }
        let req = self
            .client()
            .request(Method::POST, &files_url(self, "/move"))
            .json(&MoveRequest {
                from: from.to_owned(),
                to: to.to_owned(),
            });
        self.client().send(req).await
    }

    /// Watches a directory (and with `recursive` its subdirectories) for
    /// changes until the stream is dropped or the sandbox stops.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::StreamExt;
    /// let mut changes = sb.watch("/workspace", true).await?;
    /// while let Some(event) = changes.next().await {
    ///     let event = event?;
    ///     println!("{} {}", event.kind, event.path);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn watch(&self, path: &str, recursive: bool) -> Result<FileWatch, Error> {
        if path.is_empty() {
            return Err(Error::invalid("path", "name a directory"));
        }
        let req = self
            .client()
            .request(Method::GET, &files_url(self, "/watch"))
            .query(&path_query(path, recursive))
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let client = self.client().clone();
        let resp = client.send_raw(req).await?;
        let end = std::sync::Arc::new(std::sync::Mutex::new(None));
        let reader = SseReader::new(resp);
        let ended = end.clone();
        let inner = futures_util::stream::unfold(Some((reader, client)), move |state| {
            let ended = ended.clone();
            async move {
                let (mut reader, client) = state?;
                loop {
                    let event = match reader.next().await {
                        None => return None,
                        Some(Err(e)) => return Some((Err(client.transport(e)), None)),
                        Some(Ok(event)) => event,
                    };
                    if event.event == "end" {
                        let reason = serde_json::from_str::<serde_json::Value>(&event.data)
                            .ok()
                            .and_then(|v| v["reason"].as_str().map(str::to_owned))
                            .unwrap_or_else(|| "the watch ended".into());
                        if let Ok(mut g) = ended.lock() {
                            *g = Some(reason);
                        }
                        return None;
                    }
                    let Some(kind) = WatchEventKind::parse(&event.event) else {
                        continue;
                    };
                    let item = serde_json::from_str::<WatchData>(&event.data)
                        .map(|d| WatchEvent {
                            kind,
                            path: d.path,
                            file_type: d.file_type,
                        })
                        .map_err(|e| Error::Decode(format!("bad watch event: {e}")));
                    let done = item.is_err();
                    return Some((item, (!done).then_some((reader, client))));
                }
            }
        })
        .boxed();
        Ok(FileWatch { inner, end })
    }
}
