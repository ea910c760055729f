//! Shared volumes on Docker: their Docker volumes, the check a create makes
//! that each volume it mounts exists (the engine would otherwise make an
//! empty one of that name), and each volume's files helper — a container of
//! the empty probe image whose PID 1 is the agent, serving the volume's
//! files confined beneath [`VOLUME_HELPER_ROOT`].

use std::collections::BTreeMap;

use bollard::container::{
    Config, CreateContainerOptions, StartContainerOptions, StopContainerOptions,
};
use bollard::models::{HostConfig, Mount, MountTypeEnum, RestartPolicy, RestartPolicyNameEnum};
use bollard::volume::{CreateVolumeOptions, RemoveVolumeOptions};
use bollard::Docker;

use super::containers::remove_container;
use super::ports::address_of;
use super::{status_code, DockerRuntime};
use crate::agent::agent_entrypoint_prefix;
use crate::{
    labels, RuntimeError, RuntimeResult, SharedMount, AGENT_TOKEN_ENV, VOLUME_HELPER_ROOT,
};

/// The environment variable that tells the agent to serve a volume's files
/// beneath a directory.
pub const VOLUME_ROOT_ENV: &str = "STOCKADE_AGENT_VOLUME_ROOT";

/// A files helper's memory limit: the agent alone, streaming.
const HELPER_MEMORY: i64 = 128 * 1024 * 1024;
/// A files helper's CPU limit.
const HELPER_NANO_CPUS: i64 = 500_000_000;
/// A files helper's process limit.
const HELPER_PIDS: i64 = 64;

/// The files helper's container name for Docker volume `volume`.
fn helper_name(volume: &str) -> String {
    format!("{volume}-files")
}

impl DockerRuntime {
    /// Fails with `NotFound` naming the first of `mounts` whose Docker
    /// volume is missing; mounts again the file system of its own that a
    /// capped volume binds, should it be gone (after a reboot).
    pub(super) async fn check_shared_volumes(
        &self,
        docker: &Docker,
        mounts: &[SharedMount],
    ) -> RuntimeResult<()> {
        for m in mounts {
            match docker.inspect_volume(&m.volume).await {
                Ok(_) => self.mount_volume_disk(docker, &m.volume).await?,
                Err(e) if status_code(&e) == Some(404) => {
                    return Err(RuntimeError::NotFound(format!(
                        "the shared volume {} is missing on this Docker host",
                        m.volume
                    )))
                }
                Err(e) => return Err(self.map_err(e, "inspect a shared volume")),
            }
        }
        Ok(())
    }

    pub(super) async fn create_shared_volume_impl(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        size_bytes: Option<u64>,
    ) -> RuntimeResult<()> {
        let docker = self.client().await?;
        if docker.inspect_volume(name).await.is_ok() {
            return Ok(());
        }
        // Capped as a sandbox's /workspace is: the driver's size option, a
        // file system of its own, or a btrfs quota, whichever this engine
        // has.
        let quotas = match size_bytes {
            Some(_) => Some(self.disk_quotas(&docker).await),
            None => None,
        };
        let (mut driver_opts, _) = Self::disk_options(quotas.as_ref(), size_bytes);
        let disk = self
            .new_volume_disk(&docker, quotas.as_ref(), name, size_bytes)
            .await?;
        if let Some(disk) = &disk {
            driver_opts = disk.volume_options();
        }
        let made = async {
            docker
                .create_volume(CreateVolumeOptions {
                    name: name.to_owned(),
                    driver: "local".to_owned(),
                    driver_opts,
                    labels: labels.into_iter().collect(),
                })
                .await
                .map_err(|e| self.map_err(e, "create a shared volume"))?;
            self.cap_new_volume(&docker, quotas.as_ref(), name, size_bytes)
                .await
        }
        .await;
        if made.is_err() {
            let _ = docker
                .remove_volume(name, None::<RemoveVolumeOptions>)
                .await;
            let _ = self.remove_volume_disk(&docker, name).await;
        }
        made
    }

    pub(super) async fn remove_shared_volume_impl(&self, name: &str) -> RuntimeResult<()> {
        let docker = self.client().await?;
        remove_container(&docker, &helper_name(name))
            .await
            .map_err(|e| self.map_err(e, "remove a shared volume's files helper"))?;
        match docker
            .remove_volume(name, None::<RemoveVolumeOptions>)
            .await
        {
            Ok(()) => self.remove_volume_disk(&docker, name).await,
            Err(e) if status_code(&e) == Some(404) => self.remove_volume_disk(&docker, name).await,
            Err(e) if status_code(&e) == Some(409) => Err(RuntimeError::Conflict(format!(
                "the shared volume {name} is still mounted by a container"
            ))),
            Err(e) => Err(self.map_err(e, "remove a shared volume")),
        }
    }

    pub(super) async fn volume_helper_impl(
        &self,
        name: &str,
        token: &str,
    ) -> RuntimeResult<String> {
        let docker = self.client().await?;
        let container = helper_name(name);
        self.mount_volume_disk(&docker, name).await?;
        for _ in 0..3 {
            match docker.inspect_container(&container, None).await {
                Ok(c) => {
                    if let Some(addr) = self.agent_addr_of(&c, address_of(&c)) {
                        return Ok(addr);
                    }
                    match docker
                        .start_container(&container, None::<StartContainerOptions<String>>)
                        .await
                    {
                        Ok(()) => {}
                        // Started by a concurrent call.
                        Err(e) if status_code(&e) == Some(304) => {}
                        Err(e) => return Err(self.map_err(e, "start a volume's files helper")),
                    }
                }
                Err(e) if status_code(&e) == Some(404) => {
                    self.create_volume_helper(&docker, name, token).await?;
                }
                Err(e) => return Err(self.map_err(e, "inspect a volume's files helper")),
            }
        }
        Err(RuntimeError::Other(format!(
            "the files helper of {name} did not start"
        )))
    }

