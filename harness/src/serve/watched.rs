//! WATCH across connections: which connection watches which keys, and which of them a write
//! made fail its next EXEC (Redis 7.0's `multi.c`: `watchForKey`, `touchWatchedKey`,
//! `isWatchedKeyExpired`).
//!
//! The keyspace records writes to watched keys ([`Harness::take_touched`]); after every
//! command, with the harness still held, the server hands them to [`Watches::touched`].

use std::collections::{HashMap, HashSet};

use crate::harness::Harness;

/// The keys one connection watches.
#[derive(Debug, Default)]
struct Watcher {
    /// Each key with whether it was already expired (not yet deleted) when watched: such a
    /// key deleted afterwards is no change; written, it is.
    keys: HashMap<Vec<u8>, bool>,
    /// A watched key was written: the next EXEC answers a nil array.
    dirty: bool,
}

/// Every connection's watched keys.
#[derive(Debug, Default)]
pub(super) struct Watches {
    clients: HashMap<u64, Watcher>,
    by_key: HashMap<Vec<u8>, HashSet<u64>>,
    /// The keys changed since the keyspace was last told.
    changed: bool,
}

impl Watches {
    /// Tells the keyspace which keys to record writes of, if that changed.
    pub(super) fn sync(&mut self, h: &mut Harness) {
        if self.changed {
            self.changed = false;
            h.set_watched(self.by_key.keys().cloned().collect());
        }
    }

    /// WATCH `keys` for `client` (the harness held, for their expiry now).
    pub(super) fn watch(&mut self, h: &mut Harness, client: u64, keys: &[Vec<u8>]) {
        let w = self.clients.entry(client).or_default();
        // A connection already failed has nothing more to watch (as Redis).
        if w.dirty {
            return;
        }
        for key in keys {
            if w.keys.contains_key(key) {
                continue;
            }
            w.keys.insert(key.clone(), h.is_stale(key));
            self.by_key.entry(key.clone()).or_default().insert(client);
            self.changed = true;
        }
        self.sync(h);
    }

    /// Forgets what `client` watches (UNWATCH, DISCARD, EXEC, RESET, a closed connection).
    pub(super) fn unwatch(&mut self, client: u64) {
        let Some(w) = self.clients.remove(&client) else {
            return;
        };
        for key in w.keys.into_keys() {
            if let Some(set) = self.by_key.get_mut(&key) {
                set.remove(&client);
                if set.is_empty() {
                    self.by_key.remove(&key);
                    self.changed = true;
                }
            }
        }
    }

    /// Marks the watchers of the keys the last command wrote.
    pub(super) fn touched(&mut self, h: &mut Harness) {
        if self.by_key.is_empty() && !self.changed {
            return;
        }
        for (key, present) in h.take_touched() {
            let Some(watchers) = self.by_key.get(&key) else {
                continue;
            };
            for id in watchers {
                let Some(w) = self.clients.get_mut(id) else {
                    continue;
                };
                match w.keys.get_mut(&key) {
                    // Already expired when watched and now deleted: logically no change.
                    Some(stale) if *stale && !present => *stale = false,
                    _ => w.dirty = true,
                }
            }
        }
        self.sync(h);
    }

    /// At EXEC: whether `client`'s transaction may run (no watched key written, none expired
    /// since it was watched); its watches end either way.
    pub(super) fn exec_allowed(&mut self, h: &mut Harness, client: u64) -> bool {
        self.touched(h);
        let allowed = self
            .clients
            .get(&client)
            .is_none_or(|w| !w.dirty && !w.keys.iter().any(|(k, &stale)| !stale && h.is_stale(k)));
        self.unwatch(client);
        self.sync(h);
        allowed
    }

    /// Whether `client` watches anything.
    pub(super) fn watching(&self, client: u64) -> bool {
        self.clients.contains_key(&client)
    }
}
