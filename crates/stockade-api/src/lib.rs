//! Request and response types of Stockade's HTTP API (JSON, camelCase), shared
//! by the server and the SDK, with their OpenAPI schemas.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use stockade_core::spec::SpecInput;
use stockade_core::{human_bytes, size::volume_warning, Sandbox};
use utoipa::ToSchema;

pub use stockade_core::SandboxStatus;
pub mod ports;
pub use ports::{
    AuthTokenRequest, AuthTokenResponse, ExposePortRequest, ExposedPort, PortsResponse,
};
pub mod code;
pub mod exec;
pub mod logs;

pub use exec::{
    ExecExitEvent, ExecRequest, ExecResponse, ListProcessesResponse, ProcessResponse, ProcessStatus,
};
pub use logs::{LogLineResponse, LogsEndEvent, LogsResponse};
pub mod files;
pub use files::{ArchiveUploadResponse, DirectoryListing, FileEntry, FileType};
pub mod teams;
pub mod usage;
pub use teams::{
    AddTeamMemberRequest, CreateTeamRequest, ListTeamsResponse, TeamMember, TeamResponse,
};
pub use usage::{
    DiskAreaHealth, DiskHealth, DiskUsageSummary, EgressHealth, ResourceUsage,
    UsageHistoryResponse, UsageSample,
};

pub mod hosts;
pub use hosts::{
    CreateHostRequest, HostCapacity, HostCapacityInput, HostHealthResponse, HostReserved,
    HostResponse, HostTlsFiles, ListHostsResponse, UpdateHostRequest,
};
pub mod quotas;
pub use quotas::{QuotaLimits, QuotaResponse, QuotaUsageResponse, SetQuotaRequest};
pub mod update;
pub mod volumes;
pub use update::{AppliedChanges, UpdateSandboxRequest, UpdateSandboxResponse};
pub use volumes::{
    CleanupResponse, ListVolumesResponse, RemovedVolume, VolumeFailure, VolumeResponse,
};

pub mod create;
pub use create::{
    CreateBodyError, CreateExtras, CreateSandboxBody, StartCommandArgv, StartCommandJson,
};
pub mod e2b;
pub mod events;
pub mod prime;

pub mod shared_volumes;
pub mod snapshots;
pub mod templates;
pub mod tokens;
pub use events::{
    AuditEntry, AuditPage, AuditQuery, CreateWebhookRequest, DeliveryAttempt, DeliveryList,
    DeliveryQuery, E2bEventQuery, Event, EventPage, EventQuery, UpdateWebhookRequest, Webhook,
    WebhookDelivery,
};
pub use snapshots::{
    CreateSnapshotRequest, ForkSandboxRequest, ListSnapshotsResponse, SandboxOrigin, SandboxSource,
    SnapshotResponse, UploadResponse,
};
pub use tokens::{
    CreateTokenRequest, CreateTokenResponse, EmptyRequest, ListTokensResponse, TokenResponse,
};

/// The body of every error response.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// A stable machine-readable `code`, a message for people, and details
/// (e.g. the invalid fields).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// e.g. `not_found`, `forbidden`, `validation_failed`, `conflict`,
    /// `image_unavailable`, `docker_unavailable`, `database_error`.
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub details: Option<serde_json::Value>,
}

