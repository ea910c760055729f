//! A template's tags: names of its builds. A tag points at one build: giving
//! it to a build takes it from the template's other builds. `name:tag`
//! finds the build with that tag (`content::templates::resolve`).

use chrono::{DateTime, Utc};
use stockade_core::template::{BuildId, BuildStatus, Template, TemplateBuild};
use stockade_core::Scope;

use super::check_tags;
use crate::content::templates::{resolve, template_not_found};
use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// One tag and the build it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagOf {
    pub tag: String,
    pub build_id: BuildId,
    /// When that build was made.
    pub created_at: DateTime<Utc>,
}

impl Service {
    /// Gives `tags` to the ready build `target` names (`name:tag`, or
    /// `name` for its newest ready build) of a template the caller owns,
    /// taking them from its other builds. Returns the build.
    pub async fn assign_tags(
        &self,
        scope: &Scope,
        target: &str,
        tags: &[String],
    ) -> ServiceResult<TemplateBuild> {
        let (template, build) = resolve(self, scope, target, "target").await?;
        if template.account_id != scope.account_id {
            return Err(template_not_found(target));
        }
        self.give_tags(&template, build, tags).await
    }

    /// Gives `tags` to the build `build` (any status: `name:tag` finds it
    /// once it is ready) of a template the caller owns, taking them from
    /// its other builds.
    pub async fn tag_build(
        &self,
        scope: &Scope,
        reference: &str,
        build: &str,
        tags: &[String],
    ) -> ServiceResult<TemplateBuild> {
        let (template, build) = self.template_build(scope, reference, build).await?;
        self.give_tags(&template, build, tags).await
    }

    async fn give_tags(
        &self,
        template: &Template,
        mut build: TemplateBuild,
        tags: &[String],
    ) -> ServiceResult<TemplateBuild> {
        if tags.is_empty() {
            return Err(ServiceError::field("tags", "give one tag or more"));
        }
        let tags = check_tags(tags)?;
        if build.status == BuildStatus::Ready && build.image_ref.is_none() {
            return Err(ServiceError::Conflict(format!(
                "Build {} is no longer kept (a newer build replaced it): tag a newer build, or \
                 build again",
                build.id
            )));
        }
        // The build first: a crash before the others lose the tags leaves
        // the tag on two builds, and `name:tag` finds the newer one.
        for t in &tags {
            if !build.tags.contains(t) {
                build.tags.push(t.clone());
            }
        }
        self.store.update_build(&build).await?;
        for mut other in self.store.list_builds(&template.id).await? {
            if other.id == build.id {
                continue;
            }
            let before = other.tags.len();
            other.tags.retain(|t| !tags.contains(t));
            if other.tags.len() != before {
                self.store.update_build(&other).await?;
            }
        }
        Ok(build)
    }

    /// Takes `tags` from every build of the template `name` the caller
    /// owns. Tags it does not have are no error.
    pub async fn remove_tags(
        &self,
        scope: &Scope,
        name: &str,
        tags: &[String],
    ) -> ServiceResult<()> {
        if tags.is_empty() {
            return Err(ServiceError::field("tags", "give one tag or more"));
        }
        let tags = check_tags(tags)?;
        let template = self.owned_template(scope, name).await?;
        for mut build in self.store.list_builds(&template.id).await? {
            let before = build.tags.len();
            build.tags.retain(|t| !tags.contains(t));
            if build.tags.len() != before {
                self.store.update_build(&build).await?;
            }
        }
        Ok(())
    }

    /// The tags of a template the caller owns, each with the build it
    /// points at (the newest one carrying it), ready builds only.
    pub async fn template_tags(&self, scope: &Scope, reference: &str) -> ServiceResult<Vec<TagOf>> {
        let template = self.owned_template(scope, reference).await?;
        let mut out: Vec<TagOf> = Vec::new();
        for build in self.store.list_builds(&template.id).await? {
            if build.status != BuildStatus::Ready {
                continue;
            }
            for tag in &build.tags {
                if !out.iter().any(|o| o.tag == *tag) {
                    out.push(TagOf {
                        tag: tag.clone(),
                        build_id: build.id.clone(),
                        created_at: build.created_at,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.tag.cmp(&b.tag));
        Ok(out)
    }
}
