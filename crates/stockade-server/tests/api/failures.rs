//! A database failure after the container exists removes the
//! container and the volume and returns the error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::json;
use stockade_core::{
    Account, AccountId, InstanceId, Operation, OperationId, Quota, QuotaUsage, Resources, Sandbox,
    SandboxId, SandboxStatus, Scope, Team, TeamId, TokenId, TokenRecord,
};
use stockade_store::{
    AccountStore, Authenticated, HealthStore, HostStore, IdempotencyStore, Lease, LeaseStore,
    OperationStore, Placed, PlacementCandidate, QuotaStore, SandboxFilter, SandboxPage,
    SandboxStore, SandboxWrite, SettingsStore, SnapshotStore, SqliteStore, StoreError, StoreHealth,
    StoreResult, TeamStore,
};

use crate::helpers::*;

/// A real SQLite store whose `update_sandbox` can be made to fail: it fakes
/// the sandbox role and hands every other role to the real store.
struct FailingStore {
    inner: SqliteStore,
    fail_updates: AtomicBool,
}

#[async_trait]
impl SandboxStore for FailingStore {
    async fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()> {
        self.inner.insert_sandbox(sandbox).await
    }
    async fn get_sandbox(&self, scope: &Scope, id: &SandboxId) -> StoreResult<Sandbox> {
        self.inner.get_sandbox(scope, id).await
    }
    async fn get_sandbox_by_name(&self, scope: &Scope, name: &str) -> StoreResult<Sandbox> {
        self.inner.get_sandbox_by_name(scope, name).await
    }
    async fn list_sandboxes(&self, scope: &Scope, f: &SandboxFilter) -> StoreResult<SandboxPage> {
        self.inner.list_sandboxes(scope, f).await
    }
    async fn update_sandbox(&self, sandbox: &Sandbox) -> StoreResult<Sandbox> {
        if self.fail_updates.load(Ordering::SeqCst) {
            return Err(StoreError::Other(
                "disk I/O error (injected by the test)".into(),
            ));
        }
        self.inner.update_sandbox(sandbox).await
    }
    async fn soft_delete_sandbox(&self, id: &SandboxId, at: DateTime<Utc>) -> StoreResult<()> {
        self.inner.soft_delete_sandbox(id, at).await
    }
    async fn purge_sandbox(&self, id: &SandboxId) -> StoreResult<()> {
        self.inner.purge_sandbox(id).await
    }
    async fn list_active_sandboxes(&self) -> StoreResult<Vec<Sandbox>> {
        self.inner.list_active_sandboxes().await
    }
    async fn list_active_sandboxes_page(
        &self,
        after: Option<&SandboxId>,
        limit: u32,
    ) -> StoreResult<Vec<Sandbox>> {
        self.inner.list_active_sandboxes_page(after, limit).await
    }
    async fn sandbox_record_exists(&self, id: &SandboxId) -> StoreResult<bool> {
        self.inner.sandbox_record_exists(id).await
    }
    async fn sandbox_owner(
        &self,
        id: &SandboxId,
    ) -> StoreResult<Option<stockade_store::RecordOwner>> {
        self.inner.sandbox_owner(id).await
    }
    async fn count_sandboxes_by_status(&self) -> StoreResult<Vec<(SandboxStatus, u64)>> {
        self.inner.count_sandboxes_by_status().await
    }
    async fn claim_expired_sessions(
        &self,
        server: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<Sandbox>> {
        self.inner
            .claim_expired_sessions(server, now, lease_until, limit)
            .await
    }
}

#[async_trait]
impl HealthStore for FailingStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn ping(&self) -> StoreResult<()> {
        self.inner.ping().await
    }
    fn health(&self) -> StoreHealth {
        self.inner.health()
    }
    async fn probe_write(&self) -> StoreResult<()> {
        self.inner.probe_write().await
    }
}

#[async_trait]
impl SettingsStore for FailingStore {
    async fn instance_id(&self) -> StoreResult<InstanceId> {
        self.inner.instance_id().await
    }
    async fn setting_get_or_insert(&self, key: &str, value: &str) -> StoreResult<String> {
        self.inner.setting_get_or_insert(key, value).await
    }
}

