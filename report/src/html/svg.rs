//! Line charts as inline SVG: linear, log and "nines" (percentile) scales, ticks with units,
//! series told apart by dash pattern as well as colour (so a grey print still reads), and
//! vertical event markers (fault injections on a timeline).

use std::fmt::Write as _;

/// Chart size in SVG user units (the page scales it to its column).
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 70.0;
/// Room right of the plot, for the last x tick label (centred on its tick).
pub(crate) const RIGHT: f64 = 36.0;
const TOP: f64 = 24.0;
/// Room under the plot for what [`Frame::x_axis`] draws there: tick labels and axis title.
pub(crate) const BOTTOM: f64 = 46.0;
const LEGEND_ROW: f64 = 16.0;

/// Series colours: dark to mid tones that stay apart in grey, paired with [`DASHES`].
pub const COLORS: [&str; 6] = [
    "#1f4e9c", "#c0392b", "#1e8449", "#b9770e", "#6c3483", "#117a8b",
];
/// Dash patterns by series index (solid first).
pub const DASHES: [&str; 6] = ["", "8 4", "2 3", "10 3 2 3", "4 4", "12 2 2 2 2 2"];
/// The plot area's fill: the browser test finds the plots by this exact colour.
pub const PLOT_BG: &str = "#fafafa";

/// How values map onto an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// `min..max`, evenly.
    Linear {
        /// Left or bottom end.
        min: f64,
        /// Right or top end.
        max: f64,
    },
    /// Powers of ten (`min > 0`); values at or below zero sit on the axis.
    Log {
        /// Left or bottom end, > 0.
        min: f64,
        /// Right or top end.
        max: f64,
    },
    /// Percentiles spread as HdrHistogram's plotter does: a value is a quantile `q` in
    /// `[0, 1]`, placed at `-log10(1 - q)`, so 90%, 99%, 99.9%... are evenly spaced.
    Nines {
        /// How many nines the axis shows (2: up to 99%).
        max: u32,
    },
}

impl Scale {
    /// A linear scale from zero to the first round tick at or above every value (1 if none).
    pub fn linear_to(values: impl IntoIterator<Item = f64>) -> Scale {
        let max = values
            .into_iter()
            .filter(|v| v.is_finite())
            .fold(0.0_f64, f64::max);
        if max <= 0.0 {
            return Scale::Linear { min: 0.0, max: 1.0 };
        }
        // Within 2% of a round tick ends there (an 8.01 s run on a 0-8 s axis; the few
        // hundredths past it clamp to the frame).
        let step = nice_step(max / 5.0);
        Scale::Linear {
            min: 0.0,
            max: (max / step - 0.02).ceil().max(1.0) * step,
        }
    }

    /// A latency axis: log when the largest value is 20 times the smallest or more (a tail or a
    /// stall would flatten the rest on a linear axis), else linear from zero.
    pub fn for_latency(values: impl IntoIterator<Item = f64>) -> Scale {
        let vals: Vec<f64> = values
            .into_iter()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(0.0_f64, f64::max);
        if vals.is_empty() || hi / lo < 20.0 {
            return Scale::linear_to(vals);
        }
        Scale::Log {
            min: 10f64.powf(lo.log10().floor()),
            max: 10f64.powf(hi.log10().ceil()),
        }
    }

    /// Where `v` falls, 0 at the start of the axis and 1 at its end (clamped).
    pub fn frac(&self, v: f64) -> f64 {
        let f = match *self {
            Scale::Linear { min, max } => (v - min) / (max - min),
            Scale::Log { min, max } => {
                if v <= min {
                    0.0
                } else {
                    (v / min).log10() / (max / min).log10()
                }
            }
            Scale::Nines { max } => nines(v) / f64::from(max.max(1)),
        };
        if f.is_nan() {
            0.0
        } else {
            f.clamp(0.0, 1.0)
        }
    }

