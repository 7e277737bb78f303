//! The proxy's histograms, `lockkit_proxy_command_duration_seconds` (every command) and
//! `lockkit_proxy_lock_hold_seconds` (every lock hold `observe` sees): fixed buckets of atomic
//! counts, rendered into `/metrics` after the recorder's own rendering.
//!
//! The Prometheus recorder keeps every sample of a histogram until its next upkeep (every 5 s)
//! and sorts them into buckets then. At the proxy's pipelined rates that is millions of samples
//! held at once (the proxy's resident memory grew by about 25 MB a second at 1.2M GETs a
//! second), and a write per sample. Here a batch of replies of one command from one read
//! costs two atomic additions whatever its size, and the memory is fixed: one row of counts
//! per label value (command names: 400 at most; lock patterns: as `observe` bounds them).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ::metrics::HistogramFn;

/// Histogram buckets, in seconds: sub-millisecond round trips to multi-second holds (every
/// histogram of the proxy's `/metrics` has them).
pub(crate) const BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// A histogram with one label: its name, help text and label name.
#[derive(Debug)]
pub(crate) struct Family {
    name: &'static str,
    help: &'static str,
    label: &'static str,
}

/// `lockkit_proxy_command_duration_seconds`, by command.
pub(crate) const COMMAND_DURATION: Family = Family {
    name: "lockkit_proxy_command_duration_seconds",
    help: "From reading a command to reading its reply (proxy to server to proxy), by command",
    label: "command",
};

/// `lockkit_proxy_lock_hold_seconds`, by lock pattern.
pub(crate) const LOCK_HOLD: Family = Family {
    name: "lockkit_proxy_lock_hold_seconds",
    help: "observe: how long locks were held, by key pattern",
    label: "pattern",
};

/// Every family, in the order `/metrics` shows them.
const FAMILIES: [&Family; 2] = [&COMMAND_DURATION, &LOCK_HOLD];

/// One label value's durations: a count per bucket (the last one past the largest bound) and
/// their sum in nanoseconds. The count is the buckets' total.
#[derive(Debug, Default)]
struct Durations {
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl Durations {
    fn add(&self, secs: f64, n: u64) {
        if n == 0 {
            return;
        }
        // Bounds are inclusive (Prometheus's `le`); NaN and past the last go to `+Inf`.
        let i = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        self.buckets[i].fetch_add(n, Ordering::Relaxed);
        // Saturating float-to-int casts: a negative or NaN duration adds nothing to the sum.
        let ns = (secs * 1e9).round() as u64;
        self.sum_ns
            .fetch_add(ns.saturating_mul(n), Ordering::Relaxed);
    }

    /// The series of one label value, cumulative as Prometheus reads them.
    fn render(&self, family: &Family, value: &str, out: &mut String) {
        let (name, label) = (family.name, family.label);
        let mut total = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            total += bucket.load(Ordering::Relaxed);
            let le = BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_string(), f64::to_string);
            let _ = writeln!(
                out,
                "{name}_bucket{{{label}=\"{value}\",le=\"{le}\"}} {total}"
            );
        }
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{label}=\"{value}\"}} {sum}");
        let _ = writeln!(out, "{name}_count{{{label}=\"{value}\"}} {total}");
    }
}

impl HistogramFn for Durations {
    fn record(&self, value: f64) {
        self.add(value, 1);
    }

    fn record_many(&self, value: f64, count: usize) {
        self.add(value, count as u64);
    }
}

/// Every family's histograms in this process, by family name and label value (as the
/// recorder's series are per process).
type HistogramTable = BTreeMap<&'static str, BTreeMap<String, Arc<Durations>>>;
static TABLE: Mutex<HistogramTable> = Mutex::new(BTreeMap::new());

fn durations(family: &Family, value: &str) -> Arc<Durations> {
    let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    let series = table.entry(family.name).or_default();
    match series.get(value) {
        Some(d) => Arc::clone(d),
        None => {
            let d = Arc::new(Durations::default());
            series.insert(value.to_string(), Arc::clone(&d));
            d
        }
    }
}

