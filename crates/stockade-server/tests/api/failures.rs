//! A database failure after the container exists removes the
//! container and the volume and returns the error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::json;
use stockade_core::events::StoredEvent;
use stockade_core::template::{
    BuildId, BuildLogLine, Template, TemplateBuild, TemplateId, TemplateLayer, TemplateName,
};
use stockade_core::{
    Account, AccountId, InstanceId, Operation, OperationId, Quota, QuotaUsage, Resources, Sandbox,
    SandboxId, SandboxStatus, Scope, Team, TeamId, TokenId, TokenRecord,
};
use stockade_core::{DeliveryId, SharedVolume, SharedVolumeId, SharedVolumeStatus, WebhookId};
use stockade_store::{
    AccountStore, Authenticated, HealthStore, HostStore, IdempotencyStore, Lease, LeaseStore,
    OperationStore, Placed, PlacementCandidate, QuotaStore, SandboxFilter, SandboxPage,
    SandboxStore, SandboxWrite, SettingsStore, SnapshotStore, SqliteStore, StoreError, StoreHealth,
    StoreResult, TeamStore,
};
use stockade_store::{
    AttemptOutcome, AttemptRecord, AuditFilter, AuditRecord, AuditStore, DeliveryRecord,
    DeliveryStatus, DueDelivery, EventFilter, EventStore, WebhookRecord,
};
use stockade_store::{SharedVolumeStore, TemplateStore};

use crate::helpers::*;

/// A real SQLite store whose `update_sandbox` can be made to fail: it fakes
/// the sandbox role and hands every other role to the real store.
struct FailingStore {
    inner: SqliteStore,
    fail_updates: AtomicBool,
}

/// `impl $role for FailingStore`: each listed method hands the call to the
/// real store as it is; the items after the list are written out.
macro_rules! forward {
    (
        $role:ident { $(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)* }
        $($own:tt)*
    ) => {
        #[async_trait]
        impl $role for FailingStore {
            $(
                async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    self.inner.$name($($arg),*).await
                }
            )*
            $($own)*
        }
    };
}

