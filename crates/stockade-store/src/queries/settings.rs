//! The database itself and installation settings: [`HealthStore`] and
//! [`SettingsStore`].

use async_trait::async_trait;
use chrono::Utc;
use stockade_core::InstanceId;

use crate::db::{other, SqlStore};
use crate::sql::{Backend, Q};
use crate::{HealthStore, SettingsStore, StoreHealth, StoreResult};

/// The settings row [`HealthStore::probe_write`] rewrites.
const PROBE_KEY: &str = "health_probe";

#[async_trait]
impl<B: Backend> HealthStore for SqlStore<B> {
    fn backend(&self) -> &'static str {
        B::BACKEND
    }

    async fn ping(&self) -> StoreResult<()> {
        self.fetch_optional(Q::new("SELECT 1"), "ping the database")
            .await
            .map(drop)
    }

    fn health(&self) -> StoreHealth {
        self.health_now()
    }

    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn probe_write(&self) -> StoreResult<()> {
        // A new value every time, so that the write really reaches the disk,
        // and as large as a sandbox's record with its operation: a database
        // with room for a few bytes only (a full disk whose write-ahead log
        // has a little space to reuse) is no more writable than one without.
        let now = Utc::now().to_rfc3339();
        let q = Q::<B>::new("INSERT INTO settings (key, value) VALUES (")
            .bind(PROBE_KEY.to_owned())
            .next(format!("{now} {}", "-".repeat(PROBE_BYTES)))
            .sql(") ON CONFLICT (key) DO UPDATE SET value = excluded.value");
        self.execute(q, "write the health probe").await?;
        // Small again, so that the probe takes no room between probes.
        let q = Q::<B>::new("UPDATE settings SET value = ")
            .bind(now)
            .sql(" WHERE key = ")
            .bind(PROBE_KEY.to_owned());
        self.execute(q, "write the health probe").await.map(drop)
    }
}

/// The size of the health probe's write: a sandbox record with a large
/// environment and its operation take this much.
const PROBE_BYTES: usize = 64 * 1024;

#[async_trait]
impl<B: Backend> SettingsStore for SqlStore<B> {
    #[tracing::instrument(skip_all, err(level = "debug"))]
    async fn instance_id(&self) -> StoreResult<InstanceId> {
        let value = self
            .setting_get_or_insert("instance_id", InstanceId::generate().as_str())
            .await?;
        InstanceId::parse(&value).map_err(|e| other("corrupt instance id in settings", e.message))
    }

    #[tracing::instrument(skip_all, fields(setting.key = %key), err(level = "debug"))]
    async fn setting_get_or_insert(&self, key: &str, value: &str) -> StoreResult<String> {
        let read = || Q::<B>::new("SELECT value FROM settings WHERE key = ").bind(key.to_owned());
        if let Some(row) = self.fetch_optional(read(), "read setting").await? {
            return row.get("value");
        }
        // One INSERT wins; everyone reads the value it left.
        let insert = Q::<B>::new("INSERT INTO settings (key, value) VALUES (")
            .bind(key.to_owned())
            .next(value.to_owned())
            .sql(") ON CONFLICT (key) DO NOTHING");
        self.execute(insert, "write setting").await?;
        match self.fetch_optional(read(), "read setting").await? {
            Some(row) => row.get("value"),
            None => Err(other("read setting", format_args!("'{key}' vanished"))),
        }
    }
}
