//! The in-process resource that `--fencing` holders write to: per key (and, for a semaphore,
//! per permit slot) it keeps the highest fencing token it has accepted and refuses accesses
//! carrying an older one, the check of `UPDATE ... SET fence = $token WHERE id = $id AND fence
//! <= $token` (a holder may write several times with its own token).
//!
//! What is fenced where, one rule per primitive:
//! - a mutex: one counter per key; every access is a write.
//! - a semaphore: N holders at once can not share one counter (the newest token would refuse
//!   the other live holders), so a fenced permit is one of N numbered slots, each with its own
//!   counter (`semaphore_acquire.lua`), and the resource keeps the highest token *per (key,
//!   slot)*: the paused holder of slot i is refused once slot i's next holder wrote.
//! - a read-write lock: readers and writers draw from one counter per key. A reader's access is
//!   a read: it is refused when a newer writer has written, and it raises the bar of later
//!   writes, so a writer paused past its lease is refused once anyone newer came in.
//!
//! It also counts the accesses it should never have accepted: an access is *unsafe* when a
//! holder it must not overlap (any newer holder, for a write; a newer writer, for a read) had
//! already entered its critical section at that place, yet the access landed. Every holder
//! presents its token on entering (its first access) and again when it finishes its work, so
//! with the check on, an accepted access always carries a token no such holder outdates:
//! `unsafe_writes` stays 0, and `refused` counts the stale accesses the check stopped. With
//! `--fencing`, these are the run's `safety.violations`: only what the resource accepted counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use lockkit_report::bench::FencingReport;

/// Shards of the key space (one mutex each).
const SHARDS: usize = 64;

#[derive(Debug, Default, Clone, Copy)]
struct FenceState {
    /// The highest token of any access accepted.
    highest: u64,
    /// The highest token of a write accepted.
    highest_write: u64,
    /// The highest token of any holder that has entered.
    newest_entered: u64,
    /// The highest token of a writer that has entered.
    newest_writer_entered: u64,
}

/// Where and how a holder accesses the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The key's number.
    pub key: u64,
    /// A fenced semaphore permit's slot (1 to the permits); 0 for the other primitives.
    pub slot: u32,
    /// The holder's fencing token.
    pub token: u64,
    /// A write (a mutex's holder, a semaphore's, a read-write lock's writer) or a read.
    pub write: bool,
}

impl Access {
    /// A write of a mutex's holder.
    pub fn write(key: u64, token: u64) -> Access {
        Access {
            key,
            slot: 0,
            token,
            write: true,
        }
    }
}

/// The fenced resource shared by every holder of the run.
#[derive(Debug)]
pub struct FencedResource {
    shards: Vec<Mutex<HashMap<(u64, u32), FenceState>>>,
    writes: AtomicU64,
    reads: AtomicU64,
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
            reads: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            unsafe_writes: AtomicU64::new(0),
            checked: true,
        }
    }
}

impl FencedResource {
    /// A mutex's holder with `token` enters its critical section on `key` and writes: `false`
    /// when refused (its lock is already stale; it should stop).
    pub fn enter(&self, key: u64, token: u64) -> bool {
        self.present(Access::write(key, token), true)
    }

    /// A write by the mutex's holder of `token` on `key`: `false` when refused.
    pub fn write(&self, key: u64, token: u64) -> bool {
        self.present(Access::write(key, token), false)
    }

    /// An access, `entering` the holder's critical section or later in it: `false` when
    /// refused.
    pub fn present(&self, a: Access, entering: bool) -> bool {
        let mut shard = self.shards[(a.key % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let st = shard.entry((a.key, a.slot)).or_default();
        if entering {
            st.newest_entered = st.newest_entered.max(a.token);
            if a.write {
                st.newest_writer_entered = st.newest_writer_entered.max(a.token);
            }
        }
        let (count, bar, outdated_by) = if a.write {
            (&self.writes, st.highest, st.newest_entered)
        } else {
            (&self.reads, st.highest_write, st.newest_writer_entered)
        };
        count.fetch_add(1, Ordering::Relaxed);
        if self.checked && a.token < bar {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        st.highest = st.highest.max(a.token);
        if a.write {
            st.highest_write = st.highest_write.max(a.token);
        }
        if a.token < outdated_by {
            self.unsafe_writes.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Accepted accesses that a newer holder's entry outdated: the run's violations with
    /// `--fencing`.
    pub fn unsafe_writes(&self) -> u64 {
        self.unsafe_writes.load(Ordering::Relaxed)
    }

    /// The counts so far (`lease_overlaps` is the checker's, filled in by the run).
    pub fn report(&self) -> FencingReport {
        FencingReport {
            writes: self.writes.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            unsafe_writes: self.unsafe_writes(),
            lease_overlaps: 0,
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
                ..FencingReport::default()
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

    fn rw(key: u64, token: u64, write: bool) -> Access {
        Access {
            key,
            slot: 0,
            token,
            write,
        }
    }

    #[test]
    fn each_semaphore_slot_is_fenced_on_its_own() {
        let r = FencedResource::default();
        let permit = |slot, token| Access {
            key: 3,
            slot,
            token,
            write: true,
        };
        // Slots 1 and 2 hold at once, each with its slot's first token.
        assert!(r.present(permit(1, 1), true));
        assert!(r.present(permit(2, 1), true));
        // Slot 1's holder pauses; slot 1's next holder (token 2) enters.
        assert!(r.present(permit(1, 2), true));
        assert!(r.present(permit(2, 1), false), "slot 2's holder goes on");
        assert!(
            !r.present(permit(1, 1), false),
            "slot 1's stale holder is refused"
        );
        assert_eq!((r.report().refused, r.report().unsafe_writes), (1, 0));
    }

    #[test]
    fn a_read_write_lock_refuses_a_stale_writer_after_a_reader_and_a_stale_reader_after_a_writer() {
        let r = FencedResource::default();
        // Writer 1 enters and pauses; readers 2 and 3 come in after its lease ended.
        assert!(r.present(rw(0, 1, true), true));
        assert!(r.present(rw(0, 2, false), true));
        assert!(r.present(rw(0, 3, false), true));
        assert!(r.present(rw(0, 2, false), false), "readers share");
        assert!(
            !r.present(rw(0, 1, true), false),
            "the paused writer is refused"
        );
        // Reader 3 pauses; writer 4 comes in and writes; reader 3's late read is refused.
        assert!(r.present(rw(0, 4, true), true));
        assert!(!r.present(rw(0, 3, false), false));
        let rep = r.report();
        assert_eq!((rep.writes, rep.reads), (3, 4));
        assert_eq!((rep.refused, rep.unsafe_writes), (2, 0));
    }

    #[test]
    fn without_the_check_a_read_write_lock_counts_the_unsafe_accesses() {
        let r = FencedResource {
            checked: false,
            ..FencedResource::default()
        };
        assert!(r.present(rw(0, 1, true), true));
        assert!(r.present(rw(0, 2, false), true));
        assert!(
            r.present(rw(0, 1, true), false),
            "a write beside a newer reader"
        );
        assert!(r.present(rw(0, 3, true), true));
        assert!(
            r.present(rw(0, 2, false), false),
            "a read beside a newer writer"
        );
        assert!(r.present(rw(0, 3, true), false));
        assert_eq!(r.report().unsafe_writes, 2);
    }
}
