//! An in-memory [`Runtime`] with Docker's semantics (names, volumes, 404/409
//! cases) and failure injection, for fast logic tests without an engine.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use stockade_core::{SandboxId, VolumeName};

mod disk;
mod exec;
mod files;
mod logs;
mod network;
mod snapshots;
mod update;
mod volumes;

use crate::{
    ContainerSpec, ContainerState, ContainerStats, ExecOutput, ExecSpec, Inspect, Lifecycle,
    LogLine, LogStream, ManagedContainer, PoolMemberSpec, RuntimeError, RuntimeInfo, RuntimeResult,
};

/// Computes the result of an exec in a [`FakeRuntime`].
pub type ExecHandler = Arc<dyn Fn(&SandboxId, &ExecSpec) -> ExecOutput + Send + Sync>;

/// One fake container, as tests can inspect it.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeContainer {
    pub container_id: String,
    pub spec: ContainerSpec,
    pub running: bool,
    /// Frozen (its processes exist but do not run).
    pub paused: bool,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i64>,
    /// Grace periods of the stops it received, in order.
    pub stops: Vec<Duration>,
    /// The pool class of a warm-pool member.
    pub pool_class: Option<String>,
}

impl FakeContainer {
    /// The agent version it reports: this build's when made with a token.
    pub fn agent(&self) -> Option<String> {
        self.spec
            .agent_token
            .as_ref()
            .map(|_| crate::agent_version().to_owned())
    }
}

#[derive(Debug, Clone)]
struct FakeVolume {
    created_at: DateTime<Utc>,
    size_bytes: Option<u64>,
    instance_id: Option<String>,
    account_id: Option<String>,
    pool_member: bool,
}

struct State {
    containers: BTreeMap<SandboxId, FakeContainer>,
    /// Volumes by the sandbox id in their name (`VolumeName` has no order).
    volumes: BTreeMap<SandboxId, FakeVolume>,
    missing_images: BTreeSet<String>,
    unavailable: bool,
    fail_create: Option<String>,
    fail_remove: Option<String>,
    create_delay: Option<Duration>,
    exec_results: VecDeque<ExecOutput>,
    exec_handler: Option<ExecHandler>,
    exec_calls: Vec<(SandboxId, ExecSpec)>,
    next_container: u64,
    /// Main-process output of each container, oldest first.
    logs: BTreeMap<SandboxId, Vec<LogLine>>,
    /// Snapshot images (fake/snapshots.rs), by reference, with their labels.
    images: BTreeMap<String, BTreeMap<String, String>>,
    /// The last archive unpacked into each sandbox's `/workspace`.
    workspaces: BTreeMap<SandboxId, Vec<u8>>,
    /// The size `info` reports (see [`FakeRuntime::set_host_size`]).
    host_cpus: u32,
    host_memory_bytes: u64,
    /// What `ensure_isolation` reports as not applied (fake/network.rs).
    isolation_problem: Option<String>,
    /// How many times `ensure_isolation` ran.
    isolation_checks: u32,
    /// Egress entries (fake/network.rs): sandbox → its policy.
    egress: BTreeMap<SandboxId, stockade_core::netpolicy::EgressPolicy>,
    /// Shared volumes' Docker volumes (fake/volumes.rs), by name.
    shared_volumes: BTreeSet<String>,
}

impl Default for State {
    fn default() -> Self {
        Self {
            containers: BTreeMap::new(),
            volumes: BTreeMap::new(),
            shared_volumes: BTreeSet::new(),
            missing_images: BTreeSet::new(),
            unavailable: false,
            fail_create: None,
            fail_remove: None,
            create_delay: None,
            exec_results: VecDeque::new(),
            exec_handler: None,
            exec_calls: Vec::new(),
            next_container: 0,
            logs: BTreeMap::new(),
            images: BTreeMap::new(),
            workspaces: BTreeMap::new(),
            host_cpus: FAKE_HOST_CPUS,
            host_memory_bytes: FAKE_HOST_MEMORY_BYTES,
            isolation_problem: None,
            isolation_checks: 0,
            egress: BTreeMap::new(),
        }
    }
}

/// The host size a [`FakeRuntime`] reports until a test sets another: large,
/// so that only tests about the host's size meet it.
pub const FAKE_HOST_CPUS: u32 = 64;
/// 256 GiB.
pub const FAKE_HOST_MEMORY_BYTES: u64 = 256 * 1024 * 1024 * 1024;

