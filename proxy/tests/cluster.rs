//! The proxy in front of a real 3-master Redis Cluster on loopback: clients see one standalone
//! Redis, each keyed command goes to the master owning its slot, no `MOVED`/`ASK` reaches them.

mod common;

use std::collections::HashSet;

use common::*;
use lockkit_test_support::RedisCluster;
use redis::AsyncCommands;

async fn conn(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("a connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sets_land_on_the_masters_owning_their_slots() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    for i in 0..1000 {
        let r: redis::RedisResult<String> = c.set(format!("key:{i}"), i).await;
        assert_eq!(
            r.as_deref(),
            Ok("OK"),
            "SET key:{i} through the proxy: {r:?}"
        );
    }
    for i in (0..1000).step_by(37) {
        let v: Option<i64> = c.get(format!("key:{i}")).await.unwrap();
        assert_eq!(v, Some(i), "GET key:{i} through the proxy");
    }
    // Each node holds only keys of its own slots (it answers GET for each directly, without a
    // redirection), and the nodes together hold all 1,000, each once.
    let mut seen = HashSet::new();
    for node in cluster.nodes() {
        let mut n = conn(node.port()).await;
        let keys: Vec<String> = n.keys("key:*").await.unwrap();
        for k in keys {
            let v: redis::RedisResult<Option<String>> = n.get(&k).await;
            let want = k.trim_start_matches("key:").to_string();
            assert_eq!(v.ok().flatten(), Some(want), "{k} on node {}", node.port());
            assert!(seen.insert(k.clone()), "{k} on two nodes");
        }
    }
    assert_eq!(seen.len(), 1000);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_shows_a_standalone_server() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    assert!(proxy.shared().is_cluster());
    let port = proxy.addr().port();
    let out = redis_cli(port, &["INFO", "cluster"], "");
    assert!(out.contains("cluster_enabled:0"), "{out}");
    let out = redis_cli(port, &["CLUSTER", "SHARDS"], "");
    assert_eq!(
        out.trim_end(),
        "ERR This instance has cluster support disabled"
    );
    assert_eq!(redis_cli(port, &["PING"], ""), "PONG\n");
    // Keys of every master, one redis-cli session: no redirection is ever shown.
    let mut input = String::new();
    for i in 0..30 {
        input.push_str(&format!("SET {{t{i}}}a {i}\nGET {{t{i}}}a\n"));
    }
    let out = redis_cli(port, &[], &input);
    assert!(!out.contains("MOVED") && !out.contains("ASK"), "{out}");
    assert_eq!(out.lines().filter(|l| *l == "OK").count(), 30, "{out}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_upstream_is_not_taken_for_a_cluster() {
    let server = lockkit_test_support::RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    assert!(!proxy.shared().is_cluster());
    proxy.stop().await;
}
