//! Stockade's domain: sandbox ids, statuses, validated sandbox settings and
//! the records the store keeps. Pure data and validation; no I/O.
#![forbid(unsafe_code)]

pub mod account;
pub mod error;
pub mod events;
pub mod fspath;
pub mod host;
pub mod ids;
pub mod lifecycle;
mod names;
pub mod net;
pub mod netpolicy;
pub mod operation;
pub mod quota;
pub mod sandbox;
pub mod shared_volume;
pub mod shell;
pub mod size;
pub mod snapshot;
pub mod spec;
pub mod status;
pub mod team;
pub mod template;
pub mod update;

pub use account::{Account, ApiToken, Scope, TokenKind, TokenRecord};
pub use error::{FieldError, ValidationErrors};
pub use fspath::SandboxPath;
pub use host::{Host, HostHealth, HostState, HostTls};
pub use ids::{
    AccountId, DeliveryId, EventId, InstanceId, SandboxId, SharedVolumeId, SnapshotId, TeamId,
    TokenId, UploadId, WebhookId,
};
pub use lifecycle::{Lifecycle, LifecycleInput, TimeoutAction};
pub use netpolicy::{
    Cidr, Decision, DomainName, EgressPolicy, EgressRule, PolicyError, PrivateAccess, Reason,
    RuleList,
};
pub use operation::{Operation, OperationId, OperationKind};
pub use quota::{
    Footprint, Quota, QuotaExceeded, QuotaInput, QuotaUsage, Resources, SharedVolumeUsage,
    StoredQuotaExceeded, StoredUsage,
};
pub use sandbox::{Sandbox, SandboxMetadata};
pub use shared_volume::{MountInput, SharedVolume, SharedVolumeStatus, VolumeMount};
pub use size::human_bytes;
pub use snapshot::{Snapshot, SnapshotKind, SnapshotStatus};
pub use spec::{
    Defaults, Label, Labels, NetworkPolicy, Placement, SandboxName, SandboxSpec, StartCommand,
    VolumeName,
};
pub use status::SandboxStatus;
pub use team::Team;
