//! The built `lockkit` binary end to end: bench against a throwaway server, ttl and merge on
//! its output, Ctrl-C writing an interrupted report, and a bad flag failing cleanly.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::{json_in, Lockkit};

use lockkit_test_support::RedisServer;

#[test]
fn bench_then_ttl_then_merge_through_the_binary() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = Lockkit::new(&[
        "bench",
        "--url",
        &server.url(),
        "--duration",
        "1s",
        "--warmup",
        "0",
        "--clients",
        "4",
        "--keys",
        "1k",
        "--out",
    ])
    .arg(dir.path())
    .run();
    let stdout = &out.stdout;
    assert!(out.success(), "{}", out.all());
    assert!(
        stdout.contains("cycles/s") && stdout.contains("wrote"),
        "{stdout}"
    );
    // Not a terminal: no progress line.
    assert!(!out.stderr.contains('\r'));

    let json = json_in(dir.path());
    let ttl = Lockkit::new(&[
        "ttl".as_ref(),
        json.as_os_str(),
        "--work-p99".as_ref(),
        "100ms".as_ref(),
    ])
    .run();
    let text = &ttl.stdout;
    assert!(ttl.success(), "{text}");
    assert!(text.contains("TTL") && text.contains("watchdog"), "{text}");

    let hlog = json.with_extension("cycle.hlog");
    let merged = dir.path().join("merged.json");
    let m = Lockkit::new(&[
        std::ffi::OsStr::new("merge"),
        hlog.as_os_str(),
        hlog.as_os_str(),
    ])
    .arg("--json")
    .arg(&merged)
    .run();
    assert!(m.success(), "{}", m.stderr);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged).unwrap()).unwrap();
    assert!(v["latency_us"]["cycle"]["count"].as_u64().unwrap() > 0);
}

#[test]
fn ctrl_c_writes_the_report_marked_interrupted() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let child = Lockkit::new(&[
        "bench",
        "--url",
        &server.url(),
        "--duration",
        "60s",
        "--warmup",
        "0",
        "--clients",
        "2",
        "--quiet",
        "--out",
    ])
    .arg(dir.path())
    .spawn();
    std::thread::sleep(Duration::from_millis(1500));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let r = common::wait(child, "bench stopped by SIGINT");
    assert_eq!(r.code, Some(130), "{}", r.all());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json_in(dir.path())).unwrap()).unwrap();
    assert_eq!(v["interrupted"], true);
    assert!(v["throughput"]["cycles"].as_u64().unwrap() > 0);
}

#[test]
fn bad_flag_is_one_line_and_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = Lockkit::new(&["bench", "--ttl", "0", "--out"])
        .arg(dir.path())
        .run();
    // Bad input: exit code 2, as for a value clap's parsers refuse.
    assert_eq!(out.code, Some(2), "{}", out.all());
    let err = &out.stderr;
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("error: --ttl"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn violations_and_lost_locks_exit_4_unless_allowed() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // A TTL shorter than the hold time on one hot key: every release finds its lock gone.
    let unsafe_run = [
        "bench",
        "--url",
        &server.url(),
        "--key-dist",
        "hot",
        "--hold",
        "50ms",
        "--ttl",
        "20ms",
        "--duration",
        "1s",
        "--warmup",
        "0",
        "--clients",
        "4",
        "--quiet",
        "--out",
    ];
    let r = Lockkit::new(&unsafe_run).arg(dir.path()).run();
    assert_eq!(r.code, Some(4), "{}", r.all());
    assert!(
        r.stderr.contains("lost lock") && r.stderr.contains("--allow-violations"),
        "{}",
        r.all()
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json_in(dir.path())).unwrap()).unwrap();
    assert!(
        v["safety"]["lost_locks"].as_u64().unwrap() > 0,
        "the report is written all the same"
    );

    let dir = tempfile::tempdir().unwrap();
    let r = Lockkit::new(&unsafe_run)
        .arg(dir.path())
        .arg("--allow-violations")
        .run();
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stderr.contains("warning"), "{}", r.all());
}

#[test]
fn a_run_without_out_lands_in_an_ignored_folder_and_leaves_git_status_clean() {
    let server = RedisServer::start();
    let clone = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(clone.path())
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q"]);
    let r = Lockkit::new(&[
        "bench",
        "--url",
        &server.url(),
        "--duration",
        "1s",
        "--warmup",
        "0",
        "--clients",
        "2",
        "--quiet",
    ])
    .cwd(clone.path())
    .run();
    assert!(r.success(), "{}", r.all());
    let folder = clone.path().join("lockkit-results");
    json_in(&folder);
    assert!(r.stdout.contains("lockkit-results"), "{}", r.all());
    assert_eq!(git(&["status", "--porcelain", "--untracked-files=all"]), "");
}
