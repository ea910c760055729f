//! Sandbox volumes: sizes and owners, orphans, removal and
//! the confirmed cleanup of every orphan.

use reqwest::Method;
use stockade_api::{CleanupResponse, ListVolumesResponse, RemovedVolume, VolumeResponse};

use crate::client::Client;
use crate::error::Error;

impl Client {
    /// Your sandboxes' volumes (an admin's: all of the server's), with sizes.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let vols = client.volumes().await?;
    /// println!("{} volumes, {}", vols.total, vols.total_size);
    /// # Ok(()) }
    /// ```
    pub async fn volumes(&self) -> Result<ListVolumesResponse, Error> {
        self.send(self.request(Method::GET, "/api/v1/volumes"))
            .await
    }

    /// Volumes no live sandbox owns (e.g. kept by `preserve_volume`).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// for v in client.orphaned_volumes().await?.volumes {
    ///     println!("{} {:?}", v.name, v.size);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn orphaned_volumes(&self) -> Result<ListVolumesResponse, Error> {
        self.send(self.request(Method::GET, "/api/v1/volumes/orphaned"))
            .await
    }

    /// One volume by name (`agent-sandbox-{sandbox id}`).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let v = client.volume("agent-sandbox-a1b2c3d4e5f6").await?;
    /// println!("in use: {}", v.in_use);
    /// # Ok(()) }
    /// ```
    pub async fn volume(&self, name: &str) -> Result<VolumeResponse, Error> {
        self.send(self.request(Method::GET, &format!("/api/v1/volumes/{name}")))
            .await
    }

    /// Removes an orphaned volume and reports the space it used. A live
    /// sandbox's volume is a 409: destroy the sandbox instead.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let gone = client.remove_volume("agent-sandbox-a1b2c3d4e5f6").await?;
    /// println!("freed {:?}", gone.size);
    /// # Ok(()) }
    /// ```
    pub async fn remove_volume(&self, name: &str) -> Result<RemovedVolume, Error> {
        self.send(self.request(Method::DELETE, &format!("/api/v1/volumes/{name}")))
            .await
    }

    /// Removes every orphaned volume you may see. `confirm` must be true:
    /// this cannot be undone.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let done = client.prune_volumes(true).await?;
    /// println!("removed {}, freed {}", done.removed.len(), done.freed);
    /// # Ok(()) }
    /// ```
    pub async fn prune_volumes(&self, confirm: bool) -> Result<CleanupResponse, Error> {
        if !confirm {
            return Err(Error::invalid(
                "confirm",
                "pass true to remove every orphaned volume (orphaned_volumes lists them)",
            ));
        }
        self.send(
            self.request(Method::DELETE, "/api/v1/volumes/orphaned")
                .query(&[("confirm", "true")]),
        )
        .await
    }
}
