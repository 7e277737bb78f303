//! The fault schedule of `lockkit bench --faults LIST`: what each entry means, when its events
//! fire (seeded by `--seed`), and the log of what really happened (`faults.events` in the report
//! and one line each on the terminal).
//!
//! Entries, comma-separated:
//! - `server-pause=DURATION/EVERY`: SIGSTOP one throwaway server for DURATION, then SIGCONT;
//! - `holder-pause=DURATION/EVERY`: one holder stops inside its critical section for DURATION,
//!   its renewals held back too, as in a GC or VM pause of its process;
//! - `kill-connections/EVERY`: `CLIENT KILL TYPE normal` on one node of the target;
//! - `restart/EVERY`: one throwaway server is killed and started again, empty;
//! - the network faults ([`network`]), carried out by the proxy's `faults` plugin standing
//!   in-process between the load generator and each node: `delay=D[~J]` (every command),
//!   `drop=P%` (connections cut), `blackhole=DURATION/EVERY` (nothing passes for DURATION once
//!   per EVERY; each window is an event).
//!
//! Every EVERY, one event fires at a seeded random moment chosen so that it ends before the next
//! period begins: the schedule is the same for the same `--seed`, and two events of one kind
//! never overlap.

mod inject;
pub mod network;

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use lockkit_report::faults::{exact, FaultEvent, FaultsOptions};
use lockkit_report::units::{format_duration, parse_duration};

pub use inject::{run_schedule, FaultTargets, HolderPause};
pub use network::{NetworkFaultInjector, NetworkFaultPath};

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGSTOP/SIGCONT a throwaway server.
    ServerPause,
    /// A holder stops inside its critical section.
    HolderPause,
    /// `CLIENT KILL TYPE normal`.
    KillConnections,
    /// A throwaway server restarted empty.
    Restart,
    /// A blackhole window of the network faults (not scheduled here: the proxy's `faults`
    /// plugin draws the windows, and its way to the target records them).
    Blackhole,
}

impl FaultKind {
    const ALL: [FaultKind; 4] = [
        FaultKind::ServerPause,
        FaultKind::HolderPause,
        FaultKind::KillConnections,
        FaultKind::Restart,
    ];

    /// The name in `--faults` and in `faults.events[].kind`.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::ServerPause => "server-pause",
            FaultKind::HolderPause => "holder-pause",
            FaultKind::KillConnections => "kill-connections",
            FaultKind::Restart => "restart",
            FaultKind::Blackhole => "blackhole",
        }
    }

    /// Whether the entry takes `=DURATION`.
    fn has_duration(self) -> bool {
        matches!(self, FaultKind::ServerPause | FaultKind::HolderPause)
    }

    /// Whether it acts on the server processes, which only throwaway servers let lockkit do.
    pub fn needs_throwaway(self) -> bool {
        matches!(self, FaultKind::ServerPause | FaultKind::Restart)
    }
}

/// One `--faults` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultSpec {
    /// What it does.
    pub kind: FaultKind,
    /// How long a pause lasts (pauses only).
    pub duration: Option<Duration>,
    /// One event per this period.
    pub every: Duration,
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        if let Some(d) = self.duration {
            write!(f, "={}", exact(d))?;
        }
        write!(f, "/{}", exact(self.every))
    }
}

/// The parsed `--faults LIST`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FaultList {
    /// The entries on the schedule (pauses, kills, restarts), in the order given.
    pub scheduled: Vec<FaultSpec>,
    /// The network faults (`delay`, `drop`, `blackhole`), if any; their seed is the run's.
    pub network: Option<FaultsOptions>,
}

impl FaultList {
    /// Whether a scheduled entry of `kind` is in the list.
    pub fn has(&self, kind: FaultKind) -> bool {
        self.scheduled.iter().any(|s| s.kind == kind)
    }
}

impl fmt::Display for FaultList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.scheduled.iter().map(ToString::to_string).collect();
        if let Some(n) = &self.network {
            parts.push(n.entries());
        }
        f.write_str(&parts.join(","))
    }
}

impl Serialize for FaultList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

const EXAMPLE: &str =
    "e.g. --faults server-pause=300ms/2s,holder-pause=300ms/1s,kill-connections/2s,restart/5s,delay=5ms~2ms,drop=1%,blackhole=300ms/5s";

