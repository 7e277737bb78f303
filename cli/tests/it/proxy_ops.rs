//! `lockkit proxy` as an operator runs it for days: reports that survive a SIGKILL (snapshots),
//! a graceful drain on SIGTERM, live metrics.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{redis_cli, reply_line, scrape, series, ProxyRun, RELEASE};
use lockkit_test_support::RedisServer;

/// The `observe-*.json` files in `dir`.
fn observe_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("observe-") && name.ends_with(".json")
        })
        .collect();
    v.sort();
    v
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn sigkill_mid_run_leaves_a_snapshot_with_the_observed_locks() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &[
            "--quiet",
            "--plugin",
            "observe",
            "--snapshot-every",
            "200ms",
        ],
        dir.path(),
    );
    for i in 0..3 {
        let key = format!("order:{i}:lock");
        assert_eq!(
            redis_cli(proxy.port, &["SET", &key, "t", "NX", "PX", "3000"]),
            "OK\n"
        );
        assert_eq!(
            redis_cli(proxy.port, &["EVAL", RELEASE, "1", &key, "t"]),
            "1\n"
        );
    }
    // Wait for a snapshot that holds all three (bounded: 5 s).
    for _ in 0..100 {
        let files = observe_files(dir.path());
        if files
            .first()
            .is_some_and(|f| read_json(f)["locks"][0]["released"] == 3)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = proxy.signal("KILL");
    assert_eq!(run.code, None, "killed by the signal: {}", run.all());
    let files = observe_files(dir.path());
    assert_eq!(files.len(), 1, "one snapshot, replaced in place: {files:?}");
    let report = read_json(&files[0]);
    assert_eq!(report["schema"], "lockkit.observe/1");
    assert_eq!(report["locks"][0]["pattern"], "order:{id}:lock", "{report}");
    assert_eq!(report["locks"][0]["acquired"], 3, "{report}");
    assert_eq!(report["locks"][0]["released"], 3, "{report}");
    assert!(report["commands"]["SET"].as_u64().unwrap() >= 3, "{report}");
}

#[test]
fn snapshots_and_the_final_report_share_one_file() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &[
            "--quiet",
            "--plugin",
            "observe",
            "--snapshot-every",
            "100ms",
        ],
        dir.path(),
    );
    assert_eq!(
        redis_cli(proxy.port, &["SET", "job:1", "t", "NX", "PX", "3000"]),
        "OK\n"
    );
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(observe_files(dir.path()).len(), 1);
    let run = proxy.signal("TERM");
    assert!(run.success(), "{}", run.all());
    let files = observe_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        run.stdout
            .contains(&*files[0].file_name().unwrap().to_string_lossy()),
        "{}",
        run.all()
    );
    assert_eq!(read_json(&files[0])["locks"][0]["acquired"], 1);
    // No temporary file is left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn sigterm_lets_the_replies_in_flight_arrive_then_exits_0() {
    use std::io::Write;
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--plugin", "observe"],
        dir.path(),
    );
    let connect = || {
        let c = std::net::TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c
    };
    // `a` on a connection of its own (DEBUG), `b` on the shared one, queued behind a's sleep.
    let (mut a, mut b) = (connect(), connect());
    a.write_all(b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$1\r\n1\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    b.write_all(
        b"*6\r\n$3\r\nSET\r\n$6\r\nlock:1\r\n$1\r\nt\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    proxy.send("TERM");
    assert_eq!(reply_line(&mut a), "+OK", "DEBUG SLEEP's reply");
    assert_eq!(reply_line(&mut b), "+OK", "the SET NX that took the lock");
    let run = proxy.wait();
    assert!(run.success(), "{}", run.all());
    let files = observe_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(read_json(&files[0])["locks"][0]["acquired"], 1);
}

#[test]
fn metrics_endpoint_serves_the_proxy_families_and_the_histogram_moves() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mport = lockkit_test_support::free_port().unwrap();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = ProxyRun::start(
        &server.url(),
        &[
            "--quiet",
            "--plugin",
            "observe:top=3",
            "--metrics-listen",
            &listen,
            "--metrics-keys",
        ],
        dir.path(),
    );
    assert_eq!(
        redis_cli(
            proxy.port,
            &["SET", "order:1:lock", "t", "NX", "PX", "3000"]
        ),
        "OK\n"
    );
    assert_eq!(
        redis_cli(proxy.port, &["EVAL", RELEASE, "1", "order:1:lock", "t"]),
        "1\n"
    );
    let first = scrape(mport);
    let set = |s: &str| {
        series(
            s,
            "lockkit_proxy_command_duration_seconds_count",
            "command=\"SET\"",
        )
    };
    let before = set(&first).unwrap_or_else(|| panic!("{first}"));
    assert!(before >= 1.0, "{first}");
    assert!(first.contains("lockkit_proxy_command_duration_seconds_bucket{command=\"SET\",le=\""));
    assert!(series(&first, "lockkit_proxy_commands_total", "command=\"EVAL\"").unwrap() >= 1.0);
    assert!(series(&first, "lockkit_proxy_connections_accepted_total", "").unwrap() >= 2.0);
    assert!(
        first.contains("# TYPE lockkit_proxy_connections_open gauge"),
        "{first}"
    );
    for kind in ["connect", "timeout", "lost"] {
        let label = format!("kind=\"{kind}\"");
        let errors = series(&first, "lockkit_proxy_upstream_errors_total", &label);
        assert_eq!(errors, Some(0.0), "{first}");
    }
    assert_eq!(
        series(&first, "lockkit_proxy_upstream_reconnects_total", ""),
        Some(0.0)
    );
    for i in 0..5 {
        redis_cli(proxy.port, &["SET", &format!("k{i}"), "v"]);
    }
    let second = scrape(mport);
    assert_eq!(set(&second), Some(before + 5.0), "{second}");
    // observe's figures arrive with its next tick (about once a second).
    let pattern = "pattern=\"order:{id}:lock\"";
    let mut seen = String::new();
    for _ in 0..50 {
        seen = scrape(mport);
        if series(&seen, "lockkit_proxy_lock_acquired_total", pattern).is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        series(&seen, "lockkit_proxy_lock_acquired_total", pattern),
        Some(1.0),
        "{seen}"
    );
    assert_eq!(
        series(&seen, "lockkit_proxy_lock_contended_total", pattern),
        Some(0.0),
        "{seen}"
    );
    assert_eq!(
        series(&seen, "lockkit_proxy_lock_hold_seconds_count", pattern),
        Some(1.0),
        "{seen}"
    );
    assert!(series(&seen, "lockkit_proxy_lock_recommended_ttl_seconds", pattern).unwrap() > 0.0);
    // observe:top=3: the window's hottest key (SET and EVAL on it) and a big value.
    let key = "key=\"order:1:lock\"";
    assert_eq!(
        series(&seen, "lockkit_proxy_hot_key_commands", key),
        Some(2.0),
        "{seen}"
    );
    assert!(series(&seen, "lockkit_proxy_big_value_bytes", "key=\"").is_some());
    let run = proxy.signal("TERM");
    assert!(run.success(), "{}", run.all());
}
