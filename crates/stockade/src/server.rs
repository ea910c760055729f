//! `stockade server`: configuration from flags and environment, then serve.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use stockade_runtime::{DockerConfig, DockerRuntime, IsolationConfig, Runtime};
use stockade_server::ratelimit::{IpNet, Limit, RateLimitConfig};
use stockade_server::routes::health::images_health;
use stockade_server::{AppState, Bootstrap, ServerConfig};
use stockade_service::egress::EgressStatus;

mod hosts;

#[derive(Args)]
pub struct ServerArgs {
    /// Address to listen on.
    #[arg(long, env = "STOCKADE_LISTEN", default_value = "127.0.0.1:7433")]
    listen: SocketAddr,
    /// Database URL: sqlite://PATH or postgres://USER:PASS@HOST/DB
    /// (default: SQLite in the data directory).
    #[arg(long, env = "STOCKADE_DATABASE_URL")]
    database: Option<String>,
    /// Where Stockade keeps its SQLite database and local data
    /// (default: $XDG_DATA_HOME/stockade or ~/.local/share/stockade).
    #[arg(long, env = "STOCKADE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Docker daemon: unix:///path or tcp://host:port (default: DOCKER_HOST or
    /// unix:///var/run/docker.sock).
    #[arg(long, env = "STOCKADE_DOCKER_HOST")]
    docker_host: Option<String>,
    /// Image of sandboxes that name none.
    #[arg(
        long,
        env = "STOCKADE_DEFAULT_IMAGE",
        default_value = "node:20-bookworm"
    )]
    default_image: String,
    /// Token of the admin account made on the first start (default: generated
    /// and printed once).
    #[arg(long, env = "STOCKADE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Name of this Docker host in sandbox records ("server location").
    #[arg(long, env = "STOCKADE_SERVER_NAME", default_value = "local")]
    server_name: String,
    /// OCI runtime for sandbox containers, e.g. `runsc` (gVisor).
    #[arg(long, env = "STOCKADE_OCI_RUNTIME")]
    oci_runtime: Option<String>,
    /// Most processes one sandbox may run.
    #[arg(long, env = "STOCKADE_PIDS_LIMIT", default_value_t = 512)]
    pids_limit: i64,
    /// Domain for host-form sandbox ports: `{port}-{id}.DOMAIN` (a wildcard
    /// DNS name pointing at this server), e.g. `sandboxes.example.com`.
    /// Default `localhost`: browsers on this machine resolve
    /// `{port}-{id}.localhost` to it without any DNS set-up.
    #[arg(long, env = "STOCKADE_PROXY_DOMAIN")]
    proxy_domain: Option<String>,
    /// Lifetime in seconds of sandbox auth tokens that ask for none (1 to 86400).
    #[arg(long, env = "STOCKADE_SANDBOX_TOKEN_TTL", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    sandbox_token_ttl: u64,
    /// Output kept per stream (stdout, stderr) of a buffered exec or a
    /// background process; beyond it the output is cut and flagged.
    #[arg(long, env = "STOCKADE_MAX_EXEC_OUTPUT_BYTES", default_value_t = 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1..=1024 * 1024 * 1024))]
    max_exec_output_bytes: u64,
    /// The longest `timeoutSeconds` an exec accepts.
    #[arg(long, env = "STOCKADE_MAX_EXEC_TIMEOUT", default_value_t = 86_400,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_exec_timeout: u64,
    /// Largest file write or archive upload, in bytes (larger is a 413).
    #[arg(long, env = "STOCKADE_MAX_FILE_BYTES", default_value_t = 100 * 1024 * 1024)]
    max_file_bytes: u64,
    /// The unpack ceiling, in MiB: the most an archive's files may
    /// unpack to, on every path that unpacks one (archive uploads to a
    /// sandbox, uploaded, tarball and git sources, snapshots, forks).
    /// Counted while the archive streams; more is a 413.
    #[arg(long, env = "STOCKADE_MAX_UNPACKED_MB", default_value_t = 4096,
          value_parser = clap::value_parser!(u64).range(1..=16 * 1024 * 1024))]
    max_unpacked_mb: u64,
    /// Most client connections open at once. At the cap, a new
    /// connection that sends a whole request head takes the place of the one
    /// that has waited longest without a request in progress (a half-sent or
    /// idle one), which is closed; one that sends only part of a head is
    /// closed; when all are busy, new ones wait. Default: from the
    /// open-files limit, leaving room for Docker, database and proxy sockets.
    #[arg(long, env = "STOCKADE_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_connections: Option<u64>,
    /// Seconds a client has to send a request's headers (from the connect,
    /// or from the first byte on a kept-alive connection).
    #[arg(long, env = "STOCKADE_HEADER_TIMEOUT", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_timeout: u64,
    /// Seconds a kept-alive connection may wait for its next request.
    /// Requests in progress — streams, WebSockets, terminals — are not cut
    /// for being quiet (see --body-min-rate and --write-stall-timeout for
    /// the clients that hold them without moving).
    #[arg(long, env = "STOCKADE_IDLE_TIMEOUT", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_timeout: u64,
    /// Most connections one client address (an IPv4 address, an IPv6 /64)
    /// may hold. Beyond it a new connection from that address closes the
    /// address's own longest-idle one, or is closed at once when all of them
    /// are busy; other addresses still get slots. Addresses in
    /// --trusted-proxies are exempt. Default: an eighth of --max-connections,
    /// at least 64.
    #[arg(long, env = "STOCKADE_MAX_CONNECTIONS_PER_IP",
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_connections_per_ip: Option<u64>,
    /// The slowest a request body may arrive, in bytes per second: a body
    /// that falls behind it by more than --body-timeout is cut off with 408
    /// and its connection closed.
    #[arg(long, env = "STOCKADE_BODY_MIN_RATE", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    body_min_rate: u64,
    /// Seconds a request body may fall behind --body-min-rate (a body that
    /// sends nothing at all is cut off after this long).
    #[arg(long, env = "STOCKADE_BODY_TIMEOUT", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    body_timeout: u64,
    /// Seconds a write may wait for the other side to take it: a client that
    /// stops reading its response, event stream or WebSocket is
    /// disconnected, and so is a terminal whose program stops reading its
    /// input. Streams that are read, however slowly, are never cut.
    #[arg(long, env = "STOCKADE_WRITE_STALL_TIMEOUT", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    write_stall_timeout: u64,
    /// Most terminals, event streams (log follows, exec streams, file
    /// watches) and proxied WebSockets one account may hold open at once;
    /// one more is refused with 429.
    #[arg(long, env = "STOCKADE_MAX_STREAMS_PER_ACCOUNT", default_value_t = 128,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_streams_per_account: u64,
    /// Rate limit per client IP and, separately, per credential, of the API
    /// (/api/v1, E2B's /e2b, the prime gateway) and of the traffic into
    /// sandboxes (the port proxy, E2B's in-sandbox calls), whose credential
    /// is the sandbox token: REQUESTS/WINDOW (e.g. 1000/60s, 20/1m, 5000/1h),
    /// or `off`. The per-IP size also bounds failed authentications: a client
    /// that fails that often is refused everything until its window ends.
    #[arg(long, env = "STOCKADE_RATE_LIMIT", default_value = "1000/60s")]
    rate_limit: String,
    /// The per-client-IP limit, when it should differ from --rate-limit (or `off`).
    #[arg(long, env = "STOCKADE_RATE_LIMIT_PER_IP")]
    rate_limit_per_ip: Option<String>,
    /// The per-token limit, when it should differ from --rate-limit (or `off`).
    #[arg(long, env = "STOCKADE_RATE_LIMIT_PER_TOKEN")]
    rate_limit_per_token: Option<String>,
    /// Reverse proxies whose X-Forwarded-For names the client: comma-separated
    /// addresses or CIDRs (e.g. 127.0.0.1,10.0.0.0/8). Default: none.
    #[arg(long, env = "STOCKADE_TRUSTED_PROXIES", value_delimiter = ',')]
    trusted_proxies: Vec<String>,
    /// Client addresses that many tenants' sandboxes call this server from,
    /// besides this host's own addresses (loopback aside), which count
    /// without being listed: e.g. the NAT address of registered Docker
    /// hosts. From them a client is the address with the credential it
    /// presents, so one tenant's failed authentications or busy window
    /// never hold back another's sandboxes. Comma-separated addresses or
    /// CIDRs. Default: none.
    #[arg(long, env = "STOCKADE_SANDBOX_CLIENT_ADDRESSES", value_delimiter = ',')]
    sandbox_client_addresses: Vec<String>,
    /// When set, GET /metrics needs `Authorization: Bearer <this token>`.
    #[arg(long, env = "STOCKADE_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// Seconds volume sizes (from `docker system df`) are cached.
    #[arg(long, env = "STOCKADE_VOLUME_SIZE_TTL_SECS", default_value_t = 30)]
    volume_size_ttl_secs: u64,
    /// Session timeout of sandboxes that set none, in minutes (fractions
    /// allowed; 0 = never). When it ends a persistent sandbox is stopped,
    /// another one terminated.
    #[arg(long, env = "STOCKADE_DEFAULT_TIMEOUT_MINUTES", default_value_t = 0.0)]
    default_timeout_minutes: f64,
    /// Warm pool: keep this many sandboxes created and running so
    /// that creates with fitting settings take one at once. `4` uses the
    /// default image and resources; `2,image=python:3.13-bookworm,cpu=2,
    /// memory=4,network=off` another class. Repeat for several classes
    /// (`;` between them in the environment variable). Off by default.
    #[arg(long = "warm-pool", env = "STOCKADE_WARM_POOL", value_delimiter = ';')]
    warm_pool: Vec<String>,
    /// Remove the warm pool's sandboxes when the server stops (otherwise the
    /// next start takes them over).
    #[arg(long, env = "STOCKADE_WARM_POOL_DRAIN")]
    warm_pool_drain: bool,
    /// Images tenants may name in `dockerImage`, as patterns (comma-separated,
    /// `*` for any characters; a pattern without a tag allows every tag),
    /// e.g. `node,python:3.*,ghcr.io/acme/*`. Default: any image except
    /// Stockade's own snapshot images, which only an owned `source` reaches.
    #[arg(long, env = "STOCKADE_ALLOWED_IMAGES", value_delimiter = ',')]
    allowed_images: Vec<String>,
    /// Seconds an operation's lease lasts without a renewal: if this server
    /// dies mid-operation, another instance (or this one after a restart)
    /// finishes or rolls it back within about this long (1 to 300).
    #[arg(long, env = "STOCKADE_OPERATION_LEASE", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..=300))]
    operation_lease: u64,
    /// Seconds the leader lease lasts: of several servers on one
    /// PostgreSQL database, the holder runs the background work (session
    /// timeouts, reconciliation, recovery, snapshot collection), renewing
    /// every third of this; if it dies another takes over within this long
    /// plus a third (2 to 300).
    #[arg(long, env = "STOCKADE_LEADER_LEASE_SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(2..=300))]
    leader_lease_seconds: u64,
    /// Days lifecycle events are kept (the feed, and webhook deliveries
    /// not yet made).
    #[arg(long, env = "STOCKADE_EVENT_RETENTION_DAYS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3650))]
    event_retention_days: u64,
    /// Days audit entries are kept.
    #[arg(long, env = "STOCKADE_AUDIT_RETENTION_DAYS", default_value_t = 90,
          value_parser = clap::value_parser!(u64).range(1..=3650))]
    audit_retention_days: u64,
    /// Seconds before a failed webhook delivery is tried again; each
    /// failure doubles the wait (at most an hour), for 25 hours.
    #[arg(long, env = "STOCKADE_WEBHOOK_RETRY_SECONDS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    webhook_retry_seconds: u64,
    /// Seconds a stopping server waits for requests in flight before it
    /// exits (event streams end at once with an `end` event).
    #[arg(long, env = "STOCKADE_SHUTDOWN_GRACE", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    shutdown_grace: u64,
    /// Size at which a sandbox's log file is rotated: bytes or a
    /// number with a unit (`10m`, `1g`), at least 1m.
    #[arg(long, env = "STOCKADE_LOG_MAX_SIZE", default_value = "10m")]
    log_max_size: String,
    /// Log files kept per sandbox, the current one included (1 to 100): a
    /// sandbox's logs take at most --log-max-size times this on the Docker host.
    #[arg(long, env = "STOCKADE_LOG_MAX_FILES", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    log_max_files: u32,
    /// Do not cap sandbox disks at diskSizeGB, even where the Docker host
    /// could.
    #[arg(long, env = "STOCKADE_NO_DISK_QUOTAS")]
    no_disk_quotas: bool,
    #[command(flatten)]
    isolation: IsolationArgs,
    #[command(flatten)]
    objects: ObjectStoreArgs,
    #[command(flatten)]
    admission: AdmissionArgs,
    #[command(flatten)]
    hosts: hosts::HostArgs,
}

