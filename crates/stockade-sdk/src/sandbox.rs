//! `Sandbox`: create, find, resume, stop and delete sandboxes; scoped use
//! that stops a sandbox when its scope ends.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use reqwest::Method;
use stockade_api::shared_volumes::VolumeMountRequest;
use stockade_api::{
    CreateSandboxRequest, LifecycleRequest, ListSandboxesResponse, SandboxResponse, SandboxSource,
    UpdateSandboxRequest, UpdateSandboxResponse,
};
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::error::Error;

/// Most ports a sandbox may declare at creation.
pub const MAX_PORTS: usize = 4;
/// Most tags a sandbox may carry.
pub const MAX_TAGS: usize = 5;
/// Memory per vCPU when sizing with [`CreateParams::vcpus`].
pub const MB_PER_VCPU: f64 = 2048.0;

/// Egress policy.
///
/// ```no_run
/// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
/// use stockade_sdk::{CreateParams, NetworkPolicy, Sandbox};
/// let only_pypi = NetworkPolicy::Lists {
///     allow: vec!["pypi.org".into(), "*.pythonhosted.org".into()],
///     deny: vec![],
/// };
/// let sb = Sandbox::create(&client, CreateParams::new().network_policy(only_pypi)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkPolicy {
    AllowAll,
    DenyAll,
    /// Entries are IPv4/IPv6 addresses or CIDRs, names and `*.` wildcard
    /// names, each with an optional `:port`. A `deny` entry wins; with an
    /// `allow` list only what it lists is reachable, without one
    /// everything not denied is.
    Lists {
        allow: Vec<String>,
        deny: Vec<String>,
    },
}

impl NetworkPolicy {
    /// The policy as the API's `networkPolicy` takes it (an empty list is
    /// left out).
    fn to_api(&self) -> serde_json::Value {
        match self {
            Self::AllowAll => "allow-all".into(),
            Self::DenyAll => "deny-all".into(),
            Self::Lists { allow, deny } => {
                let mut lists = serde_json::Map::new();
                if !allow.is_empty() {
                    lists.insert("allow".into(), allow.clone().into());
                }
                if !deny.is_empty() {
                    lists.insert("deny".into(), deny.clone().into());
                }
                lists.into()
            }
        }
    }
}

/// What a new sandbox's `/workspace` starts from. The server
/// fetches it and unpacks it before the sandbox starts; a failure leaves
/// nothing behind.
///
/// ```no_run
/// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
/// use stockade_sdk::{CreateParams, Sandbox, Source};
/// let params = CreateParams::new().source(Source::Git {
///     url: "https://github.com/octocat/Hello-World.git".into(),
///     git_ref: Some("master".into()),
/// });
/// let sb = Sandbox::create(&client, params).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A git repository cloned by the server (`https://`, `http://`,
    /// `git://`); `git_ref` is a branch, tag or commit (default: the
    /// remote's default branch).
    Git {
        url: String,
        git_ref: Option<String>,
    },
    /// A tar archive (plain or compressed) downloaded by the server.
    Tarball { url: String },
    /// A snapshot of yours: its root filesystem and `/workspace`.
    Snapshot { id: String },
    /// An archive uploaded with [`Client::upload`]; usable once.
    Upload { id: String },
}

impl Source {
    fn to_api(&self) -> SandboxSource {
        match self.clone() {
            Source::Git { url, git_ref } => SandboxSource::Git { url, git_ref },
            Source::Tarball { url } => SandboxSource::Tarball { url },
            Source::Snapshot { id } => SandboxSource::Snapshot { snapshot_id: id },
            Source::Upload { id } => SandboxSource::Upload { upload_id: id },
        }
    }
}

