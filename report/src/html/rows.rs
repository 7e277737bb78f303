//! A chart of labelled rows on one shared x axis: per row a bar between two values, a whisker
//! past it, an outlined band and a diamond mark. The observe page draws one row per lock
//! pattern: hold time p50 to p99 (bar) and on to the max (whisker), the TTLs the application
//! asked for (band) and the recommended TTL (diamond), so a TTL far above the hold time shows
//! at a glance. Bars span two values rather than starting at the axis, which on a log axis
//! is an arbitrary place.

use std::fmt::Write as _;

use super::svg::{esc, legend_entry, Axis, Frame, BOTTOM, COLORS, DASHES, RIGHT};

const WIDTH: f64 = 960.0;
const LEFT: f64 = 230.0;
const TOP: f64 = 14.0;
const ROW: f64 = 26.0;
/// Tall enough to read as a plot (and for the browser test to find it) with one row.
const MIN_PLOT: f64 = 110.0;
const KEY: f64 = 24.0;
/// Row labels longer than this are cut (the whole label is the row's tooltip).
const LABEL_CHARS: usize = 34;
/// Half the diamond's size.
const DIAMOND: f64 = 6.0;
/// The recommendation's colour: black reads on any bar and in grey print.
const MARK: &str = "#111";

/// One row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// Shown left of the row; `None` continues the group above (another run's row of the same
    /// pattern), told apart by its style.
    pub label: Option<String>,
    /// Colour and dash index of the run it belongs to.
    pub style: usize,
    /// A filled bar between these values.
    pub bar: Option<(f64, f64)>,
    /// A thin line from the bar's end to this value, with a cap.
    pub whisker: Option<f64>,
    /// An outlined band between these values (a sliver when they are equal).
    pub band: Option<(f64, f64)>,
    /// A diamond at this value.
    pub mark: Option<f64>,
}

/// What each part of a row stands for: the key under the chart.
#[derive(Debug, Clone, Default)]
pub struct RowKey {
    /// The bar.
    pub bar: String,
    /// The whisker.
    pub whisker: String,
    /// The band.
    pub band: String,
    /// The diamond.
    pub mark: String,
}

/// The chart.
#[derive(Debug, Clone)]
pub struct RowChart {
    /// Read by screen readers (`<title>`).
    pub title: String,
    /// The shared horizontal axis.
    pub x: Axis,
    /// Top to bottom.
    pub rows: Vec<Row>,
    /// The key.
    pub key: RowKey,
}

