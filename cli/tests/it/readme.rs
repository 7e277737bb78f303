//! The shell blocks of the README and of its chapters in `docs/` run as written, file after file
//! in the order of [`DOCUMENTS`] and block after block, as one bash script from the repository's
//! root, against the throwaway servers they start themselves, and leave `git status` as it was.
//! A chapter in `docs/` with a ```bash block that is not in [`DOCUMENTS`] fails the test.
//!
//! What differs from a reader's terminal, and nothing else:
//! - `lockkit` is this build's debug binary, first on `PATH`;
//! - every `lockkit bench` line runs 1 s with no warm-up (`--duration`, `--warmup` replaced or
//!   added), so the whole run takes one to three minutes;
//! - the fixed ports (6379, 6380, ..., 6390, 3001, 3002, 7000, 7100) become free loopback ports;
//! - the lines in [`REWRITES`] (installing packages, the test suite itself, the release build,
//!   the proxy section's two commands for the reader's own application)
//!   are replaced as listed; a rewrite that no longer matches a line fails the test, so the
//!   list stays in step with the documents.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::repo;
use lockkit_test_support::free_port;

/// The documents whose ```bash blocks run, in this order: later ones use what earlier ones left
/// (`docs/BENCH.md` sizes a TTL from the files `docs/EXAMPLES.md`'s cron run wrote).
const DOCUMENTS: &[&str] = &[
    "README.md",
    "docs/EXAMPLES.md",
    "docs/LIBRARY.md",
    "docs/PROXY.md",
    "docs/BENCH.md",
    "docs/HARNESS.md",
];

/// Document lines (trimmed) and what runs instead; `{examples}` is the built examples' folder.
const REWRITES: &[(&str, &str)] = &[
    // Needs root and the network; CI installs the packages first (.ci/run).
    (
        "apt-get update && apt-get install -y redis-server && cargo run --release --bin lockkit -- bench",
        "lockkit bench",
    ),
    // The suite this test is part of.
    ("cargo test --workspace --all-features", ""),
    // The release binary: here the debug build under test is already first on PATH.
    (r#"export PATH="${CARGO_TARGET_DIR:-$PWD/target}/release:$PATH""#, ""),
    // The two commands that open docs/PROXY.md's first run, for the reader's own application: the
    // block right after runs the same two against a throwaway Redis with redis-cli traffic.
    (
        "lockkit proxy --listen 127.0.0.1:7000 --upstream redis://127.0.0.1:6380 --plugin observe --out /tmp/lockkit-observed &",
        "",
    ),
    ("lockkit ttl --observed /tmp/lockkit-observed/observe-*.json   # once it has seen the application work", ""),
    // Built once by this test (the same build the examples' own tests use).
    ("cargo build --example orders --features tower,metrics", ""),
];

/// `cargo run --example NAME --features FEATURES --` becomes the built binary.
const CARGO_RUN_EXAMPLE: &str = "cargo run --example ";

/// The features the examples are built with: what `orders` (`tower,metrics`) and `cron`
/// (`tower`) need.
const EXAMPLE_FEATURES: &str = "tower,metrics";

/// Ports the documents name; each becomes a free loopback port.
const PORTS: &[&str] = &[
    "6379", "6380", "6381", "6382", "6390", "7000", "7100", "3001", "3002",
];

/// A document's ```bash blocks (fences may be indented, as inside a list item), in order.
fn bash_blocks(readme: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    // The block's lines and the fence's indentation, which its lines share.
    let mut current: Option<(Vec<String>, usize)> = None;
    for line in readme.lines() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        match current.as_mut() {
            None if t == "```bash" => current = Some((Vec::new(), indent)),
            None => {}
            Some(_) if t == "```" => blocks.push(current.take().unwrap().0),
            Some((b, fence)) => {
                let cut = indent.min(*fence);
                b.push(line[cut..].to_string());
            }
        }
    }
    assert!(current.is_none(), "an unclosed ```bash block");
    blocks
}

/// `--flag VALUE` set to `value` in a command line, added if absent.
fn set_flag(line: &str, flag: &str, value: &str) -> String {
    let (cmd, comment) = match line.find(" #") {
        Some(i) => (&line[..i], &line[i..]),
        None => (line, ""),
    };
    let mut words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
    match words.iter().position(|w| w == flag) {
        Some(i) if i + 1 < words.len() => words[i + 1] = value.to_string(),
        _ => words.extend([flag.to_string(), value.to_string()]),
    }
    format!("{}{comment}", words.join(" "))
}

