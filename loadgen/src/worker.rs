//! One benchmark client: acquire, hold, release, as often as the loop mode allows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit::{ExtendOutcome, ReleaseOutcome, RetryOptions, WatchdogOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::args::{HoldDist, KeyDist};
use crate::checker::SafetyChecker;
use crate::keys::{KeyChoice, KeyPicker};
use crate::locker::Locker;
use crate::stats::{error_kind, lock, Op, SharedStats};

/// A late start: the cycle began more than this after its scheduled time.
const LATE: Duration = Duration::from_millis(1);
/// The resolution of Tokio's timer.
const TIMER_TICK: Duration = Duration::from_millis(1);
/// Pause after an error so a dead server does not turn the loop into a spin.
const ERROR_PAUSE: Duration = Duration::from_millis(1);

/// What every worker shares.
#[derive(Debug)]
pub struct Shared {
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
}

/// The workload of one worker, fixed for the run.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    /// Task number, `0..clients`.
    pub task: u64,
    /// Number of tasks (the open-loop stride).
    pub clients: u64,
    /// TTL of every lock.
    pub ttl: Duration,
    /// Mean hold time and its distribution.
    pub hold: Duration,
    /// How the hold varies.
    pub hold_dist: HoldDist,
    /// Retry busy locks with this policy (`None`: one attempt per cycle).
    pub retry: Option<RetryOptions>,
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
}

/// Runs cycles until `shared.stop` is set.
pub async fn run_worker<L: Locker>(
    locker: L,
    mut keys: KeyPicker,
    plan: WorkerPlan,
    stats: SharedStats,
    shared: Arc<Shared>,
) {
    let mut rng = SmallRng::seed_from_u64(plan.task.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 7);
    let mut stop_rx = shared.stop_rx.clone();
    let period = plan
        .rate
        .map(|r| Duration::from_secs_f64(plan.clients as f64 / r as f64));
    let mut next = plan.t0
        + period.map_or(Duration::ZERO, |_| {
            Duration::from_secs_f64(plan.task as f64 / plan.rate.unwrap_or(1) as f64)
        });
    let mut key_buf = String::new();
    let mut batch_bufs: Vec<String> = Vec::new();
    let mut batch_choices: Vec<KeyChoice> = Vec::new();
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        if let Some(limit) = plan.cycles {
            if shared.measuring.load(Ordering::Relaxed)
                && shared.started.fetch_add(1, Ordering::Relaxed) >= limit
            {
                return;
            }
        }
        let intended = match period {
            None => Instant::now(),
            Some(p) => {
                let at = next;
                next += p;
                // Tokio's timer fires on 1 ms ticks at or after the deadline; aiming one tick
                // early starts on time instead of up to 1 ms late.
                let wake = at.checked_sub(TIMER_TICK).unwrap_or(at);
                if wake > Instant::now() && !sleep_until(wake, &mut stop_rx).await {
                    return;
                }
                let now = Instant::now();
                if now.saturating_duration_since(at) > LATE {
                    lock(&stats).counters.late_starts += 1;
                }
                // Latency counts from the scheduled start, or from the real start when that
                // was (slightly) early: a late start is charged in full, an early one never
                // shortens what is measured.
                at.min(now)
            }
        };
        if plan.batch > 1 {
            batch_cycle(
                &locker,
                &mut keys,
                &plan,
                &stats,
                &shared,
                intended,
                &mut batch_bufs,
                &mut batch_choices,
                &mut rng,
                &mut stop_rx,
            )
            .await;
        } else {
            let choice = keys.pick();
            keys.format(choice, &mut key_buf);
            single_cycle(
                &locker,
                &key_buf,
                choice,
                &plan,
                &stats,
                &shared,
                intended,
                &mut rng,
                &mut stop_rx,
            )
            .await;
        }
    }
}

