//! One benchmark client: acquire, hold, release, as often as the loop mode allows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use lockkit::{
    AcquireObserver, AttemptOutcome, ErrorKind, ExtendOutcome, Lock, LockOptions, Locker,
    ReleaseOutcome, WatchdogOptions,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::checker::SafetyChecker;
use crate::config::{HoldDist, KeyDist};
use crate::faults::{FaultKind, FaultLog, HolderPause};
use crate::fencing::{Access, FencedResource};
use crate::keys::{KeyChoice, KeyPicker};
use crate::locker::BenchLocker;
use lockkit_report::stats::{lock, Op, SharedStats};

/// A late start: the cycle began more than this after its scheduled time.
const LATE: Duration = Duration::from_millis(1);
/// The resolution of Tokio's timer.
const TIMER_TICK: Duration = Duration::from_millis(1);
/// Pause after an error so a dead server does not turn the loop into a spin.
const ERROR_PAUSE: Duration = Duration::from_millis(1);

/// What every worker shares.
#[derive(Debug)]
pub struct WorkerShared {
    /// Set when the run ends (duration, cycle budget, Ctrl-C).
    pub stop: AtomicBool,
    /// Wakes workers that are sleeping (hold, schedule) when the run ends.
    pub stop_rx: watch::Receiver<bool>,
    /// Set once the warm-up is over; the cycle budget counts from then.
    pub measuring: AtomicBool,
    /// Cycles started while measuring (for `--cycles`).
    pub started: AtomicU64,
    /// The safety checker (shared key space).
    pub checker: SafetyChecker,
    /// A holder pause on offer (`--faults holder-pause`).
    pub holder_pause: Arc<HolderPause>,
    /// Where holder pauses are logged, once the fault schedule runs.
    pub fault_log: OnceLock<Arc<FaultLog>>,
    /// The fenced resource (`--fencing`).
    pub fencing: Option<FencedResource>,
}

impl WorkerShared {
    /// The run's violations: the checker's overlaps, or with `--fencing` only the accesses
    /// the fenced resource accepted against the rule (the overlaps of the leases it stopped
    /// are `safety.fencing.lease_overlaps`).
    pub fn violations(&self) -> u64 {
        match &self.fencing {
            Some(resource) => resource.unsafe_writes(),
            None => self.checker.violations(),
        }
    }
}

/// The workload of one worker, fixed for the run.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    /// Task number, `0..clients`.
    pub task: u64,
    /// Number of tasks (the open-loop stride).
    pub clients: u64,
    /// The options of every lock: its TTL, and the retry policy (one attempt without
    /// `--retry`) that the library's retry loop runs.
    pub lock: LockOptions,
    /// Mean hold time and its distribution.
    pub hold: Duration,
    /// How the hold varies.
    pub hold_dist: HoldDist,
    /// Whether busy locks are retried (with the policy in `lock`).
    pub retry: bool,
    /// Renew with the library's watchdog.
    pub watchdog: bool,
    /// Explicit extends per held lock.
    pub extends: u64,
    /// Locks per cycle (`acquire_many` when above 1).
    pub batch: u64,
    /// Open loop: total cycles per second over all tasks.
    pub rate: Option<u64>,
    /// When the schedule starts.
    pub t0: Instant,
    /// Cycle budget (`--cycles`), counted while measuring.
    pub cycles: Option<u64>,
    /// Key distribution (for the checker: unique keys are not checked).
    pub key_dist: KeyDist,
    /// `--primitive rwlock`: the share of cycles that read.
    pub read_ratio: f64,
}

/// Runs cycles until `shared.stop` is set.
pub async fn run_worker<L: Locker>(
    locker: BenchLocker<L>,
    keys: KeyPicker,
    plan: WorkerPlan,
    stats: SharedStats,
    shared: Arc<WorkerShared>,
) {
    Worker::new(locker, keys, plan, stats, shared).run().await;
}

/// One benchmark client and everything its cycles share.
struct Worker<L: Locker> {
    locker: BenchLocker<L>,
    keys: KeyPicker,
    plan: WorkerPlan,
    stats: SharedStats,
    shared: Arc<WorkerShared>,
    rng: SmallRng,
    stop_rx: watch::Receiver<bool>,
    key_buf: String,
    /// When the last cycle ended (closed loop: the next one starts then; one clock read less).
    ended: Option<Instant>,
    batch_bufs: Vec<String>,
    batch_choices: Vec<KeyChoice>,
}