/// Admission control per Docker host and the quota of new
/// accounts.
#[derive(Args)]
struct AdmissionArgs {
    /// How far the CPUs of running sandboxes (their cpuCores together) may
    /// exceed the Docker host's CPUs: a ratio (8 = eight times), or `off`.
    /// CPU is shared, not used up: an overcommitted host runs sandboxes
    /// slower, nothing fails.
    #[arg(long, env = "STOCKADE_CPU_OVERCOMMIT", default_value = "8")]
    cpu_overcommit: String,
    /// How far the memory of running sandboxes (their memoryGB together)
    /// may exceed the Docker host's memory: a ratio (1 = never), or `off`.
    /// Memory is used up: an overcommitted host kills processes.
    #[arg(long, env = "STOCKADE_MEMORY_OVERCOMMIT", default_value = "1")]
    memory_overcommit: String,
    /// Quota of every account created from now on: most sandboxes at once
    /// (stopped ones count). Unlimited when not given.
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_SANDBOXES", value_name = "N")]
    default_quota_sandboxes: Option<u64>,
    /// Quota of new accounts: most CPU cores of running sandboxes together.
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_CPU", value_name = "CORES")]
    default_quota_cpu: Option<f64>,
    /// Quota of new accounts: most memory of running sandboxes together, in GB.
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_MEMORY", value_name = "GB")]
    default_quota_memory: Option<f64>,
    /// Quota of new accounts: most disk (diskSizeGB) of all their sandboxes
    /// together, in GB.
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_DISK", value_name = "GB")]
    default_quota_disk: Option<u64>,
    /// Quota of new accounts: most snapshots kept at once (not deleted).
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_SNAPSHOTS", value_name = "N")]
    default_quota_snapshots: Option<u64>,
    /// Quota of new accounts: most GB their snapshots take in the object
    /// store together (workspace and image archives).
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_SNAPSHOT_GB", value_name = "GB")]
    default_quota_snapshot_gb: Option<f64>,
    /// Quota of new accounts: most uploads waiting to be used at once.
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_UPLOADS", value_name = "N")]
    default_quota_uploads: Option<u64>,
    /// Quota of new accounts: most GB those uploads take together.
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_UPLOAD_GB", value_name = "GB")]
    default_quota_upload_gb: Option<f64>,
    /// Quota of new accounts: most shared volumes kept at once (not
    /// deleted). Without it an account keeps at most 100.
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_VOLUMES", value_name = "N")]
    default_quota_volumes: Option<u64>,
    /// Quota of new accounts: most GB of shared volumes (their sizeGB)
    /// together; every volume of such an account must declare a size.
    #[arg(long, env = "STOCKADE_DEFAULT_QUOTA_VOLUME_GB", value_name = "GB")]
    default_quota_volume_gb: Option<u64>,
}

