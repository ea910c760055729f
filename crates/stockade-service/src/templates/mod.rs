//! Templates, the use cases: make a template (or a new build of one),
//! receive the files its `COPY` steps need, start a build, read a build's
//! status and log, list and delete templates. A build runs in its own task
//! (`build.rs`) under a durable operation: a server that dies mid-build
//! leaves it to recovery, which fails it and removes its build sandbox.
//!
//! Templates belong to one account; a public one can be used (never built
//! or deleted) by every account. Another account's private template is
//! "not found" everywhere.

mod build;
pub mod collect;
pub mod copy;
mod tags;

pub use tags::TagOf;

use chrono::{DateTime, Utc};
use stockade_core::template::{
    parse_dockerfile, BuildBase, BuildId, BuildLogLine, BuildRecipe, BuildStatus, BuildStep,
    StepKind, Template, TemplateBuild, TemplateId, TemplateName,
};
use stockade_core::{AccountId, Operation, OperationKind, Scope};
use stockade_runtime::ByteStream;
use stockade_store::StoreError;
use tracing::{info, warn};

use crate::content::templates::{load, template_not_found};
use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// The most log lines one status read returns.
pub const MAX_LOG_LINES: u32 = 1000;
/// How long a files upload link is valid.
pub const FILES_LINK_TTL: chrono::Duration = chrono::Duration::hours(1);
/// The signing domain of files upload links.
const FILES_TOKEN_DOMAIN: &str = "stockade-template-files/v1\n";

/// What a new template (or a new build of an existing one) asks for.
#[derive(Debug, Clone, Default)]
pub struct TemplateInput {
    /// Its names; the first one finds an existing template of the caller,
    /// which then gets a new build.
    pub names: Vec<String>,
    /// Tags of the new build.
    pub tags: Vec<String>,
    pub cpu_count: Option<u32>,
    pub memory_mb: Option<u32>,
    pub disk_size_gb: Option<u32>,
}

/// What a build is asked to do, before its checks.
#[derive(Debug, Clone, Default)]
pub struct BuildRequest {
    pub from_image: Option<String>,
    pub from_template: Option<String>,
    pub steps: Vec<BuildStep>,
    /// A Dockerfile instead of a base and steps.
    pub dockerfile: Option<String>,
    /// The files a Dockerfile's `COPY` sources come from.
    pub context_hash: Option<String>,
    pub start_cmd: Option<String>,
    pub ready_cmd: Option<String>,
    pub force: bool,
    /// A user to make before the steps when the base lacks it.
    pub provision_user: Option<String>,
}

impl BuildRequest {
    /// Whether it says what to build (else the build waits for it).
    pub fn is_given(&self) -> bool {
        self.from_image.is_some() || self.from_template.is_some() || self.dockerfile.is_some()
    }

    /// The recipe: a base and steps, or a Dockerfile read into them (its
    /// `COPY` steps taking their files from `contextHash`). Errors name
    /// the field (and, for a Dockerfile, its line).
    pub fn recipe(self) -> ServiceResult<BuildRecipe> {
        let recipe = match self.dockerfile {
            Some(text) => {
                for (given, field) in [
                    (self.from_image.is_some(), "fromImage"),
                    (self.from_template.is_some(), "fromTemplate"),
                    (!self.steps.is_empty(), "steps"),
                ] {
                    if given {
                        return Err(ServiceError::field(
                            field,
                            "cannot be combined with `dockerfile`, which says it",
                        ));
                    }
                }
                let parsed =
                    parse_dockerfile(&text).map_err(|e| ServiceError::field(e.field, e.message))?;
                let needs_files = parsed
                    .steps
                    .iter()
                    .any(|s| matches!(s.kind, StepKind::Copy { .. }));
                let hash = match (&self.context_hash, needs_files) {
                    (Some(h), _) => Some(check_files_hash(h, "contextHash")?),
                    (None, true) => return Err(ServiceError::field(
                        "contextHash",
                        "the Dockerfile copies files: upload the build context and give its hash",
                    )),
                    (None, false) => None,
                };
                let steps = parsed
                    .steps
                    .into_iter()
                    .map(|mut step| {
                        if let (StepKind::Copy { files_hash, .. }, Some(h)) =
                            (&mut step.kind, &hash)
                        {
                            *files_hash = h.clone();
                        }
                        step
                    })
                    .collect();
                BuildRecipe {
                    base: parsed.base,
                    steps,
                    start_cmd: self.start_cmd.or(parsed.start_cmd),
                    ready_cmd: self.ready_cmd,
                    force: self.force,
                    provision_user: self.provision_user,
                }
            }
            None => {
                let base = match (self.from_image, self.from_template) {
                    (Some(i), None) => BuildBase::Image(i),
                    (None, Some(t)) => BuildBase::Template(t),
                    (Some(_), Some(_)) => {
                        return Err(ServiceError::field(
                            "fromTemplate",
                            "give either fromImage or fromTemplate, not both",
                        ))
                    }
                    (None, None) => {
                        return Err(ServiceError::field(
                            "fromImage",
                            "a build starts from an image (fromImage), a template (fromTemplate) or a dockerfile",
                        ))
                    }
                };
                BuildRecipe {
                    base,
                    steps: self.steps,
                    start_cmd: self.start_cmd,
                    ready_cmd: self.ready_cmd,
                    force: self.force,
                    provision_user: self.provision_user,
                }
            }
        };
        recipe
            .validate()
            .map_err(|e| ServiceError::field(e.field, e.message))?;
        Ok(recipe)
    }
}

