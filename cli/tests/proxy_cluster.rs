//! `lockkit bench --url redis://<proxy>` with the proxy in front of a real 3-master Redis
//! Cluster: the lock client sees one standalone server, and the run keeps every lock safe.

mod common;

use common::{json_in, Lockkit};
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
