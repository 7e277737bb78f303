//! The faults of a run as reports tell them: the network faults (delay with jitter, dropped
//! connections, blackhole windows) with one syntax and one parser for both places they are asked
//! for, `lockkit proxy --plugin faults:ARGS` and `lockkit bench --faults LIST`, what they did
//! ([`NetworkFaultCounts`]), and `faults` of the bench report ([`FaultsReport`], [`FaultEvent`]).
//! One implementation injects the network faults, the proxy's `faults` plugin
//! (`lockkit_proxy::faults`); `lockkit bench` reaches it through
//! `lockkit_loadgen::faults::network::NetworkFaultInjector`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::parse_duration;

/// The network fault entries, by name.
pub const NAMES: [&str; 3] = ["delay", "drop", "blackhole"];

/// The network faults, as parsed from `delay=5ms~2ms,drop=1%,blackhole=300ms/5s,seed=7`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultsOptions {
    /// Added to every command's way to the server.
    pub delay: Duration,
    /// The delay varies uniformly by up to this much either way (at most `delay`).
    pub jitter: Duration,
    /// The share of commands whose connection is cut, 0 to 1.
    pub drop: f64,
    /// `(how long, once per)`: the blackhole windows.
    pub blackhole: Option<(Duration, Duration)>,
    /// The seed of every decision.
    pub seed: u64,
}

const EXAMPLE: &str = "e.g. faults:delay=5ms~2ms,drop=1%,blackhole=300ms/5s,seed=7";

impl FaultsOptions {
    /// Parses the text after `faults:` (the proxy's plugin arguments).
    ///
    /// # Errors
    /// An unknown entry, a value that does not parse or makes no sense (a jitter larger than
    /// its delay, a drop over 100 %, a blackhole as long as its period), or no fault at all.
    ///
    /// ```
    /// use lockkit_report::faults::FaultsOptions;
    /// use std::time::Duration;
    /// let o = FaultsOptions::parse("delay=5ms~2ms,drop=1%,blackhole=300ms/5s,seed=7").unwrap();
    /// assert_eq!(o.delay, Duration::from_millis(5));
    /// assert_eq!(o.jitter, Duration::from_millis(2));
    /// assert_eq!(o.drop, 0.01);
    /// assert_eq!(o.blackhole, Some((Duration::from_millis(300), Duration::from_secs(5))));
    /// assert_eq!(o.seed, 7);
    /// assert!(FaultsOptions::parse("drop=150%").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<FaultsOptions, String> {
        let mut o = FaultsOptions {
            seed: clock_seed(),
            ..FaultsOptions::default()
        };
        let mut seen: Vec<&str> = Vec::new();
        for entry in text.split(',').map(str::trim) {
            let Some((key, value)) = entry.split_once('=') else {
                return Err(format!(
                    "`{entry}` is not KEY=VALUE (delay, drop, blackhole, seed); {EXAMPLE}"
                ));
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(format!("`{key}` is given twice; {EXAMPLE}"));
            }
            seen.push(key);
            if key == "seed" {
                o.seed = value
                    .parse()
                    .map_err(|_| format!("seed={value}: a whole number, e.g. seed=7"))?;
            } else if !o.set(key, value)? {
                return Err(format!(
                    "unknown entry `{key}`: the faults are delay, drop and blackhole (and seed); {EXAMPLE}"
                ));
            }
        }
        if o.is_empty() {
            return Err(format!("no fault given; {EXAMPLE}"));
        }
        Ok(o)
    }

    /// Sets the fault `key` (`delay`, `drop` or `blackhole`) from its value; `Ok(false)` for
    /// another key.
    ///
    /// # Errors
    /// A value that does not parse or makes no sense, with an example of one that does.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        match key {
            "delay" => {
                let (d, j) = value.split_once('~').unwrap_or((value, "0ms"));
                self.delay = parse_duration(d.trim()).map_err(|e| format!("delay: {e}"))?;
                self.jitter = parse_duration(j.trim()).map_err(|e| format!("delay jitter: {e}"))?;
                if self.jitter > self.delay {
                    return Err(format!(
                        "delay={value}: the jitter must not exceed the delay (a command cannot arrive before it was sent), e.g. delay=5ms~2ms"
                    ));
                }
            }
            "drop" => {
                let pct = value
                    .strip_suffix('%')
                    .ok_or_else(|| format!("drop={value}: give a percentage, e.g. drop=1%"))?;
                let p: f64 = pct
                    .trim()
                    .parse()
                    .map_err(|_| format!("drop={value}: `{pct}` is not a number, e.g. drop=1%"))?;
                if !(0.0..=100.0).contains(&p) {
                    return Err(format!("drop={value}: a percentage from 0 to 100"));
                }
                self.drop = p / 100.0;
            }
            "blackhole" => {
                let (d, every) = value.split_once('/').ok_or_else(|| {
                    format!("blackhole={value}: give DURATION/EVERY, e.g. blackhole=300ms/5s")
                })?;
                let d = parse_duration(d.trim()).map_err(|e| format!("blackhole: {e}"))?;
                let every = parse_duration(every.trim()).map_err(|e| format!("blackhole: {e}"))?;
                if d.is_zero() || d >= every {
                    return Err(format!(
                        "blackhole={value}: the window must be longer than zero and shorter than its period, e.g. blackhole=300ms/5s"
                    ));
                }
                self.blackhole = Some((d, every));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Whether no fault is set (the seed aside).
    pub fn is_empty(&self) -> bool {
        self.delay.is_zero() && self.drop == 0.0 && self.blackhole.is_none()
    }

    /// The fault entries without the seed, as `--faults` takes them (`delay=5ms~2ms,drop=1%`).
    pub fn entries(&self) -> String {
        let mut out = Vec::new();
        if !self.delay.is_zero() {
            if self.jitter.is_zero() {
                out.push(format!("delay={}", exact(self.delay)));
            } else {
                out.push(format!(
                    "delay={}~{}",
                    exact(self.delay),
                    exact(self.jitter)
                ));
            }
        }
        if self.drop > 0.0 {
            out.push(format!("drop={}%", self.drop * 100.0));
        }
        if let Some((d, every)) = self.blackhole {
            out.push(format!("blackhole={}/{}", exact(d), exact(every)));
        }
        out.join(",")
    }
}

