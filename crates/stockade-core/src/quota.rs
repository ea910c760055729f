//! Per-account quotas and the resource amounts that quotas and
//! admission control per Docker host count: whole units (thousandths
//! of a core, bytes, gigabytes), so that sums and comparisons are exact.

use serde::{Deserialize, Serialize};

use crate::error::ValidationErrors;
use crate::sandbox::Sandbox;
use crate::spec::SandboxSpec;
use crate::status::SandboxStatus;

/// Bytes in one `memoryGB` (the API's gigabyte is 2^30 bytes).
pub const BYTES_PER_GB: u64 = 1 << 30;

/// The largest value a quota field takes (sandboxes, cores, GB).
pub const MAX_QUOTA: u64 = 1_000_000;

/// `cores` in thousandths of a core, rounded (0.01 cores, the smallest
/// sandbox, is 10).
pub fn cpu_millis(cores: f64) -> u64 {
    if cores.is_finite() && cores > 0.0 {
        (cores * 1000.0).round() as u64
    } else {
        0
    }
}

/// `memoryGB` in bytes, the way a sandbox's limit is computed
/// ([`SandboxSpec::memory_bytes`]), so a quota of 2 GB fits a 2 GB sandbox.
pub fn gb_bytes(gb: f64) -> u64 {
    if gb.is_finite() && gb > 0.0 {
        (gb * BYTES_PER_GB as f64) as u64
    } else {
        0
    }
}

/// Thousandths of a core as a number of cores, for people (`1.5`, `2`).
pub fn show_cores(millis: u64) -> String {
    trim_number(millis as f64 / 1000.0)
}

/// Bytes as `memoryGB`, for people (`0.5`, `24`, `23.43`).
pub fn show_gb(bytes: u64) -> String {
    trim_number(bytes as f64 / BYTES_PER_GB as f64)
}

/// At most two decimals, without trailing zeros.
fn trim_number(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

/// CPU and memory a sandbox holds while it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

impl Resources {
    /// What a sandbox with `spec` holds while it runs.
    pub fn of(spec: &SandboxSpec) -> Self {
        Self {
            cpu_millis: cpu_millis(spec.cpu_cores),
            memory_bytes: spec.memory_bytes().max(0) as u64,
        }
    }

    pub fn plus(self, other: Self) -> Self {
        Self {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }

    /// `self` times `n` (the members of a warm-pool class).
    pub fn times(self, n: u64) -> Self {
        Self {
            cpu_millis: self.cpu_millis.saturating_mul(n),
            memory_bytes: self.memory_bytes.saturating_mul(n),
        }
    }
}

/// Whether a sandbox in `status` holds CPU and memory on its host: it runs,
/// it is paused (its memory stays allocated), or a create is making it.
pub fn holds_resources(status: SandboxStatus) -> bool {
    matches!(
        status,
        SandboxStatus::Running
            | SandboxStatus::Paused
            | SandboxStatus::Provisioning
            | SandboxStatus::Pending
    )
}

/// What one sandbox counts for in its account's quota and on its host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// It counts as a sandbox (it is not terminated; stopped ones count).
    pub sandboxes: u64,
    /// CPU and memory, while it runs (zero otherwise).
    pub running: Resources,
    /// Its `diskSizeGB` (not terminated: a stopped sandbox keeps its disk).
    pub disk_gb: u64,
}

impl Footprint {
    /// What the record counts for as it is stored now.
    pub fn of_record(sb: &Sandbox) -> Self {
        if sb.is_terminated() {
            return Self::default();
        }
        Self {
            sandboxes: 1,
            running: if holds_resources(sb.status) {
                Resources::of(&sb.spec)
            } else {
                Resources::default()
            },
            disk_gb: u64::from(sb.spec.disk_size_gb),
        }
    }

    /// What a sandbox with `spec` counts for once it runs.
    pub fn running(spec: &SandboxSpec) -> Self {
        Self {
            sandboxes: 1,
            running: Resources::of(spec),
            disk_gb: u64::from(spec.disk_size_gb),
        }
    }
}

/// What an account uses, as its quota counts it: the sum of its sandboxes'
/// [`Footprint`]s.
pub type QuotaUsage = Footprint;

/// An account's limits; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Sandboxes that are not terminated (stopped ones count).
    pub sandboxes: Option<u64>,
    /// CPU of the running sandboxes, in thousandths of a core.
    pub cpu_millis: Option<u64>,
    /// Memory of the running sandboxes, in bytes.
    pub memory_bytes: Option<u64>,
    /// `diskSizeGB` of the sandboxes that are not terminated.
    pub disk_gb: Option<u64>,
    /// User snapshots that are not deleted (being captured ones count).
    pub snapshots: Option<u64>,
    /// Bytes those snapshots hold in the object store (workspace and image
    /// archives together).
    pub snapshot_bytes: Option<u64>,
    /// Uploaded archives not yet used and not expired.
    pub uploads: Option<u64>,
    /// Bytes those uploads hold in the object store.
    pub upload_bytes: Option<u64>,
    /// Shared volumes that are not deleted.
    pub volumes: Option<u64>,
    /// The `sizeGB` of those volumes together; where it is set, every
    /// volume of the account declares a size.
    pub volume_gb: Option<u64>,
}

