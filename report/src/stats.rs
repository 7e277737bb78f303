//! Per-task HdrHistograms and counters, drained and merged by the collector once a second.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A measured operation; each has its own histogram (microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// An attempt that got the lock (a batch counts once).
    AcquireOk,
    /// An attempt that found the lock busy.
    AcquireContended,
    /// A release (or `release_many` for a batch).
    Release,
    /// An explicit extend.
    Extend,
    /// Acquire + hold + release, for cycles that got the lock.
    Cycle,
    /// From the cycle's start to holding the lock, retries included.
    TimeToAcquire,
}

impl Op {
    /// Every operation, in report order.
    pub const ALL: [Op; 6] = [
        Op::AcquireOk,
        Op::AcquireContended,
        Op::Release,
        Op::Extend,
        Op::Cycle,
        Op::TimeToAcquire,
    ];

    /// The name in reports, logs (the tag) and file names.
    pub fn name(self) -> &'static str {
        match self {
            Op::AcquireOk => "acquire_ok",
            Op::AcquireContended => "acquire_contended",
            Op::Release => "release",
            Op::Extend => "extend",
            Op::Cycle => "cycle",
            Op::TimeToAcquire => "time_to_acquire",
        }
    }

    /// Its position in [`Op::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A fresh auto-resizing histogram with 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    let mut h = Histogram::<u64>::new(3).expect("3 significant digits is a valid precision");
    h.auto(true);
    h
}

/// Counters of one task since the last drain.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TaskCounters {
    /// Successful cycles (locks acquired and released; a batch counts its locks).
    pub cycles: u64,
    /// Acquire attempts (a batch counts its keys).
    pub attempts: u64,
    /// Attempts that found the lock busy.
    pub contended: u64,
    /// Releases or extends that found another token or no key, and watchdog losses.
    pub lost_locks: u64,
    /// Open loop: cycles that started more than 1 ms after their scheduled time.
    pub late_starts: u64,
    /// Holders whose watchdog reported the lock lost (also counted in `lost_locks`).
    pub watchdog_lost: u64,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
}

impl TaskCounters {
    /// Adds another set of counters.
    pub fn add(&mut self, o: &TaskCounters) {
        self.cycles += o.cycles;
        self.attempts += o.attempts;
        self.contended += o.contended;
        self.lost_locks += o.lost_locks;
        self.late_starts += o.late_starts;
        self.watchdog_lost += o.watchdog_lost;
        for (k, v) in &o.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
    }

    /// All errors.
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Histograms and counters: what one task records between drains, and what the collector
/// merges over all tasks for one interval (or the whole run).
#[derive(Debug)]
pub struct Interval {
    /// One histogram per [`Op`], in [`Op::ALL`] order.
    pub hists: Vec<Histogram<u64>>,
    /// The counters.
    pub counters: TaskCounters,
}

/// What one task records between drains.
pub type TaskStats = Interval;

impl Default for Interval {
    fn default() -> Self {
        Interval {
            hists: Op::ALL.iter().map(|_| new_histogram()).collect(),
            counters: TaskCounters::default(),
        }
    }
}

impl Interval {
    /// Records one latency.
    pub fn record(&mut self, op: Op, d: Duration) {
        let us = (d.as_nanos() / 1_000).clamp(1, u128::from(u64::MAX)) as u64;
        // With auto-resize on, recording cannot fail.
        let _ = self.hists[op.index()].record(us);
    }

    /// Counts an error of `kind`.
    pub fn error(&mut self, kind: &str) {
        match self.counters.errors.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.counters.errors.insert(kind.to_string(), 1);
            }
        }
    }

    /// The histogram of `op`.
    pub fn hist(&self, op: Op) -> &Histogram<u64> {
        &self.hists[op.index()]
    }

    /// Adds another interval.
    pub fn add(&mut self, o: &Interval) {
        for (a, b) in self.hists.iter_mut().zip(&o.hists) {
            if !b.is_empty() {
                let _ = a.add(b);
            }
        }
        self.counters.add(&o.counters);
    }

    /// Moves everything recorded into `into` and starts afresh (keeping the histograms'
    /// memory).
    pub fn drain_into(&mut self, into: &mut Interval) {
        into.add(self);
        for h in self.hists.iter_mut().filter(|h| !h.is_empty()) {
            h.reset();
        }
        self.counters = TaskCounters::default();
    }
}

/// A task's stats, shared with the collector.
pub type SharedStats = Arc<Mutex<TaskStats>>;

/// Locks a task's stats (a panicked task's data is still data).
pub fn lock(s: &SharedStats) -> std::sync::MutexGuard<'_, TaskStats> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// count, p50, p90, p99, p99.9, max and mean of one operation, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

impl LatencySummary {
    /// count, p50, p90, p99, p99.9, max and mean as table cells, latencies through `us`.
    pub fn cells(&self, us: impl Fn(u64) -> String) -> [String; 7] {
        [
            self.count.to_string(),
            us(self.p50),
            us(self.p90),
            us(self.p99),
            us(self.p999),
            us(self.max),
            us(self.mean.round() as u64),
        ]
    }

    /// Summarises a histogram (all zero when empty).
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: (h.mean() * 10.0).round() / 10.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_moves_samples_and_counters() {
        let mut t = TaskStats::default();
        t.record(Op::Cycle, Duration::from_micros(100));
        t.record(Op::Cycle, Duration::from_micros(300));
        t.counters.cycles = 2;
        t.error("timeout");
        let mut i = Interval::default();
        t.drain_into(&mut i);
        assert_eq!(i.hist(Op::Cycle).len(), 2);
        assert_eq!(i.counters.cycles, 2);
        assert_eq!(i.counters.errors["timeout"], 1);
        let mut again = Interval::default();
        t.drain_into(&mut again);
        assert_eq!(again.hist(Op::Cycle).len(), 0);
        assert_eq!(again.counters, TaskCounters::default());
    }

    #[test]
    fn summary_reads_quantiles_in_microseconds() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let s = LatencySummary::of(&h);
        assert_eq!(s.count, 1000);
        assert_eq!(s.p50, 500);
        assert_eq!(s.p99, 990);
        assert_eq!(s.max, 1000);
        assert_eq!(
            LatencySummary::of(&new_histogram()),
            LatencySummary::default()
        );
    }

    #[test]
    fn sub_microsecond_latencies_count_as_one() {
        let mut t = TaskStats::default();
        t.record(Op::Release, Duration::from_nanos(10));
        let mut i = Interval::default();
        t.drain_into(&mut i);
        assert_eq!(i.hist(Op::Release).min(), 1);
    }
}
