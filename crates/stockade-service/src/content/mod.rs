pub mod files;
pub mod images;
pub mod snapshots;
pub mod sources;
pub mod workspace_sync;
