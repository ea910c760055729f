//! Updates of a sandbox after create on Docker: CPU and memory limits
//! through the container update API (live), and the main process's
//! environment through a file its wrapper reads at every start.
//!
//! Docker fixes a container's environment at create. So that a changed
//! environment reaches the main process at its next start without
//! re-creating the container (which would lose its root filesystem), the
//! main process runs as `/bin/sh -c WRAPPER stockade-main ARGV…`: the
//! wrapper sources [`ENV_FILE`] when present and `exec`s ARGV, so the process
//! tree, signals and exit codes are the command's own.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use bollard::container::{
    InspectContainerOptions, UpdateContainerOptions, UploadToContainerOptions,
};
use bollard::errors::Error as BollardError;
use stockade_core::SandboxId;

use crate::docker::{container_name, DockerRuntime};
use crate::{RuntimeError, RuntimeResult, Update};

/// The file the main process's wrapper sources at start: the environment
/// set after create.
pub const ENV_FILE: &str = "/.stockade/main.env";
const WRAPPER: &str = "if [ -r /.stockade/main.env ]; then . /.stockade/main.env; fi; exec \"$@\"";

/// The argv Docker runs for a main process `argv`.
pub(crate) fn wrap_main(argv: &[String]) -> Vec<String> {
    let mut out = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        WRAPPER.to_owned(),
        "stockade-main".to_owned(),
    ];
    out.extend(argv.iter().cloned());
    out
}