/// Everything a sandbox can be created with. Build it with the chained
/// setters; unset fields take the server's defaults.
#[derive(Debug, Clone, Default)]
pub struct CreateParams {
    pub name: Option<String>,
    pub image: Option<String>,
    pub runtime: Option<String>,
    pub template: Option<String>,
    pub start_command: Option<String>,
    pub ports: Vec<u16>,
    pub timeout: Option<Duration>,
    pub vcpus: Option<f64>,
    pub cpu_cores: Option<f64>,
    pub memory_gb: Option<f64>,
    pub disk_size_gb: Option<u32>,
    pub network_policy: Option<NetworkPolicy>,
    pub env: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    pub labels: Vec<String>,
    pub persistent: Option<bool>,
    pub team_id: Option<String>,
    /// What `/workspace` starts from.
    pub source: Option<Source>,
    /// The Docker host to run on, by name; any host with room when unset.
    pub server: Option<String>,
    /// Labels the Docker host must carry.
    pub host_selector: BTreeMap<String, String>,
    /// Shared volumes to mount; the sandbox is placed on their Docker host.
    pub volume_mounts: Vec<VolumeMountRequest>,
    /// What the end of a session does (`"kill"`, `"stop"` or `"pause"`).
    pub on_timeout: Option<String>,
    /// A paused sandbox is resumed when it is used.
    pub auto_resume: Option<bool>,
    /// The session ends after this long without any use.
    pub idle_timeout: Option<Duration>,
    /// Makes a retried create return the first result (`Idempotency-Key`).
    pub idempotency_key: Option<String>,
    /// Cancels the create; the server then removes whatever it made.
    pub cancel: Option<CancellationToken>,
}

