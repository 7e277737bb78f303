//! Python applications' libraries on `lockkit lua serve`: pottery, and Celery with the Redis
//! broker and result backend, run the same flow against a real redis-server 7.0 and against
//! the built binary and must print the same observations, with no "not emulated" error
//! (cli/tests/libraries/refusals.py also reports those the library catches and swallows). The
//! packages are installed from PyPI into a cache under the target directory when missing.

use crate::common;

use std::sync::Mutex;
use std::time::Instant;

use common::libraries::{observe, pip_install};
use common::serve::Serve;
use lockkit_test_support::RedisServer;

/// [`pip_install`], one at a time: the tests of this binary install into one directory.
fn install(packages: &[&str], module: &str) {
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    pip_install(packages, module);
}

#[test]
fn pottery_observes_the_same_on_lua_serve() {
    install(&["pottery==3.0.1", "redis==8.2.0"], "pottery");
    let redis = RedisServer::start();
    // The frozen clock: the locks' expiry comes with LOCKKIT.CLOCK ADVANCE.
    let serve = Serve::start(&[]);
    let started = Instant::now();
    let want = observe("python3", "pottery_flow.py", redis.port(), &[]);
    let redis_took = started.elapsed();
    let started = Instant::now();
    let got = observe("python3", "pottery_flow.py", serve.port, &["virtual"]);
    eprintln!(
        "redis-server: {want}\nredis-server took {redis_took:?}, lua serve {:?}",
        started.elapsed()
    );
    assert_eq!(got, want, "lua serve observed otherwise than redis-server");
}

#[test]
fn celery_observes_the_same_on_lua_serve() {
    install(&["celery==5.5.3", "kombu==5.5.4", "redis==8.2.0"], "celery");
    let redis = RedisServer::start();
    // kombu's consumers count on `BRPOP ... 1` timing out every second: the wall clock.
    let serve = Serve::start(&["--clock", "wall"]);
    let want = observe("python3", "celery_flow.py", redis.port(), &[]);
    let got = observe("python3", "celery_flow.py", serve.port, &[]);
    eprintln!("redis-server: {want}");
    assert_eq!(got, want, "lua serve observed otherwise than redis-server");
}
