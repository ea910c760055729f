//! What the compatibility front-ends (E2B's API, `prime-sandboxes`) need
//! beyond Stockade's own API, still without HTTP: a create that records a
//! sandbox's `metadata` with it, what an E2B template names, and a caller's
//! whole list of sandboxes for filters the store does not index.

use stockade_api::{CreateSandboxRequest, SandboxSource};
use stockade_core::{Sandbox, Scope, SnapshotId, SnapshotKind, SnapshotStatus};
use stockade_store::SandboxFilter;

use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// The most sandboxes [`list_all`] reads for one caller.
pub const MAX_LISTED: usize = 10_000;

/// What an E2B `templateID` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Template {
    /// `base` (E2B's default): the server's default image.
    Default,
    /// A runtime preset of the server.
    Runtime(String),
    /// One of the caller's templates (or a public one): its id or name,
    /// with an optional `:tag`.
    Built(String),
    /// One of the caller's snapshots (by id or name).
    Snapshot(SnapshotId),
    /// An image reference.
    Image(String),
}

impl Template {
    /// The create request for this template.
    pub fn apply(&self, req: &mut CreateSandboxRequest) {
        match self {
            Template::Default => {}
            Template::Runtime(r) => req.runtime = Some(r.clone()),
            Template::Image(i) => req.docker_image = Some(i.clone()),
            Template::Built(t) => req.template = Some(t.clone()),
            Template::Snapshot(id) => {
                req.source = Some(SandboxSource::Snapshot {
                    snapshot_id: id.to_string(),
                })
            }
        }
    }
}

/// Resolves a template: `base`, then a runtime preset, then a template
/// the caller may use (`name[:tag]` or id), then one of the caller's ready
/// snapshots (id, then name), else an image reference (checked like
/// `dockerImage`).
pub async fn resolve_template(
    svc: &Service,
    scope: &Scope,
    template: &str,
) -> ServiceResult<Template> {
    let t = template.trim();
    if t.is_empty() || t == "base" {
        return Ok(Template::Default);
    }
    if svc.config.defaults.runtimes.contains_key(t) {
        return Ok(Template::Runtime(t.to_owned()));
    }
    if crate::content::templates::named(svc, scope, t)
        .await?
        .is_some()
    {
        return Ok(Template::Built(t.to_owned()));
    }
    let snapshots = svc.store.list_snapshots(scope, None).await?;
    let usable = |s: &&stockade_core::Snapshot| {
        s.kind == SnapshotKind::User && s.deleted_at.is_none() && s.status == SnapshotStatus::Ready
    };
    if let Some(s) = snapshots
        .iter()
        .filter(usable)
        .find(|s| s.id.as_str() == t)
        .or_else(|| snapshots.iter().filter(usable).find(|s| s.name == t))
    {
        return Ok(Template::Snapshot(s.id.clone()));
    }
    let image = stockade_core::spec::parse_image(t, "templateID").map_err(|_| {
        ServiceError::NotFound(format!(
            "Template '{t}' not found: use 'base', a runtime preset ({}), one of your templates \
             (name[:tag] or id), the id or name of one of your snapshots, or an image reference",
            svc.config
                .defaults
                .runtimes
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    Ok(Template::Image(image))
}

/// Every sandbox of the caller that is not terminated (at most
/// [`MAX_LISTED`]), newest first: for filters the store does not index
/// (E2B's `metadata`).
pub async fn list_all(svc: &Service, scope: &Scope) -> ServiceResult<Vec<Sandbox>> {
    let mut out = Vec::new();
    let mut page = 1u32;
    loop {
        let filter = SandboxFilter {
            is_active: Some(true),
            page,
            per_page: 1000,
            ..Default::default()
        };
        let got = svc.store.list_sandboxes(scope, &filter).await?;
        let n = got.sandboxes.len();
        out.extend(got.sandboxes);
        if n < 1000 || out.len() >= MAX_LISTED || out.len() as u64 >= got.total {
            break;
        }
        page += 1;
    }
    out.truncate(MAX_LISTED);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_the_request() {
        let mut req = CreateSandboxRequest::default();
        Template::Runtime("node22".into()).apply(&mut req);
        assert_eq!(req.runtime.as_deref(), Some("node22"));
        let mut req = CreateSandboxRequest::default();
        Template::Image("busybox:1".into()).apply(&mut req);
        assert_eq!(req.docker_image.as_deref(), Some("busybox:1"));
        let mut req = CreateSandboxRequest::default();
        Template::Snapshot(SnapshotId::parse("abcdefghijkl").unwrap()).apply(&mut req);
        assert!(matches!(req.source, Some(SandboxSource::Snapshot { .. })));
        let mut req = CreateSandboxRequest::default();
        Template::Default.apply(&mut req);
        assert!(req.docker_image.is_none() && req.runtime.is_none() && req.source.is_none());
        let mut req = CreateSandboxRequest::default();
        Template::Built("web:v2".into()).apply(&mut req);
        assert_eq!(req.template.as_deref(), Some("web:v2"));
        let mut req = CreateSandboxRequest::default();
        Template::Default.apply(&mut req);
        assert!(req.docker_image.is_none() && req.runtime.is_none() && req.source.is_none());
    }
}
