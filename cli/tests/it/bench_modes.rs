//! `lockkit bench` through twemproxy and on a Redis Cluster: the report names the mode and the
//! run completes without errors. Short runs; no timing assertions.

use clap::Parser;

// The options as `lockkit bench` parses them (the load generator itself takes a plain config).
use crate::bench_args;
use bench_args::BenchArgs;

/// The benchmark on the parsed options, as `lockkit bench` runs it.
async fn run_async(args: BenchArgs) -> anyhow::Result<Vec<lockkit_loadgen::bench::RunResult>> {
    lockkit_loadgen::bench::run_async(args.into()).await
}
use lockkit_test_support::{Nutcracker, RedisCluster, RedisServer};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

async fn bench(url: &str, out: &std::path::Path) -> lockkit_report::bench::Report {
    let args = Cli::parse_from([
        "bench",
        "--url",
        url,
        "--out",
        &out.display().to_string(),
        "--duration",
        "1s",
        "--warmup",
        "0",
        "--clients",
        "8",
        "--keys",
        "1k",
        "--quiet",
    ])
    .bench;
    let mut runs = run_async(args).await.unwrap();
    assert_eq!(runs.len(), 1);
    runs.pop().unwrap().report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_through_twemproxy_reports_proxy_mode() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let proxy = Nutcracker::start(&[&a, &b]);
    let dir = tempfile::tempdir().unwrap();
    let report = bench(&proxy.url(), dir.path()).await;
    assert_eq!(report.target.mode, "proxy");
    assert!(report.throughput.cycles > 0);
    assert_eq!(report.errors.total, 0, "{:?}", report.errors.by_kind);
    assert_eq!(report.safety.violations, 0);
    // The locks went to both backends through the proxy, and none were left behind.
    for s in [&a, &b] {
        assert_eq!(s.inline("DBSIZE").unwrap().trim(), ":0");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_on_a_cluster_node_url_reports_cluster_mode() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let report = bench(&cluster.nodes()[1].url(), dir.path()).await;
    assert_eq!(report.target.mode, "cluster");
    assert!(report.throughput.cycles > 0);
    assert_eq!(report.errors.total, 0, "{:?}", report.errors.by_kind);
    assert_eq!(report.safety.violations, 0);
}

fn redlock_args(urls: &[String], out: &std::path::Path) -> BenchArgs {
    let mut v = vec!["bench".to_string()];
    for u in urls {
        v.push("--url".into());
        v.push(u.clone());
    }
    for a in [
        "--duration",
        "1s",
        "--warmup",
        "0",
        "--clients",
        "4",
        "--ttl",
        "800ms",
        "--quiet",
        "--out",
    ] {
        v.push(a.into());
    }
    v.push(out.display().to_string());
    Cli::parse_from(v).bench
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_bench_runs_with_one_node_down_and_refuses_without_a_quorum() {
    let mut servers = RedisServer::start_many(3);
    // Nodes given with --url keep Redlock's delayed-restart rule: they vote once up for a TTL
    // (800 ms; INFO counts whole seconds).
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    servers[2].kill();
    let dir = tempfile::tempdir().unwrap();
    let mut runs = run_async(redlock_args(&urls, dir.path())).await.unwrap();
    let report = runs.pop().unwrap().report;
    assert_eq!(report.target.mode, "redlock");
    assert!(report.throughput.cycles > 0);
    assert_eq!(report.safety.violations, 0);

    servers[1].kill();
    let out = dir.path().join("none");
    let err = run_async(redlock_args(&urls, &out)).await.unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("only 1 of 3 Redlock nodes answer, a quorum needs 2"),
        "{text}"
    );
    assert!(text.contains(&servers[1].port().to_string()), "{text}");
    assert!(text.contains(&servers[2].port().to_string()), "{text}");
    assert!(!out.exists(), "nothing written when the run cannot start");
}
