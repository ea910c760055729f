pub mod files;
pub mod images;
pub mod shared_volumes;
pub mod snapshots;
pub mod sources;
pub mod templates;
pub mod workspace_sync;
