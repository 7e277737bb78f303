//! `lockkit bench --primitive rwlock|semaphore` against a real throwaway redis-server: the
//! safety checker applies each primitive's rule and reports the most holders it saw. Short
//! runs; no timing assertions.

use std::path::Path;

use clap::Parser;
use lockkit_loadgen::args::BenchArgs;
use lockkit_loadgen::bench::{run_async, RunResult};
use lockkit_test_support::RedisServer;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn args(url: String, out: &Path, extra: &[&str]) -> BenchArgs {
    let mut v = vec![
        "bench".to_string(),
        "--url".into(),
        url,
        "--out".into(),
        out.display().to_string(),
        "--warmup".into(),
        "0".into(),
        "--quiet".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    Cli::parse_from(v).bench
}

async fn bench(server: &RedisServer, out: &Path, extra: &[&str]) -> RunResult {
    let mut r = run_async(args(server.url(), out, extra)).await.unwrap();
    assert_eq!(r.len(), 1);
    r.pop().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_bench_admits_up_to_its_permits_and_no_more() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let r = bench(
        &server,
        dir.path(),
        &[
            "--primitive",
            "semaphore",
            "--permits",
            "3",
            "--clients",
            "30",
            "--keys",
            "10",
            "--hold",
            "2ms",
            "--duration",
            "2s",
        ],
    )
    .await;
    let s = &r.report.safety;
    assert_eq!((s.violations, s.lost_locks), (0, 0), "{s:?}");
    assert!((2..=3).contains(&s.max_holders), "{s:?}");
    assert!(r.report.throughput.cycles > 0);
    let text = std::fs::read_to_string(&r.json_path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["safety"]["max_holders"], s.max_holders);
    assert_eq!(v["config"]["primitive"], "semaphore");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rwlock_bench_lets_readers_share_and_keeps_writers_alone() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let r = bench(
        &server,
        dir.path(),
        &[
            "--primitive",
            "rwlock",
            "--read-ratio",
            "0.9",
            "--clients",
            "30",
            "--keys",
            "10",
            "--hold",
            "1ms",
            "--duration",
            "2s",
        ],
    )
    .await;
    let s = &r.report.safety;
    assert_eq!((s.violations, s.lost_locks), (0, 0), "{s:?}");
    assert!(s.max_holders >= 2, "readers never shared: {s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_bench_reports_one_holder_at_most() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let r = bench(
        &server,
        dir.path(),
        &[
            "--clients",
            "8",
            "--keys",
            "2",
            "--hold",
            "1ms",
            "--duration",
            "1s",
        ],
    )
    .await;
    assert_eq!(r.report.safety.violations, 0);
    assert_eq!(r.report.safety.max_holders, 1);
}

#[tokio::test]
async fn primitives_refuse_what_only_the_mutex_has() {
    let dir = tempfile::tempdir().unwrap();
    let url = || "redis://127.0.0.1:1".to_string();
    for (extra, says) in [
        (&["--primitive", "semaphore", "--fencing"][..], "--fencing"),
        (&["--primitive", "rwlock", "--batch", "2"][..], "--batch"),
        (
            &["--primitive", "semaphore", "--permits", "0"][..],
            "--permits",
        ),
        (
            &["--primitive", "rwlock", "--read-ratio", "1.5"][..],
            "--read-ratio",
        ),
        (
            &["--primitive", "rwlock", "--url", "redis://127.0.0.1:2"][..],
            "one server",
        ),
    ] {
        let e = run_async(args(url(), dir.path(), extra)).await.unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains(says), "{extra:?}: {msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }
}
