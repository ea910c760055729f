//! A create in one pass down: every field checked once (the source looked
//! up, its settings taken in, before anything slow), the image policy, the
//! hosts that may take it (placed once), the `Idempotency-Key` (a repeated
//! request answered with the first create's sandbox), the quota and host
//! room (admitted once, held), the source fetched once, then provisioning,
//! and for a template's sandbox, its ready command.
//! Every front-end (native, E2B, prime) goes through it.

use stockade_core::Scope;

use crate::content::sources;
use crate::error::{ServiceError, ServiceResult};
use crate::sandbox::idempotency::{self, NextAction, Processing};
use crate::sandbox::lifecycle::{self, Created, Provision};
use crate::sandbox::request::NewSandbox;
use crate::Service;

impl Service {
    /// Creates a sandbox as a client asks and returns it RUNNING. With
    /// `idempotency_key`, a retry of the same request returns what the
    /// first create made.
    pub async fn create_sandbox(
        &self,
        scope: &Scope,
        mut new: NewSandbox,
        idempotency_key: Option<&str>,
    ) -> ServiceResult<Created> {
        // `dockerImage` may name one of the caller's templates, as E2B's
        // `templateID` may (prime's SDK has only `dockerImage`): the
        // template, not an image, is then what it runs. A public template
        // by its id only, so that its name never takes the place of an
        // image of that name in other accounts.
        if let (None, Some(image)) = (&new.template, &new.spec.docker_image) {
            let name = image.trim().split(':').next().unwrap_or_default();
            let taken = crate::content::templates::named(self, scope, image)
                .await?
                .is_some_and(|t| t.account_id == scope.account_id || t.id.as_str() == name);
            if taken {
                new.template = new.spec.docker_image.take();
            }
        }
        // The image the caller named (a snapshot or fork brings its own).
        let named_image = new.spec.docker_image.clone();
        // A template brings its image and settings (its own, or public).
        crate::content::templates::apply(self, scope, &mut new).await?;
        if let Some(image) = new.internal_image.take() {
            new.spec.docker_image = Some(image);
        }
        // Every field is checked before a source is fetched (a clone can
        // be long): the source's own fields and records first, since a
        // snapshot or fork brings settings of its own.
        let pending = sources::look_up(self, scope, &mut new).await?;
        let mut sb = lifecycle::prepare(self, scope, &new)?;
        // Mounted volumes are the caller's, and place it on their host.
        self.resolve_mounts(scope, &mut sb.spec).await?;
        if let Some(image) = &named_image {
            // Only images a tenant may name, from registries that are not
            // internal addresses.
            self.config.images.check(image, "dockerImage")?;
            crate::content::images::check_registry(
                image,
                "dockerImage",
                &self.config.sources.addresses,
            )
            .await?;
        }
        // Placed once: refused before a source is fetched when no host may
        // take it; the store picks among these as it inserts the record.
        let candidates = crate::fleet::placement::candidates(self, &sb).await?;
        if crate::net::egress::needs_filter(&sb.spec.network) {
            self.check_policy_enforceable(&sb.spec.network, &candidates[0].host.name)?;
        }
        tracing::Span::current().record("sandbox.id", sb.id.as_str());
        // A retry of a create that was made returns it, even at the quota.
        let processing = match idempotency_key {
            None => None,
            Some(key) => {
                let hash = request_hash(&new)?;
                match idempotency::try_processing(self, scope, key, &hash, &sb.id).await? {
                    NextAction::ReturnSaved(created) => return Ok(*created),
                    NextAction::StartProcessing(p) => Some(*p),
                }
            }
        };
        let ready = async {
            let mut sb = sb;
            // Admitted once, held until the record shows the sandbox.
            let admitted = crate::fleet::admission::admit_create(self, &sb).await?;
            let source = match pending {
                Some(p) => Some(sources::fetch(self, scope, p, &mut sb).await?),
                None => None,
            };
            Ok::<_, ServiceError>((sb, admitted, source))
        }
        .await;
        let (sb, admitted, source) = match ready {
            Ok(ready) => ready,
            Err(e) => {
                if let Some(p) = processing {
                    p.abort(self).await;
                }
                return Err(e);
            }
        };
        let (guard, key) = match processing {
            Some(Processing { guard, key }) => (Some(guard), Some(key)),
            None => (None, None),
        };
        let sandbox = lifecycle::create_from(
            self,
            sb,
            Provision {
                candidates,
                admitted,
                source,
                guard,
                key,
            },
        )
        .await?;
        // A template's start command is ready before the create answers;
        // a sandbox that never gets ready is not left behind.
        if let Err(e) = crate::content::templates::wait_ready(
            self,
            &sandbox,
            crate::content::templates::READY_TIMEOUT,
        )
        .await
        {
            if let Err(gone) = lifecycle::destroy(self, sandbox.clone(), false).await {
                tracing::warn!(sandbox.id = %sandbox.id, error = %gone, "a sandbox whose template never got ready was not removed");
            }
            return Err(e);
        }
        Ok(Created {
            sandbox,
            replayed: false,
        })
    }
}

/// What a key's request is: the front-end's body, and the metadata when
/// there is any (a body alone hashes as it always did).
fn request_hash(new: &NewSandbox) -> ServiceResult<String> {
    let mut bytes = new.fingerprint.clone();
    if !new.metadata.is_empty() {
        bytes.extend(
            serde_json::to_vec(&new.metadata).map_err(|e| ServiceError::Internal(e.to_string()))?,
        );
    }
    Ok(stockade_core::account::sha256_hex(&bytes))
}