impl AdmissionArgs {
    fn config(&self) -> anyhow::Result<stockade_service::admission::AdmissionConfig> {
        use stockade_service::admission::{parse_overcommit, AdmissionConfig};
        let input = stockade_core::QuotaInput {
            sandboxes: self.default_quota_sandboxes,
            cpu_cores: self.default_quota_cpu,
            memory_gb: self.default_quota_memory,
            disk_gb: self.default_quota_disk,
            snapshots: self.default_quota_snapshots,
            snapshot_gb: self.default_quota_snapshot_gb,
            uploads: self.default_quota_uploads,
            upload_gb: self.default_quota_upload_gb,
            volumes: self.default_quota_volumes,
            volume_gb: self.default_quota_volume_gb,
        };
        let default_quota = stockade_core::Quota::from_input(&input).map_err(|errs| {
            let flag = |field: &str| match field {
                "sandboxes" => "--default-quota-sandboxes",
                "cpuCores" => "--default-quota-cpu",
                "memoryGB" => "--default-quota-memory",
                "snapshots" => "--default-quota-snapshots",
                "snapshotGB" => "--default-quota-snapshot-gb",
                "uploads" => "--default-quota-uploads",
                "uploadGB" => "--default-quota-upload-gb",
                "volumes" => "--default-quota-volumes",
                "volumeGB" => "--default-quota-volume-gb",
                _ => "--default-quota-disk",
            };
            let first = &errs.0[0];
            anyhow::anyhow!("{}: {}", flag(&first.field), first.message)
        })?;
        Ok(AdmissionConfig {
            cpu_overcommit: parse_overcommit(&self.cpu_overcommit, "--cpu-overcommit")
                .map_err(anyhow::Error::msg)?,
            memory_overcommit: parse_overcommit(&self.memory_overcommit, "--memory-overcommit")
                .map_err(anyhow::Error::msg)?,
            default_quota,
        })
    }
}

/// The banner's admission line: how full a host may get, and the quota of
/// new accounts.
fn describe_admission(
    a: &stockade_service::admission::AdmissionConfig,
    info: Option<&stockade_runtime::RuntimeInfo>,
) -> String {
    let ratio = |r: Option<f64>| r.map_or_else(|| "unchecked".to_owned(), |r| format!("× {r}"));
    let host = match info {
        Some(i) => format!(
            "CPUs {} {}, memory {} GB {}",
            i.cpus,
            ratio(a.cpu_overcommit),
            stockade_core::quota::show_gb(i.memory_bytes),
            ratio(a.memory_overcommit)
        ),
        None => format!(
            "CPUs {}, memory {}",
            ratio(a.cpu_overcommit),
            ratio(a.memory_overcommit)
        ),
    };
    let q = a.default_quota.to_input();
    let quota = if a.default_quota.is_unlimited() {
        "none".to_owned()
    } else {
        let show = |v: Option<String>| v.unwrap_or_else(|| "unlimited".into());
        format!(
            "{} sandboxes, {} CPUs, {} GB memory, {} GB disk, {} snapshots in {} GB, {} uploads in {} GB, {} volumes in {} GB",
            show(q.sandboxes.map(|n| n.to_string())),
            show(q.cpu_cores.map(|c| c.to_string())),
            show(q.memory_gb.map(|m| m.to_string())),
            show(q.disk_gb.map(|d| d.to_string())),
            show(q.snapshots.map(|n| n.to_string())),
            show(q.snapshot_gb.map(|g| g.to_string())),
            show(q.uploads.map(|n| n.to_string())),
            show(q.upload_gb.map(|g| g.to_string())),
            show(q.volumes.map(|n| n.to_string())),
            show(q.volume_gb.map(|g| g.to_string())),
        )
    };
    format!("{host}; quota of new accounts: {quota}")
}

/// `--log-max-size` in bytes: a size Docker would take, at least 1 MiB.
fn parse_log_max_size(value: &str) -> anyhow::Result<u64> {
    match stockade_runtime::parse_size(value) {
        Some(bytes) if bytes >= stockade_runtime::MIN_LOG_MAX_BYTES => Ok(bytes),
        Some(_) => anyhow::bail!("--log-max-size: '{value}' is below the minimum of 1m"),
        None => anyhow::bail!(
            "--log-max-size: '{value}' is not a size (bytes, or a number with k, m or g, e.g. 10m)"
        ),
    }
}

/// Network isolation of sandboxes: Stockade's Docker networks and
/// packet filter. The defaults suit one Stockade per Docker host.
#[derive(Args)]
struct IsolationArgs {
    /// Docker network of sandboxes with network access (made by Stockade:
    /// a bridge with inter-container traffic off).
    #[arg(
        long,
        env = "STOCKADE_SANDBOX_NETWORK",
        default_value = "stockade-sandboxes"
    )]
    sandbox_network: String,
    /// Host interface name of --sandbox-network's bridge (at most 15 characters).
    #[arg(long, env = "STOCKADE_SANDBOX_BRIDGE", default_value = "stk0")]
    sandbox_bridge: String,
    /// Docker network (internal: no way out) of sandboxes without network access.
    #[arg(
        long,
        env = "STOCKADE_OFFLINE_NETWORK",
        default_value = "stockade-offline"
    )]
    offline_network: String,
    /// Host interface name of --offline-network's bridge (at most 15 characters).
    #[arg(long, env = "STOCKADE_OFFLINE_BRIDGE", default_value = "stk1")]
    offline_bridge: String,
    /// iptables chain that drops what sandboxes send to the host.
    #[arg(
        long,
        env = "STOCKADE_ISOLATION_CHAIN",
        default_value = "STOCKADE-ISOLATION"
    )]
    isolation_chain: String,
    /// Do not apply the packet filter (sandboxes can then reach services
    /// of the Docker host; the isolation report says so).
    #[arg(long, env = "STOCKADE_NO_PACKET_FILTER")]
    no_packet_filter: bool,
    /// When Stockade's sandbox networks cannot be made on a Docker host,
    /// create sandboxes on Docker's default networks anyway, where they
    /// reach each other. Without it such creates are refused (503).
    #[arg(long, env = "STOCKADE_ALLOW_UNISOLATED_SANDBOXES")]
    allow_unisolated_sandboxes: bool,
    /// Port of the egress proxy on the sandbox network's gateway, where
    /// TCP 80/443 of sandboxes with allow/deny lists is redirected
    ///; 0: a free port.
    #[arg(long, env = "STOCKADE_EGRESS_PROXY_PORT", default_value_t = 0)]
    egress_proxy_port: u16,
    /// Port of the egress DNS forwarder on the gateway (UDP and TCP); 0: a
    /// free port.
    #[arg(long, env = "STOCKADE_EGRESS_DNS_PORT", default_value_t = 0)]
    egress_dns_port: u16,
    /// DNS servers the egress filter asks (IP or IP:PORT, comma-separated);
    /// default: those of the host's /etc/resolv.conf.
    #[arg(long, env = "STOCKADE_EGRESS_DNS", value_delimiter = ',')]
    egress_dns: Vec<String>,
    /// Subnets of Docker networks that sandboxes may still reach through
    /// an allowed name (CIDRs, comma-separated); by default the egress
    /// proxy dials no Docker network (they hold the host's other containers).
    #[arg(long, env = "STOCKADE_EGRESS_REACHABLE", value_delimiter = ',')]
    egress_reachable: Vec<String>,
    /// Blocks of the private and link-local ranges that sandboxes may reach
    /// (CIDRs, comma-separated, each inside 10.0.0.0/8, 172.16.0.0/12,
    /// 192.168.0.0/16, 100.64.0.0/10, 169.254.0.0/16, fc00::/7 or
    /// fe80::/10). By default no sandbox reaches those ranges, whatever its
    /// policy: the local network (the database, the object store, other
    /// Docker hosts) and the cloud metadata service stay out of reach.
    /// Opted-in blocks are reached under allow-all, and allow lists may
    /// name them.
    #[arg(long, env = "STOCKADE_EGRESS_ALLOW_PRIVATE", value_delimiter = ',')]
    egress_allow_private: Vec<String>,
}

