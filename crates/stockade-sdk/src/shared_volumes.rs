//! Shared volumes: named volumes of an account that several sandboxes mount
//! at create ([`crate::CreateParams::mount`]), and their files, read and
//! written through the API without a sandbox. Paths are the volume's own:
//! `/` is its root.

use bytes::Bytes;
use futures_util::stream::Stream;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE};
use reqwest::Method;
use stockade_api::shared_volumes::{
    CreateSharedVolumeRequest, SharedVolumeList, SharedVolumeResponse, VolumeEntryResponse,
    VolumeListing, VolumeRenameRequest,
};

use crate::client::Client;
use crate::error::Error;
use crate::files::ByteStream;

/// How [`Client::volume_write_stream`] writes a file: whether missing
/// parent directories are made, and the file's mode and owner (the server's
/// defaults, 0644 and root, where unset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeWrite {
    /// Make missing parent directories (mode 0755).
    pub parents: bool,
    /// Permission bits, e.g. `0o755`.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

impl VolumeWrite {
    new_and_setters! {
        /// Permission bits (at most `0o7777`).
        mode(mode: u32) => mode = mode;
        uid(uid: u32) => uid = uid;
        gid(gid: u32) => gid = gid;
    }

    /// Makes missing parent directories when `parents` is true.
    pub fn parents(mut self, parents: bool) -> Self {
        self.parents = parents;
        self
    }

    /// The query of a write to `path`.
    fn query(&self, path: &str) -> Vec<(&'static str, String)> {
        let mut query = vec![("path", path.to_owned())];
        if self.parents {
            query.push(("parents", "true".to_owned()));
        }
        for (name, value) in [("mode", self.mode), ("uid", self.uid), ("gid", self.gid)] {
            if let Some(v) = value {
                query.push((name, v.to_string()));
            }
        }
        query
    }
}

/// `s` as one segment of a URL's path: every byte but letters, digits and
/// `-._~` percent-encoded, so that a name cannot reach another route.
pub(crate) fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The URL of `volume` (a name or an id) with `rest` after it. An empty
/// reference, `.` or `..` (which a URL resolves away, encoded or not) is
/// refused before any request.
fn volume_url(volume: &str, rest: &str) -> Result<String, Error> {
    if matches!(volume, "" | "." | "..") {
        return Err(Error::invalid("volume", "name a volume (its name or id)"));
    }
    Ok(format!("/api/v1/shared-volumes/{}{rest}", segment(volume)))
}

/// Refuses an empty path before any request.
fn named(field: &str, path: &str) -> Result<(), Error> {
    if path.is_empty() {
        return Err(Error::invalid(field, "name a path in the volume"));
    }
    Ok(())
}

impl Client {
    /// Creates a shared volume (on this server's Docker host unless
    /// `server` names another). A name the account already uses is a 409.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::CreateSharedVolumeRequest;
    /// let vol = client
    ///     .create_shared_volume(&CreateSharedVolumeRequest {
    ///         name: "datasets".into(),
    ///         size_gb: Some(10.0),
    ///         ..Default::default()
    ///     })
    ///     .await?;
    /// println!("{} on {}", vol.id, vol.server);
    /// # Ok(()) }
    /// ```
    pub async fn create_shared_volume(
        &self,
        req: &CreateSharedVolumeRequest,
    ) -> Result<SharedVolumeResponse, Error> {
        self.send(
            self.request(Method::POST, "/api/v1/shared-volumes")
                .json(req),
        )
        .await
    }

