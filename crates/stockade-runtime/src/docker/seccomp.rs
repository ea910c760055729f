//! The seccomp profile of sandboxes (SEC-9): Docker's default minus
//! io_uring. Docker 20.10's default profile allows `io_uring_setup`,
//! `io_uring_enter` and `io_uring_register`, a large kernel attack surface;
//! Docker 25 and later block them in their own default, which is then kept.
//!
//! The profile is generated from Docker's own default (moby's
//! `profiles/seccomp/default.json`, Apache-2.0, of the engine version in
//! use) by `scripts/gen-seccomp-profile`, and embedded here;
//! `tests/seccomp.rs` checks it still equals that default minus io_uring.

use std::sync::OnceLock;

use super::DockerRuntime;

/// Docker's default seccomp profile minus io_uring, as generated.
pub const SECCOMP_PROFILE: &str = include_str!("seccomp-default-no-io-uring.json");

/// The first Docker version whose default profile blocks io_uring.
const FIRST_VERSION_BLOCKING_IO_URING: u32 = 25;

/// [`SECCOMP_PROFILE`] on one line, as the engine takes it in a
/// `seccomp=` security option.
fn compact_profile() -> &'static str {
    static COMPACT: OnceLock<String> = OnceLock::new();
    COMPACT.get_or_init(|| {
        serde_json::from_str::<serde_json::Value>(SECCOMP_PROFILE)
            .map(|v| v.to_string())
            // The embedded profile is checked by the unit test below; a
            // broken one is never shipped, and whitespace is harmless.
            .unwrap_or_else(|_| SECCOMP_PROFILE.to_owned())
    })
}

impl DockerRuntime {
    /// The `seccomp=…` security option for a new sandbox: the embedded
    /// profile, unless the engine is known to be Docker 25 or later (whose
    /// default already blocks io_uring and knows newer system calls).
    pub(super) fn seccomp_option(&self) -> Option<String> {
        match self.engine_major_version() {
            Some(major) if major >= FIRST_VERSION_BLOCKING_IO_URING => None,
            _ => Some(format!("seccomp={}", compact_profile())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_profile_is_valid_and_blocks_io_uring() {
        let v: serde_json::Value = serde_json::from_str(SECCOMP_PROFILE).unwrap();
        assert_eq!(v["defaultAction"], "SCMP_ACT_ERRNO");
        assert!(v["syscalls"].as_array().unwrap().len() > 10);
        for name in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
            assert!(!SECCOMP_PROFILE.contains(name), "{name} is allowed");
        }
        assert!(SECCOMP_PROFILE.contains("\"openat\""));
        assert!(!compact_profile().contains('\n'));
    }

    #[test]
    fn the_profile_is_passed_to_engines_before_25_only() {
        let rt = DockerRuntime::new(crate::DockerConfig {
            host: Some("unix:///tmp/nonexistent-stockade-seccomp.sock".into()),
            ..Default::default()
        })
        .unwrap();
        // Not known yet (no answer from the engine): the profile, to be safe.
        let unknown = rt.seccomp_option().unwrap();
        assert!(unknown.starts_with("seccomp={"), "{unknown}");
        for (version, passed) in [
            ("20.10.24+dfsg1", true),
            ("24.0.7", true),
            ("25.0.0", false),
            ("28.1.1", false),
        ] {
            rt.engine_facts().version = Some(version.to_owned());
            assert_eq!(rt.seccomp_option().is_some(), passed, "{version}");
        }
    }
}
