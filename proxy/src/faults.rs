//! The built-in `faults` plugin: network faults between the application and its Redis,
//! seeded so that a run repeats.
//!
//! `--plugin faults:delay=5ms~2ms,drop=1%,blackhole=300ms/5s,seed=7`, any of the entries:
//! - `delay=D[~J]`: every command reaches the server `D` later, give or take up to `J`
//!   (uniform); commands read together (a pipeline) are held to their own instants, not one
//!   after the other, and never overtake each other, as on one TCP connection;
//! - `drop=P%`: each command, with probability `P`, cuts its connection. Half of the cuts come
//!   before the command reaches the server (it never runs), half after the server ran it and
//!   before its reply reaches the client (it ran, the client cannot know): the two cases a
//!   lock client must survive. Closing is what a lost packet becomes to a client on TCP; a
//!   reply silently left out would shift every later reply onto the wrong command;
//! - `blackhole=D/EVERY`: once per `EVERY`, at a seeded moment inside it, nothing passes for
//!   `D`: commands sent in that window are held until it ends (TCP delivers them once the
//!   network heals), so none is answered inside it;
//! - `seed=N`: the seed (default: drawn from the clock, and written in the report).
//!
//! Each decision is a function of the seed, the connection's number and the command's number
//! on it (and the blackhole windows of the seed and the time since the proxy started), so the
//! same seed and the same traffic hit the same commands.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockkit_report::faults::NetworkFaultCounts;
use serde::{Deserialize, Serialize};

use crate::plugin::{Action, ConnInfo, Plugin, PluginCommand, ReportCtx};

/// What `faults` does, as parsed from its arguments: the very type (and parser) behind
/// `lockkit bench --faults delay=...,drop=...,blackhole=...`.
pub use lockkit_report::faults::FaultsOptions;

/// The schema name of the report.
pub const SCHEMA: &str = "lockkit.faults/1";

/// SplitMix64's finaliser: a well-mixed 64-bit value from a few words.
pub fn mix(words: &[u64]) -> u64 {
    let mut z: u64 = 0x9E37_79B9_7F4A_7C15;
    for &w in words {
        z = (z ^ w).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
    }
    z
}

/// A value in [0, 1) from a mixed word.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Which decision a mixed word is for.
const DROP: u64 = 1;
const SIDE: u64 = 2;
const JITTER: u64 = 3;
const WINDOW: u64 = 4;

/// The `faults` plugin.
#[derive(Debug)]
pub struct Faults {
    options: FaultsOptions,
    started: Instant,
    commands: AtomicU64,
    delayed: AtomicU64,
    dropped_before: AtomicU64,
    dropped_after: AtomicU64,
    blackholed: AtomicU64,
    /// The last blackhole window (its number + 1) that held a command, and how many did.
    last_window: AtomicU64,
    windows_hit: AtomicU64,
}

/// What `faults` writes: `faults-<date>.json`, schema `lockkit.faults/1` (its counts are the
/// ones a bench report has as `faults.network`, [`lockkit_report::faults::FaultsReport`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FaultsPluginReport {
    /// `lockkit.faults/1`.
    pub schema: String,
    /// The upstream URL, password hidden.
    pub target: String,
    /// How long the proxy ran, seconds.
    pub duration_s: f64,
    /// The plugin's arguments in full, seed included: `--plugin faults:<this>` repeats the run.
    pub config: String,
    /// The seed.
    pub seed: u64,
    /// What the faults did: `commands`, `delayed`, `dropped_before_send`, `dropped_reply_lost`
    /// and `blackholed`, at the top level of the JSON.
    #[serde(flatten)]
    pub counts: NetworkFaultCounts,
    /// Blackhole windows that held at least one command.
    pub blackhole_windows_hit: u64,
    /// Blackhole windows that began while the proxy ran.
    pub blackhole_windows: u64,
}

impl Faults {
    /// A `faults` plugin with these options; blackhole windows count from now.
    pub fn new(options: FaultsOptions) -> Faults {
        Faults::starting_at(options, Instant::now())
    }

    /// A `faults` plugin whose blackhole windows count from `started`.
    pub fn starting_at(options: FaultsOptions, started: Instant) -> Faults {
        Faults {
            options,
            started,
            commands: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            dropped_before: AtomicU64::new(0),
            dropped_after: AtomicU64::new(0),
            blackholed: AtomicU64::new(0),
            last_window: AtomicU64::new(0),
            windows_hit: AtomicU64::new(0),
        }
    }

    /// Its options (with the seed it uses).
    pub fn options(&self) -> &FaultsOptions {
        &self.options
    }

    /// The blackhole window `k` (the `k`-th period since the start): its start and end.
    fn window(&self, k: u64, d: Duration, every: Duration) -> (Instant, Instant) {
        let slack = (every - d).as_micros() as u64;
        let offset = mix(&[self.options.seed, WINDOW, k]) % (slack + 1);
        let start = self.started
            + every.saturating_mul(u32::try_from(k).unwrap_or(u32::MAX))
            + Duration::from_micros(offset);
        (start, start + d)
    }

    /// Blackhole window number `k` (in the `k`-th period from the start): when it begins and
    /// ends; `None` without `blackhole`.
    pub fn blackhole_window(&self, k: u64) -> Option<(Instant, Instant)> {
        let (d, every) = self.options.blackhole?;
        Some(self.window(k, d, every))
    }

    /// What it did so far.
    pub fn counts(&self) -> NetworkFaultCounts {
        NetworkFaultCounts {
            commands: self.commands.load(Ordering::Relaxed),
            delayed: self.delayed.load(Ordering::Relaxed),
            dropped_before_send: self.dropped_before.load(Ordering::Relaxed),
            dropped_reply_lost: self.dropped_after.load(Ordering::Relaxed),
            blackholed: self.blackholed.load(Ordering::Relaxed),
        }
    }

