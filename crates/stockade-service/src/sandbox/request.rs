//! What a create asks for, as the service takes it: the settings still
//! unchecked, where `/workspace` starts from, the caller's team and its
//! metadata. Every front-end maps its own body to it.

use std::collections::BTreeMap;

use stockade_api::{CreateSandboxRequest, SandboxSource};
use stockade_core::spec::SpecInput;

/// A sandbox to create, before any check.
#[derive(Debug, Clone, Default)]
pub struct NewSandbox {
    /// Its settings as sent; the create checks each one.
    pub spec: SpecInput,
    /// The template it runs, by id or name, as sent.
    pub template: Option<String>,
    /// One of Stockade's own images that a create made by the service
    /// itself runs (a template build's base or cached layer), past the
    /// check of images a tenant may name; never taken from a request.
    pub internal_image: Option<String>,
    /// The team to share it with; the caller must be a member.
    pub team_id: Option<String>,
    /// What `/workspace` (and for a snapshot or fork, the root filesystem)
    /// starts from; empty without one.
    pub source: Option<SandboxSource>,
    /// Free-form key/value pairs recorded with it (E2B's `metadata`).
    pub metadata: BTreeMap<String, String>,
    /// What a retry under the same `Idempotency-Key` must send again: the
    /// front-end's body in a stable form.
    pub fingerprint: Vec<u8>,
}

impl From<&CreateSandboxRequest> for NewSandbox {
    fn from(req: &CreateSandboxRequest) -> Self {
        Self {
            spec: req.spec_input(),
            template: req.template.clone(),
            internal_image: None,
            team_id: req.team_id.clone(),
            source: req.source.clone(),
            metadata: BTreeMap::new(),
            // A struct of strings, numbers and maps always serializes.
            fingerprint: serde_json::to_vec(req).unwrap_or_default(),
        }
    }
}

impl NewSandbox {
    /// The same create with `metadata` in the record from the start.
    pub fn with_metadata(mut self, metadata: BTreeMap<String, String>) -> Self {
        self.metadata = metadata;
        self
    }
}
