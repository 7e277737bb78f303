//! The built `lockkit` binary end to end: bench against a throwaway server, ttl and merge on
//! its output, Ctrl-C writing an interrupted report, and a bad flag failing cleanly.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockkit_test_support::RedisServer;

fn lockkit() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lockkit"));
    c.env_remove("REDIS_URL");
    c
}

fn json_in(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("a JSON report")
}

#[test]
fn bench_then_ttl_then_merge_through_the_binary() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = lockkit()
        .args([
            "bench",
            "--url",
            &server.url(),
            "--duration",
            "1s",
            "--warmup",
            "0",
        ])
        .args(["--clients", "4", "--keys", "1k", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("cycles/s") && stdout.contains("wrote"),
        "{stdout}"
    );
    // Not a terminal: no progress line.
    assert!(!String::from_utf8_lossy(&out.stderr).contains('\r'));

    let json = json_in(dir.path());
    let ttl = lockkit()
        .arg("ttl")
        .arg(&json)
        .args(["--work-p99", "100ms"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&ttl.stdout);
    assert!(ttl.status.success(), "{text}");
    assert!(text.contains("TTL") && text.contains("watchdog"), "{text}");

    let hlog = json.with_extension("cycle.hlog");
    let merged = dir.path().join("merged.json");
    let m = lockkit()
        .arg("merge")
        .arg(&hlog)
        .arg(&hlog)
        .arg("--json")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged).unwrap()).unwrap();
    assert!(v["latency_us"]["cycle"]["count"].as_u64().unwrap() > 0);
}

#[test]
fn ctrl_c_writes_the_report_marked_interrupted() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut child = lockkit()
        .args([
            "bench",
            "--url",
            &server.url(),
            "--duration",
            "60s",
            "--warmup",
            "0",
        ])
        .args(["--clients", "2", "--quiet", "--out"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "bench did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json_in(dir.path())).unwrap()).unwrap();
    assert_eq!(v["interrupted"], true);
    assert!(v["throughput"]["cycles"].as_u64().unwrap() > 0);
}

#[test]
fn bad_flag_is_one_line_and_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = lockkit()
        .args(["bench", "--ttl", "0", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("error: --ttl"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
