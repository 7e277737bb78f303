//! The advice of `lockkit ttl RESULT.json [--work-p99 D | --work-timings FILE]` and
//! `lockkit ttl --observed OBSERVE.json` (one TTL per lock pattern the proxy saw): read a bench
//! or observe report, apply the formula of [`crate::ttl`], print the result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::files::{read_log, read_report};
use crate::stats::{new_histogram, LatencySummary};
use crate::ttl::{recommend_from_latency, recommend_observed, TtlRecommendation, TtlReport};
use crate::units::parse_duration_or_ms;

/// The schema of the proxy's observe report.
pub const OBSERVE_SCHEMA: &str = crate::observe::SCHEMA;

/// What `lockkit ttl` sizes from (the command line's options, without their parsing).
#[derive(Debug, Clone)]
pub struct TtlOptions {
    /// A JSON report written by `lockkit bench`.
    pub result: Option<PathBuf>,
    /// A report of `lockkit proxy --plugin observe`: one TTL per lock pattern.
    pub observed: Option<PathBuf>,
    /// The guarded work's p99. Default: the benchmark's hold time.
    pub work_p99: Option<Duration>,
    /// The guarded work's measured durations: one per line or an HdrHistogram log (µs).
    pub work_timings: Option<PathBuf>,
    /// Which quantile of the timings (or of the observed hold times) to size for.
    pub quantile: WorkQuantile,
    /// Allowance for process pauses (GC, swap, a stopped VM).
    pub pause_budget: Duration,
    /// Multiplier over the sum of the timings.
    pub safety_factor: f64,
    /// Print the recommendation as JSON (the report's `ttl` object).
    pub json: bool,
}

/// A quantile of the work timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkQuantile {
    /// 99th percentile.
    P99,
    /// 99.9th percentile.
    P999,
    /// The largest seen.
    Max,
}

impl WorkQuantile {
    /// The quantile as a fraction (max is 1.0).
    pub fn fraction(self) -> f64 {
        match self {
            WorkQuantile::P99 => 0.99,
            WorkQuantile::P999 => 0.999,
            WorkQuantile::Max => 1.0,
        }
    }

    /// Its name in the reasoning text.
    pub fn name(self) -> &'static str {
        match self {
            WorkQuantile::P99 => "work p99",
            WorkQuantile::P999 => "work p99.9",
            WorkQuantile::Max => "work max",
        }
    }
}

/// One lock pattern of an observe report and its recommendation (`None`: no release seen).
#[derive(Debug, Clone)]
pub struct ObservedTtl {
    /// The key pattern.
    pub pattern: String,
    /// The observed hold time at the quantile.
    pub hold: LatencySummary,
    /// The largest TTL the application asked for, ms.
    pub ttl_used_ms: Option<u64>,
    /// What the formula gives.
    pub recommendation: Option<TtlRecommendation>,
}

/// Reads an observe report and applies the formula to each lock pattern.
///
/// # Errors
/// An unreadable file, a file that is no observe report.
pub fn observed_recommendations(
    path: &Path,
    q: WorkQuantile,
    pause_budget: Duration,
    safety_factor: f64,
) -> anyhow::Result<Vec<ObservedTtl>> {
    let report = read_report(
        path,
        OBSERVE_SCHEMA,
        "an observe report",
        "give the observe-<date>.json that `lockkit proxy --plugin observe` wrote (for a bench \
         report drop --observed)",
    )?;
    let locks = report["locks"].as_array().cloned().unwrap_or_default();
    let summary = |v: &serde_json::Value, field: &str| -> anyhow::Result<LatencySummary> {
        serde_json::from_value(v[field].clone())
            .with_context(|| format!("{}: `{field}` of a lock is malformed", path.display()))
    };
    let mut out = Vec::new();
    for l in &locks {
        let hold = summary(l, "hold_us")?;
        let acquire = summary(l, "acquire_us").unwrap_or_default();
        let release = summary(l, "release_us").unwrap_or_default();
        let work = match q {
            WorkQuantile::P99 => hold.p99,
            WorkQuantile::P999 => hold.p999,
            WorkQuantile::Max => hold.max,
        };
        let recommendation = (hold.count > 0).then(|| {
            recommend_observed(
                Duration::from_micros(work),
                &acquire,
                &release,
                &format!("observed hold {}", q.name().trim_start_matches("work ")),
                pause_budget,
                safety_factor,
            )
        });
        out.push(ObservedTtl {
            pattern: l["pattern"].as_str().unwrap_or("?").to_string(),
            hold,
            ttl_used_ms: l["ttl_ms"]["max"].as_u64(),
            recommendation,
        });
    }
    Ok(out)
}

