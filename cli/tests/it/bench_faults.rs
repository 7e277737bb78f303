//! `lockkit bench --faults delay=...,drop=...,blackhole=...`: the load generator's network
//! faults are the `faults` plugin in a proxy started in-process ([`ProxyFaults`]), in front of
//! real redis-servers. Short runs on a fixed seed, each bounded by a timeout that only catches
//! hangs; the assertions count errors, commands and events, never time them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use lockkit_loadgen::bench::{run_async, run_async_with, RunResult};
use lockkit_loadgen::config::BenchConfig;
use lockkit_test_support::RedisServer;

// The wiring under test is the binary's own module (the cli crate has no library), and the
// options as the binary parses them.
use crate::bench_args;
use crate::bench_faults_src::ProxyFaults;
use bench_args::BenchArgs;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn args(out: &Path, urls: &[String], extra: &[&str]) -> BenchConfig {
    let mut v = vec![
        "bench".to_string(),
        "--out".into(),
        out.display().to_string(),
        "--warmup".into(),
        "0".into(),
        "--quiet".into(),
        "--seed".into(),
        "5".into(),
    ];
    if !extra.contains(&"--clients") {
        v.extend(["--clients".into(), "2".into()]);
    }
    for u in urls {
        v.push("--url".into());
        v.push(u.clone());
    }
    v.extend(extra.iter().map(|s| s.to_string()));
    Cli::parse_from(v).bench.into()
}

