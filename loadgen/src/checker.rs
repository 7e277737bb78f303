//! The exact in-process mutual-exclusion checker.
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
}

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
                    return false;
                }
                *lock(extra).entry(key).or_default() += 1;
                any_extra.store(true, Ordering::SeqCst);
                true
            }),
            Slots::Narrow(s) => s
                .get(i)
                .is_some_and(|c| c.fetch_add(1, Ordering::SeqCst) > 0),
            Slots::Wide(s) => s
                .get(i)
                .is_some_and(|c| c.fetch_add(1, Ordering::SeqCst) > 0),
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
