//! Updates of a fake sandbox: the new limits and environment are
//! recorded in its spec, where tests read them.

use std::collections::BTreeMap;

use async_trait::async_trait;
use stockade_core::SandboxId;

use super::{not_found, FakeRuntime};
use crate::{RuntimeResult, Update};

#[async_trait]
impl Update for FakeRuntime {
    /// Records the limits in the container's spec (as Docker keeps them).
    async fn update_resources(
        &self,
        id: &SandboxId,
        cpu_cores: f64,
        memory_bytes: i64,
    ) -> RuntimeResult<()> {
        self.check_available()?;
        let mut st = self.state();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found(id))?;
        c.spec.cpu_cores = cpu_cores;
        c.spec.memory_bytes = memory_bytes;
        Ok(())
    }

    /// Records `env` as the container's environment (what the main process
    /// would see from its next start).
    async fn set_main_process_env(
        &self,
        id: &SandboxId,
        env: &BTreeMap<String, String>,
    ) -> RuntimeResult<()> {
        self.check_available()?;
        let mut st = self.state();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found(id))?;
        c.spec.env = env.clone();
        Ok(())
    }
}
