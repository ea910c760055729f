//! Persistence of accounts, tokens, sandbox records and operations: small
//! role traits ([`SandboxStore`], [`OperationStore`], …) that [`Store`] joins,
//! implemented once for both databases by [`SqlStore`] ([`SqliteStore`],
//! [`PgStore`]). The database is the single source of truth; callers
//! never see sqlx.
#![forbid(unsafe_code)]

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use stockade_core::template::{
    BuildId, BuildLogLine, Template, TemplateBuild, TemplateId, TemplateLayer, TemplateName,
};
use stockade_core::{
    Account, AccountId, InstanceId, Label, Operation, OperationId, Quota, QuotaUsage, Resources,
    Sandbox, SandboxId, SandboxStatus, Scope, SharedVolume, SharedVolumeId, SharedVolumeStatus,
    SharedVolumeUsage, Snapshot, SnapshotId, StoredQuotaExceeded, Team, TeamId, TokenId, TokenKind,
    TokenRecord,
};

mod db;
mod group;
mod lock;
mod postgres;
mod queries;
mod sql;
mod sqlite;

pub use db::SqlStore;
pub use lock::DatabaseLock;
pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// What can go wrong in the store. Callers match on these, never on sqlx.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// The record exists but belongs to another account (→ 403).
    #[error("forbidden")]
    Forbidden,
    /// A unique constraint, a row-version check or an operation's holder
    /// check failed.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database cannot serve now: disk full, read-only, I/O errors,
    /// unreachable (→ 503/507). Its kind says which; its message names
    /// the database and what to do ("free space on …").
    #[error("database unavailable: {0}")]
    Unavailable(Unavailable),
    #[error("database error: {0}")]
    Other(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Why the database cannot serve now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnavailableKind {
    /// The disk holding the database is full: nothing was written.
    Full,
    /// The database only reads (a read-only file, a standby server).
    ReadOnly,
    /// The database cannot be opened or reached.
    Unreachable,
    /// Anything else that keeps it from serving now (I/O errors, a
    /// server short of resources or shutting down).
    Failing,
}

/// A database that cannot serve now: what kind of failure, a message that
/// names the database and what to do, and the driver's error behind it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Unavailable {
    pub kind: UnavailableKind,
    pub message: String,
    #[source]
    pub cause: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Unavailable {
    pub fn new(kind: UnavailableKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            cause: None,
        }
    }
}

/// A database URL (`postgres://user:pass@host:port/db?query`) with its
/// database replaced by `database`, the query kept: for tools and tests
/// that make a database of their own next to a given one.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    let mut out = format!("{}/{}", &base[..path], database);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// What the store's writes say about the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreHealth {
    Ok,
    /// A write failed, for this reason, and none has succeeded since.
    Degraded(String),
}

impl StoreHealth {
    pub fn is_ok(&self) -> bool {
        matches!(self, Self::Ok)
    }
}

/// The most snapshots one list returns.
pub const MAX_SNAPSHOTS_LISTED: u32 = 1000;

/// How long an `Idempotency-Key` is remembered.
pub const IDEMPOTENCY_KEY_HOURS: i64 = 24;

/// The `expired_before` of idempotency lookups at `now`: keys recorded
/// earlier have expired.
pub fn idempotency_expired_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - chrono::Duration::hours(IDEMPOTENCY_KEY_HOURS)
}

/// Filters of the sandbox list. Empty filters match everything.
#[derive(Debug, Clone, Default)]
pub struct SandboxFilter {
    /// Any of these statuses; empty = any.
    pub statuses: Vec<SandboxStatus>,
    /// `Some(true)`: not terminated; `Some(false)`: terminated only;
    /// `None`: see [`SandboxFilter::include_terminated`].
    pub is_active: Option<bool>,
    /// The sandbox must carry ALL of these labels.
    pub labels: Vec<Label>,
    pub team_id: Option<TeamId>,
    /// Exact name.
    pub name: Option<String>,
    /// 1-based.
    pub page: u32,
    pub per_page: u32,
}

impl SandboxFilter {
    /// TERMINATED sandboxes are listed only when asked for (`is_active=false`
    /// or `status=TERMINATED`).
    pub fn include_terminated(&self) -> bool {
        self.is_active == Some(false) || self.statuses.contains(&SandboxStatus::Terminated)
    }
}

/// Who owns a sandbox record, for resources that carry no owner label
/// (a claimed warm-pool member's container and volume).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordOwner {
    pub account_id: AccountId,
    pub team_id: Option<TeamId>,
    /// The record is soft-deleted (the sandbox was destroyed).
    pub deleted: bool,
}

/// One page of sandboxes, newest first, and the total matching the filter.
#[derive(Debug, Clone)]
pub struct SandboxPage {
    pub sandboxes: Vec<Sandbox>,
    pub total: u64,
}

