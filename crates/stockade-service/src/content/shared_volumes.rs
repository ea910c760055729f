//! Shared volumes: named volumes of an account that its sandboxes mount at
//! create, and whose files the API reads and writes without a sandbox.
//!
//! A volume lives on one Docker host (its record's `server`); a create that
//! mounts it is placed there. Its record is written before its Docker volume
//! is made and ends only after the Docker volume is removed, so a crash
//! between the two leaves a CREATING or DELETING record that recovery
//! finishes (a create rolled back, a delete carried on), never a Docker
//! volume nobody knows.
//!
//! Its files are reached through a files helper per volume: a container of
//! the empty image whose PID 1 is the agent, serving only the volume,
//! confined beneath its root and never following a symlink (planted from
//! inside a sandbox or not). A helper starts on first use and stops after
//! [`HELPER_IDLE`] without one.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::Utc;
use stockade_agent::client::{
    AgentClient, ClientError, Download, Endpoint, VolumeAttrs, VolumeEntry, VolumeErrorKind,
};
use stockade_core::shared_volume::{parse_volume_labels, parse_volume_name};
use stockade_core::{
    Quota, SandboxId, SandboxSpec, Scope, SharedVolume, SharedVolumeId, SharedVolumeStatus,
    StoredQuotaExceeded,
};
use stockade_runtime::{labels, SharedMount};
use stockade_store::{MountRecord, StoreError};
use subtle::ConstantTimeEq;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::error::{ServiceError, ServiceResult};
use crate::files::{limit_body, BodyStream, BodyWatch};
use crate::Service;
use futures_util::StreamExt;

/// The most shared volumes an account keeps when its quota sets no
/// `volumes` limit.
pub const MAX_VOLUMES_PER_ACCOUNT: u64 = 100;
/// A files helper unused this long is stopped.
pub const HELPER_IDLE: Duration = Duration::from_secs(120);
/// A create still CREATING after this long died with its server (a move
/// still MOVING after an hour did too: a move copies a whole volume).
const STALE_CREATE: Duration = Duration::from_secs(600);
/// The signing domain of a volume's content token.
const CONTENT_TOKEN_DOMAIN: &str = "stockade-volume-content:";
/// The signing domain of a files helper's agent token.
const HELPER_TOKEN_DOMAIN: &str = "stockade-volume-helper:";
/// The prefix of a volume's content token.
const CONTENT_TOKEN_PREFIX: &str = "stkv_";

/// A create's input, every field as sent.
#[derive(Debug, Clone, Default)]
pub struct NewSharedVolume {
    pub name: Option<String>,
    pub size_gb: Option<f64>,
    pub labels: Option<BTreeMap<String, String>>,
    /// The Docker host to keep it on; this server's own when absent.
    pub server: Option<String>,
}

/// A volume with the mounts of the sandboxes that use it.
#[derive(Debug, Clone)]
pub struct VolumeView {
    pub volume: SharedVolume,
    pub mounts: Vec<MountRecord>,
}

/// A volume's disk use against its size limit, and whether its host
/// enforces the limit (and how, or why not).
#[derive(Debug, Clone)]
pub struct VolumeUsage {
    pub used_bytes: u64,
    pub size_gb: Option<u32>,
    pub enforced: bool,
    /// How the limit is enforced, or why it is not (absent without one).
    pub enforcement: Option<String>,
}

/// The files helpers this process talks to, by volume.
#[derive(Default)]
pub struct Helpers {
    clients: Mutex<HashMap<SharedVolumeId, Helper>>,
}

impl std::fmt::Debug for Helpers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Helpers").finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct Helper {
    server: String,
    docker_name: String,
    client: AgentClient,
    last_use: Instant,
}

