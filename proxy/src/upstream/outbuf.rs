//! The replies a sharing client has been handed and not yet written to its socket: its output
//! buffer, as Redis's `client-output-buffer-limit` counts one.
//!
//! A shared connection's replies arrive in the order the server ran the commands, so a client
//! that does not read cannot be skipped: its replies have to be read (and held) before those
//! of the clients behind it. The proxy bounds what it holds for one client in bytes, not only
//! in commands: past [`PAUSE_AT`] (or the output buffer limit, if lower) the shared connection
//! stops reading from the server until the client drains (the server holds the rest, as it
//! would for that client without the proxy), and the client sends no more commands. A client
//! that takes none of its replies for the operation timeout while the shared connection waits
//! for it is closed, so the others go on; so is one whose replies held pass the output buffer
//! limit (`--client-output-buffer-limit`), each with a line on stderr.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::Notify;

use crate::upstream::link::{Delivery, DeliveryTx};

/// Replies held for one client past which its shared connection stops reading from the server.
pub(crate) const PAUSE_AT: usize = 32 << 20;

/// One sharing client's output buffer.
#[derive(Debug)]
pub(crate) struct OutBuf {
    /// The client's number, for the log line.
    id: u64,
    /// `--client-output-buffer-limit` (`None`: no limit, Redis's default for normal clients).
    limit: Option<usize>,
    /// Bytes handed to the client and not yet written.
    held: AtomicUsize,
    /// The client is being closed: nothing more is held for it.
    killed: AtomicBool,
    /// The client wrote some of what it was handed.
    drained: Notify,
    /// The client is to close.
    kill: Notify,
    /// Every client's buffers together (`--maxmemory-clients`).
    all: Arc<ClientsMemory>,
    /// The client's deliveries: [`Delivery::Closed`] wakes it when it is closed.
    wake: DeliveryTx,
}

impl OutBuf {
    /// An empty output buffer for client `id`, counted in `all`; `wake` is where its
    /// deliveries go.
    pub(crate) fn new(
        id: u64,
        limit: Option<usize>,
        all: &Arc<ClientsMemory>,
        wake: DeliveryTx,
    ) -> Arc<OutBuf> {
        let out = Arc::new(OutBuf {
            id,
            limit,
            held: AtomicUsize::new(0),
            killed: AtomicBool::new(false),
            drained: Notify::new(),
            kill: Notify::new(),
            all: all.clone(),
            wake,
        });
        all.register(&out);
        out
    }

    /// Bytes held past which the shared connection waits for the client.
    pub(crate) fn pause_at(&self) -> usize {
        self.limit.map_or(PAUSE_AT, |l| l.min(PAUSE_AT))
    }

    /// Bytes handed to the client and not yet written.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Whether the shared connection waits for the client to drain.
    pub(crate) fn full(&self) -> bool {
        self.held() > self.pause_at()
    }

    /// `n` more bytes handed to the client; `false` when it is being closed (they are dropped).
    /// Past the output buffer limit, or when every client's buffers together pass
    /// `--maxmemory-clients`, a client is closed.
    pub(crate) fn add(&self, n: usize) -> bool {
        if self.is_killed() {
            return false;
        }
        let held = self.held.fetch_add(n, Ordering::Relaxed) + n;
        self.all.total.fetch_add(n, Ordering::Relaxed);
        if let Some(limit) = self.limit.filter(|&l| held > l) {
            self.kill(&format!(
                "{held} bytes of replies held for it, over the output buffer limit of {limit}"
            ));
        }
        self.all.check();
        true
    }

