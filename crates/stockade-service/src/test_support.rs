//! What the unit tests of several modules build their cases from.

use chrono::Utc;
use stockade_core::{AccountId, Defaults, InstanceId, Sandbox, SandboxId, SandboxSpec};
use stockade_runtime::ContainerSpec;

/// A plain container of `sb`'s, made by `instance`.
pub(crate) fn spec(sb: &Sandbox, instance: &InstanceId) -> ContainerSpec {
    ContainerSpec {
        sandbox_id: sb.id.clone(),
        account_id: sb.account_id.clone(),
        instance_id: instance.clone(),
        image: "busybox".into(),
        command: vec!["sleep".into()],
        env: Default::default(),
        cpu_cores: 1.0,
        memory_bytes: 1 << 30,
        network_access: true,
        hostname: "x".into(),
        agent_token: None,
        disk_bytes: None,
        mounts: Vec::new(),
        workspace_volume: true,
    }
}

/// A new record of the default settings on the host `local`; `adjust`
/// changes its spec first.
pub(crate) fn sandbox(adjust: impl FnOnce(&mut SandboxSpec)) -> Sandbox {
    let id = SandboxId::generate();
    let mut spec = SandboxSpec::from_input(Default::default(), &id, &Defaults::default()).unwrap();
    adjust(&mut spec);
    Sandbox::new(
        id,
        AccountId::generate(),
        None,
        spec,
        "local".into(),
        Utc::now(),
    )
}
