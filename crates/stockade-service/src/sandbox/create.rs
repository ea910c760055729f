//! A create as a client asks for it: every field checked, the image and
//! host room looked at before a source is fetched, the source resolved, the
//! sandbox made; with an `Idempotency-Key`, the wrapper of
//! [`crate::sandbox::idempotency`] around the same steps.

use stockade_api::CreateSandboxRequest;
use stockade_core::Scope;

use crate::error::ServiceResult;
use crate::sandbox::lifecycle::{self, Created};
use crate::Service;

impl Service {
    /// Creates a sandbox as a client asks: every
    /// field is checked first, then the source is fetched, then the sandbox is
    /// made and returned RUNNING. With `idempotency_key`, a retry returns what
    /// the first create made (see [`crate::sandbox::idempotency`]).
    pub async fn create_sandbox(
        &self,
        scope: &Scope,
        req: &CreateSandboxRequest,
        idempotency_key: Option<&str>,
    ) -> ServiceResult<Created> {
        let svc = self;
        // Every field is checked before a source is fetched (a clone can be long).
        let sb = lifecycle::prepare(svc, scope, req)?;
        if let Some(image) = &req.docker_image {
            // Only images a tenant may name, from registries that
            // are not internal addresses. Images of sources (snapshots, forks)
            // are set later, from what the caller owns.
            svc.config.images.check(image, "dockerImage")?;
            crate::content::images::check_registry(
                image,
                "dockerImage",
                &svc.config.sources.addresses,
            )
            .await?;
        }
        // Refused before a source is fetched: no host may take it.
        let placeable = crate::fleet::placement::candidates(svc, &sb).await?;
        if crate::net::egress::needs_filter(&sb.spec.network) {
            svc.check_policy_enforceable(&sb.spec.network, &placeable[0].host.name)?;
        }
        drop(placeable);
        // Quotas and host room: refused before a source is fetched; checked
        // again, and held, when the record is made. Not before a key's replay: a
        // retry of a create that was made returns it even at the quota.
        if idempotency_key.is_none() {
            drop(crate::fleet::admission::admit_create(svc, &sb).await?);
        }
        tracing::Span::current().record("sandbox.id", sb.id.as_str());
        match idempotency_key {
            None => {
                let (spec_req, source) = crate::content::sources::resolve(svc, scope, req).await?;
                let sb = lifecycle::prepare_with_id(svc, scope, &spec_req, sb.id)?;
                let sandbox = lifecycle::create_from(svc, sb, None, source, None).await?;
                Ok(Created {
                    sandbox,
                    replayed: false,
                })
            }
            Some(key) => {
                crate::sandbox::idempotency::create_with_key(svc, scope, req, key, sb.id).await
            }
        }
    }
}