/// An in-memory [`Runtime`]. Cheap to clone; clones share state.
///
/// Semantics follow [`crate::DockerRuntime`]: `create` makes the volume (if
/// absent) and a running container and leaves nothing behind on failure;
/// `start`/`stop` are idempotent; a volume used by a container cannot be
/// removed (`Conflict`). Failures are injected with `fail_next_*`,
/// [`set_unavailable`](Self::set_unavailable) and
/// [`set_image_missing`](Self::set_image_missing).
///
/// `exec` returns, in order of precedence: the next result queued with
/// [`push_exec_result`](Self::push_exec_result), the handler set with
/// [`set_exec_handler`](Self::set_exec_handler), or a tiny built-in shell:
/// `echo ARGS`, `cat` (echoes stdin), `true`, `false`, `sh -c 'exit N'`;
/// anything else succeeds with no output. `exec_start` streams the same
/// result at once (a fake process never runs for long).
///
/// `logs` yields the lines added with [`push_log`](Self::push_log); with
/// `follow` it yields those stored so far and ends (the fake does not wait
/// for new lines).
#[derive(Clone)]
pub struct FakeRuntime {
    state: Arc<Mutex<State>>,
    server_name: String,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FakeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeRuntime")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl FakeRuntime {
    pub fn new() -> Self {
        Self::with_server_name("local")
    }