/// `POST /api/v1/sandbox`.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSandboxRequest {
    /// Unique among the account's active sandboxes; defaults to the id.
    pub name: Option<String>,
    /// Defaults to the server's default image (`node:20-bookworm`). One of
    /// the caller's templates (`name[:tag]`, or a template's id) runs that
    /// template, as `template` does.
    pub docker_image: Option<String>,
    /// A preset name the server maps to an image (e.g. `node22`, `python3.13`).
    pub runtime: Option<String>,
    /// A template to run, by id or name (`name:tag` for a tagged build):
    /// its newest ready build's image, environment, working directory,
    /// user, start and ready commands, and its CPU and memory unless given.
    pub template: Option<String>,
    /// Shell command line of the main process; defaults to a keep-alive.
    pub start_command: Option<String>,
    pub cpu_cores: Option<f64>,
    #[serde(rename = "memoryGB")]
    pub memory_gb: Option<f64>,
    #[serde(rename = "diskSizeGB")]
    pub disk_size_gb: Option<f64>,
    pub gpu_count: Option<f64>,
    /// `false` cuts all egress (the same as `networkPolicy: "deny-all"`).
    pub network_access: Option<bool>,
    /// Egress policy: `"allow-all"` (default), `"deny-all"`, or
    /// `{"allow": [...], "deny": [...]}` whose entries are IPv4/IPv6
    /// addresses or CIDRs (optionally `:port`), domains and `*.wildcard`
    /// domains (optionally `:port`). A deny entry beats an allow entry; an
    /// allow list allows only what it lists.
    #[schema(value_type = Option<Object>, example = json!({"allow": ["pypi.org", "*.pythonhosted.org", "10.1.0.0/16:5432"]}))]
    pub network_policy: Option<serde_json::Value>,
    /// Session timeout in minutes; fractions allowed; 0 = never.
    pub timeout_minutes: Option<f64>,
    pub environment_vars: Option<BTreeMap<String, String>>,
    pub labels: Option<Vec<String>>,
    /// At most 5.
    pub tags: Option<BTreeMap<String, String>>,
    /// At most 4.
    pub ports: Option<Vec<i64>>,
    /// Filesystem survives session timeouts (default true).
    pub persistent: Option<bool>,
    /// A team of the caller to share the sandbox with.
    pub team_id: Option<String>,
    /// What `/workspace` starts from: a git repository, a tarball URL, an
    /// upload, a snapshot or another sandbox.
    pub source: Option<SandboxSource>,
    /// The Docker host to run on, by name (see `GET /api/v1/hosts`); any
    /// host with room when absent.
    pub server: Option<String>,
    /// Labels the Docker host must carry, e.g. `{"zone": "b"}`.
    pub host_selector: Option<BTreeMap<String, String>>,
    /// What the end of a session does (kill, stop or pause), an idle
    /// timeout, and whether a paused sandbox wakes up when it is used.
    pub lifecycle: Option<LifecycleRequest>,
    /// Shared volumes to mount (see `/api/v1/shared-volumes`); the sandbox
    /// is placed on their Docker host.
    pub volume_mounts: Option<Vec<shared_volumes::VolumeMountRequest>>,
}

/// A sandbox's lifecycle as a create sets it.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LifecycleRequest {
    /// At the end of a session (its timeout or idle timeout): `kill`
    /// (removed with its volume), `stop` (files kept) or `pause` (frozen:
    /// processes and memory kept). Default: `stop` for a persistent
    /// sandbox, `kill` for another.
    #[serde(alias = "on_timeout")]
    pub on_timeout: Option<String>,
    /// A paused sandbox that gets a command, a terminal, a file call, a
    /// code cell or a request through its port proxy is resumed first;
    /// without it such calls are refused with 409 `sandbox_paused`.
    #[serde(alias = "auto_resume")]
    pub auto_resume: Option<bool>,
    /// Minutes without any of those uses after which the session ends as
    /// its timeout would; 0 (default): never.
    #[serde(alias = "idle_timeout_minutes")]
    pub idle_timeout_minutes: Option<f64>,
}

impl LifecycleRequest {
    pub fn input(&self) -> stockade_core::LifecycleInput {
        stockade_core::LifecycleInput {
            on_timeout: self.on_timeout.clone(),
            auto_resume: self.auto_resume,
            idle_timeout_minutes: self.idle_timeout_minutes,
        }
    }
}

/// A sandbox's lifecycle as it applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleView {
    /// `kill`, `stop` or `pause`.
    pub on_timeout: String,
    pub auto_resume: bool,
    /// 0: no idle timeout. A whole number is written without a fraction.
    #[serde(serialize_with = "whole_as_integer")]
    pub idle_timeout_minutes: f64,
}

impl LifecycleView {
    pub fn of(spec: &stockade_core::SandboxSpec) -> Self {
        Self {
            on_timeout: spec.timeout_action().as_str().to_owned(),
            auto_resume: spec.lifecycle.auto_resume,
            idle_timeout_minutes: spec.lifecycle.idle_timeout_minutes,
        }
    }
}

