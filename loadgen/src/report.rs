//! The report of a run: JSON (schema `lockkit.bench/1`), HdrHistogram interval logs, the
//! terminal summary, and atomic file writes.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2Serializer;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::stats::LatencySummary;
use crate::ttl::TtlReport;
use crate::units::{format_duration, format_rate};

/// The JSON schema name.
pub const SCHEMA: &str = "lockkit.bench/1";

/// The whole JSON report (every field of DESIGN.md, plus a few).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The run was stopped by Ctrl-C; the figures cover what ran.
    pub interrupted: bool,
    /// What was measured.
    pub target: TargetReport,
    /// Where it was measured from.
    pub machine: MachineReport,
    /// Every workload flag as used.
    pub config: serde_json::Value,
    /// Closed or open loop and how it kept its schedule.
    #[serde(rename = "loop")]
    pub load: LoopReport,
    /// Measured seconds (warm-up excluded).
    pub duration_s: f64,
    /// Cycles and attempts per second.
    pub throughput: Throughput,
    /// Failed acquire attempts / all acquire attempts.
    pub contention_rate: f64,
    /// Per operation, microseconds.
    pub latency_us: BTreeMap<String, LatencySummary>,
    /// Mutual-exclusion violations and lost locks.
    pub safety: Safety,
    /// Errors by kind.
    pub errors: ErrorsReport,
    /// The TTL recommendation from these timings.
    pub ttl: TtlReport,
    /// CPU of this tool and of the server per cycle.
    pub cpu: CpuReport,
    /// The server's own ceiling, when measured (`--ceiling`).
    pub ceiling: Option<Ceiling>,
    /// The interval log file of each operation (beside the JSON).
    pub histogram_logs: BTreeMap<String, String>,
}

/// `target`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetReport {
    /// URL with the password redacted.
    pub url: String,
    /// `redis_version`.
    pub server_version: String,
    /// standalone, cluster, redlock, proxy.
    pub mode: String,
    /// A throwaway server started by the tool.
    pub throwaway: bool,
    /// evalsha, eval or fcall.
    pub script_mode: String,
}

/// `machine`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MachineReport {
    /// Logical cores.
    pub cores: usize,
    /// OS name and kernel release.
    pub os: String,
    /// `lockkit-loadgen` version.
    pub tool_version: String,
    /// UTC, RFC 3339.
    pub date: String,
}

/// `loop`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoopReport {
    /// "closed" or "open".
    pub mode: String,
    /// Open loop: scheduled cycles per second.
    pub rate: Option<u64>,
    /// Open loop: cycles that started more than 1 ms late.
    pub late_starts: u64,
    /// How latencies are counted.
    pub latency_from: String,
}

/// `throughput`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Throughput {
    /// Successful acquire + hold + release per second.
    pub cycles_per_s: f64,
    /// Acquire attempts per second.
    pub attempts_per_s: f64,
    /// Successful cycles.
    pub cycles: u64,
    /// Attempts.
    pub attempts: u64,
}

/// `safety`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Safety {
    /// Two holders inside one key's critical section at once (exact, in this process).
    pub violations: u64,
    /// Releases/extends that found another token or no key; watchdog losses.
    pub lost_locks: u64,
    /// Holders told by their watchdog that the lock was lost (`--watchdog`; part of
    /// `lost_locks`).
    #[serde(default)]
    pub watchdog_lost: u64,
}

/// `errors`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorsReport {
    /// All errors.
    pub total: u64,
    /// By kind (timeout, connection_refused, server:CODE, acquire_timeout, ...).
    pub by_kind: BTreeMap<String, u64>,
    /// Faults the library recovered from without an error reaching the caller.
    #[serde(default)]
    pub recovered: Recovered,
}

/// `errors.recovered`: the library's recovery counters over the whole run (warm-up included);
/// `null` where the locker does not expose them (Redlock).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Recovered {
    /// Script calls that met `NOSCRIPT` (restart, `SCRIPT FLUSH`) and were re-sent with the
    /// script: one extra round trip each.
    pub noscript: Option<u64>,
    /// Acquires whose reply was lost (timeout, killed connection) and that ran a
    /// compare-and-delete so no ghost lock stays held.
    pub unknown_outcome_cleanups: Option<u64>,
}

/// `cpu`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CpuReport {
    /// This tool's CPU seconds while measuring.
    pub tool_cpu_s: Option<f64>,
    /// ... per successful cycle, microseconds.
    pub tool_us_per_cycle: Option<f64>,
    /// The server's CPU seconds while measuring (INFO cpu).
    pub server_cpu_s: Option<f64>,
    /// ... per successful cycle, microseconds.
    pub server_us_per_cycle: Option<f64>,
}

