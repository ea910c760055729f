//! Caps on simultaneous connections: overall and per client address, so one
//! sandbox cannot use up the proxy (or the DNS forwarder's TCP side) for
//! the others.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// Counts open connections against the two caps.
#[derive(Debug)]
pub(crate) struct ConnectionLimits {
    max_total: usize,
    max_per_client: usize,
    state: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: Arc<ConnectionLimits>,
    client: IpAddr,
}

impl ConnectionLimits {
    /// Accepts connections on `listener` forever and spawns `serve` for each
    /// one admitted; one over a cap is closed. `what` names the server in
    /// the log.
    pub(crate) async fn accept_loop<F, Fut>(
        self: Arc<Self>,
        listener: TcpListener,
        what: &'static str,
        serve: F,
    ) where
        F: Fn(TcpStream, IpAddr, Admission) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        loop {
            match listener.accept().await {
                Ok((conn, peer)) => {
                    let client = peer.ip().to_canonical();
                    match self.admit(client) {
                        Some(admission) => {
                            tokio::spawn(serve(conn, client, admission));
                        }
                        None => tracing::debug!(%client, "{what}: connection cap reached, closing"),
                    }
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait, go on.
                    tracing::warn!(error = %e, "{what}: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    pub(crate) fn new(max_total: usize, max_per_client: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_client,
            state: Mutex::default(),
        })
    }

    /// A place for one more connection from `client`, or `None` when a cap
    /// is reached.
    pub(crate) fn admit(self: &Arc<Self>, client: IpAddr) -> Option<Admission> {
        let mut state = self.lock();
        let mine = state.per_client.get(&client).copied().unwrap_or(0);
        if state.total >= self.max_total || mine >= self.max_per_client {
            return None;
        }
        state.total += 1;
        state.per_client.insert(client, mine + 1);
        Some(Admission {
            limits: Arc::clone(self),
            client,
        })
    }

    /// Connections open now (overall, and from `client`).
    #[cfg(test)]
    pub(crate) fn open(&self, client: IpAddr) -> (usize, usize) {
        let state = self.lock();
        let mine = state.per_client.get(&client).copied().unwrap_or(0);
        (state.total, mine)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut state = self.limits.lock();
        state.total -= 1;
        if let Some(n) = state.per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                state.per_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_and_places_come_back() {
        let limits = ConnectionLimits::new(3, 2);
        let a: IpAddr = "172.30.0.2".parse().unwrap();
        let b: IpAddr = "172.30.0.3".parse().unwrap();
        let a1 = limits.admit(a).unwrap();
        let _a2 = limits.admit(a).unwrap();
        assert!(limits.admit(a).is_none(), "per-client cap");
        let _b1 = limits.admit(b).unwrap();
        assert!(limits.admit(b).is_none(), "overall cap");
        assert_eq!(limits.open(a), (3, 2));
        drop(a1);
        assert_eq!(limits.open(a), (2, 1));
        let _b2 = limits.admit(b).unwrap();
        assert_eq!(limits.open(b), (3, 2));
    }
}
