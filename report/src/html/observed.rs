//! What the observe page plots, read from the reports `lockkit proxy --plugin observe` wrote:
//! the lock patterns across reports (busiest first), each pattern's hold-time spectrum and its
//! row on the TTL chart.

use std::collections::BTreeMap;
use std::path::Path;

use super::data::{label_of, parse_schema, spectrum_from_summary, Spectrum};
use super::rows::Row;
use crate::files::check_schema;
use crate::observe::{LockPatternReport, ObserveReport, SCHEMA};

/// One observe report, ready to plot.
#[derive(Debug, Clone)]
pub struct ObserveData {
    /// The name it goes by on the page (the JSON's file name without `.json`).
    pub label: String,
    /// The report itself.
    pub report: ObserveReport,
}

impl ObserveData {
    /// An observe report from the JSON read from `path`.
    ///
    /// # Errors
    /// The JSON is not a `lockkit.observe/1` report, or its fields do not match the schema.
    pub fn from_json(path: &Path, value: &serde_json::Value) -> anyhow::Result<ObserveData> {
        check_schema(
            path,
            value,
            SCHEMA,
            "an observe report",
            "pass the observe-<date>.json that `lockkit proxy --plugin observe` wrote",
        )?;
        Ok(ObserveData {
            label: label_of(path),
            report: parse_schema(path, value, SCHEMA)?,
        })
    }

    /// Every command the proxy passed.
    pub fn commands_total(&self) -> u64 {
        self.report.commands.values().sum()
    }

    /// The sum of `f` over the report's lock patterns.
    pub fn total(&self, f: impl Fn(&LockPatternReport) -> u64) -> u64 {
        self.report.locks.iter().map(f).sum()
    }
}

/// One lock pattern across the reports on a page.
#[derive(Debug, Clone)]
pub struct PatternView<'a> {
    /// The folded key (`order:{id}:lock`).
    pub pattern: &'a str,
    /// The reports that saw it: (report index, its entry), in report order.
    pub locks: Vec<(usize, &'a LockPatternReport)>,
}

impl PatternView<'_> {
    /// Acquire attempts (got or contended) in every report: how busy the pattern is.
    pub fn attempts(&self) -> u64 {
        self.locks
            .iter()
            .map(|(_, l)| l.acquired + l.contended)
            .sum()
    }

    /// Whether any report measured a hold time for it.
    pub fn has_holds(&self) -> bool {
        self.locks.iter().any(|(_, l)| l.hold_us.count > 0)
    }
}

/// The patterns of all reports, busiest first (then by name).
pub fn patterns(reports: &[ObserveData]) -> Vec<PatternView<'_>> {
    let mut by_name: BTreeMap<&str, PatternView<'_>> = BTreeMap::new();
    for (i, r) in reports.iter().enumerate() {
        for l in &r.report.locks {
            by_name
                .entry(l.pattern.as_str())
                .or_insert_with(|| PatternView {
                    pattern: &l.pattern,
                    locks: Vec::new(),
                })
                .locks
                .push((i, l));
        }
    }
    let mut out: Vec<PatternView<'_>> = by_name.into_values().collect();
    // A stable sort keeps the names' order among equally busy patterns.
    out.sort_by_key(|p| std::cmp::Reverse(p.attempts()));
    out
}

/// A pattern's hold time over percentiles, from the report's summary (p50 to max).
pub fn hold_spectrum(l: &LockPatternReport) -> Spectrum {
    spectrum_from_summary(&l.hold_us)
}

