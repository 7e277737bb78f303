//! What the page plots, read from a run's JSON and the interval logs beside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use hdrhistogram::Histogram;

use crate::bench::{Report, TimelinePoint, SCHEMA};
use crate::files::{read_intervals, read_report, LogInterval};
use crate::stats::{new_histogram, LatencySummary};

/// Points per power of ten along the percentile axis.
const STEPS_PER_NINE: u32 = 24;
/// The percentile axis never goes past 99.9999%.
const MAX_NINES: u32 = 6;

/// One operation's latency over percentiles: (quantile, microseconds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spectrum {
    /// Samples behind it.
    pub count: u64,
    /// Points in quantile order; the last is the max at `1 - 1/count`.
    pub points: Vec<(f64, f64)>,
    /// Only the summary percentiles were available (no interval log).
    pub from_summary: bool,
}

/// A fault injected during the run (`faults.events[]`), if the report has any.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultMark {
    /// Seconds since measuring began.
    pub t_s: f64,
    /// What was injected (`server-pause`, `restart`...).
    pub kind: String,
    /// How long it lasted.
    pub duration_ms: f64,
    /// Which node, if several.
    pub node: Option<String>,
}

/// One operation's interval: when, how many samples, its p99.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpInterval {
    /// Start, seconds since measuring began.
    pub t_s: f64,
    /// Length, seconds.
    pub len_s: f64,
    /// Samples.
    pub count: u64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
}

/// One run, ready to plot.
#[derive(Debug, Clone)]
pub struct RunData {
    /// The name it goes by on the page (the JSON's file name without `.json`).
    pub label: String,
    /// The report itself.
    pub report: Report,
    /// Latency spectrum per operation (operations with samples only).
    pub spectra: BTreeMap<String, Spectrum>,
    /// Per operation, its intervals in time order (empty without logs).
    pub intervals: BTreeMap<String, Vec<OpInterval>>,
    /// The counters per interval: the report's own timeline, or one rebuilt from the logs.
    pub timeline: Vec<TimelinePoint>,
    /// Whether `timeline` came from the report (errors and lost locks are only known then).
    pub timeline_has_errors: bool,
    /// Fault events, when the report has `faults.events`.
    pub faults: Vec<FaultMark>,
    /// What could not be read and what was used instead.
    pub notes: Vec<String>,
}

impl RunData {
    /// Reads a `lockkit.bench/1` JSON and the interval logs it names (beside it).
    ///
    /// # Errors
    /// The file is missing, is not JSON, is not a bench report, or its fields do not match the
    /// schema. A missing or unreadable log is not an error: the page then plots the summary
    /// percentiles and says so.
    pub fn load(path: &Path) -> anyhow::Result<RunData> {
        let value = read_report(
            path,
            SCHEMA,
            "a lockkit bench report",
            "pass the .json file a `lockkit bench` run wrote",
        )?;
        RunData::from_json(path, value)
    }

    /// A run from the JSON of a bench report read from `path` (its interval logs beside it).
    ///
    /// # Errors
    /// The fields do not match the schema.
    pub fn from_json(path: &Path, value: serde_json::Value) -> anyhow::Result<RunData> {
        let report: Report = parse_schema(path, &value, SCHEMA)?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let mut run = RunData::from_report(label_of(path), report, &value);
        run.read_logs(&dir);
        Ok(run)
    }

    /// A run from a report alone (no logs read yet): summary spectra, the report's timeline
    /// and fault events from the raw JSON.
    pub fn from_report(label: String, report: Report, raw: &serde_json::Value) -> RunData {
        let spectra = report
            .latency_us
            .iter()
            .filter(|(_, l)| l.count > 0)
            .map(|(op, l)| (op.clone(), spectrum_from_summary(l)))
            .collect();
        RunData {
            label,
            timeline: report.timeline.clone(),
            timeline_has_errors: !report.timeline.is_empty(),
            faults: fault_events(raw),
            spectra,
            intervals: BTreeMap::new(),
            notes: Vec::new(),
            report,
        }
    }