/// The record write that ends an operation, in the same transaction
/// ([`OperationStore::finish_operation`]).
#[derive(Debug, Clone, Copy)]
pub enum SandboxWrite<'a> {
    /// Writes every field if the stored version is still `sandbox.version`;
    /// the stored record comes back with its new version.
    Update(&'a Sandbox),
    /// Marks the record TERMINATED and soft-deleted at `at`, and returns it
    /// (a record that is gone already is fine: nothing comes back).
    SoftDelete {
        id: &'a SandboxId,
        at: DateTime<Utc>,
    },
    /// Removes the record for good (a create that never finished); a record
    /// that is gone already is fine.
    Purge { id: &'a SandboxId },
    /// Only ends the operation.
    None,
}

/// The database itself: which one, whether it answers and takes writes.
#[async_trait]
pub trait HealthStore: Send + Sync {
    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    /// Checks the database answers (for `/health`).
    async fn ping(&self) -> StoreResult<()>;

    /// `Degraded` after a failed write until a later write changed something.
    /// Answers from memory: no query.
    fn health(&self) -> StoreHealth;

    /// A tiny real write (a settings row), so that `/health` can see a
    /// degraded database recover. Its outcome updates [`HealthStore::health`].
    async fn probe_write(&self) -> StoreResult<()>;
}

/// Installation settings: the instance id and other values that are set once.
#[async_trait]
pub trait SettingsStore: Send + Sync {
    /// This installation's id, created on first use and stable afterwards.
    async fn instance_id(&self) -> StoreResult<InstanceId>;

    /// The value stored under `key`; when there is none, stores `value`
    /// first. Concurrent first calls (also from several server instances)
    /// all get the one value that was stored.
    async fn setting_get_or_insert(&self, key: &str, value: &str) -> StoreResult<String>;
}

/// What a credential's secret authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub account: Account,
    /// The account's teams, as the request's scope sees them.
    pub team_ids: Vec<TeamId>,
    /// The credential itself.
    pub token: TokenRecord,
}

/// Accounts and their credentials (API tokens and dashboard sessions).
#[async_trait]
pub trait AccountStore: Send + Sync {
    async fn create_account(&self, name: &str, is_admin: bool) -> StoreResult<Account>;
    async fn list_accounts(&self) -> StoreResult<Vec<Account>>;
    async fn count_accounts(&self) -> StoreResult<u64>;
    /// One account with its teams; `NotFound` when there is none.
    async fn get_account(&self, id: &AccountId) -> StoreResult<(Account, Vec<TeamId>)>;
    /// Disables the account from `at` on (`None`: enables it again) and
    /// returns it; `NotFound` when there is none.
    async fn set_account_disabled(
        &self,
        id: &AccountId,
        at: Option<DateTime<Utc>>,
    ) -> StoreResult<Account>;
    /// Stores a credential with the hash of its secret (never the
    /// plaintext). A taken hash is a `Conflict`, an unknown account
    /// `NotFound`. Expired credentials of the account go at the same time.
    async fn insert_token(&self, record: &TokenRecord, token_hash: &str) -> StoreResult<()>;
    /// Stores an API token hash for an account: named "token", no expiry.
    async fn add_token(&self, account: &AccountId, token_hash: &str) -> StoreResult<()> {
        let record = TokenRecord::new(
            account.clone(),
            "token".into(),
            TokenKind::Api,
            Utc::now(),
            None,
        );
        self.insert_token(&record, token_hash).await
    }
    /// What a secret's hash authenticates; `None` when it is unknown,
    /// revoked or expired. A disabled account is returned as such: the
    /// caller refuses it with a reason.
    async fn authenticate(&self, token_hash: &str) -> StoreResult<Option<Authenticated>>;
    /// The account an API token hash belongs to, with its teams (sessions
    /// and expired tokens are not API tokens).
    async fn account_by_token_hash(
        &self,
        token_hash: &str,
    ) -> StoreResult<Option<(Account, Vec<TeamId>)>> {
        Ok(self
            .authenticate(token_hash)
            .await?
            .filter(|a| a.token.kind == TokenKind::Api)
            .map(|a| (a.account, a.team_ids)))
    }
    /// The account's credentials that have not expired, newest first.
    async fn list_tokens(&self, account: &AccountId) -> StoreResult<Vec<TokenRecord>>;
    /// One credential; `NotFound` when there is none.
    async fn get_token(&self, id: &TokenId) -> StoreResult<TokenRecord>;
    /// Revokes a credential, and the sessions opened with it; `NotFound`
    /// when there is none.
    async fn delete_token(&self, id: &TokenId) -> StoreResult<()>;
    /// Records that a credential authenticated a request at `at`.
    async fn touch_token(&self, id: &TokenId, at: DateTime<Utc>) -> StoreResult<()>;
}

/// Teams (admin-managed; membership widens a caller's [`Scope`]).
#[async_trait]
pub trait TeamStore: Send + Sync {
    /// Creates a team. A team with the same name is a [`StoreError::Conflict`].
    async fn create_team(&self, name: &str) -> StoreResult<Team>;

    /// Every team, oldest first.
    async fn list_teams(&self) -> StoreResult<Vec<Team>>;

    /// One team; `NotFound` when there is none with this id.
    async fn get_team(&self, id: &TeamId) -> StoreResult<Team>;

    /// The teams `account` belongs to, oldest first.
    async fn teams_of_account(&self, account: &AccountId) -> StoreResult<Vec<Team>>;

