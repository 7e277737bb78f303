//! `lockkit proxy` as an operator runs it for days: reports that survive a SIGKILL (snapshots),
//! a graceful drain on SIGTERM, live metrics.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use common::{redis_cli, wait, Lockkit, Run};
use lockkit_test_support::RedisServer;

const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

/// `lockkit proxy --listen 127.0.0.1:PORT --upstream URL extra... --out DIR`, listening.
struct Running {
    child: Child,
    port: u16,
}

impl Running {
    fn start(upstream: &str, extra: &[&str], out: &Path) -> Running {
        let port = lockkit_test_support::free_port().unwrap();
        let listen = format!("127.0.0.1:{port}");
        let child = Lockkit::new(&["proxy", "--listen", &listen, "--upstream", upstream])
            .args(extra)
            .arg("--out")
            .arg(out)
            .spawn();
        let up = (0..200).any(|_| {
            let ok = std::net::TcpStream::connect(&listen).is_ok();
            if !ok {
                std::thread::sleep(Duration::from_millis(25));
            }
            ok
        });
        assert!(up, "the proxy never listened");
        Running { child, port }
    }

    /// Sends `signal` (`KILL`, `TERM`) and waits for the process to end.
    fn signal(self, signal: &str) -> Run {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        wait(self.child, "lockkit proxy")
    }
}

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
    let proxy = Running::start(
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
    let proxy = Running::start(
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