    /// Tick positions (as values on this scale) with their labels from `fmt`.
    pub fn ticks(&self, fmt: fn(f64) -> String) -> Vec<(f64, String)> {
        match *self {
            Scale::Linear { min, max } => {
                let step = nice_step((max - min) / 5.0);
                let mut out = Vec::new();
                let mut i = (min / step).ceil() as i64;
                loop {
                    let v = i as f64 * step;
                    if v > max + step * 1e-9 {
                        break;
                    }
                    out.push((v, fmt(v)));
                    i += 1;
                }
                out
            }
            Scale::Log { min, max } => {
                let (lo, hi) = (min.log10().round() as i32, max.log10().round() as i32);
                let mults: &[f64] = if hi - lo <= 2 {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                let mut out = Vec::new();
                for e in lo..=hi {
                    for m in mults {
                        let v = m * 10f64.powi(e);
                        if v >= min * (1.0 - 1e-9) && v <= max * (1.0 + 1e-9) {
                            out.push((v, fmt(v)));
                        }
                    }
                }
                out
            }
            Scale::Nines { max } => (0..=max)
                .map(|n| {
                    let q = 1.0 - 10f64.powi(-(n as i32));
                    (q, percent_label(q))
                })
                .collect(),
        }
    }
}

/// `-log10(1 - q)`: 0 for the median's left end, 1 at 90%, 2 at 99%... (`q = 1` is infinite).
pub fn nines(q: f64) -> f64 {
    -(1.0 - q.clamp(0.0, 1.0)).log10()
}

/// "0%", "90%", "99%", "99.9%", "99.99%".
pub fn percent_label(q: f64) -> String {
    if q <= 0.0 {
        return "0%".into();
    }
    let n = nines(q).round() as usize;
    let s = format!("{:.*}", n.saturating_sub(2), q * 100.0);
    format!("{s}%")
}

/// A round step near `x` (1, 2, 2.5 or 5 × 10^k).
fn nice_step(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    let m = x / p;
    let n = if m < 1.5 {
        1.0
    } else if m < 2.25 {
        2.0
    } else if m < 3.5 {
        2.5
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    };
    n * p
}

/// Microseconds as "250 µs", "1.5 ms", "2 s".
pub fn fmt_us(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 1e6 {
        format!("{} s", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{} ms", trim(v / 1e3))
    } else {
        format!("{} µs", trim(v))
    }
}

/// Microseconds to three significant digits, for tables: "40.4 ms" for 40,415 µs.
pub fn fmt_us3(v: f64) -> String {
    if v <= 0.0 || !v.is_finite() {
        return fmt_us(v.max(0.0));
    }
    let step = 10f64.powf(v.log10().floor() - 2.0);
    fmt_us((v / step).round() * step)
}

/// Seconds as "12 s".
pub fn fmt_s(v: f64) -> String {
    format!("{} s", trim(v))
}

/// A rate as "120k", "1.5M".
pub fn fmt_rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

/// A fraction as a percentage: 0.05 as "5%".
pub fn fmt_pct(v: f64) -> String {
    format!("{}%", trim(v * 100.0))
}

/// A number without float noise or trailing zeros (up to 3 decimals).
pub fn trim(v: f64) -> String {
    let s = format!("{:.3}", (v * 1000.0).round() / 1000.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// One axis: its scale, its title (with the unit) and how ticks are labelled.
#[derive(Debug, Clone)]
pub struct Axis {
    /// The mapping.
    pub scale: Scale,
    /// The title, with the unit: "latency (log scale)", "time since start (s)".
    pub title: String,
    /// Tick label format.
    pub fmt: fn(f64) -> String,
}

/// One line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Shown in the legend.
    pub label: String,
    /// (x, y) in data units, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// Colour and dash pattern index (the same run keeps the same style on every chart).
    pub style: usize,
}

/// A vertical mark at `x`, optionally spanning `width` (an injected fault).
#[derive(Debug, Clone)]
pub struct Marker {
    /// Where it starts, in x data units.
    pub x: f64,
    /// How long it lasts, in x data units (0: a line).
    pub width: f64,
    /// Short text beside it.
    pub label: String,
}

/// A line chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Read by screen readers (`<title>`).
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// The lines.
    pub series: Vec<Series>,
    /// Event marks.
    pub markers: Vec<Marker>,
    /// Horizontal reference lines.
    pub levels: Vec<Level>,
}

/// A horizontal reference line at `y` across the plot (a recommended TTL over a spectrum of
/// hold times), in a series' colour, labelled at its right end.
#[derive(Debug, Clone)]
pub struct Level {
    /// Where, in y data units.
    pub y: f64,
    /// Short text on the line, with its value.
    pub label: String,
    /// Colour index (the run it belongs to).
    pub style: usize,
}

/// Escapes text for HTML and SVG.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A short legend sample of a style (a line segment), for use outside a chart.
pub fn style_sample(style: usize) -> String {
    format!(
        r#"<svg class="sample" width="36" height="10" viewBox="0 0 36 10" aria-hidden="true"><line x1="1" y1="5" x2="35" y2="5" stroke="{}" stroke-width="2.5" stroke-dasharray="{}"/></svg>"#,
        COLORS[style % COLORS.len()],
        DASHES[style % DASHES.len()]
    )
}

/// Where a plot sits inside its `<svg>`: the parts every chart kind draws the same way
/// (the frame, the x axis with its ticks, grid and title, the y axis title, legend samples).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    /// The whole drawing, wide.
    pub width: f64,
    /// The whole drawing, high (legend rows and keys included).
    pub height: f64,
    /// The plot's left edge.
    pub left: f64,
    /// The plot's top edge.
    pub top: f64,
    /// The plot's width.
    pub pw: f64,
    /// The plot's height.
    pub ph: f64,
}

impl Frame {
    /// The plot's bottom edge.
    pub(crate) fn bottom(&self) -> f64 {
        self.top + self.ph
    }