    /// Adds `account` to `team`; already a member is fine. `NotFound` when the
    /// team or the account does not exist.
    async fn add_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()>;

    /// Removes `account` from `team`; `NotFound` when it was not a member.
    async fn remove_team_member(&self, team: &TeamId, account: &AccountId) -> StoreResult<()>;

    /// The members of `team`, oldest account first (empty for an unknown team).
    async fn list_team_members(&self, team: &TeamId) -> StoreResult<Vec<Account>>;
}

/// Sandbox records. Every method that reads a caller's sandbox takes the
/// caller's [`Scope`].
#[async_trait]
pub trait SandboxStore: Send + Sync {
    /// Inserts a new record. A second active sandbox with the same name in
    /// the same account is a [`StoreError::Conflict`].
    async fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()>;

    /// The sandbox with `id`, soft-deleted ones included: `NotFound` when no
    /// record exists, `Forbidden` when it is outside `scope`.
    async fn get_sandbox(&self, scope: &Scope, id: &SandboxId) -> StoreResult<Sandbox>;

    /// The active (not soft-deleted) sandbox of `scope`'s account with `name`.
    async fn get_sandbox_by_name(&self, scope: &Scope, name: &str) -> StoreResult<Sandbox>;

    /// One page of `scope`'s sandboxes, newest first.
    async fn list_sandboxes(
        &self,
        scope: &Scope,
        filter: &SandboxFilter,
    ) -> StoreResult<SandboxPage>;

    /// Writes every field of `sandbox` if its stored version is still
    /// `sandbox.version`, and returns the record with the new version.
    /// Another writer in between → `Conflict`.
    async fn update_sandbox(&self, sandbox: &Sandbox) -> StoreResult<Sandbox>;

    /// Marks the record TERMINATED and soft-deleted at `at`.
    async fn soft_delete_sandbox(&self, id: &SandboxId, at: DateTime<Utc>) -> StoreResult<()>;

    /// Removes a record for good: only for a create that never finished.
    async fn purge_sandbox(&self, id: &SandboxId) -> StoreResult<()>;

    /// Every record not soft-deleted, across accounts: for reconciliation.
    async fn list_active_sandboxes(&self) -> StoreResult<Vec<Sandbox>>;

    /// At most `limit` records not soft-deleted whose ids come after
    /// `after`, in id order, across accounts: reconciliation reads them a
    /// page at a time, so its memory does not grow with the records.
    async fn list_active_sandboxes_page(
        &self,
        after: Option<&SandboxId>,
        limit: u32,
    ) -> StoreResult<Vec<Sandbox>>;

    /// Whether any record (soft-deleted or not) exists with this id:
    /// tells orphaned resources from owned ones.
    async fn sandbox_record_exists(&self, id: &SandboxId) -> StoreResult<bool>;

    /// The owner of the record with `id` (soft-deleted ones included) and
    /// whether it is deleted; `None` when no record exists. Across accounts:
    /// for reconciliation and volume listings, never for a caller's lookup.
    async fn sandbox_owner(&self, id: &SandboxId) -> StoreResult<Option<RecordOwner>>;

    /// How many records that are not deleted have each status.
    /// Statuses without records are left out.
    async fn count_sandboxes_by_status(&self) -> StoreResult<Vec<(SandboxStatus, u64)>>;

    /// Claims the sessions of sandboxes on `server` that ended at or
    /// before `now`, at most `limit`, oldest deadline first. Each claimed
    /// record's `session_expires_at` moves to `lease_until` and its version
    /// is bumped (an optimistic update), so exactly one of several server
    /// instances on one database acts on it; if that instance dies
    /// before it closed the session, another claims it again once the lease
    /// passed. Returns the claimed records as they are now stored.
    async fn claim_expired_sessions(
        &self,
        server: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<Sandbox>>;

    /// Moves the end of a RUNNING sandbox's session later, to `until` (a
    /// use restarting its idle timeout); an earlier end, a record without
    /// a session or not running is left as it is. Not a version change:
    /// concurrent writers of the record are not disturbed.
    async fn extend_session(&self, id: &SandboxId, until: DateTime<Utc>) -> StoreResult<()>;
}

/// `Idempotency-Key`s of creates. Keys recorded before
/// `expired_before` (24 h, [`idempotency_expired_before`]) are ignored.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Records that `key` of `account` created `sandbox` from a request with
    /// `request_hash`, replacing an expired record of the key. A key already
    /// recorded and not expired → `Conflict`.
    async fn insert_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        request_hash: &str,
        sandbox: &SandboxId,
        expired_before: DateTime<Utc>,
    ) -> StoreResult<()>;

    /// The request hash and sandbox a key was first used for, unless expired.
    async fn get_idempotency_key(
        &self,
        account: &AccountId,
        key: &str,
        expired_before: DateTime<Utc>,
    ) -> StoreResult<Option<(String, SandboxId)>>;

    /// Forgets a key (its create failed, so a retry may create anew).
    async fn delete_idempotency_key(&self, account: &AccountId, key: &str) -> StoreResult<()>;

    /// Removes the keys recorded before `before`; how many.
    async fn purge_idempotency_keys(&self, before: DateTime<Utc>) -> StoreResult<u64>;
}

