//! Stockade's volumes on Docker: listing with owner labels,
//! whether a running container mounts them, and their sizes from
//! `docker system df`, measured once for concurrent callers.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bollard::errors::Error as BollardError;
use bollard::volume::{ListVolumesOptions, RemoveVolumeOptions};
use bollard::Docker;
use chrono::{DateTime, Utc};
use stockade_core::VolumeName;

use crate::docker::{status_code, DockerRuntime};
use crate::{labels, RuntimeError, RuntimeResult, VolumeInfo, Volumes};

/// How long measuring volume sizes may take, retries included, before the
/// sizes are reported unknown.
const DF_TIMEOUT: Duration = Duration::from_secs(60);
/// The pause between attempts while the engine runs another measurement.
const DF_RETRY: Duration = Duration::from_millis(250);

/// One `docker system df`: when it started and each volume's size.
#[derive(Clone)]
struct DfSnapshot {
    started: Instant,
    sizes: Arc<HashMap<String, u64>>,
}

/// The last measurement per Docker host. The lock also makes concurrent
/// callers in this process wait for one measurement instead of each
/// starting their own: Docker refuses a second df while one runs.
fn df_cache() -> &'static tokio::sync::Mutex<HashMap<String, DfSnapshot>> {
    static CACHE: OnceLock<tokio::sync::Mutex<HashMap<String, DfSnapshot>>> = OnceLock::new();
    CACHE.get_or_init(|| tokio::sync::Mutex::new(HashMap::new()))
}

fn is_df_busy(e: &BollardError) -> bool {
    matches!(e, BollardError::DockerResponseServerError { message, .. }
        if message.contains("already running"))
}

fn parse_created(s: Option<&str>) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

impl DockerRuntime {
    /// Sizes of every volume from a `docker system df` that started at most
    /// `max_age` ago; `None` when the engine would not measure in time.
    async fn volume_sizes(
        &self,
        docker: &Docker,
        max_age: Duration,
    ) -> Option<Arc<HashMap<String, u64>>> {
        let asked = Instant::now();
        let deadline = asked + DF_TIMEOUT;
        let mut cache = tokio::time::timeout(DF_TIMEOUT, df_cache().lock())
            .await
            .ok()?;
        if let Some(snap) = cache.get(self.host()) {
            // A measurement that began after the caller asked (it waited for
            // it) or within `max_age` is as good as a new one.
            if snap.started + max_age >= asked {
                return Some(snap.sizes.clone());
            }
        }
        loop {
            let started = Instant::now();
            let left = deadline.saturating_duration_since(started);
            match tokio::time::timeout(left, docker.df()).await {
                Ok(Ok(df)) => {
                    let mut sizes: HashMap<String, u64> = df
                        .volumes
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|v| {
                            let size = v.usage_data?.size;
                            u64::try_from(size).ok().map(|s| (v.name, s))
                        })
                        .collect();
                    // The engine leaves volumes with mount options out: one
                    // binding a file system of its own takes what its image
                    // file holds on this disk.
                    sizes.extend(self.volume_disk_sizes(docker).await);
                    let sizes = Arc::new(sizes);
                    tracing::debug!(
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        volumes = sizes.len(),
                        "docker df"
                    );
                    cache.insert(
                        self.host().to_owned(),
                        DfSnapshot {
                            started,
                            sizes: sizes.clone(),
                        },
                    );
                    return Some(sizes);
                }
                // Another client (another server, `docker system df`) is
                // measuring: wait for it to finish and measure again.
                Ok(Err(e)) if is_df_busy(&e) && Instant::now() + DF_RETRY < deadline => {
                    tokio::time::sleep(DF_RETRY).await;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "docker df failed: volume sizes unknown");
                    return None;
                }
                Err(_) => {
                    tracing::warn!(
                        "docker df took longer than {} s: volume sizes unknown",
                        DF_TIMEOUT.as_secs()
                    );
                    return None;
                }
            }
        }
    }

    /// Names of the volumes that running containers mount.
    async fn mounted_by_running(&self, docker: &Docker) -> RuntimeResult<HashSet<String>> {
        let mut filters = HashMap::new();
        filters.insert("status".to_owned(), vec!["running".to_owned()]);
        let running = self.list_containers_by(docker, false, filters).await?;
        Ok(running
            .into_iter()
            .flat_map(|c| c.mounts.unwrap_or_default())
            .filter_map(|m| m.name)
            .collect())
    }

    /// Every `agent-sandbox-*` volume with its labels, size (when Docker
    /// measured it) and whether a running container mounts it.
    pub(crate) async fn list_volumes_detailed(&self) -> RuntimeResult<Vec<VolumeInfo>> {
        let docker = self.client().await?;
        let mut filters = HashMap::new();
        filters.insert("name".to_owned(), vec![VolumeName::PREFIX.to_owned()]);
        let listed = docker
            .list_volumes(Some(ListVolumesOptions { filters }))
            .await
            .map_err(|e| self.map_err(e, "list volumes"))?;
        let volumes: Vec<_> = listed
            .volumes
            .unwrap_or_default()
            .into_iter()
            .filter_map(|v| VolumeName::parse(&v.name).ok().map(|name| (name, v)))
            .collect();
        if volumes.is_empty() {
            return Ok(Vec::new());
        }
        let in_use = self.mounted_by_running(&docker).await?;
        let sizes = self.volume_sizes(&docker, Duration::ZERO).await;
        Ok(volumes
            .into_iter()
            .map(|(name, v)| VolumeInfo {
                size_bytes: sizes.as_ref().and_then(|s| s.get(name.as_str()).copied()),
                created_at: parse_created(v.created_at.as_deref()),
                instance_id: v.labels.get(labels::INSTANCE_ID).cloned(),
                account_id: v.labels.get(labels::ACCOUNT_ID).cloned(),
                in_use: in_use.contains(name.as_str()),
                pool_member: crate::pool_class_of(|k| v.labels.get(k)).is_some(),
                name,
            })
            .collect())
    }

    /// One volume's size from a measurement at most `max_age` old.
    pub(crate) async fn volume_size_of(
        &self,
        name: &VolumeName,
        max_age: Duration,
    ) -> RuntimeResult<Option<u64>> {
        let docker = self.client().await?;
        Ok(self
            .volume_sizes(&docker, max_age)
            .await
            .and_then(|s| s.get(name.as_str()).copied()))
    }
}

