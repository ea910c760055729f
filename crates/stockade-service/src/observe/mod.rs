pub mod metrics;
pub mod usage;
