//! The exact in-process mutual-exclusion checker, with each primitive's rule: a mutex admits
//! one holder per key, a semaphore `--permits`, a read-write lock many readers or one writer
//! ([`Rule`]). It also keeps the most holders of one key it saw at once (`safety.max_holders`).
//!
//! Every holder marks its key on entering the critical section (after the acquire returned) and
//! unmarks it on leaving (before the release is sent). A key already marked when a holder enters
//! means two holders are inside at once: a violation. Because the mark is removed before the
//! release can free the key in Redis and set only after Redis granted it, a correct lock never
//! trips it; a lock that expired under a slow holder always does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Who is inside each key of the shared key space, in as little memory as stays exact: the
/// counter a cycle touches belongs to a random key among many, and at four bytes a key (100k
/// keys: 400 KB) it was a cache miss, the most expensive instruction of the bench's own
/// bookkeeping.
#[derive(Debug)]
pub struct SafetyChecker {
    slots: Slots,
    violations: AtomicU64,
    max_holders: AtomicU64,
}

/// Who may be inside one key at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// One holder (a mutex).
    Exclusive,
    /// At most this many holders (a semaphore's permits).
    Permits(u32),
    /// Many readers or one writer (a read-write lock).
    ReadWrite,
}

/// A writer counts this much in a read-write lock's slot; readers count 1 each.
const WRITER: u32 = 1 << 16;

#[derive(Debug)]
enum Slots {
    /// One bit a key (100k keys: 12.5 KB), for holders that all run on one thread (the bench's
    /// single-threaded runtime, its default on two cores): the bit says someone is inside, and
    /// holders beyond the first (only ever there after a violation) are counted aside. Each
    /// `enter` and `leave` then runs whole before the next starts, so the count is exact.
    Bits {
        words: Vec<AtomicU64>,
        extra: Mutex<HashMap<u64, u32>>,
        any_extra: AtomicBool,
    },
    /// A byte a key: holders on several threads, at most 255 inside one key at once.
    Narrow(Vec<AtomicU8>),
    /// Four bytes a key: more holders than a byte counts.
    Wide(Vec<AtomicU32>),
    /// Four bytes a key for the shared primitives: holders (readers) in the low 16 bits,
    /// writers above them.
    Shared(Rule, Vec<AtomicU32>),
}