    /// `x` on `axis` as a horizontal position.
    pub(crate) fn px(&self, axis: &Axis, v: f64) -> f64 {
        self.left + axis.scale.frac(v) * self.pw
    }

    /// Opens the `<svg>` with its accessible title and draws the plot area.
    pub(crate) fn open(&self, s: &mut String, title: &str) {
        let (w, h, l, t, pw, ph) = (
            self.width,
            self.height,
            self.left,
            self.top,
            self.pw,
            self.ph,
        );
        let _ = write!(
            s,
            r#"<svg class="chart" viewBox="0 0 {w} {h}" role="img" xmlns="http://www.w3.org/2000/svg"><title>{}</title>"#,
            esc(title)
        );
        let _ = write!(
            s,
            r##"<rect class="plot" x="{l}" y="{t}" width="{pw}" height="{ph}" fill="{PLOT_BG}" stroke="#888" stroke-width="1"/>"##
        );
    }

    /// The x axis: ticks with vertical grid lines, and the axis title under them.
    pub(crate) fn x_axis(&self, s: &mut String, x: &Axis) {
        for (v, label) in x.scale.ticks(x.fmt) {
            let px = self.px(x, v);
            let _ = write!(
                s,
                r##"<line class="grid" x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text class="tick" x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                self.top,
                self.bottom(),
                self.bottom() + 15.0,
                esc(&label)
            );
        }
        let _ = write!(
            s,
            r#"<text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            self.left + self.pw / 2.0,
            self.bottom() + BOTTOM - 8.0,
            esc(&x.title)
        );
    }

