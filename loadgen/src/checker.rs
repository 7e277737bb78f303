//! The exact in-process mutual-exclusion checker.
//!
//! Every holder marks its key on entering the critical section (after the acquire returned) and
//! unmarks it on leaving (before the release is sent). A key already marked when a holder enters
//! means two holders are inside at once: a violation. Because the mark is removed before the
//! release can free the key in Redis and set only after Redis granted it, a correct lock never
//! trips it; a lock that expired under a slow holder always does.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// One counter per key of the shared key space.
#[derive(Debug)]
pub struct SafetyChecker {
    slots: Vec<AtomicU32>,
    violations: AtomicU64,
}

impl SafetyChecker {
    /// A checker for keys `0..keys` (unique keys need none: nobody else can hold them).
    pub fn new(keys: u64) -> Self {
        SafetyChecker {
            slots: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            violations: AtomicU64::new(0),
        }
    }

    /// A holder of `key` enters; returns `false` (and counts a violation) if another is inside.
    pub fn enter(&self, key: u64) -> bool {
        let Some(slot) = self.slots.get(key as usize) else {
            return true;
        };
        if slot.fetch_add(1, Ordering::SeqCst) > 0 {
            self.violations.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The holder of `key` leaves.
    pub fn leave(&self, key: u64) {
        if let Some(slot) = self.slots.get(key as usize) {
            slot.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Violations seen so far.
    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_inside_is_a_violation() {
        let c = SafetyChecker::new(4);
        assert!(c.enter(1));
        assert!(!c.enter(1));
        assert_eq!(c.violations(), 1);
        c.leave(1);
        c.leave(1);
        assert!(c.enter(1));
        assert_eq!(c.violations(), 1);
    }

    #[test]
    fn holders_taking_turns_are_fine() {
        let c = SafetyChecker::new(2);
        for _ in 0..100 {
            assert!(c.enter(0));
            assert!(c.enter(1));
            c.leave(0);
            c.leave(1);
        }
        assert_eq!(c.violations(), 0);
    }
}
