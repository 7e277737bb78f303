//! The HTML page: one self-contained file (inline CSS and SVG, no script, nothing fetched),
//! for one run or several side by side.

use super::data::RunData;
use super::svg::{
    esc, fmt_pct, fmt_rate, fmt_s, fmt_us, style_sample, Axis, Chart, Level, Marker, Scale, Series,
};
use crate::units::format_rate;
use std::fmt::Write as _;

const CSS: &str = r#"
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: #1a1a1a; background: #fff; margin: 0 auto; padding: 20px 28px 40px; max-width: 1320px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #bbb; padding-bottom: 3px; }
.sub { color: #555; margin: 0 0 12px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; font-weight: 600; }
td.l, th.l { text-align: left; }
table.runs td { white-space: normal; vertical-align: top; }
table.wrap th { white-space: normal; vertical-align: bottom; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 14px 22px; }
figure { margin: 0; break-inside: avoid; page-break-inside: avoid; }
figcaption { font-weight: 600; margin: 0 0 2px; }
figcaption span { font-weight: 400; color: #555; }
svg.chart { width: 100%; height: auto; display: block; }
svg.chart text { font: 11px system-ui, -apple-system, "DejaVu Sans", sans-serif; fill: #222; }
svg.chart text.axis-title { font-size: 12px; fill: #111; }
svg.chart text.marker-label { font-size: 10px; fill: #333; }
svg.chart text.level-label { font-size: 11px; fill: #111; }
svg.chart text.no-data { font-size: 14px; fill: #666; }
.legend-list { list-style: none; padding: 0; margin: 4px 0 10px; }
.legend-list li { margin: 2px 0; }
svg.sample { vertical-align: middle; margin-right: 6px; }
pre { background: #f6f6f6; border: 1px solid #ddd; padding: 8px 10px; white-space: pre-wrap; margin: 4px 0 12px; }
.note { color: #444; font-size: 13px; }
.bad { font-weight: 700; }
footer { margin-top: 30px; color: #666; font-size: 12px; }
@media print {
  body { padding: 0; max-width: none; font-size: 11px; }
  .grid { grid-template-columns: 1fr 1fr; }
  h2 { break-after: avoid; }
}
"#;

/// What each operation measures, for captions.
fn op_caption(op: &str) -> &'static str {
    match op {
        "acquire_ok" => "acquire attempts that got the lock",
        "acquire_contended" => "acquire attempts that found it busy",
        "release" => "releases",
        "extend" => "explicit extends",
        "cycle" => "acquire + hold + release",
        "time_to_acquire" => "cycle start to holding the lock, retries included",
        _ => "",
    }
}

fn us(v: u64) -> String {
    fmt_us(v as f64)
}

/// Intervals shorter than this (the last one, cut short when the run stops) are too short for
/// a steady rate and are left off the plots over time.
const MIN_INTERVAL_S: f64 = 0.25;

const HEAD: PageHead = PageHead {
    tool: "lockkit bench",
    reports: "runs",
    sub: "Latency in microseconds (µs) and milliseconds (ms); rates per second. \
          Lines are told apart by dash pattern as well as colour.",
};

/// The page for `runs` (at least one).
pub fn render(runs: &[RunData]) -> String {
    let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    page(&HEAD, &labels, |s| {
        runs_table(s, runs);
        summary_table(s, runs);
        latency_table(s, runs);
        legend(s, &labels);
        spectra(s, runs);
        over_time(s, runs);
        faults_table(s, runs);
        errors_table(s, runs);
        ttl_section(s, runs);
        notes(s, runs);
    })
}

/// What a page says above its body.
pub(crate) struct PageHead {
    /// The tool that wrote the reports, first in the title.
    pub(crate) tool: &'static str,
    /// What the reports are called, in the title of a comparison ("3 runs compared").
    pub(crate) reports: &'static str,
    /// The line under the title.
    pub(crate) sub: &'static str,
}

/// One whole page for the reports named `labels`: the head, what `body` writes, the footer.
pub(crate) fn page(head: &PageHead, labels: &[&str], body: impl FnOnce(&mut String)) -> String {
    let mut s = open_page(head, labels);
    body(&mut s);
    close_page(&mut s, labels);
    s
}

/// A new page: the head with the stylesheet, the title and the line under it. The title is
/// the tool and the one report's label, or how many reports are compared.
fn open_page(head: &PageHead, labels: &[&str]) -> String {
    let PageHead { tool, reports, sub } = head;
    let mut s = String::with_capacity(64 * 1024);
    let title = match labels {
        [one] => format!("{tool}: {one}"),
        _ => format!("{tool}: {} {reports} compared", labels.len()),
    };
    let _ = writeln!(
        &mut s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head><body>",
        esc(&title)
    );
    let _ = writeln!(&mut s, "<h1>{}</h1>", esc(&title));
    let _ = writeln!(&mut s, "<p class=\"sub\">{}</p>", esc(sub));
    s
}

/// Closes a page with the footer naming the reports it was made from.
fn close_page(s: &mut String, labels: &[&str]) {
    let _ = writeln!(
        s,
        "<footer>Written by lockkit {} from {}. One self-contained file: inline SVG and CSS, \
         nothing loaded from the network.</footer>\n</body></html>",
        env!("CARGO_PKG_VERSION"),
        esc(&labels
            .iter()
            .map(|l| format!("{l}.json"))
            .collect::<Vec<_>>()
            .join(", "))
    );
}

fn runs_table(s: &mut String, runs: &[RunData]) {
    s.push_str(
        "<h2 id=\"runs\">Runs</h2><table class=\"runs\"><tr><th class=\"l\">run</th><th class=\"l\">target</th>\
         <th class=\"l\">server</th><th class=\"l\">script</th><th class=\"l\">loop</th>\
         <th>measured</th><th class=\"l\">date (UTC)</th><th class=\"l\">machine</th>\
         <th class=\"l\">workload</th></tr>\n",
    );
    for r in runs {
        let rep = &r.report;
        let c = &rep.config;
        let workload = format!(
            "{}, {} clients, {} connections, {} keys, hold {}, TTL {} ms{}",
            primitive(c),
            c["clients"],
            c["connections"],
            c["keys"],
            us(c["hold_us"].as_u64().unwrap_or(0)),
            c["ttl_ms"],
            if c["watchdog"].as_bool() == Some(true) {
                ", watchdog"
            } else {
                ""
            }
        );
        let lp = match rep.load.rate {
            Some(rate) => format!("open, {}/s", format_rate(rate as f64)),
            None => rep.load.mode.clone(),
        };
        let _ = writeln!(
            s,
            "<tr><td class=\"l\">{}{}</td><td class=\"l\">{}</td><td class=\"l\">{} {}</td>\
             <td class=\"l\">{}</td><td class=\"l\">{}</td><td>{:.1} s</td><td class=\"l\">{}</td>\
             <td class=\"l\">{} cores, {}</td><td class=\"l\">{}</td></tr>",
            esc(&r.label),
            if rep.interrupted {
                " <span class=\"bad\">(interrupted)</span>"
            } else {
                ""
            },
            esc(&rep.target.url),
            esc(&rep.target.mode),
            esc(&rep.target.server_version),
            esc(&rep.target.script_mode),
            esc(&lp),
            rep.duration_s,
            esc(&rep.machine.date),
            rep.machine.cores,
            esc(&rep.machine.os),
            esc(&workload),
        );
    }
    s.push_str("</table>\n");
}

/// The primitive a run took (`config.primitive`; reports written before it are a mutex's).
fn primitive(c: &serde_json::Value) -> String {
    match c["primitive"].as_str().unwrap_or("mutex") {
        "semaphore" => format!("semaphore, {} permits", c["permits"]),
        "rwlock" => format!("rwlock, read ratio {}", c["read_ratio"]),
        other => other.to_string(),
    }
}

fn summary_table(s: &mut String, runs: &[RunData]) {
    let fenced = runs.iter().any(|r| r.report.safety.fencing.is_some());
    s.push_str(
        "<h2 id=\"summary\">Summary</h2><table><tr><th class=\"l\">run</th><th>cycles/s</th><th>attempts/s</th>\
         <th>contention</th><th>errors</th><th>violations</th><th>max holders</th><th>lost locks</th>",
    );
    if fenced {
        s.push_str("<th>fencing refused</th><th>lease overlaps</th>");
    }
    s.push_str(
        "<th>lockkit CPU/cycle</th><th>server CPU/cycle</th><th>of server ceiling</th></tr>\n",
    );
    for r in runs {
        let rep = &r.report;
        let opt = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.2} µs"));
        let bad = |n: u64| {
            if n > 0 {
                format!("<span class=\"bad\">{n}</span>")
            } else {
                n.to_string()
            }
        };
        // 0 in reports written before the field: unknown, not "nobody held".
        let max_holders = match rep.safety.max_holders {
            0 => "–".to_string(),
            n => n.to_string(),
        };
        let fencing = match (&rep.safety.fencing, fenced) {
            (Some(f), _) => format!("<td>{}</td><td>{}</td>", f.refused, f.lease_overlaps),
            (None, true) => "<td>–</td><td>–</td>".to_string(),
            (None, false) => String::new(),
        };
        let _ = writeln!(
            s,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{:.2}%</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td>{}<td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.label),
            format_rate(rep.throughput.cycles_per_s),
            format_rate(rep.throughput.attempts_per_s),
            rep.contention_rate * 100.0,
            bad(rep.errors.total),
            bad(rep.safety.violations),
            max_holders,
            bad(rep.safety.lost_locks),
            fencing,
            opt(rep.cpu.tool_us_per_cycle),
            opt(rep.cpu.server_us_per_cycle),
            rep.ceiling
                .as_ref()
                .map_or("–".into(), |c| format!("{:.0}%", c.ratio * 100.0)),
        );
    }
    s.push_str("</table>\n");
}

fn latency_table(s: &mut String, runs: &[RunData]) {
    s.push_str(
        "<h2 id=\"latency\">Latency</h2><table><tr><th class=\"l\">operation</th><th class=\"l\">run</th>\
         <th>count</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th>\
         <th>mean</th></tr>\n",
    );
    for op in ops(runs) {
        for r in runs {
            let Some(l) = r.report.latency_us.get(&op).filter(|l| l.count > 0) else {
                continue;
            };
            let _ = write!(
                s,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td>",
                esc(&op),
                esc(&r.label)
            );
            for c in l.cells(us) {
                let _ = write!(s, "<td>{c}</td>");
            }
            s.push_str("</tr>\n");
        }
    }
    s.push_str("</table>\n");
}

/// Operations with samples in any run, in the report's order.
fn ops(runs: &[RunData]) -> Vec<String> {
    crate::stats::Op::ALL
        .iter()
        .map(|o| o.name().to_string())
        .filter(|op| runs.iter().any(|r| r.spectra.contains_key(op)))
        .collect()
}

/// With several runs, which line style is which run.
pub(crate) fn legend(s: &mut String, labels: &[&str]) {
    if labels.len() < 2 {
        return;
    }
    s.push_str("<h2 id=\"legend\">Runs on the plots</h2><ul class=\"legend-list\">");
    for (i, l) in labels.iter().enumerate() {
        let _ = write!(s, "<li>{}{}</li>", style_sample(i), esc(l));
    }
    s.push_str("</ul>\n");
}

/// A chart with its caption.
pub(crate) fn figure(s: &mut String, caption: &str, detail: &str, chart: &Chart) {
    let _ = writeln!(
        s,
        "<figure><figcaption>{} <span>{}</span></figcaption>{}</figure>",
        esc(caption),
        esc(detail),
        chart.render()
    );
}

fn spectra(s: &mut String, runs: &[RunData]) {
    s.push_str(
        "<h2 id=\"spectra\">Latency by percentile</h2><p class=\"note\">HdrHistogram's percentile spectrum: \
         the x axis spreads the tail (each step right is ten times rarer), so the worst \
         requests get as much room as the typical ones.</p><div class=\"grid\">\n",
    );
    for op in ops(runs) {
        let spectra: Vec<_> = runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.spectra.get(&op).map(|sp| (i, r, sp)))
            .collect();
        let max_count = spectra.iter().map(|(_, _, sp)| sp.count).max().unwrap_or(1);
        let series = spectra
            .iter()
            .map(|(i, r, sp)| Series {
                label: if sp.from_summary {
                    format!("{} (summary percentiles only)", r.label)
                } else {
                    r.label.clone()
                },
                points: sp.points.clone(),
                style: *i,
            })
            .collect();
        let chart = spectrum_chart(
            format!("{op} latency by percentile"),
            "latency",
            max_count,
            series,
            Vec::new(),
        );
        figure(s, &op, op_caption(&op), &chart);
    }
    s.push_str("</div>\n");
}

/// A percentile spectrum: `what` ("latency", "hold time") over HdrHistogram's percentile
/// axis, as far as `max_count` samples reach, with `levels` drawn across it.
pub(crate) fn spectrum_chart(
    title: String,
    what: &str,
    max_count: u64,
    series: Vec<Series>,
    levels: Vec<Level>,
) -> Chart {
    let nines = ((max_count.max(1) as f64).log10().ceil() as u32).clamp(2, 6);
    let y = Scale::for_latency(
        series
            .iter()
            .flat_map(|se| se.points.iter().map(|p| p.1))
            .chain(levels.iter().map(|l| l.y)),
    );
    Chart {
        title,
        x: Axis {
            scale: Scale::Nines { max: nines },
            title: "percentile (log scale of 1 − p)".into(),
            fmt: fmt_pct,
        },
        y: Axis {
            title: value_title(what, &y),
            scale: y,
            fmt: fmt_us,
        },
        series,
        markers: Vec::new(),
        levels,
    }
}

/// A time axis's title, saying when it is logarithmic.
pub(crate) fn value_title(what: &str, y: &Scale) -> String {
    match y {
        Scale::Log { .. } => format!("{what} (log scale)"),
        _ => what.to_string(),
    }
}

/// The time axis: 0 to the longest run.
fn time_axis(runs: &[RunData]) -> Axis {
    let end = runs
        .iter()
        .flat_map(|r| {
            r.timeline
                .iter()
                .map(|t| t.t_s + t.len_s)
                .chain([r.report.duration_s])
        })
        .fold(0.0_f64, f64::max);
    Axis {
        scale: Scale::linear_to([end]),
        title: "time since measuring began (s)".into(),
        fmt: fmt_s,
    }
}

fn fault_markers(runs: &[RunData]) -> Vec<Marker> {
    runs.iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.faults.iter().map(move |f| Marker {
                x: f.t_s,
                width: f.duration_ms / 1000.0,
                label: if runs.len() > 1 {
                    format!("{} (run {})", f.kind, i + 1)
                } else {
                    f.kind.clone()
                },
            })
        })
        .collect()
}

/// Per run, a value per timeline interval, plotted at the interval's middle.
fn timeline_series(
    runs: &[RunData],
    f: impl Fn(&RunData, &crate::bench::TimelinePoint) -> Option<f64>,
) -> Vec<Series> {
    runs.iter()
        .enumerate()
        .map(|(i, r)| Series {
            label: r.label.clone(),
            points: r
                .timeline
                .iter()
                .filter(|t| t.len_s >= MIN_INTERVAL_S)
                .filter_map(|t| f(r, t).map(|v| (t.t_s + t.len_s / 2.0, v)))
                .collect(),
            style: i,
        })
        .collect()
}

fn over_time(s: &mut String, runs: &[RunData]) {
    s.push_str(
        "<h2 id=\"over-time\">Over time</h2><p class=\"note\">One point per interval (about a second), \
         at its middle. Shaded spans and dotted lines mark injected faults.</p>\
         <div class=\"grid\">\n",
    );
    let x = time_axis(runs);
    let markers = fault_markers(runs);
    let chart = |title: &str, y_title: &str, fmt: fn(f64) -> String, series: Vec<Series>| {
        // A little headroom so the highest point does not run along the frame.
        let y = Scale::linear_to(
            series
                .iter()
                .flat_map(|se| se.points.iter().map(|p| p.1 * 1.05)),
        );
        Chart {
            title: title.into(),
            x: x.clone(),
            y: Axis {
                scale: y,
                title: y_title.into(),
                fmt,
            },
            series,
            markers: markers.clone(),
            levels: Vec::new(),
        }
    };

    let tput = timeline_series(runs, |_, t| Some(t.cycles as f64 / t.len_s));
    figure(
        s,
        "Throughput",
        "successful cycles per second",
        &chart("Throughput over time", "cycles per second", fmt_rate, tput),
    );

    let p99_op = |r: &RunData| {
        ["cycle", "acquire_ok"]
            .into_iter()
            .find(|op| r.intervals.get(*op).is_some_and(|v| !v.is_empty()))
    };
    let p99: Vec<Series> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| Series {
            label: r.label.clone(),
            points: p99_op(r)
                .map(|op| {
                    r.intervals[op]
                        .iter()
                        .filter(|iv| iv.count > 0 && iv.len_s >= MIN_INTERVAL_S)
                        .map(|iv| (iv.t_s + iv.len_s / 2.0, iv.p99_us))
                        .collect()
                })
                .unwrap_or_default(),
            style: i,
        })
        .collect();
    let y = Scale::for_latency(p99.iter().flat_map(|se| se.points.iter().map(|p| p.1)));
    let ops_used: Vec<&str> = runs.iter().filter_map(p99_op).collect();
    let detail = if ops_used.iter().all(|o| *o == "cycle") {
        "of the cycle (acquire + hold + release), per interval".to_string()
    } else {
        format!("per interval, of: {}", ops_used.join(", "))
    };
    figure(
        s,
        "p99 latency",
        &detail,
        &Chart {
            title: "p99 latency over time".into(),
            x: x.clone(),
            y: Axis {
                title: format!("p99 {}", value_title("latency", &y)),
                scale: y,
                fmt: fmt_us,
            },
            series: p99,
            markers: markers.clone(),
            levels: Vec::new(),
        },
    );

    let contention = timeline_series(runs, |_, t| {
        (t.attempts > 0).then(|| t.contended as f64 / t.attempts as f64)
    });
    figure(
        s,
        "Contention",
        "acquire attempts that found the lock busy",
        &chart(
            "Contention over time",
            "busy / all attempts",
            fmt_pct,
            contention,
        ),
    );

    let errors = timeline_series(runs, |r, t| {
        r.timeline_has_errors.then(|| t.errors as f64 / t.len_s)
    });
    let no_errors = runs.iter().all(|r| !r.timeline_has_errors);
    figure(
        s,
        "Errors",
        if no_errors {
            "not recorded per interval in these reports"
        } else if runs.iter().all(|r| r.report.errors.total == 0) {
            "errors of all kinds per second (none in these runs: the line lies on zero)"
        } else {
            "errors of all kinds per second"
        },
        &chart("Errors over time", "errors per second", fmt_rate, errors),
    );
    s.push_str("</div>\n");
}

fn faults_table(s: &mut String, runs: &[RunData]) {
    if runs.iter().all(|r| r.faults.is_empty()) {
        return;
    }
    s.push_str(
        "<h2 id=\"faults\">Injected faults</h2><table><tr><th class=\"l\">run</th><th>at</th>\
         <th class=\"l\">kind</th><th>lasting</th><th class=\"l\">node</th></tr>\n",
    );
    for r in runs {
        for f in &r.faults {
            let _ = writeln!(
                s,
                "<tr><td class=\"l\">{}</td><td>{:.1} s</td><td class=\"l\">{}</td><td>{} ms</td>\
                 <td class=\"l\">{}</td></tr>",
                esc(&r.label),
                f.t_s,
                esc(&f.kind),
                f.duration_ms,
                esc(f.node.as_deref().unwrap_or("–"))
            );
        }
    }
    s.push_str("</table>\n");
}

fn errors_table(s: &mut String, runs: &[RunData]) {
    if runs.iter().all(|r| r.report.errors.total == 0) {
        return;
    }
    s.push_str(
        "<h2 id=\"errors\">Errors by kind</h2><table><tr><th class=\"l\">run</th><th class=\"l\">kind</th>\
         <th>count</th></tr>\n",
    );
    for r in runs {
        for (kind, n) in &r.report.errors.by_kind {
            let _ = writeln!(
                s,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{n}</td></tr>",
                esc(&r.label),
                esc(kind)
            );
        }
    }
    s.push_str("</table>\n");
}

fn ttl_section(s: &mut String, runs: &[RunData]) {
    s.push_str(
        "<h2 id=\"ttl\">TTL recommendation</h2><p class=\"note\">From this run's measured latencies \
         (the same as <code>lockkit ttl</code>); the basis shows the formula with its numbers.</p>\n",
    );
    for r in runs {
        let t = &r.report.ttl;
        let _ = writeln!(
            s,
            "<p><b>{}</b>: TTL <b>{} ms</b>, watchdog renewal every {} ms, retry after {} ms \
             + up to {} ms jitter.</p><pre>{}</pre>",
            esc(&r.label),
            t.recommended_ms,
            t.watchdog_interval_ms,
            t.retry.delay_ms,
            t.retry.jitter_ms,
            esc(&t.basis)
        );
    }
}

fn notes(s: &mut String, runs: &[RunData]) {
    let mut items: Vec<String> = Vec::new();
    for r in runs {
        if r.report.load.mode == "closed" {
            items.push(format!(
                "{}: closed loop, latencies count from each request's send; a stalled server \
                 shows in throughput more than in the tail (use --rate for an open loop).",
                r.label
            ));
        } else {
            items.push(format!(
                "{}: open loop, latencies count from the {}; {} cycles started late.",
                r.label, r.report.load.latency_from, r.report.load.late_starts
            ));
        }
        items.extend(r.notes.iter().map(|n| format!("{}: {n}", r.label)));
    }
    s.push_str("<h2 id=\"notes\">Notes</h2><ul class=\"note\">");
    for n in items {
        let _ = write!(s, "<li>{}</li>", esc(&n));
    }
    s.push_str("</ul>\n");
}