    /// The y axis title, turned along the axis.
    pub(crate) fn y_title(&self, s: &mut String, title: &str) {
        let _ = write!(
            s,
            r#"<text class="axis-title" transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            self.top + self.ph / 2.0,
            esc(title)
        );
    }
}

/// A legend entry inside a chart: a line sample of `style` at (`x`, `y`) and its label.
pub(crate) fn legend_entry(s: &mut String, x: f64, y: f64, style: usize, label: &str) {
    let _ = write!(
        s,
        r#"<g class="legend"><line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2.5" stroke-dasharray="{}"/><text x="{:.1}" y="{y:.1}">{}</text></g>"#,
        y - 4.0,
        x + 28.0,
        y - 4.0,
        COLORS[style % COLORS.len()],
        DASHES[style % DASHES.len()],
        x + 34.0,
        esc(label)
    );
}

impl Chart {
    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let drawn: Vec<&Series> = self
            .series
            .iter()
            .filter(|se| {
                se.points
                    .iter()
                    .any(|(x, y)| x.is_finite() && y.is_finite())
            })
            .collect();
        // Several lines: a legend under the axis title, one line each, clear of the data.
        let legend_rows = if drawn.len() > 1 { drawn.len() } else { 0 };
        let f = Frame {
            width: WIDTH,
            height: HEIGHT + LEGEND_ROW * legend_rows as f64,
            left: LEFT,
            top: TOP,
            pw: WIDTH - LEFT - RIGHT,
            ph: HEIGHT - TOP - BOTTOM,
        };
        let (pw, ph) = (f.pw, f.ph);
        let px = |v: f64| f.px(&self.x, v);
        let py = |v: f64| TOP + (1.0 - self.y.scale.frac(v)) * ph;
        let mut s = String::new();
        f.open(&mut s, &self.title);
        f.x_axis(&mut s, &self.x);
        for (v, label) in self.y.scale.ticks(self.y.fmt) {
            let y = py(v);
            let _ = write!(
                s,
                r##"<line class="grid" x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                y + 4.0,
                esc(&label)
            );
        }
        f.y_title(&mut s, &self.y.title);
        for m in &self.markers {
            let (x0, x1) = (px(m.x), px(m.x + m.width));
            if x1 - x0 >= 1.0 {
                let _ = write!(
                    s,
                    r##"<rect class="marker" x="{x0:.1}" y="{TOP}" width="{:.1}" height="{ph}" fill="#000" fill-opacity="0.08"/>"##,
                    x1 - x0
                );
            }
            let _ = write!(
                s,
                r##"<line class="marker" x1="{x0:.1}" y1="{:.1}" x2="{x0:.1}" y2="{:.1}" stroke="#333" stroke-width="1.5" stroke-dasharray="1 3"/><text class="marker-label" x="{:.1}" y="{:.1}">{}</text>"##,
                TOP - 14.0,
                TOP + ph,
                x0 + 2.0,
                TOP - 5.0,
                esc(&m.label)
            );
        }
        // Top down, labels alternate above and below their lines: two close levels' labels
        // move apart.
        let mut levels: Vec<&Level> = self.levels.iter().collect();
        levels.sort_by(|a, b| b.y.total_cmp(&a.y));
        for (i, l) in levels.into_iter().enumerate() {
            let y = py(l.y);
            let ty = if i % 2 == 0 { y - 4.0 } else { y + 12.0 };
            let _ = write!(
                s,
                r##"<line class="level" x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="1.5" stroke-dasharray="6 2 1 2"/><text class="level-label" x="{:.1}" y="{ty:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                COLORS[l.style % COLORS.len()],
                LEFT + pw - 4.0,
                esc(&l.label)
            );
        }
        if drawn.is_empty() {
            let _ = write!(
                s,
                r##"<text class="no-data" x="{:.1}" y="{:.1}" text-anchor="middle" fill="#666">no data</text>"##,
                LEFT + pw / 2.0,
                TOP + ph / 2.0
            );
        }
        for se in &drawn {
            let mut d = String::new();
            for (x, y) in se
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
            {
                let _ = write!(
                    d,
                    "{}{:.1},{:.1}",
                    if d.is_empty() { "M" } else { " L" },
                    px(*x),
                    py(*y)
                );
            }
            let color = COLORS[se.style % COLORS.len()];
            let dash = DASHES[se.style % DASHES.len()];
            let _ = write!(
                s,
                r#"<path class="series" d="{d}" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}" stroke-linejoin="round"><title>{}</title></path>"#,
                esc(&se.label)
            );
            if se.points.len() == 1 {
                let (x, y) = se.points[0];
                let _ = write!(
                    s,
                    r#"<circle class="series" cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    px(x),
                    py(y)
                );
            }
        }
        if legend_rows > 0 {
            for (i, se) in drawn.iter().enumerate() {
                let label: String = se.label.chars().take(80).collect();
                legend_entry(
                    &mut s,
                    LEFT,
                    HEIGHT + 8.0 + i as f64 * LEGEND_ROW,
                    se.style,
                    &label,
                );
            }
        }
        s.push_str("</svg>");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(series: Vec<Series>) -> Chart {
        Chart {
            title: "t".into(),
            x: Axis {
                scale: Scale::Nines { max: 3 },
                title: "percentile".into(),
                fmt: |v| v.to_string(),
            },
            y: Axis {
                scale: Scale::linear_to([0.0, 870.0]),
                title: "latency (µs)".into(),
                fmt: fmt_us,
            },
            series,
            markers: vec![],
            levels: vec![],
        }
    }