/// Records every attempt of the library's retry loop into the worker's histograms.
struct Recorder<'a> {
    stats: &'a SharedStats,
    shared: &'a WorkerShared,
    /// The cycle's scheduled start (open loop) or real start.
    intended: Instant,
    open_loop: bool,
    retrying: bool,
    first: bool,
    /// When the last attempt's reply came (`sent + latency`, no clock read of its own).
    answered: Option<Instant>,
}

impl AcquireObserver for Recorder<'_> {
    fn on_attempt(&mut self, outcome: AttemptOutcome, sent: Instant, latency: Duration) {
        // The first attempt of an open-loop cycle is charged from the scheduled start.
        let from = if self.first && self.open_loop {
            self.intended
        } else {
            sent
        };
        self.first = false;
        let end = sent + latency;
        self.answered = Some(end);
        let mut s = lock(self.stats);
        s.counters.attempts += 1;
        match outcome {
            AttemptOutcome::Acquired => {
                s.record(Op::AcquireOk, end - from);
                // Without retries this equals acquire_ok; the collector copies it instead.
                if self.retrying {
                    s.record(Op::TimeToAcquire, end - self.intended);
                }
            }
            AttemptOutcome::Busy => {
                s.record(Op::AcquireContended, end - from);
                s.counters.contended += 1;
            }
            AttemptOutcome::TooLittleValidity => s.error("too_little_validity"),
            AttemptOutcome::Failed(kind) => s.error(kind.as_str()),
            _ => s.error("other"),
        }
    }

    fn keep_trying(&mut self) -> bool {
        !self.shared.stop.load(Ordering::Relaxed)
    }
}

impl<L: Locker> Worker<L> {
    fn new(
        locker: BenchLocker<L>,
        keys: KeyPicker,
        plan: WorkerPlan,
        stats: SharedStats,
        shared: Arc<WorkerShared>,
    ) -> Self {
        Worker {
            rng: SmallRng::seed_from_u64(plan.task.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 7),
            stop_rx: shared.stop_rx.clone(),
            locker,
            keys,
            plan,
            stats,
            shared,
            key_buf: String::new(),
            ended: None,
            batch_bufs: Vec::new(),
            batch_choices: Vec::new(),
        }
    }

    async fn run(mut self) {
        let plan = &self.plan;
        let period = plan
            .rate
            .map(|r| Duration::from_secs_f64(plan.clients as f64 / r as f64));
        let mut next = plan.t0
            + period.map_or(Duration::ZERO, |_| {
                Duration::from_secs_f64(plan.task as f64 / plan.rate.unwrap_or(1) as f64)
            });
        loop {
            if self.shared.stop.load(Ordering::Relaxed) {
                return;
            }
            if let Some(limit) = self.plan.cycles {
                if self.shared.measuring.load(Ordering::Relaxed)
                    && self.shared.started.fetch_add(1, Ordering::Relaxed) >= limit
                {
                    return;
                }
            }
            let ended = self.ended.take();
            let intended = match period {
                None => ended.unwrap_or_else(Instant::now),
                Some(p) => {
                    let at = next;
                    next += p;
                    // Tokio's timer fires on 1 ms ticks at or after the deadline; aiming one tick
                    // early starts on time instead of up to 1 ms late.
                    let wake = at.checked_sub(TIMER_TICK).unwrap_or(at);
                    if wake > Instant::now() && !sleep_until(wake, &mut self.stop_rx).await {
                        return;
                    }
                    let now = Instant::now();
                    if now.saturating_duration_since(at) > LATE {
                        lock(&self.stats).counters.late_starts += 1;
                    }
                    // Latency counts from the scheduled start, or from the real start when that
                    // was (slightly) early: a late start is charged in full, an early one never
                    // shortens what is measured.
                    at.min(now)
                }
            };
            if self.plan.batch > 1 {
                self.batch_cycle(intended).await;
            } else {
                let choice = self.keys.pick();
                let mut key = std::mem::take(&mut self.key_buf);
                self.keys.format(choice, &mut key);
                self.single_cycle(&key, choice, intended).await;
                self.key_buf = key;
            }
        }
    }

