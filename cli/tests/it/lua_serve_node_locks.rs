//! Node's lock libraries on `lockkit lua serve`: node-redlock and redis-semaphore (on ioredis)
//! run the same flow against three real redis-server 7.0 and against three `lua serve`
//! processes (one server alone, then all three as the nodes of a Redlock) and must print the
//! same observations, with no "not emulated" error (cli/tests/libraries/refusals.js also
//! reports those the library catches and swallows). The packages are installed from npm into
//! a cache under the target directory when missing.

use crate::common;

use std::time::Instant;

use common::libraries::{npm_install, observe};
use common::serve::Serve;
use lockkit_test_support::RedisServer;

/// The packages both flows need, installed together (one install into the shared directory).
const PACKAGES: [&str; 3] = [
    "redlock@5.0.0-beta.2",
    "redis-semaphore@5.8.0",
    "ioredis@6.1.0",
];

/// `script` against three redis-servers and against three `lua serve` on the frozen clock
/// (expiry comes with LOCKKIT.CLOCK ADVANCE): both outputs (what redis-server's side printed
/// and how long each side took go to standard error).
fn both_sides(script: &str) -> (String, String) {
    npm_install(&PACKAGES);
    let redis = RedisServer::start_many(3);
    let serves: Vec<Serve> = (0..3).map(|_| Serve::start(&[])).collect();
    let ports = |ports: Vec<u16>| ports.iter().map(u16::to_string).collect::<Vec<_>>();
    let real = ports(redis.iter().map(RedisServer::port).collect());
    let fake = ports(serves.iter().map(|s| s.port).collect());

    let started = Instant::now();
    let rest: Vec<&str> = real[1..].iter().map(String::as_str).collect();
    let want = observe("node", script, redis[0].port(), &rest);
    let redis_took = started.elapsed();
    let started = Instant::now();
    let mut rest: Vec<&str> = fake[1..].iter().map(String::as_str).collect();
    rest.push("virtual");
    let got = observe("node", script, serves[0].port, &rest);
    eprintln!(
        "redis-server: {want}\nredis-server took {redis_took:?}, lua serve {:?}",
        started.elapsed()
    );
    (want, got)
}

#[test]
fn node_redlock_observes_the_same_on_lua_serve() {
    let (want, got) = both_sides("redlock.js");
    assert!(
        want.contains("[\"using\","),
        "the flow ran to its end:\n{want}"
    );
    assert_eq!(got, want, "lua serve observed otherwise than redis-server");
}

#[test]
fn redis_semaphore_observes_the_same_on_lua_serve() {
    let (want, got) = both_sides("redis_semaphore.js");
    assert!(
        want.contains("redlock multi-semaphore"),
        "the flow ran to its end:\n{want}"
    );
    assert_eq!(got, want, "lua serve observed otherwise than redis-server");
}