    pub fn with_server_name(name: impl Into<String>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            server_name: name.into(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every call fails with `Unavailable` while `true` (the daemon is "down").
    pub fn set_unavailable(&self, unavailable: bool) {
        self.state().unavailable = unavailable;
    }

    /// The next `create` fails with `Other(msg)`, after making (and removing
    /// again) its volume, as a failed Docker create would.
    pub fn fail_next_create(&self, msg: impl Into<String>) {
        self.state().fail_create = Some(msg.into());
    }

    /// The next `remove` fails with `Other(msg)` and removes nothing.
    pub fn fail_next_remove(&self, msg: impl Into<String>) {
        self.state().fail_remove = Some(msg.into());
    }

    /// `ensure_image` (and so `create`) of `image` fails with `ImageUnavailable`.
    pub fn set_image_missing(&self, image: impl Into<String>) {
        self.state().missing_images.insert(image.into());
    }

    /// The CPUs and memory `info` reports for the host.
    pub fn set_host_size(&self, cpus: u32, memory_bytes: u64) {
        let mut st = self.state();
        st.host_cpus = cpus;
        st.host_memory_bytes = memory_bytes;
    }

    /// `create` waits this long before making anything, so tests can cancel it.
    pub fn set_create_delay(&self, delay: Duration) {
        self.state().create_delay = Some(delay);
    }

    /// Queues the result of the next `exec`.
    pub fn push_exec_result(&self, output: ExecOutput) {
        self.state().exec_results.push_back(output);
    }

    /// Computes exec results with `handler` (when none is queued).
    pub fn set_exec_handler(
        &self,
        handler: impl Fn(&SandboxId, &ExecSpec) -> ExecOutput + Send + Sync + 'static,
    ) {
        self.state().exec_handler = Some(Arc::new(handler));
    }

    /// The execs run so far, in order.
    pub fn exec_calls(&self) -> Vec<(SandboxId, ExecSpec)> {
        self.state().exec_calls.clone()
    }

    /// The agent token a sandbox's container was made with (`None`: no
    /// container, or one without an agent).
    pub fn agent_token(&self, id: &SandboxId) -> Option<String> {
        self.state()
            .containers
            .get(id)
            .and_then(|c| c.spec.agent_token.clone())
    }

    /// The container of a sandbox, if any.
    pub fn container(&self, id: &SandboxId) -> Option<FakeContainer> {
        self.state().containers.get(id).cloned()
    }

    /// Every container, by sandbox id.
    pub fn containers(&self) -> Vec<FakeContainer> {
        self.state().containers.values().cloned().collect()
    }

    pub fn has_volume(&self, name: &VolumeName) -> bool {
        self.state().volumes.contains_key(&name.sandbox_id())
    }

    pub fn volume_names(&self) -> Vec<VolumeName> {
        self.state()
            .volumes
            .keys()
            .map(VolumeName::for_sandbox)
            .collect()
    }

    /// `create`, for a warm-pool member when `pool_class` is set.
    async fn create_labelled(
        &self,
        spec: &ContainerSpec,
        pool_class: Option<String>,
    ) -> RuntimeResult<String> {
        if let Some(token) = &spec.agent_token {
            crate::validate_agent_token(token).map_err(|e| RuntimeError::Other(e.to_string()))?;
        }
        self.ensure_image(&spec.image).await?;
        let delay = self.state().create_delay;
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        self.check_available()?;
        let mut st = self.state();
        if st.containers.contains_key(&spec.sandbox_id) {
            return Err(RuntimeError::Conflict(format!(
                "container stockade-{} already exists",
                spec.sandbox_id
            )));
        }
        if let Some(m) = spec
            .mounts
            .iter()
            .find(|m| !st.shared_volumes.contains(&m.volume))
        {
            return Err(RuntimeError::NotFound(format!(
                "the shared volume {} is missing on this Docker host",
                m.volume
            )));
        }
        // The volume would be made, then removed again: net effect nothing.
        if let Some(msg) = st.fail_create.take() {
            return Err(RuntimeError::Other(msg));
        }
        st.volumes
            .entry(spec.sandbox_id.clone())
            .or_insert_with(|| FakeVolume {
                created_at: Utc::now(),
                size_bytes: Some(0),
                instance_id: Some(spec.instance_id.as_str().to_owned()),
                account_id: pool_class
                    .is_none()
                    .then(|| spec.account_id.as_str().to_owned()),
                pool_member: pool_class.is_some(),
            });
        st.next_container += 1;
        let container_id = format!("fake{:060x}", st.next_container);
        st.containers.insert(
            spec.sandbox_id.clone(),
            FakeContainer {
                container_id: container_id.clone(),
                spec: spec.clone(),
                running: true,
                paused: false,
                started_at: Some(Utc::now()),
                finished_at: None,
                exit_code: None,
                stops: Vec::new(),
                pool_class,
            },
        );
        Ok(container_id)
    }

    /// Sets the size `list_volumes` reports for a volume.
    pub fn set_volume_size(&self, name: &VolumeName, bytes: u64) {
        if let Some(v) = self.state().volumes.get_mut(&name.sandbox_id()) {
            v.size_bytes = Some(bytes);
        }
    }

    /// The main process exits on its own (crash, OOM, `exit 3`).
    pub fn exit_container(&self, id: &SandboxId, exit_code: i64) {
        if let Some(c) = self.state().containers.get_mut(id) {
            c.running = false;
            c.finished_at = Some(Utc::now());
            c.exit_code = Some(exit_code);
        }
    }

    /// The main process of a sandbox's container writes a line (for `logs`).
    pub fn push_log(&self, id: &SandboxId, stream: LogStream, text: impl Into<String>) {
        self.state()
            .logs
            .entry(id.clone())
            .or_default()
            .push(LogLine {
                stream,
                timestamp: Utc::now(),
                text: text.into(),
            });
    }

    /// The container disappears behind Stockade's back (`docker rm -f`).
    pub fn remove_container_externally(&self, id: &SandboxId) {
        self.state().containers.remove(id);
    }

    /// The state, for a call that fails while the daemon is "down" or with
    /// the message `failure` picks (once).
    fn state_unless(
        &self,
        failure: impl FnOnce(&mut State) -> &mut Option<String>,
    ) -> RuntimeResult<MutexGuard<'_, State>> {
        self.check_available()?;
        let mut st = self.state();
        match failure(&mut st).take() {
            Some(msg) => Err(RuntimeError::Other(msg)),
            None => Ok(st),
        }
    }

    fn check_available(&self) -> RuntimeResult<()> {
        if self.state().unavailable {
            Err(RuntimeError::Unavailable(
                "Docker daemon not reachable (fake runtime set unavailable): is the daemon running? \
                 Start it with `sudo systemctl start docker`."
                    .into(),
            ))
        } else {
            Ok(())
        }
    }
}

fn not_found(id: &SandboxId) -> RuntimeError {
    RuntimeError::NotFound(format!("no container for sandbox {id}"))
}

#[async_trait]
impl Inspect for FakeRuntime {
    async fn info(&self) -> RuntimeResult<RuntimeInfo> {
        self.check_available()?;
        let st = self.state();
        Ok(RuntimeInfo {
            version: "fake".into(),
            api_version: "1.41".into(),
            os: "linux".into(),
            arch: std::env::consts::ARCH.into(),
            runtimes: vec!["runc".into()],
            cpus: st.host_cpus,
            memory_bytes: st.host_memory_bytes,
            data_root: None,
            engine_id: Some(format!("fake-{}", self.server_name())),
        })
    }

