//! Validated sandbox settings: what a create request asks for, after every
//! field was checked and defaults were applied.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{FieldError, ValidationErrors};
use crate::ids::SandboxId;
use crate::lifecycle::{Lifecycle, TimeoutAction};

/// A sandbox's human name: 1–63 characters, `[A-Za-z0-9]` first, then
/// `[A-Za-z0-9_.-]`. Unique per account among active sandboxes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SandboxName(String);

impl SandboxName {
    pub const MAX_LEN: usize = 63;

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        let err = |m: &str| Err(FieldError::new("name", m.to_owned()));
        if s.is_empty() {
            return err("must not be empty");
        }
        if s.len() > Self::MAX_LEN {
            return err(&format!(
                "must be at most {} characters (got {})",
                Self::MAX_LEN,
                s.len()
            ));
        }
        let first = s.as_bytes()[0];
        if !first.is_ascii_alphanumeric() {
            return err("must start with a letter or digit");
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return err("may contain only letters, digits, '_', '.' and '-'");
        }
        Ok(Self(s.to_owned()))
    }

    /// The default name of a sandbox: its id.
    pub fn from_id(id: &SandboxId) -> Self {
        Self(id.as_str().to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SandboxName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for SandboxName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse(&s).map_err(|e| e.message)
    }
}

impl From<SandboxName> for String {
    fn from(n: SandboxName) -> String {
        n.0
    }
}

/// One label: 1–63 characters from `[A-Za-z0-9_.:/=-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Label(String);

impl Label {
    pub const MAX_LEN: usize = 63;

