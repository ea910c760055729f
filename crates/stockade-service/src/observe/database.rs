//! The database as `/health` reports it: which backend, whether its last
//! write failed, and a check that it answers (and takes writes again).

use stockade_store::StoreError;

use crate::Service;

impl Service {
    /// The database backend's name (`sqlite`, `postgres`).
    pub fn database_backend(&self) -> &'static str {
        self.store.backend()
    }

    /// Whether the database's last write failed: it is degraded until a
    /// write succeeds again.
    pub fn database_degraded(&self) -> bool {
        !self.store.health().is_ok()
    }

    /// Checks that the database answers and, when it is degraded, whether
    /// a tiny write succeeds now.
    pub async fn check_database(&self) -> Result<(), StoreError> {
        self.store.ping().await?;
        if self.database_degraded() {
            self.store.probe_write().await?;
        }
        Ok(())
    }
}