impl IsolationArgs {
    /// The egress filter's settings; a bad value is an error naming its flag.
    fn egress(&self) -> anyhow::Result<stockade_service::egress::EgressSettings> {
        let upstream_dns = self
            .egress_dns
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                let s = s.trim();
                s.parse::<std::net::SocketAddr>()
                    .or_else(|_| {
                        s.parse::<std::net::IpAddr>()
                            .map(|ip| std::net::SocketAddr::new(ip, 53))
                    })
                    .map_err(|_| anyhow::anyhow!("--egress-dns: '{s}' is not an IP or IP:PORT"))
            })
            .collect::<anyhow::Result<_>>()?;
        let reachable_subnets = self
            .egress_reachable
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                stockade_core::netpolicy::Cidr::parse(s.trim())
                    .map_err(|e| anyhow::anyhow!("--egress-reachable: '{s}': {e}"))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(stockade_service::egress::EgressSettings {
            proxy_port: self.egress_proxy_port,
            dns_port: self.egress_dns_port,
            upstream_dns,
            reachable_subnets,
            private: self.private_access()?,
        })
    }

    /// `--egress-allow-private`, checked; a bad block is an error naming
    /// the flag.
    fn private_access(&self) -> anyhow::Result<stockade_core::netpolicy::PrivateAccess> {
        stockade_core::netpolicy::PrivateAccess::parse(&self.egress_allow_private)
            .map_err(|e| anyhow::anyhow!("--egress-allow-private: {e}"))
    }

    /// The runtime's isolation settings; a bad name is an error naming its flag.
    fn config(&self) -> anyhow::Result<IsolationConfig> {
        let config = IsolationConfig {
            network: self.sandbox_network.clone(),
            bridge: self.sandbox_bridge.clone(),
            internal_network: self.offline_network.clone(),
            internal_bridge: self.offline_bridge.clone(),
            chain: self.isolation_chain.clone(),
            packet_filter: !self.no_packet_filter,
            private: self.private_access()?,
            allow_unisolated: self.allow_unisolated_sandboxes,
        };
        config.validate().map_err(|e| {
            let (field, reason) = e.0.split_once(": ").unwrap_or(("", e.0.as_str()));
            let flag = match field {
                "network" => "--sandbox-network",
                "bridge" => "--sandbox-bridge",
                "internal_network" => "--offline-network",
                "internal_bridge" => "--offline-bridge",
                "chain" => "--isolation-chain",
                _ => "network isolation",
            };
            anyhow::anyhow!("{flag}: {reason}")
        })?;
        Ok(config)
    }
}

/// `off` or a limit such as `1000/60s`.
fn parse_limit(value: &str, flag: &str) -> anyhow::Result<Option<Limit>> {
    if value.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    Limit::parse(value)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

/// The reverse proxies of `--trusted-proxies`.
fn trusted_proxies(args: &ServerArgs) -> anyhow::Result<Vec<IpNet>> {
    args.trusted_proxies
        .iter()
        .filter(|p| !p.trim().is_empty())
        .map(|p| IpNet::parse(p).map_err(|e| anyhow::anyhow!("--trusted-proxies: {e}")))
        .collect()
}

/// The rate limits the flags ask for; `None` when both buckets are off.
fn rate_limit_config(args: &ServerArgs) -> anyhow::Result<Option<RateLimitConfig>> {
    let base = parse_limit(&args.rate_limit, "--rate-limit")?;
    let per_ip = match &args.rate_limit_per_ip {
        Some(v) => parse_limit(v, "--rate-limit-per-ip")?,
        None => base,
    };
    let per_token = match &args.rate_limit_per_token {
        Some(v) => parse_limit(v, "--rate-limit-per-token")?,
        None => base,
    };
    let trusted_proxies = trusted_proxies(args)?;
    let sandbox_clients = args
        .sandbox_client_addresses
        .iter()
        .filter(|a| !a.trim().is_empty())
        .map(|a| IpNet::parse(a).map_err(|e| anyhow::anyhow!("--sandbox-client-addresses: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if per_ip.is_none() && per_token.is_none() {
        return Ok(None);
    }
    Ok(Some(RateLimitConfig {
        per_ip,
        per_token,
        trusted_proxies,
        sandbox_clients,
        ..RateLimitConfig::default()
    }))
}

/// The warm pool of `--warm-pool` and `--warm-pool-drain`, checked (its
/// classes resolved against the default image and resources).
fn warm_pool_config(
    args: &ServerArgs,
) -> anyhow::Result<(
    stockade_service::pool::PoolConfig,
    stockade_service::pool::Pool,
)> {
    use stockade_service::pool::{Pool, PoolClassConfig, PoolConfig};
    let mut config = PoolConfig {
        drain_on_shutdown: args.warm_pool_drain,
        ..PoolConfig::default()
    };
    for spec in args.warm_pool.iter().filter(|s| !s.trim().is_empty()) {
        config
            .classes
            .push(PoolClassConfig::parse(spec).map_err(|e| anyhow::anyhow!("--warm-pool: {e}"))?);
    }
    let defaults = stockade_core::Defaults {
        image: args.default_image.clone(),
        ..stockade_core::Defaults::default()
    };
    let pool = Pool::new(&config, &defaults).map_err(|e| anyhow::anyhow!("--warm-pool: {e}"))?;
    Ok((config, pool))
}

fn describe_limits(config: &Option<RateLimitConfig>) -> String {
    let show = |l: Option<Limit>| l.map_or_else(|| "off".to_owned(), |l| l.to_string());
    match config {
        None => "off".into(),
        Some(c) if c.sandbox_clients.is_empty() => format!(
            "{} per client IP, {} per token",
            show(c.per_ip),
            show(c.per_token)
        ),
        Some(c) => format!(
            "{} per client IP, {} per token; sandboxes call from {}",
            show(c.per_ip),
            show(c.per_token),
            c.sandbox_clients
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// Where snapshots, workspace syncs and uploads are kept: a local
/// directory unless an S3 bucket is configured.
#[derive(Args)]
struct ObjectStoreArgs {
    /// Directory of the local object store (default: <data dir>/blobs).
    #[arg(long, env = "STOCKADE_BLOB_DIR")]
    blob_dir: Option<PathBuf>,
    /// GB the local object store leaves free on its file system: it stops
    /// storing snapshots and uploads (507) before the database beside it
    /// (by default on the same disk) runs out of room to write.
    #[arg(long, env = "STOCKADE_BLOB_KEEP_FREE_GB", default_value_t = 1.0)]
    blob_keep_free_gb: f64,
    /// S3 bucket: setting it uses an S3-compatible object store instead of
    /// the local directory.
    #[arg(long, env = "STOCKADE_S3_BUCKET")]
    s3_bucket: Option<String>,
    /// S3 endpoint, e.g. http://127.0.0.1:9000 for MinIO (default: AWS).
    /// Path-style requests; http:// is allowed.
    #[arg(long, env = "STOCKADE_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    #[arg(long, env = "STOCKADE_S3_REGION", default_value = "us-east-1")]
    s3_region: String,
    #[arg(long, env = "STOCKADE_S3_ACCESS_KEY_ID")]
    s3_access_key_id: Option<String>,
    #[arg(long, env = "STOCKADE_S3_SECRET_ACCESS_KEY", hide_env_values = true)]
    s3_secret_access_key: Option<String>,
    /// Internal addresses (CIDRs, comma-separated) that git and tarball
    /// sources and image registries may reach. By default Stockade never
    /// connects to loopback, private, link-local (cloud metadata) or other
    /// internal addresses on a tenant's behalf.
    #[arg(long, env = "STOCKADE_ALLOW_INTERNAL_ADDRESSES", value_delimiter = ',')]
    allow_internal_addresses: Vec<String>,
    /// Largest archive or repository a create source may bring, in MB.
    #[arg(long, env = "STOCKADE_SOURCE_MAX_MB", default_value_t = 1024)]
    source_max_mb: u64,
}

impl ObjectStoreArgs {
    fn blob_config(&self, data_dir: &std::path::Path) -> stockade_blob::BlobConfig {
        match self.s3_bucket.as_deref().filter(|b| !b.trim().is_empty()) {
            Some(bucket) => stockade_blob::BlobConfig::S3(stockade_blob::S3Config {
                endpoint: self.s3_endpoint.clone().filter(|e| !e.is_empty()),
                bucket: bucket.to_owned(),
                region: self.s3_region.clone(),
                access_key_id: self.s3_access_key_id.clone(),
                secret_access_key: self.s3_secret_access_key.clone(),
            }),
            None => stockade_blob::BlobConfig::Local {
                dir: self
                    .blob_dir
                    .clone()
                    .unwrap_or_else(|| data_dir.join("blobs")),
            },
        }
    }
}

/// The data directory holds the database (tokens' hashes, the
/// proxy's signing key) and the object store: `0700`, its files `0600`. A
/// new directory is made so; a looser existing one is tightened, with a
/// warning (somebody may have relied on reading it).
fn secure_data_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("could not create the data directory {}", dir.display()))?;
        return Ok(());
    }
    let tighten = |path: &std::path::Path, want: u32| -> anyhow::Result<()> {
        let mode = std::fs::symlink_metadata(path)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                was = format!("{mode:o}"),
                now = format!("{want:o}"),
                "the data directory was readable by other users; tightened its permissions"
            );
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(want)).with_context(
                || format!("could not restrict the permissions of {}", path.display()),
            )?;
        }
        Ok(())
    };
    tighten(dir, 0o700)?;
    for entry in std::fs::read_dir(dir)
        .with_context(|| format!("could not read the data directory {}", dir.display()))?
    {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            tighten(&entry.path(), 0o700)?;
        } else if kind.is_file() {
            tighten(&entry.path(), 0o600)?;
        }
    }
    Ok(())
}