/// Snapshot records (user snapshots and the ones forks take).
#[async_trait]
pub trait SnapshotStore: Send + Sync {
    /// Inserts a new snapshot record.
    async fn insert_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()>;

    /// The snapshot with `id`, deleted ones included: `NotFound` when no
    /// record exists, `Forbidden` when another account owns it (snapshots
    /// belong to an account, not to its teams).
    async fn get_snapshot(&self, scope: &Scope, id: &SnapshotId) -> StoreResult<Snapshot>;

    /// The account's user snapshots that are not deleted, newest first (at
    /// most [`MAX_SNAPSHOTS_LISTED`]); only those of `source` when given.
    async fn list_snapshots(
        &self,
        scope: &Scope,
        source: Option<&SandboxId>,
    ) -> StoreResult<Vec<Snapshot>>;

    /// Writes the mutable fields (name, status, blob key and size, deleted_at).
    async fn update_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()>;

    /// Removes a snapshot record for good (a capture that failed).
    async fn purge_snapshot(&self, id: &SnapshotId) -> StoreResult<()>;

    /// Snapshots with an image or archive left to remove, across accounts:
    /// every DELETING one, and CREATING ones started before `creating_before`
    /// (their capture died with its server).
    async fn pending_snapshots(&self, creating_before: DateTime<Utc>)
        -> StoreResult<Vec<Snapshot>>;
}

/// The most templates or builds one list returns.
pub const MAX_TEMPLATES_LISTED: u32 = 1000;

/// Templates, their builds, build logs and the build cache.
#[async_trait]
pub trait TemplateStore: Send + Sync {
    /// Inserts a template with its names; a `Conflict` naming the name
    /// when one is taken in its account.
    async fn insert_template(&self, template: &Template) -> StoreResult<()>;

    /// The template with `id`, deleted ones and other accounts' included
    /// (the caller decides who may see it); `NotFound` when none.
    async fn get_template(&self, id: &TemplateId) -> StoreResult<Template>;

    /// The template named `name`: `account`'s own, else a public one (the
    /// oldest when several accounts publish the name); `NotFound` when
    /// none. Deleted templates have no names.
    async fn template_by_name(
        &self,
        account: &AccountId,
        name: &TemplateName,
    ) -> StoreResult<Template>;

    /// `account`'s templates that are not deleted, then other accounts'
    /// public ones, oldest first (at most [`MAX_TEMPLATES_LISTED`]).
    async fn list_templates(&self, account: &AccountId) -> StoreResult<Vec<Template>>;

    /// Writes names, public, defaults, `updated_at` and `deleted_at` (a
    /// deleted template loses its names). A `Conflict` naming the name when
    /// one is taken.
    async fn update_template(&self, template: &Template) -> StoreResult<()>;

    async fn insert_build(&self, build: &TemplateBuild) -> StoreResult<()>;

    /// `NotFound` when none.
    async fn get_build(&self, id: &BuildId) -> StoreResult<TemplateBuild>;

    /// Writes everything but the ids, owner and creation time.
    async fn update_build(&self, build: &TemplateBuild) -> StoreResult<()>;

    /// A template's builds, newest first (at most [`MAX_TEMPLATES_LISTED`]).
    async fn list_builds(&self, template: &TemplateId) -> StoreResult<Vec<TemplateBuild>>;

    /// The template's newest ready build (with `tag` when given).
    async fn latest_ready_build(
        &self,
        template: &TemplateId,
        tag: Option<&str>,
    ) -> StoreResult<Option<TemplateBuild>>;

    /// Builds waiting or building, across accounts: after a restart, the
    /// ones whose server died with them.
    async fn unfinished_builds(&self) -> StoreResult<Vec<TemplateBuild>>;

    /// Appends lines to a build's log; their offsets must follow on.
    async fn append_build_logs(&self, build: &BuildId, lines: &[BuildLogLine]) -> StoreResult<()>;

    /// A build's log lines from offset `from` on, at most `limit`.
    async fn build_logs(
        &self,
        build: &BuildId,
        from: u64,
        limit: u32,
    ) -> StoreResult<Vec<BuildLogLine>>;

    /// The cached layer with `key`, if any.
    async fn get_layer(&self, key: &str) -> StoreResult<Option<TemplateLayer>>;

    /// Records a layer (a layer already there under the key is replaced).
    async fn put_layer(&self, layer: &TemplateLayer) -> StoreResult<()>;

    /// Every layer of `account` (to remove them with their images).
    async fn layers_of_account(&self, account: &AccountId) -> StoreResult<Vec<TemplateLayer>>;

    /// Forgets the layer with `key`.
    async fn delete_layer(&self, key: &str) -> StoreResult<()>;
}

