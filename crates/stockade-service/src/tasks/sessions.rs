//! Session timeouts: ended sessions looked for every
//! `session_check_interval` and each ended in a task of its own.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::every::Every;
use crate::Service;

/// Every `config.session_check_interval` (the first time at once) until
/// `shutdown`, claims the ended sessions and ends each in a task of its own,
/// so that a stop waiting out its grace period never delays the next tick.
pub async fn run_periodically(svc: Service, shutdown: CancellationToken) {
    let period = svc
        .config
        .session_check_interval
        .max(Duration::from_millis(50));
    let mut every = Every::new(period, shutdown);
    while every.next().await {
        for sb in crate::sandbox::sessions::claim_due(&svc).await {
            let svc = svc.clone();
            tokio::spawn(async move { crate::sandbox::sessions::expire_logged(&svc, sb).await });
        }
    }
}
