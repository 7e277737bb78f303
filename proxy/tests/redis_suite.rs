//! A few of Redis 7.0.15's own test units, run through the proxy and against the server direct
//! in the same test: every test that passes direct passes through the proxy. Runs when `tclsh`
//! and the suite are there (`../shared/redis-tests` beside the clone, as in CI, or
//! `$REDIS_TESTS`); says so and passes otherwise. The whole comparison is
//! `results/2026-12-02-1630-redis-suite-proxy/run.sh`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use lockkit_test_support::RedisServer;

/// Fast units that cover the protocol, the data types and transactions.
const UNITS: &[&str] = &["unit/protocol", "unit/type/incr", "unit/multi", "unit/quit"];

fn suite() -> Option<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("REDIS_TESTS").map(PathBuf::from),
        Some(manifest.join("../../shared/redis-tests")),
        Some(PathBuf::from("/work/shared/redis-tests")),
    ];
    let have_tcl = Command::new("tclsh")
        .arg("/dev/null")
        .status()
        .is_ok_and(|s| s.success());
    have_tcl
        .then(|| {
            candidates
                .into_iter()
                .flatten()
                .find(|p| p.join("run-external.sh").is_file())
        })
        .flatten()
}

/// `(unit, ok, err)` per unit, as run-external.sh prints them.
fn run_units(suite: &Path, port: u16, out: &Path) -> Vec<(String, u32, u32)> {
    let run = Command::new("bash")
        .arg(suite.join("run-external.sh"))
        .arg(port.to_string())
        .arg(out)
        .args(UNITS)
        .output()
        .expect("bash runs");
    let text = String::from_utf8_lossy(&run.stdout);
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[..] {
                [unit, "ok", ok, "err", err] if unit.starts_with("unit/") => {
                    Some((unit.to_string(), ok.parse().ok()?, err.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_units_pass_through_the_proxy_as_they_pass_direct() {
    let Some(suite) = suite() else {
        eprintln!("no tclsh or no Redis test suite (../shared/redis-tests): nothing to compare");
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let server = RedisServer::start();
    let direct = tokio::task::spawn_blocking({
        let (suite, out) = (suite.clone(), out.path().join("direct"));
        let port = server.port();
        move || run_units(&suite, port, &out)
    })
    .await
    .unwrap();
    server.inline("FLUSHALL").unwrap();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let port = proxy.addr().port();
    let through = tokio::task::spawn_blocking({
        let out = out.path().join("proxy");
        move || run_units(&suite, port, &out)
    })
    .await
    .unwrap();
    proxy.stop().await;
    assert_eq!(direct.len(), UNITS.len(), "{direct:?}");
    assert!(direct.iter().all(|(_, ok, _)| *ok > 0), "{direct:?}");
    assert_eq!(through, direct, "through the proxy vs direct");
}