/// Creates `file` empty with mode `0600` when it does not exist yet, so
/// that SQLite (which gives its journal files the database's mode) never
/// makes it readable by others.
fn private_file(file: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("could not create {}", file.display())),
    }
}

fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("stockade");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(h) => PathBuf::from(h).join(".local/share/stockade"),
        None => PathBuf::from("stockade-data"),
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("STOCKADE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,tower_http=warn,sqlx=warn"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in log files.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Prints a line of the start banner. A closed stdout (the banner piped
/// into `head`, a supervisor that stopped reading) never stops the server.
macro_rules! say {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// The connection limits of the flags, and the banner line that says them
/// with the open-files limit.
fn connection_limits(
    args: &ServerArgs,
    files: &stockade_server::serve::RaisedLimit,
) -> anyhow::Result<(stockade_server::serve::ConnectionLimits, String)> {
    let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let limits = stockade_server::serve::ConnectionLimits {
        max_connections: args.max_connections.map(count),
        max_connections_per_ip: args.max_connections_per_ip.map(count),
        trusted_proxies: trusted_proxies(args)?,
        header_timeout: std::time::Duration::from_secs(args.header_timeout),
        idle_timeout: std::time::Duration::from_secs(args.idle_timeout),
        body_min_rate: args.body_min_rate,
        body_timeout: std::time::Duration::from_secs(args.body_timeout),
        write_stall_timeout: std::time::Duration::from_secs(args.write_stall_timeout),
        max_streams_per_account: count(args.max_streams_per_account),
    };
    let show = |n: u64| {
        if n == u64::MAX {
            "unlimited".to_owned()
        } else {
            n.to_string()
        }
    };
    let raised = if files.now.soft > files.before {
        format!(", raised from {}", show(files.before))
    } else {
        String::new()
    };
    let line = format!(
        "at most {} connections at once (open files: {}{raised}), {} per client address, {} streams per account; request headers within {} s, idle keep-alive {} s, bodies at least {} bytes/s after {} s, writes taken within {} s",
        limits.effective_max_connections(),
        show(files.now.soft),
        limits.effective_max_connections_per_ip(),
        limits.max_streams_per_account,
        args.header_timeout,
        args.idle_timeout,
        args.body_min_rate,
        args.body_timeout,
        args.write_stall_timeout,
    );
    Ok((limits, line))
}

pub async fn run(args: ServerArgs) -> anyhow::Result<ExitCode> {
    init_tracing();
    // As many descriptors as the system allows, before anything opens.
    let files = stockade_server::serve::raise_open_files_limit().unwrap_or_else(|e| {
        let now = stockade_server::serve::open_files_limit();
        tracing::warn!(error = %e, soft = now.soft, "could not raise the open-files limit");
        stockade_server::serve::RaisedLimit {
            before: now.soft,
            now,
        }
    });
    let (connections, connections_line) = connection_limits(&args, &files)?;
    // Bad settings fail before anything is created.
    let rate_limit = rate_limit_config(&args)?;
    let admission = args.admission.config()?;
    let (pool, warm_pool) = warm_pool_config(&args)?;
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    secure_data_dir(&data_dir)?;
    let database = match args.database.clone() {
        Some(url) => url,
        None => {
            let file = data_dir.join("stockade.db");
            private_file(&file)?;
            format!("sqlite://{}", file.display())
        }
    };
    // SQLite serves one server: a second one on the same file stops here,
    // before it touches the database. Held until this process ends.
    let _database_lock = stockade_store::DatabaseLock::for_url(&database).map_err(|e| match e {
        stockade_store::StoreError::Conflict(why) => anyhow::anyhow!(why),
        e => anyhow::anyhow!(e),
    })?;
    let store = stockade_store::connect(&database)
        .await
        .with_context(|| format!("could not open the database {}", redact_url(&database)))?;

    let docker_host = args
        .docker_host
        .clone()
        .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let docker_config = DockerConfig {
        host: Some(docker_host.clone()),
        server_name: args.server_name.clone(),
        pids_limit: args.pids_limit,
        oci_runtime: args.oci_runtime.clone(),
        isolation: args.isolation.config()?,
        disk_quotas: !args.no_disk_quotas,
        log_max_bytes: parse_log_max_size(&args.log_max_size)?,
        log_max_files: args.log_max_files,
        ..DockerConfig::default()
    };
    // Registered hosts get the same settings, their own address.
    let host_factory = Arc::new(hosts::DockerHostFactory::new(docker_config.clone()));
    let hosts_config = args.hosts.config(host_factory, &docker_host)?;
    let runtime =
        DockerRuntime::new(docker_config).context("could not set up the Docker client")?;
    let runtime: Arc<dyn Runtime> = Arc::new(runtime);

    let mut config = ServerConfig {
        listen: args.listen,
        docker_host: docker_host.clone(),
        rate_limit,
        metrics_token: args.metrics_token.clone().filter(|t| !t.is_empty()),
        connections,
        ..ServerConfig::default()
    };
    config.service.max_file_bytes = args.max_file_bytes;
    config.service.max_unpacked_bytes = args.max_unpacked_mb << 20;
    config.service.operation_lease = std::time::Duration::from_secs(args.operation_lease);
    config.shutdown_grace = std::time::Duration::from_secs(args.shutdown_grace);
    config.service.usage.volume_size_ttl =
        std::time::Duration::from_secs(args.volume_size_ttl_secs);
    let limits = describe_limits(&config.rate_limit);
    let presets: Vec<(String, String)> = config
        .service
        .defaults
        .runtimes
        .iter()
        .map(|(name, image)| (name.clone(), image.clone()))
        .collect();
    stockade_core::spec::parse_image(&args.default_image, "--default-image")
        .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.message))?;
    config.service.defaults.image = args.default_image.clone();
    config.proxy_domain = match args
        .proxy_domain
        .as_deref()
        .filter(|d| !d.trim().is_empty())
    {
        Some(d) => Some(
            stockade_server::proxy::parse_proxy_domain(d)
                .map_err(|e| anyhow::anyhow!("--proxy-domain: {e}"))?,
        ),
        // Browsers resolve `*.localhost` to loopback without any DNS set-up,
        // so each port gets an origin of its own by default.
        None => Some("localhost".to_owned()),
    };
    config.sandbox_token_ttl = std::time::Duration::from_secs(args.sandbox_token_ttl);
    config.service.max_exec_output_bytes = usize::try_from(args.max_exec_output_bytes)
        .context("--max-exec-output-bytes is too large for this machine")?;
    config.service.max_exec_timeout = std::time::Duration::from_secs(args.max_exec_timeout);
    config.service.default_exec_timeout = config
        .service
        .default_exec_timeout
        .min(config.service.max_exec_timeout);
    config.service.defaults.timeout_minutes = stockade_core::spec::parse_timeout_minutes(
        args.default_timeout_minutes,
        "--default-timeout-minutes",
    )
    .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.message))?;
    config.service.pool = pool;
    const DAY: u64 = 24 * 3600;
    config.service.events.retention =
        std::time::Duration::from_secs(args.event_retention_days * DAY);
    config.service.events.audit_retention =
        std::time::Duration::from_secs(args.audit_retention_days * DAY);
    config.service.events.retry_base = std::time::Duration::from_secs(args.webhook_retry_seconds);
    config.service.blob_store = args.objects.blob_config(&data_dir);
    if !(args.objects.blob_keep_free_gb.is_finite() && args.objects.blob_keep_free_gb >= 0.0) {
        anyhow::bail!("--blob-keep-free-gb: must be a number of GB, 0 or more");
    }
    config.service.blob_keep_free_bytes =
        (args.objects.blob_keep_free_gb * f64::from(1u32 << 30)) as u64;
    config.service.images = stockade_service::images::ImagePolicy::parse(&args.allowed_images)
        .map_err(|e| anyhow::anyhow!("--allowed-images: {e}"))?;
    config.service.sources.addresses = stockade_core::net::AddressPolicy {
        allow: args
            .objects
            .allow_internal_addresses
            .iter()
            .filter(|c| !c.trim().is_empty())
            .map(|c| {
                stockade_core::net::IpNet::parse(c)
                    .map_err(|e| anyhow::anyhow!("--allow-internal-addresses: {e}"))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    config.service.sources.max_archive_bytes = args.objects.source_max_mb.saturating_mul(1 << 20);
    config.service.egress = args.isolation.egress()?;
    config.service.admission = admission;
    config.service.hosts = hosts_config;

    let boot = stockade_server::bootstrap(store.as_ref(), args.admin_token.as_deref())
        .await
        .context("could not create the admin account")?;
    let objects = object_store_line(
        &config.service.blob_store,
        config.service.blob_keep_free_bytes,
    );
    let state = AppState::new(store, runtime.clone(), config)
        .await
        .context(
            "could not read the server settings (instance id, proxy token key) or the object store",
        )?;
    let svc = state.svc.clone();
    svc.leader()
        .set_lease(std::time::Duration::from_secs(args.leader_lease_seconds))
        .map_err(|e| anyhow::anyhow!("--leader-lease-seconds: {e}"))?;
    let server = stockade_server::spawn(state)
        .await
        .with_context(|| format!("could not listen on {}", args.listen))?;

    let base = format!("http://{}", server.addr);
    say!("Stockade {} listening on {base}", env!("CARGO_PKG_VERSION"));
    say!("  dashboard: {base}/");
    say!("  API docs:  {base}/api/v1/docs");
    say!("  database:  {}", redact_url(&database));
    say!(
        "  instance:  {}",
        leader_line(&svc.leader().status(), args.leader_lease_seconds)
    );
    say!("  limits:    {limits}");
    say!("  clients:   {connections_line}");
    say!(
        "  unpacking: archives unpack to at most {} (--max-unpacked-mb)",
        stockade_service::files::describe_limit(args.max_unpacked_mb << 20)
    );
    say!("  objects:   {objects}");
    for class in warm_pool.classes() {
        say!("  warm pool: {} × {}", class.size, class.key);
    }
    let info = runtime.info().await;
    say!(
        "  admission: {}",
        describe_admission(&svc.config().admission, info.as_ref().ok())
    );
    let mut pull_default = false;
    match info {
        Ok(i) => {
            say!(
                "  docker:    {docker_host} (Docker {}, API {})",
                i.version,
                i.api_version
            );
            let disk = runtime.disk_enforcement().await;
            match disk.warning() {
                Some(w) => say!("  disk:      WARNING: {w}"),
                None => say!(
                    "  disk:      diskSizeGB enforced (/workspace: {}; root filesystem: {})",
                    disk.workspace.method().map_or("-", |m| m.describe()),
                    disk.root_fs.method().map_or("-", |m| m.describe()),
                ),
            }
            match images_health(runtime.as_ref(), &args.default_image, &presets).await {
                Ok(images) => {
                    for line in image_banner(&images) {
                        say!("{line}");
                    }
                    pull_default = !images.default.present;
                }
                Err(e) => say!("  image:     {} (could not check: {e})", args.default_image),
            }
        }
        Err(e) => say!("  docker:    {docker_host} is NOT reachable: {e}"),
    }
    match svc.egress().status() {
        EgressStatus::Running { proxy, dns } => {
            say!("  egress:    allow/deny lists enforced (proxy {proxy}, DNS {dns})")
        }
        EgressStatus::Unavailable(why) => say!(
            "  egress:    WARNING: allow/deny lists cannot be enforced ({why}); allow-all and deny-all work"
        ),
        EgressStatus::Starting => {}
    }
    say!(
        "  private:   private and link-local ranges out of reach of sandboxes (opted in: {})",
        svc.config().egress.private
    );
    match boot {
        Bootstrap::CreatedAdmin {
            token,
            generated: true,
        } => {
            say!();
            say!("Admin API token (shown once, it is stored hashed — keep it now):");
            say!("  {token}");
            say!("Use it as: export STOCKADE_TOKEN={token}");
        }
        Bootstrap::CreatedAdmin {
            generated: false, ..
        } => {
            say!("Admin account created with the token from STOCKADE_ADMIN_TOKEN.");
        }
        Bootstrap::RegisteredAdminToken => {
            say!("STOCKADE_ADMIN_TOKEN registered for the admin account.");
        }
        Bootstrap::Nothing => {}
    }
    if pull_default {
        // In the background, bounded by the runtime's pull timeout: an image
        // that cannot be pulled never holds up the start.
        let runtime = runtime.clone();
        let image = args.default_image.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let pulled = runtime.ensure_image(&image).await;
            say!(
                "{}",
                pull_outcome(&image, pulled.map(|()| started.elapsed()))
            );
        });
    }

    let shutdown = server.shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        shutdown.cancel();
    });
    server.task.await.context("server task failed")??;
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// The banner's line on this instance and the leader lease.
fn leader_line(status: &stockade_service::leader::LeaderStatus, lease_seconds: u64) -> String {
    let role = if status.is_leader {
        "leads the background work".to_owned()
    } else {
        match &status.holder {
            Some(h) => format!("serves requests; {h} leads the background work"),
            None => "serves requests; waiting for the leader lease".to_owned(),
        }
    };
    format!(
        "{} {role} (leader lease {lease_seconds} s, renewed every {} s)",
        status.instance,
        fmt_seconds(lease_seconds as f64 / 3.0)
    )
}

