//! What a client counts (NOSCRIPT recoveries, unknown-outcome clean-ups), and the snapshot of
//! it a caller reads.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Connections;

/// Counters of what the client did, for tests, benchmarks and reports.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) noscript_recoveries: AtomicU64,
    pub(crate) unknown_outcome_cleanups: AtomicU64,
}

/// A snapshot of a client's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Calls that met `NOSCRIPT` (or a missing function) and re-sent the script.
    pub noscript_recoveries: u64,
    /// Acquires whose reply was lost and that ran a compare-and-delete to leave no ghost lock.
    pub unknown_outcome_cleanups: u64,
}

impl Connections {
    /// Counts one clean-up after a lost acquire reply.
    pub(crate) fn count_unknown_outcome_cleanup(&self) {
        self.0
            .counters
            .unknown_outcome_cleanups
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A script call met `NOSCRIPT` (or a missing function): in the stats and the metrics.
    pub(super) fn count_noscript_recovery(&self) {
        self.0
            .counters
            .noscript_recoveries
            .fetch_add(1, Ordering::Relaxed);
        crate::metrics::noscript_recovery();
    }

    pub(crate) fn stats(&self) -> ClientStats {
        ClientStats {
            noscript_recoveries: self.0.counters.noscript_recoveries.load(Ordering::Relaxed),
            unknown_outcome_cleanups: self
                .0
                .counters
                .unknown_outcome_cleanups
                .load(Ordering::Relaxed),
        }
    }
}
