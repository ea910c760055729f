//! Docker hosts and placement (SCALE-4, SCALE-5): [`HostStore`].
//! PLACEHOLDER: to be implemented.

use std::collections::HashMap;

use async_trait::async_trait;
use stockade_core::{Host, HostHealth, Operation, Sandbox};

use crate::db::SqlStore;
use crate::sql::Backend;
use crate::{HostStore, Placed, PlacementCandidate, StoreError, StoreResult};

fn todo<T>() -> StoreResult<T> {
    Err(StoreError::Other("hosts: not implemented".into()))
}

#[async_trait]
impl<B: Backend> HostStore for SqlStore<B> {
    async fn insert_host(&self, _host: &Host) -> StoreResult<()> {
        todo()
    }
    async fn ensure_host(&self, _host: &Host) -> StoreResult<Host> {
        todo()
    }
    async fn list_hosts(&self) -> StoreResult<Vec<Host>> {
        todo()
    }
    async fn get_host(&self, _name: &str) -> StoreResult<Host> {
        todo()
    }
    async fn update_host(&self, _host: &Host) -> StoreResult<()> {
        todo()
    }
    async fn record_host_health(&self, _name: &str, _health: &HostHealth) -> StoreResult<()> {
        todo()
    }
    async fn delete_host(&self, _name: &str) -> StoreResult<()> {
        todo()
    }
    async fn sandboxes_per_server(&self) -> StoreResult<HashMap<String, u64>> {
        todo()
    }
    async fn insert_sandbox_placed(
        &self,
        _sb: &mut Sandbox,
        _op: Option<&Operation>,
        _candidates: &[PlacementCandidate],
    ) -> StoreResult<Placed> {
        todo()
    }
}
