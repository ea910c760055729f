//! Every periodic loop of the service and nothing else. A task calls down
//! into the layers that do the work; nothing imports `tasks`.

pub mod collect;
pub mod disk_watch;
pub mod hosts;
pub mod leader;
pub mod reconcile;
pub mod recovery;
pub mod sessions;
pub mod webhooks;
