pub mod database;
pub mod metrics;
pub mod usage;