impl CreateSandboxRequest {
    /// The fields the domain validates.
    pub fn spec_input(&self) -> SpecInput {
        SpecInput {
            name: self.name.clone(),
            docker_image: self.docker_image.clone(),
            runtime: self.runtime.clone(),
            start_command: self.start_command.clone(),
            cpu_cores: self.cpu_cores,
            memory_gb: self.memory_gb,
            disk_size_gb: self.disk_size_gb,
            gpu_count: self.gpu_count,
            network_access: self.network_access,
            network_policy: self.network_policy.clone(),
            timeout_minutes: self.timeout_minutes,
            environment_vars: self.environment_vars.clone(),
            labels: self.labels.clone(),
            tags: self.tags.clone(),
            ports: self.ports.clone(),
            persistent: self.persistent,
            lifecycle: self.lifecycle.as_ref().map(LifecycleRequest::input),
            metadata: None,
            server: self.server.clone(),
            host_selector: self.host_selector.clone(),
            volume_mounts: self.volume_mounts.as_ref().map(|m| {
                m.iter()
                    .map(shared_volumes::VolumeMountRequest::input)
                    .collect()
            }),
            template: None,
        }
    }
}

/// The Docker host a sandbox is on, as the last check saw it.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxHostState {
    /// `active`, `cordoned` or `draining`.
    pub state: String,
    /// Whether its engine answered the last check (absent: not checked yet).
    pub healthy: Option<bool>,
    /// Why it is cordoned, draining or unhealthy.
    pub reason: Option<String>,
}

/// A sandbox's volume.
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSummary {
    pub name: String,
    pub mount_path: String,
    pub size_bytes: Option<u64>,
    /// Human-readable, e.g. `1.2 GB`.
    pub size: Option<String>,
    /// Set above 10 GB.
    pub warning: Option<String>,
}

impl VolumeSummary {
    pub fn new(name: String, size_bytes: Option<u64>) -> Self {
        Self {
            name,
            mount_path: stockade_core::VolumeName::MOUNT_PATH.to_owned(),
            size_bytes,
            size: size_bytes.map(human_bytes),
            warning: size_bytes.and_then(volume_warning),
        }
    }
}

/// A sandbox as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxResponse {
    pub id: String,
    pub name: String,
    pub account_id: String,
    pub team_id: Option<String>,
    pub docker_image: String,
    pub runtime: Option<String>,
    /// A shell command line, or `{"executable", "args"}` for a sandbox
    /// created with a program and its arguments.
    pub start_command: Option<StartCommandJson>,
    pub cpu_cores: f64,
    #[serde(rename = "memoryGB")]
    pub memory_gb: f64,
    #[serde(rename = "diskSizeGB")]
    pub disk_size_gb: u32,
    pub gpu_count: u32,
    pub network_access: bool,
    /// `"allow-all"`, `"deny-all"` or `{"allow": [...], "deny": [...]}`.
    #[schema(value_type = Value)]
    pub network_policy: serde_json::Value,
    /// PENDING, PROVISIONING, RUNNING, PAUSED, STOPPED, ERROR or TERMINATED.
    #[schema(value_type = String)]
    pub status: SandboxStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// Minutes; a whole number is written without a fraction.
    #[serde(serialize_with = "whole_as_integer")]
    pub timeout_minutes: f64,
    pub environment_vars: BTreeMap<String, String>,
    pub labels: Vec<String>,
    pub tags: BTreeMap<String, String>,
    pub ports: Vec<u16>,
    pub persistent: bool,
    /// The Docker host ("server location").
    pub server: String,
    pub created_at: DateTime<Utc>,
    /// The latest of the record's moments (created, started, stopped,
    /// terminated).
    #[serde(default = "epoch")]
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
    pub terminated_at: Option<DateTime<Utc>>,
    /// When it was paused (PAUSED sandboxes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<DateTime<Utc>>,
    /// What the end of its session does, its idle timeout, auto-resume.
    #[serde(default = "default_lifecycle")]
    pub lifecycle: LifecycleView,
    /// Where the sandbox's volume is mounted (`/workspace`).
    #[serde(default = "workspace_path")]
    pub disk_mount_path: String,
    pub volume: VolumeSummary,
    /// The shared volumes it mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<shared_volumes::SandboxMountView>,
    /// Seconds since the current session started (running sandboxes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uptime_seconds: Option<i64>,
    /// When the current session ends (its timeout, or its idle timeout
    /// from the last use): then `lifecycle.onTimeout` applies. Absent: no
    /// timeout, or not running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_expires_at: Option<DateTime<Utc>>,
    /// Where the logs of this sandbox stream from.
    pub logs_url: String,
    /// Live CPU, memory, network and process figures (details of a running
    /// sandbox only; absent when they could not be measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<ResourceUsage>,
    /// Disk use against the enforced limits (details only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskUsageSummary>,
    /// The state of the Docker host it is on, when that host does not take
    /// new sandboxes or fails its checks (details only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<SandboxHostState>,
    /// Where its filesystem came from, for a sandbox made from a snapshot
    /// or forked from another (whose `dockerImage` is then a snapshot's
    /// image, `stockade-snapshot:{id}`); details only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<SandboxOrigin>,
    /// Persisted runtime facts, snake_case.
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
}