#[async_trait]
impl AccountStore for FailingStore {
    async fn create_account(&self, name: &str, is_admin: bool) -> StoreResult<Account> {
        self.inner.create_account(name, is_admin).await
    }
    async fn list_accounts(&self) -> StoreResult<Vec<Account>> {
        self.inner.list_accounts().await
    }
    async fn count_accounts(&self) -> StoreResult<u64> {
        self.inner.count_accounts().await
    }
    async fn get_account(&self, id: &AccountId) -> StoreResult<(Account, Vec<TeamId>)> {
        self.inner.get_account(id).await
    }
    async fn set_account_disabled(
        &self,
        id: &AccountId,
        at: Option<DateTime<Utc>>,
    ) -> StoreResult<Account> {
        self.inner.set_account_disabled(id, at).await
    }
    async fn insert_token(&self, record: &TokenRecord, token_hash: &str) -> StoreResult<()> {
        self.inner.insert_token(record, token_hash).await
    }
    async fn authenticate(&self, h: &str) -> StoreResult<Option<Authenticated>> {
        self.inner.authenticate(h).await
    }
    async fn list_tokens(&self, account: &AccountId) -> StoreResult<Vec<TokenRecord>> {
        self.inner.list_tokens(account).await
    }
    async fn get_token(&self, id: &TokenId) -> StoreResult<TokenRecord> {
        self.inner.get_token(id).await
    }
    async fn delete_token(&self, id: &TokenId) -> StoreResult<()> {
        self.inner.delete_token(id).await
    }
    async fn touch_token(&self, id: &TokenId, at: DateTime<Utc>) -> StoreResult<()> {
        self.inner.touch_token(id, at).await
    }
}

#[async_trait]
impl QuotaStore for FailingStore {
    async fn create_account_with_quota(
        &self,
        name: &str,
        is_admin: bool,
        quota: &Quota,
    ) -> StoreResult<Account> {
        self.inner
            .create_account_with_quota(name, is_admin, quota)
            .await
    }
    async fn get_quota(&self, account: &AccountId) -> StoreResult<Quota> {
        self.inner.get_quota(account).await
    }
    async fn set_quota(&self, account: &AccountId, quota: &Quota) -> StoreResult<()> {
        self.inner.set_quota(account, quota).await
    }
    async fn account_usage(
        &self,
        account: &AccountId,
        except: &[SandboxId],
    ) -> StoreResult<QuotaUsage> {
        self.inner.account_usage(account, except).await
    }
    async fn server_reserved(&self, server: &str, except: &[SandboxId]) -> StoreResult<Resources> {
        self.inner.server_reserved(server, except).await
    }
    async fn snapshot_usage(
        &self,
        account: &AccountId,
        except: Option<&stockade_core::SnapshotId>,
    ) -> StoreResult<(u64, u64)> {
        self.inner.snapshot_usage(account, except).await
    }
}

#[async_trait]
impl TeamStore for FailingStore {
    async fn create_team(&self, name: &str) -> StoreResult<Team> {
        self.inner.create_team(name).await
    }
    async fn list_teams(&self) -> StoreResult<Vec<Team>> {
        self.inner.list_teams().await
    }
    async fn get_team(&self, id: &TeamId) -> StoreResult<Team> {
        self.inner.get_team(id).await
    }
    async fn teams_of_account(&self, account: &AccountId) -> StoreResult<Vec<Team>> {
        self.inner.teams_of_account(account).await
    }
    async fn add_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()> {
        self.inner.add_team_member(team, account).await
    }
    async fn remove_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()> {
        self.inner.remove_team_member(team, account).await
    }
    async fn list_team_members(&self, team: &TeamId) -> StoreResult<Vec<Account>> {
        self.inner.list_team_members(team).await
    }
}

#[async_trait]
impl IdempotencyStore for FailingStore {
    async fn insert_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        hash: &str,
        sandbox: &SandboxId,
        expired_before: DateTime<Utc>,
    ) -> StoreResult<()> {
        self.inner
            .insert_idempotency_key(account, key, hash, sandbox, expired_before)
            .await
    }
    async fn get_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        expired_before: DateTime<Utc>,
    ) -> StoreResult<Option<(String, SandboxId)>> {
        self.inner
            .get_idempotency_key(account, key, expired_before)
            .await
    }
    async fn delete_idempotency_key(&self, account: &AccountId, key: &str) -> StoreResult<()> {
        self.inner.delete_idempotency_key(account, key).await
    }
    async fn purge_idempotency_keys(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        self.inner.purge_idempotency_keys(before).await
    }
}