/// Runs a bench through the proxy's faults, failing the test if it does not end within 60 s.
async fn bench(out: &Path, urls: &[String], extra: &[&str]) -> (RunResult, serde_json::Value) {
    let run = run_async_with(args(out, urls, extra), Some(Arc::new(ProxyFaults)));
    let mut r = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the bench hung")
        .expect("the bench fails only on set-up errors");
    assert_eq!(r.len(), 1);
    let r = r.pop().unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&r.json_path).unwrap()).unwrap();
    (r, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_command_counts_errors_and_the_cuts() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (r, v) = bench(
        dir.path(),
        &[server.url()],
        &["--duration", "2s", "--faults", "drop=100%"],
    )
    .await;
    let faults = r.report.faults.as_ref().expect("a faults section");
    assert_eq!(faults.schedule, "drop=100%");
    assert_eq!(faults.seed, 5);
    let n = faults.network.expect("the network faults' counts");
    assert!(n.commands > 0, "{v}");
    assert_eq!(
        n.dropped_before_send + n.dropped_reply_lost,
        n.commands,
        "{v}"
    );
    assert!(n.dropped_before_send > 0 && n.dropped_reply_lost > 0, "{v}");
    assert!(r.report.errors.total > 0, "{v}");
    assert_eq!(r.report.safety.violations, 0, "{v}");
    assert_eq!(
        v.pointer("/faults/network/commands"),
        Some(&n.commands.into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_whose_reply_was_dropped_are_not_lost_locks() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // A one-hour TTL: no lock can expire in this run, so a lost lock could only be a re-sent
    // release that found its own first compare-and-delete's work done.
    let (r, v) = bench(
        dir.path(),
        &[server.url()],
        &["--duration", "2s", "--ttl", "1h", "--faults", "drop=5%"],
    )
    .await;
    let n = r
        .report
        .faults
        .as_ref()
        .and_then(|f| f.network)
        .expect("the network faults' counts");
    assert!(n.dropped_reply_lost > 0, "{v}");
    assert!(r.report.throughput.cycles_per_s > 0.0, "{v}");
    assert_eq!(r.report.safety.lost_locks, 0, "{v}");
    assert_eq!(r.report.safety.violations, 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_windows_are_fault_events_of_each_node() {
    let dir = tempfile::tempdir().unwrap();
    // Redlock over two throwaway servers (servers given with --url and started just now would be
    // refused by the delayed-restart rule for a TTL). One window of 100 ms in each 400 ms period
    // on each node, for 2 s of measuring: the first four periods' windows end inside the run.
    let (r, v) = bench(
        dir.path(),
        &[],
        &[
            "--nodes",
            "2",
            "--duration",
            "2s",
            "--faults",
            "blackhole=100ms/400ms",
        ],
    )
    .await;
    let nodes: Vec<String> = r
        .report
        .target
        .url
        .split(',')
        .map(|u| u.trim_start_matches("redis://").to_string())
        .collect();
    assert_eq!(nodes.len(), 2, "{v}");
    let faults = r.report.faults.as_ref().expect("a faults section");
    assert_eq!(faults.schedule, "blackhole=100ms/400ms");
    for node in &nodes {
        let windows: Vec<_> = faults
            .events
            .iter()
            .filter(|e| e.node.as_deref() == Some(node))
            .collect();
        assert!(windows.len() >= 4, "{node}: {v}");
        for e in &windows {
            assert_eq!(e.kind, "blackhole", "{v}");
            assert!(e.duration_ms <= 100, "{v}");
        }
    }
    assert_eq!(
        faults.events.len(),
        v["faults"]["events"].as_array().unwrap().len()
    );
    let n = faults.network.expect("the network faults' counts");
    assert!(n.blackholed > 0 && n.commands > n.blackholed, "{v}");
    assert_eq!(n.dropped_before_send + n.dropped_reply_lost + n.delayed, 0);
    // The HTML page marks them on its timeline and lists them.
    let html = std::fs::read_to_string(r.json_path.with_extension("html")).unwrap();
    assert!(
        html.matches("blackhole").count() >= 8,
        "the page names each window"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mixes_with_the_scheduled_faults_and_is_listed() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (r, v) = bench(
        dir.path(),
        &[server.url()],
        &[
            "--duration",
            "2s",
            "--faults",
            "delay=2ms~1ms,kill-connections/1s",
        ],
    )
    .await;
    let faults = r.report.faults.as_ref().expect("a faults section");
    assert_eq!(faults.schedule, "kill-connections/1s,delay=2ms~1ms");
    let n = faults.network.expect("the network faults' counts");
    assert!(n.commands > 0, "{v}");
    assert_eq!(n.delayed, n.commands, "every command is delayed: {v}");
    // CLIENT KILL goes to the server itself and cuts the proxy's upstream connections.
    assert!(
        faults.events.iter().any(|e| e.kind == "kill-connections"),
        "{v}"
    );
    assert!(r.report.throughput.cycles > 0, "{v}");
    assert_eq!(r.report.safety.violations, 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_faults_without_the_proxy_are_refused_before_anything_is_written() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let e = run_async(args(&out, &[server.url()], &["--faults", "delay=5ms"]))
        .await
        .expect_err("no proxy to carry them out");
    assert!(format!("{e:#}").contains("need lockkit proxy"), "{e:#}");
    assert!(!out.exists(), "no folder left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_faults_on_a_cluster_are_refused_before_anything_is_written() {
    let cluster = lockkit_test_support::RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let run = run_async_with(
        args(&out, &[cluster.url()], &["--faults", "blackhole=1s/2s"]),
        Some(Arc::new(ProxyFaults)),
    );
    let e = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("no hang")
        .expect_err("the proxy does not proxy Redis Cluster");
    assert!(
        format!("{e:#}").contains("does not proxy Redis Cluster"),
        "{e:#}"
    );
    assert_eq!(
        lockkit_report::exit::code(&e),
        lockkit_report::exit::BAD_INPUT
    );
    assert!(!out.exists(), "no folder left behind");
}

/// The done-when under faults: a paused holder and dropped replies at once, with
/// fencing on, for a semaphore and a read-write lock: 0 violations (only the accesses the
/// fenced resource accepted count), while the pauses did let holders overlap at the lease
/// level and the dropped replies did cut commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_and_dropped_replies_with_fencing_leave_no_violation_for_the_primitives() {
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
            "--duration",
            "4s",
            "--key-dist",
            "hot",
            "--ttl",
            "200ms",
            "--hold",
            "20ms",
            "--retry",
            "--fencing",
            "--faults",
            "drop=2%,holder-pause=600ms/1s",
        ]);
        let (r, v) = bench(dir.path(), &[server.url()], &extra).await;
        let s = &r.report.safety;
        let f = s.fencing.expect("safety.fencing");
        let n = r.report.faults.as_ref().and_then(|f| f.network);
        let n = n.expect("the network faults' counts");
        assert!(n.dropped_before_send + n.dropped_reply_lost > 0, "{v}");
        assert!(f.lease_overlaps > 0, "{primitive:?}: {v}");
        assert!(f.refused > 0, "{primitive:?}: {v}");
        assert_eq!(
            (s.violations, f.unsafe_writes),
            (0, 0),
            "{primitive:?}: {v}"
        );
        assert!(r.report.throughput.cycles > 0, "{v}");
    }
}