fn run_observed(args: &TtlOptions, path: &Path) -> anyhow::Result<ExitCode> {
    if !(args.safety_factor >= 1.0 && args.safety_factor.is_finite()) {
        anyhow::bail!("--safety-factor must be at least 1");
    }
    let rows =
        observed_recommendations(path, args.quantile, args.pause_budget, args.safety_factor)?;
    if rows.iter().all(|r| r.recommendation.is_none()) {
        anyhow::bail!(
            "{} holds no released lock; let the application run through the proxy until its locks are released",
            path.display()
        );
    }
    if args.json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "pattern": r.pattern,
                    "holds": r.hold.count,
                    "ttl_used_ms": r.ttl_used_ms,
                    "ttl": r.recommendation.as_ref().map(TtlReport::from),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let ms = |us: u64| format!("{:.1}", us as f64 / 1000.0);
    println!(
        "{:<32} {:>7} {:>11} {:>11} {:>9} {:>9} {:>10}",
        "pattern", "holds", "hold p99 ms", "hold max ms", "TTL used", "TTL", "watchdog"
    );
    for r in &rows {
        let used = r.ttl_used_ms.map_or("-".to_string(), |t| format!("{t} ms"));
        match &r.recommendation {
            Some(rec) => {
                let t = TtlReport::from(rec);
                println!(
                    "{:<32} {:>7} {:>11} {:>11} {:>9} {:>9} {:>10}",
                    r.pattern,
                    r.hold.count,
                    ms(r.hold.p99),
                    ms(r.hold.max),
                    used,
                    format!("{} ms", t.recommended_ms),
                    format!("{} ms", t.watchdog_interval_ms),
                );
            }
            None => println!(
                "{:<32} {:>7} {:>11} {:>11} {:>9} {:>9} {:>10}",
                r.pattern, 0, "-", "-", used, "no release seen", ""
            ),
        }
    }
    if let Some(r) = rows.iter().find_map(|r| r.recommendation.as_ref()) {
        println!("why              {}", r.basis);
    }
    Ok(ExitCode::SUCCESS)
}

/// The work time at `q` from a timings file: one duration per line or an HdrHistogram log (µs).
pub fn work_from_file(path: &Path, q: WorkQuantile) -> anyhow::Result<Duration> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let looks_like_log = text.contains("#[StartTime")
        || text.contains("#[BaseTime")
        || text.lines().any(|l| l.starts_with("Tag="));
    let mut h = new_histogram();
    if looks_like_log {
        for (_, part) in read_log(&bytes).with_context(|| format!("reading {}", path.display()))? {
            h.add(&part)
                .map_err(|e| anyhow::anyhow!("merging: {e:?}"))?;
        }
    } else {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let d = parse_duration_or_ms(line)
                .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), n + 1))?;
            let us = (d.as_nanos() / 1_000).max(1) as u64;
            h.record(us)
                .map_err(|e| anyhow::anyhow!("recording: {e:?}"))?;
        }
    }
    if h.is_empty() {
        anyhow::bail!(
            "{} holds no timings; give one duration per line (12ms, 0.8s, or plain ms)",
            path.display()
        );
    }
    let us = match q {
        WorkQuantile::Max => h.max(),
        _ => h.value_at_quantile(q.fraction()),
    };
    Ok(Duration::from_micros(us))
}