    fn server_name(&self) -> String {
        self.server_name.clone()
    }

    async fn inspect(&self, id: &SandboxId) -> RuntimeResult<Option<ContainerState>> {
        self.check_available()?;
        Ok(self.state().containers.get(id).map(|c| ContainerState {
            container_id: c.container_id.clone(),
            running: c.running,
            paused: c.paused,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            oom_killed: false,
            agent: c.agent(),
            address: c.running.then_some(std::net::Ipv4Addr::LOCALHOST.into()),
            agent_addr: c
                .running
                .then(|| format!("127.0.0.1:{}", crate::AGENT_PORT)),
        }))
    }

    async fn list_managed(&self) -> RuntimeResult<Vec<ManagedContainer>> {
        self.check_available()?;
        Ok(self
            .state()
            .containers
            .iter()
            .map(|(id, c)| ManagedContainer {
                container_id: c.container_id.clone(),
                sandbox_id: Some(id.clone()),
                instance_id: Some(c.spec.instance_id.as_str().to_owned()),
                running: c.running,
                paused: c.paused,
                pool_class: c.pool_class.clone(),
                agent: c.agent(),
            })
            .collect())
    }

    /// A fake container has no network of its own: a running one is "at"
    /// the host's loopback, so a test can serve its ports from a local
    /// listener. As on Docker, a sandbox without network access has an
    /// address too (on Stockade's internal network, reachable from the host
    /// only).
    async fn container_address(&self, id: &SandboxId) -> RuntimeResult<Option<std::net::IpAddr>> {
        self.check_available()?;
        let st = self.state();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| RuntimeError::NotFound(format!("no container for sandbox {id}")))?;
        Ok(c.running.then_some(std::net::Ipv4Addr::LOCALHOST.into()))
    }

    /// A running container reports its memory limit, one process, 1 MiB in
    /// use and no CPU or network traffic; a stopped or missing one `None`.
    async fn stats(&self, id: &SandboxId) -> RuntimeResult<Option<ContainerStats>> {
        self.check_available()?;
        Ok(self
            .state()
            .containers
            .get(id)
            .filter(|c| c.running)
            .map(|c| ContainerStats {
                cpu_percent: Some(0.0),
                memory_bytes: 1024 * 1024,
                memory_limit_bytes: u64::try_from(c.spec.memory_bytes).unwrap_or_default(),
                network_rx_bytes: 0,
                network_tx_bytes: 0,
                pids: 1,
            }))
    }
}

#[async_trait]
impl Lifecycle for FakeRuntime {
    async fn ensure_image(&self, image: &str) -> RuntimeResult<()> {
        self.check_available()?;
        if self.state().missing_images.contains(image) {
            return Err(RuntimeError::ImageUnavailable {
                image: image.to_owned(),
                reason: "pull access denied or no such image in the registry (fake)".into(),
            });
        }
        Ok(())
    }

    async fn image_present(&self, image: &str) -> RuntimeResult<bool> {
        self.check_available()?;
        // The fake has every image but the ones marked missing (they cannot
        // be pulled either), and the snapshot images it committed or loaded.
        let st = self.state();
        if image.starts_with(&format!("{}:", stockade_core::Snapshot::IMAGE_REPO)) {
            return Ok(st.images.contains_key(image));
        }
        Ok(!st.missing_images.contains(image))
    }

    async fn create(&self, spec: &ContainerSpec) -> RuntimeResult<String> {
        self.create_labelled(spec, None).await
    }

    async fn create_pool_member(&self, member: &PoolMemberSpec) -> RuntimeResult<String> {
        self.create_labelled(&member.container_spec(), Some(member.class.clone()))
            .await
    }