/// The histogram of `family` for label value `value` (made on its first use).
pub(crate) fn histogram(family: &Family, value: &str) -> ::metrics::Histogram {
    ::metrics::Histogram::from_arc(durations(family, value))
}

/// Records one duration of `family` for label value `value`.
pub(crate) fn record(family: &Family, value: &str, d: Duration) {
    durations(family, value).add(d.as_secs_f64(), 1);
}

/// Appends every family that has series (help, type and each label value's series) to a
/// `/metrics` body.
pub(crate) fn render(out: &mut String) {
    let table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    for family in FAMILIES {
        let Some(series) = table.get(family.name).filter(|s| !s.is_empty()) else {
            continue;
        };
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push('\n');
        }
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} histogram", family.name);
        for (value, d) in series {
            d.render(family, &escape(value), out);
        }
    }
}

/// A label value as the text format wants it (`\`, `"` and newlines escaped). Command names
/// and folded patterns are plain already; this keeps the output well-formed whatever comes.
fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = COMMAND_DURATION.name;

    #[test]
    fn a_batch_lands_in_its_bucket_and_renders_cumulatively() {
        let d = Durations::default();
        d.record_many(0.0003, 16); // le 0.0005
        d.record(0.0001); // le 0.0001: the bound is inclusive
        d.record(40.0); // past 30: +Inf only
        d.record_many(0.002, 0); // nothing
        let mut out = String::new();
        d.render(&COMMAND_DURATION, "GET", &mut out);
        let line = |le: &str| {
            let head = format!("{NAME}_bucket{{command=\"GET\",le=\"{le}\"}} ");
            out.lines()
                .find_map(|l| l.strip_prefix(&head))
                .unwrap_or_else(|| panic!("no bucket {le} in\n{out}"))
                .to_string()
        };
        assert_eq!(line("0.0001"), "1");
        assert_eq!(line("0.00025"), "1");
        assert_eq!(line("0.0005"), "17");
        assert_eq!(line("1"), "17");
        assert_eq!(line("30"), "17");
        assert_eq!(line("+Inf"), "18");
        assert!(
            out.contains(&format!("{NAME}_count{{command=\"GET\"}} 18\n")),
            "{out}"
        );
        let sum: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{NAME}_sum{{command=\"GET\"}} ")))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no sum in\n{out}"));
        assert!(
            (sum - (16.0 * 0.0003 + 0.0001 + 40.0)).abs() < 1e-9,
            "{sum}"
        );
    }

    #[test]
    fn the_table_gives_one_series_per_label_and_renders_help_and_type_once() {
        let a = histogram(&COMMAND_DURATION, "DURATIONS_TEST_A");
        a.record_many(0.001, 3);
        // A second handle of the same label adds to the same series.
        histogram(&COMMAND_DURATION, "DURATIONS_TEST_A").record(0.001);
        histogram(&COMMAND_DURATION, "DURATIONS_TEST_\"B\"").record(0.5);
        record(&LOCK_HOLD, "order:{id}:lock", Duration::from_millis(20));
        let mut out = String::from("# TYPE other counter\nother 1\n");
        render(&mut out);
        for family in FAMILIES {
            let ty = format!("# TYPE {} histogram", family.name);
            assert_eq!(out.matches(&ty).count(), 1, "{out}");
        }
        assert!(out.contains("other 1\n\n# HELP"), "{out}");
        assert!(
            out.contains(&format!("{NAME}_count{{command=\"DURATIONS_TEST_A\"}} 4\n")),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "{NAME}_count{{command=\"DURATIONS_TEST_\\\"B\\\"\"}} 1\n"
            )),
            "{out}"
        );
        assert!(
            out.contains(
                "lockkit_proxy_lock_hold_seconds_bucket{pattern=\"order:{id}:lock\",le=\"0.025\"} 1\n"
            ),
            "{out}"
        );
    }
}
