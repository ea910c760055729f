//! The wire types of E2B's control plane as Stockade serves it under
//! `/e2b`: what the `e2b` SDKs send and read. Field names are
//! E2B's (`sandboxID`, `templateID`, `envdAccessToken`, …). Request bodies
//! ignore fields they do not know, as E2B's API does, so newer SDKs that
//! add optional fields keep working.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use utoipa::ToSchema;

/// The version of E2B's in-sandbox protocol (`envd`) the agent speaks, as
/// the SDKs read it to decide which features they may use.
pub const ENVD_VERSION: &str = "0.5.7";

/// E2B's error body: the HTTP status again and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct E2bError {
    pub code: u16,
    pub message: String,
}

/// `network` of a create: E2B's egress settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bNetwork {
    pub allow_out: Option<Vec<String>>,
    pub deny_out: Option<Vec<String>>,
    /// Whether sandbox ports are reachable without a traffic token
    /// (Stockade always asks for one).
    pub allow_public_traffic: Option<bool>,
    #[schema(value_type = Option<Object>)]
    pub rules: Option<serde_json::Value>,
    pub dns_servers: Option<Vec<String>>,
    #[schema(value_type = Option<Object>)]
    pub egress_proxy: Option<serde_json::Value>,
}

/// `POST /e2b/sandboxes` and `/e2b/v2/sandboxes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bNewSandbox {
    /// A runtime preset, an image reference, or a snapshot (id or name);
    /// `base` is the server's default image.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Seconds until the sandbox times out (from now).
    pub timeout: Option<i64>,
    /// At the timeout, stop (keep the files) instead of deleting.
    pub auto_pause: Option<bool>,
    pub auto_pause_memory: Option<bool>,
    #[schema(value_type = Option<Object>)]
    pub auto_resume: Option<serde_json::Value>,
    pub secure: Option<bool>,
    #[serde(rename = "allow_internet_access")]
    pub allow_internet_access: Option<bool>,
    pub network: Option<E2bNetwork>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub env_vars: Option<BTreeMap<String, String>>,
    #[schema(value_type = Option<Object>)]
    pub mcp: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub iam: Option<serde_json::Value>,
    /// Shared volumes to mount, by name.
    pub volume_mounts: Option<Vec<E2bVolumeMount>>,
}

/// One of `volumeMounts`: a volume by name, and where. `readOnly` is
/// Stockade's addition (E2B's SDKs mount read-write and never send it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bVolumeMount {
    pub name: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
}

/// `POST /e2b/volumes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct E2bNewVolume {
    pub name: String,
}

/// A volume in E2B's list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct E2bVolume {
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    pub name: String,
}

/// A volume with the token of its content API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct E2bVolumeAndToken {
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    pub name: String,
    pub token: String,
}

/// `PATCH /e2b/volumecontent/{id}/path`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct E2bVolumeAttrs {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mode: Option<u32>,
}

/// `POST /e2b/sandboxes/{id}/timeout`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bTimeoutRequest {
    /// Seconds from now.
    pub timeout: i64,
}

/// `POST /e2b/sandboxes/{id}/refreshes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bRefreshRequest {
    /// Seconds from now (default 60).
    pub duration: Option<i64>,
}

/// `POST /e2b/sandboxes/{id}/connect`, `/e2b/v2/sandboxes/{id}/connect`,
/// `/e2b/sandboxes/{id}/resume`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bConnectRequest {
    /// Seconds from now; for a running sandbox only a later end counts.
    pub timeout: Option<i64>,
    /// Restore memory (`true`) or cold-boot: Stockade always starts the
    /// processes anew from the kept filesystem.
    pub memory: Option<bool>,
    /// `/resume`: as `autoPause` of a create.
    pub auto_pause: Option<bool>,
}

/// `POST /e2b/sandboxes/{id}/pause`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bPauseRequest {
    pub memory: Option<bool>,
    pub require_healthy_guest: Option<bool>,
}

/// `POST /e2b/sandboxes/{id}/fork`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bForkRequest {
    /// Seconds for the forks (default 300).
    pub timeout: Option<i64>,
    /// 1 to 20 (default 1).
    pub count: Option<i64>,
}

/// `POST /e2b/sandboxes/{id}/snapshots`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bSnapshotRequest {
    pub name: Option<String>,
    pub memory: Option<bool>,
}

/// A created, connected or forked sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bSandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "clientID")]
    pub client_id: String,
    pub envd_version: String,
    /// The `X-Access-Token` of the sandbox's agent (every in-sandbox call).
    pub envd_access_token: String,
    /// For `{port}-{sandboxID}.DOMAIN`: send it as `e2b-traffic-access-token`.
    pub traffic_access_token: String,
    /// The proxy domain of sandbox ports, when the server has one.
    pub domain: Option<String>,
}

/// `onTimeout` and `autoResume` of a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bLifecycle {
    /// `kill` or `pause`.
    pub on_timeout: String,
    pub auto_resume: bool,
}

