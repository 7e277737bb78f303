//! The page for observe reports (`lockkit report observe-*.json`): what the proxy saw, one
//! table row per lock pattern, the TTL chart (hold time against the TTLs asked for and the
//! recommended one) and each busy pattern's hold time by percentile. Several reports share
//! every table and plot, as bench runs do.

use std::fmt::Write as _;

use super::observed::{hold_spectrum, patterns, ttl_row, ObserveData, PatternView};
use super::page::{figure, legend, page, spectrum_chart, PageHead};
use super::rows::{RowChart, RowKey};
use super::svg::{esc, fmt_us, fmt_us3, Axis, Level, Scale, Series};
use crate::observe::LockPatternReport;

/// Patterns drawn in the plots, busiest first (the tables list them all).
pub const MAX_PLOTTED: usize = 24;

fn us(v: u64) -> String {
    fmt_us3(v as f64)
}

fn ms(v: u64) -> String {
    fmt_us(v as f64 * 1000.0)
}

const HEAD: PageHead = PageHead {
    tool: "lockkit proxy observe",
    reports: "reports",
    sub: "How long the application held its locks, per key pattern, as lockkit proxy saw them \
          pass; times in µs, ms and s. Lines are told apart by dash pattern as well as colour.",
};

/// The page for `reports` (at least one).
pub fn render(reports: &[ObserveData]) -> String {
    let labels: Vec<&str> = reports.iter().map(|r| r.label.as_str()).collect();
    let pats = patterns(reports);
    page(&HEAD, &labels, |s| {
        reports_table(s, reports);
        if !pats.is_empty() {
            legend(s, &labels);
            ttl_chart(s, &pats);
        }
        locks_table(s, reports, &pats);
        if !pats.is_empty() {
            hold_spectra(s, reports, &pats);
            hold_table(s, reports, &pats);
        }
        commands_table(s, reports);
        notes(s, reports, &pats);
    })
}

fn reports_table(s: &mut String, reports: &[ObserveData]) {
    s.push_str(
        "<h2 id=\"summary\">Summary</h2><table class=\"runs wrap\"><tr><th class=\"l\">report</th>\
         <th class=\"l\">target</th><th>observed for</th><th>commands</th><th>lock patterns</th>\
         <th>acquired</th><th>contended</th><th>released</th><th>released, not held</th></tr>\n",
    );
    for r in reports {
        let _ = writeln!(
            s,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{:.1} s</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.label),
            esc(&r.report.target),
            r.report.duration_s,
            r.commands_total(),
            r.report.locks.len(),
            r.total(|l| l.acquired),
            r.total(|l| l.contended),
            r.total(|l| l.released),
            bad(r.total(|l| l.released_not_held)),
        );
    }
    s.push_str("</table>\n");
}

fn bad(n: u64) -> String {
    if n > 0 {
        format!("<span class=\"bad\">{n}</span>")
    } else {
        n.to_string()
    }
}

/// "30 s", "5 s – 30 s", or "–" when the application gave none.
fn ttl_asked(l: &LockPatternReport) -> String {
    match (l.ttl_ms.min, l.ttl_ms.max) {
        (Some(a), Some(b)) if a != b => format!("{} – {}", ms(a), ms(b)),
        (Some(a), _) | (None, Some(a)) => ms(a),
        (None, None) => "–".into(),
    }
}

