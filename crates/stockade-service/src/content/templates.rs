//! Templates as the rest of the service uses them: loading one the caller
//! may see (its own, or a public one; another account's private template is
//! "not found", never "forbidden", so its name gives nothing away), its
//! newest ready build (or the newest with a tag, `name:tag`), and what a
//! create from it becomes: the build's image, its environment under the
//! request's, its working directory, user, start and ready commands, and the
//! template's CPU and memory unless the request gives them.

use std::time::Duration;

use stockade_core::template::{Template, TemplateBuild, TemplateId, TemplateName, TemplateUse};
use stockade_core::{Sandbox, Scope, StartCommand};
use stockade_runtime::ExecSpec;
use stockade_store::StoreError;

use crate::error::{ServiceError, ServiceResult};
use crate::sandbox::request::NewSandbox;
use crate::Service;

/// How long a create waits for a template's ready command to succeed.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Between two runs of a ready command.
const READY_PAUSE: Duration = Duration::from_millis(100);

pub fn template_not_found(reference: &str) -> ServiceError {
    ServiceError::NotFound(format!("Template '{reference}' not found"))
}

/// The template `reference` names (its id, or one of its names) if the
/// caller may see it: its own, or a public one. Errors name `field`.
pub async fn load(
    svc: &Service,
    scope: &Scope,
    reference: &str,
    field: &str,
) -> ServiceResult<Template> {
    let found = match TemplateId::parse(reference) {
        Ok(id) => match svc.store.get_template(&id).await {
            Ok(t) => Ok(t),
            // Twelve characters can be a name too.
            Err(StoreError::NotFound) => by_name(svc, scope, reference, field).await,
            Err(e) => Err(e.into()),
        },
        Err(_) => by_name(svc, scope, reference, field).await,
    }?;
    if found.deleted_at.is_some() || !(found.public || found.account_id == scope.account_id) {
        return Err(template_not_found(reference));
    }
    Ok(found)
}

async fn by_name(
    svc: &Service,
    scope: &Scope,
    reference: &str,
    field: &str,
) -> ServiceResult<Template> {
    let name = TemplateName::parse_field(reference, field)?;
    match svc.store.template_by_name(&scope.account_id, &name).await {
        Ok(t) => Ok(t),
        Err(StoreError::NotFound) => Err(template_not_found(reference)),
        Err(e) => Err(e.into()),
    }
}

