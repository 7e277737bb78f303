//! The JSON report of one run, schema `lockkit.bench/1`, and the machine facts it records.
//! Fields are only ever added to this schema.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::faults::FaultsReport;
use crate::stats::LatencySummary;
use crate::ttl::TtlReport;

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
    /// The run's counters once per interval (about a second), for plots over time; empty in
    /// reports written before it was added.
    #[serde(default)]
    pub timeline: Vec<TimelinePoint>,
    /// The fault schedule and what happened (`--faults`; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultsReport>,
}

/// `timeline[]`: what one interval counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// The interval's start, seconds since measuring began.
    pub t_s: f64,
    /// Its length, seconds.
    pub len_s: f64,
    /// Successful cycles.
    pub cycles: u64,
    /// Acquire attempts.
    pub attempts: u64,
    /// Attempts that found the lock busy.
    pub contended: u64,
    /// Errors (all kinds).
    pub errors: u64,
    /// Lost locks.
    pub lost_locks: u64,
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
    /// How waiters waited: `notify`, `poll`, or `poll (why)` where notification was unavailable.
    #[serde(default)]
    pub wait: String,
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
    /// Attempts per successful cycle (a batch counts each of its keys as an attempt).
    #[serde(default)]
    pub attempts_per_lock: f64,
}

/// `safety`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Safety {
    /// Two holders inside one key's critical section at once against the primitive's rule
    /// (exact, in this process). With `--fencing`, only the accesses the fenced resource
    /// accepted count (`fencing.unsafe_writes`); the overlaps of the leases are
    /// `fencing.lease_overlaps`.
    pub violations: u64,
    /// Releases/extends that found another token or no key; watchdog losses.
    pub lost_locks: u64,
    /// Holders told by their watchdog that the lock was lost (`--watchdog`; part of
    /// `lost_locks`).
    #[serde(default)]
    pub watchdog_lost: u64,
    /// The most holders of one key at once that the checker saw (1 for a mutex without
    /// violations; up to `--permits` for a semaphore; readers sharing for a read-write lock).
    /// 0 in reports written before it was added.
    #[serde(default)]
    pub max_holders: u64,
    /// Writes to the fenced resource (`--fencing`; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing: Option<FencingReport>,
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

/// `safety.fencing` in the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FencingReport {
    /// Writes presented to the resource (two per critical section: on entering and at the end).
    pub writes: u64,
    /// Reads presented to the resource (a read-write lock's readers, two per critical
    /// section); 0 for the other primitives and in reports written before it was added.
    #[serde(default)]
    pub reads: u64,
    /// Accesses refused because a newer token had been accepted (a read: a newer write).
    pub refused: u64,
    /// Accesses accepted although a holder they must not overlap, with a newer token, had
    /// already entered (for a semaphore: in the same permit slot). With `--fencing` this is
    /// `safety.violations`: only what the resource accepted counts.
    pub unsafe_writes: u64,
    /// The overlaps the leases let happen (two holders inside at once against the primitive's
    /// rule, as the checker counts them without `--fencing`), that the fencing tokens then
    /// had to stop. 0 in reports written before it was added.
    #[serde(default)]
    pub lease_overlaps: u64,
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

/// Today's date and time in UTC, RFC 3339, and a compact form for file names.
pub fn utc_now() -> (String, String) {
    stamps_at(SystemTime::now())
}

/// `time` as `2024-02-29T01:02:03Z` (humantime's RFC 3339, whole seconds) and as
/// `20240229-010203`.
fn stamps_at(time: SystemTime) -> (String, String) {
    let date = humantime::format_rfc3339_seconds(time).to_string();
    let stamp = date
        .trim_end_matches('Z')
        .replace(['-', ':'], "")
        .replace('T', "-");
    (date, stamp)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_is_rfc3339() {
        let (d, stamp) = utc_now();
        assert_eq!(d.len(), 20);
        assert!(d.ends_with('Z') && d.starts_with("20"));
        assert_eq!(stamp.len(), 15);
    }

    #[test]
    fn a_leap_day_is_stamped_in_both_forms() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_709_168_523);
        assert_eq!(
            stamps_at(t),
            (
                "2024-02-29T01:02:03Z".to_string(),
                "20240229-010203".to_string()
            )
        );
    }
}
