//! The commands that need a connection of the client's own, through the proxy in front of a
//! real 3-master Redis Cluster: `WATCH` and its transaction on a connection to the watched
//! key's master, blocking commands on one to their keys' master, `SELECT` and `CLIENT` as a
//! cluster node answers them.

use crate::common;

use std::time::Duration;

use common::*;
use lockkit_test_support::RedisCluster;

/// One key per master: `prefix:i` for the first `i` whose slot each master owns.
fn key_per_master(cluster: &RedisCluster, prefix: &str) -> Vec<String> {
    let mut seen: Vec<u16> = Vec::new();
    let mut out = Vec::new();
    for i in 0.. {
        let k = format!("{prefix}:{i}");
        let port = master_of(cluster, &k);
        if !seen.contains(&port) {
            seen.push(port);
            out.push(k);
        }
        if out.len() == 3 {
            return out;
        }
    }
    out
}

/// The port of the master that owns `key`'s slot, asked of the node itself.
fn master_of(cluster: &RedisCluster, key: &str) -> u16 {
    let slot = i64::from(lockkit::key_slot(key.as_bytes()));
    let node = &cluster.nodes()[0];
    let mut c = redis::Client::open(node.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let ranges: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).unwrap();
    for r in ranges {
        let int = |v: &redis::Value| match v {
            redis::Value::Int(i) => *i,
            _ => -1,
        };
        if int(&r[0]) <= slot && slot <= int(&r[1]) {
            if let redis::Value::Array(a) = &r[2] {
                return int(&a[1]) as u16;
            }
        }
    }
    panic!("no master owns slot {slot}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_holds_the_transaction_on_the_watched_keys_master() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let port = proxy.addr().port();
    let (mut c, mut other) = (conn(port).await, conn(port).await);
    for k in key_per_master(&cluster, "w") {
        let tagged = format!("{{{k}}}b");
        // Nobody touched it: the transaction runs, on the key's master.
        assert_eq!(q::<String>(&mut c, &["WATCH", &k]).await.unwrap(), "OK");
        assert_eq!(
            q::<Option<String>>(&mut c, &["GET", &k]).await.unwrap(),
            None
        );
        assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
        assert_eq!(
            q::<String>(&mut c, &["SET", &k, "1"]).await.unwrap(),
            "QUEUED"
        );
        assert_eq!(
            q::<String>(&mut c, &["INCR", &tagged]).await.unwrap(),
            "QUEUED"
        );
        let done: Option<(String, i64)> = q(&mut c, &["EXEC"]).await.unwrap();
        assert_eq!(done, Some(("OK".into(), 1)));
        let mut d = conn(master_of(&cluster, &k)).await;
        assert_eq!(q::<String>(&mut d, &["GET", &k]).await.unwrap(), "1");
        // Another client changes the watched key: EXEC answers a null array, as Redis.
        assert_eq!(
            q::<String>(&mut c, &["WATCH", &k, &tagged]).await.unwrap(),
            "OK"
        );
        assert_eq!(
            q::<String>(&mut other, &["SET", &k, "2"]).await.unwrap(),
            "OK"
        );
        assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
        assert_eq!(
            q::<String>(&mut c, &["SET", &k, "3"]).await.unwrap(),
            "QUEUED"
        );
        let done: Option<(String,)> = q(&mut c, &["EXEC"]).await.unwrap();
        assert_eq!(done, None);
        assert_eq!(q::<String>(&mut c, &["GET", &k]).await.unwrap(), "2");
        // After EXEC nothing is watched: a change by another client no longer matters.
        assert_eq!(
            q::<String>(&mut other, &["SET", &k, "4"]).await.unwrap(),
            "OK"
        );
        assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
        assert_eq!(
            q::<String>(&mut c, &["SET", &k, "5"]).await.unwrap(),
            "QUEUED"
        );
        let done: Option<(String,)> = q(&mut c, &["EXEC"]).await.unwrap();
        assert_eq!(done, Some(("OK".into(),)));
        // UNWATCH and DISCARD let go too.
        assert_eq!(q::<String>(&mut c, &["WATCH", &k]).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut c, &["UNWATCH"]).await.unwrap(), "OK");
        assert_eq!(
            q::<String>(&mut other, &["SET", &k, "6"]).await.unwrap(),
            "OK"
        );
        assert_eq!(q::<String>(&mut c, &["WATCH", &k]).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut c, &["DISCARD"]).await.unwrap(), "OK");
        assert_eq!(
            q::<String>(&mut other, &["SET", &k, "7"]).await.unwrap(),
            "OK"
        );
        assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut c, &["GET", &k]).await.unwrap(), "QUEUED");
        let done: Option<(String,)> = q(&mut c, &["EXEC"]).await.unwrap();
        assert_eq!(done, Some(("7".into(),)));
    }
    // Keys of another slot than the watched ones: CROSSSLOT, as a cluster node answers them.
    assert_ne!(lockkit::key_slot(b"xa"), lockkit::key_slot(b"xb"));
    let e = q::<String>(&mut c, &["WATCH", "xa", "xb"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    assert_eq!(q::<String>(&mut c, &["WATCH", "xa"]).await.unwrap(), "OK");
    let e = q::<String>(&mut c, &["WATCH", "xb"]).await.unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
    let e = q::<String>(&mut c, &["SET", "xb", "1"]).await.unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    let e = q::<Vec<String>>(&mut c, &["EXEC"]).await.unwrap_err();
    assert_eq!(e.code(), Some("EXECABORT"), "{e}");
    // Back on the shared path: keys of every master answer.
    for k in key_per_master(&cluster, "after") {
        assert_eq!(q::<String>(&mut c, &["SET", &k, "v"]).await.unwrap(), "OK");
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_commands_wait_on_their_keys_master_and_the_client_goes_on() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let port = proxy.addr().port();
    let (mut c, mut other) = (conn(port).await, conn(port).await);
    for k in key_per_master(&cluster, "q") {
        let waiter = {
            let mut c = conn(port).await;
            let k = k.clone();
            tokio::spawn(async move { q::<(String, String)>(&mut c, &["BLPOP", &k, "20"]).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        // INFO counts it, whichever master it waits on.
        let info: String = q(&mut other, &["INFO", "clients"]).await.unwrap();
        assert!(info.contains("blocked_clients:1\r\n"), "{info}");
        assert_eq!(q::<i64>(&mut other, &["RPUSH", &k, "x"]).await.unwrap(), 1);
        assert_eq!(waiter.await.unwrap().unwrap(), (k.clone(), "x".into()));
        // Timed out: a null reply; the same client's later commands go on.
        let none: Option<(String, String)> = q(&mut c, &["BRPOP", &k, "0.2"]).await.unwrap();
        assert_eq!(none, None);
        assert_eq!(q::<String>(&mut c, &["SET", &k, "v"]).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut c, &["GET", &k]).await.unwrap(), "v");
        q::<i64>(&mut c, &["DEL", &k]).await.unwrap();
        // Two keys of one slot, a sorted set, a stream.
        let (a, b) = (format!("{{{k}}}a"), format!("{{{k}}}b"));
        q::<i64>(&mut c, &["RPUSH", &a, "m"]).await.unwrap();
        let moved: String = q(&mut c, &["BLMOVE", &a, &b, "LEFT", "RIGHT", "1"])
            .await
            .unwrap();
        assert_eq!(moved, "m");
        let got: (String, String) = q(&mut c, &["BRPOPLPUSH", &b, &a, "1"])
            .await
            .map(|v: String| (v, a.clone()))
            .unwrap();
        assert_eq!(got.0, "m");
        q::<i64>(&mut c, &["ZADD", &b, "1", "z"]).await.unwrap();
        let z: (String, String, String) = q(&mut c, &["BZPOPMIN", &b, "1"]).await.unwrap();
        assert_eq!(z, (b.clone(), "z".into(), "1".into()));
        let none: Option<(String, String, String)> =
            q(&mut c, &["BZPOPMAX", &b, "0.1"]).await.unwrap();
        assert_eq!(none, None);
        q::<i64>(&mut c, &["RPUSH", &a, "p"]).await.unwrap();
        let popped: (String, Vec<String>) = q(&mut c, &["BLMPOP", "1", "2", &b, &a, "LEFT"])
            .await
            .unwrap();
        assert_eq!(popped, (a.clone(), vec!["m".to_string()]));
        let s = format!("{{{k}}}s");
        q::<String>(&mut c, &["XADD", &s, "1-1", "f", "v"])
            .await
            .unwrap();
        let read: redis::Value = q(&mut c, &["XREAD", "BLOCK", "1000", "STREAMS", &s, "0"])
            .await
            .unwrap();
        assert!(
            matches!(read, redis::Value::Array(ref a) if a.len() == 1),
            "{read:?}"
        );
        let none: redis::Value = q(&mut c, &["XREAD", "BLOCK", "100", "STREAMS", &s, "$"])
            .await
            .unwrap();
        assert_eq!(none, redis::Value::Nil);
    }
    // Keys of several slots: CROSSSLOT, as a cluster node answers it.
    let e = q::<Option<(String, String)>>(&mut c, &["BLPOP", "xa", "xb", "1"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_and_client_are_answered_as_a_cluster_node_would() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    assert_eq!(q::<String>(&mut c, &["SELECT", "0"]).await.unwrap(), "OK");
    let e = q::<String>(&mut c, &["SELECT", "9"]).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("SELECT is not allowed in cluster mode"),
        "{e}"
    );
    assert_eq!(
        q::<String>(&mut c, &["CLIENT", "SETNAME", "me"])
            .await
            .unwrap(),
        "OK"
    );
    assert_eq!(
        q::<String>(&mut c, &["CLIENT", "GETNAME"]).await.unwrap(),
        "me"
    );
    let id: i64 = q(&mut c, &["CLIENT", "ID"]).await.unwrap();
    assert!(id > 0);
    assert_eq!(
        q::<i64>(&mut c, &["CLIENT", "ID"]).await.unwrap(),
        id,
        "one id"
    );
    let info: String = q(&mut c, &["CLIENT", "INFO"]).await.unwrap();
    assert!(info.contains(&format!("id={id} ")), "{info}");
    assert!(info.contains("name=me "), "{info}");
    assert_eq!(
        q::<String>(&mut c, &["CLIENT", "NO-EVICT", "on"])
            .await
            .unwrap(),
        "OK"
    );
    // The client goes on, on keys of every master.
    for k in key_per_master(&cluster, "c") {
        assert_eq!(q::<String>(&mut c, &["SET", &k, "v"]).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut c, &["GET", &k]).await.unwrap(), "v");
    }
    proxy.stop().await;
}

/// Gives slot `slot` (holding no key) to the master at `port`, on every node.
fn give_slot(cluster: &RedisCluster, slot: u16, port: u16) {
    let nodes = cluster.nodes();
    let to = nodes.iter().find(|n| n.port() == port).unwrap();
    let mut c = redis::Client::open(to.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let id: String = redis::cmd("CLUSTER").arg("MYID").query(&mut c).unwrap();
    for n in nodes {
        let mut c = redis::Client::open(n.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&id)
            .query(&mut c)
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_slot_that_moves_fails_the_transaction() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    let k = "moving";
    let slot = lockkit::key_slot(k.as_bytes());
    let from = master_of(&cluster, k);
    let to = (cluster.nodes().iter().map(|n| n.port()))
        .find(|&p| p != from)
        .unwrap();
    // Moved after WATCH: the queued SET meets -MOVED on the watching node, which answers
    // EXEC with EXECABORT; nothing is written anywhere.
    assert_eq!(q::<String>(&mut c, &["WATCH", k]).await.unwrap(), "OK");
    give_slot(&cluster, slot, to);
    assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
    assert_eq!(
        q::<String>(&mut c, &["SET", k, "1"]).await.unwrap(),
        "QUEUED"
    );
    let e = q::<Option<(String,)>>(&mut c, &["EXEC"]).await.unwrap_err();
    assert_eq!(e.code(), Some("EXECABORT"), "{e}");
    assert_eq!(
        q::<Option<String>>(&mut c, &["GET", k]).await.unwrap(),
        None
    );
    // Moved before WATCH while the proxy still sends it to the old master: WATCH is +OK, the
    // EXEC after it answers a null array (the transaction fails).
    for _ in 0..100 {
        // Until the proxy follows the slot to its new master.
        if master_of(&cluster, k) == to && q::<String>(&mut c, &["SET", k, "x"]).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    q::<i64>(&mut c, &["DEL", k]).await.unwrap();
    give_slot(&cluster, slot, from);
    assert_eq!(q::<String>(&mut c, &["WATCH", k]).await.unwrap(), "OK");
    assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
    assert_eq!(
        q::<String>(&mut c, &["SET", k, "2"]).await.unwrap(),
        "QUEUED"
    );
    let done: Option<(String,)> = q(&mut c, &["EXEC"]).await.unwrap();
    assert_eq!(done, None);
    // The client goes on: the slot followed, the key written on its master.
    assert_eq!(q::<String>(&mut c, &["SET", k, "3"]).await.unwrap(), "OK");
    let mut d = conn(from).await;
    assert_eq!(q::<String>(&mut d, &["GET", k]).await.unwrap(), "3");
    proxy.stop().await;
}

/// A node's refusal of a command while it is queued (`-OOM` past `maxmemory`) is the client's,
/// as on one Redis: the command is answered `-OOM`, `EXEC` `-EXECABORT`, `DISCARD` `+OK`; a
/// transaction of reads queued before the node ran out of memory still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refusing_a_queued_command_fails_the_transaction() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    for k in key_per_master(&cluster, "oom") {
        let mut node = conn(master_of(&cluster, &k)).await;
        let maxmemory = |v: &'static str| ["CONFIG", "SET", "maxmemory", v];
        // Reads queued, then the node runs out of memory: they run.
        assert_eq!(q::<String>(&mut c, &["SET", &k, "v"]).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut c, &["GET", &k]).await.unwrap(), "QUEUED");
        assert_eq!(q::<String>(&mut node, &maxmemory("1")).await.unwrap(), "OK");
        assert_eq!(
            q::<Vec<String>>(&mut c, &["EXEC"]).await.unwrap(),
            vec!["v".to_string()]
        );
        // A write queued while the node is out of memory: -OOM, then EXECABORT.
        assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
        let e = q::<String>(&mut c, &["SET", &k, "1"]).await.unwrap_err();
        assert_eq!(e.code(), Some("OOM"), "{e}");
        let e = q::<Vec<String>>(&mut c, &["EXEC"]).await.unwrap_err();
        assert_eq!(e.code(), Some("EXECABORT"), "{e}");
        // And DISCARD after it.
        assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
        let e = q::<String>(&mut c, &["SET", &k, "1"]).await.unwrap_err();
        assert_eq!(e.code(), Some("OOM"), "{e}");
        assert_eq!(q::<String>(&mut c, &["DISCARD"]).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut node, &maxmemory("0")).await.unwrap(), "OK");
        assert_eq!(q::<String>(&mut c, &["GET", &k]).await.unwrap(), "v");
    }
    proxy.stop().await;
}