impl fmt::Display for FaultsOptions {
    /// The arguments that reproduce these options, seed included.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.entries();
        if !entries.is_empty() {
            write!(f, "{entries},")?;
        }
        write!(f, "seed={}", self.seed)
    }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the network faults did in one run, summed over the nodes: `faults.network` in the
/// report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkFaultCounts {
    /// Commands that went through the faults.
    pub commands: u64,
    /// Commands held back by `delay`.
    pub delayed: u64,
    /// Connections cut before the command reached the server.
    pub dropped_before_send: u64,
    /// Connections cut after the server ran the command, its reply lost.
    pub dropped_reply_lost: u64,
    /// Commands held by a blackhole window.
    pub blackholed: u64,
}

/// A duration the way `--faults` takes it, exactly: `2s`, `300ms`, `1500us`.
pub fn exact(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

/// One fault as it happened: `faults.events[]` in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultEvent {
    /// When it began, seconds from the start of the measurement.
    pub t_s: f64,
    /// `server-pause`, `holder-pause`, `kill-connections`, `restart` or `blackhole`.
    pub kind: String,
    /// How long it lasted (0 for a kill; a restart's time until the server answered again).
    pub duration_ms: u64,
    /// The server it hit (`host:port`); `null` for a holder pause.
    pub node: Option<String>,
}

/// `faults` in the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultsReport {
    /// The seed the schedule was drawn from (`--seed`, or the one picked for this run).
    #[serde(default)]
    pub seed: u64,
    /// The `--faults` list.
    #[serde(default)]
    pub schedule: String,
    /// What happened, in time order.
    pub events: Vec<FaultEvent>,
    /// What the network faults did (with `delay`, `drop` or `blackhole` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkFaultCounts>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        for (text, says) in [
            ("", "not KEY=VALUE"),
            ("delay", "not KEY=VALUE"),
            ("latency=5ms", "unknown entry `latency`"),
            ("delay=5ms~6ms", "must not exceed"),
            ("delay=fast", "delay:"),
            ("drop=1", "percentage"),
            ("drop=x%", "not a number"),
            ("drop=101%", "from 0 to 100"),
            ("blackhole=300ms", "DURATION/EVERY"),
            ("blackhole=5s/5s", "shorter than its period"),
            ("seed=-1,delay=1ms", "whole number"),
            ("seed=3", "no fault given"),
            ("drop=1%,drop=2%", "given twice"),
        ] {
            let e = FaultsOptions::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn the_printed_options_parse_back_to_the_same_options() {
        let o = FaultsOptions::parse("delay=5ms~2ms,drop=0.5%,blackhole=300ms/5s,seed=42").unwrap();
        assert_eq!(
            o.to_string(),
            "delay=5ms~2ms,drop=0.5%,blackhole=300ms/5s,seed=42"
        );
        assert_eq!(FaultsOptions::parse(&o.to_string()).unwrap(), o);
        let o = FaultsOptions::parse("drop=1%,delay=1500us").unwrap();
        assert_eq!(o.entries(), "delay=1500us,drop=1%");
        assert_eq!(FaultsOptions::parse(&o.to_string()).unwrap(), o);
    }
}
