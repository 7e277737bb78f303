//! A few of Redis 7.0.15's own test units, run through the proxy and against the server direct
//! in the same test: every test that passes direct passes through the proxy. Runs when `tclsh`
//! and the suite are there (`../shared/redis-tests` beside the clone, as in CI, or
//! `$REDIS_TESTS`); says so and passes otherwise. The whole comparison is
//! `results/2026-12-02-1630-redis-suite-proxy/run.sh`.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;
use lockkit_test_support::RedisServer;

/// Fast units that cover the protocol, the data types and transactions.
const UNITS: &[&str] = &["unit/protocol", "unit/type/incr", "unit/multi", "unit/quit"];

/// `(ok, err)` of `unit` run against `port`, as run-external.sh prints them; `None` when the
/// suite did not run it (its own test-server port, drawn at random, was taken).
fn run_unit(suite: &Path, port: u16, out: &Path, unit: &str) -> Option<(u32, u32)> {
    let run = Command::new("bash")
        .arg(suite.join("run-external.sh"))
        .arg(port.to_string())
        .arg(out)
        .arg(unit)
        .output()
        .expect("bash runs");
    let text = String::from_utf8_lossy(&run.stdout);
    text.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w[..] {
            [u, "ok", ok, "err", err] if u == unit => {
                let counts: (u32, u32) = (ok.parse().ok()?, err.parse().ok()?);
                (counts != (0, 0)).then_some(counts)
            }
            _ => None,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_units_pass_through_the_proxy_as_they_pass_direct() {
    let Some(suite) = redis_suite() else {
        eprintln!("no tclsh or no Redis test suite (../shared/redis-tests): nothing to compare");
        return;
    };
    let _one_suite_at_a_time = crate::common::SUITE.lock().await;
    let out = tempfile::tempdir().unwrap();
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let ports = [server.port(), proxy.addr().port()];
    let outs = [out.path().join("direct"), out.path().join("proxy")];
    let results = tokio::task::spawn_blocking(move || {
        let mut results = Vec::new();
        for unit in UNITS {
            // A unit the suite could not start (a port taken on a busy machine) is run again.
            let both = (0..3).find_map(|_| {
                let direct = run_unit(&suite, ports[0], &outs[0], unit)?;
                let through = run_unit(&suite, ports[1], &outs[1], unit)?;
                Some((direct, through))
            });
            results.push((unit, both));
        }
        results
    })
    .await
    .unwrap();
    proxy.stop().await;
    for (unit, both) in results {
        let (direct, through) = both.unwrap_or_else(|| panic!("{unit} never ran"));
        assert!(direct.0 > 0, "{unit}: {direct:?}");
        assert_eq!(
            through, direct,
            "{unit}: (ok, err) through the proxy vs direct"
        );
    }
}