    async fn create_volume_helper(
        &self,
        docker: &Docker,
        name: &str,
        token: &str,
    ) -> RuntimeResult<()> {
        self.ensure_probe_image(docker).await?;
        self.prepare_networks(docker).await;
        if !self.agent_volume_known(docker).await? {
            self.ensure_agent_volume(docker, &self.probe_image())
                .await?;
        }
        // Made only on a volume that exists (the engine would make an empty
        // one of that name otherwise), labelled as its volume is.
        let volume = match docker.inspect_volume(name).await {
            Ok(v) => v,
            Err(e) if status_code(&e) == Some(404) => {
                return Err(RuntimeError::NotFound(format!(
                    "the shared volume {name} is missing on this Docker host"
                )))
            }
            Err(e) => return Err(self.map_err(e, "inspect a shared volume")),
        };
        let mounts = vec![
            Mount {
                target: Some(VOLUME_HELPER_ROOT.to_owned()),
                source: Some(name.to_owned()),
                typ: Some(MountTypeEnum::VOLUME),
                read_only: Some(false),
                ..Default::default()
            },
            self.agent_mount(true, Some(super::agent::volume_labels())),
        ];
        let (port_bindings, exposed_ports) = self.agent_port_publishing();
        let mut labels = volume.labels;
        labels.insert(labels::VOLUME_HELPER.to_owned(), name.to_owned());
        let config = Config {
            image: Some(self.probe_image()),
            entrypoint: Some(agent_entrypoint_prefix()),
            cmd: Some(Vec::new()),
            env: Some(vec![
                format!("{AGENT_TOKEN_ENV}={token}"),
                format!("{VOLUME_ROOT_ENV}={VOLUME_HELPER_ROOT}"),
            ]),
            working_dir: Some(VOLUME_HELPER_ROOT.to_owned()),
            labels: Some(labels),
            exposed_ports,
            host_config: Some(HostConfig {
                port_bindings,
                cap_drop: Some(vec!["ALL".to_owned()]),
                // Owners and modes as the API asks: chown, chmod, and
                // reading what sandboxes wrote under any owner.
                cap_add: Some(
                    ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"]
                        .iter()
                        .map(|c| (*c).to_owned())
                        .collect(),
                ),
                security_opt: Some(
                    std::iter::once("no-new-privileges:true".to_owned())
                        .chain(self.seccomp_option())
                        .collect(),
                ),
                pids_limit: Some(HELPER_PIDS),
                memory: Some(HELPER_MEMORY),
                memory_swap: Some(HELPER_MEMORY),
                nano_cpus: Some(HELPER_NANO_CPUS),
                privileged: Some(false),
                init: Some(false),
                mounts: Some(mounts),
                // The internal network: the server reaches it, nothing else.
                network_mode: Some(self.sandbox_network_mode(false)),
                runtime: self.config.oci_runtime.clone(),
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::NO),
                    maximum_retry_count: None,
                }),
                readonly_rootfs: Some(true),
                log_config: Some(self.log_config()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: helper_name(name),
            platform: None,
        };
        match docker.create_container(Some(options), config).await {
            Ok(_) => Ok(()),
            // Made by a concurrent call.
            Err(e) if status_code(&e) == Some(409) => Ok(()),
            Err(e) => Err(self.map_err(e, "create a volume's files helper")),
        }
    }

    /// The files helper's container of `name`, made (not started) when
    /// missing; its name.
    async fn helper_container(
        &self,
        docker: &Docker,
        name: &str,
        token: &str,
    ) -> RuntimeResult<String> {
        self.mount_volume_disk(docker, name).await?;
        let container = helper_name(name);
        match docker.inspect_container(&container, None).await {
            Ok(_) => {}
            Err(e) if status_code(&e) == Some(404) => {
                self.create_volume_helper(docker, name, token).await?
            }
            Err(e) => return Err(self.map_err(e, "inspect a volume's files helper")),
        }
        Ok(container)
    }

    pub(super) async fn export_shared_volume_impl(
        &self,
        name: &str,
        token: &str,
    ) -> RuntimeResult<crate::ByteStream> {
        let docker = self.client().await?;
        let container = self.helper_container(&docker, name, token).await?;
        self.export_dir(&docker, &container, VOLUME_HELPER_ROOT)
            .await
    }

    pub(super) async fn import_shared_volume_impl(
        &self,
        name: &str,
        token: &str,
        archive: crate::ByteStream,
    ) -> RuntimeResult<()> {
        let docker = self.client().await?;
        let container = self.helper_container(&docker, name, token).await?;
        self.unpack_into(&docker, &container, VOLUME_HELPER_ROOT, archive)
            .await
    }

    pub(super) async fn stop_volume_helper_impl(&self, name: &str) -> RuntimeResult<()> {
        let docker = self.client().await?;
        match docker
            .stop_container(&helper_name(name), Some(StopContainerOptions { t: 2 }))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if matches!(status_code(&e), Some(304) | Some(404)) => Ok(()),
            Err(e) => Err(self.map_err(e, "stop a volume's files helper")),
        }
    }
}
