//! The HTML reports rendered in a real browser: a page `lockkit bench` wrote for one run and a
//! page `lockkit report` wrote comparing two runs (one with fault events) are opened in headless
//! Chromium; the DOM must hold every chart with its lines, and the screenshot must show each
//! plot area with coloured lines in it (not blank).
//!
//! Needs Debian's `chromium` (`.ci/run` installs it; `CHROMIUM=/path` picks another binary).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Lockkit;

/// The plot area's fill in the page (`svg::PLOT_BG`, #fafafa).
const PLOT_BG: [u8; 3] = [250, 250, 250];
/// Tall enough for the whole page of two runs.
const WINDOW: (u32, u32) = (1280, 5200);

/// Runs `lockkit args...` (the shared CLI runner) and returns its standard output.
fn run_ok(args: &[&str]) -> String {
    let run = Lockkit::new(args).run();
    assert!(run.success(), "{}", run.all());
    run.stdout
}

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(p);
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(out) = Command::new("which").arg(name).output() {
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.success() && !path.is_empty() {
                return PathBuf::from(path);
            }
        }
    }
    panic!(
        "chromium is not installed: the HTML report test renders pages in a real browser. \
         Install it with `apt-get install -y chromium` (CI's .ci/run does), or set CHROMIUM=/path"
    );
}

