//! Multi-key, script and server-wide commands through the proxy in front of a real 3-master
//! Redis Cluster: split per slot and merged in order, `-CROSSSLOT` where Redis gives it,
//! scripts on every master, the keyspace counted and walked over all masters.

use crate::common;

use std::collections::HashSet;

use common::*;
use lockkit_test_support::RedisCluster;

/// Keys named `prefix:i`, one master owning each, until each of the 3 masters has `per` keys.
fn keys_on_every_master(cluster: &RedisCluster, prefix: &str, per: usize) -> Vec<String> {
    let owners: Vec<(u16, u16)> = cluster
        .nodes()
        .iter()
        .map(|n| {
            let mut c = redis::Client::open(n.url()).unwrap().get_connection().unwrap();
            let shards: Vec<Vec<redis::Value>> =
                redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).unwrap();
            let mine = shards
                .iter()
                .find(|r| matches!(&r[2], redis::Value::Array(a) if a.get(1) == Some(&redis::Value::Int(i64::from(n.port())))))
                .expect("each master owns a range");
            let int = |v: &redis::Value| match v {
                redis::Value::Int(i) => *i as u16,
                _ => 0,
            };
            (int(&mine[0]), int(&mine[1]))
        })
        .collect();
    let mut count = [0usize; 3];
    let mut out = Vec::new();
    for i in 0.. {
        let k = format!("{prefix}:{i}");
        let s = lockkit::key_slot(k.as_bytes());
        let m = owners.iter().position(|&(a, b)| s >= a && s <= b).unwrap();
        if count[m] < per {
            count[m] += 1;
            out.push(k);
        }
        if count.iter().all(|&c| c == per) {
            break;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_commands_are_split_per_slot_and_merged_in_order() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    let keys = keys_on_every_master(&cluster, "mk", 10);
    let mut mset = vec!["MSET"];
    let values: Vec<String> = (0..keys.len()).map(|i| format!("v{i}")).collect();
    for (k, v) in keys.iter().zip(&values) {
        mset.push(k);
        mset.push(v);
    }
    assert_eq!(q::<String>(&mut c, &mset).await.unwrap(), "OK");
    let mut mget: Vec<&str> = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    mget.insert(5, "nosuchkey");
    let got: Vec<Option<String>> = q(&mut c, &mget).await.unwrap();
    let mut want: Vec<Option<String>> = values.iter().cloned().map(Some).collect();
    want.insert(4, None);
    assert_eq!(got, want);
    let args = |name: &'static str, extra: &[&'static str]| {
        let mut a: Vec<&str> = vec![name];
        a.extend(keys.iter().map(String::as_str));
        a.extend_from_slice(extra);
        a
    };
    let n = keys.len() as i64;
    assert_eq!(
        q::<i64>(&mut c, &args("EXISTS", &["nosuch", "mk:0"]))
            .await
            .unwrap(),
        n + 1
    );
    assert_eq!(q::<i64>(&mut c, &args("TOUCH", &[])).await.unwrap(), n);
    let (first, rest) = keys.split_at(15);
    let mut del = vec!["DEL"];
    del.extend(first.iter().map(String::as_str));
    assert_eq!(q::<i64>(&mut c, &del).await.unwrap(), 15);
    let mut unlink = vec!["UNLINK"];
    unlink.extend(rest.iter().map(String::as_str));
    unlink.push("gone");
    assert_eq!(q::<i64>(&mut c, &unlink).await.unwrap(), rest.len() as i64);
    assert_eq!(q::<i64>(&mut c, &args("EXISTS", &[])).await.unwrap(), 0);
    // Any other multi-key command over several slots: Redis's own CROSSSLOT.
    assert_ne!(lockkit::key_slot(b"a"), lockkit::key_slot(b"b"));
    let e = q::<Vec<String>>(&mut c, &["SUNION", "a", "b"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    let e = q::<String>(&mut c, &["EVAL", "return 1", "2", "a", "b"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    // One slot by hash tag: allowed.
    q::<i64>(&mut c, &["SADD", "{t}a", "1"]).await.unwrap();
    q::<i64>(&mut c, &["SADD", "{t}b", "2"]).await.unwrap();
    let mut u: Vec<String> = q(&mut c, &["SUNION", "{t}a", "{t}b"]).await.unwrap();
    u.sort();
    assert_eq!(u, ["1", "2"]);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_run_on_every_master_and_the_keyspace_is_walked_over_all() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    let keys = keys_on_every_master(&cluster, "sk", 40);
    // Loaded once through the proxy: EVALSHA on keys of all three masters.
    let body = "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])";
    let sha: String = q(&mut c, &["SCRIPT", "LOAD", body]).await.unwrap();
    for node in cluster.nodes() {
        let mut d = conn(node.port()).await;
        let there: Vec<i64> = q(&mut d, &["SCRIPT", "EXISTS", &sha]).await.unwrap();
        assert_eq!(there, [1], "the script on master {}", node.port());
    }
    for k in &keys {
        let v: String = q(&mut c, &["EVALSHA", &sha, "1", k, "x"]).await.unwrap();
        assert_eq!(v, "x");
    }
    // A script only EVAL'd (cached on one node): EVALSHA on another master still runs it.
    let counters = keys_on_every_master(&cluster, "ik", 2);
    let body2 = "return redis.call('INCR', KEYS[1])";
    assert_eq!(
        q::<i64>(&mut c, &["EVAL", body2, "1", &counters[0]])
            .await
            .unwrap(),
        1
    );
    let sha2 = sha1_smol::Sha1::from(body2).digest().to_string();
    for k in &counters[1..] {
        let n: redis::RedisResult<i64> = q(&mut c, &["EVALSHA", &sha2, "1", k]).await;
        assert!(n.is_ok(), "EVALSHA on {k}: {n:?}");
    }
    // SCRIPT FLUSH forgets it: NOSCRIPT as Redis says it.
    q::<String>(&mut c, &["SCRIPT", "FLUSH"]).await.unwrap();
    let e = q::<i64>(&mut c, &["EVALSHA", &sha2, "1", &counters[5]])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("NOSCRIPT"), "{e}");
    // DBSIZE, KEYS and SCAN over all masters.
    let total = keys.len() as i64;
    let mut del = vec!["DEL"];
    del.extend(counters.iter().map(String::as_str));
    assert_eq!(q::<i64>(&mut c, &del).await.unwrap(), counters.len() as i64);
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]).await.unwrap(), total);
    let all: Vec<String> = q(&mut c, &["KEYS", "sk:*"]).await.unwrap();
    assert_eq!(all.len() as i64, total);
    let mut seen = HashSet::new();
    let mut cursor = "0".to_string();
    for _ in 0..10_000 {
        let (next, batch): (String, Vec<String>) =
            q(&mut c, &["SCAN", &cursor, "COUNT", "7"]).await.unwrap();
        seen.extend(batch);
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(cursor, "0");
    assert_eq!(seen.len() as i64, total);
    // PING answered; FLUSHALL on every master.
    assert_eq!(q::<String>(&mut c, &["PING"]).await.unwrap(), "PONG");
    assert_eq!(q::<String>(&mut c, &["FLUSHALL"]).await.unwrap(), "OK");
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]).await.unwrap(), 0);
    for node in cluster.nodes() {
        let mut d = conn(node.port()).await;
        assert_eq!(q::<i64>(&mut d, &["DBSIZE"]).await.unwrap(), 0);
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_on_one_slot_runs_on_its_master() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    // One transaction per master, each on keys of one slot: QUEUED per command, the EXEC array.
    for k in keys_on_every_master(&cluster, "tx", 1) {
        let (a, b) = (format!("{{{k}}}a"), format!("{{{k}}}b"));
        assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
        assert_eq!(
            q::<String>(&mut c, &["SET", &a, "1"]).await.unwrap(),
            "QUEUED"
        );
        assert_eq!(q::<String>(&mut c, &["INCR", &b]).await.unwrap(), "QUEUED");
        assert_eq!(q::<String>(&mut c, &["PING"]).await.unwrap(), "QUEUED");
        assert_eq!(q::<String>(&mut c, &["GET", &a]).await.unwrap(), "QUEUED");
        let done: (String, i64, String, String) = q(&mut c, &["EXEC"]).await.unwrap();
        assert_eq!(done, ("OK".into(), 1, "PONG".into(), "1".into()));
        assert_eq!(q::<i64>(&mut c, &["GET", &b]).await.unwrap(), 1);
    }
    // Keys of two slots: CROSSSLOT at the command, EXECABORT at EXEC, nothing written.
    assert_ne!(lockkit::key_slot(b"xa"), lockkit::key_slot(b"xb"));
    assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
    assert_eq!(
        q::<String>(&mut c, &["SET", "xa", "1"]).await.unwrap(),
        "QUEUED"
    );
    let e = q::<String>(&mut c, &["SET", "xb", "1"]).await.unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    let e = q::<Vec<String>>(&mut c, &["EXEC"]).await.unwrap_err();
    assert_eq!(e.code(), Some("EXECABORT"), "{e}");
    assert_eq!(q::<i64>(&mut c, &["EXISTS", "xa", "xb"]).await.unwrap(), 0);
    // A command Redis refuses while queueing fails the transaction as well.
    assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
    let e = q::<String>(&mut c, &["NOSUCHCOMMAND", "xa"])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unknown command"), "{e}");
    let e = q::<Vec<String>>(&mut c, &["EXEC"]).await.unwrap_err();
    assert_eq!(e.code(), Some("EXECABORT"), "{e}");
    // DISCARD drops what was queued; EXEC and DISCARD without MULTI as Redis answers them.
    assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
    let e = q::<String>(&mut c, &["MULTI"]).await.unwrap_err();
    assert!(e.to_string().contains("can not be nested"), "{e}");
    assert_eq!(
        q::<String>(&mut c, &["SET", "xa", "1"]).await.unwrap(),
        "QUEUED"
    );
    assert_eq!(q::<String>(&mut c, &["DISCARD"]).await.unwrap(), "OK");
    assert_eq!(q::<i64>(&mut c, &["EXISTS", "xa"]).await.unwrap(), 0);
    let e = q::<Vec<String>>(&mut c, &["EXEC"]).await.unwrap_err();
    assert!(e.to_string().contains("EXEC without MULTI"), "{e}");
    let e = q::<String>(&mut c, &["DISCARD"]).await.unwrap_err();
    assert!(e.to_string().contains("DISCARD without MULTI"), "{e}");
    // An empty transaction, and UNWATCH (no WATCH is ever held in front of a cluster).
    assert_eq!(q::<String>(&mut c, &["UNWATCH"]).await.unwrap(), "OK");
    assert_eq!(q::<String>(&mut c, &["MULTI"]).await.unwrap(), "OK");
    assert_eq!(
        q::<Vec<String>>(&mut c, &["EXEC"]).await.unwrap(),
        Vec::<String>::new()
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_adds_up_the_masters_and_script_exists_asks_them_all() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    let keys = keys_on_every_master(&cluster, "ik", 5);
    for k in &keys {
        q::<String>(&mut c, &["SET", k, "v"]).await.unwrap();
    }
    let info: String = q(&mut c, &["INFO", "keyspace"]).await.unwrap();
    assert!(info.contains("db0:keys=15,"), "{info}");
    let info: String = q(&mut c, &["INFO", "commandstats"]).await.unwrap();
    assert!(info.contains("cmdstat_set:calls=15,"), "{info}");
    let info: String = q(&mut c, &["INFO"]).await.unwrap();
    assert!(info.contains("cluster_enabled:0"), "{info}");
    // A script on one master only is not there for the proxy; loaded through it, it is.
    let body = "return 7";
    let mut d = conn(cluster.nodes()[0].port()).await;
    let sha: String = q(&mut d, &["SCRIPT", "LOAD", body]).await.unwrap();
    let none = "0000000000000000000000000000000000000000";
    for _ in 0..3 {
        let there: Vec<i64> = q(&mut c, &["SCRIPT", "EXISTS", &sha, none]).await.unwrap();
        assert_eq!(there, [0, 0]);
    }
    q::<String>(&mut c, &["SCRIPT", "LOAD", body])
        .await
        .unwrap();
    let there: Vec<i64> = q(&mut c, &["SCRIPT", "EXISTS", &sha, none]).await.unwrap();
    assert_eq!(there, [1, 0]);
    // EVAL'd through the proxy (cached on one master): it exists, EVALSHA runs it anywhere.
    let body = "return 1+1";
    assert_eq!(q::<i64>(&mut c, &["EVAL", body, "0"]).await.unwrap(), 2);
    let sha = sha1_smol::Sha1::from(body).digest().to_string();
    for _ in 0..3 {
        let there: Vec<i64> = q(&mut c, &["SCRIPT", "EXISTS", &sha, none]).await.unwrap();
        assert_eq!(there, [1, 0]);
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_set_goes_to_every_master() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    let set = ["CONFIG", "SET", "maxmemory-samples", "7"];
    assert_eq!(q::<String>(&mut c, &set).await.unwrap(), "OK");
    for node in cluster.nodes() {
        let mut d = conn(node.port()).await;
        let v: Vec<String> = q(&mut d, &["CONFIG", "GET", "maxmemory-samples"])
            .await
            .unwrap();
        assert_eq!(v, ["maxmemory-samples", "7"], "master {}", node.port());
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_goes_to_the_key_or_to_every_master() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    for k in keys_on_every_master(&cluster, "dk", 1) {
        q::<String>(&mut c, &["SET", &k, "12345"]).await.unwrap();
        let o: String = q(&mut c, &["DEBUG", "OBJECT", &k]).await.unwrap();
        assert!(o.contains("encoding:int"), "{o}");
        let set = format!("{{{k}}}set");
        q::<i64>(&mut c, &["SADD", &set, "a", "b"]).await.unwrap();
        let stats: String = q(&mut c, &["DEBUG", "HTSTATS-KEY", &set]).await.unwrap();
        assert!(!stats.is_empty());
    }
    let set = ["DEBUG", "SET-ACTIVE-EXPIRE", "0"];
    assert_eq!(q::<String>(&mut c, &set).await.unwrap(), "OK");
    let set = ["DEBUG", "SET-ACTIVE-EXPIRE", "1"];
    assert_eq!(q::<String>(&mut c, &set).await.unwrap(), "OK");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomkey_draws_from_every_master() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    assert_eq!(
        q::<Option<String>>(&mut c, &["RANDOMKEY"]).await.unwrap(),
        None
    );
    let keys = keys_on_every_master(&cluster, "rk", 1);
    for k in &keys {
        q::<String>(&mut c, &["SET", k, "v"]).await.unwrap();
    }
    let mut seen = HashSet::new();
    for _ in 0..200 {
        let k: String = q(&mut c, &["RANDOMKEY"]).await.unwrap();
        seen.insert(k);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    proxy.stop().await;
}
