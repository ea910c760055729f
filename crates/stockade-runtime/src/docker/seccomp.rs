//! The seccomp profile of sandboxes: Docker's default minus
//! io_uring. Docker 20.10's default profile allows `io_uring_setup`,
//! `io_uring_enter` and `io_uring_register`, a large kernel attack surface;
//! Docker 25 and later block them in their own default, which is then kept.
//!
//! The profile is generated from Docker's own default (moby's
//! `profiles/seccomp/default.json`, Apache-2.0, of the engine version in
//! use) by `scripts/gen-seccomp-profile`, and embedded here;
//! `tests/seccomp.rs` checks it still equals that default minus io_uring.
//!
//! gVisor (`runsc`) applies a profile's rules but not their `errnoRet`
//! (google/gvisor#14688): every denied call fails with EPERM. Docker's
//! default denies `clone3` with ENOSYS so that glibc 2.34 and later fall
//! back to `clone`; with EPERM instead, every `posix_spawn` and
//! `pthread_create` of a glibc program fails (the agent, any threaded
//! program of a Debian image). Sandboxes under runsc therefore get the
//! profile with `clone3` let through to gVisor's own kernel, which has no
//! `clone3` and answers ENOSYS itself (and would check capabilities inside
//! the sandbox if it had one); everything else is the same profile, also on
//! engines from 25 on, whose own default runsc would break the same way.

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

/// [`SECCOMP_PROFILE`] for sandboxes under gVisor, on one line: the rules
/// that deny `clone3` with an errno of their own (which runsc would turn
/// into EPERM) allow it instead.
fn gvisor_profile() -> &'static str {
    static GVISOR: OnceLock<String> = OnceLock::new();
    GVISOR.get_or_init(|| match serde_json::from_str(SECCOMP_PROFILE) {
        Ok(mut v) => {
            let _ = let_clone3_through(&mut v);
            v.to_string()
        }
        Err(_) => SECCOMP_PROFILE.to_owned(),
    })
}

/// Turns every `SCMP_ACT_ERRNO` rule with an `errnoRet` for `clone3`
/// alone into an `SCMP_ACT_ALLOW` rule; returns how many it changed.
fn let_clone3_through(profile: &mut serde_json::Value) -> usize {
    let mut changed = 0;
    if let Some(rules) = profile["syscalls"].as_array_mut() {
        for rule in rules {
            let only_clone3 = rule["names"]
                .as_array()
                .is_some_and(|n| n.len() == 1 && n[0] == "clone3");
            if only_clone3 && rule["action"] == "SCMP_ACT_ERRNO" && rule.get("errnoRet").is_some() {
                rule["action"] = "SCMP_ACT_ALLOW".into();
                if let Some(o) = rule.as_object_mut() {
                    o.remove("errnoRet");
                }
                changed += 1;
            }
        }
    }
    changed
}

/// Whether `runtime` (an OCI runtime's name as registered with Docker) is
/// gVisor's.
fn is_gvisor(runtime: &str) -> bool {
    runtime.starts_with("runsc")
}

impl DockerRuntime {
    /// The `seccomp=…` security option for a new sandbox: the embedded
    /// profile, unless the engine is known to be Docker 25 or later (whose
    /// default already blocks io_uring and knows newer system calls); under
    /// gVisor always the embedded profile with `clone3` let through (see
    /// the module's notes).
    pub(super) fn seccomp_option(&self) -> Option<String> {
        if self.config.oci_runtime.as_deref().is_some_and(is_gvisor) {
            return Some(format!("seccomp={}", gvisor_profile()));
        }
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
    fn under_gvisor_clone3_reaches_gvisor() {
        let plain: serde_json::Value = serde_json::from_str(SECCOMP_PROFILE).unwrap();
        let gvisor: serde_json::Value = serde_json::from_str(gvisor_profile()).unwrap();
        // The x86 rule (ENOSYS) and the MIPS one.
        let mut copy = plain.clone();
        assert_eq!(let_clone3_through(&mut copy), 2);
        assert_eq!(copy, gvisor);
        let rules = |v: &serde_json::Value| v["syscalls"].as_array().unwrap().clone();
        let (p, g) = (rules(&plain), rules(&gvisor));
        assert_eq!(p.len(), g.len());
        let differing: Vec<_> = p.iter().zip(&g).filter(|(a, b)| a != b).collect();
        assert_eq!(differing.len(), 2);
        for (before, after) in differing {
            assert_eq!(before["names"], serde_json::json!(["clone3"]));
            assert_eq!(before["action"], "SCMP_ACT_ERRNO");
            assert_eq!(after["action"], "SCMP_ACT_ALLOW");
            assert_eq!(before["excludes"], after["excludes"]);
        }
        for name in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
            assert!(!gvisor_profile().contains(name), "{name} is allowed");
        }

        for (runtime, engine, gvisor_profile_given) in [
            (Some("runsc"), "20.10.24", true),
            (Some("runsc-debug"), "28.0.0", true),
            (Some("runc"), "20.10.24", false),
            (None, "20.10.24", false),
        ] {
            let rt = DockerRuntime::new(crate::DockerConfig {
                host: Some("unix:///tmp/nonexistent-stockade-seccomp.sock".into()),
                oci_runtime: runtime.map(str::to_owned),
                ..Default::default()
            })
            .unwrap();
            rt.engine_facts().version = Some(engine.to_owned());
            let option = rt.seccomp_option().unwrap();
            assert_eq!(
                option == format!("seccomp={}", super::gvisor_profile()),
                gvisor_profile_given,
                "{runtime:?}"
            );
        }
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