    /// Your shared volumes, newest first, each with the sandboxes that
    /// mount it.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// for v in client.shared_volumes().await?.volumes {
    ///     println!("{} mounted by {} sandboxes", v.name, v.mounts.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn shared_volumes(&self) -> Result<SharedVolumeList, Error> {
        self.send(self.request(Method::GET, "/api/v1/shared-volumes"))
            .await
    }

    /// One shared volume by name or id.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let vol = client.shared_volume("datasets").await?;
    /// println!("{} ({})", vol.id, vol.status);
    /// # Ok(()) }
    /// ```
    pub async fn shared_volume(&self, name_or_id: &str) -> Result<SharedVolumeResponse, Error> {
        self.send(self.request(Method::GET, &volume_url(name_or_id, "")?))
            .await
    }

    /// Deletes a shared volume with its files. While a sandbox mounts it
    /// this is a 409 whose message names the sandboxes.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// match client.delete_shared_volume("datasets").await {
    ///     Err(e) if e.is_conflict() => println!("still mounted: {e}"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn delete_shared_volume(&self, name_or_id: &str) -> Result<(), Error> {
        self.send_empty(self.request(Method::DELETE, &volume_url(name_or_id, "")?))
            .await
    }

    /// Moves a shared volume no sandbox mounts to Docker host `server`
    /// with its files (through the object store); sandboxes that mount it
    /// are placed there from then on. A 409 names the sandboxes that mount
    /// it.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let moved = client.move_shared_volume("datasets", "docker-2").await?;
    /// assert_eq!(moved.server, "docker-2");
    /// # Ok(()) }
    /// ```
    pub async fn move_shared_volume(
        &self,
        name_or_id: &str,
        server: &str,
    ) -> Result<SharedVolumeResponse, Error> {
        let url = volume_url(name_or_id, "/move")?;
        self.send(
            self.request(Method::POST, &url)
                .query(&[("server", server)]),
        )
        .await
    }

    /// The entries of a directory of the volume (`/` is its root), `depth`
    /// levels down (1, the default, to 32), sorted by path.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// for e in client.volume_list_files("datasets", "/", Some(2)).await?.entries {
    ///     println!("{} {} {}", e.kind, e.size, e.path);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn volume_list_files(
        &self,
        volume: &str,
        path: &str,
        depth: Option<u32>,
    ) -> Result<VolumeListing, Error> {
        let mut query = vec![("path", if path.is_empty() { "/" } else { path }.to_owned())];
        if let Some(d) = depth {
            query.push(("depth", d.to_string()));
        }
        let req = self
            .request(Method::GET, &volume_url(volume, "/files")?)
            .query(&query);
        self.send(req).await
    }

    /// One entry's metadata (a symlink is reported, never followed). A
    /// missing path is an error whose [`Error::is_not_found`] is true.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let st = client.volume_stat("datasets", "/train.csv").await?;
    /// println!("{} bytes, mode {:o}", st.size, st.mode);
    /// # Ok(()) }
    /// ```
    pub async fn volume_stat(
        &self,
        volume: &str,
        path: &str,
    ) -> Result<VolumeEntryResponse, Error> {
        named("path", path)?;
        let req = self
            .request(Method::GET, &volume_url(volume, "/files/stat")?)
            .query(&[("path", path)]);
        self.send(req).await
    }

    /// A file's bytes.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let config = client.volume_read("datasets", "/config.json").await?;
    /// println!("{}", String::from_utf8_lossy(&config));
    /// # Ok(()) }
    /// ```
    pub async fn volume_read(&self, volume: &str, path: &str) -> Result<Vec<u8>, Error> {
        self.volume_read_stream(volume, path).await?.collect().await
    }

    /// A file's bytes as they arrive, for files too big to hold in memory.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::StreamExt;
    /// let mut body = client.volume_read_stream("datasets", "/big.parquet").await?;
    /// let mut total = 0;
    /// while let Some(chunk) = body.next().await {
    ///     total += chunk?.len();
    /// }
    /// println!("{total} bytes");
    /// # Ok(()) }
    /// ```
    pub async fn volume_read_stream(&self, volume: &str, path: &str) -> Result<ByteStream, Error> {
        named("path", path)?;
        let req = self
            .request(Method::GET, &volume_url(volume, "/files/content")?)
            .query(&[("path", path)]);
        let resp = self.send_raw(req).await?;
        Ok(ByteStream::from_response(self, resp))
    }

    /// Writes a file whole (a reader never sees half of it), replacing one
    /// in its place; `parents` makes missing directories. New files get
    /// mode 0644.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// client.volume_write("datasets", "/notes/readme.txt", "shared\n", true).await?;
    /// # Ok(()) }
    /// ```
    pub async fn volume_write(
        &self,
        volume: &str,
        path: &str,
        contents: impl Into<Bytes>,
        parents: bool,
    ) -> Result<VolumeEntryResponse, Error> {
        let contents = contents.into();
        let len = contents.len() as u64;
        self.volume_write_body(
            volume,
            path,
            reqwest::Body::from(contents),
            Some(len),
            &VolumeWrite::new().parents(parents),
        )
        .await
    }

    /// Writes a file streamed in chunks (e.g. from a local file), with its
    /// mode and owner; give its length when known.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{bytes::Bytes, stream, VolumeWrite};
    /// let chunks = vec![Ok::<_, std::io::Error>(Bytes::from_static(b"#!/bin/sh\necho hi\n"))];
    /// let how = VolumeWrite::new().parents(true).mode(0o755);
    /// client.volume_write_stream("tools", "/bin/hi", stream::iter(chunks), None, &how).await?;
    /// # Ok(()) }
    /// ```
    pub async fn volume_write_stream<S>(
        &self,
        volume: &str,
        path: &str,
        body: S,
        len: Option<u64>,
        how: &VolumeWrite,
    ) -> Result<VolumeEntryResponse, Error>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        self.volume_write_body(volume, path, reqwest::Body::wrap_stream(body), len, how)
            .await
    }

    async fn volume_write_body(
        &self,
        volume: &str,
        path: &str,
        body: reqwest::Body,
        len: Option<u64>,
        how: &VolumeWrite,
    ) -> Result<VolumeEntryResponse, Error> {
        named("path", path)?;
        let mut req = self
            .request(Method::PUT, &volume_url(volume, "/files/content")?)
            .query(&how.query(path))
            .header(CONTENT_TYPE, "application/octet-stream");
        if let Some(n) = len {
            req = req.header(CONTENT_LENGTH, n);
        }
        self.send(req.body(body)).await
    }

    /// Makes a directory; with `parents` its missing parents too, and one
    /// that exists already is fine (without, that is a 409).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let dir = client.volume_mkdir("datasets", "/raw/2024", true).await?;
    /// assert_eq!(dir.kind, "directory");
    /// # Ok(()) }
    /// ```
    pub async fn volume_mkdir(
        &self,
        volume: &str,
        path: &str,
        parents: bool,
    ) -> Result<VolumeEntryResponse, Error> {
        named("path", path)?;
        let mut query = vec![("path", path)];
        if parents {
            query.push(("parents", "true"));
        }
        let req = self
            .request(Method::POST, &volume_url(volume, "/files/mkdir")?)
            .query(&query);
        self.send(req).await
    }

    /// Renames or moves an entry within the volume; returns it at its new
    /// place.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let moved = client.volume_rename("datasets", "/tmp.csv", "/train.csv").await?;
    /// println!("now at {}", moved.path);
    /// # Ok(()) }
    /// ```
    pub async fn volume_rename(
        &self,
        volume: &str,
        from: &str,
        to: &str,
    ) -> Result<VolumeEntryResponse, Error> {
        named("from", from)?;
        named("to", to)?;
        let req = self
            .request(Method::POST, &volume_url(volume, "/files/rename")?)
            .json(&VolumeRenameRequest {
                from: from.to_owned(),
                to: to.to_owned(),
            });
        self.send(req).await
    }

    /// Removes a file, a symlink, or a directory with everything in it.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// client.volume_remove("datasets", "/raw/2023").await?;
    /// # Ok(()) }
    /// ```
    pub async fn volume_remove(&self, volume: &str, path: &str) -> Result<(), Error> {
        named("path", path)?;
        let req = self
            .request(Method::DELETE, &volume_url(volume, "/files")?)
            .query(&[("path", path)]);
        self.send_empty(req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_stays_one_path_segment() {
        assert_eq!(
            volume_url("datasets", "/files").unwrap(),
            "/api/v1/shared-volumes/datasets/files"
        );
        assert_eq!(
            volume_url("../sandbox?x=1", "").unwrap(),
            "/api/v1/shared-volumes/..%2Fsandbox%3Fx%3D1"
        );
        assert!(volume_url("", "").is_err());
        assert!(volume_url("..", "/files").is_err());
    }

    #[test]
    fn a_write_asks_only_for_what_is_set() {
        assert_eq!(
            VolumeWrite::new().query("/a b"),
            [("path", "/a b".to_owned())]
        );
        let q = VolumeWrite::new()
            .parents(true)
            .mode(0o755)
            .uid(1000)
            .query("/x");
        assert_eq!(
            q,
            [
                ("path", "/x".to_owned()),
                ("parents", "true".to_owned()),
                ("mode", "493".to_owned()),
                ("uid", "1000".to_owned()),
            ]
        );
    }
}