/// Sleeps until `at`; `false` when the run was stopped meanwhile.
async fn sleep_until(at: Instant, stop_rx: &mut watch::Receiver<bool>) -> bool {
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

/// Waits out the hold, with `extends` explicit extends spread over it. `false` if stopped.
async fn hold<L: Locker>(
    locker: &L,
    lock_: &mut L::Lock,
    plan: &WorkerPlan,
    d: Duration,
    stats: &SharedStats,
    stop_rx: &mut watch::Receiver<bool>,
) -> bool {
    let parts = plan.extends + 1;
    let slice = d / u32::try_from(parts).unwrap_or(u32::MAX);
    for i in 0..parts {
        if !slice.is_zero() && !sleep_until(Instant::now() + slice, stop_rx).await {
            return false;
        }
        if i + 1 < parts {
            let t = Instant::now();
            let r = locker.extend(lock_, plan.ttl).await;
            let mut s = lock(stats);
            match r {
                Ok(ExtendOutcome::Extended) => s.record(Op::Extend, t.elapsed()),
                Ok(_) => {
                    s.record(Op::Extend, t.elapsed());
                    s.counters.lost_locks += 1;
                }
                Err(e) => s.error(&error_kind(&e)),
            }
        }
    }
    true
}

/// Acquires one key: a single attempt, or retries until the deadline. Records every attempt.
/// The first attempt of an open-loop cycle is charged from the scheduled start.
async fn acquire_one<L: Locker>(
    locker: &L,
    key: &str,
    plan: &WorkerPlan,
    stats: &SharedStats,
    intended: Instant,
    stop_rx: &mut watch::Receiver<bool>,
) -> Option<L::Lock> {
    let first_sent = Instant::now();
    let mut attempts = 0u32;
    loop {
        let sent = Instant::now();
        let r = locker.try_acquire(key, plan.ttl).await;
        let from = if attempts == 0 && plan.rate.is_some() {
            intended
        } else {
            sent
        };
        attempts += 1;
        let failed = {
            let mut s = lock(stats);
            s.counters.attempts += 1;
            match r {
                Ok(Some(l)) => {
                    s.record(Op::AcquireOk, from.elapsed());
                    // Without retries this equals acquire_ok; the collector copies it instead.
                    if plan.retry.is_some() {
                        s.record(Op::TimeToAcquire, intended.elapsed());
                    }
                    return Some(l);
                }
                Ok(None) => {
                    s.record(Op::AcquireContended, from.elapsed());
                    s.counters.contended += 1;
                    None
                }
                Err(e) => {
                    s.error(&error_kind(&e));
                    Some(e.is_retryable())
                }
            }
        };
        if let Some(retryable) = failed {
            let _ = sleep_until(Instant::now() + ERROR_PAUSE, stop_rx).await;
            if !retryable || plan.retry.is_none() {
                return None;
            }
        }
        // The library's own policy decides the pause and when to give up.
        let Some(pause) = plan.retry?.next_pause(attempts, first_sent.elapsed()) else {
            lock(stats).error("acquire_timeout");
            return None;
        };
        if !sleep_until(Instant::now() + pause, stop_rx).await {
            return None;
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn single_cycle<L: Locker>(
    locker: &L,
    key: &str,
    choice: KeyChoice,
    plan: &WorkerPlan,
    stats: &SharedStats,
    shared: &Shared,
    intended: Instant,
    rng: &mut SmallRng,
    stop_rx: &mut watch::Receiver<bool>,
) {
    let Some(mut held) = acquire_one(locker, key, plan, stats, intended, stop_rx).await else {
        return;
    };
    let slot = match choice {
        KeyChoice::Shared(i) if plan.key_dist != KeyDist::Unique => Some(i),
        _ => None,
    };
    if let Some(i) = slot {
        shared.checker.enter(i);
    }
    let d = hold_time(plan, rng);
    let (outcome, lost_by_watchdog, t) = if plan.watchdog {
        match locker.guard(held, WatchdogOptions::new()) {
            Ok(guard) => {
                if !d.is_zero() {
                    let _ = sleep_until(Instant::now() + d, stop_rx).await;
                }
                if let Some(i) = slot {
                    shared.checker.leave(i);
                }
                let lost = L::guard_lost(&guard);
                let t = Instant::now();
                (L::release_guard(guard).await, lost, t)
            }
            Err(e) => {
                if let Some(i) = slot {
                    shared.checker.leave(i);
                }
                lock(stats).error(&error_kind(&e));
                return;
            }
        }
    } else {
        if plan.extends > 0 || !d.is_zero() {
            let _ = hold(locker, &mut held, plan, d, stats, stop_rx).await;
        }
        if let Some(i) = slot {
            shared.checker.leave(i);
        }
        let t = Instant::now();
        (locker.release(&held).await, false, t)
    };
    let now = Instant::now();
    let mut s = lock(stats);
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
        Err(e) => s.error(&error_kind(&e)),
    }
}

#[allow(clippy::too_many_arguments)]
async fn batch_cycle<L: Locker>(
    locker: &L,
    keys: &mut KeyPicker,
    plan: &WorkerPlan,
    stats: &SharedStats,
    shared: &Shared,
    intended: Instant,
    bufs: &mut Vec<String>,
    choices: &mut Vec<KeyChoice>,
    rng: &mut SmallRng,
    stop_rx: &mut watch::Receiver<bool>,
) {
    let n = plan.batch as usize;
    bufs.resize_with(n, String::new);
    choices.clear();
    for buf in bufs.iter_mut() {
        let c = keys.pick();
        keys.format(c, buf);
        choices.push(c);
    }
    let refs: Vec<&str> = bufs.iter().map(String::as_str).collect();
    let sent = Instant::now();
    let r = locker.acquire_many(&refs, plan.ttl).await;
    let from = if plan.rate.is_some() { intended } else { sent };
    let got = {
        let mut s = lock(stats);
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
                s.error(&error_kind(&e));
                None
            }
        }
    };
    let Some(got) = got else {
        let _ = sleep_until(Instant::now() + ERROR_PAUSE, stop_rx).await;
        return;
    };
    let mut held = Vec::with_capacity(n);
    let mut slots = Vec::with_capacity(n);
    for (g, c) in got.into_iter().zip(choices.iter()) {
        if let Some(l) = g {
            held.push(l);
            if let KeyChoice::Shared(i) = c {
                if plan.key_dist != KeyDist::Unique {
                    shared.checker.enter(*i);
                    slots.push(*i);
                }
            }
        }
    }
    if held.is_empty() {
        return;
    }
    let d = hold_time(plan, rng);
    if !d.is_zero() {
        let _ = sleep_until(Instant::now() + d, stop_rx).await;
    }
    for i in &slots {
        shared.checker.leave(*i);
    }
    let t = Instant::now();
    let r = locker.release_many(&held).await;
    let now = Instant::now();
    let mut s = lock(stats);
    match r {
        Ok(outcomes) => {
            s.record(Op::Release, now - t);
            s.record(Op::Cycle, now - intended);
            s.counters.cycles += held.len() as u64;
            s.counters.lost_locks += outcomes.iter().filter(|o| !o.is_released()).count() as u64;
        }
        Err(e) => s.error(&error_kind(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(hold_ms: u64, hold_dist: HoldDist) -> WorkerPlan {
        WorkerPlan {
            task: 0,
            clients: 1,
            ttl: Duration::from_secs(1),
            hold: Duration::from_millis(hold_ms),
            hold_dist,
            retry: None,
            watchdog: false,
            extends: 0,
            batch: 1,
            rate: None,
            t0: Instant::now(),
            cycles: None,
            key_dist: KeyDist::Uniform,
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
