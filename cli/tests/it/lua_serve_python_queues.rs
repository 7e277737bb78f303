//! Python job queues on `lockkit lua serve`: rq (a burst worker, the failed registry, a
//! retried job, a job scheduled a minute later) and dramatiq (RedisBroker: a worker in the
//! flow's process, results, a retry, a delayed message, the dead-letter queue). The same flow
//! against a real redis-server 7.0 and against the built binary must print the same
//! observations, with no "not emulated" error (cli/tests/libraries/refusals.py also reports
//! those the library catches and goes on from). The packages are installed from PyPI into
//! directories of their own under the target directory when missing.
//!
//! Both libraries read the time on the client (a scheduled job's or a delayed message's due
//! time is the flow's own clock): the flows move their process's clock forward instead of
//! sleeping, and on lua serve move the server's by as much with LOCKKIT.CLOCK ADVANCE. What
//! the server's clock decides (a result kept 5 seconds) passes with that ADVANCE on lua serve
//! and with a bounded real wait on redis-server's side.

use crate::common;

use common::libraries::{observe_with, pip_install_pinned};
use common::serve::Serve;
use lockkit_test_support::RedisServer;

/// Runs `script` with the packages of `deps` against a redis-server and against lua serve
/// (frozen clock, `virtual` passed to the script): both must observe the same.
fn same_on_both(deps: &std::path::Path, script: &str) {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let want = observe_with(deps, script, redis.port(), &[]);
    let started = std::time::Instant::now();
    let got = observe_with(deps, script, serve.port, &["virtual"]);
    eprintln!(
        "redis-server: {want}\nlua serve took {:?}",
        started.elapsed()
    );
    assert_eq!(got, want, "lua serve observed otherwise than redis-server");
}

#[test]
fn rq_3_observes_the_same_on_lua_serve() {
    let deps = pip_install_pinned(&["rq==3.0.0", "redis==8.2.0"], "rq");
    same_on_both(&deps, "rq_flow.py");
}

/// rq 2 names its worker's connection and finds its address with CLIENT LIST (rq 3 asks
/// CLIENT INFO first).
#[test]
fn rq_2_observes_the_same_on_lua_serve() {
    let deps = pip_install_pinned(&["rq==2.12.0", "redis==8.2.0"], "rq");
    same_on_both(&deps, "rq_flow.py");
}

#[test]
fn dramatiq_observes_the_same_on_lua_serve() {
    let deps = pip_install_pinned(&["dramatiq==2.2.1", "redis==8.2.0"], "dramatiq");
    same_on_both(&deps, "dramatiq_flow.py");
}