/// What an account keeps in the object store, as its quota counts it:
/// snapshots (not deleted) and uploads (not used, not expired).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredUsage {
    pub snapshots: u64,
    pub snapshot_bytes: u64,
    pub uploads: u64,
    pub upload_bytes: u64,
}

/// What an account's shared volumes take, as its quota counts them: those
/// not deleted (being created or deleted ones too), and the total of their
/// declared `sizeGB` (a volume without a size counts none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedVolumeUsage {
    pub volumes: u64,
    pub volume_gb: u64,
}

/// A quota as the API and the command line give it: whole sandboxes and
/// GB of disk, cores and GB of memory (fractions allowed); `None` is
/// unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QuotaInput {
    pub sandboxes: Option<u64>,
    pub cpu_cores: Option<f64>,
    pub memory_gb: Option<f64>,
    pub disk_gb: Option<u64>,
    pub snapshots: Option<u64>,
    /// GB of snapshot archives (fractions allowed).
    pub snapshot_gb: Option<f64>,
    pub uploads: Option<u64>,
    /// GB of pending uploads (fractions allowed).
    pub upload_gb: Option<f64>,
    pub volumes: Option<u64>,
    /// GB of shared volumes' `sizeGB` together (whole GB, as sizes are).
    pub volume_gb: Option<u64>,
}