/// `ceiling`: `redis-benchmark -P 16` on the same server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ceiling {
    /// ops/s of `SET k v NX PX`.
    pub set_nx_px_ops: f64,
    /// ops/s of the release `EVALSHA`.
    pub release_evalsha_ops: f64,
    /// `1 / (1/a + 1/b)`: the cycles/s the server could do at best.
    pub ceiling_cycles_per_s: f64,
    /// This run's cycles/s over the ceiling.
    pub ratio: f64,
    /// The commands that measured it.
    pub commands: Vec<String>,
}

/// Writes `bytes` to `path` whole or not at all (temporary file in the same folder, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("renaming into {}", path.display()))?;
    Ok(())
}

/// Checks early that reports can be written to `dir` (creating it), so a bad `--out` fails
/// before the run, not after. Returns whether the folder was created (and can be removed again
/// if the run fails before writing anything).
pub fn check_writable(dir: &Path) -> anyhow::Result<bool> {
    let created = !dir.exists();
    let hint = || {
        format!(
            "cannot write reports to {}; pick a writable folder with --out DIR (or --json FILE)",
            dir.display()
        )
    };
    std::fs::create_dir_all(dir).with_context(hint)?;
    tempfile::NamedTempFile::new_in(dir).with_context(hint)?;
    Ok(created)
}

/// One operation's interval log: a sequence of (start offset, length, histogram), offsets
/// counted from the wall-clock moment measuring began.
#[derive(Debug)]
pub struct IntervalLog {
    start: SystemTime,
    entries: Vec<(Duration, Duration, Histogram<u64>)>,
}

impl IntervalLog {
    /// An empty log whose offsets count from `start`.
    pub fn starting(start: SystemTime) -> Self {
        IntervalLog {
            start,
            entries: Vec::new(),
        }
    }

    /// Adds an interval.
    pub fn push(&mut self, start: Duration, len: Duration, h: Histogram<u64>) {
        self.entries.push((start, len, h));
    }

    /// The log text (values in microseconds, tagged with the operation).
    pub fn render(&self, tag: &str) -> anyhow::Result<Vec<u8>> {
        let mut buf = Vec::new();
        let mut ser = V2Serializer::new();
        let mut w = IntervalLogWriterBuilder::new()
            .add_comment(&format!(
                "lockkit bench {}: {tag} latency in microseconds",
                env!("CARGO_PKG_VERSION")
            ))
            .with_start_time(self.start)
            .with_base_time(self.start)
            .begin_log_with(&mut buf, &mut ser)?;
        let t = Tag::new(tag);
        for (start, len, h) in &self.entries {
            w.write_histogram(h, *start, *len, t)
                .map_err(|e| anyhow::anyhow!("serializing a histogram: {e:?}"))?;
        }
        drop(w);
        Ok(buf)
    }
}

/// Today's date and time in UTC, RFC 3339, and a compact form for file names.
pub fn utc_now() -> (String, String) {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z"),
        format!("{y:04}{mo:02}{d:02}-{h:02}{m:02}{s:02}"),
    )
}

/// OS name and kernel release.
pub fn os_name() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let pretty = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    if release.is_empty() {
        pretty
    } else {
        format!("{pretty}, Linux {release}")
    }
}

/// Where the files of one run go: the JSON path and the stem the logs share.
pub fn paths(out: &Path, json: Option<&PathBuf>, stamp: &str, suffix: &str) -> (PathBuf, PathBuf) {
    let json = match json {
        Some(p) if suffix.is_empty() => p.clone(),
        Some(p) => {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("bench");
            p.with_file_name(format!("{stem}-{suffix}.json"))
        }
        None if suffix.is_empty() => out.join(format!("bench-{stamp}.json")),
        None => out.join(format!("bench-{stamp}-{suffix}.json")),
    };
    let stem = json.with_extension("");
    (json, stem)
}

fn us(v: u64) -> String {
    format_duration(Duration::from_micros(v))
}