#[async_trait]
impl Volumes for DockerRuntime {
    async fn list_volumes(&self) -> RuntimeResult<Vec<VolumeInfo>> {
        self.list_volumes_detailed().await
    }

    async fn remove_volume(&self, name: &VolumeName) -> RuntimeResult<()> {
        let docker = self.client().await?;
        let removed = docker
            .remove_volume(name.as_str(), None::<RemoveVolumeOptions>)
            .await
            .map_err(|e| match status_code(&e) {
                Some(409) => RuntimeError::Conflict("Volume is in use by running sandbox".into()),
                Some(404) => RuntimeError::NotFound(format!("volume {name} not found")),
                _ => self.map_err(e, "remove volume"),
            });
        if matches!(removed, Ok(()) | Err(RuntimeError::NotFound(_))) {
            self.remove_volume_disk(&docker, name.as_str()).await?;
        }
        removed
    }

    async fn volume_size(
        &self,
        name: &VolumeName,
        max_age: Duration,
    ) -> RuntimeResult<Option<u64>> {
        self.volume_size_of(name, max_age).await
    }

    async fn create_shared_volume(
        &self,
        name: &str,
        labels: std::collections::BTreeMap<String, String>,
        size_bytes: Option<u64>,
    ) -> RuntimeResult<()> {
        self.create_shared_volume_impl(name, labels, size_bytes)
            .await
    }

    async fn prepare_shared_volumes(&self, mounts: &[crate::SharedMount]) -> RuntimeResult<()> {
        let docker = self.client().await?;
        self.check_shared_volumes(&docker, mounts).await
    }

    async fn remove_shared_volume(&self, name: &str) -> RuntimeResult<()> {
        self.remove_shared_volume_impl(name).await
    }

    async fn export_shared_volume(
        &self,
        name: &str,
        token: &str,
    ) -> RuntimeResult<crate::ByteStream> {
        self.export_shared_volume_impl(name, token).await
    }

    async fn import_shared_volume(
        &self,
        name: &str,
        token: &str,
        archive: crate::ByteStream,
    ) -> RuntimeResult<()> {
        self.import_shared_volume_impl(name, token, archive).await
    }

    async fn volume_helper(&self, name: &str, token: &str) -> RuntimeResult<String> {
        self.volume_helper_impl(name, token).await
    }

    async fn stop_volume_helper(&self, name: &str) -> RuntimeResult<()> {
        self.stop_volume_helper_impl(name).await
    }
}