impl CreateParams {
    new_and_setters! {
        /// Runs on the Docker host `server` (see the hosts an administrator
        /// registered).
        server(server: impl Into<String>) => server = server.into();
        name(name: impl Into<String>) => name = name.into();
        image(image: impl Into<String>) => image = image.into();
        /// A runtime preset the server maps to an image (`node22`, `python3.13`, …).
        runtime(runtime: impl Into<String>) => runtime = runtime.into();
        /// A template to run, by id or name (`name:tag` for a tagged build).
        template(template: impl Into<String>) => template = template.into();
        start_command(cmd: impl Into<String>) => start_command = cmd.into();
        /// Session timeout: the sandbox is stopped (or terminated, if not
        /// persistent) when it expires.
        timeout(timeout: Duration) => timeout = timeout;
        /// `vcpus` cores and 2048 MB of memory per vCPU.
        vcpus(vcpus: f64) => vcpus = vcpus;
        cpu_cores(cores: f64) => cpu_cores = cores;
        memory_gb(gb: f64) => memory_gb = gb;
        disk_size_gb(gb: u32) => disk_size_gb = gb;
        network_policy(policy: NetworkPolicy) => network_policy = policy;
        persistent(persistent: bool) => persistent = persistent;
        /// What the end of a session (timeout or idle timeout) does:
        /// `"kill"`, `"stop"` (files kept) or `"pause"` (frozen, processes
        /// kept).
        on_timeout(action: impl Into<String>) => on_timeout = action.into();
        /// A paused sandbox that gets a command, a terminal, a file call, a
        /// code cell or a request to one of its ports is resumed first.
        auto_resume(auto_resume: bool) => auto_resume = auto_resume;
        /// The session ends after this long without any such use.
        idle_timeout(idle: Duration) => idle_timeout = idle;
        team(team_id: impl Into<String>) => team_id = team_id.into();
        /// What `/workspace` starts from: a git repository, a tarball, a
        /// snapshot or an upload.
        ///
        /// ```no_run
        /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
        /// use stockade_sdk::{CreateParams, Sandbox, Source};
        /// let from_tarball = CreateParams::new().source(Source::Tarball {
        ///     url: "https://example.com/site.tar.gz".into(),
        /// });
        /// let sb = Sandbox::create(&client, from_tarball).await?;
        /// # Ok(()) }
        /// ```
        source(source: Source) => source = source;
        idempotency_key(key: impl Into<String>) => idempotency_key = key.into();
        cancel_token(token: CancellationToken) => cancel = token;
    }
    /// Runs on a Docker host labelled `key=value` (several: all of them).
    pub fn host_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.host_selector.insert(key.into(), value.into());
        self
    }
    pub fn port(mut self, port: u16) -> Self {
        self.ports.push(port);
        self
    }
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.insert(key.into(), value.into());
        self
    }
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.labels.push(label.into());
        self
    }

    /// Mounts the shared volume `volume` (its name or id) read-write at
    /// `path`, an absolute path in the sandbox.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{CreateParams, Sandbox};
    /// let params = CreateParams::new()
    ///     .mount("datasets", "/data")
    ///     .mount_read_only("models", "/models");
    /// let sb = Sandbox::create(&client, params).await?;
    /// sb.run_command("ls /data /models").await?;
    /// # Ok(()) }
    /// ```
    pub fn mount(self, volume: impl Into<String>, path: impl Into<String>) -> Self {
        self.mount_with(volume.into(), path.into(), false)
    }

    /// Mounts the shared volume `volume` read-only at `path`.
    pub fn mount_read_only(self, volume: impl Into<String>, path: impl Into<String>) -> Self {
        self.mount_with(volume.into(), path.into(), true)
    }

    fn mount_with(mut self, volume: String, path: String, read_only: bool) -> Self {
        self.volume_mounts.push(VolumeMountRequest {
            volume,
            path,
            read_only: read_only.then_some(true),
        });
        self
    }

    /// Client-side checks of the seed's limits (the server checks again).
    fn validate(&self) -> Result<(), Error> {
        if self.ports.len() > MAX_PORTS {
            return Err(Error::invalid(
                "ports",
                format!("at most {MAX_PORTS} ports (got {})", self.ports.len()),
            ));
        }
        if self.ports.contains(&0) {
            return Err(Error::invalid("ports", "port 0 is not a port"));
        }
        if self.tags.len() > MAX_TAGS {
            return Err(Error::invalid(
                "tags",
                format!("at most {MAX_TAGS} tags (got {})", self.tags.len()),
            ));
        }
        if let Some(v) = self.vcpus {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid(
                    "resources.vcpus",
                    "must be a positive number",
                ));
            }
            if self.cpu_cores.is_some() || self.memory_gb.is_some() {
                return Err(Error::invalid(
                    "resources.vcpus",
                    "give either vcpus or cpu_cores/memory_gb, not both",
                ));
            }
        }
        Ok(())
    }

    fn to_request(&self) -> CreateSandboxRequest {
        let (cpu, mem) = match self.vcpus {
            Some(v) => (Some(v), Some(v * MB_PER_VCPU / 1024.0)),
            None => (self.cpu_cores, self.memory_gb),
        };
        CreateSandboxRequest {
            name: self.name.clone(),
            docker_image: self.image.clone(),
            runtime: self.runtime.clone(),
            template: self.template.clone(),
            start_command: self.start_command.clone(),
            cpu_cores: cpu,
            memory_gb: mem,
            disk_size_gb: self.disk_size_gb.map(f64::from),
            gpu_count: None,
            network_access: match &self.network_policy {
                Some(NetworkPolicy::AllowAll) => Some(true),
                Some(NetworkPolicy::DenyAll) => Some(false),
                Some(NetworkPolicy::Lists { .. }) | None => None,
            },
            network_policy: match &self.network_policy {
                Some(lists @ NetworkPolicy::Lists { .. }) => Some(lists.to_api()),
                _ => None,
            },
            timeout_minutes: self.timeout.map(|t| t.as_secs_f64() / 60.0),
            environment_vars: (!self.env.is_empty()).then(|| self.env.clone()),
            labels: (!self.labels.is_empty()).then(|| self.labels.clone()),
            tags: (!self.tags.is_empty()).then(|| self.tags.clone()),
            ports: (!self.ports.is_empty())
                .then(|| self.ports.iter().map(|p| i64::from(*p)).collect()),
            persistent: self.persistent,
            team_id: self.team_id.clone(),
            source: self.source.as_ref().map(Source::to_api),
            server: self.server.clone(),
            host_selector: (!self.host_selector.is_empty()).then(|| self.host_selector.clone()),
            lifecycle: (self.on_timeout.is_some()
                || self.auto_resume.is_some()
                || self.idle_timeout.is_some())
            .then(|| LifecycleRequest {
                on_timeout: self.on_timeout.clone(),
                auto_resume: self.auto_resume,
                idle_timeout_minutes: self.idle_timeout.map(|d| d.as_secs_f64() / 60.0),
            }),
            volume_mounts: (!self.volume_mounts.is_empty()).then(|| self.volume_mounts.clone()),
        }
    }
}

/// The settings [`Sandbox::update`] changes. Fields left unset stay as they
/// are; `labels`, `tags` and `env` given replace the current ones whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateParams {
    pub name: Option<String>,
    /// Session timeout (`Duration::ZERO` = never).
    pub timeout: Option<Duration>,
    pub labels: Option<Vec<String>>,
    pub tags: Option<BTreeMap<String, String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub cpu_cores: Option<f64>,
    pub memory_gb: Option<f64>,
    /// The new egress policy, applied live to a running sandbox.
    pub network_policy: Option<NetworkPolicy>,
}