    pub fn parse_field(s: &str, field: &str) -> Result<Self, FieldError> {
        if s.is_empty() || s.len() > Self::MAX_LEN {
            return Err(FieldError::new(
                field,
                format!("label must be 1 to {} characters", Self::MAX_LEN),
            ));
        }
        if !s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'=' | b'-')
        }) {
            return Err(FieldError::new(
                field,
                format!("label '{s}' may contain only letters, digits and _ . : / = -"),
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Label {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse_field(&s, "labels").map_err(|e| e.message)
    }
}

impl From<Label> for String {
    fn from(l: Label) -> String {
        l.0
    }
}

/// A sandbox's labels: at most 64, no duplicates, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Labels(Vec<Label>);

impl Labels {
    pub const MAX: usize = 64;

    pub fn parse_field(items: &[String], field: &str) -> Result<Self, FieldError> {
        if items.len() > Self::MAX {
            return Err(FieldError::new(
                field,
                format!(
                    "at most {} labels are allowed (got {})",
                    Self::MAX,
                    items.len()
                ),
            ));
        }
        let mut out: Vec<Label> = Vec::with_capacity(items.len());
        for (i, s) in items.iter().enumerate() {
            let label = Label::parse_field(s, &format!("{field}[{i}]"))?;
            if !out.contains(&label) {
                out.push(label);
            }
        }
        Ok(Self(out))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Label> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn to_strings(&self) -> Vec<String> {
        self.0.iter().map(|l| l.0.clone()).collect()
    }
}

/// The Docker volume of a sandbox: `agent-sandbox-{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VolumeName(String);

impl VolumeName {
    pub const PREFIX: &'static str = "agent-sandbox-";
    pub const MOUNT_PATH: &'static str = "/workspace";

    pub fn for_sandbox(id: &SandboxId) -> Self {
        Self(format!("{}{}", Self::PREFIX, id))
    }

    /// Parses a Stockade volume name; other names are not ours.
    pub fn parse(s: &str) -> Result<Self, FieldError> {
        let id = s.strip_prefix(Self::PREFIX).ok_or_else(|| {
            FieldError::new("name", format!("'{s}' is not a Stockade volume name"))
        })?;
        SandboxId::parse_field(id, "name")?;
        Ok(Self(s.to_owned()))
    }

    /// The sandbox this volume belongs to.
    pub fn sandbox_id(&self) -> SandboxId {
        SandboxId::parse(&self.0[Self::PREFIX.len()..]).expect("volume names hold a valid id")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for VolumeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The shell loop of the default main process.
const KEEP_ALIVE: &str = "trap 'exit 0' TERM INT; while true; do sleep 86400 & wait $!; done";

/// The main process of a sandbox: a shell command line run with `/bin/sh -c`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StartCommand(String);

impl StartCommand {
    pub const MAX_LEN: usize = 16 * 1024;

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        if s.trim().is_empty() {
            return Err(FieldError::new("startCommand", "must not be empty"));
        }
        if s.len() > Self::MAX_LEN {
            return Err(FieldError::new(
                "startCommand",
                format!("must be at most {} bytes", Self::MAX_LEN),
            ));
        }
        if s.contains('\0') {
            return Err(FieldError::new(
                "startCommand",
                "must not contain NUL bytes",
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The argv Docker runs.
    pub fn argv(&self) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), self.0.clone()]
    }

    /// The default main process: sleeps forever, exits at once on SIGTERM.
    pub fn keep_alive_argv() -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), KEEP_ALIVE.into()]
    }

    /// A main process that starts `command` in the background at every
    /// start of the sandbox and then sleeps like the default one: the
    /// sandbox lives on when the command ends (a template's start command).
    pub fn in_background(command: &str) -> Result<Self, FieldError> {
        Self::parse(&format!("( {command}\n) &\n{KEEP_ALIVE}"))
    }
}

/// Egress policy of a sandbox: `allow-all`, `deny-all` or
/// allow/deny lists of addresses and domains. Records written before
/// policies had lists (`"allow-all"`, `"deny-all"`) read unchanged.
pub type NetworkPolicy = crate::netpolicy::EgressPolicy;

/// The egress policy of `networkAccess` and `networkPolicy` together:
/// `networkAccess: false` is deny-all; a policy that allows anything with
/// it is a contradiction, named on `networkPolicy`.
pub fn network_of(
    access: Option<bool>,
    policy: Option<&serde_json::Value>,
    errs: &mut ValidationErrors,
) -> Option<NetworkPolicy> {
    let parsed = match policy {
        None => None,
        Some(v) => match NetworkPolicy::parse_at(v, "networkPolicy") {
            Ok(p) => Some(p),
            Err(e) => {
                errs.0.extend(e.0);
                return None;
            }
        },
    };
    match (access, parsed) {
        (Some(false), Some(p)) if !p.is_deny_all() => {
            errs.push(
                "networkPolicy",
                "contradicts networkAccess: false (which means deny-all); give one of them",
            );
            None
        }
        (_, Some(p)) => Some(p),
        (Some(a), None) => Some(NetworkPolicy::from_network_access(a)),
        (None, None) => Some(NetworkPolicy::AllowAll),
    }
}

/// Server-side defaults and upper bounds for sandbox settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    pub image: String,
    pub cpu_cores: f64,
    pub memory_gb: f64,
    pub disk_size_gb: u32,
    pub timeout_minutes: f64,
    pub max_cpu_cores: f64,
    pub max_memory_gb: f64,
    pub max_disk_size_gb: u32,
    pub gpus_available: u32,
    /// Runtime presets: name → image.
    pub runtimes: BTreeMap<String, String>,
}

/// The code interpreter's image: built on the Docker host by
/// `scripts/build-image code-interpreter`, never pulled from a registry.
pub const CODE_INTERPRETER_IMAGE: &str = "stockade-code-interpreter:latest";

/// How to get an image that Stockade builds locally instead of pulling (any
/// tag of the code interpreter's repository), for the messages that report
/// it absent.
pub fn local_build_hint(image: &str) -> Option<&'static str> {
    let repository = CODE_INTERPRETER_IMAGE.split(':').next().unwrap_or_default();
    (image.split(':').next() == Some(repository))
        .then_some("build it with scripts/build-image code-interpreter")
}

