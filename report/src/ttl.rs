//! TTL sizing from measured timings.
//!
//! # The formula
//! ```text
//! needed   = safety × (W + A + R + P)
//! TTL      = ceil_ms((needed + 2 ms) / 0.99)        so that TTL − drift ≥ needed,
//!                                                    drift = 0.01 × TTL + 2 ms (Redlock's)
//! watchdog = floor_ms(TTL / 3)
//! retry    = delay  max(1 ms, ceil_ms(2 × A99)),  jitter  max(1 ms, ceil_ms(A99))
//! ```
//! - `W`: the guarded work's time at the chosen quantile (p99 by default; p99.9 or max on request),
//!   from `--work-p99`, a work-timings file, or the benchmark's own hold time;
//! - `A`, `R`: the measured acquire (`acquire_ok`) and `release` p99.9;
//! - `P`: the pause budget (GC, swap, a stopped VM; default 50 ms);
//! - `safety`: default 2;
//! - `A99`: the measured acquire p99.
//!
//! The lock's validity (TTL − drift) then covers `safety` times the worst expected critical
//! section, and a watchdog renewing every TTL/3 has two more tries before the key expires.
//!
//! ```
//! use std::time::Duration;
//! use lockkit_report::ttl::{recommend, TtlInputs};
//!
//! let ms = Duration::from_millis;
//! let r = recommend(&TtlInputs::new(ms(100), ms(1), ms(1), ms(1)));
//! // 2 × (100 + 1 + 1 + 50) = 304 ms; (304 + 2) / 0.99 = 309.09 → 310 ms.
//! assert_eq!(r.ttl, ms(310));
//! assert_eq!(r.watchdog_interval, ms(103));
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::stats::LatencySummary;

/// Redlock's drift allowance: 1% of the TTL ...
pub const DRIFT_FACTOR: f64 = 0.01;
/// ... plus 2 ms.
pub const DRIFT_FIXED: Duration = Duration::from_millis(2);

/// What the recommendation is computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct TtlInputs {
    /// The guarded work's time at the chosen quantile.
    pub work: Duration,
    /// Which quantile `work` is ("p99", "p99.9", "max", "configured hold", ...), for the text.
    pub work_basis: String,
    /// Acquire latency p99.9.
    pub acquire_p999: Duration,
    /// Release latency p99.9.
    pub release_p999: Duration,
    /// Acquire latency p99 (for the retry delay).
    pub acquire_p99: Duration,
    /// Allowance for process pauses.
    pub pause_budget: Duration,
    /// Multiplier over the sum.
    pub safety_factor: f64,
}

impl TtlInputs {
    /// Inputs with the default pause budget (50 ms) and safety factor (2); `acquire_p99` is
    /// used for the retry delay, `acquire_p999` and `release_p999` for the TTL.
    pub fn new(
        work: Duration,
        acquire_p99: Duration,
        acquire_p999: Duration,
        release_p999: Duration,
    ) -> Self {
        TtlInputs {
            work,
            work_basis: "work p99".into(),
            acquire_p999,
            release_p999,
            acquire_p99,
            pause_budget: Duration::from_millis(50),
            safety_factor: 2.0,
        }
    }
}

/// The retry policy part of a recommendation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryRecommendation {
    /// Fixed pause between attempts, ms.
    pub delay_ms: u64,
    /// Random extra pause, ms.
    pub jitter_ms: u64,
}

/// A TTL recommendation with its reasoning.
#[derive(Debug, Clone, PartialEq)]
pub struct TtlRecommendation {
    /// The TTL to use.
    pub ttl: Duration,
    /// How often a watchdog should renew.
    pub watchdog_interval: Duration,
    /// Retry delay and jitter.
    pub retry: RetryRecommendation,
    /// What the critical section must fit in: `safety × (W + A + R + P)`.
    pub needed: Duration,
    /// The drift allowance at this TTL.
    pub drift: Duration,
    /// The formula with the numbers filled in.
    pub basis: String,
}

/// The JSON form (the `ttl` object of the report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TtlReport {
    /// The TTL to use, ms.
    pub recommended_ms: u64,
    /// Watchdog renewal interval, ms.
    pub watchdog_interval_ms: u64,
    /// Retry policy.
    pub retry: RetryRecommendation,
    /// The formula with the numbers filled in.
    pub basis: String,
}

impl From<&TtlRecommendation> for TtlReport {
    fn from(r: &TtlRecommendation) -> Self {
        TtlReport {
            recommended_ms: ms_ceil(r.ttl),
            watchdog_interval_ms: ms_floor(r.watchdog_interval),
            retry: r.retry,
            basis: r.basis.clone(),
        }
    }
}

fn ms_ceil(d: Duration) -> u64 {
    let ns = d.as_nanos();
    ns.div_ceil(1_000_000).min(u128::from(u64::MAX)) as u64
}

fn ms_floor(d: Duration) -> u64 {
    (d.as_nanos() / 1_000_000).min(u128::from(u64::MAX)) as u64
}

fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Applies the formula of this module's documentation.
pub fn recommend(i: &TtlInputs) -> TtlRecommendation {
    let sum = i.work + i.acquire_p999 + i.release_p999 + i.pause_budget;
    let needed = sum.mul_f64(i.safety_factor.max(1.0));
    let raw_ns = (needed + DRIFT_FIXED).as_nanos() as f64 / (1.0 - DRIFT_FACTOR);
    // Round the nanoseconds first so float noise (309.0000001 ms) does not add a millisecond.
    let ttl_ms = ((raw_ns.round() as u128).div_ceil(1_000_000) as u64).max(3);
    let ttl = Duration::from_millis(ttl_ms);
    let watchdog_interval = Duration::from_millis(ttl_ms / 3);
    let drift = ttl.mul_f64(DRIFT_FACTOR) + DRIFT_FIXED;
    let delay_ms = ms_ceil(i.acquire_p99 * 2).max(1);
    let jitter_ms = ms_ceil(i.acquire_p99).max(1);
    let basis = format!(
        "TTL = ceil_ms((safety x (W + A + R + P) + 2 ms) / 0.99) = ceil_ms(({s} x ({w:.3} + {a:.3} + {r:.3} + {p:.3}) + 2) / 0.99) ms \
         = {ttl_ms} ms, where W = {basis} {w:.3} ms, A = acquire p99.9, R = release p99.9, P = pause budget; \
         validity TTL - drift ({drift:.3} ms) covers {needed:.3} ms; watchdog every TTL/3 = {wd} ms; \
         retry delay 2 x acquire p99 ({a99:.3} ms) = {delay_ms} ms, jitter {jitter_ms} ms",
        s = i.safety_factor.max(1.0),
        w = ms_f(i.work),
        a = ms_f(i.acquire_p999),
        r = ms_f(i.release_p999),
        p = ms_f(i.pause_budget),
        basis = i.work_basis,
        drift = ms_f(drift),
        needed = ms_f(needed),
        wd = ttl_ms / 3,
        a99 = ms_f(i.acquire_p99),
    );
    TtlRecommendation {
        ttl,
        watchdog_interval,
        retry: RetryRecommendation {
            delay_ms,
            jitter_ms,
        },
        needed,
        drift,
        basis,
    }
}

/// The recommendation for measured latencies (`latency_us` of a report) and a work time.
pub fn recommend_from_latency(
    latency: &BTreeMap<String, LatencySummary>,
    work: Duration,
    work_basis: &str,
    pause_budget: Duration,
    safety_factor: f64,
) -> TtlRecommendation {
    let none = LatencySummary::default();
    recommend_observed(
        work,
        latency.get("acquire_ok").unwrap_or(&none),
        latency.get("release").unwrap_or(&none),
        work_basis,
        pause_budget,
        safety_factor,
    )
}

/// The recommendation for a work time and measured acquire and release latencies: a bench
/// report's, or a lock's whose hold time and round trips `lockkit proxy --plugin observe` saw.
pub fn recommend_observed(
    work: Duration,
    acquire: &LatencySummary,
    release: &LatencySummary,
    work_basis: &str,
    pause_budget: Duration,
    safety_factor: f64,
) -> TtlRecommendation {
    let us = Duration::from_micros;
    recommend(&TtlInputs {
        work,
        work_basis: work_basis.to_string(),
        acquire_p999: us(acquire.p999),
        release_p999: us(release.p999),
        acquire_p99: us(acquire.p99),
        pause_budget,
        safety_factor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn hand_computed_case() {
        // 2 × (100 + 1 + 1 + 50) = 304; (304 + 2) / 0.99 = 309.09 → 310 ms; 310 / 3 = 103.
        let r = recommend(&TtlInputs::new(ms(100), ms(1), ms(1), ms(1)));
        assert_eq!(r.ttl, ms(310));
        assert_eq!(r.watchdog_interval, ms(103));
        assert_eq!(
            r.retry,
            RetryRecommendation {
                delay_ms: 2,
                jitter_ms: 1
            }
        );
        assert_eq!(r.needed, ms(304));
        assert!(r.ttl - r.drift >= r.needed);
        assert!(r.basis.contains("= 310 ms"), "{}", r.basis);
    }

    #[test]
    fn exact_multiples_do_not_round_up_a_millisecond() {
        // safety 1, W = 97 ms, rest 0: (97 + 2) / 0.99 = 100 exactly.
        let mut i = TtlInputs::new(ms(97), ms(0), ms(0), ms(0));
        i.pause_budget = ms(0);
        i.safety_factor = 1.0;
        assert_eq!(recommend(&i).ttl, ms(100));
    }

    #[test]
    fn validity_always_covers_the_need() {
        for w in [0u64, 1, 7, 150, 5_000, 60_000] {
            let r = recommend(&TtlInputs::new(ms(w), ms(3), ms(9), ms(4)));
            assert!(r.ttl - r.drift >= r.needed, "{w}: {r:?}");
            assert!(r.watchdog_interval < r.ttl);
        }
    }

    #[test]
    fn retry_uses_measured_acquire_latency() {
        let r = recommend(&TtlInputs::new(
            ms(10),
            Duration::from_micros(2_500),
            ms(4),
            ms(1),
        ));
        assert_eq!(
            r.retry,
            RetryRecommendation {
                delay_ms: 5,
                jitter_ms: 3
            }
        );
    }
}