    /// Acquires one key through the library's retry loop (a single attempt without `--retry`),
    /// recording every attempt: the lock and when its reply came. `None` when busy, failed, or
    /// stopped.
    async fn acquire_one(&mut self, key: &str, intended: Instant) -> Option<(Lock, Instant)> {
        let mut recorder = Recorder {
            stats: &self.stats,
            shared: &self.shared,
            intended,
            open_loop: self.plan.rate.is_some(),
            retrying: self.plan.retry,
            first: true,
            answered: None,
        };
        // Never cancelled mid-attempt (a taken lock must come back to be released); the recorder
        // ends the retries when the run stops.
        let result = self
            .locker
            .acquire_observed(key, &self.plan.lock, &mut recorder)
            .await;
        let answered = recorder.answered;
        match result {
            Ok(lock) => Some((lock, answered.unwrap_or_else(Instant::now))),
            Err(e) => {
                match e.kind() {
                    // Each busy attempt was counted as contention already. A retrying acquire
                    // that the end of the run cut short (the recorder stopped it) did not time
                    // out: not an error.
                    ErrorKind::Busy
                        if self.plan.retry && !self.shared.stop.load(Ordering::Relaxed) =>
                    {
                        lock(&self.stats).error("acquire_timeout");
                    }
                    ErrorKind::Busy => {}
                    // Counted by the recorder; pause so a dead server does not become a spin.
                    _ => {
                        let _ = sleep_until(Instant::now() + ERROR_PAUSE, &mut self.stop_rx).await;
                    }
                }
                None
            }
        }
    }

    /// Waits out the hold, with `extends` explicit extends spread over it. `false` if stopped.
    async fn hold(&mut self, held: &mut Lock, d: Duration) -> bool {
        let parts = self.plan.extends + 1;
        let slice = d / u32::try_from(parts).unwrap_or(u32::MAX);
        for i in 0..parts {
            if !slice.is_zero() && !sleep_until(Instant::now() + slice, &mut self.stop_rx).await {
                return false;
            }
            if i + 1 < parts {
                let t = Instant::now();
                let r = self.locker.extend(held, self.plan.lock.ttl()).await;
                let mut s = lock(&self.stats);
                match r {
                    Ok(ExtendOutcome::Extended) => s.record(Op::Extend, t.elapsed()),
                    Ok(_) => {
                        s.record(Op::Extend, t.elapsed());
                        s.counters.lost_locks += 1;
                    }
                    Err(e) => s.error(e.kind().as_str()),
                }
            }
        }
        true
    }

    fn checked_slot(&self, choice: KeyChoice) -> Option<u64> {
        match choice {
            KeyChoice::Shared(i) if self.plan.key_dist != KeyDist::Unique => Some(i),
            _ => None,
        }
    }

    /// Marks the holder of `slot` inside its critical section and, with `--fencing`, presents
    /// its token to the resource: `false` when the resource refused it (the lock is already
    /// stale, so the holder does no work).
    fn enter(&self, slot: Option<u64>, fence: Option<(u64, u32)>) -> bool {
        let Some(i) = slot else {
            return true;
        };
        self.shared.checker.enter_as(i, self.locker.is_writing());
        self.present(i, fence, true)
    }

    /// With `--fencing`, the holder's access to key `i` with its token and (a semaphore's)
    /// slot: a write, or a read for a read-write lock's reader. `false` when refused.
    fn present(&self, i: u64, fence: Option<(u64, u32)>, entering: bool) -> bool {
        match (&self.shared.fencing, fence) {
            (Some(resource), Some((token, slot))) => {
                let write = self.locker.is_writing();
                resource.present(
                    Access {
                        key: i,
                        slot,
                        token,
                        write,
                    },
                    entering,
                )
            }
            _ => true,
        }
    }

    fn leave(&self, slot: Option<u64>) {
        if let Some(i) = slot {
            self.shared.checker.leave_as(i, self.locker.is_writing());
        }
    }

