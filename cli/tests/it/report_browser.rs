//! The HTML reports rendered in a real browser: a page `lockkit bench` wrote for one run, a
//! page `lockkit report` wrote comparing two runs (one with fault events), and the pages of
//! observe reports `lockkit proxy` wrote (one, and two compared) are opened in headless
//! Chromium; the DOM must hold every chart with its lines, and the screenshot must show each
//! plot area with coloured lines in it (not blank).
//!
//! Needs Debian's `chromium` (`.ci/run` installs it; `CHROMIUM=/path` picks another binary).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{files_in, Lockkit, ProxyRun};
use lockkit::{LockClient, Locker, ReleaseOutcome};
use lockkit_test_support::RedisServer;

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

/// Opens `page` in Chromium: checks the DOM (`charts` charts, `lines` series lines in all),
/// then the screenshot (each plot with `min_ink` coloured pixels at least). Returns the
/// screenshot's path.
fn check_in_browser(page: &Path, charts: usize, lines: usize, min_ink: usize) -> PathBuf {
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
    let paths: Vec<&str> = dom
        .split("<path class=\"series\" d=\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert_eq!(paths.len(), lines, "lines in the DOM");
    for d in &paths {
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
            ink > min_ink,
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
    check_in_browser(&page, ops + 4, ops + 4, 40);

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
    let shot = check_in_browser(&cmp, ops + 4, 2 * (ops + 4), 80);
    if let Some(keep) = std::env::var_os("LOCKKIT_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }

    // The check can fail: the same page with its lines drawn in grey reads as blank plots.
    assert_blank_when_grey(&html, dir.path(), ops + 4);
}

/// The check can fail: `html` with its first two colours turned grey shows `charts` plots and
/// no coloured pixel in any of them.
fn assert_blank_when_grey(html: &str, dir: &Path, charts: usize) {
    let mut grey = html.to_string();
    for colour in ["#1f4e9c", "#c0392b"] {
        assert!(grey.contains(colour));
        grey = grey.replace(colour, "#999999");
    }
    let grey_page = dir.join("grey.html");
    std::fs::write(&grey_page, grey).unwrap();
    let grey_shot = dir.join("grey.png");
    headless(
        &grey_page,
        &[
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
            format!("--screenshot={}", grey_shot.display()),
        ],
    );
    let img = Shot::load(&grey_shot);
    let areas = img.plot_areas();
    assert_eq!(areas.len(), charts);
    assert!(
        areas.iter().all(|a| img.ink_in(*a) == 0),
        "grey lines counted as ink"
    );
}

/// Takes `key` for `ttl_ms` through `client`, holds it `hold_ms`, releases it; a second
/// acquire while it is held finds it busy. Returns how the release went.
async fn hold(client: &LockClient, key: &str, ttl_ms: u64, hold_ms: u64) -> ReleaseOutcome {
    let ttl = Duration::from_millis(ttl_ms);
    let lock = client
        .try_acquire(key, ttl)
        .await
        .unwrap()
        .expect("a free key");
    assert!(client.try_acquire(key, ttl).await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
    client.release(&lock).await.unwrap()
}

/// An observe report made the real way: `lockkit proxy --plugin observe` in front of a real
/// redis-server, the lock library taking and releasing locks through it; `slow` stretches
/// the hold times. Written to `dir/NAME.json`.
fn observe_report(server: &RedisServer, dir: &Path, name: &str, slow: u64) -> PathBuf {
    let out = dir.join(name);
    std::fs::create_dir(&out).unwrap();
    let proxy = ProxyRun::start(&server.url(), &["--quiet", "--plugin", "observe"], &out);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = LockClient::connect(&proxy.url()).await.unwrap();
        for i in 0..12 {
            let key = format!("order:{i}:lock");
            let r = hold(&client, &key, 30_000, (4 + i % 4 * 3) * slow).await;
            assert_eq!(r, ReleaseOutcome::Released);
        }
        for i in 0..8 {
            let key = format!("cart:{i}");
            let r = hold(&client, &key, 2_000 + i * 500, slow).await;
            assert_eq!(r, ReleaseOutcome::Released);
        }
        for _ in 0..3 {
            let r = hold(&client, "job:nightly", 400, 40 * slow).await;
            assert_eq!(r, ReleaseOutcome::Released);
        }
        // Held past its TTL: the release finds it gone.
        let r = hold(&client, "report:7", 30, 60).await;
        assert_eq!(r, ReleaseOutcome::NotHeld);
    });
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    let files = files_in(&out);
    assert_eq!(files.len(), 1, "{files:?}");
    let json = dir.join(format!("{name}.json"));
    std::fs::rename(&files[0], &json).unwrap();
    json
}

#[test]
fn observe_pages_render_with_plots_in_chromium() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let before = observe_report(&server, dir.path(), "before", 2);
    let after = observe_report(&server, dir.path(), "after", 1);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&before).unwrap()).unwrap();
    let patterns: Vec<&str> = report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["pattern"].as_str().unwrap())
        .collect();
    assert_eq!(
        patterns,
        ["order:{id}:lock", "cart:{id}", "job:nightly", "report:{id}"]
    );

    // One report: its page beside the JSON. The TTL chart (a row per pattern: a bar, a
    // diamond) and a hold-time spectrum per pattern, each with its recommended TTL line.
    let out = run_ok(&["report", before.to_str().unwrap()]);
    let page = before.with_extension("html");
    assert!(out.contains("before.html"), "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    for (class, n) in [
        ("bar", 4),
        ("mark", 4),
        ("band", 4),
        ("level", 4),
        ("row-label", 4),
    ] {
        assert_eq!(
            html.matches(&format!("class=\"{class}\"")).count(),
            n,
            "{class}"
        );
    }
    assert!(html.contains("order:{id}:lock hold time by percentile"));
    assert!(html.contains("30 s"), "the TTL asked for");
    check_in_browser(&page, 1 + 4, 4, 40);

    // Two reports compared: every pattern has a row and a line per report.
    let cmp = dir.path().join("observe-compare.html");
    run_ok(&[
        "report",
        before.to_str().unwrap(),
        after.to_str().unwrap(),
        "-o",
        cmp.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&cmp).unwrap();
    assert!(html.contains("2 reports compared"));
    assert_eq!(html.matches("class=\"mark\"").count(), 8);
    let shot = check_in_browser(&cmp, 1 + 4, 2 * 4, 80);
    if let Some(keep) = std::env::var_os("LOCKKIT_KEEP_OBSERVE_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    assert_blank_when_grey(&html, dir.path(), 1 + 4);
}

#[test]
fn report_refuses_bad_input_with_a_clear_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.json");
    std::fs::write(&other, "{\"schema\": \"something/9\"}").unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"schema\": \"lockkit.observe/1\", \"locks\": [").unwrap();
    let malformed = dir.path().join("malformed.json");
    std::fs::write(
        &malformed,
        r#"{"schema": "lockkit.observe/1", "target": "redis://h", "duration_s": 1, "locks": 3}"#,
    )
    .unwrap();
    let missing = dir.path().join("missing.json");
    let out_path = dir.path().join("r.html");
    for (input, says) in [
        (
            &other,
            "neither a lockkit bench report nor an observe report",
        ),
        (&broken, "broken.json is not JSON"),
        (&malformed, "does not match the lockkit.observe/1 schema"),
        (&missing, "reading"),
    ] {
        let out = Lockkit::new(&[
            "report",
            input.to_str().unwrap(),
            "-o",
            out_path.to_str().unwrap(),
        ])
        .run();
        assert_eq!(out.code, Some(1), "{}", out.all());
        let err = &out.stderr;
        assert!(err.contains(says), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(!out_path.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
    }
}