    #[test]
    fn nines_axis_spaces_90_99_999_evenly_with_percent_labels() {
        let s = Scale::Nines { max: 4 };
        assert_eq!(s.frac(0.0), 0.0);
        assert!((s.frac(0.9) - 0.25).abs() < 1e-9);
        assert!((s.frac(0.99) - 0.5).abs() < 1e-9);
        assert!((s.frac(0.999) - 0.75).abs() < 1e-9);
        assert_eq!(
            s.frac(1.0),
            1.0,
            "the max is clamped to the end, not infinite"
        );
        let labels: Vec<String> = s.ticks(fmt_pct).into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0%", "90%", "99%", "99.9%", "99.99%"]);
    }

    #[test]
    fn linear_ticks_are_round_and_cover_the_data() {
        let s = Scale::linear_to([0.0, 870.0]);
        assert_eq!(
            s,
            Scale::Linear {
                min: 0.0,
                max: 1000.0
            }
        );
        assert_eq!(
            Scale::linear_to([6.3]),
            Scale::Linear { min: 0.0, max: 7.0 },
            "a time axis ends near the data, not at the next power of ten"
        );
        assert_eq!(
            Scale::linear_to([8.02]),
            Scale::Linear { min: 0.0, max: 8.0 }
        );
        let ticks: Vec<f64> = s.ticks(fmt_us).into_iter().map(|t| t.0).collect();
        assert_eq!(ticks, [0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]);
        assert_eq!(Scale::linear_to([]), Scale::Linear { min: 0.0, max: 1.0 });
        assert_eq!(
            Scale::linear_to([f64::NAN, -3.0]),
            Scale::Linear { min: 0.0, max: 1.0 }
        );
    }

    #[test]
    fn latency_goes_log_over_two_decades_with_decade_ticks() {
        let s = Scale::for_latency([40.0, 120.0, 25_000.0]);
        assert_eq!(
            s,
            Scale::Log {
                min: 10.0,
                max: 100_000.0
            }
        );
        let labels: Vec<String> = s.ticks(fmt_us).into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["10 µs", "100 µs", "1 ms", "10 ms", "100 ms"]);
        assert!((s.frac(1000.0) - 0.5).abs() < 1e-9);
        assert_eq!(s.frac(0.0), 0.0, "zero sits on the axis of a log scale");
        assert!(matches!(
            Scale::for_latency([100.0, 900.0]),
            Scale::Linear { .. }
        ));
    }

