//! The HTML report: one self-contained page (inline SVG and CSS, nothing fetched from the
//! network) for one run or several side by side. `lockkit bench` writes one beside every JSON;
//! `lockkit report A.json B.json -o cmp.html` compares runs.
//!
//! It shows the summary, each operation's latency as a percentile spectrum on a log percentile
//! axis (as HdrHistogram's plotter draws it), throughput, p99, contention and errors over time
//! with injected faults marked (when the report has `faults.events`), and the TTL
//! recommendation with its basis.
//!
//! The same command renders the reports `lockkit proxy --plugin observe` writes
//! ([`observe_page`]): one row per lock pattern, hold time against the TTLs asked for and the
//! recommended one. One page shows one kind of report.

pub mod data;
pub mod observe_page;
pub mod observed;
pub mod page;
pub mod rows;
pub mod svg;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::files::write_atomic;
pub use data::RunData;
pub use observed::ObserveData;

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

/// `lockkit report INPUTS [-o OUT]`: reads every input, then writes the page whole (nothing on
/// any error).
pub fn run(inputs: &[PathBuf], out: Option<&Path>) -> anyhow::Result<ExitCode> {
    let out = match (out, inputs) {
        (Some(o), _) => o.to_path_buf(),
        (None, [one]) => html_path(one),
        (None, _) => anyhow::bail!("several reports go on one page: name it with -o FILE.html"),
    };
    for input in inputs {
        if same_file(input, &out) {
            anyhow::bail!(
                "-o {} would overwrite the input {}; pick another file name",
                out.display(),
                input.display()
            );
        }
    }
    let loaded = inputs
        .iter()
        .map(|p| load(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (mut runs, mut reports) = (Vec::new(), Vec::new());
    for (l, path) in loaded.into_iter().zip(inputs) {
        match l {
            Loaded::Bench(r) => runs.push((r, path)),
            Loaded::Observe(o) => reports.push((o, path)),
        }
    }
    if let (Some((_, bench)), Some((_, observe))) = (runs.first(), reports.first()) {
        anyhow::bail!(
            "{} is a bench report and {} an observe report; one page shows one kind: run \
             `lockkit report` once with the bench reports and once with the observe reports",
            bench.display(),
            observe.display()
        );
    }
    // All inputs are of one kind now, in the order given.
    let page = if reports.is_empty() {
        let mut runs: Vec<RunData> = runs.into_iter().map(|(r, _)| *r).collect();
        distinct_labels(runs.iter_mut().map(|r| &mut r.label), inputs);
        page::render(&runs)
    } else {
        let mut reports: Vec<ObserveData> = reports.into_iter().map(|(r, _)| r).collect();
        distinct_labels(reports.iter_mut().map(|r| &mut r.label), inputs);
        observe_page::render(&reports)
    };
    write_atomic(&out, page.as_bytes())
        .with_context(|| format!("writing the report to {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// A report file of either kind `lockkit report` renders.
#[derive(Debug)]
pub enum Loaded {
    /// `lockkit.bench/1`, with its interval logs.
    Bench(Box<RunData>),
    /// `lockkit.observe/1`.
    Observe(ObserveData),
}

/// Reads a bench or an observe report.
///
/// # Errors
/// The file is missing, is not JSON, is neither kind of report, or does not match its schema.
pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    let value = crate::files::read_json(
        path,
        "pass the .json file that `lockkit bench` or `lockkit proxy --plugin observe` wrote",
    )?;
    match crate::files::schema_of(&value) {
        crate::bench::SCHEMA => Ok(Loaded::Bench(Box::new(RunData::from_json(path, value)?))),
        crate::observe::SCHEMA => Ok(Loaded::Observe(ObserveData::from_json(path, &value)?)),
        other => anyhow::bail!(
            "{} is neither a lockkit bench report nor an observe report (schema {other:?}); \
             pass the .json that `lockkit bench` or `lockkit proxy --plugin observe` wrote",
            path.display()
        ),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Two reports named alike (`a/bench.json`, `b/bench.json`) go by their paths instead.
fn distinct_labels<'a>(labels: impl Iterator<Item = &'a mut String>, inputs: &[PathBuf]) {
    let mut labels: Vec<&mut String> = labels.collect();
    let names: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    for (i, l) in labels.iter_mut().enumerate() {
        if names.iter().filter(|n| **n == names[i]).count() > 1 {
            **l = inputs[i].with_extension("").display().to_string();
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
    fn the_primitive_and_the_most_holders_are_on_the_page() {
        let mut v = report_json();
        v["config"]["primitive"] = "semaphore".into();
        v["config"]["permits"] = 3.into();
        v["safety"]["max_holders"] = 3.into();
        v["safety"]["fencing"] = serde_json::json!({"writes": 10, "refused": 2,
            "unsafe_writes": 0, "lease_overlaps": 4});
        let mut rw = report_json();
        rw["config"]["primitive"] = "rwlock".into();
        rw["config"]["read_ratio"] = 0.9.into();
        rw["safety"]["max_holders"] = 16.into();
        // A report written before --primitive: a mutex, with no max_holders.
        let old = report_json();
        let html = page::render(&[
            run_from(&v, "sem"),
            run_from(&rw, "rw"),
            run_from(&old, "old"),
        ]);
        for needle in [
            "<th>max holders</th>",
            "semaphore, 3 permits",
            "rwlock, read ratio 0.9",
            "mutex, 8 clients",
            "<td>16</td>",
            "<th>fencing refused</th>",
            "<th>lease overlaps</th>",
        ] {
            assert!(html.contains(needle), "missing {needle}");
        }
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
                "neither a lockkit bench report nor an observe report",
            ),
            (vec![partial], Some(out.clone()), "does not match"),
            (vec![good.clone(), good.clone()], None, "-o FILE.html"),
            (vec![good.clone()], Some(good.clone()), "would overwrite"),
        ];
        for (inputs, o, msg) in cases {
            let e = run(&inputs, o.as_deref()).unwrap_err();
            assert!(format!("{e:#}").contains(msg), "{e:#}");
            assert!(!out.exists());
        }
        let e = run(
            std::slice::from_ref(&good),
            Some(&dir.path().join("no/such/dir/r.html")),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("cannot write in"), "{e:#}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            4,
            "no temporaries left"
        );
        run(std::slice::from_ref(&good), None).unwrap();
        assert!(dir.path().join("good.html").exists());
    }

    #[test]
    fn observe_reports_render_and_a_mix_with_bench_reports_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let obs = dir.path().join("observe-1.json");
        let v = observed::tests::observe_json(&[("order:{id}:lock", 3, 251_000)]);
        std::fs::write(&obs, v.to_string()).unwrap();
        let good = dir.path().join("good.json");
        std::fs::write(&good, report_json().to_string()).unwrap();
        let out = dir.path().join("out.html");
        for inputs in [
            vec![good.clone(), obs.clone()],
            vec![obs.clone(), good.clone()],
        ] {
            let e = run(&inputs, Some(&out)).unwrap_err();
            let e = format!("{e:#}");
            assert!(
                e.contains("good.json is a bench report and")
                    && e.contains("observe-1.json an observe report")
                    && e.contains("run `lockkit report` once with the bench reports"),
                "{e}"
            );
            assert!(!out.exists());
        }
        run(std::slice::from_ref(&obs), None).unwrap();
        let html = std::fs::read_to_string(dir.path().join("observe-1.html")).unwrap();
        assert!(html.contains("<h1>lockkit proxy observe: observe-1</h1>"));
        assert!(
            html.contains("observe-1.json. One self-contained file"),
            "footer"
        );
        // Two reports named alike go by their paths.
        let sub = dir.path().join("b");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("observe-1.json"), v.to_string()).unwrap();
        run(&[obs, sub.join("observe-1.json")], Some(&out)).unwrap();
        let html = std::fs::read_to_string(&out).unwrap();
        assert!(html.contains(&format!("{}", sub.join("observe-1").display())));
    }
}
