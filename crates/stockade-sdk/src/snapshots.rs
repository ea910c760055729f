//! Snapshots, forks and uploaded archives for create sources.

use bytes::Bytes;
use futures_util::stream::Stream;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE};
use reqwest::Method;
use stockade_api::{
    CreateSnapshotRequest, ForkSandboxRequest, ListSnapshotsResponse, SandboxResponse,
    SnapshotResponse, UploadResponse,
};

use crate::client::Client;
use crate::error::Error;
use crate::sandbox::{looks_like_id, CreateParams, Sandbox, Source};

/// A saved filesystem state of a sandbox: its root-filesystem changes and
/// its `/workspace`. New sandboxes can start from it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    client: Client,
    info: SnapshotResponse,
}

impl Snapshot {
    pub fn id(&self) -> &str {
        &self.info.id
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// What the server said about it when last fetched.
    pub fn info(&self) -> &SnapshotResponse {
        &self.info
    }

    /// One of your snapshots by id.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::Snapshot;
    /// let snap = Snapshot::get(&client, "a1b2c3d4e5f6").await?;
    /// println!("{} {}", snap.name(), snap.info().status);
    /// # Ok(()) }
    /// ```
    pub async fn get(client: &Client, id: &str) -> Result<Snapshot, Error> {
        let info = client
            .send(client.request(Method::GET, &format!("/api/v1/snapshots/{id}")))
            .await?;
        Ok(Snapshot {
            client: client.clone(),
            info,
        })
    }

    /// One of your snapshots by id or name. Snapshot names need not be
    /// unique: a name finds the newest snapshot with it (see
    /// [`Snapshot::named`] for all of them).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{CreateParams, Snapshot};
    /// let clean = Snapshot::find(&client, "after-install").await?;
    /// let sb = clean.create_sandbox(CreateParams::new().name("retry")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn find(client: &Client, name_or_id: &str) -> Result<Snapshot, Error> {
        if looks_like_id(name_or_id) {
            match Self::get(client, name_or_id).await {
                Ok(snap) => return Ok(snap),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Self::named(client, name_or_id)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::Api {
                status: 404,
                code: "not_found".into(),
                message: format!("Snapshot not found: no snapshot with id or name '{name_or_id}'"),
                details: None,
            })
    }

    /// Every snapshot of yours named `name`, newest first (possibly none).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::Snapshot;
    /// for old in Snapshot::named(&client, "nightly").await?.into_iter().skip(3) {
    ///     old.delete().await?; // keep the three newest
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn named(client: &Client, name: &str) -> Result<Vec<Snapshot>, Error> {
        let mut all = Self::list(client).await?;
        all.retain(|s| s.name() == name);
        Ok(all)
    }

    /// All your snapshots, newest first.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::Snapshot;
    /// for s in Snapshot::list(&client).await? {
    ///     println!("{} {} from {}", s.id(), s.name(), s.info().source_sandbox_id);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(client: &Client) -> Result<Vec<Snapshot>, Error> {
        let list: ListSnapshotsResponse = client
            .send(client.request(Method::GET, "/api/v1/snapshots"))
            .await?;
        Ok(wrap(client, list))
    }

    /// Deletes it: the archive at once, the image once no sandbox made from
    /// it is left. Returns its last state (`DELETING` or `DELETED`).
    ///
    /// ```no_run
    /// # async fn demo(snap: stockade_sdk::Snapshot) -> Result<(), stockade_sdk::Error> {
    /// let gone = snap.delete().await?;
    /// println!("{}", gone.status);
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<SnapshotResponse, Error> {
        self.client
            .send(
                self.client
                    .request(Method::DELETE, &format!("/api/v1/snapshots/{}", self.id())),
            )
            .await
    }

    /// Creates a sandbox from this snapshot (`params.source` is set to it).
    ///
    /// ```no_run
    /// # async fn demo(snap: stockade_sdk::Snapshot) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::CreateParams;
    /// let sb = snap.create_sandbox(CreateParams::new().name("restored")).await?;
    /// println!("{} is {}", sb.name(), sb.status());
    /// # Ok(()) }
    /// ```
    pub async fn create_sandbox(&self, params: CreateParams) -> Result<Sandbox, Error> {
        Sandbox::create(
            &self.client,
            params.source(Source::Snapshot {
                id: self.id().to_owned(),
            }),
        )
        .await
    }
}

