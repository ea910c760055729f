//! Account quotas as an administrator sets them and an account reads its
//! own: the limits, and what the account uses of them (its sandboxes from
//! the records, what it keeps in the object store, its shared volumes).

use stockade_core::{Account, AccountId, Quota, QuotaUsage, SharedVolumeUsage, StoredUsage};

use crate::content::sources::stored_usage;
use crate::credentials::account_not_found;
use crate::error::{ServiceError, ServiceResult};
use crate::Service;

/// An account's quota and what it uses of it.
#[derive(Debug, Clone)]
pub struct QuotaReport {
    pub quota: Quota,
    pub usage: QuotaUsage,
    pub stored: StoredUsage,
    pub volumes: SharedVolumeUsage,
}

impl Service {
    /// The quota of `id` and what the account uses of it, for `caller`:
    /// an administrator, or the account itself.
    pub async fn quota_of(&self, caller: &Account, id: &AccountId) -> ServiceResult<QuotaReport> {
        if !caller.is_admin && caller.id != *id {
            return Err(ServiceError::Forbidden(
                "Only administrators see the quota of another account".into(),
            ));
        }
        self.quota_report(id).await
    }

    /// Replaces the quota of `id` (an administrator's call); returns the
    /// new quota and what the account uses of it.
    pub async fn set_quota(&self, id: &AccountId, quota: &Quota) -> ServiceResult<QuotaReport> {
        self.store
            .set_quota(id, quota)
            .await
            .map_err(account_not_found)?;
        self.quota_report(id).await
    }

    async fn quota_report(&self, id: &AccountId) -> ServiceResult<QuotaReport> {
        let quota = self.store.get_quota(id).await.map_err(account_not_found)?;
        let usage = self
            .store
            .account_usage(id, &[])
            .await
            .map_err(account_not_found)?;
        let stored = stored_usage(self, id).await?;
        let volumes = self.store.shared_volume_usage(id).await?;
        Ok(QuotaReport {
            quota,
            usage,
            stored,
            volumes,
        })
    }
}
