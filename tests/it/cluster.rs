//! The lock client on a real 3-primary Redis Cluster on loopback.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use lockkit::Locker;
use lockkit::{key_slot, ExtendOutcome, LockClient, ReleaseOutcome, Topology};
use lockkit_test_support::{DelayRelay, RedisCluster};

/// Which node holds `key`: the one whose `GET` answers without a MOVED error.
fn owner(cluster: &RedisCluster, key: &str) -> usize {
    for (i, node) in cluster.nodes().iter().enumerate() {
        let mut c = redis::Client::open(node.url())
            .unwrap()
            .get_connection()
            .unwrap();
        if redis::cmd("GET")
            .arg(key)
            .query::<Option<String>>(&mut c)
            .is_ok()
        {
            return i;
        }
    }
    panic!("no node owns {key}");
}

#[tokio::test]
async fn cluster_is_detected_from_any_node_and_locks_work_across_slots() {
    let cluster = RedisCluster::start(3);
    // The URL of the *last* node: detection must not depend on which node is named.
    let client = LockClient::connect(&cluster.nodes()[2].url())
        .await
        .unwrap();
    assert_eq!(client.topology(), Topology::Cluster);

    let mut owners = HashSet::new();
    for i in 0..60 {
        let key = format!("lock:cl:{i}");
        let mut lock = client
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("free");
        assert!(client
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            client
                .extend(&mut lock, Duration::from_secs(10))
                .await
                .unwrap(),
            ExtendOutcome::Extended
        );
        owners.insert(owner(&cluster, &key));
        assert_eq!(
            client.release(&lock).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    assert_eq!(owners.len(), 3, "keys spread over all three primaries");
}

#[tokio::test]
async fn acquire_many_groups_keys_by_slot_instead_of_crossslot() {
    let cluster = RedisCluster::start(3);
    let client = LockClient::connect(&cluster.url()).await.unwrap();
    let keys: Vec<String> = (0..50).map(|i| format!("sku:{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let slots: HashSet<u16> = refs.iter().map(|k| key_slot(k.as_bytes())).collect();
    assert!(slots.len() > 10, "the keys span many slots");
    let got = client
        .acquire_many(&refs, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(got.iter().all(Option::is_some));
    // A second round finds every key busy, in the right positions.
    let again = client
        .acquire_many(&refs, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(again.iter().all(Option::is_none));
    let held: Vec<_> = got.into_iter().flatten().collect();
    assert_eq!(held.iter().map(|l| l.key()).collect::<Vec<_>>(), refs);
    let outcomes = client.release_many(&held).await.unwrap();
    assert!(outcomes.iter().all(|o| o.is_released()), "{outcomes:?}");
    let all = client
        .acquire_all(&refs, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(all.map(|v| v.len()), Some(50));
}

#[tokio::test]
async fn cluster_survives_script_flush_on_one_node_and_fences_with_hash_tags() {
    let cluster = RedisCluster::start(3);
    let client = LockClient::connect(&cluster.url()).await.unwrap();
    let mut locks = Vec::new();
    for i in 0..30 {
        locks.push(
            client
                .try_acquire(&format!("lock:f:{i}"), Duration::from_secs(5))
                .await
                .unwrap()
                .unwrap(),
        );
    }
    cluster.nodes()[1].inline("SCRIPT FLUSH").unwrap();
    for lock in &locks {
        assert_eq!(
            client.release(lock).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    assert!(client.stats().noscript_recoveries >= 1);
    // Fenced acquire needs both keys in one slot: a hash tag does it.
    let lock = client
        .try_acquire_fenced("{job:9}", "{job:9}:fence", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lock.fencing_token(), Some(1));
    // Without a shared tag, the client refuses before sending, naming the fix.
    let err = client
        .try_acquire_fenced("job:a", "job:b:fence", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, lockkit::Error::InvalidKey { .. }), "{err:?}");
    assert!(err.to_string().contains("hash tag"), "{err}");
    // Fair mode keeps its queue in the lock key's slot, with or without a hash tag of its own.
    let fair = lockkit::LockOptions::builder(Duration::from_secs(5))
        .fair(true)
        .build()
        .unwrap();
    for key in ["job:fair", "{job:9}:fair"] {
        let lock = client.acquire(key, &fair).await.unwrap();
        assert_eq!(
            client.release(&lock).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    // Braces that make no tag can not keep the queue in the key's slot: refused, naming the fix.
    let err = client.acquire("job}fair", &fair).await.unwrap_err();
    assert!(matches!(err, lockkit::Error::InvalidKey { .. }), "{err:?}");
    assert!(err.to_string().contains("hash tag"), "{err}");
}

fn sync_conn(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// `calls=N` of one command in a node's INFO commandstats (0 if never called).
fn command_calls(url: &str, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut sync_conn(url))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .map(|v| v.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}

/// Puts a relay in front of every node: each node announces its relay's port, so the cluster
/// client's slot map (and every connection it opens) goes through the relays. Waits until every
/// node's view of the cluster shows the relays.
fn behind_relays(cluster: &RedisCluster) -> Vec<DelayRelay> {
    let relays: Vec<DelayRelay> = cluster
        .nodes()
        .iter()
        .map(|n| DelayRelay::start(n.port(), Duration::ZERO, Duration::ZERO).unwrap())
        .collect();
    for (node, relay) in cluster.nodes().iter().zip(&relays) {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-announce-port")
            .arg(relay.port())
            .exec(&mut sync_conn(&node.url()))
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let announced = |node: &lockkit_test_support::RedisServer| {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut sync_conn(&node.url()))
            .unwrap();
        relays
            .iter()
            .all(|r| nodes.contains(&format!("127.0.0.1:{}@", r.port())))
    };
    while !cluster.nodes().iter().all(announced) {
        assert!(
            Instant::now() < deadline,
            "the nodes never announced the relays' ports"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    relays
}

/// Issue 10, defect 7: the cluster client re-sends a command after a dropped connection. When
/// the first `SET NX` had landed, the re-sent one must not report our own lock as busy (it did:
/// `Ok(None)`, and the key stayed held by our token for the whole TTL).
#[tokio::test]
async fn acquire_whose_set_landed_before_the_connection_dropped_is_ours() {
    let cluster = RedisCluster::start(3);
    let relays = behind_relays(&cluster);
    let client = LockClient::connect(&relays[0].url()).await.unwrap();
    assert_eq!(client.topology(), Topology::Cluster);
    let key = "lock:resent";
    let node = &cluster.nodes()[owner(&cluster, key)];
    let relay = &relays[owner(&cluster, key)];
    let sets_before = command_calls(&node.url(), "set");
    // The connection drops right after the SET reached the owner node: its reply is lost.
    relay.drop_after(format!("\r\nSET\r\n${}\r\n{key}\r\n", key.len()).as_bytes());
    let lock = client
        .try_acquire(key, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("our own landed SET is our lock, not a busy one");
    // The scenario really happened: the SET reached the node twice (sent, dropped, re-sent).
    assert_eq!(command_calls(&node.url(), "set") - sets_before, 2);
    let holder: Option<String> = redis::cmd("GET")
        .arg(key)
        .query(&mut sync_conn(&node.url()))
        .unwrap();
    assert_eq!(holder.as_deref(), Some(lock.token()));
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
}

/// Issue 10, defect 8 in a cluster: a batch is one pipeline per slot, sent to every node at once.
/// When one node cannot be reached (killed: its connection is refused), the pipelines to the
/// other nodes have taken their keys; the batch returns the error and must give those keys back,
/// not leave them held for their TTL.
#[tokio::test]
async fn a_batch_whose_node_is_down_leaves_nothing_held_on_the_other_nodes() {
    let cluster = RedisCluster::start(3);
    let client = LockClient::connect(&cluster.url()).await.unwrap();
    let keys: Vec<String> = (0..30).map(|i| format!("lock:batch:{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let owners: Vec<usize> = refs.iter().map(|k| owner(&cluster, k)).collect();
    assert_eq!(owners.iter().collect::<HashSet<_>>().len(), 3);
    // Every node answers a first batch (the client has a connection to each).
    let held: Vec<_> = client
        .acquire_many(&refs, Duration::from_secs(30))
        .await
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(held.len(), refs.len());
    client.release_many(&held).await.unwrap();

    // The live nodes keep serving their own slots while one node is down.
    for node in cluster.nodes() {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .exec(&mut sync_conn(&node.url()))
            .unwrap();
    }
    let down = owners[0];
    let pid = cluster.nodes()[down].pid().unwrap();
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let r = client.acquire_many(&refs, Duration::from_secs(30)).await;
    assert!(r.is_err(), "a batch with a node down succeeded: {r:?}");
    // The keys on the two live nodes are free again: released before the error was returned, or
    // by the background clean-up within a few seconds (far inside the 30 s TTL).
    let live: Vec<(usize, &str)> = owners
        .iter()
        .zip(&refs)
        .filter(|(o, _)| **o != down)
        .map(|(o, k)| (*o, *k))
        .collect();
    let held_now = || {
        live.iter()
            .filter(|(o, k)| {
                redis::cmd("EXISTS")
                    .arg(*k)
                    .query::<bool>(&mut sync_conn(&cluster.nodes()[*o].url()))
                    .unwrap()
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while held_now() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        held_now(),
        0,
        "the failed batch left keys held on the live nodes ({r:?})"
    );
}

/// The cluster client re-sends a command after a dropped connection, without telling lockkit.
/// When the first compare-and-delete had run, the re-sent one finds the key gone: the release is
/// ours, not a lost lock (it answered `NotHeld`). Plain and fair locks, alone and in a batch.
#[tokio::test]
async fn release_whose_script_ran_before_the_connection_dropped_is_released() {
    let cluster = RedisCluster::start(3);
    let relays = behind_relays(&cluster);
    let client = LockClient::connect(&relays[0].url()).await.unwrap();
    assert_eq!(client.topology(), Topology::Cluster);
    let fair = lockkit::LockOptions::builder(Duration::from_secs(30))
        .fair(true)
        .build()
        .unwrap();
    let plain = lockkit::LockOptions::new(Duration::from_secs(30)).unwrap();
    let cases = [
        ("lock:rel-resent", plain, false),
        ("lock:rel-resent-fair", fair, false),
        ("lock:rel-resent-batch", plain, true),
        ("lock:rel-resent-fair-batch", fair, true),
    ];
    for (key, opts, batch) in cases {
        let node = &cluster.nodes()[owner(&cluster, key)];
        let relay = &relays[owner(&cluster, key)];
        let lock = client.acquire(key, &opts).await.unwrap();
        let scripts_before = command_calls(&node.url(), "evalsha");
        // The connection drops right after the release reached the owner node: its reply is lost.
        relay.drop_after(lock.token().as_bytes());
        let outcome = if batch {
            let outcomes = client.release_many(std::slice::from_ref(&lock)).await;
            outcomes.unwrap()[0]
        } else {
            client.release(&lock).await.unwrap()
        };
        // The scenario really happened: the release reached the node twice (sent, dropped,
        // re-sent by the cluster client), and the first one deleted the key.
        assert_eq!(
            command_calls(&node.url(), "evalsha") - scripts_before,
            2,
            "{key}"
        );
        let exists: bool = redis::cmd("EXISTS")
            .arg(key)
            .query(&mut sync_conn(&node.url()))
            .unwrap();
        assert!(!exists, "{key}");
        assert_eq!(outcome, ReleaseOutcome::Released, "{key}");
    }
}

/// As `acquire_whose_set_landed_before_the_connection_dropped_is_ours`, for a fenced acquire:
/// the cluster client re-sends `acquire_fenced.lua` after the first one took the lock and drew
/// its fencing token. The re-sent one must hand back our lock with that token, not answer busy
/// against our own lock (it did: `Ok(None)`, and the key stayed held by our token for its TTL).
#[tokio::test]
async fn fenced_acquire_whose_script_ran_before_the_connection_dropped_is_ours() {
    let cluster = RedisCluster::start(3);
    let relays = behind_relays(&cluster);
    let client = LockClient::connect(&relays[0].url()).await.unwrap();
    let (key, fence) = ("{job:resent}", "{job:resent}:fence");
    let node = &cluster.nodes()[owner(&cluster, key)];
    let relay = &relays[owner(&cluster, key)];
    let scripts_before = command_calls(&node.url(), "evalsha");
    // The connection drops right after the fenced acquire reached the owner node.
    relay.drop_after(fence.as_bytes());
    let lock = client
        .try_acquire_fenced(key, fence, Duration::from_secs(30))
        .await
        .unwrap();
    // The scenario really happened: the script reached the node twice (sent, dropped, re-sent).
    assert_eq!(command_calls(&node.url(), "evalsha") - scripts_before, 2);
    let holder: Option<String> = redis::cmd("GET")
        .arg(key)
        .query(&mut sync_conn(&node.url()))
        .unwrap();
    let lock = lock.expect("our own landed acquire is our lock, not a busy one");
    assert_eq!(holder.as_deref(), Some(lock.token()));
    assert_eq!(
        lock.fencing_token(),
        Some(1),
        "the token the first delivery drew"
    );
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
}

/// Issue 35: a cluster client made on one runtime outlives it (a `static` client first used by
/// one `#[tokio::test]`, a runtime per request in a sync wrapper). The redis-rs cluster
/// connection's task dies with that runtime, and every later call failed at once, forever
/// ("Unable to send command"); now the connection is made again on the caller's runtime, as a
/// one-server connection is.
#[test]
fn cluster_calls_outlive_the_runtime_that_made_the_connection() {
    let cluster = RedisCluster::start(3);
    let first = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client = first
        .block_on(LockClient::connect(&cluster.nodes()[0].url()))
        .unwrap();
    assert_eq!(client.topology(), Topology::Cluster);
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        let lock = tokio::time::timeout(
            Duration::from_secs(10),
            client.try_acquire("lock:cl:runtime", Duration::from_secs(5)),
        )
        .await
        .expect("a call still waited 10 s")
        .unwrap()
        .expect("the key is free");
        assert_eq!(
            client.release(&lock).await.unwrap(),
            ReleaseOutcome::Released
        );
    });
}