impl Quota {
    /// No limits.
    pub fn unlimited() -> Self {
        Self::default()
    }

    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }

    /// Checks `input`; each bad value is reported under its API field
    /// (`sandboxes`, `cpuCores`, `memoryGB`, `diskGB`, `snapshots`,
    /// `snapshotGB`, `uploads`, `uploadGB`, `volumes`, `volumeGB`).
    pub fn from_input(input: &QuotaInput) -> Result<Self, ValidationErrors> {
        let mut errs = ValidationErrors::default();
        let max = MAX_QUOTA;
        if input.sandboxes.is_some_and(|n| n > max) {
            errs.push(
                "sandboxes",
                format!("must be at most {max} (or null: unlimited)"),
            );
        }
        if input.disk_gb.is_some_and(|n| n > max) {
            errs.push(
                "diskGB",
                format!("must be at most {max} GB (or null: unlimited)"),
            );
        }
        for (v, field) in [
            (input.snapshots, "snapshots"),
            (input.uploads, "uploads"),
            (input.volumes, "volumes"),
        ] {
            if v.is_some_and(|n| n > max) {
                errs.push(field, format!("must be at most {max} (or null: unlimited)"));
            }
        }
        if input.volume_gb.is_some_and(|n| n > max) {
            errs.push(
                "volumeGB",
                format!("must be at most {max} GB (or null: unlimited)"),
            );
        }
        let fraction = |v: Option<f64>, field: &str, unit: &str, errs: &mut ValidationErrors| {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 || v > max as f64 {
                    errs.push(
                        field,
                        format!("must be between 0 and {max}{unit} (or null: unlimited), got {v}"),
                    );
                }
            }
        };
        fraction(input.cpu_cores, "cpuCores", " cores", &mut errs);
        fraction(input.memory_gb, "memoryGB", " GB", &mut errs);
        fraction(input.snapshot_gb, "snapshotGB", " GB", &mut errs);
        fraction(input.upload_gb, "uploadGB", " GB", &mut errs);
        errs.into_result()?;
        Ok(Self {
            sandboxes: input.sandboxes,
            cpu_millis: input.cpu_cores.map(cpu_millis),
            memory_bytes: input.memory_gb.map(gb_bytes),
            disk_gb: input.disk_gb,
            snapshots: input.snapshots,
            snapshot_bytes: input.snapshot_gb.map(gb_bytes),
            uploads: input.uploads,
            upload_bytes: input.upload_gb.map(gb_bytes),
            volumes: input.volumes,
            volume_gb: input.volume_gb,
        })
    }

    /// The quota in API units.
    pub fn to_input(&self) -> QuotaInput {
        QuotaInput {
            sandboxes: self.sandboxes,
            cpu_cores: self.cpu_millis.map(|m| m as f64 / 1000.0),
            memory_gb: self.memory_bytes.map(|b| b as f64 / BYTES_PER_GB as f64),
            disk_gb: self.disk_gb,
            snapshots: self.snapshots,
            snapshot_gb: self.snapshot_bytes.map(|b| b as f64 / BYTES_PER_GB as f64),
            uploads: self.uploads,
            upload_gb: self.upload_bytes.map(|b| b as f64 / BYTES_PER_GB as f64),
            volumes: self.volumes,
            volume_gb: self.volume_gb,
        }
    }

    /// Whether one more snapshot fits: `account quota exceeded: 3 of 3
    /// snapshots`.
    pub fn check_snapshot_count(&self, used: &StoredUsage) -> Result<(), StoredQuotaExceeded> {
        check_count(self.snapshots, used.snapshots, "snapshots")
    }

    /// Whether a snapshot of `bytes` fits next to the `used` ones (which do
    /// not include it).
    pub fn check_snapshot_bytes(
        &self,
        used: &StoredUsage,
        bytes: u64,
    ) -> Result<(), StoredQuotaExceeded> {
        check_bytes(self.snapshot_bytes, used.snapshot_bytes, bytes, "snapshots")
    }

    /// Whether one more upload fits.
    pub fn check_upload_count(&self, used: &StoredUsage) -> Result<(), StoredQuotaExceeded> {
        check_count(self.uploads, used.uploads, "uploads")
    }

    /// Whether an upload of `bytes` fits next to the `used` ones.
    pub fn check_upload_bytes(
        &self,
        used: &StoredUsage,
        bytes: u64,
    ) -> Result<(), StoredQuotaExceeded> {
        check_bytes(self.upload_bytes, used.upload_bytes, bytes, "uploads")
    }

    /// Whether one more shared volume of `size_gb` fits next to the `used`
    /// ones: first the count (`account quota exceeded: 2 of 2 volumes`),
    /// then the total size. A volume without a size adds nothing to the
    /// total; the caller refuses those first where `volume_gb` is set.
    pub fn check_volume(
        &self,
        used: &SharedVolumeUsage,
        size_gb: Option<u32>,
    ) -> Result<(), StoredQuotaExceeded> {
        check_count(self.volumes, used.volumes, "volumes")?;
        let bytes = |gb: u64| gb.saturating_mul(BYTES_PER_GB);
        check_bytes(
            self.volume_gb.map(bytes),
            bytes(used.volume_gb),
            bytes(size_gb.map_or(0, u64::from)),
            "volumes",
        )
    }

    /// How many more bytes of uploads fit (`None`: unlimited).
    pub fn upload_bytes_left(&self, used: &StoredUsage) -> Option<u64> {
        self.upload_bytes
            .map(|limit| limit.saturating_sub(used.upload_bytes))
    }

    /// Whether a sandbox may go from `before` to `after` while the rest of
    /// the account uses `others`. Only what grows is checked, so a quota
    /// lowered below the current use never blocks a stop, a delete, or a
    /// change that does not need more. The refusal says which limit, the
    /// use and what was asked: `account quota exceeded: 5 of 5 sandboxes`.
    pub fn check(
        &self,
        others: &QuotaUsage,
        before: &Footprint,
        after: &Footprint,
    ) -> Result<(), QuotaExceeded> {
        if let Some((used, limit, _)) = grows_past(
            self.sandboxes,
            others.sandboxes,
            before.sandboxes,
            after.sandboxes,
        ) {
            return Err(QuotaExceeded(format!(
                "account quota exceeded: {used} of {limit} sandboxes"
            )));
        }
        if let Some((used, limit, more)) = grows_past(
            self.cpu_millis,
            others.running.cpu_millis,
            before.running.cpu_millis,
            after.running.cpu_millis,
        ) {
            return Err(QuotaExceeded(format!(
                "account quota exceeded: {} of {} CPUs in use by running sandboxes, {} more requested",
                show_cores(used),
                show_cores(limit),
                show_cores(more)
            )));
        }
        if let Some((used, limit, more)) = grows_past(
            self.memory_bytes,
            others.running.memory_bytes,
            before.running.memory_bytes,
            after.running.memory_bytes,
        ) {
            return Err(QuotaExceeded(format!(
                "account quota exceeded: {} of {} GB memory in use by running sandboxes, {} GB more requested",
                show_gb(used),
                show_gb(limit),
                show_gb(more)
            )));
        }
        if let Some((used, limit, more)) =
            grows_past(self.disk_gb, others.disk_gb, before.disk_gb, after.disk_gb)
        {
            return Err(QuotaExceeded(format!(
                "account quota exceeded: {used} of {limit} GB disk in use, {more} GB more requested"
            )));
        }
        Ok(())
    }
}