/// The human summary of a report.
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    let interrupted = if r.interrupted {
        "  (INTERRUPTED: partial run)"
    } else {
        ""
    };
    s.push_str(&format!(
        "lockkit bench: {} ({} {}, {}), {} loop{}, {:.1}s measured{interrupted}\n",
        r.target.url,
        r.target.mode,
        r.target.server_version,
        r.target.script_mode,
        r.load.mode,
        r.load
            .rate
            .map(|x| format!(
                " at {}/s ({} late starts)",
                format_rate(x as f64),
                r.load.late_starts
            ))
            .unwrap_or_default(),
        r.duration_s,
    ));
    s.push_str(&format!(
        "  cycles/s {}   attempts/s {}   contention {:.2}%   errors {}   violations {}   lost locks {}\n",
        format_rate(r.throughput.cycles_per_s),
        format_rate(r.throughput.attempts_per_s),
        r.contention_rate * 100.0,
        r.errors.total,
        r.safety.violations,
        r.safety.lost_locks,
    ));
    s.push_str(&format!(
        "  {:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "op", "count", "p50", "p90", "p99", "p99.9", "max", "mean"
    ));
    for (op, l) in &r.latency_us {
        if l.count == 0 {
            continue;
        }
        s.push_str(&format!(
            "  {:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
            op,
            l.count,
            us(l.p50),
            us(l.p90),
            us(l.p99),
            us(l.p999),
            us(l.max),
            us(l.mean.round() as u64),
        ));
    }
    if r.errors.total > 0 {
        let kinds: Vec<String> = r
            .errors
            .by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        s.push_str(&format!("  errors by kind: {}\n", kinds.join(", ")));
    }
    let rec = &r.errors.recovered;
    let (noscript, cleanups) = (
        rec.noscript.unwrap_or(0),
        rec.unknown_outcome_cleanups.unwrap_or(0),
    );
    if noscript + cleanups + r.safety.watchdog_lost > 0 {
        s.push_str(&format!(
            "  recovered: NOSCRIPT re-sends {noscript}, unknown-outcome clean-ups {cleanups}; watchdog losses {}\n",
            r.safety.watchdog_lost
        ));
    }
    if r.load.mode == "closed" {
        s.push_str("  (closed loop: latencies count from each request's send; a stalled server shows in throughput more than in the tail. Use --rate for an open loop.)\n");
    }
    if let (Some(t), Some(sv)) = (r.cpu.tool_us_per_cycle, r.cpu.server_us_per_cycle) {
        s.push_str(&format!(
            "  CPU per cycle: lockkit {t:.2}us, server {sv:.2}us\n"
        ));
    }
    if let Some(c) = &r.ceiling {
        s.push_str(&format!(
            "  server ceiling 1/(1/{} + 1/{}) = {} cycles/s; this run reached {:.0}% of it\n",
            format_rate(c.set_nx_px_ops),
            format_rate(c.release_evalsha_ops),
            format_rate(c.ceiling_cycles_per_s),
            c.ratio * 100.0
        ));
    }
    s.push_str(&format!(
        "  TTL: {} ms, watchdog every {} ms, retry delay {} ms + jitter {} ms\n",
        r.ttl.recommended_ms,
        r.ttl.watchdog_interval_ms,
        r.ttl.retry.delay_ms,
        r.ttl.retry.jitter_ms
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_leaves_the_whole_file_and_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        write_atomic(&p, b"{}").unwrap();
        write_atomic(&p, b"{\"a\":1}").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":1}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn unwritable_out_is_refused_early() {
        let e = check_writable(Path::new("/proc/lockkit-cannot-be-here")).unwrap_err();
        assert!(format!("{e:#}").contains("--out"), "{e:#}");
    }

    #[test]
    fn date_is_rfc3339() {
        let (d, stamp) = utc_now();
        assert_eq!(d.len(), 20);
        assert!(d.ends_with('Z') && d.starts_with("20"));
        assert_eq!(stamp.len(), 15);
    }

    #[test]
    fn file_names_follow_json_or_out() {
        let (j, stem) = paths(Path::new("res"), None, "20260101-000000", "");
        assert_eq!(j, Path::new("res/bench-20260101-000000.json"));
        assert_eq!(stem, Path::new("res/bench-20260101-000000"));
        let given = PathBuf::from("x/run.json");
        let (j, _) = paths(Path::new("res"), Some(&given), "s", "eval");
        assert_eq!(j, Path::new("x/run-eval.json"));
    }

    #[test]
    fn interval_log_round_trips_through_the_parser() {
        let mut log = IntervalLog::starting(SystemTime::now());
        let mut h = crate::stats::new_histogram();
        h.record(120).unwrap();
        log.push(Duration::ZERO, Duration::from_secs(1), h);
        let text = log.render("cycle").unwrap();
        let merged = crate::merge::read_log(&text).unwrap();
        assert_eq!(merged["cycle"].len(), 1);
    }
}
