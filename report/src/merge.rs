//! `lockkit merge`: HdrHistogram interval logs from several load machines, merged by operation.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use std::path::{Path, PathBuf};

use crate::files::{read_log, write_atomic};
use crate::stats::{new_histogram, LatencySummary};
use crate::units::format_duration;
use serde::Serialize;

#[derive(Debug, Serialize)]
struct MergeReport {
    schema: &'static str,
    inputs: Vec<String>,
    latency_us: BTreeMap<String, LatencySummary>,
}

/// Merges the interval logs `logs`, prints the table, writes the merged latencies as JSON to
/// `json` if given.
pub fn run(logs: &[PathBuf], json: Option<&Path>) -> anyhow::Result<ExitCode> {
    let mut merged: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for path in logs {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let hists = read_log(&bytes).with_context(|| format!("reading {}", path.display()))?;
        for (tag, h) in hists {
            let slot = merged.entry(tag).or_insert_with(new_histogram);
            slot.add(&h)
                .map_err(|e| anyhow::anyhow!("merging histograms: {e:?}"))?;
        }
    }
    if merged.is_empty() {
        anyhow::bail!("the logs hold no intervals; give the .hlog files `lockkit bench` wrote");
    }
    let latency_us: BTreeMap<String, LatencySummary> = merged
        .iter()
        .map(|(k, h)| (k.clone(), LatencySummary::of(h)))
        .collect();
    println!(
        "merged {} logs\n  {:<18} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        logs.len(),
        "op",
        "count",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max"
    );
    let f = |v: u64| format_duration(Duration::from_micros(v));
    for (op, l) in &latency_us {
        println!(
            "  {:<18} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            op,
            l.count,
            f(l.p50),
            f(l.p90),
            f(l.p99),
            f(l.p999),
            f(l.max)
        );
    }
    if let Some(json) = json {
        let report = MergeReport {
            schema: "lockkit.merge/1",
            inputs: logs.iter().map(|p| p.display().to_string()).collect(),
            latency_us,
        };
        write_atomic(json, serde_json::to_string_pretty(&report)?.as_bytes())?;
        println!("wrote {}", json.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::IntervalLog;
    use std::time::{Duration, SystemTime};

    fn log_with(tag: &str, values: &[u64]) -> Vec<u8> {
        let mut log = IntervalLog::starting(SystemTime::now());
        let mut h = new_histogram();
        for v in values {
            h.record(*v).unwrap();
        }
        log.push(Duration::ZERO, Duration::from_secs(1), h);
        log.render(tag).unwrap()
    }

    #[test]
    fn logs_from_two_machines_merge_by_operation() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.hlog");
        let b = dir.path().join("b.hlog");
        std::fs::write(&a, log_with("cycle", &[100, 200])).unwrap();
        std::fs::write(&b, log_with("cycle", &[300])).unwrap();
        let out = dir.path().join("m.json");
        run(&[a, b], Some(out.as_path())).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
        assert_eq!(v["latency_us"]["cycle"]["count"], 2 + 1);
        assert_eq!(v["latency_us"]["cycle"]["max"], 300);
    }

    #[test]
    fn garbage_is_a_clear_error() {
        let e = read_log(b"hello world\nnot a log\n").unwrap_err();
        assert!(e.to_string().contains("interval log"), "{e}");
    }
}