impl SandboxResponse {
    /// The API view of a record. Volume size and usage are filled in by the
    /// server where it measured them.
    pub fn from_record(sb: &Sandbox, now: DateTime<Utc>) -> Self {
        let spec = &sb.spec;
        let uptime = (sb.status == SandboxStatus::Running)
            .then(|| sb.session_start())
            .flatten()
            .map(|t| (now - t).num_seconds().max(0));
        Self {
            id: sb.id.to_string(),
            name: spec.name.to_string(),
            account_id: sb.account_id.to_string(),
            team_id: sb.team_id.as_ref().map(|t| t.to_string()),
            docker_image: spec.docker_image.clone(),
            runtime: spec.runtime.clone(),
            start_command: spec
                .start_command
                .as_ref()
                .map(|c| match StartCommandArgv::from_shell(c.as_str()) {
                    Some(argv) => StartCommandJson::Argv(argv),
                    None => StartCommandJson::Shell(c.as_str().to_owned()),
                }),
            cpu_cores: spec.cpu_cores,
            memory_gb: spec.memory_gb,
            disk_size_gb: spec.disk_size_gb,
            gpu_count: spec.gpu_count,
            network_access: spec.network.allows_egress(),
            network_policy: spec.network.to_json(),
            status: sb.status,
            status_reason: sb.status_reason.clone(),
            timeout_minutes: spec.timeout_minutes,
            environment_vars: spec.environment_vars.clone(),
            labels: spec.labels.to_strings(),
            tags: spec.tags.clone(),
            ports: spec.ports.clone(),
            persistent: spec.persistent,
            server: sb.server.clone(),
            created_at: sb.created_at,
            updated_at: [
                sb.started_at,
                sb.stopped_at,
                sb.paused_at,
                sb.resumed_at,
                sb.terminated_at,
            ]
            .into_iter()
            .flatten()
            .fold(sb.created_at, DateTime::max),
            started_at: sb.started_at,
            stopped_at: sb.stopped_at,
            terminated_at: sb.terminated_at,
            paused_at: sb.paused_at,
            lifecycle: LifecycleView::of(spec),
            disk_mount_path: stockade_core::VolumeName::MOUNT_PATH.to_owned(),
            volume: VolumeSummary::new(sb.volume_name().to_string(), None),
            volume_mounts: spec
                .mounts
                .iter()
                .map(|m| shared_volumes::SandboxMountView {
                    volume_id: m.volume.clone(),
                    name: m.name.clone(),
                    path: m.path.clone(),
                    read_only: m.read_only,
                })
                .collect(),
            uptime_seconds: uptime,
            session_expires_at: sb.session_expires_at,
            logs_url: format!("/api/v1/sandbox/{}/logs", sb.id),
            usage: None,
            disk: None,
            host: None,
            origin: None,
            metadata: serde_json::to_value(sb.metadata()).unwrap_or(serde_json::Value::Null),
        }
    }
}

impl SandboxResponse {
    /// The start command as a program and arguments (a shell command line
    /// becomes `/bin/sh -c LINE`): for clients that only read that form
    /// (`prime-sandboxes`).
    pub fn with_argv_start_command(mut self) -> Self {
        if let Some(StartCommandJson::Shell(line)) = &self.start_command {
            self.start_command = Some(StartCommandJson::Argv(StartCommandArgv {
                executable: "/bin/sh".into(),
                args: vec!["-c".into(), line.clone()],
            }));
        }
        self
    }
}

fn epoch() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH
}

fn default_lifecycle() -> LifecycleView {
    LifecycleView {
        on_timeout: "stop".into(),
        auto_resume: false,
        idle_timeout_minutes: 0.0,
    }
}

fn workspace_path() -> String {
    stockade_core::VolumeName::MOUNT_PATH.to_owned()
}