impl Default for Defaults {
    fn default() -> Self {
        let runtimes = [
            ("code-interpreter-v1", CODE_INTERPRETER_IMAGE),
            ("node20", "node:20-bookworm"),
            ("node22", "node:22-bookworm"),
            ("python3.12", "python:3.12-bookworm"),
            ("python3.13", "python:3.13-bookworm"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        Self {
            image: "node:20-bookworm".into(),
            cpu_cores: 1.0,
            memory_gb: 2.0,
            disk_size_gb: 10,
            timeout_minutes: 0.0,
            max_cpu_cores: 64.0,
            max_memory_gb: 256.0,
            max_disk_size_gb: 2048,
            gpus_available: 0,
            runtimes,
        }
    }
}

/// Raw create input, every field optional; [`SandboxSpec::from_input`] checks it.
#[derive(Debug, Clone, Default)]
pub struct SpecInput {
    pub name: Option<String>,
    pub docker_image: Option<String>,
    pub runtime: Option<String>,
    pub start_command: Option<String>,
    pub cpu_cores: Option<f64>,
    pub memory_gb: Option<f64>,
    pub disk_size_gb: Option<f64>,
    pub gpu_count: Option<f64>,
    pub network_access: Option<bool>,
    /// `networkPolicy` as sent: a string or `{"allow":[…],"deny":[…]}`.
    pub network_policy: Option<serde_json::Value>,
    pub timeout_minutes: Option<f64>,
    pub environment_vars: Option<BTreeMap<String, String>>,
    pub labels: Option<Vec<String>>,
    pub tags: Option<BTreeMap<String, String>>,
    pub ports: Option<Vec<i64>>,
    pub persistent: Option<bool>,
    /// What ends a session, idling, and waking up on use.
    pub lifecycle: Option<crate::lifecycle::LifecycleInput>,
    /// Free-form key/value pairs (E2B's `metadata`), see [`parse_metadata`].
    pub metadata: Option<BTreeMap<String, String>>,
    /// The Docker host to place it on; any host when absent.
    pub server: Option<String>,
    /// Labels the host must carry.
    pub host_selector: Option<BTreeMap<String, String>>,
    /// Shared volumes to mount.
    pub volume_mounts: Option<Vec<crate::shared_volume::MountInput>>,
    /// The template build it runs: set by the service once it resolved the
    /// template a create names, never taken from a client as it is.
    pub template: Option<crate::template::TemplateUse>,
}

/// Where a create asked to be placed: a host by name, and labels
/// the host must carry. Empty: any host.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Placement {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub selector: BTreeMap<String, String>,
}

impl Placement {
    pub fn is_any(&self) -> bool {
        self.server.is_none() && self.selector.is_empty()
    }

