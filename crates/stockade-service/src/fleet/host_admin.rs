//! The administration of Docker hosts: registering one (every
//! field checked, then the engine reached before anything is stored),
//! listing them with what they hold, cordoning, uncordoning and draining,
//! and removing an empty one. Placement, routing and health checks use the
//! registry; they live elsewhere.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use chrono::{SubsecRound, Utc};
use stockade_api::{CreateHostRequest, HostCapacityInput, HostResponse, UpdateHostRequest};
use stockade_core::host::parse_host_name;
use stockade_core::quota::BYTES_PER_GB;
use stockade_core::{Host, HostHealth, HostState, HostTls, Resources, ValidationErrors};
use stockade_store::StoreError;

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// How long reaching a new host's engine may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most labels a host has.
pub const MAX_LABELS: usize = 32;
/// The longest label key and value.
pub const MAX_LABEL_KEY: usize = 63;
pub const MAX_LABEL_VALUE: usize = 255;
/// The most CPUs and memory (GB) a capacity may say.
pub const MAX_CPUS: u32 = 4096;
pub const MAX_MEMORY_GB: f64 = 65536.0;
/// The longest `dockerHost`, address and TLS file path.
const MAX_TEXT: usize = 1024;

/// The reason an administrator's cordon or drain gets when none is given.
pub const DEFAULT_CORDON_REASON: &str = "cordoned by an administrator";
pub const DEFAULT_DRAIN_REASON: &str = "drained by an administrator";

/// A host as an administrator sees it: whether it is the server's own, how
/// many sandboxes that are not terminated it holds and what the ones that
/// run reserve.
#[derive(Debug, Clone, PartialEq)]
pub struct HostView {
    pub host: Host,
    pub own: bool,
    pub sandboxes: u64,
    pub reserved: Resources,
}

impl HostView {
    pub fn response(&self) -> HostResponse {
        HostResponse::new(&self.host, self.own, self.sandboxes, self.reserved)
    }
}

fn not_found(name: &str) -> ServiceError {
    ServiceError::NotFound(format!("host '{name}' not found"))
}

/// A DNS name: dot-separated labels of letters, digits and `-`, none
/// starting or ending with `-`, 253 characters at most.
fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// An IP address or a DNS name.
fn is_address(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok() || is_dns_name(s)
}

/// `host` or `[v6]` of an authority.
fn is_authority_host(s: &str) -> bool {
    match s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => is_address(s),
    }
}

/// Splits `host[:port]` (IPv6 in brackets); `Err` names what is wrong.
fn split_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n >= 1 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("port '{p}' must be a number from 1 to 65535")),
        },
    };
    if !is_authority_host(host) {
        return Err(format!("'{host}' is not an IP address or a DNS name"));
    }
    Ok((host, port))
}

/// The transport of a `dockerHost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Unix,
    Tcp,
    Ssh,
}

/// Checks a `dockerHost`: `unix:///absolute/path`, `tcp://host:port` or
/// `ssh://[user@]host[:port]`.
fn parse_docker_host(s: &str) -> Result<Transport, String> {
    const FORMS: &str =
        "must be unix:///absolute/path, tcp://host:port or ssh://[user@]host[:port]";
    if s.len() > MAX_TEXT || s.chars().any(char::is_control) {
        return Err(format!("{FORMS} (at most {MAX_TEXT} printable characters)"));
    }
    if let Some(path) = s.strip_prefix("unix://") {
        if !path.starts_with('/') || path.len() < 2 {
            return Err(format!(
                "'{s}': a unix socket's path must be absolute ({FORMS})"
            ));
        }
        return Ok(Transport::Unix);
    }
    if let Some(authority) = s.strip_prefix("tcp://") {
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        if authority.contains(['/', '@', '?', '#']) {
            return Err(format!("'{s}': tcp://host:port has no path, user or query"));
        }
        return match split_port(authority) {
            Ok((_, Some(_))) => Ok(Transport::Tcp),
            Ok((_, None)) => Err(format!("'{s}': tcp:// needs a port (tcp://host:2376)")),
            Err(e) => Err(format!("'{s}': {e}")),
        };
    }
    if let Some(rest) = s.strip_prefix("ssh://") {
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(format!(
                "'{s}': ssh://[user@]host[:port] has no path or query"
            ));
        }
        let authority = match rest.split_once('@') {
            Some((user, host)) => {
                let ok = !user.is_empty()
                    && user.len() <= 32
                    && user
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                    && !user.starts_with('-');
                if !ok {
                    return Err(format!(
                        "'{s}': the user must be 1 to 32 letters, digits and . _ -"
                    ));
                }
                host
            }
            None => rest,
        };
        return split_port(authority)
            .map(|_| Transport::Ssh)
            .map_err(|e| format!("'{s}': {e}"));
    }
    Err(format!("'{s}' {FORMS}"))
}