    /// The end of the work inside the critical section: the holder's write. A holder pause on
    /// offer is taken here, between the holder's last look at its lock and its write, where a
    /// GC pause hurts most: nothing the lock does can stop the write once the holder runs again.
    /// `true` when it paused.
    async fn finish_work(&mut self, slot: Option<u64>, fence: Option<(u64, u32)>) -> bool {
        let mut paused = false;
        if let Some(d) = self.shared.holder_pause.claim() {
            paused = true;
            let began = Instant::now();
            self.locker.pause(d).await;
            if let Some(log) = self.shared.fault_log.get() {
                log.record(FaultKind::HolderPause, began, began.elapsed(), None);
            }
            self.shared.holder_pause.finish();
        }
        if let Some(i) = slot {
            self.present(i, fence, false);
        }
        paused
    }

    async fn single_cycle(&mut self, key: &str, choice: KeyChoice, intended: Instant) {
        if self.locker.is_rwlock() {
            let write = self.rng.random::<f64>() >= self.plan.read_ratio;
            self.locker.set_writing(write);
        }
        let Some((mut held, answered)) = self.acquire_one(key, intended).await else {
            return;
        };
        let slot = self.checked_slot(choice);
        let fence = held
            .fencing_token()
            .map(|t| (t, held.fencing_slot().unwrap_or(0)));
        let admitted = self.enter(slot, fence);
        let d = hold_time(&self.plan, &mut self.rng);
        let (outcome, lost_by_watchdog, t) = if self.plan.watchdog {
            match self.locker.guard(held, Some(WatchdogOptions::new())) {
                Ok(guard) => {
                    // The holder stops its work the moment the watchdog says the lock is gone.
                    let still_held = if d.is_zero() {
                        guard.is_lost().is_none()
                    } else {
                        let mut loss = guard.loss_signal();
                        let until = Instant::now() + d;
                        tokio::select! {
                            biased;
                            _ = loss.lost() => false,
                            _ = sleep_until(until, &mut self.stop_rx) => true,
                        }
                    };
                    if still_held && admitted {
                        let _ = self.finish_work(slot, fence).await;
                    }
                    self.leave(slot);
                    let lost = guard.is_lost().is_some();
                    let t = Instant::now();
                    (guard.release().await, lost, t)
                }
                Err(e) => {
                    self.leave(slot);
                    lock(&self.stats).error(e.kind().as_str());
                    return;
                }
            }
        } else {
            let held_on = self.plan.extends > 0 || !d.is_zero();
            if held_on {
                let _ = self.hold(&mut held, d).await;
            }
            let paused = admitted && self.finish_work(slot, fence).await;
            self.leave(slot);
            // Nothing waited since the acquire's reply (no hold, no pause: the release goes out
            // in the same poll): it is when the release is sent, without reading the clock.
            let t = if held_on || paused {
                Instant::now()
            } else {
                answered
            };
            (self.locker.release(&held).await, false, t)
        };
        let now = Instant::now();
        self.ended = Some(now);
        let mut s = lock(&self.stats);
        // Counted whether or not the release then reaches the server (it may be down).
        if lost_by_watchdog {
            s.counters.watchdog_lost += 1;
        }
        match outcome {
            Ok(o) => {
                s.record(Op::Release, now - t);
                s.record(Op::Cycle, now - intended);
                s.counters.cycles += 1;
                if o != ReleaseOutcome::Released || lost_by_watchdog {
                    s.counters.lost_locks += 1;
                }
            }
            Err(e) => s.error(e.kind().as_str()),
        }
    }

    async fn batch_cycle(&mut self, intended: Instant) {
        let n = self.plan.batch as usize;
        let mut bufs = std::mem::take(&mut self.batch_bufs);
        let mut choices = std::mem::take(&mut self.batch_choices);
        bufs.resize_with(n, String::new);
        choices.clear();
        for buf in bufs.iter_mut() {
            let c = self.keys.pick();
            self.keys.format(c, buf);
            choices.push(c);
        }
        self.batch(&bufs, &choices, intended).await;
        self.batch_bufs = bufs;
        self.batch_choices = choices;
    }