    async fn start(&self, id: &SandboxId) -> RuntimeResult<()> {
        self.check_available()?;
        let mut st = self.state();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found(id))?;
        if !c.running {
            c.running = true;
            c.started_at = Some(Utc::now());
            c.exit_code = None;
        }
        Ok(())
    }

    async fn stop(&self, id: &SandboxId, grace: Duration) -> RuntimeResult<()> {
        self.check_available()?;
        let mut st = self.state();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found(id))?;
        c.stops.push(grace);
        if c.running {
            c.running = false;
            c.paused = false;
            c.finished_at = Some(Utc::now());
            c.exit_code = Some(0);
        }
        Ok(())
    }

    async fn pause(&self, id: &SandboxId) -> RuntimeResult<()> {
        self.set_paused(id, true)
    }

    async fn unpause(&self, id: &SandboxId) -> RuntimeResult<()> {
        self.set_paused(id, false)
    }

    async fn remove(&self, id: &SandboxId, preserve_volume: bool) -> RuntimeResult<()> {
        let mut st = self.state_unless(|st| &mut st.fail_remove)?;
        st.containers.remove(id);
        if !preserve_volume {
            st.volumes.remove(id);
        }
        Ok(())
    }
}

impl FakeRuntime {
    /// Freezes or thaws a running container.
    fn set_paused(&self, id: &SandboxId, paused: bool) -> RuntimeResult<()> {
        self.check_available()?;
        let mut st = self.state();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found(id))?;
        if !c.running {
            return Err(RuntimeError::Conflict(format!(
                "the container of sandbox {id} is not running"
            )));
        }
        c.paused = paused;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use stockade_core::{AccountId, InstanceId};

    use super::*;
    use crate::prelude::*;
    use crate::{ExecEvent, ExecExit, LogsOptions};

    /// A fake runtime with one sandbox created (and running).
    async fn created() -> (FakeRuntime, ContainerSpec) {
        let rt = FakeRuntime::new();
        let s = spec();
        rt.create(&s).await.unwrap();
        (rt, s)
    }

    fn spec() -> ContainerSpec {
        ContainerSpec {
            sandbox_id: SandboxId::generate(),
            account_id: AccountId::generate(),
            instance_id: InstanceId::generate(),
            image: "busybox:latest".into(),
            command: vec!["sleep".into(), "infinity".into()],
            env: BTreeMap::new(),
            cpu_cores: 1.0,
            memory_bytes: 512 << 20,
            network_access: true,
            hostname: "sbx".into(),
            agent_token: None,
            disk_bytes: None,
            mounts: Vec::new(),
            workspace_volume: true,
        }
    }

    #[tokio::test]
    async fn lifecycle() {
        let rt = FakeRuntime::new();
        let s = spec();
        let id = &s.sandbox_id;
        let cid = rt.create(&s).await.unwrap();
        let st = rt.inspect(id).await.unwrap().unwrap();
        assert_eq!(st.container_id, cid);
        assert!(st.running);
        assert!(rt.has_volume(&VolumeName::for_sandbox(id)));

        rt.start(id).await.unwrap(); // already running: fine
        rt.stop(id, Duration::from_secs(30)).await.unwrap();
        rt.stop(id, Duration::from_secs(30)).await.unwrap(); // already stopped: fine
        let st = rt.inspect(id).await.unwrap().unwrap();
        assert!(!st.running);
        assert_eq!(st.exit_code, Some(0));
        assert_eq!(rt.container(id).unwrap().stops.len(), 2);
        rt.start(id).await.unwrap();
        assert!(rt.inspect(id).await.unwrap().unwrap().running);

        assert!(matches!(
            rt.create(&s).await,
            Err(RuntimeError::Conflict(_))
        ));

        rt.remove(id, true).await.unwrap();
        assert!(rt.inspect(id).await.unwrap().is_none());
        assert!(rt.has_volume(&VolumeName::for_sandbox(id)));
        rt.remove(id, false).await.unwrap(); // container gone already: fine
        assert!(!rt.has_volume(&VolumeName::for_sandbox(id)));
    }