/// Writes a whole number of minutes as an integer (`60`, not `60.0`):
/// clients that read the field as an integer accept it.
fn whole_as_integer<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// `GET /api/v1/sandbox`. The paging fields keep their first (snake_case)
/// names, which are canonical; `perPage` and `hasNext` repeat them for
/// clients that read the rest of the API's camelCase.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ListSandboxesResponse {
    pub sandboxes: Vec<SandboxResponse>,
    pub total: u64,
    pub page: u32,
    pub per_page: u32,
    pub has_next: bool,
    /// The same as `per_page`.
    #[serde(rename = "perPage", default)]
    pub per_page_alias: u32,
    /// The same as `has_next`.
    #[serde(rename = "hasNext", default)]
    pub has_next_alias: bool,
}

impl ListSandboxesResponse {
    pub fn new(
        sandboxes: Vec<SandboxResponse>,
        total: u64,
        page: u32,
        per_page: u32,
        has_next: bool,
    ) -> Self {
        Self {
            sandboxes,
            total,
            page,
            per_page,
            has_next,
            per_page_alias: per_page,
            has_next_alias: has_next,
        }
    }
}

/// `DELETE /api/v1/sandbox/bulk`: by ids, or every sandbox carrying ALL labels.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BulkDeleteRequest {
    #[serde(default)]
    pub ids: Vec<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub preserve_volume: bool,
}

/// The outcome for one sandbox of a bulk delete.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkDeleteResult {
    pub id: String,
    pub deleted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BulkDeleteResponse {
    pub results: Vec<BulkDeleteResult>,
}

/// `GET /api/v1/health`.
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthResponse {
    /// `healthy` or `unhealthy`.
    pub status: String,
    pub version: String,
    pub docker: DockerHealth,
    pub database: DatabaseHealth,
    /// How well sandboxes are kept apart; absent before the first check.
    pub isolation: Option<IsolationHealth>,
    /// Whether `diskSizeGB` is enforced; absent when Docker did not answer.
    pub disk: Option<DiskHealth>,
    /// Whether allow/deny lists of `networkPolicy` are enforced.
    pub egress: Option<EgressHealth>,
    /// Whether the default image and the runtime presets' images are on
    /// the Docker host already; absent when Docker did not answer.
    pub images: Option<ImagesHealth>,
    /// Which server instance runs the deployment-wide background work
    /// (several instances on one PostgreSQL database share it through a
    /// lease); absent from servers that predate it.
    pub leader: Option<LeaderHealth>,
    /// Things that work but need an operator's attention.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// This server instance and the leader lease of the background work
/// (session timeouts, reconciliation, recovery, snapshot collection).
#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderHealth {
    /// This server process.
    pub instance: String,
    /// Whether this instance runs the background work now.
    pub is_leader: bool,
    /// The instance holding the lease when last seen, if any.
    pub holder: Option<String>,
    /// When the holder's lease ends unless it renews it (every third of
    /// its term); after that another instance takes over.
    pub expires_at: Option<DateTime<Utc>>,
}

/// The images a create uses when it names none: present on the Docker host,
/// or to be pulled by the first create that needs them.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagesHealth {
    /// The image of sandboxes that name no image and no runtime; while it
    /// is absent, `warnings` says so.
    pub default: ImageHealth,
    /// The `runtime` presets and their images (absent ones are pulled by the
    /// first create that names them; no warning).
    #[serde(default)]
    pub presets: Vec<PresetImageHealth>,
}

/// One image and whether the Docker host has it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageHealth {
    pub image: String,
    pub present: bool,
}

/// A `runtime` preset (e.g. `node22`), its image and whether the Docker host has it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PresetImageHealth {
    pub name: String,
    pub image: String,
    pub present: bool,
    /// How to get the image while it is absent, when no registry has it
    /// (e.g. "build it with scripts/build-image code-interpreter").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The last check of the sandboxes' network isolation.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IsolationHealth {
    /// `ok`, `repaired` or `degraded`.
    pub status: String,
    pub checked_at: chrono::DateTime<chrono::Utc>,
    /// What could not be applied, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// What was missing or wrong and was put right.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repaired: Vec<String>,
}

