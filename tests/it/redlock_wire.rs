//! What a Redlock round puts on each node, command by command (issue 42, Redlock speed): only
//! what the algorithm needs, since every extra command is paid once per node.

use std::time::Duration;

use lockkit::{LockOptions, Locker, Redlock, RedlockOptions, RetryOptions};
use lockkit_test_support::RedisServer;

/// `calls` of `cmdstat_NAME` in the node's `INFO commandstats` (commands run by scripts count).
fn calls(server: &RedisServer, name: &str) -> u64 {
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let prefix = format!("cmdstat_{name}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The node's client connections other than the one asking (`CLIENT LIST`).
fn connections(server: &RedisServer) -> usize {
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
    list.lines()
        .filter(|l| !l.contains(" cmd=client|list "))
        .count()
}

/// Redlock's waiters poll (no node's release wakes anyone), so a node's release publishes
/// nothing (a `PUBLISH` per node per release is server work nobody hears), and a node's client
/// opens no connection for pub/sub: one connection per node (the default), no more.
#[tokio::test]
async fn a_redlock_release_publishes_nothing_on_its_nodes() {
    let servers = RedisServer::start_many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = Redlock::connect_with(&urls, RedlockOptions::new().restart_rule(false))
        .await
        .unwrap();
    let opts = LockOptions::builder(Duration::from_secs(5))
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    // Connecting may publish once (a probe of pub/sub support); the releases come after it.
    let before: Vec<u64> = servers.iter().map(|s| calls(s, "publish")).collect();
    for i in 0..10 {
        let lock = redlock.acquire(&format!("wire:{i}"), &opts).await.unwrap();
        let released = redlock.release_detailed(&lock).await.unwrap();
        assert!(released.released >= 2, "{released:?}");
    }
    // Stragglers of the rounds finish in the background, within the node timeout.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let published: Vec<u64> = servers
        .iter()
        .zip(&before)
        .map(|(s, b)| calls(s, "publish") - b)
        .collect();
    let deleted: Vec<u64> = servers.iter().map(|s| calls(s, "del")).collect();
    println!("PUBLISH calls per node during the releases: {published:?}; DEL calls per node: {deleted:?}");
    assert_eq!(deleted, vec![10, 10, 10], "every node released every lock");
    assert_eq!(published, vec![0, 0, 0], "a Redlock release published");
    let open: Vec<usize> = servers.iter().map(connections).collect();
    println!("the Redlock's connections per node: {open:?}");
    assert_eq!(
        open,
        vec![1, 1, 1],
        "a node got more than the one connection"
    );
}

/// After a node's error the node's start time is read again (the restart rule: it may have
/// restarted), but once per connection: the rounds in flight at that moment wait for the one
/// `INFO server`, instead of each sending its own (50 concurrent rounds sent about 50, each a
/// kilobyte-long reply the node builds; under load, a timeout or two per second kept the
/// nodes busy with them).
#[tokio::test]
async fn rounds_that_find_a_nodes_start_unknown_read_it_once() {
    let servers = RedisServer::start_many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let options = RedlockOptions::new()
        .node_timeout(Duration::from_millis(50))
        .longest_ttl(Duration::from_secs(1));
    let redlock = Redlock::connect_with(&urls, options).await.unwrap();
    let opts = LockOptions::builder(Duration::from_secs(1))
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    // Nodes just started refuse votes for the TTL in use (the restart rule).
    tokio::time::sleep(redlock.restart_wait().await.unwrap()).await;
    let lock = redlock.acquire("wire:warm", &opts).await.unwrap();
    redlock.release(&lock).await.unwrap();
    // Node 0 stops answering for longer than the node timeout: its vote times out, and it
    // forgets its start.
    let mut admin = redis::Client::open(servers[0].url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(300)
        .query(&mut admin)
        .unwrap();
    let lock = redlock.acquire("wire:paused", &opts).await.unwrap();
    redlock.release(&lock).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = calls(&servers[0], "info");
    let rounds = (0..50).map(|i| {
        let redlock = redlock.clone();
        async move {
            let lock = redlock.acquire(&format!("wire:{i}"), &opts).await.unwrap();
            redlock.release(&lock).await.unwrap();
        }
    });
    futures_util::future::join_all(rounds).await;
    // `calls` itself is one INFO, counted by the next.
    let read = calls(&servers[0], "info") - before - 1;
    println!("INFO server sent to the node by 50 concurrent rounds after its error: {read}");
    assert_eq!(read, 1, "the rounds read the node's start {read} times");
}

/// A node that lost its script cache (`SCRIPT FLUSH`, or a restart on the same connection's
/// address) answers a release's `EVALSHA` with `NOSCRIPT`: the release is sent again with the
/// script's text (`EVAL`) on that node, and the lock is gone from every node. A release goes
/// straight onto each node's connection (`src/redlock/direct.rs`), so this is its one path back
/// to the script's text.
#[tokio::test]
async fn a_release_on_nodes_that_forgot_the_script_sends_it_again_and_releases_everywhere() {
    let servers = RedisServer::start_many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = Redlock::connect_with(&urls, RedlockOptions::new().restart_rule(false))
        .await
        .unwrap();
    let opts = LockOptions::builder(Duration::from_secs(60))
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    let lock = redlock.acquire("wire:noscript", &opts).await.unwrap();
    for s in &servers {
        let mut c = redis::Client::open(s.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
        assert_eq!(calls(s, "eval"), 0);
    }
    let released = redlock.release_detailed(&lock).await.unwrap();
    assert!(
        released.released >= 2 && released.node_errors.is_empty(),
        "{released:?}"
    );
    // The node the release did not wait for finishes in the background.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for s in &servers {
        let held = || {
            let mut c = redis::Client::open(s.url())
                .unwrap()
                .get_connection()
                .unwrap();
            redis::cmd("EXISTS")
                .arg("wire:noscript")
                .query::<bool>(&mut c)
                .unwrap()
        };
        while held() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!held(), "the key is still held on {}", s.url());
        assert!(calls(s, "eval") >= 1, "no EVAL on {}", s.url());
    }
}
