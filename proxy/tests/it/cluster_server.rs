//! Server-wide commands through the proxy in front of a real 3-master Redis Cluster, answered
//! as one server holding all of the cluster would answer them: `RANDOMKEY` over every master,
//! `SCRIPT EXISTS` for the scripts `EVALSHA` runs anywhere, `ACL` changes on every master, the
//! per-client counters of `INFO clients` added up.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::*;
use lockkit_test_support::RedisCluster;

/// A key named `prefix:i` that the node on `port` owns (it answers `GET` without `-MOVED`).
async fn key_on(port: u16, prefix: &str) -> String {
    let mut d = conn(port).await;
    for i in 0.. {
        let k = format!("{prefix}:{i}");
        if q::<Option<String>>(&mut d, &["GET", &k]).await.is_ok() {
            return k;
        }
    }
    unreachable!()
}

/// `field:value` of an `INFO` text.
fn field(info: &str, name: &str) -> Option<i64> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomkey_finds_the_keys_of_every_master() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    let none: Option<String> = q(&mut c, &["RANDOMKEY"]).await.unwrap();
    assert_eq!(none, None, "an empty cluster has no key");
    let mut keys = Vec::new();
    for node in cluster.nodes() {
        keys.push(key_on(node.port(), "rk").await);
    }
    // One key, on each master in turn: RANDOMKEY finds it every time.
    for k in &keys {
        q::<String>(&mut c, &["SET", k, "v"]).await.unwrap();
        for _ in 0..10 {
            let got: Option<String> = q(&mut c, &["RANDOMKEY"]).await.unwrap();
            assert_eq!(
                got.as_deref(),
                Some(k.as_str()),
                "the one key, on its master"
            );
        }
        q::<i64>(&mut c, &["DEL", k]).await.unwrap();
    }
    // One key on each master: all three seen.
    for k in &keys {
        q::<String>(&mut c, &["SET", k, "v"]).await.unwrap();
    }
    let mut seen = HashSet::new();
    for _ in 0..300 {
        let got: Option<String> = q(&mut c, &["RANDOMKEY"]).await.unwrap();
        seen.insert(got.expect("a key"));
        if seen.len() == keys.len() {
            break;
        }
    }
    assert_eq!(seen, keys.iter().cloned().collect::<HashSet<_>>());
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_exists_says_1_for_a_script_evalsha_runs_on_every_master() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    // EVAL'd with no key: cached on one master, and the proxy keeps its body.
    assert_eq!(
        q::<i64>(&mut c, &["EVAL", "return 1+1", "0"])
            .await
            .unwrap(),
        2
    );
    let sha = sha1_smol::Sha1::from("return 1+1").digest().to_string();
    let none = "a27e7e8a43702b7046d4f6a7ccf5b60cef6b9bda";
    let there: Vec<i64> = q(&mut c, &["SCRIPT", "EXISTS", &sha, none]).await.unwrap();
    assert_eq!(there, [1, 0]);
    // And EVALSHA runs it on keys of every master.
    for node in cluster.nodes() {
        let k = key_on(node.port(), "sx").await;
        let n: i64 = q(&mut c, &["EVALSHA", &sha, "1", &k]).await.unwrap();
        assert_eq!(n, 2);
    }
    // A script no master could load (it does not compile): 0, though its body was seen.
    let bad = "return +";
    assert!(q::<i64>(&mut c, &["EVAL", bad, "0"]).await.is_err());
    let bad_sha = sha1_smol::Sha1::from(bad).digest().to_string();
    let there: Vec<i64> = q(&mut c, &["SCRIPT", "EXISTS", &bad_sha]).await.unwrap();
    assert_eq!(there, [0]);
    // SCRIPT FLUSH: gone everywhere.
    q::<String>(&mut c, &["SCRIPT", "FLUSH"]).await.unwrap();
    let there: Vec<i64> = q(&mut c, &["SCRIPT", "EXISTS", &sha]).await.unwrap();
    assert_eq!(there, [0]);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_changes_go_to_every_master_and_reads_to_one() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    let set = [
        "ACL",
        "SETUSER",
        "bob",
        "on",
        ">123",
        "+@scripting",
        "+set",
        "~x*",
    ];
    assert_eq!(q::<String>(&mut c, &set).await.unwrap(), "OK");
    for node in cluster.nodes() {
        let mut d = conn(node.port()).await;
        let users: Vec<String> = q(&mut d, &["ACL", "USERS"]).await.unwrap();
        assert!(users.contains(&"bob".to_string()), "bob on {}", node.port());
    }
    let users: Vec<String> = q(&mut c, &["ACL", "USERS"]).await.unwrap();
    assert_eq!(users, ["bob", "default"]);
    let got: redis::Value = q(&mut c, &["ACL", "GETUSER", "bob"]).await.unwrap();
    assert_ne!(got, redis::Value::Nil);
    // An error every master gives alike is the answer.
    let e = q::<String>(&mut c, &["ACL", "SETUSER", "bob", "nosuchrule"])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Syntax error"), "{e}");
    // Masters that answer differently: an error naming them.
    let odd = cluster.nodes()[1].port();
    let mut d = conn(odd).await;
    q::<String>(&mut d, &["ACL", "SETUSER", "carol", "on"])
        .await
        .unwrap();
    let e = q::<i64>(&mut c, &["ACL", "DELUSER", "carol"])
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains(&format!("127.0.0.1:{odd}")), "{text}");
    assert!(text.contains("answered"), "{text}");
    assert_eq!(
        q::<i64>(&mut c, &["ACL", "DELUSER", "bob"]).await.unwrap(),
        1
    );
    for node in cluster.nodes() {
        let mut d = conn(node.port()).await;
        let users: Vec<String> = q(&mut d, &["ACL", "USERS"]).await.unwrap();
        assert_eq!(users, ["default"], "on {}", node.port());
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_clients_adds_up_the_blocked_clients_of_every_master() {
    let cluster = RedisCluster::start(3);
    let proxy = start_proxy(&cluster.url(), vec![]).await;
    let mut c = conn(proxy.addr().port()).await;
    // A client blocked on each master, straight on the node.
    let mut blocked = Vec::new();
    for node in cluster.nodes() {
        let k = key_on(node.port(), "bl").await;
        let port = node.port();
        blocked.push(tokio::spawn(async move {
            let mut d = conn(port).await;
            let _: redis::RedisResult<Option<Vec<String>>> = q(&mut d, &["BLPOP", &k, "20"]).await;
        }));
    }
    for node in cluster.nodes() {
        let mut d = conn(node.port()).await;
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String = q(&mut d, &["INFO", "clients"]).await.unwrap();
            if field(&info, "blocked_clients") == Some(1) {
                break;
            }
            assert!(
                Instant::now() < until,
                "no client blocked on {}",
                node.port()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let info: String = q(&mut c, &["INFO", "clients"]).await.unwrap();
    assert_eq!(field(&info, "blocked_clients"), Some(3), "{info}");
    // Each master counts its blocked client and the proxy's connection to it.
    let connected = field(&info, "connected_clients").unwrap();
    assert!(connected >= 6, "{info}");
    for b in blocked {
        b.abort();
    }
    proxy.stop().await;
}