/// Where the object store keeps one set of a template's files (a tar,
/// plain or gzip), by the hash its `COPY` steps name: among the account's
/// uploads, so that they count against its upload quota and expire like
/// uploads (a build whose files expired asks for them again).
pub fn files_key(account: &AccountId, hash: &str) -> String {
    format!("uploads/{account}/template-files/{hash}")
}

/// Checks a files hash: 64 hex digits (a SHA-256).
pub fn check_files_hash(hash: &str, field: &str) -> ServiceResult<String> {
    if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(hash.to_ascii_lowercase())
    } else {
        Err(ServiceError::field(
            field,
            "must be the SHA-256 of the files, 64 hex digits",
        ))
    }
}

fn check_tags(tags: &[String]) -> ServiceResult<Vec<String>> {
    if tags.len() > 16 {
        return Err(ServiceError::field("tags", "at most 16 tags are allowed"));
    }
    tags.iter()
        .enumerate()
        .map(|(i, t)| {
            let ok = !t.is_empty()
                && t.len() <= 63
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if ok {
                Ok(t.clone())
            } else {
                Err(ServiceError::field(
                    format!("tags[{i}]"),
                    "a tag is 1 to 63 characters from [A-Za-z0-9._-]",
                ))
            }
        })
        .collect()
}

fn check_size(value: Option<u32>, field: &str, max: u32) -> ServiceResult<Option<u32>> {
    match value {
        Some(v) if v == 0 || v > max => Err(ServiceError::field(
            field,
            format!("must be between 1 and {max}"),
        )),
        other => Ok(other),
    }
}

impl Service {
    /// Makes a template named `input.names` with a waiting build, or, when
    /// the caller has a template of the first name, a new waiting build of
    /// it (its defaults updated where given). `name:tag` tags the build.
    pub async fn create_template(
        &self,
        scope: &Scope,
        input: TemplateInput,
    ) -> ServiceResult<(Template, TemplateBuild)> {
        let mut tags = input.tags.clone();
        let mut names = Vec::new();
        if input.names.is_empty() {
            return Err(ServiceError::field("name", "a template needs a name"));
        }
        if input.names.len() > Template::MAX_NAMES {
            return Err(ServiceError::field(
                "names",
                format!("at most {} names are allowed", Template::MAX_NAMES),
            ));
        }
        for (i, raw) in input.names.iter().enumerate() {
            let (name, tag) = match raw.split_once(':') {
                Some((n, t)) => (n, Some(t)),
                None => (raw.as_str(), None),
            };
            let field = if i == 0 {
                "name".to_owned()
            } else {
                format!("names[{i}]")
            };
            let name = TemplateName::parse_field(name, &field)?;
            if !names.contains(&name) {
                names.push(name);
            }
            if let Some(tag) = tag {
                tags.push(tag.to_owned());
            }
        }
        let tags = check_tags(&tags)?;
        let cpu = check_size(input.cpu_count, "cpuCount", 64)?;
        let memory = check_size(input.memory_mb, "memoryMB", 256 * 1024)?;
        let disk = check_size(input.disk_size_gb, "diskSizeGB", 16 * 1024)?;
        let now = Utc::now();
        let existing = match self
            .store
            .template_by_name(&scope.account_id, &names[0])
            .await
        {
            Ok(t) if t.account_id == scope.account_id => Some(t),
            Ok(_) | Err(StoreError::NotFound) => None,
            Err(e) => return Err(e.into()),
        };
        let template = match existing {
            Some(mut t) => {
                for name in names.into_iter().skip(1) {
                    if !t.names.contains(&name) {
                        t.names.push(name);
                    }
                }
                t.cpu_count = cpu.or(t.cpu_count);
                t.memory_mb = memory.or(t.memory_mb);
                t.disk_size_gb = disk.or(t.disk_size_gb);
                t.updated_at = now;
                self.store.update_template(&t).await.map_err(name_taken)?;
                t
            }
            None => {
                let mut t = Template::new(scope.account_id.clone(), names, now);
                t.cpu_count = cpu;
                t.memory_mb = memory;
                t.disk_size_gb = disk;
                self.store.insert_template(&t).await.map_err(name_taken)?;
                t
            }
        };
        let mut build = TemplateBuild::new(&template, now);
        build.tags = tags;
        self.store.insert_build(&build).await?;
        info!(template.id = %template.id, build.id = %build.id, "template build made");
        Ok((template, build))
    }