/// The template `reference` (`name[:tag]` or id) names, if it names one
/// the caller may use (as [`load`]). A reference that cannot be a
/// template's (a registry path, a digest) names none.
pub async fn named(
    svc: &Service,
    scope: &Scope,
    reference: &str,
) -> ServiceResult<Option<Template>> {
    let reference = reference.trim();
    if reference.contains(['/', '@']) {
        return Ok(None);
    }
    let name = reference
        .split_once(':')
        .map_or(reference, |(name, _)| name);
    match load(svc, scope, name, "template").await {
        Ok(t) => Ok(Some(t)),
        Err(ServiceError::NotFound(_) | ServiceError::Validation(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The template and build `reference` names: `template` or
/// `template:tag`, the newest ready build (with that tag).
pub async fn resolve(
    svc: &Service,
    scope: &Scope,
    reference: &str,
    field: &str,
) -> ServiceResult<(Template, TemplateBuild)> {
    let reference = reference.trim();
    let (name, tag) = match reference.split_once(':') {
        Some((name, tag)) => (name, Some(tag)),
        None => (reference, None),
    };
    let template = load(svc, scope, name, field).await?;
    match svc.store.latest_ready_build(&template.id, tag).await? {
        Some(build) => Ok((template, build)),
        None => match tag {
            Some(tag) => Err(ServiceError::NotFound(format!(
                "Template '{name}' has no ready build tagged '{tag}'"
            ))),
            None => Err(ServiceError::Conflict(format!(
                "Template '{name}' has no ready build yet: wait for its build to finish"
            ))),
        },
    }
}

/// Writes what the template `new.template` names into `new.spec`; nothing
/// without one. A template brings its own image: `dockerImage`, `runtime`
/// and `source` cannot come with it.
pub async fn apply(svc: &Service, scope: &Scope, new: &mut NewSandbox) -> ServiceResult<()> {
    let Some(reference) = new.template.clone() else {
        return Ok(());
    };
    let clash = "cannot be combined with `template`, which brings its own image";
    if new.spec.docker_image.is_some() {
        return Err(ServiceError::field("dockerImage", clash));
    }
    if new.spec.runtime.is_some() {
        return Err(ServiceError::field("runtime", clash));
    }
    if new.source.is_some() {
        return Err(ServiceError::field("source", clash));
    }
    let (template, build) = resolve(svc, scope, &reference, "template").await?;
    let config = build.config.clone().unwrap_or_default();
    let spec = &mut new.spec;
    spec.docker_image = Some(build.image_name());
    let mut env = config.env.clone();
    env.extend(spec.environment_vars.take().unwrap_or_default());
    spec.environment_vars = (!env.is_empty()).then_some(env);
    if spec.cpu_cores.is_none() {
        spec.cpu_cores = template.cpu_count.map(f64::from);
    }
    if spec.memory_gb.is_none() {
        spec.memory_gb = template.memory_mb.map(|mb| f64::from(mb) / 1024.0);
    }
    if spec.disk_size_gb.is_none() {
        spec.disk_size_gb = template.disk_size_gb.map(f64::from);
    }
    // The request's own main process replaces the template's start.
    let starts = spec.start_command.is_none();
    if let (true, Some(start)) = (starts, &config.start_cmd) {
        // Started where the build's commands ran.
        let start = match &config.workdir {
            Some(dir) => format!("cd {} && {start}", stockade_core::shell::quote(dir)),
            None => start.clone(),
        };
        let wrapped = StartCommand::in_background(&start).map_err(|e| {
            ServiceError::Internal(format!("template start command: {}", e.message))
        })?;
        spec.start_command = Some(wrapped.as_str().to_owned());
    }
    spec.template = Some(TemplateUse {
        template_id: template.id,
        build_id: build.id,
        workdir: config.workdir,
        // The agent acts as a user; `USER u:g`'s group is the user's own.
        user: config
            .user
            .map(|u| u.split(':').next().unwrap_or_default().to_owned()),
        ready_cmd: config.ready_cmd.filter(|_| starts),
        building: false,
    });
    Ok(())
}

/// Runs a template sandbox's ready command until it exits 0, for at most
/// `timeout`; nothing without one.
pub async fn wait_ready(svc: &Service, sb: &Sandbox, timeout: Duration) -> ServiceResult<()> {
    match sb
        .spec
        .template
        .as_ref()
        .and_then(|t| t.ready_cmd.as_deref())
    {
        Some(ready) => wait_until(svc, sb, ready, timeout).await,
        None => Ok(()),
    }
}

/// Runs `ready` in `sb` until it exits 0, for at most `timeout`; the error
/// says what it printed last.
pub async fn wait_until(
    svc: &Service,
    sb: &Sandbox,
    ready: &str,
    timeout: Duration,
) -> ServiceResult<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let out = svc
            .exec(
                sb,
                ExecSpec {
                    argv: vec!["/bin/sh".into(), "-c".into(), ready.to_owned()],
                    timeout: Some(left.max(Duration::from_secs(1))),
                    max_output_bytes: 4096,
                    ..Default::default()
                },
            )
            .await?;
        if out.exit_code == Some(0) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let said = String::from_utf8_lossy(if out.stderr.is_empty() {
                &out.stdout
            } else {
                &out.stderr
            })
            .trim()
            .chars()
            .take(300)
            .collect::<String>();
            return Err(ServiceError::SandboxUnavailable(format!(
                "the template's ready command `{ready}` did not succeed within {} s \
                 (last exit code {:?}{})",
                timeout.as_secs(),
                out.exit_code,
                if said.is_empty() {
                    String::new()
                } else {
                    format!(", output: {said}")
                }
            )));
        }
        tokio::time::sleep(READY_PAUSE).await;
    }
}
