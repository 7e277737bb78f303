//! Real client libraries on `lockkit lua serve`: the same flow against a real redis-server
//! 7.0 and against the built binary must print the same observations, with no "not
//! emulated" error. The libraries are installed from PyPI and npm into a cache under the
//! target directory when missing.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use common::serve::Serve;
use lockkit_test_support::{RedisCluster, RedisServer};

/// Where the test's Python packages are installed (`pip install --target`).
fn pydeps() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pydeps")
}

/// Installs `packages` (the first importable as `module`) into [`pydeps`] unless it is there.
fn pip_install(packages: &[&str], module: &str) {
    let dir = pydeps();
    if dir.join(module).exists() {
        return;
    }
    let ok = [&[][..], &["--break-system-packages"][..]]
        .iter()
        .any(|extra| {
            Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--target"])
                .arg(&dir)
                .args(packages)
                .args(*extra)
                .status()
                .is_ok_and(|s| s.success())
        });
    assert!(
        ok,
        "pip install --target {} {packages:?} failed",
        dir.display()
    );
}

/// Where the test's npm packages are installed (`npm install --prefix`).
fn npm_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm")
}

/// Installs `packages` (`name@version`) into [`npm_dir`] unless each is there.
fn npm_install(packages: &[&str]) {
    // Two tests of this binary installing into one directory at once would collide.
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = npm_dir();
    let missing = packages.iter().any(|p| {
        let name = p.rsplit_once('@').map_or(*p, |(n, _)| n);
        !dir.join("node_modules").join(name).exists()
    });
    if !missing {
        return;
    }
    std::fs::create_dir_all(&dir).expect("the npm directory is created");
    let ok = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(&dir)
        .args(packages)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "npm install --prefix {} {packages:?} failed",
        dir.display()
    );
}

/// Runs `script` (in cli/tests/libraries) with `program` (`python3` or `node`, finding the
/// packages installed above) against the server on `port`, `args` after the port: what it
/// printed.
fn observe(program: &str, script: &str, port: u16, args: &[&str]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/libraries")
        .join(script);
    let (path_var, deps) = if program == "node" {
        ("NODE_PATH", npm_dir().join("node_modules"))
    } else {
        ("PYTHONPATH", pydeps())
    };
    let out = Command::new("timeout")
        .arg("60")
        .arg(program)
        .arg(&path)
        .arg(port.to_string())
        .args(args)
        .env(path_var, deps)
        .output()
        .expect("the library's interpreter runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && !stderr.contains("not emulated"),
        "{script} against port {port} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

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