    /// Whether host `name` with `labels` is allowed.
    pub fn allows(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.server.as_deref().is_none_or(|s| s == name)
            && self.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// The most labels a host selector (or a host) may have.
pub const MAX_HOST_LABELS: usize = 32;

/// Checks a host label (or selector) map: at most 32 entries, keys 1 to 63
/// of letters, digits and `_ . - /`, values at most 255 printable
/// characters. Errors name `field.key`.
pub fn parse_host_labels(
    labels: &BTreeMap<String, String>,
    field: &str,
) -> Result<BTreeMap<String, String>, FieldError> {
    if labels.len() > MAX_HOST_LABELS {
        return Err(FieldError::new(
            field,
            format!("at most {MAX_HOST_LABELS} labels (got {})", labels.len()),
        ));
    }
    for (k, v) in labels {
        let key_ok = (1..=63).contains(&k.len())
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/'));
        if !key_ok {
            return Err(FieldError::new(
                format!("{field}.{k}"),
                "a label key is 1 to 63 letters, digits and _ . - /",
            ));
        }
        if v.len() > 255 || v.chars().any(char::is_control) {
            return Err(FieldError::new(
                format!("{field}.{k}"),
                "a label value is at most 255 printable characters",
            ));
        }
    }
    Ok(labels.clone())
}

/// Everything a sandbox was created with, validated. Stored as the `config`
/// of the record's metadata (snake_case).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub name: SandboxName,
    pub docker_image: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_command: Option<StartCommand>,
    pub cpu_cores: f64,
    pub memory_gb: f64,
    pub disk_size_gb: u32,
    pub gpu_count: u32,
    pub network: NetworkPolicy,
    pub timeout_minutes: f64,
    #[serde(default)]
    pub environment_vars: BTreeMap<String, String>,
    #[serde(default)]
    pub labels: Labels,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    #[serde(default)]
    pub ports: Vec<u16>,
    pub persistent: bool,
    /// Variables the sandbox was created or updated with and that a later
    /// update removed: the container still carries them in its environment,
    /// so every exec unsets them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_env: Vec<String>,
    /// Free-form key/value pairs a client attached (E2B's `metadata`): up to
    /// [`MAX_METADATA_ENTRIES`], filterable through the E2B API. Separate
    /// from `tags`, whose limit of five stays as Stockade's API documents it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Where the create asked to be placed.
    #[serde(default, skip_serializing_if = "Placement::is_any")]
    pub placement: Placement,
    /// What its timeout does, its idle timeout, and auto-resume.
    #[serde(default, skip_serializing_if = "Lifecycle::is_default")]
    pub lifecycle: Lifecycle,
    /// Shared volumes mounted into it, by id once the create resolved them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<crate::shared_volume::VolumeMount>,
    /// The template build it runs, and what that build left for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<crate::template::TemplateUse>,
}

pub const MAX_TAGS: usize = 5;
pub const MAX_PORTS: usize = 4;
pub const MAX_ENV_VARS: usize = 256;
/// Most entries of a sandbox's `metadata`.
pub const MAX_METADATA_ENTRIES: usize = 128;
/// Longest `metadata` key, in bytes.
pub const MAX_METADATA_KEY_LEN: usize = 256;
/// Longest `metadata` value, in bytes.
pub const MAX_METADATA_VALUE_LEN: usize = 2048;
/// One week.
pub const MAX_TIMEOUT_MINUTES: f64 = 7.0 * 24.0 * 60.0;

/// Checks an image reference: non-empty, at most 255 characters, no spaces,
/// only the characters Docker references use.
pub fn parse_image(s: &str, field: &str) -> Result<String, FieldError> {
    if s.is_empty() || s.len() > 255 {
        return Err(FieldError::new(
            field,
            "image reference must be 1 to 255 characters",
        ));
    }
    let ok = s.bytes().all(|b| {
        b.is_ascii_lowercase()
            || b.is_ascii_uppercase()
            || b.is_ascii_digit()
            || matches!(b, b'.' | b'_' | b'-' | b'/' | b':' | b'@')
    });
    let first = s.as_bytes()[0];
    if !ok || !first.is_ascii_alphanumeric() || s.ends_with(':') || s.ends_with('/') {
        return Err(FieldError::new(
            field,
            format!("'{s}' is not a valid image reference (e.g. node:20-bookworm)"),
        ));
    }
    Ok(s.to_owned())
}

/// Variables only Stockade sets in a sandbox: the in-sandbox agent's access
/// token and the mark of an exec's processes.
pub const RESERVED_ENV: [&str; 2] = ["STOCKADE_AGENT_TOKEN", "STOCKADE_EXEC_ID"];

fn parse_env_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && key.len() <= 255
}

/// Checks `map`: at most `max` entries (else `too_many`, naming `field`),
/// then each with `refuse`, which gives the field and why for an entry it
/// refuses.
fn check_map(
    map: &BTreeMap<String, String>,
    field: &str,
    max: usize,
    too_many: impl FnOnce() -> String,
    refuse: impl Fn(&str, &str) -> Option<(String, String)>,
) -> Result<BTreeMap<String, String>, FieldError> {
    if map.len() > max {
        return Err(FieldError::new(field, too_many()));
    }
    for (k, v) in map {
        if let Some((field, message)) = refuse(k, v) {
            return Err(FieldError::new(field, message));
        }
    }
    Ok(map.clone())
}

/// Checks environment variables (names like `API_KEY`, values without NUL).
pub fn parse_env(
    env: &BTreeMap<String, String>,
    field: &str,
) -> Result<BTreeMap<String, String>, FieldError> {
    let too_many = || format!("at most {MAX_ENV_VARS} variables are allowed");
    check_map(env, field, MAX_ENV_VARS, too_many, |k, v| {
        let why = if !parse_env_key(k) {
            "variable names must match [A-Za-z_][A-Za-z0-9_]*"
        } else if RESERVED_ENV.contains(&k) {
            "is reserved for Stockade's own use"
        } else if v.contains('\0') || v.len() > 128 * 1024 {
            "value must be at most 128 KiB and contain no NUL bytes"
        } else {
            return None;
        };
        Some((format!("{field}.{k}"), why.to_owned()))
    })
}

/// Checks tags: at most 5, keys 1–63 characters, values at most 255.
pub fn parse_tags(
    tags: &BTreeMap<String, String>,
    field: &str,
) -> Result<BTreeMap<String, String>, FieldError> {
    let too_many = || format!("at most {MAX_TAGS} tags are allowed (got {})", tags.len());
    check_map(tags, field, MAX_TAGS, too_many, |k, v| {
        if k.is_empty() || k.len() > 63 || k.chars().any(|c| c.is_control()) {
            let why = format!("tag key '{k}' must be 1 to 63 printable characters");
            return Some((field.to_owned(), why));
        }
        let bad_value = v.len() > 255 || v.chars().any(|c| c.is_control());
        bad_value.then(|| {
            let why = "tag value must be at most 255 printable characters";
            (format!("{field}.{k}"), why.to_owned())
        })
    })
}

/// Checks a sandbox's `metadata`: at most [`MAX_METADATA_ENTRIES`] pairs,
/// keys of 1 to [`MAX_METADATA_KEY_LEN`] bytes and values of at most
/// [`MAX_METADATA_VALUE_LEN`] bytes, neither with control characters. An
/// error names the entry (`metadata.<key>`).
pub fn parse_metadata(
    metadata: &BTreeMap<String, String>,
    field: &str,
) -> Result<BTreeMap<String, String>, FieldError> {
    let too_many = || {
        format!(
            "at most {MAX_METADATA_ENTRIES} entries are allowed (got {})",
            metadata.len()
        )
    };
    check_map(metadata, field, MAX_METADATA_ENTRIES, too_many, |k, v| {
        let shown: String = k.chars().take(40).collect();
        let (entry, why) = if k.is_empty()
            || k.len() > MAX_METADATA_KEY_LEN
            || k.chars().any(char::is_control)
        {
            (field.to_owned(), format!("key '{shown}' must be 1 to {MAX_METADATA_KEY_LEN} bytes without control characters"))
        } else if v.len() > MAX_METADATA_VALUE_LEN || v.chars().any(char::is_control) {
            (format!("{field}.{shown}"), format!("value must be at most {MAX_METADATA_VALUE_LEN} bytes without control characters"))
        } else {
            return None;
        };
        Some((entry, why))
    })
}

/// Checks a port number (1–65535).
pub fn parse_port(p: i64, field: &str) -> Result<u16, FieldError> {
    u16::try_from(p)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| FieldError::new(field, format!("port {p} is out of range 1-65535")))
}