/// The work time a report's own workload implies: its hold time at p99.
pub fn work_from_config(config: &serde_json::Value) -> (Duration, String) {
    let hold = Duration::from_micros(config["hold_us"].as_u64().unwrap_or(0));
    match config["hold_dist"].as_str() {
        Some("uniform") => (hold.mul_f64(1.98), "benchmark hold p99 (uniform)".into()),
        Some("exp") => (hold.mul_f64(100f64.ln()), "benchmark hold p99 (exp)".into()),
        _ => (hold, "benchmark hold".into()),
    }
}

/// Reads the report, applies the formula, prints the result with its reasoning.
pub fn run(args: TtlOptions) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.observed {
        return run_observed(&args, path);
    }
    let r = recommendation(&args)?;
    let out = TtlReport::from(&r);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("TTL              {} ms", out.recommended_ms);
        println!("watchdog every   {} ms", out.watchdog_interval_ms);
        println!(
            "retry            delay {} ms + jitter 0..{} ms",
            out.retry.delay_ms, out.retry.jitter_ms
        );
        println!("why              {}", out.basis);
    }
    Ok(ExitCode::SUCCESS)
}

/// The recommendation `lockkit ttl` prints, from the report and work timings in `args`.
///
/// # Errors
/// An unreadable or foreign report, a report without acquire samples, unreadable timings.
pub fn recommendation(args: &TtlOptions) -> anyhow::Result<TtlRecommendation> {
    let Some(result) = &args.result else {
        anyhow::bail!("give the RESULT.json `lockkit bench` wrote (or --observed OBSERVE.json)");
    };
    let report = read_report(
        result,
        crate::bench::SCHEMA,
        "a lockkit bench report",
        "give the report `lockkit bench` wrote",
    )?;
    let latency: BTreeMap<String, LatencySummary> =
        serde_json::from_value(report["latency_us"].clone())
            .context("the report's latency_us is malformed")?;
    if latency.get("acquire_ok").is_none_or(|l| l.count == 0) {
        anyhow::bail!("the report has no acquire_ok samples; run a benchmark that acquires locks");
    }
    let (work, basis) = match (&args.work_p99, &args.work_timings) {
        (Some(d), _) => (*d, "work p99 (--work-p99)".to_string()),
        (None, Some(f)) => (
            work_from_file(f, args.quantile)?,
            format!("{} of {}", args.quantile.name(), f.display()),
        ),
        (None, None) => work_from_config(&report["config"]),
    };
    if !(args.safety_factor >= 1.0 && args.safety_factor.is_finite()) {
        anyhow::bail!("--safety-factor must be at least 1");
    }
    Ok(recommend_from_latency(
        &latency,
        work,
        &basis,
        args.pause_budget,
        args.safety_factor,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file `name` holding `text`, in a fresh folder that lives as long as the returned guard.
    fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    #[test]
    fn timings_file_lines_and_quantiles() {
        let mut text = String::from("# work\n");
        for i in 1..=100 {
            text.push_str(&format!("{i}\n"));
        }
        text.push_str("2s\n");
        let (_dir, p) = temp_file("w.txt", &text);
        let p99 = work_from_file(&p, WorkQuantile::P99).unwrap();
        assert!(
            p99 >= Duration::from_millis(99) && p99 <= Duration::from_millis(101),
            "{p99:?}"
        );
        let max = work_from_file(&p, WorkQuantile::Max).unwrap();
        assert!(max >= Duration::from_secs(2) && max < Duration::from_millis(2010));
    }

    #[test]
    fn bad_line_names_file_and_line() {
        let (_dir, p) = temp_file("w.txt", "12ms\nten\n");
        let e = work_from_file(&p, WorkQuantile::P99)
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.txt:2"), "{e}");
    }

    fn args_for(result: std::path::PathBuf, work_p99: Option<Duration>) -> TtlOptions {
        TtlOptions {
            result: Some(result),
            observed: None,
            work_p99,
            work_timings: None,
            quantile: WorkQuantile::P99,
            pause_budget: Duration::from_millis(50),
            safety_factor: 2.0,
            json: false,
        }
    }

    #[test]
    fn hand_computed_case_from_a_report() {
        // acquire p99 = p99.9 = 1 ms, release p99.9 = 1 ms, work p99 100 ms, defaults:
        // 2 x (100 + 1 + 1 + 50) = 304; (304 + 2) / 0.99 = 309.09 -> 310 ms; watchdog 103 ms;
        // retry delay 2 x 1 = 2 ms, jitter 1 ms.
        let l = serde_json::json!({"count": 10, "p50": 500, "p90": 800, "p99": 1000,
            "p999": 1000, "max": 1200, "mean": 600.0});
        let report = serde_json::json!({
            "schema": "lockkit.bench/1",
            "config": {"hold_us": 0, "hold_dist": "fixed"},
            "latency_us": {"acquire_ok": l, "release": l},
        });
        let (_dir, p) = temp_file("r.json", &report.to_string());
        let args = args_for(p, Some(Duration::from_millis(100)));
        let r = TtlReport::from(&recommendation(&args).unwrap());
        assert_eq!(r.recommended_ms, 310);
        assert_eq!(r.watchdog_interval_ms, 103);
        assert_eq!((r.retry.delay_ms, r.retry.jitter_ms), (2, 1));
    }

    #[test]
    fn foreign_json_is_refused() {
        let (_dir, p) = temp_file("x.json", "{\"a\": 1}");
        let e = recommendation(&args_for(p, None)).unwrap_err().to_string();
        assert!(e.contains("not a lockkit bench report"), "{e}");
    }

    #[test]
    fn observed_report_gives_one_ttl_per_pattern_by_the_same_formula() {
        // hold p99 100 ms, acquire p99 = p99.9 = 1 ms, release p99.9 = 1 ms: the bench case's
        // numbers, so the same 310 ms.
        let l = |p99: u64| {
            serde_json::json!({"count": 10, "p50": 1, "p90": 1, "p99": p99,
            "p999": p99, "max": p99, "mean": 1.0})
        };
        let report = serde_json::json!({
            "schema": "lockkit.observe/1", "target": "redis://h", "duration_s": 1.0, "commands": {},
            "locks": [
                {"pattern": "order:{id}:lock", "hold_us": l(100_000), "acquire_us": l(1000),
                 "release_us": l(1000), "ttl_ms": {"min": 5000, "max": 5000}},
                {"pattern": "never:{id}", "hold_us": {"count": 0, "p50": 0, "p90": 0, "p99": 0,
                 "p999": 0, "max": 0, "mean": 0.0}, "ttl_ms": {"min": null, "max": null}},
            ]
        });
        let (dir, p) = temp_file("observe.json", &report.to_string());
        let rows = observed_recommendations(&p, WorkQuantile::P99, Duration::from_millis(50), 2.0)
            .unwrap();
        assert_eq!(rows.len(), 2);
        let r = TtlReport::from(rows[0].recommendation.as_ref().unwrap());
        assert_eq!((r.recommended_ms, r.watchdog_interval_ms), (310, 103));
        assert_eq!(rows[0].ttl_used_ms, Some(5000));
        assert!(rows[1].recommendation.is_none());
        let bench = dir.path().join("bench.json");
        std::fs::write(&bench, "{\"schema\": \"lockkit.bench/1\"}").unwrap();
        let e = observed_recommendations(&bench, WorkQuantile::P99, Duration::ZERO, 2.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an observe report"), "{e}");
    }

    #[test]
    fn config_hold_is_the_default_work() {
        let c = serde_json::json!({"hold_us": 2000, "hold_dist": "fixed"});
        assert_eq!(work_from_config(&c).0, Duration::from_millis(2));
    }
}
