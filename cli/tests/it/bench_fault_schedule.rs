//! `lockkit bench --faults ... --fencing` on throwaway redis-servers that the bench starts
//! itself: what a lease can and cannot promise. Each run is a few seconds on a fixed `--seed`
//! (so the schedule is the same every time) and bounded by a timeout that only catches hangs;
//! the assertions count events, never time them.

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

fn args(out: &Path, extra: &[&str]) -> BenchArgs {
    let mut v = vec![
        "bench".to_string(),
        "--out".into(),
        out.display().to_string(),
        "--warmup".into(),
        "0".into(),
        "--quiet".into(),
        "--seed".into(),
        "11".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    Cli::parse_from(v).bench
}

/// Runs a bench on throwaway servers, failing the test if it does not finish within 60 s.
async fn bench(out: &Path, extra: &[&str]) -> (RunResult, serde_json::Value) {
    let run = run_async(args(out, extra));
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

/// The events of the JSON report, each checked to carry exactly the documented fields.
fn events<'a>(v: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    let all = v
        .pointer("/faults/events")
        .and_then(|e| e.as_array())
        .unwrap_or_else(|| panic!("no faults.events in {v}"));
    for e in all {
        let mut keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["duration_ms", "kind", "node", "t_s"], "{e}");
    }
    all.iter().filter(|e| e["kind"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_pause_past_the_ttl_with_the_watchdog_loses_locks_but_never_overlaps() {
    let dir = tempfile::tempdir().unwrap();
    // Holders keep 8 keys for 1.5 s under a 400 ms TTL renewed by the watchdog; the server
    // freezes for 1 s once in each 2 s, the first time within the first holds. A frozen server answers no renewal, so the watchdog of
    // each holder still inside gives its lock up when the validity ends, during the freeze, and
    // the holder stops its critical section then, before anyone else can take the key.
    let (r, v) = bench(
        dir.path(),
        &[
            "--duration",
            "3s",
            "--clients",
            "4",
            "--keys",
            "8",
            "--ttl",
            "400ms",
            "--hold",
            "1500ms",
            "--watchdog",
            "--faults",
            "server-pause=1s/2s",
        ],
    )
    .await;
    let rep = &r.report;
    let pauses = events(&v, "server-pause");
    assert!(!pauses.is_empty(), "{v}");
    assert!(pauses.iter().all(|e| e["node"].is_string()), "{v}");
    assert_eq!(rep.faults.as_ref().unwrap().seed, 11);
    assert_eq!(rep.safety.violations, 0, "{v}");
    assert!(rep.safety.lost_locks > 0, "{v}");
    assert!(rep.safety.watchdog_lost > 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_pause_past_the_ttl_lets_a_second_holder_in() {
    let dir = tempfile::tempdir().unwrap();
    // One holder at a time stops for 600 ms before its write, under a 200 ms TTL: its key
    // expires meanwhile and the next holder takes it. No lease can stop that.
    let (r, v) = bench(
        dir.path(),
        &[
            "--duration",
            "3s",
            "--clients",
            "3",
            "--key-dist",
            "hot",
            "--ttl",
            "200ms",
            "--hold",
            "20ms",
            "--faults",
            "holder-pause=600ms/1s",
        ],
    )
    .await;
    let rep = &r.report;
    let pauses = events(&v, "holder-pause");
    assert!(!pauses.is_empty(), "{v}");
    assert!(pauses.iter().all(|e| e["node"].is_null()), "{v}");
    assert!(rep.safety.violations > 0, "{v}");
    // The paused holder's release found the key gone or someone else's.
    assert!(rep.safety.lost_locks > 0, "{v}");
    assert!(
        v.pointer("/safety/fencing").is_none(),
        "only with --fencing: {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_pause_with_fencing_refuses_the_stale_writes_even_with_the_watchdog() {
    let dir = tempfile::tempdir().unwrap();
    // The same pause, with the watchdog on: a paused process renews nothing, so the lock still
    // expires and a second holder still gets in. The fencing token is what stops the paused
    // holder's write.
    let (r, v) = bench(
        dir.path(),
        &[
            "--duration",
            "3s",
            "--clients",
            "3",
            "--key-dist",
            "hot",
            "--ttl",
            "200ms",
            "--hold",
            "20ms",
            "--watchdog",
            "--fencing",
            "--faults",
            "holder-pause=600ms/1s",
        ],
    )
    .await;
    let rep = &r.report;
    assert!(!events(&v, "holder-pause").is_empty(), "{v}");
    let f = rep.safety.fencing.expect("safety.fencing with --fencing");
    // The leases overlapped; with --fencing only what the resource accepted is a violation.
    assert!(f.lease_overlaps > 0, "{v}");
    assert_eq!(rep.safety.violations, 0, "{v}");
    assert!(v.pointer("/safety/fencing/unsafe_writes").is_some(), "{v}");
    assert!(v.pointer("/safety/fencing/lease_overlaps").is_some(), "{v}");
    // Two writes per critical section, and cycles went on around the pauses.
    assert!(f.writes > rep.throughput.cycles, "{v}");
    assert!(f.refused > 0, "{v}");
    assert_eq!(f.unsafe_writes, 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_keeps_mutual_exclusion_while_one_node_is_paused() {
    let dir = tempfile::tempdir().unwrap();
    // Three throwaway nodes; in each 2 s one of them freezes for 1.5 s. The other two still
    // make a quorum.
    let (r, v) = bench(
        dir.path(),
        &[
            "--nodes",
            "3",
            "--duration",
            "3s",
            "--clients",
            "4",
            "--keys",
            "8",
            "--ttl",
            "2s",
            "--hold",
            "20ms",
            "--faults",
            "server-pause=1500ms/2s",
        ],
    )
    .await;
    let rep = &r.report;
    assert_eq!(rep.target.mode, "redlock");
    let pauses = events(&v, "server-pause");
    assert!(!pauses.is_empty(), "{v}");
    for e in &pauses {
        // One node per event, and one of this run's.
        let node = e["node"].as_str().unwrap();
        assert_eq!(rep.target.url.matches(node).count(), 1, "{node} in {v}");
    }
    assert_eq!(rep.safety.violations, 0, "{v}");
    assert!(rep.throughput.cycles > 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_and_killed_connections_are_logged_and_survived() {
    let dir = tempfile::tempdir().unwrap();
    let (r, v) = bench(
        dir.path(),
        &[
            "--duration",
            "3s",
            "--clients",
            "4",
            "--keys",
            "100",
            "--hold",
            "2ms",
            "--faults",
            "restart/1s,kill-connections/1s",
        ],
    )
    .await;
    let rep = &r.report;
    assert!(!events(&v, "restart").is_empty(), "{v}");
    assert!(!events(&v, "kill-connections").is_empty(), "{v}");
    assert_eq!(v["faults"]["schedule"], "restart/1s,kill-connections/1s");
    // Calls caught by a fault are counted by kind; the bench went on and stayed safe.
    assert_eq!(
        rep.errors.by_kind.values().sum::<u64>(),
        rep.errors.total,
        "{v}"
    );
    assert!(
        rep.errors.recovered.noscript.unwrap() > 0,
        "restarted empty: {v}"
    );
    assert!(rep.throughput.cycles > 0, "{v}");
    assert_eq!(rep.safety.violations, 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_lockkit_cannot_carry_out_are_refused_before_anything_is_written() {
    let server = RedisServer::start();
    let root = tempfile::tempdir().unwrap();
    for (extra, says) in [
        (
            vec!["--url", &server.url(), "--faults", "server-pause=300ms/2s"],
            "server-pause",
        ),
        (
            vec![
                "--url",
                &server.url(),
                "--faults",
                "kill-connections/1s,restart/5s",
            ],
            "restart",
        ),
        (
            vec!["--nodes", "3", "--fencing"],
            "Redlock cannot issue fencing tokens",
        ),
    ] {
        let out = root.path().join("out");
        let e = run_async(args(&out, &extra)).await.unwrap_err();
        assert!(format!("{e:#}").contains(says), "{extra:?}: {e:#}");
        assert!(!out.exists(), "{extra:?} wrote {}", out.display());
    }
}