fn locks_table(s: &mut String, reports: &[ObserveData], pats: &[PatternView<'_>]) {
    s.push_str("<h2 id=\"locks\">Lock patterns</h2>");
    if pats.is_empty() {
        s.push_str(
            "<p class=\"note\">No lock traffic seen: no <code>SET key token NX PX|EX ttl</code>, \
             no lock script, no release of a key seen acquired.</p>\n",
        );
        return;
    }
    s.push_str("<p class=\"note\">Busiest first.</p>");
    pattern_table(
        s,
        reports,
        pats,
        "<th>acquired</th><th>contended</th><th>released</th><th>released, not held</th>\
         <th>expired, never released</th><th>TTL asked</th><th>recommended TTL</th>",
        |l| {
            format!(
                "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td><b>{}</b></td>",
                l.acquired,
                l.contended,
                l.released,
                bad(l.released_not_held),
                bad(l.expired_unreleased),
                ttl_asked(l),
                l.recommended_ttl_ms.map_or("–".into(), ms)
            )
        },
    );
}

fn hold_table(s: &mut String, reports: &[ObserveData], pats: &[PatternView<'_>]) {
    s.push_str(
        "<h2 id=\"hold\">Hold time</h2><p class=\"note\">From the acquire's reply passing the \
         proxy to the release passing it.</p>",
    );
    pattern_table(
        s,
        reports,
        pats,
        "<th>holds</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th>\
         <th>mean</th>",
        |l| {
            let h = &l.hold_us;
            if h.count == 0 {
                return "<td>0</td>".to_string() + &"<td>–</td>".repeat(6);
            }
            h.cells(us).map(|c| format!("<td>{c}</td>")).concat()
        },
    );
}

/// A table with a row per pattern and report: the pattern, the report when there are
/// several, then the `heads` columns filled by `cells`.
fn pattern_table(
    s: &mut String,
    reports: &[ObserveData],
    pats: &[PatternView<'_>],
    heads: &str,
    cells: impl Fn(&LockPatternReport) -> String,
) {
    let several = reports.len() > 1;
    let _ = writeln!(
        s,
        "<table class=\"wrap\"><tr><th class=\"l\">pattern</th>{}{heads}</tr>",
        if several {
            "<th class=\"l\">report</th>"
        } else {
            ""
        }
    );
    for p in pats {
        for (i, l) in &p.locks {
            let _ = write!(s, "<tr><td class=\"l\">{}</td>", esc(p.pattern));
            if several {
                let _ = write!(s, "<td class=\"l\">{}</td>", esc(&reports[*i].label));
            }
            let _ = writeln!(s, "{}</tr>", cells(l));
        }
    }
    s.push_str("</table>\n");
}

fn commands_table(s: &mut String, reports: &[ObserveData]) {
    let mut names: Vec<(&str, u64)> = Vec::new();
    for r in reports {
        for (name, n) in &r.report.commands {
            match names.iter_mut().find(|(x, _)| x == name) {
                Some(e) => e.1 += n,
                None => names.push((name, *n)),
            }
        }
    }
    names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    s.push_str("<h2 id=\"commands\">Commands</h2><table><tr><th class=\"l\">command</th>");
    for r in reports {
        let _ = write!(s, "<th>{}</th>", esc(&r.label));
    }
    s.push_str("</tr>\n");
    for (name, _) in names {
        let _ = write!(s, "<tr><td class=\"l\">{}</td>", esc(name));
        for r in reports {
            let n = r.report.commands.get(name).copied().unwrap_or(0);
            let _ = write!(s, "<td>{n}</td>");
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
}

fn ttl_chart(s: &mut String, pats: &[PatternView<'_>]) {
    let mut rows = Vec::new();
    for p in pats.iter().take(MAX_PLOTTED) {
        for (k, (i, l)) in p.locks.iter().enumerate() {
            rows.push(ttl_row(l, (k == 0).then(|| p.pattern.to_string()), *i));
        }
    }
    let scale = Scale::for_latency(RowChart::values(&rows));
    let chart = RowChart {
        title: "Hold time against the TTLs asked for and the recommended TTL, per lock pattern"
            .into(),
        x: Axis {
            title: super::page::value_title("time", &scale),
            scale,
            fmt: fmt_us,
        },
        rows,
        key: RowKey {
            bar: "hold time p50 to p99".into(),
            whisker: "p99 to max".into(),
            band: "TTLs the application asked for (min to max)".into(),
            mark: "recommended TTL".into(),
        },
    };
    let _ = writeln!(
        s,
        "<h2 id=\"ttl\">Hold time and TTL</h2><p class=\"note\">Per pattern: how long the lock \
         was held (bar from p50 to p99, line on to the max), the TTLs the application asked for (dashed \
         band) and the TTL recommended for this hold time (diamond). A diamond far left of the \
         band: the TTL could be shorter, so a crashed holder blocks the next one for less \
         time. A bar reaching the band: locks expire while held.</p>\
         <figure class=\"wide\">{}</figure>",
        chart.render()
    );
}

fn hold_spectra(s: &mut String, reports: &[ObserveData], pats: &[PatternView<'_>]) {
    s.push_str(
        "<h2 id=\"spectra\">Hold time by percentile</h2><p class=\"note\">From each report's \
         percentiles (p50, p90, p99, p99.9, max, as far as the count of holds reaches), on \
         HdrHistogram's percentile axis. The dash-dot line is the recommended TTL: the gap \
         above the curve's p99 is its margin.</p><div class=\"grid\">\n",
    );
    let several = reports.len() > 1;
    for p in pats.iter().filter(|p| p.has_holds()).take(MAX_PLOTTED) {
        let mut series = Vec::new();
        let mut levels = Vec::new();
        for (i, l) in &p.locks {
            let label = &reports[*i].label;
            let sp = hold_spectrum(l);
            if !sp.points.is_empty() {
                series.push(Series {
                    label: label.clone(),
                    points: sp.points,
                    style: *i,
                });
            }
            if let Some(t) = l.recommended_ttl_ms {
                levels.push(Level {
                    y: t as f64 * 1000.0,
                    label: if several {
                        format!("recommended TTL {} ({label})", ms(t))
                    } else {
                        format!("recommended TTL {}", ms(t))
                    },
                    style: *i,
                });
            }
        }
        let holds: u64 = p.locks.iter().map(|(_, l)| l.hold_us.count).sum();
        let max_count = p.locks.iter().map(|(_, l)| l.hold_us.count).max();
        let chart = spectrum_chart(
            format!("{} hold time by percentile", p.pattern),
            "hold time",
            max_count.unwrap_or(1),
            series,
            levels,
        );
        figure(s, p.pattern, &format!("{holds} holds measured"), &chart);
    }
    s.push_str("</div>\n");
}

fn notes(s: &mut String, reports: &[ObserveData], pats: &[PatternView<'_>]) {
    let mut items = vec![
        "Hold time runs from the acquire's reply passing the proxy to the release passing it: \
         the application's critical section plus one network hop each way to the proxy."
            .to_string(),
        "Recommended TTL: lockkit ttl's formula with the observed hold p99 as the work \
         (safety factor 2, pause budget 50 ms). lockkit ttl --observed FILE recomputes it \
         with --quantile, --pause-budget and --safety-factor."
            .to_string(),
    ];
    if pats.len() > MAX_PLOTTED {
        items.push(format!(
            "{} patterns seen; the plots show the {MAX_PLOTTED} busiest, the tables all.",
            pats.len()
        ));
    }
    let unheld: Vec<&str> = pats
        .iter()
        .filter(|p| !p.has_holds())
        .map(|p| p.pattern)
        .collect();
    if !unheld.is_empty() {
        items.push(format!(
            "No release seen, so no hold time and no recommendation, for: {}.",
            unheld.join(", ")
        ));
    }
    if pats.iter().any(|p| p.pattern == "{other}") {
        items
            .push("{other} collects the keys seen after the first 1,000 distinct patterns.".into());
    }
    for r in reports {
        let n = r.total(|l| l.released_not_held);
        if n > 0 {
            items.push(format!(
                "{}: {n} release(s) found the lock gone: it expired while held (a TTL shorter \
                 than the hold) or another holder had it by then.",
                r.label
            ));
        }
    }
    s.push_str("<h2 id=\"notes\">Notes</h2><ul class=\"note\">");
    for n in items {
        let _ = write!(s, "<li>{}</li>", esc(&n));
    }
    s.push_str("</ul>\n");
}

#[cfg(test)]
mod tests {
    use super::super::observed::tests::{data, observe_json};
    use super::*;

    fn charts(html: &str) -> usize {
        html.matches("<svg class=\"chart\"").count()
    }

    #[test]
    fn no_locks_says_so_and_draws_no_plot() {
        let html = render(&[data("quiet", &observe_json(&[]))]);
        assert!(html.contains("No lock traffic seen"));
        assert_eq!(charts(&html), 0);
        assert!(
            html.contains(">SET<") && html.contains(">40<"),
            "commands still listed"
        );
        assert!(html.contains("redis://***@127.0.0.1:6380"));
        assert!(!html.contains("<script") && !html.contains("<link") && !html.contains("NaN"));
    }

    #[test]
    fn one_pattern_has_its_row_spectrum_and_recommended_ttl_line() {
        let html = render(&[data(
            "observe-1",
            &observe_json(&[("order:{id}:lock", 3, 251_000)]),
        )]);
        assert!(html.contains("<title>lockkit proxy observe: observe-1</title>"));
        assert_eq!(charts(&html), 2, "the TTL chart and one spectrum");
        assert_eq!(html.matches(r#"<path class="series""#).count(), 1);
        assert_eq!(html.matches(r#"class="mark""#).count(), 1);
        assert_eq!(html.matches(r#"class="level""#).count(), 1);
        assert!(
            html.contains("recommended TTL 603 ms"),
            "level labelled with its value"
        );
        assert!(html.contains("5 s – 30 s"), "TTL asked, min to max");
        assert!(html.contains("<b>603 ms</b>"));
        assert!(
            !html.contains("Runs on the plots"),
            "no legend for one report"
        );
        assert!(!html.contains('`'), "no Markdown quotes in the page's text");
    }

    #[test]
    fn many_patterns_plot_the_busiest_and_list_all() {
        let locks: Vec<(String, u64, u64)> = (0..30)
            .map(|i| (format!("p{i:02}"), 100 + i, 1000 * (i + 1)))
            .collect();
        let refs: Vec<(&str, u64, u64)> =
            locks.iter().map(|(p, a, h)| (p.as_str(), *a, *h)).collect();
        let html = render(&[data("busy", &observe_json(&refs))]);
        assert_eq!(charts(&html), 1 + MAX_PLOTTED);
        assert_eq!(html.matches(r#"class="row-label""#).count(), MAX_PLOTTED);
        assert!(
            html.contains(">p29<") && html.contains(">p00<"),
            "all in the table"
        );
        assert!(
            !html.contains("p00 hold time by percentile"),
            "the quietest not plotted"
        );
        assert!(html.contains("30 patterns seen"));
    }

    #[test]
    fn several_reports_share_rows_and_plots_with_a_legend() {
        let a = data(
            "before",
            &observe_json(&[("hot", 50, 2000), ("cold", 2, 0)]),
        );
        let b = data("after", &observe_json(&[("hot", 80, 900)]));
        let html = render(&[a, b]);
        assert!(html.contains("2 reports compared") && html.contains("Runs on the plots"));
        assert_eq!(
            charts(&html),
            2,
            "the TTL chart and hot's spectrum (cold has no holds)"
        );
        assert_eq!(html.matches(r#"<path class="series""#).count(), 2);
        assert_eq!(
            html.matches(r#"class="bar""#).count(),
            2,
            "hot twice; cold has no hold"
        );
        assert_eq!(
            html.matches(r#"class="row-label""#).count(),
            2,
            "hot and cold"
        );
        assert!(html.contains("(before)") && html.contains("(after)"));
        assert!(html.contains("No release seen, so no hold time and no recommendation, for: cold."));
    }
}