#[skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DockerHealth {
    /// `healthy` or `unhealthy`.
    pub status: String,
    pub version: Option<String>,
    pub api_version: Option<String>,
    pub os: Option<String>,
    pub arch: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<String>,
    pub error: Option<String>,
    /// What to check when Docker does not answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub troubleshooting: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseHealth {
    pub status: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /api/v1/accounts` (admin only).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateAccountRequest {
    pub name: String,
    #[serde(default)]
    pub is_admin: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountResponse {
    pub id: String,
    pub name: String,
    pub is_admin: bool,
    pub created_at: DateTime<Utc>,
    /// While set, the account is disabled: none of its tokens, sessions or
    /// sandbox tokens is accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<DateTime<Utc>>,
}

impl From<&stockade_core::Account> for AccountResponse {
    fn from(a: &stockade_core::Account) -> Self {
        Self {
            id: a.id.to_string(),
            name: a.name.clone(),
            is_admin: a.is_admin,
            created_at: a.created_at,
            disabled_at: a.disabled_at,
        }
    }
}

/// The new account and its API token, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateAccountResponse {
    pub account: AccountResponse,
    pub token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ListAccountsResponse {
    pub accounts: Vec<AccountResponse>,
}

/// `POST /api/v1/session`: sign the dashboard in with an API token; the
/// answer sets the `HttpOnly` session cookie.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRequest {
    pub token: String,
}

/// `GET /api/v1/me`: who the token belongs to.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WhoAmIResponse {
    pub account: AccountResponse,
    pub team_ids: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockade_core::spec::{Defaults, SpecInput};
    use stockade_core::{AccountId, SandboxId, SandboxSpec};

    fn record(start_command: Option<&str>, timeout_minutes: f64) -> Sandbox {
        let id = SandboxId::generate();
        let spec = SandboxSpec::from_input(
            SpecInput {
                start_command: start_command.map(str::to_owned),
                timeout_minutes: Some(timeout_minutes),
                ..Default::default()
            },
            &id,
            &Defaults::default(),
        )
        .unwrap();
        Sandbox::new(
            id,
            AccountId::generate(),
            None,
            spec,
            "local".into(),
            Utc::now(),
        )
    }

    #[test]
    fn answers_carry_what_prime_sandboxes_requires() {
        let r = SandboxResponse::from_record(&record(None, 60.0), Utc::now());
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["timeoutMinutes"], serde_json::json!(60));
        assert!(v["timeoutMinutes"].is_i64());
        assert_eq!(v["diskMountPath"], "/workspace");
        assert_eq!(v["updatedAt"], v["createdAt"]);
        // Fields without a value: some are written as `null`, others left out.
        for always in [
            "teamId",
            "runtime",
            "startCommand",
            "startedAt",
            "stoppedAt",
        ] {
            assert_eq!(v.get(always), Some(&serde_json::Value::Null), "{always}");
        }
        for absent in [
            "statusReason",
            "uptimeSeconds",
            "usage",
            "disk",
            "host",
            "origin",
        ] {
            assert!(v.get(absent).is_none(), "{absent}");
        }
        let half =
            serde_json::to_value(SandboxResponse::from_record(&record(None, 0.5), Utc::now()))
                .unwrap();
        assert_eq!(half["timeoutMinutes"], serde_json::json!(0.5));
        // What Stockade's SDK reads back still parses.
        let back: SandboxResponse = serde_json::from_value(v).unwrap();
        assert_eq!(back.timeout_minutes, 60.0);
    }

    #[test]
    fn start_commands_keep_their_form() {
        let shell = SandboxResponse::from_record(&record(Some("python main.py"), 0.0), Utc::now());
        assert_eq!(
            serde_json::to_value(&shell).unwrap()["startCommand"],
            "python main.py"
        );
        let argv_line = StartCommandArgv {
            executable: "sleep".into(),
            args: vec!["infinity".into()],
        }
        .to_shell();
        let argv = SandboxResponse::from_record(&record(Some(&argv_line), 0.0), Utc::now());
        assert_eq!(
            serde_json::to_value(&argv).unwrap()["startCommand"],
            serde_json::json!({"executable": "sleep", "args": ["infinity"]})
        );
        // For a client that reads only the argv form, both come as argv.
        assert_eq!(
            argv.clone().with_argv_start_command().start_command,
            argv.start_command
        );
        assert_eq!(
            serde_json::to_value(shell.with_argv_start_command()).unwrap()["startCommand"],
            serde_json::json!({"executable": "/bin/sh", "args": ["-c", "python main.py"]})
        );
    }
}