fn is_identifier(key: &str) -> bool {
    let mut bytes = key.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn parse_env_list(list: Option<Vec<String>>) -> HashMap<String, String> {
    list.unwrap_or_default()
        .into_iter()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// The env file: `env` exported; a variable the container was created with
/// but `env` lacks goes back to the image's value, or is unset.
pub(crate) fn env_script(
    env: &BTreeMap<String, String>,
    container_env: &HashMap<String, String>,
    image_env: &HashMap<String, String>,
) -> String {
    let mut out = String::from("# Written by Stockade: the environment of the main process.\n");
    for (k, v) in env {
        if is_identifier(k) {
            out.push_str(&format!("export {k}={}\n", stockade_core::shell::quote(v)));
        }
    }
    let mut removed: Vec<&String> = container_env
        .keys()
        .filter(|k| !env.contains_key(*k) && is_identifier(k))
        .collect();
    removed.sort();
    for k in removed {
        match image_env.get(k) {
            Some(v) if container_env.get(k) != Some(v) => {
                out.push_str(&format!("export {k}={}\n", stockade_core::shell::quote(v)));
            }
            Some(_) => {}
            None => out.push_str(&format!("unset {k}\n")),
        }
    }
    out
}

/// One ustar header: `name` (at most 100 bytes), root-owned, modified now;
/// `kind` is `b'0'` for a file, `b'5'` for a directory (enough for Docker's
/// archive API; no dependency for 512-byte headers).
pub(crate) fn ustar_header(name: &str, mode: u32, size: usize, kind: u8) -> [u8; 512] {
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, bytes: &[u8]| {
        h[at..at + bytes.len()].copy_from_slice(bytes);
    };
    put(&mut h, 0, name.as_bytes());
    put(&mut h, 100, format!("{mode:07o}\0").as_bytes());
    put(&mut h, 108, b"0000000\0"); // uid root
    put(&mut h, 116, b"0000000\0"); // gid root
    put(&mut h, 124, format!("{size:011o}\0").as_bytes());
    let mtime = chrono::Utc::now().timestamp().max(0);
    put(&mut h, 136, format!("{mtime:011o}\0").as_bytes());
    put(&mut h, 148, b"        "); // checksum placeholder
    h[156] = kind;
    put(&mut h, 257, b"ustar\0");
    put(&mut h, 263, b"00");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
    h
}

/// A ustar archive of one directory and one file in it.
pub(crate) fn tar_one_file(dir: &str, file: &str, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2048 + content.len());
    out.extend_from_slice(&ustar_header(&format!("{dir}/"), 0o755, 0, b'5'));
    out.extend_from_slice(&ustar_header(
        &format!("{dir}/{file}"),
        0o644,
        content.len(),
        b'0',
    ));
    out.extend_from_slice(content);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

fn status_code(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerRuntime {
    fn not_found_or(&self, id: &SandboxId, e: BollardError, what: &str) -> RuntimeError {
        match status_code(&e) {
            Some(404) => RuntimeError::NotFound(format!("no container for sandbox {id}")),
            _ => self.map_err(e, what),
        }
    }

    /// Docker's container update: NanoCpus, Memory and MemorySwap (equal, so
    /// no swap beyond the limit), live on a running container.
    pub(crate) async fn update_container_resources(
        &self,
        id: &SandboxId,
        cpu_cores: f64,
        memory_bytes: i64,
    ) -> RuntimeResult<()> {
        if !cpu_cores.is_finite() || cpu_cores <= 0.0 || memory_bytes <= 0 {
            return Err(RuntimeError::Other(format!(
                "invalid limits: {cpu_cores} CPUs, {memory_bytes} bytes of memory"
            )));
        }
        let docker = self.client().await?;
        let options = UpdateContainerOptions::<String> {
            nano_cpus: Some((cpu_cores * 1e9).round() as i64),
            memory: Some(memory_bytes),
            memory_swap: Some(memory_bytes),
            ..Default::default()
        };
        docker
            .update_container(&container_name(id), options)
            .await
            .map_err(|e| match e {
                // The kernel refuses a limit below what the processes use.
                BollardError::DockerResponseServerError {
                    status_code: 500,
                    ref message,
                } if message.contains("busy") || message.contains("smaller than") => {
                    RuntimeError::Conflict(format!(
                        "Docker could not apply the new limits: {message}"
                    ))
                }
                e => self.not_found_or(id, e, "update container"),
            })
    }

    /// Writes [`ENV_FILE`] into the container (running or stopped).
    pub(crate) async fn write_main_env(
        &self,
        id: &SandboxId,
        env: &BTreeMap<String, String>,
    ) -> RuntimeResult<()> {
        let docker = self.client().await?;
        let name = container_name(id);
        let container = docker
            .inspect_container(&name, None::<InspectContainerOptions>)
            .await
            .map_err(|e| self.not_found_or(id, e, "inspect container"))?;
        let mut container_env = parse_env_list(container.config.and_then(|c| c.env));
        // The agent's token is no variable of the main process (the agent
        // removes it): nothing to restore or unset.
        container_env.remove(crate::AGENT_TOKEN_ENV);
        let image_env = match container.image.as_deref() {
            Some(image) => match docker.inspect_image(image).await {
                Ok(i) => parse_env_list(i.config.and_then(|c| c.env)),
                Err(e) if status_code(&e) == Some(404) => HashMap::new(),
                Err(e) => return Err(self.map_err(e, "inspect image")),
            },
            None => HashMap::new(),
        };
        let script = env_script(env, &container_env, &image_env);
        let (dir, file) = ENV_FILE
            .trim_start_matches('/')
            .split_once('/')
            .unwrap_or((".stockade", "main.env"));
        let archive = tar_one_file(dir, file, script.as_bytes());
        docker
            .upload_to_container(
                &name,
                Some(UploadToContainerOptions {
                    path: "/".to_owned(),
                    no_overwrite_dir_non_dir: "false".to_owned(),
                }),
                archive.into(),
            )
            .await
            .map_err(|e| self.not_found_or(id, e, "write the environment file"))
    }
}

#[async_trait]
impl Update for DockerRuntime {
    #[tracing::instrument(skip_all, fields(sandbox.id = %id, cpu_cores, memory_bytes))]
    async fn update_resources(
        &self,
        id: &SandboxId,
        cpu_cores: f64,
        memory_bytes: i64,
    ) -> RuntimeResult<()> {
        self.update_container_resources(id, cpu_cores, memory_bytes)
            .await
    }

    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn set_main_process_env(
        &self,
        id: &SandboxId,
        env: &BTreeMap<String, String>,
    ) -> RuntimeResult<()> {
        self.write_main_env(id, env).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(items: &[(&str, &str)]) -> HashMap<String, String> {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_wrapper_execs_the_command() {
        let argv = vec!["/bin/sh".to_owned(), "-c".to_owned(), "echo hi".to_owned()];
        let wrapped = wrap_main(&argv);
        assert_eq!(&wrapped[..2], ["/bin/sh", "-c"]);
        assert!(wrapped[2].contains(ENV_FILE));
        assert!(wrapped[2].ends_with("exec \"$@\""));
        assert_eq!(&wrapped[4..], &argv[..]);
    }

    #[test]
    fn env_scripts_export_restore_and_unset() {
        let env: BTreeMap<String, String> = [
            ("NEW".to_string(), "it's \"quoted\" $HOME\nline".to_string()),
            ("KEPT".to_string(), "2".to_string()),
        ]
        .into();
        let container = map(&[
            ("KEPT", "1"),
            ("GONE", "x"),
            ("PATH", "/custom"),
            ("LANG", "C"),
        ]);
        let image = map(&[("PATH", "/usr/bin:/bin"), ("LANG", "C")]);
        let script = env_script(&env, &container, &image);
        assert!(
            script.contains("export NEW='it'\\''s \"quoted\" $HOME\nline'\n"),
            "{script}"
        );
        assert!(script.contains("export KEPT='2'\n"));
        assert!(script.contains("unset GONE\n"));
        assert!(
            script.contains("export PATH='/usr/bin:/bin'\n"),
            "image value back"
        );
        assert!(
            !script.contains("LANG"),
            "unchanged image variables stay as they are"
        );
    }

    #[test]
    fn tar_headers_are_valid() {
        let t = tar_one_file(".stockade", "main.env", b"abc");
        assert_eq!(t.len() % 512, 0);
        assert_eq!(t.len(), 512 + 512 + 512 + 1024);
        for h in [&t[..512], &t[512..1024]] {
            let stored = std::str::from_utf8(&h[148..154]).unwrap();
            let mut copy = h.to_vec();
            copy[148..156].copy_from_slice(b"        ");
            let sum: u32 = copy.iter().map(|b| u32::from(*b)).sum();
            assert_eq!(u32::from_str_radix(stored, 8).unwrap(), sum);
        }
        assert_eq!(&t[1024..1027], b"abc");
        assert_eq!(t[512 + 156], b'0');
        assert_eq!(t[156], b'5');
    }
}
