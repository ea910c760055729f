//! Data the Docker-backed and the in-process tests share: the sandbox
//! list's bad query parameters and the quota of an account without limits.

use serde_json::{json, Value};

/// Each bad query of the sandbox list and the parameter its 400 must name.
pub const BAD_LIST_QUERIES: &[(&str, &str)] = &[
    ("per_page=0", "per_page"),
    ("per_page=1001", "per_page"),
    ("page=0", "page"),
    ("page=x", "page"),
    ("status=SLEEPING", "status"),
    ("is_active=maybe", "is_active"),
    ("labels=bad%20label", "labels"),
    ("team_id=x", "team_id"),
    ("name=", "name"),
    ("colour=red", "colour"),
];

/// The quota of an account without limits: every limit null.
pub fn no_limits() -> Value {
    json!({ "sandboxes": null, "cpuCores": null, "memoryGB": null, "diskGB": null,
            "snapshots": null, "snapshotGB": null, "uploads": null, "uploadGB": null,
            "volumes": null, "volumeGB": null })
}
