//! Failover behind the proxy: a real cluster of 3 masters with a replica each
//! (`cluster-node-timeout` 2 s), a client writing through the proxy all along. A manual
//! `CLUSTER FAILOVER` and a killed master are each measured: how long the client saw errors,
//! and the longest time it went without a successful write. Bounds are generous (the machine
//! is shared); the figures are printed (`FAILOVER ...` lines) for `results/`.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use lockkit_test_support::{RedisCluster, RedisServer};

fn sync_conn(node: &RedisServer) -> redis::Connection {
    let c = redis::Client::open(node.url()).unwrap();
    c.get_connection_with_timeout(Duration::from_secs(2))
        .unwrap()
}

/// `role:master`, or the port of the master it replicates.
fn replica_of(node: &RedisServer) -> Option<u16> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut sync_conn(node))
        .unwrap();
    if info.contains("role:master") {
        return None;
    }
    info.lines()
        .find_map(|l| l.strip_prefix("master_port:"))
        .and_then(|p| p.trim().parse().ok())
}

/// The index of the master that serves `key` now (asked of the node itself).
fn master_of(cluster: &RedisCluster, key: &str) -> usize {
    for (i, n) in cluster.nodes().iter().enumerate() {
        if replica_of(n).is_some() {
            continue;
        }
        let r: redis::RedisResult<Option<String>> =
            redis::cmd("GET").arg(key).query(&mut sync_conn(n));
        if r.is_ok() {
            return i;
        }
    }
    panic!("no master serves {key}");
}

/// One write's outcome, seconds since the writer started.
type Log = Arc<Mutex<Vec<(f64, bool)>>>;

/// Writes `{f}:i` through the proxy every 5 ms until `stop`.
fn writer(
    port: u16,
    stop: Arc<AtomicBool>,
    log: Log,
    start: Instant,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(120) {
            let r: redis::RedisResult<()> = redis::cmd("SET")
                .arg(format!("{{f}}:{i}"))
                .arg(i)
                .query_async(&mut c)
                .await;
            log.lock()
                .unwrap()
                .push((start.elapsed().as_secs_f64(), r.is_ok()));
            i += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// Of the writes after `from` (seconds): the error window (first to last error, 0 without
/// errors), the errors, and the longest time between two successful writes.
fn measure(log: &Log, from: f64) -> (f64, usize, f64) {
    let log = log.lock().unwrap();
    let after: Vec<(f64, bool)> = log.iter().copied().filter(|(t, _)| *t >= from).collect();
    let errors: Vec<f64> = after
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(t, _)| *t)
        .collect();
    let window = match (errors.first(), errors.last()) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    };
    let mut last_ok = from;
    let mut stall: f64 = 0.0;
    for (t, ok) in &after {
        if *ok {
            stall = stall.max(t - last_ok);
            last_ok = *t;
        }
    }
    (window, errors.len(), stall)
}

/// Waits (bounded) until `f` holds.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_failover_and_a_killed_master_cost_clients_seconds() {
    let mut cluster = RedisCluster::start_with_replicas(3, 1);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let port = proxy.addr().port();
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::default();
    let w = writer(port, stop.clone(), log.clone(), start);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 1. Manual failover: the replica of {f}'s master takes over.
    let (old, new) = tokio::task::block_in_place(|| {
        let old = master_of(&cluster, "{f}:probe");
        let old_port = cluster.nodes()[old].port();
        let new = (0..cluster.nodes().len())
            .find(|&i| replica_of(&cluster.nodes()[i]) == Some(old_port))
            .expect("a replica of the master");
        (old, new)
    });
    tokio::task::block_in_place(|| {
        wait_for("the replica in sync", Duration::from_secs(20), || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut sync_conn(&cluster.nodes()[new]))
                .unwrap();
            info.contains("master_link_status:up")
        });
    });
    let t1 = start.elapsed().as_secs_f64();
    let before: Vec<bool> = (log.lock().unwrap().iter())
        .filter(|(t, _)| *t < t1)
        .map(|(_, ok)| *ok)
        .collect();
    assert!(
        !before.is_empty() && before.iter().all(|ok| *ok),
        "writes before any failover: {} of {} failed",
        before.iter().filter(|ok| !**ok).count(),
        before.len()
    );
    tokio::task::block_in_place(|| {
        let _: String = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut sync_conn(&cluster.nodes()[new]))
            .unwrap();
        wait_for("the replica promoted", Duration::from_secs(15), || {
            replica_of(&cluster.nodes()[new]).is_none()
        });
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (window1, errors1, stall1) = measure(&log, t1);
    let tail1: Vec<bool> = (log.lock().unwrap().iter().rev().take(20))
        .map(|(_, ok)| *ok)
        .collect();
    assert!(
        tail1.iter().all(|ok| *ok),
        "writes succeed after the manual failover: {window1:.2} s of errors, {errors1} errors, last 20 {tail1:?}"
    );

    // 2. The master (the promoted replica) killed: its replica (the old master) takes over
    // after the node timeout.
    let t2 = start.elapsed().as_secs_f64();
    cluster.nodes_mut()[new].kill();
    tokio::task::block_in_place(|| {
        wait_for(
            "the old master promoted again",
            Duration::from_secs(30),
            || replica_of(&cluster.nodes()[old]).is_none(),
        );
    });
    // Writes succeed again through the proxy.
    let t = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let ok_after = log.lock().unwrap().iter().rev().take(5).all(|(_, ok)| *ok);
        if ok_after || t.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    w.await.unwrap();
    let (window2, errors2, stall2) = measure(&log, t2);
    let total = log.lock().unwrap().len();
    let tail_ok = log.lock().unwrap().iter().rev().take(20).all(|(_, ok)| *ok);
    eprintln!(
        "FAILOVER manual: error window {window1:.2} s, {errors1} errors, longest without a successful write {stall1:.2} s"
    );
    eprintln!(
        "FAILOVER killed master: error window {window2:.2} s, {errors2} errors, longest without a successful write {stall2:.2} s"
    );
    eprintln!("FAILOVER writes: {total}");
    assert!(tail_ok, "writes succeed after the failovers");
    // Generous bounds: the figures are 3 s and 10 s.
    assert!(
        window1 <= 6.0 && stall1 <= 8.0,
        "manual failover: {window1} s / {stall1} s"
    );
    assert!(
        window2 <= 20.0 && stall2 <= 25.0,
        "killed master: {window2} s / {stall2} s"
    );
    proxy.stop().await;
}