/// Checks that `path` is an absolute path of a file this server can read.
fn check_readable(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_TEXT || path.contains('\0') {
        return Err("must be the absolute path of a readable file".into());
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(format!("'{path}' must be an absolute path"));
    }
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => std::fs::File::open(p)
            .map(drop)
            .map_err(|e| format!("'{path}' cannot be read: {e}")),
        Ok(_) => Err(format!("'{path}' is not a file")),
        Err(e) => Err(format!("'{path}' cannot be read: {e}")),
    }
}

/// Checks labels: at most 32; keys 1 to 63 characters from letters, digits
/// and `_ . - /`; values at most 255 printable characters.
fn check_labels(labels: &BTreeMap<String, String>, errors: &mut ValidationErrors) {
    if labels.len() > MAX_LABELS {
        errors.push(
            "labels",
            format!("at most {MAX_LABELS} labels, got {}", labels.len()),
        );
    }
    for (k, v) in labels {
        let key_ok = !k.is_empty()
            && k.len() <= MAX_LABEL_KEY
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-/".contains(&b));
        if !key_ok {
            errors.push(
                "labels",
                format!(
                    "key {k:?} must be 1 to {MAX_LABEL_KEY} characters from letters, digits and _ . - /"
                ),
            );
        }
        if v.chars().count() > MAX_LABEL_VALUE || v.chars().any(char::is_control) {
            errors.push(
                "labels",
                format!(
                    "the value of {k:?} must be at most {MAX_LABEL_VALUE} printable characters"
                ),
            );
        }
    }
}

/// The capacity override (CPUs, bytes) of `input`.
fn check_capacity(
    input: &HostCapacityInput,
    errors: &mut ValidationErrors,
) -> (Option<u32>, Option<u64>) {
    let mut cpus = None;
    let mut memory = None;
    if let Some(n) = input.cpus {
        if (1..=MAX_CPUS).contains(&n) {
            cpus = Some(n);
        } else {
            errors.push("capacity.cpus", format!("must be 1 to {MAX_CPUS}, got {n}"));
        }
    }
    if let Some(gb) = input.memory_gb {
        if gb.is_finite() && gb > 0.0 && gb <= MAX_MEMORY_GB {
            memory = Some((gb * BYTES_PER_GB as f64) as u64);
        } else {
            errors.push(
                "capacity.memoryGB",
                format!("must be above 0 and at most {MAX_MEMORY_GB}, got {gb}"),
            );
        }
    }
    (cpus, memory)
}

fn check_address(address: &str, errors: &mut ValidationErrors) {
    if !is_address(address) {
        errors.push(
            "address",
            format!("'{address}' is not an IP address or a DNS name"),
        );
    }
}

/// Checks a registration; the host it describes, not stored, not checked.
fn host_of(input: &CreateHostRequest) -> ServiceResult<Host> {
    let mut errors = ValidationErrors::default();
    let name = errors.check(parse_host_name(&input.name, "name"));
    let transport = match parse_docker_host(&input.docker_host) {
        Ok(t) => Some(t),
        Err(e) => {
            errors.push("dockerHost", e);
            None
        }
    };
    let tls = input.tls.as_ref().map(|t| HostTls {
        ca: t.ca.clone(),
        cert: t.cert.clone(),
        key: t.key.clone(),
    });
    if let Some(t) = &tls {
        if transport.is_some_and(|t| t != Transport::Tcp) {
            errors.push("tls", "TLS client files apply to a tcp:// dockerHost only");
        }
        for (field, path) in [
            ("tls.ca", &t.ca),
            ("tls.cert", &t.cert),
            ("tls.key", &t.key),
        ] {
            if let Err(e) = check_readable(path) {
                errors.push(field, e);
            }
        }
    }
    if let Some(a) = &input.address {
        check_address(a, &mut errors);
    }
    let labels = input.labels.clone().unwrap_or_default();
    check_labels(&labels, &mut errors);
    let (cpus, memory_bytes) = input
        .capacity
        .as_ref()
        .map(|c| check_capacity(c, &mut errors))
        .unwrap_or_default();
    errors.into_result()?;
    let now = Utc::now().trunc_subsecs(6);
    Ok(Host {
        tls,
        address: input.address.clone(),
        labels,
        cpus,
        memory_bytes,
        ..Host::new(name.unwrap_or_default(), input.docker_host.clone(), now)
    })
}