    #[test]
    fn units_read_as_people_write_them() {
        for (us, want) in [
            (250.0, "250 µs"),
            (0.0, "0"),
            (1500.0, "1.5 ms"),
            (2_000_000.0, "2 s"),
        ] {
            assert_eq!(fmt_us(us), want);
        }
        // Three significant digits.
        for (us, want) in [
            (40_415.0, "40.4 ms"),
            (190_207.0, "190 ms"),
            (1_043_000.0, "1.04 s"),
            (87.0, "87 µs"),
            (0.0, "0"),
        ] {
            assert_eq!(fmt_us3(us), want);
        }
        assert_eq!(fmt_rate(120_000.0), "120k");
        assert_eq!(fmt_pct(0.05), "5%");
        assert_eq!(percent_label(0.999), "99.9%");
        assert_eq!(trim(0.1 + 0.2), "0.3");
    }

    #[test]
    fn chart_has_axes_titles_and_one_path_per_series() {
        let svg = chart(vec![
            Series {
                label: "run <a>".into(),
                points: vec![(0.0, 100.0), (0.9, 200.0), (0.99, 870.0)],
                style: 0,
            },
            Series {
                label: "run b".into(),
                points: vec![(0.0, 50.0), (0.99, 400.0)],
                style: 1,
            },
        ])
        .render();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches(r#"<path class="series""#).count(), 2);
        assert!(svg.contains("latency (µs)") && svg.contains(">percentile<"));
        assert!(svg.contains(">1 ms<"), "y ticks carry the unit: {svg}");
        assert!(svg.contains("run &lt;a&gt;"), "labels are escaped");
        assert!(!svg.contains("run <a>"));
        assert!(
            svg.contains(r#"stroke-dasharray="8 4""#),
            "second series is dashed"
        );
        assert!(svg.contains(r#"class="legend""#));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn empty_chart_says_no_data_and_draws_no_line() {
        for series in [
            vec![],
            vec![Series {
                label: "x".into(),
                points: vec![(f64::NAN, 1.0)],
                style: 0,
            }],
        ] {
            let svg = chart(series).render();
            assert!(svg.contains("no data"));
            assert!(!svg.contains(r#"class="series""#));
            assert!(svg.contains(r#"class="plot""#), "the frame is still drawn");
        }
    }

    #[test]
    fn levels_cross_the_plot_with_labels_moving_apart() {
        let mut c = chart(vec![]);
        for (y, label) in [(500.0, "low"), (600.0, "high")] {
            c.levels.push(Level {
                y,
                label: label.into(),
                style: 1,
            });
        }
        let svg = c.render();
        assert_eq!(svg.matches(r#"class="level""#).count(), 2);
        assert!(svg.contains(COLORS[1]));
        let py = |v: f64| TOP + (1.0 - c.y.scale.frac(v)) * (HEIGHT - TOP - BOTTOM);
        // The higher line's label above it, the lower's below it.
        assert!(svg.contains(&format!(
            r#"y="{:.1}" text-anchor="end">high<"#,
            py(600.0) - 4.0
        )));
        assert!(svg.contains(&format!(
            r#"y="{:.1}" text-anchor="end">low<"#,
            py(500.0) + 12.0
        )));
    }

    #[test]
    fn markers_mark_a_span_and_a_line_with_a_label() {
        let mut c = chart(vec![]);
        c.x = Axis {
            scale: Scale::Linear {
                min: 0.0,
                max: 10.0,
            },
            title: "time (s)".into(),
            fmt: fmt_s,
        };
        c.markers.push(Marker {
            x: 2.0,
            width: 1.0,
            label: "server-pause".into(),
        });
        let svg = c.render();
        assert_eq!(svg.matches(r#"class="marker""#).count(), 2);
        assert!(svg.contains(">server-pause<"));
        // 2 s of 10 s across a 494-unit plot starting at 70.
        assert!(svg.contains(r#"x1="168.8" y1="10.0""#), "{svg}");
    }
}