/// Parses `--faults`: comma-separated `KIND=DURATION/EVERY` (pauses, blackhole), `KIND/EVERY`,
/// `delay=D[~J]` or `drop=P%`.
pub fn parse_faults(s: &str) -> Result<FaultList, String> {
    let mut out: Vec<FaultSpec> = Vec::new();
    let mut network: Option<FaultsOptions> = None;
    let mut seen_network: Vec<&str> = Vec::new();
    for entry in s.split(',').map(str::trim) {
        if entry.is_empty() {
            return Err(format!("an empty entry in --faults {s:?}; {EXAMPLE}"));
        }
        let name = entry.split(['=', '/']).next().unwrap_or_default().trim();
        if name == "seed" {
            return Err(format!(
                "`{entry}`: the seed is --seed N, not a --faults entry"
            ));
        }
        if lockkit_report::faults::NAMES.contains(&name) {
            let value = entry
                .split_once('=')
                .map(|(_, v)| v.trim())
                .ok_or_else(|| format!("`{entry}`: {name} needs a value; {EXAMPLE}"))?;
            if seen_network.contains(&name) {
                return Err(format!("`{name}` is given twice in --faults"));
            }
            seen_network.push(name);
            network
                .get_or_insert_with(FaultsOptions::default)
                .set(name, value)
                .map_err(|e| format!("`{entry}`: {e}"))?;
            continue;
        }
        let (head, every) = entry
            .rsplit_once('/')
            .ok_or_else(|| format!("`{entry}` has no /EVERY (how often it happens); {EXAMPLE}"))?;
        let (name, duration) = match head.split_once('=') {
            Some((n, d)) => (n.trim(), Some(d.trim())),
            None => (head.trim(), None),
        };
        let kind = FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                format!(
                    "unknown fault `{name}`: the kinds are server-pause, holder-pause, kill-connections, restart, delay, drop and blackhole (the seed is --seed); {EXAMPLE}"
                )
            })?;
        let every = parse_duration(every.trim()).map_err(|e| format!("`{entry}`: {e}"))?;
        if every.is_zero() {
            return Err(format!("`{entry}`: EVERY must be greater than zero"));
        }
        let duration = match (kind.has_duration(), duration) {
            (true, Some(d)) => {
                let d = parse_duration(d).map_err(|e| format!("`{entry}`: {e}"))?;
                if d.is_zero() || d >= every {
                    return Err(format!(
                        "`{entry}`: the pause must be longer than zero and shorter than its period (one at a time), e.g. {}=300ms/2s",
                        kind.name()
                    ));
                }
                Some(d)
            }
            (true, None) => {
                return Err(format!(
                    "`{entry}`: {} needs a duration, e.g. {}=300ms/2s",
                    kind.name(),
                    kind.name()
                ))
            }
            (false, Some(_)) => {
                return Err(format!(
                    "`{entry}`: {} takes no duration, e.g. {}/2s",
                    kind.name(),
                    kind.name()
                ))
            }
            (false, None) => None,
        };
        if out.iter().any(|o| o.kind == kind) {
            return Err(format!("`{}` is given twice in --faults", kind.name()));
        }
        out.push(FaultSpec {
            kind,
            duration,
            every,
        });
    }
    Ok(FaultList {
        scheduled: out,
        network,
    })
}

/// When the events of one entry fire, as offsets from the start of the schedule: one per
/// period, at a seeded moment that leaves room for the whole event before the next period.
#[derive(Debug)]
pub struct Timetable {
    spec: FaultSpec,
    rng: SmallRng,
    period: u32,
}

impl Timetable {
    /// The timetable of entry number `index` under `seed`.
    pub fn new(spec: FaultSpec, seed: u64, index: usize) -> Self {
        Timetable {
            spec,
            rng: SmallRng::seed_from_u64(
                seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            period: 0,
        }
    }

    /// The next event's offset, and a random number for choosing its node.
    pub fn next_event(&mut self) -> (Duration, u64) {
        let every = self.spec.every;
        let room = every - self.spec.duration.unwrap_or(Duration::ZERO);
        let at = every * self.period + room.mul_f64(self.rng.random::<f64>());
        self.period = self.period.saturating_add(1);
        (at, self.rng.random())
    }
}

/// Prints one line on the terminal (around a progress bar, if one is drawn).
pub type LinePrinter = Box<dyn Fn(&str) + Send + Sync>;

/// The events of one run, printed on the terminal as they happen.
pub struct FaultLog {
    start: Instant,
    print: Option<LinePrinter>,
    events: Mutex<Vec<FaultEvent>>,
}

impl fmt::Debug for FaultLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultLog")
            .field("start", &self.start)
            .field("print", &self.print.is_some())
            .field("events", &self.events)
            .finish()
    }
}

impl FaultLog {
    /// A log whose times count from `start`; prints each event through `print` (none with
    /// `--quiet`).
    pub fn new(start: Instant, print: Option<LinePrinter>) -> Self {
        FaultLog {
            start,
            print,
            events: Mutex::new(Vec::new()),
        }
    }

