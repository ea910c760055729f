//! What templates leave behind: the images of builds no create can reach
//! any more, and cache layers no build made or used for a while.
//!
//! A create runs a template's newest ready build, or the newest ready
//! build with a tag: an older ready build without tags is out of reach
//! once a newer one is ready, and its image goes (from every host where no
//! container uses it, and from the object store once no host kept it). A
//! layer of the build cache goes when no build made or used it for
//! `template_cache_ttl`; a layer a build sandbox still runs on stays.

use chrono::Utc;
use stockade_core::template::{BuildStatus, Template, TemplateBuild};
use stockade_runtime::RuntimeError;
use tracing::{info, warn};

use crate::Service;

/// Removes `build`'s image from every host and, when no host kept it (a
/// container still uses it), from the object store. Whether it is gone.
pub(crate) async fn remove_build_image(svc: &Service, build: &TemplateBuild) -> bool {
    let Some(image) = &build.image_ref else {
        return true;
    };
    let mut kept = false;
    for (host, rt) in svc.host_runtimes().await {
        match rt.remove_image(image).await {
            Ok(()) | Err(RuntimeError::NotFound(_)) => {}
            Err(e) => {
                kept = true;
                warn!(host, image, error = %e, "a template build's image stays (in use)");
            }
        }
    }
    if kept {
        return false;
    }
    match svc
        .blobs
        .delete(&TemplateBuild::image_blob_key_for(&build.id))
        .await
    {
        Ok(()) => true,
        Err(e) => {
            warn!(build.id = %build.id, error = %e, "a template build's stored image stays");
            false
        }
    }
}

/// Once `newest` is ready: removes the images of the template's older
/// ready builds that have no tag, and forgets them (`image_ref` empty).
/// How many went.
pub(crate) async fn collect_older_builds(
    svc: &Service,
    template: &Template,
    newest: &TemplateBuild,
) -> usize {
    let builds = match svc.store.list_builds(&template.id).await {
        Ok(b) => b,
        Err(e) => {
            warn!(template.id = %template.id, error = %e, "older builds not collected");
            return 0;
        }
    };
    let mut removed = 0;
    for mut b in builds {
        let reachable = b.id == newest.id
            || b.status != BuildStatus::Ready
            || !b.tags.is_empty()
            || b.image_ref.is_none()
            || b.created_at > newest.created_at;
        if reachable || !remove_build_image(svc, &b).await {
            continue;
        }
        b.image_ref = None;
        match svc.store.update_build(&b).await {
            Ok(()) => {
                removed += 1;
                info!(build.id = %b.id, "an older template build's image removed");
            }
            Err(e) => warn!(build.id = %b.id, error = %e, "a collected build was not written"),
        }
    }
    removed
}

/// What one pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    /// Cache layers no build made or used for the configured time.
    pub layers: usize,
    /// Images of builds out of reach that a container used last time.
    pub builds: usize,
}

/// One pass over every account's templates: the images of builds out of
/// reach that stayed because a container used them, and the cache layers
/// no build made or used for the configured time (those a container
/// still runs on stay for a later pass).
pub async fn collect(svc: &Service) -> Collected {
    let mut out = Collected::default();
    let accounts = match svc.store.list_accounts().await {
        Ok(a) => a,
        Err(e) => {
            warn!(error = %e, "templates not collected");
            return out;
        }
    };
    let cutoff = chrono::Duration::from_std(svc.config.template_cache_ttl)
        .ok()
        .and_then(|ttl| Utc::now().checked_sub_signed(ttl));
    for account in accounts {
        for t in svc
            .store
            .list_templates(&account.id)
            .await
            .unwrap_or_default()
        {
            if t.account_id != account.id {
                continue;
            }
            if let Ok(Some(newest)) = svc.store.latest_ready_build(&t.id, None).await {
                out.builds += collect_older_builds(svc, &t, &newest).await;
            }
        }
        let Some(cutoff) = cutoff else { continue };
        let layers = match svc.store.layers_of_account(&account.id).await {
            Ok(l) => l,
            Err(e) => {
                warn!(account.id = %account.id, error = %e, "template layers not collected");
                continue;
            }
        };
        for layer in layers.into_iter().filter(|l| l.created_at < cutoff) {
            let gone = match svc.runtime_on(&layer.server).await {
                Ok(rt) => matches!(
                    rt.remove_image(&layer.image_ref).await,
                    Ok(()) | Err(RuntimeError::NotFound(_))
                ),
                // An unreachable host: its layers wait for a later pass.
                Err(_) => false,
            };
            if gone && svc.store.delete_layer(&layer.key).await.is_ok() {
                out.layers += 1;
            }
        }
    }
    out
}