/// `v` when it is finite and within `min..=max`; else the error `why`.
fn in_range(
    v: f64,
    min: f64,
    max: f64,
    field: &str,
    why: impl FnOnce() -> String,
) -> Result<f64, FieldError> {
    if v.is_finite() && (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(FieldError::new(field, why()))
    }
}

/// Checks a session timeout in minutes (0 = never, fractions allowed).
pub fn parse_timeout_minutes(t: f64, field: &str) -> Result<f64, FieldError> {
    in_range(t, 0.0, MAX_TIMEOUT_MINUTES, field, || {
        format!("must be between 0 (never) and {MAX_TIMEOUT_MINUTES} minutes")
    })
}

/// Checks a CPU count against the server's bounds.
pub fn parse_cpu(v: f64, defaults: &Defaults, field: &str) -> Result<f64, FieldError> {
    let max = defaults.max_cpu_cores;
    in_range(v, 0.01, max, field, || {
        format!("must be between 0.01 and {max} cores (got {v})")
    })
}

/// Checks a memory size in GB against the server's bounds (at least 64 MB).
pub fn parse_memory(v: f64, defaults: &Defaults, field: &str) -> Result<f64, FieldError> {
    let max = defaults.max_memory_gb;
    in_range(v, 0.0625, max, field, || {
        format!("must be between 0.0625 and {max} GB (got {v})")
    })
}