/// Runs headless Chromium on `page` with `extra` flags; returns stdout. Bounded in time.
fn headless(page: &Path, extra: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(extra)
    .arg(format!("file://{}", page.display()))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let child = cmd.spawn().expect("starting chromium");
    let pid = child.id();
    // A watchdog thread kills a browser that hangs, so the test ends by itself.
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send(());
        out
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    while rx.try_recv().is_err() {
        if Instant::now() > deadline {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = waiter.join().unwrap().expect("waiting for chromium");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An RGB(A) screenshot.
struct Shot {
    w: usize,
    h: usize,
    channels: usize,
    px: Vec<u8>,
}

impl Shot {
    fn load(path: &Path) -> Shot {
        let bytes = std::fs::read(path).expect("chromium wrote no screenshot");
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .expect("the screenshot is a PNG");
        let mut px = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut px).unwrap();
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        let channels = match info.color_type {
            png::ColorType::Rgb => 3,
            png::ColorType::Rgba => 4,
            other => panic!("unexpected colour type {other:?}"),
        };
        px.truncate(info.buffer_size());
        Shot {
            w: info.width as usize,
            h: info.height as usize,
            channels,
            px,
        }
    }

    fn rgb(&self, x: usize, y: usize) -> [u8; 3] {
        let i = (y * self.w + x) * self.channels;
        [self.px[i], self.px[i + 1], self.px[i + 2]]
    }

    /// A line's colour, not text or grid grey: channels far apart.
    fn coloured(&self, x: usize, y: usize) -> bool {
        let [r, g, b] = self.rgb(x, y);
        let (hi, lo) = (r.max(g).max(b), r.min(g).min(b));
        hi - lo > 50
    }

    /// The plot areas: connected regions of the plot fill, merged where lines and grid cut
    /// one area into pieces, kept if large. (x0, y0, x1, y1), inclusive.
    fn plot_areas(&self) -> Vec<(usize, usize, usize, usize)> {
        let mut seen = vec![false; self.w * self.h];
        let mut boxes: Vec<(usize, usize, usize, usize)> = Vec::new();
        for start in 0..self.w * self.h {
            if seen[start] || self.rgb(start % self.w, start / self.w) != PLOT_BG {
                continue;
            }
            let mut b = (usize::MAX, usize::MAX, 0, 0);
            let mut stack = vec![start];
            seen[start] = true;
            while let Some(i) = stack.pop() {
                let (x, y) = (i % self.w, i / self.w);
                b = (b.0.min(x), b.1.min(y), b.2.max(x), b.3.max(y));
                let mut push = |nx: usize, ny: usize| {
                    let j = ny * self.w + nx;
                    if !seen[j] && self.rgb(nx, ny) == PLOT_BG {
                        seen[j] = true;
                        stack.push(j);
                    }
                };
                if x > 0 {
                    push(x - 1, y);
                }
                if x + 1 < self.w {
                    push(x + 1, y);
                }
                if y > 0 {
                    push(x, y - 1);
                }
                if y + 1 < self.h {
                    push(x, y + 1);
                }
            }
            boxes.push(b);
        }
        // Pieces of one area touch (a line or grid line between them is a few pixels wide).
        let near = |a: &(usize, usize, usize, usize), b: &(usize, usize, usize, usize)| {
            a.0 <= b.2 + 4 && b.0 <= a.2 + 4 && a.1 <= b.3 + 4 && b.1 <= a.3 + 4
        };
        loop {
            let mut merged = false;
            'outer: for i in 0..boxes.len() {
                for j in i + 1..boxes.len() {
                    if near(&boxes[i], &boxes[j]) {
                        let (a, b) = (boxes[i], boxes.swap_remove(j));
                        boxes[i] = (a.0.min(b.0), a.1.min(b.1), a.2.max(b.2), a.3.max(b.3));
                        merged = true;
                        break 'outer;
                    }
                }
            }
            if !merged {
                break;
            }
        }
        boxes.retain(|b| b.2 - b.0 > 200 && b.3 - b.1 > 100);
        boxes.sort_by_key(|b| (b.1, b.0));
        boxes
    }

    /// Coloured pixels inside `b` and a 3-pixel rim (a line along zero sits on the frame).
    fn ink_in(&self, b: (usize, usize, usize, usize)) -> usize {
        let mut n = 0;
        for y in b.1.saturating_sub(3)..=(b.3 + 3).min(self.h - 1) {
            for x in b.0.saturating_sub(3)..=(b.2 + 3).min(self.w - 1) {
                n += usize::from(self.coloured(x, y));
            }
        }
        n
    }
}

/// Opens `page` in Chromium: checks the DOM, then the screenshot. Returns the screenshot path.
fn check_in_browser(page: &Path, charts: usize, lines_per_chart: usize) -> PathBuf {
    let dom = headless(page, &["--dump-dom".to_string()]);
    assert!(
        dom.contains("</html>"),
        "chromium rendered no DOM: {dom:.300}"
    );
    assert_eq!(
        dom.matches("<svg class=\"chart\"").count(),
        charts,
        "charts in the DOM"
    );
    let lines: Vec<&str> = dom
        .split("<path class=\"series\" d=\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert_eq!(lines.len(), charts * lines_per_chart, "lines in the DOM");
    for d in &lines {
        assert!(d.starts_with('M'), "{d}");
    }
    assert!(!dom.contains("NaN"));

    let shot = page.with_extension("png");
    headless(
        page,
        &[
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
            format!("--screenshot={}", shot.display()),
        ],
    );
    let img = Shot::load(&shot);
    assert_eq!((img.w, img.h), (WINDOW.0 as usize, WINDOW.1 as usize));
    let areas = img.plot_areas();
    assert_eq!(
        areas.len(),
        charts,
        "plot areas found in the screenshot {}: {areas:?}",
        shot.display()
    );
    for a in areas {
        let ink = img.ink_in(a);
        assert!(
            ink > 40 * lines_per_chart,
            "plot at {a:?} looks blank ({ink} coloured pixels) in {}",
            shot.display()
        );
    }
    shot
}

#[test]
fn bench_page_and_comparison_page_render_with_plots_in_chromium() {
    let browser = chromium();
    assert!(browser.exists() || browser.components().count() == 1);
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("before.json");
    let b = dir.path().join("after.json");
    let bench = |json: &Path, mode: &str| {
        run_ok(&[
            "bench",
            "--duration",
            "3s",
            "--clients",
            "8",
            "--keys",
            "50",
            "--hold",
            "1ms",
            "--script-mode",
            mode,
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ])
    };
    bench(&a, "evalsha");
    bench(&b, "eval");

    // One run: the page bench wrote beside its JSON. Spectra for the operations with samples,
    // and four plots over time.
    let page = a.with_extension("html");
    assert!(page.exists(), "bench wrote no HTML beside its JSON");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    let ops = report["latency_us"]
        .as_object()
        .unwrap()
        .values()
        .filter(|l| l["count"].as_u64() > Some(0))
        .count();
    assert!(ops >= 4, "{report}");
    assert!(!report["timeline"].as_array().unwrap().is_empty());
    check_in_browser(&page, ops + 4, 1);

    // Two runs on one page, the first with fault events (a field other runs may not have).
    let mut with_faults = report.clone();
    with_faults["faults"] = serde_json::json!({"events": [
        {"t_s": 1.0, "kind": "server-pause", "duration_ms": 300, "node": null}
    ]});
    let faulted = dir.path().join("faulted.json");
    std::fs::write(&faulted, with_faults.to_string()).unwrap();
    let cmp = dir.path().join("compare.html");
    let out = run_ok(&[
        "report",
        faulted.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        cmp.to_str().unwrap(),
    ]);
    assert!(out.contains("compare.html"), "{out}");
    let html = std::fs::read_to_string(&cmp).unwrap();
    assert!(html.contains("server-pause"));
    let b_ops = serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&b).unwrap())
        .unwrap()["latency_us"]
        .as_object()
        .unwrap()
        .values()
        .filter(|l| l["count"].as_u64() > Some(0))
        .count();
    assert_eq!(ops, b_ops, "both runs measured the same operations");
    let shot = check_in_browser(&cmp, ops + 4, 2);
    if let Some(keep) = std::env::var_os("LOCKKIT_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }

    // The check can fail: the same page with its lines drawn in grey reads as blank plots.
    let mut grey = html;
    for colour in ["#1f4e9c", "#c0392b"] {
        assert!(grey.contains(colour));
        grey = grey.replace(colour, "#999999");
    }
    let grey_page = dir.path().join("grey.html");
    std::fs::write(&grey_page, grey).unwrap();
    let grey_shot = dir.path().join("grey.png");
    headless(
        &grey_page,
        &[
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
            format!("--screenshot={}", grey_shot.display()),
        ],
    );
    let img = Shot::load(&grey_shot);
    let areas = img.plot_areas();
    assert_eq!(areas.len(), ops + 4);
    assert!(
        areas.iter().all(|a| img.ink_in(*a) == 0),
        "grey lines counted as ink"
    );
}

#[test]
fn report_refuses_bad_input_with_a_clear_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"schema\": \"something/9\"}").unwrap();
    let out_path = dir.path().join("r.html");
    let out = Lockkit::new(&[
        "report",
        bad.to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
    ])
    .run();
    assert!(!out.success());
    let err = &out.stderr;
    assert!(err.contains("not a lockkit bench report"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(!out_path.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}