/// The script that runs, and how often each rewrite matched.
fn script(
    blocks: &[Vec<String>],
    examples: &Path,
    ports: &BTreeMap<&str, u16>,
) -> (String, Vec<usize>) {
    let mut used = vec![0; REWRITES.len()];
    let mut out = String::new();
    for block in blocks {
        for line in block {
            let mut line = line.clone();
            if let Some(i) = REWRITES.iter().position(|(from, _)| line.trim() == *from) {
                used[i] += 1;
                line = REWRITES[i].1.to_string();
            }
            if let Some(rest) = line.strip_prefix(CARGO_RUN_EXAMPLE) {
                let (name, rest) = rest
                    .split_once(" --features ")
                    .expect("cargo run --example NAME --features FEATURES -- ARGS");
                let (features, args) = rest
                    .split_once(" --")
                    .expect("cargo run --example NAME --features FEATURES -- ARGS");
                assert!(
                    features
                        .split(',')
                        .all(|f| EXAMPLE_FEATURES.split(',').any(|g| g == f)),
                    "{line}: the examples are built with {EXAMPLE_FEATURES} only"
                );
                line = format!("{}{args}", examples.join(name).display());
            }
            if line.starts_with("lockkit bench") {
                line = set_flag(&set_flag(&line, "--duration", "1s"), "--warmup", "0");
            }
            for (from, to) in ports {
                line = replace_word(&line, from, &to.to_string());
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    (out, used)
}

/// Replaces `word` where it is not part of a longer run of digits.
fn replace_word(line: &str, word: &str, with: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find(word) {
        let before = rest[..i].chars().last();
        let after = rest[i + word.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(|c| c.is_ascii_digit()) || after.is_some_and(|c| c.is_ascii_digit()) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[i + word.len()..];
    }
    out.push_str(rest);
    out
}

/// Builds the examples (with [`EXAMPLE_FEATURES`]) into this test's target dir once; returns their folder.
fn examples_dir() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let bin = PathBuf::from(env!("CARGO_BIN_EXE_lockkit"));
            let profile = bin.parent().expect("target/<profile>").to_path_buf();
            let target = profile.parent().expect("target dir").to_path_buf();
            let mut cargo = Command::new(env!("CARGO"));
            cargo.args([
                "build",
                "--quiet",
                "--features",
                EXAMPLE_FEATURES,
                "--examples",
                "-p",
                "lockkit",
            ]);
            if profile.ends_with("release") {
                cargo.arg("--release");
            }
            let status = cargo
                .current_dir(repo())
                .env("CARGO_TARGET_DIR", &target)
                .status()
                .expect("running cargo build --examples");
            assert!(status.success(), "cargo build --examples failed");
            profile.join("examples")
        })
        .clone()
}

fn git_status() -> String {
    let out = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(repo())
        .output()
        .expect("git status");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn bash_blocks_are_extracted_with_indented_fences() {
    let md = "x\n```bash\na\n```\n- item\n  ```bash\n  b\n    c\n  ```\n```text\nno\n```\n";
    assert_eq!(bash_blocks(md), vec![vec!["a"], vec!["b", "  c"]]);
    assert_eq!(
        set_flag(
            "lockkit bench --duration 3s --json x  # c",
            "--duration",
            "1s"
        ),
        "lockkit bench --duration 1s --json x # c"
    );
    assert_eq!(
        set_flag("lockkit bench", "--warmup", "0"),
        "lockkit bench --warmup 0"
    );
    assert_eq!(
        replace_word("-p 6379 :63790 6379", "6379", "1"),
        "-p 1 :63790 1"
    );
}

/// The ```bash blocks of every document in [`DOCUMENTS`], in order; fails for a chapter in
/// `docs/` with bash blocks that is not listed (its commands would never run).
fn documents_bash_blocks() -> Vec<Vec<String>> {
    let mut unlisted = Vec::new();
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        let name = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
        if name.ends_with(".md")
            && !DOCUMENTS.contains(&name.as_str())
            && !bash_blocks(&std::fs::read_to_string(&path).unwrap()).is_empty()
        {
            unlisted.push(name);
        }
    }
    assert!(
        unlisted.is_empty(),
        "{unlisted:?} have ```bash blocks but are not in DOCUMENTS: add them"
    );
    let mut blocks = Vec::new();
    for doc in DOCUMENTS {
        let text = std::fs::read_to_string(repo().join(doc)).unwrap();
        let found = bash_blocks(&text);
        assert!(
            !found.is_empty(),
            "{doc} has no ```bash block: drop it from DOCUMENTS"
        );
        blocks.extend(found);
    }
    blocks
}

#[test]
fn every_documented_shell_block_runs_as_written_and_leaves_git_status_clean() {
    let blocks = documents_bash_blocks();
    assert!(
        blocks.len() >= 5,
        "the documents have {} bash blocks",
        blocks.len()
    );
    let ports: BTreeMap<&str, u16> = PORTS.iter().map(|p| (*p, free_port().unwrap())).collect();
    let (body, used) = script(&blocks, &examples_dir(), &ports);
    for ((from, _), n) in REWRITES.iter().zip(&used) {
        assert!(
            *n > 0,
            "the rewrite of {from:?} matches no line of the documents: update REWRITES"
        );
    }
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_lockkit"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Whatever the script leaves running is stopped afterwards, also when it fails.
    let shutdown: String = ports
        .values()
        .map(|p| format!("redis-cli -p {p} shutdown nosave >/dev/null 2>&1 || true\n"))
        .collect();
    let full =
        format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{body}");
    let before = git_status();
    let started = Instant::now();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&full)
        .current_dir(repo())
        .env("PATH", &path)
        .env_remove("REDIS_URL")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("bash");
    let pgid = child.id();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let (mut o, mut e) = (String::new(), String::new());
        let _ = out.read_to_string(&mut o);
        let _ = err.read_to_string(&mut e);
        (o, e)
    });
    // A guard against a hang, not a speed check: on a quiet machine the documents take about 80 s,
    // on the shared 2-core one under other builds they have taken over 180 s.
    let limit = Duration::from_secs(360);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
    let _ = child.wait();
    let _ = Command::new("bash").arg("-c").arg(&shutdown).status();
    let (stdout, stderr) = reader.join().unwrap();
    let all = format!("--- script\n{full}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    let status = status.unwrap_or_else(|| {
        panic!("the documents' commands did not finish within {limit:?}\n{all}")
    });
    assert!(
        status.success(),
        "a documented command failed ({status})\n{all}"
    );
    // What the documents promise the commands show.
    assert!(
        stdout.contains("429") && stdout.contains("201"),
        "the double click\n{all}"
    );
    assert!(
        stdout.contains("lockkit_acquire_attempts_total{"),
        "the metrics scrape\n{all}"
    );
    assert!(stdout.contains("ran the job"), "cron\n{all}");
    assert!(stdout.contains("TTL"), "lockkit ttl\n{all}");
    assert!(
        stdout.contains("topology          proxy"),
        "probe through twemproxy\n{all}"
    );
    assert!(
        stdout.contains("waiters           poll: no (a proxy target"),
        "probe says waiters poll behind twemproxy\n{all}"
    );
    assert!(
        stdout.contains("recorded lockkit-results/mine.txt"),
        "lua record\n{all}"
    );
    assert!(
        stdout.contains("lock:order:{id}"),
        "the README's proxy example folds its key into a pattern\n{all}"
    );
    assert_eq!(
        git_status(),
        before,
        "the documents' commands changed the repository\n{all}"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (but `-` and `_`), each space
/// a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A Markdown text's lines outside code fences (the fence lines left out too).
fn prose_lines(md: &str) -> impl Iterator<Item = &str> {
    let mut fence = false;
    md.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            return false;
        }
        !fence
    })
}

