//! The clock of a periodic task: a tick every period until a token is
//! cancelled, a late tick delayed rather than bunched.

use std::time::Duration;

use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

pub(crate) struct Every {
    tick: Interval,
    stop: CancellationToken,
}

impl Every {
    /// Ticks every `period`, the first at once.
    pub(crate) fn new(period: Duration, stop: CancellationToken) -> Self {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { tick, stop }
    }

    /// Ticks every `period`, the first a period from now.
    pub(crate) async fn after_first(period: Duration, stop: CancellationToken) -> Self {
        let mut every = Self::new(period, stop);
        every.tick.tick().await;
        every
    }

    /// Waits for the next tick: `false` once the token is cancelled.
    pub(crate) async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.stop.cancelled() => false,
            _ = self.tick.tick() => true,
        }
    }
}
