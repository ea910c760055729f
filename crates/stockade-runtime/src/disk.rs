//! Disk quotas, the parts without I/O: whether and how an engine
//! caps a sandbox's `/workspace` and its writable root filesystem, what a
//! sandbox uses against its limits, and the size strings Docker and btrfs
//! speak.

/// How one area of a sandbox's disk is capped by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaMethod {
    /// The storage driver's `size` option on the container
    /// (`HostConfig.StorageOpt`): overlay2 on XFS mounted with `pquota`
    /// (an XFS project quota), btrfs (a qgroup), zfs, devicemapper.
    StorageDriver,
    /// The `local` volume driver's `size` option: an XFS project quota on
    /// the engine's data root (XFS mounted with `pquota`).
    VolumeDriver,
    /// The volume's directory replaced, on the engine's host, by a btrfs
    /// subvolume with a qgroup limit (a local engine whose volumes are on
    /// btrfs; needs root and `btrfs` on Stockade's host).
    BtrfsSubvolume,
    /// The volume's directory made, on the engine's host, the mount point
    /// of an ext4 file system in a sparse file of the cap's size (a local
    /// engine on any file system; needs root on Stockade's host).
    LoopFile,
}

impl QuotaMethod {
    /// A short description for `/health` and the start banner.
    pub fn describe(self) -> &'static str {
        match self {
            QuotaMethod::StorageDriver => "the storage driver's size option",
            QuotaMethod::VolumeDriver => "the local volume driver's size option",
            QuotaMethod::BtrfsSubvolume => "a btrfs subvolume with a qgroup limit",
            QuotaMethod::LoopFile => "a file system of its own in a loop file",
        }
    }
}

/// Whether one area's size is capped, and how, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforcement {
    Enforced(QuotaMethod),
    /// Not capped: writes can grow until the engine's disk is full. The
    /// reason, as the engine (or the host) gave it.
    NotEnforced(String),
}

impl Enforcement {
    pub fn is_enforced(&self) -> bool {
        matches!(self, Enforcement::Enforced(_))
    }

    /// The method, when enforced.
    pub fn method(&self) -> Option<QuotaMethod> {
        match self {
            Enforcement::Enforced(m) => Some(*m),
            Enforcement::NotEnforced(_) => None,
        }
    }
}

/// What an engine can enforce of `diskSizeGB`: each of a sandbox's
/// two writable areas, `/workspace` (its volume) and the writable root
/// filesystem (the container's layer), is capped at `diskSizeGB` on its
/// own. Creates work either way; what is not enforced is reported here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskEnforcement {
    pub workspace: Enforcement,
    pub root_fs: Enforcement,
}

impl DiskEnforcement {
    /// Both areas are capped.
    pub fn is_enforced(&self) -> bool {
        self.workspace.is_enforced() && self.root_fs.is_enforced()
    }

    /// `None` when both areas are capped, else the sentence for `/health`
    /// and the start banner: "diskSizeGB is not enforced on this host: …".
    pub fn warning(&self) -> Option<String> {
        let mut missing = Vec::new();
        for (area, e) in [
            ("/workspace", &self.workspace),
            ("the root filesystem", &self.root_fs),
        ] {
            if let Enforcement::NotEnforced(why) = e {
                missing.push(format!("{area}: {why}"));
            }
        }
        if missing.is_empty() {
            return None;
        }
        let what = if missing.len() == 2 {
            "diskSizeGB is not enforced on this host"
        } else {
            "diskSizeGB is only partly enforced on this host"
        };
        Some(format!(
            "{what}: {} (put the Docker data root on XFS mounted with pquota, \
             or on btrfs with the btrfs storage driver)",
            missing.join("; ")
        ))
    }
}

/// A sandbox's disk use against its limits (for the details endpoint).
/// Every figure is `None` when it could not be measured (in time) or, for
/// a limit, when none is enforced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes used in `/workspace` (the volume).
    pub workspace_bytes: Option<u64>,
    /// The cap of `/workspace`, as the kernel enforces it.
    pub workspace_limit_bytes: Option<u64>,
    /// Bytes written to the root filesystem (the container's own layer).
    pub root_fs_bytes: Option<u64>,
    /// The cap of the root filesystem, as the kernel enforces it.
    pub root_fs_limit_bytes: Option<u64>,
}

/// A size as Docker's options write it: bytes, or a number with a binary
/// unit (`k`, `m`, `g`, `t`, optionally followed by `b`/`ib`, any case),
/// e.g. `1073741824`, `1g`, `10MiB`. `None` when it is none of these.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(digits_end);
    let number: f64 = number.parse().ok()?;
    let unit = unit.trim();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(unit);
    let factor: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return None,
    };
    let bytes = number * factor as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then(|| bytes.round() as u64)
}

/// One qgroup line of `btrfs qgroup show -r -f --raw PATH`:
/// `0/261  3018752  3018752  10485760  volumes/x/_data` (the limit column
/// reads `none` without a limit). Returns (referenced bytes, limit).
pub(crate) fn parse_qgroup_show(output: &str) -> Option<(u64, Option<u64>)> {
    output.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let id = fields.next()?;
        if !id.starts_with("0/") {
            return None;
        }
        let referenced = fields.next()?.parse().ok()?;
        let _exclusive = fields.next()?;
        let limit = fields.next().and_then(|l| l.parse().ok());
        Some((referenced, limit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1073741824"), Some(1 << 30));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("10MiB"), Some(10 << 20));
        assert_eq!(parse_size("10mb"), Some(10 << 20));
        assert_eq!(parse_size("1.5k"), Some(1536));
        assert_eq!(parse_size(" 64m "), Some(64 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("12q"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn qgroup_lines_parse() {
        let out = "Qgroupid    Referenced    Exclusive  Max referenced   Path \n\
                   --------    ----------    ---------  --------------   ---- \n\
                   0/261          3018752      3018752        10485760   volumes/tq/_data\n";
        assert_eq!(parse_qgroup_show(out), Some((3018752, Some(10485760))));
        let out = "Qgroupid    Referenced    Exclusive  Max referenced   Path \n\
                   0/262            16384        16384            none   volumes/x/_data\n";
        assert_eq!(parse_qgroup_show(out), Some((16384, None)));
        assert_eq!(parse_qgroup_show("ERROR: can't list qgroups"), None);
    }

    #[test]
    fn warnings_name_what_is_missing() {
        let both = DiskEnforcement {
            workspace: Enforcement::Enforced(QuotaMethod::VolumeDriver),
            root_fs: Enforcement::Enforced(QuotaMethod::StorageDriver),
        };
        assert!(both.is_enforced());
        assert_eq!(both.warning(), None);
        let none = DiskEnforcement {
            workspace: Enforcement::NotEnforced("no quota support".into()),
            root_fs: Enforcement::NotEnforced("overlay over extfs".into()),
        };
        let w = none.warning().unwrap();
        assert!(
            w.starts_with("diskSizeGB is not enforced on this host: /workspace: no quota support"),
            "{w}"
        );
        assert!(w.contains("the root filesystem: overlay over extfs"), "{w}");
        let half = DiskEnforcement {
            root_fs: Enforcement::Enforced(QuotaMethod::StorageDriver),
            ..none
        };
        assert!(!half.is_enforced());
        assert!(half.warning().unwrap().contains("only partly"));
    }
}