/// Registers a Docker host: every field checked (errors name them), the
/// engine reached (400 naming `dockerHost` when it cannot be, within
/// [`CONNECT_TIMEOUT`]), then stored with what the engine reported as its
/// first health check. A taken name is a 409.
pub async fn register(svc: &Service, input: &CreateHostRequest) -> ServiceResult<Host> {
    let mut host = host_of(input)?;
    let name = host.name.clone();
    if name == svc.hosts.own_name() {
        return Err(ServiceError::Conflict(format!(
            "host '{name}' exists: it is this server's own Docker host"
        )));
    }
    match svc.store.get_host(&name).await {
        Ok(_) => return Err(ServiceError::Conflict(format!("host '{name}' exists"))),
        Err(StoreError::NotFound) => {}
        Err(e) => return Err(e.into()),
    }
    let unreachable = |e: String| {
        ServiceError::field(
            "dockerHost",
            format!(
                "could not reach the Docker Engine at {}: {e}",
                host_for_message(&input.docker_host)
            ),
        )
    };
    let info = async {
        let runtime = svc.hosts.runtime(&host).map_err(|e| e.to_string())?;
        match tokio::time::timeout(CONNECT_TIMEOUT, runtime.info()).await {
            Ok(Ok(info)) => Ok(info),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no answer within {} seconds",
                CONNECT_TIMEOUT.as_secs()
            )),
        }
    }
    .await;
    let info = match info {
        Ok(info) => info,
        Err(e) => {
            // Nothing is registered under this name: keep no connection.
            svc.hosts.forget(&name);
            return Err(unreachable(e));
        }
    };
    host.health = HostHealth {
        healthy: Some(true),
        reason: None,
        checked_at: Some(Utc::now().trunc_subsecs(6)),
        failing_since: None,
        cpus: (info.cpus > 0).then_some(info.cpus),
        memory_bytes: (info.memory_bytes > 0).then_some(info.memory_bytes),
        disk_free_bytes: None,
    };
    if let Err(e) = svc.store.insert_host(&host).await {
        // Registered meanwhile by another call: its connection is made
        // from the stored record the next time.
        svc.hosts.forget(&name);
        return Err(match e {
            StoreError::Conflict(_) => ServiceError::Conflict(format!("host '{name}' exists")),
            other => other.into(),
        });
    }
    svc.store.record_host_health(&name, &host.health).await?;
    tracing::info!(host.name = %name, docker_host = %host.docker_host, "host registered");
    for warning in host.warnings() {
        tracing::warn!(host.name = %name, "{warning}");
    }
    Ok(host)
}