#[async_trait]
impl SnapshotStore for FailingStore {
    async fn insert_snapshot(&self, s: &stockade_core::Snapshot) -> StoreResult<()> {
        self.inner.insert_snapshot(s).await
    }
    async fn get_snapshot(
        &self,
        scope: &Scope,
        id: &stockade_core::SnapshotId,
    ) -> StoreResult<stockade_core::Snapshot> {
        self.inner.get_snapshot(scope, id).await
    }
    async fn list_snapshots(
        &self,
        scope: &Scope,
        source: Option<&SandboxId>,
    ) -> StoreResult<Vec<stockade_core::Snapshot>> {
        self.inner.list_snapshots(scope, source).await
    }
    async fn update_snapshot(&self, s: &stockade_core::Snapshot) -> StoreResult<()> {
        self.inner.update_snapshot(s).await
    }
    async fn purge_snapshot(&self, id: &stockade_core::SnapshotId) -> StoreResult<()> {
        self.inner.purge_snapshot(id).await
    }
    async fn pending_snapshots(
        &self,
        before: DateTime<Utc>,
    ) -> StoreResult<Vec<stockade_core::Snapshot>> {
        self.inner.pending_snapshots(before).await
    }
}

#[async_trait]
impl LeaseStore for FailingStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<Option<Lease>> {
        self.inner
            .acquire_lease(name, holder, now, expires_at)
            .await
    }
    async fn get_lease(&self, name: &str) -> StoreResult<Option<Lease>> {
        self.inner.get_lease(name).await
    }
    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<bool> {
        self.inner.release_lease(name, holder).await
    }
}

#[async_trait]
impl HostStore for FailingStore {
    async fn insert_host(&self, host: &stockade_core::Host) -> StoreResult<()> {
        self.inner.insert_host(host).await
    }
    async fn ensure_host(&self, host: &stockade_core::Host) -> StoreResult<stockade_core::Host> {
        self.inner.ensure_host(host).await
    }
    async fn list_hosts(&self) -> StoreResult<Vec<stockade_core::Host>> {
        self.inner.list_hosts().await
    }
    async fn get_host(&self, name: &str) -> StoreResult<stockade_core::Host> {
        self.inner.get_host(name).await
    }
    async fn update_host(&self, host: &stockade_core::Host) -> StoreResult<()> {
        self.inner.update_host(host).await
    }
    async fn record_host_health(
        &self,
        name: &str,
        health: &stockade_core::HostHealth,
    ) -> StoreResult<()> {
        self.inner.record_host_health(name, health).await
    }
    async fn delete_host(&self, name: &str) -> StoreResult<()> {
        self.inner.delete_host(name).await
    }
    async fn sandboxes_per_server(&self) -> StoreResult<std::collections::HashMap<String, u64>> {
        self.inner.sandboxes_per_server().await
    }
    async fn insert_sandbox_placed(
        &self,
        sb: &mut Sandbox,
        op: Option<&Operation>,
        candidates: &[PlacementCandidate],
    ) -> StoreResult<Placed> {
        self.inner.insert_sandbox_placed(sb, op, candidates).await
    }
}

#[async_trait]
impl OperationStore for FailingStore {
    async fn begin_operation(&self, op: &Operation) -> StoreResult<()> {
        self.inner.begin_operation(op).await
    }
    async fn get_operation(&self, target: &str) -> StoreResult<Option<Operation>> {
        self.inner.get_operation(target).await
    }
    async fn renew_operations(&self, holder: &str, until: DateTime<Utc>) -> StoreResult<u64> {
        self.inner.renew_operations(holder, until).await
    }
    async fn end_operation(&self, id: &OperationId) -> StoreResult<()> {
        self.inner.end_operation(id).await
    }
    async fn claim_expired_operations(
        &self,
        holder: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<Operation>> {
        self.inner
            .claim_expired_operations(holder, now, until, limit)
            .await
    }
    async fn claim_operation(
        &self,
        id: &OperationId,
        holder: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<Option<Operation>> {
        self.inner.claim_operation(id, holder, now, until).await
    }
    async fn insert_sandbox_with_operation(
        &self,
        sandbox: &Sandbox,
        op: &Operation,
    ) -> StoreResult<()> {
        self.inner.insert_sandbox_with_operation(sandbox, op).await
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
    async fn list_operations(&self, limit: u32) -> StoreResult<Vec<Operation>> {
        self.inner.list_operations(limit).await
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
