//! The HTML report: one self-contained page (inline SVG and CSS, nothing fetched from the
//! network) for one run or several side by side. `lockkit bench` writes one beside every JSON;
//! `lockkit report A.json B.json -o cmp.html` compares runs.
//!
//! It shows the summary, each operation's latency as a percentile spectrum on a log percentile
//! axis (as HdrHistogram's plotter draws it), throughput, p99, contention and errors over time
//! with injected faults marked (when the report has `faults.events`), and the TTL
//! recommendation with its basis.

pub mod data;
pub mod page;
pub mod svg;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::args::ReportArgs;
use crate::report::write_atomic;
pub use data::RunData;

/// The HTML file that goes with a JSON report: the same path with `.html`.
pub fn html_path(json: &Path) -> PathBuf {
    json.with_extension("html")
}

/// Writes the page of the run whose JSON is at `json` (its logs beside it) to `out`.
///
/// # Errors
/// The JSON cannot be read or is not a bench report; `out` cannot be written.
pub fn write_for_run(json: &Path, out: &Path) -> anyhow::Result<()> {
    let run = RunData::load(json)?;
    write_atomic(out, page::render(&[run]).as_bytes())
}

/// `lockkit report`: reads every input, then writes the page whole (nothing on any error).
pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let out = match (&args.out, args.inputs.as_slice()) {
        (Some(o), _) => o.clone(),
        (None, [one]) => html_path(one),
        (None, _) => anyhow::bail!("several reports go on one page: name it with -o FILE.html"),
    };
    for input in &args.inputs {
        if same_file(input, &out) {
            anyhow::bail!(
                "-o {} would overwrite the input {}; pick another file name",
                out.display(),
                input.display()
            );
        }
    }
    let mut runs = args
        .inputs
        .iter()
        .map(|p| RunData::load(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    distinct_labels(&mut runs, &args.inputs);
    write_atomic(&out, page::render(&runs).as_bytes())
        .with_context(|| format!("writing the report to {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Two runs named alike (`a/bench.json`, `b/bench.json`) go by their paths instead.
fn distinct_labels(runs: &mut [RunData], inputs: &[PathBuf]) {
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    for (i, r) in runs.iter_mut().enumerate() {
        if labels.iter().filter(|l| **l == labels[i]).count() > 1 {
            r.label = inputs[i].with_extension("").display().to_string();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small but complete `lockkit.bench/1` report.
    pub(crate) fn report_json() -> serde_json::Value {
        let lat = |p50: u64| {
            serde_json::json!({"count": 5000, "p50": p50, "p90": p50 * 2, "p99": p50 * 4,
                "p999": p50 * 8, "max": p50 * 20, "mean": p50 as f64 * 1.2})
        };
        serde_json::json!({
            "schema": "lockkit.bench/1", "interrupted": false,
            "target": {"url": "redis://***@127.0.0.1:6379", "server_version": "7.0.15",
                "mode": "standalone", "throwaway": true, "script_mode": "evalsha"},
            "machine": {"cores": 2, "os": "Debian", "tool_version": "0.1.0",
                "date": "2026-12-01T06:00:00Z"},
            "config": {"clients": 8, "connections": 2, "keys": 1000, "hold_us": 0, "ttl_ms": 5000},
            "loop": {"mode": "closed", "rate": null, "late_starts": 0, "latency_from": "request send"},
            "duration_s": 3.0,
            "throughput": {"cycles_per_s": 1000.0, "attempts_per_s": 1100.0, "cycles": 3000, "attempts": 3300},
            "contention_rate": 0.09,
            "latency_us": {"acquire_ok": lat(100), "release": lat(90), "cycle": lat(200),
                "extend": {"count": 0, "p50": 0, "p90": 0, "p99": 0, "p999": 0, "max": 0, "mean": 0.0}},
            "safety": {"violations": 0, "lost_locks": 0},
            "errors": {"total": 2, "by_kind": {"timeout": 2}},
            "ttl": {"recommended_ms": 40, "watchdog_interval_ms": 13,
                "retry": {"delay_ms": 1, "jitter_ms": 1}, "basis": "ttl = (work <p99> + ...)"},
            "cpu": {"tool_cpu_s": null, "tool_us_per_cycle": null, "server_cpu_s": null, "server_us_per_cycle": null},
            "ceiling": null,
            "histogram_logs": {},
            "timeline": [
                {"t_s": 0.0, "len_s": 1.0, "cycles": 900, "attempts": 1000, "contended": 100, "errors": 0, "lost_locks": 0},
                {"t_s": 1.0, "len_s": 1.0, "cycles": 1100, "attempts": 1200, "contended": 100, "errors": 2, "lost_locks": 0},
                {"t_s": 2.0, "len_s": 1.0, "cycles": 1000, "attempts": 1100, "contended": 100, "errors": 0, "lost_locks": 0}
            ]
        })
    }

    fn run_from(v: &serde_json::Value, label: &str) -> RunData {
        RunData::from_report(label.into(), serde_json::from_value(v.clone()).unwrap(), v)
    }

    #[test]
    fn page_is_self_contained_and_has_every_section() {
        let mut v = report_json();
        v["faults"] = serde_json::json!({"events": [{"t_s": 1.2, "kind": "server-pause", "duration_ms": 300, "node": null}]});
        let html = page::render(&[run_from(&v, "before")]);
        for needle in [
            "<h2 id=\"summary\">Summary</h2>",
            "Latency by percentile",
            "Throughput",
            "p99 latency",
            "Contention",
            "Errors",
            "TTL recommendation",
            "ttl = (work &lt;p99&gt; + ...)",
            "server-pause",
            "redis://***@127.0.0.1:6379",
        ] {
            assert!(html.contains(needle), "missing {needle}");
        }
        assert!(
            !html.contains("http://") || !html.contains("src="),
            "nothing is fetched"
        );
        assert!(!html.contains("<script"));
        assert!(!html.contains("<link"));
        // Three operations with samples → three spectra; four charts over time.
        assert_eq!(html.matches("<svg class=\"chart\"").count(), 3 + 4);
        assert_eq!(
            html.matches(r#"class="marker""#).count(),
            2 * 4,
            "fault on every timeline"
        );
        assert!(!html.contains("NaN"));
    }

    #[test]
    fn several_runs_share_the_plots_with_a_legend() {
        let a = run_from(&report_json(), "before");
        let mut v = report_json();
        v["throughput"]["cycles_per_s"] = 2000.0.into();
        let b = run_from(&v, "after");
        let html = page::render(&[a, b]);
        assert!(html.contains("2 runs compared"));
        assert!(html.contains("Runs on the plots"));
        // 7 charts, each with two lines, but p99 over time needs the interval logs.
        assert_eq!(html.matches(r#"<path class="series""#).count(), 2 * 6);
    }

    #[test]
    fn a_run_without_timeline_or_samples_still_renders_with_no_data() {
        let mut v = report_json();
        v.as_object_mut().unwrap().remove("timeline");
        for op in ["acquire_ok", "release", "cycle"] {
            v["latency_us"][op]["count"] = 0.into();
        }
        let html = page::render(&[run_from(&v, "empty")]);
        assert!(html.contains("no data"));
        assert!(html.contains("not recorded per interval"));
    }

    #[test]
    fn bad_inputs_are_clear_errors_and_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.html");
        let not_json = dir.path().join("x.json");
        std::fs::write(&not_json, "hello").unwrap();
        let other = dir.path().join("other.json");
        std::fs::write(&other, r#"{"schema": "lockkit.merge/1"}"#).unwrap();
        let partial = dir.path().join("partial.json");
        std::fs::write(&partial, r#"{"schema": "lockkit.bench/1"}"#).unwrap();
        let good = dir.path().join("good.json");
        std::fs::write(&good, report_json().to_string()).unwrap();
        let cases: [(Vec<PathBuf>, Option<PathBuf>, &str); 6] = [
            (
                vec![dir.path().join("missing.json")],
                Some(out.clone()),
                "reading",
            ),
            (vec![not_json], Some(out.clone()), "is not JSON"),
            (
                vec![good.clone(), other],
                Some(out.clone()),
                "not a lockkit bench report",
            ),
            (vec![partial], Some(out.clone()), "does not match"),
            (vec![good.clone(), good.clone()], None, "-o FILE.html"),
            (vec![good.clone()], Some(good.clone()), "would overwrite"),
        ];
        for (inputs, o, msg) in cases {
            let e = run(ReportArgs { inputs, out: o }).unwrap_err();
            assert!(format!("{e:#}").contains(msg), "{e:#}");
            assert!(!out.exists());
        }
        let e = run(ReportArgs {
            inputs: vec![good.clone()],
            out: Some(dir.path().join("no/such/dir/r.html")),
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("cannot write in"), "{e:#}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            4,
            "no temporaries left"
        );
        run(ReportArgs {
            inputs: vec![good.clone()],
            out: None,
        })
        .unwrap();
        assert!(dir.path().join("good.html").exists());
    }
}