impl Helpers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SharedVolumeId, Helper>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The mounts of a sandbox's container: each volume's Docker volume (the
/// record names volumes by id once its create resolved them).
pub fn container_mounts(spec: &SandboxSpec) -> Vec<SharedMount> {
    spec.mounts
        .iter()
        .filter_map(|m| {
            let id = SharedVolumeId::parse(&m.volume).ok()?;
            Some(SharedMount {
                volume: SharedVolume::docker_name_of(&id),
                path: m.path.clone(),
                read_only: m.read_only,
            })
        })
        .collect()
}

/// An unknown volume, or another account's: the same answer.
pub fn volume_not_found(reference: &str) -> ServiceError {
    ServiceError::NotFound(format!(
        "volume '{}' not found",
        reference.chars().take(128).collect::<String>()
    ))
}

/// The refusal of a change to a volume that sandboxes mount, naming them.
fn mounted_by(volume: &SharedVolume, users: &[SandboxId], change: &str) -> ServiceError {
    let ids: Vec<String> = users.iter().map(SandboxId::to_string).collect();
    ServiceError::Conflict(format!(
        "volume '{}' is mounted by sandbox{} {}: delete {} before it can be {change}",
        volume.name,
        if ids.len() == 1 { "" } else { "es" },
        ids.join(", "),
        if ids.len() == 1 { "it" } else { "them" }
    ))
}

/// Where a moving volume's archive waits in the object store.
fn move_key(id: &SharedVolumeId) -> String {
    format!("volume-moves/{id}.tar")
}

/// A size in whole GB from 1 to `max`.
fn parse_size_gb(v: f64, max: u32) -> ServiceResult<u32> {
    if v.fract() != 0.0 || v < 1.0 || v > f64::from(max) {
        return Err(ServiceError::field(
            "sizeGB",
            format!("must be a whole number of GB from 1 to {max}"),
        ));
    }
    Ok(v as u32)
}

impl Service {
    /// Creates a volume: the record (CREATING), its Docker volume on the
    /// chosen host, then READY.
    pub async fn create_shared_volume(
        &self,
        scope: &Scope,
        input: NewSharedVolume,
    ) -> ServiceResult<VolumeView> {
        let name = match &input.name {
            Some(n) => parse_volume_name(n, "name")?,
            None => return Err(ServiceError::field("name", "a volume needs a name")),
        };
        let labels = parse_volume_labels(&input.labels.unwrap_or_default(), "labels")?;
        let size_gb = input
            .size_gb
            .map(|v| parse_size_gb(v, self.config.defaults.max_disk_size_gb))
            .transpose()?;
        let server = match &input.server {
            Some(s) => {
                let s = stockade_core::host::parse_host_name(s, "server")?;
                let known = s == self.hosts.own_name() || self.store.get_host(&s).await.is_ok();
                if !known {
                    return Err(ServiceError::field(
                        "server",
                        format!("no Docker host named '{s}' is registered"),
                    ));
                }
                s
            }
            None => self.hosts.own_name().to_owned(),
        };
        let quota = self
            .store
            .get_quota(&scope.account_id)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => {
                    ServiceError::NotFound(format!("Account {} not found", scope.account_id))
                }
                other => other.into(),
            })?;
        // A total of sizes is known only when every volume declares one.
        if let (Some(limit), None) = (quota.volume_gb, size_gb) {
            return Err(ServiceError::field(
                "sizeGB",
                format!(
                    "this account's volumes must declare sizeGB: its quota caps their total at {limit} GB"
                ),
            ));
        }
        // Without a `volumes` limit of its own, the server's ceiling holds.
        let limits = Quota {
            volumes: Some(quota.volumes.unwrap_or(MAX_VOLUMES_PER_ACCOUNT)),
            ..quota
        };
        let volume = SharedVolume {
            id: SharedVolumeId::generate(),
            account_id: scope.account_id.clone(),
            name,
            server,
            size_gb,
            labels,
            status: SharedVolumeStatus::Creating,
            created_at: Utc::now(),
            deleted_at: None,
            moving_to: None,
            moving_since: None,
            moved_from: None,
        };
        self.store
            .insert_shared_volume(&volume, &limits)
            .await?
            .map_err(|e| match e {
                StoredQuotaExceeded::Count { .. } if quota.volumes.is_none() => {
                    ServiceError::QuotaExceeded(format!(
                        "volume quota exceeded: an account keeps at most {MAX_VOLUMES_PER_ACCOUNT} volumes"
                    ))
                }
                e => ServiceError::QuotaExceeded(e.to_string()),
            })?;
        let made = async {
            let rt = self.runtime_on(&volume.server).await?;
            rt.create_shared_volume(
                &volume.docker_name(),
                self.docker_labels(&volume),
                volume.size_gb.map(|gb| u64::from(gb) << 30),
            )
            .await?;
            self.store
                .set_shared_volume_status(&volume.id, SharedVolumeStatus::Ready)
                .await?;
            ServiceResult::Ok(())
        }
        .await;
        if let Err(e) = made {
            // Nothing of it stays: recovery removes what is left should
            // this fail too.
            if self
                .store
                .set_shared_volume_status(&volume.id, SharedVolumeStatus::Deleting)
                .await
                .is_ok()
            {
                self.remove_volume_everywhere(&volume).await;
            }
            return Err(e);
        }
        info!(volume.id = %volume.id, volume.name = %volume.name, server = %volume.server, "volume created");
        Ok(VolumeView {
            volume: SharedVolume {
                status: SharedVolumeStatus::Ready,
                ..volume
            },
            mounts: Vec::new(),
        })
    }

    fn docker_labels(&self, v: &SharedVolume) -> BTreeMap<String, String> {
        BTreeMap::from([
            (labels::SHARED_VOLUME.to_owned(), v.id.to_string()),
            (labels::ACCOUNT_ID.to_owned(), v.account_id.to_string()),
            (labels::INSTANCE_ID.to_owned(), self.instance_id.to_string()),
        ])
    }

    /// The caller's volumes, newest first, each with its mounts.
    pub async fn shared_volumes(&self, scope: &Scope) -> ServiceResult<Vec<VolumeView>> {
        let volumes: Vec<SharedVolume> = self
            .store
            .list_shared_volumes(scope)
            .await?
            .into_iter()
            .filter(|v| v.status != SharedVolumeStatus::Deleting)
            .collect();
        let ids: Vec<SharedVolumeId> = volumes.iter().map(|v| v.id.clone()).collect();
        let mut mounts: HashMap<SharedVolumeId, Vec<MountRecord>> = HashMap::new();
        for m in self.store.mounts_of_volumes(&ids).await? {
            mounts.entry(m.volume_id.clone()).or_default().push(m);
        }
        Ok(volumes
            .into_iter()
            .map(|v| VolumeView {
                mounts: mounts.remove(&v.id).unwrap_or_default(),
                volume: v,
            })
            .collect())
    }

    /// One of the caller's volumes by id or name: 404 when it is unknown,
    /// another account's, or being deleted.
    pub async fn shared_volume(&self, scope: &Scope, reference: &str) -> ServiceResult<VolumeView> {
        let volume = self.load_shared_volume(scope, reference).await?;
        let mounts = self
            .store
            .mounts_of_volumes(std::slice::from_ref(&volume.id))
            .await?;
        Ok(VolumeView { volume, mounts })
    }

    /// A volume by id or name, live and the caller's.
    pub async fn load_shared_volume(
        &self,
        scope: &Scope,
        reference: &str,
    ) -> ServiceResult<SharedVolume> {
        let by_id = match SharedVolumeId::parse(reference) {
            Ok(id) => match self.store.get_shared_volume(&id).await {
                Ok(v) if v.account_id == scope.account_id => Some(v),
                Ok(_) | Err(StoreError::NotFound) => None,
                Err(e) => return Err(e.into()),
            },
            Err(_) => None,
        };
        let volume = match by_id {
            Some(v) => v,
            None if reference.len() <= 128 => {
                match self.store.shared_volume_by_name(scope, reference).await {
                    Ok(v) => v,
                    Err(StoreError::NotFound) => return Err(volume_not_found(reference)),
                    Err(e) => return Err(e.into()),
                }
            }
            None => return Err(volume_not_found(reference)),
        };
        if volume.deleted_at.is_some() || volume.status == SharedVolumeStatus::Deleting {
            return Err(volume_not_found(reference));
        }
        Ok(volume)
    }

    /// Deletes a volume no sandbox mounts (409 naming those that do): its
    /// files helper and Docker volume are removed, then its record ends.
    pub async fn delete_shared_volume(
        &self,
        scope: &Scope,
        reference: &str,
    ) -> ServiceResult<SharedVolume> {
        let volume = self.load_shared_volume(scope, reference).await?;
        let users = match self.store.begin_shared_volume_delete(&volume.id).await {
            Ok(users) => users,
            Err(StoreError::NotFound) => return Err(volume_not_found(reference)),
            Err(e) => return Err(e.into()),
        };
        if !users.is_empty() {
            return Err(mounted_by(&volume, &users, "deleted"));
        }
        self.remove_volume_everywhere(&volume).await;
        info!(volume.id = %volume.id, volume.name = %volume.name, "volume deleted");
        Ok(volume)
    }

    /// Moves a volume no sandbox mounts to Docker host `to`, through the
    /// object store as a drain moves a sandbox's `/workspace`: MOVING (so
    /// nothing mounts it meanwhile), its files archived into the object
    /// store, a Docker volume of the same size made on `to` and the
    /// archive unpacked there, then the record switched in one write and
    /// the old copy removed. A failure before the switch removes the new
    /// copy and leaves the volume READY where it was.
    pub async fn move_shared_volume(
        &self,
        scope: &Scope,
        reference: &str,
        to: &str,
    ) -> ServiceResult<VolumeView> {
        let volume = self.load_shared_volume(scope, reference).await?;
        let to = stockade_core::host::parse_host_name(to, "server")?;
        if to == volume.server {
            return Err(ServiceError::field(
                "server",
                format!("volume '{}' is on host '{to}' already", volume.name),
            ));
        }
        if to != self.hosts.own_name() {
            match self.store.get_host(&to).await {
                Ok(h) if h.schedulable() => {}
                Ok(h) => {
                    return Err(ServiceError::Conflict(format!(
                        "host '{to}' takes nothing now ({})",
                        h.state.as_str()
                    )))
                }
                Err(StoreError::NotFound) => {
                    return Err(ServiceError::field(
                        "server",
                        format!("no Docker host named '{to}' is registered"),
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
        // One engine registered under two names holds one copy only: the
        // old one's removal would take the volume with it.
        let (from_info, to_info) = tokio::join!(
            async {
                self.runtime_on(&volume.server)
                    .await?
                    .info()
                    .await
                    .map_err(ServiceError::from)
            },
            async {
                self.runtime_on(&to)
                    .await?
                    .info()
                    .await
                    .map_err(ServiceError::from)
            }
        );
        let (from_info, to_info) = (from_info?, to_info?);
        // Engines made from one configuration can share an id: the data
        // root tells them apart (one engine under two names has both the same).
        let same = |i: &stockade_runtime::RuntimeInfo| (i.engine_id.clone(), i.data_root.clone());
        if from_info.engine_id.is_some() && same(&from_info) == same(&to_info) {
            return Err(ServiceError::field(
                "server",
                format!(
                    "hosts '{}' and '{to}' are the same Docker engine: the volume is there already",
                    volume.server
                ),
            ));
        }
        let users = match self.store.begin_shared_volume_move(&volume.id, &to).await {
            Ok(users) => users,
            Err(StoreError::NotFound) => return Err(volume_not_found(reference)),
            Err(e) => return Err(e.into()),
        };
        if !users.is_empty() {
            return Err(mounted_by(&volume, &users, "moved"));
        }
        self.volume_helpers.lock().remove(&volume.id);
        let key = move_key(&volume.id);
        let copied = async {
            let token = self.agents.derive(HELPER_TOKEN_DOMAIN, volume.id.as_str());
            let from = self.runtime_on(&volume.server).await?;
            let target = self.runtime_on(&to).await?;
            let archive = from
                .export_shared_volume(&volume.docker_name(), &token)
                .await?;
            let bytes = self.blobs.put_stream(&key, archive).await?;
            tracing::debug!(volume.id = %volume.id, bytes, "volume archived for its move");
            target
                .create_shared_volume(
                    &volume.docker_name(),
                    self.docker_labels(&volume),
                    volume.size_gb.map(|gb| u64::from(gb) << 30),
                )
                .await?;
            let (_, archive) = self.blobs.get_stream(&key).await?;
            target
                .import_shared_volume(&volume.docker_name(), &token, archive)
                .await?;
            self.store.finish_shared_volume_move(&volume.id).await?;
            ServiceResult::Ok(())
        }
        .await;
        let _ = self.blobs.delete(&key).await;
        if let Err(e) = copied {
            self.undo_move(&volume, &to).await;
            return Err(e);
        }
        info!(volume.id = %volume.id, from = %volume.server, to = %to, "volume moved");
        self.remove_old_copy(&volume.id, &volume.server, &volume.docker_name())
            .await;
        self.shared_volume(scope, volume.id.as_str()).await
    }

    /// A move that did not finish: the copy on `to` removed, the volume
    /// READY where it was.
    async fn undo_move(&self, volume: &SharedVolume, to: &str) {
        let removed = async {
            let rt = self.runtime_on(to).await?;
            rt.remove_shared_volume(&volume.docker_name()).await?;
            self.store.abort_shared_volume_move(&volume.id).await?;
            ServiceResult::Ok(())
        }
        .await;
        if let Err(e) = removed {
            warn!(volume.id = %volume.id, error = %e, "a failed move is not undone yet; recovery retries");
        }
    }

    /// Removes the copy a finished move left on its old host.
    async fn remove_old_copy(&self, id: &SharedVolumeId, from: &str, docker_name: &str) {
        let removed = async {
            let rt = self.runtime_on(from).await?;
            rt.remove_shared_volume(docker_name).await?;
            self.store.forget_moved_from(id).await?;
            ServiceResult::Ok(())
        }
        .await;
        if let Err(e) = removed {
            warn!(volume.id = %id, host = %from, error = %e, "the old copy of a moved volume is not removed yet; recovery retries");
        }
    }

    /// Removes a DELETING volume's helper and Docker volume and ends its
    /// record; what fails is left for recovery (the record stays DELETING,
    /// which every read treats as gone).
    async fn remove_volume_everywhere(&self, volume: &SharedVolume) {
        self.volume_helpers.lock().remove(&volume.id);
        let removed = async {
            let rt = self.runtime_on(&volume.server).await?;
            rt.remove_shared_volume(&volume.docker_name()).await?;
            self.store.finish_shared_volume_delete(&volume.id).await?;
            ServiceResult::Ok(())
        }
        .await;
        if let Err(e) = removed {
            warn!(volume.id = %volume.id, error = %e, "volume not removed yet; recovery retries");
        }
    }

    /// Finishes what crashed creates and deletes of volumes left: a create
    /// older than [`STALE_CREATE`] (any, with `all_dead`: no other process
    /// can be making one) is rolled back, a delete carried on.
    pub async fn recover_shared_volumes(&self, all_dead: bool) -> ServiceResult<()> {
        let stale = if all_dead {
            Utc::now()
        } else {
            Utc::now() - chrono::Duration::from_std(STALE_CREATE).unwrap_or_default()
        };
        for volume in self.store.pending_shared_volumes().await? {
            match volume.status {
                SharedVolumeStatus::Creating
                    if volume.created_at <= stale
                        && self
                            .store
                            .set_shared_volume_status(&volume.id, SharedVolumeStatus::Deleting)
                            .await
                            .is_ok() =>
                {
                    info!(volume.id = %volume.id, "rolling back a create of a volume that never finished");
                    self.remove_volume_everywhere(&volume).await;
                }
                SharedVolumeStatus::Deleting => self.remove_volume_everywhere(&volume).await,
                // A move whose process died: given up (the copy it made
                // removed), like a create.
                SharedVolumeStatus::Moving
                    if all_dead
                        || volume
                            .moving_since
                            .is_some_and(|t| Utc::now() - t > chrono::Duration::hours(1)) =>
                {
                    if let Some(to) = &volume.moving_to {
                        info!(volume.id = %volume.id, to = %to, "giving up a move that never finished");
                        self.undo_move(&volume, to).await;
                    }
                }
                _ => {}
            }
            if let Some(from) = &volume.moved_from {
                self.remove_old_copy(&volume.id, from, &volume.docker_name())
                    .await;
            }
        }
        Ok(())
    }

    /// Resolves a create's mounts to the caller's volumes (404 naming
    /// `volumeMounts[i].volume` for an unknown one or another account's)
    /// and places the create on their host.
    pub async fn resolve_mounts(&self, scope: &Scope, spec: &mut SandboxSpec) -> ServiceResult<()> {
        let mut server: Option<String> = None;
        for (i, m) in spec.mounts.iter_mut().enumerate() {
            let field = format!("volumeMounts[{i}].volume");
            let volume = match self.load_shared_volume(scope, &m.volume).await {
                Ok(v) => v,
                Err(ServiceError::NotFound(message)) => {
                    return Err(ServiceError::NotFound(format!("{field}: {message}")))
                }
                Err(e) => return Err(e),
            };
            if volume.status != SharedVolumeStatus::Ready {
                return Err(ServiceError::Conflict(format!(
                    "{field}: volume '{}' is {} now",
                    volume.name,
                    volume.status.as_str().to_lowercase()
                )));
            }
            match &server {
                Some(s) if *s != volume.server => {
                    return Err(ServiceError::field(
                        field,
                        format!(
                            "volume '{}' is on host '{}' but another mounted volume is on '{s}': \
                             a sandbox mounts volumes of one host",
                            volume.name, volume.server
                        ),
                    ))
                }
                _ => server = Some(volume.server.clone()),
            }
            m.volume = volume.id.to_string();
            m.name = volume.name.clone();
        }
        if let Some(server) = server {
            match &spec.placement.server {
                Some(asked) if *asked != server => {
                    return Err(ServiceError::field(
                        "server",
                        format!("the mounted volumes live on host '{server}', not '{asked}'"),
                    ))
                }
                _ => spec.placement.server = Some(server),
            }
        }
        Ok(())
    }

    /// What a volume holds, and how its host holds it to its size.
    pub async fn volume_usage(&self, volume: &SharedVolume) -> ServiceResult<VolumeUsage> {
        let used_bytes = self.volume_files(volume).await?.usage().await?;
        let (enforced, enforcement) = match volume.size_gb {
            None => (false, None),
            Some(_) => {
                let rt = self.runtime_on(&volume.server).await?;
                match rt.disk_enforcement().await.workspace {
                    stockade_runtime::Enforcement::Enforced(method) => {
                        (true, Some(format!("enforced by {}", method.describe())))
                    }
                    stockade_runtime::Enforcement::NotEnforced(why) => {
                        (false, Some(format!("not enforced on this host: {why}")))
                    }
                }
            }
        };
        Ok(VolumeUsage {
            used_bytes,
            size_gb: volume.size_gb,
            enforced,
            enforcement,
        })
    }

    /// The content token of a volume: the E2B volume API's bearer token for
    /// its files, valid for this volume only and as long as it lives.
    pub fn volume_content_token(&self, volume: &SharedVolume) -> String {
        format!(
            "{CONTENT_TOKEN_PREFIX}{}",
            self.agents.derive(CONTENT_TOKEN_DOMAIN, volume.id.as_str())
        )
    }

    /// The live volume `id` when `token` is its content token; 404 for an
    /// unknown or deleted volume, 401-worthy `Forbidden` for a wrong token.
    pub async fn volume_of_content_token(
        &self,
        id: &str,
        token: &str,
    ) -> ServiceResult<SharedVolume> {
        let Ok(vid) = SharedVolumeId::parse(id) else {
            return Err(volume_not_found(id));
        };
        let expected = format!(
            "{CONTENT_TOKEN_PREFIX}{}",
            self.agents.derive(CONTENT_TOKEN_DOMAIN, vid.as_str())
        );
        if !bool::from(expected.as_bytes().ct_eq(token.as_bytes())) {
            return Err(ServiceError::Forbidden(
                "this token does not grant access to this volume".into(),
            ));
        }
        let volume = match self.store.get_shared_volume(&vid).await {
            Ok(v) => v,
            Err(StoreError::NotFound) => return Err(volume_not_found(id)),
            Err(e) => return Err(e.into()),
        };
        if volume.deleted_at.is_some() || volume.status != SharedVolumeStatus::Ready {
            return Err(volume_not_found(id));
        }
        Ok(volume)
    }

    /// The files of a volume, through its helper (started when needed).
    pub async fn volume_files(&self, volume: &SharedVolume) -> ServiceResult<VolumeFiles<'_>> {
        let client = self.helper_client(volume, false).await?;
        Ok(VolumeFiles {
            svc: self,
            volume: volume.clone(),
            client,
        })
    }

    async fn helper_client(
        &self,
        volume: &SharedVolume,
        fresh: bool,
    ) -> ServiceResult<AgentClient> {
        if !fresh {
            if let Some(h) = self.volume_helpers.lock().get_mut(&volume.id) {
                h.last_use = Instant::now();
                return Ok(h.client.clone());
            }
        }
        let rt = self.runtime_on(&volume.server).await?;
        let token = self.agents.derive(HELPER_TOKEN_DOMAIN, volume.id.as_str());
        let addr = rt.volume_helper(&volume.docker_name(), &token).await?;
        let addr = addr
            .parse()
            .map_err(|e| ServiceError::Internal(format!("files helper address {addr}: {e}")))?;
        let client = AgentClient::new(Endpoint::Tcp(addr), Some(token));
        // The agent answers shortly after its container starts.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match client.health().await {
                Ok(()) => break,
                Err(e) if Instant::now() >= deadline => {
                    return Err(ServiceError::Docker(format!(
                        "the files helper of volume '{}' did not answer: {e}",
                        volume.name
                    )))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        self.volume_helpers.lock().insert(
            volume.id.clone(),
            Helper {
                server: volume.server.clone(),
                docker_name: volume.docker_name(),
                client: client.clone(),
                last_use: Instant::now(),
            },
        );
        Ok(client)
    }

    /// Stops the files helpers this process used and has not for
    /// [`HELPER_IDLE`].
    pub async fn stop_idle_volume_helpers(&self) {
        let idle: Vec<(SharedVolumeId, Helper)> = {
            let mut map = self.volume_helpers.lock();
            let ids: Vec<SharedVolumeId> = map
                .iter()
                .filter(|(_, h)| h.last_use.elapsed() >= HELPER_IDLE)
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| map.remove(&id).map(|h| (id, h)))
                .collect()
        };
        for (id, h) in idle {
            let stopped = async {
                let rt = self.runtime_on(&h.server).await?;
                rt.stop_volume_helper(&h.docker_name).await?;
                ServiceResult::Ok(())
            }
            .await;
            if let Err(e) = stopped {
                warn!(volume.id = %id, error = %e, "could not stop an idle files helper");
            }
        }
    }
}

/// A volume's files, through its helper's agent. Paths are the volume's own
/// (`/` is its root).
pub struct VolumeFiles<'a> {
    svc: &'a Service,
    volume: SharedVolume,
    client: AgentClient,
}

/// Maps what the helper's agent answered to the API's errors.
fn files_error(volume: &SharedVolume, path: &str, e: ClientError) -> ServiceError {
    match e.volume_error() {
        Some(VolumeErrorKind::NotFound) => ServiceError::NotFound(format!(
            "no such file or directory in volume '{}': {path}",
            volume.name
        )),
        Some(VolumeErrorKind::Exists) => {
            ServiceError::Conflict(format!("{path} exists in volume '{}'", volume.name))
        }
        Some(
            VolumeErrorKind::BadPath
            | VolumeErrorKind::Symlink
            | VolumeErrorKind::NotAFile
            | VolumeErrorKind::NotADirectory
            | VolumeErrorKind::TooMany,
        ) => ServiceError::field("path", volume_message(&e)),
        Some(VolumeErrorKind::BadRequest) => ServiceError::field("query", volume_message(&e)),
        Some(VolumeErrorKind::Io) | None => match e {
            ClientError::Volume { message, .. } if message.contains("No space left") => {
                ServiceError::StorageFull(format!(
                    "volume '{}' or its host's disk is full: {message}",
                    volume.name
                ))
            }
            other => ServiceError::Docker(format!(
                "the files of volume '{}' could not be reached: {other}",
                volume.name
            )),
        },
    }
}

/// The agent's own words of a refusal.
fn volume_message(e: &ClientError) -> String {
    match e {
        ClientError::Volume { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

impl VolumeFiles<'_> {
    /// Runs `call` against the helper, once more on a fresh helper when the
    /// connection failed (the helper was stopped since it was last used).
    async fn call<T, F, Fut>(&mut self, path: &str, call: F) -> ServiceResult<T>
    where
        F: Fn(AgentClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        match call(self.client.clone()).await {
            Err(ClientError::Transport(_)) => {
                self.client = self.svc.helper_client(&self.volume, true).await?;
                call(self.client.clone())
                    .await
                    .map_err(|e| files_error(&self.volume, path, e))
            }
            other => other.map_err(|e| files_error(&self.volume, path, e)),
        }
    }

    pub async fn stat(&mut self, path: &str) -> ServiceResult<VolumeEntry> {
        self.call(path, |c| async move { c.volume_stat(path).await })
            .await
    }

    pub async fn list(&mut self, path: &str, depth: u32) -> ServiceResult<Vec<VolumeEntry>> {
        self.call(path, |c| async move { c.volume_list(path, depth).await })
            .await
    }

    pub async fn make_dir(
        &mut self,
        path: &str,
        parents: bool,
        attrs: VolumeAttrs,
    ) -> ServiceResult<VolumeEntry> {
        self.call(path, |c| async move {
            c.volume_mkdir(path, parents, &attrs).await
        })
        .await
    }

    pub async fn read(&mut self, path: &str) -> ServiceResult<Download> {
        self.call(path, |c| async move { c.volume_read(path).await })
            .await
    }

    /// Writes a file from a stream of chunks (an `Err` chunk aborts it and
    /// leaves the old file, if any, as it was).
    pub async fn write(
        &mut self,
        path: &str,
        parents: bool,
        attrs: VolumeAttrs,
        chunks: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    ) -> ServiceResult<VolumeEntry> {
        // A stream is used once: no retry on a fresh helper.
        self.client
            .volume_write(path, parents, &attrs, chunks)
            .await
            .map_err(|e| files_error(&self.volume, path, e))
    }

    pub async fn remove(&mut self, path: &str) -> ServiceResult<()> {
        self.call(path, |c| async move { c.volume_remove(path).await })
            .await
    }

    pub async fn rename(&mut self, from: &str, to: &str) -> ServiceResult<VolumeEntry> {
        self.call(from, |c| async move { c.volume_rename(from, to).await })
            .await
    }

    pub async fn set_attrs(
        &mut self,
        path: &str,
        attrs: VolumeAttrs,
    ) -> ServiceResult<VolumeEntry> {
        self.call(
            path,
            |c| async move { c.volume_set_attrs(path, &attrs).await },
        )
        .await
    }

    /// Writes a request body as a file, held to the unpack ceiling (413
    /// past it, the old file, if any, left as it was).
    pub async fn write_body(
        &mut self,
        path: &str,
        parents: bool,
        attrs: VolumeAttrs,
        body: BodyStream,
    ) -> ServiceResult<VolumeEntry> {
        let limit = self.svc.config.max_unpacked_bytes;
        let watch = Arc::new(BodyWatch::default());
        let mut body = limit_body(body, limit, watch.clone());
        let (tx, rx) = mpsc::channel(8);
        let pump = tokio::spawn(async move {
            while let Some(chunk) = body.next().await {
                let failed = chunk.is_err();
                if tx.send(chunk).await.is_err() || failed {
                    break;
                }
            }
        });
        let written = self.write(path, parents, attrs, rx).await;
        pump.abort();
        if watch.too_large.load(Ordering::SeqCst) {
            return Err(crate::files::too_large(limit));
        }
        if watch.failed.load(Ordering::SeqCst) {
            return Err(ServiceError::field(
                "body",
                "the request body ended before it was complete",
            ));
        }
        written
    }

    /// A file's bytes as a stream, with its size when known.
    pub async fn read_stream(&mut self, path: &str) -> ServiceResult<(Option<u64>, BodyStream)> {
        let download = self.read(path).await?;
        let size = download.size;
        let stream = futures_util::stream::unfold(download, |mut d| async move {
            d.chunk()
                .await
                .map(|c| (c.map_err(std::io::Error::other), d))
        });
        Ok((size, Box::pin(stream)))
    }

    /// Bytes used by everything in the volume.
    pub async fn usage(&mut self) -> ServiceResult<u64> {
        self.call("/", |c| async move { c.volume_usage().await })
            .await
            .map(|u| u.bytes)
    }
}
