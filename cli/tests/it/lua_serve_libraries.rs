//! Real client libraries on `lockkit lua serve`: the same flow against a real redis-server
//! 7.0 and against the built binary must print the same observations, with no "not
//! emulated" error. The libraries are installed from PyPI and npm into a cache under the
//! target directory when missing.

use crate::common;

use common::libraries::{npm_install, observe, pip_install};
use common::serve::Serve;
use lockkit_test_support::{RedisCluster, RedisServer};

#[test]
fn python_redis_lock_observes_the_same_on_lua_serve() {
    pip_install(&["python-redis-lock==4.0.1", "redis==8.2.0"], "redis_lock");
    let redis = RedisServer::start();
    // The library's blocking waits have real timeouts: the clock follows the wall clock.
    let serve = Serve::start(&["--clock", "wall"]);
    let want = observe("python3", "python_redis_lock.py", redis.port(), &[]);
    let got = observe("python3", "python_redis_lock.py", serve.port, &[]);
    eprintln!("redis-server: {want}");
    assert_eq!(got, want, "lua serve observed otherwise than redis-server");
}

#[test]
fn bullmq_observes_the_same_on_lua_serve() {
    npm_install(&["bullmq@6.7.6", "ioredis@6.1.0"]);
    let redis = RedisServer::start();
    // The frozen clock: the delayed job's time comes with LOCKKIT.CLOCK ADVANCE.
    let serve = Serve::start(&[]);
    let want = observe("node", "bullmq.js", redis.port(), &[]);
    let started = std::time::Instant::now();
    let got = observe("node", "bullmq.js", serve.port, &["virtual"]);
    eprintln!(
        "redis-server: {want}\nlua serve took {:?}",
        started.elapsed()
    );
    assert_eq!(got, want, "lua serve observed otherwise than redis-server");
}

#[test]
fn bee_queue_observes_the_same_on_lua_serve() {
    npm_install(&["bee-queue@2.0.0"]);
    let redis = RedisServer::start();
    // bee-queue's delays are timers of the client: the server's clock plays no part.
    let serve = Serve::start(&[]);
    let want = observe("node", "bee_queue.js", redis.port(), &[]);
    let got = observe("node", "bee_queue.js", serve.port, &[]);
    eprintln!("redis-server: {want}");
    assert_eq!(got, want, "lua serve observed otherwise than redis-server");
}

#[test]
fn ioredis_cluster_observes_the_same_on_lua_serve_cluster() {
    npm_install(&["ioredis@6.1.0"]);
    let real = RedisCluster::start(3);
    // The first line is the first master's port: ioredis finds the others with CLUSTER SLOTS.
    let serve = Serve::start(&["--cluster", "3"]);
    let want = observe("node", "ioredis_cluster.js", real.nodes()[0].port(), &[]);
    let got = observe("node", "ioredis_cluster.js", serve.port, &[]);
    eprintln!("real cluster: {want}");
    assert!(want.contains("owners [ 0, 1, 2 ]") && want.contains("MOVED 12182"));
    assert_eq!(
        got, want,
        "lua serve --cluster 3 observed otherwise than a real cluster"
    );
}