/// The anchors of a Markdown text's headings (outside code fences), GitHub's way: a repeated
/// heading's anchor gets `-1`, `-2`, ...
fn anchors(md: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for line in prose_lines(md) {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 { base } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of a Markdown text's inline links and images (`[text](target)`), outside code
/// fences and code spans.
fn link_targets(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(md) {
        // Code spans out, keeping what is between them.
        let prose: String = line
            .split('`')
            .enumerate()
            .map(|(i, part)| if i % 2 == 0 { part } else { "" })
            .collect();
        let mut rest = prose.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    out
}

/// The relative links of `doc` (a path from the repository's root) whose file or `#anchor` does
/// not exist, as `doc: target`.
fn broken_links(root: &Path, doc: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root.join(doc)).unwrap();
    let dir = Path::new(doc).parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for target in link_targets(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (target.as_str(), None),
        };
        let path = if file.is_empty() {
            PathBuf::from(doc)
        } else {
            dir.join(file)
        };
        let full = root.join(&path);
        let ok = full.exists()
            && match anchor {
                Some(a) if path.extension().is_some_and(|e| e == "md") => {
                    anchors(&std::fs::read_to_string(&full).unwrap()).contains(&a.to_string())
                }
                _ => true,
            };
        if !ok {
            broken.push(format!("{doc}: {target}"));
        }
    }
    broken
}

#[test]
fn links_are_found_and_anchors_follow_githubs_rules() {
    assert_eq!(
        slug("The HTML report and `lockkit report`"),
        "the-html-report-and-lockkit-report"
    );
    assert_eq!(
        slug("Faults on a schedule: `--faults`, `--fencing`"),
        "faults-on-a-schedule---faults---fencing"
    );
    assert_eq!(
        anchors("# A\n```bash\n# not a heading\n```\n## A\n#no\n### B.c"),
        vec!["a", "a-1", "bc"]
    );
    assert_eq!(
        link_targets("[a](x.md) `[b](code)` ![c](d.png)\n```\n[e](f)\n```\n[`g`](h#i)"),
        vec!["x.md", "d.png", "h#i"]
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(
        dir.path().join("docs/A.md"),
        "# A\n## Two words\n[ok](#two-words) [ok](../README.md#top) [no](#three) [no](B.md) [ok](https://x/y)\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("README.md"), "# Top\n").unwrap();
    assert_eq!(
        broken_links(dir.path(), "docs/A.md"),
        vec!["docs/A.md: #three", "docs/A.md: B.md"]
    );
}

#[test]
fn every_link_in_the_readme_and_docs_resolves() {
    let mut docs = vec!["README.md".to_string(), "results/README.md".to_string()];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    docs.sort();
    let broken: Vec<String> = docs.iter().flat_map(|d| broken_links(&repo(), d)).collect();
    assert!(
        broken.is_empty(),
        "links to a file or heading that does not exist:\n{}",
        broken.join("\n")
    );
}