fn fmt_seconds(s: f64) -> String {
    let text = format!("{s:.1}");
    text.strip_suffix(".0").unwrap_or(&text).to_owned()
}

/// The banner's lines on the default image and the runtime presets'
/// images: present, or absent with what happens and how to choose another.
fn image_banner(images: &stockade_api::ImagesHealth) -> Vec<String> {
    let image = &images.default.image;
    let mut lines = if images.default.present {
        vec![format!(
            "  image:     {image} (the default image) is present"
        )]
    } else {
        vec![
            format!("  image:     WARNING: the default image {image} is absent; pulling it in the background…"),
            "             until it is here, a create without an image or runtime pulls it first (and fails if it cannot)".to_owned(),
            format!("             choose a local image with --default-image IMAGE or STOCKADE_DEFAULT_IMAGE, or run `docker pull {image}`"),
        ]
    };
    if !images.presets.is_empty() {
        let presets = images
            .presets
            .iter()
            .map(|p| {
                let presence = match (&p.hint, p.present) {
                    (_, true) => "present".to_owned(),
                    (Some(hint), false) => format!("absent: {hint}"),
                    (None, false) => "absent".to_owned(),
                };
                format!("{} = {} ({presence})", p.name, p.image)
            })
            .collect::<Vec<_>>()
            .join(", ");
        lines.push(format!(
            "  runtimes:  {presets}; an absent one is pulled by the first create that names it, unless it says how to build it"
        ));
    }
    lines
}

