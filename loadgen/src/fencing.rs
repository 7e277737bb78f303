//! The in-process resource that `--fencing` holders write to: per key it keeps the highest
//! fencing token it has accepted and refuses writes carrying an older one, the check of
//! `UPDATE ... SET fence = $token WHERE id = $id AND fence <= $token` (a holder may write
//! several times with its own token).
//!
//! It also counts the writes it should never have accepted: a write is *unsafe* when a holder
//! with a newer token had already entered its critical section on that key (the writer's lock
//! was no longer the newest, yet its write landed). Every holder presents its token on entering
//! (its first write) and again when it finishes its work, so with the check on, an accepted
//! write always carries the newest token seen: `unsafe_writes` stays 0, and `refused` counts the
//! stale writes the check stopped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use lockkit_report::bench::FencingReport;

/// Shards of the key space (one mutex each).
const SHARDS: usize = 64;

#[derive(Debug, Default, Clone, Copy)]
struct FenceSlot {
    /// The highest token accepted.
    highest: u64,
    /// The highest token of any holder that has entered.
    newest_entered: u64,
}

/// The fenced resource shared by every holder of the run.
#[derive(Debug)]
pub struct FencedResource {
    shards: Vec<Mutex<HashMap<u64, FenceSlot>>>,
    writes: AtomicU64,
    refused: AtomicU64,
    unsafe_writes: AtomicU64,
    /// Refuse older tokens (always, outside this module's tests).
    checked: bool,
}

impl Default for FencedResource {
    fn default() -> Self {
        FencedResource {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            writes: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            unsafe_writes: AtomicU64::new(0),
            checked: true,
        }
    }
}

impl FencedResource {
    /// A holder with `token` enters its critical section on `key` and writes: `false` when
    /// refused (its lock is already stale; it should stop).
    pub fn enter(&self, key: u64, token: u64) -> bool {
        self.write_with(key, token, true)
    }

    /// A write by the holder of `token` on `key`: `false` when refused.
    pub fn write(&self, key: u64, token: u64) -> bool {
        self.write_with(key, token, false)
    }

    fn write_with(&self, key: u64, token: u64, entering: bool) -> bool {
        let mut shard = self.shards[(key % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let slot = shard.entry(key).or_default();
        if entering {
            slot.newest_entered = slot.newest_entered.max(token);
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        if self.checked && token < slot.highest {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        slot.highest = slot.highest.max(token);
        if token < slot.newest_entered {
            self.unsafe_writes.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// The counts so far.
    pub fn report(&self) -> FencingReport {
        FencingReport {
            writes: self.writes.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            unsafe_writes: self.unsafe_writes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paused_holder_writing_after_the_next_one_entered_is_refused() {
        let r = FencedResource::default();
        assert!(r.enter(1, 5));
        // Holder 5 pauses; its lock expires; holder 6 enters (and writes) meanwhile.
        assert!(r.enter(1, 6));
        assert!(!r.write(1, 5), "the stale write is refused");
        assert!(r.write(1, 6), "the holder's own second write is fine");
        // Other keys are independent.
        assert!(r.enter(2, 1));
        assert_eq!(
            r.report(),
            FencingReport {
                writes: 5,
                refused: 1,
                unsafe_writes: 0
            }
        );
    }

    #[test]
    fn without_the_check_the_same_stale_write_is_counted_unsafe() {
        let r = FencedResource {
            checked: false,
            ..FencedResource::default()
        };
        assert!(r.enter(1, 5));
        assert!(r.enter(1, 6));
        assert!(r.write(1, 5));
        assert_eq!(r.report().unsafe_writes, 1);
        assert_eq!(r.report().refused, 0);
    }

    #[test]
    fn tokens_that_go_back_are_refused_not_counted_unsafe() {
        // A server restarted without persistence starts its counter again from 1.
        let r = FencedResource::default();
        assert!(r.enter(7, 40));
        assert!(r.write(7, 40));
        assert!(!r.enter(7, 1));
        assert!(!r.write(7, 1));
        assert_eq!(r.report().refused, 2);
        assert_eq!(r.report().unsafe_writes, 0);
    }
}
