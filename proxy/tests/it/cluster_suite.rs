//! A few of Redis 7.0.15's own test units with `--cluster-mode`, in the same test: directly
//! against a one-node cluster that owns all 16384 slots, and through the proxy in front of a
//! 3-master cluster (a fresh cluster per unit and side). Through the proxy at least 98% of the
//! direct count passes, and no test that passes direct fails through the proxy. The tests of the
//! results folder's `skip-list.txt` (they assume one node) are skipped on both sides; with
//! `--durable`, a failing test does not end its unit. Runs when `tclsh` and the suite are there;
//! says so and passes otherwise. The nine units of issue 38:
//! `results/2026-12-07-0225-proxy-cluster-redis-suite/run.sh`.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use lockkit_test_support::RedisCluster;

/// Units that pass through the proxy as they pass direct, and run in seconds.
const UNITS: &[&str] = &[
    "unit/type/incr",
    "unit/type/hash",
    "unit/type/string",
    "unit/keyspace",
    "unit/multi",
];

/// The tests that assume one node, each with its reason (the suite's `--skipfile` format).
const SKIP_LIST: &str = "../results/2026-12-07-0225-proxy-cluster-redis-suite/skip-list.txt";

/// What the suite printed for one unit.
#[derive(Debug)]
struct Outcome {
    /// How many times each name passed (a unit may run tests of one name several times).
    passed: BTreeMap<String, usize>,
    /// `[err]`, `[exception]` and `[timeout]` lines.
    failed: Vec<String>,
}

/// `unit` with `--cluster-mode` against `port`; `None` when the suite did not run it (its own
/// test-server port, drawn at random, was taken).
fn run_unit(suite: &Path, port: u16, out: &Path, skip: &Path, unit: &str) -> Option<Outcome> {
    let run = Command::new("bash")
        .arg(suite.join("run-external.sh"))
        .arg(port.to_string())
        .arg(out)
        .arg(unit)
        .env(
            "SUITE_ARGS",
            format!(
                "--cluster-mode --singledb --durable --skipfile {}",
                skip.display()
            ),
        )
        .output()
        .expect("bash runs");
    assert!(run.status.success(), "run-external.sh: {run:?}");
    let log = std::fs::read_to_string(out.join(format!("{}.log", unit.replace('/', "_")))).ok()?;
    let mut outcome = Outcome {
        passed: BTreeMap::new(),
        failed: Vec::new(),
    };
    for line in log.lines().map(strip_colours) {
        if let Some(rest) = line.strip_prefix("[ok]: ") {
            // "[ok]: NAME (N ms)"
            let name = rest.rsplit_once(" (").map_or(rest, |(name, _)| name);
            *outcome.passed.entry(name.to_string()).or_default() += 1;
        } else if ["[err]", "[exception]", "[timeout]", "[TIMEOUT]"]
            .iter()
            .any(|p| line.starts_with(p))
        {
            outcome.failed.push(line);
        }
    }
    (!outcome.passed.is_empty() || !outcome.failed.is_empty()).then_some(outcome)
}

/// The line without the suite's ANSI colour codes.
fn strip_colours(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Runs `unit` against `port` up to three times until the suite starts.
fn run_until_it_starts(suite: &Path, port: u16, out: &Path, skip: &Path, unit: &str) -> Outcome {
    (0..3)
        .find_map(|_| run_unit(suite, port, out, skip, unit))
        .unwrap_or_else(|| panic!("{unit} never ran against port {port}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_units_in_cluster_mode_pass_through_the_proxy_as_on_one_node() {
    let Some(suite) = redis_suite() else {
        eprintln!("no tclsh or no Redis test suite (../shared/redis-tests): nothing to compare");
        return;
    };
    let _one_suite_at_a_time = crate::common::SUITE.lock().await;
    let out = tempfile::tempdir().unwrap();
    // The suite reads the list from a path it splits on spaces: a copy in the temporary folder.
    let skip = out.path().join("skip-list.txt");
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(SKIP_LIST),
        &skip,
    )
    .expect("the skip list is in the results folder");
    for unit in UNITS {
        let direct = {
            let one = RedisCluster::start_single();
            let port = one.nodes()[0].port();
            let (suite, out, skip) = (suite.clone(), out.path().join("direct"), skip.clone());
            tokio::task::spawn_blocking(move || {
                run_until_it_starts(&suite, port, &out, &skip, unit)
            })
            .await
            .unwrap()
        };
        let through = {
            let cluster = RedisCluster::start(3);
            let proxy = start_proxy(&cluster.url(), vec![]).await;
            assert!(proxy.shared().is_cluster());
            let port = proxy.addr().port();
            let (suite, out, skip) = (suite.clone(), out.path().join("proxy"), skip.clone());
            let through = tokio::task::spawn_blocking(move || {
                run_until_it_starts(&suite, port, &out, &skip, unit)
            })
            .await
            .unwrap();
            proxy.stop().await;
            through
        };
        assert!(
            direct.failed.is_empty() && !direct.passed.is_empty(),
            "{unit} direct on a one-node cluster: {direct:?}"
        );
        let lost: Vec<&String> = direct
            .passed
            .iter()
            .filter(|(name, n)| through.passed.get(*name).unwrap_or(&0) < n)
            .map(|(name, _)| name)
            .collect();
        let (direct_n, through_n): (usize, usize) =
            (direct.passed.values().sum(), through.passed.values().sum());
        assert!(
            lost.is_empty(),
            "{unit}: pass direct, not through the proxy: {lost:?}\nfailed through the proxy: {:?}",
            through.failed
        );
        assert!(
            through_n * 100 >= direct_n * 98,
            "{unit}: {through_n} passed through the proxy, {direct_n} direct"
        );
        eprintln!("{unit}: {through_n} passed through the proxy, {direct_n} direct");
    }
}