    /// `n` bytes handed to the client were written.
    pub(crate) fn sub(&self, n: usize) {
        let before = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                Some(h.saturating_sub(n))
            })
            .unwrap_or(0);
        let n = n.min(before);
        self.all.total.fetch_sub(n, Ordering::Relaxed);
        self.drained.notify_one();
    }

    /// Waits until the client wrote some of what it was handed (or is closed).
    pub(crate) async fn drained(&self) {
        if !self.is_killed() {
            self.drained.notified().await;
        }
    }

    /// Whether the client is being closed.
    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Closes the client (once), saying why on stderr; what it holds is no longer counted.
    pub(crate) fn kill(&self, why: &str) {
        if self.killed.swap(true, Ordering::Relaxed) {
            return;
        }
        let held = self.held.swap(0, Ordering::Relaxed);
        self.all.total.fetch_sub(held, Ordering::Relaxed);
        eprintln!("lockkit proxy: client {} closed: {why}", self.id);
        crate::metrics::client_closed_for_memory();
        self.kill.notify_one();
        self.drained.notify_one();
        let _ = self.wake.send(Delivery::Closed);
    }

    /// Resolves once the client is to close (while it writes a reply).
    pub(crate) async fn killed(&self) {
        loop {
            if self.is_killed() {
                return;
            }
            self.kill.notified().await;
        }
    }
}

impl Drop for OutBuf {
    fn drop(&mut self) {
        let held = *self.held.get_mut();
        self.all.total.fetch_sub(held, Ordering::Relaxed);
    }
}

/// Every sharing client's output buffer: their sum, and Redis's `maxmemory-clients`.
#[derive(Debug, Default)]
pub(crate) struct ClientsMemory {
    /// `--maxmemory-clients` (`None`: no cap, Redis's default).
    limit: Option<usize>,
    /// Bytes held for all clients together.
    total: AtomicUsize,
    /// The clients, to find the one holding most (pruned as they go).
    clients: Mutex<Vec<Weak<OutBuf>>>,
}

impl ClientsMemory {
    /// Every client's buffers together may hold `limit` bytes (`None`: no cap).
    pub(crate) fn new(limit: Option<usize>) -> ClientsMemory {
        ClientsMemory {
            limit,
            ..ClientsMemory::default()
        }
    }

    /// Bytes held for all clients together.
    pub(crate) fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    fn register(&self, out: &Arc<OutBuf>) {
        if self.limit.is_none() {
            return;
        }
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if clients.len() >= 64 && clients.len().is_power_of_two() {
            clients.retain(|c| c.strong_count() > 0);
        }
        clients.push(Arc::downgrade(out));
    }

    /// Past the cap, the client holding most is closed (as Redis evicts clients under
    /// `maxmemory-clients`).
    fn check(&self) {
        let Some(limit) = self.limit else { return };
        let total = self.total();
        if total <= limit {
            return;
        }
        let biggest = {
            let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
            clients.retain(|c| c.strong_count() > 0);
            clients
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|c| !c.is_killed())
                .max_by_key(|c| c.held())
        };
        if let Some(c) = biggest {
            c.kill(&format!(
                "it held the most ({} bytes of replies) when all clients together held {total}, \
                 over --maxmemory-clients {limit}",
                c.held()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wake() -> DeliveryTx {
        tokio::sync::mpsc::unbounded_channel().0
    }

    #[test]
    fn the_limit_closes_and_the_pause_comes_first() {
        let all = Arc::new(ClientsMemory::new(None));
        let out = OutBuf::new(1, Some(1000), &all, wake());
        assert_eq!(out.pause_at(), 1000);
        assert!(out.add(600) && !out.full() && !out.is_killed());
        out.sub(600);
        assert_eq!((out.held(), all.total()), (0, 0));
        assert!(out.add(1001) && out.is_killed());
        assert!(!out.add(5), "nothing more is held for a closed client");
        assert_eq!(all.total(), 0);
        out.sub(1001);
        drop(out);
        assert_eq!(all.total(), 0);
    }

    #[test]
    fn over_the_cap_the_client_holding_most_is_closed() {
        let all = Arc::new(ClientsMemory::new(Some(10_000)));
        let small = OutBuf::new(1, None, &all, wake());
        let big = OutBuf::new(2, None, &all, wake());
        small.add(3000);
        big.add(6000);
        assert!(!small.is_killed() && !big.is_killed());
        small.add(2000);
        assert!(big.is_killed() && !small.is_killed());
    }
}
