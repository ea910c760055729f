//! Templates: an account's own sandbox images, built from a base image (or
//! another template) by a list of steps — `RUN`, `COPY`, `ENV`, `ARG`,
//! `WORKDIR`, `USER` — each run in a build sandbox through its agent, the
//! way E2B's Template SDK sends them and a Dockerfile is parsed into them.
//!
//! A template has names (aliases) unique in its account, and builds; the
//! newest ready build is what a sandbox created from the template runs,
//! with the build's final environment, working directory and user, its
//! start command started at sandbox start and its ready command waited for.

mod dockerfile;
mod steps;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::FieldError;
use crate::ids::{AccountId, SandboxId};
use crate::names::check_name;

pub use dockerfile::{parse_dockerfile, ParsedDockerfile};
pub use steps::{BuildStep, ImageConfig, StepKind, MAX_STEPS};

crate::ids::id_type!(
    /// A template's id: 12 characters from `[a-z0-9]`.
    TemplateId, 12, "template id"
);
/// One build of a template: a random UUID in its lowercase hyphenated form
/// (E2B's clients read build ids as UUIDs); also the tag of its image
/// (`stockade-template:{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BuildId(String);

impl BuildId {
    pub fn generate() -> Self {
        let mut b: [u8; 16] = rand::random();
        b[6] = (b[6] & 0x0f) | 0x40; // version 4
        b[8] = (b[8] & 0x3f) | 0x80; // the RFC 4122 variant
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        Self(format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        ))
    }

    /// Parses an id; `field` names the input in the error.
    pub fn parse_field(s: &str, field: &str) -> Result<Self, FieldError> {
        let ok = s.len() == 36
            && s.bytes().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => b == b'-',
                _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
            });
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(FieldError::new(
                field,
                format!(
                    "invalid build id '{}': expected a UUID in lower case",
                    crate::ids::truncate(s)
                ),
            ))
        }
    }

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        Self::parse_field(s, "buildID")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for BuildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for BuildId {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse(&s).map_err(|e| e.message)
    }
}

impl From<BuildId> for String {
    fn from(id: BuildId) -> String {
        id.0
    }
}

/// A template's name (E2B's alias): 1 to 63 characters from `[a-z0-9_-]`,
/// starting with a letter or digit. Unique among an account's templates.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TemplateName(String);

impl TemplateName {
    pub const MAX_LEN: usize = 63;

    pub fn parse_field(s: &str, field: &str) -> Result<Self, FieldError> {
        check_name(
            s,
            field,
            Self::MAX_LEN,
            |b| {
                (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
                    && b.iter().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_')
                    })
            },
            || {
                format!(
                    "'{}' is not a template name: use 1 to {} characters from [a-z0-9_-], \
                     starting with a letter or digit",
                    s.chars().take(70).collect::<String>(),
                    Self::MAX_LEN
                )
            },
        )
        .map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TemplateName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for TemplateName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse_field(&s, "name").map_err(|e| e.message)
    }
}

impl From<TemplateName> for String {
    fn from(n: TemplateName) -> String {
        n.0
    }
}

/// A template as the database knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub id: TemplateId,
    pub account_id: AccountId,
    /// Its names (aliases); the first is the one lists show.
    pub names: Vec<TemplateName>,
    /// Visible to every account (set by an administrator); private otherwise.
    pub public: bool,
    /// Defaults of its sandboxes, when the create does not say.
    pub cpu_count: Option<u32>,
    pub memory_mb: Option<u32>,
    pub disk_size_gb: Option<u32>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

impl Template {
    /// The repository of every template build's image.
    pub const IMAGE_REPO: &'static str = "stockade-template";
    /// The repository of the build cache's images (one per cached step).
    pub const LAYER_REPO: &'static str = "stockade-template-layer";
    pub const MAX_NAMES: usize = 16;

