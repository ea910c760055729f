pub mod admission;
pub mod host_admin;
pub mod hosts;
pub mod placement;
pub mod quotas;
