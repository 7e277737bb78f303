//! `lockkit lua serve` as users start it: the built binary on a free port, driven by a foreign
//! client (redis-py's `Lock`) and by a part of Redis's own Tcl suite.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::repo;
use common::serve::Serve;
use lockkit_test_support::python_with_redis;

/// redis-py's Lock through the server: taken, refused to a second holder, expired by moving
/// the virtual clock (no sleeping), then released by its new holder only.
const REDIS_PY_LOCK: &str = r#"
import sys, redis
from redis.exceptions import LockNotOwnedError
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
a = r.lock("lock:orders:42", timeout=5, blocking=False)
b = r.lock("lock:orders:42", timeout=5, blocking=False)
assert a.acquire(), "first acquire"
assert not b.acquire(), "second holder refused"
assert 4900 <= r.pttl("lock:orders:42") <= 5000, r.pttl("lock:orders:42")
assert a.extend(5), "extend by its holder"
r.execute_command("LOCKKIT.CLOCK", "ADVANCE", 10001)
assert r.get("lock:orders:42") is None, "expired on the virtual clock"
assert b.acquire(), "taken after expiry"
try:
    a.release()
    raise SystemExit("the old holder released a lock it no longer owns")
except LockNotOwnedError:
    pass
b.release()
assert r.exists("lock:orders:42") == 0
print("ok")
"#;

#[test]
fn redis_py_takes_and_releases_a_lock_through_lua_serve() {
    let serve = Serve::start(&[]);
    let out = python_with_redis()
        .args(["-c", REDIS_PY_LOCK, &serve.port.to_string()])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Redis's suite runs one unit at a time here: two runs at once in this binary (the tests
/// below) lost every test of one of them.
static SUITE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn redis_tests() -> Option<PathBuf> {
    // REDIS_TESTS: where the suite is when the checkout has no ../shared beside it (a git
    // worktree elsewhere).
    let dir = std::env::var_os("REDIS_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/redis-tests"));
    if !dir.join("run-external.sh").exists() {
        println!(
            "skipped: no {} (CI keeps shared/ beside the checkout)",
            dir.display()
        );
        return None;
    }
    if Command::new("tclsh")
        .arg("/dev/null")
        .status()
        .map_or(true, |s| !s.success())
    {
        println!("skipped: tclsh is not installed (apt-get install tcl)");
        return None;
    }
    Some(dir)
}

/// Redis's own unit/functions, run against `lockkit lua serve` the way
/// `results/2026-12-03-0600-lua-serve-suite/run.sh` runs it (that script compares it with
/// redis-server): every test passes but the documented exceptions.
#[test]
fn redis_functions_unit_passes_against_lua_serve() {
    let Some(tests) = redis_tests() else { return };
    let _one = SUITE.lock().unwrap_or_else(|p| p.into_inner());
    let serve = Serve::start(&[]);
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(tests.join("run-external.sh"))
        .arg(serve.port.to_string())
        .arg(out_dir.path())
        .arg("unit/functions")
        .env(
            "SUITE_ARGS",
            "--singledb --durable --tags -needs:config-maxmemory",
        )
        .output()
        .expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let log =
        std::fs::read_to_string(out_dir.path().join("unit_functions.log")).unwrap_or_default();
    let line = text
        .lines()
        .find(|l| l.starts_with("TOTAL"))
        .unwrap_or_else(|| panic!("no TOTAL line:\n{text}\n{log}"));
    let nums: Vec<u32> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [ok, err] = nums[..] else {
        panic!("{line}")
    };
    let failed: Vec<&str> = log.lines().filter(|l| l.contains("[err]")).collect();
    assert!(err == 0 && ok >= 90, "{line}\n{failed:#?}");
}

/// Runs Redis's `unit` against `port` with `suite_args`: (tests passed, tests failed), and the
/// failures as the log names them.
fn run_unit(tests: &Path, port: u16, unit: &str, suite_args: &str) -> (u32, u32, Vec<String>) {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(tests.join("run-external.sh"))
        .arg(port.to_string())
        .arg(out_dir.path())
        .arg(unit)
        .env("SUITE_ARGS", suite_args)
        .output()
        .expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let log_name = format!("{}.log", unit.replace('/', "_"));
    let log = std::fs::read_to_string(out_dir.path().join(log_name)).unwrap_or_default();
    let line = text
        .lines()
        .find(|l| l.starts_with("TOTAL"))
        .unwrap_or_else(|| panic!("no TOTAL line:\n{text}\n{log}"));
    let nums: Vec<u32> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [ok, err] = nums[..] else {
        panic!("{line}")
    };
    let failed = without_colours(&log)
        .lines()
        .filter(|l| l.starts_with("[err]") || l.starts_with("[exception]"))
        .map(str::to_string)
        .collect();
    (ok, err, failed)
}