forward! {
    SandboxStore {
        fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()>;
        fn get_sandbox(&self, scope: &Scope, id: &SandboxId) -> StoreResult<Sandbox>;
        fn get_sandbox_by_name(&self, scope: &Scope, name: &str) -> StoreResult<Sandbox>;
        fn list_sandboxes(&self, scope: &Scope, f: &SandboxFilter) -> StoreResult<SandboxPage>;
        fn soft_delete_sandbox(&self, id: &SandboxId, at: DateTime<Utc>) -> StoreResult<()>;
        fn purge_sandbox(&self, id: &SandboxId) -> StoreResult<()>;
        fn list_active_sandboxes(&self) -> StoreResult<Vec<Sandbox>>;
        fn list_active_sandboxes_page(&self, after: Option<&SandboxId>,
            limit: u32) -> StoreResult<Vec<Sandbox>>;
        fn sandbox_record_exists(&self, id: &SandboxId) -> StoreResult<bool>;
        fn sandbox_owner(&self, id: &SandboxId) -> StoreResult<Option<stockade_store::RecordOwner>>;
        fn count_sandboxes_by_status(&self) -> StoreResult<Vec<(SandboxStatus, u64)>>;
        fn claim_expired_sessions(&self, server: &str, now: DateTime<Utc>,
            lease_until: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Sandbox>>;
        fn extend_session(&self, id: &SandboxId, until: DateTime<Utc>) -> StoreResult<()>;
    }
    async fn update_sandbox(&self, sandbox: &Sandbox) -> StoreResult<Sandbox> {
        if self.fail_updates.load(Ordering::SeqCst) {
            return Err(StoreError::Other(
                "disk I/O error (injected by the test)".into(),
            ));
        }
        self.inner.update_sandbox(sandbox).await
    }
}

forward! {
    HealthStore {
        fn ping(&self) -> StoreResult<()>;
        fn probe_write(&self) -> StoreResult<()>;
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn health(&self) -> StoreHealth {
        self.inner.health()
    }
}

forward! {
    SharedVolumeStore {
        fn insert_shared_volume(&self, volume: &SharedVolume, quota: &Quota)
            -> StoreResult<Result<(), stockade_core::StoredQuotaExceeded>>;
        fn get_shared_volume(&self, id: &SharedVolumeId) -> StoreResult<SharedVolume>;
        fn shared_volume_by_name(&self, scope: &Scope, name: &str) -> StoreResult<SharedVolume>;
        fn list_shared_volumes(&self, scope: &Scope) -> StoreResult<Vec<SharedVolume>>;
        fn set_shared_volume_status(&self, id: &SharedVolumeId,
            status: SharedVolumeStatus) -> StoreResult<()>;
        fn begin_shared_volume_delete(&self, id: &SharedVolumeId) -> StoreResult<Vec<SandboxId>>;
        fn finish_shared_volume_delete(&self, id: &SharedVolumeId) -> StoreResult<()>;
        fn begin_shared_volume_move(&self, id: &SharedVolumeId, to: &str)
            -> StoreResult<Vec<SandboxId>>;
        fn finish_shared_volume_move(&self, id: &SharedVolumeId) -> StoreResult<()>;
        fn abort_shared_volume_move(&self, id: &SharedVolumeId) -> StoreResult<()>;
        fn forget_moved_from(&self, id: &SharedVolumeId) -> StoreResult<()>;
        fn pending_shared_volumes(&self) -> StoreResult<Vec<SharedVolume>>;
        fn mounts_of_volumes(&self, volumes: &[SharedVolumeId])
            -> StoreResult<Vec<stockade_store::MountRecord>>;
    }
}

forward! {
    TemplateStore {
        fn insert_template(&self, t: &Template) -> StoreResult<()>;
        fn get_template(&self, id: &TemplateId) -> StoreResult<Template>;
        fn template_by_name(&self, account: &AccountId,
            name: &TemplateName) -> StoreResult<Template>;
        fn list_templates(&self, account: &AccountId) -> StoreResult<Vec<Template>>;
        fn update_template(&self, t: &Template) -> StoreResult<()>;
        fn insert_build(&self, b: &TemplateBuild) -> StoreResult<()>;
        fn get_build(&self, id: &BuildId) -> StoreResult<TemplateBuild>;
        fn update_build(&self, b: &TemplateBuild) -> StoreResult<()>;
        fn list_builds(&self, t: &TemplateId) -> StoreResult<Vec<TemplateBuild>>;
        fn latest_ready_build(&self, t: &TemplateId,
            tag: Option<&str>) -> StoreResult<Option<TemplateBuild>>;
        fn unfinished_builds(&self) -> StoreResult<Vec<TemplateBuild>>;
        fn append_build_logs(&self, b: &BuildId, lines: &[BuildLogLine]) -> StoreResult<()>;
        fn build_logs(&self, b: &BuildId, from: u64,
            limit: u32) -> StoreResult<Vec<BuildLogLine>>;
        fn get_layer(&self, key: &str) -> StoreResult<Option<TemplateLayer>>;
        fn put_layer(&self, layer: &TemplateLayer) -> StoreResult<()>;
        fn layers_of_account(&self, account: &AccountId) -> StoreResult<Vec<TemplateLayer>>;
        fn delete_layer(&self, key: &str) -> StoreResult<()>;
    }
}

forward! {
    SettingsStore {
        fn instance_id(&self) -> StoreResult<InstanceId>;
        fn setting_get_or_insert(&self, key: &str, value: &str) -> StoreResult<String>;
    }
}

forward! {
    AccountStore {
        fn create_account(&self, name: &str, is_admin: bool) -> StoreResult<Account>;
        fn list_accounts(&self) -> StoreResult<Vec<Account>>;
        fn count_accounts(&self) -> StoreResult<u64>;
        fn get_account(&self, id: &AccountId) -> StoreResult<(Account, Vec<TeamId>)>;
        fn set_account_disabled(&self, id: &AccountId,
            at: Option<DateTime<Utc>>) -> StoreResult<Account>;
        fn insert_token(&self, record: &TokenRecord, token_hash: &str) -> StoreResult<()>;
        fn authenticate(&self, h: &str) -> StoreResult<Option<Authenticated>>;
        fn list_tokens(&self, account: &AccountId) -> StoreResult<Vec<TokenRecord>>;
        fn get_token(&self, id: &TokenId) -> StoreResult<TokenRecord>;
        fn delete_token(&self, id: &TokenId) -> StoreResult<()>;
        fn touch_token(&self, id: &TokenId, at: DateTime<Utc>) -> StoreResult<()>;
    }
}

forward! {
    QuotaStore {
        fn create_account_with_quota(&self, name: &str, is_admin: bool,
            quota: &Quota) -> StoreResult<Account>;
        fn get_quota(&self, account: &AccountId) -> StoreResult<Quota>;
        fn set_quota(&self, account: &AccountId, quota: &Quota) -> StoreResult<()>;
        fn account_usage(&self, account: &AccountId,
            except: &[SandboxId]) -> StoreResult<QuotaUsage>;
        fn server_reserved(&self, server: &str, except: &[SandboxId]) -> StoreResult<Resources>;
        fn snapshot_usage(&self, account: &AccountId,
            except: Option<&stockade_core::SnapshotId>) -> StoreResult<(u64, u64)>;
        fn shared_volume_usage(&self, account: &AccountId)
            -> StoreResult<stockade_core::SharedVolumeUsage>;
    }
}

forward! {
    TeamStore {
        fn create_team(&self, name: &str) -> StoreResult<Team>;
        fn list_teams(&self) -> StoreResult<Vec<Team>>;
        fn get_team(&self, id: &TeamId) -> StoreResult<Team>;
        fn teams_of_account(&self, account: &AccountId) -> StoreResult<Vec<Team>>;
        fn add_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()>;
        fn remove_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()>;
        fn list_team_members(&self, team: &TeamId) -> StoreResult<Vec<Account>>;
    }
}

forward! {
    IdempotencyStore {
        fn insert_idempotency_key(&self, account: &AccountId, key: &str, hash: &str,
            sandbox: &SandboxId, expired_before: DateTime<Utc>) -> StoreResult<()>;
        fn get_idempotency_key(&self, account: &AccountId, key: &str,
            expired_before: DateTime<Utc>) -> StoreResult<Option<(String, SandboxId)>>;
        fn delete_idempotency_key(&self, account: &AccountId, key: &str) -> StoreResult<()>;
        fn purge_idempotency_keys(&self, before: DateTime<Utc>) -> StoreResult<u64>;
    }
}

forward! {
    SnapshotStore {
        fn insert_snapshot(&self, s: &stockade_core::Snapshot) -> StoreResult<()>;
        fn get_snapshot(&self, scope: &Scope,
            id: &stockade_core::SnapshotId) -> StoreResult<stockade_core::Snapshot>;
        fn list_snapshots(&self, scope: &Scope,
            source: Option<&SandboxId>) -> StoreResult<Vec<stockade_core::Snapshot>>;
        fn update_snapshot(&self, s: &stockade_core::Snapshot) -> StoreResult<()>;
        fn purge_snapshot(&self, id: &stockade_core::SnapshotId) -> StoreResult<()>;
        fn pending_snapshots(&self,
            before: DateTime<Utc>) -> StoreResult<Vec<stockade_core::Snapshot>>;
    }
}

forward! {
    LeaseStore {
        fn acquire_lease(&self, name: &str, holder: &str, now: DateTime<Utc>,
            expires_at: DateTime<Utc>) -> StoreResult<Option<Lease>>;
        fn get_lease(&self, name: &str) -> StoreResult<Option<Lease>>;
        fn release_lease(&self, name: &str, holder: &str) -> StoreResult<bool>;
    }
}

forward! {
    HostStore {
        fn insert_host(&self, host: &stockade_core::Host) -> StoreResult<()>;
        fn ensure_host(&self, host: &stockade_core::Host) -> StoreResult<stockade_core::Host>;
        fn list_hosts(&self) -> StoreResult<Vec<stockade_core::Host>>;
        fn get_host(&self, name: &str) -> StoreResult<stockade_core::Host>;
        fn update_host(&self, host: &stockade_core::Host) -> StoreResult<()>;
        fn record_host_health(&self, name: &str,
            health: &stockade_core::HostHealth) -> StoreResult<()>;
        fn delete_host(&self, name: &str) -> StoreResult<()>;
        fn sandboxes_per_server(&self) -> StoreResult<std::collections::HashMap<String, u64>>;
        fn insert_sandbox_placed(&self, sb: &mut Sandbox, op: Option<&Operation>,
            candidates: &[PlacementCandidate]) -> StoreResult<Placed>;
    }
}

forward! {
    EventStore {
        fn list_events(&self, filter: &EventFilter) -> StoreResult<Vec<StoredEvent>>;
        fn latest_event_seq(&self) -> StoreResult<i64>;
        fn append_events(&self, events: &[stockade_core::events::Event]) -> StoreResult<()>;
        fn purge_events(&self, before: DateTime<Utc>) -> StoreResult<u64>;
        fn insert_webhook(&self, webhook: &WebhookRecord) -> StoreResult<()>;
        fn list_webhooks(&self, account: &AccountId) -> StoreResult<Vec<WebhookRecord>>;
        fn get_webhook(&self, id: &WebhookId) -> StoreResult<WebhookRecord>;
        fn update_webhook(&self, webhook: &WebhookRecord) -> StoreResult<()>;
        fn delete_webhook(&self, id: &WebhookId) -> StoreResult<()>;
        fn claim_deliveries(&self, holder: &str, now: DateTime<Utc>,
            until: DateTime<Utc>, limit: u32) -> StoreResult<Vec<DueDelivery>>;
        fn record_attempt(&self, delivery: &DeliveryId, attempt: &AttemptRecord,
            outcome: AttemptOutcome) -> StoreResult<()>;
        fn list_deliveries(&self, webhook: &WebhookId, status: Option<DeliveryStatus>,
            limit: u32) -> StoreResult<Vec<DeliveryRecord>>;
        fn redeliver(&self, webhook: &WebhookId, delivery: &DeliveryId, now: DateTime<Utc>,
            give_up_at: DateTime<Utc>) -> StoreResult<DeliveryRecord>;
    }
    fn subscribe_events(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.subscribe_events()
    }
}

forward! {
    AuditStore {
        fn insert_audit(&self, entries: &[AuditRecord]) -> StoreResult<()>;
        fn list_audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditRecord>>;
        fn purge_audit(&self, before: DateTime<Utc>) -> StoreResult<u64>;
    }
}

forward! {
    OperationStore {
        fn begin_operation(&self, op: &Operation) -> StoreResult<()>;
        fn get_operation(&self, target: &str) -> StoreResult<Option<Operation>>;
        fn renew_operations(&self, holder: &str, until: DateTime<Utc>) -> StoreResult<u64>;
        fn end_operation(&self, id: &OperationId) -> StoreResult<()>;
        fn claim_expired_operations(&self, holder: &str, now: DateTime<Utc>,
            until: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Operation>>;
        fn claim_operation(&self, id: &OperationId, holder: &str, now: DateTime<Utc>,
            until: DateTime<Utc>) -> StoreResult<Option<Operation>>;
        fn insert_sandbox_with_operation(&self, sandbox: &Sandbox,
            op: &Operation) -> StoreResult<()>;
        fn list_operations(&self, limit: u32) -> StoreResult<Vec<Operation>>;
    }
    async fn finish_operation(
        &self,
        id: &OperationId,
        holder: &str,
        write: SandboxWrite<'_>,
    ) -> StoreResult<Option<Sandbox>> {
        if self.fail_updates.load(Ordering::SeqCst) && matches!(write, SandboxWrite::Update(_)) {
            return Err(StoreError::Other(
                "disk I/O error (injected by the test)".into(),
            ));
        }
        self.inner.finish_operation(id, holder, write).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_save_after_the_container_exists_removes_container_and_volume() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let url = format!("sqlite://{}", dir.path().join("stockade.db").display());
    let store = Arc::new(FailingStore {
        inner: SqliteStore::connect(&url).await.unwrap(),
        fail_updates: AtomicBool::new(true),
    });
    let app = spawn_app_with(AppOptions {
        store: Some(store.clone()),
        dir: Some(dir),
        ..Default::default()
    })
    .await;
    let t = &app.admin_token;
    let r = app.try_create(t, json!({ "name": "doomed" })).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{:?}", r.body);
    assert_eq!(r.code(), "database_error");
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("injected"));
    assert!(app.containers().is_empty(), "container left behind");
    assert!(app.volumes().is_empty(), "volume left behind");
    assert_eq!(
        app.get("/api/v1/sandbox?is_active=false", t).await.body["total"],
        0
    );
    assert_eq!(app.get("/api/v1/sandbox", t).await.body["total"], 0);

    // A failed status write on stop is logged and the stop goes on.
    store.fail_updates.store(false, Ordering::SeqCst);
    let id = app.create_id(t, json!({ "name": "survivor" })).await;
    store.fail_updates.store(true, Ordering::SeqCst);
    let r = app.act(t, &id, "stop?timeout=1").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "STOPPED");
}