/// Shared volumes and which sandboxes mount them. A sandbox's mounts are
/// written with its record ([`SandboxStore`]'s inserts), each checked
/// there against its volume: only a READY volume of the same account can
/// be mounted, and [`SharedVolumeStore::begin_shared_volume_delete`] (and
/// `…_move`) takes the same row, so a delete or a move and a create that
/// mounts the volume never both win.
#[async_trait]
pub trait SharedVolumeStore: Send + Sync {
    /// Inserts a new volume if it fits the volume limits of `quota`
    /// ([`Quota::check_volume`]) next to the account's other volumes; the
    /// refusal otherwise, with nothing written. The count and the insert
    /// are one transaction that waits for every other insert of the
    /// account, so two creates at the limit never both pass. A name the
    /// account uses already is a [`StoreError::Conflict`].
    async fn insert_shared_volume(
        &self,
        volume: &SharedVolume,
        quota: &Quota,
    ) -> StoreResult<Result<(), StoredQuotaExceeded>>;

    /// The volume with `id`, deleted ones included, whoever owns it (the
    /// caller checks): `NotFound` when no record exists.
    async fn get_shared_volume(&self, id: &SharedVolumeId) -> StoreResult<SharedVolume>;

    /// The account's volume named `name` that is not deleted.
    async fn shared_volume_by_name(&self, scope: &Scope, name: &str) -> StoreResult<SharedVolume>;

    /// The account's volumes not deleted, newest first (at most
    /// [`MAX_VOLUMES_LISTED`]).
    async fn list_shared_volumes(&self, scope: &Scope) -> StoreResult<Vec<SharedVolume>>;

    /// Sets a volume's status.
    async fn set_shared_volume_status(
        &self,
        id: &SharedVolumeId,
        status: SharedVolumeStatus,
    ) -> StoreResult<()>;

    /// Marks a READY volume DELETING unless a sandbox not deleted mounts
    /// it; the ids of those that do (nothing changed) otherwise.
    /// `NotFound` when it is deleted already, `Conflict` when it is not
    /// READY (being moved).
    async fn begin_shared_volume_delete(&self, id: &SharedVolumeId) -> StoreResult<Vec<SandboxId>>;

    /// Marks a READY volume MOVING to host `to`, under the same rule.
    async fn begin_shared_volume_move(
        &self,
        id: &SharedVolumeId,
        to: &str,
    ) -> StoreResult<Vec<SandboxId>>;

    /// Ends a move: the volume READY on its new host, the old one kept in
    /// `moved_from` until its copy is removed ([`Self::forget_moved_from`]).
    async fn finish_shared_volume_move(&self, id: &SharedVolumeId) -> StoreResult<()>;

    /// Gives a move up: READY where it was.
    async fn abort_shared_volume_move(&self, id: &SharedVolumeId) -> StoreResult<()>;

    /// Forgets the old host of a finished move (its copy is gone).
    async fn forget_moved_from(&self, id: &SharedVolumeId) -> StoreResult<()>;

    /// Ends a delete: the record keeps its row with `deleted_at` set.
    async fn finish_shared_volume_delete(&self, id: &SharedVolumeId) -> StoreResult<()>;

    /// Volumes left CREATING, DELETING or MOVING, or with an old host's
    /// copy to remove, across accounts (recovery's work).
    async fn pending_shared_volumes(&self) -> StoreResult<Vec<SharedVolume>>;

    /// The mounts of sandboxes not deleted of each of `volumes`.
    async fn mounts_of_volumes(&self, volumes: &[SharedVolumeId]) -> StoreResult<Vec<MountRecord>>;
}

/// The most volumes one list returns.
pub const MAX_VOLUMES_LISTED: usize = 1000;

/// One sandbox's mount of a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountRecord {
    pub volume_id: SharedVolumeId,
    pub sandbox_id: SandboxId,
    pub path: String,
    pub read_only: bool,
}

/// Per-account quotas, and the sums that quotas and admission
/// control per Docker host compare against limits: SQL aggregates
/// over the records' resource columns, never a read of every record.
#[async_trait]
pub trait QuotaStore: Send + Sync {
    /// Creates an account with `quota` in one transaction: an account never
    /// exists without the quota it was created with. A taken name is a
    /// [`StoreError::Conflict`].
    async fn create_account_with_quota(
        &self,
        name: &str,
        is_admin: bool,
        quota: &Quota,
    ) -> StoreResult<Account>;

    /// The quota of `account` (unlimited when none was set); `NotFound` for
    /// an unknown account.
    async fn get_quota(&self, account: &AccountId) -> StoreResult<Quota>;

    /// Replaces the quota of `account`; `NotFound` for an unknown account.
    async fn set_quota(&self, account: &AccountId, quota: &Quota) -> StoreResult<()>;

    /// What the sandboxes `account` owns use, as its quota counts them
    /// ([`stockade_core::Footprint`]): those not terminated, their disks, and
    /// CPU and memory of those that run or are being created. The records in
    /// `except` are left out (their caller counts them itself).
    async fn account_usage(
        &self,
        account: &AccountId,
        except: &[SandboxId],
    ) -> StoreResult<QuotaUsage>;

    /// CPU and memory held on the Docker host `server`: its records that run
    /// or are being created (RUNNING, PROVISIONING, PENDING), but those in
    /// `except`.
    async fn server_reserved(&self, server: &str, except: &[SandboxId]) -> StoreResult<Resources>;

