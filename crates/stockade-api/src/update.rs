//! `PATCH /api/v1/sandbox/{id}`: change a sandbox's settings, and
//! learn which changes hold now and which from the next start.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use stockade_core::update::SpecPatch;
use utoipa::ToSchema;

use crate::SandboxResponse;

/// The settings to change; a field left out stays as it is, a field given
/// replaces the current value as a whole (`labels`, `tags` and
/// `environmentVars` are replaced, not merged).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateSandboxRequest {
    pub name: Option<String>,
    /// Session timeout in minutes (fractions allowed, 0 = never). On a
    /// running sandbox the current session's deadline is recomputed from
    /// the session's start.
    pub timeout_minutes: Option<f64>,
    pub labels: Option<Vec<String>>,
    /// At most 5.
    pub tags: Option<BTreeMap<String, String>>,
    /// The main process sees it from its next start.
    pub environment_vars: Option<BTreeMap<String, String>>,
    /// Applied live to a running sandbox.
    pub cpu_cores: Option<f64>,
    /// Applied live to a running sandbox (memory and memory+swap).
    #[serde(rename = "memoryGB")]
    pub memory_gb: Option<f64>,
    /// The egress policy, as on create; applied live to a running sandbox.
    #[schema(value_type = Option<Object>)]
    pub network_policy: Option<serde_json::Value>,
}

impl UpdateSandboxRequest {
    /// The fields the domain validates.
    pub fn patch(&self) -> SpecPatch {
        SpecPatch {
            name: self.name.clone(),
            timeout_minutes: self.timeout_minutes,
            labels: self.labels.clone(),
            tags: self.tags.clone(),
            environment_vars: self.environment_vars.clone(),
            cpu_cores: self.cpu_cores,
            memory_gb: self.memory_gb,
            network_policy: self.network_policy.clone(),
        }
    }
}

/// When the fields of an update take effect, by API field name.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedChanges {
    /// In effect as of this response.
    pub now: Vec<String>,
    /// Recorded now, in effect from the sandbox's next start.
    pub next_start: Vec<String>,
}

/// The updated sandbox and when each change takes effect.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateSandboxResponse {
    pub sandbox: SandboxResponse,
    pub applied: AppliedChanges,
    /// Explanations, e.g. that commands run with exec see new environment
    /// variables at once while the main process sees them from its next start.
    pub notes: Vec<String>,
}