/// Whether one sandbox's share going from `was` to `will`, next to the
/// `others`, passes `limit`: then the use before, the limit and how much
/// more was asked. Only growth is refused.
fn grows_past(limit: Option<u64>, others: u64, was: u64, will: u64) -> Option<(u64, u64, u64)> {
    let limit = limit?;
    (will > was && others.saturating_add(will) > limit)
        .then(|| (others.saturating_add(was), limit, will - was))
}

/// A refusal of [`Quota::check`]: which limit, the use and what was asked,
/// as the caller shows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuotaExceeded(pub String);

/// A refusal of one more snapshot or upload, or of its bytes; the Display
/// is the message the caller shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoredQuotaExceeded {
    /// One more of `what` (snapshots, uploads) would pass `limit`.
    #[error("account quota exceeded: {used} of {limit} {what}")]
    Count {
        what: &'static str,
        used: u64,
        limit: u64,
    },
    /// `more` bytes of `what` next to `used` would pass `limit`.
    #[error(
        "account quota exceeded: {} of {} GB in {what}, {} GB more requested",
        show_gb(*.used),
        show_gb(*.limit),
        show_gb(*.more)
    )]
    Bytes {
        what: &'static str,
        used: u64,
        limit: u64,
        more: u64,
    },
}

/// One more of `what` (snapshots, uploads) past `limit`.
fn check_count(
    limit: Option<u64>,
    used: u64,
    what: &'static str,
) -> Result<(), StoredQuotaExceeded> {
    match limit {
        Some(limit) if used.saturating_add(1) > limit => {
            Err(StoredQuotaExceeded::Count { what, used, limit })
        }
        _ => Ok(()),
    }
}

