//! The runtimes of registered Docker hosts: `stockade server`'s
//! [`RuntimeFactory`], which connects a [`Host`] with the server's own
//! Docker settings, and the flags of the hosts' health checks.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
pub use stockade_service::hosts::DockerHostFactory;
use stockade_service::hosts::{HostsConfig, RuntimeFactory};

/// Health checks of the Docker hosts.
#[derive(Args, Debug, Clone)]
pub struct HostArgs {
    /// Seconds between two health checks of every Docker host (Docker ping
    /// and free disk); a failing host takes no new sandboxes.
    #[arg(long, env = "STOCKADE_HOST_CHECK_INTERVAL", default_value_t = 3,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub host_check_interval: u64,
    /// Free space of a host's Docker data root under which it counts as
    /// unhealthy: bytes or a number with a unit (`512MB`, `2g`).
    #[arg(long, env = "STOCKADE_HOST_MIN_FREE_DISK", default_value = "512MB")]
    pub host_min_free_disk: String,
}

impl HostArgs {
    /// The hosts' settings with `factory`, the server's own Docker host
    /// being `own`; errors name the flag.
    pub fn config(
        &self,
        factory: Arc<dyn RuntimeFactory>,
        own: &str,
    ) -> anyhow::Result<HostsConfig> {
        let min_free = stockade_runtime::parse_size(&self.host_min_free_disk).ok_or_else(|| {
            anyhow::anyhow!(
                "--host-min-free-disk: '{}' is not a size (bytes, or a number with k, m, g or t, \
                 e.g. 512MB)",
                self.host_min_free_disk
            )
        })?;
        let defaults = HostsConfig::default();
        let interval = Duration::from_secs(self.host_check_interval);
        Ok(HostsConfig {
            own_docker_host: own.to_owned(),
            factory: Some(factory),
            check_interval: interval,
            // A check never runs into the next one.
            check_timeout: defaults
                .check_timeout
                .min(interval.max(Duration::from_secs(1))),
            min_free_disk_bytes: min_free,
        })
    }
}

#[cfg(test)]
mod tests {

    use clap::Parser;
    use stockade_core::{Host, HostTls};
    use stockade_runtime::{DockerConfig, IsolationConfig};

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: HostArgs,
    }

    fn host(name: &str, docker_host: &str, tls: Option<HostTls>) -> Host {
        Host {
            tls,
            ..Host::new(name, docker_host, chrono::Utc::now())
        }
    }

    #[test]
    fn a_host_gets_the_servers_settings_and_names_of_its_own() {
        let template = DockerConfig {
            host: Some("unix:///var/run/docker.sock".into()),
            server_name: "local".into(),
            pids_limit: 77,
            oci_runtime: Some("runsc".into()),
            disk_quotas: false,
            log_max_files: 5,
            isolation: IsolationConfig {
                packet_filter: false,
                ..IsolationConfig::default()
            },
            ..DockerConfig::default()
        };
        let factory = DockerHostFactory::new(template);
        let tls = HostTls {
            ca: "/etc/stockade/h3/ca.pem".into(),
            cert: "/etc/stockade/h3/cert.pem".into(),
            key: "/etc/stockade/h3/key.pem".into(),
        };
        let c = factory.config_for(&host("h3", "tcp://10.0.0.3:2376", Some(tls)));
        assert_eq!(c.host.as_deref(), Some("tcp://10.0.0.3:2376"));
        assert_eq!(c.server_name, "h3");
        assert_eq!(c.pids_limit, 77);
        assert_eq!(c.oci_runtime.as_deref(), Some("runsc"));
        assert!(!c.disk_quotas);
        assert_eq!(c.log_max_files, 5);
        let files = c.tls.unwrap();
        assert_eq!(files.key, std::path::Path::new("/etc/stockade/h3/key.pem"));
        assert_eq!(
            c.isolation,
            IsolationConfig {
                packet_filter: false,
                ..IsolationConfig::for_host("h3")
            }
        );
        let other = factory.config_for(&host("h2", "unix:///run/h2.sock", None));
        assert!(other.tls.is_none());
        assert_ne!(other.isolation.bridge, c.isolation.bridge);
    }

    #[test]
    fn connecting_fails_with_the_reason_and_never_touches_the_engine() {
        let factory = DockerHostFactory::new(DockerConfig::default());
        let rt = factory
            .connect(&host("h2", "unix:///nonexistent/stockade.sock", None))
            .unwrap();
        assert_eq!(rt.server_name(), "h2");
        let err = factory
            .connect(&host("bad", "npipe:////./pipe/docker", None))
            .err()
            .unwrap();
        assert!(err.contains("ssh://"), "{err}");
        let tls = HostTls {
            ca: "/nonexistent/ca.pem".into(),
            cert: "/nonexistent/cert.pem".into(),
            key: "/nonexistent/key.pem".into(),
        };
        let err = factory
            .connect(&host("h3", "tcp://127.0.0.1:2376", Some(tls)))
            .err()
            .unwrap();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn flags_are_checked_and_named() {
        let parse = |flags: &[&str]| {
            let cli: Cli = crate::server::tests::parse_flags(flags)?;
            let factory: Arc<dyn RuntimeFactory> =
                Arc::new(DockerHostFactory::new(DockerConfig::default()));
            cli.args.config(factory, "unix:///var/run/docker.sock")
        };
        for var in [
            "STOCKADE_HOST_CHECK_INTERVAL",
            "STOCKADE_HOST_MIN_FREE_DISK",
        ] {
            if std::env::var_os(var).is_some() {
                eprintln!("flags_are_checked_and_named skipped: {var} is set");
                return;
            }
        }
        let c = parse(&[]).unwrap();
        assert_eq!(c.check_interval, Duration::from_secs(3));
        assert_eq!(c.check_timeout, Duration::from_secs(3));
        assert_eq!(c.min_free_disk_bytes, 512 << 20);
        assert!(c.factory.is_some());
        let c = parse(&["--host-check-interval", "10", "--host-min-free-disk", "2g"]).unwrap();
        assert_eq!(c.check_interval, Duration::from_secs(10));
        assert_eq!(c.check_timeout, HostsConfig::default().check_timeout);
        assert_eq!(c.min_free_disk_bytes, 2 << 30);
        let err = parse(&["--host-min-free-disk", "lots"])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--host-min-free-disk: "), "{err}");
        for bad in ["0", "-1", "x", "3601"] {
            let flag = format!("--host-check-interval={bad}");
            let err = parse(&[&flag]).unwrap_err().to_string();
            assert!(err.contains("--host-check-interval"), "{err}");
        }
    }
}