    /// How many user snapshots `account` holds that are not deleted (those
    /// being captured count), and the bytes their workspace and image
    /// archives take in the object store; `except` is left out.
    async fn snapshot_usage(
        &self,
        account: &AccountId,
        except: Option<&SnapshotId>,
    ) -> StoreResult<(u64, u64)>;

    /// How many shared volumes `account` keeps that are not deleted (being
    /// created or deleted ones too), and the total of their `size_gb`.
    async fn shared_volume_usage(&self, account: &AccountId) -> StoreResult<SharedVolumeUsage>;
}

/// One candidate host of a placement: its name, how much it may
/// hold (`None`: that dimension is not limited) and what this process holds
/// there that the records do not show yet (admissions in flight, warm-pool
/// members).
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementCandidate {
    pub server: String,
    pub cpu_limit_millis: Option<u64>,
    pub memory_limit_bytes: Option<u64>,
    pub extra: Resources,
}

/// What a placement found on one candidate: reserved (records + extra)
/// against its limits.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateLoad {
    pub server: String,
    pub reserved: Resources,
    pub cpu_limit_millis: Option<u64>,
    pub memory_limit_bytes: Option<u64>,
}

/// The outcome of [`HostStore::insert_sandbox_placed`].
#[derive(Debug, Clone, PartialEq)]
pub enum Placed {
    /// The record (and its operation) was inserted with `server` = this.
    On(String),
    /// No candidate had room; nothing was inserted. Each candidate's load,
    /// for the refusal's message.
    Full(Vec<CandidateLoad>),
}

/// Docker hosts and placement.
#[async_trait]
pub trait HostStore: Send + Sync {
    /// Registers `host`; a taken name is a [`StoreError::Conflict`].
    async fn insert_host(&self, host: &stockade_core::Host) -> StoreResult<()>;

    /// Registers `host` unless a host of that name exists (the server's own
    /// `--docker-host` at start); returns the stored one.
    async fn ensure_host(&self, host: &stockade_core::Host) -> StoreResult<stockade_core::Host>;

    /// Every host, by name.
    async fn list_hosts(&self) -> StoreResult<Vec<stockade_core::Host>>;

    /// One host; `NotFound` when unknown.
    async fn get_host(&self, name: &str) -> StoreResult<stockade_core::Host>;

    /// Writes what an administrator or the health check may change: state,
    /// state reason, auto-cordoned, labels, capacity, address, TLS,
    /// `updated_at`. `NotFound` when unknown.
    async fn update_host(&self, host: &stockade_core::Host) -> StoreResult<()>;

    /// Writes the last health check's findings.
    async fn record_host_health(
        &self,
        name: &str,
        health: &stockade_core::HostHealth,
    ) -> StoreResult<()>;

    /// Removes a host that holds no sandbox but terminated ones; otherwise a
    /// [`StoreError::Conflict`] saying how many it holds. `NotFound` when
    /// unknown.
    async fn delete_host(&self, name: &str) -> StoreResult<()>;

    /// How many sandboxes that are not terminated each server holds.
    async fn sandboxes_per_server(&self) -> StoreResult<std::collections::HashMap<String, u64>>;

    /// Inserts `sb` (and `op`, as `insert_sandbox_with_operation` does) on
    /// the candidate with the most free room that fits its CPU and memory,
    /// in one transaction that concurrent placements from any instance wait
    /// for (PostgreSQL: a transaction-scoped advisory lock; SQLite: the
    /// write lock), so two never fill the same room. Reserved = the records
    /// that run or are being created (as [`QuotaStore::server_reserved`])
    /// plus the candidate's `extra`. `sb.server` is set to the choice.
    /// A taken name is a `Conflict`; no room anywhere is [`Placed::Full`].
    async fn insert_sandbox_placed(
        &self,
        sb: &mut Sandbox,
        op: Option<&Operation>,
        candidates: &[PlacementCandidate],
    ) -> StoreResult<Placed>;
}

/// Durable operations: at most one per target, which is the
/// per-sandbox lock across server instances. A holder keeps its leases alive
/// ([`OperationStore::renew_operations`]); once a lease ended, any instance
/// may claim the operation and finish or roll it back.
#[async_trait]
pub trait OperationStore: Send + Sync {
    /// Records `op`. `Conflict` when its target already has an operation,
    /// whatever that one's lease (an expired one must be recovered first).
    async fn begin_operation(&self, op: &Operation) -> StoreResult<()>;

    /// The operation on `target`, if any.
    async fn get_operation(&self, target: &str) -> StoreResult<Option<Operation>>;

    /// Extends every lease `holder` has to `lease_until` (one heartbeat per
    /// process); how many.
    async fn renew_operations(&self, holder: &str, lease_until: DateTime<Utc>) -> StoreResult<u64>;

    /// Removes an operation; one that is already gone is fine.
    async fn end_operation(&self, id: &OperationId) -> StoreResult<()>;