    /// Reads the interval logs named in the report from `dir`: full spectra and per-interval
    /// p99. Unreadable logs leave a note and the summary in place.
    pub fn read_logs(&mut self, dir: &Path) {
        let logs = self.report.histogram_logs.clone();
        for (op, file) in &logs {
            let path = dir.join(file);
            let read = std::fs::read(&path)
                .map_err(anyhow::Error::from)
                .and_then(|b| read_intervals(&b));
            match read {
                Ok(ivs) => self.add_log(op, &ivs),
                Err(e) => self.notes.push(format!(
                    "{op}: interval log {} not read ({e:#}); its spectrum shows the summary percentiles only",
                    path.display()
                )),
            }
        }
        if self.timeline.is_empty() {
            self.timeline = timeline_from_logs(&self.intervals);
        }
    }

    /// Adds one operation's intervals.
    pub fn add_log(&mut self, op: &str, ivs: &[LogInterval]) {
        let mut total = new_histogram();
        let mut series = Vec::with_capacity(ivs.len());
        for i in ivs {
            let _ = total.add(&i.hist);
            series.push(OpInterval {
                t_s: i.start.as_secs_f64(),
                len_s: i.len.as_secs_f64(),
                count: i.hist.len(),
                p99_us: i.hist.value_at_quantile(0.99) as f64,
            });
        }
        if !total.is_empty() {
            self.spectra.insert(op.to_string(), spectrum(&total));
        }
        self.intervals.insert(op.to_string(), series);
    }
}

/// The report's fields as `T`, or an error naming the file and the schema it fails.
///
/// # Errors
/// A field is missing or of the wrong type.
pub fn parse_schema<T: serde::de::DeserializeOwned>(
    path: &Path,
    value: &serde_json::Value,
    schema: &str,
) -> anyhow::Result<T> {
    T::deserialize(value).with_context(|| {
        format!(
            "{} does not match the {schema} schema; was it edited by hand?",
            path.display()
        )
    })
}

/// The name a report goes by on a page: its file name without `.json`.
pub fn label_of(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned())
}

/// The spectrum of a histogram, from 0% to the last sample.
pub fn spectrum(h: &Histogram<u64>) -> Spectrum {
    let count = h.len();
    if count == 0 {
        return Spectrum::default();
    }
    let top = (count as f64).log10().min(f64::from(MAX_NINES));
    let mut points = Vec::new();
    let mut k = 0u32;
    loop {
        let t = f64::from(k) / f64::from(STEPS_PER_NINE);
        if t >= top {
            break;
        }
        let q = 1.0 - 10f64.powf(-t);
        points.push((q, h.value_at_quantile(q) as f64));
        k += 1;
    }
    points.push((1.0 - 10f64.powf(-top), h.max() as f64));
    Spectrum {
        count,
        points,
        from_summary: false,
    }
}

/// The few points a JSON summary gives (p50, p90, p99, p99.9, max), where the count reaches.
pub fn spectrum_from_summary(l: &LatencySummary) -> Spectrum {
    if l.count == 0 {
        return Spectrum::default();
    }
    let top = 1.0 - 1.0 / (l.count as f64).max(10.0);
    let mut points: Vec<(f64, f64)> = [(0.5, l.p50), (0.9, l.p90), (0.99, l.p99), (0.999, l.p999)]
        .into_iter()
        .filter(|(q, _)| *q < top)
        .map(|(q, v)| (q, v as f64))
        .collect();
    points.push((top, l.max as f64));
    Spectrum {
        count: l.count,
        points,
        from_summary: true,
    }
}

/// `faults.events[]` of the raw report: absent, null or malformed entries are skipped.
pub fn fault_events(raw: &serde_json::Value) -> Vec<FaultMark> {
    let Some(events) = raw.pointer("/faults/events").and_then(|e| e.as_array()) else {
        return Vec::new();
    };
    events
        .iter()
        .filter_map(|e| {
            Some(FaultMark {
                t_s: e.get("t_s")?.as_f64()?,
                kind: e.get("kind")?.as_str()?.to_string(),
                duration_ms: e.get("duration_ms").and_then(|d| d.as_f64()).unwrap_or(0.0),
                node: e.get("node").and_then(|n| match n {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Number(n) => Some(n.to_string()),
                    _ => None,
                }),
            })
        })
        .collect()
}