/// The line printed when the background pull of the default image ends.
fn pull_outcome(
    image: &str,
    pulled: Result<std::time::Duration, stockade_runtime::RuntimeError>,
) -> String {
    match pulled {
        Ok(took) => format!(
            "Default image {image} pulled in {} s: creates without an image start at once now.",
            took.as_secs()
        ),
        Err(stockade_runtime::RuntimeError::ImageUnavailable { reason, .. }) => {
            pull_failed(image, &reason)
        }
        Err(e) => pull_failed(image, &e.to_string()),
    }
}

/// The warning when the default image could not be pulled, with the ways out.
fn pull_failed(image: &str, why: &str) -> String {
    format!(
        "WARNING: the default image {image} could not be pulled ({why}). Creates without an image or runtime will fail until it is there: choose a local image with --default-image IMAGE or STOCKADE_DEFAULT_IMAGE (`docker images` lists them), or run `docker pull {image}` when its registry is reachable."
    )
}

/// Where the object store is, for the start banner (no secrets).
fn object_store_line(config: &stockade_blob::BlobConfig, keep_free: u64) -> String {
    match config {
        stockade_blob::BlobConfig::Local { dir } => format!(
            "local directory {} (leaves {:.1} GB free on its disk)",
            dir.display(),
            keep_free as f64 / f64::from(1u32 << 30)
        ),
        stockade_blob::BlobConfig::S3(s3) => format!(
            "s3://{} at {} ({})",
            s3.bucket,
            s3.endpoint.as_deref().unwrap_or("AWS"),
            s3.region
        ),
    }
}

