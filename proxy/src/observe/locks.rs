//! What `observe` knows about the locks it saw: per key pattern, the counts and latency
//! histograms of acquires and releases, and the locks held now (to time their hold).

use std::time::{Duration, Instant};

use fnv::FnvHashMap;
use hdrhistogram::Histogram;
use lockkit_report::stats::{new_histogram, LatencySummary};
use lockkit_report::ttl::recommend_observed;

use lockkit_report::observe::{LockPatternReport, TtlRange};

use super::pattern::fold_key;
use super::scripts::ScriptKind;

/// The pattern that collects keys past `MAX_PATTERNS` (1,000).
pub const OTHER_PATTERN: &str = "{other}";

/// Distinct patterns kept; keys of further patterns count under [`OTHER_PATTERN`].
const MAX_PATTERNS: usize = 1_000;
/// Held locks remembered at most; the oldest are forgotten past this.
const MAX_HELD: usize = 1_000_000;
/// A lock with no TTL that nobody released is forgotten after this.
const FORGET_UNTIMED: Duration = Duration::from_secs(3600);

#[derive(Debug, Default)]
pub(super) struct ObserveState {
    patterns: Vec<PatternStats>,
    index: FnvHashMap<String, usize>,
    pub(super) held: FnvHashMap<Vec<u8>, HeldLock>,
    pub(super) scripts: FnvHashMap<String, ScriptKind>,
    /// Told of each hold timed (pattern, hold): the metrics' `lockkit_proxy_lock_hold_seconds`,
    /// set by `Observe::new` (this file stays below the metrics).
    pub(super) on_hold: Option<fn(&str, Duration)>,
}

#[derive(Debug)]
pub(super) struct HeldLock {
    pub(super) token: Vec<u8>,
    pattern: usize,
    since: Instant,
    ttl: Option<Duration>,
}

#[derive(Debug)]
struct PatternStats {
    pattern: String,
    acquired: u64,
    contended: u64,
    released: u64,
    released_not_held: u64,
    expired_unreleased: u64,
    hold: Histogram<u64>,
    acquire: Histogram<u64>,
    release: Histogram<u64>,
    ttl_min_ms: Option<u64>,
    ttl_max_ms: Option<u64>,
}

impl PatternStats {
    fn new(pattern: String) -> Self {
        PatternStats {
            pattern,
            acquired: 0,
            contended: 0,
            released: 0,
            released_not_held: 0,
            expired_unreleased: 0,
            hold: new_histogram(),
            acquire: new_histogram(),
            release: new_histogram(),
            ttl_min_ms: None,
            ttl_max_ms: None,
        }
    }
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

impl ObserveState {
    /// Empty; `on_hold` told of each hold timed.
    pub(super) fn new(on_hold: fn(&str, Duration)) -> Self {
        ObserveState {
            on_hold: Some(on_hold),
            ..ObserveState::default()
        }
    }

    pub(super) fn pattern_of(&mut self, key: &[u8]) -> usize {
        let mut p = fold_key(key);
        if !self.index.contains_key(&p) && self.patterns.len() >= MAX_PATTERNS {
            p = OTHER_PATTERN.to_string();
        }
        if let Some(&i) = self.index.get(&p) {
            return i;
        }
        self.patterns.push(PatternStats::new(p.clone()));
        self.index.insert(p, self.patterns.len() - 1);
        self.patterns.len() - 1
    }

    pub(super) fn acquired(
        &mut self,
        key: &[u8],
        token: &[u8],
        ttl: Option<Duration>,
        latency: Duration,
    ) {
        let i = self.pattern_of(key);
        let s = &mut self.patterns[i];
        s.acquired += 1;
        let _ = s.acquire.record(micros(latency));
        if let Some(ttl) = ttl {
            let ms = ttl.as_millis() as u64;
            s.ttl_min_ms = Some(s.ttl_min_ms.map_or(ms, |m| m.min(ms)));
            s.ttl_max_ms = Some(s.ttl_max_ms.map_or(ms, |m| m.max(ms)));
        }
        if self.held.len() >= MAX_HELD {
            self.forget_expired(Instant::now());
        }
        if self.held.len() < MAX_HELD {
            self.held.insert(
                key.to_vec(),
                HeldLock {
                    token: token.to_vec(),
                    pattern: i,
                    since: Instant::now(),
                    ttl,
                },
            );
        }
    }

    pub(super) fn contended(&mut self, key: &[u8], latency: Duration) {
        let i = self.pattern_of(key);
        self.patterns[i].contended += 1;
        let _ = self.patterns[i].acquire.record(micros(latency));
    }

    /// A release of `key` sent `latency` ago; `held` says whether it found the lock. `token`:
    /// the releaser's token when the command carries one.
    pub(super) fn released(
        &mut self,
        key: &[u8],
        token: Option<&[u8]>,
        found: bool,
        latency: Duration,
    ) {
        let sent = Instant::now()
            .checked_sub(latency)
            .unwrap_or_else(Instant::now);
        let mine = match self.held.get(key) {
            Some(h) => token.is_none_or(|t| t == h.token.as_slice()),
            None => false,
        };
        let i = match (mine, self.held.get(key)) {
            (true, Some(h)) => h.pattern,
            _ => self.pattern_of(key),
        };
        if mine {
            if let Some(h) = self.held.remove(key) {
                let hold = sent.saturating_duration_since(h.since);
                let _ = self.patterns[i].hold.record(micros(hold));
                if let Some(on_hold) = self.on_hold {
                    on_hold(&self.patterns[i].pattern, hold);
                }
            }
        }
        let s = &mut self.patterns[i];
        let _ = s.release.record(micros(latency));
        if found {
            s.released += 1;
        } else {
            s.released_not_held += 1;
        }
    }

    /// Forgets locks whose TTL is long past (expired and never released).
    pub(super) fn forget_expired(&mut self, now: Instant) {
        let patterns = &mut self.patterns;
        self.held.retain(|_, h| {
            let limit = h
                .ttl
                .map_or(FORGET_UNTIMED, |t| t * 2 + Duration::from_secs(10));
            let keep = now.saturating_duration_since(h.since) < limit;
            if !keep {
                patterns[h.pattern].expired_unreleased += 1;
            }
            keep
        });
    }

    /// Every pattern seen so far, in first-seen order.
    pub(super) fn report(&self) -> Vec<LockPatternReport> {
        self.patterns
            .iter()
            .map(|p| {
                let hold_us = LatencySummary::of(&p.hold);
                let acquire_us = LatencySummary::of(&p.acquire);
                let release_us = LatencySummary::of(&p.release);
                let recommended_ttl_ms = (hold_us.count > 0).then(|| {
                    let r = recommend_observed(
                        Duration::from_micros(hold_us.p99),
                        &acquire_us,
                        &release_us,
                        "observed hold p99",
                        Duration::from_millis(50),
                        2.0,
                    );
                    r.ttl.as_millis() as u64
                });
                LockPatternReport {
                    pattern: p.pattern.clone(),
                    acquired: p.acquired,
                    contended: p.contended,
                    released: p.released,
                    released_not_held: p.released_not_held,
                    expired_unreleased: p.expired_unreleased,
                    hold_us,
                    ttl_ms: TtlRange {
                        min: p.ttl_min_ms,
                        max: p.ttl_max_ms,
                    },
                    acquire_us,
                    release_us,
                    recommended_ttl_ms,
                }
            })
            .collect()
    }
}