    #[tokio::test]
    async fn agents_are_recorded_and_reported() {
        let rt = FakeRuntime::new();
        let plain = spec();
        rt.create(&plain).await.unwrap();
        let mut with = spec();
        with.agent_token = Some("tok-1".into());
        rt.create(&with).await.unwrap();
        let member = PoolMemberSpec {
            sandbox_id: SandboxId::generate(),
            instance_id: InstanceId::generate(),
            class: "c".into(),
            image: "busybox:latest".into(),
            cpu_cores: 1.0,
            memory_bytes: 512 << 20,
            network_access: false,
            agent_token: Some("tok-2".into()),
            disk_bytes: None,
        };
        rt.create_pool_member(&member).await.unwrap();

        assert_eq!(rt.agent_token(&plain.sandbox_id), None);
        assert_eq!(rt.agent_token(&with.sandbox_id).as_deref(), Some("tok-1"));
        assert_eq!(rt.agent_token(&member.sandbox_id).as_deref(), Some("tok-2"));
        let version = Some(crate::agent_version().to_owned());
        assert_eq!(
            rt.inspect(&plain.sandbox_id).await.unwrap().unwrap().agent,
            None
        );
        assert_eq!(
            rt.inspect(&with.sandbox_id).await.unwrap().unwrap().agent,
            version
        );
        let listed = rt.list_managed().await.unwrap();
        let agent_of = |id: &SandboxId| {
            listed
                .iter()
                .find(|c| c.sandbox_id.as_ref() == Some(id))
                .unwrap()
                .agent
                .clone()
        };
        assert_eq!(agent_of(&plain.sandbox_id), None);
        assert_eq!(agent_of(&with.sandbox_id), version);
        assert_eq!(agent_of(&member.sandbox_id), version);

        // The token never shows in Debug output.
        let shown = format!("{with:?} {member:?} {:?}", rt.container(&with.sandbox_id));
        assert!(!shown.contains("tok-"), "{shown}");
        assert!(shown.contains("<redacted>"));

        let mut bad = spec();
        bad.agent_token = Some("has space".into());
        match rt.create(&bad).await {
            Err(RuntimeError::Other(m)) => assert!(m.contains("agent_token"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(rt.container(&bad.sandbox_id).is_none());
    }

    #[tokio::test]
    async fn missing_containers_are_not_found() {
        let rt = FakeRuntime::new();
        let id = SandboxId::generate();
        assert!(matches!(
            rt.start(&id).await,
            Err(RuntimeError::NotFound(_))
        ));
        assert!(matches!(
            rt.stop(&id, Duration::ZERO).await,
            Err(RuntimeError::NotFound(_))
        ));
        let echo = ExecSpec {
            argv: vec!["echo".into()],
            ..Default::default()
        };
        assert!(matches!(
            rt.exec(&id, echo).await,
            Err(RuntimeError::NotFound(_))
        ));
        assert!(rt.inspect(&id).await.unwrap().is_none());
        rt.remove(&id, false).await.unwrap();
    }

    #[tokio::test]
    async fn injected_failures_fire_once_and_leave_nothing() {
        let rt = FakeRuntime::new();
        let s = spec();
        rt.fail_next_create("boom");
        match rt.create(&s).await {
            Err(RuntimeError::Other(m)) => assert_eq!(m, "boom"),
            other => panic!("{other:?}"),
        }
        assert!(rt.containers().is_empty());
        assert!(rt.volume_names().is_empty());
        rt.create(&s).await.unwrap();

        rt.fail_next_remove("nope");
        assert!(rt.remove(&s.sandbox_id, false).await.is_err());
        assert!(rt.container(&s.sandbox_id).is_some());
        rt.remove(&s.sandbox_id, false).await.unwrap();
    }

    #[tokio::test]
    async fn unavailable_fails_everything_until_back() {
        let rt = FakeRuntime::new();
        rt.set_unavailable(true);
        assert!(matches!(rt.info().await, Err(RuntimeError::Unavailable(_))));
        assert!(matches!(
            rt.create(&spec()).await,
            Err(RuntimeError::Unavailable(_))
        ));
        assert!(matches!(
            rt.list_volumes().await,
            Err(RuntimeError::Unavailable(_))
        ));
        rt.set_unavailable(false);
        assert!(rt.info().await.is_ok());
    }

    #[tokio::test]
    async fn missing_image_creates_nothing() {
        let rt = FakeRuntime::new();
        let mut s = spec();
        s.image = "nope:1".into();
        rt.set_image_missing("nope:1");
        assert!(matches!(
            rt.create(&s).await,
            Err(RuntimeError::ImageUnavailable { .. })
        ));
        assert!(rt.containers().is_empty() && rt.volume_names().is_empty());
    }

    #[tokio::test]
    async fn exec_builtins_queue_and_handler() {
        let (rt, s) = created().await;
        let id = &s.sandbox_id;
        let run = |argv: &[&str]| ExecSpec {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        };
        let out = rt.exec(id, run(&["echo", "hi", "there"])).await.unwrap();
        assert_eq!(out.stdout, b"hi there\n");
        assert_eq!(out.exit_code, Some(0));
        let out = rt.exec(id, run(&["sh", "-c", "exit 7"])).await.unwrap();
        assert_eq!(out.exit_code, Some(7));
        let mut cat = run(&["cat"]);
        cat.stdin = Some(b"abcdef".to_vec());
        cat.max_output_bytes = 3;
        let out = rt.exec(id, cat).await.unwrap();
        assert_eq!(out.stdout, b"abc");
        assert!(out.truncated);

        rt.push_exec_result(ExecOutput {
            exit_code: None,
            stdout: vec![],
            stderr: vec![],
            timed_out: true,
            truncated: false,
        });
        assert!(rt.exec(id, run(&["sleep", "9"])).await.unwrap().timed_out);

        rt.set_exec_handler(|_, spec| ExecOutput {
            exit_code: Some(spec.argv.len() as i64),
            stdout: vec![],
            stderr: b"handled".to_vec(),
            timed_out: false,
            truncated: false,
        });
        let out = rt.exec(id, run(&["a", "b"])).await.unwrap();
        assert_eq!(
            (out.exit_code, out.stderr.as_slice()),
            (Some(2), &b"handled"[..])
        );
        assert_eq!(rt.exec_calls().len(), 5);

        rt.stop(id, Duration::ZERO).await.unwrap();
        assert!(matches!(
            rt.exec(id, run(&["true"])).await,
            Err(RuntimeError::Conflict(m)) if m == "sandbox is not running"
        ));
    }

    #[tokio::test]
    async fn logs_and_streamed_execs() {
        use futures_util::StreamExt;
        let (rt, s) = created().await;
        let id = &s.sandbox_id;
        for i in 0..5 {
            rt.push_log(id, LogStream::Stdout, format!("line {i}"));
        }
        rt.push_log(id, LogStream::Stderr, "oops");
        let opts = LogsOptions {
            tail: Some(2),
            ..Default::default()
        };
        let lines: Vec<_> = rt.logs(id, opts).await.unwrap().collect().await;
        let lines: Vec<_> = lines.into_iter().map(Result::unwrap).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            (lines[0].stream, lines[0].text.as_str()),
            (LogStream::Stdout, "line 4")
        );
        assert_eq!(
            (lines[1].stream, lines[1].text.as_str()),
            (LogStream::Stderr, "oops")
        );

        let mut p = rt
            .exec_start(
                id,
                ExecSpec {
                    argv: vec!["echo".into(), "hi".into()],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(p.next().await, Some(ExecEvent::Stdout("hi\n".into())));
        assert_eq!(
            p.next().await,
            Some(ExecEvent::Exit(ExecExit {
                exit_code: Some(0),
                ..Default::default()
            }))
        );
        assert_eq!(p.next().await, None);
        rt.exec_kill(id, p.exec_id()).await.unwrap();

        rt.stop(id, Duration::ZERO).await.unwrap();
        assert!(matches!(
            rt.exec_start(
                id,
                ExecSpec {
                    argv: vec!["true".into()],
                    ..Default::default()
                }
            )
            .await,
            Err(RuntimeError::Conflict(_))
        ));
        let other = SandboxId::generate();
        assert!(matches!(
            rt.logs(&other, LogsOptions::default()).await,
            Err(RuntimeError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn volumes_in_use_conflict() {
        let rt = FakeRuntime::new();
        let s = spec();
        rt.create(&s).await.unwrap();
        let vol = VolumeName::for_sandbox(&s.sandbox_id);
        rt.set_volume_size(&vol, 1234);
        let listed = rt.list_volumes().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].size_bytes, Some(1234));
        assert_eq!(
            listed[0].instance_id.as_deref(),
            Some(s.instance_id.as_str())
        );
        assert!(matches!(
            rt.remove_volume(&vol).await,
            Err(RuntimeError::Conflict(m)) if m == "Volume is in use by running sandbox"
        ));
        rt.remove(&s.sandbox_id, true).await.unwrap();
        rt.remove_volume(&vol).await.unwrap();
        assert!(matches!(
            rt.remove_volume(&vol).await,
            Err(RuntimeError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn cancelled_create_leaves_nothing() {
        let rt = FakeRuntime::new();
        rt.set_create_delay(Duration::from_secs(5));
        let s = spec();
        let res = tokio::time::timeout(Duration::from_millis(20), rt.create(&s)).await;
        assert!(res.is_err());
        assert!(rt.containers().is_empty() && rt.volume_names().is_empty());
    }

    #[tokio::test]
    async fn stats_of_running_containers_only() {
        let rt = FakeRuntime::new();
        let s = spec();
        let id = s.sandbox_id.clone();
        assert_eq!(rt.stats(&id).await.unwrap(), None);
        rt.create(&s).await.unwrap();
        let stats = rt.stats(&id).await.unwrap().unwrap();
        assert_eq!(stats.memory_limit_bytes, 512 << 20);
        assert_eq!(stats.pids, 1);
        rt.stop(&id, Duration::from_secs(1)).await.unwrap();
        assert_eq!(rt.stats(&id).await.unwrap(), None);
        rt.set_unavailable(true);
        assert!(matches!(
            rt.stats(&id).await,
            Err(RuntimeError::Unavailable(_))
        ));
    }

    #[tokio::test]
    async fn external_changes_are_visible() {
        let rt = FakeRuntime::with_server_name("edge-1");
        assert_eq!(rt.server_name(), "edge-1");
        let s = spec();
        rt.create(&s).await.unwrap();
        rt.exit_container(&s.sandbox_id, 137);
        let st = rt.inspect(&s.sandbox_id).await.unwrap().unwrap();
        assert!(!st.running);
        assert_eq!(st.exit_code, Some(137));
        assert_eq!(rt.list_managed().await.unwrap().len(), 1);
        rt.remove_container_externally(&s.sandbox_id);
        assert!(rt.list_managed().await.unwrap().is_empty());
        assert!(rt.has_volume(&VolumeName::for_sandbox(&s.sandbox_id)));
    }

    #[tokio::test]
    async fn container_address_follows_state() {
        let rt = FakeRuntime::new();
        let s = spec();
        let id = s.sandbox_id.clone();
        assert!(matches!(
            rt.container_address(&id).await,
            Err(RuntimeError::NotFound(_))
        ));
        rt.create(&s).await.unwrap();
        assert_eq!(
            rt.container_address(&id).await.unwrap(),
            Some(std::net::Ipv4Addr::LOCALHOST.into())
        );
        rt.stop(&id, Duration::ZERO).await.unwrap();
        assert_eq!(rt.container_address(&id).await.unwrap(), None);
        let mut offline = spec();
        offline.network_access = false;
        rt.create(&offline).await.unwrap();
        assert_eq!(
            rt.container_address(&offline.sandbox_id).await.unwrap(),
            Some(std::net::Ipv4Addr::LOCALHOST.into())
        );
    }

    #[tokio::test]
    async fn host_size_and_isolation_reports_are_settable() {
        let rt = FakeRuntime::new();
        let info = rt.info().await.unwrap();
        assert_eq!(
            (info.cpus, info.memory_bytes),
            (FAKE_HOST_CPUS, FAKE_HOST_MEMORY_BYTES)
        );
        rt.set_host_size(2, 1 << 30);
        let info = rt.info().await.unwrap();
        assert_eq!((info.cpus, info.memory_bytes), (2, 1 << 30));

        assert_eq!(
            rt.ensure_isolation().await.status(),
            crate::IsolationStatus::Ok
        );
        rt.set_isolation_problem(Some("iptables not found".into()));
        let report = rt.ensure_isolation().await;
        assert_eq!(report.status(), crate::IsolationStatus::Degraded);
        assert_eq!(report.problems, ["iptables not found"]);
        rt.set_unavailable(true);
        assert_eq!(
            rt.ensure_isolation().await.status(),
            crate::IsolationStatus::Degraded
        );
        assert_eq!(rt.isolation_checks(), 3);
    }
}