impl RowChart {
    /// Every value the rows place, for choosing the axis.
    pub fn values(rows: &[Row]) -> impl Iterator<Item = f64> + '_ {
        rows.iter().flat_map(|r| {
            [
                r.bar.map(|b| b.0),
                r.bar.map(|b| b.1),
                r.whisker,
                r.band.map(|b| b.0),
                r.band.map(|b| b.1),
                r.mark,
            ]
            .into_iter()
            .flatten()
        })
    }

    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let ph = (self.rows.len() as f64 * ROW).max(MIN_PLOT);
        let f = Frame {
            width: WIDTH,
            height: TOP + ph + BOTTOM + KEY,
            left: LEFT,
            top: TOP,
            pw: WIDTH - LEFT - RIGHT,
            ph,
        };
        let px = |v: f64| f.px(&self.x, v);
        let mut s = String::new();
        f.open(&mut s, &self.title);
        f.x_axis(&mut s, &self.x);
        if self.rows.is_empty() {
            let _ = write!(
                s,
                r##"<text class="no-data" x="{:.1}" y="{:.1}" text-anchor="middle" fill="#666">no data</text>"##,
                LEFT + f.pw / 2.0,
                TOP + ph / 2.0
            );
        }
        for (i, r) in self.rows.iter().enumerate() {
            let top = TOP + i as f64 * ROW;
            let cy = top + ROW / 2.0;
            let color = COLORS[r.style % COLORS.len()];
            if let Some(label) = &r.label {
                if i > 0 {
                    let _ = write!(
                        s,
                        r##"<line class="grid" x1="{LEFT}" y1="{top:.1}" x2="{:.1}" y2="{top:.1}" stroke="#ccc"/>"##,
                        LEFT + f.pw
                    );
                }
                let shown: String = if label.chars().count() > LABEL_CHARS {
                    let mut cut: String = label.chars().take(LABEL_CHARS - 1).collect();
                    cut.push('…');
                    cut
                } else {
                    label.clone()
                };
                let _ = write!(
                    s,
                    r#"<text class="row-label" x="{:.1}" y="{:.1}" text-anchor="end"><title>{}</title>{}</text>"#,
                    LEFT - 8.0,
                    cy + 4.0,
                    esc(label),
                    esc(&shown)
                );
            }
            if let Some((lo, hi)) = r.band {
                let (x0, x1) = (px(lo), px(hi));
                let w = (x1 - x0).max(3.0);
                let _ = write!(
                    s,
                    r#"<rect class="band" x="{:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{color}" fill-opacity="0.14" stroke="{color}" stroke-width="1.2" stroke-dasharray="3 2"/>"#,
                    x0.min(LEFT + f.pw - w),
                    cy - 9.0,
                    18.0
                );
            }
            if let Some((lo, hi)) = r.bar {
                let x0 = px(lo);
                let w = (px(hi) - x0).max(3.0);
                let _ = write!(
                    s,
                    r#"<rect class="bar" x="{x0:.1}" y="{:.1}" width="{w:.1}" height="8" fill="{color}"/>"#,
                    cy - 4.0
                );
                if let Some(end) = r.whisker {
                    let (x0, x1) = (x0 + w, px(end));
                    let _ = write!(
                        s,
                        r#"<path class="whisker" d="M{x0:.1},{cy:.1} L{x1:.1},{cy:.1} M{x1:.1},{:.1} L{x1:.1},{:.1}" stroke="{color}" stroke-width="1.5" stroke-dasharray="{}" fill="none"/>"#,
                        cy - 5.0,
                        cy + 5.0,
                        DASHES[r.style % DASHES.len()]
                    );
                }
            }
            if let Some(m) = r.mark {
                let x = px(m);
                let _ = write!(
                    s,
                    r##"<path class="mark" d="M{x:.1},{:.1} L{:.1},{cy:.1} L{x:.1},{:.1} L{:.1},{cy:.1} Z" fill="{MARK}" stroke="#fff" stroke-width="1"/>"##,
                    cy - DIAMOND,
                    x + DIAMOND,
                    cy + DIAMOND,
                    x - DIAMOND
                );
            }
        }
        self.draw_key(&mut s, &f);
        s.push_str("</svg>");
        s
    }

    /// One line under the axis title: a sample of each part and what it stands for.
    fn draw_key(&self, s: &mut String, f: &Frame) {
        let y = f.height - 8.0;
        let mut x = 20.0;
        let mut step = |text: &str| {
            let at = x;
            // About 6 units per character of the 11-unit font.
            x += 36.0 + text.chars().count() as f64 * 6.0 + 24.0;
            at
        };
        let k = &self.key;
        let at = step(&k.bar);
        let _ = write!(
            s,
            r#"<g class="key"><rect x="{at:.1}" y="{:.1}" width="28" height="8" fill="{}"/><text x="{:.1}" y="{y:.1}">{}</text></g>"#,
            y - 8.0,
            COLORS[0],
            at + 34.0,
            esc(&k.bar)
        );
        let at = step(&k.whisker);
        legend_entry(s, at, y, 0, &k.whisker);
        let at = step(&k.band);
        let _ = write!(
            s,
            r#"<g class="key"><rect x="{at:.1}" y="{:.1}" width="28" height="12" fill="{c}" fill-opacity="0.14" stroke="{c}" stroke-width="1.2" stroke-dasharray="3 2"/><text x="{:.1}" y="{y:.1}">{}</text></g>"#,
            y - 10.0,
            at + 34.0,
            esc(&k.band),
            c = COLORS[0],
        );
        let at = step(&k.mark);
        let (cx, cy) = (at + 14.0, y - 4.0);
        let _ = write!(
            s,
            r##"<g class="key"><path d="M{cx:.1},{:.1} L{:.1},{cy:.1} L{cx:.1},{:.1} L{:.1},{cy:.1} Z" fill="{MARK}"/><text x="{:.1}" y="{y:.1}">{}</text></g>"##,
            cy - DIAMOND,
            cx + DIAMOND,
            cy + DIAMOND,
            cx - DIAMOND,
            at + 34.0,
            esc(&k.mark)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::svg::{fmt_us, Scale};
    use super::*;

    fn chart(rows: Vec<Row>) -> RowChart {
        RowChart {
            title: "t".into(),
            x: Axis {
                scale: Scale::for_latency(RowChart::values(&rows)),
                title: "time".into(),
                fmt: fmt_us,
            },
            key: RowKey {
                bar: "hold p99".into(),
                whisker: "to max".into(),
                band: "TTL asked".into(),
                mark: "recommended <TTL>".into(),
            },
            rows,
        }
    }

    fn row(label: Option<&str>, style: usize) -> Row {
        Row {
            label: label.map(str::to_string),
            style,
            bar: Some((150_000.0, 200_000.0)),
            whisker: Some(250_000.0),
            band: Some((30_000_000.0, 30_000_000.0)),
            mark: Some(611_000.0),
        }
    }

    #[test]
    fn each_row_draws_its_parts_and_the_key_names_them() {
        let c = chart(vec![row(Some("order:{id}:lock"), 0), row(None, 1)]);
        assert!(matches!(c.x.scale, Scale::Log { .. }), "{:?}", c.x.scale);
        let svg = c.render();
        assert!(svg.starts_with("<svg class=\"chart\"") && svg.ends_with("</svg>"));
        for (class, n) in [("bar", 2), ("whisker", 2), ("band", 2), ("mark", 2)] {
            assert_eq!(
                svg.matches(&format!("class=\"{class}\"")).count(),
                n,
                "{class}"
            );
        }
        assert_eq!(
            svg.matches("class=\"row-label\"").count(),
            1,
            "one label per group"
        );
        assert!(svg.contains("order:{id}:lock"));
        assert!(
            svg.contains(COLORS[1]),
            "the second run's row in its colour"
        );
        assert!(svg.contains("recommended &lt;TTL&gt;"), "key escaped");
        assert!(svg.contains(">30 s<") || svg.contains(">100 s<"), "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn the_bar_spans_its_values_and_the_diamond_sits_on_its_value() {
        let c = chart(vec![row(Some("a"), 0)]);
        let svg = c.render();
        let px = |v: f64| LEFT + c.x.scale.frac(v) * (WIDTH - LEFT - RIGHT);
        let (x0, x1) = (px(150_000.0), px(200_000.0));
        assert!(
            svg.contains(&format!(
                "class=\"bar\" x=\"{x0:.1}\" y=\"23.0\" width=\"{:.1}\"",
                x1 - x0
            )),
            "{svg}"
        );
        assert!(
            svg.contains(&format!("class=\"mark\" d=\"M{:.1},", px(611_000.0))),
            "{svg}"
        );
    }

    #[test]
    fn rows_without_values_and_no_rows_still_render() {
        let svg = chart(vec![]).render();
        assert!(svg.contains("no data"));
        assert!(svg.contains(r#"class="plot""#));
        let bare = Row {
            label: Some("x".repeat(60)),
            ..Row::default()
        };
        let svg = chart(vec![bare]).render();
        assert!(!svg.contains("class=\"bar\"") && !svg.contains("class=\"mark\""));
        assert!(svg.contains('…'), "a long label is cut");
        assert!(
            svg.contains(&"x".repeat(60)),
            "and kept whole as the tooltip"
        );
    }
}