fn wrap(client: &Client, list: ListSnapshotsResponse) -> Vec<Snapshot> {
    list.snapshots
        .into_iter()
        .map(|info| Snapshot {
            client: client.clone(),
            info,
        })
        .collect()
}

impl Sandbox {
    /// Snapshots the sandbox (running or stopped): its root-filesystem
    /// changes and `/workspace`. `name` defaults to the snapshot's id.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let snap = sb.snapshot(Some("after-install")).await?;
    /// println!("{} ({:?})", snap.id(), snap.info().workspace_size);
    /// # Ok(()) }
    /// ```
    pub async fn snapshot(&self, name: Option<&str>) -> Result<Snapshot, Error> {
        let req = self
            .client()
            .request(
                Method::POST,
                &format!("/api/v1/sandbox/{}/snapshots", self.id()),
            )
            .json(&CreateSnapshotRequest {
                name: name.map(str::to_owned),
            });
        let info = self.client().send(req).await?;
        Ok(Snapshot {
            client: self.client().clone(),
            info,
        })
    }

    /// This sandbox's snapshots, newest first.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// println!("{} snapshots", sb.snapshots().await?.len());
    /// # Ok(()) }
    /// ```
    pub async fn snapshots(&self) -> Result<Vec<Snapshot>, Error> {
        let list: ListSnapshotsResponse = self.get_json("/snapshots").await?;
        Ok(wrap(self.client(), list))
    }

    /// A new RUNNING sandbox with this one's filesystem (root changes and
    /// `/workspace`) and settings; this one keeps running, unchanged.
    /// `name` defaults to the new sandbox's id.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let copy = sb.fork(Some("experiment")).await?;
    /// copy.run_command("rm -rf node_modules").await?; // the original is untouched
    /// # Ok(()) }
    /// ```
    pub async fn fork(&self, name: Option<&str>) -> Result<Sandbox, Error> {
        let req = self
            .client()
            .request(Method::POST, &format!("/api/v1/sandbox/{}/fork", self.id()))
            .json(&ForkSandboxRequest {
                name: name.map(str::to_owned),
            });
        let info: SandboxResponse = self.client().send(req).await?;
        Ok(Sandbox::from_info(self.client(), info))
    }
}

impl Client {
    /// Uploads a tar or tar.gz archive for one later create with
    /// [`Source::Upload`] (usable once, by this account, within 24 h).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{CreateParams, Sandbox, Source};
    /// let archive = std::fs::read("project.tar.gz").expect("read the archive");
    /// let up = client.upload(archive).await?;
    /// let sb = Sandbox::create(&client, CreateParams::new().source(Source::Upload { id: up.upload_id })).await?;
    /// # Ok(()) }
    /// ```
    pub async fn upload(&self, archive: impl Into<Bytes>) -> Result<UploadResponse, Error> {
        let archive = archive.into();
        let len = archive.len() as u64;
        self.upload_body(reqwest::Body::from(archive), Some(len))
            .await
    }

    /// The same, with the archive streamed in chunks; give its length when
    /// known.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{bytes::Bytes, stream};
    /// let chunks = vec![Ok::<_, std::io::Error>(Bytes::from_static(b"..."))];
    /// let up = client.upload_stream(stream::iter(chunks), None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn upload_stream<S>(
        &self,
        archive: S,
        len: Option<u64>,
    ) -> Result<UploadResponse, Error>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        self.upload_body(reqwest::Body::wrap_stream(archive), len)
            .await
    }

    async fn upload_body(
        &self,
        body: reqwest::Body,
        len: Option<u64>,
    ) -> Result<UploadResponse, Error> {
        let mut req = self
            .request(Method::POST, "/api/v1/uploads")
            .header(CONTENT_TYPE, "application/x-tar");
        if let Some(n) = len {
            req = req.header(CONTENT_LENGTH, n);
        }
        self.send(req.body(body)).await
    }
}