/// `text` without its terminal colour codes: the suite's log writes `[` ESC`[0;31;49m` `err`
/// ESC`[0m` `]`, which no search for `[err]` finds.
fn without_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ parameters m
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

/// The issue's figure: Redis's unit/scripting and unit/functions with `--singledb` and nothing
/// skipped (an exception ends a unit), against a fresh redis-server and a fresh `lua serve`
/// (`--clock wall`: the suite waits for real time to pass): the harness passes at least 95% of
/// the tests redis-server passes. `results/2026-12-06-2250-lua-serve-suite-nothing-skipped/`
/// has the run it was measured with.
#[test]
fn redis_scripting_and_functions_units_pass_95_percent_with_nothing_skipped() {
    let Some(tests) = redis_tests() else { return };
    let _one = SUITE.lock().unwrap_or_else(|p| p.into_inner());
    let (mut on_redis, mut on_serve) = (0, 0);
    let mut failures = Vec::new();
    for unit in ["unit/scripting", "unit/functions"] {
        let redis = lockkit_test_support::RedisServer::start();
        on_redis += run_unit(&tests, redis.port(), unit, "--singledb").0;
        drop(redis);
        let serve = Serve::start(&["--clock", "wall"]);
        let (ok, _, failed) = run_unit(&tests, serve.port, unit, "--singledb");
        on_serve += ok;
        failures.extend(failed);
    }
    assert!(on_redis > 300, "redis-server passed only {on_redis}");
    assert!(
        on_serve * 100 >= on_redis * 95,
        "lua serve passed {on_serve} of the {on_redis} tests redis-server passes (under 95%):\n{failures:#?}"
    );
}

/// Issue 39's list, pub/sub and MULTI units, run as the scripting units above are
/// (`--singledb`, nothing skipped, a fresh redis-server then a fresh `lua serve --clock wall` per
/// unit): the harness must keep the passes measured in
/// `results/2026-12-07-0615-lua-serve-lists-pubsub-multi-dump-oom/`: unit/type/list 235 of
/// redis-server's 235 (the floor 234 leaves out `BRPOPLPUSH does not affect WATCH while still
/// blocked`, which failed in one earlier run), unit/pubsub 29 of 30 (the floor 27 leaves out two
/// tests that publish right after an `UNSUBSCRIBE` whose reply they do not wait for, a race
/// redis-server wins and `lua serve` sometimes loses), unit/multi 38 of 40 (`SAVE` and
/// `SHUTDOWN` are queued inside `MULTI` where Redis refuses them; the floor 37 leaves one of the
/// timing-dependent script-timeout tests out).
#[test]
fn redis_list_pubsub_and_multi_units_keep_their_measured_passes_with_nothing_skipped() {
    let Some(tests) = redis_tests() else { return };
    let _one = SUITE.lock().unwrap_or_else(|p| p.into_inner());
    for (unit, floor) in [
        ("unit/type/list", 234),
        ("unit/pubsub", 27),
        ("unit/multi", 37),
    ] {
        let redis = lockkit_test_support::RedisServer::start();
        let on_redis = run_unit(&tests, redis.port(), unit, "--singledb").0;
        drop(redis);
        let serve = Serve::start(&["--clock", "wall"]);
        let (ok, _, failed) = run_unit(&tests, serve.port, unit, "--singledb");
        assert!(
            on_redis >= floor,
            "{unit}: redis-server passed only {on_redis}"
        );
        assert!(
            ok >= floor,
            "{unit}: lua serve passed {ok} (redis-server {on_redis}), under the measured {floor}:\n{failed:#?}"
        );
    }
}

#[test]
fn lua_serve_refuses_a_non_loopback_address_without_a_password() {
    let run = common::lockkit(&["lua", "serve", "--listen", "0.0.0.0:0"], None);
    assert_eq!(run.code, Some(2), "{}", run.all());
    assert!(
        run.stderr.contains("not a loopback address") && run.stderr.contains("--requirepass"),
        "{}",
        run.all()
    );
    assert!(run.stdout.is_empty(), "no port printed: {}", run.all());
}