impl UpdateParams {
    new_and_setters! {
        network_policy(policy: NetworkPolicy) => network_policy = policy;
        name(name: impl Into<String>) => name = name.into();
        timeout(timeout: Duration) => timeout = timeout;
        /// The new tags (empty removes them all).
        tags(tags: BTreeMap<String, String>) => tags = tags;
        /// The new environment (empty removes every variable).
        env_vars(env: BTreeMap<String, String>) => env = env;
        cpu_cores(cores: f64) => cpu_cores = cores;
        memory_gb(gb: f64) => memory_gb = gb;
    }
    /// Adds a label to the new list of labels.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.labels.get_or_insert_with(Vec::new).push(label.into());
        self
    }
    /// The new labels (an empty list removes them all).
    pub fn labels<I, S>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.labels = Some(labels.into_iter().map(Into::into).collect());
        self
    }
    /// Adds a tag to the new set of tags (at most 5).
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }
    /// Adds a variable to the new environment.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }
    /// `vcpus` cores and 2048 MB of memory per vCPU.
    pub fn vcpus(mut self, vcpus: f64) -> Self {
        self.cpu_cores = Some(vcpus);
        self.memory_gb = Some(vcpus * MB_PER_VCPU / 1024.0);
        self
    }

    fn to_request(&self) -> Result<UpdateSandboxRequest, Error> {
        if self.tags.as_ref().is_some_and(|t| t.len() > MAX_TAGS) {
            return Err(Error::invalid("tags", format!("at most {MAX_TAGS} tags")));
        }
        let req = UpdateSandboxRequest {
            name: self.name.clone(),
            timeout_minutes: self.timeout.map(|t| t.as_secs_f64() / 60.0),
            labels: self.labels.clone(),
            tags: self.tags.clone(),
            environment_vars: self.env.clone(),
            cpu_cores: self.cpu_cores,
            memory_gb: self.memory_gb,
            network_policy: self.network_policy.as_ref().map(NetworkPolicy::to_api),
        };
        if req.patch().is_empty() {
            return Err(Error::invalid(
                "update",
                "nothing to update: set at least one field",
            ));
        }
        Ok(req)
    }
}

/// Filters for [`Sandbox::list`].
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    pub statuses: Vec<String>,
    pub labels: Vec<String>,
    pub name: Option<String>,
    pub team_id: Option<String>,
    /// `Some(false)` lists terminated sandboxes.
    pub is_active: Option<bool>,
    pub page: Option<u32>,
    pub per_page: Option<u32>,
}

/// One page of [`Sandbox::list`].
#[derive(Debug, Clone)]
pub struct SandboxPage {
    pub sandboxes: Vec<Sandbox>,
    pub total: u64,
    pub page: u32,
    pub per_page: u32,
    pub has_next: bool,
}

/// Options of [`Sandbox::delete_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteOptions {
    /// Keep the `/workspace` volume.
    pub preserve_volume: bool,
    /// Upload `/workspace` to the server's object store first; if
    /// that fails nothing is deleted.
    pub sync: bool,
}

/// A sandbox on a Stockade server.
#[derive(Debug, Clone)]
pub struct Sandbox {
    client: Client,
    info: SandboxResponse,
}

