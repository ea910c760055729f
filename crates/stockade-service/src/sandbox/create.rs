//! A create as a client asks for it, in one pass down: every field checked,
//! the image policy, the hosts that may take it (placed once), the
//! `Idempotency-Key` (a repeated request answered with the first create's
//! sandbox), the quota and host room (admitted once, held), the source
//! (resolved once), then provisioning. Every front-end (native, E2B,
//! prime) goes through it.

use std::collections::BTreeMap;

use stockade_api::CreateSandboxRequest;
use stockade_core::{Sandbox, Scope};

use crate::error::{ServiceError, ServiceResult};
use crate::sandbox::idempotency::{self, NextAction, Processing};
use crate::sandbox::lifecycle::{self, Created, Provision};
use crate::Service;

impl Service {
    /// Creates a sandbox as a client asks and returns it RUNNING. With
    /// `idempotency_key`, a retry of the same request returns what the
    /// first create made.
    pub async fn create_sandbox(
        &self,
        scope: &Scope,
        req: &CreateSandboxRequest,
        idempotency_key: Option<&str>,
    ) -> ServiceResult<Created> {
        self.create_with(scope, req, idempotency_key, BTreeMap::new())
            .await
    }

    /// [`Service::create_sandbox`] with `metadata` (checked) in the record
    /// from the start; a key's request is the body and the metadata.
    pub async fn create_sandbox_with_metadata(
        &self,
        scope: &Scope,
        req: &CreateSandboxRequest,
        idempotency_key: Option<&str>,
        metadata: &BTreeMap<String, String>,
    ) -> ServiceResult<Created> {
        let metadata = stockade_core::spec::parse_metadata(metadata, "metadata")?;
        self.create_with(scope, req, idempotency_key, metadata)
            .await
    }

    async fn create_with(
        &self,
        scope: &Scope,
        req: &CreateSandboxRequest,
        idempotency_key: Option<&str>,
        metadata: BTreeMap<String, String>,
    ) -> ServiceResult<Created> {
        // Every field is checked before a source is fetched (a clone can
        // be long).
        let mut sb = lifecycle::prepare(self, scope, req)?;
        sb.spec.metadata = metadata;
        if let Some(image) = &req.docker_image {
            // Only images a tenant may name, from registries that are not
            // internal addresses. Images of sources (snapshots, forks) are
            // set later, from what the caller owns.
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
                let hash = request_hash(req, &sb)?;
                match idempotency::try_processing(self, scope, key, &hash, &sb.id).await? {
                    NextAction::ReturnSaved(created) => return Ok(*created),
                    NextAction::StartProcessing(p) => Some(*p),
                }
            }
        };
        let ready = async {
            // Admitted once, held until the record shows the sandbox.
            let admitted = crate::fleet::admission::admit_create(self, &sb).await?;
            let (sb, source) = self.with_source(scope, req, sb).await?;
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
        Ok(Created {
            sandbox,
            replayed: false,
        })
    }

    /// Resolves the request's source once: its archive, and for snapshots
    /// and forks the settings they bring (their image; a fork's settings
    /// where the request gives none), checked into the record.
    async fn with_source(
        &self,
        scope: &Scope,
        req: &CreateSandboxRequest,
        sb: Sandbox,
    ) -> ServiceResult<(Sandbox, Option<crate::content::sources::PreparedSource>)> {
        let (settings, source) = crate::content::sources::resolve(self, scope, req).await?;
        let Some(settings) = settings else {
            return Ok((sb, source));
        };
        let metadata = sb.spec.metadata.clone();
        let mut sb = lifecycle::prepare_with_id(self, scope, &settings, sb.id)?;
        sb.spec.metadata = metadata;
        Ok((sb, source))
    }
}

/// What a key's request is: the body, and the metadata when there is any
/// (a body alone hashes as it always did).
fn request_hash(req: &CreateSandboxRequest, sb: &Sandbox) -> ServiceResult<String> {
    let internal = |e: serde_json::Error| ServiceError::Internal(e.to_string());
    let mut bytes = serde_json::to_vec(req).map_err(internal)?;
    if !sb.spec.metadata.is_empty() {
        bytes.extend(serde_json::to_vec(&sb.spec.metadata).map_err(internal)?);
    }
    Ok(stockade_core::account::sha256_hex(&bytes))
}