    /// The end of the blackhole window `at` falls in, if any; counts the window's first hit.
    fn blackhole_end(&self, at: Instant) -> Option<Instant> {
        let (d, every) = self.options.blackhole?;
        let since = at.checked_duration_since(self.started)?;
        let k = (since.as_nanos() / every.as_nanos()) as u64;
        let (start, end) = self.window(k, d, every);
        if at < start || at >= end {
            return None;
        }
        if self.last_window.fetch_max(k + 1, Ordering::Relaxed) < k + 1 {
            self.windows_hit.fetch_add(1, Ordering::Relaxed);
        }
        Some(end)
    }

    /// The report, typed.
    pub fn summary(&self, ctx: &ReportCtx) -> FaultsPluginReport {
        let windows = self.options.blackhole.map_or(0, |(d, every)| {
            let ran = ctx.duration;
            let periods = (ran.as_nanos() / every.as_nanos()) as u64;
            // The last, partial period counts when its window has begun.
            let (start, _) = self.window(periods, d, every);
            periods + u64::from(start <= self.started + ran)
        });
        let c = self.counts();
        FaultsPluginReport {
            schema: SCHEMA.to_string(),
            target: ctx.target.clone(),
            duration_s: ctx.duration.as_secs_f64(),
            config: self.options.to_string(),
            seed: self.options.seed,
            counts: c,
            blackhole_windows_hit: self.windows_hit.load(Ordering::Relaxed),
            blackhole_windows: windows,
        }
    }
}

impl Plugin for Faults {
    fn name(&self) -> &str {
        "faults"
    }

    fn commands(&self) -> Vec<String> {
        vec!["*".to_string()]
    }

    fn wants_reply(&self, _cmd: &PluginCommand<'_>) -> bool {
        false
    }

    fn on_command(&self, conn: &ConnInfo, cmd: &PluginCommand<'_>) -> Action {
        self.commands.fetch_add(1, Ordering::Relaxed);
        let o = &self.options;
        let (seed, id, n) = (o.seed, conn.id, cmd.index);
        if o.drop > 0.0 && unit(mix(&[seed, DROP, id, n])) < o.drop {
            return if mix(&[seed, SIDE, id, n]) & 1 == 0 {
                self.dropped_before.fetch_add(1, Ordering::Relaxed);
                Action::Close
            } else {
                self.dropped_after.fetch_add(1, Ordering::Relaxed);
                Action::LoseReply
            };
        }
        let mut until = None;
        if !o.delay.is_zero() {
            let spread = o.jitter.as_secs_f64() * (2.0 * unit(mix(&[seed, JITTER, id, n])) - 1.0);
            let d = Duration::from_secs_f64((o.delay.as_secs_f64() + spread).max(0.0));
            self.delayed.fetch_add(1, Ordering::Relaxed);
            until = Some(cmd.arrived + d);
        }
        if let Some(end) = self.blackhole_end(until.unwrap_or(cmd.arrived)) {
            self.blackholed.fetch_add(1, Ordering::Relaxed);
            until = Some(end);
        }
        until.map_or(Action::Pass, Action::Hold)
    }

    fn report(&self, ctx: &ReportCtx) -> Option<serde_json::Value> {
        serde_json::to_value(self.summary(ctx)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decisions(f: &Faults, conn: u64, n: u64) -> Vec<String> {
        let now = Instant::now();
        (1..=n)
            .map(|i| {
                let cmd = PluginCommand {
                    name: "GET",
                    args: &[],
                    key: None,
                    index: i,
                    arrived: now,
                };
                match f.on_command(
                    &ConnInfo {
                        id: conn,
                        peer: None,
                    },
                    &cmd,
                ) {
                    Action::Hold(t) => format!("hold {:?}", t - now),
                    other => format!("{other:?}"),
                }
            })
            .collect()
    }

    #[test]
    fn the_same_seed_hits_the_same_commands_and_another_seed_others() {
        let opts = FaultsOptions::parse("delay=5ms~2ms,drop=10%,seed=1").unwrap();
        let a = decisions(&Faults::new(opts), 3, 500);
        assert_eq!(a, decisions(&Faults::new(opts), 3, 500));
        let other = FaultsOptions { seed: 2, ..opts };
        assert_ne!(a, decisions(&Faults::new(other), 3, 500));
        let drops = a.iter().filter(|d| !d.starts_with("hold")).count();
        // 10 % of 500, give or take what a fair coin does (far outside: the mixing is broken).
        assert!((20..=80).contains(&drops), "{drops}");
        assert!(a.iter().any(|d| d == "Close") && a.iter().any(|d| d == "LoseReply"));
        for d in a.iter().filter(|d| d.starts_with("hold")) {
            let us: f64 = d
                .trim_start_matches("hold ")
                .trim_end_matches("ms")
                .parse()
                .unwrap_or_else(|_| panic!("{d}"));
            assert!((3.0..=7.0).contains(&us), "{d}");
        }
    }

    #[test]
    fn windows_lie_inside_their_periods() {
        let f = Faults::new(FaultsOptions::parse("blackhole=300ms/1s,seed=9").unwrap());
        for k in 0..100 {
            let (start, end) = f.window(k, Duration::from_millis(300), Duration::from_secs(1));
            let period = f.started + Duration::from_secs(k);
            assert!(start >= period && end <= period + Duration::from_secs(1));
            assert_eq!(end - start, Duration::from_millis(300));
        }
    }
}