/// Hides a password in a database URL.
fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((creds, host)) = rest.split_once('@') {
            if let Some((user, _)) = creds.split_once(':') {
                return format!("{scheme}://{user}:***@{host}");
            }
        }
    }
    url.to_owned()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::ServerArgs,
    }

    /// `flags` parsed as the arguments of `stockade` into a test's parser.
    pub(crate) fn parse_flags<C: Parser>(flags: &[&str]) -> Result<C, clap::Error> {
        C::try_parse_from(std::iter::once("stockade").chain(flags.iter().copied()))
    }

    fn limits(flags: &[&str]) -> anyhow::Result<String> {
        let cli: Cli = parse_flags(flags)?;
        Ok(super::describe_limits(&super::rate_limit_config(
            &cli.args,
        )?))
    }

    #[test]
    fn egress_allow_private_flag() {
        if std::env::var_os("STOCKADE_EGRESS_ALLOW_PRIVATE").is_some() {
            eprintln!("egress_allow_private_flag skipped: STOCKADE_EGRESS_ALLOW_PRIVATE is set");
            return;
        }
        let parse = |flags: &[&str]| -> anyhow::Result<_> {
            let cli: Cli = parse_flags(flags)?;
            let isolation = &cli.args.isolation;
            Ok((isolation.egress()?.private, isolation.config()?.private))
        };
        let (filter, packets) = parse(&[]).unwrap();
        assert!(filter.allowed().is_empty() && packets.allowed().is_empty());
        let (filter, packets) =
            parse(&["--egress-allow-private", "10.20.0.0/16,169.254.169.254"]).unwrap();
        assert_eq!(filter.to_string(), "10.20.0.0/16,169.254.169.254");
        assert_eq!(filter, packets);
        for bad in ["8.8.8.0/24", "10.0.0.0/33", "everything"] {
            let err = parse(&["--egress-allow-private", bad])
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("--egress-allow-private: ") && err.contains(bad),
                "{err}"
            );
        }
    }

    #[test]
    fn rate_limit_flags() {
        // The flags' environment variables would change the answers.
        for var in [
            "STOCKADE_RATE_LIMIT",
            "STOCKADE_RATE_LIMIT_PER_IP",
            "STOCKADE_RATE_LIMIT_PER_TOKEN",
            "STOCKADE_TRUSTED_PROXIES",
            "STOCKADE_SANDBOX_CLIENT_ADDRESSES",
        ] {
            if std::env::var_os(var).is_some() {
                eprintln!("rate_limit_flags skipped: {var} is set");
                return;
            }
        }
        assert_eq!(
            limits(&[]).unwrap(),
            "1000/60s per client IP, 1000/60s per token"
        );
        assert_eq!(
            limits(&["--rate-limit", "20/1m", "--rate-limit-per-token", "off"]).unwrap(),
            "20/60s per client IP, off per token"
        );
        assert_eq!(limits(&["--rate-limit", "OFF"]).unwrap(), "off");
        assert_eq!(
            limits(&["--rate-limit", "off", "--rate-limit-per-ip", "5/1s"]).unwrap(),
            "5/1s per client IP, off per token"
        );
        let err = limits(&["--rate-limit", "lots"]).unwrap_err().to_string();
        assert!(
            err.contains("--rate-limit") && err.contains("1000/60s"),
            "{err}"
        );
        let err = limits(&["--trusted-proxies", "10.0.0.0/8,nope"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--trusted-proxies") && err.contains("nope"),
            "{err}"
        );
        assert!(limits(&["--trusted-proxies", "10.0.0.0/8,::1"]).is_ok());
        assert_eq!(
            limits(&["--sandbox-client-addresses", "203.0.113.7,10.1.0.0/16"]).unwrap(),
            "1000/60s per client IP, 1000/60s per token; sandboxes call from \
             203.0.113.7/32,10.1.0.0/16"
        );
        let err = limits(&["--sandbox-client-addresses", "nat-box"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--sandbox-client-addresses") && err.contains("nat-box"),
            "{err}"
        );
    }

    fn connections(flags: &[&str]) -> anyhow::Result<stockade_server::serve::ConnectionLimits> {
        let cli: Cli = parse_flags(flags)?;
        let files = stockade_server::serve::RaisedLimit {
            before: 20_000,
            now: stockade_server::serve::OpenFilesLimit {
                soft: 20_000,
                hard: 20_000,
            },
        };
        Ok(super::connection_limits(&cli.args, &files)?.0)
    }

    #[test]
    fn connection_flags_parse_and_name_the_flag_on_bad_input() {
        for var in [
            "STOCKADE_MAX_CONNECTIONS",
            "STOCKADE_MAX_CONNECTIONS_PER_IP",
            "STOCKADE_BODY_MIN_RATE",
            "STOCKADE_BODY_TIMEOUT",
            "STOCKADE_WRITE_STALL_TIMEOUT",
            "STOCKADE_MAX_STREAMS_PER_ACCOUNT",
            "STOCKADE_TRUSTED_PROXIES",
        ] {
            if std::env::var_os(var).is_some() {
                eprintln!(
                    "connection_flags_parse_and_name_the_flag_on_bad_input skipped: {var} is set"
                );
                return;
            }
        }
        let defaults = connections(&[]).unwrap();
        assert_eq!(
            defaults,
            stockade_server::serve::ConnectionLimits::default()
        );
        let set = connections(&[
            "--max-connections",
            "256",
            "--max-connections-per-ip",
            "16",
            "--body-min-rate",
            "2000",
            "--body-timeout",
            "5",
            "--write-stall-timeout",
            "30",
            "--max-streams-per-account",
            "8",
            "--trusted-proxies",
            "10.0.0.0/8",
        ])
        .unwrap();
        assert_eq!(set.effective_max_connections_per_ip(), 16);
        assert_eq!(set.body_min_rate, 2000);
        assert_eq!(set.body_timeout, std::time::Duration::from_secs(5));
        assert_eq!(set.write_stall_timeout, std::time::Duration::from_secs(30));
        assert_eq!(set.max_streams_per_account, 8);
        assert_eq!(set.trusted_proxies.len(), 1);
        // Without the flag, an eighth of the cap, at least 64.
        let derived = connections(&["--max-connections", "256"]).unwrap();
        assert_eq!(derived.effective_max_connections_per_ip(), 64);
        for (flag, bad) in [
            ("--max-connections-per-ip", "0"),
            ("--body-min-rate", "0"),
            ("--body-timeout", "0"),
            ("--write-stall-timeout", "lots"),
            ("--max-streams-per-account", "0"),
            ("--trusted-proxies", "nope"),
        ] {
            let err = connections(&[flag, bad]).unwrap_err().to_string();
            assert!(err.contains(flag), "{flag} {bad}: {err}");
        }
    }

    #[test]
    fn log_max_size_names_the_flag_on_bad_input() {
        assert_eq!(super::parse_log_max_size("10m").unwrap(), 10 << 20);
        assert_eq!(super::parse_log_max_size("1048576").unwrap(), 1 << 20);
        assert_eq!(super::parse_log_max_size("1G").unwrap(), 1 << 30);
        for bad in ["lots", "10x", "1k", ""] {
            let err = super::parse_log_max_size(bad).unwrap_err().to_string();
            assert!(err.starts_with("--log-max-size: "), "{err}");
        }
    }

    #[test]
    fn admission_flags_parse_and_name_the_flag_on_bad_input() {
        let parse = |flags: &[&str]| parse_flags::<Cli>(flags).unwrap().args.admission.config();
        for var in [
            "STOCKADE_CPU_OVERCOMMIT",
            "STOCKADE_MEMORY_OVERCOMMIT",
            "STOCKADE_DEFAULT_QUOTA_SANDBOXES",
            "STOCKADE_DEFAULT_QUOTA_CPU",
            "STOCKADE_DEFAULT_QUOTA_MEMORY",
            "STOCKADE_DEFAULT_QUOTA_DISK",
        ] {
            if std::env::var_os(var).is_some() {
                eprintln!("admission_flags skipped: {var} is set");
                return;
            }
        }
        assert_eq!(
            parse(&[]).unwrap(),
            stockade_service::admission::AdmissionConfig::default()
        );
        let c = parse(&[
            "--cpu-overcommit",
            "off",
            "--memory-overcommit",
            "1.5",
            "--default-quota-sandboxes",
            "5",
            "--default-quota-memory",
            "16",
            "--default-quota-snapshots",
            "20",
            "--default-quota-upload-gb",
            "0.5",
            "--default-quota-volume-gb",
            "300",
        ])
        .unwrap();
        assert_eq!(c.default_quota.volume_gb, Some(300));
        assert_eq!(c.default_quota.volumes, None);
        assert_eq!(c.default_quota.snapshots, Some(20));
        assert_eq!(c.default_quota.upload_bytes, Some(1 << 29));
        assert_eq!(c.default_quota.snapshot_bytes, None);
        assert_eq!((c.cpu_overcommit, c.memory_overcommit), (None, Some(1.5)));
        assert_eq!(c.default_quota.sandboxes, Some(5));
        assert_eq!(c.default_quota.memory_bytes, Some(16 << 30));
        assert_eq!(c.default_quota.cpu_millis, None);
        let err = parse(&["--cpu-overcommit", "0"]).unwrap_err().to_string();
        assert!(err.starts_with("--cpu-overcommit: "), "{err}");
        let err = parse(&["--default-quota-cpu=-2"]).unwrap_err().to_string();
        assert!(err.starts_with("--default-quota-cpu: "), "{err}");
        let err = parse(&["--default-quota-snapshot-gb=-1"])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--default-quota-snapshot-gb: "), "{err}");
        let err = parse(&["--default-quota-volumes=2000000"])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--default-quota-volumes: "), "{err}");
    }

    #[test]
    fn image_banner_says_what_is_absent_and_how_to_choose_another() {
        let preset = |name: &str, image: &str, present| stockade_api::PresetImageHealth {
            name: name.into(),
            image: image.into(),
            present,
            hint: None,
        };
        let mut images = stockade_api::ImagesHealth {
            default: stockade_api::ImageHealth {
                image: "node:20-bookworm".into(),
                present: false,
            },
            presets: vec![
                preset("node22", "node:22-bookworm", false),
                preset("python3.13", "python:3.13-bookworm", true),
            ],
        };
        let text = super::image_banner(&images).join("\n");
        assert!(text.contains("WARNING: the default image node:20-bookworm is absent"));
        assert!(text.contains("--default-image IMAGE or STOCKADE_DEFAULT_IMAGE"));
        assert!(text.contains("`docker pull node:20-bookworm`"));
        assert!(text.contains(
            "node22 = node:22-bookworm (absent), python3.13 = python:3.13-bookworm (present)"
        ));
        images.presets.push(stockade_api::PresetImageHealth {
            hint: Some("build it with scripts/build-image code-interpreter".into()),
            ..preset(
                "code-interpreter-v1",
                "stockade-code-interpreter:latest",
                false,
            )
        });
        let text = super::image_banner(&images).join("\n");
        assert!(
            text.contains(
                "code-interpreter-v1 = stockade-code-interpreter:latest (absent: build it with \
                 scripts/build-image code-interpreter)"
            ),
            "{text}"
        );
        images.default.present = true;
        images.presets.clear();
        assert_eq!(
            super::image_banner(&images),
            vec!["  image:     node:20-bookworm (the default image) is present"]
        );
        let failed = super::pull_outcome(
            "x.invalid/y:1",
            Err(stockade_runtime::RuntimeError::ImageUnavailable {
                image: "x.invalid/y:1".into(),
                reason: "no such host".into(),
            }),
        );
        assert!(
            failed.starts_with(
                "WARNING: the default image x.invalid/y:1 could not be pulled (no such host)"
            ),
            "{failed}"
        );
        assert!(failed.contains("--default-image IMAGE or STOCKADE_DEFAULT_IMAGE"));
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact_url("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(super::redact_url("sqlite:///x.db"), "sqlite:///x.db");
    }

    #[test]
    fn isolation_flags_name_the_flag_on_bad_input() {
        let parse = |flags: &[&str]| parse_flags::<Cli>(flags).unwrap().args.isolation.config();
        for var in [
            "STOCKADE_SANDBOX_NETWORK",
            "STOCKADE_SANDBOX_BRIDGE",
            "STOCKADE_OFFLINE_NETWORK",
            "STOCKADE_OFFLINE_BRIDGE",
            "STOCKADE_ISOLATION_CHAIN",
            "STOCKADE_NO_PACKET_FILTER",
        ] {
            if std::env::var_os(var).is_some() {
                eprintln!("isolation_flags skipped: {var} is set");
                return;
            }
        }
        assert_eq!(
            parse(&[]).unwrap(),
            stockade_runtime::IsolationConfig::default()
        );
        let custom = parse(&[
            "--sandbox-network",
            "b-net",
            "--sandbox-bridge",
            "stkb0",
            "--offline-network",
            "b-off",
            "--offline-bridge",
            "stkb1",
            "--isolation-chain",
            "STOCKADE-B",
            "--no-packet-filter",
        ])
        .unwrap();
        assert_eq!(custom.bridge, "stkb0");
        assert!(!custom.packet_filter);
        let err = parse(&["--sandbox-bridge", "a-bridge-name-too-long"])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--sandbox-bridge: "), "{err}");
        let err = parse(&["--offline-network", "stockade-sandboxes"])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--offline-network: "), "{err}");
        let err = parse(&["--isolation-chain", "no spaces"])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--isolation-chain: "), "{err}");
    }
}