/// Ids of sandboxes, snapshots and processes: 12 characters from `[a-z0-9]`.
pub(crate) fn looks_like_id(s: &str) -> bool {
    s.len() == 12
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn not_found(name_or_id: &str) -> Error {
    Error::Api {
        status: 404,
        code: "not_found".into(),
        message: format!("Sandbox not found: no sandbox with id or name '{name_or_id}'"),
        details: None,
    }
}

impl Sandbox {
    /// Creates a sandbox and returns it RUNNING. Dropping the returned future
    /// or cancelling [`CreateParams::cancel`] abandons the create; the server
    /// then removes what it made.
    pub async fn create(client: &Client, params: CreateParams) -> Result<Sandbox, Error> {
        params.validate()?;
        let mut req = client
            .request(Method::POST, "/api/v1/sandbox")
            .json(&params.to_request());
        if let Some(key) = &params.idempotency_key {
            req = req.header("Idempotency-Key", key);
        }
        let fut = client.send::<SandboxResponse>(req);
        let info = match &params.cancel {
            Some(token) => tokio::select! {
                r = fut => r?,
                _ = token.cancelled() => return Err(Error::Cancelled),
            },
            None => fut.await?,
        };
        Ok(Sandbox {
            client: client.clone(),
            info,
        })
    }

    /// A sandbox by id or name. A stopped sandbox is started again, so the
    /// result is running ("session resumed"). A name only finds a live
    /// sandbox (see [`Sandbox::find_live`]).
    pub async fn get(client: &Client, name_or_id: &str) -> Result<Sandbox, Error> {
        let mut sb = Self::find_live(client, name_or_id).await?;
        if sb.info.status == stockade_api::SandboxStatus::Stopped {
            sb.start().await?;
        }
        Ok(sb)
    }

    /// A sandbox by id or name, as it is (not resumed). A name finds the
    /// live sandbox with that name first, else the most recently terminated
    /// one (names are unique among live sandboxes only); an id finds the
    /// sandbox whatever its status.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::Sandbox;
    /// let sb = Sandbox::find(&client, "nightly").await?;
    /// println!("{} is {}", sb.id(), sb.status()); // TERMINATED if only a removed one has that name
    /// # Ok(()) }
    /// ```
    pub async fn find(client: &Client, name_or_id: &str) -> Result<Sandbox, Error> {
        if let Some(sb) = Self::lookup(client, name_or_id).await? {
            return Ok(sb);
        }
        let page = Self::list(
            client,
            ListParams {
                name: Some(name_or_id.to_owned()),
                is_active: Some(false),
                per_page: Some(1),
                ..Default::default()
            },
        )
        .await?;
        page.sandboxes
            .into_iter()
            .next()
            .ok_or_else(|| not_found(name_or_id))
    }

    /// A live (not terminated) sandbox by name, or any sandbox by id, as it
    /// is; unlike [`Sandbox::find`] a name never finds a terminated one.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::Sandbox;
    /// match Sandbox::find_live(&client, "nightly").await {
    ///     Ok(sb) => println!("{} is {}", sb.id(), sb.status()),
    ///     Err(e) if e.is_not_found() => println!("free to create"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn find_live(client: &Client, name_or_id: &str) -> Result<Sandbox, Error> {
        Self::lookup(client, name_or_id)
            .await?
            .ok_or_else(|| not_found(name_or_id))
    }

    /// By id (when it looks like one), else the live sandbox with that name.
    async fn lookup(client: &Client, name_or_id: &str) -> Result<Option<Sandbox>, Error> {
        if looks_like_id(name_or_id) {
            match Self::by_id(client, name_or_id).await {
                Ok(sb) => return Ok(Some(sb)),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let page = Self::list(
            client,
            ListParams {
                name: Some(name_or_id.to_owned()),
                per_page: Some(1),
                ..Default::default()
            },
        )
        .await?;
        Ok(page.sandboxes.into_iter().next())
    }

    pub(crate) fn from_info(client: &Client, info: SandboxResponse) -> Sandbox {
        Sandbox {
            client: client.clone(),
            info,
        }
    }

    async fn by_id(client: &Client, id: &str) -> Result<Sandbox, Error> {
        let info = client
            .send::<SandboxResponse>(client.request(Method::GET, &format!("/api/v1/sandbox/{id}")))
            .await?;
        Ok(Sandbox {
            client: client.clone(),
            info,
        })
    }

    /// Returns the sandbox named `params.name`, resumed, or creates it and
    /// runs `on_create` on it. Among concurrent callers exactly one creates
    /// (the server's unique name decides) and runs `on_create`; the others
    /// get the same sandbox.
    pub async fn get_or_create<F, Fut>(
        client: &Client,
        params: CreateParams,
        on_create: F,
    ) -> Result<Sandbox, Error>
    where
        F: FnOnce(Sandbox) -> Fut,
        Fut: Future<Output = Result<(), Error>>,
    {
        let name = params
            .name
            .clone()
            .ok_or_else(|| Error::invalid("name", "get_or_create needs a name"))?;
        match Self::find_live(client, &name).await {
            Ok(sb) => return Self::ready(client, &name, sb).await,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        match Self::create(client, params).await {
            Ok(sb) => {
                on_create(sb.clone()).await?;
                Ok(sb)
            }
            Err(e) if e.is_conflict() => {
                // Someone else is creating it: wait until it is usable.
                let sb = Self::find_live(client, &name).await?;
                Self::ready(client, &name, sb).await
            }
            Err(e) => Err(e),
        }
    }

    /// Waits until a sandbox another caller is creating is usable, and
    /// resumes a stopped one.
    async fn ready(client: &Client, name: &str, mut sb: Sandbox) -> Result<Sandbox, Error> {
        use stockade_api::SandboxStatus as S;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        loop {
            match sb.info.status {
                S::Running => return Ok(sb),
                S::Stopped => {
                    sb.start().await?;
                    return Ok(sb);
                }
                S::Provisioning | S::Pending => {}
                _ => return Ok(sb),
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Decode(format!(
                    "sandbox '{name}' did not become ready within 300 s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            sb = match Self::find_live(client, name).await {
                Ok(sb) => sb,
                // The creator's create failed and was rolled back.
                Err(e) if e.is_not_found() => return Err(e),
                Err(e) => return Err(e),
            };
        }
    }

    /// One page of the caller's sandboxes, newest first.
    pub async fn list(client: &Client, params: ListParams) -> Result<SandboxPage, Error> {
        let mut query: Vec<(&str, String)> = Vec::new();
        for s in &params.statuses {
            query.push(("status", s.clone()));
        }
        for l in &params.labels {
            query.push(("labels", l.clone()));
        }
        if let Some(n) = &params.name {
            query.push(("name", n.clone()));
        }
        if let Some(t) = &params.team_id {
            query.push(("team_id", t.clone()));
        }
        if let Some(a) = params.is_active {
            query.push(("is_active", a.to_string()));
        }
        if let Some(p) = params.page {
            query.push(("page", p.to_string()));
        }
        if let Some(p) = params.per_page {
            query.push(("per_page", p.to_string()));
        }
        let resp = client
            .send::<ListSandboxesResponse>(
                client.request(Method::GET, "/api/v1/sandbox").query(&query),
            )
            .await?;
        Ok(SandboxPage {
            sandboxes: resp
                .sandboxes
                .into_iter()
                .map(|info| Sandbox {
                    client: client.clone(),
                    info,
                })
                .collect(),
            total: resp.total,
            page: resp.page,
            per_page: resp.per_page,
            has_next: resp.has_next,
        })
    }

    /// Creates a sandbox, runs `f` with it, and stops the sandbox when `f`
    /// ends — by returning, with an error, or by panicking (the panic then
    /// continues). The Rust counterpart of `await using`.
    pub async fn scoped<F, Fut, T, E>(client: &Client, params: CreateParams, f: F) -> Result<T, E>
    where
        F: FnOnce(Sandbox) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let sb = Self::create(client, params).await?;
        let outcome = AssertUnwindSafe(f(sb.clone())).catch_unwind().await;
        let stopped = sb.stop().await;
        match outcome {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(result) => {
                let value = result?;
                stopped?;
                Ok(value)
            }
        }
    }

    /// A guard that stops this sandbox when dropped (in the background, on
    /// the current Tokio runtime). Prefer [`SandboxGuard::close`] where you
    /// can await.
    pub fn into_guard(self) -> SandboxGuard {
        SandboxGuard {
            sandbox: Some(self),
        }
    }

    pub fn id(&self) -> &str {
        &self.info.id
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// `RUNNING`, `STOPPED`, …
    pub fn status(&self) -> String {
        self.info.status.to_string()
    }

    /// Everything the server said about this sandbox when last fetched.
    pub fn info(&self) -> &SandboxResponse {
        &self.info
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// `GET /api/v1/sandbox/{id}{rest}`, decoded.
    pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        rest: &str,
    ) -> Result<T, Error> {
        self.client
            .send(
                self.client
                    .request(Method::GET, &format!("/api/v1/sandbox/{}{rest}", self.id())),
            )
            .await
    }

    /// Fetches the current state.
    pub async fn refresh(&mut self) -> Result<(), Error> {
        self.info = Self::by_id(&self.client, &self.info.id).await?.info;
        Ok(())
    }

    /// Starts the sandbox; a running one stays as it is.
    pub async fn start(&mut self) -> Result<(), Error> {
        self.transition("start").await
    }

    /// Pauses the running sandbox: its processes are frozen in place with
    /// their memory, and it uses no CPU until [`Sandbox::resume`].
    pub async fn pause(&mut self) -> Result<(), Error> {
        self.transition("pause").await
    }

    /// Resumes the paused sandbox: its processes go on where they were.
    pub async fn resume(&mut self) -> Result<(), Error> {
        self.transition("resume").await
    }

    /// `POST /api/v1/sandbox/{id}/{action}`, keeping the answer.
    async fn transition(&mut self, action: &str) -> Result<(), Error> {
        self.info = self
            .client
            .send(self.client.request(
                Method::POST,
                &format!("/api/v1/sandbox/{}/{action}", self.info.id),
            ))
            .await?;
        Ok(())
    }

    /// Stops the sandbox (SIGTERM, then SIGKILL after 30 s).
    pub async fn stop(&self) -> Result<Sandbox, Error> {
        self.stop_with(None).await
    }

    /// Stops the sandbox with a custom grace period before SIGKILL.
    pub async fn stop_with(&self, grace: Option<Duration>) -> Result<Sandbox, Error> {
        let mut req = self.client.request(
            Method::POST,
            &format!("/api/v1/sandbox/{}/stop", self.info.id),
        );
        if let Some(g) = grace {
            req = req.query(&[("timeout", g.as_secs().to_string())]);
        }
        let info = self.client.send(req).await?;
        Ok(Sandbox {
            client: self.client.clone(),
            info,
        })
    }

    /// Changes the sandbox's settings (PATCH). The answer says which changes
    /// hold now (`applied.now`) and which from the next start
    /// (`applied.next_start`); this handle is refreshed.
    ///
    /// ```no_run
    /// # async fn demo(mut sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use std::time::Duration;
    /// use stockade_sdk::UpdateParams;
    /// let done = sb
    ///     .update(UpdateParams::new().timeout(Duration::from_secs(3600)).cpu_cores(2.0).env("MODE", "ci"))
    ///     .await?;
    /// println!("now: {:?}, next start: {:?}", done.applied.now, done.applied.next_start);
    /// # Ok(()) }
    /// ```
    pub async fn update(&mut self, params: UpdateParams) -> Result<UpdateSandboxResponse, Error> {
        let body = params.to_request()?;
        let resp: UpdateSandboxResponse = self
            .client
            .send(
                self.client
                    .request(Method::PATCH, &format!("/api/v1/sandbox/{}", self.info.id))
                    .json(&body),
            )
            .await?;
        self.info = resp.sandbox.clone();
        Ok(resp)
    }

    /// Destroys the sandbox and its volume.
    pub async fn delete(&self) -> Result<(), Error> {
        self.delete_with(DeleteOptions::default()).await
    }

    /// Destroys the sandbox; `preserve_volume` keeps `/workspace`, `sync`
    /// uploads it to the object store first.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::DeleteOptions;
    /// sb.delete_with(DeleteOptions { sync: true, ..Default::default() }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete_with(&self, opts: DeleteOptions) -> Result<(), Error> {
        let req = self
            .client
            .request(Method::DELETE, &format!("/api/v1/sandbox/{}", self.info.id))
            .query(&[
                ("preserveVolume", opts.preserve_volume.to_string()),
                ("sync", opts.sync.to_string()),
            ]);
        self.client.send::<SandboxResponse>(req).await?;
        Ok(())
    }
}

/// Stops its sandbox when dropped; see [`Sandbox::into_guard`].
pub struct SandboxGuard {
    sandbox: Option<Sandbox>,
}

impl SandboxGuard {
    pub fn sandbox(&self) -> &Sandbox {
        self.sandbox.as_ref().expect("present until closed")
    }

    /// Stops the sandbox now and waits for it.
    pub async fn close(mut self) -> Result<(), Error> {
        match self.sandbox.take() {
            Some(sb) => sb.stop().await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Keeps the sandbox running: the guard no longer stops it.
    pub fn into_inner(mut self) -> Sandbox {
        self.sandbox.take().expect("present until closed")
    }
}

impl std::ops::Deref for SandboxGuard {
    type Target = Sandbox;
    fn deref(&self) -> &Sandbox {
        self.sandbox()
    }
}

impl Drop for SandboxGuard {
    fn drop(&mut self) {
        if let Some(sb) = self.sandbox.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn(async move {
                        if let Err(e) = sb.stop().await {
                            tracing::warn!(sandbox.id = %sb.id(), error = %e, "could not stop the sandbox of a dropped guard");
                        }
                    });
                }
                Err(_) => tracing::warn!(
                    sandbox.id = %sb.id(),
                    "a SandboxGuard was dropped outside a Tokio runtime; the sandbox keeps running"
                ),
            }
        }
    }
}