/// A timeline for reports that predate `timeline`: cycles from the cycle log, attempts and
/// contention from the acquire logs (errors are unknown there).
fn timeline_from_logs(intervals: &BTreeMap<String, Vec<OpInterval>>) -> Vec<TimelinePoint> {
    let Some(cycles) = intervals.get("cycle") else {
        return Vec::new();
    };
    let count_at = |op: &str, t: f64| {
        intervals
            .get(op)
            .and_then(|v| v.iter().find(|i| (i.t_s - t).abs() < 1e-3))
            .map_or(0, |i| i.count)
    };
    cycles
        .iter()
        .map(|c| {
            let contended = count_at("acquire_contended", c.t_s);
            TimelinePoint {
                t_s: c.t_s,
                len_s: c.len_s,
                cycles: c.count,
                attempts: count_at("acquire_ok", c.t_s) + contended,
                contended,
                errors: 0,
                lost_locks: 0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn spectrum_runs_from_zero_to_the_max_at_the_last_sample() {
        let mut h = new_histogram();
        for v in 1..=10_000u64 {
            h.record(v).unwrap();
        }
        let s = spectrum(&h);
        assert_eq!(s.count, 10_000);
        assert_eq!(s.points[0], (0.0, 1.0));
        let (q, v) = *s.points.last().unwrap();
        assert!((q - 0.9999).abs() < 1e-12, "{q}");
        assert_eq!(v, h.max() as f64);
        assert!(s
            .points
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(s.points.len(), 4 * STEPS_PER_NINE as usize + 1);
    }

    #[test]
    fn summary_spectrum_keeps_the_percentiles_the_count_supports() {
        let l = LatencySummary {
            count: 200,
            p50: 10,
            p90: 20,
            p99: 30,
            p999: 40,
            max: 50,
            mean: 12.0,
        };
        let s = spectrum_from_summary(&l);
        assert!(s.from_summary);
        assert_eq!(
            s.points,
            vec![(0.5, 10.0), (0.9, 20.0), (0.99, 30.0), (0.995, 50.0)]
        );
        assert!(spectrum_from_summary(&LatencySummary::default())
            .points
            .is_empty());
    }

    #[test]
    fn fault_events_are_optional_and_malformed_ones_skip() {
        assert!(fault_events(&serde_json::json!({})).is_empty());
        assert!(fault_events(&serde_json::json!({"faults": null})).is_empty());
        let raw = serde_json::json!({"faults": {"events": [
            {"t_s": 2.5, "kind": "server-pause", "duration_ms": 300, "node": 1},
            {"kind": "no time"},
            {"t_s": 4, "kind": "restart"}
        ]}});
        let ev = fault_events(&raw);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].kind, "server-pause");
        assert_eq!(ev[0].duration_ms, 300.0);
        assert_eq!(ev[0].node.as_deref(), Some("1"));
        assert_eq!((ev[1].t_s, ev[1].duration_ms), (4.0, 0.0));
    }

    #[test]
    fn logs_give_per_interval_p99_and_a_timeline_when_the_report_has_none() {
        let iv = |start: u64, vals: &[u64]| {
            let mut h = new_histogram();
            for v in vals {
                h.record(*v).unwrap();
            }
            LogInterval {
                start: Duration::from_secs(start),
                len: Duration::from_secs(1),
                tag: "x".into(),
                hist: h,
            }
        };
        let mut intervals = BTreeMap::new();
        let mut run = RunData {
            label: "r".into(),
            report: serde_json::from_value(crate::html::tests::report_json()).unwrap(),
            spectra: BTreeMap::new(),
            intervals: BTreeMap::new(),
            timeline: Vec::new(),
            timeline_has_errors: false,
            faults: Vec::new(),
            notes: Vec::new(),
        };
        run.add_log("cycle", &[iv(0, &[100, 200]), iv(1, &[300])]);
        run.add_log("acquire_ok", &[iv(0, &[10, 10]), iv(1, &[10])]);
        run.add_log("acquire_contended", &[iv(1, &[5, 5, 5])]);
        intervals.clone_from(&run.intervals);
        assert_eq!(run.intervals["cycle"][1].p99_us, 300.0);
        assert_eq!(run.spectra["cycle"].count, 3);
        let t = timeline_from_logs(&intervals);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].cycles, t[0].attempts, t[0].contended), (2, 2, 0));
        assert_eq!((t[1].cycles, t[1].attempts, t[1].contended), (1, 4, 3));
    }
}