/// `dockerHost` for a message: at most 200 characters.
fn host_for_message(s: &str) -> String {
    if s.chars().count() > 200 {
        format!("{}…", s.chars().take(200).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// Registers the server's own Docker host (`--docker-host`, named
/// `--server-name`) unless it is; returns it as stored. Called at start.
pub async fn ensure_own(svc: &Service, docker_host: &str) -> ServiceResult<Host> {
    let own = Host {
        docker_host: docker_host.to_owned(),
        ..crate::fleet::placement::own_host_record(svc)
    };
    Ok(svc.store.ensure_host(&own).await?)
}

async fn view(svc: &Service, mut host: Host, sandboxes: u64) -> ServiceResult<HostView> {
    let reserved = svc.store.server_reserved(&host.name, &[]).await?;
    // The latest check, which the database gets only when it changed.
    if let Some(seen) = svc.hosts.seen_health(&host.name) {
        if seen.checked_at > host.health.checked_at {
            host.health = seen;
        }
    }
    Ok(HostView {
        own: host.name == svc.hosts.own_name(),
        host,
        sandboxes,
        reserved,
    })
}

/// Every host, by name, with what it holds.
pub async fn list(svc: &Service) -> ServiceResult<Vec<HostView>> {
    let hosts = svc.store.list_hosts().await?;
    let counts = svc.store.sandboxes_per_server().await?;
    let mut out = Vec::with_capacity(hosts.len());
    for host in hosts {
        let n = counts.get(&host.name).copied().unwrap_or(0);
        out.push(view(svc, host, n).await?);
    }
    Ok(out)
}

async fn load(svc: &Service, name: &str) -> ServiceResult<Host> {
    svc.store.get_host(name).await.map_err(|e| match e {
        StoreError::NotFound => not_found(name),
        other => other.into(),
    })
}

/// One host with what it holds; 404 when unknown.
pub async fn get(svc: &Service, name: &str) -> ServiceResult<HostView> {
    let host = load(svc, name).await?;
    let counts = svc.store.sandboxes_per_server().await?;
    let n = counts.get(name).copied().unwrap_or(0);
    view(svc, host, n).await
}

/// Changes a host: its state (an administrator's cordon, uncordon or
/// drain; the drain's moving of sandboxes is done elsewhere), the reason,
/// labels, capacity and address (each replaced when given).
pub async fn update(svc: &Service, name: &str, patch: &UpdateHostRequest) -> ServiceResult<Host> {
    let mut host = load(svc, name).await?;
    let mut errors = ValidationErrors::default();
    let state = match patch.state.as_deref() {
        None => None,
        Some(s) => match HostState::parse(s) {
            Some(state) => Some(state),
            None => {
                errors.push(
                    "state",
                    format!("'{s}' must be one of active, cordoned, draining"),
                );
                None
            }
        },
    };
    if let Some(reason) = &patch.reason {
        if reason.trim().is_empty()
            || reason.chars().count() > 500
            || reason.chars().any(char::is_control)
        {
            errors.push("reason", "must be 1 to 500 printable characters");
        }
        let becomes = state.unwrap_or(host.state);
        if becomes == HostState::Active {
            errors.push("reason", "only a cordoned or draining host has a reason");
        }
    }
    if let Some(labels) = &patch.labels {
        check_labels(labels, &mut errors);
    }
    let capacity = patch
        .capacity
        .as_ref()
        .map(|c| c.as_ref().map(|c| check_capacity(c, &mut errors)));
    if let Some(Some(address)) = &patch.address {
        check_address(address, &mut errors);
    }
    errors.into_result()?;

    match state {
        Some(HostState::Active) => {
            host.state = HostState::Active;
            host.state_reason = None;
            host.auto_cordoned = false;
        }
        Some(s @ (HostState::Cordoned | HostState::Draining)) => {
            let default = if s == HostState::Cordoned {
                DEFAULT_CORDON_REASON
            } else {
                DEFAULT_DRAIN_REASON
            };
            host.state = s;
            host.state_reason = Some(patch.reason.clone().unwrap_or_else(|| default.into()));
            host.auto_cordoned = false;
        }
        None => {
            if let Some(reason) = &patch.reason {
                host.state_reason = Some(reason.clone());
                host.auto_cordoned = false;
            }
        }
    }
    if let Some(labels) = &patch.labels {
        host.labels = labels.clone();
    }
    if let Some(capacity) = capacity {
        (host.cpus, host.memory_bytes) = capacity.unwrap_or_default();
    }
    if let Some(address) = &patch.address {
        host.address = address.clone();
    }
    host.updated_at = Utc::now().trunc_subsecs(6);
    svc.store.update_host(&host).await.map_err(|e| match e {
        StoreError::NotFound => not_found(name),
        other => other.into(),
    })?;
    tracing::info!(
        host.name = %name,
        state = host.state.as_str(),
        reason = host.state_reason.as_deref().unwrap_or(""),
        "host changed"
    );
    Ok(host)
}

/// Removes a host that holds no sandbox but terminated ones; the server's
/// own host never (409), nor one that holds sandboxes (409 with how many).
pub async fn remove(svc: &Service, name: &str) -> ServiceResult<()> {
    if name == svc.hosts.own_name() {
        return Err(ServiceError::Conflict(format!(
            "host '{name}' is this server's own Docker host (--docker-host) and cannot be removed"
        )));
    }
    svc.store.delete_host(name).await.map_err(|e| match e {
        StoreError::NotFound => not_found(name),
        other => other.into(),
    })?;
    svc.hosts.forget(name);
    tracing::info!(host.name = %name, "host removed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use stockade_api::HostTlsFiles;
    use stockade_runtime::{FakeRuntime, Runtime};

    use super::*;
    use crate::config::ServiceConfig;
    use crate::fleet::hosts::RuntimeFactory;

    #[test]
    fn docker_hosts() {
        for (good, transport) in [
            ("unix:///var/run/docker.sock", Transport::Unix),
            ("tcp://10.0.0.5:2376", Transport::Tcp),
            ("tcp://docker.example.com:2375/", Transport::Tcp),
            ("tcp://[::1]:2376", Transport::Tcp),
            ("ssh://host-1", Transport::Ssh),
            ("ssh://root@10.0.0.5:2222", Transport::Ssh),
            ("ssh://deploy.user@box.example", Transport::Ssh),
        ] {
            assert_eq!(parse_docker_host(good), Ok(transport), "{good}");
        }
        for bad in [
            "",
            "/var/run/docker.sock",
            "unix://",
            "unix://relative.sock",
            "tcp://10.0.0.5",
            "tcp://10.0.0.5:0",
            "tcp://10.0.0.5:65536",
            "tcp://10.0.0.5:x",
            "tcp://:2376",
            "tcp://a b:2376",
            "tcp://u@h:2376",
            "tcp://h:2376/path",
            "ssh://",
            "ssh://@h",
            "ssh://-oProxyCommand=x@h",
            "ssh://h:99999",
            "ssh://h/path",
            "http://h:2375",
            "npipe:////./pipe/docker_engine",
            "unix:///a\nb",
        ] {
            assert!(parse_docker_host(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn addresses_and_labels() {
        for good in ["10.0.0.5", "::1", "docker-1.example.com", "h"] {
            assert!(is_address(good), "{good}");
        }
        for bad in [
            "",
            "-a.example",
            "a..b",
            "a_b",
            "a b",
            "[::1]",
            &"a".repeat(64),
        ] {
            assert!(!is_address(bad), "{bad:?}");
        }
        let mut errors = ValidationErrors::default();
        check_labels(
            &BTreeMap::from([
                ("zone".into(), "eu-1".into()),
                ("example.com/gpu".into(), "a100".into()),
                ("k".into(), String::new()),
            ]),
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:?}");
        for (k, v) in [
            ("", "x"),
            ("a b", "x"),
            (&*"k".repeat(64), "x"),
            ("ok", "line\nbreak"),
            ("ok", &*"v".repeat(256)),
        ] {
            let mut errors = ValidationErrors::default();
            check_labels(&BTreeMap::from([(k.to_owned(), v.to_owned())]), &mut errors);
            assert_eq!(errors.0.len(), 1, "{k:?}={v:?}");
            assert_eq!(errors.0[0].field, "labels");
        }
        let many: BTreeMap<String, String> =
            (0..33).map(|i| (format!("k{i}"), "v".into())).collect();
        let mut errors = ValidationErrors::default();
        check_labels(&many, &mut errors);
        assert_eq!(errors.0[0].field, "labels");
    }

    /// Connects every registered host to a fake engine of its own (16 CPUs,
    /// 64 GB), one that is down when its `dockerHost` says `down`.
    struct Fakes;

    impl RuntimeFactory for Fakes {
        fn connect(&self, host: &Host) -> Result<Arc<dyn Runtime>, String> {
            let rt = FakeRuntime::with_server_name(host.name.clone());
            rt.set_host_size(16, 64 * BYTES_PER_GB);
            if host.docker_host.contains("down") {
                rt.set_unavailable(true);
            }
            Ok(Arc::new(rt))
        }
    }

    async fn service(factory: bool) -> Service {
        let store = stockade_store::connect("sqlite::memory:").await.unwrap();
        let mut config = ServiceConfig::default();
        if factory {
            config.hosts.factory = Some(Arc::new(Fakes));
        }
        Service::new(store, Arc::new(FakeRuntime::new()), config)
            .await
            .unwrap()
    }

    /// A service that connects registered hosts, its own host recorded.
    async fn service_with_own_host() -> Service {
        let svc = service(true).await;
        ensure_own(&svc, "unix:///var/run/docker.sock")
            .await
            .unwrap();
        svc
    }

    fn request(name: &str, docker_host: &str) -> CreateHostRequest {
        CreateHostRequest {
            name: name.into(),
            docker_host: docker_host.into(),
            ..CreateHostRequest::default()
        }
    }

    fn fields(e: ServiceError) -> Vec<String> {
        match e {
            ServiceError::Validation(v) => v.0.into_iter().map(|f| f.field).collect(),
            other => panic!("not a validation error: {other:?}"),
        }
    }

    #[tokio::test]
    async fn register_checks_connects_and_stores() {
        let svc = service_with_own_host().await;
        let mut input = request("edge-1", "tcp://10.0.0.5:2376");
        input.labels = Some(BTreeMap::from([("zone".into(), "eu".into())]));
        input.capacity = Some(HostCapacityInput {
            cpus: Some(8),
            memory_gb: Some(1.5),
        });
        let host = register(&svc, &input).await.unwrap();
        assert_eq!(host.cpus, Some(8));
        assert_eq!(host.memory_bytes, Some(3 * BYTES_PER_GB / 2));
        assert_eq!(host.health.healthy, Some(true));
        assert_eq!(host.health.cpus, Some(16));
        let views = list(&svc).await.unwrap();
        let names: Vec<(&str, bool)> = views
            .iter()
            .map(|v| (v.host.name.as_str(), v.own))
            .collect();
        assert_eq!(names, [("edge-1", false), ("local", true)]);
        assert_eq!(get(&svc, "edge-1").await.unwrap().host, host);
        // A tcp:// engine without TLS: registered, with a warning in what
        // the API answers; the local socket has none.
        let warnings = |name: &str| {
            views
                .iter()
                .find(|v| v.host.name == name)
                .map(|v| v.response().warnings)
                .unwrap()
        };
        let plain = warnings("edge-1");
        assert_eq!(plain.len(), 1, "{plain:?}");
        assert!(
            plain[0].contains("tcp://10.0.0.5:2376") && plain[0].contains("without TLS"),
            "{plain:?}"
        );
        assert!(warnings("local").is_empty());

        // Taken names: a registered one and the server's own.
        for name in ["edge-1", "local"] {
            let e = register(&svc, &request(name, "unix:///x.sock"))
                .await
                .unwrap_err();
            assert!(matches!(e, ServiceError::Conflict(_)), "{e:?}");
        }
        // An engine that does not answer: 400 naming dockerHost, nothing stored.
        let e = register(&svc, &request("gone", "tcp://down.example:2376"))
            .await
            .unwrap_err();
        assert_eq!(fields(e), ["dockerHost"]);
        assert!(matches!(
            get(&svc, "gone").await,
            Err(ServiceError::NotFound(_))
        ));
        // Every bad field at once.
        let mut bad = request("Bad_Name", "tcp://h:0");
        bad.address = Some("not an address".into());
        bad.capacity = Some(HostCapacityInput {
            cpus: Some(0),
            memory_gb: Some(f64::NAN),
        });
        bad.labels = Some(BTreeMap::from([("a b".into(), "v".into())]));
        let e = register(&svc, &bad).await.unwrap_err();
        assert_eq!(
            fields(e),
            [
                "name",
                "dockerHost",
                "address",
                "labels",
                "capacity.cpus",
                "capacity.memoryGB"
            ]
        );
        // TLS: with tcp only, and its files must be there.
        let dir = tempfile::tempdir().unwrap();
        let file = |n: &str| {
            let p = dir.path().join(n);
            std::fs::write(&p, "pem").unwrap();
            p.display().to_string()
        };
        let tls = HostTlsFiles {
            ca: file("ca.pem"),
            cert: file("cert.pem"),
            key: dir.path().join("missing.pem").display().to_string(),
        };
        let mut unix_tls = request("t1", "unix:///var/run/docker.sock");
        unix_tls.tls = Some(tls.clone());
        assert_eq!(
            fields(register(&svc, &unix_tls).await.unwrap_err()),
            ["tls", "tls.key"]
        );
        let mut tcp_tls = request("t1", "tcp://10.0.0.6:2376");
        tcp_tls.tls = Some(HostTlsFiles {
            key: file("key.pem"),
            ..tls
        });
        let with_tls = register(&svc, &tcp_tls).await.unwrap();
        assert!(with_tls.tls.is_some());
        assert!(with_tls.warnings().is_empty());
    }

    #[tokio::test]
    async fn without_a_factory_only_the_own_host_is_reachable() {
        let svc = service(false).await;
        let e = register(&svc, &request("edge-1", "tcp://10.0.0.5:2376"))
            .await
            .unwrap_err();
        assert_eq!(fields(e), ["dockerHost"]);
    }

    #[tokio::test]
    async fn cordon_uncordon_drain_and_remove() {
        let svc = service_with_own_host().await;
        register(&svc, &request("edge-1", "tcp://10.0.0.5:2376"))
            .await
            .unwrap();
        let patch = |state: &str, reason: Option<&str>| UpdateHostRequest {
            state: Some(state.into()),
            reason: reason.map(Into::into),
            ..UpdateHostRequest::default()
        };
        let h = update(&svc, "edge-1", &patch("cordoned", None))
            .await
            .unwrap();
        assert_eq!(
            (h.state, h.state_reason.as_deref(), h.auto_cordoned),
            (HostState::Cordoned, Some(DEFAULT_CORDON_REASON), false)
        );
        let h = update(&svc, "edge-1", &patch("draining", Some("disk swap")))
            .await
            .unwrap();
        assert_eq!(
            (h.state, h.state_reason.as_deref()),
            (HostState::Draining, Some("disk swap"))
        );
        // An automatic cordon becomes the administrator's when they touch it.
        let mut auto = svc.store.get_host("edge-1").await.unwrap();
        auto.state = HostState::Cordoned;
        auto.auto_cordoned = true;
        svc.store.update_host(&auto).await.unwrap();
        let h = update(&svc, "edge-1", &patch("cordoned", Some("kept off")))
            .await
            .unwrap();
        assert!(!h.auto_cordoned);
        let h = update(&svc, "edge-1", &patch("active", None))
            .await
            .unwrap();
        assert_eq!(
            (h.state, h.state_reason.clone(), h.auto_cordoned),
            (HostState::Active, None, false)
        );
        assert_eq!(svc.store.get_host("edge-1").await.unwrap(), h);

        // Labels, capacity and address are replaced; null clears.
        let h = update(
            &svc,
            "edge-1",
            &UpdateHostRequest {
                labels: Some(BTreeMap::from([("gpu".into(), "yes".into())])),
                capacity: Some(Some(HostCapacityInput {
                    cpus: Some(4),
                    memory_gb: None,
                })),
                address: Some(Some("10.0.0.5".into())),
                ..UpdateHostRequest::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(
            (h.cpus, h.memory_bytes, h.address.as_deref()),
            (Some(4), None, Some("10.0.0.5"))
        );
        let h = update(
            &svc,
            "edge-1",
            &UpdateHostRequest {
                capacity: Some(None),
                address: Some(None),
                ..UpdateHostRequest::default()
            },
        )
        .await
        .unwrap();
        assert_eq!((h.cpus, h.address), (None, None));
        assert_eq!(h.labels.get("gpu").map(String::as_str), Some("yes"));

        // Bad patches name their fields and change nothing.
        for (p, field) in [
            (patch("asleep", None), "state"),
            (patch("active", Some("why")), "reason"),
            (
                UpdateHostRequest {
                    reason: Some("no state, host active".into()),
                    ..UpdateHostRequest::default()
                },
                "reason",
            ),
            (
                UpdateHostRequest {
                    address: Some(Some("a b".into())),
                    ..UpdateHostRequest::default()
                },
                "address",
            ),
        ] {
            let e = update(&svc, "edge-1", &p).await.unwrap_err();
            assert_eq!(fields(e), [field]);
        }
        assert!(matches!(
            update(&svc, "ghost", &patch("active", None)).await,
            Err(ServiceError::NotFound(_))
        ));

        // Removal: never the own host; unknown is 404; then gone.
        assert!(matches!(
            remove(&svc, "local").await,
            Err(ServiceError::Conflict(_))
        ));
        assert!(matches!(
            remove(&svc, "ghost").await,
            Err(ServiceError::NotFound(_))
        ));
        remove(&svc, "edge-1").await.unwrap();
        assert!(svc.hosts.connected("edge-1").is_none());
        assert!(matches!(
            get(&svc, "edge-1").await,
            Err(ServiceError::NotFound(_))
        ));
    }
}