    /// Takes over at most `limit` operations whose lease ended at or before
    /// `now`, oldest first: their holder becomes `holder`, their lease
    /// `lease_until`. Of several instances claiming at once, exactly one
    /// gets each operation. Returns them as now stored.
    async fn claim_expired_operations(
        &self,
        holder: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<Operation>>;

    /// [`OperationStore::claim_expired_operations`] for one operation: `None`
    /// when its lease has not ended or it is gone.
    async fn claim_operation(
        &self,
        id: &OperationId,
        holder: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> StoreResult<Option<Operation>>;

    /// Inserts `sandbox` and begins `op` in one transaction: both or
    /// neither. A taken name and an operation already on the target are
    /// both `Conflict`, told apart by their messages ("a sandbox named …",
    /// "… already has a … operation in progress").
    async fn insert_sandbox_with_operation(
        &self,
        sandbox: &Sandbox,
        op: &Operation,
    ) -> StoreResult<()>;

    /// Ends operation `id` of `holder` and makes `write` in one transaction.
    /// An operation that is gone or held by another holder (it was claimed)
    /// is `Conflict`, and nothing is written; so is a stale
    /// [`SandboxWrite::Update`], which leaves the operation in place. Returns
    /// the stored sandbox where there is one.
    async fn finish_operation(
        &self,
        id: &OperationId,
        holder: &str,
        write: SandboxWrite<'_>,
    ) -> StoreResult<Option<Sandbox>>;

    /// At most `limit` operations, oldest first: for diagnostics and tests.
    async fn list_operations(&self, limit: u32) -> StoreResult<Vec<Operation>>;
}

/// A lease one server instance holds at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub name: String,
    /// The server process holding it.
    pub holder: String,
    /// When its term ends unless the holder renews it first.
    pub expires_at: DateTime<Utc>,
}

/// The name of the lease whose holder runs the deployment-wide background
/// work.
pub const BACKGROUND_LEASE: &str = "background";

/// Leases held by one server instance at a time: the leader of
/// the deployment-wide background work. Times come from the caller's
/// clock, so instances sharing a database need clocks that agree to well
/// within a lease's term.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes or renews lease `name` for `holder` until `expires_at`, in one
    /// conditional write: when nobody holds it, when `holder` holds it
    /// already, or when its holder's term ended at or before `now`. Of
    /// several instances trying at once exactly one gets it. Returns the
    /// lease as now stored when `holder` holds it, `None` when another
    /// holder does. `expires_at` must lie after `now`.
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<Option<Lease>>;

    /// Lease `name` as stored (possibly expired), if anyone took it.
    async fn get_lease(&self, name: &str) -> StoreResult<Option<Lease>>;

    /// Gives lease `name` up if `holder` holds it, so that another instance
    /// takes it at once; whether it did.
    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<bool>;
}

/// How long a delivery is retried before it is given up on.
pub const DELIVERY_RETRY_PERIOD: chrono::TimeDelta = chrono::TimeDelta::hours(25);

/// Which events a feed read returns.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only this account's events; `None`: every account's.
    pub account: Option<AccountId>,
    /// Only events after this sequence number.
    pub after: Option<i64>,
    /// Only these kinds; empty: every kind.
    pub kinds: Vec<stockade_core::events::EventKind>,
    /// Only the events of this sandbox.
    pub sandbox: Option<SandboxId>,
    /// Newest first (E2B's polling order) instead of oldest first.
    pub newest_first: bool,
    /// Skip this many (E2B's `offset`).
    pub offset: u32,
    pub limit: u32,
}

/// A webhook as stored, its secret included.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRecord {
    pub id: stockade_core::WebhookId,
    pub account_id: AccountId,
    pub name: String,
    pub url: String,
    /// The event types wanted.
    pub events: Vec<String>,
    pub secret: String,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Waiting for its turn or its next attempt.
    Pending,
    /// A receiver answered 2xx.
    Delivered,
    /// Given up on after the retry period.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(DeliveryStatus::Pending),
            "delivered" => Some(DeliveryStatus::Delivered),
            "failed" => Some(DeliveryStatus::Failed),
            _ => None,
        }
    }
}

/// One attempt at a delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// Sent as the attempt's `e2b-delivery-id`.
    pub id: stockade_core::DeliveryId,
    pub at: DateTime<Utc>,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// An event on its way to one webhook, with its latest attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRecord {
    pub id: stockade_core::DeliveryId,
    pub webhook_id: stockade_core::WebhookId,
    pub event_id: stockade_core::EventId,
    pub event_kind: String,
    pub sandbox_id: Option<String>,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub next_attempt_at: DateTime<Utc>,
    pub give_up_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    /// Newest first, at most five.
    pub attempt_log: Vec<AttemptRecord>,
}

/// A delivery claimed for an attempt: what to send and where.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub id: stockade_core::DeliveryId,
    pub attempts: u32,
    pub give_up_at: DateTime<Utc>,
    pub webhook: WebhookRecord,
    pub event: stockade_core::events::StoredEvent,
}