/// `GET /e2b/sandboxes/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bSandboxDetail {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "clientID")]
    pub client_id: String,
    pub started_at: DateTime<Utc>,
    /// When the sandbox times out (far in the future without a timeout).
    pub end_at: DateTime<Utc>,
    pub envd_version: String,
    pub envd_access_token: String,
    pub domain: Option<String>,
    pub cpu_count: i64,
    #[serde(rename = "memoryMB")]
    pub memory_mb: i64,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: i64,
    pub metadata: BTreeMap<String, String>,
    /// `running` or `paused`.
    pub state: String,
    pub allow_internet_access: bool,
    pub lifecycle: E2bLifecycle,
}

/// One item of `GET /e2b/sandboxes` and `/e2b/v2/sandboxes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bListedSandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "clientID")]
    pub client_id: String,
    pub started_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
    pub cpu_count: i64,
    #[serde(rename = "memoryMB")]
    pub memory_mb: i64,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: i64,
    pub metadata: BTreeMap<String, String>,
    pub state: String,
    pub envd_version: String,
}

impl From<E2bSandboxDetail> for E2bListedSandbox {
    fn from(d: E2bSandboxDetail) -> Self {
        Self {
            template_id: d.template_id,
            sandbox_id: d.sandbox_id,
            client_id: d.client_id,
            started_at: d.started_at,
            end_at: d.end_at,
            cpu_count: d.cpu_count,
            memory_mb: d.memory_mb,
            disk_size_mb: d.disk_size_mb,
            metadata: d.metadata,
            state: d.state,
            envd_version: d.envd_version,
        }
    }
}

/// One fork of `POST /e2b/sandboxes/{id}/fork`: the sandbox or the error.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bForkResult {
    pub sandbox: Option<E2bSandbox>,
    pub error: Option<E2bError>,
}

/// A snapshot (usable as a `templateID`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bSnapshotInfo {
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    pub names: Vec<String>,
}

/// One line of `GET /e2b/sandboxes/{id}/logs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bLogLine {
    pub timestamp: DateTime<Utc>,
    pub line: String,
}

/// One structured log entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bLogEntry {
    pub timestamp: DateTime<Utc>,
    pub message: String,
    /// `info` (stdout) or `error` (stderr).
    pub level: String,
    pub fields: BTreeMap<String, String>,
}

/// `GET /e2b/sandboxes/{id}/logs`: the main process's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bSandboxLogs {
    pub logs: Vec<E2bLogLine>,
    pub log_entries: Vec<E2bLogEntry>,
}

/// `GET /e2b/v2/sandboxes/{id}/logs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bSandboxLogsV2 {
    pub logs: Vec<E2bLogEntry>,
}

/// One sample of `GET /e2b/sandboxes/{id}/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bSandboxMetric {
    pub timestamp: DateTime<Utc>,
    pub timestamp_unix: i64,
    pub cpu_count: i64,
    pub cpu_used_pct: f64,
    pub mem_used: u64,
    pub mem_total: u64,
    pub mem_cache: u64,
    pub disk_used: u64,
    pub disk_total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_body_of_the_sdk_parses() {
        // As e2b 2.63.0 sends it for Sandbox.create(metadata=…, envs=…,
        // lifecycle={"on_timeout": "pause"}, network={"deny_out": [...]}).
        let b: E2bNewSandbox = serde_json::from_str(
            r#"{"templateID":"base","autoPause":true,"metadata":{"a":"1"},
                "envVars":{"E":"x"},"timeout":60,
                "network":{"denyOut":["0.0.0.0/0"]},"someFutureField":1}"#,
        )
        .unwrap();
        assert_eq!(b.template_id, "base");
        assert_eq!(b.auto_pause, Some(true));
        assert_eq!(b.timeout, Some(60));
        assert_eq!(
            b.network.unwrap().deny_out.unwrap(),
            vec!["0.0.0.0/0".to_owned()]
        );
        assert!(serde_json::from_str::<E2bNewSandbox>("{}").is_err());
    }

    #[test]
    fn answers_use_e2b_names() {
        let s = E2bSandbox {
            template_id: "base".into(),
            sandbox_id: "abcdefghijkl".into(),
            client_id: "stockade".into(),
            envd_version: ENVD_VERSION.into(),
            envd_access_token: "t".into(),
            traffic_access_token: "p".into(),
            domain: None,
        };
        let v = serde_json::to_value(&s).unwrap();
        for k in [
            "templateID",
            "sandboxID",
            "clientID",
            "envdVersion",
            "envdAccessToken",
            "trafficAccessToken",
        ] {
            assert!(v.get(k).is_some(), "{k}: {v}");
        }
        let m = serde_json::to_value(E2bSandboxMetric {
            timestamp: Utc::now(),
            timestamp_unix: 1,
            cpu_count: 1,
            cpu_used_pct: 0.5,
            mem_used: 1,
            mem_total: 2,
            mem_cache: 0,
            disk_used: 0,
            disk_total: 3,
        })
        .unwrap();
        assert!(m.get("cpuUsedPct").is_some() && m.get("timestampUnix").is_some());
    }
}

