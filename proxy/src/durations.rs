//! `lockkit_proxy_command_duration_seconds`, the one histogram recorded per command: fixed
//! buckets of atomic counts, rendered into `/metrics` beside the recorder's own rendering.
//!
//! The Prometheus recorder keeps every sample of a histogram until its next upkeep (every 5 s)
//! and sorts them into buckets then. At the proxy's pipelined rates that is millions of samples
//! held at once (the proxy's resident memory grew by about 17 MB a second at 800k GETs a
//! second), and a write per sample. Here a batch of replies of one command from one read
//! costs three atomic additions whatever its size, and the memory is fixed: one row of counts
//! per command label (400 at most, the command metrics' bound on labels).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ::metrics::HistogramFn;

/// Histogram buckets, in seconds: sub-millisecond round trips to multi-second holds (every
/// histogram of the proxy's `/metrics` has them).
pub(crate) const BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// The metric's name.
const NAME: &str = "lockkit_proxy_command_duration_seconds";
/// Its help text.
const HELP: &str =
    "From reading a command to reading its reply (proxy to server to proxy), by command";

/// One command's durations: a count per bucket (the last one past the largest bound), their
/// sum in nanoseconds and their number.
#[derive(Debug, Default)]
pub(crate) struct Durations {
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
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
        self.count.fetch_add(n, Ordering::Relaxed);
    }

    /// The series of this command, cumulative as Prometheus reads them.
    fn render(&self, label: &str, out: &mut String) {
        let mut total = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            total += bucket.load(Ordering::Relaxed);
            match BUCKETS.get(i) {
                Some(le) => {
                    let _ = writeln!(
                        out,
                        "{NAME}_bucket{{command=\"{label}\",le=\"{le}\"}} {total}"
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "{NAME}_bucket{{command=\"{label}\",le=\"+Inf\"}} {total}"
                    );
                }
            }
        }
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{NAME}_sum{{command=\"{label}\"}} {sum}");
        // The count the buckets add up to (read apart, `count` could run ahead of them).
        let _ = writeln!(out, "{NAME}_count{{command=\"{label}\"}} {total}");
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

/// Every command label's durations in this process (as the recorder's series are per process).
static TABLE: Mutex<BTreeMap<String, Arc<Durations>>> = Mutex::new(BTreeMap::new());

/// The histogram of command label `label` (made on its first use).
pub(crate) fn histogram(label: &str) -> ::metrics::Histogram {
    let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    let d = match table.get(label) {
        Some(d) => Arc::clone(d),
        None => {
            let d = Arc::new(Durations::default());
            table.insert(label.to_string(), Arc::clone(&d));
            d
        }
    };
    ::metrics::Histogram::from_arc(d)
}

/// Appends the metric (help, type and every command's series) to a `/metrics` body; nothing
/// while no command was counted.
pub(crate) fn render(out: &mut String) {
    let table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    if table.is_empty() {
        return;
    }
    if !out.is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
    let _ = writeln!(out, "# HELP {NAME} {HELP}");
    let _ = writeln!(out, "# TYPE {NAME} histogram");
    for (label, d) in table.iter() {
        d.render(&escape(label), out);
    }
}

/// A label value as the text format wants it (`\`, `"` and newlines escaped). The labels are
/// command names or `other` already; this keeps the output well-formed whatever comes.
fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_lands_in_its_bucket_and_renders_cumulatively() {
        let d = Durations::default();
        d.record_many(0.0003, 16); // le 0.0005
        d.record(0.0001); // le 0.0001: the bound is inclusive
        d.record(40.0); // past 30: +Inf only
        d.record_many(0.002, 0); // nothing
        let mut out = String::new();
        d.render("GET", &mut out);
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
        let a = histogram("DURATIONS_TEST_A");
        a.record_many(0.001, 3);
        // A second handle of the same label adds to the same series.
        histogram("DURATIONS_TEST_A").record(0.001);
        histogram("DURATIONS_TEST_\"B\"").record(0.5);
        let mut out = String::from("# TYPE other counter\nother 1\n");
        render(&mut out);
        assert_eq!(
            out.matches(&format!("# TYPE {NAME} histogram")).count(),
            1,
            "{out}"
        );
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
    }
}