/// A pattern's row on the TTL chart, in microseconds: hold p50 to p99 (bar), on to the max
/// (whisker), the TTLs requested (band) and the recommended TTL (mark). Parts without data are
/// left out.
pub fn ttl_row(l: &LockPatternReport, label: Option<String>, style: usize) -> Row {
    let held = l.hold_us.count > 0;
    let ms = |v: u64| v as f64 * 1000.0;
    let band = match (l.ttl_ms.min, l.ttl_ms.max) {
        (Some(a), Some(b)) => Some((ms(a), ms(b))),
        (Some(a), None) | (None, Some(a)) => Some((ms(a), ms(a))),
        (None, None) => None,
    };
    Row {
        label,
        style,
        bar: held.then_some((l.hold_us.p50 as f64, l.hold_us.p99 as f64)),
        whisker: held.then_some(l.hold_us.max as f64),
        band,
        mark: l.recommended_ttl_ms.map(ms),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A `lockkit.observe/1` report with the given (pattern, acquired, hold p99 µs) locks.
    pub(crate) fn observe_json(locks: &[(&str, u64, u64)]) -> serde_json::Value {
        let locks: Vec<serde_json::Value> = locks
            .iter()
            .map(|(pattern, acquired, p99)| {
                let count = if *p99 == 0 { 0 } else { *acquired };
                serde_json::json!({
                    "pattern": pattern, "acquired": acquired, "contended": acquired / 2,
                    "released": acquired, "released_not_held": 0, "expired_unreleased": 0,
                    "hold_us": {"count": count, "p50": p99 / 2, "p90": p99 * 9 / 10, "p99": p99,
                        "p999": p99, "max": p99 * 11 / 10, "mean": *p99 as f64 / 2.0},
                    "ttl_ms": {"min": 5000, "max": 30000},
                    "acquire_us": {"count": acquired, "p50": 100, "p90": 120, "p99": 150,
                        "p999": 160, "max": 200, "mean": 105.0},
                    "release_us": {"count": acquired, "p50": 90, "p90": 110, "p99": 130,
                        "p999": 150, "max": 180, "mean": 95.0},
                    "recommended_ttl_ms": (*p99 > 0).then(|| p99 * 2 / 1000 + 101)
                })
            })
            .collect();
        serde_json::json!({
            "schema": "lockkit.observe/1", "target": "redis://***@127.0.0.1:6380",
            "duration_s": 12.5, "commands": {"SET": 40, "EVAL": 20, "GET": 7},
            "locks": locks
        })
    }

    pub(crate) fn data(label: &str, v: &serde_json::Value) -> ObserveData {
        ObserveData::from_json(Path::new(&format!("/r/{label}.json")), v).unwrap()
    }

    #[test]
    fn a_report_reads_with_its_totals_and_label() {
        let d = data(
            "observe-1",
            &observe_json(&[("a:{id}", 10, 2000), ("b", 4, 0)]),
        );
        assert_eq!(d.label, "observe-1");
        assert_eq!(d.commands_total(), 67);
        assert_eq!(d.total(|l| l.acquired), 14);
        assert_eq!(d.report.locks[1].recommended_ttl_ms, None);
    }

    #[test]
    fn other_schemas_and_malformed_fields_are_refused_with_the_file_named() {
        let p = Path::new("x/b.json");
        let e = ObserveData::from_json(p, &serde_json::json!({"schema": "lockkit.bench/1"}))
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("x/b.json is not an observe report"),
            "{e:#}"
        );
        let mut v = observe_json(&[("a", 1, 10)]);
        v["locks"][0]["hold_us"] = "fast".into();
        let e = ObserveData::from_json(p, &v).unwrap_err();
        assert!(
            format!("{e:#}").contains("does not match the lockkit.observe/1"),
            "{e:#}"
        );
    }

    #[test]
    fn fields_added_after_the_first_reports_may_be_absent() {
        let mut v = observe_json(&[("a", 1, 10)]);
        for f in ["expired_unreleased", "acquire_us", "release_us"] {
            v["locks"][0].as_object_mut().unwrap().remove(f);
        }
        assert_eq!(data("old", &v).report.locks[0].expired_unreleased, 0);
    }

    #[test]
    fn no_locks_gives_no_patterns() {
        let d = data("quiet", &observe_json(&[]));
        assert!(patterns(std::slice::from_ref(&d)).is_empty());
        assert_eq!(d.total(|l| l.acquired), 0);
    }

    #[test]
    fn patterns_merge_across_reports_busiest_first() {
        let a = data("a", &observe_json(&[("low", 1, 10), ("hot", 50, 10)]));
        let b = data("b", &observe_json(&[("hot", 70, 20), ("only-b", 30, 0)]));
        let both = [a, b];
        let ps = patterns(&both);
        let names: Vec<&str> = ps.iter().map(|p| p.pattern).collect();
        assert_eq!(names, ["hot", "only-b", "low"]);
        let hot: Vec<usize> = ps[0].locks.iter().map(|(i, _)| *i).collect();
        assert_eq!(hot, [0, 1], "both reports, in report order");
        assert_eq!(ps[0].attempts(), 50 + 25 + 70 + 35);
        assert!(ps[0].has_holds() && !ps[1].has_holds());
    }

    #[test]
    fn one_pattern_gives_its_spectrum_and_ttl_row_in_microseconds() {
        let d = data("a", &observe_json(&[("order:{id}:lock", 200, 250_000)]));
        let l = &d.report.locks[0];
        let s = hold_spectrum(l);
        assert!(s.from_summary);
        assert_eq!(s.points.first(), Some(&(0.5, 125_000.0)));
        assert_eq!(s.points.last().unwrap().1, 275_000.0, "ends at the max");
        let r = ttl_row(l, Some("order".into()), 3);
        assert_eq!(r.bar, Some((125_000.0, 250_000.0)));
        assert_eq!(r.whisker, Some(275_000.0));
        assert_eq!(r.band, Some((5_000_000.0, 30_000_000.0)));
        assert_eq!(r.mark, Some(601_000.0));
        assert_eq!((r.label.as_deref(), r.style), (Some("order"), 3));
    }

    #[test]
    fn a_pattern_without_holds_or_ttls_keeps_only_what_it_has() {
        let mut v = observe_json(&[("x", 3, 0)]);
        v["locks"][0]["ttl_ms"] = serde_json::json!({"min": null, "max": 800});
        let d = data("a", &v);
        let r = ttl_row(&d.report.locks[0], None, 0);
        assert_eq!((r.bar, r.whisker, r.mark), (None, None, None));
        assert_eq!(r.band, Some((800_000.0, 800_000.0)));
        assert!(hold_spectrum(&d.report.locks[0]).points.is_empty());
    }
}