    /// The moment event times count from.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Records a fault that began at `began` and lasted `lasted`.
    pub fn record(&self, kind: FaultKind, began: Instant, lasted: Duration, node: Option<String>) {
        let t_s =
            (began.saturating_duration_since(self.start).as_secs_f64() * 1000.0).round() / 1000.0;
        let event = FaultEvent {
            t_s,
            kind: kind.name().into(),
            duration_ms: lasted.as_millis() as u64,
            node,
        };
        if let Some(print) = &self.print {
            print(&format!(
                "  fault at {:>6.3}s: {} {}{}",
                event.t_s,
                event.kind,
                format_duration(lasted),
                event
                    .node
                    .as_deref()
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default()
            ));
        }
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }

    /// Prints a fault that could not be carried out (it is not an event).
    pub fn warn(&self, what: &str) {
        if let Some(print) = &self.print {
            print(&format!("  fault skipped: {what}"));
        }
    }

    /// The events so far, in time order.
    pub fn events(&self) -> Vec<FaultEvent> {
        let mut v = self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        v.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_design_examples_parse_and_print_back() {
        let list = "server-pause=300ms/2s,holder-pause=300ms/1s,kill-connections/2s,restart/5s";
        let f = parse_faults(list).unwrap();
        assert_eq!(f.scheduled.len(), 4);
        assert_eq!(f.network, None);
        assert_eq!(
            f.scheduled[0],
            FaultSpec {
                kind: FaultKind::ServerPause,
                duration: Some(ms(300)),
                every: ms(2000)
            }
        );
        assert_eq!(f.scheduled[2].duration, None);
        assert_eq!(f.to_string(), list);
        assert_eq!(parse_faults(&f.to_string()).unwrap(), f);
        assert_eq!(
            parse_faults("holder-pause=1.5s/2500ms")
                .unwrap()
                .to_string(),
            "holder-pause=1500ms/2500ms"
        );
        assert!(
            f.has(FaultKind::Restart)
                && !parse_faults("restart/1s")
                    .unwrap()
                    .has(FaultKind::HolderPause)
        );
    }

    #[test]
    fn bad_entries_say_what_to_write() {
        for (bad, says) in [
            ("", "empty entry"),
            ("server-pause=300ms", "no /EVERY"),
            ("gc-pause=1s/2s", "unknown fault"),
            ("server-pause/2s", "needs a duration"),
            ("restart=1s/5s", "takes no duration"),
            ("holder-pause=2s/1s", "shorter than its period"),
            ("holder-pause=0/1s", "longer than zero"),
            ("restart/0", "greater than zero"),
            ("restart/5x", "restart/5x"),
            ("restart/1s,restart/2s", "twice"),
            ("delay", "needs a value"),
            ("delay=5ms~9ms", "must not exceed"),
            ("drop=5", "percentage"),
            ("blackhole=1s", "DURATION/EVERY"),
            ("drop=1%,delay=1ms,drop=2%", "twice"),
            ("seed=7", "the seed is --seed"),
        ] {
            let e = parse_faults(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn network_kinds_mix_with_the_scheduled_ones_and_print_back() {
        let f =
            parse_faults("kill-connections/2s,delay=5ms~2ms,drop=1%,blackhole=300ms/5s").unwrap();
        assert_eq!(f.scheduled.len(), 1);
        let n = f.network.unwrap();
        assert_eq!((n.delay, n.jitter), (ms(5), ms(2)));
        assert_eq!(n.drop, 0.01);
        assert_eq!(n.blackhole, Some((ms(300), ms(5000))));
        assert_eq!(
            f.to_string(),
            "kill-connections/2s,delay=5ms~2ms,drop=1%,blackhole=300ms/5s"
        );
        assert_eq!(parse_faults(&f.to_string()).unwrap(), f);
        let only = parse_faults("blackhole=1s/2s").unwrap();
        assert!(only.scheduled.is_empty() && only.network.is_some());
    }

    #[test]
    fn one_event_per_period_ending_before_the_next_and_the_same_for_the_same_seed() {
        let spec = parse_faults("server-pause=700ms/1s").unwrap().scheduled[0];
        let draw = |seed| {
            let mut t = Timetable::new(spec, seed, 0);
            (0..50).map(|_| t.next_event()).collect::<Vec<_>>()
        };
        let a = draw(7);
        assert_eq!(a, draw(7));
        assert_ne!(a, draw(8));
        for (k, (at, _)) in a.iter().enumerate() {
            let period = ms(1000) * k as u32;
            assert!(
                *at >= period && *at + ms(700) <= period + ms(1000),
                "{k}: {at:?}"
            );
        }
        // Two entries under one seed do not share their draws.
        let mut other = Timetable::new(spec, 7, 1);
        assert_ne!(other.next_event(), a[0]);
    }
}