impl SafetyChecker {
    /// A checker for keys `0..keys` (unique keys need none: nobody else can hold them), where
    /// at most `max_holders` holders can be inside at once (the bench's clients times the locks
    /// each holds), all on one thread when `one_thread`.
    pub fn new(keys: u64, max_holders: u64, one_thread: bool) -> Self {
        let slots = if one_thread {
            Slots::Bits {
                words: (0..keys.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
                extra: Mutex::new(HashMap::new()),
                any_extra: AtomicBool::new(false),
            }
        } else if max_holders <= u64::from(u8::MAX) {
            Slots::Narrow((0..keys).map(|_| AtomicU8::new(0)).collect())
        } else {
            Slots::Wide((0..keys).map(|_| AtomicU32::new(0)).collect())
        };
        SafetyChecker {
            slots,
            violations: AtomicU64::new(0),
            max_holders: AtomicU64::new(0),
        }
    }

    /// A checker for keys `0..keys` under `rule`; [`Rule::Exclusive`] is [`new`](Self::new)'s.
    pub fn with_rule(keys: u64, max_holders: u64, one_thread: bool, rule: Rule) -> Self {
        if rule == Rule::Exclusive {
            return Self::new(keys, max_holders, one_thread);
        }
        SafetyChecker {
            slots: Slots::Shared(rule, (0..keys).map(|_| AtomicU32::new(0)).collect()),
            violations: AtomicU64::new(0),
            max_holders: AtomicU64::new(0),
        }
    }

    /// The most holders of one key at once seen so far.
    pub fn max_holders(&self) -> u64 {
        self.max_holders.load(Ordering::Relaxed)
    }

    fn saw(&self, holders: u64) {
        if holders > self.max_holders.load(Ordering::Relaxed) {
            self.max_holders.fetch_max(holders, Ordering::Relaxed);
        }
    }

    /// A holder of `key` enters, as a writer or (`writer` false) a reader of a read-write
    /// lock; for the other rules `writer` means nothing. `false` (and a violation counted) when
    /// the rule is broken.
    pub fn enter_as(&self, key: u64, writer: bool) -> bool {
        let Slots::Shared(rule, slots) = &self.slots else {
            return self.enter(key);
        };
        let Some(c) = slots.get(key as usize) else {
            return true;
        };
        let add = if writer && *rule == Rule::ReadWrite {
            WRITER
        } else {
            1
        };
        let before = c.fetch_add(add, Ordering::SeqCst);
        let (readers, writers) = (before % WRITER, before / WRITER);
        self.saw(u64::from(readers + writers) + 1);
        let broken = match rule {
            Rule::Permits(n) => before >= *n,
            Rule::ReadWrite if writer => before > 0,
            Rule::ReadWrite => writers > 0,
            Rule::Exclusive => before > 0,
        };
        if broken {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        !broken
    }

    /// The holder of `key` that entered with [`enter_as`](Self::enter_as) leaves.
    pub fn leave_as(&self, key: u64, writer: bool) {
        let Slots::Shared(rule, slots) = &self.slots else {
            return self.leave(key);
        };
        if let Some(c) = slots.get(key as usize) {
            let sub = if writer && *rule == Rule::ReadWrite {
                WRITER
            } else {
                1
            };
            c.fetch_sub(sub, Ordering::SeqCst);
        }
    }

    /// A holder of `key` enters; returns `false` (and counts a violation) if another is inside.
    pub fn enter(&self, key: u64) -> bool {
        let i = key as usize;
        let others_inside = match &self.slots {
            Slots::Bits {
                words,
                extra,
                any_extra,
            } => words.get(i / 64).is_some_and(|w| {
                let bit = 1u64 << (i % 64);
                if w.fetch_or(bit, Ordering::SeqCst) & bit == 0 {
                    self.saw(1);
                    return false;
                }
                let mut extra = lock(extra);
                let n = extra.entry(key).or_default();
                *n += 1;
                self.saw(u64::from(*n) + 1);
                any_extra.store(true, Ordering::SeqCst);
                true
            }),
            Slots::Narrow(s) => s.get(i).is_some_and(|c| {
                let before = c.fetch_add(1, Ordering::SeqCst);
                self.saw(u64::from(before) + 1);
                before > 0
            }),
            Slots::Wide(s) => s.get(i).is_some_and(|c| {
                let before = c.fetch_add(1, Ordering::SeqCst);
                self.saw(u64::from(before) + 1);
                before > 0
            }),
            Slots::Shared(..) => return self.enter_as(key, true),
        };
        if others_inside {
            self.violations.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The holder of `key` leaves.
    pub fn leave(&self, key: u64) {
        let i = key as usize;
        match &self.slots {
            Slots::Bits {
                words,
                extra,
                any_extra,
            } => {
                if any_extra.load(Ordering::SeqCst) {
                    let mut extra = lock(extra);
                    if let Some(n) = extra.get_mut(&key) {
                        *n -= 1;
                        if *n == 0 {
                            extra.remove(&key);
                        }
                        return;
                    }
                }
                if let Some(w) = words.get(i / 64) {
                    w.fetch_and(!(1u64 << (i % 64)), Ordering::SeqCst);
                }
            }
            Slots::Narrow(s) => {
                if let Some(c) = s.get(i) {
                    c.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Slots::Wide(s) => {
                if let Some(c) = s.get(i) {
                    c.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Slots::Shared(..) => self.leave_as(key, true),
        }
    }

    /// Violations seen so far.
    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout: bits (one thread), bytes, four bytes.
    fn layouts(keys: u64) -> [SafetyChecker; 3] {
        [
            SafetyChecker::new(keys, 2, true),
            SafetyChecker::new(keys, 2, false),
            SafetyChecker::new(keys, 1000, false),
        ]
    }

    #[test]
    fn second_holder_inside_is_a_violation() {
        for c in layouts(200) {
            for key in [1, 64, 199] {
                let before = c.violations();
                assert!(c.enter(key));
                assert!(!c.enter(key));
                assert_eq!(c.violations(), before + 1, "{c:?}");
                c.leave(key);
                assert!(!c.enter(key), "one holder is still inside: {c:?}");
                c.leave(key);
                c.leave(key);
                assert!(c.enter(key), "everyone left: {c:?}");
                c.leave(key);
                assert_eq!(c.violations(), before + 2);
            }
        }
    }

    #[test]
    fn a_semaphore_admits_its_permits_and_counts_the_next_holder() {
        let c = SafetyChecker::with_rule(2, 10, false, Rule::Permits(3));
        for _ in 0..3 {
            assert!(c.enter_as(0, false));
        }
        assert_eq!((c.violations(), c.max_holders()), (0, 3));
        assert!(c.enter_as(1, false), "another key has permits of its own");
        assert!(!c.enter_as(0, false), "a fourth holder of 3 permits");
        assert_eq!((c.violations(), c.max_holders()), (1, 4));
        c.leave_as(0, false);
        c.leave_as(0, false);
        assert!(c.enter_as(0, false));
        assert_eq!(c.violations(), 1);
    }

    #[test]
    fn a_read_write_lock_admits_readers_together_and_a_writer_alone() {
        let c = SafetyChecker::with_rule(1, 10, false, Rule::ReadWrite);
        assert!(c.enter_as(0, false));
        assert!(c.enter_as(0, false));
        assert_eq!(c.max_holders(), 2);
        assert!(!c.enter_as(0, true), "a writer beside readers");
        c.leave_as(0, true);
        c.leave_as(0, false);
        c.leave_as(0, false);
        assert!(c.enter_as(0, true), "the writer alone");
        assert!(!c.enter_as(0, false), "a reader beside the writer");
        assert!(!c.enter_as(0, true), "a second writer");
        assert_eq!(c.violations(), 3);
    }

    #[test]
    fn a_mutex_counts_its_most_holders_in_every_layout() {
        for c in layouts(4) {
            assert!(c.enter(2));
            assert_eq!(c.max_holders(), 1);
            assert!(!c.enter(2));
            assert_eq!(c.max_holders(), 2, "{c:?}");
        }
    }

    #[test]
    fn holders_taking_turns_are_fine() {
        for c in layouts(130) {
            for _ in 0..100 {
                for key in [0, 1, 63, 64, 129] {
                    assert!(c.enter(key), "{key}: {c:?}");
                }
                for key in [0, 1, 63, 64, 129] {
                    c.leave(key);
                }
            }
            assert_eq!(c.violations(), 0);
        }
    }

    #[test]
    fn many_holders_of_one_key_are_counted_exactly_in_every_layout() {
        // 300 holders inside one key at once: a byte per key would wrap at 256 and let the
        // 257th in unseen; a checker sized for 300 holders does not.
        for c in [
            SafetyChecker::new(1, 300, true),
            SafetyChecker::new(1, 255, false),
            SafetyChecker::new(1, 300, false),
        ] {
            let n = match &c.slots {
                Slots::Narrow(_) => 255,
                _ => 300,
            };
            for _ in 0..n {
                c.enter(0);
            }
            assert_eq!(c.violations(), n - 1, "{c:?}");
            for _ in 0..n - 1 {
                c.leave(0);
            }
            assert!(!c.enter(0), "one holder is still inside");
            c.leave(0);
            c.leave(0);
            assert!(c.enter(0), "everyone left: the next holder is alone");
            assert_eq!(c.violations(), n);
        }
    }
}