    /// The template `reference` names (id or name) for a caller who may
    /// change it: its owner. Others get "not found", like for a template
    /// they cannot see.
    pub async fn owned_template(&self, scope: &Scope, reference: &str) -> ServiceResult<Template> {
        let t = load(self, scope, reference, "templateID").await?;
        if t.account_id != scope.account_id {
            return Err(template_not_found(reference));
        }
        Ok(t)
    }

    /// A template the caller may use (its own or a public one).
    pub async fn template(&self, scope: &Scope, reference: &str) -> ServiceResult<Template> {
        load(self, scope, reference, "templateID").await
    }

    /// The caller's templates, then the public ones of other accounts.
    pub async fn list_templates(&self, scope: &Scope) -> ServiceResult<Vec<Template>> {
        Ok(self.store.list_templates(&scope.account_id).await?)
    }

    /// A template's builds, newest first.
    pub async fn template_builds(
        &self,
        scope: &Scope,
        reference: &str,
    ) -> ServiceResult<(Template, Vec<TemplateBuild>)> {
        let t = self.owned_template(scope, reference).await?;
        let builds = self.store.list_builds(&t.id).await?;
        Ok((t, builds))
    }

    /// One build of a template the caller owns.
    pub async fn template_build(
        &self,
        scope: &Scope,
        reference: &str,
        build: &str,
    ) -> ServiceResult<(Template, TemplateBuild)> {
        let t = self.owned_template(scope, reference).await?;
        let id = BuildId::parse_field(build, "buildID")?;
        match self.store.get_build(&id).await {
            Ok(b) if b.template_id == t.id => Ok((t, b)),
            Ok(_) | Err(StoreError::NotFound) => Err(ServiceError::NotFound(format!(
                "Build {build} of template '{reference}' not found"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// A build's log lines from `offset` on (at most `limit`, capped at
    /// [`MAX_LOG_LINES`]).
    pub async fn build_logs(
        &self,
        build: &TemplateBuild,
        offset: u64,
        limit: u32,
    ) -> ServiceResult<Vec<BuildLogLine>> {
        Ok(self
            .store
            .build_logs(&build.id, offset, limit.clamp(1, MAX_LOG_LINES))
            .await?)
    }

    /// A template the caller owns and whether the object store holds its
    /// files `hash`.
    pub async fn template_files_present(
        &self,
        scope: &Scope,
        reference: &str,
        hash: &str,
    ) -> ServiceResult<(Template, bool)> {
        let t = self.owned_template(scope, reference).await?;
        let hash = check_files_hash(hash, "hash")?;
        let present = self
            .blobs
            .head(&files_key(&t.account_id, &hash))
            .await?
            .is_some();
        Ok((t, present))
    }

    /// Stores the files `hash` of a template the caller owns: a tar,
    /// plain or gzip, at most `max_file_bytes`.
    pub async fn store_template_files(
        &self,
        scope: &Scope,
        reference: &str,
        hash: &str,
        body: ByteStream,
    ) -> ServiceResult<u64> {
        let t = self.owned_template(scope, reference).await?;
        let hash = check_files_hash(hash, "hash")?;
        let limit = self.config.max_file_bytes;
        // The account's upload quota holds, as for any upload.
        let admission = crate::sources::admit_upload(self, &scope.account_id).await?;
        let left = admission.bytes_left().map_or(limit, |l| l.min(limit));
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = seen.clone();
        let body: ByteStream = Box::pin(futures_util::StreamExt::map(body, move |chunk| {
            let chunk = chunk?;
            let total = counted.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::SeqCst)
                + chunk.len() as u64;
            if total > left {
                return Err(std::io::Error::other("over the upload limit"));
            }
            Ok(chunk)
        }));
        let key = files_key(&t.account_id, &hash);
        match crate::sources::store_upload_at(self, &admission, &key, body).await {
            Ok(n) => Ok(n),
            Err(_) if seen.load(std::sync::atomic::Ordering::SeqCst) > left => {
                let _ = self.blobs.delete(&key).await;
                Err(match left < limit {
                    true => admission.too_large(seen.load(std::sync::atomic::Ordering::SeqCst)),
                    false => crate::files::too_large(limit),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// A link that lets whoever holds it store the files `hash` of
    /// `template` for `account` until `expires` without an API key (E2B's
    /// SDKs `PUT` the files to the `url` the API hands them): the account,
    /// template, hash and expiry signed with the server's key.
    pub fn template_files_token(
        &self,
        account: &AccountId,
        template: &TemplateId,
        hash: &str,
        expires: DateTime<Utc>,
    ) -> String {
        let expiry = expires.timestamp();
        let subject = format!("{account}\n{template}\n{hash}\n{expiry}");
        let sig = self.agents.derive(FILES_TOKEN_DOMAIN, &subject);
        format!("{account}.{template}.{hash}.{expiry}.{sig}")
    }

    /// Stores the files a [`Self::template_files_token`] link names, as
    /// its account, while the link is valid and the account enabled.
    pub async fn store_template_files_by_token(
        &self,
        token: &str,
        body: ByteStream,
    ) -> ServiceResult<u64> {
        let refused = || ServiceError::Forbidden("this upload link is not valid".into());
        let parts: Vec<&str> = token.split('.').collect();
        let [account, template, hash, expiry, sig] = parts[..] else {
            return Err(refused());
        };
        let account = AccountId::parse(account).map_err(|_| refused())?;
        let template = TemplateId::parse(template).map_err(|_| refused())?;
        let hash = check_files_hash(hash, "hash").map_err(|_| refused())?;
        let expiry: i64 = expiry.parse().map_err(|_| refused())?;
        let expected = self.agents.derive(
            FILES_TOKEN_DOMAIN,
            &format!("{account}\n{template}\n{hash}\n{expiry}"),
        );
        if !bool::from(subtle::ConstantTimeEq::ct_eq(
            expected.as_bytes(),
            sig.as_bytes(),
        )) {
            return Err(refused());
        }
        if Utc::now().timestamp() >= expiry {
            return Err(ServiceError::Forbidden("this upload link expired".into()));
        }
        let (holder, teams) = match self.store.get_account(&account).await {
            Ok(found) => found,
            Err(StoreError::NotFound) => return Err(refused()),
            Err(e) => return Err(e.into()),
        };
        if holder.is_disabled() {
            return Err(ServiceError::Forbidden(format!(
                "the account {} is disabled",
                holder.name
            )));
        }
        let scope = Scope {
            account_id: holder.id,
            team_ids: teams,
        };
        self.store_template_files(&scope, template.as_str(), &hash, body)
            .await
    }

    /// Checks what a recipe names before anything is made: a base image
    /// the caller may name, a base template it may use (with a ready
    /// build), and the files of every `COPY` uploaded.
    pub async fn check_recipe(&self, scope: &Scope, recipe: &BuildRecipe) -> ServiceResult<()> {
        match &recipe.base {
            BuildBase::Image(image) => {
                let image = stockade_core::spec::parse_image(image, "fromImage")?;
                self.config.images.check(&image, "fromImage")?;
                crate::content::images::check_registry(
                    &image,
                    "fromImage",
                    &self.config.sources.addresses,
                )
                .await?;
            }
            BuildBase::Template(reference) => {
                crate::content::templates::resolve(self, scope, reference, "fromTemplate").await?;
            }
        }
        for (i, step) in recipe.steps.iter().enumerate() {
            if let StepKind::Copy {
                files_hash, src, ..
            } = &step.kind
            {
                let key = files_key(&scope.account_id, files_hash);
                if self.blobs.head(&key).await?.is_none() {
                    return Err(ServiceError::field(
                        format!("steps[{i}].filesHash"),
                        format!(
                            "the files of COPY {src} were not uploaded: PUT them to \
                             /templates/{{id}}/files/{files_hash} first"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Starts a waiting build of a template the caller owns with `recipe`;
    /// the build runs in the background (its status and log tell how it
    /// goes). Returns it `building`.
    pub async fn start_build(
        &self,
        scope: &Scope,
        reference: &str,
        build: &str,
        recipe: BuildRecipe,
    ) -> ServiceResult<TemplateBuild> {
        recipe
            .validate()
            .map_err(|e| ServiceError::field(e.field, e.message))?;
        let (template, mut build) = self.template_build(scope, reference, build).await?;
        if build.status != BuildStatus::Waiting {
            return Err(ServiceError::Conflict(format!(
                "Build {} is {}: only a waiting build can be started (make a new one)",
                build.id,
                build.status.as_str()
            )));
        }
        self.check_recipe(scope, &recipe).await?;
        let now = Utc::now();
        let op = Operation::new(
            build.id.to_string(),
            OperationKind::Build,
            scope.account_id.clone(),
            self.ops.holder(),
            now,
            self.ops.lease_until(now),
        );
        let guard = self.begin_operation(op).await?;
        build.recipe = Some(recipe);
        build.status = BuildStatus::Building;
        build.started_at = Some(now);
        if let Err(e) = self.store.update_build(&build).await {
            guard.release().await;
            return Err(e.into());
        }
        let svc = self.clone();
        let started = build.clone();
        let scope = scope.clone();
        tokio::spawn(async move { build::run(svc, scope, template, started, guard).await });
        Ok(build)
    }

    /// Makes a template usable by every account, or only by its owner's
    /// again (an administrator's call: `reference` is the template's id,
    /// or one of the caller's own names). Other accounts can create from a
    /// public template; building, tagging and deleting it stay its owner's.
    pub async fn set_template_public(
        &self,
        scope: &Scope,
        reference: &str,
        public: bool,
    ) -> ServiceResult<Template> {
        let mut t = match TemplateId::parse(reference) {
            Ok(id) => match self.store.get_template(&id).await {
                Ok(t) => t,
                Err(StoreError::NotFound) => self.owned_template(scope, reference).await?,
                Err(e) => return Err(e.into()),
            },
            Err(_) => self.owned_template(scope, reference).await?,
        };
        if t.deleted_at.is_some() {
            return Err(template_not_found(reference));
        }
        if t.public != public {
            t.public = public;
            t.updated_at = Utc::now();
            self.store.update_template(&t).await.map_err(name_taken)?;
            info!(template.id = %t.id, public, "template visibility changed");
        }
        Ok(t)
    }

    /// Deletes a template the caller owns: its names are free at once, its
    /// builds' images are removed from every host where no sandbox uses
    /// them (the sandboxes made from it keep running).
    pub async fn delete_template(&self, scope: &Scope, reference: &str) -> ServiceResult<Template> {
        let mut t = self.owned_template(scope, reference).await?;
        let now = Utc::now();
        t.deleted_at = Some(now);
        t.updated_at = now;
        self.store.update_template(&t).await?;
        for mut b in self.store.list_builds(&t.id).await? {
            if b.image_ref.is_some() && collect::remove_build_image(self, &b).await {
                b.image_ref = None;
                if let Err(e) = self.store.update_build(&b).await {
                    warn!(build.id = %b.id, error = %e, "a removed build image was not written");
                }
            }
        }
        info!(template.id = %t.id, "template deleted");
        Ok(t)
    }
}

/// A taken name as the 409 it is.
fn name_taken(e: StoreError) -> ServiceError {
    match e {
        StoreError::Conflict(m) => ServiceError::Conflict(m),
        other => other.into(),
    }
}
