//! Real client libraries on `lockkit lua serve`: the same flow against a real redis-server
//! 7.0 and against the built binary must print the same observations, with no "not
//! emulated" error. The libraries are installed from PyPI into a cache under the target
//! directory when missing.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::serve::Serve;
use lockkit_test_support::RedisServer;

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

/// Runs `script` (in cli/tests/libraries) against the server on `port`: what it printed.
fn run_script(script: &str, port: u16) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/libraries")
        .join(script);
    let out = Command::new("timeout")
        .arg("60")
        .arg("python3")
        .arg(&path)
        .arg(port.to_string())
        .env("PYTHONPATH", pydeps())
        .output()
        .expect("python3 runs");
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
    let want = run_script("python_redis_lock.py", redis.port());
    let got = run_script("python_redis_lock.py", serve.port);
    eprintln!("redis-server: {want}");
    assert_eq!(got, want, "lua serve observed otherwise than redis-server");
}