/// What an attempt leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Delivered,
    /// Try again at this time.
    RetryAt(DateTime<Utc>),
    /// The retry period is over.
    GiveUp,
}

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    /// Its place in the log (ignored on insert).
    pub seq: i64,
    pub id: String,
    pub account_id: Option<AccountId>,
    pub token_id: Option<String>,
    pub client_ip: Option<String>,
    pub action: String,
    pub front_end: String,
    pub resource_id: Option<String>,
    pub status: u16,
    pub duration_ms: u64,
    pub at: DateTime<Utc>,
}

/// Which audit entries a read returns, oldest first (or newest first).
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Only this account's entries; `None`: everyone's.
    pub account: Option<AccountId>,
    pub after: Option<i64>,
    /// Only entries before this one.
    pub before: Option<i64>,
    /// The newest first.
    pub newest_first: bool,
    pub resource: Option<String>,
    pub limit: u32,
}

/// Lifecycle events (the outbox the record writes fill), webhooks and their
/// deliveries.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Events in the filter's order.
    async fn list_events(
        &self,
        filter: &EventFilter,
    ) -> StoreResult<Vec<stockade_core::events::StoredEvent>>;
    /// The newest event's sequence number (0 when there is none).
    async fn latest_event_seq(&self) -> StoreResult<i64>;
    /// Writes events that go with no record write of their own, with their
    /// deliveries.
    async fn append_events(&self, events: &[stockade_core::events::Event]) -> StoreResult<()>;
    /// Removes events older than `before` (their deliveries with them).
    async fn purge_events(&self, before: DateTime<Utc>) -> StoreResult<u64>;
    /// Changes after every commit that wrote events in this process.
    fn subscribe_events(&self) -> tokio::sync::watch::Receiver<u64>;

    async fn insert_webhook(&self, webhook: &WebhookRecord) -> StoreResult<()>;
    /// An account's webhooks, oldest first.
    async fn list_webhooks(&self, account: &AccountId) -> StoreResult<Vec<WebhookRecord>>;
    async fn get_webhook(&self, id: &stockade_core::WebhookId) -> StoreResult<WebhookRecord>;
    async fn update_webhook(&self, webhook: &WebhookRecord) -> StoreResult<()>;
    /// Removes a webhook and its deliveries.
    async fn delete_webhook(&self, id: &stockade_core::WebhookId) -> StoreResult<()>;

    /// Takes up to `limit` deliveries that are due, each the oldest pending
    /// one of its webhook and sandbox, for `holder` until `lease_until`.
    async fn claim_deliveries(
        &self,
        holder: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<DueDelivery>>;
    /// Records an attempt and what follows it; the claim ends.
    async fn record_attempt(
        &self,
        delivery: &stockade_core::DeliveryId,
        attempt: &AttemptRecord,
        outcome: AttemptOutcome,
    ) -> StoreResult<()>;
    /// A webhook's deliveries, newest first.
    async fn list_deliveries(
        &self,
        webhook: &stockade_core::WebhookId,
        status: Option<DeliveryStatus>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>>;
    /// Queues a delivery again: pending, due now, given up on after `give_up_at`.
    async fn redeliver(
        &self,
        webhook: &stockade_core::WebhookId,
        delivery: &stockade_core::DeliveryId,
        now: DateTime<Utc>,
        give_up_at: DateTime<Utc>,
    ) -> StoreResult<DeliveryRecord>;
}

/// The audit log.
#[async_trait]
pub trait AuditStore: Send + Sync {
    async fn insert_audit(&self, entries: &[AuditRecord]) -> StoreResult<()>;
    async fn list_audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditRecord>>;
    /// Removes entries older than `before`.
    async fn purge_audit(&self, before: DateTime<Utc>) -> StoreResult<u64>;
}

/// Declares [`Store`] as the join of `$role`s, implemented for every type
/// that has them all.
macro_rules! store_of_roles {
    ($($role:ident),+) => {
        /// Everything the server needs from its database. Implemented for
        /// every type that has all the roles; a test double implements only
        /// the role it fakes and is used where that role is asked for.
        pub trait Store: $($role +)+ 'static {}

        impl<T> Store for T where T: $($role +)+ 'static {}
    };
}

store_of_roles!(
    HealthStore,
    SettingsStore,
    AccountStore,
    TeamStore,
    SandboxStore,
    IdempotencyStore,
    SnapshotStore,
    SharedVolumeStore,
    TemplateStore,
    OperationStore,
    QuotaStore,
    LeaseStore,
    HostStore,
    EventStore,
    AuditStore
);

/// Opens the store a database URL names (`sqlite://path`, `sqlite::memory:`,
/// `postgres://…`) and applies its migrations.
pub async fn connect(url: &str) -> StoreResult<std::sync::Arc<dyn Store>> {
    if url.starts_with("sqlite:") {
        Ok(std::sync::Arc::new(SqliteStore::connect(url).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(std::sync::Arc::new(PgStore::connect(url).await?))
    } else {
        Err(StoreError::Other(format!(
            "unsupported database URL '{url}': use sqlite://PATH or postgres://USER@HOST/DB"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_urls_are_rewritten() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/stockade", "x"),
            "postgres://u:p@h:5432/x"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
        assert_eq!(
            with_database("postgres://h/db?sslmode=disable", "x"),
            "postgres://h/x?sslmode=disable"
        );
    }
}
