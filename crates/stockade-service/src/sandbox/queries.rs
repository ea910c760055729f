//! Reads of sandbox and snapshot records the front-ends ask for: lists
//! through the caller's `Scope`, the targets of a bulk delete, the counts
//! the metrics show and the owners the volume listing needs.

use stockade_core::{Labels, Sandbox, SandboxId, SandboxStatus, Scope, Snapshot, TeamId};
use stockade_store::{RecordOwner, SandboxFilter, SandboxPage};

use crate::access;
use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// One target of a bulk delete: the record, or the id asked for and why it
/// cannot be deleted.
pub type BulkTarget = Result<Sandbox, (String, ServiceError)>;

/// What a bulk delete names: ids, and labels (`key=value`) every live
/// sandbox to delete carries.
pub struct BulkSelection<'a> {
    pub ids: &'a [String],
    /// The API field the ids came in (named by a bad id's error).
    pub ids_field: &'a str,
    pub labels: &'a [String],
    /// Only the sandboxes of this team (labels only).
    pub team: Option<TeamId>,
    /// At most this many sandboxes found by labels.
    pub max_by_labels: usize,
    /// A destroyed sandbox named by id is "not found" (else it is a target
    /// and its delete returns it as it is).
    pub live_only: bool,
}

impl Service {
    /// The caller's sandbox `id`: unknown → not found, another account's →
    /// forbidden.
    pub async fn sandbox(&self, scope: &Scope, id: &SandboxId) -> ServiceResult<Sandbox> {
        Ok(self.store.get_sandbox(scope, id).await?)
    }

    /// A page of the caller's sandboxes.
    pub async fn list_sandboxes(
        &self,
        scope: &Scope,
        filter: &SandboxFilter,
    ) -> ServiceResult<SandboxPage> {
        Ok(self.store.list_sandboxes(scope, filter).await?)
    }

    /// The sandboxes a bulk delete names, each by id (in the order given,
    /// loaded through the caller's scope) and then by labels (live ones not
    /// named already).
    pub async fn bulk_targets(
        &self,
        scope: &Scope,
        sel: BulkSelection<'_>,
    ) -> ServiceResult<Vec<BulkTarget>> {
        let mut targets: Vec<BulkTarget> = Vec::new();
        for id in sel.ids {
            match SandboxId::parse_field(id, sel.ids_field) {
                Err(e) => targets.push(Err((id.clone(), e.into()))),
                Ok(sid) => match self.store.get_sandbox(scope, &sid).await {
                    Ok(sb) if sel.live_only && sb.is_terminated() => targets.push(Err((
                        id.clone(),
                        ServiceError::NotFound("Sandbox not found".into()),
                    ))),
                    Ok(sb) => targets.push(Ok(sb)),
                    Err(e) => targets.push(Err((id.clone(), e.into()))),
                },
            }
        }
        if !sel.labels.is_empty() {
            let labels = Labels::parse_field(sel.labels, "labels")?;
            let filter = SandboxFilter {
                labels: labels.iter().cloned().collect(),
                is_active: Some(true),
                team_id: sel.team,
                page: 1,
                per_page: sel.max_by_labels as u32,
                ..Default::default()
            };
            let page = self.store.list_sandboxes(scope, &filter).await?;
            for sb in page.sandboxes {
                if !targets.iter().any(|t| matches!(t, Ok(s) if s.id == sb.id)) {
                    targets.push(Ok(sb));
                }
            }
        }
        Ok(targets)
    }

    /// The caller's snapshots (of one sandbox, or all), newest first.
    pub async fn list_snapshots(
        &self,
        scope: &Scope,
        sandbox: Option<&SandboxId>,
    ) -> ServiceResult<Vec<Snapshot>> {
        Ok(self.store.list_snapshots(scope, sandbox).await?)
    }

    /// The snapshots of the caller's sandbox `id` (which must be one the
    /// caller may see), newest first.
    pub async fn snapshots_of(&self, scope: &Scope, id: &str) -> ServiceResult<Vec<Snapshot>> {
        let sb = access::load(self, scope, id).await?;
        self.list_snapshots(scope, Some(&sb.id)).await
    }

    /// How many sandboxes are in each status, over every account.
    pub async fn count_sandboxes_by_status(&self) -> ServiceResult<Vec<(SandboxStatus, u64)>> {
        Ok(self.store.count_sandboxes_by_status().await?)
    }

    /// Every sandbox that is not destroyed, of every account (what an
    /// administrator's listing of volumes matches volumes with).
    pub async fn live_sandboxes(&self) -> ServiceResult<Vec<Sandbox>> {
        Ok(self.store.list_active_sandboxes().await?)
    }

    /// The owner of a sandbox's record, destroyed or not (`None`: no
    /// record).
    pub async fn record_owner(&self, id: &SandboxId) -> ServiceResult<Option<RecordOwner>> {
        Ok(self.store.sandbox_owner(id).await?)
    }

    /// Where the filesystem of `sb` came from, when it runs a snapshot's
    /// image: the snapshot (its owner's record, even deleted, as a fork's
    /// is at once) and the sandbox it was taken from, named when the caller
    /// may read it. Nothing when that cannot be told.
    pub async fn sandbox_origin(
        &self,
        scope: &Scope,
        sb: &Sandbox,
    ) -> Option<stockade_api::SandboxOrigin> {
        let image = &sb.spec.docker_image;
        let id = image
            .strip_prefix(Snapshot::IMAGE_REPO)?
            .strip_prefix(':')?;
        let id = stockade_core::SnapshotId::parse(id).ok()?;
        let snapshot = self
            .store
            .get_snapshot(&Scope::account(sb.account_id.clone()), &id)
            .await
            .ok()
            .filter(|s| &s.image_ref == image)?;
        let sandbox_name = self
            .store
            .get_sandbox(scope, &snapshot.source_sandbox_id)
            .await
            .ok()
            .map(|s| s.spec.name.to_string());
        let fork = snapshot.kind == stockade_core::SnapshotKind::Fork;
        Some(stockade_api::SandboxOrigin {
            kind: if fork { "fork" } else { "snapshot" }.to_owned(),
            snapshot_id: snapshot.id.to_string(),
            snapshot_name: (!fork).then(|| snapshot.name.clone()),
            sandbox_id: snapshot.source_sandbox_id.to_string(),
            sandbox_name,
        })
    }
}