    pub fn new(account_id: AccountId, names: Vec<TemplateName>, now: DateTime<Utc>) -> Self {
        Self {
            id: TemplateId::generate(),
            account_id,
            names,
            public: false,
            cpu_count: None,
            memory_mb: None,
            disk_size_gb: None,
            created_at: now,
            updated_at: now,
            deleted_at: None,
        }
    }
}

/// Where a build is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildStatus {
    /// Made, its steps not sent yet (E2B's two-call build) or not started.
    Waiting,
    Building,
    Ready,
    Error,
}

impl BuildStatus {
    pub const ALL: [BuildStatus; 4] = [Self::Waiting, Self::Building, Self::Ready, Self::Error];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Building => "building",
            Self::Ready => "ready",
            Self::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Result<Self, FieldError> {
        crate::status::parse_status(Self::ALL, Self::as_str, s, || {
            format!("unknown build status '{s}': expected waiting, building, ready or error")
        })
    }

    /// Whether the build will change no more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Ready | Self::Error)
    }
}

/// What a build starts from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BuildBase {
    /// An image on the hosts (or in a reachable registry).
    Image(String),
    /// Another template's current build, by name or id.
    Template(String),
}

/// What a build does: its base, its steps, and what its sandboxes start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildRecipe {
    pub base: BuildBase,
    pub steps: Vec<BuildStep>,
    /// Started at every start of a sandbox made from the build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_cmd: Option<String>,
    /// Run until it exits 0 before a create from the build answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_cmd: Option<String>,
    /// Run every step, whatever the cache holds.
    #[serde(default)]
    pub force: bool,
    /// A user the build makes (with a home directory) before its first
    /// step when the base has none of that name: every image of E2B has
    /// `user`, and the steps E2B's SDKs send name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision_user: Option<String>,
}

impl BuildRecipe {
    pub const MAX_COMMAND_LEN: usize = 16 * 1024;

    /// Checks every part; errors name the field (`steps[3].args`).
    pub fn validate(&self) -> Result<(), FieldError> {
        match &self.base {
            BuildBase::Image(i) if i.trim().is_empty() || i.len() > 255 => {
                return Err(FieldError::new(
                    "fromImage",
                    "must be an image reference of 1 to 255 characters",
                ))
            }
            BuildBase::Template(t) if t.trim().is_empty() || t.len() > 255 => {
                return Err(FieldError::new(
                    "fromTemplate",
                    "must be a template name or id",
                ))
            }
            _ => {}
        }
        if self.steps.len() > MAX_STEPS {
            return Err(FieldError::new(
                "steps",
                format!("at most {MAX_STEPS} steps are allowed"),
            ));
        }
        for (i, step) in self.steps.iter().enumerate() {
            step.validate(&format!("steps[{i}]"))?;
        }
        if let Some(user) = &self.provision_user {
            steps::check_user(user, "provisionUser")?;
        }
        for (field, cmd) in [("startCmd", &self.start_cmd), ("readyCmd", &self.ready_cmd)] {
            if let Some(cmd) = cmd {
                steps::check_command(cmd, field, Self::MAX_COMMAND_LEN)?;
            }
        }
        Ok(())
    }
}

