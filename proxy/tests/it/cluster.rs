//! The proxy in front of a real 3-master Redis Cluster on loopback: clients see one standalone
//! Redis, each keyed command goes to the master owning its slot, no `MOVED`/`ASK` reaches them.

use crate::common;

use std::collections::HashSet;

use common::*;
use lockkit_test_support::RedisCluster;
use redis::AsyncCommands;

/// A client connection that waits up to 10 s for a reply (a command meeting `-TRYAGAIN` waits
/// in the proxy for the slot's migration to end, as a cluster client would).
async fn conn(port: u16) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(10)));
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
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

/// `CLUSTER MYID` of a node.
fn node_id(node: &lockkit_test_support::RedisServer) -> String {
    let mut c = redis::Client::open(node.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("CLUSTER").arg("MYID").query(&mut c).unwrap()
}

/// Moves `slot` from node `from` to node `to` as `redis-cli --cluster reshard` does:
/// IMPORTING, MIGRATING, MIGRATE of its keys in batches, then the new owner to every node.
fn migrate_slot(cluster: &RedisCluster, slot: u16, from: usize, to: usize) -> usize {
    let nodes = cluster.nodes();
    let (src, dst) = (&nodes[from], &nodes[to]);
    let (src_id, dst_id) = (node_id(src), node_id(dst));
    let mut s = redis::Client::open(src.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut d = redis::Client::open(dst.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let setslot = |c: &mut redis::Connection, how: &str, id: &str| {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .query::<String>(c)
            .unwrap()
    };
    setslot(&mut d, "IMPORTING", &src_id);
    setslot(&mut s, "MIGRATING", &dst_id);
    let mut moved = 0;
    for _ in 0..10_000 {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(20)
            .query(&mut s)
            .unwrap();
        if keys.is_empty() {
            break;
        }
        moved += keys.len();
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(dst.port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query::<String>(&mut s)
            .unwrap();
        // Slow enough that the writers meet both ASK and MOVED.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    setslot(&mut d, "NODE", &dst_id);
    setslot(&mut s, "NODE", &dst_id);
    for (i, n) in nodes.iter().enumerate() {
        if i != from && i != to {
            let mut c = redis::Client::open(n.url())
                .unwrap()
                .get_connection()
                .unwrap();
            setslot(&mut c, "NODE", &dst_id);
        }
    }
    moved
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_while_clients_write_costs_no_error_and_no_write() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let port = proxy.addr().port();
    let slot = lockkit::key_slot(b"m");
    let from = (0..3)
        .find(|&i| {
            let out = cluster.nodes()[i].inline("GET {m}:probe").unwrap();
            !out.contains("MOVED")
        })
        .expect("a node owns the slot");
    let to = (from + 1) % 3;
    // Keys already there before the migration starts.
    let mut c = conn(port).await;
    for i in 0..400 {
        let _: () = c.set(format!("{{m}}:{i}"), i).await.unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..3u64 {
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut c = conn(port).await;
            let (mut written, mut errors) = (Vec::new(), Vec::new());
            for i in 0..20_000u64 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let key = format!("{{m}}:w{w}:{i}");
                // New keys, and overwrites of keys that may be moving right now.
                let r: redis::RedisResult<()> = c.set(&key, i).await;
                let old = format!("{{m}}:{}", i % 400);
                let r2: redis::RedisResult<i64> = c.incr(&old, 0).await;
                let r3: redis::RedisResult<Vec<Option<i64>>> =
                    c.mget(&[key.clone(), old.clone()]).await;
                for e in [r.err(), r2.err(), r3.err()].into_iter().flatten() {
                    errors.push(e.to_string());
                }
                written.push((key, i));
            }
            (written, errors)
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let moved = {
        let cluster = &cluster;
        tokio::task::block_in_place(|| migrate_slot(cluster, slot, from, to))
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all = Vec::new();
    let mut errors = Vec::new();
    for w in writers {
        let (written, e) = w.await.unwrap();
        all.extend(written);
        errors.extend(e);
    }
    assert!(moved >= 400, "{moved} keys migrated");
    assert!(
        errors.is_empty(),
        "{} client errors: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    for (key, v) in &all {
        let got: Option<u64> = c.get(key).await.unwrap();
        assert_eq!(got, Some(*v), "{key} after the migration");
    }
    // All of them on the new owner.
    let mut d = conn(cluster.nodes()[to].port()).await;
    let n: usize = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query_async(&mut d)
        .await
        .unwrap();
    assert_eq!(n, 400 + all.len(), "keys of slot {slot} on the new owner");
    eprintln!(
        "{} writes through the proxy during the migration of {moved} keys",
        all.len()
    );
    proxy.stop().await;
}