/// `POST /e2b/v3/templates`: a template (or a new build of one of the
/// caller's templates of this name). `name` may be `name:tag`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bNewTemplate {
    pub name: Option<String>,
    /// Older SDKs' word for `name`.
    pub alias: Option<String>,
    pub tags: Option<Vec<String>>,
    pub cpu_count: Option<u32>,
    #[serde(rename = "memoryMB")]
    pub memory_mb: Option<u32>,
    /// E2B grows a template's disk by this much; a sandbox's disk is its
    /// account's quota here, so the field is read and not used.
    #[serde(rename = "minFreeDiskMB")]
    pub min_free_disk_mb: Option<i64>,
}

/// The answer to `POST /e2b/v3/templates` (202).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bTemplateRequested {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "buildID")]
    pub build_id: String,
    pub public: bool,
    pub names: Vec<String>,
    pub tags: Vec<String>,
    pub aliases: Vec<String>,
}

/// `GET /e2b/templates/{id}/files/{hash}` (201): whether the files are
/// stored, and where to `PUT` them (a signed link, no API key needed).
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bFilesUpload {
    pub present: bool,
    pub url: Option<String>,
}

/// One step of `POST /e2b/v2/templates/{id}/builds/{buildID}`: its type
/// (`RUN`, `COPY`, `ENV`, `WORKDIR`, `USER`, `ARG`) and arguments as
/// E2B's SDKs lay them out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bTemplateStep {
    #[serde(rename = "type")]
    pub kind: String,
    pub args: Option<Vec<String>>,
    pub force: Option<bool>,
    pub files_hash: Option<String>,
    pub force_upload: Option<bool>,
}

/// `POST /e2b/v2/templates/{id}/builds/{buildID}`: what the build does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bBuildStart {
    pub from_image: Option<String>,
    pub from_template: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub from_image_registry: Option<serde_json::Value>,
    pub steps: Option<Vec<E2bTemplateStep>>,
    pub start_cmd: Option<String>,
    pub ready_cmd: Option<String>,
    pub force: Option<bool>,
}

/// One line of a build's log.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bBuildLogEntry {
    pub timestamp: DateTime<Utc>,
    /// `debug`, `info`, `warn` or `error`.
    pub level: String,
    pub message: String,
    /// The step: `base`, its number from 1, or `finalize`.
    pub step: Option<String>,
}

/// Why a build failed.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bBuildReason {
    pub message: String,
    pub step: Option<String>,
    pub log_entries: Option<Vec<E2bBuildLogEntry>>,
}

/// `GET /e2b/templates/{id}/builds/{buildID}/status`.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bBuildStatus {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// `waiting`, `building`, `ready` or `error`.
    pub status: String,
    /// The log page's messages (older SDKs read these).
    pub logs: Vec<String>,
    pub log_entries: Vec<E2bBuildLogEntry>,
    pub reason: Option<E2bBuildReason>,
}

/// `GET /e2b/templates/{id}/builds/{buildID}/logs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bBuildLogs {
    pub logs: Vec<E2bBuildLogEntry>,
}

/// `GET /e2b/templates/aliases/{alias}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bTemplateAlias {
    #[serde(rename = "templateID")]
    pub template_id: String,
    pub public: bool,
}

/// `POST /e2b/templates/tags`: tags for the build `target` names
/// (`name:tag`, or `name` for its newest ready build).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bAssignTags {
    pub target: String,
    pub tags: Vec<String>,
}

/// The answer to `POST /e2b/templates/tags` (201).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bAssignedTags {
    pub tags: Vec<String>,
    #[serde(rename = "buildID")]
    pub build_id: String,
}

/// `DELETE /e2b/templates/tags`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bDeleteTags {
    pub name: String,
    pub tags: Vec<String>,
}

/// One tag of `GET /e2b/templates/{id}/tags`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct E2bTemplateTag {
    pub tag: String,
    #[serde(rename = "buildID")]
    pub build_id: String,
    #[serde(rename = "createdAt")]
    pub created_at: DateTime<Utc>,
}

/// One build in `GET /e2b/templates/{id}`.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bTemplateBuild {
    #[serde(rename = "buildID")]
    pub build_id: String,
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u32,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: Option<u32>,
    pub envd_version: Option<String>,
}

/// A template in `GET /e2b/templates` and `GET /e2b/templates/{id}` (with
/// its builds). `createdBy` and `lastSpawnedAt` are always sent (E2B's
/// clients require the keys), null here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct E2bTemplate {
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Its newest ready build, else its newest build.
    #[serde(rename = "buildID")]
    pub build_id: String,
    pub cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u32,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u32,
    pub public: bool,
    pub aliases: Vec<String>,
    pub names: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[schema(value_type = Option<Object>)]
    pub created_by: Option<serde_json::Value>,
    pub last_spawned_at: Option<DateTime<Utc>>,
    pub spawn_count: u64,
    pub build_count: u64,
    pub envd_version: String,
    pub build_status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builds: Option<Vec<E2bTemplateBuild>>,
}