fn whole(v: f64, field: &str, min: u32, max: u32, what: &str) -> Result<u32, FieldError> {
    if !v.is_finite() || v.fract() != 0.0 || v < min as f64 || v > max as f64 {
        return Err(FieldError::new(
            field,
            format!("must be a whole number of {what} between {min} and {max} (got {v})"),
        ));
    }
    Ok(v as u32)
}

impl SandboxSpec {
    /// Validates `input`, applying `defaults` to what it leaves out. Every bad
    /// field is reported, each by its API name.
    pub fn from_input(
        input: SpecInput,
        id: &SandboxId,
        defaults: &Defaults,
    ) -> Result<Self, ValidationErrors> {
        let mut errs = ValidationErrors::default();
        let name = match &input.name {
            Some(n) => errs.check(SandboxName::parse(n)),
            None => Some(SandboxName::from_id(id)),
        };
        let runtime = match &input.runtime {
            Some(r) => match defaults.runtimes.get(r) {
                Some(_) => Some(r.clone()),
                None => {
                    let known: Vec<&str> = defaults.runtimes.keys().map(|k| k.as_str()).collect();
                    errs.push(
                        "runtime",
                        format!(
                            "unknown runtime '{r}': known runtimes are {}",
                            known.join(", ")
                        ),
                    );
                    None
                }
            },
            None => None,
        };
        let image = match (&input.docker_image, &runtime) {
            (Some(i), _) => errs.check(parse_image(i, "dockerImage")),
            (None, Some(r)) => defaults.runtimes.get(r).cloned(),
            (None, None) => Some(defaults.image.clone()),
        };
        let start_command = match &input.start_command {
            Some(c) => errs.check(StartCommand::parse(c)).map(Some),
            None => Some(None),
        };
        let cpu = errs.check(parse_cpu(
            input.cpu_cores.unwrap_or(defaults.cpu_cores),
            defaults,
            "cpuCores",
        ));
        let mem = errs.check(parse_memory(
            input.memory_gb.unwrap_or(defaults.memory_gb),
            defaults,
            "memoryGB",
        ));
        let disk = errs.check(whole(
            input.disk_size_gb.unwrap_or(defaults.disk_size_gb as f64),
            "diskSizeGB",
            1,
            defaults.max_disk_size_gb,
            "GB",
        ));
        let gpu = match input.gpu_count {
            Some(g) if g > defaults.gpus_available as f64 && g.fract() == 0.0 && g >= 0.0 => {
                errs.push(
                    "gpuCount",
                    format!(
                        "{g} GPUs requested but this server has {} available",
                        defaults.gpus_available
                    ),
                );
                None
            }
            Some(g) => errs.check(whole(g, "gpuCount", 0, defaults.gpus_available, "GPUs")),
            None => Some(0),
        };
        let timeout = errs.check(parse_timeout_minutes(
            input.timeout_minutes.unwrap_or(defaults.timeout_minutes),
            "timeoutMinutes",
        ));
        let env = errs.check(parse_env(
            &input.environment_vars.unwrap_or_default(),
            "environmentVars",
        ));
        let labels = errs.check(Labels::parse_field(
            &input.labels.unwrap_or_default(),
            "labels",
        ));
        let tags = errs.check(parse_tags(&input.tags.unwrap_or_default(), "tags"));
        let metadata = errs.check(parse_metadata(
            &input.metadata.unwrap_or_default(),
            "metadata",
        ));
        let ports = {
            let raw = input.ports.unwrap_or_default();
            if raw.len() > MAX_PORTS {
                errs.push(
                    "ports",
                    format!(
                        "at most {MAX_PORTS} ports can be declared (got {})",
                        raw.len()
                    ),
                );
                None
            } else {
                let mut out = Vec::new();
                for (i, p) in raw.iter().enumerate() {
                    if let Some(p) = errs.check(parse_port(*p, &format!("ports[{i}]"))) {
                        if !out.contains(&p) {
                            out.push(p);
                        }
                    }
                }
                Some(out)
            }
        };
        let network = network_of(
            input.network_access,
            input.network_policy.as_ref(),
            &mut errs,
        );
        let placement_server = match &input.server {
            Some(s) => errs
                .check(crate::host::parse_host_name(s, "server"))
                .map(Some),
            None => Some(None),
        };
        let selector = errs.check(parse_host_labels(
            &input.host_selector.unwrap_or_default(),
            "hostSelector",
        ));
        let lifecycle = errs.check(
            input
                .lifecycle
                .unwrap_or_default()
                .apply(&Lifecycle::default(), "lifecycle"),
        );
        let mounts = crate::shared_volume::parse_mounts(
            input.volume_mounts.as_deref().unwrap_or_default(),
            &mut errs,
        );
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Self {
            name: name.expect("checked"),
            docker_image: image.expect("checked"),
            runtime,
            start_command: start_command.expect("checked"),
            cpu_cores: cpu.expect("checked"),
            memory_gb: mem.expect("checked"),
            disk_size_gb: disk.expect("checked"),
            gpu_count: gpu.expect("checked"),
            network: network.expect("checked"),
            timeout_minutes: timeout.expect("checked"),
            environment_vars: env.expect("checked"),
            labels: labels.expect("checked"),
            tags: tags.expect("checked"),
            ports: ports.expect("checked"),
            persistent: input.persistent.unwrap_or(true),
            removed_env: Vec::new(),
            metadata: metadata.expect("checked"),
            placement: Placement {
                server: placement_server.expect("checked"),
                selector: selector.expect("checked"),
            },
            lifecycle: lifecycle.expect("checked"),
            mounts: mounts.expect("checked"),
            template: input.template,
        })
    }

    /// What the end of a session does: the lifecycle's choice, else a
    /// persistent sandbox is stopped and any other killed.
    pub fn timeout_action(&self) -> TimeoutAction {
        self.lifecycle.on_timeout.unwrap_or(if self.persistent {
            TimeoutAction::Stop
        } else {
            TimeoutAction::Kill
        })
    }

    /// Memory limit in bytes.
    pub fn memory_bytes(&self) -> i64 {
        (self.memory_gb * 1024.0 * 1024.0 * 1024.0) as i64
    }

    /// CPU limit in Docker's NanoCpus.
    pub fn nano_cpus(&self) -> i64 {
        (self.cpu_cores * 1e9) as i64
    }

    /// The argv of the main process.
    pub fn command_argv(&self) -> Vec<String> {
        match &self.start_command {
            Some(c) => c.argv(),
            None => StartCommand::keep_alive_argv(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> SandboxId {
        SandboxId::parse("abcdefghijkl").unwrap()
    }

    /// The spec of `input` with the default settings.
    fn spec_of(input: SpecInput) -> SandboxSpec {
        SandboxSpec::from_input(input, &id(), &Defaults::default()).unwrap()
    }

    #[test]
    fn defaults_apply() {
        let spec = spec_of(SpecInput::default());
        assert_eq!(
            spec.name.as_str(),
            "abcdefghijkl",
            "the name defaults to the id"
        );
        assert_eq!(spec.docker_image, "node:20-bookworm");
        assert_eq!(spec.cpu_cores, 1.0);
        assert_eq!(spec.memory_gb, 2.0);
        assert_eq!(spec.disk_size_gb, 10);
        assert_eq!(spec.gpu_count, 0);
        assert!(spec.persistent);
        assert_eq!(spec.network, NetworkPolicy::AllowAll);
    }

    #[test]
    fn every_bad_field_is_named() {
        let input = SpecInput {
            name: Some("".into()),
            cpu_cores: Some(-1.0),
            memory_gb: Some(100000.0),
            disk_size_gb: Some(0.5),
            gpu_count: Some(1.0),
            timeout_minutes: Some(-3.0),
            labels: Some(vec!["bad label".into()]),
            tags: Some((0..6).map(|i| (format!("k{i}"), "v".into())).collect()),
            ports: Some(vec![1, 2, 3, 4, 5]),
            docker_image: Some("Bad Image".into()),
            environment_vars: Some([("1BAD".to_string(), "x".to_string())].into()),
            start_command: Some("  ".into()),
            runtime: Some("cobol".into()),
            ..Default::default()
        };
        let errs = SandboxSpec::from_input(input, &id(), &Defaults::default()).unwrap_err();
        let fields: Vec<&str> = errs.0.iter().map(|e| e.field.as_str()).collect();
        for f in [
            "name",
            "cpuCores",
            "memoryGB",
            "diskSizeGB",
            "gpuCount",
            "timeoutMinutes",
            "labels[0]",
            "tags",
            "ports",
            "dockerImage",
            "environmentVars.1BAD",
            "startCommand",
            "runtime",
        ] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
    }

    #[test]
    fn names() {
        assert!(SandboxName::parse("demo-1.x_y").is_ok());
        assert!(SandboxName::parse("-x").is_err());
        assert!(SandboxName::parse(&"a".repeat(64)).is_err());
        assert!(SandboxName::parse("a b").is_err());
    }

    #[test]
    fn images() {
        for ok in [
            "node:20-bookworm",
            "ghcr.io/a/b:1.2",
            "busybox",
            "x@sha256:abc",
        ] {
            assert!(parse_image(ok, "dockerImage").is_ok(), "{ok}");
        }
        for bad in ["", "a b", "-x", "x:", "x;rm -rf"] {
            assert!(parse_image(bad, "dockerImage").is_err(), "{bad}");
        }
    }

    #[test]
    fn runtime_preset_maps_to_image() {
        let spec = spec_of(SpecInput {
            runtime: Some("python3.13".into()),
            ..Default::default()
        });
        assert_eq!(spec.docker_image, "python:3.13-bookworm");
    }

    #[test]
    fn volume_names() {
        let v = VolumeName::for_sandbox(&id());
        assert_eq!(v.as_str(), "agent-sandbox-abcdefghijkl");
        assert_eq!(VolumeName::parse(v.as_str()).unwrap().sandbox_id(), id());
        assert!(VolumeName::parse("other").is_err());
    }

    #[test]
    fn spec_round_trips_as_snake_case() {
        let spec = spec_of(SpecInput::default());
        let json = serde_json::to_value(&spec).unwrap();
        assert!(json.get("docker_image").is_some());
        assert!(json.get("cpu_cores").is_some());
        let back: SandboxSpec = serde_json::from_value(json).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn metadata_holds_many_pairs_apart_from_tags() {
        let many: BTreeMap<String, String> = (0..64)
            .map(|i| (format!("k{i}"), format!("v{i}")))
            .collect();
        let spec = spec_of(SpecInput {
            metadata: Some(many.clone()),
            ..Default::default()
        });
        assert_eq!(spec.metadata, many);
        assert!(spec.tags.is_empty());
        // Stored in the spec JSON, and absent (old records) reads as empty.
        let mut json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["metadata"]["k7"], "v7");
        json.as_object_mut().unwrap().remove("metadata");
        let old: SandboxSpec = serde_json::from_value(json).unwrap();
        assert!(old.metadata.is_empty());
    }

    #[test]
    fn bad_metadata_is_named() {
        let too_many: BTreeMap<String, String> = (0..=MAX_METADATA_ENTRIES)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        let err = parse_metadata(&too_many, "metadata").unwrap_err();
        assert_eq!(err.field, "metadata");
        let err = parse_metadata(&[(String::new(), "v".into())].into(), "metadata").unwrap_err();
        assert_eq!(err.field, "metadata");
        let err = parse_metadata(&[("k".into(), "a\nb".into())].into(), "metadata").unwrap_err();
        assert_eq!(err.field, "metadata.k");
        let long = "x".repeat(MAX_METADATA_VALUE_LEN + 1);
        let err = parse_metadata(&[("k".into(), long)].into(), "metadata").unwrap_err();
        assert_eq!(err.field, "metadata.k");
        assert!(parse_metadata(&[("user".into(), "ü ok".into())].into(), "metadata").is_ok());
    }
}
