//! `lockkit bench --url redis://<proxy>` with the proxy in front of a real 3-master Redis
//! Cluster: the lock client sees one standalone server, and the run keeps every lock safe; and
//! the proxy as production runs it (client auth, `/metrics`, the observe plugin, the drain on
//! SIGTERM) in front of the same kind of cluster.

use crate::common;

use std::time::Duration;

use common::{json_in, redis_cli, scrape, series, Lockkit, ProxyRun, RELEASE};
use lockkit_proxy::{Proxy, Upstream};
use lockkit_test_support::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_through_the_proxy_in_front_of_a_cluster_is_safe() {
    let cluster = RedisCluster::start(3);
    let proxy = Proxy::start(
        "127.0.0.1:0",
        Upstream::from_url(&cluster.url()).unwrap(),
        vec![],
    )
    .await
    .unwrap();
    let url = format!("redis://{}", proxy.addr());
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || {
            Lockkit::new(&[
                "bench",
                "--url",
                &url,
                "--duration",
                "3s",
                "--warmup",
                "0",
                "--clients",
                "8",
                "--keys",
                "1k",
                "--quiet",
                "--out",
            ])
            .arg(&dir)
            .run()
        }
    })
    .await
    .unwrap();
    assert!(out.success(), "{}", out.all());
    // The lock client stayed on the proxy (it did not find a cluster behind it and go to the
    // nodes directly): the proxy carried its traffic.
    let carried: u64 = proxy.shared().command_counts().values().sum();
    assert!(
        carried > 1000,
        "the proxy carried {carried} commands: {:?}",
        proxy.shared().command_counts()
    );
    assert!(proxy.shared().is_cluster());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json_in(dir.path())).unwrap()).unwrap();
    assert_eq!(
        v.pointer("/safety/violations"),
        Some(&0.into()),
        "{}",
        out.all()
    );
    let cycles = v
        .pointer("/throughput/cycles")
        .and_then(serde_json::Value::as_u64);
    eprintln!(
        "through the proxy to 3 masters: {:?} cycles, {:?} cycles/s, errors {}",
        cycles,
        v.pointer("/throughput/cycles_per_s"),
        v.pointer("/errors/total").cloned().unwrap_or_default()
    );
    // The lock traffic reached every master.
    for node in cluster.nodes() {
        let stats = node.inline("INFO stats").unwrap();
        let n: u64 = (stats.lines())
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        assert!(n > 100, "master {}: {n} commands", node.port());
    }
    proxy.stop().await;
}

#[test]
fn auth_metrics_observe_and_drain_work_in_front_of_a_cluster() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let mport = lockkit_test_support::free_port().unwrap();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = ProxyRun::start(
        &cluster.url(),
        &[
            "--quiet",
            "--requirepass",
            "s3cret",
            "--plugin",
            "observe",
            "--metrics-listen",
            &listen,
        ],
        dir.path(),
    );
    // Client auth: nothing reaches a node before AUTH.
    let refused = redis_cli(proxy.port, &["SET", "order:0:lock", "t"]);
    assert!(refused.contains("NOAUTH"), "{refused}");
    let authed = |args: &[&str]| {
        let mut all = vec!["-a", "s3cret", "--no-auth-warning"];
        all.extend_from_slice(args);
        redis_cli(proxy.port, &all)
    };
    // 30 locks taken and released through the proxy, their keys on every master (ids 0, 10,
    // 20, ...: the slots of ids 0 to 29 are all below 8,000, CRC16 being linear).
    let n = 30;
    for i in 0..n {
        let key = format!("order:{}:lock", i * 10);
        assert_eq!(authed(&["SET", &key, "t", "NX", "PX", "5000"]), "OK\n");
        assert_eq!(authed(&["EVAL", RELEASE, "1", &key, "t"]), "1\n");
    }
    for node in cluster.nodes() {
        let stats = redis_cli(node.port(), &["INFO", "commandstats"]);
        assert!(
            stats.contains("cmdstat_set:calls="),
            "master {}: {stats}",
            node.port()
        );
    }
    // The metrics count them; observe's figures arrive with its next tick (about once a second).
    let pattern = "pattern=\"order:{id}:lock\"";
    let mut seen = String::new();
    for _ in 0..50 {
        seen = scrape(mport);
        if series(&seen, "lockkit_proxy_lock_acquired_total", pattern) == Some(f64::from(n)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let sets = series(&seen, "lockkit_proxy_commands_total", "command=\"SET\"");
    assert!(sets.is_some_and(|v| v >= f64::from(n)), "{seen}");
    assert_eq!(
        series(&seen, "lockkit_proxy_lock_acquired_total", pattern),
        Some(f64::from(n)),
        "{seen}"
    );
    assert_eq!(
        series(&seen, "lockkit_proxy_lock_hold_seconds_count", pattern),
        Some(f64::from(n)),
        "{seen}"
    );
    // SIGTERM: the proxy drains and writes observe's report.
    let run = proxy.signal("TERM");
    assert!(run.success(), "{}", run.all());
    let reports: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("observe-"))
        .collect();
    assert_eq!(reports.len(), 1, "{}", run.all());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reports[0].path()).unwrap()).unwrap();
    assert_eq!(report["locks"][0]["acquired"], n, "{report}");
}
