//! `lockkit bench --primitive rwlock|semaphore` against a real throwaway redis-server: the
//! safety checker applies each primitive's rule and reports the most holders it saw. Short
//! runs; no timing assertions.

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use lockkit_loadgen::bench::RunResult;

// The options as `lockkit bench` parses them (the load generator itself takes a plain config).
use crate::bench_args;
use bench_args::BenchArgs;

/// The benchmark on the parsed options, as `lockkit bench` runs it.
async fn run_async(args: BenchArgs) -> anyhow::Result<Vec<lockkit_loadgen::bench::RunResult>> {
    lockkit_loadgen::bench::run_async(args.into()).await
}
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

/// `lockkit ttl` on the report a run wrote: a TTL sized from its hold and latencies.
fn ttl_of(r: &RunResult) -> lockkit_report::ttl::TtlRecommendation {
    use lockkit_report::ttl_advice::{recommendation, TtlOptions, WorkQuantile};
    let options = TtlOptions {
        result: Some(r.json_path.clone()),
        observed: None,
        work_p99: None,
        work_timings: None,
        quantile: WorkQuantile::P99,
        pause_budget: std::time::Duration::from_millis(50),
        safety_factor: 2.0,
        json: false,
    };
    recommendation(&options).unwrap()
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
    // `lockkit ttl` sizes a permit's lease from the run's hold (2 ms) and latencies.
    let t = ttl_of(&r);
    assert!(t.ttl > Duration::from_millis(4), "{t:?}");
    assert!(t.basis.contains("hold 2.000 ms"), "{}", t.basis);
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
    let t = ttl_of(&r);
    assert!(t.basis.contains("hold 1.000 ms"), "{}", t.basis);
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
        (
            &["--primitive", "semaphore", "--wait", "fair"][..],
            "--wait fair",
        ),
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

/// A holder paused past its lease (`--faults holder-pause`) lets the next holder in, for a
/// semaphore and a read-write lock as for a mutex; with `--fencing` the paused holder's late
/// write carries a stale token (its slot's, for a semaphore) and the resource refuses it, so
/// the checker counts no violation: only the writes the resource accepted count. The overlaps
/// the leases let happen are still reported (`safety.fencing.lease_overlaps`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_with_fencing_has_its_stale_write_refused_for_every_primitive() {
    for primitive in [
        &[
            "--primitive",
            "semaphore",
            "--permits",
            "3",
            "--clients",
            "6",
        ][..],
        &[
            "--primitive",
            "rwlock",
            "--read-ratio",
            "0.5",
            "--clients",
            "4",
        ][..],
    ] {
        let server = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        let mut extra = primitive.to_vec();
        extra.extend([
            "--key-dist",
            "hot",
            "--ttl",
            "200ms",
            "--hold",
            "20ms",
            "--fencing",
            "--faults",
            "holder-pause=600ms/1s",
            "--seed",
            "7",
            "--duration",
            "4s",
        ]);
        let r = bench(&server, dir.path(), &extra).await;
        let s = &r.report.safety;
        let f = s.fencing.expect("safety.fencing with --fencing");
        let pauses = r.report.faults.as_ref().map_or(0, |f| f.events.len());
        assert!(pauses > 0, "{primitive:?}: no holder pause ran: {s:?}");
        assert_eq!(s.violations, 0, "{primitive:?}: {s:?}");
        assert_eq!(f.unsafe_writes, 0, "{primitive:?}: {s:?}");
        assert!(
            f.refused > 0,
            "{primitive:?}: no stale write refused: {s:?}"
        );
        assert!(
            f.lease_overlaps > 0,
            "{primitive:?}: the pauses let nobody in: {s:?}"
        );
    }
}