    async fn batch(&mut self, bufs: &[String], choices: &[KeyChoice], intended: Instant) {
        let n = bufs.len();
        let refs: Vec<&str> = bufs.iter().map(String::as_str).collect();
        let sent = Instant::now();
        let r = self.locker.acquire_many(&refs, self.plan.lock.ttl()).await;
        let from = if self.plan.rate.is_some() {
            intended
        } else {
            sent
        };
        let got = {
            let mut s = lock(&self.stats);
            s.counters.attempts += n as u64;
            match r {
                Ok(got) => {
                    let busy = got.iter().filter(|g| g.is_none()).count() as u64;
                    s.counters.contended += busy;
                    if busy == n as u64 {
                        s.record(Op::AcquireContended, from.elapsed());
                    } else {
                        s.record(Op::AcquireOk, from.elapsed());
                    }
                    Some(got)
                }
                Err(e) => {
                    s.error(e.kind().as_str());
                    None
                }
            }
        };
        let Some(got) = got else {
            let _ = sleep_until(Instant::now() + ERROR_PAUSE, &mut self.stop_rx).await;
            return;
        };
        let mut held = Vec::with_capacity(n);
        let mut slots = Vec::with_capacity(n);
        for (g, c) in got.into_iter().zip(choices) {
            if let Some(l) = g {
                held.push(l);
                if let Some(i) = self.checked_slot(*c) {
                    self.shared.checker.enter(i);
                    slots.push(i);
                }
            }
        }
        if held.is_empty() {
            return;
        }
        let d = hold_time(&self.plan, &mut self.rng);
        if !d.is_zero() {
            let _ = sleep_until(Instant::now() + d, &mut self.stop_rx).await;
        }
        for i in &slots {
            self.shared.checker.leave(*i);
        }
        let t = Instant::now();
        let r = self.locker.release_many(&held).await;
        let now = Instant::now();
        let mut s = lock(&self.stats);
        match r {
            Ok(outcomes) => {
                s.record(Op::Release, now - t);
                s.record(Op::Cycle, now - intended);
                s.counters.cycles += held.len() as u64;
                s.counters.lost_locks +=
                    outcomes.iter().filter(|o| !o.is_released()).count() as u64;
            }
            Err(e) => s.error(e.kind().as_str()),
        }
    }
}

/// Sleeps until `at`; `false` when the run was stopped meanwhile.
pub(crate) async fn sleep_until(at: Instant, stop_rx: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep_until(at.into()) => true,
        _ = stop_rx.wait_for(|s| *s) => false,
    }
}

fn hold_time(plan: &WorkerPlan, rng: &mut SmallRng) -> Duration {
    if plan.hold.is_zero() {
        return Duration::ZERO;
    }
    match plan.hold_dist {
        HoldDist::Fixed => plan.hold,
        HoldDist::Uniform => plan.hold.mul_f64(2.0 * rng.random::<f64>()),
        HoldDist::Exp => {
            let u: f64 = rng.random::<f64>().max(1e-12);
            plan.hold.mul_f64((-u.ln()).min(10.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(hold_ms: u64, hold_dist: HoldDist) -> WorkerPlan {
        WorkerPlan {
            task: 0,
            clients: 1,
            lock: LockOptions::new(Duration::from_secs(1)).unwrap(),
            hold: Duration::from_millis(hold_ms),
            hold_dist,
            retry: false,
            watchdog: false,
            extends: 0,
            batch: 1,
            rate: None,
            t0: Instant::now(),
            cycles: None,
            key_dist: KeyDist::Uniform,
            read_ratio: 0.9,
        }
    }

    #[test]
    fn hold_distributions_stay_in_their_bounds_with_the_right_mean() {
        let mut rng = SmallRng::seed_from_u64(1);
        for (dist, max) in [
            (HoldDist::Fixed, 10.0),
            (HoldDist::Uniform, 20.0),
            (HoldDist::Exp, 100.0),
        ] {
            let p = plan(10, dist);
            let n = 20_000;
            let mut sum = 0.0;
            for _ in 0..n {
                let ms = hold_time(&p, &mut rng).as_secs_f64() * 1e3;
                assert!((0.0..=max + 1e-9).contains(&ms), "{dist:?}: {ms}");
                sum += ms;
            }
            let mean = sum / f64::from(n);
            assert!((9.0..11.0).contains(&mean), "{dist:?}: mean {mean}");
        }
        assert_eq!(hold_time(&plan(0, HoldDist::Exp), &mut rng), Duration::ZERO);
    }
}