/// `more` bytes of `what` next to `used` past `limit`.
fn check_bytes(
    limit: Option<u64>,
    used: u64,
    more: u64,
    what: &'static str,
) -> Result<(), StoredQuotaExceeded> {
    match limit {
        Some(limit) if used.saturating_add(more) > limit => Err(StoredQuotaExceeded::Bytes {
            what,
            used,
            limit,
            more,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AccountId, SandboxId};
    use crate::spec::{Defaults, SpecInput};

    fn spec(cpu: f64, memory: f64, disk: f64) -> SandboxSpec {
        let input = SpecInput {
            cpu_cores: Some(cpu),
            memory_gb: Some(memory),
            disk_size_gb: Some(disk),
            ..SpecInput::default()
        };
        SandboxSpec::from_input(input, &SandboxId::generate(), &Defaults::default()).unwrap()
    }

    #[test]
    fn units_are_exact_and_shown_plainly() {
        assert_eq!(cpu_millis(0.01), 10);
        assert_eq!(cpu_millis(1.5), 1500);
        assert_eq!(cpu_millis(0.1) + cpu_millis(0.2), cpu_millis(0.3));
        assert_eq!(gb_bytes(2.0), 2 * BYTES_PER_GB);
        assert_eq!(gb_bytes(2.0), spec(1.0, 2.0, 10.0).memory_bytes() as u64);
        assert_eq!(show_cores(1500), "1.5");
        assert_eq!(show_cores(2000), "2");
        assert_eq!(show_gb(BYTES_PER_GB / 2), "0.5");
        assert_eq!(show_gb(25_276_514_304), "23.54");
        assert_eq!(cpu_millis(f64::NAN), 0);
    }

    #[test]
    fn input_is_checked_field_by_field() {
        let q = Quota::from_input(&QuotaInput {
            sandboxes: Some(5),
            cpu_cores: Some(2.5),
            memory_gb: Some(8.0),
            snapshot_gb: Some(0.5),
            uploads: Some(3),
            volumes: Some(4),
            volume_gb: Some(30),
            ..QuotaInput::default()
        })
        .unwrap();
        assert_eq!((q.volumes, q.volume_gb), (Some(4), Some(30)));
        assert_eq!(q.to_input().volume_gb, Some(30));
        assert_eq!(q.snapshot_bytes, Some(BYTES_PER_GB / 2));
        assert_eq!(q.uploads, Some(3));
        assert_eq!(q.snapshots, None);
        assert_eq!(q.to_input().snapshot_gb, Some(0.5));
        assert_eq!(q.sandboxes, Some(5));
        assert_eq!(q.cpu_millis, Some(2500));
        assert_eq!(q.memory_bytes, Some(8 * BYTES_PER_GB));
        assert_eq!(q.disk_gb, None);
        assert_eq!(q.to_input().cpu_cores, Some(2.5));
        assert_eq!(q.to_input().memory_gb, Some(8.0));
        assert!(Quota::from_input(&QuotaInput::default())
            .unwrap()
            .is_unlimited());
        let err = Quota::from_input(&QuotaInput {
            sandboxes: Some(MAX_QUOTA + 1),
            cpu_cores: Some(-1.0),
            memory_gb: Some(f64::INFINITY),
            disk_gb: Some(u64::MAX),
            snapshots: Some(MAX_QUOTA + 1),
            snapshot_gb: Some(-0.5),
            uploads: Some(u64::MAX),
            upload_gb: Some(f64::NAN),
            volumes: Some(MAX_QUOTA + 1),
            volume_gb: Some(MAX_QUOTA + 1),
        })
        .unwrap_err();
        let fields: Vec<&str> = err.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "sandboxes",
                "diskGB",
                "snapshots",
                "uploads",
                "volumes",
                "volumeGB",
                "cpuCores",
                "memoryGB",
                "snapshotGB",
                "uploadGB"
            ]
        );
        // Zero is a limit (nothing may be made or run), not "unlimited".
        let zero = Quota::from_input(&QuotaInput {
            cpu_cores: Some(0.0),
            ..QuotaInput::default()
        })
        .unwrap();
        assert_eq!(zero.cpu_millis, Some(0));
    }

    #[test]
    fn a_check_says_which_limit_and_only_blocks_growth() {
        let q = Quota {
            sandboxes: Some(5),
            cpu_millis: Some(4000),
            memory_bytes: Some(8 * BYTES_PER_GB),
            disk_gb: Some(50),
            ..Quota::default()
        };
        let new = Footprint::running(&spec(1.0, 2.0, 10.0));
        let others = |n: u64, cpu: u64, mem_gb: u64, disk: u64| QuotaUsage {
            sandboxes: n,
            running: Resources {
                cpu_millis: cpu,
                memory_bytes: mem_gb * BYTES_PER_GB,
            },
            disk_gb: disk,
        };
        let none = Footprint::default();
        assert!(q.check(&others(4, 3000, 6, 40), &none, &new).is_ok());
        assert_eq!(
            q.check(&others(5, 0, 0, 0), &none, &new).unwrap_err().0,
            "account quota exceeded: 5 of 5 sandboxes"
        );
        assert_eq!(
            q.check(&others(1, 3500, 0, 0), &none, &new).unwrap_err().0,
            "account quota exceeded: 3.5 of 4 CPUs in use by running sandboxes, 1 more requested"
        );
        assert_eq!(
            q.check(&others(1, 0, 7, 0), &none, &new).unwrap_err().0,
            "account quota exceeded: 7 of 8 GB memory in use by running sandboxes, 2 GB more requested"
        );
        assert_eq!(
            q.check(&others(1, 0, 0, 45), &none, &new).unwrap_err().0,
            "account quota exceeded: 45 of 50 GB disk in use, 10 GB more requested"
        );
        // A start: the sandbox counts already, only CPU and memory grow.
        let stopped = Footprint {
            running: Resources::default(),
            ..new
        };
        assert!(q.check(&others(9, 0, 0, 99), &stopped, &new).is_ok());
        assert!(q.check(&others(1, 3500, 0, 0), &stopped, &new).is_err());
        // A resize of a running sandbox counts what it had.
        let bigger = Footprint::running(&spec(3.0, 2.0, 10.0));
        assert_eq!(
            q.check(&others(2, 1500, 0, 0), &new, &bigger)
                .unwrap_err()
                .0,
            "account quota exceeded: 2.5 of 4 CPUs in use by running sandboxes, 2 more requested"
        );
        assert!(q.check(&others(2, 1000, 0, 0), &new, &bigger).is_ok());
        // Shrinking is always allowed, even over the quota.
        assert!(q.check(&others(9, 9000, 99, 99), &bigger, &new).is_ok());
        assert!(Quota::unlimited()
            .check(&others(u64::MAX, u64::MAX, 0, 0), &none, &new)
            .is_ok());
    }

    #[test]
    fn stored_limits_count_what_is_kept() {
        let q = Quota {
            snapshots: Some(2),
            snapshot_bytes: Some(BYTES_PER_GB),
            uploads: Some(0),
            ..Quota::default()
        };
        let used = StoredUsage {
            snapshots: 1,
            snapshot_bytes: BYTES_PER_GB / 2,
            uploads: 0,
            upload_bytes: 7,
        };
        assert!(q.check_snapshot_count(&used).is_ok());
        let full = StoredUsage {
            snapshots: 2,
            ..used
        };
        assert_eq!(
            q.check_snapshot_count(&full).unwrap_err().to_string(),
            "account quota exceeded: 2 of 2 snapshots"
        );
        assert!(q.check_snapshot_bytes(&used, BYTES_PER_GB / 2).is_ok());
        assert_eq!(
            q.check_snapshot_bytes(&used, BYTES_PER_GB)
                .unwrap_err()
                .to_string(),
            "account quota exceeded: 0.5 of 1 GB in snapshots, 1 GB more requested"
        );
        assert_eq!(
            q.check_upload_count(&used).unwrap_err().to_string(),
            "account quota exceeded: 0 of 0 uploads"
        );
        assert!(q.check_upload_bytes(&used, u64::MAX).is_ok());
        assert_eq!(q.upload_bytes_left(&used), None);
        let small = Quota {
            upload_bytes: Some(10),
            ..Quota::default()
        };
        assert_eq!(small.upload_bytes_left(&used), Some(3));
        assert!(Quota::unlimited()
            .check_snapshot_count(&StoredUsage {
                snapshots: u64::MAX,
                ..used
            })
            .is_ok());
    }

    #[test]
    fn volume_limits_count_volumes_then_their_sizes() {
        let q = Quota {
            volumes: Some(2),
            volume_gb: Some(3),
            ..Quota::default()
        };
        let one = SharedVolumeUsage {
            volumes: 1,
            volume_gb: 1,
        };
        assert!(q.check_volume(&one, Some(2)).is_ok());
        assert_eq!(
            q.check_volume(&one, Some(3)).unwrap_err().to_string(),
            "account quota exceeded: 1 of 3 GB in volumes, 3 GB more requested"
        );
        let two = SharedVolumeUsage {
            volumes: 2,
            volume_gb: 3,
        };
        assert_eq!(
            q.check_volume(&two, Some(1)).unwrap_err().to_string(),
            "account quota exceeded: 2 of 2 volumes"
        );
        // Without a size limit, sizes (or their absence) do not matter.
        let count_only = Quota {
            volumes: Some(2),
            ..Quota::default()
        };
        assert!(count_only.check_volume(&one, None).is_ok());
        assert!(count_only.check_volume(&one, Some(u32::MAX)).is_ok());
        assert!(Quota::unlimited()
            .check_volume(
                &SharedVolumeUsage {
                    volumes: u64::MAX,
                    volume_gb: u64::MAX
                },
                Some(1)
            )
            .is_ok());
    }

    #[test]
    fn a_records_footprint_follows_its_status() {
        let s = spec(2.0, 4.0, 20.0);
        let mut sb = Sandbox::new(
            SandboxId::generate(),
            AccountId::generate(),
            None,
            s.clone(),
            "local".into(),
            chrono::Utc::now(),
        );
        assert_eq!(
            Footprint::of_record(&sb),
            Footprint::running(&s),
            "provisioning"
        );
        sb.mark_stopped(chrono::Utc::now(), None);
        let stopped = Footprint::of_record(&sb);
        assert_eq!((stopped.sandboxes, stopped.disk_gb), (1, 20));
        assert_eq!(stopped.running, Resources::default());
        sb.mark_error("gone".into());
        assert_eq!(Footprint::of_record(&sb).running, Resources::default());
        sb.mark_terminated(chrono::Utc::now());
        assert_eq!(Footprint::of_record(&sb), Footprint::default());
    }
}