/// One build of a template.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateBuild {
    pub id: BuildId,
    pub template_id: TemplateId,
    pub account_id: AccountId,
    pub status: BuildStatus,
    /// `None` while E2B's client has not sent the steps yet.
    pub recipe: Option<BuildRecipe>,
    /// The image of a ready build (`stockade-template:{id}`).
    pub image_ref: Option<String>,
    /// What sandboxes of a ready build run with.
    pub config: Option<ImageConfig>,
    /// Why a build failed: the step, its exit code, its last output.
    pub reason: Option<String>,
    /// The step a failed build stopped at.
    pub failed_step: Option<u32>,
    /// Its tags (`name:tag` picks the newest ready build with the tag).
    pub tags: Vec<String>,
    /// The host that runs or ran it.
    pub server: Option<String>,
    /// The sandbox its steps run in, while it runs.
    pub sandbox_id: Option<SandboxId>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl TemplateBuild {
    pub fn new(template: &Template, now: DateTime<Utc>) -> Self {
        Self {
            id: BuildId::generate(),
            template_id: template.id.clone(),
            account_id: template.account_id.clone(),
            status: BuildStatus::Waiting,
            recipe: None,
            image_ref: None,
            config: None,
            reason: None,
            failed_step: None,
            tags: Vec::new(),
            server: None,
            sandbox_id: None,
            created_at: now,
            started_at: None,
            finished_at: None,
        }
    }

    /// The image a ready build's sandboxes run.
    pub fn image_name(&self) -> String {
        format!("{}:{}", Template::IMAGE_REPO, self.id)
    }

    /// The build of a template image reference (`stockade-template:{id}`).
    pub fn id_of_image(image_ref: &str) -> Option<BuildId> {
        let tag = image_ref
            .strip_prefix(Template::IMAGE_REPO)?
            .strip_prefix(':')?;
        BuildId::parse(tag).ok()
    }

    /// `templates/{id}/image.tar`: where the object store keeps the image,
    /// for hosts that lack it.
    pub fn image_blob_key_for(id: &BuildId) -> String {
        format!("templates/{id}/image.tar")
    }
}

/// What a sandbox keeps of the template build it runs: which one, and the
/// working directory, user and ready command of its commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateUse {
    pub template_id: TemplateId,
    pub build_id: BuildId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Run until it exits 0 before a create or start answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_cmd: Option<String>,
    /// A sandbox that builds the template (`build_id`): its `/workspace` is
    /// part of the container, for the commit to keep.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub building: bool,
}

/// A step's result kept for later builds: the image after the steps whose
/// inputs hash to `key`, on `server`. Keys include the account: no account
/// reuses another's layers.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateLayer {
    pub key: String,
    pub account_id: AccountId,
    pub server: String,
    pub image_ref: String,
    /// The settings after those steps.
    pub config: ImageConfig,
    /// When a build last made or used it (the cache keeps it for a while
    /// from then).
    pub created_at: DateTime<Utc>,
}

/// How loud a build log line is, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Self {
        match s {
            "debug" => Self::Debug,
            "warn" => Self::Warn,
            "error" => Self::Error,
            _ => Self::Info,
        }
    }
}

/// One line of a build's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildLogLine {
    /// Its place in the build's log, from 0.
    pub offset: u64,
    pub at: DateTime<Utc>,
    pub level: LogLevel,
    /// The step it belongs to (`base`, `1`…, `finalize`), when one.
    pub step: Option<String>,
    pub message: String,
}

/// The variables of `config` with `extra` laid over them (a create's own
/// `environmentVars` win over the template's).
pub fn merged_env(
    config: &ImageConfig,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = config.env.clone();
    env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["python", "my-agent_2", "0day"] {
            TemplateName::parse_field(good, "name").unwrap();
        }
        for bad in ["", "-x", "Upper", "a b", "x/y", &"a".repeat(64)] {
            let e = TemplateName::parse_field(bad, "names[0]").unwrap_err();
            assert_eq!(e.field, "names[0]");
        }
    }

    #[test]
    fn build_ids_are_uuids() {
        let id = BuildId::generate();
        assert_eq!(BuildId::parse(id.as_str()).unwrap(), id);
        assert_eq!(id.as_str().as_bytes()[14], b'4');
        for bad in [
            "",
            "abc",
            &id.as_str().to_uppercase(),
            &id.as_str().replace('-', "_"),
        ] {
            assert_eq!(
                BuildId::parse_field(bad, "buildID").unwrap_err().field,
                "buildID"
            );
        }
    }

    #[test]
    fn build_statuses_round_trip() {
        for s in BuildStatus::ALL {
            assert_eq!(BuildStatus::parse(s.as_str()).unwrap(), s);
        }
        assert!(BuildStatus::parse("done").is_err());
        assert!(BuildStatus::Ready.is_final() && !BuildStatus::Building.is_final());
    }
}
